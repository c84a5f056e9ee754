// The reference policy: a frozen copy of the initial model that returns per-token log-probs
// (and entropies) of given sequences, for the KL loss. Requests are checked (naming the
// field) and run in micro-batches without gradients. Thread-safe: calls are serialized.
//
// A reference group (rlmesh.reference.world_size = R > 1) is R processes of rlmesh-reference
// over a dist::Group: each rank holds 1/R of every unit's weights (services/trainer/fsdp.h,
// full sharding of a frozen model) and gathers one unit at a time for each forward. Rank 0
// serves the coordinator and posts each request to the others (ServeRank). A batch is split
// across the ranks balanced by tokens (trainer::SplitAcrossRanks, as the trainer splits its
// log-prob pass); every rank runs as many forward passes as the busiest one (an idle rank
// scores one sequence and drops it, so the gathers stay in step), and the log-probs are
// summed into rank 0's answer. A new version arrives inline: each rank keeps its slice of
// every tensor, so no rank ever holds more than a bucket beyond its shards.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/config/service_settings.h"
#include "common/model/causal_lm.h"
#include "common/transport/transport.h"
#include "rlmesh/v1/reference.pb.h"
#include "rlmesh/v1/rollout.pb.h"
#include "services/rollout/tensor_codec.h"
#include "services/trainer/fsdp.h"

namespace rlmesh::dist {
class Group;
}  // namespace rlmesh::dist

namespace rlmesh::reference {

struct ReferenceOptions {
  std::string model_path;           // actor_rollout_ref.model.path
  std::string dtype = "float32";    // rlmesh.dtype
  std::string device = "cpu";       // rlmesh.device
  int64_t micro_batch_size = 16;    // actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
  int64_t max_token_len = 0;        // token budget of a forward instead (dynamic bsz); 0 = off
  int64_t max_batch_sequences = 0;  // a request with more sequences is rejected; 0 = no limit
  // actor_rollout_ref.ref.fsdp_config.param_offload: the weights stay in host memory as one
  // flat vector per unit (services/trainer/fsdp.h at one rank) and each unit is copied to
  // the device for its forward only.
  bool param_offload = false;
  // actor_rollout_ref.model.use_remove_padding: each micro-batch packed into one row
  // (CausalLmImpl::ForwardPacked); the log-probs equal the padded forward's to rounding.
  bool remove_padding = false;
  // This process's node, against which a trainer's same-node offer is matched
  // (transport::ChooseOffer); "" = this machine's transport::NodeId().
  std::string node_id;
};

ReferenceOptions ReferenceOptionsFrom(const config::ReferenceSettings& settings);

class ReferenceModel {
 public:
  // `group` (not owned, outlives the model) makes this process one rank of a reference group;
  // null or a world of one holds the whole model. Every rank of a group calls Create.
  static absl::StatusOr<std::unique_ptr<ReferenceModel>> Create(const ReferenceOptions& options,
                                                                dist::Group* group = nullptr);

  // Ranks > 0 of a group: runs what rank 0 posts until it posts a stop (OK) or the group
  // breaks (its status).
  absl::Status ServeRank();
  // Rank 0: tells the others to return from ServeRank.
  void StopRanks();

  absl::StatusOr<v1::ComputeLogProbsResponse> ComputeLogProbs(
      const v1::ComputeLogProbsRequest& request);

  // Replaces the frozen policy with the checkpoint folder at `path`; InvalidArgument when its
  // config differs from the current model's (architecture, sizes, vocabulary), the load error
  // (naming the file) when it cannot be read. The old model stays in use on failure.
  absl::StatusOr<v1::WeightVersion> LoadWeights(const std::string& path,
                                                const v1::WeightVersion& version);

  // ReferenceService.UpdateWeights: BEGIN starts a new model of the same config (the current
  // one keeps answering), BEGIN's and DATA's inline tensors are copied into it as they arrive,
  // COMMIT makes it the reference once every parameter has arrived, ABORT drops it. A BEGIN
  // naming a data plane (transport "shm" or "nccl" with the trainer's endpoint) receives the
  // whole version from the trainer's sender before it answers, as a rollout replica's does,
  // then unsubscribes: the reference takes the versions it is asked for, not every one.
  // InvalidArgument for a tensor that is not a parameter or has the wrong shape, or a data
  // plane without an endpoint (the update is dropped); the data plane's error when it cannot
  // be reached (the trainer then sends the version inline); FailedPrecondition for DATA or
  // COMMIT of a version that was not begun, DATA after a pulled BEGIN, or a COMMIT with
  // parameters missing. A group takes inline tensors only: a data-plane BEGIN is refused with
  // FailedPrecondition, and the trainer sends the version inline.
  absl::StatusOr<v1::UpdateWeightsResponse> UpdateWeights(const v1::UpdateWeightsRequest& request);
  v1::WeightVersion version();
  // How the last version committed came: "inline", or the data plane's path ("shm", "tcp",
  // "nccl", "cuda_ipc"); "" before any.
  std::string committed_path();
  // The model folder whose config.json and tokenizer describe the weights held: the last one
  // LoadWeights read, else options().model_path.
  std::string folder();
  const ReferenceOptions& options() const { return options_; }
  // Bytes of weights this rank holds between forwards (its shards in a group, the whole model
  // otherwise).
  int64_t held_weight_bytes();

