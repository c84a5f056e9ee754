// Sends a weight version to rollout replicas through RolloutService.UpdateWeights with the
// "inline" transport: BEGIN, DATA calls of at most `bucket_bytes` of tensors each, COMMIT —
// one control round-trip per bucket rather than per tensor, all replicas in parallel. A
// replica that fails or does not answer within the timeout is reported, not retried; the
// coordinator decides what to do with it. Thread-safe.
//
// WeightPublisher adds the data plane (common/transport, docs/transport.md): with
// rlmesh.weight_sync.transport = shm or nccl the bytes of a version go out once through a
// WeightSender while each replica's BEGIN names the sender's endpoint, so the replica pulls the
// version (subscribing on its first BEGIN) and COMMIT applies it. A replica whose BEGIN fails
// over the data plane (e.g. shm on another host) gets that version inline instead.
//
// A target of kind REFERENCE is the KL reference (ReferenceService.UpdateWeights, the same
// phases): it always takes the version inline.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/client.h"
#include "common/transport/transport.h"
#include "rlmesh/v1/trainer.pb.h"

namespace rlmesh::trainer {

struct PublishOptions {
  int64_t bucket_bytes = 64 << 20;  // tensor bytes per DATA call
  double timeout_seconds = 300;     // per replica, for the whole transfer
  rpc::ChannelOptions channel;      // of the channel to each replica (TLS included)
};

// Named tensors of one version (HF parameter names).
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Publishes `tensors` as `version` to every target; one result per target, in order.
v1::PublishWeightsResponse PublishWeights(
    const NamedTensors& tensors, const v1::WeightVersion& version,
    const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
    const PublishOptions& options);

struct WeightPublisherOptions {
  std::string transport = "grpc";         // rlmesh.weight_sync.transport: grpc (inline), shm, nccl
  std::string bind_host = "127.0.0.1";    // rlmesh.host: where replicas reach the data plane
  int64_t bucket_bytes = 64 << 20;        // rlmesh.weight_sync.bucket_bytes
  int device = 0;                         // CUDA device of the trainer's tensors (nccl)
  double transfer_timeout_seconds = 300;  // actor_rollout_ref.nccl_timeout: per receiver
};

// Publishes versions through the configured transport; owns the data-plane sender, whose
// receivers (the replicas) stay subscribed between versions. Thread-safe; publishes are
// serialized.
class WeightPublisher {
 public:
  // InvalidArgument naming rlmesh.weight_sync.transport for a backend this build lacks;
  // Unavailable when the sender cannot listen (or, for nccl, no GPU is visible).
  static absl::StatusOr<std::unique_ptr<WeightPublisher>> Create(
      const WeightPublisherOptions& options);

  // Publishes `tensors` (contiguous; on the CPU for grpc/shm, on the CUDA device for nccl) as
  // `version` to `targets`. `transport`: "" = the configured one, "inline"/"grpc" = inline
  // gRPC, otherwise it must be the configured backend. The tensors are kept until the next
  // publish (the NCCL sender catches late joiners up from them).
  absl::StatusOr<v1::PublishWeightsResponse> Publish(
      NamedTensors tensors, const v1::WeightVersion& version,
      const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
      const std::string& transport, const PublishOptions& options);

  const std::string& transport() const { return options_.transport; }
  // Whether Publish wants the tensors on the CUDA device (nccl) rather than on the CPU.
  bool wants_device_tensors() const { return options_.transport == "nccl"; }
  // Replica-versions that went inline because the data plane did not reach the replica.
  int64_t inline_fallbacks() const { return inline_fallbacks_.load(); }

 private:
  WeightPublisherOptions options_;
  std::mutex mu_;
  std::unique_ptr<transport::WeightSender> sender_;  // null for grpc
  NamedTensors retained_;                            // the last version sent through sender_
  bool published_ = false;
  uint64_t last_version_ = 0;
  std::atomic<int64_t> inline_fallbacks_{0};
};

}  // namespace rlmesh::trainer
