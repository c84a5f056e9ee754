#include "common/transport/transport_factory.h"

#include "common/transport/shm_transport.h"
#ifdef RLMESH_HAVE_NCCL
#include "common/transport/nccl_transport.h"
#endif
#ifdef RLMESH_HAVE_CUDA_IPC
#include "common/transport/cuda_ipc_transport.h"
#endif

namespace rlmesh::transport {

namespace {

Status Unknown(const std::string& backend) {
  std::string names;
  for (const auto& b : AvailableBackends()) names += (names.empty() ? "" : ", ") + b;
  return InvalidArgumentError("weight transport \"" + backend +
                              "\": expected one of this build's backends (" + names + ")");
}

}  // namespace

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names = {"shm", "tcp"};
#ifdef RLMESH_HAVE_NCCL
  names.push_back("nccl");
#endif
#ifdef RLMESH_HAVE_CUDA_IPC
  names.push_back("cuda_ipc");
#endif
  return names;
}

StatusOr<std::unique_ptr<WeightSender>> CreateSender(const std::string& backend,
                                                     const SenderOptions& options) {
  if (backend == "shm") return CreateShmSender(options);
  if (backend == "tcp") return CreateTcpSender(options);
#ifdef RLMESH_HAVE_NCCL
  if (backend == "nccl") return CreateNcclSender(options);
#endif
#ifdef RLMESH_HAVE_CUDA_IPC
  if (backend == "cuda_ipc") return CreateCudaIpcSender(options);
#endif
  return Unknown(backend);
}

StatusOr<std::unique_ptr<WeightReceiver>> CreateReceiver(const std::string& backend,
                                                         const ReceiverOptions& options) {
  if (backend == "shm") return CreateShmReceiver(options);
  if (backend == "tcp") return CreateTcpReceiver(options);
#ifdef RLMESH_HAVE_NCCL
  if (backend == "nccl") return CreateNcclReceiver(options);
#endif
#ifdef RLMESH_HAVE_CUDA_IPC
  if (backend == "cuda_ipc") return CreateCudaIpcReceiver(options);
#endif
  return Unknown(backend);
}

}  // namespace rlmesh::transport
