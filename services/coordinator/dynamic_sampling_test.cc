// DAPO's dynamic sampling: which groups are kept, how rounds add up, the surplus, the limit.
#include "services/coordinator/dynamic_sampling.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A round of groups of two samples with these scores; prompt uids "r<round>/<g>".
SampledRound Round(int64_t round, const std::vector<std::vector<double>>& groups) {
  SampledRound r;
  r.rollout.start = absl::FromUnixSeconds(100 + round);
  for (size_t g = 0; g < groups.size(); ++g) {
    StepPrompt p;
    p.uid = absl::StrCat("r", round, "/", g);
    r.prompts.push_back(p);
    GeneratedGroup group;
    group.prompt_id = p.uid;
    for (size_t i = 0; i < groups[g].size(); ++i) {
      group.samples.emplace_back();
      r.rollout.scores.push_back(groups[g][i]);
      r.rollout.texts.push_back(absl::StrCat(p.uid, ":", i));
    }
    r.rollout.groups.push_back(group);
  }
  r.rollout.gen_seconds = 1;
  return r;
}

std::vector<std::string> Uids(const std::vector<StepPrompt>& prompts) {
  std::vector<std::string> out;
  for (const auto& p : prompts) out.push_back(p.uid);
  return out;
}

TEST(DynamicSamplingTest, MetricValuesAndSpread) {
  StepRollout r;
  r.scores = {0.5, 1.0, -1.0, 0.0};
  r.overlong_rewards = {-0.5, 0.0, -1.0, 0.0};
  EXPECT_THAT(*FilterMetricValues(r, "acc"), ElementsAre(1.0, 1.0, 0.0, 0.0));
  EXPECT_THAT(*FilterMetricValues(r, "score"), ElementsAre(1.0, 1.0, 0.0, 0.0));
  EXPECT_THAT(*FilterMetricValues(r, "seq_reward"), ElementsAre(0.5, 1.0, -1.0, 0.0));
  EXPECT_THAT(FilterMetricValues(r, "pred").status().message(), HasSubstr("filter_groups.metric"));
  // The raw scores are equal in both groups (both dropped); the shaped ones differ in both.
  EXPECT_TRUE(GroupsWithSpread(*FilterMetricValues(r, "acc"), 2).empty());
  EXPECT_THAT(GroupsWithSpread(*FilterMetricValues(r, "seq_reward"), 2), ElementsAre(0, 1));
  // A scorer's own "acc" is the acc metric where it gives one (verl records a dict as it is):
  // scores with a spread from a format bonus, but no right answer in the group, are dropped.
  r.scores = {0.1, 0.0, 0.1, 1.0};
  r.overlong_rewards.clear();
  r.extras = {{{"acc", 0.0}}, {{"acc", 0.0}}, {}, {{"acc", 1.0}}};
  EXPECT_THAT(*FilterMetricValues(r, "acc"), ElementsAre(0.0, 0.0, 0.1, 1.0));
  EXPECT_THAT(*FilterMetricValues(r, "score"), ElementsAre(0.1, 0.0, 0.1, 1.0));
  EXPECT_THAT(GroupsWithSpread(*FilterMetricValues(r, "acc"), 2), ElementsAre(1));
  // A group of one is always kept, as verl keeps it.
  EXPECT_THAT(GroupsWithSpread({1, 1, 1}, 1), ElementsAre(0, 1, 2));
}

TEST(DynamicSamplingTest, RoundsUntilTheBatchIsFull) {
  DynamicSamplingOptions options{.train_batch_size = 3, .n = 2, .metric = "acc"};
  const std::vector<std::vector<std::vector<double>>> rounds = {
      {{1, 1}, {0, 1}},   // keeps r0/1
      {{0, 0}, {1, 1}},   // keeps nothing
      {{1, 0}, {0, 1}}};  // keeps both: the batch is full
  int64_t calls = 0;
  auto batch = SampleDynamically(options, [&](int64_t round) -> absl::StatusOr<SampledRound> {
    EXPECT_EQ(round, calls++);
    return Round(round, rounds[round]);
  });
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->rounds, 3);
  EXPECT_EQ(batch->dropped_groups, 3);
  EXPECT_EQ(batch->surplus_groups, 0);
  EXPECT_THAT(Uids(batch->prompts), ElementsAre("r0/1", "r2/0", "r2/1"));
  EXPECT_THAT(batch->rollout.scores, ElementsAre(0, 1, 1, 0, 0, 1));
  EXPECT_THAT(batch->rollout.texts,
              ElementsAre("r0/1:0", "r0/1:1", "r2/0:0", "r2/0:1", "r2/1:0", "r2/1:1"));
  EXPECT_EQ(batch->rollout.groups.size(), 3u);
  EXPECT_EQ(batch->rollout.groups[1].prompt_id, "r2/0");
  EXPECT_EQ(batch->rollout.start, absl::FromUnixSeconds(100));  // the first round's
  EXPECT_EQ(batch->rollout.gen_seconds, 3);
}

TEST(DynamicSamplingTest, TheSurplusOfTheLastRoundIsDroppedAndCounted) {
  DynamicSamplingOptions options{.train_batch_size = 1, .n = 2, .metric = "seq_reward"};
  auto batch = SampleDynamically(options, [&](int64_t round) -> absl::StatusOr<SampledRound> {
    return Round(round, {{1, 0}, {0, 1}, {1, 1}});
  });
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->rounds, 1);
  EXPECT_EQ(batch->dropped_groups, 1);
  EXPECT_EQ(batch->surplus_groups, 1);
  EXPECT_THAT(Uids(batch->prompts), ElementsAre("r0/0"));
}

TEST(DynamicSamplingTest, TooManyRoundsFailNamingTheLimit) {
  DynamicSamplingOptions options{
      .train_batch_size = 3, .n = 2, .metric = "acc", .max_num_gen_batches = 2};
  int64_t calls = 0;
  auto batch = SampleDynamically(options, [&](int64_t round) -> absl::StatusOr<SampledRound> {
    ++calls;
    return Round(round, {{1, 1}, {0, 1}});
  });
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(calls, 2);
  EXPECT_THAT(batch.status().message(), HasSubstr("max_num_gen_batches"));
  EXPECT_THAT(batch.status().message(), HasSubstr("kept 2 of the 3"));
  // A round's own error ends the step as it is.
  auto failed = SampleDynamically(options, [](int64_t) -> absl::StatusOr<SampledRound> {
    return absl::UnavailableError("no replica");
  });
  EXPECT_THAT(failed.status().message(), HasSubstr("no replica"));
}

}  // namespace
}  // namespace rlmesh::coordinator
