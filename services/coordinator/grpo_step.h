// One GRPO step, driven through the service interfaces of clients.h, in two halves:
//   Generate: n samples per prompt (RolloutPool) -> score them (reward)
//   Train:    group advantages -> reference and old log-probs (in parallel) -> trainer update
//             -> publish the new weights, and the step's metrics with verl's names.
// Run() is both, one after the other (the synchronous step). With rlmesh.max_staleness > 0
// the coordinator runs Generate for later steps on one thread while Train runs on another;
// Generate and Validate touch only the pool, the reward client and the decoder, Train the
// rest. No gRPC inside; the coordinator owns the loop, the data and the checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpo/advantages.h"
#include "common/grpo/grpo.h"
#include "common/grpo/overlong.h"
#include "common/grpo/rollout_correction.h"
#include "common/grpo/schedules.h"
#include "services/coordinator/clients.h"
#include "services/coordinator/rollout_pool.h"

namespace rlmesh::coordinator {

// One prompt of the step, template applied.
struct StepPrompt {
  std::string uid;                 // unique within the run (GRPO group id)
  std::vector<int32_t> token_ids;  // prompt tokens
  std::string text;                // the prompt as the reward scorer sees it
  std::string data_source;
  std::string ground_truth;
  std::string extra_info_json;
};

struct GrpoStepOptions {
  int32_t n = 8;                     // actor_rollout_ref.rollout.n
  double temperature = 1.0;          // sampling; 0 = greedy
  double logprob_temperature = 1.0;  // divides the logits of every log-prob pass
  double top_p = 1.0;
  int32_t top_k = -1;
  int32_t max_response_length = 512;   // data.max_response_length
  int64_t max_prompt_length = 512;     // data.max_prompt_length (prompt_length/clip_ratio)
  uint64_t seed = 1;                   // sampling seed of the run; the step is mixed in
  std::string adv_estimator = "grpo";  // algorithm.adv_estimator (grpo::ParseAdvEstimator)
  bool norm_adv_by_std = true;         // algorithm.norm_adv_by_std_in_grpo
  double gamma = 1.0;                  // algorithm.gamma (reinforce_plus_plus)
  // algorithm.rollout_correction (docs/grpo.md, "Rollout correction"): importance weights
  // "token" or "sequence" (empty: none), their truncation and batch normalisation; bypass_mode
  // trains with the rollout's log-probs as the old ones and skips ComputeOldLogProbs.
  std::string rollout_is;
  double rollout_is_threshold = 2.0;
  bool rollout_is_batch_normalize = false;
  bool bypass_mode = false;
  // algorithm.rollout_correction.rollout_rs and rollout_rs_threshold (empty: no rejection):
  // rejected tokens leave the advantages and the update (TrainingSample.rejected_tokens).
  std::string rollout_rs;
  std::string rollout_rs_threshold;
  bool use_kl_loss = true;  // actor.use_kl_loss: the trainer needs reference log-probs
  // algorithm.use_kl_in_reward: each sample's reward is its score minus beta times the sum of
  // the per-token KL (algorithm.kl_penalty) of the old policy to the reference.
  bool use_kl_in_reward = false;
  std::string kl_penalty = "kl";
  std::string kl_ctrl_type = "fixed";  // algorithm.kl_ctrl.*
  double kl_coef = 0.001;
  double target_kl = 0.1;
  int64_t kl_horizon = 10000;
  double reward_timeout_s = 30;  // rlmesh.reward.timeout_s
  // rlmesh.reward.failed_item_score: the score of a sample still unscored after the retries;
  // unset, such a sample stops the step.
  std::optional<double> failed_item_score;
  bool use_reward_model = false;  // reward_model.enable: training samples ask for the model
  // DAPO's overlong shaping of every score (training and validation, as verl's DAPO manager
  // serves both) and whether its metrics are reported.
  grpo::OverlongBuffer overlong;
  bool overlong_log = false;
  int64_t n_devices = 1;             // for perf/throughput (verl divides by GPUs)
  int64_t total_training_steps = 0;  // the run's length, for the trainer's lr schedule
};

// Turns response token ids into text for the reward scorer.
using DecodeFn = std::function<absl::StatusOr<std::string>(const std::vector<int32_t>&)>;

// One validation sample, for trainer.log_val_generations.
struct ValidationSample {
  std::string input;   // the prompt as the scorer saw it
  std::string output;  // the response, special tokens skipped
  double score = 0;
};

struct ValidationResult {
  // val-core/<data_source>/reward/mean@<n>, val-aux/<data_source>/<extra key>/mean@<n>,
  // val/reward/mean, timing_s/testing, val/batches (and val/reward_failed/<kind> with
  // rlmesh.reward.failed_item_score).
  std::map<std::string, double> metrics;
  std::vector<ValidationSample> samples;  // every prompt's n samples, in prompt order
};

struct StepResult {
  std::map<std::string, double> metrics;  // verl names, plus rlmesh/* extras
  v1::WeightVersion weight_version;       // after the update and publish
  int64_t equal_reward_groups = 0;        // groups whose rewards were all equal
  int64_t reward_retries = 0;  // Score calls repeated for items that failed for a passing reason
  int64_t groups_trained = 0;  // groups in the update (the step's prompts less the stale ones)
  int64_t samples_dropped_stale = 0;  // samples older than the staleness bound, not trained on
};

// The reference's log-probs of a step's samples (one result per sample, in group order).
struct ReferencePass {
  v1::ComputeLogProbsResponse response;
  double seconds = 0;        // wall time of the pass
  size_t request_bytes = 0;  // the request's size on the wire
  int64_t reanchored = 0;    // times the warmed-up policy had to be sent again first
};

// The generation half of a step: every prompt's n samples, scored.
struct StepRollout {
  std::vector<GeneratedGroup> groups;
  std::vector<double> scores;      // flattened: group g, sample i -> g * n + i
  std::vector<std::string> texts;  // the responses as scored, flattened the same way
  // With the overlong buffer: what it added to each score (<= 0), flattened the same way.
  std::vector<double> overlong_rewards;
  // Each sample's extra values from the scorer (verl's reward_extra_info), flattened the same
  // way; empty for a sample whose scoring failed.
  std::vector<std::map<std::string, double>> extras;
  // Samples given rlmesh.reward.failed_item_score, by error kind.
  std::map<std::string, int64_t> reward_failed;
  int64_t reward_retries = 0;      // Score calls repeated for items that timed out or were remote
  double gen_compute_seconds = 0;  // the busiest replica's engine time in this call
  double reward_compute_seconds = 0;     // the reward service's scoring time
  double gen_seconds = 0;                // wall time of the generation
  double reward_seconds = 0;             // wall time of the scoring
  absl::Time start;                      // when the generation began
  PoolCounters pool_before, pool_after;  // the pool's books around the generation
  // Set by ComputeReference (the pipelined loop's reference stage, ahead of the update);
  // Train asks the reference itself when it is unset.
  std::optional<ReferencePass> reference;
};

// How Train treats the samples of a rollout that may be older than the policy.
struct TrainOptions {
  // Where timing_s/step starts; the rollout's start when unset (the synchronous step).
  std::optional<absl::Time> step_start;
  // Called before the new weights are published; an error fails the step. The asynchronous
  // loop waits there until no generation is running, so that every generation uses one version.
  std::function<absl::Status()> before_publish;
  // The pool's books (rollout/*) cover the generation only, not the publish: another
  // generation may be running while this step trains.
  bool books_of_generation_only = false;
  // rlmesh.max_staleness and the trainer's weight version before this update: a group with a
  // sample from weights older than trainer_version - max_staleness is not trained on
  // (samples_dropped_stale). Unset: no check (the synchronous step, whose samples are current).
  std::optional<uint64_t> trainer_version;
  int64_t max_staleness = 0;
};

// The indices of the groups whose every sample was started from weights no older than
// trainer_version - max_staleness.
std::vector<size_t> FreshGroups(const std::vector<GeneratedGroup>& groups, uint64_t trainer_version,
                                int64_t max_staleness);

class GrpoStep {
 public:
  // InvalidArgument naming the key for an unknown kl_penalty or bad kl_ctrl settings.
  static absl::StatusOr<std::unique_ptr<GrpoStep>> Create(const GrpoStepOptions& options,
                                                          RolloutPool* pool, RewardClient* reward,
                                                          ReferenceClient* reference,
                                                          TrainerClient* trainer, DecodeFn decode);

