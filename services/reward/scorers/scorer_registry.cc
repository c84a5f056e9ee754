#include "services/reward/scorers/scorer_registry.h"

#include <cmath>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/reward/scorers/math_scorer.h"
#include "services/reward/scorers/simple_scorers.h"

namespace rlmesh::reward {

absl::StatusOr<std::unique_ptr<ScorerRegistry>> ScorerRegistry::Create(
    const ScorerRegistryOptions& options) {
  if (!std::isfinite(options.format_score)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key rlmesh.reward.format_score: expected a finite number, got ",
        options.format_score));
  }
  std::unique_ptr<ScorerRegistry> registry(new ScorerRegistry());
  auto add = [&](std::unique_ptr<Scorer> scorer, std::initializer_list<const char*> sources) {
    for (const char* source : sources) registry->by_source_[source] = scorer.get();
    registry->scorers_.push_back(std::move(scorer));
  };
  Gsm8kScorerOptions gsm8k;
  gsm8k.method = options.gsm8k_method;
  gsm8k.format_score = options.format_score;
  add(std::make_unique<Gsm8kScorer>(gsm8k), {"openai/gsm8k", "rlmesh/arithmetic"});
  add(std::make_unique<MathScorer>(),
      {"lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"});
  add(std::make_unique<ExactMatchScorer>(), {"exact_match", "rlmesh/exact_match"});
  add(std::make_unique<ReverseDigitsScorer>(ReverseDigitsScorerOptions{}),
      {"rlmesh/reverse_digits"});
  return registry;
}

absl::Status ScorerRegistry::Register(const std::string& data_source,
                                      std::unique_ptr<Scorer> scorer) {
  if (by_source_.count(data_source) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("a scorer for data_source \"", data_source, "\" is already registered"));
  }
  by_source_[data_source] = scorer.get();
  scorers_.push_back(std::move(scorer));
  return absl::OkStatus();
}

const Scorer* ScorerRegistry::Find(absl::string_view data_source) const {
  auto it = by_source_.find(data_source);
  return it == by_source_.end() ? nullptr : it->second;
}

std::vector<std::string> ScorerRegistry::DataSources() const {
  std::vector<std::string> sources;
  for (const auto& [source, scorer] : by_source_) sources.push_back(source);
  return sources;
}

}  // namespace rlmesh::reward
