// verl's advantage estimators (algorithm.adv_estimator, verl trainer/ppo/core_algos.py at
// b178a3cd) as pure functions over one batch: each sequence's token rewards (verl's
// token_level_rewards: the score at the last response token, minus the in-reward KL per token
// when that is on), its response mask and its group (the prompt's uid). Computed in float64;
// docs/grpo.md ("Advantage estimators") gives each formula, its edge cases and where verl's
// own variants disagree.
#pragma once

#include <torch/torch.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::grpo {

enum class AdvEstimator {
  kGrpo,                       // "grpo": (s - mean) / (std + eps), or s - mean (Dr. GRPO)
  kGrpoVectorized,             // "grpo_vectorized": grpo with the variance floored at eps
  kGrpoPassk,                  // "grpo_passk": the best sample of a group gets r_max - r_2nd
  kRloo,                       // "rloo": leave-one-out baseline; a group of one keeps s
  kRlooVectorized,             // "rloo_vectorized": the same; a group of one gets 0
  kOpo,                        // "opo": the length-weighted group mean as the baseline
  kGpg,                        // "gpg": (s - mean) x batch / nonzero scores
  kReinforcePlusPlus,          // "reinforce_plus_plus": discounted returns, whitened
  kReinforcePlusPlusBaseline,  // "reinforce_plus_plus_baseline": s - mean, whitened
};

// The estimator of a verl name; INVALID_ARGUMENT naming the known ones otherwise.
absl::StatusOr<AdvEstimator> ParseAdvEstimator(absl::string_view name);
absl::string_view AdvEstimatorName(AdvEstimator estimator);

struct AdvantageOptions {
  bool norm_adv_by_std = true;  // algorithm.norm_adv_by_std_in_grpo (grpo, grpo_passk)
  double epsilon = 1e-6;        // verl's default for every estimator that takes one
  double gamma = 1.0;           // algorithm.gamma (reinforce_plus_plus)
};

struct Advantages {
  torch::Tensor advantages;  // [B, T] float64, 0 outside the mask
  torch::Tensor returns;     // [B, T] float64: verl's returns (equal to advantages but for
                             // reinforce_plus_plus, whose returns are the discounted rewards)
};

// token_rewards and response_mask: [B, T] (any floating dtype; the mask 0/1); group_ids: [B]
// integers, equal for the samples of one prompt. INVALID_ARGUMENT for mismatched shapes, a
// group of one under grpo_passk, and a batch of fewer than two response tokens under the
// whitening estimators (reinforce_plus_plus, reinforce_plus_plus_baseline), as verl raises.
absl::StatusOr<Advantages> EstimateAdvantages(AdvEstimator estimator,
                                              const torch::Tensor& token_rewards,
                                              const torch::Tensor& response_mask,
                                              const torch::Tensor& group_ids,
                                              const AdvantageOptions& options = {});

}  // namespace rlmesh::grpo
