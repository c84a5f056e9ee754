// CUDA IPC weight transport, for receivers on the sender's node: on the trainer's GPU or on
// another GPU of the same machine (peer access, enabled lazily when a handle is opened).
//
// Why this design: every receiver copies each tensor straight from the trainer's own device
// memory, mapped into its process with CUDA IPC, into its destination tensor: one
// device-to-device copy a tensor and no staging. A receiver on the trainer's GPU then moves each
// byte once, like a plain cudaMemcpy; a staging ring (sender packs bucket k into a shared slot,
// receiver unpacks it) would read and write every byte twice on the same HBM and cap weight sync
// near half of a plain copy. Receivers never wait on each other, so one that stalls holds up
// nobody but the Publish's wait for its acknowledgement, and is dropped after transfer_timeout.
//
// Per version, over the control channel of sender_hub.h: the sender exports the allocation
// behind each tensor (cudaIpcGetMemHandle of its base, found with the driver's
// cuMemGetAddressRange), sends one manifest that carries the handles and each tensor's
// (allocation, offset), and waits for one acknowledgement per receiver. A receiver opens each
// allocation once (cudaIpcOpenMemHandle, kept open across versions while manifests name it,
// closed when one no longer does), issues its copies on its own stream, waits for them, then
// acknowledges. Memory that cannot be exported (host memory, cudaMallocAsync pools, cuMemCreate
// and PyTorch's expandable segments) is first copied into a sender-owned device buffer that is.
// A receiver in the sender's own process (CUDA cannot open a handle where it was made) copies
// from the sender's pointers as they are. There are no buckets: `bucket_bytes` only counts the
// PublishReport's buckets.
//
// The tensors' contract is the NCCL backend's: device memory that stays valid and unchanged until
// the next Publish returns, since receivers read it during the Publish and late joiners are caught
// up from it. Publish starts with cudaDeviceSynchronize on options.device, so kernels still
// writing the tensors have finished. Not streaming: streams() is false. Errors: the sender's are
// Unavailable (CUDA) or InvalidArgument (a null tensor); a receiver-side failure to map or copy
// (another node, no peer access between the GPUs) fails that version on that receiver with the
// CUDA error text and what was being done, and it stays subscribed.
#pragma once

#include <memory>
#include <string>

#include "common/transport/transport.h"

namespace rlmesh::transport {

// Unavailable (with the CUDA error) when no GPU is visible; InvalidArgument for a device out of
// range. The sender publishes device pointers of any visible device; options.device is the
// device it synchronizes and keeps its buffer for non-exportable tensors on.
StatusOr<std::unique_ptr<WeightSender>> CreateCudaIpcSender(const SenderOptions& options);
// Connects to the sender and says hello; copies into destinations on options.device.
StatusOr<std::unique_ptr<WeightReceiver>> CreateCudaIpcReceiver(const ReceiverOptions& options);

}  // namespace rlmesh::transport
