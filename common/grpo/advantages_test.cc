// The advantage estimators against hand-worked batches, and against a second computation of
// verl's formulas written here with tensor operations (per-group selections, torch.std,
// torch.mean) on random float64 batches with random masks, empty rows and groups of one.
#include "common/grpo/advantages.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::grpo {
namespace {

using ::testing::HasSubstr;

// Rows of token rewards with the score at the last of `lengths[i]` tokens, padded to the
// longest row, and their mask.
struct Rows {
  torch::Tensor rewards, mask, groups;
};
Rows Outcome(const std::vector<double>& scores, const std::vector<int64_t>& lengths,
             const std::vector<int64_t>& groups) {
  const int64_t b = static_cast<int64_t>(scores.size());
  int64_t t = 1;
  for (int64_t l : lengths) t = std::max(t, l);
  Rows rows{torch::zeros({b, t}, torch::kFloat64), torch::zeros({b, t}, torch::kFloat64),
            torch::tensor(groups, torch::kInt64)};
  for (int64_t i = 0; i < b; ++i) {
    if (lengths[i] > 0) rows.rewards[i][lengths[i] - 1] = scores[i];
    for (int64_t j = 0; j < lengths[i]; ++j) rows.mask[i][j] = 1;
  }
  return rows;
}

// The advantage of each row's first token (every token of an outcome estimator's row).
std::vector<double> FirstTokens(const Advantages& a) {
  std::vector<double> out;
  for (int64_t i = 0; i < a.advantages.size(0); ++i)
    out.push_back(a.advantages[i][0].item<double>());
  return out;
}

std::vector<double> Estimate(AdvEstimator e, const Rows& rows, AdvantageOptions options = {}) {
  auto a = EstimateAdvantages(e, rows.rewards, rows.mask, rows.groups, options);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? FirstTokens(*a) : std::vector<double>{};
}

TEST(AdvantagesTest, HandWorkedOutcomeEstimators) {
  // Group 0: scores 1, 0 (lengths 2 and 6); group 1: a lone 3.
  const Rows rows = Outcome({1, 0, 3}, {2, 6, 1}, {0, 0, 1});
  // grpo: mean 0.5, std sqrt(0.5) = 0.70710678; the lone sample: 3 / (1 + eps).
  const double s = std::sqrt(0.5) + 1e-6;
  EXPECT_THAT(Estimate(AdvEstimator::kGrpo, rows),
              testing::Pointwise(testing::DoubleNear(1e-12), {0.5 / s, -0.5 / s, 3 / (1 + 1e-6)}));
  AdvantageOptions dr;
  dr.norm_adv_by_std = false;
  EXPECT_THAT(Estimate(AdvEstimator::kGrpo, rows, dr),
              testing::Pointwise(testing::DoubleNear(1e-12), {0.5, -0.5, 3.0}));
  // rloo over n = 2: s * 2 - mean * 2 = +-1; the lone sample keeps 3 (loop) or gets 0.
  EXPECT_THAT(Estimate(AdvEstimator::kRloo, rows),
              testing::Pointwise(testing::DoubleNear(1e-12), {1.0, -1.0, 3.0}));
  EXPECT_THAT(Estimate(AdvEstimator::kRlooVectorized, rows),
              testing::Pointwise(testing::DoubleNear(1e-12), {1.0, -1.0, 0.0}));
  // opo: baseline (2 x 1 + 6 x 0) / 8 = 0.25; a lone sample's baseline is 0.
  EXPECT_THAT(Estimate(AdvEstimator::kOpo, rows),
              testing::Pointwise(testing::DoubleNear(1e-12), {0.75, -0.25, 3.0}));
  // gpg: 2 nonzero scores of 3, alpha = 1.5; centred 0.5, -0.5, 3 (lone: mean 0).
  EXPECT_THAT(Estimate(AdvEstimator::kGpg, rows),
              testing::Pointwise(testing::DoubleNear(1e-12), {0.75, -0.75, 4.5}));
  // grpo_vectorized: variance (1 - 1/2) / 1 = 0.5 (above the floor), the same as grpo.
  EXPECT_THAT(Estimate(AdvEstimator::kGrpoVectorized, rows),
              testing::Pointwise(testing::DoubleNear(1e-12), {0.5 / s, -0.5 / s, 3 / (1 + 1e-6)}));
  // An all-equal group: grpo_vectorized's variance floor (eps) keeps it finite, 0.
  EXPECT_THAT(Estimate(AdvEstimator::kGrpoVectorized, Outcome({2, 2}, {1, 1}, {0, 0})),
              testing::Pointwise(testing::DoubleNear(1e-12), {0.0, 0.0}));
}

// GRPO's group statistics by hand, with the advantage broadcast over each row's mask.
TEST(AdvantagesTest, GrpoHandWorkedGroups) {
  // One group, rewards [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 x 0.25 / 3) = 0.5773503,
  // A = +-0.5 / (0.5773503 + 1e-6) = +-0.866024, on every valid token and 0 elsewhere.
  const Rows one = Outcome({1, 0, 0, 1}, {2, 1, 3, 3}, {4, 4, 4, 4});
  auto a = EstimateAdvantages(AdvEstimator::kGrpo, one.rewards, one.mask, one.groups, {});
  ASSERT_TRUE(a.ok()) << a.status();
  const double v = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  EXPECT_NEAR(v, 0.866024, 1e-6);
  const std::vector<std::vector<double>> want = {{v, v, 0}, {-v, 0, 0}, {-v, -v, -v}, {v, v, v}};
  for (size_t i = 0; i < want.size(); ++i) {
    for (size_t j = 0; j < want[i].size(); ++j) {
      EXPECT_NEAR(a->advantages[i][j].item<double>(), want[i][j], 1e-12) << i << "," << j;
    }
  }
  // Interleaved groups: 7 = {2, 4} (mean 3, std sqrt 2), 3 = {1, 5} (mean 3, std sqrt 8), and
  // 5 = {9} alone (mean 0, std 1).
  const Rows mixed = Outcome({2, 1, 4, 5, 9}, {1, 1, 1, 1, 1}, {7, 3, 7, 3, 5});
  const double g7 = 1 / (std::sqrt(2.0) + 1e-6), g3 = 2 / (std::sqrt(8.0) + 1e-6);
  EXPECT_THAT(Estimate(AdvEstimator::kGrpo, mixed),
              testing::Pointwise(testing::DoubleNear(1e-12), {-g7, -g3, g7, g3, 9 / (1 + 1e-6)}));
  // Equal rewards in a group give 0, with and without the std.
  const Rows equal = Outcome({1, 1, 1, 0, 0}, {2, 2, 2, 2, 2}, {1, 1, 1, 2, 2});
  AdvantageOptions dr;
  dr.norm_adv_by_std = false;
  for (const AdvantageOptions& o : {AdvantageOptions{}, dr}) {
    EXPECT_THAT(Estimate(AdvEstimator::kGrpo, equal, o),
                testing::Pointwise(testing::DoubleNear(0), {0.0, 0.0, 0.0, 0.0, 0.0}));
  }
}

TEST(AdvantagesTest, PassAtKRewardsTheBestSampleOnly) {
  // 0.2, 0.9, 0.5: the best gets 0.9 - 0.5 = 0.4, over std 0.351188458 with normalisation.
  const Rows rows = Outcome({0.2, 0.9, 0.5}, {1, 1, 1}, {4, 4, 4});
  AdvantageOptions raw;
  raw.norm_adv_by_std = false;
  EXPECT_THAT(Estimate(AdvEstimator::kGrpoPassk, rows, raw),
              testing::Pointwise(testing::DoubleNear(1e-12), {0.0, 0.4, 0.0}));
  const double std = std::sqrt(
      (std::pow(0.2 - 1.6 / 3, 2) + std::pow(0.9 - 1.6 / 3, 2) + std::pow(0.5 - 1.6 / 3, 2)) / 2);
  EXPECT_NEAR(Estimate(AdvEstimator::kGrpoPassk, rows)[1], 0.4 / (std + 1e-6), 1e-12);
  // A tie at the top teaches nothing; a group of one is refused, as verl raises.
  EXPECT_THAT(Estimate(AdvEstimator::kGrpoPassk, Outcome({1, 1, 0}, {1, 1, 1}, {0, 0, 0}), raw),
              testing::Pointwise(testing::DoubleNear(0), {0.0, 0.0, 0.0}));
  const Rows lone = Outcome({1}, {1}, {0});
  auto refused = EstimateAdvantages(AdvEstimator::kGrpoPassk, lone.rewards, lone.mask, lone.groups);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("actor_rollout_ref.rollout.n"));
}

