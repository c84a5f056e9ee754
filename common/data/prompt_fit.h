// What data.truncation does to a prompt longer than data.max_prompt_length tokens, as verl's
// dataset did before it moved tokenization into its agent loop (rl_dataset.py, and
// verl/utils/torch_functional.py's postprocess_data): keep the last tokens (left), the first
// (right), or the first and last halves (middle: floor(P/2) from the front, the rest from the
// back), or refuse (error). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::data {

enum class Truncation { kError, kLeft, kRight, kMiddle };

// "error", "left", "right" or "middle"; anything else is InvalidArgument naming data.truncation.
absl::StatusOr<Truncation> ParseTruncation(absl::string_view name);

// `ids` cut to at most `max_length` tokens as `mode` says; unchanged when it fits.
// InvalidArgument (saying how long the prompt is) for kError and an overlong prompt.
absl::StatusOr<std::vector<int32_t>> FitPrompt(const std::vector<int32_t>& ids, int64_t max_length,
                                               Truncation mode);

}  // namespace rlmesh::data
