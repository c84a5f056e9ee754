// The worker threads of the CPU decode kernels (internal to common/model): a parallel-for
// whose workers spin for a short while after each job before they sleep. A batch-1 decode
// step is ~200 kernel calls of 10-100 us each; with OpenMP's passive waiting (which a machine
// shared with other jobs needs) every call paid for waking a sleeping thread, and a 2-thread
// step ran at the speed of one (docs/performance.md, "Generation"). Workers that spin between
// the calls of a step are already awake for the next one; between steps they go to sleep.
//
// One job at a time: a call made while another thread's job runs executes on its caller
// alone (same results, as every item is independent of the partition). Torch-free.
#pragma once

#include <cstdint>

namespace rlmesh::model::internal {

// Calls fn(ctx, begin, end) over [0, count) in pieces of at most `grain` items, on `threads`
// threads including the caller; pieces are taken from a shared counter, so a thread that
// the scheduler delays leaves its share to the others. With one thread, or count <= grain,
// it is one call fn(ctx, 0, count) on the caller. Returns when every piece is done.
void SpinParallelFor(int threads, int64_t count, int64_t grain,
                     void (*fn)(void* ctx, int64_t begin, int64_t end), void* ctx);

// The same with a callable f(begin, end).
template <typename F>
void SpinParallelFor(int threads, int64_t count, int64_t grain, const F& f) {
  SpinParallelFor(
      threads, count, grain,
      [](void* ctx, int64_t begin, int64_t end) { (*static_cast<const F*>(ctx))(begin, end); },
      const_cast<F*>(&f));
}

}  // namespace rlmesh::model::internal
