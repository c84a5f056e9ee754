#include "common/transport/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "common/transport/control_channel.h"
#include "common/transport/layout.h"
#include "common/transport/nccl_status.h"
#include "common/transport/sender_hub.h"

namespace rlmesh::transport {

namespace {

StatusOr<ncclComm_t> InitComm(const ncclUniqueId& id, int rank, int world,
                              Clock::time_point deadline,
                              const std::function<Status()>& cancelled) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  const std::string what =
      "NCCL communicator init (rank " + std::to_string(rank) + " of " + std::to_string(world) + ")";
  if (rc != ncclSuccess && rc != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return Nccl(rc, nullptr, what);
  }
  Status status = WaitNccl(comm, nullptr, deadline, cancelled, what);
  if (!status.ok()) {
    ncclCommAbort(comm);
    return status;
  }
  return comm;
}

// Device memory and streams of one side: two bucket buffers, a copy stream and a comm stream,
// and per buffer an event "bytes ready" and an event "buffer free again".
class DeviceBuckets {
 public:
  ~DeviceBuckets() {
    for (int b = 0; b < 2; ++b) {
      if (buffer_[b] != nullptr) cudaFree(buffer_[b]);
      if (filled_[b] != nullptr) cudaEventDestroy(filled_[b]);
      if (drained_[b] != nullptr) cudaEventDestroy(drained_[b]);
    }
    if (copy_ != nullptr) cudaStreamDestroy(copy_);
    if (comm_ != nullptr) cudaStreamDestroy(comm_);
  }
  Status Init(int device, size_t bytes) {
    TRANSPORT_RETURN_IF_ERROR(
        Cuda(cudaSetDevice(device), "selecting CUDA device " + std::to_string(device)));
    if (bytes_ >= bytes) return OkStatus();
    for (int b = 0; b < 2; ++b) {
      if (buffer_[b] != nullptr) cudaFree(buffer_[b]);
      buffer_[b] = nullptr;
      TRANSPORT_RETURN_IF_ERROR(
          Cuda(cudaMalloc(&buffer_[b], bytes),
               "allocating a " + std::to_string(bytes) + "-byte device bucket"));
      if (filled_[b] == nullptr)
        TRANSPORT_RETURN_IF_ERROR(
            Cuda(cudaEventCreateWithFlags(&filled_[b], cudaEventDisableTiming), "event"));
      if (drained_[b] == nullptr)
        TRANSPORT_RETURN_IF_ERROR(
            Cuda(cudaEventCreateWithFlags(&drained_[b], cudaEventDisableTiming), "event"));
    }
    if (copy_ == nullptr)
      TRANSPORT_RETURN_IF_ERROR(
          Cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "stream"));
    if (comm_ == nullptr)
      TRANSPORT_RETURN_IF_ERROR(
          Cuda(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking), "stream"));
    bytes_ = bytes;
    return OkStatus();
  }
  char* buffer(int b) const { return static_cast<char*>(buffer_[b]); }
  cudaEvent_t filled(int b) const { return filled_[b]; }
  cudaEvent_t drained(int b) const { return drained_[b]; }
  cudaStream_t copy_stream() const { return copy_; }
  cudaStream_t comm_stream() const { return comm_; }

 private:
  size_t bytes_ = 0;
  void* buffer_[2] = {nullptr, nullptr};
  cudaEvent_t filled_[2] = {nullptr, nullptr};
  cudaEvent_t drained_[2] = {nullptr, nullptr};
  cudaStream_t copy_ = nullptr;
  cudaStream_t comm_ = nullptr;
};

