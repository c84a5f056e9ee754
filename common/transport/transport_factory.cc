#include "common/transport/transport_factory.h"

#include "common/transport/shm_transport.h"
#ifdef RLMESH_HAVE_NCCL
#include "common/transport/nccl_transport.h"
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
#ifdef RLMESH_HAVE_NCCL
  return {"shm", "tcp", "nccl"};
#else
  return {"shm", "tcp"};
#endif
}

StatusOr<std::unique_ptr<WeightSender>> CreateSender(const std::string& backend,
                                                     const SenderOptions& options) {
  if (backend == "shm") return CreateShmSender(options);
  if (backend == "tcp") return CreateTcpSender(options);
#ifdef RLMESH_HAVE_NCCL
  if (backend == "nccl") return CreateNcclSender(options);
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
  return Unknown(backend);
}

}  // namespace rlmesh::transport
