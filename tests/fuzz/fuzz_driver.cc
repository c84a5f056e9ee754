// The main of each fuzz program of tests/fuzz when built by GCC, without libFuzzer: runs the
// target's LLVMFuzzerTestOneInput on every seed file, then on N mutants (fuzz_mutator.h) drawn
// from a PRNG with a fixed seed, all in this process, and prints one summary line.
//
//   fuzz_<name> --corpus DIR [--corpus DIR ...] --iterations N --seed S [--max-len BYTES]
//               [--crash-file PATH] [--memory-limit-mb MB] [--timeout-s S]
//   fuzz_<name> FILE ...     runs each saved input once (to reproduce a failure)
//
// Before each execution the input is written to the crash file (--crash-file, else
// $RLMESH_FUZZ_CRASH_FILE, else $TMPDIR/<name>.<pid>.input), so a crash leaves it behind; a
// fatal signal, an uncaught exception, a sanitizer report or an execution longer than
// --timeout-s (default 10) prints the file's path and the process dies. --memory-limit-mb
// (default 4096, 0 for none; ignored under AddressSanitizer, which reserves terabytes of
// address space) caps the address space, so an input that makes a parser allocate by an
// untrusted size fails fast as std::bad_alloc instead of waking the OOM killer. Exits 0, and
// removes the crash file, only when every execution returned.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_mutator.h"
#include "tests/fuzz/fuzz_target.h"

#if defined(__SANITIZE_ADDRESS__)
#define RLMESH_FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RLMESH_FUZZ_ASAN 1
#endif
#endif

// Part of the sanitizers' public interface (sanitizer/common_interface_defs.h); weak, so the
// driver links without a sanitizer runtime.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace rlmesh::fuzz {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::vector<std::string> corpus_dirs;
  std::vector<std::string> replay_files;
  uint64_t iterations = 0;
  uint64_t seed = 1;
  size_t max_len = 1 << 20;
  std::string crash_file;
  uint64_t memory_limit_mb = 4096;
  unsigned timeout_s = 10;
};

// What the fatal-signal handler prints; filled before the first execution, so that the
// handler only reads it (it may not allocate).
struct CrashReport {
  char name[256] = "fuzz";
  char path[4096] = "";
  volatile uint64_t execution = 0;
  int fd = -1;
} g_report;

void WriteErr(const char* text) {
  for (size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void WriteErrNumber(uint64_t value) {
  char digits[24];
  char* p = digits + sizeof(digits) - 1;
  *p = '\0';
  do {
    *--p = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  WriteErr(p);
}

// Async-signal-safe: write(2) only.
void ReportFailure(const char* what) {
  WriteErr("\n");
  WriteErr(g_report.name);
  WriteErr(": FAILED: ");
  WriteErr(what);
  WriteErr(" in execution ");
  WriteErrNumber(g_report.execution);
  WriteErr("; the input is saved in ");
  WriteErr(g_report.path);
  WriteErr(" (rerun: ");
  WriteErr(g_report.name);
  WriteErr(" ");
  WriteErr(g_report.path);
  WriteErr(")\n");
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGALRM:
      return "timeout (SIGALRM)";
    default:
      return "a fatal signal";
  }
}

void OnFatalSignal(int sig) {
  ReportFailure(SignalName(sig));
  // SA_RESETHAND restored the default action and SA_NODEFER leaves the signal unblocked, so
  // this ends the process with the signal (and its core dump, where enabled).
  ::raise(sig);
}

void OnSanitizerDeath() { ReportFailure("a sanitizer report"); }

void OnTerminate() {
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "%s: uncaught exception: %s\n", g_report.name, ex.what());
    } catch (...) {
      std::fprintf(stderr, "%s: uncaught exception of a type not derived from std::exception\n",
                   g_report.name);
    }
  }
  std::fflush(stderr);
  std::abort();  // SIGABRT: reported by OnFatalSignal
}

void InstallHandlers() {
  // A stack of its own for the handler: a stack overflow is one of the crashes looked for.
  static std::vector<char> alt_stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = OnFatalSignal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGALRM}) {
    ::sigaction(sig, &sa, nullptr);
  }
  std::set_terminate(OnTerminate);
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(OnSanitizerDeath);
}

[[noreturn]] void Usage(const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s --corpus DIR [--corpus DIR ...] --iterations N --seed S "
               "[--max-len BYTES] [--crash-file PATH] [--memory-limit-mb MB] [--timeout-s S]\n"
               "       %s FILE ...   (runs each saved input once)\n",
               g_report.name, problem.c_str(), g_report.name, g_report.name);
  std::exit(2);
}

