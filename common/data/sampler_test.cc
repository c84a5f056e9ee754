#include "common/data/sampler.h"

#include <algorithm>
#include <set>
#include <vector>

#include "common/data/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::data {
namespace {

using ::testing::ElementsAre;

SamplerOptions Options(int64_t batch, bool shuffle, uint64_t seed = 1, bool drop_last = true) {
  SamplerOptions options;
  options.batch_size = batch;
  options.shuffle = shuffle;
  options.seed = seed;
  options.drop_last = drop_last;
  return options;
}

TEST(EpochSamplerTest, InOrderBatchesDropTheRemainder) {
  auto sampler = EpochSampler::Create(10, Options(3, false));
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  EXPECT_EQ((*sampler)->steps_per_epoch(), 3);
  EXPECT_THAT((*sampler)->Next(), ElementsAre(0, 1, 2));
  EXPECT_THAT((*sampler)->Next(), ElementsAre(3, 4, 5));
  EXPECT_THAT((*sampler)->Next(), ElementsAre(6, 7, 8));
  EXPECT_EQ((*sampler)->position(), (SamplerPosition{0, 9}));
  EXPECT_THAT((*sampler)->Next(), ElementsAre(0, 1, 2));  // row 9 is skipped, as drop_last
  EXPECT_EQ((*sampler)->position(), (SamplerPosition{1, 3}));
}

TEST(EpochSamplerTest, WithoutDropLastTheShortBatchComes) {
  auto sampler = EpochSampler::Create(10, Options(3, false, 1, false));
  ASSERT_TRUE(sampler.ok());
  EXPECT_EQ((*sampler)->steps_per_epoch(), 4);
  for (int i = 0; i < 3; ++i) (*sampler)->Next();
  EXPECT_THAT((*sampler)->Next(), ElementsAre(9));
  EXPECT_THAT((*sampler)->Next(), ElementsAre(0, 1, 2));
  EXPECT_EQ((*sampler)->position(), (SamplerPosition{1, 3}));
}

TEST(EpochSamplerTest, ShuffledEpochIsAPermutationThatChangesPerEpochAndSeed) {
  auto sampler = EpochSampler::Create(50, Options(10, true, 7));
  ASSERT_TRUE(sampler.ok());
  std::set<int64_t> seen;
  for (int step = 0; step < 5; ++step) {
    for (int64_t row : (*sampler)->Next()) seen.insert(row);
  }
  EXPECT_EQ(seen.size(), 50u);  // every row exactly once in the epoch
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 49);
  const auto epoch0 = (*sampler)->EpochOrder(0);
  EXPECT_NE(epoch0, (*sampler)->EpochOrder(1));
  std::vector<int64_t> identity(50);
  for (int i = 0; i < 50; ++i) identity[i] = i;
  EXPECT_NE(epoch0, identity);
  auto same_seed = EpochSampler::Create(50, Options(10, true, 7));
  auto other_seed = EpochSampler::Create(50, Options(10, true, 8));
  EXPECT_EQ((*same_seed)->EpochOrder(0), epoch0);
  EXPECT_NE((*other_seed)->EpochOrder(0), epoch0);
}

TEST(EpochSamplerTest, RestoredSamplerYieldsTheSameBatchesAsAnUnbrokenOne) {
  const SamplerOptions options = Options(4, true, 3);
  auto unbroken = EpochSampler::Create(10, options);
  ASSERT_TRUE(unbroken.ok());
  std::vector<std::vector<int64_t>> expected;
  for (int step = 0; step < 9; ++step) expected.push_back((*unbroken)->Next());

  // Stop after step 3 (mid-epoch 1, since an epoch has 2 steps), save, restore, continue.
  auto first = EpochSampler::Create(10, options);
  for (int step = 0; step < 3; ++step) EXPECT_EQ((*first)->Next(), expected[step]);
  const std::string saved = (*first)->position().ToJson();
  EXPECT_EQ(saved, R"({"epoch":1,"index":4})");

  auto resumed = EpochSampler::Create(10, options);
  auto position = SamplerPosition::FromJson(saved);
  ASSERT_TRUE(position.ok()) << position.status();
  ASSERT_TRUE((*resumed)->Restore(*position).ok());
  for (int step = 3; step < 9; ++step) EXPECT_EQ((*resumed)->Next(), expected[step]) << step;
}

TEST(EpochSamplerTest, ResumingAtAnEpochBoundaryStartsTheNextEpoch) {
  auto sampler = EpochSampler::Create(8, Options(4, true, 5));
  ASSERT_TRUE(sampler.ok());
  (*sampler)->Next();
  (*sampler)->Next();
  const SamplerPosition end_of_epoch = (*sampler)->position();
  EXPECT_EQ(end_of_epoch, (SamplerPosition{0, 8}));
  const auto expected = (*sampler)->Next();
  auto resumed = EpochSampler::Create(8, Options(4, true, 5));
  ASSERT_TRUE((*resumed)->Restore(end_of_epoch).ok());
  const auto order1 = (*resumed)->EpochOrder(1);
  EXPECT_EQ((*resumed)->Next(), expected);
  EXPECT_EQ(expected, std::vector<int64_t>(order1.begin(), order1.begin() + 4));
}

TEST(EpochSamplerTest, Errors) {
  EXPECT_EQ(EpochSampler::Create(10, Options(0, false)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto too_big = EpochSampler::Create(3, Options(4, false));
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("data.train_batch_size"), std::string::npos);
  EXPECT_TRUE(EpochSampler::Create(3, Options(4, false, 1, false)).ok());
  auto sampler = EpochSampler::Create(10, Options(2, false));
  EXPECT_FALSE((*sampler)->Restore({0, 11}).ok());
  EXPECT_FALSE((*sampler)->Restore({-1, 0}).ok());
  EXPECT_FALSE(SamplerPosition::FromJson("{\"epoch\": 1}").ok());
  EXPECT_FALSE(SamplerPosition::FromJson("not json").ok());
  EXPECT_FALSE(SamplerPosition::FromJson(R"({"epoch": -1, "index": 0})").ok());
}

TEST(RandomTest, BelowIsUnbiasedEnoughAndShuffleIsAPermutation) {
  Random random(42);
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 30000; ++i) ++counts[random.Below(3)];
  // Binomial(30000, 1/3): standard deviation 82; 600 is over 7 of them.
  for (int c : counts) EXPECT_NEAR(c, 10000, 600);
  std::vector<int> v = {0, 1, 2, 3, 4, 5, 6, 7};
  random.Shuffle(v);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_THAT(sorted, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace
}  // namespace rlmesh::data
