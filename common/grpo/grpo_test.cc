// Expected values are worked out by hand in the comments (or from a formula), never taken
// from the code's output. Value tests run in float32 and float64.
#include "common/grpo/grpo.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlmesh::grpo {
namespace {

using ::testing::HasSubstr;

torch::Tensor Mat(const std::vector<std::vector<double>>& rows, torch::Dtype dtype) {
  const int64_t cols = static_cast<int64_t>(rows.front().size());
  auto t = torch::empty({static_cast<int64_t>(rows.size()), cols}, torch::kFloat64);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t j = 0; j < cols; ++j) t[i][j] = rows[i][j];
  }
  return t.to(dtype);
}

torch::Tensor Vec(const std::vector<double>& v, torch::Dtype dtype) {
  return torch::tensor(v, torch::kFloat64).to(dtype);
}

double Item(const torch::Tensor& t) { return t.item<double>(); }

void ExpectMatNear(const torch::Tensor& got, const std::vector<std::vector<double>>& want,
                   double tol) {
  ASSERT_EQ(got.dim(), 2);
  ASSERT_EQ(got.size(0), static_cast<int64_t>(want.size()));
  const auto g = got.to(torch::kFloat64).contiguous();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(g.size(1), static_cast<int64_t>(want[i].size()));
    for (size_t j = 0; j < want[i].size(); ++j) {
      EXPECT_NEAR(g[i][j].item<double>(), want[i][j], tol) << "at [" << i << "][" << j << "]";
    }
  }
}

class GrpoDtypeTest : public ::testing::TestWithParam<torch::Dtype> {
 protected:
  torch::Dtype dtype() const { return GetParam(); }
  double tol() const { return dtype() == torch::kFloat64 ? 1e-9 : 2e-6; }
};

INSTANTIATE_TEST_SUITE_P(Dtypes, GrpoDtypeTest, ::testing::Values(torch::kFloat32, torch::kFloat64),
                         [](const auto& info) {
                           return info.param == torch::kFloat32 ? "Float32" : "Float64";
                         });

// ---------------------------------------------------------------- KL

TEST(KlTypeTest, ParsesVerlNames) {
  EXPECT_EQ(*ParseKlType("kl"), KlType::kKl);
  EXPECT_EQ(*ParseKlType("k1"), KlType::kKl);
  EXPECT_EQ(*ParseKlType("abs"), KlType::kAbs);
  EXPECT_EQ(*ParseKlType("mse"), KlType::kMse);
  EXPECT_EQ(*ParseKlType("k2"), KlType::kMse);
  EXPECT_EQ(*ParseKlType("low_var_kl"), KlType::kLowVarKl);
  EXPECT_EQ(*ParseKlType("k3"), KlType::kLowVarKl);
  EXPECT_EQ(*ParseKlType("k3+"), KlEstimator(KlType::kLowVarKl, true));
  EXPECT_EQ(*ParseKlType("low_var_kl+"), KlEstimator(KlType::kLowVarKl, true));
  EXPECT_EQ(*ParseKlType("k1+"), KlEstimator(KlType::kKl, true));
  EXPECT_EQ(*ParseKlType("abs+"), KlEstimator(KlType::kAbs, true));
  EXPECT_EQ(*ParseKlType("k2+"), KlEstimator(KlType::kMse, true));
  EXPECT_FALSE(*ParseKlType("k3") == KlEstimator(KlType::kLowVarKl, true));
  for (const char* bad : {"full", "full+", "k3++", "+", "K1", ""}) {
    auto r = ParseKlType(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(std::string("\"") + bad + "\""));
  }
  for (KlType t : {KlType::kKl, KlType::kAbs, KlType::kMse, KlType::kLowVarKl}) {
    EXPECT_EQ(*ParseKlType(KlTypeName(t)), t);
    EXPECT_EQ(*ParseKlType(KlTypeName(KlEstimator(t, true))), KlEstimator(t, true));
  }
  EXPECT_EQ(KlTypeName(KlEstimator(KlType::kLowVarKl, true)), "low_var_kl+");
}

