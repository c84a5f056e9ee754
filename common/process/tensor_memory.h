// Bytes held by LibTorch's CPU tensors, as the CUDA caching allocator's statistics count them
// on a GPU (torch.cuda.memory_allocated / max_memory_allocated, which verl reports as
// perf/max_memory_allocated_gb): CountCpuTensorMemory wraps LibTorch's CPU allocator so that
// every allocation adds its size and every free subtracts it. The resident set is a different
// figure: it also holds the code, the libraries and memory freed into malloc's heap for reuse
// (the CUDA allocator's "reserved" bytes), which depends on where the heap placed each block.
//
// Thread-safe. Tensors allocated before CountCpuTensorMemory() are not counted, before or when
// freed.
#pragma once

#include <cstdint>

namespace rlmesh::process {

// Installs the counting allocator in front of LibTorch's CPU allocator; later calls do
// nothing. Call it early in main, before the model is built.
void CountCpuTensorMemory();

struct TensorMemory {
  int64_t allocated_bytes = 0;  // held by CPU tensors now
  int64_t peak_bytes = 0;       // the most held at once since install or ResetPeak
};

// Zeros when CountCpuTensorMemory was not called.
TensorMemory CpuTensorMemory();
// The peak starts again from what is held now (as torch.cuda.reset_peak_memory_stats).
void ResetPeakCpuTensorMemory();

}  // namespace rlmesh::process
