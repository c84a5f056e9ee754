#include "common/process/cpu_affinity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <thread>

namespace rlmesh::process {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs on the first allowed CPU alone: the threads that were running and those started after
// follow; the whole set is given back at the end.
TEST(CpuAffinityTest, EveryThreadRunsOnTheChosenCpus) {
  const std::vector<int> all = AllowedCpus();
  ASSERT_FALSE(all.empty());
  std::vector<int> before_seen, after_seen;
  std::atomic<bool> go{false};
  std::thread before([&] {
    while (!go.load()) std::this_thread::yield();
    before_seen = AllowedCpus();
  });
  ASSERT_TRUE(RunOnCpus({all.front()}).ok());
  go = true;
  before.join();
  std::thread after([&] { after_seen = AllowedCpus(); });
  after.join();
  EXPECT_THAT(AllowedCpus(), ElementsAre(all.front()));
  EXPECT_THAT(before_seen, ElementsAre(all.front()));
  EXPECT_THAT(after_seen, ElementsAre(all.front()));
  ASSERT_TRUE(RunOnCpus(all).ok());
  EXPECT_EQ(AllowedCpus(), all);
}

TEST(CpuAffinityTest, AnEmptyListChangesNothingAndAnUnusableOneIsRefused) {
  const std::vector<int> all = AllowedCpus();
  EXPECT_TRUE(RunOnCpus({}).ok());
  EXPECT_EQ(AllowedCpus(), all);
  // CPU_SETSIZE - 1 exists on no machine this runs on.
  const absl::Status refused = RunOnCpus({CPU_SETSIZE - 1});
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("cannot run on CPUs 1023"));
  EXPECT_EQ(AllowedCpus(), all);
}

TEST(CpuAffinityTest, LibTorchThreadsFollowTheCpusAndTheRanks) {
  EXPECT_EQ(LibTorchThreads(3, {0, 1, 2, 3}, 2), 3);  // rlmesh.num_threads wins
  EXPECT_EQ(LibTorchThreads(0, {}, 1), 0);             // LibTorch's default
  EXPECT_EQ(LibTorchThreads(0, {4, 5, 6, 7}, 1), 4);
  EXPECT_EQ(LibTorchThreads(0, {4, 5, 6, 7}, 2), 2);
  EXPECT_EQ(LibTorchThreads(0, {4, 5, 6}, 4), 1);
  EXPECT_EQ(LibTorchThreads(0, {}, 2),
            std::max<int64_t>(1, std::thread::hardware_concurrency() / 2));
}

}  // namespace
}  // namespace rlmesh::process