uint64_t ParseNumber(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    Usage(flag + ": expected a non-negative integer, got \"" + text + "\"");
  }
  return value;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      o.replay_files.push_back(arg);
      continue;
    }
    if (i + 1 >= argc) Usage(arg + ": expected a value");
    const char* value = argv[++i];
    if (arg == "--corpus") {
      o.corpus_dirs.push_back(value);
    } else if (arg == "--iterations") {
      o.iterations = ParseNumber(arg, value);
    } else if (arg == "--seed") {
      o.seed = ParseNumber(arg, value);
    } else if (arg == "--max-len") {
      o.max_len = std::max<uint64_t>(1, ParseNumber(arg, value));
    } else if (arg == "--crash-file") {
      o.crash_file = value;
    } else if (arg == "--memory-limit-mb") {
      o.memory_limit_mb = ParseNumber(arg, value);
    } else if (arg == "--timeout-s") {
      o.timeout_s = static_cast<unsigned>(std::min<uint64_t>(ParseNumber(arg, value), 86400));
    } else {
      Usage("unknown flag " + arg);
    }
  }
  if (o.corpus_dirs.empty() && o.replay_files.empty()) Usage("expected --corpus DIR or FILE");
  return o;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Usage("cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The seed files of the folders, each folder's in name order.
std::vector<std::string> ReadCorpus(const std::vector<std::string>& dirs) {
  std::vector<std::string> seeds;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) Usage("--corpus " + dir + ": not a folder");
    std::vector<fs::path> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) seeds.push_back(ReadFile(file));
  }
  return seeds;
}

void OpenCrashFile(const Options& o) {
  std::string path = o.crash_file;
  if (path.empty()) {
    if (const char* env = std::getenv("RLMESH_FUZZ_CRASH_FILE"); env != nullptr && *env != '\0') {
      path = env;
    } else {
      const char* tmp = std::getenv("TMPDIR");
      path = (fs::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
              (std::string(g_report.name) + "." + std::to_string(::getpid()) + ".input"))
                 .string();
    }
  }
  if (path.size() >= sizeof(g_report.path)) Usage("crash file path too long: " + path);
  std::snprintf(g_report.path, sizeof(g_report.path), "%s", path.c_str());
  g_report.fd = ::open(g_report.path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (g_report.fd < 0) {
    Usage(std::string("cannot create the crash file ") + path + ": " + std::strerror(errno));
  }
}

// The page cache keeps what is written here even when the process dies the next instant.
void SaveInput(const std::string& input) {
  size_t done = 0;
  while (done < input.size()) {
    const ssize_t n =
        ::pwrite(g_report.fd, input.data() + done, input.size() - done, static_cast<off_t>(done));
    if (n <= 0) Fail("cannot write the crash file");
    done += static_cast<size_t>(n);
  }
  if (::ftruncate(g_report.fd, static_cast<off_t>(input.size())) != 0) {
    Fail("cannot truncate the crash file");
  }
}

void Execute(const std::string& input, unsigned timeout_s) {
  SaveInput(input);
  ::alarm(timeout_s);
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  ::alarm(0);
  g_report.execution = g_report.execution + 1;
}

void LimitMemory(uint64_t megabytes) {
#ifndef RLMESH_FUZZ_ASAN
  if (megabytes == 0) return;
  const rlimit limit{megabytes << 20, megabytes << 20};
  if (::setrlimit(RLIMIT_AS, &limit) != 0) {
    std::fprintf(stderr, "%s: cannot limit the address space: %s\n", g_report.name,
                 std::strerror(errno));
  }
#else
  (void)megabytes;
#endif
}

int Main(int argc, char** argv) {
  std::snprintf(g_report.name, sizeof(g_report.name), "%s",
                fs::path(argv[0]).filename().string().c_str());
  const Options o = ParseArgs(argc, argv);
  std::vector<std::string> replay;
  for (const std::string& file : o.replay_files) replay.push_back(ReadFile(file));
  const std::vector<std::string> seeds = ReadCorpus(o.corpus_dirs);
  OpenCrashFile(o);
  InstallHandlers();
  LimitMemory(o.memory_limit_mb);

  const auto start = std::chrono::steady_clock::now();
  for (const std::string& input : replay) Execute(input, o.timeout_s);
  for (const std::string& input : seeds) Execute(input, o.timeout_s);
  Rng rng(o.seed);
  std::string previous;
  for (uint64_t i = 0; i < o.iterations; ++i) {
    // Mostly a fresh seed; sometimes the previous mutant, so that mutations accumulate.
    const bool chain = !previous.empty() && rng.OneIn(4);
    const std::string& base = chain || seeds.empty() ? previous : seeds[rng.Below(seeds.size())];
    previous = Mutate(base, seeds, o.max_len, rng);
    Execute(previous, o.timeout_s);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  ::close(g_report.fd);
  ::unlink(g_report.path);
  const std::string files =
      replay.empty() ? "" : ", " + std::to_string(replay.size()) + " saved inputs";
  std::printf(
      "%s: %llu executions (%zu seeds, %llu mutants of seed %llu%s), 0 crashes, %.1f s, "
      "%llu inputs accepted\n",
      g_report.name, static_cast<unsigned long long>(g_report.execution), seeds.size(),
      static_cast<unsigned long long>(o.iterations), static_cast<unsigned long long>(o.seed),
      files.c_str(), seconds, static_cast<unsigned long long>(AcceptedInputs().load()));
  return 0;
}

}  // namespace
}  // namespace rlmesh::fuzz

int main(int argc, char** argv) { return rlmesh::fuzz::Main(argc, argv); }
