#include "services/coordinator/grpo_step.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "services/coordinator/fakes.h"

namespace rlmesh::coordinator {
namespace {

class GrpoStepTest : public ::testing::Test {
 protected:
  GrpoStepTest() {
    pool_ = std::make_unique<RolloutPool>(RolloutPoolOptions{}, [this](const std::string& a) {
      return std::make_unique<FakeRollout>(states_.at(a));
    });
    pool_->SetBringUp([this](const std::string&,
                             const std::string& address) -> absl::StatusOr<v1::WeightVersion> {
      auto& state = states_.at(address);
      absl::MutexLock lock(&state->mu);
      state->version = state->sample_version = trainer_.version;
      v1::WeightVersion v;
      v.set_version(trainer_.version);
      return v;
    });
    trainer_.on_publish = [this](uint64_t version) {
      for (auto& [address, state] : states_) {
        absl::MutexLock lock(&state->mu);
        state->version = state->sample_version = version;
      }
    };
    states_["r:1"] = std::make_shared<FakeRollout::State>();
    pool_->Register("r:1", "", 8, {});
    pool_->SyncReplicas();
    // Sample i of every prompt scores 1 when i is 0 or 3, else 0: groups [1, 0, 0, 1].
    reward_.score_fn = [](const v1::RewardItem& item) {
      return item.response() == "i0" || item.response() == "i3" ? 1.0 : 0.0;
    };
  }

  std::unique_ptr<GrpoStep> MakeStep(const GrpoStepOptions& options) {
    // The fake replica answers [prompt length, sample index]; decode names the index.
    auto step =
        GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_,
                         [](const std::vector<int32_t>& ids) -> absl::StatusOr<std::string> {
                           return "i" + std::to_string(ids.at(1));
                         });
    EXPECT_TRUE(step.ok()) << step.status();
    return step.ok() ? *std::move(step) : nullptr;
  }

  static std::vector<StepPrompt> Prompts() {
    return {{"u0", {5, 6, 7}, "p0", "test", "gt", "{}"}, {"u1", {8, 9}, "p1", "test", "gt", "{}"}};
  }

  std::map<std::string, std::shared_ptr<FakeRollout::State>> states_;
  std::unique_ptr<RolloutPool> pool_;
  FakeReward reward_;
  FakeReference reference_;
  FakeTrainer trainer_;
};

// DAPO's overlong buffer: every response has 2 tokens. With max_resp_len 2 and a buffer of
// 1, each exceeds the free length 1 by 1: -1 / 1 x 0.5 = -0.5 on every score (the group
// advantages, which a shift leaves alone, stay +-a); with max_resp_len 4 and a buffer of 2
// nothing is penalised.
TEST_F(GrpoStepTest, OverlongBufferShapesEveryScoreAndIsReported) {
  GrpoStepOptions options;
  options.n = 4;
  options.overlong = {.enable = true, .len = 1, .penalty_factor = 0.5, .max_resp_len = 2};
  options.overlong_log = true;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& m = result->metrics;
  EXPECT_DOUBLE_EQ(m.at("critic/score/mean"), 0.0);
  EXPECT_DOUBLE_EQ(m.at("critic/score/max"), 0.5);
  EXPECT_DOUBLE_EQ(m.at("reward/overlong_reward/mean"), -0.5);
  EXPECT_DOUBLE_EQ(m.at("reward/overlong/mean"), 1.0);
  const double a = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  EXPECT_NEAR(trainer_.train_requests[0].samples(0).advantage(), a, 1e-6);

  options.overlong = {.enable = true, .len = 2, .penalty_factor = 0.5, .max_resp_len = 4};
  auto free = MakeStep(options);
  auto unpenalised = free->Run(2, Prompts());
  ASSERT_TRUE(unpenalised.ok()) << unpenalised.status();
  EXPECT_DOUBLE_EQ(unpenalised->metrics.at("critic/score/mean"), 0.5);
  EXPECT_DOUBLE_EQ(unpenalised->metrics.at("reward/overlong/mean"), 0.0);

  options.overlong_log = false;  // shaped, not reported
  auto quiet = MakeStep(options);
  auto unreported = quiet->Run(3, Prompts());
  ASSERT_TRUE(unreported.ok()) << unreported.status();
  EXPECT_EQ(unreported->metrics.count("reward/overlong/mean"), 0u);

  options.overlong = {.enable = true, .len = 8, .penalty_factor = 1, .max_resp_len = 4};
  auto bad = GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_,
                              [](const std::vector<int32_t>&) { return std::string(); });
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_resp_len"), std::string::npos);
}

