// CUDA helpers the tests/gpu programs share (on top of gpu_harness.h): a CUDA call that must
// succeed, and the number of visible GPUs, counted in a child so that the caller can still
// fork its receivers and ranks before its own first CUDA call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/transport/nccl_transport.h"
#include "tests/gpu/gpu_harness.h"

namespace rlmesh::gpu_tests {

// Exits 1 with `what` and CUDA's text when `rc` is an error.
inline void Cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

// Visible GPUs, counted in a child (transport::VisibleCudaDevicesCountedInAChild); 0, saying
// why, when CUDA finds none.
inline int CountDevices() {
  auto devices = transport::VisibleCudaDevicesCountedInAChild();
  if (!devices.ok()) {
    std::fprintf(stderr, "no GPU visible: %s\n", devices.status().message().c_str());
    return 0;
  }
  return *devices;
}

}  // namespace rlmesh::gpu_tests