// Moves every bucket of `layout` through the two device buffers. The sender packs from
// `tensors` before each broadcast; a receiver unpacks into `destinations` after it (or only
// takes part when `destinations` is empty, to keep the others going after a local error).
Status RunBuckets(const Layout& layout, DeviceBuckets& dev, ncclComm_t comm, bool is_sender,
                  const std::vector<const char*>& sources, const std::vector<char*>& destinations) {
  for (size_t k = 0; k < layout.NumBuckets(); ++k) {
    const int b = static_cast<int>(k % 2);
    const size_t begin = layout.BucketBegin(k), end = layout.BucketEnd(k);
    const auto pieces = layout.Pieces(begin, end);
    if (is_sender) {
      // Wait until the broadcast that last used this buffer is done, then pack.
      if (k >= 2)
        TRANSPORT_RETURN_IF_ERROR(
            Cuda(cudaStreamWaitEvent(dev.copy_stream(), dev.drained(b), 0), "wait"));
      for (const auto& p : pieces) {
        TRANSPORT_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(dev.buffer(b) + (p.flat_offset - begin),
                                                       sources[p.tensor] + p.tensor_offset, p.bytes,
                                                       cudaMemcpyDeviceToDevice, dev.copy_stream()),
                                       "packing a bucket"));
      }
      TRANSPORT_RETURN_IF_ERROR(Cuda(cudaEventRecord(dev.filled(b), dev.copy_stream()), "record"));
      TRANSPORT_RETURN_IF_ERROR(
          Cuda(cudaStreamWaitEvent(dev.comm_stream(), dev.filled(b), 0), "wait"));
    } else if (k >= 2) {
      // Wait until the unpacking of the bucket that last used this buffer is done.
      TRANSPORT_RETURN_IF_ERROR(
          Cuda(cudaStreamWaitEvent(dev.comm_stream(), dev.drained(b), 0), "wait"));
    }
    TRANSPORT_RETURN_IF_ERROR(Nccl(ncclBroadcast(dev.buffer(b), dev.buffer(b), end - begin,
                                                 ncclUint8, 0, comm, dev.comm_stream()),
                                   comm, "ncclBroadcast of bucket " + std::to_string(k)));
    if (is_sender) {
      TRANSPORT_RETURN_IF_ERROR(Cuda(cudaEventRecord(dev.drained(b), dev.comm_stream()), "record"));
    } else {
      TRANSPORT_RETURN_IF_ERROR(Cuda(cudaEventRecord(dev.filled(b), dev.comm_stream()), "record"));
      TRANSPORT_RETURN_IF_ERROR(
          Cuda(cudaStreamWaitEvent(dev.copy_stream(), dev.filled(b), 0), "wait"));
      for (const auto& p : pieces) {
        if (destinations.empty()) break;
        TRANSPORT_RETURN_IF_ERROR(
            Cuda(cudaMemcpyAsync(destinations[p.tensor] + p.tensor_offset,
                                 dev.buffer(b) + (p.flat_offset - begin), p.bytes,
                                 cudaMemcpyDeviceToDevice, dev.copy_stream()),
                 "unpacking a bucket"));
      }
      TRANSPORT_RETURN_IF_ERROR(Cuda(cudaEventRecord(dev.drained(b), dev.copy_stream()), "record"));
    }
  }
  return OkStatus();
}

class NcclSender : public HubSender {
 public:
  NcclSender(std::unique_ptr<SenderHub> hub, int device)
      : HubSender(std::move(hub)), device_(device) {
    hub_->Start([this](Transfer& transfer) { CatchUp(transfer); });
  }
  ~NcclSender() override {
    hub_.reset();
    if (comm_ != nullptr) ncclCommAbort(comm_);
  }

  StatusOr<PublishReport> Publish(uint64_t version,
                                  const std::vector<ConstTensorView>& tensors) override {
    const auto start = Clock::now();
    TRANSPORT_ASSIGN_OR_RETURN(Layout layout, Layout::Of(tensors, hub_->options().bucket_bytes));
    auto lock = hub_->LockTransfers();
    TRANSPORT_RETURN_IF_ERROR(CheckNewVersion(version, current_));
    TRANSPORT_RETURN_IF_ERROR(dev_.Init(device_, hub_->options().bucket_bytes));
    current_ = Manifest{version, "", 0, std::move(layout)};
    sources_.clear();
    for (const auto& t : tensors) sources_.push_back(static_cast<const char*>(t.data));
    hub_->SetHaveCurrent();
    Transfer transfer = hub_->BeginTransfer(version);
    Send(transfer);
    return hub_->FinishPublish(transfer, current_->layout, start);
  }

 private:
  void CatchUp(Transfer& transfer) {
    transfer.version = current_->version;
    if (!dev_.Init(device_, hub_->options().bucket_bytes).ok()) return;
    Send(transfer);
  }