TEST(AdvantagesTest, ReinforcePlusPlusDiscountsThenWhitensOverTheBatchsTokens) {
  // Row 0: rewards 0, 1 (two tokens); row 1: reward 2 (one token, one pad).
  const Rows rows = Outcome({1, 2}, {2, 1}, {0, 1});
  for (double gamma : {1.0, 0.5}) {
    AdvantageOptions options;
    options.gamma = gamma;
    auto a = EstimateAdvantages(AdvEstimator::kReinforcePlusPlus, rows.rewards, rows.mask,
                                rows.groups, options);
    ASSERT_TRUE(a.ok()) << a.status();
    // Returns: row 0 [gamma, 1], row 1 [2, 0].
    const std::vector<double> values = {gamma, 1.0, 2.0};
    const double count = 3;
    const double mean = (gamma + 3.0) / (count + 1e-8);
    double sq = 0;
    for (double v : values) sq += (v - mean) * (v - mean);
    const double var = sq / (count + 1e-8) * (count / (count - 1));
    auto w = [&](double v) { return (v - mean) / std::sqrt(var + 1e-8); };
    EXPECT_NEAR(a->returns[0][0].item<double>(), gamma, 1e-15);
    EXPECT_NEAR(a->returns[1][1].item<double>(), 0.0, 1e-15);
    EXPECT_NEAR(a->advantages[0][0].item<double>(), w(gamma), 1e-12) << gamma;
    EXPECT_NEAR(a->advantages[0][1].item<double>(), w(1.0), 1e-12) << gamma;
    EXPECT_NEAR(a->advantages[1][0].item<double>(), w(2.0), 1e-12) << gamma;
    EXPECT_EQ(a->advantages[1][1].item<double>(), 0.0) << "padding stays 0";
  }
  // One token in the whole batch cannot be whitened (verl raises).
  const Rows one = Outcome({1}, {1}, {0});
  EXPECT_FALSE(
      EstimateAdvantages(AdvEstimator::kReinforcePlusPlus, one.rewards, one.mask, one.groups).ok());
}

