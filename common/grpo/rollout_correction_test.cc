// Expected values are worked out by hand in the comments, never taken from the code's output.
// The inputs are built from chosen log-ratios r = old_logp - rollout_logp (rollout_logp = -2
// everywhere), so that every weight is a round number.
#include "common/grpo/rollout_correction.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

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
  // All clamped to 2; verl's count + 1e-8 leaves a tiny spread: E[c] = 6 / (3 + 1e-8),
  // E[c^2] = 12 / (3 + 1e-8), sqrt(E[c^2] - E[c]^2) = 1.15e-4 in float64 (0 in float32).
  const double m1 = 6 / (3 + 1e-8), m2 = 12 / (3 + 1e-8);
  EXPECT_NEAR(r->metrics.at("rollout_is_std"), std::sqrt(m2 - m1 * m1),
              dtype() == torch::kFloat64 ? 1e-7 : 2e-4);
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

// ---------------------------------------------------------------- against verl's formulas
//
// A second implementation in plain loops over doubles, written from verl's
// rollout_corr_helper.py (b178a3cd): compute_rollout_correction_weights, compute_is_metrics
// and compute_offpolicy_metrics, with verl_F.masked_mean's count + 1e-8 and its treatment of
// rows without a valid token (row mean 0, log-ratio sum 0, counted in every row average).

using Grid = std::vector<std::vector<double>>;

struct Batch {
  Grid old, rollout, mask;
  size_t rows() const { return mask.size(); }
  size_t cols() const { return mask.front().size(); }
};

// sum of f(b, t) over the valid tokens / (their count + 1e-8).
template <typename F>
double RefMaskedMean(const Batch& x, F f) {
  double sum = 0, count = 0;
  for (size_t b = 0; b < x.rows(); ++b) {
    for (size_t t = 0; t < x.cols(); ++t) {
      if (x.mask[b][t] != 0) {
        sum += f(b, t);
        count += 1;
      }
    }
  }
  return sum / (count + 1e-8);
}

