// The policy-loss modes against hand-worked cases, and against a second computation of verl's
// formulas written here token by token: scalar loops over the batch in which only the current
// log-prob of each valid token is a (0-dim) tensor, so that autograd gives the reference's
// gradient through a graph built independently of the implementation's. Random float64
// batches with random masks, empty rows, holes in rows and NaN behind the mask; every loss
// aggregation; loss, metrics and gradient within 1e-9.
#include "common/grpo/policy_losses.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::grpo {
namespace {

using ::testing::HasSubstr;

constexpr std::array<PolicyLossMode, 8> kAllModes = {
    PolicyLossMode::kVanilla, PolicyLossMode::kGspo,    PolicyLossMode::kSapo,
    PolicyLossMode::kGpg,     PolicyLossMode::kClipCov, PolicyLossMode::kKlCov,
    PolicyLossMode::kGeoMean, PolicyLossMode::kCispo};
constexpr std::array<LossAggMode, 4> kAllAggs = {
    LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenSum, LossAggMode::kSeqMeanTokenMean,
    LossAggMode::kSeqMeanTokenSumNorm};

torch::Tensor Mat(const std::vector<std::vector<double>>& rows) {
  const int64_t cols = static_cast<int64_t>(rows.front().size());
  auto t = torch::empty({static_cast<int64_t>(rows.size()), cols}, torch::kFloat64);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t j = 0; j < cols; ++j) t[i][j] = rows[i][j];
  }
  return t;
}

double Item(const torch::Tensor& t) { return t.item<double>(); }

// ---------------------------------------------------------------- names and options

TEST(PolicyLossModeTest, ParsesVerlNames) {
  for (PolicyLossMode mode : kAllModes) {
    auto parsed = ParsePolicyLossMode(PolicyLossModeName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode);
  }
  EXPECT_EQ(PolicyLossModeName(PolicyLossMode::kClipCov), "clip_cov");
  auto bad = ParsePolicyLossMode("clip-cov");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("loss_mode"));
  EXPECT_THAT(bad.status().message(), HasSubstr("geo_mean"));
}

TEST(PolicyLossModeTest, ChecksTheOptionsEachModeReads) {
  PolicyLossOptions o;
  o.mode = PolicyLossMode::kSapo;
  o.tau_neg = 0;
  EXPECT_THAT(CheckPolicyLossOptions(o).message(), HasSubstr("tau_neg"));
  o.tau_neg = 1.05;
  o.clip_low = 1.5;  // sapo reads no clip range
  EXPECT_TRUE(CheckPolicyLossOptions(o).ok());
  o.mode = PolicyLossMode::kGspo;
  EXPECT_THAT(CheckPolicyLossOptions(o).message(), HasSubstr("clip_ratio_low"));
  o = PolicyLossOptions{};
  o.mode = PolicyLossMode::kClipCov;
  o.clip_cov_ratio = 0;
  EXPECT_THAT(CheckPolicyLossOptions(o).message(), HasSubstr("clip_cov_ratio"));
  o.mode = PolicyLossMode::kKlCov;
  o.kl_cov_ratio = -1;
  EXPECT_THAT(CheckPolicyLossOptions(o).message(), HasSubstr("kl_cov_ratio"));
  o = PolicyLossOptions{};
  o.clip_c = 1;
  EXPECT_THAT(CheckPolicyLossOptions(o).message(), HasSubstr("clip_ratio_c"));
  o.mode = PolicyLossMode::kCispo;  // only vanilla reads clip_ratio_c
  EXPECT_TRUE(CheckPolicyLossOptions(o).ok());
  const auto z = torch::zeros({1, 2}, torch::kFloat64);
  o.mode = PolicyLossMode::kGspo;
  auto shape = ComputePolicyLoss(z, z, torch::zeros({2, 1}, torch::kFloat64), z, o);
  EXPECT_THAT(shape.status().message(), HasSubstr("advantages"));
}

