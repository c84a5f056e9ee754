#include "common/generation/generation_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/generation/test_model.h"

namespace rlmesh::generation {
namespace {

using ::testing::ElementsAreArray;
using testing::FullLogits;
using ::testing::HasSubstr;
using testing::ReferenceGreedy;
using testing::TinyModel;

const std::vector<std::vector<int64_t>> kPrompts = {{5, 17, 33},
                                                    {2, 9, 40, 61, 7, 8, 90},
                                                    {11, 12, 13, 14, 15},
                                                    {70},
                                                    {3, 44, 45, 20, 21, 22, 23, 24, 25}};

std::unique_ptr<GenerationEngine> MakeEngine(std::shared_ptr<model::CausalLmImpl> m,
                                             int64_t max_num_seqs, int64_t max_model_len = 64) {
  GenerationEngineOptions options;
  options.max_num_seqs = max_num_seqs;
  options.max_model_len = max_model_len;
  return GenerationEngine::Create(std::move(m), options).value();
}

GenerationRequest Greedy(const std::string& id, std::vector<int64_t> prompt, int64_t max_new) {
  GenerationRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0.0;
  r.params.max_new_tokens = max_new;
  return r;
}

GenerationRequest Sampled(const std::string& id, std::vector<int64_t> prompt, int64_t max_new,
                          int32_t n, uint64_t seed) {
  GenerationRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.params.n = n;
  r.params.temperature = 0.9;
  r.params.top_p = 0.95;
  r.params.top_k = 40;
  r.params.seed = seed;
  r.params.max_new_tokens = max_new;
  return r;
}

TEST(GenerationEngineTest, GreedyEqualsArgmaxOverFullForwards) {
  auto m = TinyModel();
  auto engine = MakeEngine(m, 8);
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    requests.push_back(Greedy("r" + std::to_string(i), kPrompts[i], 12));
  }
  auto samples = engine->Generate(requests).value();
  ASSERT_EQ(samples.size(), kPrompts.size());
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(samples[i].request_id, "r" + std::to_string(i));
    EXPECT_EQ(samples[i].finish_reason, FinishReason::kLength);
    EXPECT_THAT(samples[i].token_ids, ElementsAreArray(ReferenceGreedy(*m, kPrompts[i], 12)))
        << "prompt " << i;
  }
}

TEST(GenerationEngineTest, SubmitAllQueuesEveryRequestOrNone) {
  auto engine = MakeEngine(TinyModel(), 8);  // not serving: what is queued stays queued
  std::vector<std::pair<GenerationRequest, GenerationEngine::SampleCallback>> batch;
  batch.emplace_back(Greedy("a", kPrompts[0], 4), nullptr);
  batch.emplace_back(Greedy("b", {}, 4), nullptr);  // an empty prompt: refused
  absl::Status refused = engine->SubmitAll(std::move(batch));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("generation request b"), std::string::npos) << refused;
  EXPECT_EQ(engine->Stats().queued_requests, 0) << "request a was queued without b";

  batch.clear();
  batch.emplace_back(Greedy("a", kPrompts[0], 4), nullptr);
  batch.emplace_back(Greedy("a", kPrompts[1], 4), nullptr);
  EXPECT_EQ(engine->SubmitAll(std::move(batch)).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine->Stats().queued_requests, 0);

  batch.clear();
  batch.emplace_back(Greedy("a", kPrompts[0], 4), nullptr);
  batch.emplace_back(Greedy("b", kPrompts[1], 4), nullptr);
  ASSERT_TRUE(engine->SubmitAll(std::move(batch)).ok());
  EXPECT_EQ(engine->Stats().queued_requests, 2);
  EXPECT_EQ(engine->Submit(Greedy("b", kPrompts[2], 4)).code(), absl::StatusCode::kAlreadyExists);
}

TEST(GenerationEngineTest, BatchOfDifferentLengthsEqualsEachAlone) {
  auto m = TinyModel(2);
  std::vector<GenerationRequest> all;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    all.push_back(Greedy("r" + std::to_string(i), kPrompts[i], 10));
  }
  auto together = MakeEngine(m, 8)->Generate(all).value();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    auto alone = MakeEngine(m, 8)->Generate({all[i]}).value();
    EXPECT_EQ(together[i].token_ids, alone[0].token_ids) << "prompt " << i;
    for (size_t t = 0; t < alone[0].logprobs.size(); ++t) {
      EXPECT_NEAR(together[i].logprobs[t], alone[0].logprobs[t], 1e-5);
    }
  }
}