// Per row: sum of f over the row's valid tokens / (their count + 1e-8); and the plain sum.
template <typename F>
std::vector<double> RefRowMean(const Batch& x, F f, bool sum_only = false) {
  std::vector<double> out;
  for (size_t b = 0; b < x.rows(); ++b) {
    double sum = 0, count = 0;
    for (size_t t = 0; t < x.cols(); ++t) {
      if (x.mask[b][t] != 0) {
        sum += f(b, t);
        count += 1;
      }
    }
    out.push_back(sum_only ? sum : sum / (count + 1e-8));
  }
  return out;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double SampleStd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

template <typename P>
double Fraction(const std::vector<double>& v, P p) {
  return static_cast<double>(std::count_if(v.begin(), v.end(), p)) / static_cast<double>(v.size());
}

double Clamp20(double x) { return std::clamp(x, -20.0, 20.0); }

struct RefIs {
  Grid weights;
  std::map<std::string, double> metrics;
};

RefIs ReferenceIs(const Batch& x, bool sequence, double thr, bool batch_normalize) {
  const double lower = 1.0 / thr;
  auto lr = [&](size_t b, size_t t) { return x.old[b][t] - x.rollout[b][t]; };
  const std::vector<double> sums = RefRowMean(x, lr, /*sum_only=*/true);
  Grid w(x.rows(), std::vector<double>(x.cols(), 0.0));
  for (size_t b = 0; b < x.rows(); ++b) {
    for (size_t t = 0; t < x.cols(); ++t) {
      if (x.mask[b][t] != 0) w[b][t] = std::exp(Clamp20(sequence ? sums[b] : lr(b, t)));
    }
  }
  auto at = [&](const Grid& g) { return [&g](size_t b, size_t t) { return g[b][t]; }; };
  RefIs r;
  auto& m = r.metrics;
  if (sequence) {
    m["rollout_is_max"] = std::exp(std::min(*std::max_element(sums.begin(), sums.end()), 20.0));
    m["rollout_is_min"] = std::exp(*std::min_element(sums.begin(), sums.end()));
    m["rollout_is_ratio_fraction_high"] =
        Fraction(sums, [&](double s) { return s > std::log(thr); });
    m["rollout_is_ratio_fraction_low"] =
        Fraction(sums, [&](double s) { return s < std::log(lower); });
  } else {
    double hi = -INFINITY, lo = INFINITY;
    for (size_t b = 0; b < x.rows(); ++b) {
      for (size_t t = 0; t < x.cols(); ++t) {
        if (x.mask[b][t] != 0) hi = std::max(hi, w[b][t]), lo = std::min(lo, w[b][t]);
      }
    }
    m["rollout_is_max"] = hi;
    m["rollout_is_min"] = lo;
    m["rollout_is_ratio_fraction_high"] =
        RefMaskedMean(x, [&](size_t b, size_t t) { return w[b][t] > thr ? 1.0 : 0.0; });
    m["rollout_is_ratio_fraction_low"] =
        RefMaskedMean(x, [&](size_t b, size_t t) { return w[b][t] < lower ? 1.0 : 0.0; });
  }
  m["rollout_is_mean"] = RefMaskedMean(x, at(w));
  auto clamped = [&](size_t b, size_t t) { return std::clamp(w[b][t], lower, thr); };
  const double cm = RefMaskedMean(x, clamped);
  double tokens = 0;
  for (const auto& row : x.mask) tokens += std::accumulate(row.begin(), row.end(), 0.0);
  const double var =
      RefMaskedMean(x, [&](size_t b, size_t t) { return clamped(b, t) * clamped(b, t); }) - cm * cm;
  m["rollout_is_std"] = tokens > 1 ? std::sqrt(std::max(var, 0.0)) : 0.0;
  m["rollout_is_eff_sample_size"] = 1.0 / RefMaskedMean(x, [&](size_t b, size_t t) {
                                      const double n = clamped(b, t) / (cm + 1e-8);
                                      return n * n;
                                    });
  const std::vector<double> seq = RefRowMean(x, at(w));
  m["rollout_is_seq_mean"] = Mean(seq);
  m["rollout_is_seq_std"] = SampleStd(seq);
  m["rollout_is_seq_max"] = *std::max_element(seq.begin(), seq.end());
  m["rollout_is_seq_min"] = *std::min_element(seq.begin(), seq.end());
  double deviation = 0;
  for (double v : seq) deviation = std::max(deviation, std::abs(v - 1));
  m["rollout_is_seq_max_deviation"] = deviation;
  m["rollout_is_seq_fraction_high"] = Fraction(seq, [&](double v) { return v > thr; });
  m["rollout_is_seq_fraction_low"] = Fraction(seq, [&](double v) { return v < lower; });
  for (auto& row : w) {
    for (double& v : row) v = std::min(v, thr);
  }
  if (batch_normalize) {
    double mean = 0;
    if (!sequence) {
      mean = RefMaskedMean(x, at(w));
    } else {
      const std::vector<double> rows = RefRowMean(x, at(w));
      double sum = 0, valid = 0;
      for (size_t b = 0; b < x.rows(); ++b) {
        if (std::accumulate(x.mask[b].begin(), x.mask[b].end(), 0.0) > 0) sum += rows[b], ++valid;
      }
      mean = sum / std::max(valid, 1e-8);
    }
    if (mean > 1e-8) {
      for (auto& row : w) {
        for (double& v : row) v /= mean;
      }
      m["rollout_is_batch_norm_factor"] = mean;
    } else {
      m["rollout_is_batch_norm_factor"] = 1.0;
    }
  }
  r.weights = w;
  return r;
}

std::map<std::string, double> ReferenceOffPolicy(const Batch& x) {
  std::map<std::string, double> m;
  auto lr = [&](size_t b, size_t t) { return x.old[b][t] - x.rollout[b][t]; };
  const auto train = RefRowMean(x, [&](size_t b, size_t t) { return x.old[b][t]; });
  const auto roll = RefRowMean(x, [&](size_t b, size_t t) { return x.rollout[b][t]; });
  std::vector<double> tp, rp, nt, nr, diff, abs_diff, ratio, chi;
  const auto sums = RefRowMean(x, lr, /*sum_only=*/true);
  for (size_t b = 0; b < x.rows(); ++b) {
    tp.push_back(std::exp(-train[b]));
    nt.push_back(-train[b]);
    rp.push_back(std::exp(-roll[b]));
    nr.push_back(-roll[b]);
    diff.push_back(roll[b] - train[b]);
    abs_diff.push_back(std::abs(roll[b] - train[b]));
    ratio.push_back(std::exp(roll[b] - train[b]));
    chi.push_back(std::exp(2 * Clamp20(sums[b])));
  }
  m["training_ppl"] = Mean(tp);
  m["training_log_ppl"] = Mean(nt);
  m["rollout_ppl"] = Mean(rp);
  m["rollout_log_ppl"] = Mean(nr);
  m["kl"] = RefMaskedMean(x, [&](size_t b, size_t t) { return x.rollout[b][t] - x.old[b][t]; });
  m["k3_kl"] =
      RefMaskedMean(x, [&](size_t b, size_t t) { return std::exp(lr(b, t)) - lr(b, t) - 1; });
  m["log_ppl_diff"] = Mean(diff);
  m["log_ppl_abs_diff"] = Mean(abs_diff);
  m["log_ppl_diff_max"] = *std::max_element(diff.begin(), diff.end());
  m["log_ppl_diff_min"] = *std::min_element(diff.begin(), diff.end());
  m["ppl_ratio"] = Mean(ratio);
  m["chi2_token"] = RefMaskedMean(x,
                                  [&](size_t b, size_t t) {
                                    const double rho = std::exp(Clamp20(lr(b, t)));
                                    return rho * rho;
                                  }) -
                    1.0;
  m["chi2_seq"] = Mean(chi) - 1.0;
  return m;
}

// Six rows of seven tokens: rollout log-probs in (-3, 0), old ones off by N(0, 0.6) so that
// some weights pass the thresholds; a random mask, row 0 empty and row 1 a single token.
Batch RandomBatch(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> gap(0, 0.6);
  Batch x;
  for (int b = 0; b < 6; ++b) {
    std::vector<double> o, r, k;
    for (int t = 0; t < 7; ++t) {
      const double rollout = -3 * u(rng);
      r.push_back(rollout);
      o.push_back(rollout + gap(rng));
      k.push_back(b == 0 ? 0.0 : b == 1 ? (t == 3 ? 1.0 : 0.0) : (u(rng) < 0.7 ? 1.0 : 0.0));
    }
    x.old.push_back(o);
    x.rollout.push_back(r);
    x.mask.push_back(k);
  }
  return x;
}

torch::Tensor ToTensor(const Grid& g, const Grid& mask, bool nan_behind_mask) {
  auto t = torch::empty({static_cast<int64_t>(g.size()), static_cast<int64_t>(g[0].size())},
                        torch::kFloat64);
  for (size_t b = 0; b < g.size(); ++b) {
    for (size_t j = 0; j < g[b].size(); ++j) {
      t[b][j] = nan_behind_mask && mask[b][j] == 0 ? kNaN : g[b][j];
    }
  }
  return t;
}

void ExpectSameMetrics(const std::map<std::string, double>& got,
                       const std::map<std::string, double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, value] : want) {
    ASSERT_EQ(got.count(name), 1u) << what << ": " << name;
    EXPECT_NEAR(got.at(name), value, 1e-9 * std::max(1.0, std::abs(value))) << what << ": " << name;
  }
}

