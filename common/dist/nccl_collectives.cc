#include "common/dist/nccl_collectives.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "common/transport/nccl_status.h"

namespace rlmesh::dist {
namespace {

using transport::Status;
using transport::StatusOr;
using Clock = std::chrono::steady_clock;

ncclDataType_t NcclType(NcclElement type) {
  switch (type) {
    case NcclElement::kFloat64:
      return ncclFloat64;
    case NcclElement::kBFloat16:
      return ncclBfloat16;
    case NcclElement::kFloat32:
      break;
  }
  return ncclFloat32;
}

// Makes `device` current for a scope and restores the caller's device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ =
        transport::Cuda(cudaSetDevice(device), "selecting CUDA device " + std::to_string(device));
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

Clock::time_point Deadline(double timeout_s) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6));
}

}  // namespace

struct NcclCollectives::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t before = nullptr;  // recorded on the default stream, awaited by `stream`
  cudaEvent_t done = nullptr;    // recorded on `stream` after the operation

  // Abort: every call is synchronous, so nothing is in flight, and a peer that is gone cannot
  // hold it up the way ncclCommDestroy could.
  ~State() {
    if (comm != nullptr) ncclCommAbort(comm);
    if (done != nullptr) cudaEventDestroy(done);
    if (before != nullptr) cudaEventDestroy(before);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

Status NcclCollectives::Available(int device) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    return transport::UnavailableError(std::string("backend nccl: no usable CUDA device: ") +
                                       cudaGetErrorString(rc));
  }
  if (device < 0 || device >= count) {
    return transport::UnavailableError("backend nccl: CUDA device " + std::to_string(device) +
                                       " does not exist here (" + std::to_string(count) +
                                       " visible)");
  }
  return transport::OkStatus();
}

StatusOr<std::string> NcclCollectives::NewId() {
  ncclUniqueId id;
  if (Status s = transport::Nccl(ncclGetUniqueId(&id), nullptr, "creating an NCCL id"); !s.ok()) {
    return s;
  }
  return std::string(id.internal, sizeof(id.internal));
}

StatusOr<std::unique_ptr<NcclCollectives>> NcclCollectives::Join(const std::string& id, int rank,
                                                                 int world, int device,
                                                                 double timeout_s,
                                                                 const std::string& name) {
  const std::string what = name + ": joining the NCCL communicator of " + std::to_string(world) +
                           " ranks on CUDA device " + std::to_string(device);
  if (world < 1 || rank < 0 || rank >= world || device < 0) {
    return transport::InvalidArgumentError(what + ": expected 0 <= rank " + std::to_string(rank) +
                                           " < world and a device >= 0");
  }
  ncclUniqueId unique;
  if (id.size() != sizeof(unique.internal)) {
    return transport::InvalidArgumentError(what + ": the id has " + std::to_string(id.size()) +
                                           " bytes, expected " +
                                           std::to_string(sizeof(unique.internal)));
  }
  std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
  DeviceScope scope(device);
  if (!scope.status().ok()) return transport::Annotate(scope.status(), what);
  auto state = std::make_unique<State>();
  TRANSPORT_RETURN_IF_ERROR(transport::Cuda(
      cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking), what + ": a stream"));
  TRANSPORT_RETURN_IF_ERROR(transport::Cuda(
      cudaEventCreateWithFlags(&state->before, cudaEventDisableTiming), what + ": an event"));
  TRANSPORT_RETURN_IF_ERROR(transport::Cuda(
      cudaEventCreateWithFlags(&state->done, cudaEventDisableTiming), what + ": an event"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing rank is a timeout, not a hang
  const ncclResult_t rc = ncclCommInitRankConfig(&state->comm, world, unique, rank, &config);
  TRANSPORT_RETURN_IF_ERROR(transport::Nccl(rc, nullptr, what));
  if (state->comm == nullptr) {
    return transport::UnavailableError(what + ": NCCL returned no communicator");
  }
  TRANSPORT_RETURN_IF_ERROR(
      transport::WaitNccl(state->comm, nullptr, Deadline(timeout_s), {}, what));
  return std::unique_ptr<NcclCollectives>(
      new NcclCollectives(std::move(state), rank, world, device, timeout_s, name));
}

NcclCollectives::NcclCollectives(std::unique_ptr<State> state, int rank, int world, int device,
                                 double timeout_s, std::string name)
    : state_(std::move(state)),
      rank_(rank),
      world_(world),
      device_(device),
      timeout_s_(timeout_s),
      name_(std::move(name)) {}

NcclCollectives::~NcclCollectives() {
  DeviceScope scope(device_);
  state_.reset();
}

template <typename Launch>
Status NcclCollectives::Run(const std::string& what, bool sum, NcclElement type, Launch launch) {
  if (!broken_.ok()) return broken_;
  const std::string where = name_ + ": " + what + " over NCCL";
  if (sum && type == NcclElement::kBFloat16) {
    return transport::InvalidArgumentError(where + ": sums are taken in float32 or float64");
  }
  DeviceScope scope(device_);
  Status status = scope.status();
  if (status.ok()) {
    status = transport::Cuda(cudaEventRecord(state_->before, cudaStreamLegacy), where);
  }
  if (status.ok()) {
    status = transport::Cuda(cudaStreamWaitEvent(state_->stream, state_->before, 0), where);
  }
  const auto deadline = Deadline(timeout_s_);
  if (status.ok())
    status = transport::Nccl(launch(state_->comm, state_->stream), state_->comm, where);
  // A non-blocking communicator may still be queueing the call: it must be issued before the
  // event behind it is recorded.
  if (status.ok()) status = transport::WaitNccl(state_->comm, nullptr, deadline, {}, where);
  if (status.ok()) status = transport::Cuda(cudaEventRecord(state_->done, state_->stream), where);
  if (status.ok()) status = transport::WaitNccl(state_->comm, state_->done, deadline, {}, where);
  if (!status.ok()) {
    ncclCommAbort(state_->comm);
    state_->comm = nullptr;
    broken_ = status;
  }
  return status;
}

Status NcclCollectives::AllReduceSum(void* data, size_t count, NcclElement type,
                                     const std::string& what) {
  return Run(what, /*sum=*/true, type, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(data, data, count, NcclType(type), ncclSum, comm, stream);
  });
}

Status NcclCollectives::AllGather(const void* shard, void* full, size_t count, NcclElement type,
                                  const std::string& what) {
  return Run(what, /*sum=*/false, type, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(shard, full, count, NcclType(type), comm, stream);
  });
}

Status NcclCollectives::ReduceScatterSum(const void* full, void* shard, size_t count,
                                         NcclElement type, const std::string& what) {
  return Run(what, /*sum=*/true, type, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(full, shard, count, NcclType(type), ncclSum, comm, stream);
  });
}

}  // namespace rlmesh::dist