TEST(GenerationEngineTest, ContinuousBatchingMatchesWideBatchAndLetsShortOnesThrough) {
  auto m = TinyModel(3);
  // One long request first, then four short ones; with two slots the short ones must pass the
  // long one (finish before it) instead of waiting for the whole batch.
  std::vector<GenerationRequest> requests = {Greedy("long", kPrompts[1], 30)};
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Greedy("short" + std::to_string(i), kPrompts[(i + 2) % 5], 3 + i));
  }
  auto wide = MakeEngine(m, 8)->Generate(requests).value();

  auto narrow = MakeEngine(m, 2);
  std::vector<std::string> order;
  for (const auto& r : requests) {
    ASSERT_TRUE(narrow->Submit(r).ok());
  }
  int64_t max_running = 0;
  while (narrow->HasWork()) {
    narrow->Step();
    const EngineStats stats = narrow->Stats();
    max_running = std::max(max_running, stats.running_sequences);
    EXPECT_LE(stats.running_sequences, 2);
    for (const Sample& s : narrow->TakeFinished()) order.push_back(s.request_id);
  }
  EXPECT_EQ(max_running, 2);
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(order.back(), "long");

  // Same greedy outputs as with eight slots.
  auto narrow2 = MakeEngine(m, 2)->Generate(requests).value();
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(narrow2[i].token_ids, wide[i].token_ids) << requests[i].request_id;
    EXPECT_EQ(wide[i].token_ids.size(), static_cast<size_t>(requests[i].params.max_new_tokens));
  }
}

TEST(GenerationEngineTest, SeededSamplingIsReproducibleAndIndependentOfBatching) {
  auto m = TinyModel(4);
  std::vector<GenerationRequest> requests = {Sampled("a", kPrompts[0], 15, 3, 17),
                                             Sampled("b", kPrompts[4], 9, 2, 18),
                                             Sampled("c", kPrompts[2], 12, 4, 19)};
  auto wide = MakeEngine(m, 16)->Generate(requests).value();
  auto narrow = MakeEngine(m, 2)->Generate(requests).value();
  auto again = MakeEngine(m, 16)->Generate(requests).value();
  ASSERT_EQ(wide.size(), 9u);
  for (size_t i = 0; i < wide.size(); ++i) {
    EXPECT_EQ(wide[i].token_ids, narrow[i].token_ids) << i;
    EXPECT_EQ(wide[i].token_ids, again[i].token_ids) << i;
  }
  // The samples of one request differ from each other, and a new seed changes them.
  EXPECT_NE(wide[0].token_ids, wide[1].token_ids);
  requests[0].params.seed = 99;
  auto reseeded = MakeEngine(m, 16)->Generate({requests[0]}).value();
  EXPECT_NE(reseeded[0].token_ids, wide[0].token_ids);
}

// A group's samples 2 and 3 sent again on their own (the rest of a group whose replica
// failed) are the samples 2 and 3 of the whole group.
TEST(GenerationEngineTest, ASeededSampleIsTheSameInWhicheverCallCarriesIt) {
  auto m = TinyModel(4);
  GenerationRequest whole = Sampled("whole", kPrompts[1], 12, 4, 23);
  GenerationRequest rest = Sampled("rest", kPrompts[1], 12, 2, 23);
  rest.first_index = 2;
  auto a = MakeEngine(m, 16)->Generate({whole}).value();
  auto b = MakeEngine(m, 16)->Generate({rest}).value();
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].token_ids, a[2].token_ids);
  EXPECT_EQ(b[1].token_ids, a[3].token_ids);
  EXPECT_NE(b[0].token_ids, a[0].token_ids);
}

TEST(GenerationEngineTest, TopKOneEqualsGreedy) {
  auto m = TinyModel(5);
  GenerationRequest top1 = Sampled("k1", kPrompts[3], 14, 2, 7);
  top1.params.top_k = 1;
  top1.params.top_p = 1.0;
  auto samples = MakeEngine(m, 4)->Generate({top1}).value();
  const auto expected = ReferenceGreedy(*m, kPrompts[3], 14);
  EXPECT_THAT(samples[0].token_ids, ElementsAreArray(expected));
  EXPECT_THAT(samples[1].token_ids, ElementsAreArray(expected));
}