TEST(RolloutCorrectionReferenceTest, MatchesVerlsFormulasOnRandomBatches) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const Batch x = RandomBatch(seed);
    const auto old_logp = ToTensor(x.old, x.mask, true);
    const auto rollout_logp = ToTensor(x.rollout, x.mask, true);
    const auto mask = ToTensor(x.mask, x.mask, false);
    auto off = OffPolicyMetrics(old_logp, rollout_logp, mask);
    ASSERT_TRUE(off.ok()) << off.status();
    ExpectSameMetrics(*off, ReferenceOffPolicy(x), absl::StrCat("seed ", seed, " off-policy"));
    for (const bool sequence : {false, true}) {
      for (const double thr : {1.5, 2.0, 5.0}) {
        for (const bool normalize : {false, true}) {
          const std::string what = absl::StrCat("seed ", seed, sequence ? " sequence" : " token",
                                                " threshold ", thr, normalize ? " normalized" : "");
          auto got = RolloutIsWeights(old_logp, rollout_logp, mask,
                                      sequence ? RolloutIsLevel::kSequence : RolloutIsLevel::kToken,
                                      thr, normalize);
          ASSERT_TRUE(got.ok()) << got.status();
          const RefIs want = ReferenceIs(x, sequence, thr, normalize);
          ExpectSameMetrics(got->metrics, want.metrics, what);
          for (size_t b = 0; b < x.rows(); ++b) {
            for (size_t t = 0; t < x.cols(); ++t) {
              EXPECT_NEAR(got->weights[b][t].item<double>(), want.weights[b][t], 1e-9)
                  << what << " at [" << b << "][" << t << "]";
            }
          }
        }
      }
    }
  }
}

