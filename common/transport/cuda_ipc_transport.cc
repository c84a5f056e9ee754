#include "common/transport/cuda_ipc_transport.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>

#include "common/transport/control_channel.h"
#include "common/transport/cuda_status.h"
#include "common/transport/layout.h"
#include "common/transport/sender_hub.h"

namespace rlmesh::transport {

namespace {

std::string DeviceName(int device) { return "CUDA device " + std::to_string(device); }

Status CheckDevice(int device) {
  int count = 0;
  TRANSPORT_RETURN_IF_ERROR(Cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  if (count == 0) return UnavailableError("cudaGetDeviceCount: no CUDA device is visible");
  if (device < 0 || device >= count) {
    return InvalidArgumentError("device: expected 0.." + std::to_string(count - 1) + ", got " +
                                std::to_string(device));
  }
  return OkStatus();
}

// FNV-1a, a digest every build computes alike (std::hash may differ between the trainer's and
// a replica's binaries).
uint64_t Digest(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Random once per process: with the pid (a forked child inherits the token, not the pid) it
// tells a receiver that the sender shares its address space.
uint64_t ProcessToken() {
  static const uint64_t token = [] {
    std::random_device entropy;
    return static_cast<uint64_t>(entropy()) << 32 | entropy();
  }();
  return token;
}

uint64_t Address(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

constexpr uint64_t kNoAllocation = ~uint64_t{0};
constexpr size_t kHandleBytes = sizeof(cudaIpcMemHandle_t);

// What this backend's manifest carries in Manifest::segment: where each tensor's bytes are.
struct IpcTable {
  uint64_t node = 0;     // Digest(NodeId()) of the sender
  uint64_t process = 0;  // the sender's ProcessToken()
  uint64_t pid = 0;      // and pid
  struct Allocation {
    std::string handle;    // the cudaIpcMemHandle_t's bytes
    uint64_t address = 0;  // the sender's pointer, for a receiver in the sender's process
    uint64_t bytes = 0;
  };
  std::vector<Allocation> allocations;
  struct Place {
    uint64_t allocation = kNoAllocation;  // kNoAllocation for a tensor of no bytes
    uint64_t offset = 0;
  };
  std::vector<Place> tensors;  // one per tensor of the layout
};

constexpr size_t kTableHeader = 32;  // node, process, pid, allocation count
constexpr size_t kAllocationBytes = kHandleBytes + 16;
constexpr size_t kPlaceBytes = 16;

std::string EncodeTable(const IpcTable& table) {
  std::string out;
  AppendU64(&out, table.node);
  AppendU64(&out, table.process);
  AppendU64(&out, table.pid);
  AppendU64(&out, table.allocations.size());
  for (const auto& a : table.allocations) {
    out += a.handle;
    AppendU64(&out, a.address);
    AppendU64(&out, a.bytes);
  }
  AppendU64(&out, table.tensors.size());
  for (const auto& place : table.tensors) {
    AppendU64(&out, place.allocation);
    AppendU64(&out, place.offset);
  }
  return out;
}

// InvalidArgument unless `bytes` is a table for `layout` whose every tensor lies inside its
// allocation.
StatusOr<IpcTable> DecodeTable(const std::string& bytes, const Layout& layout) {
  // Sizes are checked before any read, so the reads below cannot run past the end.
  auto u64 = [&bytes](size_t pos) {
    uint64_t v = 0;
    ReadU64(bytes, pos, &v);
    return v;
  };
  const std::string size = std::to_string(bytes.size()) + " bytes";
  if (bytes.size() < kTableHeader + 8)
    return InvalidArgumentError("CUDA IPC table: expected at least 40 bytes, got " + size);
  const uint64_t allocations = u64(24);
  if (allocations > (bytes.size() - kTableHeader - 8) / kAllocationBytes) {
    return InvalidArgumentError("CUDA IPC table: " + std::to_string(allocations) +
                                " allocations do not fit in its " + size);
  }
  const size_t places_at = kTableHeader + allocations * kAllocationBytes;
  const uint64_t places = u64(places_at);
  if (places != layout.tensors.size() || bytes.size() != places_at + 8 + places * kPlaceBytes) {
    return InvalidArgumentError("CUDA IPC table: expected the places of " +
                                std::to_string(layout.tensors.size()) + " tensors, found " +
                                std::to_string(places) + " in " + size);
  }
  IpcTable table;
  table.node = u64(0);
  table.process = u64(8);
  table.pid = u64(16);
  for (size_t a = 0; a < allocations; ++a) {
    const size_t at = kTableHeader + a * kAllocationBytes;
    table.allocations.push_back(
        {bytes.substr(at, kHandleBytes), u64(at + kHandleBytes), u64(at + kHandleBytes + 8)});
  }
  for (size_t i = 0; i < places; ++i) {
    const size_t at = places_at + 8 + i * kPlaceBytes;
    const IpcTable::Place place{u64(at), u64(at + 8)};
    table.tensors.push_back(place);
    const size_t n = layout.tensors[i].NumBytes();
    if (n == 0) continue;
    if (place.allocation >= allocations ||
        place.offset > table.allocations[place.allocation].bytes ||
        n > table.allocations[place.allocation].bytes - place.offset) {
      return InvalidArgumentError(
          "CUDA IPC table: tensor \"" + layout.tensors[i].name + "\" (" + std::to_string(n) +
          " bytes at offset " + std::to_string(place.offset) + " of allocation " +
          std::to_string(place.allocation) + ") lies outside the allocations named");
    }
  }
  return table;
}

// cuMemGetAddressRange of the driver the runtime loaded, looked up rather than linked so that
// the programs still start (and say why they cannot work) where libcuda is missing. Null when
// the driver lacks it.
PFN_cuMemGetAddressRange_v3020 AddressRangeFn() {
  static const PFN_cuMemGetAddressRange_v3020 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t rc = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 3020,
                                                      cudaEnableDefault, &found);
#else
    cudaError_t rc = cudaGetDriverEntryPoint("cuMemGetAddressRange", &p, cudaEnableDefault, &found);
#endif
    if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(p);
  }();
  return fn;
}

// The device allocation holding [ptr, ptr + bytes): its base and size, or nothing when the
// memory is not plain device memory (host, managed) or the driver does not know it.
struct Span {
  const char* base = nullptr;
  size_t bytes = 0;
};
std::optional<Span> AllocationOf(const void* ptr, size_t bytes) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the error for the caller's next launch check
    return std::nullopt;
  }
  const auto range = AddressRangeFn();
  if (attributes.type != cudaMemoryTypeDevice || range == nullptr) return std::nullopt;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, static_cast<CUdeviceptr>(Address(ptr))) != CUDA_SUCCESS)
    return std::nullopt;
  const uint64_t p = Address(ptr);
  if (p < base || p - base > size || bytes > size - (p - base)) return std::nullopt;
  return Span{static_cast<const char*>(ptr) - (p - base), size};
}