TEST(GenerationEngineTest, LogProbsEqualFullForwardLogProbs) {
  auto m = TinyModel(6);
  std::vector<GenerationRequest> requests = {Sampled("a", kPrompts[1], 16, 2, 5),
                                             Sampled("b", kPrompts[3], 16, 1, 6)};
  requests[0].params.temperature = 0.7;
  requests[1].params.temperature = 1.3;
  auto samples = MakeEngine(m, 4)->Generate(requests).value();
  for (const Sample& s : samples) {
    const auto& prompt = s.request_id == "a" ? kPrompts[1] : kPrompts[3];
    const double temperature = s.request_id == "a" ? 0.7 : 1.3;
    std::vector<int64_t> full = prompt;
    full.insert(full.end(), s.token_ids.begin(), s.token_ids.end());
    const int64_t t = static_cast<int64_t>(full.size());
    torch::Tensor logits = FullLogits(*m, full).unsqueeze(0);  // [1, T, V]
    torch::Tensor targets = torch::tensor(full, torch::kInt64).slice(0, 1).view({1, t - 1});
    torch::Tensor lp = model::LogProbsFromLogits(logits.slice(1, 0, t - 1), targets, temperature);
    const int64_t p = static_cast<int64_t>(prompt.size());
    ASSERT_EQ(s.logprobs.size(), s.token_ids.size());
    for (size_t i = 0; i < s.logprobs.size(); ++i) {
      EXPECT_NEAR(s.logprobs[i], lp[0][p - 1 + static_cast<int64_t>(i)].item<float>(), 1e-5)
          << s.request_id << " token " << i;
    }
  }
}

TEST(GenerationEngineTest, StopTokenAndLengthFinishReasons) {
  auto m = TinyModel(7);
  const auto reference = ReferenceGreedy(*m, kPrompts[2], 10);
  // Stop at the first occurrence of the reference's 4th token (it may appear earlier).
  const int64_t stop = reference[3];
  size_t stop_at = 0;
  while (reference[stop_at] != stop) ++stop_at;
  GenerationRequest with_stop = Greedy("stop", kPrompts[2], 10);
  with_stop.params.stop_token_ids = {stop};
  GenerationRequest length = Greedy("length", kPrompts[2], 6);
  auto samples = MakeEngine(m, 4)->Generate({with_stop, length}).value();
  EXPECT_EQ(samples[0].finish_reason, FinishReason::kStop);
  EXPECT_THAT(samples[0].token_ids,
              ElementsAreArray(reference.begin(), reference.begin() + stop_at + 1));
  EXPECT_EQ(samples[1].finish_reason, FinishReason::kLength);
  EXPECT_THAT(samples[1].token_ids, ElementsAreArray(reference.begin(), reference.begin() + 6));

  // A 9-token prompt with max_model_len 12: prompt and response together fill at most 12
  // positions, so the 3rd generated token ends it (9 + 3 = 12) although max_new_tokens is 50.
  auto small = MakeEngine(m, 2, 12);
  auto capped = small->Generate({Greedy("cap", kPrompts[4], 50)}).value();
  EXPECT_EQ(capped[0].finish_reason, FinishReason::kLength);
  EXPECT_THAT(capped[0].token_ids, ElementsAreArray(ReferenceGreedy(*m, kPrompts[4], 3)));
}

TEST(GenerationEngineTest, AbortCountsTheSamplesNotYetDelivered) {
  auto engine = MakeEngine(TinyModel(8), 2);  // two slots: 2 of the 3 samples run, 1 queued
  ASSERT_TRUE(engine->Submit(Sampled("r", kPrompts[0], 40, 3, 7)).ok());
  engine->Step();
  engine->Step();
  int64_t undelivered = -1;
  ASSERT_TRUE(engine->Abort("r", &undelivered).ok());
  EXPECT_EQ(undelivered, 3) << "samples, not the one prompt";
  engine->Step();
  EXPECT_EQ(engine->TakeFinished().size(), 3u);
}

