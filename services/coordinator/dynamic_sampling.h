// DAPO's dynamic sampling (algorithm.filter_groups, verl's DAPO recipe): a step generates
// rounds of data.gen_batch_size prompts, keeps the groups whose filter metric varies across
// their samples (or that have a single sample), and stops once data.train_batch_size groups
// are kept; the surplus of the last round is dropped, as verl drops it, and counted. More than
// max_num_gen_batches rounds (when > 0) fail the step.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/coordinator/grpo_step.h"

namespace rlmesh::coordinator {

// The value a group is filtered on, per sample of a scored rollout: "acc" and "score" are the
// scorer's score (before the overlong shaping: rollout.scores minus overlong_rewards),
// "seq_reward" and "seq_final_reward" the shaped score (the configuration refuses
// seq_final_reward with the in-reward KL, which is applied after the filter).
absl::StatusOr<std::vector<double>> FilterMetricValues(const StepRollout& rollout,
                                                       const std::string& metric);

// Indices of the groups (of n samples each) whose values are not all equal, or of one sample.
std::vector<size_t> GroupsWithSpread(const std::vector<double>& values, int32_t n);

// Appends groups `which` of `from` (prompts and rollout: samples, scores, texts, overlong
// rewards) to `prompts` / `into`, adds from's timings and counts to into's, and takes its
// pool books as the latest.
void AppendGroups(const std::vector<StepPrompt>& from_prompts, StepRollout&& from,
                  const std::vector<size_t>& which, int32_t n, std::vector<StepPrompt>* prompts,
                  StepRollout* into);

struct DynamicSamplingOptions {
  int64_t train_batch_size = 0;  // groups a step trains on
  int32_t n = 1;                 // samples per group
  std::string metric;            // algorithm.filter_groups.metric
  int64_t max_num_gen_batches = 0;
};

// One round: its prompts and their scored rollout.
struct SampledRound {
  std::vector<StepPrompt> prompts;
  StepRollout rollout;
};

struct DynamicBatch {
  std::vector<StepPrompt> prompts;  // train_batch_size of them
  StepRollout rollout;
  int64_t rounds = 0;          // verl's train/num_gen_batches
  int64_t dropped_groups = 0;  // without spread
  int64_t surplus_groups = 0;  // kept, beyond train_batch_size, in the last round
};

// Runs `round(r)` for r = 0, 1, ... until options.train_batch_size groups with spread are kept.
// FAILED_PRECONDITION naming algorithm.filter_groups.max_num_gen_batches when the limit is
// reached first; a round's error is returned as it is.
absl::StatusOr<DynamicBatch> SampleDynamically(
    const DynamicSamplingOptions& options,
    const std::function<absl::StatusOr<SampledRound>(int64_t round)>& round);

}  // namespace rlmesh::coordinator
