// SpinParallelFor: every item is run exactly once, in pieces of at most `grain` (on more than
// one thread), whatever the thread count, and callers on several threads at once each get their
// whole job done.
#include "common/model/spin_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace rlmesh::model::internal {
namespace {

// Runs one job and checks that each of `count` items was visited once and, on more than one
// thread, no piece was longer than `grain` (one thread: one call over everything).
void RunAndCheck(int threads, int64_t count, int64_t grain) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(count));
  std::atomic<bool> piece_too_long{false};
  SpinParallelFor(threads, count, grain, [&](int64_t begin, int64_t end) {
    const int64_t longest = threads > 1 ? grain : count;
    if (end - begin > longest || begin >= end) piece_too_long = true;
    for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)]++;
  });
  EXPECT_FALSE(piece_too_long) << threads << " threads, " << count << " items, grain " << grain;
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(visits[static_cast<size_t>(i)].load(), 1)
        << "item " << i << " of " << count << ", " << threads << " threads, grain " << grain;
  }
}

TEST(SpinParallelForTest, RunsEveryItemOnceForAnyThreadCountAndGrain) {
  for (int threads : {1, 2, 3, 4, 2, 1}) {  // the pool grows and is asked for fewer again
    for (int64_t count : {0, 1, 5, 64, 1000}) {
      for (int64_t grain : {1, 7, 64, 5000}) RunAndCheck(threads, count, grain);
    }
  }
}

TEST(SpinParallelForTest, ManyJobsInARowEachSeeTheirOwnBody) {
  // Back-to-back jobs with different bodies and sizes: a worker still finishing one job must
  // never run a piece of the next with the old body, nor miss one.
  std::vector<int64_t> sums(500, 0);
  for (size_t job = 0; job < sums.size(); ++job) {
    const int64_t count = 1 + static_cast<int64_t>(job % 97);
    std::atomic<int64_t> sum{0};
    SpinParallelFor(2, count, 3, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum += i + static_cast<int64_t>(job);
    });
    sums[job] = sum;
  }
  for (size_t job = 0; job < sums.size(); ++job) {
    const int64_t count = 1 + static_cast<int64_t>(job % 97);
    EXPECT_EQ(sums[job], count * (count - 1) / 2 + count * static_cast<int64_t>(job)) << job;
  }
}

TEST(SpinParallelForTest, CallersOnSeveralThreadsAtOnceAllComplete) {
  // One job runs on the pool at a time; a caller that finds it busy runs its job alone.
  std::vector<std::thread> callers;
  std::vector<int64_t> totals(4, 0);
  for (size_t c = 0; c < totals.size(); ++c) {
    callers.emplace_back([&, c] {
      for (int job = 0; job < 200; ++job) {
        std::atomic<int64_t> sum{0};
        SpinParallelFor(2, 100, 4, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) sum += i;
        });
        totals[c] += sum;
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int64_t total : totals) EXPECT_EQ(total, 200 * (99 * 100 / 2));
}

}  // namespace
}  // namespace rlmesh::model::internal
