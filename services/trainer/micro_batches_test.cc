#include "services/trainer/micro_batches.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::trainer {
namespace {

using ::testing::ElementsAre;

TEST(MicroBatchesTest, FixedSizeCutsInOrder) {
  auto plan = PlanMicroBatches({5, 5, 5, 5, 5}, {.by_tokens = false, .samples = 2});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_THAT((*plan)[2], ElementsAre(4));
}

// 1220 tokens in a budget of 512: ceil = 3 micro-batches. Largest first onto the lightest:
// 400 -> A, 300 -> B, 250 -> C, 120 -> C (370), 100 -> B (400), 50 -> C (420).
TEST(MicroBatchesTest, TokenBudgetGivesCeilOfTotalOverBudgetBalancedMicroBatches) {
  auto plan =
      PlanMicroBatches({100, 300, 50, 400, 250, 120}, {.by_tokens = true, .max_tokens = 512});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_THAT((*plan)[0], ElementsAre(3));
  EXPECT_THAT((*plan)[1], ElementsAre(0, 1));
  EXPECT_THAT((*plan)[2], ElementsAre(2, 4, 5));
}

TEST(MicroBatchesTest, ASampleOverTheBudgetIsAnError) {
  auto plan = PlanMicroBatches({10, 600}, {.by_tokens = true, .max_tokens = 512});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("600 tokens, over the micro-batch token budget of 512"),
            std::string::npos);
}

// Rows with 9, 1, 8, 2, 7, 3 tokens over 2 ranks, 3 each. Longest first onto the lighter
// rank with room: 9 -> r0, 8 -> r1, 7 -> r1 (15), 3 -> r0 (12), 2 -> r0 (14), 1 -> r1 (16).
TEST(SplitAcrossRanksTest, EqualCountsBalancedByTokens) {
  const auto split = SplitAcrossRanks({9, 1, 8, 2, 7, 3}, 2);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_THAT(split[0], ElementsAre(0, 3, 5));
  EXPECT_THAT(split[1], ElementsAre(1, 2, 4));
}

TEST(SplitInOrderTest, ConsecutiveRowsInEqualCounts) {
  const auto split = SplitInOrder(5, 2);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_THAT(split[0], ElementsAre(0, 1, 2));
  EXPECT_THAT(split[1], ElementsAre(3, 4));
  EXPECT_THAT(SplitInOrder(2, 3)[2], ElementsAre());
}

TEST(SplitAcrossRanksTest, UnevenCountsAndMoreRanksThanRows) {
  const auto five = SplitAcrossRanks({1, 1, 1, 1, 1}, 3);
  EXPECT_EQ(five[0].size(), 2u);
  EXPECT_EQ(five[1].size(), 2u);
  EXPECT_EQ(five[2].size(), 1u);
  const auto two = SplitAcrossRanks({4, 6}, 4);
  EXPECT_THAT(two[0], ElementsAre(1));
  EXPECT_THAT(two[1], ElementsAre(0));
  EXPECT_TRUE(two[2].empty());
  EXPECT_TRUE(two[3].empty());
  EXPECT_THAT(SplitAcrossRanks({3, 2, 1}, 1)[0], ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace rlmesh::trainer
