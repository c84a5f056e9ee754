#include "common/rpc/client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace rlmesh::rpc {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

std::chrono::system_clock::time_point DeadlineIn(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(seconds));
}

// RPCs that can be repeated without changing the outcome: reads, scoring and log-prob
// computations. Generate, TrainStep, SftStep, UpdateWeights, PublishWeights and the
// coordinator's membership calls are not retried by the channel (a repeat could double work
// or accounting); callers that know better use CallWithRetry.
constexpr std::pair<const char*, const char*> kIdempotentMethods[] = {
    {"rlmesh.v1.RolloutService", "GetStatus"},
    {"rlmesh.v1.RewardService", "Score"},
    {"rlmesh.v1.ReferenceService", "ComputeLogProbs"},
    {"rlmesh.v1.TrainerService", "ComputeOldLogProbs"},
    {"rlmesh.v1.TrainerService", "GetStatus"},
    {"rlmesh.v1.CoordinatorService", "GetStatus"},
    {"rlmesh.v1.CoordinatorService", "ListReplicas"},
    {"grpc.health.v1.Health", "Check"},
};

// The retry policy of the idempotent methods, as a service config's "methodConfig" member.
std::string RetryMethodConfig(const RetryPolicy& retry) {
  std::string names;
  for (const auto& [service, method] : kIdempotentMethods) {
    if (!names.empty()) names += ",";
    names += absl::StrFormat(R"({"service":"%s","method":"%s"})", service, method);
  }
  const int attempts = std::clamp(retry.max_attempts, 2, 5);
  return absl::StrFormat(R"("methodConfig":[{"name":[%s],"retryPolicy":{"maxAttempts":%d,)"
                         R"("initialBackoff":"%.3fs","maxBackoff":"%.3fs","backoffMultiplier":%g,)"
                         R"("retryableStatusCodes":["UNAVAILABLE"]}}])",
                         names, attempts, std::max(retry.initial_backoff_seconds, 0.001),
                         std::max(retry.max_backoff_seconds, 0.001),
                         std::max(retry.multiplier, 1.0));
}

}  // namespace

int Millis(double seconds) {
  return static_cast<int>(std::clamp(seconds * 1000.0, 1.0, 2147483647.0));
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // gRPC's default reconnect backoff grows to 120 s; a peer that starts a little later than
  // its caller should be picked up within a couple of seconds.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(options.max_reconnect_backoff_seconds * 1000));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive.time_seconds));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options.keepalive.timeout_seconds));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A long generation sends no data for a while; keep pinging through it.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Calls go round robin over every address the target resolves to (a headless Service's
  // pods), not to the first one only (gRPC's default pick_first); a broken connection makes
  // the channel resolve the name again, so replaced pods are found.
  std::string config = R"({"loadBalancingConfig":[{"round_robin":{}}])";
  if (options.retry.max_attempts > 1)
    absl::StrAppend(&config, ",", RetryMethodConfig(options.retry));
  args.SetServiceConfigJSON(config + "}");
  if (options.credentials == nullptr) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  return grpc::CreateCustomChannel(address, options.credentials, args);
}

absl::Status WaitForServing(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& service, double timeout_seconds) {
  const auto deadline = DeadlineIn(timeout_seconds);
  auto stub = ::grpc::health::v1::Health::NewStub(channel);
  std::string last = "no answer";
  HealthCheckRequest request;
  request.set_service(service);
  // Each pass opens a Watch stream that waits for the connection (wait_for_ready) and then
  // reports every status change; a stream that breaks (server restarting) is reopened.
  while (std::chrono::system_clock::now() < deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    ctx.set_wait_for_ready(true);
    auto reader = stub->Watch(&ctx, request);
    HealthCheckResponse response;
    while (reader->Read(&response)) {
      last = HealthCheckResponse::ServingStatus_Name(response.status());
      if (response.status() == HealthCheckResponse::SERVING) {
        ctx.TryCancel();
        reader->Finish();
        return absl::OkStatus();
      }
    }
    const grpc::Status status = reader->Finish();
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      return absl::FailedPreconditionError(
          "the server does not implement grpc.health.v1.Health/Watch");
    }
    if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      last = absl::StrCat("health stream ended: ", status.error_message());
      // The server went away mid-stream; give it a moment before reconnecting.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return absl::DeadlineExceededError(absl::StrCat("service \"", service, "\" not SERVING within ",
                                                  timeout_seconds, " s (last status: ", last, ")"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectWhenServing(const std::string& address,
                                                                  const std::string& service,
                                                                  double timeout_seconds,
                                                                  const ChannelOptions& options) {
  std::shared_ptr<grpc::Channel> channel = CreateChannel(address, options);
  if (absl::Status s = WaitForServing(channel, service, timeout_seconds); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(address, ": ", s.message()));
  }
  return channel;
}

double BackoffSeconds(const RetryPolicy& policy, int attempt) {
  const double wait =
      policy.initial_backoff_seconds * std::pow(policy.multiplier, std::max(attempt - 1, 0));
  return std::min(wait, policy.max_backoff_seconds);
}

grpc::Status CallWithRetry(const RetryPolicy& policy,
                           const std::function<grpc::Status(grpc::ClientContext*)>& call,
                           const std::function<void(double)>& sleep, bool retry_deadline_exceeded) {
  grpc::Status status;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    status = call(&ctx);
    const bool retryable =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        (retry_deadline_exceeded && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    if (!retryable || attempt >= policy.max_attempts) return status;
    const double wait = BackoffSeconds(policy, attempt);
    if (sleep) {
      sleep(wait);
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
  }
}

}  // namespace rlmesh::rpc
