// Sends a weight version to rollout replicas and the KL reference through their
// UpdateWeights with the "inline" transport: BEGIN, DATA calls of at most `bucket_bytes` of
// tensors each, COMMIT — one control round-trip per bucket rather than per tensor, all targets
// in parallel. A target that fails or does not answer within the timeout is reported, not
// retried; the coordinator decides what to do with it. Thread-safe.
//
// WeightPublisher adds the data plane (common/transport, docs/transport.md): with
// rlmesh.weight_sync.transport = shm or nccl the bytes of a version go out once through a
// WeightSender while each target's BEGIN names the sender's endpoint, so the target pulls the
// version (a replica subscribing on its first BEGIN, the reference for that version only) and
// COMMIT applies it. A target whose BEGIN fails over the data plane (e.g. shm on another host)
// gets that version inline instead.
//
// Receivers on the trainer's node may be offered a second backend beside the configured one
// (WeightPublisherOptions::same_node_transport; by default cuda_ipc beside nccl): each BEGIN
// then names both, with the trainer's node, and the receiver picks (transport::ChooseOffer).
// Both senders publish every version; each one's receivers take it from that one.
//
// A version need not exist whole anywhere: a UnitFeed hands it over one unit (a decoder layer,
// or the embeddings, final norm and head) at a time, and each unit goes to every inline target
// and into the shm segment before the next is asked for (docs/transport.md, "From the shards").
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
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

// One tensor of a version that a UnitFeed hands over.
struct FeedEntry {
  std::string name;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  int unit = 0;
};

// A version handed over a unit at a time. For a sharded trainer group each pass over the
// units is a collective: every rank gathers each unit in turn, rank 0 hands it over.
class UnitFeed {
 public:
  virtual ~UnitFeed() = default;
  // Every tensor of the version, grouped by unit, units in increasing order.
  virtual const std::vector<FeedEntry>& entries() const = 0;
  virtual int num_units() const = 0;
  // The tensors of `unit` (its entries, in order; contiguous, in host memory), valid until
  // the next Fetch or EndPass. Within a pass units are asked for in increasing order; the
  // ones skipped are still gathered by the group.
  virtual absl::StatusOr<NamedTensors> Fetch(int unit) = 0;
  // Ends a pass over the units; `another`: whether another pass follows (the group agrees).
  virtual absl::Status EndPass(bool another) = 0;
  // The most bytes of the version held at once beyond the source's own memory so far
  // (PublishWeightsResponse.peak_held_bytes).
  virtual int64_t peak_held_bytes() const = 0;
};

struct WeightPublisherOptions {
  std::string transport = "grpc";         // rlmesh.weight_sync.transport: grpc (inline), shm, nccl
  std::string bind_host = "127.0.0.1";    // rlmesh.host: where replicas reach the data plane
  int64_t bucket_bytes = 64 << 20;        // rlmesh.weight_sync.bucket_bytes
  int device = 0;                         // CUDA device of the trainer's tensors (nccl)
  double transfer_timeout_seconds = 300;  // actor_rollout_ref.nccl_timeout: per receiver
  // A backend offered to the receivers on this node beside `transport` ("" = none); it must
  // move the same memory (host or device) as `transport`. SameNodeTransportFor gives the
  // trainer's choice.
  std::string same_node_transport;
};

// The backend a trainer offers receivers on its own node beside `transport`: cuda_ipc beside
// nccl when this build has it (a receiver on the trainer's node with a GPU then copies each
// tensor from the trainer's memory instead of joining the NCCL broadcast); none otherwise
// (shm already lets each receiver map its segment or take the TCP chain by itself).
std::string SameNodeTransportFor(const std::string& transport);

// Publishes versions through the configured transport; owns the data-plane sender, whose
// receivers (the replicas) stay subscribed between versions. Thread-safe; publishes are
// serialized.
class WeightPublisher {
 public:
  // InvalidArgument naming rlmesh.weight_sync.transport for a backend this build lacks;
  // Unavailable when the sender cannot listen (or, for nccl, no GPU is visible). A same-node
  // backend whose sender cannot start is left out, with a line on stderr saying why: the
  // receivers then all take `transport`. InvalidArgument when it moves other memory.
  static absl::StatusOr<std::unique_ptr<WeightPublisher>> Create(
      const WeightPublisherOptions& options);

