#include "services/reward/scorers/math_scorer.h"

#include <string>

#include "gtest/gtest.h"
#include "services/reward/scorers/test_items.h"

namespace rlmesh::reward {
namespace {

TEST(LastBoxedOnlyStringTest, TakesTheLastBoxWithBalancedBraces) {
  EXPECT_EQ(LastBoxedOnlyString("so \\boxed{\\frac{1}{2}} done"), "\\boxed{\\frac{1}{2}}");
  EXPECT_EQ(LastBoxedOnlyString("\\boxed{1} or rather \\boxed{2}."), "\\boxed{2}");
  EXPECT_EQ(LastBoxedOnlyString("\\boxed{\\sqrt{x^{2}}}+1"), "\\boxed{\\sqrt{x^{2}}}");
  EXPECT_EQ(LastBoxedOnlyString("\\boxed{12"), std::nullopt);
  EXPECT_EQ(LastBoxedOnlyString("no answer here"), std::nullopt);
  EXPECT_EQ(LastBoxedOnlyString("\\fbox{3}"), "\\fbox{3}");
}

TEST(LastBoxedOnlyStringTest, SpaceFormRunsToTheNextDollar) {
  EXPECT_EQ(LastBoxedOnlyString("$\\boxed 5$ and more"), "\\boxed 5");
  EXPECT_EQ(LastBoxedOnlyString("\\boxed 4 then \\boxed 7"), "\\boxed 7");
}

TEST(RemoveBoxedTest, UnwrapsOnlyBoxed) {
  EXPECT_EQ(RemoveBoxed("\\boxed{\\frac{1}{2}}"), "\\frac{1}{2}");
  EXPECT_EQ(RemoveBoxed("\\boxed 5"), "5");
  EXPECT_EQ(RemoveBoxed("\\fbox{3}"), std::nullopt);
}

TEST(StripMathAnswerTest, Fractions) {
  EXPECT_EQ(StripMathAnswer("\\frac12"), "\\frac{1}{2}");
  EXPECT_EQ(StripMathAnswer("\\dfrac{1}{2}"), "\\frac{1}{2}");
  EXPECT_EQ(StripMathAnswer("\\tfrac{3}{4}"), "\\frac{3}{4}");
  EXPECT_EQ(StripMathAnswer("\\frac1{72}"), "\\frac{1}{72}");
  EXPECT_EQ(StripMathAnswer("\\frac{72}1"), "\\frac{72}1");  // not handled, as in verl
  EXPECT_EQ(StripMathAnswer("1/2"), "\\frac{1}{2}");
  EXPECT_EQ(StripMathAnswer("-3/4"), "\\frac{-3}{4}");
  EXPECT_EQ(StripMathAnswer("03/4"), "03/4");
  EXPECT_EQ(StripMathAnswer("a/b"), "a/b");
  EXPECT_EQ(StripMathAnswer("\\frac1"), "\\frac1");
}

TEST(StripMathAnswerTest, Decimals) {
  EXPECT_EQ(StripMathAnswer("0.5"), "\\frac{1}{2}");
  EXPECT_EQ(StripMathAnswer(".5"), "\\frac{1}{2}");
  EXPECT_EQ(StripMathAnswer("0.50"), "0.50");
  EXPECT_EQ(StripMathAnswer(".25"), "0.25");
  EXPECT_EQ(StripMathAnswer("x = .25"), "0.25");
  EXPECT_EQ(StripMathAnswer("\\{.3\\}"), "\\{0.3\\}");
}

TEST(StripMathAnswerTest, UnitsDegreesDollarsPercent) {
  EXPECT_EQ(StripMathAnswer("5 \\text{ cm}"), "5");
  EXPECT_EQ(StripMathAnswer("90^\\circ"), "90");
  EXPECT_EQ(StripMathAnswer("90^{\\circ}"), "90");
  EXPECT_EQ(StripMathAnswer("\\$5"), "5");
  EXPECT_EQ(StripMathAnswer("10\\%"), "10");
  EXPECT_EQ(StripMathAnswer("\\left( 1, 2 \\right)"), "(1,2)");
  EXPECT_EQ(StripMathAnswer("\\!1000"), "1000");
  EXPECT_EQ(StripMathAnswer("1\n2"), "12");
}

TEST(StripMathAnswerTest, ShortLeftHandSideIsDropped) {
  EXPECT_EQ(StripMathAnswer("x = 3"), "3");
  EXPECT_EQ(StripMathAnswer("k=-2"), "-2");
  EXPECT_EQ(StripMathAnswer("xy = 3"), "xy=3");
  EXPECT_EQ(StripMathAnswer("a=b=c"), "a=b=c");
}

TEST(StripMathAnswerTest, SquareRoots) {
  EXPECT_EQ(StripMathAnswer("\\sqrt3"), "\\sqrt{3}");
  EXPECT_EQ(StripMathAnswer("2\\sqrt2"), "2\\sqrt{2}");
  EXPECT_EQ(StripMathAnswer("\\sqrt{12}"), "\\sqrt{12}");
}

TEST(StripMathAnswerTest, InputsThePythonRaisesOn) {
  EXPECT_EQ(StripMathAnswer("5\\text{ cm} + 3\\text{ m}"), std::nullopt);
  EXPECT_EQ(StripMathAnswer("2\\sqrt"), std::nullopt);
  EXPECT_EQ(StripMathAnswer("1+\\frac"), std::nullopt);
}

TEST(StripMathAnswerTest, LongAnswersDoNotExhaustTheStack) {
  const std::string digits(200000, '7');
  EXPECT_EQ(StripMathAnswer(digits + "/2"), "\\frac{" + digits + "}{2}");
  EXPECT_EQ(MathScorer().Score(Item("\\boxed " + digits, digits))->score, 1.0);
}

TEST(MathAnswersEquivalentTest, VerlEquivalences) {
  EXPECT_TRUE(MathAnswersEquivalent("\\frac{1}{2}", "0.5"));  // "0.5" is special-cased
  EXPECT_TRUE(MathAnswersEquivalent("\\frac12", "1/2"));
  EXPECT_FALSE(MathAnswersEquivalent("\\frac{1}{2}", "0.50"));
  EXPECT_FALSE(MathAnswersEquivalent("\\frac{1}{3}", "0.333"));
  EXPECT_FALSE(MathAnswersEquivalent("2", "2.0"));
  // When one side cannot be stripped the raw strings are compared.
  EXPECT_TRUE(MathAnswersEquivalent("2\\sqrt", "2\\sqrt"));
  EXPECT_FALSE(MathAnswersEquivalent("2\\sqrt", "2 \\sqrt"));
}

double ScoreOf(const std::string& response, const std::string& truth) {
  auto result = MathScorer().Score(Item(response, truth));
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->score : -1.0;
}

TEST(MathScorerTest, ScoresTheLastBoxedAnswer) {
  EXPECT_EQ(ScoreOf("The answer is $\\boxed{\\dfrac{3}{4}}$.", "\\frac{3}{4}"), 1.0);
  EXPECT_EQ(ScoreOf("The answer is $\\boxed{\\dfrac{3}{4}}$.", "3/4"), 1.0);
  EXPECT_EQ(ScoreOf("\\boxed{3} no, \\boxed{4}", "3"), 0.0);
  EXPECT_EQ(ScoreOf("\\boxed{3} no, \\boxed{4}", "4"), 1.0);
  EXPECT_EQ(ScoreOf("\\boxed{x = 10^\\circ}", "10"), 1.0);
  EXPECT_EQ(ScoreOf("\\fbox{3}", "3"), 0.0);
  EXPECT_EQ(ScoreOf("it is 3", "3"), 0.0);
}

TEST(MathScorerTest, ExtraValues) {
  auto found = MathScorer().Score(Item("\\boxed{5}", "6"));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->extra.at("has_answer"), 1.0);
  EXPECT_EQ(found->extra.at("acc"), 0.0);
  auto none = MathScorer().Score(Item("5", "5"));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->extra.at("has_answer"), 0.0);
  EXPECT_FALSE(MathScorer().Score(Item("\\boxed{5}", "")).ok());
}

}  // namespace
}  // namespace rlmesh::reward
