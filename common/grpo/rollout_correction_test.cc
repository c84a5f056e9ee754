// Expected values are worked out by hand in the comments, never taken from the code's output.
// The inputs are built from chosen log-ratios r = old_logp - rollout_logp (rollout_logp = -2
// everywhere), so that every weight is a round number.
#include "common/grpo/rollout_correction.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace rlmesh::grpo {
namespace {

using ::testing::HasSubstr;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

class RolloutCorrectionTest : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  torch::Dtype dtype() const { return GetParam(); }
  double tol() const { return dtype() == torch::kFloat64 ? 1e-7 : 2e-5; }

  torch::Tensor Mat(const std::vector<std::vector<double>>& rows) const {
    auto t =
        torch::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.front().size())},
                     torch::kFloat64);
    for (size_t i = 0; i < rows.size(); ++i) {
      for (size_t j = 0; j < rows[i].size(); ++j) t[i][j] = rows[i][j];
    }
    return t.to(dtype());
  }

  // Row 0: r = [ln 2, -ln 4, 0] (token weights 2, 1/4, 1; sum -ln 2, sequence weight 1/2).
  // Row 1: r = [ln 3, masked, masked] (weight 3), with NaN behind the mask.
  torch::Tensor rollout() const { return Mat({{-2, -2, -2}, {-2, kNaN, -2}}); }
  torch::Tensor old() const {
    return Mat({{-2 + std::log(2.0), -2 - std::log(4.0), -2}, {-2 + std::log(3.0), kNaN, 7}});
  }
  torch::Tensor mask() const { return torch::tensor({{1, 1, 1}, {1, 0, 0}}, torch::kInt64); }

  void ExpectWeights(const torch::Tensor& got, const std::vector<std::vector<double>>& want) {
    ASSERT_EQ(got.sizes(), torch::IntArrayRef({2, 3}));
    EXPECT_EQ(got.scalar_type(), dtype());
    EXPECT_FALSE(got.requires_grad());
    const auto g = got.to(torch::kFloat64);
    for (size_t i = 0; i < want.size(); ++i) {
      for (size_t j = 0; j < want[i].size(); ++j) {
        EXPECT_NEAR(g[i][j].item<double>(), want[i][j], tol()) << "at [" << i << "][" << j << "]";
      }
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Dtypes, RolloutCorrectionTest,
                         ::testing::Values(torch::kFloat32, torch::kFloat64), [](const auto& info) {
                           return info.param == torch::kFloat32 ? "Float32" : "Float64";
                         });

TEST_P(RolloutCorrectionTest, TokenWeightsAndMetrics) {
  // Threshold 1.5, lower bound 2/3. Valid weights 2, 1/4, 1, 3.
  auto r = RolloutIsWeights(old(), rollout(), mask(), RolloutIsLevel::kToken, 1.5, false);
  ASSERT_TRUE(r.ok()) << r.status();
  // Truncated at 1.5; masked positions 0 although NaN sits there.
  ExpectWeights(r->weights, {{1.5, 0.25, 1}, {1.5, 0, 0}});
  const auto& m = r->metrics;
  EXPECT_NEAR(m.at("rollout_is_mean"), 6.25 / 4, tol());  // before truncation
  EXPECT_NEAR(m.at("rollout_is_max"), 3, tol());
  EXPECT_NEAR(m.at("rollout_is_min"), 0.25, tol());
  EXPECT_NEAR(m.at("rollout_is_ratio_fraction_high"), 0.5, tol());  // 2 and 3 > 1.5
  EXPECT_NEAR(m.at("rollout_is_ratio_fraction_low"), 0.25, tol());  // 1/4 < 2/3
  // Clamped to [2/3, 1.5]: 1.5, 2/3, 1, 1.5; mean 7/6, E[c^2] = 214/144, var = 18/144.
  EXPECT_NEAR(m.at("rollout_is_std"), std::sqrt(0.125), tol());
  // ESS = mean^2 / E[c^2] = (49/36) / (214/144) = 196/214.
  EXPECT_NEAR(m.at("rollout_is_eff_sample_size"), 196.0 / 214, 1e-6);
  // Row means of the untruncated weights: 3.25/3 and 3.
  EXPECT_NEAR(m.at("rollout_is_seq_mean"), (3.25 / 3 + 3) / 2, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_std"), (3 - 3.25 / 3) / std::sqrt(2.0), tol());
  EXPECT_NEAR(m.at("rollout_is_seq_max"), 3, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_min"), 3.25 / 3, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_max_deviation"), 2, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_fraction_high"), 0.5, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_fraction_low"), 0, tol());
  EXPECT_EQ(m.count("rollout_is_batch_norm_factor"), 0u);
}

