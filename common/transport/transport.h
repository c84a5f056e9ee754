// The weight data plane: a trainer publishes version v as a set of named tensors (name, dtype,
// shape, raw bytes); every subscribed receiver writes them into its own destination buffers in
// place and acknowledges v. Bytes move in buckets of `bucket_bytes`, pipelined (a receiver
// copies bucket k while the sender fills bucket k+1), with one control exchange per version
// (manifest out, acknowledgement back), never one per tensor.
//
// Membership is elastic: a receiver subscribes by connecting to the sender's endpoint at any
// time; one that joins after a version was published first receives that current version; one
// that dies or stalls is dropped after `transfer_timeout` and named in the PublishReport, and
// the others complete. Backends: shm_transport.h (host memory, one host), nccl_transport.h
// (GPU memory, NCCL broadcast). The trainer's inline-gRPC path lives in services/trainer.
//
// This folder deliberately uses only the C++ standard library, POSIX and (for the NCCL backend)
// CUDA/NCCL: tests/gpu builds it on a bare GPU machine without Abseil, gRPC or LibTorch. So
// errors are transport::Status (status.h; its codes are absl::StatusCode's values, converted at
// the service boundary) and locks are std::mutex, against STYLE rules 6 and 11 on purpose.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/transport/status.h"

namespace rlmesh::transport {

// Element types that cross the data plane; the values are part of the wire format.
enum class DType : uint8_t {
  kFloat32 = 1,
  kBFloat16 = 2,
  kFloat16 = 3,
  kFloat64 = 4,
  kInt64 = 5,
  kInt32 = 6,
  kInt8 = 7,
  kUInt8 = 8,
  kBool = 9,
};

// Bytes per element; 0 for a value outside the enum.
size_t DTypeSize(DType dtype);
// "float32", "bfloat16", ...; "dtype(<n>)" for a value outside the enum.
std::string DTypeName(DType dtype);

// What a tensor is, without its bytes.
struct TensorMeta {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;

