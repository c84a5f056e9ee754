// What a fuzz target of tests/fuzz shares with the programs that run it (fuzz_driver.cc, or
// libFuzzer through scripts/fuzz.sh). A target defines LLVMFuzzerTestOneInput: it hands one
// input to one parser, treats every error status as a correct answer, and checks the parser's
// documented promises about what it accepted. Only a crash, an abort (Fail below, an uncaught
// exception) or a sanitizer report is a finding. Single-threaded, as both runners call it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace rlmesh::fuzz {

// Inputs the parser accepted; the driver prints it to show how deep the mutants reach.
inline std::atomic<uint64_t>& AcceptedInputs() {
  static std::atomic<uint64_t> count{0};
  return count;
}

// Aborts naming a broken promise of the parser (the driver then reports the saved input).
[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "fuzz target: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// A folder of this process under $TMPDIR (or /tmp), made on first use and removed at exit,
// for parsers that read only from files.
inline const std::filesystem::path& ScratchDir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
             ("rlmesh_fuzz_" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Replaces the contents of `path` with `bytes`; aborts when the file cannot be written (a
// broken harness, not a finding about the parser). Rewritten in place and cut to size rather
// than truncated first: ext4 flushes a file truncated to 0 and rewritten at close
// (auto_da_alloc), which made each execution wait on the disk.
inline void WriteScratchFile(const std::filesystem::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) Fail("cannot open the scratch file");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n <= 0) Fail("cannot write the scratch file");
    done += static_cast<size_t>(n);
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes.size())) != 0 || ::close(fd) != 0) {
    Fail("cannot write the scratch file");
  }
}

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace rlmesh::fuzz
