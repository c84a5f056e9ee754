#include "services/reward/scorers/scorer_registry.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "services/reward/scorers/simple_scorers.h"
#include "services/reward/scorers/test_items.h"

namespace rlmesh::reward {
namespace {

ScorerRegistryOptions WithFormatScore(double format_score) {
  ScorerRegistryOptions options;
  options.format_score = format_score;
  return options;
}

TEST(ScorerRegistryTest, DispatchesOnDataSourceLikeVerl) {
  auto registry = ScorerRegistry::Create(WithFormatScore(0.1));
  ASSERT_TRUE(registry.ok()) << registry.status();
  const Scorer* gsm8k = (*registry)->Find("openai/gsm8k");
  ASSERT_NE(gsm8k, nullptr);
  EXPECT_EQ(gsm8k->Score(Item("#### 2", "3"))->score, 0.1);
  for (const char* math : {"lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
                           "HuggingFaceH4/MATH-500"}) {
    const Scorer* scorer = (*registry)->Find(math);
    ASSERT_NE(scorer, nullptr) << math;
    EXPECT_EQ(scorer->Score(Item("\\boxed{\\frac12}", "1/2"))->score,
              1.0);
  }
  const Scorer* reverse = (*registry)->Find("rlmesh/reverse_digits");
  ASSERT_NE(reverse, nullptr);
  EXPECT_EQ(reverse->Score(Item("21", "21"))->score, 1.0);
  EXPECT_NE((*registry)->Find("exact_match"), nullptr);
  EXPECT_EQ((*registry)->Find("openai/GSM8K"), nullptr);  // names are case-sensitive
  EXPECT_EQ((*registry)->Find("codecontests"), nullptr);
}

TEST(ScorerRegistryTest, ListsItsDataSources) {
  auto registry = ScorerRegistry::Create({});
  ASSERT_TRUE(registry.ok());
  auto sources = (*registry)->DataSources();
  EXPECT_EQ(sources.size(), 8u);
  EXPECT_TRUE(std::is_sorted(sources.begin(), sources.end()));
}

TEST(ScorerRegistryTest, RegistersMoreScorersButNoDuplicates) {
  auto registry = ScorerRegistry::Create({});
  ASSERT_TRUE(registry.ok());
  EXPECT_TRUE((*registry)->Register("my/task", std::make_unique<ExactMatchScorer>()).ok());
  ASSERT_NE((*registry)->Find("my/task"), nullptr);
  EXPECT_EQ((*registry)->Find("my/task")->Score(Item("a", "a"))->score, 1.0);
  EXPECT_EQ((*registry)->Register("openai/gsm8k", std::make_unique<ExactMatchScorer>()).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(ScorerRegistryTest, RejectsNonFiniteFormatScore) {
  auto registry = ScorerRegistry::Create(WithFormatScore(std::nan("")));
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(registry.status().message().find("rlmesh.reward.format_score"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::reward