TEST_F(GrpoStepTest, BuildsTheTrainingBatchAndMetrics) {
  GrpoStepOptions options;
  options.n = 4;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();

  // The sequences go to the trainer once, kept for the update (the compact step).
  ASSERT_EQ(trainer_.old_requests.size(), 1u);
  const auto& old = trainer_.old_requests[0];
  EXPECT_TRUE(old.keep());
  ASSERT_EQ(old.sequences_size(), 8);
  ASSERT_EQ(trainer_.train_requests.size(), 1u);
  const auto& train = trainer_.train_requests[0];
  ASSERT_EQ(train.samples_size(), 8);
  const double a = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  for (int k = 0; k < 8; ++k) {
    const auto& seq = old.sequences(k);
    const int index = k % 4;
    // Prompt then the two response tokens [prompt length, index].
    const int prompt_length = k < 4 ? 3 : 2;
    ASSERT_EQ(seq.prompt_length(), prompt_length);
    ASSERT_EQ(seq.token_ids_size(), prompt_length + 2);
    EXPECT_EQ(seq.token_ids(prompt_length + 1), index);
    // The update names the sequence by id, with one advantage and no old log-probs.
    const auto& s = train.samples(k);
    EXPECT_EQ(s.sequence().id(), seq.id());
    EXPECT_EQ(s.sequence().token_ids_size(), 0);
    EXPECT_EQ(s.group_id(), k < 4 ? "u0" : "u1");
    EXPECT_EQ(s.advantages_size(), 0);
    EXPECT_EQ(s.old_logprobs_size(), 0);
    const double expected = (index == 0 || index == 3) ? a : -a;
    EXPECT_NEAR(s.advantage(), expected, 1e-6);
    ASSERT_EQ(s.ref_logprobs_size(), 2);
    EXPECT_FLOAT_EQ(s.ref_logprobs(1), -0.5f);
  }
  // Every prompt's 4 samples exactly once.
  EXPECT_EQ(pool_->counters().samples_received, 8);
  const auto& m = result->metrics;
  EXPECT_DOUBLE_EQ(m.at("critic/score/mean"), 0.5);
  EXPECT_DOUBLE_EQ(m.at("critic/score/max"), 1.0);
  EXPECT_DOUBLE_EQ(m.at("response_length/mean"), 2.0);
  EXPECT_DOUBLE_EQ(m.at("perf/total_num_tokens"), 4 * (3 + 2) + 4 * (2 + 2));
  EXPECT_DOUBLE_EQ(m.at("actor/pg_loss"), 0.125);
  EXPECT_DOUBLE_EQ(m.at("rlmesh/request_bytes/old_log_prob"), old.ByteSizeLong());
  EXPECT_DOUBLE_EQ(m.at("rlmesh/request_bytes/update_actor"), train.ByteSizeLong());
  EXPECT_DOUBLE_EQ(m.at("rlmesh/request_bytes/ref"), reference_.requests[0].ByteSizeLong());
  EXPECT_EQ(result->equal_reward_groups, 0);
  EXPECT_EQ(result->weight_version.version(), 1u);
  ASSERT_EQ(trainer_.publish_requests.size(), 1u);
  EXPECT_EQ(trainer_.publish_requests[0].targets_size(), 1);
  EXPECT_EQ(reference_.calls, 1);
  // The replica now serves the new version; a second step works.
  auto second = step->Run(2, Prompts());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->weight_version.version(), 2u);
}

TEST_F(GrpoStepTest, TheEstimatorShapesTheAdvantagesTheTrainerGets) {
  // Groups [1, 0, 0, 1] of two-token responses, the score at the second token.
  GrpoStepOptions options;
  options.n = 4;
  options.adv_estimator = "rloo";
  auto rloo = MakeStep(options)->Run(1, Prompts());
  ASSERT_TRUE(rloo.ok()) << rloo.status();
  // Leave-one-out: s * 4/3 - mean * 4/3 = +-2/3, one value per sequence.
  for (const auto& s : trainer_.train_requests.back().samples()) {
    EXPECT_EQ(s.advantages_size(), 0);
    EXPECT_NEAR(std::abs(s.advantage()), 2.0 / 3.0, 1e-6);
  }
  EXPECT_DOUBLE_EQ(rloo->metrics.at("rlmesh/per_token_advantages"), 0);

  // reinforce_plus_plus, gamma 0.5: returns [0.5, 1] for a score of 1 and [0, 0] for 0,
  // whitened over the batch's 16 tokens: mean 6/16, unbiased variance 2.75/15.
  options.adv_estimator = "reinforce_plus_plus";
  options.gamma = 0.5;
  auto rpp = MakeStep(options)->Run(2, Prompts());
  ASSERT_TRUE(rpp.ok()) << rpp.status();
  const double mean = 6.0 / 16, sd = std::sqrt(2.75 / 15 + 1e-8);
  for (const auto& s : trainer_.train_requests.back().samples()) {
    if (s.advantages_size() == 0) {
      // A score of 0: the same value at both tokens, sent once.
      EXPECT_NEAR(s.advantage(), (0 - mean) / sd, 1e-6);
    } else {
      ASSERT_EQ(s.advantages_size(), 2);
      EXPECT_NEAR(s.advantages(0), (0.5 - mean) / sd, 1e-6);
      EXPECT_NEAR(s.advantages(1), (1 - mean) / sd, 1e-6);
    }
  }
  EXPECT_DOUBLE_EQ(rpp->metrics.at("rlmesh/per_token_advantages"), 4);
  EXPECT_NEAR(rpp->metrics.at("critic/returns/mean"), mean, 1e-12);

  options.adv_estimator = "gae";
  EXPECT_FALSE(
      GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_, nullptr).ok());
}

