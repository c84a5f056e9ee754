#include "services/reward/scorers/simple_scorers.h"

#include <algorithm>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"

namespace rlmesh::reward {

absl::StatusOr<ScoreResult> ExactMatchScorer::Score(const RewardItem& item) const {
  ScoreResult result;
  const bool equal =
      absl::StripAsciiWhitespace(item.response) == absl::StripAsciiWhitespace(item.ground_truth);
  result.score = equal ? 1.0 : 0.0;
  result.extra["acc"] = result.score;
  return result;
}

absl::StatusOr<ScoreResult> ReverseDigitsScorer::Score(const RewardItem& item) const {
  const absl::string_view target = item.ground_truth;
  if (target.empty()) {
    return absl::InvalidArgumentError(
        "reverse_digits scorer: ground_truth is empty; expected the reversed digits, e.g. "
        "\"4321\" for the prompt \"1234=\"");
  }
  absl::string_view output = item.response;
  for (const std::string& marker : options_.eos_markers) {
    if (marker.empty()) continue;
    const size_t at = output.find(marker);
    if (at != absl::string_view::npos) output = output.substr(0, at);
  }
  const size_t common = std::min(target.size(), output.size());
  size_t correct = 0;
  for (size_t i = 0; i < common; ++i) {
    if (output[i] == target[i]) ++correct;
  }
  ScoreResult result;
  result.score =
      static_cast<double>(correct) / static_cast<double>(std::max(target.size(), output.size()));
  result.extra["acc"] = output == target ? 1.0 : 0.0;
  result.extra["length_match"] = output.size() == target.size() ? 1.0 : 0.0;
  return result;
}

}  // namespace rlmesh::reward
