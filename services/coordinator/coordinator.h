// The coordinator: owns the GRPO loop of a run. It loads the prompts (prompt_source.h), waits
// for the services, restores the latest checkpoint (trainer.resume_mode, resume_state.h),
// optionally warms the policy up with supervised steps (warmup.h), then runs GrpoStep after
// GrpoStep (synchronously, or as the stages of pipeline.h), logging one progress line and one
// JSONL record per step (run_log.h), validating (validation.h) every trainer.test_freq steps and
// checkpointing every trainer.save_freq steps (and at the end, and when asked to stop). Run()
// is called from one thread; Status/Pause/Resume/RequestStop and the pool may be used from any
// thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/config/service_settings.h"
#include "common/data/sampler.h"
#include "common/tokenizer/tokenizer.h"
#include "prometheus/registry.h"
#include "rlmesh/v1/coordinator.pb.h"
#include "services/coordinator/clients.h"
#include "services/coordinator/dns_discovery.h"
#include "services/coordinator/grpo_step.h"
#include "services/coordinator/metrics.h"
#include "services/coordinator/prompt_source.h"
#include "services/coordinator/rollout_pool.h"
#include "services/coordinator/run_log.h"

namespace rlmesh::coordinator {

struct CoordinatorClients {
  std::unique_ptr<RewardClient> reward;
  std::unique_ptr<ReferenceClient> reference;
  std::unique_ptr<TrainerClient> trainer;
  RolloutClientFactory rollout_factory;
};

class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      const config::CoordinatorSettings& settings, CoordinatorClients clients,
      prometheus::Registry& registry);

  // Runs the loop to its end. Returns OK when every step ran (or a stop was requested and the
  // checkpoint written); otherwise the error that stopped the run.
  absl::Status Run();

  // Finishes the current step, writes a checkpoint, and makes Run() return.
  void RequestStop();
  void Pause(const std::string& reason);
  void Resume();
  v1::GetCoordinatorStatusResponse Status() const;
  RolloutPool& pool() { return *pool_; }

 private:
  Coordinator(const config::CoordinatorSettings& settings, CoordinatorClients clients,
              prometheus::Registry& registry);
  absl::Status Prepare();
  absl::Status Restore();
  absl::Status WarmUp();
  // The KL reference as targets of the trainer's PublishWeights: one per replica behind
  // rlmesh.reference.address (ReplicaAddresses), each to hold the same weights.
  absl::StatusOr<std::vector<v1::WeightTarget>> ReferenceTargets() const;
  // Has the trainer send the weights saved in `checkpoint` (the warm-up's) to every reference
  // replica; their weight version.
  absl::StatusOr<uint64_t> SendReferenceWeights(const std::string& checkpoint);
  // SendReferenceWeights, then SetReferenceAnchor.
  absl::Status AnchorReference(const std::string& checkpoint);
  // The reference holds the warmed-up policy of `checkpoint` as `version`: steps check it
  // answers with that version (sending it again after a restart), and checkpoints record the
  // folder (coordinator state "reference_checkpoint").
  void SetReferenceAnchor(const std::string& checkpoint, uint64_t version);
  absl::Status Validate(int64_t global_step, bool before_warmup = false);
  absl::Status SaveCheckpoint(int64_t global_step);
  bool WaitWhilePaused();

  // rlmesh.max_staleness = 0: generate, then train, step after step.
  absl::Status RunSynchronous(absl::Time start);
  // A synchronous step with DAPO's dynamic sampling (dynamic_sampling.h): rounds of prompts
  // until train_batch_size groups with a spread are kept, then the update on them.
  absl::StatusOr<bool> DynamicStep(int64_t step, absl::Time start, int64_t steps_done);
  // rlmesh.max_staleness = k > 0: the stages of pipeline.h, generation up to k steps ahead of
  // the update.
  absl::Status RunPipelined(absl::Time start);
  // After a step's update: metrics, the progress line, validation and checkpoint as due.
  // Returns whether a stop was requested.
  absl::StatusOr<bool> FinishStep(int64_t step, const DrawnStep& drawn, StepResult& result,
                                  absl::Time start, int64_t steps_done);

  const config::CoordinatorSettings settings_;
  CoordinatorClients clients_;
  CoordinatorMetrics metrics_;
  std::unique_ptr<RolloutPool> pool_;
  std::unique_ptr<DnsDiscovery> discovery_;  // after pool_: stopped before the pool goes
  std::unique_ptr<GrpoStep> step_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<PromptSource> prompts_;  // after tokenizer_, which it reads
  std::unique_ptr<RunLog> run_log_;
  int64_t total_steps_ = 0;
  int64_t start_step_ = 0;
  std::optional<double> first_validation_;
  // The checkpoint holding the warmed-up KL reference; empty = the initial model.
  std::string reference_checkpoint_;
  std::optional<double> last_validation_;
  // Mean step reward of the current and the previous epoch (reward growth per epoch).
  double epoch_reward_sum_ = 0;
  int64_t epoch_reward_steps_ = 0;
  int64_t epoch_of_sums_ = -1;
  std::optional<double> previous_epoch_reward_;

  mutable absl::Mutex mu_;
  v1::RunState state_ ABSL_GUARDED_BY(mu_) = v1::RUN_STATE_STARTING;
  int64_t global_step_ ABSL_GUARDED_BY(mu_) = 0;
  v1::WeightVersion weight_version_ ABSL_GUARDED_BY(mu_);
  v1::DataPosition data_position_ ABSL_GUARDED_BY(mu_);
  // The sampler's position after the last trained step (checkpoints record it); the sampler
  // itself may be ahead, drawing for steps generated ahead.
  data::SamplerPosition trained_position_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> last_metrics_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  // The newest complete checkpoint of this run (resumed from or written), for the line that
  // says where a failed run can go on from; "" when none.
  std::string last_checkpoint_ ABSL_GUARDED_BY(mu_);
  std::string pause_reason_ ABSL_GUARDED_BY(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rlmesh::coordinator
