// DAPO's overlong shaping against hand-worked values.
#include "common/grpo/overlong.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::grpo {
namespace {

using ::testing::HasSubstr;

TEST(OverlongTest, LinearOverTheBufferAndZeroBefore) {
  // max 20, buffer 4: free up to 16 tokens, then -0.25 x factor per token, -factor at 20.
  const OverlongBuffer b{.enable = true, .len = 4, .penalty_factor = 1.0, .max_resp_len = 20};
  EXPECT_EQ(OverlongReward(10, b), 0.0);
  EXPECT_EQ(OverlongReward(16, b), 0.0);
  EXPECT_DOUBLE_EQ(OverlongReward(17, b), -0.25);
  EXPECT_DOUBLE_EQ(OverlongReward(20, b), -1.0);
  // Past the budget (a longer max_resp_len than the generation's, or none): still linear.
  EXPECT_DOUBLE_EQ(OverlongReward(22, b), -1.5);
  OverlongBuffer half = b;
  half.penalty_factor = 0.5;
  EXPECT_DOUBLE_EQ(OverlongReward(18, half), -0.25);
  OverlongBuffer off = b;
  off.enable = false;
  EXPECT_EQ(OverlongReward(20, off), 0.0);
}

TEST(OverlongTest, ChecksNameTheKey) {
  OverlongBuffer b{.enable = true, .len = 0, .penalty_factor = 1.0, .max_resp_len = 20};
  EXPECT_THAT(CheckOverlongBuffer(b).message(), HasSubstr("overlong_buffer_cfg.len"));
  b.len = 30;
  EXPECT_THAT(CheckOverlongBuffer(b).message(), HasSubstr("max_resp_len"));
  b.enable = false;
  EXPECT_TRUE(CheckOverlongBuffer(b).ok());
}

}  // namespace
}  // namespace rlmesh::grpo
