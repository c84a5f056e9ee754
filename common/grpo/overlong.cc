#include "common/grpo/overlong.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace rlmesh::grpo {

absl::Status CheckOverlongBuffer(const OverlongBuffer& b) {
  if (!b.enable) return absl::OkStatus();
  if (b.len < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reward_model.reward_kwargs.overlong_buffer_cfg.len: expected >= 1 tokens, got ", b.len));
  }
  if (b.max_resp_len < b.len) {
    return absl::InvalidArgumentError(
        absl::StrCat("reward_model.reward_kwargs.max_resp_len: expected at least "
                     "overlong_buffer_cfg.len (",
                     b.len, "), got ", b.max_resp_len));
  }
  return absl::OkStatus();
}

double OverlongReward(int64_t response_tokens, const OverlongBuffer& b) {
  if (!b.enable || b.len < 1) return 0;
  const double expected = static_cast<double>(b.max_resp_len - b.len);
  const double exceed = static_cast<double>(response_tokens) - expected;
  return std::min(-exceed / static_cast<double>(b.len) * b.penalty_factor, 0.0);
}

}  // namespace rlmesh::grpo