  // Generate, then Train: the synchronous step.
  absl::StatusOr<StepResult> Run(int64_t global_step, const std::vector<StepPrompt>& prompts);

  // The step's samples, scored, drawn from the replicas' current weights with the step's seed:
  // Sample, then Score.
  absl::StatusOr<StepRollout> Generate(int64_t global_step, const std::vector<StepPrompt>& prompts);
  // The stages of Generate and Train that the pipelined loop runs on their own threads, each
  // step's in this order; calls for different steps may overlap, but each stage runs on one
  // thread at a time. Sample: the n samples of each prompt. Score: the reward of every
  // sample (UNAVAILABLE when some could not be scored). ComputeReference: the reference's
  // log-probs of every sample, kept in the rollout for Train (nothing without a KL term).
  absl::StatusOr<StepRollout> Sample(int64_t global_step, const std::vector<StepPrompt>& prompts);
  absl::Status Score(const std::vector<StepPrompt>& prompts, StepRollout& rollout);
  absl::Status ComputeReference(const std::vector<StepPrompt>& prompts, StepRollout& rollout);
  // The rest of the step on the samples of Generate(global_step, prompts).
  absl::StatusOr<StepResult> Train(int64_t global_step, const std::vector<StepPrompt>& prompts,
                                   StepRollout rollout, const TrainOptions& train_options);