// verl's compute_rollout_rejection_mask and compute_rs_metrics, in loops.
struct RefRs {
  Grid mask;
  std::map<std::string, double> metrics;
};

RefRs ReferenceRs(const Batch& x, const std::vector<RsOption>& options) {
  const size_t rows = x.rows(), cols = x.cols();
  auto valid = [&](size_t b, size_t t) { return x.mask[b][t] != 0; };
  auto stat_of = [&](int estimator, size_t b, size_t t) {
    const double r = valid(b, t) ? Clamp20(x.old[b][t] - x.rollout[b][t]) : 0.0;
    return estimator == 1 ? -r : estimator == 2 ? 0.5 * r * r : std::exp(r) - 1 - r;
  };
  std::vector<bool> row_valid(rows, false);
  double tokens = 0;
  for (size_t b = 0; b < rows; ++b) {
    for (size_t t = 0; t < cols; ++t) {
      if (valid(b, t)) row_valid[b] = true, tokens += 1;
    }
  }
  Grid combined(rows, std::vector<double>(cols, 1.0));
  RefRs out;
  auto& m = out.metrics;
  for (const RsOption& o : options) {
    const bool k1 = o.estimator == 1;
    const double hi = k1 ? std::log(o.upper) : o.upper;
    const double lo = k1 ? std::log(o.lower) : 0.0;
    auto in_bounds = [&](double v) { return k1 ? v >= lo && v <= hi : v <= hi; };
    // The statistic each token is judged and reported by, and each row's value.
    Grid token_stat(rows, std::vector<double>(cols, 0.0));
    std::vector<double> row_value(rows, 0.0);
    for (size_t b = 0; b < rows; ++b) {
      double sum = 0, count = 0, most = -INFINITY;
      for (size_t t = 0; t < cols; ++t) {
        const double v = stat_of(o.estimator, b, t);
        token_stat[b][t] = v;
        if (valid(b, t)) sum += v, count += 1, most = std::max(most, v);
      }
      switch (o.level) {
        case RsLevel::kToken:
        case RsLevel::kSeqMean:
          row_value[b] = sum / (count + 1e-8);
          break;
        case RsLevel::kSeqSum:
          row_value[b] = sum;
          break;
        case RsLevel::kSeqMax:
          row_value[b] = count > 0 ? most : 0.0;
          break;
      }
      if (o.level != RsLevel::kToken) {
        for (size_t t = 0; t < cols; ++t) token_stat[b][t] = row_value[b];
      }
    }
    Grid kept(rows, std::vector<double>(cols, 0.0));
    for (size_t b = 0; b < rows; ++b) {
      for (size_t t = 0; t < cols; ++t) kept[b][t] = in_bounds(token_stat[b][t]) ? 1.0 : 0.0;
    }
    std::vector<double> valid_rows;
    for (size_t b = 0; b < rows; ++b) {
      if (row_valid[b]) valid_rows.push_back(row_value[b]);
    }
    const std::string p = "rollout_rs_" + o.name;
    auto stat = [&](size_t b, size_t t) { return token_stat[b][t]; };
    m[p + "_mean"] = RefMaskedMean(x, stat);
    if (o.level == RsLevel::kToken) {
      double most = -INFINITY, least = INFINITY;
      for (size_t b = 0; b < rows; ++b) {
        for (size_t t = 0; t < cols; ++t) {
          if (valid(b, t)) most = std::max(most, stat(b, t)), least = std::min(least, stat(b, t));
        }
      }
      m[p + "_max"] = most;
      m[p + "_min"] = least;
      m[p + "_fraction_high"] =
          RefMaskedMean(x, [&](size_t b, size_t t) { return stat(b, t) > hi ? 1.0 : 0.0; });
      m[p + "_fraction_low"] =
          k1 ? RefMaskedMean(x, [&](size_t b, size_t t) { return stat(b, t) < lo ? 1.0 : 0.0; })
             : 0.0;
    } else {
      m[p + "_max"] = *std::max_element(valid_rows.begin(), valid_rows.end());
      m[p + "_min"] = *std::min_element(valid_rows.begin(), valid_rows.end());
      m[p + "_fraction_high"] = Fraction(valid_rows, [&](double v) { return v > hi; });
      m[p + "_fraction_low"] = k1 ? Fraction(valid_rows, [&](double v) { return v < lo; }) : 0.0;
    }
    auto clamped = [&](size_t b, size_t t) { return std::clamp(stat(b, t), k1 ? lo : 0.0, hi); };
    const double cm = RefMaskedMean(x, clamped);
    const double var =
        RefMaskedMean(x, [&](size_t b, size_t t) { return clamped(b, t) * clamped(b, t); }) -
        cm * cm;
    m[p + "_std"] = tokens > 1 ? std::sqrt(std::max(var, 0.0)) : 0.0;
    m[p + "_seq_mean"] = Mean(valid_rows);
    m[p + "_seq_std"] = SampleStd(valid_rows);
    m[p + "_seq_max"] = *std::max_element(valid_rows.begin(), valid_rows.end());
    m[p + "_seq_min"] = *std::min_element(valid_rows.begin(), valid_rows.end());
    double deviation = 0;
    for (double v : valid_rows) deviation = std::max(deviation, std::abs(v));
    m[p + "_seq_max_deviation"] = deviation;
    m[p + "_seq_fraction_high"] = Fraction(valid_rows, [&](double v) { return v > hi; });
    if (k1) m[p + "_seq_fraction_low"] = Fraction(valid_rows, [&](double v) { return v < lo; });
    m[p + "_masked_fraction"] =
        RefMaskedMean(x, [&](size_t b, size_t t) { return 1 - kept[b][t]; });
    double rejected_rows = 0, valid_count = 0;
    for (size_t b = 0; b < rows; ++b) {
      if (!row_valid[b]) continue;
      valid_count += 1;
      bool rejected = false;
      for (size_t t = 0; t < cols; ++t) rejected = rejected || (valid(b, t) && kept[b][t] == 0);
      rejected_rows += rejected ? 1 : 0;
    }
    m[p + "_seq_masked_fraction"] = rejected_rows / valid_count;
    for (size_t b = 0; b < rows; ++b) {
      for (size_t t = 0; t < cols; ++t) combined[b][t] *= kept[b][t];
    }
  }
  m["rollout_rs_masked_fraction"] =
      RefMaskedMean(x, [&](size_t b, size_t t) { return 1 - combined[b][t]; });
  double rows_with_rejection = 0;
  out.mask = Grid(rows, std::vector<double>(cols, 0.0));
  for (size_t b = 0; b < rows; ++b) {
    bool rejected = false;
    for (size_t t = 0; t < cols; ++t) {
      out.mask[b][t] = x.mask[b][t] * combined[b][t];
      rejected = rejected || (valid(b, t) && combined[b][t] < 0.5);
    }
    rows_with_rejection += rejected ? 1 : 0;
  }
  m["rollout_rs_seq_masked_fraction"] = rows_with_rejection / static_cast<double>(rows);
  return out;
}

