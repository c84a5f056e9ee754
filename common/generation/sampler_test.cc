#include "common/generation/sampler.h"

#include <cmath>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlmesh::generation {
namespace {

using ::testing::ElementsAre;

// log-softmax of `logits / t` at `i`, in double, written out from the definition.
double RefLogProb(const std::vector<double>& logits, double t, int i) {
  double m = logits[0] / t;
  for (double l : logits) m = std::max(m, l / t);
  double s = 0;
  for (double l : logits) s += std::exp(l / t - m);
  return logits[i] / t - m - std::log(s);
}

torch::Tensor Row(const std::vector<double>& values) {
  return torch::tensor(values, torch::kFloat64).to(torch::kFloat32).reshape({1, -1});
}

std::unique_ptr<Sampler> MakeSampler(std::vector<int64_t> banned = {}) {
  SamplerOptions options;
  options.banned_token_ids = std::move(banned);
  return Sampler::Create(options).value();
}

TEST(TopKTopPSupportTest, TopPKeepsSmallestSetReachingTheMass) {
  const std::vector<float> p = {0.1f, 0.5f, 0.15f, 0.25f};
  // Sorted: 1 (0.5), 3 (0.25), 2 (0.15), 0 (0.1); cumulative 0.5, 0.75, 0.9, 1.0.
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, -1, 0.4), ElementsAre(1));
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, -1, 0.7), ElementsAre(1, 3));
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, -1, 0.8), ElementsAre(1, 3, 2));
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, -1, 0.95), ElementsAre(1, 3, 2, 0));
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, -1, 1.0), ElementsAre(1, 3, 2, 0));
}

TEST(TopKTopPSupportTest, TopKThenTopPOfTheKeptMass) {
  const std::vector<float> p = {0.1f, 0.5f, 0.15f, 0.25f};
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, 2, 1.0), ElementsAre(1, 3));
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, 1, 1.0), ElementsAre(1));
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, 0, 1.0), ElementsAre(1, 3, 2, 0));  // 0 = off
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, 10, 1.0), ElementsAre(1, 3, 2, 0));
  // top-k 2 keeps mass 0.75; top-p 0.6 of it is 0.45, reached by token 1 alone. Applied to
  // the full mass (0.6) it would have needed token 3 too.
  EXPECT_THAT(TopKTopPSupport(p.data(), 4, 2, 0.6), ElementsAre(1));
}

TEST(TopKTopPSupportTest, TopKKeepsTiesAndDropsZeros) {
  const std::vector<float> p = {0.3f, 0.2f, 0.3f, 0.2f, 0.0f};
  EXPECT_THAT(TopKTopPSupport(p.data(), 5, 3, 1.0), ElementsAre(0, 2, 1, 3));
  EXPECT_THAT(TopKTopPSupport(p.data(), 5, -1, 1.0), ElementsAre(0, 2, 1, 3));
}

TEST(TopKTopPSupportTest, LargeVocabularyTopPMatchesFullSort) {
  // 5000 tokens with probabilities proportional to 1/(rank+1), in a shuffled id order; the
  // expected set is computed by a full sort.
  const int64_t vocab = 5000;
  std::vector<float> p(vocab);
  for (int64_t i = 0; i < vocab; ++i) p[(i * 7919) % vocab] = 1.0f / static_cast<float>(i + 1);
  for (double top_p : {0.3, 0.9, 0.99}) {
    std::vector<int64_t> order(vocab);
    for (int64_t i = 0; i < vocab; ++i) order[i] = (i * 7919) % vocab;  // already most likely first
    double total = 0;
    for (float v : p) total += v;
    std::vector<int64_t> expected;
    double cumulative = 0;
    for (int64_t id : order) {
      expected.push_back(id);
      cumulative += p[id];
      if (cumulative >= top_p * total) break;
    }
    EXPECT_EQ(TopKTopPSupport(p.data(), vocab, -1, top_p), expected) << "top_p " << top_p;
  }
}

TEST(DrawFromSupportTest, InverseCdfOverTheSupport) {
  const std::vector<float> p = {0.1f, 0.5f, 0.15f, 0.25f};
  const std::vector<int64_t> support = {1, 3};  // mass 0.75
  EXPECT_EQ(DrawFromSupport(p.data(), support, 0.0), 1);
  EXPECT_EQ(DrawFromSupport(p.data(), support, 0.6), 1);   // 0.45 < 0.5
  EXPECT_EQ(DrawFromSupport(p.data(), support, 0.7), 3);   // 0.525 > 0.5
  EXPECT_EQ(DrawFromSupport(p.data(), support, 0.999), 3);
}