  // Greedy (or val_kwargs) generation and scoring without training, in batches of
  // `batch_size` prompts (0 = all at once; data.val_batch_size): the mean reward per data
  // source ("val-core/<data_source>/reward/mean@1") and overall, and every sample.
  absl::StatusOr<ValidationResult> Validate(const std::vector<StepPrompt>& prompts,
                                            const v1::SamplingParams& params,
                                            int64_t batch_size = 0);

  // The in-reward KL coefficient (adaptive: after the steps so far); checkpointed and restored
  // by the coordinator.
  double kl_coef() const { return kl_ctrl_.value(); }
  // Reference log-probs are needed for the KL loss or the KL in the reward.
  bool needs_reference() const { return options_.use_kl_loss || options_.use_kl_in_reward; }
  void set_kl_coef(double value) { kl_ctrl_.set_value(value); }

  // The reference must answer with weight version `version` (the warmed-up policy the
  // coordinator sent it). When it answers with another (it restarted with the initial model),
  // `reanchor` sends those weights again and the step asks once more; still others fail the
  // step (FailedPrecondition). Without an anchor any version is taken.
  void SetReferenceAnchor(uint64_t version, std::function<absl::Status()> reanchor) {
    reference_anchor_ = version;
    reanchor_ = std::move(reanchor);
  }

 private:
  GrpoStep(const GrpoStepOptions& options, grpo::KlEstimator kl_penalty, grpo::KlController kl_ctrl,
           RolloutPool* pool, RewardClient* reward, ReferenceClient* reference,
           TrainerClient* trainer, DecodeFn decode);

  // Score calls for one batch at most: items that timed out or whose remote scorer failed are
  // scored again up to this many calls in all.
  static constexpr int kRewardItemAttempts = 3;
  using Scored = StepRollout;
  absl::StatusOr<Scored> GenerateAndScore(const std::vector<StepPrompt>& prompts,
                                          const v1::SamplingParams& params, const std::string& tag,
                                          double* gen_seconds, double* reward_seconds);
  // The halves of GenerateAndScore: the groups of samples (and the replicas' compute time),
  // then the scores and texts (and reward_seconds, reward_retries).
  absl::Status SampleGroups(const std::vector<StepPrompt>& prompts,
                            const v1::SamplingParams& params, const std::string& tag, Scored& out);
  // `training`: with options.use_reward_model, the reward model scores (verl validates with
  // the rule scorers).
  absl::Status ScoreGroups(const std::vector<StepPrompt>& prompts, int32_t n, Scored& out,
                           bool training);
  absl::StatusOr<ReferencePass> RunReference(const std::vector<v1::TokenSequence>& sequences);

  const GrpoStepOptions options_;
  std::optional<grpo::RolloutIsLevel> rollout_is_;                // options_.rollout_is, parsed
  grpo::AdvEstimator adv_estimator_ = grpo::AdvEstimator::kGrpo;  // options_.adv_estimator
  std::vector<grpo::RsOption> rollout_rs_;  // options_.rollout_rs, parsed; empty = none
  const grpo::KlEstimator kl_penalty_;
  grpo::KlController kl_ctrl_;
  RolloutPool* pool_;
  RewardClient* reward_;
  ReferenceClient* reference_;
  TrainerClient* trainer_;
  DecodeFn decode_;
  std::optional<uint64_t> reference_anchor_;
  std::function<absl::Status()> reanchor_;
};

}  // namespace rlmesh::coordinator