TEST(GenerationEngineTest, AbortRunningAndQueued) {
  auto m = TinyModel(8);
  auto engine = MakeEngine(m, 1);
  ASSERT_TRUE(engine->Submit(Greedy("running", kPrompts[0], 40)).ok());
  ASSERT_TRUE(engine->Submit(Greedy("queued", kPrompts[1], 40)).ok());
  engine->Step();  // prefill "running": 1 token
  engine->Step();  // decode: 2 tokens
  engine->Step();  // 3 tokens
  EXPECT_EQ(engine->Stats().running_sequences, 1);
  EXPECT_EQ(engine->Stats().queued_sequences, 1);
  ASSERT_TRUE(engine->Abort("queued").ok());
  EXPECT_EQ(engine->Stats().queued_sequences, 0);
  ASSERT_TRUE(engine->Abort("running").ok());
  EXPECT_EQ(engine->Abort("nope").code(), absl::StatusCode::kNotFound);
  engine->Step();
  auto done = engine->TakeFinished();
  ASSERT_EQ(done.size(), 2u);
  for (const Sample& s : done) {
    EXPECT_EQ(s.finish_reason, FinishReason::kAbort);
    EXPECT_TRUE(s.error.ok());
    if (s.request_id == "running") {
      EXPECT_THAT(s.token_ids, ElementsAreArray(ReferenceGreedy(*m, kPrompts[0], 3)));
    } else {
      EXPECT_TRUE(s.token_ids.empty());
    }
  }
  EXPECT_FALSE(engine->HasWork());

  // AbortAll ends everything; the engine keeps working afterwards.
  ASSERT_TRUE(engine->Submit(Greedy("x", kPrompts[0], 40)).ok());
  ASSERT_TRUE(engine->Submit(Greedy("y", kPrompts[2], 40)).ok());
  engine->Step();
  engine->AbortAll();
  engine->Step();
  done = engine->TakeFinished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].finish_reason, FinishReason::kAbort);
  EXPECT_EQ(done[1].finish_reason, FinishReason::kAbort);
  auto after = engine->Generate({Greedy("z", kPrompts[0], 5)}).value();
  EXPECT_THAT(after[0].token_ids, ElementsAreArray(ReferenceGreedy(*m, kPrompts[0], 5)));
}