// verl's "k3+": the value of k3, the gradient of k2 (d/dlogp of 0.5 delta^2 = delta); the
// plain estimators keep their own gradients (k1: 1, abs: sign(delta), k3: 1 - e^-delta).
TEST(KlPenaltyTest, StraightThroughKeepsTheValueAndTakesTheGradientOfK2) {
  const std::vector<double> delta = {0.5, -1, 2};
  const auto ref = torch::tensor({-1.5, -1.0, -3.0}, torch::kFloat64).view({1, 3});
  for (KlType t : {KlType::kKl, KlType::kAbs, KlType::kMse, KlType::kLowVarKl}) {
    SCOPED_TRACE(KlTypeName(t));
    auto logp_plain = (ref + torch::tensor(delta, torch::kFloat64).view({1, 3})).detach();
    auto logp_plus = logp_plain.clone();
    logp_plain.set_requires_grad(true);
    logp_plus.set_requires_grad(true);
    auto plain = *KlPenalty(logp_plain, ref, t);
    auto plus = *KlPenalty(logp_plus, ref, KlEstimator(t, true));
    EXPECT_TRUE(torch::equal(plain.detach(), plus.detach()));
    plain.sum().backward();
    plus.sum().backward();
    for (int i = 0; i < 3; ++i) {
      const double d = delta[i];
      EXPECT_NEAR(logp_plus.grad()[0][i].item<double>(), d, 1e-12) << i;
      double want = 0;
      switch (t) {
        case KlType::kKl:
          want = 1;
          break;
        case KlType::kAbs:
          want = d > 0 ? 1 : -1;
          break;
        case KlType::kMse:
          want = d;
          break;
        case KlType::kLowVarKl:
          want = 1 - std::exp(-d);
          break;
      }
      EXPECT_NEAR(logp_plain.grad()[0][i].item<double>(), want, 1e-12) << i;
    }
  }
}

TEST_P(GrpoDtypeTest, KlPenaltyEveryType) {
  // logp = [-1, -2, 0, 25], ref = [-1.5, -1, 25, 0]: delta = logp - ref = [0.5, -1, -25, 25].
  const auto logp = Mat({{-1, -2, 0, 25}}, dtype());
  const auto ref = Mat({{-1.5, -1, 25, 0}}, dtype());
  ExpectMatNear(*KlPenalty(logp, ref, KlType::kKl), {{0.5, -1, -25, 25}}, tol());
  ExpectMatNear(*KlPenalty(logp, ref, KlType::kAbs), {{0.5, 1, 25, 25}}, tol());
  ExpectMatNear(*KlPenalty(logp, ref, KlType::kMse), {{0.125, 0.5, 312.5, 312.5}}, 1e-4);
  // k3: x = ref - logp = [-0.5, 1, 25 -> 20, -25 -> -20].
  // e^-0.5 + 0.5 - 1 = 0.1065306597 (verl: 0.106531); e - 2 = 0.7182818285;
  // e^20 - 21 is huge and e^-20 + 19 > 10: both clamp to 10.
  ExpectMatNear(*KlPenalty(logp, ref, KlType::kLowVarKl),
                {{std::exp(-0.5) - 0.5, std::exp(1.0) - 2, 10, 10}}, 1e-6);
  EXPECT_NEAR(std::exp(-0.5) - 0.5, 0.106531, 1e-6);
}

TEST(KlPenaltyTest, RejectsShapeMismatch) {
  auto r = KlPenalty(torch::zeros({2, 3}), torch::zeros({2, 4}), KlType::kKl);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("ref_logp"));
}

// ---------------------------------------------------------------- AggLoss

TEST(LossAggModeTest, ParsesVerlNames) {
  for (LossAggMode m : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenSum,
                        LossAggMode::kSeqMeanTokenMean, LossAggMode::kSeqMeanTokenSumNorm}) {
    EXPECT_EQ(*ParseLossAggMode(LossAggModeName(m)), m);
  }
  EXPECT_EQ(*ParseLossAggMode("token-mean"), LossAggMode::kTokenMean);
  auto bad = ParseLossAggMode("seq-mean");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("\"seq-mean\""));
}

