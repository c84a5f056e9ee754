#include "common/grpo/policy_losses.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpo/tensor_checks.h"
#include "common/status/status_macros.h"

namespace rlmesh::grpo {
namespace {

using internal::CatchTorch;
using internal::CheckClipRatios;
using internal::CheckPolicyInputs;
using internal::MaskedMean;

constexpr std::array<std::pair<PolicyLossMode, absl::string_view>, 8> kModes = {{
    {PolicyLossMode::kVanilla, "vanilla"},
    {PolicyLossMode::kGspo, "gspo"},
    {PolicyLossMode::kSapo, "sapo"},
    {PolicyLossMode::kGpg, "gpg"},
    {PolicyLossMode::kClipCov, "clip_cov"},
    {PolicyLossMode::kKlCov, "kl_cov"},
    {PolicyLossMode::kGeoMean, "geo_mean"},
    {PolicyLossMode::kCispo, "cispo"},
}};

bool ReadsClipRange(PolicyLossMode mode) {
  return mode == PolicyLossMode::kVanilla || mode == PolicyLossMode::kGspo ||
         mode == PolicyLossMode::kClipCov || mode == PolicyLossMode::kGeoMean ||
         mode == PolicyLossMode::kCispo;
}

torch::Tensor Zeroed(const torch::Tensor& x, const torch::Tensor& keep) {
  return torch::where(keep, x, torch::zeros_like(x));
}

// Each token's loss times its importance weight (no gradient), zeroed behind the mask first so
// that a NaN there cannot reach the gradient.
torch::Tensor Weighted(const torch::Tensor& token_loss, const torch::Tensor& is_weights,
                       const torch::Tensor& keep) {
  if (!is_weights.defined()) return token_loss;
  return token_loss * Zeroed(is_weights.detach().to(token_loss.scalar_type()), keep);
}

torch::Tensor Fraction(const torch::Tensor& flags, const torch::Tensor& keep, torch::Dtype dtype) {
  return MaskedMean(flags.to(dtype), keep);
}

struct Parts {
  torch::Tensor token_loss;  // [B, T], for AggLoss; undefined when `loss` is already final
  torch::Tensor loss;        // geo_mean's row mean
  PolicyLossResult metrics;
};

Parts Gspo(const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& adv,
           const torch::Tensor& keep, const PolicyLossOptions& o, const torch::Tensor& w) {
  const auto dtype = logp.scalar_type();
  const auto log_ratio = logp - old_logp;
  const auto lengths = keep.sum(1).to(dtype).clamp_min(1);
  const auto seq_log_ratio = log_ratio.sum(1) / lengths;
  // The sequence's ratio with the token's gradient: sg[s_i] pi / sg[pi].
  const auto log_s = (logp - logp.detach() + seq_log_ratio.detach().unsqueeze(1)).clamp_max(10);
  const auto s = log_s.exp();
  const auto l1 = -adv * s;
  const auto l2 = -adv * s.clamp(1 - o.clip_low, 1 + o.clip_high);
  Parts p;
  p.token_loss = Weighted(torch::maximum(l1, l2), w, keep);
  torch::NoGradGuard no_grad;
  p.metrics.clipfrac = Fraction(l2 > l1, keep, dtype);
  p.metrics.ppo_kl = MaskedMean(-log_ratio, keep);
  p.metrics.clipfrac_lower = torch::zeros({}, logp.options());
  return p;
}

Parts Sapo(const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& adv,
           const torch::Tensor& keep, const PolicyLossOptions& o, const torch::Tensor& w) {
  const auto log_ratio = (logp - old_logp).clamp(-20, 20);
  const auto ratio = log_ratio.exp();
  const auto tau =
      torch::where(adv > 0, torch::full_like(adv, o.tau_pos), torch::full_like(adv, o.tau_neg));
  const auto gate = torch::sigmoid(tau * (ratio - 1)) * (4.0 / tau);
  Parts p;
  p.token_loss = Weighted(-gate * adv, w, keep);
  torch::NoGradGuard no_grad;
  p.metrics.clipfrac = torch::zeros({}, logp.options());
  p.metrics.ppo_kl = MaskedMean(-log_ratio, keep);
  p.metrics.clipfrac_lower = torch::zeros({}, logp.options());
  return p;
}

Parts ClipCov(const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& adv,
              const torch::Tensor& keep, const PolicyLossOptions& o, const torch::Tensor& w,
              std::optional<at::Generator> generator) {
  const auto dtype = logp.scalar_type();
  const auto log_ratio = logp - old_logp;
  const auto ratio = log_ratio.exp();
  const auto l1 = -adv * ratio;
  const auto l2 = -adv * ratio.clamp(1 - o.clip_low, 1 + o.clip_high);
  auto keep_token = torch::ones_like(adv);
  Parts p;
  {
    torch::NoGradGuard no_grad;
    const auto lp = logp.detach();
    // Tokens the PPO clip already holds are not candidates.
    const auto clipped = (l2 > l1) & keep;
    const auto cov = (adv - MaskedMean(adv, keep)) * (lp - MaskedMean(lp, keep));
    const auto candidates = keep & ~clipped & (cov < o.clip_cov_ub) & (cov > o.clip_cov_lb);
    const auto valid = keep.sum().item<int64_t>();
    const int64_t wanted =
        std::max<int64_t>(static_cast<int64_t>(o.clip_cov_ratio * static_cast<double>(valid)), 1);
    const auto at = torch::nonzero(candidates);  // [K, 2], row-major order
    const int64_t k = at.size(0);
    if (k > 0) {
      const auto perm = generator.has_value() ? torch::randperm(k, *generator, torch::kInt64)
                                              : torch::randperm(k, torch::kInt64);
      const auto chosen = at.index_select(0, perm.narrow(0, 0, std::min(wanted, k)));
      const auto flat = chosen.select(1, 0) * adv.size(1) + chosen.select(1, 1);
      keep_token.view(-1).index_fill_(0, flat, 0);
    }
    p.metrics.clipfrac = Fraction(keep_token == 0, keep, dtype);
    p.metrics.ppo_kl = MaskedMean(-log_ratio, keep);
  }
  p.token_loss = Weighted(torch::maximum(l1, l2) * keep_token, w, keep);
  return p;
}

Parts KlCov(const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& adv,
            const torch::Tensor& keep, const PolicyLossOptions& o, const torch::Tensor& w) {
  const auto log_ratio = logp - old_logp;
  const auto abs_kl = log_ratio.abs();
  const auto pg = -adv * log_ratio.exp();
  auto pays = torch::zeros_like(keep);
  Parts p;
  {
    torch::NoGradGuard no_grad;
    const auto flat_keep = keep.reshape(-1);
    const auto at = torch::nonzero(flat_keep).reshape(-1);  // valid tokens, row-major
    const int64_t n = at.size(0);
    if (n > 0) {
      const auto a = adv.reshape(-1).index_select(0, at);
      const auto l = logp.detach().reshape(-1).index_select(0, at);
      const auto cov = (a - a.mean()) * (l - l.mean());
      const int64_t top =
          std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * o.kl_cov_ratio));
      const auto picked = std::get<1>(torch::topk(cov, top, /*dim=*/0, /*largest=*/true));
      pays.reshape(-1).index_fill_(0, at.index_select(0, picked), true);
    }
    p.metrics.ppo_kl = MaskedMean(abs_kl, keep);
  }
  p.token_loss = Weighted(torch::where(pays, pg + o.ppo_kl_coef * abs_kl, pg), w, keep);
  return p;
}