TEST(SamplerTest, GreedyPicksArgmaxAndReportsItsLogProb) {
  const std::vector<double> logits = {1.0, 3.0, 2.0, -1.0};
  SamplingParams greedy;
  greedy.temperature = 0.0;
  auto result = MakeSampler()->Sample(Row(logits), {{&greedy, nullptr}}).value();
  EXPECT_EQ(result.tokens[0], 1);
  EXPECT_NEAR(result.logprobs[0], RefLogProb(logits, 1.0, 1), 1e-6);

  // do_sample=false with T=0.5: still argmax; the log-prob is under logits / 0.5.
  SamplingParams no_sample;
  no_sample.do_sample = false;
  no_sample.temperature = 0.5;
  result = MakeSampler()->Sample(Row(logits), {{&no_sample, nullptr}}).value();
  EXPECT_EQ(result.tokens[0], 1);
  EXPECT_NEAR(result.logprobs[0], RefLogProb(logits, 0.5, 1), 1e-6);
}

TEST(SamplerTest, BannedTokensAreNeverChosenButLogProbIsUnmasked) {
  const std::vector<double> logits = {1.0, 3.0, 2.0, -1.0};
  SamplingParams greedy;
  greedy.temperature = 0.0;
  auto result = MakeSampler({1})->Sample(Row(logits), {{&greedy, nullptr}}).value();
  EXPECT_EQ(result.tokens[0], 2);
  EXPECT_NEAR(result.logprobs[0], RefLogProb(logits, 1.0, 2), 1e-6);

  SamplingParams sampled;
  torch::Generator gen = MakeSequenceGenerator(3, 0);
  for (int i = 0; i < 200; ++i) {
    result = MakeSampler({1, 2})->Sample(Row(logits), {{&sampled, &gen}}).value();
    EXPECT_TRUE(result.tokens[0] == 0 || result.tokens[0] == 3) << result.tokens[0];
  }
  EXPECT_FALSE(Sampler::Create({.banned_token_ids = {-1}}).ok());
  EXPECT_FALSE(MakeSampler({4})->Sample(Row(logits), {{&greedy, nullptr}}).ok());
}

// Empirical frequencies of 20000 seeded draws against the distribution worked out by hand.
std::vector<double> Frequencies(const std::vector<double>& logits, const SamplingParams& params,
                                int draws) {
  auto sampler = MakeSampler();
  torch::Generator gen = MakeSequenceGenerator(12345, 0);
  std::vector<double> counts(logits.size(), 0.0);
  const torch::Tensor x = Row(logits);
  for (int i = 0; i < draws; ++i) {
    auto result = sampler->Sample(x, {{&params, &gen}}).value();
    counts[result.tokens[0]] += 1.0 / draws;
    EXPECT_NEAR(result.logprobs[0],
                RefLogProb(logits, params.temperature, static_cast<int>(result.tokens[0])), 1e-5);
  }
  return counts;
}

TEST(SamplerTest, SampledFrequenciesFollowTemperatureTopKAndTopP) {
  const std::vector<double> logits = {std::log(0.1), std::log(0.2), std::log(0.3),
                                      std::log(0.4)};
  SamplingParams t1;
  auto f = Frequencies(logits, t1, 20000);
  EXPECT_NEAR(f[0], 0.1, 0.015);
  EXPECT_NEAR(f[1], 0.2, 0.015);
  EXPECT_NEAR(f[2], 0.3, 0.015);
  EXPECT_NEAR(f[3], 0.4, 0.015);

  // T=2: p_i proportional to sqrt(p_i): sqrt(.1,.2,.3,.4) / 2.0233.
  SamplingParams t2;
  t2.temperature = 2.0;
  f = Frequencies(logits, t2, 20000);
  const double z = std::sqrt(0.1) + std::sqrt(0.2) + std::sqrt(0.3) + std::sqrt(0.4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], std::sqrt(0.1 * (i + 1)) / z, 0.015) << i;

  // top_p 0.65 keeps {3, 2} (0.4 + 0.3 = 0.7 >= 0.65), renormalised to 4/7 and 3/7.
  SamplingParams top_p;
  top_p.top_p = 0.65;
  f = Frequencies(logits, top_p, 20000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_EQ(f[1], 0.0);
  EXPECT_NEAR(f[2], 3.0 / 7, 0.015);
  EXPECT_NEAR(f[3], 4.0 / 7, 0.015);

  // top_k 3 keeps {3, 2, 1}: 0.4/0.9, 0.3/0.9, 0.2/0.9.
  SamplingParams top_k;
  top_k.top_k = 3;
  f = Frequencies(logits, top_k, 20000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 2.0 / 9, 0.015);
  EXPECT_NEAR(f[2], 3.0 / 9, 0.015);
  EXPECT_NEAR(f[3], 4.0 / 9, 0.015);
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  torch::manual_seed(7);
  const torch::Tensor logits = torch::randn({16, 300});
  SamplingParams greedy;
  greedy.temperature = 0.0;
  SamplingParams top1;
  top1.top_k = 1;
  top1.temperature = 0.8;
  std::vector<torch::Generator> gens;
  for (int b = 0; b < 16; ++b) gens.push_back(MakeSequenceGenerator(99, b));
  std::vector<Sampler::Row> greedy_rows, top1_rows;
  for (int b = 0; b < 16; ++b) {
    greedy_rows.push_back({&greedy, nullptr});
    top1_rows.push_back({&top1, &gens[b]});
  }
  auto sampler = MakeSampler();
  const auto expected = std::get<1>(logits.max(1));
  const auto g = sampler->Sample(logits, greedy_rows).value();
  const auto t = sampler->Sample(logits, top1_rows).value();
  for (int b = 0; b < 16; ++b) {
    EXPECT_EQ(g.tokens[b], expected[b].item<int64_t>());
    EXPECT_EQ(t.tokens[b], expected[b].item<int64_t>());
  }
}

