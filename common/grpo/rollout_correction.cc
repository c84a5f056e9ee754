#include "common/grpo/rollout_correction.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpo/tensor_checks.h"
#include "common/status/status_macros.h"

namespace rlmesh::grpo {
namespace {

using internal::CatchTorch;
using internal::CheckFloating;
using internal::CheckRank;
using internal::CheckSameShape;

constexpr double kSafetyBound = 20;

double Value(const torch::Tensor& t) { return t.to(torch::kFloat64).item<double>(); }

// The shared argument checks; returns the boolean mask.
absl::StatusOr<torch::Tensor> CheckInputs(const torch::Tensor& old_logp,
                                          const torch::Tensor& rollout_logp,
                                          const torch::Tensor& mask) {
  RETURN_IF_ERROR(CheckRank(old_logp, 2, "old_logp"));
  RETURN_IF_ERROR(CheckFloating(old_logp, "old_logp"));
  RETURN_IF_ERROR(CheckFloating(rollout_logp, "rollout_logp"));
  RETURN_IF_ERROR(CheckSameShape(rollout_logp, old_logp, "rollout_logp", "old_logp"));
  RETURN_IF_ERROR(CheckSameShape(mask, old_logp, "mask", "old_logp"));
  if (rollout_logp.scalar_type() != old_logp.scalar_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rollout_logp: expected the dtype of old_logp ",
                     std::string(c10::toString(old_logp.scalar_type())), ", got ",
                     std::string(c10::toString(rollout_logp.scalar_type()))));
  }
  auto keep = mask.to(torch::kBool);
  if (!keep.any().item<bool>()) {
    return absl::InvalidArgumentError("mask: expected at least one valid token, got none");
  }
  return keep;
}

// verl's masked means: sum over the mask / (count + 1e-8), over the whole batch or per row
// ([B]; a row without a valid token gives 0, and counts as such in what averages the rows).
torch::Tensor BatchMean(const torch::Tensor& x, const torch::Tensor& keep) {
  return torch::where(keep, x, torch::zeros_like(x)).sum() /
         (keep.sum().to(x.scalar_type()) + 1e-8);
}
torch::Tensor RowMean(const torch::Tensor& x, const torch::Tensor& keep) {
  return torch::where(keep, x, torch::zeros_like(x)).sum(-1) /
         (keep.sum(-1).to(x.scalar_type()) + 1e-8);
}

// Unbiased standard deviation, 0 for fewer than two values (verl's convention).
double Std(const torch::Tensor& v) { return v.numel() > 1 ? Value(v.std()) : 0.0; }

// The largest and the smallest value of x at the valid tokens.
double MaskedMax(const torch::Tensor& x, const torch::Tensor& keep) {
  return Value(x.masked_fill(~keep, -std::numeric_limits<double>::infinity()).max());
}
double MaskedMin(const torch::Tensor& x, const torch::Tensor& keep) {
  return Value(x.masked_fill(~keep, std::numeric_limits<double>::infinity()).min());
}

// The share of `v`'s entries that are true.
double Share(const torch::Tensor& v) { return Value(v.to(torch::kFloat64).mean()); }

}  // namespace

absl::StatusOr<RolloutIsLevel> ParseRolloutIsLevel(absl::string_view name) {
  if (name == "token") return RolloutIsLevel::kToken;
  if (name == "sequence") return RolloutIsLevel::kSequence;
  return absl::InvalidArgumentError(
      absl::StrCat("rollout_is: expected token or sequence, got '", name, "'"));
}

std::string RolloutIsLevelName(RolloutIsLevel level) {
  return level == RolloutIsLevel::kToken ? "token" : "sequence";
}

