#include "services/reward/scorers/gsm8k_scorer.h"

#include <regex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_replace.h"
#include "services/reward/scorers/utf8.h"

namespace rlmesh::reward {
namespace {

// All non-overlapping matches of `re`'s first group, left to right (Python's re.findall).
std::vector<std::string> FindAll(absl::string_view text, const std::regex& re) {
  std::vector<std::string> found;
  using Iterator = std::regex_iterator<absl::string_view::const_iterator>;
  for (Iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    found.push_back((*it)[1].str());
  }
  return found;
}

}  // namespace

std::optional<std::string> Gsm8kScorer::ExtractAnswer(absl::string_view text,
                                                      Gsm8kScorerOptions::Method method) {
  // std::regex objects are immutable after construction and safe to share between threads.
  static const std::regex* const kStrict = new std::regex("#### (-?[0-9.,]+)");
  static const std::regex* const kFlexible = new std::regex("(-?[0-9.,]+)");
  if (method == Gsm8kScorerOptions::Method::kStrict) {
    std::vector<std::string> answers = FindAll(text, *kStrict);
    if (answers.empty()) return std::nullopt;
    return absl::StrReplaceAll(answers.back(), {{",", ""}, {"$", ""}});
  }
  std::vector<std::string> answers = FindAll(text, *kFlexible);
  if (answers.empty()) return std::nullopt;
  // verl walks the matches backwards and stops at the first one that is not "" or "."; when
  // every match is ".", its loop variable is left at the first match, which it returns.
  for (auto it = answers.rbegin(); it != answers.rend(); ++it) {
    if (!it->empty() && *it != ".") return *it;
  }
  return answers.front();
}

absl::StatusOr<ScoreResult> Gsm8kScorer::Score(const RewardItem& item) const {
  if (item.ground_truth.empty()) {
    return absl::InvalidArgumentError(
        "gsm8k scorer: ground_truth is empty; expected the answer number (reward_model."
        "ground_truth of the dataset row)");
  }
  absl::string_view tail = LastCodePoints(item.response, static_cast<size_t>(options_.clip_chars));
  std::optional<std::string> answer = ExtractAnswer(tail, options_.method);
  ScoreResult result;
  result.extra["has_answer"] = answer.has_value() ? 1.0 : 0.0;
  if (!answer.has_value()) {
    result.score = 0.0;
    result.extra["acc"] = 0.0;
  } else if (*answer == item.ground_truth) {
    result.score = options_.correct_score;
    result.extra["acc"] = 1.0;
  } else {
    result.score = options_.format_score;
    result.extra["acc"] = 0.0;
  }
  return result;
}

}  // namespace rlmesh::reward