TEST(RolloutCorrectionReferenceTest, RejectionMatchesVerlsFormulasOnRandomBatches) {
  // Every option alone, with bounds that keep some and reject some of these batches, then
  // several together with one shared and with one bound each.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"token_k1", "0.6_1.5"},
      {"token_k1", "1.5"},
      {"token_k2", "0.1"},
      {"token_k3", "0.1"},
      {"seq_sum_k1", "0.3_3"},
      {"seq_sum_k2", "0.4"},
      {"seq_sum_k3", "0.4"},
      {"seq_mean_k1", "0.7_1.4"},
      {"seq_mean_k2", "0.08"},
      {"seq_mean_k3", "0.08"},
      {"seq_max_k2", "0.3"},
      {"seq_max_k3", "0.3"},
      {"token_k2,seq_max_k3", "0.2"},
      {"token_k1, seq_mean_k3,token_k1", "0.5_2, 0.1"},
  };
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const Batch x = RandomBatch(seed);
    const auto old_logp = ToTensor(x.old, x.mask, true);
    const auto rollout_logp = ToTensor(x.rollout, x.mask, true);
    const auto mask = ToTensor(x.mask, x.mask, false);
    for (const auto& [rs, threshold] : cases) {
      const std::string what = absl::StrCat("seed ", seed, " ", rs, " ", threshold);
      auto options = ParseRolloutRs(rs, threshold);
      ASSERT_TRUE(options.ok()) << what << ": " << options.status();
      auto got = RolloutRejection(old_logp, rollout_logp, mask, *options);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status();
      const RefRs want = ReferenceRs(x, *options);
      ExpectSameMetrics(got->metrics, want.metrics, what);
      for (size_t b = 0; b < x.rows(); ++b) {
        for (size_t t = 0; t < x.cols(); ++t) {
          EXPECT_EQ(got->mask[b][t].item<double>(), want.mask[b][t])
              << what << " at [" << b << "][" << t << "]";
        }
      }
    }
  }
}

