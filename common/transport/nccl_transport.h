// NCCL weight transport: the trainer's GPU (rank 0) broadcasts each version to the receivers'
// GPUs. The control channel (sender_hub.h) hands out an ncclUniqueId with each receiver's rank
// whenever the receiver set changed since the communicator was built (a joiner, a drop), so
// the group is rebuilt at a version boundary and never blocks a Publish on a missing rank.
// Bytes move through two device buckets of `bucket_bytes`: while bucket k is broadcast on the
// communication stream, the sender packs bucket k+1 on a copy stream and every receiver unpacks
// bucket k-1 into its destination tensors.
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0), and every wait polls
// ncclCommGetAsyncError, the control connections and a deadline: a receiver that dies mid-
// broadcast is seen as a closed connection (or a timeout), the communicator is aborted
// (ncclCommAbort), the survivors are told to abort theirs, and the version is sent again to
// them over a new communicator within the same deadline.
//
// Tensors are device pointers on options.device. A late joiner is caught up from the last
// published tensors, which the caller keeps valid until the next Publish returns.
#pragma once

#include <memory>

#include "common/transport/transport.h"

namespace rlmesh::transport {

// Unavailable (with the CUDA error) when no GPU is visible.
StatusOr<std::unique_ptr<WeightSender>> CreateNcclSender(const SenderOptions& options);
StatusOr<std::unique_ptr<WeightReceiver>> CreateNcclReceiver(const ReceiverOptions& options);

// Number of visible CUDA devices, or the CUDA error that says why there are none usable
// (e.g. "CUDA driver version is insufficient" on a machine without a GPU).
StatusOr<int> VisibleCudaDevices();

// VisibleCudaDevices, counted in a forked child: the calling process stays untouched by CUDA,
// so it can still fork processes that use it (a CUDA context does not survive fork). Call it
// before this process starts threads.
StatusOr<int> VisibleCudaDevicesCountedInAChild();

}  // namespace rlmesh::transport