  // Transfer lock held. Builds the communicator for the live members if they changed, sends
  // the manifest, broadcasts, collects acks; after a failure that removed a member, tries again
  // with the survivors until the deadline.
  void Send(Transfer& transfer) {
    while (transfer.Alive() > 0) {
      const int before = transfer.Alive();
      Status status = Attempt(transfer);
      if (status.ok()) {
        hub_->CollectAcks(transfer);
        return;
      }
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
      comm_members_.clear();
      hub_->SendToAll(transfer, MessageType::kAbort, "");
      hub_->DropClosed(transfer);
      // Members whose acknowledgement is already here finished before the abort: done.
      for (auto& m : transfer.members) {
        if (m.failed || m.acked || !m.peer->connection->Readable()) continue;
        auto message = m.peer->connection->Receive(transfer.deadline);
        auto ack = message.ok() && message->type == MessageType::kAck
                       ? DecodeAck(message->payload)
                       : StatusOr<std::pair<uint64_t, Status>>(InvalidArgumentError("no ack"));
        if (ack.ok() && ack->first == transfer.version && ack->second.ok()) {
          m.acked = true;
        } else {
          transfer.Fail(m,
                        message.ok() ? "expected an acknowledgement" : message.status().message(),
                        /*drop=*/true);
        }
      }
      int pending = 0;
      for (const auto& m : transfer.members) pending += !m.failed && !m.acked;
      if (pending == 0) return;
      if (transfer.Alive() >= before || Clock::now() > transfer.deadline) {
        for (auto& m : transfer.members) {
          if (!m.acked) transfer.Fail(m, status.message(), /*drop=*/false);
        }
        return;
      }
    }
  }