TEST(PolicyLossModeTest, AggregationFollowsVerl) {
  PolicyLossOptions o;
  o.agg = LossAggMode::kSeqMeanTokenSum;
  for (PolicyLossMode mode : kAllModes) {
    o.mode = mode;
    const PolicyAggregation a = PolicyLossAggregation(o);
    const bool forced = mode == PolicyLossMode::kGspo || mode == PolicyLossMode::kSapo;
    EXPECT_EQ(a.row_mean, mode == PolicyLossMode::kGeoMean) << PolicyLossModeName(mode);
    EXPECT_EQ(a.mode, forced ? LossAggMode::kSeqMeanTokenMean : LossAggMode::kSeqMeanTokenSum)
        << PolicyLossModeName(mode);
  }
}

// ---------------------------------------------------------------- hand-worked cases

// gspo, sapo and geo_mean divide by (tokens + 1e-8) as verl does, so hand-worked values hold
// to about 1e-8 relative.
constexpr double kTol = 1e-7;

// One row of two tokens with log-ratios ln 2 and 0 (old log-probs 0): GSPO's sequence ratio is
// the geometric mean sqrt(2) = 1.41421; A = 1 clips it at 1.28 for both tokens, so the loss is
// -1.28 and no gradient flows; A = -1: max(-A s, -A clip(s)) = s = 1.41421 (unclipped, the
// token gradient of sg[s] pi/sg[pi] is s per token, over 2 tokens: 0.70711 each).
TEST(PolicyLossHandWorked, GspoSequenceRatio) {
  PolicyLossOptions o;
  o.mode = PolicyLossMode::kGspo;
  o.clip_high = 0.28;
  auto logp = Mat({{std::log(2.0), 0}}).requires_grad_(true);
  const auto old = torch::zeros({1, 2}, torch::kFloat64);
  const auto mask = torch::ones({1, 2}, torch::kFloat64);
  auto up = ComputePolicyLoss(old, logp, Mat({{1, 1}}), mask, o);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_NEAR(Item(up->loss), -1.28, kTol);
  EXPECT_NEAR(Item(up->clipfrac), 1.0, kTol);
  EXPECT_NEAR(Item(up->ppo_kl), -std::log(2.0) / 2, kTol);
  auto down = ComputePolicyLoss(old, logp, Mat({{-1, -1}}), mask, o);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_NEAR(Item(down->loss), std::sqrt(2.0), kTol);
  down->loss.backward();
  EXPECT_NEAR(Item(logp.grad()[0][0]), std::sqrt(2.0) / 2, kTol);
  EXPECT_NEAR(Item(logp.grad()[0][1]), std::sqrt(2.0) / 2, kTol);
}

