#include "common/data/prompt_fit.h"

#include "absl/strings/str_cat.h"

namespace rlmesh::data {

absl::StatusOr<Truncation> ParseTruncation(absl::string_view name) {
  if (name == "error") return Truncation::kError;
  if (name == "left") return Truncation::kLeft;
  if (name == "right") return Truncation::kRight;
  if (name == "middle") return Truncation::kMiddle;
  return absl::InvalidArgumentError(
      absl::StrCat("data.truncation: expected \"error\", \"left\", \"right\" or \"middle\", got \"",
                   name, "\""));
}

absl::StatusOr<std::vector<int32_t>> FitPrompt(const std::vector<int32_t>& ids, int64_t max_length,
                                               Truncation mode) {
  const int64_t length = static_cast<int64_t>(ids.size());
  if (length <= max_length) return ids;
  switch (mode) {
    case Truncation::kError:
      return absl::InvalidArgumentError(absl::StrCat(
          "the prompt is ", length, " tokens, over data.max_prompt_length = ", max_length,
          " (data.truncation = error; left, right or middle cut it, "
          "data.filter_overlong_prompts drops it)"));
    case Truncation::kLeft:
      return std::vector<int32_t>(ids.end() - max_length, ids.end());
    case Truncation::kRight:
      return std::vector<int32_t>(ids.begin(), ids.begin() + max_length);
    case Truncation::kMiddle: {
      const int64_t front = max_length / 2;
      std::vector<int32_t> out(ids.begin(), ids.begin() + front);
      out.insert(out.end(), ids.end() - (max_length - front), ids.end());
      return out;
    }
  }
  return ids;
}

}  // namespace rlmesh::data
