// Values worked out by hand from verl's formulas (docs/grpo.md): lr = base x lambda(k - 1) at
// the k-th actor update.
#include "common/grpo/schedules.h"

#include <cmath>

#include "gtest/gtest.h"

namespace rlmesh::grpo {
namespace {

// lr 1e-3 over T = 10 updates with W = 3 warm-up steps, at updates k = 1..10.
double LrAt(const LrSchedule& s, int64_t k) { return 1e-3 * LrFactor(s, 10, k - 1); }

TEST(LrScheduleTest, ConstantWithWarmupStartsAtZero) {
  LrSchedule s;
  s.warmup_steps = 3;
  EXPECT_EQ(LrAt(s, 1), 0.0);
  EXPECT_NEAR(LrAt(s, 2), 1e-3 / 3, 1e-15);
  EXPECT_NEAR(LrAt(s, 3), 2e-3 / 3, 1e-15);
  for (int k = 4; k <= 10; ++k) EXPECT_EQ(LrAt(s, k), 1e-3) << k;
}

TEST(LrScheduleTest, CosineTailAndFloor) {
  LrSchedule s;
  s.type = LrScheduleType::kCosine;
  s.warmup_steps = 3;
  EXPECT_EQ(LrAt(s, 1), 0.0);
  EXPECT_EQ(LrAt(s, 4), 1e-3);
  // k = 5: p = 1/7, lambda = (1 + cos(pi/7)) / 2.
  EXPECT_NEAR(LrAt(s, 5), 1e-3 * (1 + std::cos(M_PI / 7)) / 2, 1e-15);
  EXPECT_NEAR(LrAt(s, 5), 9.50484434e-4, 1e-12);
  EXPECT_NEAR(LrAt(s, 10), 4.951556605e-5, 1e-13);  // p = 6/7
  // With a floor of 0.1: lambda = 0.55 + 0.45 cos(pi p), never below 0.1.
  s.min_lr_ratio = 0.1;
  EXPECT_NEAR(LrAt(s, 5), 9.554359906e-4, 1e-12);
  EXPECT_NEAR(LrAt(s, 10), 1.445640094e-4, 1e-12);
  EXPECT_NEAR(1e-3 * LrFactor(s, 10, 10), 1e-4, 1e-15);  // the end of the schedule
  // One whole cycle goes down and up again.
  s.min_lr_ratio = 0;
  s.num_cycles = 1.0;
  EXPECT_NEAR(LrAt(s, 6), 3.88739533e-4, 1e-12);  // p = 2/7
  EXPECT_NEAR(LrAt(s, 10), 8.117449009e-4, 1e-12);
}

TEST(LrScheduleTest, WarmupFromTheRatioTruncatesAsPython) {
  LrSchedule s;
  s.warmup_steps_ratio = 0.29;
  EXPECT_EQ(WarmupSteps(s, 100), 28);  // 0.29 * 100 = 28.999999999999996
  s.warmup_steps_ratio = 0.25;
  EXPECT_EQ(WarmupSteps(s, 10), 2);
  s.warmup_steps_ratio = 0.05;
  EXPECT_EQ(WarmupSteps(s, 7), 0);
  // An explicit count wins, 0 included.
  s.warmup_steps = 0;
  EXPECT_EQ(WarmupSteps(s, 100), 0);
  EXPECT_EQ(LrFactor(s, 100, 0), 1.0);
}

TEST(KlControllerTest, FixedNeverMoves) {
  auto c = KlController::Create("fixed", 0.05, 0.1, 10000);
  ASSERT_TRUE(c.ok());
  c->Update(5.0, 256);
  EXPECT_EQ(c->value(), 0.05);
}

TEST(KlControllerTest, AdaptiveAfterSeveralUpdates) {
  auto c = KlController::Create("adaptive", 0.2, 0.1, 10000);
  ASSERT_TRUE(c.ok());
  c->Update(0.05, 256);  // error clipped to -0.2: 0.2 (1 - 0.2 * 256 / 10000)
  EXPECT_NEAR(c->value(), 0.198976, 1e-15);
  c->Update(0.3, 256);  // error 2, clipped to +0.2
  EXPECT_NEAR(c->value(), 0.198976 * 1.00512, 1e-15);
  EXPECT_NEAR(c->value(), 0.19999475712, 1e-14);
  c->Update(0.1, 256);  // on target: no change
  EXPECT_NEAR(c->value(), 0.19999475712, 1e-14);
}

TEST(KlControllerTest, BadSettingsNameTheKey) {
  EXPECT_FALSE(KlController::Create("pid", 0.1, 0.1, 10).ok());
  auto bad = KlController::Create("adaptive", 0.1, 0.1, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("algorithm.kl_ctrl.horizon"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::grpo