TEST(FreshGroupsTest, AGroupWithOneSampleBeyondTheBoundIsNotFresh) {
  auto group = [](std::vector<uint64_t> versions) {
    GeneratedGroup g;
    for (uint64_t v : versions) {
      v1::Sample s;
      s.set_weight_version(v);
      g.samples.push_back(s);
    }
    return g;
  };
  const std::vector<GeneratedGroup> groups = {group({5, 5}), group({4, 5}), group({3, 5}),
                                              group({6, 6})};
  EXPECT_EQ(FreshGroups(groups, 5, 0), (std::vector<size_t>{0, 3}));
  EXPECT_EQ(FreshGroups(groups, 5, 1), (std::vector<size_t>{0, 1, 3}));
  EXPECT_EQ(FreshGroups(groups, 5, 2), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(FreshGroups(groups, 7, 1), (std::vector<size_t>{3}));
}

TEST_F(GrpoStepTest, GroupsOlderThanTheStalenessBoundAreLeftOutAndCounted) {
  GrpoStepOptions options;
  options.n = 4;
  auto step = MakeStep(options);
  auto rollout = step->Generate(1, Prompts());
  ASSERT_TRUE(rollout.ok()) << rollout.status();
  // The policy is at version 3 and the bound 1: every sample is made version 2 (one behind),
  // except u1's sample 2, version 1 (two behind), which takes its group out of the update.
  for (auto& s : rollout->groups[0].samples) s.set_weight_version(2);
  for (auto& s : rollout->groups[1].samples) s.set_weight_version(2);
  rollout->groups[1].samples[2].set_weight_version(1);
  TrainOptions train;
  train.trainer_version = 3;
  train.max_staleness = 1;
  auto result = step->Train(1, Prompts(), *std::move(rollout), train);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->samples_dropped_stale, 4);
  EXPECT_EQ(result->groups_trained, 1);
  ASSERT_EQ(trainer_.train_requests.size(), 1u);
  ASSERT_EQ(trainer_.train_requests[0].samples_size(), 4);
  for (const auto& s : trainer_.train_requests[0].samples()) EXPECT_EQ(s.group_id(), "u0");
  const auto& m = result->metrics;
  EXPECT_DOUBLE_EQ(m.at("rlmesh/samples_dropped_stale"), 4);
  EXPECT_DOUBLE_EQ(m.at("rlmesh/staleness/max"), 2);
  EXPECT_DOUBLE_EQ(m.at("rlmesh/staleness/min"), 1);

  // Every group beyond the bound: nothing to train on, the step fails naming the bound.
  auto again = step->Generate(2, Prompts());
  ASSERT_TRUE(again.ok()) << again.status();
  train.trainer_version = 9;
  auto stale = step->Train(2, Prompts(), *std::move(again), train);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("rlmesh.max_staleness = 1"), std::string::npos)
      << stale.status();
}

// The overlong buffer's metrics describe the samples trained on: a group left out as stale
// takes its overlong rewards with it.
TEST_F(GrpoStepTest, TheOverlongMetricsLeaveOutTheStaleGroups) {
  GrpoStepOptions options;
  options.n = 4;
  options.overlong = {.enable = true, .len = 2, .penalty_factor = 0.5, .max_resp_len = 4};
  options.overlong_log = true;
  auto step = MakeStep(options);
  auto rollout = step->Generate(1, Prompts());
  ASSERT_TRUE(rollout.ok()) << rollout.status();
  ASSERT_EQ(rollout->overlong_rewards.size(), 8u);
  // u0 (fresh) unpenalised; u1 (stale) penalised on every sample, as its own record says.
  for (size_t k = 4; k < 8; ++k) rollout->overlong_rewards[k] = -1.0;
  for (auto& s : rollout->groups[0].samples) s.set_weight_version(3);
  for (auto& s : rollout->groups[1].samples) s.set_weight_version(1);
  TrainOptions train;
  train.trainer_version = 3;
  train.max_staleness = 1;
  auto result = step->Train(1, Prompts(), *std::move(rollout), train);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->groups_trained, 1);
  EXPECT_DOUBLE_EQ(result->metrics.at("reward/overlong_reward/mean"), 0.0);
  EXPECT_DOUBLE_EQ(result->metrics.at("reward/overlong/mean"), 0.0);
}

