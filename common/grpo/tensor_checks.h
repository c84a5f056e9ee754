// Argument checks and masked reductions shared by the GRPO math files (grpo.cc,
// rollout_correction.cc). Internal to common/grpo: not part of its interface.
#pragma once

#include <torch/torch.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status/status_macros.h"

namespace rlmesh::grpo::internal {

inline std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

inline absl::Status CheckDefined(const torch::Tensor& t, absl::string_view name) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, ": tensor is undefined"));
  return absl::OkStatus();
}

inline absl::Status CheckFloating(const torch::Tensor& t, absl::string_view name) {
  RETURN_IF_ERROR(CheckDefined(t, name));
  if (!t.is_floating_point()) {
    return absl::InvalidArgumentError(absl::StrCat(name,
                                                   ": expected a floating-point tensor, got dtype ",
                                                   std::string(c10::toString(t.scalar_type()))));
  }
  return absl::OkStatus();
}

inline absl::Status CheckRank(const torch::Tensor& t, int64_t rank, absl::string_view name) {
  RETURN_IF_ERROR(CheckDefined(t, name));
  if (t.dim() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected ", rank, " dimensions, got shape ", ShapeString(t)));
  }
  return absl::OkStatus();
}

inline absl::Status CheckSameShape(const torch::Tensor& t, const torch::Tensor& like,
                                   absl::string_view name, absl::string_view like_name) {
  RETURN_IF_ERROR(CheckDefined(t, name));
  if (t.sizes() != like.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected the shape of ", like_name, " ",
                                                   ShapeString(like), ", got ", ShapeString(t)));
  }
  return absl::OkStatus();
}

// The inputs of a policy loss: logp [B, T] floating, and old_logp, advantages, mask and (when
// defined) is_weights of its shape, all but the mask floating.
inline absl::Status CheckPolicyInputs(const torch::Tensor& old_logp, const torch::Tensor& logp,
                                      const torch::Tensor& advantages, const torch::Tensor& mask,
                                      const torch::Tensor& is_weights) {
  RETURN_IF_ERROR(CheckRank(logp, 2, "logp"));
  RETURN_IF_ERROR(CheckFloating(logp, "logp"));
  RETURN_IF_ERROR(CheckFloating(old_logp, "old_logp"));
  RETURN_IF_ERROR(CheckFloating(advantages, "advantages"));
  RETURN_IF_ERROR(CheckSameShape(old_logp, logp, "old_logp", "logp"));
  RETURN_IF_ERROR(CheckSameShape(advantages, logp, "advantages", "logp"));
  RETURN_IF_ERROR(CheckSameShape(mask, logp, "mask", "logp"));
  if (is_weights.defined()) {
    RETURN_IF_ERROR(CheckFloating(is_weights, "is_weights"));
    RETURN_IF_ERROR(CheckSameShape(is_weights, logp, "is_weights", "logp"));
  }
  return absl::OkStatus();
}

// The PPO clip range [1 - low, 1 + high]: low in [0, 1), high >= 0.
inline absl::Status CheckClipRatios(double low, double high) {
  if (!(low >= 0 && low < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_ratio_low: expected a value in [0, 1), got ", low));
  }
  if (!(high >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_ratio_high: expected a value >= 0, got ", high));
  }
  return absl::OkStatus();
}

// Sum of x over mask as a 0-dim tensor; masked-out entries are replaced by 0 first so that
// NaN or inf there cannot leak into the sum or its gradient.
inline torch::Tensor MaskedSum(const torch::Tensor& x, const torch::Tensor& keep) {
  return torch::where(keep, x, torch::zeros_like(x)).sum();
}

// Masked mean with an empty mask giving 0 (counts are integers, so max(count, 1) is exact).
inline torch::Tensor MaskedMean(const torch::Tensor& x, const torch::Tensor& keep) {
  return MaskedSum(x, keep) / keep.sum().to(x.scalar_type()).clamp_min(1);
}

template <typename F>
auto CatchTorch(absl::string_view what, F&& f) -> absl::StatusOr<decltype(f())> {
  try {
    return f();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  }
}

}  // namespace rlmesh::grpo::internal