TEST(GenerationEngineTest, BadRequestsFailAloneAndStatsTrackLoad) {
  auto m = TinyModel(9);
  auto engine = MakeEngine(m, 2, 8);
  absl::Status too_long = engine->Submit(Greedy("long", std::vector<int64_t>(9, 3), 4));
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("max_model_len - 1 = 7"));
  EXPECT_EQ(engine->Submit(Greedy("empty", {}, 4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(engine->Submit(Greedy("oov", {96}, 4)).message(), HasSubstr("vocabulary"));
  GenerationRequest bad_p = Greedy("p", {1}, 4);
  bad_p.params.top_p = 1.5;
  EXPECT_THAT(engine->Submit(bad_p).message(), HasSubstr("top_p"));

  ASSERT_TRUE(engine->Submit(Greedy("a", {4, 5, 6}, 3)).ok());
  EXPECT_EQ(engine->Submit(Greedy("a", {4}, 3)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(engine->Submit(Greedy("b", {7, 8}, 3)).ok());
  ASSERT_TRUE(engine->Submit(Greedy("c", {9}, 3)).ok());
  EngineStats s = engine->Stats();
  EXPECT_EQ(s.queued_requests, 3);
  EXPECT_EQ(s.queued_sequences, 3);
  EXPECT_EQ(s.kv_tokens_capacity, 16);
  engine->Step();  // a and b prefilled: 3 + 2 tokens cached
  s = engine->Stats();
  EXPECT_EQ(s.running_sequences, 2);
  EXPECT_EQ(s.queued_sequences, 1);
  EXPECT_EQ(s.kv_tokens_used, 5);
  EXPECT_EQ(s.prompt_tokens_total, 5);
  engine->Step();  // one decode step: each slot caches its first generated token
  EXPECT_EQ(engine->Stats().kv_tokens_used, 7);
  while (engine->HasWork()) engine->Step();
  s = engine->Stats();
  EXPECT_EQ(s.generated_tokens_total, 9);
  EXPECT_EQ(s.finished_sequences_total, 3);
  EXPECT_EQ(s.running_sequences, 0);
  EXPECT_EQ(engine->TakeFinished().size(), 3u);
}

TEST(GenerationEngineTest, WeightUpdateAppliesBetweenSteps) {
  auto m = TinyModel(10);
  auto other = TinyModel(11);
  auto engine = MakeEngine(m, 4);
  ASSERT_TRUE(engine->Submit(Greedy("a", kPrompts[0], 6)).ok());
  engine->Step();
  engine->Step();  // 2 tokens with version 0
  std::future<absl::Status> done =
      engine->UpdateWeightsBetweenSteps(7, [&](model::CausalLmImpl& model) {
        torch::NoGradGuard no_grad;
        auto dst = model.named_parameters();
        for (const auto& p : other->named_parameters()) dst[p.key()].copy_(p.value());
        return absl::OkStatus();
      });
  EXPECT_TRUE(engine->HasWork());
  while (engine->HasWork()) engine->Step();
  EXPECT_TRUE(done.get().ok());
  EXPECT_EQ(engine->Stats().weight_version, 7);
  auto first = engine->TakeFinished();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].weight_version_start, 0);
  EXPECT_EQ(first[0].weight_version_end, 7);
  // New requests now decode with the new weights.
  auto after = engine->Generate({Greedy("b", kPrompts[2], 6)}).value();
  EXPECT_THAT(after[0].token_ids, ElementsAreArray(ReferenceGreedy(*other, kPrompts[2], 6)));
  EXPECT_EQ(after[0].weight_version_start, 7);

  auto failed = engine->UpdateWeightsBetweenSteps(
      8, [](model::CausalLmImpl&) { return absl::DataLossError("bad bucket"); });
  engine->Step();
  EXPECT_EQ(failed.get().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(engine->Stats().weight_version, 7);
}

// New weights arriving while sequences decode (partial rollouts): no running sequence is
// dropped, each reports where the new version took over, and the tokens before that point are
// the old weights' choices and log-probs, the ones after it the new weights'. With the KV
// cache kept, the positions cached before the update stay the old weights' (as vLLM's pause
// with mode=keep); recomputed, every token after the update is what a full forward of the new
// weights over the whole sequence gives. A sequence still queued starts on the new weights.
void NewWeightsMidSequence(bool recompute) {
  auto m = TinyModel(10);
  const auto before = TinyModel(10);  // the old weights, kept aside (m is overwritten)
  const auto after = TinyModel(11);
  GenerationEngineOptions options;
  options.max_num_seqs = 2;
  options.max_model_len = 64;
  options.recompute_kv_on_update = recompute;
  auto engine = GenerationEngine::Create(m, options).value();
  constexpr int64_t kNew = 16, kBefore = 5;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(engine->Submit(Greedy("r" + std::to_string(i), kPrompts[i], kNew)).ok());
  }
  // Two slots: r0 and r1 run, r2 waits. Step 1 prefills them and samples token 0; steps 2 to
  // 5 decode tokens 1 to 4.
  for (int64_t step = 0; step < kBefore; ++step) engine->Step();
  std::future<absl::Status> applied =
      engine->UpdateWeightsBetweenSteps(7, [&](model::CausalLmImpl& model) {
        torch::NoGradGuard no_grad;
        auto dst = model.named_parameters();
        for (const auto& p : after->named_parameters()) dst[p.key()].copy_(p.value());
        return absl::OkStatus();
      });
  while (engine->HasWork()) engine->Step();
  ASSERT_TRUE(applied.get().ok());
  std::vector<Sample> samples = engine->TakeFinished();
  ASSERT_EQ(samples.size(), 3u);
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.request_id < b.request_id; });
  auto logprob_of = [](const torch::Tensor& logits, int64_t token) {
    return torch::log_softmax(logits.to(torch::kFloat64), -1)[token].item<double>();
  };
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("r" + std::to_string(i));
    const Sample& s = samples[static_cast<size_t>(i)];
    ASSERT_EQ(s.finish_reason, FinishReason::kLength);
    ASSERT_EQ(s.token_ids.size(), static_cast<size_t>(kNew));
    EXPECT_EQ(s.weight_version_start, 0);
    EXPECT_EQ(s.weight_version_end, 7);
    ASSERT_EQ(s.version_switches.size(), 1u);
    EXPECT_EQ(s.version_switches[0].token_index, kBefore);
    EXPECT_EQ(s.version_switches[0].version, 7);
    std::vector<int64_t> ids = kPrompts[static_cast<size_t>(i)];
    // The kept cache's reference: the old weights' cache of the prompt and the tokens before
    // the switch but the pending one, then the new weights one token at a time over it.
    model::KvCache cache = before->NewCache(1, 64);
    std::vector<int64_t> context = ids;
    context.insert(context.end(), s.token_ids.begin(), s.token_ids.begin() + kBefore - 1);
    const auto mixed = TinyModel(10);
    mixed->ForwardCachedLast(
        torch::tensor(context, torch::kInt64).view({1, static_cast<int64_t>(context.size())}), {0},
        {static_cast<int64_t>(context.size())}, &cache);
    {
      torch::NoGradGuard no_grad;
      auto dst = mixed->named_parameters();
      for (const auto& p : after->named_parameters()) dst[p.key()].copy_(p.value());
    }
    double most_from_full = 0;  // keep: how far the kept cache takes it from a full forward
    for (int64_t t = 0; t < kNew; ++t) {
      const int64_t token = s.token_ids[static_cast<size_t>(t)];
      const double got = s.logprobs[static_cast<size_t>(t)];
      if (t < kBefore) {
        const torch::Tensor logits = FullLogits(*before, ids)[-1];
        EXPECT_EQ(token, logits.argmax().item<int64_t>()) << "token " << t;
        EXPECT_NEAR(got, logprob_of(logits, token), 1e-4) << "token " << t;
      } else {
        const torch::Tensor full = FullLogits(*after, ids)[-1];
        torch::NoGradGuard no_grad;
        const torch::Tensor kept = mixed->ForwardCachedLast(
            torch::tensor({ids.back()}, torch::kInt64).view({1, 1}), {0}, {1}, &cache)[0];
        const torch::Tensor& want = recompute ? full : kept;
        EXPECT_EQ(token, want.argmax().item<int64_t>()) << "token " << t;
        EXPECT_NEAR(got, logprob_of(want, token), 1e-4) << "token " << t;
        most_from_full = std::max(most_from_full, std::abs(got - logprob_of(full, token)));
      }
      ids.push_back(token);
    }
    // The two modes differ: a kept cache is not a recomputed one.
    if (!recompute) {
      EXPECT_GT(most_from_full, 1e-3);
    }
  }
  // r2 was queued during the update: it runs on the new weights alone.
  const Sample& queued = samples[2];
  EXPECT_EQ(queued.weight_version_start, 7);
  EXPECT_EQ(queued.weight_version_end, 7);
  EXPECT_TRUE(queued.version_switches.empty());
  EXPECT_THAT(queued.token_ids, ElementsAreArray(ReferenceGreedy(*after, kPrompts[2], kNew)));
  EXPECT_EQ(engine->Stats().recomputed_tokens_total,
            recompute
                ? static_cast<int64_t>(kPrompts[0].size() + kPrompts[1].size()) + 2 * (kBefore - 1)
                : 0);
}