// verl's clip ratios: the share of samples whose prompt, or response, is exactly as long as
// its limit (Prompts() gives 4 samples a 3-token prompt and 4 a 2-token one; every response
// has 2 tokens).
TEST_F(GrpoStepTest, TheClipRatiosCountSamplesAtTheirLengthLimit) {
  for (const auto& [max_prompt, max_response, prompt_ratio, response_ratio] :
       std::vector<std::tuple<int64_t, int32_t, double, double>>{
           {3, 2, 0.5, 1.0}, {2, 3, 0.5, 0.0}, {4, 5, 0.0, 0.0}}) {
    GrpoStepOptions options;
    options.n = 4;
    options.max_prompt_length = max_prompt;
    options.max_response_length = max_response;
    auto result = MakeStep(options)->Run(1, Prompts());
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_DOUBLE_EQ(result->metrics.at("prompt_length/clip_ratio"), prompt_ratio) << max_prompt;
    EXPECT_DOUBLE_EQ(result->metrics.at("response_length/clip_ratio"), response_ratio)
        << max_response;
  }
}

TEST_F(GrpoStepTest, EqualRewardGroupsAreCounted) {
  reward_.score_fn = [](const v1::RewardItem&) { return 1.0; };
  GrpoStepOptions options;
  options.n = 2;
  options.use_kl_loss = false;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->equal_reward_groups, 2);
  EXPECT_DOUBLE_EQ(result->metrics.at("rlmesh/equal_reward_groups_ratio"), 1.0);
  EXPECT_EQ(reference_.calls, 0);
  EXPECT_EQ(trainer_.train_requests[0].samples(0).ref_logprobs_size(), 0);
  for (const auto& s : trainer_.train_requests[0].samples()) EXPECT_EQ(s.advantage(), 0.0f);
}

// Items that timed out are scored again, in a call of their own; the step then trains on the
// real scores and counts the retry.
TEST_F(GrpoStepTest, ItemsThatTimedOutAreScoredAgain) {
  reward_.slow_response = "i1";
  reward_.slow_calls = 2;
  GrpoStepOptions options;
  options.n = 4;
  options.use_kl_loss = false;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(reward_.requests.size(), 3u);
  ASSERT_EQ(reward_.requests[1].items_size(), 2);  // sample 1 of both prompts
  EXPECT_EQ(reward_.requests[1].items(0).id(), "u0/1");
  EXPECT_EQ(reward_.requests[2].items(1).id(), "u1/1");
  EXPECT_DOUBLE_EQ(result->metrics.at("rlmesh/reward_retries"), 2);
  EXPECT_DOUBLE_EQ(result->metrics.at("critic/score/mean"), 0.5);
  ASSERT_EQ(trainer_.train_requests.size(), 1u);
}

// Items that still fail after every attempt, or fail for a lasting reason (the scorer
// throws), stop the step: scoring them 0 would train the policy away from them.
TEST_F(GrpoStepTest, UnscoredSamplesStopTheStepInsteadOfScoringZero) {
  reward_.slow_response = "i2";
  reward_.slow_calls = 3;
  GrpoStepOptions options;
  options.n = 4;
  options.use_kl_loss = false;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("2 of 8 samples could not be scored (2 timeout)"),
            std::string::npos)
      << result.status();
  EXPECT_EQ(reward_.requests.size(), 3u);
  EXPECT_TRUE(trainer_.train_requests.empty());
  // A throwing scorer is not retried.
  reward_.requests.clear();
  reward_.slow_calls = 0;
  auto erroring = GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_,
                                   [](const std::vector<int32_t>&) -> absl::StatusOr<std::string> {
                                     return std::string("error");
                                   });
  ASSERT_TRUE(erroring.ok());
  result = (*erroring)->Run(1, Prompts());
  ASSERT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("(8 exception)"), std::string::npos) << result.status();
  EXPECT_EQ(reward_.requests.size(), 1u);
}

