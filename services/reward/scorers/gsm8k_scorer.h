// The GSM8K scorer with verl's semantics (verl/utils/reward_score/gsm8k.py): only the last
// 300 characters of the response are read; "strict" takes the last "#### <number>" answer,
// "flexible" the last number-like token; an answer equal (as a string, after removing ","
// and "$") to the ground truth scores `correct_score`, any other answer `format_score`, no
// answer 0.
#pragma once

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

struct Gsm8kScorerOptions {
  enum class Method { kStrict, kFlexible };
  Method method = Method::kStrict;
  double format_score = 0.0;   // rlmesh.reward.format_score
  double correct_score = 1.0;  // verl's `score` argument
  int clip_chars = 300;        // characters (code points) read from the end of the response
};

class Gsm8kScorer : public Scorer {
 public:
  explicit Gsm8kScorer(const Gsm8kScorerOptions& options) : options_(options) {}

  // Extra values: "acc" (1 when correct) and "has_answer" (1 when an answer was found).
  absl::StatusOr<ScoreResult> Score(const RewardItem& item) const override;

  // The answer that `method` extracts from `text` (no clipping), or nullopt.
  static std::optional<std::string> ExtractAnswer(absl::string_view text,
                                                  Gsm8kScorerOptions::Method method);

 private:
  Gsm8kScorerOptions options_;
};

}  // namespace rlmesh::reward
