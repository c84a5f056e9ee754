#include "services/reward/scorers/simple_scorers.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "services/reward/scorers/utf8.h"

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
  // Positions and lengths in characters (code points), as docs/reward.md says and Python
  // indexes strings, not in UTF-8 bytes.
  size_t correct = 0;
  absl::string_view a = output, b = target;
  while (!a.empty() && !b.empty()) {
    const size_t na = FirstCodePointBytes(a), nb = FirstCodePointBytes(b);
    if (a.substr(0, na) == b.substr(0, nb)) ++correct;
    a.remove_prefix(na);
    b.remove_prefix(nb);
  }
  const size_t output_chars = CodePointCount(output), target_chars = CodePointCount(target);
  ScoreResult result;
  result.score =
      static_cast<double>(correct) / static_cast<double>(std::max(target_chars, output_chars));
  result.extra["acc"] = output == target ? 1.0 : 0.0;
  result.extra["length_match"] = output_chars == target_chars ? 1.0 : 0.0;
  return result;
}

}  // namespace rlmesh::reward