Parts GeoMean(const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& adv,
              const torch::Tensor& keep, const PolicyLossOptions& o, const torch::Tensor& w) {
  const auto dtype = logp.scalar_type();
  const auto log_ratio = logp - old_logp;
  const auto& a = adv;
  const auto sign = a.sign();
  const auto clamped = log_ratio.clamp(-o.clip_low, o.clip_high);
  // Per token the more pessimistic of the raw and the clipped log-ratio for the advantage's sign.
  const auto pessimistic = sign * torch::minimum(sign * log_ratio, sign * clamped);
  const auto count = keep.sum(1).to(dtype) + 1e-8;
  const auto ratio = (pessimistic.sum(1) / count).exp();
  const auto seq_adv = a.sum(1) / count;
  auto row_loss = -seq_adv * ratio;
  if (w.defined()) {
    const auto log_w = Zeroed((Zeroed(w.detach().to(dtype), keep) + 1e-10).log(), keep);
    row_loss = row_loss * (log_w.sum(1) / count).exp();
  }
  Parts p;
  p.loss = row_loss.mean();
  torch::NoGradGuard no_grad;
  const auto clipped = log_ratio != clamped;
  p.metrics.clipfrac = Fraction(clipped & (a > 0), keep, dtype);
  p.metrics.ppo_kl = MaskedMean(-log_ratio, keep);
  p.metrics.clipfrac_lower = Fraction(clipped & (a < 0), keep, dtype);
  return p;
}

