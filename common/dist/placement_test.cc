#include "common/dist/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlmesh::dist {
namespace {

using ::testing::HasSubstr;

TEST(PlaceRankTest, OnTheCpuEveryRankComputesOnTheHostOverGloo) {
  const auto p = PlaceRank("cpu", 3, 4, 8);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->device, "cpu");
  EXPECT_EQ(p->backend, "gloo");
  EXPECT_EQ(p->cuda_device, -1);
}

TEST(PlaceRankTest, AGpuPerRankGivesLocalRankIGpuIAndNccl) {
  for (int local = 0; local < 4; ++local) {
    const auto p = PlaceRank("cuda", local, 4, 8);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->device, "cuda:" + std::to_string(local));
    EXPECT_EQ(p->cuda_device, local);
    EXPECT_EQ(p->backend, "nccl");
  }
  // One rank per pod (the Helm chart): GPU 0 of the pod.
  const auto pod = PlaceRank("cuda", 0, 1, 1);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->device, "cuda:0");
  EXPECT_EQ(pod->backend, "nccl");
}

TEST(PlaceRankTest, FewerGpusThanRanksAreSharedRoundRobinOverGloo) {
  const int expected[] = {0, 1, 0, 1};
  for (int local = 0; local < 4; ++local) {
    const auto p = PlaceRank("cuda", local, 4, 2);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->cuda_device, expected[local]);
    EXPECT_EQ(p->backend, "gloo");
    EXPECT_THAT(p->summary, HasSubstr("4 ranks share 2 GPUs"));
  }
}

TEST(PlaceRankTest, NoGpuOrBadArgumentsAreRefusedSayingWhy) {
  const auto none = PlaceRank("cuda", 0, 2, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("sees no CUDA device"));
  EXPECT_THAT(PlaceRank("tpu", 0, 1, 0).status().message(),
              HasSubstr("expected cpu or cuda, got \"tpu\""));
  EXPECT_THAT(PlaceRank("cpu", 2, 2, 0).status().message(),
              HasSubstr("local rank 2 is not one of 2 ranks per node"));
}

}  // namespace
}  // namespace rlmesh::dist
