// The control channel between a weight sender and its receivers: framed messages over a TCP
// connection, every read and write bounded by a deadline (poll), writes with MSG_NOSIGNAL so a
// dead peer is an error, not a SIGPIPE. A frame is a 4-byte type, an 8-byte length, then the
// payload. One Connection per peer; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/transport/status.h"
#include "common/transport/transport.h"

namespace rlmesh::transport {

enum class MessageType : uint32_t {
  kHello = 1,         // receiver -> sender: payload = receiver name
  kManifest = 2,      // sender -> receiver: payload = EncodeManifest()
  kBucketsReady = 3,  // sender -> receiver: payload = u64 count of buckets ready (cumulative)
  kAck = 4,           // receiver -> sender: payload = u64 version, u64 code, message
  kNcclSetup = 5,     // sender -> receiver: payload = ncclUniqueId bytes, u64 rank, u64 world size
  kAbort = 6,         // sender -> receiver: the transfer of the current version is abandoned
  // The TCP chain (tcp_chain.h):
  kReady = 7,           // receiver -> sender: payload = its data endpoint ("" = shared memory)
  kChain = 8,           // sender -> receiver: u64 round, u64 next index, next data endpoint
  kDownstreamLost = 9,  // receiver -> sender: u64 round, u64 next index, why
};

struct Message {
  MessageType type = MessageType::kHello;
  std::string payload;
};

// A connected TCP socket; closes it on destruction.
class Connection {
 public:
  explicit Connection(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to "host:port" (numeric or resolvable host) within `timeout`.
  static StatusOr<std::unique_ptr<Connection>> Dial(const std::string& endpoint, Duration timeout);

  Status Send(MessageType type, const std::string& payload, Clock::time_point deadline);
  // DeadlineExceeded when no whole frame arrived by `deadline`; Unavailable when the peer
  // closed the connection or it broke.
  StatusOr<Message> Receive(Clock::time_point deadline);
  // True when the peer has closed or reset the connection (non-blocking check; unread data
  // is not consumed).
  bool PeerClosed();
  // True when at least one byte is waiting to be read (non-blocking).
  bool Readable();

  // Raw bytes, for the data connections of the TCP chain.
  Status WriteAll(const char* data, size_t n, Clock::time_point deadline);
  Status ReadAll(char* data, size_t n, Clock::time_point deadline);
  // The numeric address of this end of the connection ("" when unknown).
  std::string LocalHost() const;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }

 private:
  int fd_;
  std::string peer_;
};

// A listening TCP socket.
class Listener {
 public:
  ~Listener();
  static StatusOr<std::unique_ptr<Listener>> Listen(const std::string& host, int port);
  // Waits up to `timeout` for a connection; DeadlineExceeded when none came.
  StatusOr<std::unique_ptr<Connection>> Accept(Duration timeout);
  // "host:port" with the bound port.
  const std::string& endpoint() const { return endpoint_; }
  int fd() const { return fd_; }

 private:
  Listener(int fd, std::string endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}
  int fd_;
  std::string endpoint_;
};

// `endpoint` ("host:port") with a wildcard or empty host (0.0.0.0, ::) replaced by the host of
// `peer`, the address a call came from as gRPC names it ("ipv4:10.1.2.3:5000",
// "ipv6:[fd00::1]:5000"): a sender bound to every interface is reached at the address its
// control-plane call came from. Other endpoints, and peers that are not IP, are returned as is.
std::string ReachableEndpoint(const std::string& endpoint, const std::string& peer);

// A weight-update request (an UpdateWeightsRequest: endpoint(), set_endpoint() and a string map
// transport_options()) whose data-plane endpoints are reachable from here: `request` itself, or
// a copy in `*storage` with the endpoint, and the same-node offer's (kSameNodeEndpointOption),
// as ReachableEndpoint() gives them for the caller `peer`.
template <typename Request>
const Request* WithReachableEndpoint(const Request* request, const std::string& peer,
                                     Request* storage) {
  if (request->endpoint().empty()) return request;
  std::string endpoint = ReachableEndpoint(request->endpoint(), peer);
  auto same_node = request->transport_options().find(kSameNodeEndpointOption);
  std::string same_node_endpoint;
  if (same_node != request->transport_options().end())
    same_node_endpoint = ReachableEndpoint(same_node->second, peer);
  const bool moved =
      same_node != request->transport_options().end() && same_node_endpoint != same_node->second;
  if (endpoint == request->endpoint() && !moved) return request;
  *storage = *request;
  storage->set_endpoint(std::move(endpoint));
  if (moved) (*storage->mutable_transport_options())[kSameNodeEndpointOption] = same_node_endpoint;
  return storage;
}

// Little-endian u64 helpers for small payloads.
void AppendU64(std::string* out, uint64_t v);
// Reads the u64 at byte `pos`; false when the payload is too short.
bool ReadU64(const std::string& in, size_t pos, uint64_t* v);

// Acknowledgement payloads.
std::string EncodeAck(uint64_t version, const Status& status);
StatusOr<std::pair<uint64_t, Status>> DecodeAck(const std::string& payload);

}  // namespace rlmesh::transport