// With rlmesh.reward.failed_item_score, samples still unscored after the retries get that
// score, the step trains, and the metrics count them by kind; timeouts were retried first.
TEST_F(GrpoStepTest, FailedItemScoreScoresUnscoredSamplesAndCountsThem) {
  reward_.slow_response = "i2";
  reward_.slow_calls = 3;
  GrpoStepOptions options;
  options.n = 4;
  options.use_kl_loss = false;
  options.failed_item_score = -0.5;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(reward_.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(result->metrics.at("rlmesh/reward_failed/timeout"), 2);
  EXPECT_DOUBLE_EQ(result->metrics.at("rlmesh/reward_failed/exception"), 0);
  EXPECT_DOUBLE_EQ(result->metrics.at("rlmesh/reward_failed/remote"), 0);
  // Scores per group [1, 0, -0.5, 1] instead of [1, 0, 0, 1].
  EXPECT_DOUBLE_EQ(result->metrics.at("critic/score/min"), -0.5);
  EXPECT_DOUBLE_EQ(result->metrics.at("critic/score/mean"), 0.375);
  ASSERT_EQ(trainer_.train_requests.size(), 1u);
  // A scorer that raises on everything: all 8 get the score, none is retried.
  reward_.requests.clear();
  auto erroring = GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_,
                                   [](const std::vector<int32_t>&) -> absl::StatusOr<std::string> {
                                     return std::string("error");
                                   });
  ASSERT_TRUE(erroring.ok());
  result = (*erroring)->Run(2, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(reward_.requests.size(), 1u);
  EXPECT_DOUBLE_EQ(result->metrics.at("rlmesh/reward_failed/exception"), 8);
  EXPECT_DOUBLE_EQ(result->metrics.at("critic/score/mean"), -0.5);
  // Without the key the metrics are not reported at all.
  auto plain = MakeStep(GrpoStepOptions{});
  reward_.slow_calls = 0;
  result = plain->Run(3, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->metrics.count("rlmesh/reward_failed/exception"), 0u);
}

// A data_source the reward service has no scorer for stops the step naming it, instead of
// training on zero scores to the end of the run; nothing is sent to the trainer.
TEST_F(GrpoStepTest, ADataSourceWithoutAScorerStopsTheStepNamingIt) {
  reward_.unknown_data_source = "test";
  GrpoStepOptions options;
  options.n = 2;
  options.use_kl_loss = false;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_NE(result.status().message().find("data_source \"test\""), std::string::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("rlmesh.reward.custom_address"), std::string::npos);
  EXPECT_TRUE(trainer_.train_requests.empty());
}

TEST_F(GrpoStepTest, ValidationReportsMeanPerDataSource) {
  auto step = MakeStep(GrpoStepOptions{});
  v1::SamplingParams greedy;
  greedy.set_n(1);
  auto result = step->Validate(Prompts(), greedy);
  ASSERT_TRUE(result.ok()) << result.status();
  // Sample 0 of each prompt scores 1.
  EXPECT_DOUBLE_EQ(result->metrics.at("val-core/test/reward/mean@1"), 1.0);
  EXPECT_DOUBLE_EQ(result->metrics.at("val/batches"), 1);
  ASSERT_EQ(result->samples.size(), 2u);
  EXPECT_EQ(result->samples[1].input, "p1");
  EXPECT_EQ(result->samples[1].output, "i0");
  EXPECT_TRUE(trainer_.train_requests.empty());
  // data.val_batch_size = 1: one generation per prompt, the same scores.
  auto batched = step->Validate(Prompts(), greedy, 1);
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_DOUBLE_EQ(batched->metrics.at("val/batches"), 2);
  EXPECT_DOUBLE_EQ(batched->metrics.at("val-core/test/reward/mean@1"), 1.0);
}

// The scorer's extra values (verl's reward_extra_info) reach validation as
// val-aux/<data_source>/<key>/mean@<n>, over the samples that carry them.
TEST_F(GrpoStepTest, ValidationReportsTheScorersExtraValues) {
  reward_.extra_fn = [](const v1::RewardItem& item) -> std::map<std::string, double> {
    if (item.response() == "i1") return {{"acc", 0.0}};  // no "chars" on this one
    return {{"acc", item.response() == "i0" ? 1.0 : 0.0},
            {"chars", static_cast<double>(item.response().size())}};
  };
  auto step = MakeStep(GrpoStepOptions{});
  v1::SamplingParams params;
  params.set_n(2);
  auto result = step->Validate(Prompts(), params);
  ASSERT_TRUE(result.ok()) << result.status();
  // Per prompt, n = 2: i0 (acc 1, 2 chars) and i1 (acc 0, no chars).
  EXPECT_DOUBLE_EQ(result->metrics.at("val-aux/test/acc/mean@2"), 0.5);
  EXPECT_DOUBLE_EQ(result->metrics.at("val-aux/test/chars/mean@2"), 2.0);
  EXPECT_EQ(result->metrics.count("val/reward_failed/exception"), 0u);
}

// verl's apply_kl_penalty, worked by hand: sample i's old log-prob is -0.25 - 0.1 i per token
// and the reference's -0.5, so with k1 each of its 2 tokens has KL 0.25 - 0.1 i and it loses
// beta (0.5 - 0.2 i). With beta 1 the rewards of a group scored [1, 0, 0, 1] are
// [0.5, -0.3, -0.1, 1.1]: mean 0.3, unbiased std sqrt(0.4).
TEST_F(GrpoStepTest, KlInTheRewardShiftsRewardsAndAdvantages) {
  trainer_.old_logprob = [](const v1::TokenSequence& seq) {
    return -0.25f - 0.1f * static_cast<float>(seq.token_ids(seq.token_ids_size() - 1));
  };
  GrpoStepOptions options;
  options.n = 4;
  options.use_kl_loss = false;
  options.use_kl_in_reward = true;
  options.kl_penalty = "k1";
  options.kl_coef = 1.0;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(reference_.calls, 1);  // the KL needs the reference, the loss does not
  const auto& m = result->metrics;
  EXPECT_NEAR(m.at("actor/reward_kl_penalty"), 0.1, 1e-6);  // mean of the token means
  EXPECT_DOUBLE_EQ(m.at("actor/reward_kl_penalty_coeff"), 1.0);
  EXPECT_NEAR(m.at("critic/rewards/mean"), 0.3, 1e-6);
  EXPECT_DOUBLE_EQ(m.at("critic/score/mean"), 0.5);  // the scores themselves are untouched
  const double std = std::sqrt(0.4) + 1e-6;
  const double expected[] = {0.2 / std, -0.6 / std, -0.4 / std, 0.8 / std};
  const auto& train = trainer_.train_requests[0];
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(train.samples(k).advantage(), expected[k], 1e-5) << k;
  // Without the KL in the reward they would be the plain +-0.866 of a [1, 0, 0, 1] group.
  EXPECT_GT(std::abs(std::abs(train.samples(1).advantage()) - 0.866024), 0.05);
}

// The adaptive controller moves beta after each step (Ziegler et al.): current KL 0.25 against
// a target of 0.1 is clipped to +20 %, scaled by 8 samples / horizon 10000.
TEST_F(GrpoStepTest, AdaptiveKlControllerMovesTheCoefficientAfterEachStep) {
  GrpoStepOptions options;
  options.n = 4;
  options.use_kl_in_reward = true;
  options.kl_ctrl_type = "adaptive";
  options.kl_coef = 0.2;
  auto step = MakeStep(options);
  auto first = step->Run(1, Prompts());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_DOUBLE_EQ(first->metrics.at("actor/reward_kl_penalty_coeff"), 0.2);
  EXPECT_NEAR(first->metrics.at("actor/reward_kl_penalty"), 0.25, 1e-6);
  EXPECT_NEAR(step->kl_coef(), 0.2 * (1 + 0.2 * 8 / 10000.0), 1e-12);
  auto second = step->Run(2, Prompts());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NEAR(second->metrics.at("actor/reward_kl_penalty_coeff"), 0.2 * 1.00016, 1e-12);
  // A resumed run restores it.
  auto resumed = MakeStep(options);
  resumed->set_kl_coef(step->kl_coef());
  EXPECT_EQ(resumed->kl_coef(), step->kl_coef());
}

// A reference that answers with other weights than the warmed-up policy it was sent (it
// restarted) is sent them again and asked once more; one that still does fails the step.
TEST_F(GrpoStepTest, AReferenceThatLostItsAnchorIsSentItAgain) {
  GrpoStepOptions options;
  options.n = 4;
  auto step = MakeStep(options);
  int sent = 0;
  step->SetReferenceAnchor(7, [&] {
    ++sent;
    reference_.version = 7;
    return absl::OkStatus();
  });
  auto first = step->Run(1, Prompts());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(sent, 1);
  EXPECT_EQ(reference_.calls, 2);
  EXPECT_EQ(first->metrics.at("rlmesh/reference_reanchored"), 1);
  auto second = step->Run(2, Prompts());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(sent, 1);
  EXPECT_EQ(second->metrics.at("rlmesh/reference_reanchored"), 0);

  step->SetReferenceAnchor(8, [&] {
    ++sent;
    return absl::OkStatus();  // claims success, but the reference keeps version 7
  });
  auto third = step->Run(3, Prompts());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition) << third.status();
  EXPECT_NE(third.status().message().find("weight version 7 after it was sent the warmed-up "
                                          "policy (version 8)"),
            std::string::npos)
      << third.status();
  EXPECT_EQ(trainer_.train_requests.size(), 2u);  // the failed step trained nothing
}