// Publishes by handing out handles to the caller's tensors (see the header).
class CudaIpcSender : public HubSender {
 public:
  CudaIpcSender(std::unique_ptr<SenderHub> hub, int device)
      : HubSender(std::move(hub)), device_(device) {
    hub_->Start([this](Transfer& transfer) { CatchUp(transfer); });
  }
  ~CudaIpcSender() override {
    hub_.reset();  // close the receivers' connections before their memory goes
    (void)cudaSetDevice(device_);
    retired_.push_back(spill_);
    FreeRetired();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  StatusOr<PublishReport> Publish(uint64_t version,
                                  const std::vector<ConstTensorView>& tensors) override {
    const auto start = Clock::now();
    TRANSPORT_ASSIGN_OR_RETURN(Layout layout, Layout::Of(tensors, hub_->options().bucket_bytes));
    for (const auto& t : tensors) {
      if (t.data == nullptr && t.meta.NumBytes() > 0)
        return InvalidArgumentError("tensor \"" + t.meta.name + "\": data is null");
    }
    auto lock = hub_->LockTransfers();
    TRANSPORT_RETURN_IF_ERROR(CheckNewVersion(version, current_));
    const std::string what = "publishing weight version " + std::to_string(version);
    TRANSPORT_RETURN_IF_ERROR(
        Cuda(cudaSetDevice(device_), what + ": selecting " + DeviceName(device_)));
    TRANSPORT_RETURN_IF_ERROR(Cuda(
        cudaDeviceSynchronize(),
        what + ": waiting for the work on " + DeviceName(device_) + " that writes the tensors"));
    auto table = Export(tensors);
    if (!table.ok()) return Annotate(table.status(), what);
    current_ = Manifest{version, EncodeTable(*table), 0, std::move(layout)};
    hub_->SetHaveCurrent();
    Transfer transfer = hub_->BeginTransfer(version);
    Send(transfer);
    FreeRetired();
    return hub_->FinishPublish(transfer, current_->layout, start);
  }

 private:
  // Transfer lock held: the manifest to every member, then their acknowledgements.
  void Send(Transfer& transfer) {
    hub_->SendToAll(transfer, MessageType::kManifest, EncodeManifest(*current_));
    hub_->CollectAcks(transfer);
  }

  // Transfer lock held: joiners get the current version from the same tensors and handles.
  void CatchUp(Transfer& transfer) {
    if (!current_) return;  // the export buffer was overwritten by a Publish that failed
    transfer.version = current_->version;
    Send(transfer);
  }

  // The places of `tensors` for the receivers: an exported allocation (one handle however many
  // tensors it holds) where the memory allows, else the export buffer.
  StatusOr<IpcTable> Export(const std::vector<ConstTensorView>& tensors) {
    IpcTable table;
    table.node = Digest(NodeId());
    table.process = ProcessToken();
    table.pid = static_cast<uint64_t>(::getpid());
    table.tensors.resize(tensors.size());
    std::map<const char*, uint64_t> by_base;  // allocation base -> index in table.allocations
    std::vector<size_t> spilled;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t bytes = tensors[i].meta.NumBytes();
      if (bytes == 0) continue;
      const std::optional<Span> span = AllocationOf(tensors[i].data, bytes);
      if (!span) {
        spilled.push_back(i);
        continue;
      }
      auto it = by_base.find(span->base);
      if (it == by_base.end()) {
        cudaIpcMemHandle_t handle;
        if (cudaIpcGetMemHandle(&handle, const_cast<char*>(span->base)) != cudaSuccess) {
          (void)cudaGetLastError();  // a pool or cuMemCreate allocation: not exportable
          spilled.push_back(i);
          continue;
        }
        it = by_base.emplace(span->base, table.allocations.size()).first;
        table.allocations.push_back(
            {std::string(reinterpret_cast<const char*>(&handle), kHandleBytes), Address(span->base),
             span->bytes});
      }
      table.tensors[i] = {it->second, Address(tensors[i].data) - Address(span->base)};
    }
    if (!spilled.empty()) TRANSPORT_RETURN_IF_ERROR(Spill(tensors, spilled, &table));
    return table;
  }

