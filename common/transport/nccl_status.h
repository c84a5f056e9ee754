// NCCL results as transport::Status and the bounded wait of a non-blocking communicator,
// shared by the NCCL weight transport (nccl_transport.cc) and the trainer group's NCCL
// collectives (common/dist/nccl_collectives.cc). Header-only: both already link NCCL.
#pragma once

#include <nccl.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/transport/cuda_status.h"

namespace rlmesh::transport {

// OK for ncclSuccess and ncclInProgress (a non-blocking call under way); else Unavailable with
// NCCL's text and, given the communicator, its last error.
inline Status Nccl(ncclResult_t rc, ncclComm_t comm, const std::string& what) {
  if (rc == ncclSuccess || rc == ncclInProgress) return OkStatus();
  const std::string detail = comm != nullptr ? ncclGetLastError(comm) : "";
  return UnavailableError(what + ": " + ncclGetErrorString(rc) +
                          (detail.empty() ? "" : " (" + detail + ")"));
}

// Polls a non-blocking communicator until `event` (recorded after its last operation) has
// completed, or, with no event, until its pending call is issued; fails on an NCCL or CUDA
// error, past `deadline` (DeadlineExceeded, "timed out"), or when `cancelled` (may be empty)
// returns an error.
inline Status WaitNccl(ncclComm_t comm, cudaEvent_t event,
                       std::chrono::steady_clock::time_point deadline,
                       const std::function<Status()>& cancelled, const std::string& what) {
  while (true) {
    if (event != nullptr) {
      const cudaError_t rc = cudaEventQuery(event);
      if (rc == cudaSuccess) return OkStatus();
      if (rc != cudaErrorNotReady) return Cuda(rc, what);
    }
    ncclResult_t state = ncclSuccess;
    TRANSPORT_RETURN_IF_ERROR(Nccl(ncclCommGetAsyncError(comm, &state), comm, what));
    if (state != ncclSuccess && state != ncclInProgress) return Nccl(state, comm, what);
    if (event == nullptr && state == ncclSuccess) return OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceededError(what + ": timed out, not finished by the deadline");
    }
    if (cancelled) TRANSPORT_RETURN_IF_ERROR(cancelled());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace rlmesh::transport