TEST_F(GrpoStepTest, UnknownKlPenaltyNamesTheKey) {
  GrpoStepOptions options;
  options.kl_penalty = "full";
  auto step = GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_, nullptr);
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.status().message().find("algorithm.kl_penalty"), std::string::npos);
}

// The fake replica's log-prob of token t of sample i is -0.2 - 0.1 k, k = (i + t) mod 3, and
// the fake trainer's old log-prob is -0.25: r = old - rollout = -0.05 + 0.1 k.
double RolloutCorrectionRatio(int index, int t) { return -0.05 + 0.1 * ((index + t) % 3); }

TEST_F(GrpoStepTest, RolloutCorrectionWeighsEachTokenAndReportsTheGap) {
  states_["r:1"]->logprobs = true;
  GrpoStepOptions options;
  options.n = 4;
  options.rollout_is = "token";
  options.rollout_is_threshold = 1.1;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(trainer_.train_requests.size(), 1u);
  const auto& train = trainer_.train_requests[0];
  EXPECT_FALSE(train.old_logprobs_from_rollout());
  double sum_r = 0, sum_w = 0;
  for (int k = 0; k < train.samples_size(); ++k) {
    const auto& s = train.samples(k);
    ASSERT_EQ(s.rollout_is_weights_size(), 2) << k;
    for (int t = 0; t < 2; ++t) {
      const double r = RolloutCorrectionRatio(k % 4, t);
      sum_r += r;
      sum_w += std::exp(r);
      // exp(0.15) = 1.1618 is truncated to the threshold.
      EXPECT_NEAR(s.rollout_is_weights(t), std::min(std::exp(r), 1.1), 1e-5) << k << "," << t;
    }
  }
  const auto& m = result->metrics;
  EXPECT_NEAR(m.at("rollout_corr/kl"), -sum_r / 16, 1e-6);
  EXPECT_NEAR(m.at("rollout_corr/rollout_is_mean"), sum_w / 16, 1e-6);
  EXPECT_NEAR(m.at("rollout_corr/rollout_is_max"), std::exp(0.15), 1e-5);
  EXPECT_NEAR(m.at("rollout_corr/rollout_is_ratio_fraction_high"), 4.0 / 16, 1e-9);
  EXPECT_EQ(m.count("rollout_corr/training_ppl"), 1u);
  EXPECT_EQ(m.count("training/rollout_probs_diff_mean"), 1u);
}