  // Copies tensors[spilled] into the export buffer and places them there. A buffer that grows is
  // replaced by a new one; the old one is freed after this Publish, when no receiver maps it.
  Status Spill(const std::vector<ConstTensorView>& tensors, const std::vector<size_t>& spilled,
               IpcTable* table) {
    std::vector<size_t> offsets;
    size_t total = 0;
    for (size_t i : spilled) {
      total = (total + kLayoutAlignment - 1) / kLayoutAlignment * kLayoutAlignment;
      offsets.push_back(total);
      total += tensors[i].meta.NumBytes();
    }
    current_.reset();  // from here on the buffer no longer holds the current version whole
    const std::string where = " on " + DeviceName(device_);
    if (spill_bytes_ < total) {
      retired_.push_back(spill_);
      spill_ = nullptr;
      spill_bytes_ = 0;
      TRANSPORT_RETURN_IF_ERROR(Cuda(cudaMalloc(&spill_, total),
                                     "allocating the " + std::to_string(total) +
                                         "-byte export buffer for tensors whose memory CUDA IPC "
                                         "cannot share" +
                                         where));
      TRANSPORT_RETURN_IF_ERROR(
          Cuda(cudaIpcGetMemHandle(&spill_handle_, spill_), "exporting the export buffer" + where));
      spill_bytes_ = total;
    }
    if (stream_ == nullptr) {
      TRANSPORT_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                     "creating a stream" + where));
    }
    Status copied;
    for (size_t k = 0; copied.ok() && k < spilled.size(); ++k) {
      const ConstTensorView& t = tensors[spilled[k]];
      copied = Cuda(cudaMemcpyAsync(static_cast<char*>(spill_) + offsets[k], t.data,
                                    t.meta.NumBytes(), cudaMemcpyDefault, stream_),
                    "copying tensor \"" + t.meta.name + "\" into the export buffer" + where);
    }
    Status synced = Cuda(cudaStreamSynchronize(stream_),
                         "waiting for the copies into the export buffer" + where);
    TRANSPORT_RETURN_IF_ERROR(copied);
    TRANSPORT_RETURN_IF_ERROR(synced);
    const uint64_t index = table->allocations.size();
    table->allocations.push_back(
        {std::string(reinterpret_cast<const char*>(&spill_handle_), kHandleBytes), Address(spill_),
         spill_bytes_});
    for (size_t k = 0; k < spilled.size(); ++k) table->tensors[spilled[k]] = {index, offsets[k]};
    return OkStatus();
  }

  void FreeRetired() {
    for (void* p : retired_) {
      if (p == nullptr) continue;
      Status freed = Cuda(cudaFree(p), "freeing an old export buffer on " + DeviceName(device_));
      if (!freed.ok()) std::fprintf(stderr, "cuda_ipc sender: %s\n", freed.message().c_str());
    }
    retired_.clear();
  }

  const int device_;
  // Guarded by the hub's transfer lock.
  std::optional<Manifest> current_;
  void* spill_ = nullptr;  // the export buffer
  size_t spill_bytes_ = 0;
  cudaIpcMemHandle_t spill_handle_{};
  std::vector<void*> retired_;  // export buffers to free once no receiver maps them
  cudaStream_t stream_ = nullptr;
};