TEST(RolloutRejectionTest, RejectsTheTokensOutOfBoundsByHand) {
  // r = old - rollout = [ln 2, 0, -ln 3] in one row; k1 = -r = [-ln 2, 0, ln 3]. With ratio
  // bounds 0.4_2.5 (log bounds -0.916, 0.916) token 2 (ln 3 = 1.099) is rejected; the row's
  // k1 sum ln 3 - ln 2 = 0.405 stays within seq_sum_k1's bounds.
  const auto old_logp =
      torch::tensor({{-1 + std::log(2.0), -1.0, -1 - std::log(3.0)}}, torch::kFloat64);
  const auto rollout_logp = torch::full({1, 3}, -1.0, torch::kFloat64);
  const auto mask = torch::ones({1, 3}, torch::kInt64);
  auto token =
      RolloutRejection(old_logp, rollout_logp, mask, *ParseRolloutRs("token_k1", "0.4_2.5"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->mask.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(token->mask, torch::tensor({{1, 1, 0}}, torch::kInt64)));
  EXPECT_NEAR(token->metrics.at("rollout_rs_masked_fraction"), 1.0 / 3, 1e-8);
  EXPECT_NEAR(token->metrics.at("rollout_rs_seq_masked_fraction"), 1.0, 1e-12);
  EXPECT_NEAR(token->metrics.at("rollout_rs_token_k1_fraction_high"), 1.0 / 3, 1e-8);
  EXPECT_NEAR(token->metrics.at("rollout_rs_token_k1_max"), std::log(3.0), 1e-12);
  auto seq =
      RolloutRejection(old_logp, rollout_logp, mask, *ParseRolloutRs("seq_sum_k1", "0.4_2.5"));
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_TRUE(torch::equal(seq->mask, mask));
  // k2 = r^2 / 2 = [0.240, 0, 0.603]: seq_max_k2 with 0.5 rejects the whole row.
  auto max = RolloutRejection(old_logp, rollout_logp, mask, *ParseRolloutRs("seq_max_k2", "0.5"));
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_TRUE(torch::equal(max->mask, torch::zeros({1, 3}, torch::kInt64)));
  EXPECT_NEAR(max->metrics.at("rollout_rs_seq_max_k2_max"), 0.5 * std::log(3.0) * std::log(3.0),
              1e-12);
}

TEST(RolloutRejectionTest, ParsesVerlsOptionsAndThresholdsNamingWhatIsWrong) {
  auto both = ParseRolloutRs(" token_k1 ,seq_max_k3,token_k1", "0.5_2,0.3");
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);  // the repeat is dropped
  EXPECT_EQ((*both)[0].name, "token_k1");
  EXPECT_DOUBLE_EQ((*both)[0].lower, 0.5);
  EXPECT_DOUBLE_EQ((*both)[0].upper, 2);
  EXPECT_EQ((*both)[1].level, RsLevel::kSeqMax);
  EXPECT_DOUBLE_EQ((*both)[1].upper, 0.3);
  auto upper_only = ParseRolloutRs("seq_mean_k1", "4");
  ASSERT_TRUE(upper_only.ok());
  EXPECT_DOUBLE_EQ((*upper_only)[0].lower, 0.25);
  auto message = [](absl::string_view rs, absl::string_view threshold) {
    return std::string(ParseRolloutRs(rs, threshold).status().message());
  };
  EXPECT_THAT(message("token_k4", "1"), HasSubstr("rollout_rs: unknown option 'token_k4'"));
  EXPECT_THAT(message(" , ", "1"), HasSubstr("rollout_rs: expected at least one option"));
  EXPECT_THAT(message("token_k2", ""), HasSubstr("rollout_rs_threshold: rollout_rs needs"));
  EXPECT_THAT(message("token_k2,token_k3,seq_sum_k2", "1,2"),
              HasSubstr("one for each of the 3, got 2"));
  EXPECT_THAT(message("token_k2", "0.1_2"), HasSubstr("token_k2 takes one upper bound"));
  EXPECT_THAT(message("token_k1", "0_2"), HasSubstr("must be > 0"));
  EXPECT_THAT(message("token_k3", "abc"), HasSubstr("'abc' for token_k3 is not a number"));
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
