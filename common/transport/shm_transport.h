// Shared-memory weight transport for receivers on the sender's host (the CPU backend).
//
// Why this design: on one host the cheapest way to give N processes the same bytes is to write
// them once into a POSIX shared-memory segment and let each receiver copy them out into its
// own buffers. The sender's cost is one memcpy of the version whatever N is (it never sends
// bytes per receiver; only a few-byte "buckets ready" notice per bucket per receiver), and each
// receiver pays one memcpy. Measured on the 2-core development VM (docs/performance.md, "Weight
// sync"), this beats a loopback TCP stream, whose kernel copies cost more CPU per byte than a
// memcpy, and a TCP chain, whose N hops each pay a send and a receive. Pipelining: the sender
// announces each bucket as soon as it is written, so receivers copy bucket k while the sender
// writes bucket k+1. Receivers on other hosts need the NCCL backend (or the trainer's inline
// gRPC path).
//
// The segment holds the current version, so a late joiner is caught up from it without the
// trainer's tensors. Its first 256 bytes are a header with the version being written; a
// receiver checks it after copying, so one that was too slow (dropped, then overwritten) sees
// an error rather than torn weights. Segments are named /rlmesh-weights-<pid>-<n>, unlinked
// when replaced and when the sender is destroyed; a new sender also unlinks those whose pid
// has no process any more (a sender killed before it could clean up).
#pragma once

#include <memory>

#include "common/transport/transport.h"

namespace rlmesh::transport {

StatusOr<std::unique_ptr<WeightSender>> CreateShmSender(const SenderOptions& options);
// Connects to the sender and says hello; the first ReceiveNext returns the sender's current
// version if it has one.
StatusOr<std::unique_ptr<WeightReceiver>> CreateShmReceiver(const ReceiverOptions& options);

// The "tcp" backend: the same sender with its copy in private memory, every receiver served by
// the TCP chain (tcp_chain.h), so no receiver needs the sender's host. The "shm" backend
// chains the receivers that cannot map its segment in the same way.
StatusOr<std::unique_ptr<WeightSender>> CreateTcpSender(const SenderOptions& options);
StatusOr<std::unique_ptr<WeightReceiver>> CreateTcpReceiver(const ReceiverOptions& options);

}  // namespace rlmesh::transport
