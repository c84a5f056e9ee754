// Checks a GenerateRequest against what this replica can serve before anything is queued, so a
// broken request gets INVALID_ARGUMENT naming the field (prompts[2].token_ids[5], ...) and
// leaves no work behind. Pure function; no locking.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "rlmesh/v1/rollout.pb.h"

namespace rlmesh::rollout {

struct GenerateLimits {
  // Token ids must lie in [0, vocab_size).
  int64_t vocab_size = 0;
  // prompts x n of one call may not exceed this (rlmesh.rollout.max_queue); 0 = no limit.
  int64_t max_samples_per_request = 0;
  // sampling_params.max_new_tokens may not exceed this (data.max_response_length); 0 = no
  // limit.
  int64_t max_new_tokens = 0;
  // A prompt has at most max_model_len - 1 tokens, so one response token fits; 0 = no limit.
  int64_t max_model_len = 0;
};

// Besides each field's range: two prompts of one call under the same prompt_id must number
// their samples apart (first_sample_index ranges that do not overlap), or their samples could
// not be told apart.

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const GenerateLimits& limits);

}  // namespace rlmesh::rollout