TEST(GenerationEngineTest, NewWeightsMidSequenceOverTheKeptCache) { NewWeightsMidSequence(false); }

TEST(GenerationEngineTest, NewWeightsMidSequenceOverARecomputedCache) {
  NewWeightsMidSequence(true);
}

TEST(GenerationEngineTest, ServeOnAThreadStreamsSamplesToCallbacks) {
  auto m = TinyModel(12);
  auto engine = MakeEngine(m, 2);
  std::thread server([&] { engine->Serve(); });
  absl::Mutex mu;
  std::vector<Sample> got;
  absl::Notification all_done;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(engine
                    ->Submit(Greedy("s" + std::to_string(i), kPrompts[i], 4 + i),
                             [&](Sample s) {
                               absl::MutexLock lock(&mu);
                               got.push_back(std::move(s));
                               if (got.size() == 3) all_done.Notify();
                             })
                    .ok());
  }
  all_done.WaitForNotification();
  // A request still running at shutdown is aborted and delivered. The weight update holds
  // the serving thread inside a Step until Shutdown() has been called, so "last" cannot run
  // to its end first.
  absl::Notification release, aborted;
  auto update = engine->UpdateWeightsBetweenSteps(1, [&](model::CausalLmImpl&) {
    release.WaitForNotification();
    return absl::OkStatus();
  });
  ASSERT_TRUE(engine
                  ->Submit(Greedy("last", kPrompts[0], 60),
                           [&](Sample s) {
                             EXPECT_EQ(s.finish_reason, FinishReason::kAbort);
                             EXPECT_LE(s.token_ids.size(), 1u);
                             aborted.Notify();
                           })
                  .ok());
  engine->Shutdown();
  release.Notify();
  server.join();
  EXPECT_TRUE(update.get().ok());
  EXPECT_TRUE(aborted.HasBeenNotified());
  EXPECT_EQ(engine->Submit(Greedy("late", {1}, 2)).code(), absl::StatusCode::kFailedPrecondition);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(got.size(), 3u);
  for (const Sample& s : got) {
    const int i = s.request_id.back() - '0';
    EXPECT_THAT(s.token_ids, ElementsAreArray(ReferenceGreedy(*m, kPrompts[i], 4 + i)));
  }
}

}  // namespace
}  // namespace rlmesh::generation

