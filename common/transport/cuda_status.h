// CUDA runtime results as transport::Status, for the CUDA backends (nccl_transport.cc,
// cuda_ipc_transport.cc) and the trainer group's NCCL collectives (common/dist): header-only,
// so each target that already links the CUDA runtime can use it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/transport/status.h"

namespace rlmesh::transport {

// OK for cudaSuccess; else Unavailable: "<what>: CUDA error N (name: text)".
inline Status Cuda(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return OkStatus();
  return UnavailableError(what + ": CUDA error " + std::to_string(static_cast<int>(rc)) + " (" +
                          cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc) + ")");
}

}  // namespace rlmesh::transport