TEST_P(RolloutCorrectionTest, TokenBatchNormalizeDividesByTheTruncatedMean) {
  // Truncated weights 1.5, 1/4, 1, 1.5: mean 4.25 / 4 = 1.0625.
  auto r = RolloutIsWeights(old(), rollout(), mask(), RolloutIsLevel::kToken, 1.5, true);
  ASSERT_TRUE(r.ok()) << r.status();
  const double f = 1.0625;
  EXPECT_NEAR(r->metrics.at("rollout_is_batch_norm_factor"), f, tol());
  ExpectWeights(r->weights, {{1.5 / f, 0.25 / f, 1 / f}, {1.5 / f, 0, 0}});
}

TEST_P(RolloutCorrectionTest, SequenceWeightsAndMetrics) {
  // Row sums -ln 2 and ln 3: weights 1/2 for each token of row 0, 3 for row 1.
  auto r = RolloutIsWeights(old(), rollout(), mask(), RolloutIsLevel::kSequence, 1.5, false);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectWeights(r->weights, {{0.5, 0.5, 0.5}, {1.5, 0, 0}});
  const auto& m = r->metrics;
  EXPECT_NEAR(m.at("rollout_is_mean"), 4.5 / 4, tol());  // token-weighted: 0.5 x 3 and 3
  EXPECT_NEAR(m.at("rollout_is_max"), 3, tol());
  EXPECT_NEAR(m.at("rollout_is_min"), 0.5, tol());
  EXPECT_NEAR(m.at("rollout_is_ratio_fraction_high"), 0.5, tol());  // per row: 3 > 1.5
  EXPECT_NEAR(m.at("rollout_is_ratio_fraction_low"), 0.5, tol());   // per row: 1/2 < 2/3
  // Clamped: 2/3 x 3 and 1.5; mean 3.5/4 = 0.875, E[c^2] = (4/3 + 2.25)/4 = 43/48.
  const double var = 43.0 / 48 - 0.875 * 0.875;
  EXPECT_NEAR(m.at("rollout_is_std"), std::sqrt(var), tol());
  EXPECT_NEAR(m.at("rollout_is_eff_sample_size"), 0.875 * 0.875 / (43.0 / 48), 1e-6);
  EXPECT_NEAR(m.at("rollout_is_seq_mean"), 1.75, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_std"), 2.5 / std::sqrt(2.0), tol());
  EXPECT_NEAR(m.at("rollout_is_seq_max"), 3, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_min"), 0.5, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_max_deviation"), 2, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_fraction_high"), 0.5, tol());
  EXPECT_NEAR(m.at("rollout_is_seq_fraction_low"), 0.5, tol());
}

TEST_P(RolloutCorrectionTest, SequenceBatchNormalizeAveragesOverRows) {
  // Threshold 2: row weights 1/2 and min(3, 2) = 2; the row mean 1.25 (not the token mean
  // (1.5 + 2) / 4 = 0.875) is the factor.
  auto r = RolloutIsWeights(old(), rollout(), mask(), RolloutIsLevel::kSequence, 2, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->metrics.at("rollout_is_batch_norm_factor"), 1.25, tol());
  ExpectWeights(r->weights, {{0.4, 0.4, 0.4}, {1.6, 0, 0}});
}

TEST_P(RolloutCorrectionTest, SequenceRatioBeyondTheSafetyBoundIsCountedInLogSpace) {
  // One row of 3 tokens with r = 10 each: sum 30, weight exp(min(30, 20)) truncated to 2.
  const auto rollout_logp = Mat({{-12, -12, -12}});
  const auto old_logp = Mat({{-2, -2, -2}});
  const auto m = torch::ones({1, 3});
  auto r = RolloutIsWeights(old_logp, rollout_logp, m, RolloutIsLevel::kSequence, 2, false);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectWeights(r->weights.expand({2, 3}), {{2, 2, 2}, {2, 2, 2}});
  EXPECT_NEAR(r->metrics.at("rollout_is_max") / std::exp(20.0), 1, 1e-5);
  EXPECT_NEAR(r->metrics.at("rollout_is_ratio_fraction_high"), 1, tol());
  EXPECT_NEAR(r->metrics.at("rollout_is_std"), 0, tol());  // all clamped to 2
}

TEST_P(RolloutCorrectionTest, WeightsCarryNoGradient) {
  auto old_logp = old().detach().requires_grad_(true);
  auto r = RolloutIsWeights(old_logp, rollout(), mask(), RolloutIsLevel::kToken, 2, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->weights.requires_grad());
}

TEST_P(RolloutCorrectionTest, OffPolicyMetrics) {
  auto r = OffPolicyMetrics(old(), rollout(), mask());
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& m = *r;
  // Row means of old_logp: -2 - ln2/3 and -2 + ln 3; of rollout_logp: -2 and -2.
  const double t0 = -2 - std::log(2.0) / 3, t1 = -2 + std::log(3.0);
  EXPECT_NEAR(m.at("training_log_ppl"), -(t0 + t1) / 2, tol());
  EXPECT_NEAR(m.at("training_ppl"), (std::exp(-t0) + std::exp(-t1)) / 2, 1e-5);
  EXPECT_NEAR(m.at("rollout_log_ppl"), 2, tol());
  EXPECT_NEAR(m.at("rollout_ppl"), std::exp(2.0), 1e-5);
  // kl: mean of -r over 4 tokens = -(ln 2 - ln 4 + 0 + ln 3) / 4.
  EXPECT_NEAR(m.at("kl"), -(std::log(3.0) - std::log(2.0)) / 4, tol());
  // k3: e^r - r - 1 = 1 - ln 2, 1/4 + ln 4 - 1, 0, 2 - ln 3.
  const double k3 = (1 - std::log(2.0)) + (std::log(4.0) - 0.75) + (2 - std::log(3.0));
  EXPECT_NEAR(m.at("k3_kl"), k3 / 4, tol());
  // Per row rollout mean - training mean: ln2/3 and -ln 3.
  const double d0 = std::log(2.0) / 3, d1 = -std::log(3.0);
  EXPECT_NEAR(m.at("log_ppl_diff"), (d0 + d1) / 2, tol());
  EXPECT_NEAR(m.at("log_ppl_abs_diff"), (d0 - d1) / 2, tol());
  EXPECT_NEAR(m.at("log_ppl_diff_max"), d0, tol());
  EXPECT_NEAR(m.at("log_ppl_diff_min"), d1, tol());
  EXPECT_NEAR(m.at("ppl_ratio"), (std::exp(d0) + 1.0 / 3) / 2, tol());
  // rho^2: 4, 1/16, 1, 9 -> mean 14.0625 / 4; sequence: exp(2 * (-ln 2)) = 1/4 and 9.
  EXPECT_NEAR(m.at("chi2_token"), 14.0625 / 4 - 1, tol());
  EXPECT_NEAR(m.at("chi2_seq"), (0.25 + 9) / 2 - 1, tol());
}

TEST_P(RolloutCorrectionTest, RejectsBadArgumentsNamingThem) {
  auto bad_threshold = RolloutIsWeights(old(), rollout(), mask(), RolloutIsLevel::kToken, 0, false);
  EXPECT_THAT(bad_threshold.status().message(), HasSubstr("rollout_is_threshold"));
  const auto empty = torch::zeros({2, 3});
  auto no_tokens = RolloutIsWeights(old(), rollout(), empty, RolloutIsLevel::kToken, 2, false);
  EXPECT_THAT(no_tokens.status().message(), HasSubstr("mask"));
  EXPECT_THAT(OffPolicyMetrics(old(), rollout(), empty).status().message(), HasSubstr("mask"));
  auto shape = OffPolicyMetrics(old(), Mat({{-1, -1}}), mask());
  EXPECT_THAT(shape.status().message(), HasSubstr("rollout_logp"));
}

TEST(RolloutIsLevelTest, ParsesVerlNames) {
  EXPECT_EQ(*ParseRolloutIsLevel("token"), RolloutIsLevel::kToken);
  EXPECT_EQ(*ParseRolloutIsLevel("sequence"), RolloutIsLevel::kSequence);
  EXPECT_EQ(RolloutIsLevelName(RolloutIsLevel::kSequence), "sequence");
  auto bad = ParseRolloutIsLevel("seq");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'seq'"));
}

}  // namespace
}  // namespace rlmesh::grpo