// verl's formulas again, with tensor operations over each group's selection.
torch::Tensor Reference(AdvEstimator e, const Rows& rows, const AdvantageOptions& o) {
  const torch::Tensor scores = rows.rewards.sum(1);
  const torch::Tensor lengths = rows.mask.sum(1);
  const int64_t b = scores.size(0);
  torch::Tensor adv = torch::zeros({b}, torch::kFloat64);
  const double alpha =
      static_cast<double>(b) / std::max<double>(1.0, (scores != 0).sum().item<double>());
  auto tokens = [&](const torch::Tensor& x) { return x.unsqueeze(1) * rows.mask; };
  auto whiten = [&](const torch::Tensor& x) {
    const torch::Tensor m = rows.mask;
    const double n = m.sum().item<double>();
    const torch::Tensor mean = (x * m).sum() / (n + 1e-8);
    const torch::Tensor var = (((x - mean) * (x - mean)) * m).sum() / (n + 1e-8) * (n / (n - 1));
    return (x - mean) * torch::rsqrt(var + 1e-8) * m;
  };
  if (e == AdvEstimator::kReinforcePlusPlus) {
    torch::Tensor returns = torch::zeros_like(rows.rewards);
    torch::Tensor running = torch::zeros({b}, torch::kFloat64);
    for (int64_t t = rows.rewards.size(1) - 1; t >= 0; --t) {
      running = rows.rewards.select(1, t) + o.gamma * running;
      returns.select(1, t).copy_(running);
      running = running * rows.mask.select(1, t);
    }
    return whiten(returns);
  }
  const torch::Tensor unique = std::get<0>(torch::_unique(rows.groups));
  for (int64_t k = 0; k < unique.size(0); ++k) {
    const torch::Tensor in = rows.groups == unique[k];
    const torch::Tensor s = scores.index({in});
    const int64_t n = s.size(0);
    const torch::Tensor mean = n > 1 ? s.mean() : torch::zeros({}, torch::kFloat64);
    const torch::Tensor std = n > 1 ? s.std() : torch::ones({}, torch::kFloat64);
    torch::Tensor a;
    switch (e) {
      case AdvEstimator::kGrpo:
        a = o.norm_adv_by_std ? (s - mean) / (std + o.epsilon) : s - mean;
        break;
      case AdvEstimator::kGpg:
        a = alpha * (s - mean);
        break;
      case AdvEstimator::kRloo:
        a = n > 1 ? s * n / (n - 1) - mean * n / (n - 1) : s;
        break;
      case AdvEstimator::kRlooVectorized:
        a = n > 1 ? (n * s - s.sum()) / (n - 1) : torch::zeros_like(s);
        break;
      case AdvEstimator::kOpo: {
        const torch::Tensor l = lengths.index({in});
        a = n > 1 ? s - (l * s).sum() / l.sum() : s;
        break;
      }
      case AdvEstimator::kReinforcePlusPlusBaseline:
        a = s - mean;
        break;
      case AdvEstimator::kGrpoVectorized: {
        // group_mean_std: the variance over max(n - 1, 1), floored at eps.
        const torch::Tensor sd =
            n > 1 ? torch::sqrt(torch::clamp_min(((s * s).sum() - s.sum() * s.sum() / n) / (n - 1),
                                                 o.epsilon))
                  : torch::ones({}, torch::kFloat64);
        a = (s - mean) / (sd + o.epsilon);
        break;
      }
      case AdvEstimator::kGrpoPassk: {
        a = torch::zeros_like(s);
        auto [top, where] = torch::topk(s, 2);
        torch::Tensor best = top[0] - top[1];
        if (o.norm_adv_by_std) best = best / (std + o.epsilon);
        a[where[0].item<int64_t>()] = best;
        break;
      }
      default:
        break;
    }
    adv.index_put_({in}, a);
  }
  if (e == AdvEstimator::kReinforcePlusPlusBaseline) return whiten(tokens(adv));
  return tokens(adv);
}

