// DAPO's overlong reward shaping (verl's DAPO reward manager, reward_model.reward_kwargs.
// overlong_buffer_cfg): a response longer than max_resp_len - len loses up to penalty_factor,
// linearly over the last `len` tokens of the budget. Torch-free.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace rlmesh::grpo {

struct OverlongBuffer {
  bool enable = false;
  int64_t len = 0;              // overlong_buffer_cfg.len: tokens of the buffer
  double penalty_factor = 1.0;  // overlong_buffer_cfg.penalty_factor: the penalty at its end
  int64_t max_resp_len = 0;     // reward_kwargs.max_resp_len: where the buffer ends
};

// INVALID_ARGUMENT naming the key when enabled with len < 1 or max_resp_len < len (verl
// asserts the latter).
absl::Status CheckOverlongBuffer(const OverlongBuffer& buffer);

// The reward added to a response of `response_tokens` tokens (verl's valid response length):
// min(-(response_tokens - (max_resp_len - len)) / len * penalty_factor, 0); 0 when disabled.
double OverlongReward(int64_t response_tokens, const OverlongBuffer& buffer);

}  // namespace rlmesh::grpo
