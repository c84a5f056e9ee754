#include "common/process/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace rlmesh::process {

namespace {

std::string BaseName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const SubprocessOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("subprocess: empty argv");
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot open log file ", options.log_path, ": ", std::strerror(errno)));
    }
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    if (log_fd >= 0) ::close(log_fd);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // Build argv/envp before fork: only async-signal-safe calls may follow it in the child.
  std::vector<char*> argv;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const auto& e : options.extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    if (log_fd >= 0) ::close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Own process group: a Ctrl-C reaches only the launcher, which stops children in order.
    // If the launcher dies, the children die with it rather than hold ports.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "subprocess: exec failed\n";
    WriteAll(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  auto process = std::unique_ptr<Subprocess>(new Subprocess(options, pid, pipe_fds[0]));
  process->log_fd_ = log_fd;
  process->reader_ = std::thread([p = process.get()] { p->ReadLoop(); });
  return process;
}

Subprocess::Subprocess(const SubprocessOptions& options, pid_t pid, int out_fd)
    : options_(options), name_(BaseName(options.argv[0])), pid_(pid), out_fd_(out_fd) {}

Subprocess::~Subprocess() {
  if (!ExitStatus().has_value()) Stop(SIGKILL, absl::Seconds(5));
  if (reader_.joinable()) reader_.join();
  ::close(out_fd_);
  if (log_fd_ >= 0) ::close(log_fd_);
}

void Subprocess::ReadLoop() {
  std::string pending;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(out_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (log_fd_ >= 0) WriteAll(log_fd_, buffer, static_cast<size_t>(n));
    pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string line = pending.substr(start, nl - start);
      if (options_.echo) {
        std::string out = absl::StrCat(options_.echo_prefix, line, "\n");
        WriteAll(STDOUT_FILENO, out.data(), out.size());
      }
      absl::MutexLock lock(&mu_);
      lines_.push_back(std::move(line));
      ++line_count_;
      while (lines_.size() > options_.keep_lines) lines_.pop_front();
    }
    pending.erase(0, start);
  }
  absl::MutexLock lock(&mu_);
  if (!pending.empty()) {
    lines_.push_back(pending);
    ++line_count_;
  }
  output_closed_ = true;
}

absl::StatusOr<std::string> Subprocess::WaitForLine(
    const std::function<bool(const std::string&)>& match, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  size_t scanned_from = line_count_ - lines_.size();  // absolute index of lines_.front()
  while (true) {
    const uint64_t first = line_count_ - lines_.size();
    for (uint64_t i = std::max<uint64_t>(scanned_from, first); i < line_count_; ++i) {
      const std::string& line = lines_[i - first];
      if (match(line)) return line;
    }
    scanned_from = line_count_;
    if (output_closed_) {
      return absl::UnavailableError(
          absl::StrCat(name_, " ended before printing the expected line"));
    }
    const uint64_t seen = line_count_;
    auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return line_count_ != seen || output_closed_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&changed), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, " did not print the expected line within ",
                       absl::FormatDuration(timeout)));
    }
  }
}

void Subprocess::Reap(bool block) {
  {
    absl::MutexLock lock(&mu_);
    if (wait_status_.has_value()) return;
  }
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    absl::MutexLock lock(&mu_);
    wait_status_ = status;
  }
}

std::optional<int> Subprocess::ExitStatus() {
  Reap(/*block=*/false);
  absl::MutexLock lock(&mu_);
  return wait_status_;
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (auto status = ExitStatus()) {
      if (reader_.joinable() && std::this_thread::get_id() != reader_.get_id()) {
        // Output is drained once the pipe closes, right after the child ends.
        absl::MutexLock lock(&mu_);
        auto closed = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return output_closed_; };
        mu_.AwaitWithTimeout(absl::Condition(&closed), absl::Seconds(2));
      }
      return status;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void Subprocess::Signal(int signal) {
  if (!ExitStatus().has_value()) ::kill(pid_, signal);
}

int Subprocess::Stop(int signal, absl::Duration grace) {
  Signal(signal);
  if (auto status = Wait(grace)) return *status;
  ::kill(pid_, SIGKILL);
  Reap(/*block=*/true);
  absl::MutexLock lock(&mu_);
  return wait_status_.value_or(0);
}

std::vector<std::string> Subprocess::LastLines(size_t n) const {
  absl::MutexLock lock(&mu_);
  size_t start = lines_.size() > n ? lines_.size() - n : 0;
  return {lines_.begin() + static_cast<std::ptrdiff_t>(start), lines_.end()};
}

std::string Subprocess::DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace rlmesh::process
