#include "services/reward/scorers/simple_scorers.h"

#include <string>

#include "gtest/gtest.h"
#include "services/reward/scorers/test_items.h"

namespace rlmesh::reward {
namespace {

double ReverseScore(const std::string& response, const std::string& truth = "4321") {
  ReverseDigitsScorer scorer(ReverseDigitsScorerOptions{});
  RewardItem item = Item(response, truth, "rlmesh/reverse_digits");
  item.prompt = "1234=";
  auto result = scorer.Score(item);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->score : -1.0;
}

TEST(ReverseDigitsScorerTest, CorrectPositionsOverTheLongerLength) {
  EXPECT_DOUBLE_EQ(ReverseScore("4321"), 1.0);
  EXPECT_DOUBLE_EQ(ReverseScore("4312"), 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(ReverseScore("43"), 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(ReverseScore("432100"), 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(ReverseScore("1234"), 0.0);
  EXPECT_DOUBLE_EQ(ReverseScore(""), 0.0);
  EXPECT_DOUBLE_EQ(ReverseScore("4321\n"), 4.0 / 5.0);
  EXPECT_DOUBLE_EQ(ReverseScore("x4321"), 0.0);  // shifted by one: nothing lines up
}

// Positions and lengths count characters, as Python does, not UTF-8 bytes: "é" (2 bytes) is
// one position.
TEST(ReverseDigitsScorerTest, CountsCharactersNotBytes) {
  EXPECT_DOUBLE_EQ(ReverseScore("\xC3\xA9"
                                "321"),
                   3.0 / 4.0);  // "é321"
  EXPECT_DOUBLE_EQ(ReverseScore("4\xC3\xA9"
                                "21"),
                   3.0 / 4.0);  // "4é21": the rest still lines up
  EXPECT_DOUBLE_EQ(ReverseScore("\xC3\xA9\xC3\xA9", "\xC3\xA9\xC3\xA9"), 1.0);
  EXPECT_DOUBLE_EQ(ReverseScore("\xE2\x82\xAC", "43"), 0.0);  // "€": one character, not three
  EXPECT_DOUBLE_EQ(ReverseScore("4\xE2\x82\xAC", "43"), 1.0 / 2.0);
}

TEST(ReverseDigitsScorerTest, StopsAtTheFirstEosMarker) {
  EXPECT_DOUBLE_EQ(ReverseScore("4321<eos>999"), 1.0);
  EXPECT_DOUBLE_EQ(ReverseScore("43<|im_end|>21"), 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(ReverseScore("4321</s><eos>"), 1.0);
}

TEST(ReverseDigitsScorerTest, ExtraValuesAndErrors) {
  ReverseDigitsScorer scorer(ReverseDigitsScorerOptions{});
  auto exact = scorer.Score(Item("987", "987"));
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->extra.at("acc"), 1.0);
  EXPECT_EQ(exact->extra.at("length_match"), 1.0);
  auto partial = scorer.Score(Item("98", "987"));
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->extra.at("acc"), 0.0);
  EXPECT_EQ(partial->extra.at("length_match"), 0.0);
  auto empty_truth = scorer.Score(Item("1", ""));
  EXPECT_EQ(empty_truth.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExactMatchScorerTest, TrimmedEquality) {
  ExactMatchScorer scorer;
  EXPECT_EQ(scorer.Score(Item(" 42 \n", "42"))->score, 1.0);
  EXPECT_EQ(scorer.Score(Item("42.0", "42"))->score, 0.0);
  EXPECT_EQ(scorer.Score(Item("Paris", "paris"))->score, 0.0);
  EXPECT_EQ(scorer.Score(Item("", ""))->score, 1.0);
}

}  // namespace
}  // namespace rlmesh::reward
