// verl's policy-loss modes (actor_rollout_ref.actor.policy_loss.loss_mode, verl
// trainer/ppo/core_algos.py at b178a3cd) over torch::Tensor: vanilla (grpo::PolicyLoss, the
// dual-clip PPO loss), gspo, sapo, gpg, clip_cov, kl_cov, geo_mean and cispo. Each returns the
// loss and the metrics verl's function returns for that mode, no more; docs/grpo.md ("Policy-loss
// modes") gives every formula, which aggregation each honours and how the tests were derived.
//
// Same contract as grpo.h: float32 or float64, differentiable w.r.t. logp, stateless (clip_cov
// draws from the generator it is given), masks of 0/1 in any dtype, and values behind the mask
// (NaN included) never reach a result or a gradient.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/grpo/grpo.h"

namespace rlmesh::grpo {

enum class PolicyLossMode {
  kVanilla,  // "vanilla": dual-clip PPO (grpo::PolicyLoss)
  kGspo,     // "gspo": the sequence's geometric-mean ratio, clipped; seq-mean-token-mean
  kSapo,     // "sapo": a sigmoid gate of the token ratio instead of a clip; seq-mean-token-mean
  kGpg,      // "gpg": -A log pi, no ratio
  kClipCov,  // "clip_cov": PPO clip, and a few high-covariance tokens drop out of the loss
  kKlCov,    // "kl_cov": unclipped ratio, and the top-covariance tokens pay |log ratio|
  kGeoMean,  // "geo_mean": GMPO, the sequence's geometric mean of token-clipped ratios
  kCispo,    // "cispo": -sg(clip(ratio)) A log pi
};

// The mode of a verl name; INVALID_ARGUMENT naming the known ones otherwise (verl's
// "bypass_mode" is chosen by algorithm.rollout_correction.bypass_mode, not by this key).
absl::StatusOr<PolicyLossMode> ParsePolicyLossMode(absl::string_view name);
absl::string_view PolicyLossModeName(PolicyLossMode mode);

// actor_rollout_ref.actor.* and actor.policy_loss.* as the modes read them (verl's defaults).
struct PolicyLossOptions {
  PolicyLossMode mode = PolicyLossMode::kVanilla;
  double clip_low = 0.2;   // clip_ratio_low: vanilla, gspo, clip_cov, geo_mean, cispo
  double clip_high = 0.2;  // clip_ratio_high: the same modes
  double clip_c = 3.0;     // clip_ratio_c: vanilla
  LossAggMode agg =
      LossAggMode::kTokenMean;     // loss_agg_mode: vanilla, gpg, clip_cov, kl_cov, cispo
  double loss_scale_factor = -1;   // seq-mean-token-sum-norm's divisor (AggLoss)
  double tau_pos = 1.0;            // sapo: the gate's temperature where A > 0
  double tau_neg = 1.05;           // sapo: where A <= 0
  double clip_cov_ratio = 0.0002;  // clip_cov: share of the valid tokens to drop
  double clip_cov_lb = 1.0;        // clip_cov: covariance window (lb, ub)
  double clip_cov_ub = 5.0;
  double kl_cov_ratio = 0.0002;  // kl_cov: share of the valid tokens that pay the KL
  double ppo_kl_coef = 0.1;      // kl_cov: its coefficient
};

// INVALID_ARGUMENT naming the option (by its config key's last part) where the mode reads it
// and it is out of range: clip ratios as PolicyLoss needs them, taus > 0, the covariance
// ratios > 0 (as verl asserts).
absl::Status CheckPolicyLossOptions(const PolicyLossOptions& options);

// How a mode aggregates its token losses, which the actor's micro-batch weights must follow:
// the configured loss_agg_mode, seq-mean-token-mean (gspo and sapo, whatever is configured, as
// verl does), or the plain mean over every row of the batch, empty rows included (geo_mean).
struct PolicyAggregation {
  bool row_mean = false;  // geo_mean
  LossAggMode mode = LossAggMode::kTokenMean;
};
PolicyAggregation PolicyLossAggregation(const PolicyLossOptions& options);

// Which of PolicyLossResult's metrics a mode reports (verl's pg_metrics keys for that mode).
struct ReportedMetrics {
  bool clipfrac = false, ppo_kl = false, clipfrac_lower = false;
};
ReportedMetrics PolicyLossMetrics(PolicyLossMode mode);

// The loss of options.mode over old_logp, logp, advantages, mask (all [B, T]), each token's loss
// multiplied by is_weights [B, T] when defined (geo_mean: by the row's geometric mean of them,
// as verl does). PolicyLossResult's metric tensors are defined only for the metrics verl's
// function of that mode returns (gpg: none; clip_cov: clipfrac and ppo_kl; kl_cov: ppo_kl, the
// mean |log ratio|; gspo, sapo and cispo report clipfrac_lower as 0, and sapo clipfrac as 0).
// clip_cov picks its tokens with torch::randperm on `generator` (the default generator when
// none is given), as verl picks them with the global one.
absl::StatusOr<PolicyLossResult> ComputePolicyLoss(
    const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& advantages,
    const torch::Tensor& mask, const PolicyLossOptions& options,
    const torch::Tensor& is_weights = {}, std::optional<at::Generator> generator = std::nullopt);

}  // namespace rlmesh::grpo
