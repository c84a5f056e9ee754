// Two small rule scorers: exact match (trimmed string equality) and the quickstart's
// digit-reversal task, which gives partial credit per correct position.
#pragma once

#include <string>
#include <vector>

#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

// 1.0 when the response equals the ground truth after trimming ASCII whitespace at both
// ends, else 0.0. Extra: "acc".
class ExactMatchScorer : public Scorer {
 public:
  absl::StatusOr<ScoreResult> Score(const RewardItem& item) const override;
};

struct ReverseDigitsScorerOptions {
  // Text forms of the end-of-sequence token. The response is cut at the first one found, in
  // case the caller decoded it with special tokens kept; a response decoded with special
  // tokens skipped already ends there.
  std::vector<std::string> eos_markers = {"<eos>", "</s>", "<|endoftext|>", "<|im_end|>",
                                          "<|eot_id|>", "<|end_of_text|>"};
};

// The quickstart task (`rlmesh make-dataset --task reverse_digits`): the ground truth is the
// prompt's digits reversed. Reward = (positions i where response[i] == ground_truth[i]) /
// max(len(ground_truth), len(response)), over the response up to the first EOS marker, by
// byte (the task's text is ASCII digits) and with nothing trimmed (trailing text costs reward). Extra: "acc" (1 for an
// exact answer), "length_match" (1 when the lengths agree).
class ReverseDigitsScorer : public Scorer {
 public:
  explicit ReverseDigitsScorer(const ReverseDigitsScorerOptions& options) : options_(options) {}
  absl::StatusOr<ScoreResult> Score(const RewardItem& item) const override;

 private:
  ReverseDigitsScorerOptions options_;
};

}  // namespace rlmesh::reward