absl::StatusOr<RolloutIsResult> RolloutIsWeights(const torch::Tensor& old_logp,
                                                 const torch::Tensor& rollout_logp,
                                                 const torch::Tensor& mask, RolloutIsLevel level,
                                                 double threshold, bool batch_normalize) {
  ASSIGN_OR_RETURN(const auto keep, CheckInputs(old_logp, rollout_logp, mask));
  if (!(threshold > 0) || !std::isfinite(threshold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rollout_is_threshold: expected a finite value > 0, got ", threshold));
  }
  return CatchTorch("RolloutIsWeights", [&] {
    torch::NoGradGuard no_grad;
    const double lower = 1.0 / threshold;
    const auto zeros = torch::zeros_like(old_logp);
    const auto log_ratio = torch::where(keep, old_logp - rollout_logp, zeros);
    RolloutIsResult r;
    auto& m = r.metrics;
    torch::Tensor w;
    if (level == RolloutIsLevel::kToken) {
      w = torch::where(keep, log_ratio.clamp(-kSafetyBound, kSafetyBound).exp(), zeros);
      m["rollout_is_max"] = MaskedMax(w, keep);
      m["rollout_is_min"] = MaskedMin(w, keep);
      m["rollout_is_ratio_fraction_high"] = Value(BatchMean((w > threshold).to(w.dtype()), keep));
      m["rollout_is_ratio_fraction_low"] = Value(BatchMean((w < lower).to(w.dtype()), keep));
    } else {
      const auto log_sum = log_ratio.sum(-1, /*keepdim=*/true);  // [B, 1]; 0 for an empty row
      w = torch::where(keep, log_sum.clamp(-kSafetyBound, kSafetyBound).exp().expand_as(log_ratio),
                       zeros);
      // Sequence statistics in log space, so that a ratio beyond the safety bound is counted.
      m["rollout_is_max"] = std::exp(std::min(Value(log_sum.max()), kSafetyBound));
      m["rollout_is_min"] = std::exp(Value(log_sum.min()));
      m["rollout_is_ratio_fraction_high"] = Share(log_sum > std::log(threshold));
      m["rollout_is_ratio_fraction_low"] = Share(log_sum < std::log(lower));
    }
    m["rollout_is_mean"] = Value(BatchMean(w, keep));
    const auto clamped = w.clamp(lower, threshold);
    const auto clamped_mean = BatchMean(clamped, keep);
    if (keep.sum().item<int64_t>() > 1) {
      const double var = Value(BatchMean(clamped.square(), keep) - clamped_mean.square());
      m["rollout_is_std"] = std::sqrt(std::max(var, 0.0));
    } else {
      m["rollout_is_std"] = 0.0;
    }
    m["rollout_is_eff_sample_size"] =
        1.0 / Value(BatchMean((clamped / (clamped_mean + 1e-8)).square(), keep));
    const auto seq_w = RowMean(w, keep);
    m["rollout_is_seq_mean"] = Value(seq_w.mean());
    m["rollout_is_seq_std"] = Std(seq_w);
    m["rollout_is_seq_max"] = Value(seq_w.max());
    m["rollout_is_seq_min"] = Value(seq_w.min());
    m["rollout_is_seq_max_deviation"] = Value((seq_w - 1).abs().max());
    m["rollout_is_seq_fraction_high"] = Share(seq_w > threshold);
    m["rollout_is_seq_fraction_low"] = Share(seq_w < lower);

    w = w.clamp_max(threshold);
    if (batch_normalize) {
      double mean = 0;
      if (level == RolloutIsLevel::kToken) {
        mean = Value(BatchMean(w, keep));
      } else {
        // Over the responses with a valid token (verl's seq_mask).
        const auto valid = keep.any(-1).to(w.dtype());
        mean = Value((RowMean(w, keep) * valid).sum() / valid.sum().clamp_min(1e-8));
      }
      if (mean > 1e-8) {
        w = w / mean;
        m["rollout_is_batch_norm_factor"] = mean;
      } else {
        m["rollout_is_batch_norm_factor"] = 1.0;
      }
    }
    r.weights = w;
    return r;
  });
}

absl::StatusOr<std::map<std::string, double>> OffPolicyMetrics(const torch::Tensor& old_logp,
                                                               const torch::Tensor& rollout_logp,
                                                               const torch::Tensor& mask) {
  ASSIGN_OR_RETURN(const auto keep, CheckInputs(old_logp, rollout_logp, mask));
  return CatchTorch("OffPolicyMetrics", [&] {
    torch::NoGradGuard no_grad;
    std::map<std::string, double> m;
    const auto zeros = torch::zeros_like(old_logp);
    const auto train_mean = RowMean(old_logp, keep);
    const auto rollout_mean = RowMean(rollout_logp, keep);
    m["training_ppl"] = Value((-train_mean).exp().mean());
    m["training_log_ppl"] = Value((-train_mean).mean());
    m["rollout_ppl"] = Value((-rollout_mean).exp().mean());
    m["rollout_log_ppl"] = Value((-rollout_mean).mean());
    const auto log_ratio = torch::where(keep, old_logp - rollout_logp, zeros);
    m["kl"] = Value(BatchMean(-log_ratio, keep));
    m["k3_kl"] = Value(BatchMean(log_ratio.exp() - log_ratio - 1, keep));
    const auto diff = rollout_mean - train_mean;
    m["log_ppl_diff"] = Value(diff.mean());
    m["log_ppl_abs_diff"] = Value(diff.abs().mean());
    m["log_ppl_diff_max"] = Value(diff.max());
    m["log_ppl_diff_min"] = Value(diff.min());
    m["ppl_ratio"] = Value(diff.exp().mean());
    const auto rho = log_ratio.clamp(-kSafetyBound, kSafetyBound).exp();
    m["chi2_token"] = Value(BatchMean(rho.square(), keep)) - 1.0;
    const auto log_sum = log_ratio.sum(-1).clamp(-kSafetyBound, kSafetyBound);
    m["chi2_seq"] = Value((2 * log_sum).exp().mean()) - 1.0;
    return m;
  });
}

absl::StatusOr<RolloutRsResult> RolloutRejection(const torch::Tensor& old_logp,
                                                 const torch::Tensor& rollout_logp,
                                                 const torch::Tensor& mask,
                                                 const std::vector<RsOption>& options) {
  ASSIGN_OR_RETURN(const auto keep, CheckInputs(old_logp, rollout_logp, mask));
  if (options.empty()) return absl::InvalidArgumentError("rollout_rs: no option");
  return CatchTorch("RolloutRejection", [&] {
    torch::NoGradGuard no_grad;
    const auto zeros = torch::zeros_like(old_logp);
    const auto r =
        torch::where(keep, old_logp - rollout_logp, zeros).clamp(-kSafetyBound, kSafetyBound);
    const torch::Tensor k[4] = {torch::Tensor(), -r, 0.5 * r.square(), r.exp() - 1 - r};
    const auto valid_rows = keep.any(-1);
    const double tokens = Value(keep.sum());
    auto combined = torch::ones_like(old_logp);
    RolloutRsResult out;
    auto& m = out.metrics;
    for (const RsOption& o : options) {
      const bool k1 = o.estimator == 1;
      const double hi = k1 ? std::log(o.upper) : o.upper;  // in the statistic's units
      const double lo = k1 ? std::log(o.lower) : 0.0;
      auto in_bounds = [&](const torch::Tensor& v) { return k1 ? (v >= lo) & (v <= hi) : v <= hi; };
      const torch::Tensor& stat = k[o.estimator];
      torch::Tensor token_stat, row_values, token_keep;
      if (o.level == RsLevel::kToken) {
        token_stat = stat;
        token_keep = in_bounds(stat);
        row_values = RowMean(stat, keep);
      } else {
        if (o.level == RsLevel::kSeqSum) {
          row_values = torch::where(keep, stat, zeros).sum(-1);
        } else if (o.level == RsLevel::kSeqMean) {
          row_values = RowMean(stat, keep);
        } else {
          const auto most =
              stat.masked_fill(~keep, -std::numeric_limits<double>::infinity()).amax(-1);
          row_values = torch::where(torch::isneginf(most), torch::zeros_like(most), most);
        }
        token_keep = in_bounds(row_values).unsqueeze(-1).expand_as(keep);
        token_stat = row_values.unsqueeze(-1).expand_as(old_logp);
      }
      const std::string p = absl::StrCat("rollout_rs_", o.name);
      const auto rows = row_values.index({valid_rows});  // at least one: the mask is not empty
      m[p + "_mean"] = Value(BatchMean(token_stat, keep));
      if (o.level == RsLevel::kToken) {
        m[p + "_max"] = MaskedMax(token_stat, keep);
        m[p + "_min"] = MaskedMin(token_stat, keep);
        m[p + "_fraction_high"] = Value(BatchMean((token_stat > hi).to(stat.dtype()), keep));
        m[p + "_fraction_low"] =
            k1 ? Value(BatchMean((token_stat < lo).to(stat.dtype()), keep)) : 0.0;
      } else {
        m[p + "_max"] = Value(rows.max());
        m[p + "_min"] = Value(rows.min());
        m[p + "_fraction_high"] = Share(rows > hi);
        m[p + "_fraction_low"] = k1 ? Share(rows < lo) : 0.0;
      }
      if (tokens > 1) {
        const auto clamped = token_stat.clamp(k1 ? lo : 0.0, hi);
        const auto mean = BatchMean(clamped, keep);
        const double var = Value(BatchMean(clamped.square(), keep) - mean.square());
        m[p + "_std"] = std::sqrt(std::max(var, 0.0));
      } else {
        m[p + "_std"] = 0.0;
      }
      m[p + "_seq_mean"] = Value(rows.mean());
      m[p + "_seq_std"] = Std(rows);
      m[p + "_seq_max"] = Value(rows.max());
      m[p + "_seq_min"] = Value(rows.min());
      m[p + "_seq_max_deviation"] = Value(rows.abs().max());
      m[p + "_seq_fraction_high"] = Share(rows > hi);
      if (k1) m[p + "_seq_fraction_low"] = Share(rows < lo);
      const auto kept = token_keep.to(old_logp.scalar_type());
      combined = combined * kept;
      m[p + "_masked_fraction"] = Value(BatchMean(1 - kept, keep));
      const auto row_rejected = (~token_keep & keep).any(-1);
      m[p + "_seq_masked_fraction"] = Share(row_rejected.index({valid_rows}));
    }
    const auto final_keep = (combined > 0.5) & keep;
    m["rollout_rs_masked_fraction"] = Value(BatchMean(1 - combined, keep));
    m["rollout_rs_seq_masked_fraction"] = Share((~final_keep & keep).any(-1));
    out.mask = torch::where(combined > 0.5, mask, torch::zeros_like(mask));
    return out;
  });
}

}  // namespace rlmesh::grpo
