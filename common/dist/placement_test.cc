#include "common/dist/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlmesh::dist {
namespace {

using ::testing::HasSubstr;

// A CUDA LibTorch that sees `n` GPUs.
CudaHere Gpus(int n) { return CudaHere{true, n, "2.11.0"}; }

TEST(PlaceRankTest, OnTheCpuEveryRankComputesOnTheHostOverGloo) {
  const auto p = PlaceRank("cpu", 3, 4, Gpus(8));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->device, "cpu");
  EXPECT_EQ(p->backend, "gloo");
  EXPECT_EQ(p->cuda_device, -1);
}

TEST(PlaceRankTest, AGpuPerRankGivesLocalRankIGpuIAndNccl) {
  for (int local = 0; local < 4; ++local) {
    const auto p = PlaceRank("cuda", local, 4, Gpus(8));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->device, "cuda:" + std::to_string(local));
    EXPECT_EQ(p->cuda_device, local);
    EXPECT_EQ(p->backend, "nccl");
  }
  // One rank per pod (the Helm chart): GPU 0 of the pod.
  const auto pod = PlaceRank("cuda", 0, 1, Gpus(1));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->device, "cuda:0");
  EXPECT_EQ(pod->backend, "nccl");
}

TEST(PlaceRankTest, FewerGpusThanRanksAreSharedRoundRobinOverGloo) {
  const int expected[] = {0, 1, 0, 1};
  for (int local = 0; local < 4; ++local) {
    const auto p = PlaceRank("cuda", local, 4, Gpus(2));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->cuda_device, expected[local]);
    EXPECT_EQ(p->backend, "gloo");
    EXPECT_THAT(p->summary, HasSubstr("4 ranks share 2 GPUs"));
  }
}

TEST(PlaceRankTest, NoGpuOrBadArgumentsAreRefusedSayingWhy) {
  const auto none = PlaceRank("cuda", 0, 2, Gpus(0));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("sees no CUDA device"));
  EXPECT_THAT(PlaceRank("tpu", 0, 1, Gpus(0)).status().message(),
              HasSubstr("expected cpu or cuda, got \"tpu\""));
  EXPECT_THAT(PlaceRank("cpu", 2, 2, Gpus(0)).status().message(),
              HasSubstr("local rank 2 is not one of 2 ranks per node"));
}

TEST(BuildSettingsHaveCudaTest, ReadsUseCudaFromLibTorchsBuildSettings) {
  // As Debian's LibTorch 1.13 prints them, and as CUDA builds print them (older: True).
  EXPECT_FALSE(BuildSettingsHaveCuda(
      "  - Build settings: BLAS_INFO=open, BUILD_TYPE=Release, USE_CUDA=OFF, USE_CUDNN=OFF,\n"));
  EXPECT_TRUE(BuildSettingsHaveCuda(
      "  - Build settings: BLAS_INFO=mkl, CUDA_VERSION=12.8, USE_CUDA=ON, USE_CUDNN=ON,\n"));
  EXPECT_TRUE(BuildSettingsHaveCuda("DISABLE_NUMA=1, USE_CUDA=True, USE_NCCL=True"));
  EXPECT_TRUE(BuildSettingsHaveCuda("USE_CUDA=1"));
  EXPECT_FALSE(BuildSettingsHaveCuda("USE_CUDA=ONE_DAY, "));
  EXPECT_FALSE(BuildSettingsHaveCuda("PyTorch built with:\n  - GCC 12.2\n"));
}

TEST(CheckCudaDeviceTest, SaysWhetherTheLibTorchTheDriverOrTheIndexIsMissing) {
  EXPECT_TRUE(CheckCudaDevice("rlmesh.device", -1, Gpus(1)).ok());
  EXPECT_TRUE(CheckCudaDevice("rlmesh.device", 1, Gpus(2)).ok());
  // A CPU LibTorch (Debian's, the CPU image): the build is the cause, not the driver.
  const absl::Status cpu_build = CheckCudaDevice("rlmesh.device", -1, CudaHere{false, 0, "1.13.1"});
  EXPECT_EQ(cpu_build.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cpu_build.message(), HasSubstr("rlmesh.device cuda: this build's LibTorch (1.13.1) "
                                             "has no CUDA"));
  EXPECT_THAT(cpu_build.message(), HasSubstr("the rlmesh-cuda image"));
  // A CUDA LibTorch without a visible GPU: the driver or CUDA_VISIBLE_DEVICES.
  const absl::Status no_gpu = CheckCudaDevice("rlmesh.device", -1, Gpus(0));
  EXPECT_EQ(no_gpu.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_gpu.message(), HasSubstr("sees no CUDA device (check the driver"));
  EXPECT_THAT(no_gpu.message(), ::testing::Not(HasSubstr("has no CUDA")));
  const absl::Status past = CheckCudaDevice("--device", 2, Gpus(2));
  EXPECT_EQ(past.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(past.message(), HasSubstr("--device cuda:2: this process sees only 2 CUDA devices"));
  // A group rank on a CPU build says the same.
  EXPECT_THAT(PlaceRank("cuda", 0, 1, CudaHere{false, 0, "1.13.1"}).status().message(),
              HasSubstr("has no CUDA"));
}

}  // namespace
}  // namespace rlmesh::dist