// GMPO: tokens with log-ratios 0.5 and -0.1 and A = 1 (clip range ln-space [-0.2, 0.28]):
// the first clips to 0.28 (min of 0.5 and 0.28), the second stays -0.1; the geometric mean
// ratio is exp((0.28 - 0.1) / 2) = exp(0.09) = 1.094174, the loss -1.094174; half the tokens
// are clipped with A > 0. An empty second row counts in the row mean: loss -0.547087.
TEST(PolicyLossHandWorked, GeoMeanClipsInLogSpaceAndAveragesRows) {
  PolicyLossOptions o;
  o.mode = PolicyLossMode::kGeoMean;
  o.clip_high = 0.28;
  const auto logp = Mat({{0.5, -0.1}, {0, 0}});
  const auto old = torch::zeros({2, 2}, torch::kFloat64);
  auto r = ComputePolicyLoss(old, logp, Mat({{1, 1}, {3, 3}}), Mat({{1, 1}, {0, 0}}), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(Item(r->loss), -std::exp(0.09) / 2, kTol);
  EXPECT_NEAR(Item(r->clipfrac), 0.5, kTol);
  EXPECT_NEAR(Item(r->clipfrac_lower), 0.0, kTol);
}

// CISPO: ratio e^0.5 = 1.6487 is held at 1.28 without gradient, so the loss is -1.28 A logp
// and its gradient -1.28 A; SAPO: ratio 1, A = 2 > 0: gate sigmoid(0) x 4 / 1 = 2, loss -4,
// and d/dlogp = -A tau sigma' 4/tau r = -2 x 0.25 x 4 = -2.
TEST(PolicyLossHandWorked, CispoAndSapo) {
  const auto mask = torch::ones({1, 1}, torch::kFloat64);
  PolicyLossOptions o;
  o.mode = PolicyLossMode::kCispo;
  o.clip_high = 0.28;
  auto logp = Mat({{-0.5}}).requires_grad_(true);
  auto c = ComputePolicyLoss(Mat({{-1.0}}), logp, Mat({{2}}), mask, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(Item(c->loss), -1.28 * 2 * -0.5, kTol);
  EXPECT_NEAR(Item(c->clipfrac), 1.0, kTol);
  c->loss.backward();
  EXPECT_NEAR(Item(logp.grad()[0][0]), -2.56, kTol);
  o.mode = PolicyLossMode::kSapo;
  auto same = Mat({{-1.0}}).requires_grad_(true);
  auto s = ComputePolicyLoss(Mat({{-1.0}}), same, Mat({{2}}), mask, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR(Item(s->loss), -4.0, kTol);
  s->loss.backward();
  EXPECT_NEAR(Item(same.grad()[0][0]), -2.0, kTol);
}

// GPG returns no metric; kl_cov only ppo_kl (the mean |log ratio|).
TEST(PolicyLossHandWorked, MetricsEachModeReports) {
  const auto x = Mat({{-1, -2}});
  const auto old = Mat({{-1.5, -1.5}});
  const auto mask = torch::ones({1, 2}, torch::kFloat64);
  PolicyLossOptions o;
  o.mode = PolicyLossMode::kGpg;
  auto g = ComputePolicyLoss(old, x, Mat({{1, 1}}), mask, o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NEAR(Item(g->loss), 1.5, 1e-12);  // -(-1 - 2) / 2
  EXPECT_FALSE(g->clipfrac.defined());
  EXPECT_FALSE(g->ppo_kl.defined());
  EXPECT_FALSE(g->clipfrac_lower.defined());
  o.mode = PolicyLossMode::kKlCov;
  auto k = ComputePolicyLoss(old, x, Mat({{1, 1}}), mask, o);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_NEAR(Item(k->ppo_kl), 0.5, 1e-12);
  EXPECT_FALSE(k->clipfrac.defined());
  for (PolicyLossMode mode : kAllModes) {
    o.mode = mode;
    auto r = ComputePolicyLoss(old, x, Mat({{1, -1}}), mask, o);
    ASSERT_TRUE(r.ok()) << r.status();
    const ReportedMetrics want = PolicyLossMetrics(mode);
    EXPECT_EQ(r->clipfrac.defined(), want.clipfrac) << PolicyLossModeName(mode);
    EXPECT_EQ(r->ppo_kl.defined(), want.ppo_kl) << PolicyLossModeName(mode);
    EXPECT_EQ(r->clipfrac_lower.defined(), want.clipfrac_lower) << PolicyLossModeName(mode);
  }
  EXPECT_FALSE(PolicyLossMetrics(PolicyLossMode::kClipCov).clipfrac_lower);
}

// ---------------------------------------------------------------- the token-by-token reference

struct Batch {
  torch::Tensor old, logp, adv, mask, w;  // [B, T] float64; NaN behind the mask
  int64_t rows = 0, cols = 0;
  bool valid(int64_t i, int64_t j) const { return mask[i][j].item<double>() > 0; }
};

Batch RandomBatch(uint32_t seed, bool per_token_advantages) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  Batch b;
  b.rows = 7;
  b.cols = 6;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  b.old = torch::full({b.rows, b.cols}, nan, torch::kFloat64);
  b.logp = b.old.clone();
  b.adv = b.old.clone();
  b.w = b.old.clone();
  b.mask = torch::zeros({b.rows, b.cols}, torch::kFloat64);
  for (int64_t i = 0; i < b.rows; ++i) {
    // Row 2 is empty, row 4 has a hole (a rejected token), the others random lengths.
    const int64_t length = i == 2 ? 0 : 1 + static_cast<int64_t>(uniform(rng) * b.cols) % b.cols;
    const double row_adv = i == 5 ? 0.0 : 2.5 * normal(rng);
    for (int64_t j = 0; j < length; ++j) {
      if (i == 4 && j == 1) continue;
      b.mask[i][j] = 1;
      const double old = -1.5 + 1.2 * normal(rng);
      b.old[i][j] = old;
      b.logp[i][j] = old + 0.35 * normal(rng);
      b.adv[i][j] = per_token_advantages ? 2.5 * normal(rng) : row_adv;
      b.w[i][j] = 0.2 + 1.8 * uniform(rng);
    }
  }
  return b;
}

struct Reference {
  double loss = 0;
  std::map<std::string, double> metrics;
  torch::Tensor grad;
};

// verl's masked mean: the sum over valid tokens over (count + 1e-8).
struct MeanOverValid {
  double sum = 0;
  double count = 0;
  void Add(double v) { sum += v, count += 1; }
  double Value() const { return sum / (count + 1e-8); }
};

// verl's agg_loss over per-token losses (0-dim tensors, undefined behind the mask).
torch::Tensor RefAgg(const std::vector<std::vector<torch::Tensor>>& loss, const Batch& b,
                     LossAggMode mode) {
  auto total = torch::zeros({}, torch::kFloat64);
  double tokens = 0, valid_rows = 0;
  std::vector<torch::Tensor> row_sums;
  std::vector<double> row_counts;
  for (int64_t i = 0; i < b.rows; ++i) {
    auto s = torch::zeros({}, torch::kFloat64);
    double n = 0;
    for (int64_t j = 0; j < b.cols; ++j) {
      if (b.valid(i, j)) s = s + loss[i][j], n += 1;
    }
    row_sums.push_back(s);
    row_counts.push_back(n);
    tokens += n;
    valid_rows += n > 0 ? 1 : 0;
  }
  for (int64_t i = 0; i < b.rows; ++i) {
    switch (mode) {
      case LossAggMode::kTokenMean:
        total = total + row_sums[i] / tokens;
        break;
      case LossAggMode::kSeqMeanTokenSum:
        if (row_counts[i] > 0) total = total + row_sums[i] / valid_rows;
        break;
      case LossAggMode::kSeqMeanTokenMean:
        if (row_counts[i] > 0) total = total + row_sums[i] / (row_counts[i] + 1e-8) / valid_rows;
        break;
      case LossAggMode::kSeqMeanTokenSumNorm:
        total = total + row_sums[i] / static_cast<double>(b.cols);
        break;
    }
  }
  return total;
}

double D(const torch::Tensor& t) { return t.item<double>(); }
torch::Tensor Clamp(const torch::Tensor& t, double lo, double hi) {
  return torch::clamp(t, lo, hi);
}

Reference RefLoss(const Batch& b, const PolicyLossOptions& o, uint64_t generator_seed) {
  auto leaf = b.logp.clone().requires_grad_(true);
  auto V = [&](const torch::Tensor& t, int64_t i, int64_t j) { return D(t[i][j]); };
  std::vector<std::vector<torch::Tensor>> loss(b.rows, std::vector<torch::Tensor>(b.cols));
  MeanOverValid clipfrac, ppo_kl, lower;
  Reference ref;
  torch::Tensor final_loss;
  const double lo = o.clip_low, hi = o.clip_high;
  auto each_valid = [&](auto&& f) {
    for (int64_t i = 0; i < b.rows; ++i) {
      for (int64_t j = 0; j < b.cols; ++j) {
        if (b.valid(i, j)) f(i, j, leaf[i][j], V(b.old, i, j), V(b.adv, i, j));
      }
    }
  };
  switch (o.mode) {
    case PolicyLossMode::kVanilla:
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double old, double a) {
        const auto log_ratio = Clamp(lp - old, -20, 20);
        const auto r = torch::exp(log_ratio);
        const auto l1 = -a * r, l2 = -a * Clamp(r, 1 - lo, 1 + hi);
        const auto lc = torch::maximum(l1, l2);
        const double l3 = -a * o.clip_c;
        loss[i][j] = a < 0 ? torch::minimum(lc, torch::full({}, l3, torch::kFloat64)) : lc;
        clipfrac.Add(D(l2) > D(l1));
        ppo_kl.Add(-D(log_ratio));
        lower.Add(D(lc) > l3 && a < 0);
      });
      break;
    case PolicyLossMode::kGspo:
      for (int64_t i = 0; i < b.rows; ++i) {
        double sum = 0, n = 0;
        for (int64_t j = 0; j < b.cols; ++j) {
          if (b.valid(i, j)) sum += V(b.logp, i, j) - V(b.old, i, j), n += 1;
        }
        const double seq = sum / std::max(n, 1.0);
        for (int64_t j = 0; j < b.cols; ++j) {
          if (!b.valid(i, j)) continue;
          const auto lp = leaf[i][j];
          const double a = V(b.adv, i, j);
          const auto s = torch::exp(torch::clamp_max(lp - D(lp) + seq, 10));
          const auto l1 = -a * s, l2 = -a * Clamp(s, 1 - lo, 1 + hi);
          loss[i][j] = torch::maximum(l1, l2);
          clipfrac.Add(D(l2) > D(l1));
          ppo_kl.Add(-(D(lp) - V(b.old, i, j)));
          lower.Add(0);
        }
      }
      break;
    case PolicyLossMode::kSapo:
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double old, double a) {
        const auto log_ratio = Clamp(lp - old, -20, 20);
        const double tau = a > 0 ? o.tau_pos : o.tau_neg;
        const auto gate = torch::sigmoid(tau * (torch::exp(log_ratio) - 1)) * (4 / tau);
        loss[i][j] = -gate * a;
        clipfrac.Add(0);
        ppo_kl.Add(-D(log_ratio));
        lower.Add(0);
      });
      break;
    case PolicyLossMode::kGpg:
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double, double a) {
        loss[i][j] = -lp * a;
      });
      break;
    case PolicyLossMode::kClipCov: {
      MeanOverValid mean_a, mean_lp;
      each_valid([&](int64_t, int64_t, const torch::Tensor& lp, double, double a) {
        mean_a.Add(a);
        mean_lp.Add(D(lp));
      });
      // Candidates in row-major order, as torch.nonzero lists them.
      std::vector<std::pair<int64_t, int64_t>> candidates;
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double old, double a) {
        const double r = std::exp(D(lp) - old);
        const bool clipped = -a * std::clamp(r, 1 - lo, 1 + hi) > -a * r;
        const double cov = (a - mean_a.Value()) * (D(lp) - mean_lp.Value());
        if (!clipped && cov < o.clip_cov_ub && cov > o.clip_cov_lb) candidates.push_back({i, j});
      });
      const int64_t wanted =
          std::max<int64_t>(static_cast<int64_t>(o.clip_cov_ratio * mean_a.count), 1);
      std::set<std::pair<int64_t, int64_t>> dropped;
      if (!candidates.empty()) {
        auto gen = at::detail::createCPUGenerator(generator_seed);
        const auto perm = torch::randperm(static_cast<int64_t>(candidates.size()), gen);
        for (int64_t k = 0; k < std::min<int64_t>(wanted, perm.size(0)); ++k) {
          dropped.insert(candidates[perm[k].item<int64_t>()]);
        }
      }
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double old, double a) {
        const auto r = torch::exp(lp - old);
        const double keep = dropped.count({i, j}) ? 0.0 : 1.0;
        loss[i][j] = torch::maximum(-a * r, -a * Clamp(r, 1 - lo, 1 + hi)) * keep;
        clipfrac.Add(keep == 0);
        ppo_kl.Add(-(D(lp) - old));
      });
      break;
    }
    case PolicyLossMode::kKlCov: {
      std::vector<std::pair<int64_t, int64_t>> at;
      double sum_a = 0, sum_lp = 0;
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double, double a) {
        at.push_back({i, j});
        sum_a += a;
        sum_lp += D(lp);
      });
      const double n = static_cast<double>(at.size());
      std::vector<std::pair<double, size_t>> cov;
      for (size_t k = 0; k < at.size(); ++k) {
        const auto [i, j] = at[k];
        cov.push_back({(V(b.adv, i, j) - sum_a / n) * (V(b.logp, i, j) - sum_lp / n), k});
      }
      std::sort(cov.begin(), cov.end(), std::greater<>());
      const size_t top = std::max<size_t>(1, static_cast<size_t>(n * o.kl_cov_ratio));
      std::set<std::pair<int64_t, int64_t>> pays;
      for (size_t k = 0; k < std::min(top, cov.size()); ++k) pays.insert(at[cov[k].second]);
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double old, double a) {
        const auto l = -a * torch::exp(lp - old);
        loss[i][j] = pays.count({i, j}) ? l + o.ppo_kl_coef * torch::abs(lp - old) : l;
        ppo_kl.Add(std::abs(D(lp) - old));
      });
      break;
    }
    case PolicyLossMode::kGeoMean: {
      final_loss = torch::zeros({}, torch::kFloat64);
      for (int64_t i = 0; i < b.rows; ++i) {
        auto log_sum = torch::zeros({}, torch::kFloat64);
        double a_sum = 0, n = 0, log_w = 0;
        for (int64_t j = 0; j < b.cols; ++j) {
          if (!b.valid(i, j)) continue;
          const auto lp = leaf[i][j];
          const double a = V(b.adv, i, j);
          const auto x = lp - V(b.old, i, j);
          const auto xc = Clamp(x, -lo, hi);
          const double sgn = a > 0 ? 1 : (a < 0 ? -1 : 0);
          log_sum = log_sum + sgn * torch::minimum(sgn * x, sgn * xc);
          a_sum += a;
          n += 1;
          if (b.w.defined()) log_w += std::log(V(b.w, i, j) + 1e-10);
          const bool clipped = D(x) != D(xc);
          clipfrac.Add(clipped && a > 0);
          lower.Add(clipped && a < 0);
          ppo_kl.Add(-D(x));
        }
        auto row = -(a_sum / (n + 1e-8)) * torch::exp(log_sum / (n + 1e-8));
        if (b.w.defined()) row = row * std::exp(log_w / (n + 1e-8));
        final_loss = final_loss + row / static_cast<double>(b.rows);
      }
      break;
    }
    case PolicyLossMode::kCispo:
      each_valid([&](int64_t i, int64_t j, const torch::Tensor& lp, double old, double a) {
        const double r = std::exp(std::clamp(D(lp) - old, -20.0, 20.0));
        const double held = std::clamp(r, 1 - lo, 1 + hi);
        loss[i][j] = -held * a * lp;
        clipfrac.Add(r != held);
        ppo_kl.Add(-std::clamp(D(lp) - old, -20.0, 20.0));
        lower.Add(0);
      });
      break;
  }
  if (!final_loss.defined()) {
    // Importance weights multiply each token's loss (geo_mean took their geometric mean above).
    if (b.w.defined()) {
      each_valid([&](int64_t i, int64_t j, const torch::Tensor&, double, double) {
        loss[i][j] = loss[i][j] * V(b.w, i, j);
      });
    }
    const bool forced = o.mode == PolicyLossMode::kGspo || o.mode == PolicyLossMode::kSapo;
    final_loss = RefAgg(loss, b, forced ? LossAggMode::kSeqMeanTokenMean : o.agg);
  }
  final_loss.backward();
  ref.loss = D(final_loss);
  ref.grad = leaf.grad().defined() ? leaf.grad() : torch::zeros_like(leaf);
  if (clipfrac.count > 0) ref.metrics["clipfrac"] = clipfrac.Value();
  if (ppo_kl.count > 0) ref.metrics["ppo_kl"] = ppo_kl.Value();
  if (lower.count > 0) ref.metrics["clipfrac_lower"] = lower.Value();
  return ref;
}

