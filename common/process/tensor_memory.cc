#include "common/process/tensor_memory.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>

namespace rlmesh::process {
namespace {

std::atomic<int64_t> allocated{0};
std::atomic<int64_t> peak{0};

void RaisePeak(int64_t now) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

// What a counted allocation's DataPtr owns: the wrapped allocation and its size.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};

void DeleteCounted(void* context) {
  auto* counted = static_cast<Counted*>(context);
  allocated.fetch_sub(counted->bytes, std::memory_order_relaxed);
  delete counted;  // frees the wrapped allocation
}

// LibTorch 1.x declares `DataPtr allocate(size_t) const`; 2.x declares it non-const and adds a
// pure `copy_data`. Both allocate overloads are defined, without `override`, so that whichever
// the base declares is overridden; copy_data overrides 2.x's and is unused under 1.x.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) const { return Allocate(n); }
  c10::DataPtr allocate(size_t n) { return Allocate(n); }

  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);  // host memory, as the wrapped CPU allocator's
  }

 private:
  c10::DataPtr Allocate(size_t n) const {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* counted = new Counted{std::move(inner), static_cast<int64_t>(n)};
    RaisePeak(allocated.fetch_add(counted->bytes, std::memory_order_relaxed) + counted->bytes);
    return {data, counted, &DeleteCounted, device};
  }

  c10::Allocator* const inner_;
};

}  // namespace

void CountCpuTensorMemory() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Owned by LibTorch's registry for the life of the process.
    static CountingAllocator counting(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&counting, /*priority=*/100);
  });
}

TensorMemory CpuTensorMemory() {
  return {allocated.load(std::memory_order_relaxed), peak.load(std::memory_order_relaxed)};
}

void ResetPeakCpuTensorMemory() { peak.store(allocated.load(std::memory_order_relaxed)); }

}  // namespace rlmesh::process
