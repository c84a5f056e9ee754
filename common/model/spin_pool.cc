#include "common/model/spin_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RLMESH_CPU_RELAX() _mm_pause()
#else
#define RLMESH_CPU_RELAX() std::this_thread::yield()
#endif

namespace rlmesh::model::internal {
namespace {

// How long an idle worker spins before it sleeps: far longer than the gap between two kernel
// calls of a decode step (a few microseconds), short enough that a worker of an idle engine
// gives its core back at once.
constexpr int64_t kSpinMicros = 50;

// Protocol. A job is published by writing its fields while `closed_` is true, then clearing
// `closed_` and bumping `generation_`. A worker that sees a new generation joins by
// incrementing `joined_` and then checking `closed_`: if the job is closed (or already has
// its `threads - 1` workers) it leaves without reading the fields. The caller, once every
// piece is taken, sets `closed_` and waits for `joined_` to fall to zero; with sequentially
// consistent atomics, a worker either joined before the close (and is waited for) or sees it.
class SpinPool {
 public:
  static SpinPool& Get() {
    // Leaked on purpose: workers may still be asleep at exit, and joining them from a static
    // destructor would race with other static destructors.
    static SpinPool* pool = new SpinPool();
    return *pool;
  }

  void Run(int threads, int64_t count, int64_t grain, void (*fn)(void*, int64_t, int64_t),
           void* ctx) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
      fn(ctx, 0, count);
      return;
    }
    EnsureWorkers(threads - 1);
    fn_ = fn;
    ctx_ = ctx;
    count_ = count;
    grain_ = grain;
    max_workers_ = threads - 1;
    next_.store(0);
    closed_.store(false);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) generation_.notify_all();
    Work();
    closed_.store(true);
    for (int spins = 0; joined_.load() != 0; ++spins) {
      if (spins < 4096) {
        RLMESH_CPU_RELAX();
      } else {
        sched_yield();  // a worker was descheduled in the middle of its piece
      }
    }
  }

 private:
  void EnsureWorkers(int wanted) {
    for (; workers_ < wanted; ++workers_) std::thread([this] { WorkerLoop(); }).detach();
  }

  // Takes pieces until none are left.
  void Work() {
    const int64_t pieces = (count_ + grain_ - 1) / grain_;
    for (int64_t p = next_.fetch_add(1); p < pieces; p = next_.fetch_add(1)) {
      fn_(ctx_, p * grain_, std::min(count_, (p + 1) * grain_));
    }
  }

  void WorkerLoop() {
    uint32_t seen = generation_.load();
    for (;;) {
      WaitForNewGeneration(seen);
      seen = generation_.load();
      if (joined_.fetch_add(1) >= max_workers_.load() || closed_.load()) {
        joined_.fetch_sub(1);
        continue;
      }
      Work();
      joined_.fetch_sub(1);
    }
  }

  // Spins for kSpinMicros (checking the clock every 64 pauses), then sleeps on the futex.
  void WaitForNewGeneration(uint32_t seen) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 0;; ++i) {
      if (generation_.load(std::memory_order_relaxed) != seen) return;
      if ((i & 63) == 63 && Clock::now() >= deadline) break;
      RLMESH_CPU_RELAX();
    }
    sleepers_.fetch_add(1);
    while (generation_.load() == seen) generation_.wait(seen);
    sleepers_.fetch_sub(1);
  }

  std::mutex mu_;    // one job at a time
  int workers_ = 0;  // started (detached; they live as long as the process)
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> joined_{0};
  std::atomic<int> max_workers_{0};
  std::atomic<bool> closed_{true};
  std::atomic<int64_t> next_{0};
  // The job; written only while closed_ is true and joined_ is zero.
  void (*fn_)(void*, int64_t, int64_t) = nullptr;
  void* ctx_ = nullptr;
  int64_t count_ = 0;
  int64_t grain_ = 1;
};

}  // namespace

void SpinParallelFor(int threads, int64_t count, int64_t grain,
                     void (*fn)(void* ctx, int64_t begin, int64_t end), void* ctx) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (threads <= 1 || count <= grain) {
    fn(ctx, 0, count);
    return;
  }
  SpinPool::Get().Run(threads, count, grain, fn, ctx);
}

}  // namespace rlmesh::model::internal
