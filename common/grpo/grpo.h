// GRPO math over torch::Tensor, matching verl's `trainer/ppo/core_algos.py` (commit b178a3cd):
// group-relative advantages, the KL estimators, loss aggregation, the dual-clip PPO policy
// loss and the entropy of a categorical distribution given its logits.
//
// Every function works in float32 and float64 (the result has the dtype of the floating-point
// inputs), is differentiable where the formula is, and is stateless, so any thread may call
// it. Masks are [B, T] tensors of 0/1 in any dtype (bool, integer or floating). Values at
// masked-out positions never reach a result, not even when they are NaN or infinite.
// Shape or dtype errors are reported as absl::InvalidArgument naming the argument.
#pragma once

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::grpo {

// The per-token KL estimators (Schulman, "Approximating KL divergence").
enum class KlType {
  kKl,        // "kl" or "k1": logp - ref_logp
  kAbs,       // "abs": |logp - ref_logp|
  kMse,       // "mse" or "k2": 0.5 (logp - ref_logp)^2
  kLowVarKl,  // "low_var_kl" or "k3": x = clamp(ref - logp, -20, 20); clamp(e^x - x - 1, -10, 10)
};

// An estimator and verl's trailing "+" (as in "k3+"): straight through, the value is the
// estimator's and the gradient is k2's, 0.5 (logp - ref_logp)^2, whose expected gradient is the
// KL's. Without a gradient (the in-reward penalty) the "+" changes nothing.
struct KlEstimator {
  KlEstimator(KlType type = KlType::kLowVarKl, bool straight_through = false)  // NOLINT
      : type(type), straight_through(straight_through) {}
  bool operator==(const KlEstimator&) const = default;

  KlType type;
  bool straight_through;
};

// Parses verl's names (kl, k1, abs, mse, k2, low_var_kl, k3), each optionally followed by "+".
// Anything else, including verl's "full" (which verl does not implement either), is
// InvalidArgument naming the string.
absl::StatusOr<KlEstimator> ParseKlType(absl::string_view name);
// The canonical verl name ("kl", "abs", "mse", "low_var_kl", with "+" when straight through).
std::string KlTypeName(KlEstimator estimator);

// Per-token KL estimate [B, T] of logp [B, T] against ref_logp [B, T] (same shape).
// Unmasked: aggregate it with AggLoss.
absl::StatusOr<torch::Tensor> KlPenalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                                        KlEstimator estimator);

// How a [B, T] token loss becomes a scalar (verl's loss_agg_mode). With S_i = sum_t L*M and
// n_i = sum_t M:
enum class LossAggMode {
  kTokenMean,           // "token-mean": sum_i S_i / sum_i n_i
  kSeqMeanTokenSum,     // "seq-mean-token-sum": mean of S_i over rows with n_i > 0
  kSeqMeanTokenMean,    // "seq-mean-token-mean": mean of S_i / (n_i + 1e-8) over rows with n_i > 0
  kSeqMeanTokenSumNorm  // "seq-mean-token-sum-norm": sum_i S_i / loss_scale_factor (default T)
};

absl::StatusOr<LossAggMode> ParseLossAggMode(absl::string_view name);
std::string LossAggModeName(LossAggMode mode);

// Aggregates loss [B, T] under mask [B, T] into a 0-dim tensor of loss's dtype.
// Rows without a valid token are left out of the seq-mean denominators, as verl does. When the
// whole mask is empty the result is 0 with a zero gradient for every mode (verl at b178a3cd
// divides 0 by 0 there and returns NaN; we return 0 so that an all-padding micro-batch adds
// nothing instead of poisoning the step). loss_scale_factor is used by seq-mean-token-sum-norm
// only; a value <= 0 means T (loss.size(1)).
absl::StatusOr<torch::Tensor> AggLoss(const torch::Tensor& loss, const torch::Tensor& mask,
                                      LossAggMode mode, double loss_scale_factor = -1);

struct PolicyLossResult {
  torch::Tensor loss;            // 0-dim, differentiable w.r.t. logp
  torch::Tensor clipfrac;        // 0-dim, masked mean of (L2 > L1), no grad
  torch::Tensor ppo_kl;          // 0-dim, masked mean of (old_logp - logp), no grad
  torch::Tensor clipfrac_lower;  // 0-dim, masked mean of ((Lc > -A c) and A < 0), no grad
};

// verl's vanilla dual-clip PPO loss. All tensors [B, T] of the same shape.
// rho = exp(clamp(logp - old_logp, -20, 20)); L1 = -A rho; L2 = -A clip(rho, 1 - clip_low,
// 1 + clip_high); Lc = max(L1, L2); token loss = Lc for A >= 0 and min(Lc, -A clip_c) for
// A < 0; loss = AggLoss(token loss x is_weights, mask, mode, loss_scale_factor), where
// is_weights [B, T] (the rollout correction's importance weights, no gradient) is 1 when
// undefined. The three metrics are masked means over the valid tokens (0 for an empty mask),
// unweighted. Requires clip_low in [0, 1), clip_high >= 0 and clip_c > 1 (InvalidArgument
// otherwise).
absl::StatusOr<PolicyLossResult> PolicyLoss(
    const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& advantages,
    const torch::Tensor& mask, double clip_low, double clip_high, double clip_c, LossAggMode mode,
    double loss_scale_factor = -1, const torch::Tensor& is_weights = {});

// Entropy of softmax(logits) over the last axis: logits [B, T, V] (or any [..., V]) ->
// [B, T], computed stably as logsumexp(z) - sum softmax(z) z. Differentiable.
absl::StatusOr<torch::Tensor> EntropyFromLogits(const torch::Tensor& logits);

}  // namespace rlmesh::grpo
