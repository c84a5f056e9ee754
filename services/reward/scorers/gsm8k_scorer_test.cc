#include "services/reward/scorers/gsm8k_scorer.h"

#include <string>

#include "gtest/gtest.h"
#include "services/reward/scorers/test_items.h"

namespace rlmesh::reward {
namespace {

using Method = Gsm8kScorerOptions::Method;

Gsm8kScorerOptions WithFormatScore(double format_score) {
  Gsm8kScorerOptions options;
  options.format_score = format_score;
  return options;
}

double ScoreOf(const std::string& response, const std::string& truth,
               Gsm8kScorerOptions options = {}) {
  Gsm8kScorer scorer(options);
  auto result = scorer.Score(Item(response, truth, "openai/gsm8k"));
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->score : -1.0;
}

TEST(Gsm8kScorerTest, CommasAreStrippedFromTheAnswer) {
  EXPECT_EQ(ScoreOf("12 * 100 + 34 = 1234\n#### 1,234", "1234"), 1.0);
}

TEST(Gsm8kScorerTest, WrongAnswerGetsFormatScore) {
  EXPECT_EQ(ScoreOf("#### 73", "72"), 0.0);
  EXPECT_EQ(ScoreOf("#### 73", "72", WithFormatScore(0.1)), 0.1);
}

TEST(Gsm8kScorerTest, NoAnswerScoresZeroEvenWithFormatScore) {
  Gsm8kScorer scorer(WithFormatScore(0.1));
  auto result = scorer.Score(Item("I think it is 72.", "72"));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->score, 0.0);
  EXPECT_EQ(result->extra.at("has_answer"), 0.0);
  EXPECT_EQ(result->extra.at("acc"), 0.0);
}

TEST(Gsm8kScorerTest, TheLastOfSeveralAnswersCounts) {
  EXPECT_EQ(ScoreOf("#### 5\nno wait\n#### 7", "7"), 1.0);
  EXPECT_EQ(ScoreOf("#### 5\nno wait\n#### 7", "5", WithFormatScore(0.25)), 0.25);
}

TEST(Gsm8kScorerTest, DollarAfterTheMarkerIsNotAnAnswer) {
  // The strict pattern's character class has no "$", so "#### $72" never matches at all;
  // verl's "$" stripping only ever sees answers without one.
  EXPECT_EQ(ScoreOf("#### $72", "72", WithFormatScore(0.5)), 0.0);
  EXPECT_EQ(ScoreOf("costs $72\n#### 72", "72"), 1.0);
}

TEST(Gsm8kScorerTest, NegativeAndDecimalAnswersCompareAsStrings) {
  EXPECT_EQ(ScoreOf("#### -3", "-3"), 1.0);
  EXPECT_EQ(ScoreOf("#### 3.50", "3.5"), 0.0);  // string equality, not numeric
}

TEST(Gsm8kScorerTest, OnlyTheLast300CharactersAreRead) {
  // "#### 42" is 7 characters: with 293 characters after it, it is the first 7 of the last
  // 300; with 294, its first "#" is cut off.
  EXPECT_EQ(ScoreOf("#### 42" + std::string(293, 'x'), "42"), 1.0);
  EXPECT_EQ(ScoreOf("#### 42" + std::string(294, 'x'), "42"), 0.0);
  EXPECT_EQ(ScoreOf(std::string(5000, 'y') + "#### 42", "42"), 1.0);
}

TEST(Gsm8kScorerTest, ClippingCountsCharactersNotBytes) {
  // 293 two-byte characters ("é") after the answer: 300 characters, 593 bytes.
  std::string tail;
  for (int i = 0; i < 293; ++i) tail += "\xC3\xA9";
  EXPECT_EQ(ScoreOf("#### 42" + tail, "42"), 1.0);
  EXPECT_EQ(ScoreOf("#### 42" + tail + "\xC3\xA9", "42"), 0.0);
}

TEST(Gsm8kScorerTest, FlexibleTakesTheLastNumberWithoutStrippingCommas) {
  Gsm8kScorerOptions flexible;
  flexible.method = Method::kFlexible;
  EXPECT_EQ(ScoreOf("so 3 + 4 = 7", "7", flexible), 1.0);
  EXPECT_EQ(ScoreOf("in total 1,234 apples", "1,234", flexible), 1.0);
  EXPECT_EQ(ScoreOf("in total 1,234 apples", "1234", flexible), 0.0);
  // A trailing full stop is part of the number-like token: "7." is not "7".
  EXPECT_EQ(ScoreOf("so 3 + 4 = 7.", "7", flexible), 0.0);
}

TEST(Gsm8kScorerTest, FlexibleExtractionMatchesVerlQuirks) {
  EXPECT_EQ(Gsm8kScorer::ExtractAnswer("1 then 2 then .", Method::kFlexible), "2");
  // Only "." matches: verl's loop leaves its variable at the first match and returns it.
  EXPECT_EQ(Gsm8kScorer::ExtractAnswer("a . b .", Method::kFlexible), ".");
  // A lone comma is a number-like token too.
  EXPECT_EQ(Gsm8kScorer::ExtractAnswer("Hello, world", Method::kFlexible), ",");
  EXPECT_EQ(Gsm8kScorer::ExtractAnswer("no digits", Method::kFlexible), std::nullopt);
  EXPECT_EQ(Gsm8kScorer::ExtractAnswer("####12", Method::kStrict), std::nullopt);
}

TEST(Gsm8kScorerTest, EmptyGroundTruthIsAnError) {
  Gsm8kScorer scorer({});
  auto result = scorer.Score(Item("#### 1", ""));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("ground_truth"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::reward