TEST_P(GrpoDtypeTest, AggLossEveryModeWithAnEmptyRow) {
  // Row 1 has no valid token; the masked entry [0][2] is NaN and must not leak.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto loss = Mat({{1, 2, nan}, {4, 5, 6}, {7, 8, 9}}, dtype());
  const auto mask = Mat({{1, 1, 0}, {0, 0, 0}, {1, 1, 1}}, dtype());
  // Row sums: 3, 0, 24; counts 2, 0, 3.
  EXPECT_NEAR(Item(*AggLoss(loss, mask, LossAggMode::kTokenMean)), 27.0 / 5, tol() * 10);
  EXPECT_NEAR(Item(*AggLoss(loss, mask, LossAggMode::kSeqMeanTokenSum)), 27.0 / 2, tol() * 10);
  EXPECT_NEAR(Item(*AggLoss(loss, mask, LossAggMode::kSeqMeanTokenMean)), (1.5 + 8) / 2, 1e-6);
  EXPECT_NEAR(Item(*AggLoss(loss, mask, LossAggMode::kSeqMeanTokenSumNorm)), 27.0 / 3, tol() * 10);
  EXPECT_NEAR(Item(*AggLoss(loss, mask, LossAggMode::kSeqMeanTokenSumNorm, 4.5)), 6.0, tol() * 10);
  EXPECT_EQ(AggLoss(loss, mask, LossAggMode::kTokenMean)->scalar_type(), dtype());
  // A boolean mask means the same.
  EXPECT_NEAR(Item(*AggLoss(loss, mask.to(torch::kBool), LossAggMode::kTokenMean)), 5.4,
              tol() * 10);
}

TEST(AggLossTest, AllEmptyMaskGivesZeroWithZeroGradient) {
  for (LossAggMode m : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenSum,
                        LossAggMode::kSeqMeanTokenMean, LossAggMode::kSeqMeanTokenSumNorm}) {
    auto loss = torch::full({2, 3}, 5.0, torch::kFloat64).requires_grad_(true);
    auto agg = AggLoss(loss, torch::zeros({2, 3}), m);
    ASSERT_TRUE(agg.ok()) << agg.status();
    EXPECT_EQ(Item(*agg), 0.0) << LossAggModeName(m);
    agg->backward();
    EXPECT_EQ(loss.grad().abs().sum().item<double>(), 0.0) << LossAggModeName(m);
  }
}

TEST(AggLossTest, RejectsMaskShapeMismatch) {
  auto r = AggLoss(torch::zeros({2, 3}), torch::zeros({3, 2}), LossAggMode::kTokenMean);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("mask"));
}

// ---------------------------------------------------------------- PolicyLoss

// Tokens (old_logp = 0, so rho = exp(logp)), clip_low 0.2, clip_high 0.28, clip_c 3:
//  a: A = 1,  rho = 1.5: L1 = -1.5, L2 = -1.28, Lc = -1.28; clipped (L2 > L1).
//  b: A = -1, rho = 5:   L1 = 5, L2 = 1.28, Lc = 5, L3 = 3 -> 3; dual-clipped (lower).
//  c: A = -2, rho = 0.5: L1 = 1, L2 = 2 * 0.8 = 1.6, Lc = 1.6 < L3 = 6 -> 1.6; clipped.
//  d: A = 0.5, rho = 1:  L1 = L2 = -0.5; not clipped.
// The last column is masked out and holds extreme values.
struct PolicyCase {
  torch::Tensor old_logp, logp, adv, mask;
};

PolicyCase MakePolicyCase(torch::Dtype dtype) {
  return {torch::zeros({2, 3}, dtype),
          Mat({{std::log(1.5), std::log(5.0), 30}, {std::log(0.5), 0, -40}}, dtype),
          Mat({{1, -1, 7}, {-2, 0.5, -9}}, dtype), Mat({{1, 1, 0}, {1, 1, 0}}, dtype)};
}

