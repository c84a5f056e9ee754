// The dense collectives of a trainer group on GPUs: one NCCL communicator of W ranks, one GPU
// per rank, summing, gathering and reduce-scattering flat device buffers. dist::Group uses one
// per scope when its backend is "nccl" (group.h); the CPU tensors and the command channel of
// the group stay on Gloo.
//
// Like common/transport, this builds with the standard library, the CUDA runtime and NCCL
// only (transport::Status for errors), so tests/gpu can build and run it on a machine that has
// none of the project's other dependencies.
//
// Every call is host-synchronous and bounded: the operation waits for the work already queued
// on the device's legacy default stream (where LibTorch queues by default), runs on the
// communicator's own stream, and is polled with ncclCommGetAsyncError against the timeout.
// A failure or a timeout aborts the communicator (ncclCommAbort), so a dead peer cannot wedge
// the caller; every later call fails with the first failure's status.
//
// Thread-compatible: one thread drives a communicator.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/transport/status.h"

namespace rlmesh::dist {

// Element types of the buffers. Sums of kBFloat16 are not offered: the group reduces bfloat16
// in float32 (group.h), so it converts before calling.
enum class NcclElement { kFloat32, kFloat64, kBFloat16 };

class NcclCollectives {
 public:
  // OK when this build has NCCL (else FailedPrecondition) and CUDA device `device` exists
  // (else Unavailable, with CUDA's reason). The message starts "backend nccl".
  static transport::Status Available(int device);

  // A fresh ncclUniqueId's bytes, for rank 0 to hand to every rank (the group's store).
  // Unavailable when this machine has no usable GPU or NCCL fails.
  static transport::StatusOr<std::string> NewId();

  // Joins the communicator of `world` ranks that `id` names, as `rank`, on CUDA device
  // `device`; every rank must call it with the same id within `timeout_s`. `name` prefixes
  // errors ("trainer rank 1").
  static transport::StatusOr<std::unique_ptr<NcclCollectives>> Join(const std::string& id, int rank,
                                                                    int world, int device,
                                                                    double timeout_s,
                                                                    const std::string& name);
  ~NcclCollectives();
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  int device() const { return device_; }

  // In place: every rank's `count` elements at `data` become the sum over the ranks
  // (kFloat32 or kFloat64).
  transport::Status AllReduceSum(void* data, size_t count, NcclElement type,
                                 const std::string& what);
  // `full` (world x count elements) receives every rank's `shard` (count elements) in rank
  // order; any element type (the bytes are copied).
  transport::Status AllGather(const void* shard, void* full, size_t count, NcclElement type,
                              const std::string& what);
  // `shard` (count elements) receives this rank's slice [rank x count, (rank + 1) x count) of
  // the sum of every rank's `full` (kFloat32 or kFloat64).
  transport::Status ReduceScatterSum(const void* full, void* shard, size_t count, NcclElement type,
                                     const std::string& what);

  // The first failure, after which every call returns it; OK while healthy.
  const transport::Status& broken() const { return broken_; }

 private:
  struct State;
  NcclCollectives(std::unique_ptr<State> state, int rank, int world, int device, double timeout_s,
                  std::string name);
  // Checks, then runs `launch` (which queues one NCCL call on the communicator's stream)
  // after the default stream's work and waits for it.
  template <typename Launch>
  transport::Status Run(const std::string& what, bool sum, NcclElement type, Launch launch);

  std::unique_ptr<State> state_;
  const int rank_, world_, device_;
  const double timeout_s_;
  const std::string name_;
  transport::Status broken_;
};

}  // namespace rlmesh::dist