TEST_F(GrpoStepTest, RejectionSamplingLeavesOutOfBoundsTokensOfTheUpdate) {
  // token_k1 keeps log(0.9) <= -r <= log(1.1): r = 0.15 (k = 2) is out, which is token 1 of
  // sample 1 and token 0 of sample 2 in each group; 4 of the 16 tokens.
  states_["r:1"]->logprobs = true;
  GrpoStepOptions options;
  options.n = 4;
  options.rollout_rs = "token_k1";
  options.rollout_rs_threshold = "0.9_1.1";
  auto result = MakeStep(options)->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& train = trainer_.train_requests.at(0);
  const double a = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  for (int k = 0; k < train.samples_size(); ++k) {
    const auto& s = train.samples(k);
    std::vector<int32_t> expected;
    for (int t = 0; t < 2; ++t) {
      if (RolloutCorrectionRatio(k % 4, t) > 0.1) expected.push_back(t);
    }
    EXPECT_EQ(std::vector<int32_t>(s.rejected_tokens().begin(), s.rejected_tokens().end()),
              expected)
        << k;
    // The group advantage is unchanged and still one per sequence: the kept tokens agree.
    EXPECT_EQ(s.advantages_size(), 0);
    EXPECT_NEAR(std::abs(s.advantage()), a, 1e-6);
    EXPECT_EQ(s.rollout_is_weights_size(), 0) << "rejection without rollout_is weighs nothing";
  }
  const auto& m = result->metrics;
  EXPECT_NEAR(m.at("rollout_corr/rollout_rs_masked_fraction"), 4.0 / 16, 1e-9);
  EXPECT_NEAR(m.at("rollout_corr/rollout_rs_token_k1_masked_fraction"), 4.0 / 16, 1e-9);

  // Bounds that keep everything reject nothing.
  options.rollout_rs_threshold = "0.5_2";
  auto loose = MakeStep(options)->Run(2, Prompts());
  ASSERT_TRUE(loose.ok()) << loose.status();
  for (const auto& s : trainer_.train_requests.at(1).samples()) {
    EXPECT_EQ(s.rejected_tokens_size(), 0);
  }
  EXPECT_EQ(loose->metrics.at("rollout_corr/rollout_rs_masked_fraction"), 0);

  // Bad options name the key; rejection is refused in bypass mode.
  options.rollout_rs = "token_k7";
  EXPECT_FALSE(
      GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_, nullptr).ok());
  options.rollout_rs = "token_k1";
  options.bypass_mode = true;
  auto bypass = GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_, nullptr);
  ASSERT_FALSE(bypass.ok());
  EXPECT_NE(bypass.status().message().find("rollout_rs"), std::string::npos);
}