TEST(AdvantagesTest, EqualsASecondComputationOfVerlsFormulasOnRandomBatches) {
  std::mt19937_64 rng(20261206);
  std::uniform_real_distribution<double> unit(0, 1);
  int checked = 0;
  for (int batch = 0; batch < 12; ++batch) {
    // 3-5 groups of 1-6 samples, rows of 0-9 tokens (at least one non-empty), scores in
    // [-1, 2) with some exact zeros, a random per-token KL-like term on masked tokens.
    std::vector<int64_t> groups, lengths;
    std::vector<double> scores;
    const int num_groups = 3 + static_cast<int>(rng() % 3);
    for (int g = 0; g < num_groups; ++g) {
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < n; ++i) {
        groups.push_back(100 + g * 7);
        lengths.push_back(static_cast<int64_t>(rng() % 10));
        scores.push_back(unit(rng) < 0.2 ? 0.0 : 3 * unit(rng) - 1);
      }
    }
    lengths[0] = std::max<int64_t>(lengths[0], 2);
    Rows rows = Outcome(scores, lengths, groups);
    if (batch % 2 == 1) rows.rewards -= 0.01 * torch::rand_like(rows.rewards) * rows.mask;
    bool has_lone = false;
    for (const auto& g : groups) has_lone |= std::count(groups.begin(), groups.end(), g) == 1;
    for (AdvEstimator e :
         {AdvEstimator::kGrpo, AdvEstimator::kGrpoVectorized, AdvEstimator::kGrpoPassk,
          AdvEstimator::kRloo, AdvEstimator::kRlooVectorized, AdvEstimator::kOpo,
          AdvEstimator::kGpg, AdvEstimator::kReinforcePlusPlus,
          AdvEstimator::kReinforcePlusPlusBaseline}) {
      for (bool norm : {true, false}) {
        for (double gamma : {1.0, 0.9}) {
          AdvantageOptions o;
          o.norm_adv_by_std = norm;
          o.gamma = gamma;
          auto got = EstimateAdvantages(e, rows.rewards, rows.mask, rows.groups, o);
          if (e == AdvEstimator::kGrpoPassk && has_lone) {
            EXPECT_FALSE(got.ok());
            continue;
          }
          ASSERT_TRUE(got.ok()) << AdvEstimatorName(e) << ": " << got.status();
          const torch::Tensor want = Reference(e, rows, o);
          // opo's baseline is NaN where a group's rows are all empty, as in verl.
          const torch::Tensor both_nan = got->advantages.isnan() & want.isnan();
          const torch::Tensor diff =
              torch::where(both_nan, torch::zeros_like(want), (got->advantages - want).abs());
          EXPECT_LT(diff.max().item<double>(), 1e-9) << AdvEstimatorName(e) << " batch " << batch
                                                     << " norm " << norm << " gamma " << gamma;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 150);
}

TEST(AdvantagesTest, NamesAreVerls) {
  for (const char* name : {"grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized",
                           "opo", "gpg", "reinforce_plus_plus", "reinforce_plus_plus_baseline"}) {
    auto e = ParseAdvEstimator(name);
    ASSERT_TRUE(e.ok()) << name;
    EXPECT_EQ(AdvEstimatorName(*e), name);
  }
  auto gae = ParseAdvEstimator("gae");
  ASSERT_FALSE(gae.ok());
  EXPECT_THAT(std::string(gae.status().message()), HasSubstr("algorithm.adv_estimator"));
}

}  // namespace
}  // namespace rlmesh::grpo
