#include "common/grpo/grpo.h"

#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpo/tensor_checks.h"
#include "common/status/status_macros.h"

namespace rlmesh::grpo {
using internal::CatchTorch;
using internal::CheckClipRatios;
using internal::CheckFloating;
using internal::CheckPolicyInputs;
using internal::CheckRank;
using internal::CheckSameShape;
using internal::MaskedMean;
using internal::ShapeString;

absl::StatusOr<KlEstimator> ParseKlType(absl::string_view name) {
  const bool plus = absl::EndsWith(name, "+");
  const absl::string_view base = plus ? name.substr(0, name.size() - 1) : name;
  if (base == "kl" || base == "k1") return KlEstimator(KlType::kKl, plus);
  if (base == "abs") return KlEstimator(KlType::kAbs, plus);
  if (base == "mse" || base == "k2") return KlEstimator(KlType::kMse, plus);
  if (base == "low_var_kl" || base == "k3") return KlEstimator(KlType::kLowVarKl, plus);
  return absl::InvalidArgumentError(
      absl::StrCat("kl type: expected one of kl, k1, abs, mse, k2, low_var_kl, k3, each optionally "
                   "followed by + (straight-through k2 gradient), got \"",
                   name, "\""));
}

std::string KlTypeName(KlEstimator estimator) {
  const char* base = "unknown";
  switch (estimator.type) {
    case KlType::kKl:
      base = "kl";
      break;
    case KlType::kAbs:
      base = "abs";
      break;
    case KlType::kMse:
      base = "mse";
      break;
    case KlType::kLowVarKl:
      base = "low_var_kl";
      break;
  }
  return absl::StrCat(base, estimator.straight_through ? "+" : "");
}

absl::StatusOr<torch::Tensor> KlPenalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                                        KlEstimator estimator) {
  RETURN_IF_ERROR(CheckFloating(logp, "logp"));
  RETURN_IF_ERROR(CheckFloating(ref_logp, "ref_logp"));
  RETURN_IF_ERROR(CheckSameShape(ref_logp, logp, "ref_logp", "logp"));
  return CatchTorch("KlPenalty", [&]() -> torch::Tensor {
    torch::Tensor value;
    switch (estimator.type) {
      case KlType::kKl:
        value = logp - ref_logp;
        break;
      case KlType::kAbs:
        value = (logp - ref_logp).abs();
        break;
      case KlType::kMse:
        value = 0.5 * (logp - ref_logp).square();
        break;
      case KlType::kLowVarKl: {
        const auto x = (ref_logp - logp).clamp(-20, 20);
        value = (x.exp() - x - 1).clamp(-10, 10);
        break;
      }
    }
    if (!estimator.straight_through || estimator.type == KlType::kMse) return value;
    const auto k2 = 0.5 * (logp - ref_logp).square();
    return k2 - k2.detach() + value.detach();
  });
}

absl::StatusOr<LossAggMode> ParseLossAggMode(absl::string_view name) {
  if (name == "token-mean") return LossAggMode::kTokenMean;
  if (name == "seq-mean-token-sum") return LossAggMode::kSeqMeanTokenSum;
  if (name == "seq-mean-token-mean") return LossAggMode::kSeqMeanTokenMean;
  if (name == "seq-mean-token-sum-norm") return LossAggMode::kSeqMeanTokenSumNorm;
  return absl::InvalidArgumentError(
      absl::StrCat("loss_agg_mode: expected one of token-mean, seq-mean-token-sum, "
                   "seq-mean-token-mean, seq-mean-token-sum-norm, got \"",
                   name, "\""));
}

std::string LossAggModeName(LossAggMode mode) {
  switch (mode) {
    case LossAggMode::kTokenMean:
      return "token-mean";
    case LossAggMode::kSeqMeanTokenSum:
      return "seq-mean-token-sum";
    case LossAggMode::kSeqMeanTokenMean:
      return "seq-mean-token-mean";
    case LossAggMode::kSeqMeanTokenSumNorm:
      return "seq-mean-token-sum-norm";
  }
  return "unknown";
}

