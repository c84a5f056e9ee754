#include "common/generation/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace rlmesh::generation {

absl::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size) {
  if (params.n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling param n: expected an integer >= 1, got ", params.n));
  }
  if (!std::isfinite(params.temperature) || params.temperature < 0.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling param temperature: expected a finite number >= 0, got ", params.temperature));
  }
  if (!(params.top_p > 0.0 && params.top_p <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling param top_p: expected a number in (0, 1], got ", params.top_p));
  }
  if (params.top_k < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling param top_k: expected -1 or 0 (off) or a positive integer, got ",
        params.top_k));
  }
  if (params.max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling param max_new_tokens: expected an integer >= 1, got ", params.max_new_tokens));
  }
  for (int64_t id : params.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sampling param stop_token_ids: expected ids in [0, ",
                                                     vocab_size, "), got ", id));
    }
  }
  return absl::OkStatus();
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "unknown";
}

}  // namespace rlmesh::generation
