#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "prometheus/text_serializer.h"

namespace rlmesh::metrics {
namespace {

constexpr size_t kMaxRequestHeadBytes = 16 * 1024;
constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string HttpResponse(int code, const char* reason, const std::string& content_type,
                         const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

// Writes all of `data`, retrying short writes; false when the peer went away.
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// An IPv4 address for `host`: a dotted quad, a name (e.g. "localhost"), or an IPv6 wildcard,
// which is served on the IPv4 wildcard.
absl::Status ResolveIpv4(const std::string& host, in_addr* out) {
  const std::string h = host == "::" || host == "[::]" ? "0.0.0.0" : host;
  if (::inet_pton(AF_INET, h.c_str(), out) == 1) return absl::OkStatus();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(h.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics host: expected an IPv4 address or a resolvable name, got \"", host, "\""));
  }
  *out = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  ::freeaddrinfo(found);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Create(
    const MetricsServerOptions& options, std::shared_ptr<prometheus::Registry> registry) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("MetricsServer: registry is null");
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port: expected 0..65535, got ", options.port));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  if (absl::Status s = ResolveIpv4(options.host, &addr.sin_addr); !s.ok()) return s;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("metrics server: socket(): ", std::strerror(errno)));
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("metrics server: cannot listen on ", options.host,
                                               ":", options.port, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("metrics server: pipe(): ", std::strerror(err)));
  }
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(options, std::move(registry), fd, ntohs(addr.sin_port), wake[0], wake[1]));
}

MetricsServer::MetricsServer(const MetricsServerOptions& options,
                             std::shared_ptr<prometheus::Registry> registry, int listen_fd,
                             int port, int wake_read_fd, int wake_write_fd)
    : options_(options),
      registry_(std::move(registry)),
      listen_fd_(listen_fd),
      port_(port),
      wake_read_fd_(wake_read_fd),
      wake_write_fd_(wake_write_fd) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsServer::~MetricsServer() {
  Stop();
  ::close(wake_read_fd_);
  ::close(wake_write_fd_);
}

void MetricsServer::Stop() {
  if (stopped_.exchange(true)) return;
  const char byte = 1;
  while (::write(wake_write_fd_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  // Closing the listening socket makes new connections fail at once instead of waiting.
  ::close(listen_fd_);
}

void MetricsServer::Serve() {
  while (!stopped_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "metrics server: poll(): %s; stopping\n", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    HandleConnection(client);
    ::close(client);
  }
}

void MetricsServer::HandleConnection(int fd) {
  std::string head;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(options_.read_timeout_seconds);
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || head.size() > kMaxRequestHeadBytes) return;
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_read_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || fds[1].revents != 0) return;
    const ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    head.append(buf, static_cast<size_t>(got));
  }
  WriteAll(fd, Respond(head));
}

std::string MetricsServer::Respond(const std::string& request_head) const {
  // Request line: METHOD SP TARGET SP VERSION.
  const std::string line = request_head.substr(0, request_head.find("\r\n"));
  const std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !parts[2].starts_with("HTTP/1.")) {
    return HttpResponse(400, "Bad Request", "text/plain", "malformed request line\n");
  }
  const std::string& method = parts[0];
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path == "/readyz" && (method == "GET" || method == "HEAD")) {
    std::string response = ready_.load()
                               ? HttpResponse(200, "OK", "text/plain", "ready\n")
                               : HttpResponse(503, "Service Unavailable", "text/plain", "not ready\n");
    if (method == "HEAD") response.resize(response.find("\r\n\r\n") + 4);
    return response;
  }
  if (path != "/metrics") {
    return HttpResponse(404, "Not Found", "text/plain", "not found; metrics are at /metrics\n");
  }
  if (method != "GET" && method != "HEAD") {
    return HttpResponse(405, "Method Not Allowed", "text/plain", "use GET\n");
  }
  std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
  std::string response = HttpResponse(200, "OK", kTextContentType, body);
  if (method == "HEAD") response.resize(response.size() - body.size());
  return response;
}

}  // namespace rlmesh::metrics
