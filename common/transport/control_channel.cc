#include "common/transport/control_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rlmesh::transport {

namespace {

int MillisUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Frames larger than this are a protocol error (a manifest of millions of tensors is ~100 MB).
constexpr uint64_t kMaxPayload = uint64_t{1} << 31;

}  // namespace

std::string ReachableEndpoint(const std::string& endpoint, const std::string& peer) {
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos) return endpoint;
  const std::string host = endpoint.substr(0, colon);
  if (host != "" && host != "0.0.0.0" && host != "[::]" && host != "::" && host != "[::0]")
    return endpoint;
  std::string address;
  if (peer.rfind("ipv4:", 0) == 0 || peer.rfind("ipv6:", 0) == 0) address = peer.substr(5);
  const auto peer_colon = address.rfind(':');
  if (peer_colon == std::string::npos || peer_colon == 0) return endpoint;
  std::string peer_host = address.substr(0, peer_colon);
  // gRPC escapes the brackets of an IPv6 peer ("%5B", "%5D").
  for (const char* escaped : {"%5B", "%5b"})
    if (peer_host.rfind(escaped, 0) == 0) peer_host = "[" + peer_host.substr(3);
  for (const char* escaped : {"%5D", "%5d"}) {
    if (peer_host.size() >= 3 && peer_host.compare(peer_host.size() - 3, 3, escaped) == 0)
      peer_host = peer_host.substr(0, peer_host.size() - 3) + "]";
  }
  return peer_host + endpoint.substr(colon);
}

void AppendU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool ReadU64(const std::string& in, size_t pos, uint64_t* v) {
  if (pos + 8 > in.size()) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i)
    *v |= static_cast<uint64_t>(static_cast<uint8_t>(in[pos + i])) << (8 * i);
  return true;
}

std::string EncodeAck(uint64_t version, const Status& status) {
  std::string out;
  AppendU64(&out, version);
  AppendU64(&out, static_cast<uint64_t>(status.code()));
  out += status.message();
  return out;
}

StatusOr<std::pair<uint64_t, Status>> DecodeAck(const std::string& payload) {
  uint64_t version = 0, code = 0;
  if (!ReadU64(payload, 0, &version) || !ReadU64(payload, 8, &code)) {
    return InvalidArgumentError("ack: expected at least 16 bytes, got " +
                                std::to_string(payload.size()));
  }
  return std::make_pair(version, Status(static_cast<Code>(code), payload.substr(16)));
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::unique_ptr<Connection>> Connection::Dial(const std::string& endpoint,
                                                       Duration timeout) {
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
    return InvalidArgumentError("endpoint: expected \"host:port\", got \"" + endpoint + "\"");
  }
  std::string host = endpoint.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result); rc != 0) {
    return UnavailableError("resolving " + endpoint + ": " + gai_strerror(rc));
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  std::string last_error = "no address";
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, MillisUntil(deadline));
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        errno = rc == 0 ? ETIMEDOUT : (err != 0 ? err : errno);
        rc = -1;
      }
    }
    if (rc == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      freeaddrinfo(result);
      return std::make_unique<Connection>(fd, endpoint);
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(result);
  return UnavailableError("connecting to weight sender " + endpoint + ": " + last_error);
}

Status Connection::WriteAll(const char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t w = ::send(fd_, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      int rc = ::poll(&p, 1, MillisUntil(deadline));
      if (rc == 0) return DeadlineExceededError("sending to " + peer_ + ": peer not reading");
      if (rc < 0 && errno != EINTR) return UnavailableError(Errno("poll on " + peer_));
      continue;
    }
    return UnavailableError(Errno("sending to " + peer_));
  }
  return OkStatus();
}

Status Connection::ReadAll(char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t r = ::recv(fd_, data, n, 0);
    if (r > 0) {
      data += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return UnavailableError("connection to " + peer_ + " closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, MillisUntil(deadline));
      if (rc == 0) return DeadlineExceededError("waiting for a message from " + peer_);
      if (rc < 0 && errno != EINTR) return UnavailableError(Errno("poll on " + peer_));
      continue;
    }
    return UnavailableError(Errno("receiving from " + peer_));
  }
  return OkStatus();
}

Status Connection::Send(MessageType type, const std::string& payload, Clock::time_point deadline) {
  std::string frame;
  frame.reserve(12 + payload.size());
  const uint32_t t = static_cast<uint32_t>(type);
  for (int i = 0; i < 4; ++i) frame.push_back(static_cast<char>((t >> (8 * i)) & 0xff));
  AppendU64(&frame, payload.size());
  frame += payload;
  return WriteAll(frame.data(), frame.size(), deadline);
}

StatusOr<Message> Connection::Receive(Clock::time_point deadline) {
  char header[12];
  // Wait for the first byte with the caller's deadline; once a frame has started, it must
  // finish by the same deadline.
  TRANSPORT_RETURN_IF_ERROR(ReadAll(header, sizeof(header), deadline));
  uint32_t type = 0;
  for (int i = 0; i < 4; ++i)
    type |= static_cast<uint32_t>(static_cast<uint8_t>(header[i])) << (8 * i);
  uint64_t length = 0;
  ReadU64(std::string(header + 4, 8), 0, &length);
  if (length > kMaxPayload) {
    return InvalidArgumentError("frame from " + peer_ +
                                ": expected a payload of at most 2 GiB, got " +
                                std::to_string(length) + " bytes");
  }
  Message message;
  message.type = static_cast<MessageType>(type);
  message.payload.resize(length);
  TRANSPORT_RETURN_IF_ERROR(ReadAll(message.payload.data(), length, deadline));
  return message;
}

bool Connection::PeerClosed() {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR)) return true;
  char c;
  ssize_t r = ::recv(fd_, &c, 1, MSG_PEEK);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::string Connection::LocalHost() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  }
  return text;
}

bool Connection::Readable() {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::unique_ptr<Listener>> Listener::Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &result);
      rc != 0) {
    return InvalidArgumentError("weight sender bind host \"" + host + "\": " + gai_strerror(rc));
  }
  int fd = ::socket(result->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(result);
    return InternalError(Errno("socket"));
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, result->ai_addr, result->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
    std::string error = Errno("binding the weight sender to " + host + ":" + port_text);
    freeaddrinfo(result);
    ::close(fd);
    return UnavailableError(error);
  }
  freeaddrinfo(result);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int bound = 0;
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    bound = ntohs(a->sin6_port);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    bound = ntohs(a->sin_port);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
  }
  std::string shown = host.empty() ? std::string(text) : host;
  if (shown.find(':') != std::string::npos) shown = "[" + shown + "]";
  return std::unique_ptr<Listener>(new Listener(fd, shown + ":" + std::to_string(bound)));
}

StatusOr<std::unique_ptr<Connection>> Listener::Accept(Duration timeout) {
  pollfd p{fd_, POLLIN, 0};
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  int rc = ::poll(&p, 1, MillisUntil(deadline));
  if (rc == 0) return DeadlineExceededError("no connection");
  if (rc < 0) return UnavailableError(Errno("poll on the listening socket"));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
      return DeadlineExceededError("no connection");
    return UnavailableError(Errno("accept"));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char text[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    port = ntohs(a->sin6_port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    port = ntohs(a->sin_port);
  }
  return std::make_unique<Connection>(fd, std::string(text) + ":" + std::to_string(port));
}

}  // namespace rlmesh::transport