std::map<std::string, double> MetricsOf(const PolicyLossResult& r) {
  std::map<std::string, double> m;
  if (r.clipfrac.defined()) m["clipfrac"] = Item(r.clipfrac);
  if (r.ppo_kl.defined()) m["ppo_kl"] = Item(r.ppo_kl);
  if (r.clipfrac_lower.defined()) m["clipfrac_lower"] = Item(r.clipfrac_lower);
  return m;
}

TEST(PolicyLossReferenceTest, EveryModeAndAggregationOnRandomBatches) {
  int compared = 0, clip_cov_dropped = 0, kl_cov_paid = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const Batch b = RandomBatch(seed, /*per_token_advantages=*/seed % 2 == 0);
    for (PolicyLossMode mode : kAllModes) {
      for (LossAggMode agg : kAllAggs) {
        PolicyLossOptions o;
        o.mode = mode;
        o.agg = agg;
        o.clip_low = 0.2;
        o.clip_high = 0.28;
        o.tau_pos = 1.0 + 0.1 * seed;
        o.tau_neg = 1.05 + 0.2 * seed;
        // Large enough shares that several tokens are picked (verl's 0.0002 picks one).
        o.clip_cov_ratio = 0.1;
        o.clip_cov_lb = 0.3;
        o.clip_cov_ub = 4.0;
        o.kl_cov_ratio = 0.15;
        o.ppo_kl_coef = 0.7;
        for (bool weighted : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << "seed " << seed << " mode " << PolicyLossModeName(mode) << " agg "
                       << LossAggModeName(agg) << " weighted " << weighted);
          Batch in = b;
          if (!weighted) in.w = torch::Tensor();
          const uint64_t gen_seed = 1000 + seed;
          const Reference ref = RefLoss(in, o, gen_seed);
          auto logp = b.logp.clone().requires_grad_(true);
          auto got = ComputePolicyLoss(b.old, logp, b.adv, b.mask, o, in.w,
                                       at::detail::createCPUGenerator(gen_seed));
          ASSERT_TRUE(got.ok()) << got.status();
          EXPECT_NEAR(Item(got->loss), ref.loss, 1e-9);
          const auto metrics = MetricsOf(*got);
          ASSERT_EQ(metrics.size(), ref.metrics.size());
          for (const auto& [name, value] : ref.metrics) {
            ASSERT_TRUE(metrics.count(name)) << name;
            EXPECT_NEAR(metrics.at(name), value, 1e-9) << name;
          }
          got->loss.backward();
          const auto diff = (logp.grad() - ref.grad).abs().max().item<double>();
          EXPECT_LT(diff, 1e-9);
          EXPECT_TRUE(torch::isfinite(logp.grad()).all().item<bool>());
          ++compared;
          if (mode == PolicyLossMode::kClipCov && metrics.at("clipfrac") > 0) ++clip_cov_dropped;
          if (mode == PolicyLossMode::kKlCov) ++kl_cov_paid;
        }
      }
    }
  }
  EXPECT_EQ(compared, 6 * 8 * 4 * 2);
  // The covariance selections were exercised, not vacuous.
  EXPECT_GT(clip_cov_dropped, 20);
  EXPECT_EQ(kl_cov_paid, 48);
}

// A change to one formula constant must fail the comparison: the reference can tell.
TEST(PolicyLossReferenceTest, ReferenceSeesASmallChange) {
  const Batch b = RandomBatch(3, false);
  PolicyLossOptions o;
  o.mode = PolicyLossMode::kSapo;
  const Reference ref = RefLoss(b, o, 1);
  o.tau_neg *= 1 + 1e-6;
  auto got = ComputePolicyLoss(b.old, b.logp, b.adv, b.mask, o);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(std::abs(Item(got->loss) - ref.loss), 1e-9);
}

}  // namespace
}  // namespace rlmesh::grpo