TEST_P(GrpoDtypeTest, PolicyLossDualClipAndMetrics) {
  auto c = MakePolicyCase(dtype());
  c.logp.requires_grad_(true);
  auto r = PolicyLoss(c.old_logp, c.logp, c.adv, c.mask, 0.2, 0.28, 3.0, LossAggMode::kTokenMean);
  ASSERT_TRUE(r.ok()) << r.status();
  // (-1.28 + 3 + 1.6 - 0.5) / 4 = 0.705.
  EXPECT_NEAR(Item(r->loss), 0.705, 1e-6);
  EXPECT_NEAR(Item(r->clipfrac), 0.5, tol());
  EXPECT_NEAR(Item(r->clipfrac_lower), 0.25, tol());
  // ppo_kl = mean(old - logp) = -(ln 1.5 + ln 5 + ln 0.5 + 0) / 4 = -ln(3.75) / 4.
  EXPECT_NEAR(Item(r->ppo_kl), -std::log(3.75) / 4, 1e-6);
  // Only token d is unclipped: d(-A rho)/d logp = -A rho = -0.5, over 4 tokens.
  r->loss.backward();
  ExpectMatNear(c.logp.grad(), {{0, 0, 0}, {0, -0.125, 0}}, 1e-6);
}

TEST_P(GrpoDtypeTest, PolicyLossTokenLossReferenceAndSeqMode) {
  // verl reference: A = -1, rho = 5, clip_c = 3 gives token loss 3.
  auto one = PolicyLoss(torch::zeros({1, 1}, dtype()), Mat({{std::log(5.0)}}, dtype()),
                        Mat({{-1}}, dtype()), torch::ones({1, 1}, dtype()), 0.2, 0.2, 3.0,
                        LossAggMode::kTokenMean);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_NEAR(Item(one->loss), 3.0, 1e-5);
  // Below the dual-clip bound: A = -1, rho = 2 gives Lc = max(2, 1.2) = 2 < 3.
  auto two = PolicyLoss(torch::zeros({1, 1}, dtype()), Mat({{std::log(2.0)}}, dtype()),
                        Mat({{-1}}, dtype()), torch::ones({1, 1}, dtype()), 0.2, 0.2, 3.0,
                        LossAggMode::kTokenMean);
  EXPECT_NEAR(Item(two->loss), 2.0, 1e-5);
  EXPECT_NEAR(Item(two->clipfrac_lower), 0.0, tol());
  // seq-mean-token-sum on the shared case: rows (-1.28 + 3) and (1.6 - 0.5) -> mean 1.41.
  auto c = MakePolicyCase(dtype());
  auto seq = PolicyLoss(c.old_logp, c.logp, c.adv, c.mask, 0.2, 0.28, 3.0,
                        LossAggMode::kSeqMeanTokenSum);
  EXPECT_NEAR(Item(seq->loss), 1.41, 1e-5);
}

TEST_P(GrpoDtypeTest, PolicyLossWeighsEachTokenByItsImportanceWeight) {
  // Weights 2, 0, 0.5, 4 on tokens a..d (NaN behind the mask): token losses -1.28 x 2, 3 x 0,
  // 1.6 x 0.5, -0.5 x 4 -> (-2.56 + 0 + 0.8 - 2) / 4 = -0.94. Metrics stay unweighted.
  auto c = MakePolicyCase(dtype());
  c.logp.requires_grad_(true);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto w = Mat({{2, 0, nan}, {0.5, 4, nan}}, dtype());
  auto r =
      PolicyLoss(c.old_logp, c.logp, c.adv, c.mask, 0.2, 0.28, 3.0, LossAggMode::kTokenMean, -1, w);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(Item(r->loss), -0.94, 1e-5);
  EXPECT_NEAR(Item(r->clipfrac), 0.5, tol());
  // The gradient of token d is scaled by its weight: -0.5 x 4 / 4.
  r->loss.backward();
  ExpectMatNear(c.logp.grad(), {{0, 0, 0}, {0, -0.5, 0}}, 1e-5);
  auto shape = PolicyLoss(c.old_logp, c.logp, c.adv, c.mask, 0.2, 0.28, 3.0,
                          LossAggMode::kTokenMean, -1, torch::ones({2, 2}, dtype()));
  EXPECT_THAT(shape.status().message(), HasSubstr("is_weights"));
}

TEST(PolicyLossTest, RejectsBadClipRatios) {
  const auto z = torch::zeros({1, 2});
  auto c = PolicyLoss(z, z, z, z, 0.2, 0.2, 1.0, LossAggMode::kTokenMean);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("clip_ratio_c"));
  auto low = PolicyLoss(z, z, z, z, 1.0, 0.2, 3.0, LossAggMode::kTokenMean);
  EXPECT_THAT(low.status().message(), HasSubstr("clip_ratio_low"));
  auto shape = PolicyLoss(z, z, torch::zeros({2, 1}), z, 0.2, 0.2, 3.0, LossAggMode::kTokenMean);
  EXPECT_THAT(shape.status().message(), HasSubstr("advantages"));
}