  int64_t NumElements() const;
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
  bool operator==(const TensorMeta& other) const {
    return name == other.name && dtype == other.dtype && shape == other.shape;
  }
};

// A tensor to publish: contiguous bytes in the sender backend's memory space (host memory for
// shm, device memory for NCCL).
struct ConstTensorView {
  TensorMeta meta;
  const void* data = nullptr;
};

using Clock = std::chrono::steady_clock;
using Duration = std::chrono::duration<double>;

struct SenderOptions {
  std::string bind_host = "127.0.0.1";  // control endpoint; receivers connect here
  int port = 0;                         // 0 = any free port
  size_t bucket_bytes = 64 << 20;       // rlmesh.weight_sync.bucket_bytes
  Duration transfer_timeout{300};       // per receiver, from manifest to acknowledgement
  Duration handshake_timeout{10};       // a new connection must say hello within this
  int device = 0;                       // CUDA device (NCCL backend)
};

// What happened to each receiver during one Publish.
struct ReceiverOutcome {
  std::string name;   // the receiver's name from its hello ("" when it gave none)
  bool ok = false;    // acknowledged the version
  std::string error;  // why not: closed connection, timeout, receiver-side error
};

struct PublishReport {
  uint64_t version = 0;
  size_t bytes = 0;  // payload bytes of the version (once, not per receiver)
  size_t buckets = 0;
  std::vector<ReceiverOutcome> receivers;  // one per receiver that was subscribed
  double seconds = 0;                      // from the call to the last acknowledgement
  int dropped() const {
    int n = 0;
    for (const auto& r : receivers) n += !r.ok;
    return n;
  }
};

// The trainer's side. Publish and the catch-up of late joiners are serialized inside; Publish
// may be called from any one thread at a time. A receiver that fails is dropped (its connection
// closed) and reported; that is not an error of Publish.
class WeightSender {
 public:
  virtual ~WeightSender() = default;
  // "host:port" for receivers to connect to.
  virtual std::string endpoint() const = 0;
  // Sends `version` (greater than the last one, else InvalidArgument) to every subscribed
  // receiver and waits for each to acknowledge or be dropped. The tensors' bytes are read during
  // the call; the NCCL backend also reads them later to catch up late joiners, so their memory
  // must stay valid and unchanged until the next Publish returns (shm keeps its own copy).
  virtual StatusOr<PublishReport> Publish(uint64_t version,
                                          const std::vector<ConstTensorView>& tensors) = 0;
  // Publish of a version that is not held whole anywhere (a sharded trainer gathers one layer
  // at a time): `source(i)` gives the bytes of tensors[i]; it is asked for each index once, in
  // increasing order, and its pointer need stay valid only until the next call or the end of
  // the Publish. An error from `source` abandons the version (receivers are told) and is
  // returned. Only where streams() is true; FailedPrecondition otherwise.
  using TensorSource = std::function<StatusOr<const void*>(size_t index)>;
  virtual StatusOr<PublishReport> PublishStream(uint64_t version,
                                                const std::vector<TensorMeta>& tensors,
                                                const TensorSource& source);
  // Whether PublishStream works: the backend copies a version's bytes while publishing and
  // never reads them afterwards (shm copies into its segment; NCCL reads them again later).
  virtual bool streams() const { return false; }
  // Receivers subscribed now (joined, not dropped).
  virtual int NumReceivers() const = 0;
  // Closes the subscriptions of the receivers named (hello names) and forgets them: a receiver
  // that is frozen or gone then cannot hold the next Publish up until its transfer timeout. A
  // receiver that subscribes again is caught up with the current version. Returns how many
  // were closed. Waits for a Publish in progress to end.
  virtual int Disconnect(const std::vector<std::string>& names) = 0;
  // Gives up on receiver `name` in the transfer of `version` now in progress (from another
  // thread than Publish's): it is dropped, as if its transfer had timed out, within a second,
  // reporting `why`. For a receiver the caller knows is gone (its control-plane call failed). A
  // call for another version than the one in progress is ignored.
  virtual void Abandon(const std::string& name, uint64_t version, const std::string& why) = 0;
};

struct ReceiverOptions {
  std::string endpoint;  // the sender's "host:port"
  std::string name;      // reported by the sender (e.g. the replica id)
  Duration connect_timeout{10};
  Duration transfer_timeout{300};  // from the manifest to the last byte
  int device = 0;                  // CUDA device (NCCL backend)
};

// Where one tensor of an incoming version goes: a buffer of meta.NumBytes() bytes in the
// receiver backend's memory space, or an error (unknown name, wrong dtype or shape) that fails
// the version on this receiver and is reported to the sender.
using DestinationFn = std::function<StatusOr<void*>(const TensorMeta& meta)>;

struct ReceivedVersion {
  uint64_t version = 0;
  size_t tensors = 0;
  size_t bytes = 0;
  double seconds = 0;  // from the manifest to the acknowledgement
  // The way the bytes came: "shm" (copied from the sender's shared memory), "tcp" (the chain
  // of tcp_chain.h) or "nccl".
  std::string path;
};

// A replica's side: one subscription to one sender. Not thread-safe (one receiving thread).
class WeightReceiver {
 public:
  virtual ~WeightReceiver() = default;
  // Waits up to `wait` for the next version, writes every tensor into `destination`'s buffers,
  // then acknowledges it. Versions arrive in increasing order. DeadlineExceeded when nothing
  // arrived within `wait` (the subscription is intact); Unavailable when the sender is gone;
  // other errors fail this version only.
  virtual StatusOr<ReceivedVersion> ReceiveNext(const DestinationFn& destination,
                                                Duration wait) = 0;
};

// Whether the backend named `backend` (rlmesh.weight_sync.transport) moves CUDA device memory:
// its sender reads, and its receivers write, tensors on the GPU ("nccl", "cuda_ipc"). The
// others move host memory, with memcpy.
inline bool MovesDeviceMemory(const std::string& backend) {
  return backend == "nccl" || backend == "cuda_ipc";
}

// This machine's identity for the backends that only work within one node (cuda_ipc, shm): the
// kernel's boot id (/proc/sys/kernel/random/boot_id), the same in every process and container
// of a node and different across nodes; "" when unreadable.
std::string NodeId();

// A data plane a trainer offers its receivers: a backend and its sender's endpoint.
struct Offer {
  std::string backend;   // an rlmesh.weight_sync.transport name; "" = none
  std::string endpoint;  // "host:port"
  bool operator==(const Offer& other) const {
    return backend == other.backend && endpoint == other.endpoint;
  }
};

// A trainer offers every receiver its configured backend (`primary`) and may offer the ones on
// its own node a second (`same_node`: cuda_ipc beside nccl). A receiver on node `node` takes
// `same_node` when it is offered, the trainer's node `sender_node` is known and equal to
// `node`, and the receiver can hold what the backend moves (device memory only on a GPU:
// `on_gpu`); `primary` otherwise.
Offer ChooseOffer(const Offer& primary, const Offer& same_node, const std::string& sender_node,
                  const std::string& node, bool on_gpu);

// The keys of a weight-update BEGIN's transport_options (rlmesh.v1.UpdateWeightsRequest) that
// carry the same-node offer, and the trainer's NodeId().
inline constexpr char kSameNodeTransportOption[] = "same_node_transport";
inline constexpr char kSameNodeEndpointOption[] = "same_node_endpoint";
inline constexpr char kSenderNodeOption[] = "sender_node";

// The offer a receiver on `node` takes from a BEGIN (anything with transport(), endpoint() and
// a string map transport_options(), i.e. an UpdateWeightsRequest).
template <typename Request>
Offer OfferIn(const Request& request, const std::string& node, bool on_gpu) {
  const auto& options = request.transport_options();
  auto option = [&](const char* key) {
    auto it = options.find(key);
    return it == options.end() ? std::string() : std::string(it->second);
  };
  return ChooseOffer({request.transport(), request.endpoint()},
                     {option(kSameNodeTransportOption), option(kSameNodeEndpointOption)},
                     option(kSenderNodeOption), node, on_gpu);
}

// One receiver's choices among the offers of successive BEGINs: OfferIn, except that a
// same-node offer that failed on this receiver (PassOver) is not taken again; the BEGIN's own
// transport and endpoint are, instead. Not thread-safe.
class OfferChoice {
 public:
  // `node`: the receiver's node ("" = NodeId()); `who` starts its log line ("rollout").
  OfferChoice(const std::string& node, std::string who)
      : node_(node.empty() ? NodeId() : node), who_(std::move(who)) {}

  template <typename Request>
  Offer For(const Request& request, bool on_gpu) const {
    Offer offer = OfferIn(request, node_, on_gpu);
    if (failed_.count(offer.endpoint)) return {request.transport(), request.endpoint()};
    return offer;
  }
  // The same-node `offer` failed here for `why`: logs that `primary` is taken from now on, and
  // remembers it.
  void PassOver(const Offer& offer, const Offer& primary, const std::string& why);

 private:
  const std::string node_;
  const std::string who_;
  std::set<std::string> failed_;  // endpoints of the offers passed over
};

}  // namespace rlmesh::transport