absl::StatusOr<torch::Tensor> AggLoss(const torch::Tensor& loss, const torch::Tensor& mask,
                                      LossAggMode mode, double loss_scale_factor) {
  RETURN_IF_ERROR(CheckRank(loss, 2, "loss"));
  RETURN_IF_ERROR(CheckFloating(loss, "loss"));
  RETURN_IF_ERROR(CheckSameShape(mask, loss, "mask", "loss"));
  return CatchTorch("AggLoss", [&]() -> torch::Tensor {
    const auto keep = mask.to(torch::kBool);
    const auto dtype = loss.scalar_type();
    const auto row_sum = torch::where(keep, loss, torch::zeros_like(loss)).sum(1);
    const auto row_count = keep.sum(1).to(dtype);
    switch (mode) {
      case LossAggMode::kTokenMean:
        return row_sum.sum() / row_count.sum().clamp_min(1);
      case LossAggMode::kSeqMeanTokenSum: {
        const auto valid_rows = (row_count > 0).sum().to(dtype);
        return row_sum.sum() / valid_rows.clamp_min(1);
      }
      case LossAggMode::kSeqMeanTokenMean: {
        const auto valid_rows = (row_count > 0).sum().to(dtype);
        return (row_sum / (row_count + 1e-8)).sum() / valid_rows.clamp_min(1);
      }
      case LossAggMode::kSeqMeanTokenSumNorm: {
        const double factor =
            loss_scale_factor > 0 ? loss_scale_factor : static_cast<double>(loss.size(1));
        return row_sum.sum() / factor;
      }
    }
    return torch::Tensor();
  });
}

absl::StatusOr<PolicyLossResult> PolicyLoss(
    const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& advantages,
    const torch::Tensor& mask, double clip_low, double clip_high, double clip_c, LossAggMode mode,
    double loss_scale_factor, const torch::Tensor& is_weights) {
  RETURN_IF_ERROR(CheckPolicyInputs(old_logp, logp, advantages, mask, is_weights));
  RETURN_IF_ERROR(CheckClipRatios(clip_low, clip_high));
  if (!(clip_c > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_ratio_c: expected a value > 1 (dual-clip bound), got ", clip_c));
  }
  ASSIGN_OR_RETURN(
      auto parts, CatchTorch("PolicyLoss", [&] {
        const auto keep = mask.to(torch::kBool);
        const auto log_ratio = (logp - old_logp).clamp(-20, 20);
        const auto ratio = log_ratio.exp();
        const auto l1 = -advantages * ratio;
        const auto l2 = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high);
        const auto lc = torch::maximum(l1, l2);
        const auto l3 = -advantages * clip_c;
        const auto negative = advantages < 0;
        const auto token_loss = torch::where(negative, torch::minimum(lc, l3), lc);
        PolicyLossResult r;
        {
          torch::NoGradGuard no_grad;
          const auto dtype = token_loss.scalar_type();
          r.clipfrac = MaskedMean((l2 > l1).to(dtype), keep);
          // verl reports the mean of the clamped log-ratio; equal to old - logp within ±20.
          r.ppo_kl = MaskedMean(-log_ratio, keep);
          r.clipfrac_lower = MaskedMean(((lc > l3) & negative).to(dtype), keep);
        }
        if (is_weights.defined()) {
          // Zeroed behind the mask first, so that a NaN there cannot reach the gradient.
          const auto w = is_weights.detach().to(token_loss.scalar_type());
          return std::make_pair(token_loss * torch::where(keep, w, torch::zeros_like(w)), r);
        }
        return std::make_pair(token_loss, r);
      }));
  ASSIGN_OR_RETURN(parts.second.loss, AggLoss(parts.first, mask, mode, loss_scale_factor));
  return parts.second;
}

absl::StatusOr<torch::Tensor> EntropyFromLogits(const torch::Tensor& logits) {
  RETURN_IF_ERROR(CheckFloating(logits, "logits"));
  if (logits.dim() < 1 || logits.size(-1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits: expected [..., V] with V >= 1, got shape ", ShapeString(logits)));
  }
  return CatchTorch("EntropyFromLogits", [&] {
    const auto probs = torch::softmax(logits, -1);
    return torch::logsumexp(logits, -1) - (probs * logits).sum(-1);
  });
}

}  // namespace rlmesh::grpo
