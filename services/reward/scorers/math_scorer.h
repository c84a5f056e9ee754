// The Hendrycks MATH scorer with verl's semantics (verl/utils/reward_score/math_reward.py,
// itself lm-evaluation-harness's hendrycks_math): take the last \boxed{...} (balanced
// braces) or "\boxed ..." answer of the response, normalise it and the ground truth with
// StripMathAnswer, and score 1.0 when the two strings are equal, else 0.0.
#pragma once

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

class MathScorer : public Scorer {
 public:
  // Extra values: "acc" (1 when correct) and "has_answer" (1 when a boxed answer was found).
  absl::StatusOr<ScoreResult> Score(const RewardItem& item) const override;
};

// The last boxed expression of `text` including its wrapper ("\boxed{12}" or, when the text
// contains "\boxed ", "\boxed " plus what follows the last one up to the next "$"); falls
// back to the last "\fbox{...}". nullopt when there is none or its braces never close.
std::optional<std::string> LastBoxedOnlyString(absl::string_view text);

// The content of a "\boxed{...}" or "\boxed ..." expression; nullopt for anything else
// (verl asserts, so a "\fbox{...}" answer scores 0 there and here).
std::optional<std::string> RemoveBoxed(absl::string_view boxed);

// Hendrycks' strip_string normalisation: drops line breaks, "\!", \left/\right, degrees,
// "\$", right-hand "\text{ unit}", "\%" and spaces; tfrac/dfrac -> frac; adds the leading 0
// of decimals; drops a short "x =" prefix; \sqrt3 -> \sqrt{3}; \frac12 -> \frac{1}{2};
// "0.5" -> \frac{1}{2}; "a/b" of integers -> \frac{a}{b}. nullopt where the Python original
// raises (two "\text{ " units, a trailing "\sqrt" or "\frac"); callers then compare the raw
// strings, as verl's is_equiv does.
std::optional<std::string> StripMathAnswer(absl::string_view answer);

// verl's is_equiv: equal after StripMathAnswer, or raw-equal when either cannot be stripped.
bool MathAnswersEquivalent(absl::string_view a, absl::string_view b);

}  // namespace rlmesh::reward