Parts Cispo(const torch::Tensor& old_logp, const torch::Tensor& logp, const torch::Tensor& adv,
            const torch::Tensor& keep, const PolicyLossOptions& o, const torch::Tensor& w) {
  const auto dtype = logp.scalar_type();
  const auto log_ratio = (logp - old_logp).clamp(-20, 20);
  const auto ratio = log_ratio.exp();
  const auto held = ratio.clamp(1 - o.clip_low, 1 + o.clip_high).detach();
  Parts p;
  p.token_loss = Weighted(-held * adv * logp, w, keep);
  torch::NoGradGuard no_grad;
  p.metrics.clipfrac = Fraction(ratio != held, keep, dtype);
  p.metrics.ppo_kl = MaskedMean(-log_ratio, keep);
  p.metrics.clipfrac_lower = torch::zeros({}, logp.options());
  return p;
}

}  // namespace

absl::StatusOr<PolicyLossMode> ParsePolicyLossMode(absl::string_view name) {
  for (const auto& [mode, mode_name] : kModes) {
    if (name == mode_name) return mode;
  }
  std::vector<absl::string_view> names;
  for (const auto& entry : kModes) names.push_back(entry.second);
  return absl::InvalidArgumentError(absl::StrCat(
      "loss_mode: expected one of ", absl::StrJoin(names, ", "), ", got \"", name, "\""));
}

absl::string_view PolicyLossModeName(PolicyLossMode mode) {
  for (const auto& [m, name] : kModes) {
    if (m == mode) return name;
  }
  return "unknown";
}

