// The actor-trainer: the trainable policy, its GRPO actor (and a separate warm-up actor for
// supervised steps at the warm-up learning rate), the weight version, checkpoints and weight
// publishing. Requests arrive as rlmesh.v1 messages; no gRPC server inside (trainer_service.h).
//
// Checkpoints follow verl's layout: <default_local_dir>/global_step_<N>/actor/huggingface (the
// policy in Hugging Face format), actor/actor_optimizer.pt and actor/actor_rng.pt, and
// global_step_<N>/trainer_state.json (step, weight version, data position, coordinator state);
// <default_local_dir>/latest_checkpointed_iteration.txt names the newest. A checkpoint is
// written into a temporary folder and renamed into place, so it is either whole or absent.
// Thread-safe: requests are serialized.
//
// A trainer group (trainer.n_gpus_per_node > 1) is W of these, one per rank (docs/services.md
// "The trainer group"). Rank 0 serves the coordinator: each request that computes (old
// log-probs, train and supervised steps, loading a checkpoint) is posted to the other ranks,
// which run the same request in ServeRank, and the actor splits the rows across the group.
// With fsdp_size 1 every rank holds the whole policy (data parallelism) and checkpoints and
// weight publishing are rank 0's alone. Sharded (the default, fsdp.h) each rank holds 1/W of
// it: publishing gathers it unit by unit on every rank, and a checkpoint is every rank's
// optimizer shards (actor_shard_<r>_of_<W>.pt) plus the whole Hugging Face folder that rank 0
// writes; it resumes at any W, sharded or whole. The checkpoint folder must be one that every
// rank can read and write (a shared disk, as in verl).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/config/service_settings.h"
#include "common/dist/group.h"
#include "common/grpo/schedules.h"
#include "common/model/causal_lm.h"
#include "common/rpc/client.h"
#include "rlmesh/v1/trainer.pb.h"
#include "services/trainer/actor.h"
#include "services/trainer/proto_batch.h"
#include "services/trainer/weight_publisher.h"

namespace rlmesh::trainer {

class Trainer {
 public:
  // `publish_channel`: options (TLS included) of the channels PublishWeights opens. `group`:
  // this rank's trainer group, or null alone; not owned, it must outlive the trainer. With
  // hybrid sharding (settings.shard_size below the group's size) Create forms the shard
  // groups, a collective: every rank's Create runs at the same time.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const config::TrainerSettings& settings, const rpc::ChannelOptions& publish_channel = {},
      dist::Group* group = nullptr);

  // Ranks > 0: runs the requests rank 0 posts until it says stop (OK) or the group breaks
  // (its status). Failures of single requests are reported to rank 0 and serving continues.
  absl::Status ServeRank();
  // Rank 0: tells the other ranks to stop serving (they exit). No-op alone.
  void StopRanks();

  absl::StatusOr<v1::ComputeOldLogProbsResponse> ComputeOldLogProbs(
      const v1::ComputeOldLogProbsRequest& request);
  absl::StatusOr<v1::TrainStepResponse> TrainStep(const v1::TrainStepRequest& request);
  absl::StatusOr<v1::SftStepResponse> SftStep(const v1::SftStepRequest& request);
  absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(
      const v1::SaveCheckpointRequest& request);
  // NotFound when no checkpoint exists (path empty and no latest_checkpointed_iteration.txt).
  absl::StatusOr<v1::LoadCheckpointResponse> LoadCheckpoint(
      const v1::LoadCheckpointRequest& request);
  // The current weights as a new version to the targets (rollout replicas and references),
  // or, with request.checkpoint, the weights of that checkpoint folder to references.
  absl::StatusOr<v1::PublishWeightsResponse> PublishWeights(
      const v1::PublishWeightsRequest& request);
  v1::GetTrainerStatusResponse Status() const;
  // Replica-versions sent inline because the data plane did not reach the replica
  // (WeightPublisher::inline_fallbacks); 0 on ranks that do not publish.
  int64_t inline_fallbacks() const { return publisher_ ? publisher_->inline_fallbacks() : 0; }

