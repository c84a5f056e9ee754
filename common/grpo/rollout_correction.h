// Rollout correction (verl's `trainer/ppo/rollout_corr_helper.py`, commit b178a3cd): the
// truncated importance-sampling weights that correct for the gap between the policy that
// sampled a response (the rollout replica's log-probs) and the policy being trained (the
// trainer's old log-probs), and the off-policy diagnostics verl logs under `rollout_corr/`.
//
// Conventions as in grpo.h: [B, T] tensors of one floating dtype, masks of 0/1 in any dtype,
// masked-out values (even NaN or inf) never reach a result, stateless. The per-token
// log-ratio is log_ratio = old_logp - rollout_logp, i.e. log(pi_train / pi_rollout).
// Reductions are verl's: masked means divide by count + 1e-8, and a row without a valid
// token takes part in the row averages with a row mean (and log-ratio sum) of 0.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/grpo/rollout_rs_options.h"

namespace rlmesh::grpo {

// verl's rollout_is: at which level the importance ratio is taken.
enum class RolloutIsLevel {
  kToken,     // "token": w_t = exp(clamp(log_ratio_t, -20, 20))
  kSequence,  // "sequence": w = exp(clamp(sum_t log_ratio_t, -20, 20)), the same for the row
};

// "token" or "sequence"; anything else is InvalidArgument naming the string.
absl::StatusOr<RolloutIsLevel> ParseRolloutIsLevel(absl::string_view name);
std::string RolloutIsLevelName(RolloutIsLevel level);

struct RolloutIsResult {
  // [B, T], no grad, 0 at masked-out positions: min(w, threshold), divided by its batch mean
  // when batch_normalize.
  torch::Tensor weights;
  // verl's names without the "rollout_corr/" prefix, computed from the weights before the
  // truncation (rollout_is_mean, _std, _min, _max, _eff_sample_size, _ratio_fraction_high,
  // _ratio_fraction_low, _seq_mean, _seq_std, _seq_min, _seq_max, _seq_max_deviation,
  // _seq_fraction_high, _seq_fraction_low; rollout_is_batch_norm_factor with batch_normalize).
  std::map<std::string, double> metrics;
};

// Truncated importance-sampling weights of verl's compute_rollout_correction_weights.
// threshold > 0 is the upper truncation (rollout_is_threshold) and 1 / threshold the lower
// bound the fraction_low and std metrics use. batch_normalize divides the truncated weights
// by their masked mean (token level: over the valid tokens; sequence level: over the valid
// rows), when that mean is above 1e-8. An empty mask is InvalidArgument, as in verl.
absl::StatusOr<RolloutIsResult> RolloutIsWeights(const torch::Tensor& old_logp,
                                                 const torch::Tensor& rollout_logp,
                                                 const torch::Tensor& mask, RolloutIsLevel level,
                                                 double threshold, bool batch_normalize);

// verl's compute_offpolicy_metrics, names without the prefix: training_ppl, training_log_ppl,
// rollout_ppl, rollout_log_ppl (batch means of each row's exp(-mean logp) and -mean logp),
// kl = mean over tokens of rollout_logp - old_logp, k3_kl = mean of e^r - r - 1,
// log_ppl_diff (_abs_diff, _max, _min) over rows of mean rollout_logp - mean old_logp,
// ppl_ratio = mean of exp(log_ppl_diff), chi2_token = mean of rho^2 - 1 with
// rho = exp(clamp(r, -20, 20)), chi2_seq = mean over rows of exp(2 clamp(sum_t r, -20, 20)) - 1.
// An empty mask is InvalidArgument.
absl::StatusOr<std::map<std::string, double>> OffPolicyMetrics(const torch::Tensor& old_logp,
                                                               const torch::Tensor& rollout_logp,
                                                               const torch::Tensor& mask);

// Rejection sampling (verl's rollout_rs): tokens or whole responses whose divergence between
// the trainer's and the rollout's policy is out of bounds (rollout_rs_options.h) are masked
// out of the update.
struct RolloutRsResult {
  torch::Tensor mask;  // [B, T]: the mask with the rejected tokens set to 0, in mask's dtype
  // verl's names without the "rollout_corr/" prefix: per option rollout_rs_<option>_{mean,
  // max, min, fraction_high, fraction_low, std, seq_mean, seq_std, seq_max, seq_min,
  // seq_max_deviation, seq_fraction_high, seq_fraction_low (k1 only, as in verl),
  // masked_fraction, seq_masked_fraction}, and rollout_rs_masked_fraction,
  // rollout_rs_seq_masked_fraction for all options together.
  std::map<std::string, double> metrics;
};

// verl's compute_rollout_rejection_mask: a token stays when every option keeps it. An empty
// mask or no option is InvalidArgument.
absl::StatusOr<RolloutRsResult> RolloutRejection(const torch::Tensor& old_logp,
                                                 const torch::Tensor& rollout_logp,
                                                 const torch::Tensor& mask,
                                                 const std::vector<RsOption>& options);

}  // namespace rlmesh::grpo
