// With one arena, memory a thread freed is reused by another thread's allocations instead of
// a second copy being faulted in: the resident set stays flat.
#include "common/process/malloc_arenas.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/metrics/process_metrics.h"

namespace rlmesh::process {
namespace {

long ResidentKiB() { return static_cast<long>(metrics::ResidentBytes() / 1024); }

// 64 MiB in 64 KiB blocks (below the mmap threshold, so they come from an arena's heap),
// each written so that its pages are resident.
std::vector<char*> AllocateAndTouch() {
  std::vector<char*> blocks;
  for (int i = 0; i < 1024; ++i) {
    char* p = static_cast<char*>(std::malloc(64 << 10));
    std::memset(p, 1, 64 << 10);
    blocks.push_back(p);
  }
  return blocks;
}

TEST(MallocArenasTest, MemoryFreedOnOneThreadIsReusedByAnotherWhileBothLive) {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) GTEST_SKIP() << "MALLOC_ARENA_MAX is set";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc; there are no arenas to set";
#endif
  ASSERT_TRUE(UseOneMallocArena());
  // Thread a allocates 64 MiB, keeps one small block allocated after them (so its heap
  // cannot shrink back entirely) and frees the rest; while it is still alive (holding its
  // arena, were there several), thread b allocates the same again.
  absl::Notification a_freed, b_done;
  long a_peak = 0;
  char* pin = nullptr;
  std::thread a([&] {
    std::vector<char*> blocks = AllocateAndTouch();
    a_peak = ResidentKiB();
    pin = static_cast<char*>(std::malloc(64));
    for (char* p : blocks) std::free(p);
    a_freed.Notify();
    b_done.WaitForNotification();
  });
  a_freed.WaitForNotification();
  std::vector<char*> b_blocks;
  std::thread b([&] { b_blocks = AllocateAndTouch(); });
  b.join();
  const long after_b = ResidentKiB();
  b_done.Notify();
  a.join();
  for (char* p : b_blocks) std::free(p);
  std::free(pin);
  // Reused: b's 64 MiB fit where a's were, so the resident set does not pass a's peak. In a
  // second arena they would add ~65,536 KiB on top of what a's arena keeps.
  EXPECT_LT(after_b - a_peak, 16 * 1024)
      << "resident KiB at a's peak " << a_peak << ", after b " << after_b;
}

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Page faults of allocating 64 MiB in one block (above glibc's largest dynamic mmap
// threshold, 32 MiB, like a step's logits), writing every page and freeing it.
char* volatile big_block = nullptr;  // volatile: the allocation must not be optimised away

long FaultsOfOneBigBlock() {
  const long before = MinorFaults();
  big_block = static_cast<char*>(std::malloc(64 << 20));
  std::memset(big_block, 1, 64 << 20);
  std::free(big_block);
  return MinorFaults() - before;
}

TEST(MallocArenasTest, AFreedBigBlockIsReusedWithoutFaultingItsPagesInAgain) {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    GTEST_SKIP() << "the environment sets glibc's thresholds";
  }
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc";
#endif
  ASSERT_TRUE(KeepFreedMemory());
  const long first = FaultsOfOneBigBlock();
  const long second = FaultsOfOneBigBlock();
  // The first time the 16,384 pages (fewer with transparent huge pages) fault in; kept in the
  // heap, the second time they are already there. glibc's default would unmap the block on
  // free and fault all of them in again.
  EXPECT_LE(second, 64) << "faults: first " << first << ", second " << second;
  EXPECT_GT(first, second);
}

}  // namespace
}  // namespace rlmesh::process
