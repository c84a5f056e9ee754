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

}  // namespace
}  // namespace rlmesh::trainer
