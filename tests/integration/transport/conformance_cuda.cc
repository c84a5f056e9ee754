// CUDA device buffers for the NCCL backend's conformance runs.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "tests/integration/transport/conformance_support.h"

namespace rlmesh::transport::testing {

namespace {

void Check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(rc));
    std::abort();
  }
}

class Cuda : public Memory {
 public:
  explicit Cuda(int device) : device_(device) {}
  void* Alloc(size_t bytes) override {
    Check(cudaSetDevice(device_), "cudaSetDevice");
    void* p = nullptr;
    Check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void Free(void* p) override { cudaFree(p); }
  void Upload(void* dst, const void* src, size_t bytes) override {
    Check(cudaSetDevice(device_), "cudaSetDevice");
    Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void Download(void* dst, const void* src, size_t bytes) override {
    Check(cudaSetDevice(device_), "cudaSetDevice");
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<Memory> CudaMemory(int device) { return std::make_unique<Cuda>(device); }

}  // namespace rlmesh::transport::testing
