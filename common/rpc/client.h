// Client-side helpers shared by every caller of an rlmesh service: channels with rlmesh's
// message limits and gRPC's built-in retry of UNAVAILABLE, waiting until a server reports
// SERVING on grpc.health.v1, and an explicit retry loop with exponential backoff for calls that
// must survive a server restart. Thread-safe; no shared state.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlmesh::rpc {

// Retry with exponential backoff: attempt k (k >= 1) waits
// min(initial_backoff_seconds * multiplier^(k-1), max_backoff_seconds) before the next one.
struct RetryPolicy {
  // Attempts in total, the first included; 1 means no retry.
  int max_attempts = 5;
  // Wait after the first failed attempt.
  double initial_backoff_seconds = 0.1;
  // Upper bound of a single wait.
  double max_backoff_seconds = 5.0;
  // Growth of the wait from one attempt to the next.
  double multiplier = 2.0;
};

// HTTP/2 keepalive (rlmesh.rpc.*): every `time_seconds` each end of a connection pings the
// other, also while a call waits for data and while no call is open; a ping unanswered for
// `timeout_seconds` drops the connection, failing its calls UNAVAILABLE. A frozen peer (a
// stopped process, a partitioned node) is so found within time + timeout seconds.
struct KeepaliveOptions {
  double time_seconds = 10.0;
  double timeout_seconds = 5.0;
};

struct ChannelOptions {
  // Largest message sent or received (matches ServiceServerOptions::max_message_bytes).
  int max_message_bytes = 1 << 30;
  // gRPC's built-in retry of UNAVAILABLE (service config retryPolicy) for the idempotent RPCs
  // only: every GetStatus, ListReplicas, Score, ComputeLogProbs, ComputeOldLogProbs and health
  // Check. Generate, TrainStep, SftStep, SaveCheckpoint, LoadCheckpoint, UpdateWeights,
  // PublishWeights and the coordinator's Pause/Resume/(Un)RegisterReplica are never repeated
  // by the channel. max_attempts <= 1 turns it off; gRPC caps it at 5.
  RetryPolicy retry;
  // Longest wait between reconnection attempts to an unreachable server.
  double max_reconnect_backoff_seconds = 2.0;
  // Transport security (common/rpc/tls.h, ApplyTls): null means plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
  // With credentials: the name the server's certificate must carry instead of the dialed
  // host (rlmesh.tls.server_name); empty checks the dialed host.
  std::string tls_server_name = {};
  // Pings of the connection (the server's side is ServiceServerOptions::keepalive).
  KeepaliveOptions keepalive = {};
};

// A channel to "host:port" with the options above: TLS with options.credentials, plaintext
// without. Calls are balanced round robin over every address the host resolves to (all the
// pods behind a headless Service), re-resolved when a connection breaks.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const ChannelOptions& options = {});

// Blocks until the server's health for `service` ("" = whole server) is SERVING. Waits through
// a server that is not up yet, NOT_SERVING and SERVICE_UNKNOWN, using the Watch stream (no
// polling). DEADLINE_EXCEEDED after timeout_seconds, naming the address, service and the last
// status seen.
absl::Status WaitForServing(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& service, double timeout_seconds);

// CreateChannel + WaitForServing.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectWhenServing(
    const std::string& address, const std::string& service, double timeout_seconds,
    const ChannelOptions& options = {});

// Seconds as whole milliseconds for a gRPC channel argument, at least 1.
int Millis(double seconds);

// The wait before the attempt after failed attempt `attempt` (1-based), in seconds.
double BackoffSeconds(const RetryPolicy& policy, int attempt);

// Calls `call` with a fresh ClientContext until it returns anything but UNAVAILABLE or the
// attempts run out, sleeping BackoffSeconds() in between through `sleep` (injectable for
// tests; null means std::this_thread::sleep_for). `call` must set up its own context options
// (deadline, metadata) on the context it is given. With retry_deadline_exceeded, an attempt
// that ran out of its deadline is retried too (for calls whose deadline is per attempt and
// that can be repeated: scoring). Returns the last status.
grpc::Status CallWithRetry(const RetryPolicy& policy,
                           const std::function<grpc::Status(grpc::ClientContext*)>& call,
                           const std::function<void(double)>& sleep = nullptr,
                           bool retry_deadline_exceeded = false);

}  // namespace rlmesh::rpc
