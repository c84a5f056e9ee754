// Picks a weight-transport backend by its config name ("shm", "tcp", "nccl", "cuda_ipc"): the
// one place that knows which backends this build has. Names are those of
// rlmesh.weight_sync.transport.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/transport/transport.h"

namespace rlmesh::transport {

// Backends compiled into this build, in order of preference on a CPU host.
std::vector<std::string> AvailableBackends();

// InvalidArgument naming the backend and the available ones when it is unknown or not built.
StatusOr<std::unique_ptr<WeightSender>> CreateSender(const std::string& backend,
                                                     const SenderOptions& options);
StatusOr<std::unique_ptr<WeightReceiver>> CreateReceiver(const std::string& backend,
                                                         const ReceiverOptions& options);

}  // namespace rlmesh::transport