namespace rlmesh::generation {
namespace {

GenerationEngineOptions Budget(int64_t max_num_seqs, int64_t tokens, bool chunked) {
  GenerationEngineOptions options;
  options.max_num_seqs = max_num_seqs;
  options.max_model_len = 64;
  options.max_num_batched_tokens = tokens;
  options.enable_chunked_prefill = chunked;
  return options;
}

// A prompt prefilled in chunks over several steps caches the same keys and values as in one:
// the greedy tokens are those of full forwards, and the budget shows in the step counts.
TEST(GenerationEngineTest, ChunkedPrefillEqualsOneShotPrefill) {
  auto m = testing::TinyModel();
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    requests.push_back(Greedy("r" + std::to_string(i), kPrompts[i], 8));
  }
  // 4 slots, 5 tokens a step: 1 decode + 4 prompt tokens while 1 runs, and so on.
  auto chunked = GenerationEngine::Create(m, Budget(4, 5, true)).value();
  auto samples = chunked->Generate(requests).value();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_THAT(samples[i].token_ids,
                ElementsAreArray(testing::ReferenceGreedy(*m, kPrompts[i], 8)))
        << "prompt " << i;
  }
  const EngineStats stats = chunked->Stats();
  // The prompts of 7 and 9 tokens cannot have been prefilled in one step of 5 tokens.
  EXPECT_GE(stats.chunked_prefills_total, 2);
  auto wide = GenerationEngine::Create(m, Budget(4, 4096, true)).value();
  ASSERT_TRUE(wide->Generate(requests).ok());
  EXPECT_EQ(wide->Stats().chunked_prefills_total, 0);
  EXPECT_LT(wide->Stats().steps_total, stats.steps_total);
}

// Without chunking a prompt waits for a step with room for all of it; the budget must hold
// the longest sequence and every decode.
TEST(GenerationEngineTest, WithoutChunkingAPromptIsPrefilledInOneStep) {
  auto m = testing::TinyModel();
  EXPECT_THAT(GenerationEngine::Create(m, Budget(4, 32, false)).status().message(),
              HasSubstr("max_num_batched_tokens = 32 is below max_model_len = 64"));
  EXPECT_THAT(GenerationEngine::Create(m, Budget(8, 4, true)).status().message(),
              HasSubstr("max_num_batched_tokens = 4 is below max_num_seqs = 8"));
  auto engine = GenerationEngine::Create(m, Budget(4, 64, false)).value();
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    requests.push_back(Greedy("r" + std::to_string(i), kPrompts[i], 8));
  }
  auto samples = engine->Generate(requests).value();
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_THAT(samples[i].token_ids,
                ElementsAreArray(testing::ReferenceGreedy(*m, kPrompts[i], 8)));
  }
  EXPECT_EQ(engine->Stats().chunked_prefills_total, 0);
}

// free_cache_engine: the cache is released when the work runs out and allocated again for
// the next request, which generates exactly as before.
TEST(GenerationEngineTest, ReleasedCacheIsAllocatedAgainForTheNextRequest) {
  auto m = testing::TinyModel();
  GenerationEngineOptions options = Budget(4, 4096, true);
  options.release_cache_when_idle = true;
  auto engine = GenerationEngine::Create(m, options).value();
  const int64_t allocated = engine->Stats().kv_cache_bytes;
  EXPECT_GT(allocated, 0);
  auto first = engine->Generate({Greedy("a", kPrompts[1], 6)}).value();
  EXPECT_EQ(engine->Stats().kv_cache_bytes, 0);
  auto second = engine->Generate({Greedy("b", kPrompts[1], 6)}).value();
  EXPECT_EQ(second[0].token_ids, first[0].token_ids);
  EXPECT_EQ(engine->Stats().kv_cache_allocations_total, 2);
  // Kept when the option is off.
  auto keeping = GenerationEngine::Create(m, Budget(4, 4096, true)).value();
  ASSERT_TRUE(keeping->Generate({Greedy("c", kPrompts[1], 6)}).ok());
  EXPECT_EQ(keeping->Stats().kv_cache_bytes, allocated);
}

}  // namespace
}  // namespace rlmesh::generation
