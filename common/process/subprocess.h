// A child process with its stdout and stderr captured line by line: kept in a ring buffer
// of recent lines, appended to a log file, and optionally echoed to this process's stdout.
// Used by `rlmesh run` to start and watch the services, and by end-to-end tests.
// Thread-safe; the reader thread is owned by the object and joined on destruction, which
// also kills the child (SIGKILL) if it still runs.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rlmesh::process {

struct SubprocessOptions {
  std::vector<std::string> argv;        // argv[0] is the program path
  std::vector<std::string> extra_env;   // "KEY=VALUE" added to the inherited environment
  std::string log_path;                 // "" = no log file
  std::string echo_prefix;              // echo lines to stdout with this prefix...
  bool echo = false;                    // ...when set
  size_t keep_lines = 200;              // lines kept for LastLines()
};

class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const SubprocessOptions& options);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // Waits until an output line satisfies `match` and returns it. Fails with Unavailable if
  // the process ends first, DeadlineExceeded after `timeout`.
  absl::StatusOr<std::string> WaitForLine(const std::function<bool(const std::string&)>& match,
                                          absl::Duration timeout);

  // Non-blocking: the wait status once the child has ended (and its output is drained).
  std::optional<int> ExitStatus();
  // Blocks until the child ends or `timeout` passes; returns the wait status if it ended.
  std::optional<int> Wait(absl::Duration timeout);
  // Sends `signal`; then, if the child has not ended after `grace`, SIGKILL. Returns the
  // wait status.
  int Stop(int signal, absl::Duration grace);
  void Signal(int signal);

  std::vector<std::string> LastLines(size_t n) const;

  // "exited with code 3", "killed by signal 9 (Killed)".
  static std::string DescribeWaitStatus(int status);

 private:
  Subprocess(const SubprocessOptions& options, pid_t pid, int out_fd);
  void ReadLoop();
  void Reap(bool block);

  const SubprocessOptions options_;
  const std::string name_;
  const pid_t pid_;
  const int out_fd_;
  int log_fd_ = -1;
  std::thread reader_;

  mutable absl::Mutex mu_;
  std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);
  uint64_t line_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool output_closed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int> wait_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rlmesh::process
