// A few helpers for the GPU programs of tests/gpu, which build without GoogleTest, Abseil,
// gRPC or LibTorch (see run.sh): checks that print what was expected and found, child
// processes forked before any CUDA call (a CUDA context does not survive fork), and the
// deterministic tensor bytes both sides can compute.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace rlmesh::gpu_tests {

// Failures so far in this process; a test program exits 1 when it is not 0.
inline int& Failures() {
  static int failures = 0;
  return failures;
}

#define GPU_CHECK(cond, what)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: FAILED %s: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                  \
      ++::rlmesh::gpu_tests::Failures();                                        \
    }                                                                           \
  } while (false)

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Bytes of tensor `index` of `version`: every bit pattern of float32/bfloat16 appears.
inline std::vector<char> Pattern(uint64_t version, size_t index, size_t bytes) {
  std::vector<char> out(bytes);
  const uint64_t base = Mix(version * 1000003 + index);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t w = Mix(base + i);
    std::memcpy(out.data() + i, &w, bytes - i < 8 ? bytes - i : 8);
  }
  return out;
}

// A forked child that waits for one line (the sender's endpoint) on a pipe, then runs `body`
// and exits with its return value.
class Child {
 public:
  explicit Child(std::function<int(const std::string& line)> body) {
    int p[2];
    if (::pipe(p) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[1]);
      std::string line;
      char c;
      while (::read(p[0], &c, 1) == 1 && c != '\n') line += c;
      std::fflush(stdout);
      _exit(body(line));
    }
    ::close(p[0]);
    fd_ = p[1];
  }
  ~Child() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
    if (fd_ >= 0) ::close(fd_);
  }
  void Send(const std::string& line) {
    const std::string text = line + "\n";
    if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
  }
  void Kill() { ::kill(pid_, SIGKILL); }
  // Exit code, or 128 + signal.
  int Wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
};

}  // namespace rlmesh::gpu_tests
