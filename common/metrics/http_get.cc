#include "common/metrics/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rlmesh::metrics {
namespace {

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

absl::StatusOr<HttpResult> ParseResponse(const std::string& raw, const std::string& url) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    return absl::DataLossError(absl::StrCat(url, ": response has no complete header block"));
  }
  HttpResult result;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, head_end), "\r\n");
  result.status_line = lines[0];
  std::vector<std::string> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status.size() < 2 || !status[0].starts_with("HTTP/1.") ||
      !absl::SimpleAtoi(status[1], &result.status_code)) {
    return absl::DataLossError(
        absl::StrCat(url, ": expected an HTTP/1.x status line, got \"", lines[0], "\""));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    result.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  result.body = raw.substr(head_end + 4);
  if (auto it = result.headers.find("content-length"); it != result.headers.end()) {
    size_t length = 0;
    if (!absl::SimpleAtoi(it->second, &length) || length != result.body.size()) {
      return absl::DataLossError(absl::StrCat(url, ": Content-Length ", it->second, " but got ",
                                              result.body.size(), " body bytes"));
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<HttpResult> HttpGet(const std::string& host, int port, const std::string& path,
                                   double timeout_seconds) {
  const std::string url = absl::StrCat("http://", host, ":", port, path);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(url, ": host must be an IPv4 address, got \"", host, "\""));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  FdCloser closer(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat(url, ": connect: ", std::strerror(errno)));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host, ":", port,
                                           "\r\nConnection: close\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::UnavailableError(absl::StrCat(url, ": send: ", std::strerror(errno)));
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  std::string raw;
  char buf[8192];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(url, ": no complete response within ", timeout_seconds, " s"));
    }
    pollfd pfd{fd, POLLIN, 0};
    const int n = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // the deadline check above ends the loop
    const ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::UnavailableError(absl::StrCat(url, ": recv: ", std::strerror(errno)));
    if (got == 0) break;
    raw.append(buf, static_cast<size_t>(got));
  }
  return ParseResponse(raw, url);
}

}  // namespace rlmesh::metrics