TEST_F(GrpoStepTest, WithoutImportanceWeightsTheGapIsStillMeasured) {
  states_["r:1"]->logprobs = true;
  GrpoStepOptions options;
  options.n = 4;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  for (const auto& s : trainer_.train_requests.at(0).samples()) {
    EXPECT_EQ(s.rollout_is_weights_size(), 0);
  }
  EXPECT_EQ(result->metrics.count("rollout_corr/chi2_token"), 1u);
  EXPECT_EQ(result->metrics.count("rollout_corr/rollout_is_mean"), 0u);
}

TEST_F(GrpoStepTest, BypassModeTrainsOnTheRolloutsLogProbsWithoutAnOldLogProbPass) {
  states_["r:1"]->logprobs = true;
  GrpoStepOptions options;
  options.n = 4;
  options.bypass_mode = true;
  auto step = MakeStep(options);
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(trainer_.old_requests.empty());
  const auto& train = trainer_.train_requests.at(0);
  EXPECT_TRUE(train.old_logprobs_from_rollout());
  for (int k = 0; k < train.samples_size(); ++k) {
    const auto& s = train.samples(k);
    // Nothing was kept on the trainer: the sample carries its tokens.
    EXPECT_EQ(s.sequence().token_ids_size(), (k < 4 ? 3 : 2) + 2);
    ASSERT_EQ(s.old_logprobs_size(), 2);
    for (int t = 0; t < 2; ++t) {
      EXPECT_FLOAT_EQ(s.old_logprobs(t), -0.2f - 0.1f * static_cast<float>((k % 4 + t) % 3));
    }
  }
  EXPECT_EQ(result->metrics.count("rollout_corr/kl"), 0u);
  EXPECT_EQ(result->metrics.at("rlmesh/micro_batches/old_log_prob"), 0);
}

TEST_F(GrpoStepTest, SamplesWithoutLogProbsStopACorrectedStepNamingTheSample) {
  // The fake replica sends no log-probs (real ones always do).
  auto refused = [&](const GrpoStepOptions& options, const char* what) {
    auto step = MakeStep(options);
    auto result = step->Run(1, Prompts());
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(result.status().message().find("sample u0/0"), std::string::npos) << result.status();
    EXPECT_NE(result.status().message().find(what), std::string::npos) << result.status();
  };
  GrpoStepOptions weighted;
  weighted.n = 4;
  weighted.rollout_is = "sequence";
  refused(weighted, "rollout_is");
  GrpoStepOptions bypass;
  bypass.n = 4;
  bypass.bypass_mode = true;
  refused(bypass, "bypass_mode");
  EXPECT_TRUE(trainer_.train_requests.empty());
  // Uncorrected, the step runs; only the off-policy metrics are missing.
  auto step = MakeStep(GrpoStepOptions{});
  auto result = step->Run(1, Prompts());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->metrics.count("rollout_corr/kl"), 0u);
}

TEST_F(GrpoStepTest, RolloutCorrectionOptionsAreCheckedNamingTheKey) {
  auto refusal = [&](const char* level, bool bypass, double threshold) {
    GrpoStepOptions options;
    options.rollout_is = level;
    options.bypass_mode = bypass;
    options.rollout_is_threshold = threshold;
    auto step = GrpoStep::Create(options, pool_.get(), &reward_, &reference_, &trainer_, nullptr);
    return step.ok() ? std::string("OK") : std::string(step.status().message());
  };
  EXPECT_NE(refusal("seq", false, 2).find("algorithm.rollout_correction.rollout_is"),
            std::string::npos);
  EXPECT_NE(refusal("token", true, 2).find("rollout_is"), std::string::npos);
  EXPECT_NE(refusal("token", false, 0).find("rollout_is_threshold"), std::string::npos);
  EXPECT_EQ(refusal("sequence", false, 5), "OK");
}

}  // namespace
}  // namespace rlmesh::coordinator