// ---------------------------------------------------------------- Entropy

TEST_P(GrpoDtypeTest, EntropyFromLogits) {
  // Uniform over 4: ln 4. Logits [0, ln 3] -> p = [1/4, 3/4]:
  // H = 0.25 ln 4 + 0.75 ln(4/3) = 0.5623351446. Shifting logits by 1000 changes nothing.
  const double h2 = 0.25 * std::log(4.0) + 0.75 * std::log(4.0 / 3.0);
  auto logits = torch::zeros({2, 2, 4}, dtype());
  logits[0][1].copy_(Vec({0, std::log(3.0), -1e9, -1e9}, dtype()));
  logits[1][0].copy_(Vec({1000, 1000 + std::log(3.0), -1e9, -1e9}, dtype()));
  logits[1][1].copy_(Vec({5, 5, 5, 5}, dtype()));
  auto h = EntropyFromLogits(logits);
  ASSERT_TRUE(h.ok()) << h.status();
  // In float32 the logits near 1000 carry an absolute error of ~6e-5 each.
  ExpectMatNear(*h, {{std::log(4.0), h2}, {h2, std::log(4.0)}},
                dtype() == torch::kFloat64 ? 1e-9 : 3e-4);
}

// ---------------------------------------------------------------- Gradient check

// f(logp) = PolicyLoss + 0.1 KL-loss - 0.01 entropy, all aggregated with the same mode, in
// float64; autograd against central finite differences, for every mode and KL type.
TEST(GrpoGradientTest, AutogradMatchesFiniteDifferences) {
  torch::manual_seed(1234);
  const int64_t b = 3, t = 5;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const auto base = -torch::rand({b, t}, opts) * 2 - 0.1;
  const auto old_logp = base + torch::randn({b, t}, opts) * 0.3;
  const auto ref_logp = base + torch::randn({b, t}, opts) * 0.3;
  const auto adv = torch::tensor({1.3, -0.7, -2.1}, opts).unsqueeze(1).expand({b, t}).clone();
  const auto mask = torch::tensor({{1, 1, 1, 1, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 1, 1}}, opts);
  const auto entropy_logits = torch::randn({b, t, 4}, opts);

  for (LossAggMode mode : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenSum,
                           LossAggMode::kSeqMeanTokenMean, LossAggMode::kSeqMeanTokenSumNorm}) {
    for (KlType kl : {KlType::kKl, KlType::kAbs, KlType::kMse, KlType::kLowVarKl}) {
      // Entropy depends on logits; tie them to logp so one variable drives everything.
      auto f = [&](const torch::Tensor& logp) {
        auto pg = PolicyLoss(old_logp, logp, adv, mask, 0.2, 0.28, 3.0, mode);
        auto kld = KlPenalty(logp, ref_logp, kl);
        auto ent = EntropyFromLogits(entropy_logits * logp.unsqueeze(-1));
        EXPECT_TRUE(pg.ok() && kld.ok() && ent.ok());
        return pg->loss + 0.1 * *AggLoss(*kld, mask, mode) - 0.01 * *AggLoss(*ent, mask, mode);
      };
      auto x = base.clone().requires_grad_(true);
      f(x).backward();
      const auto grad = x.grad();
      const double h = 1e-6;
      double max_err = 0;
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t j = 0; j < t; ++j) {
          auto plus = base.clone();
          auto minus = base.clone();
          plus[i][j] += h;
          minus[i][j] -= h;
          const double fd = (Item(f(plus)) - Item(f(minus))) / (2 * h);
          max_err = std::max(max_err, std::abs(fd - grad[i][j].item<double>()));
        }
      }
      EXPECT_LT(max_err, 1e-7) << LossAggModeName(mode) << " " << KlTypeName(kl);
      // The masked-out tokens get no gradient.
      EXPECT_EQ(grad[0][4].item<double>(), 0.0);
      EXPECT_EQ(grad[1][3].item<double>(), 0.0);
    }
  }
}

}  // namespace
}  // namespace rlmesh::grpo