// The sender's allocations mapped into this process on one device, by handle. One stays open
// while the versions name it, so a trainer that updates its tensors in place is mapped once.
class Mappings {
 public:
  explicit Mappings(int device) : device_(device) {}
  ~Mappings() { CloseAll(); }
  Mappings(const Mappings&) = delete;
  Mappings& operator=(const Mappings&) = delete;

  // A new version: what it does not Open() is closed by CloseUnused().
  void BeginVersion() {
    for (auto& entry : open_) entry.second.used = false;
  }
  StatusOr<const char*> Open(const IpcTable::Allocation& allocation) {
    auto it = open_.find(allocation.handle);
    if (it == open_.end()) {
      cudaIpcMemHandle_t handle;
      std::memcpy(&handle, allocation.handle.data(), kHandleBytes);
      void* ptr = nullptr;
      TRANSPORT_RETURN_IF_ERROR(Cuda(
          cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess),
          "mapping the sender's " + std::to_string(allocation.bytes) + "-byte allocation on " +
              DeviceName(device_) +
              " (cuda_ipc needs the receiver on the sender's node, allowed to map its memory: the "
              "same IPC namespace, and peer access when the GPUs differ)"));
      it = open_.emplace(allocation.handle, Mapping{ptr, false}).first;
    }
    it->second.used = true;
    return static_cast<const char*>(it->second.ptr);
  }
  void CloseUnused() { Close(/*all=*/false); }
  void CloseAll() { Close(/*all=*/true); }

 private:
  struct Mapping {
    void* ptr = nullptr;
    bool used = false;
  };
  void Close(bool all) {
    for (auto it = open_.begin(); it != open_.end();) {
      if (!all && it->second.used) {
        ++it;
        continue;
      }
      // A failure leaks a mapping but loses no weights: say so and go on.
      Status closed = Cuda(cudaIpcCloseMemHandle(it->second.ptr),
                           "unmapping the sender's memory on " + DeviceName(device_));
      if (!closed.ok()) std::fprintf(stderr, "cuda_ipc receiver: %s\n", closed.message().c_str());
      it = open_.erase(it);
    }
  }

  const int device_;
  std::map<std::string, Mapping> open_;  // by handle bytes
};