 private:
  Trainer(const config::TrainerSettings& settings, std::shared_ptr<model::CausalLmImpl> model,
          std::unique_ptr<Actor> actor, std::unique_ptr<Actor> warmup_actor,
          std::unique_ptr<WeightPublisher> publisher, dist::Group* group);
  BatchLimits Limits() const;
  void BumpVersion() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Rank 0 in a group: posts `request` as command `op`, runs `run` here, and returns its
  // result unless another rank failed (then that rank's status). Alone: run().
  template <typename Response>
  absl::StatusOr<Response> OnEveryRank(absl::string_view op,
                                       const google::protobuf::Message& request,
                                       const std::function<absl::StatusOr<Response>()>& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The work of each request, on whichever rank runs it.
  absl::StatusOr<v1::ComputeOldLogProbsResponse> ComputeOldLogProbsHere(
      const v1::ComputeOldLogProbsRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::TrainStepResponse> TrainStepHere(const v1::TrainStepRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::SftStepResponse> SftStepHere(const v1::SftStepRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // verl's perf/max_memory_allocated_gb, perf/max_memory_reserved_gb and
  // perf/cpu_memory_used_gb. On CPU: the peak of the bytes LibTorch's tensors held
  // (common/process/tensor_memory.h; 0 unless the process counts them) since the model was
  // loaded, the peak resident set (tensors plus the runtime and the memory malloc keeps for
  // reuse, as the CUDA allocator reserves) and the resident set now; the largest over the
  // group's ranks, each rank's own as perf/rank_<r>/... in a group. A collective: every rank
  // calls it.
  absl::StatusOr<std::map<std::string, double>> MemoryMetrics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::LoadCheckpointResponse> LoadCheckpointHere(
      const v1::LoadCheckpointRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sharded: this rank's part of a checkpoint (rank 0 also the Hugging Face folder) into its
  // temporary folder.
  absl::Status SaveShardsHere(const v1::SaveCheckpointRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PublishWeights of request.checkpoint's saved weights (rank 0 reads the folder alone).
  absl::StatusOr<v1::PublishWeightsResponse> PublishCheckpoint(
      const v1::PublishWeightsRequest& request, const PublishOptions& options);
  // PublishWeights where the transport takes whole tensors (nccl): a snapshot of every
  // parameter, then the publish without the lock.
  absl::StatusOr<v1::PublishWeightsResponse> PublishSnapshot(
      const v1::PublishWeightsRequest& request, const PublishOptions& options);
  // A rank > 0's part of a unit-by-unit publish: the gathers of every pass rank 0 makes.
  absl::Status FollowPublishHere() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies of the whole parameters into `out` (null: a rank > 0 only helping to gather).
  absl::Status SnapshotHere(NamedTensors* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const config::TrainerSettings settings_;
  dist::Group* const group_;             // null alone
  rpc::ChannelOptions publish_channel_;  // set once by Create
  mutable absl::Mutex mu_;
  std::shared_ptr<model::CausalLmImpl> model_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Actor> actor_;
  std::unique_ptr<Actor> warmup_actor_;
  std::shared_ptr<ShardedParameters> sharded_;  // null when the parameters are whole
  std::unique_ptr<WeightPublisher> publisher_;  // the data plane's sender lives across versions
  grpo::LrSchedule schedule_;                   // of the GRPO actor, set once by Create
  v1::WeightVersion version_ ABSL_GUARDED_BY(mu_);
  int64_t global_step_ ABSL_GUARDED_BY(mu_) = 0;
  v1::TrainerState state_ ABSL_GUARDED_BY(mu_) = v1::TRAINER_STATE_IDLE;
  std::optional<v1::CheckpointInfo> resumed_from_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::CheckpointInfo> last_checkpoint_ ABSL_GUARDED_BY(mu_);
  // The last ComputeOldLogProbs with keep = true, for the next TrainStep's compact samples
  // (every rank keeps its own copy: each has every row's log-probs); cleared by the update.
  std::optional<KeptOldLogProbs> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rlmesh::trainer