absl::Status CheckPolicyLossOptions(const PolicyLossOptions& o) {
  if (ReadsClipRange(o.mode)) RETURN_IF_ERROR(CheckClipRatios(o.clip_low, o.clip_high));
  auto positive = [](absl::string_view name, double v) -> absl::Status {
    if (v > 0 && std::isfinite(v)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected a value > 0, got ", v));
  };
  switch (o.mode) {
    case PolicyLossMode::kVanilla:
      if (!(o.clip_c > 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("clip_ratio_c: expected a value > 1 (dual-clip bound), got ", o.clip_c));
      }
      break;
    case PolicyLossMode::kSapo:
      RETURN_IF_ERROR(positive("tau_pos", o.tau_pos));
      RETURN_IF_ERROR(positive("tau_neg", o.tau_neg));
      break;
    case PolicyLossMode::kClipCov:
      RETURN_IF_ERROR(positive("clip_cov_ratio", o.clip_cov_ratio));
      break;
    case PolicyLossMode::kKlCov:
      RETURN_IF_ERROR(positive("kl_cov_ratio", o.kl_cov_ratio));
      break;
    default:
      break;
  }
  return absl::OkStatus();
}

ReportedMetrics PolicyLossMetrics(PolicyLossMode mode) {
  switch (mode) {
    case PolicyLossMode::kGpg:
      return {};
    case PolicyLossMode::kClipCov:
      return {.clipfrac = true, .ppo_kl = true};
    case PolicyLossMode::kKlCov:
      return {.ppo_kl = true};
    default:
      return {.clipfrac = true, .ppo_kl = true, .clipfrac_lower = true};
  }
}

PolicyAggregation PolicyLossAggregation(const PolicyLossOptions& o) {
  switch (o.mode) {
    case PolicyLossMode::kGspo:
    case PolicyLossMode::kSapo:
      return {.row_mean = false, .mode = LossAggMode::kSeqMeanTokenMean};
    case PolicyLossMode::kGeoMean:
      return {.row_mean = true, .mode = o.agg};
    default:
      return {.row_mean = false, .mode = o.agg};
  }
}

absl::StatusOr<PolicyLossResult> ComputePolicyLoss(
    const torch::Tensor& old_log_probs, const torch::Tensor& log_probs,
    const torch::Tensor& advantages, const torch::Tensor& mask, const PolicyLossOptions& o,
    const torch::Tensor& is_weights, std::optional<at::Generator> generator) {
  RETURN_IF_ERROR(CheckPolicyInputs(old_log_probs, log_probs, advantages, mask, is_weights));
  RETURN_IF_ERROR(CheckPolicyLossOptions(o));
  // Behind the mask every input becomes 0, so that no NaN or inf there can reach a value or
  // (as 0 x inf) a gradient.
  struct Clean {
    torch::Tensor keep, old_logp, logp, adv;
  };
  ASSIGN_OR_RETURN(const Clean in, CatchTorch("ComputePolicyLoss", [&] {
                     Clean c;
                     c.keep = mask.to(torch::kBool);
                     c.adv = Zeroed(advantages.detach().to(log_probs.scalar_type()), c.keep);
                     c.logp = Zeroed(log_probs, c.keep);
                     c.old_logp = Zeroed(old_log_probs.detach(), c.keep);
                     return c;
                   }));
  if (o.mode == PolicyLossMode::kVanilla) {
    return PolicyLoss(in.old_logp, in.logp, in.adv, mask, o.clip_low, o.clip_high, o.clip_c, o.agg,
                      o.loss_scale_factor, is_weights);
  }
  ASSIGN_OR_RETURN(Parts parts, CatchTorch("ComputePolicyLoss", [&]() -> Parts {
                     switch (o.mode) {
                       case PolicyLossMode::kGspo:
                         return Gspo(in.old_logp, in.logp, in.adv, in.keep, o, is_weights);
                       case PolicyLossMode::kSapo:
                         return Sapo(in.old_logp, in.logp, in.adv, in.keep, o, is_weights);
                       case PolicyLossMode::kGpg: {
                         Parts p;
                         p.token_loss = Weighted(-in.logp * in.adv, is_weights, in.keep);
                         return p;
                       }
                       case PolicyLossMode::kClipCov:
                         return ClipCov(in.old_logp, in.logp, in.adv, in.keep, o, is_weights,
                                        generator);
                       case PolicyLossMode::kKlCov:
                         return KlCov(in.old_logp, in.logp, in.adv, in.keep, o, is_weights);
                       case PolicyLossMode::kGeoMean:
                         return GeoMean(in.old_logp, in.logp, in.adv, in.keep, o, is_weights);
                       case PolicyLossMode::kCispo:
                         return Cispo(in.old_logp, in.logp, in.adv, in.keep, o, is_weights);
                       case PolicyLossMode::kVanilla:
                         break;
                     }
                     return Parts{};
                   }));
  PolicyLossResult result = std::move(parts.metrics);
  if (parts.loss.defined()) {
    result.loss = parts.loss;
  } else {
    const PolicyAggregation agg = PolicyLossAggregation(o);
    ASSIGN_OR_RETURN(result.loss, AggLoss(parts.token_loss, mask, agg.mode, o.loss_scale_factor));
  }
  return result;
}

}  // namespace rlmesh::grpo