class CudaIpcReceiver : public WeightReceiver {
 public:
  CudaIpcReceiver(const ReceiverOptions& options, std::unique_ptr<Connection> connection)
      : options_(options), connection_(std::move(connection)), mappings_(options.device) {}
  ~CudaIpcReceiver() override {
    (void)cudaSetDevice(options_.device);
    mappings_.CloseAll();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  StatusOr<ReceivedVersion> ReceiveNext(const DestinationFn& destination, Duration wait) override {
    if (!connection_)
      return UnavailableError("weight sender " + options_.endpoint + ": connection lost earlier");
    auto message =
        connection_->Receive(Clock::now() + std::chrono::duration_cast<Clock::duration>(wait));
    if (!message.ok()) {
      if (message.status().code() != Code::kDeadlineExceeded) return Lost(message.status());
      return DeadlineExceededError("no new weight version from " + options_.endpoint +
                                   " within the wait");
    }
    if (message->type != MessageType::kManifest) {
      return Lost(InvalidArgumentError("expected a manifest, got message type " +
                                       std::to_string(static_cast<uint32_t>(message->type))));
    }
    const auto start = Clock::now();
    auto manifest = DecodeManifest(message->payload);
    if (!manifest.ok()) return Lost(manifest.status());
    auto table = DecodeTable(manifest->segment, manifest->layout);
    if (!table.ok()) return Lost(table.status());
    const std::string version = std::to_string(manifest->version);

    // Errors from here on fail this version only; the acknowledgement carries them.
    Status error;
    if (have_version_ && manifest->version <= last_version_) {
      error = FailedPreconditionError("version " + version + " arrived after version " +
                                      std::to_string(last_version_));
    }
    const Layout& layout = manifest->layout;
    std::vector<char*> destinations(layout.tensors.size(), nullptr);
    for (size_t i = 0; error.ok() && i < layout.tensors.size(); ++i) {
      auto d = destination(layout.tensors[i]);
      if (!d.ok()) {
        error = d.status();
      } else {
        destinations[i] = static_cast<char*>(*d);
      }
    }
    if (error.ok()) error = Copy(*manifest, *table, destinations);
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(options_.transfer_timeout);
    Status sent =
        connection_->Send(MessageType::kAck, EncodeAck(manifest->version, error), deadline);
    if (!sent.ok()) return Lost(sent);
    if (!error.ok()) return Annotate(error, "receiving weight version " + version);
    have_version_ = true;
    last_version_ = manifest->version;
    ReceivedVersion received = Received(*manifest, start);
    received.path = "cuda_ipc";
    return received;
  }

 private:
  // Copies every tensor from the sender's memory into `destinations` and waits for the copies.
  Status Copy(const Manifest& manifest, const IpcTable& table,
              const std::vector<char*>& destinations) {
    const std::string device = DeviceName(options_.device);
    TRANSPORT_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device), "selecting " + device));
    if (stream_ == nullptr) {
      TRANSPORT_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                     "creating a copy stream on " + device));
    }
    const bool local =
        table.process == ProcessToken() && table.pid == static_cast<uint64_t>(::getpid());
    if (!local && table.node != Digest(NodeId())) {
      return FailedPreconditionError(
          "the sender runs on another node (its kernel boot id differs from this one's); the "
          "cuda_ipc transport needs the receiver on the sender's node");
    }
    mappings_.BeginVersion();
    std::vector<const char*> bases(table.allocations.size(), nullptr);
    for (size_t a = 0; a < bases.size(); ++a) {
      if (local) {
        // The sender's own pointer, which is valid here: it crossed the wire as an integer.
        bases[a] = reinterpret_cast<const char*>(  // NOLINT(performance-no-int-to-ptr)
            static_cast<uintptr_t>(table.allocations[a].address));
      } else {
        TRANSPORT_ASSIGN_OR_RETURN(bases[a], mappings_.Open(table.allocations[a]));
      }
    }
    const Layout& layout = manifest.layout;
    Status copied;
    for (size_t i = 0; copied.ok() && i < layout.tensors.size(); ++i) {
      const size_t bytes = layout.tensors[i].NumBytes();
      if (bytes == 0) continue;
      const IpcTable::Place& place = table.tensors[i];
      copied = Cuda(cudaMemcpyAsync(destinations[i], bases[place.allocation] + place.offset, bytes,
                                    cudaMemcpyDefault, stream_),
                    "copying tensor \"" + layout.tensors[i].name + "\" (" + std::to_string(bytes) +
                        " bytes) from the sender's memory to " + device);
    }
    // Also after a failed enqueue: the copies queued must end before the acknowledgement lets
    // the sender change its tensors.
    Status synced = Cuda(
        cudaStreamSynchronize(stream_),
        "waiting for the copies of version " + std::to_string(manifest.version) + " on " + device);
    TRANSPORT_RETURN_IF_ERROR(copied);
    TRANSPORT_RETURN_IF_ERROR(synced);
    mappings_.CloseUnused();
    return OkStatus();
  }

  // The connection is out of step or gone: close it and the mappings of the sender's memory,
  // which it may free now; later calls fail fast.
  Status Lost(const Status& status) {
    connection_.reset();
    (void)cudaSetDevice(options_.device);
    mappings_.CloseAll();
    return UnavailableError("weight sender " + options_.endpoint + ": " + status.message());
  }

  const ReceiverOptions options_;
  std::unique_ptr<Connection> connection_;
  Mappings mappings_;
  cudaStream_t stream_ = nullptr;
  bool have_version_ = false;
  uint64_t last_version_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<WeightSender>> CreateCudaIpcSender(const SenderOptions& options) {
  TRANSPORT_RETURN_IF_ERROR(CheckDevice(options.device));
  TRANSPORT_RETURN_IF_ERROR(
      Cuda(cudaSetDevice(options.device), "selecting " + DeviceName(options.device)));
  if (AddressRangeFn() == nullptr) {
    return UnavailableError(
        "the CUDA driver does not provide cuMemGetAddressRange, which the cuda_ipc sender needs "
        "to export its tensors' allocations");
  }
  TRANSPORT_ASSIGN_OR_RETURN(auto hub, SenderHub::Create(options));
  return std::unique_ptr<WeightSender>(new CudaIpcSender(std::move(hub), options.device));
}

StatusOr<std::unique_ptr<WeightReceiver>> CreateCudaIpcReceiver(const ReceiverOptions& options) {
  TRANSPORT_RETURN_IF_ERROR(CheckDevice(options.device));
  TRANSPORT_ASSIGN_OR_RETURN(auto connection, DialSender(options));
  return std::unique_ptr<WeightReceiver>(new CudaIpcReceiver(options, std::move(connection)));
}

}  // namespace rlmesh::transport
