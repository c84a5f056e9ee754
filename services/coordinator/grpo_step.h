// One synchronous GRPO step, driven through the service interfaces of clients.h:
//   generate n samples per prompt (RolloutPool) -> score them (reward) -> group advantages
//   -> reference and old log-probs (in parallel) -> trainer update -> publish the new weights
// and the step's metrics with verl's names. No gRPC inside; the coordinator owns the loop,
// the data and the checkpoints. Not thread-safe: one step at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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
  int32_t n = 8;                      // actor_rollout_ref.rollout.n
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = -1;
  int32_t max_response_length = 512;  // data.max_response_length
  uint64_t seed = 1;                  // sampling seed of the run; the step is mixed in
  bool norm_adv_by_std = true;        // algorithm.norm_adv_by_std_in_grpo
  bool use_kl_loss = true;            // actor.use_kl_loss: fetch reference log-probs
  double reward_timeout_s = 30;       // rlmesh.reward.timeout_s
  int64_t n_devices = 1;              // for perf/throughput (verl divides by GPUs)
};

// Turns response token ids into text for the reward scorer.
using DecodeFn = std::function<absl::StatusOr<std::string>(const std::vector<int32_t>&)>;

struct StepResult {
  std::map<std::string, double> metrics;  // verl names, plus rlmesh/* extras
  v1::WeightVersion weight_version;       // after the update and publish
  int64_t equal_reward_groups = 0;        // groups whose rewards were all equal
  int64_t reward_errors = 0;              // samples whose scoring failed (scored 0)
};

class GrpoStep {
 public:
  GrpoStep(const GrpoStepOptions& options, RolloutPool* pool, RewardClient* reward,
           ReferenceClient* reference, TrainerClient* trainer, DecodeFn decode);

  absl::StatusOr<StepResult> Run(int64_t global_step, const std::vector<StepPrompt>& prompts);

  // Greedy (or val_kwargs) generation and scoring without training: the mean reward per
  // data source ("val-core/<data_source>/reward/mean@1") and overall.
  absl::StatusOr<std::map<std::string, double>> Validate(const std::vector<StepPrompt>& prompts,
                                                         const v1::SamplingParams& params);

 private:
  struct Scored {
    std::vector<GeneratedGroup> groups;
    std::vector<double> scores;  // flattened: group g, sample i -> g * n + i
    int64_t errors = 0;
    double gen_compute_seconds = 0;     // the busiest replica's engine time in this call
    double reward_compute_seconds = 0;  // the reward service's scoring time
  };
  absl::StatusOr<Scored> GenerateAndScore(const std::vector<StepPrompt>& prompts,
                                          const v1::SamplingParams& params,
                                          const std::string& tag, double* gen_seconds,
                                          double* reward_seconds);

  const GrpoStepOptions options_;
  RolloutPool* pool_;
  RewardClient* reward_;
  ReferenceClient* reference_;
  TrainerClient* trainer_;
  DecodeFn decode_;
};

// Group advantages of flattened scores (group g owns scores [g*n, (g+1)*n)), as
// rlmesh::grpo::GroupAdvantages computes them.
absl::StatusOr<std::vector<double>> ComputeGroupAdvantages(const std::vector<double>& scores,
                                                           int32_t n, bool norm_by_std);

}  // namespace rlmesh::coordinator