TEST(SamplerTest, RowsDoNotDependOnTheirBatch) {
  torch::manual_seed(11);
  const torch::Tensor logits = torch::randn({6, 50});
  SamplingParams params;
  params.top_p = 0.9;
  params.temperature = 0.7;
  auto sampler = MakeSampler();
  std::vector<torch::Generator> batch_gens, alone_gens;
  std::vector<Sampler::Row> rows;
  for (int b = 0; b < 6; ++b) {
    batch_gens.push_back(MakeSequenceGenerator(5, b));
    alone_gens.push_back(MakeSequenceGenerator(5, b));
  }
  for (int b = 0; b < 6; ++b) rows.push_back({&params, &batch_gens[b]});
  for (int step = 0; step < 20; ++step) {
    const auto together = sampler->Sample(logits, rows).value();
    for (int b = 0; b < 6; ++b) {
      const auto alone =
          sampler->Sample(logits.slice(0, b, b + 1), {{&params, &alone_gens[b]}}).value();
      EXPECT_EQ(together.tokens[b], alone.tokens[0]);
      EXPECT_FLOAT_EQ(together.logprobs[b], alone.logprobs[0]);
    }
  }
}

TEST(GeneratorTest, SeedAndIndexDetermineTheStream) {
  torch::Generator a = MakeSequenceGenerator(42, 3);
  torch::Generator b = MakeSequenceGenerator(42, 3);
  torch::Generator c = MakeSequenceGenerator(42, 4);
  torch::Generator d = MakeSequenceGenerator(43, 3);
  int same_c = 0, same_d = 0;
  for (int i = 0; i < 10; ++i) {
    const double ua = NextUniform(a);
    EXPECT_GE(ua, 0.0);
    EXPECT_LT(ua, 1.0);
    EXPECT_EQ(ua, NextUniform(b));
    same_c += ua == NextUniform(c);
    same_d += ua == NextUniform(d);
  }
  EXPECT_EQ(same_c, 0);
  EXPECT_EQ(same_d, 0);
}

TEST(SamplingParamsTest, ValidationNamesTheField) {
  SamplingParams ok;
  EXPECT_TRUE(ValidateSamplingParams(ok, 10).ok());
  SamplingParams p = ok;
  p.n = 0;
  EXPECT_THAT(ValidateSamplingParams(p, 10).message(), ::testing::HasSubstr("n:"));
  p = ok;
  p.temperature = -0.5;
  EXPECT_THAT(ValidateSamplingParams(p, 10).message(), ::testing::HasSubstr("temperature"));
  p = ok;
  p.top_p = 0.0;
  EXPECT_THAT(ValidateSamplingParams(p, 10).message(), ::testing::HasSubstr("top_p"));
  p = ok;
  p.top_k = -2;
  EXPECT_THAT(ValidateSamplingParams(p, 10).message(), ::testing::HasSubstr("top_k"));
  p = ok;
  p.max_new_tokens = 0;
  EXPECT_THAT(ValidateSamplingParams(p, 10).message(), ::testing::HasSubstr("max_new_tokens"));
  p = ok;
  p.stop_token_ids = {10};
  EXPECT_THAT(ValidateSamplingParams(p, 10).message(), ::testing::HasSubstr("stop_token_ids"));
}

}  // namespace
}  // namespace rlmesh::generation