 private:
  struct Frozen {
    std::shared_ptr<model::CausalLmImpl> model;
    // Null without param_offload at one rank; this rank's shards in a group.
    std::shared_ptr<trainer::ShardedParameters> offloaded;
  };
  static absl::StatusOr<Frozen> LoadFrozen(const ReferenceOptions& options, const std::string& path,
                                           dist::Group* group);
  // Gradients off; with param_offload the weights moved to host-resident units, and in a
  // group sharded across it.
  static absl::StatusOr<Frozen> Freeze(const ReferenceOptions& options,
                                       std::shared_ptr<model::CausalLmImpl> model,
                                       dist::Group* group);
  // A group's load: a model without weights, sharded at once, then filled from `path` one
  // unit at a time, so a rank holds its shards and one unit.
  static absl::StatusOr<Frozen> LoadSharded(const ReferenceOptions& options,
                                            const std::string& path, dist::Group* group);
  bool grouped() const;
  // InvalidArgument naming `path` when `next` is not the current model's architecture.
  absl::Status SameArchitecture(const std::string& path, const model::ModelConfig& next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank 0 of a group, holding group_mu_: posts `request` under `op`, runs `run` here, and
  // returns its result once every rank has finished (the first failing rank's status
  // otherwise). Alone: run(), and a forward goes on while an update is received.
  template <typename Response>
  absl::StatusOr<Response> OnEveryRank(absl::string_view op,
                                       const google::protobuf::Message& request,
                                       const std::function<absl::StatusOr<Response>()>& run);
  // What each public call does on every rank.
  absl::StatusOr<v1::ComputeLogProbsResponse> ComputeHere(
      const v1::ComputeLogProbsRequest& request);
  absl::StatusOr<v1::WeightVersion> LoadHere(const std::string& path,
                                             const v1::WeightVersion& version);
  absl::StatusOr<v1::UpdateWeightsResponse> UpdateHere(const v1::UpdateWeightsRequest& request);
  // A version arriving through UpdateWeights, in a model of its own until COMMIT.
  struct Incoming {
    v1::WeightVersion version;
    std::shared_ptr<model::CausalLmImpl> model;
    std::map<std::string, torch::Tensor> parameters;  // the new model's, by name
    std::set<std::string> received;
    rollout::TensorAssembler parts;  // inline tensors that come in parts
    int64_t bytes = 0;
    bool pulled = false;          // came over the data plane at BEGIN
    std::string path = "inline";  // how: transport::ReceivedVersion::path when pulled
    // In a group: this rank's new shard of each unit, and where each parameter sits in its
    // unit's flat vector (no whole model is built).
    std::vector<torch::Tensor> shards;
    struct Slot {
      int unit = 0;
      int64_t offset = 0;
      std::vector<int64_t> shape;
    };
    std::map<std::string, Slot> slots;
  };
  // Inline tensors into `incoming`: whole parameters, or in a group this rank's slice of each
  // into `incoming.shards`.
  absl::Status Receive(const v1::UpdateWeightsRequest& request, Incoming& incoming);
  // The version of a data-plane BEGIN, from the trainer's sender into `incoming`.
  absl::Status Pull(const v1::UpdateWeightsRequest& request, Incoming& incoming)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_);
  ReferenceModel(const ReferenceOptions& options, Frozen frozen, dist::Group* group);
  const ReferenceOptions options_;
  dist::Group* const group_;
  // A group runs one command at a time on every rank: held by rank 0 across a posted call
  // (never taken alone).
  absl::Mutex group_mu_ ABSL_ACQUIRED_BEFORE(update_mu_);
  absl::Mutex mu_;
  std::shared_ptr<model::CausalLmImpl> model_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<trainer::ShardedParameters> offloaded_ ABSL_GUARDED_BY(mu_);
  v1::WeightVersion version_ ABSL_GUARDED_BY(mu_);
  std::string folder_ ABSL_GUARDED_BY(mu_);  // "" = options_.model_path
  // Held by UpdateWeights (not by ComputeLogProbs, which goes on with the current model).
  absl::Mutex update_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<Incoming> incoming_ ABSL_GUARDED_BY(update_mu_);
  std::string committed_path_ ABSL_GUARDED_BY(update_mu_);
  // Which of the trainer's offers a pull takes (a same-node one that failed here, no more).
  transport::OfferChoice offers_ ABSL_GUARDED_BY(update_mu_);
};

}  // namespace rlmesh::reference