  // Closes the data-plane subscriptions of the replicas named (PublishWeightsRequest.suspended)
  // and returns how many there were; 0 without a data plane.
  int Disconnect(const std::vector<std::string>& replica_ids);

  // Publishes `tensors` (contiguous; on the CPU for grpc/shm, on the CUDA device for nccl) as
  // `version` to `targets`. `transport`: "" = the configured one, "inline"/"grpc" = inline
  // gRPC, otherwise it must be the configured backend. Over nccl the tensors are kept until
  // the next publish (the NCCL sender catches late joiners up from them). The response's
  // peak_held_bytes is their size: they are a copy made for the publish.
  absl::StatusOr<v1::PublishWeightsResponse> Publish(
      NamedTensors tensors, const v1::WeightVersion& version,
      const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
      const std::string& transport, const PublishOptions& options);
  // The same for a version that `feed` hands over unit by unit: one pass sends every unit to
  // the inline targets and into the data plane; a second pass, only when a target could not
  // pull over the data plane, sends it inline to those. Ends every pass it starts, whatever
  // fails (the feed's passes are collectives). Only where FeedsFrom(transport).
  absl::StatusOr<v1::PublishWeightsResponse> PublishFeed(
      UnitFeed& feed, const v1::WeightVersion& version,
      const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
      const std::string& transport, const PublishOptions& options);
  // Whether a publish over `transport` ("" = the configured one) can take a UnitFeed: inline
  // and shm can (shm copies each bucket into its segment as it comes), nccl cannot (it reads a
  // version again after the publish, to catch late receivers up), nor can two senders at once.
  bool FeedsFrom(const std::string& transport) const;

  const std::string& transport() const { return options_.transport; }
  // The backend offered to receivers on this node beside transport(); "" when none.
  std::string same_node_transport() const {
    return same_node_ == nullptr ? "" : options_.same_node_transport;
  }
  // Whether Publish wants the tensors on the CUDA device (nccl, cuda_ipc) rather than on the CPU.
  bool wants_device_tensors() const { return transport::MovesDeviceMemory(options_.transport); }
  // Replica-versions that went inline because the data plane did not reach the replica.
  int64_t inline_fallbacks() const { return inline_fallbacks_.load(); }

 private:
  // InvalidArgument unless `transport` is "", inline/grpc or the configured backend.
  absl::Status CheckTransport(const std::string& transport) const;
  // Whether every sender copies a version while publishing it, so it can come from a UnitFeed.
  bool Streams() const { return sender_->streams() && same_node_ == nullptr; }
  // The receiver `target` is gone or frozen: no sender waits for it in `version` any longer.
  void Abandon(const v1::WeightTarget& target, const v1::WeightVersion& version,
               const std::string& error);
  // FailedPrecondition when `version` is older than the last one through the data plane.
  absl::Status CheckVersion(const v1::WeightVersion& version) const;
  // Counts and logs a target that gets `version` inline after failing to pull it.
  void NoteFallback(const v1::WeightVersion& version, const v1::WeightTarget& target,
                    const std::string& error);
  // One result per target; `report`: the data plane's, when it sent this version.
  static v1::PublishWeightsResponse Response(
      const v1::WeightVersion& version,
      const google::protobuf::RepeatedPtrField<v1::WeightTarget>& targets,
      std::vector<std::string> errors, const transport::PublishReport* report, int64_t bytes,
      absl::Time start);

  WeightPublisherOptions options_;
  std::mutex mu_;
  std::unique_ptr<transport::WeightSender> sender_;  // null for grpc
  // The same-node backend's; null when none is offered.
  std::unique_ptr<transport::WeightSender> same_node_;
  NamedTensors retained_;  // the last version sent through sender_
  bool published_ = false;
  uint64_t last_version_ = 0;
  std::atomic<int64_t> inline_fallbacks_{0};
};

}  // namespace rlmesh::trainer