  Status Attempt(Transfer& transfer) {
    std::vector<Peer*> live;
    for (const auto& m : transfer.members) {
      if (!m.failed && !m.acked) live.push_back(m.peer);
    }
    auto cancelled = [&]() -> Status {
      return hub_->DropClosed(transfer) ? UnavailableError("a receiver closed its connection")
                                        : OkStatus();
    };
    TRANSPORT_RETURN_IF_ERROR(
        Cuda(cudaSetDevice(device_), "selecting CUDA device " + std::to_string(device_)));
    if (comm_ == nullptr || live != comm_members_) {
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
      ncclUniqueId id;
      TRANSPORT_RETURN_IF_ERROR(Nccl(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId"));
      const int world = static_cast<int>(live.size()) + 1;
      int rank = 1;
      for (auto& m : transfer.members) {
        if (m.failed || m.acked) continue;
        std::string setup(reinterpret_cast<const char*>(&id), sizeof(id));
        AppendU64(&setup, static_cast<uint64_t>(rank++));
        AppendU64(&setup, static_cast<uint64_t>(world));
        Status sent = m.peer->connection->Send(MessageType::kNcclSetup, setup, transfer.deadline);
        if (!sent.ok()) {
          transfer.Fail(m, "send failed: " + sent.message(), /*drop=*/true);
          return sent;
        }
      }
      TRANSPORT_ASSIGN_OR_RETURN(comm_, InitComm(id, 0, world, transfer.deadline, cancelled));
      comm_members_ = live;
    }
    const std::string manifest = EncodeManifest(*current_);
    for (auto& m : transfer.members) {
      if (m.failed || m.acked) continue;
      Status sent = m.peer->connection->Send(MessageType::kManifest, manifest, transfer.deadline);
      if (!sent.ok()) {
        transfer.Fail(m, "send failed: " + sent.message(), /*drop=*/true);
        return sent;
      }
    }
    TRANSPORT_RETURN_IF_ERROR(
        RunBuckets(current_->layout, dev_, comm_, /*is_sender=*/true, sources_, {}));
    TRANSPORT_RETURN_IF_ERROR(Cuda(cudaEventRecord(dev_.drained(0), dev_.comm_stream()), "record"));
    return WaitNccl(comm_, dev_.drained(0), transfer.deadline, cancelled,
                    "broadcast of version " + std::to_string(current_->version));
  }

  const int device_;
  // Guarded by the hub's transfer lock.
  DeviceBuckets dev_;
  ncclComm_t comm_ = nullptr;
  std::vector<Peer*> comm_members_;
  std::optional<Manifest> current_;
  std::vector<const char*> sources_;
};

class NcclReceiver : public WeightReceiver {
 public:
  NcclReceiver(const ReceiverOptions& options, std::unique_ptr<Connection> connection)
      : options_(options), connection_(std::move(connection)) {}
  ~NcclReceiver() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
  }

  StatusOr<ReceivedVersion> ReceiveNext(const DestinationFn& destination, Duration wait) override {
    if (!connection_)
      return UnavailableError("weight sender " + options_.endpoint + ": connection lost earlier");
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
    bool started = false;
    auto start = Clock::now();
    while (true) {
      auto message = connection_->Receive(deadline);
      if (!message.ok()) {
        if (message.status().code() == Code::kDeadlineExceeded && !started) {
          return DeadlineExceededError("no new weight version from " + options_.endpoint +
                                       " within the wait");
        }
        return Lost(message.status());
      }
      if (!started) {
        started = true;
        start = Clock::now();
        deadline = start + std::chrono::duration_cast<Clock::duration>(options_.transfer_timeout);
      }
      switch (message->type) {
        case MessageType::kNcclSetup: {
          TRANSPORT_RETURN_IF_ERROR(Setup(message->payload, deadline));
          break;
        }
        case MessageType::kAbort:
          // The sender gave up on this communicator (a peer died); it sends the version again.
          if (comm_ != nullptr) ncclCommAbort(comm_);
          comm_ = nullptr;
          break;
        case MessageType::kManifest: {
          auto result = Receive(message->payload, destination, deadline, start);
          if (result.ok() || result.status().code() != Code::kAborted) return result;
          if (repeated_) {  // a version we already had: keep waiting for a new one
            repeated_ = false;
            started = false;
            deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
          }
          break;  // aborted by the sender: wait for the retry
        }
        default:
          return Lost(InvalidArgumentError("unexpected message type " +
                                           std::to_string(static_cast<uint32_t>(message->type))));
      }
    }
  }

 private:
  Status Setup(const std::string& payload, Clock::time_point deadline) {
    uint64_t rank = 0, world = 0;
    if (payload.size() != sizeof(ncclUniqueId) + 16 ||
        !ReadU64(payload, sizeof(ncclUniqueId), &rank) ||
        !ReadU64(payload, sizeof(ncclUniqueId) + 8, &world)) {
      return Lost(InvalidArgumentError("NCCL setup: expected " +
                                       std::to_string(sizeof(ncclUniqueId) + 16) + " bytes, got " +
                                       std::to_string(payload.size())));
    }
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    ncclUniqueId id;
    std::memcpy(&id, payload.data(), sizeof(id));
    TRANSPORT_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device),
                                   "selecting CUDA device " + std::to_string(options_.device)));
    auto comm = InitComm(id, static_cast<int>(rank), static_cast<int>(world), deadline,
                         [this] { return Interrupted(); });
    if (!comm.ok())
      return comm.status().code() == Code::kAborted ? OkStatus() : Lost(comm.status());
    comm_ = *comm;
    return OkStatus();
  }

  // Aborted when the sender sent kAbort (consumed here), Unavailable when it is gone.
  Status Interrupted() {
    if (!connection_->Readable()) return OkStatus();
    if (connection_->PeerClosed()) return UnavailableError("the sender closed the connection");
    auto message = connection_->Receive(Clock::now() + std::chrono::seconds(5));
    if (!message.ok()) return message.status();
    if (message->type == MessageType::kAbort)
      return AbortedError("the sender aborted the transfer");
    return InvalidArgumentError("unexpected message type " +
                                std::to_string(static_cast<uint32_t>(message->type)) +
                                " during a broadcast");
  }

  StatusOr<ReceivedVersion> Receive(const std::string& payload, const DestinationFn& destination,
                                    Clock::time_point deadline, Clock::time_point start) {
    auto manifest = DecodeManifest(payload);
    if (!manifest.ok()) return Lost(manifest.status());
    if (comm_ == nullptr)
      return Lost(FailedPreconditionError("manifest arrived before the NCCL setup"));
    const Layout& layout = manifest->layout;
    Status error;
    // The same version again is the sender's retry after an abort that reached us after we had
    // finished: take part so the others get it, keep nothing, and do not report it as new.
    const bool repeat = have_version_ && manifest->version == last_version_;
    if (have_version_ && manifest->version < last_version_) {
      error = FailedPreconditionError("version " + std::to_string(manifest->version) +
                                      " arrived after version " + std::to_string(last_version_));
    }
    std::vector<char*> destinations(layout.tensors.size(), nullptr);
    for (size_t i = 0; error.ok() && !repeat && i < layout.tensors.size(); ++i) {
      auto d = destination(layout.tensors[i]);
      if (!d.ok()) {
        error = d.status();
      } else {
        destinations[i] = static_cast<char*>(*d);
      }
    }
    if (!error.ok() || repeat) destinations.clear();  // take part in the broadcast, keep nothing
    Status run = dev_.Init(options_.device, layout.bucket_bytes);
    if (run.ok()) run = RunBuckets(layout, dev_, comm_, /*is_sender=*/false, {}, destinations);
    if (run.ok()) run = Cuda(cudaEventRecord(dev_.drained(0), dev_.copy_stream()), "record");
    if (run.ok()) {
      run = WaitNccl(
          comm_, dev_.drained(0), deadline, [this] { return Interrupted(); },
          "receiving version " + std::to_string(manifest->version));
    }
    if (!run.ok()) {
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
      if (run.code() == Code::kAborted) return run;
      return Lost(run);
    }
    Status sent =
        connection_->Send(MessageType::kAck, EncodeAck(manifest->version, error), deadline);
    if (!sent.ok()) return Lost(sent);
    repeated_ = repeat;
    if (repeat) return AbortedError("repeat of version " + std::to_string(manifest->version));
    if (!error.ok())
      return Annotate(error, "receiving weight version " + std::to_string(manifest->version));
    have_version_ = true;
    last_version_ = manifest->version;
    ReceivedVersion received = Received(*manifest, start);
    received.path = "nccl";
    return received;
  }

  Status Lost(const Status& status) {
    connection_.reset();
    return UnavailableError("weight sender " + options_.endpoint + ": " + status.message());
  }

  const ReceiverOptions options_;
  std::unique_ptr<Connection> connection_;
  DeviceBuckets dev_;
  ncclComm_t comm_ = nullptr;
  bool have_version_ = false;
  bool repeated_ = false;
  uint64_t last_version_ = 0;
};

}  // namespace

