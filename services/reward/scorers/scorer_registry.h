// The built-in scorers, found by data_source as verl's default_compute_score dispatches:
//   openai/gsm8k, rlmesh/arithmetic                 -> Gsm8kScorer ("#### <number>")
//   lighteval/MATH, DigitalLearningGmbH/MATH-lighteval,
//   HuggingFaceH4/MATH-500                          -> MathScorer (last \boxed{})
//   exact_match, rlmesh/exact_match                 -> ExactMatchScorer
//   rlmesh/reverse_digits                           -> ReverseDigitsScorer (quickstart)
// Register adds more before the registry is handed to the reward service; after that it is
// immutable and Find may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "services/reward/scorers/gsm8k_scorer.h"
#include "services/reward/scorers/scorer.h"

namespace rlmesh::reward {

struct ScorerRegistryOptions {
  double format_score = 0.0;  // rlmesh.reward.format_score: a found but wrong gsm8k answer
  Gsm8kScorerOptions::Method gsm8k_method = Gsm8kScorerOptions::Method::kStrict;
};

class ScorerRegistry {
 public:
  static absl::StatusOr<std::unique_ptr<ScorerRegistry>> Create(
      const ScorerRegistryOptions& options);

  // Adds `scorer` for `data_source`; ALREADY_EXISTS when the data source has one. Not
  // thread-safe: call before sharing the registry.
  absl::Status Register(const std::string& data_source, std::unique_ptr<Scorer> scorer);

  // The scorer for `data_source`, or nullptr when no built-in scorer handles it.
  const Scorer* Find(absl::string_view data_source) const;

  // Every data source with a built-in scorer, sorted.
  std::vector<std::string> DataSources() const;

 private:
  ScorerRegistry() = default;

  std::vector<std::unique_ptr<Scorer>> scorers_;
  std::map<std::string, const Scorer*, std::less<>> by_source_;
};

}  // namespace rlmesh::reward
