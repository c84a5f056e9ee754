// Shared pieces of the transport conformance suite: deterministic tensor contents (so a child
// process can check what it received without being sent the expectation), buffers in each
// backend's memory space, and a receiving sink that checks names, dtypes and shapes.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/transport.h"

namespace rlmesh::transport::testing {

// Buffers where a backend's tensors live: host memory (shm) or CUDA device memory (NCCL).
class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void Upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void Download(void* dst, const void* src, size_t bytes) = 0;
};
std::unique_ptr<Memory> HostMemory();
// CUDA device `device`; only in builds with CUDA (conformance_cuda.cc).
std::unique_ptr<Memory> CudaMemory(int device);

// Bytes of tensor `index` of a version: splitmix64 of (seed, version, index, position), so
// every float32/bfloat16 bit pattern (NaN payloads, denormals) appears and any misplaced or
// dropped byte shows.
std::vector<char> PatternBytes(uint64_t seed, uint64_t version, size_t index, size_t bytes);

// Tensors of one published version, uploaded into `memory`.
class SourceVersion {
 public:
  SourceVersion(Memory& memory, const std::vector<TensorMeta>& metas, uint64_t seed,
                uint64_t version);
  ~SourceVersion();
  const std::vector<ConstTensorView>& views() const { return views_; }

 private:
  Memory& memory_;
  std::vector<ConstTensorView> views_;
};

// A receiver's destination buffers for the expected tensors.
class Sink {
 public:
  Sink(Memory& memory, const std::vector<TensorMeta>& metas);
  ~Sink();
  DestinationFn Destination();
  // Empty when every tensor holds PatternBytes(seed, version, i); else the first mismatch.
  std::string Check(uint64_t seed, uint64_t version) const;

 private:
  Memory& memory_;
  std::vector<TensorMeta> metas_;
  std::map<std::string, size_t> index_;
  std::vector<void*> buffers_;
};

// Odd-sized float32 and bfloat16 tensors (and an empty one), spanning small buckets.
std::vector<TensorMeta> OddTensors();
// `small` tiny tensors and `large` tensors of `large_bytes` each.
std::vector<TensorMeta> ManyTensors(int small, int large, size_t large_bytes);

}  // namespace rlmesh::transport::testing