StatusOr<int> VisibleCudaDevices() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) return Cuda(rc, "cudaGetDeviceCount");
  if (count == 0) return UnavailableError("cudaGetDeviceCount: no CUDA device is visible");
  return count;
}

StatusOr<int> VisibleCudaDevicesCountedInAChild() {
  int fds[2];
  if (::pipe(fds) != 0) return InternalError(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto devices = VisibleCudaDevices();
    // The count, or "-" and the reason.
    const std::string line =
        devices.ok() ? std::to_string(*devices) : "-" + devices.status().message();
    if (::write(fds[1], line.data(), line.size()) < 0) _exit(1);
    _exit(0);
  }
  ::close(fds[1]);
  std::string line;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) line.append(buffer, n);
  ::close(fds[0]);
  if (pid < 0) return InternalError(std::string("fork: ") + std::strerror(errno));
  ::waitpid(pid, nullptr, 0);
  if (line.empty()) return InternalError("the child counting the GPUs said nothing");
  if (line[0] == '-') return UnavailableError(line.substr(1));
  return std::stoi(line);
}

StatusOr<std::unique_ptr<WeightSender>> CreateNcclSender(const SenderOptions& options) {
  TRANSPORT_ASSIGN_OR_RETURN(int devices, VisibleCudaDevices());
  if (options.device < 0 || options.device >= devices) {
    return InvalidArgumentError("device: expected 0.." + std::to_string(devices - 1) + ", got " +
                                std::to_string(options.device));
  }
  TRANSPORT_ASSIGN_OR_RETURN(auto hub, SenderHub::Create(options));
  return std::unique_ptr<WeightSender>(new NcclSender(std::move(hub), options.device));
}

StatusOr<std::unique_ptr<WeightReceiver>> CreateNcclReceiver(const ReceiverOptions& options) {
  TRANSPORT_ASSIGN_OR_RETURN(int devices, VisibleCudaDevices());
  if (options.device < 0 || options.device >= devices) {
    return InvalidArgumentError("device: expected 0.." + std::to_string(devices - 1) + ", got " +
                                std::to_string(options.device));
  }
  TRANSPORT_ASSIGN_OR_RETURN(auto connection, DialSender(options));
  return std::unique_ptr<WeightReceiver>(new NcclReceiver(options, std::move(connection)));
}

}  // namespace rlmesh::transport
