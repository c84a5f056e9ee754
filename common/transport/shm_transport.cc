#include "common/transport/shm_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

#include "common/transport/control_channel.h"
#include "common/transport/layout.h"
#include "common/transport/sender_hub.h"
#include "common/transport/tcp_chain.h"

namespace rlmesh::transport {

namespace {

constexpr size_t kHeaderBytes = 256;

// The segment's header; the rest of the first 256 bytes is reserved.
struct SegmentHeader {
  std::atomic<uint64_t> version;  // the version whose bytes the segment holds or is receiving
};

std::string ErrnoText() { return std::strerror(errno); }

// A mapped POSIX shared-memory segment; the owner unlinks it on destruction.
class Segment {
 public:
  ~Segment() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    if (owner_) ::shm_unlink(name_.c_str());
  }
  static StatusOr<std::unique_ptr<Segment>> Create(const std::string& name, size_t bytes) {
    ::shm_unlink(name.c_str());  // a leftover of a crashed process with the same pid
    int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return UnavailableError("creating shared memory " + name + ": " + ErrnoText());
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      std::string error = "sizing shared memory " + name + " to " + std::to_string(bytes) +
                          " bytes: " + ErrnoText();
      ::close(fd);
      ::shm_unlink(name.c_str());
      return UnavailableError(error);
    }
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) {
      ::shm_unlink(name.c_str());
      return UnavailableError("mapping shared memory " + name + ": " + ErrnoText());
    }
    return std::unique_ptr<Segment>(new Segment(name, static_cast<char*>(base), bytes, true));
  }
  // Private memory of the same shape, for a sender whose receivers all take the TCP chain.
  static StatusOr<std::unique_ptr<Segment>> Private(size_t bytes) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      return UnavailableError("allocating " + std::to_string(bytes) +
                              " bytes for the sender's copy: " + ErrnoText());
    }
    return std::unique_ptr<Segment>(new Segment("", static_cast<char*>(base), bytes, false));
  }
  static StatusOr<std::unique_ptr<Segment>> Open(const std::string& name, size_t bytes) {
    int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
      return UnavailableError("opening the sender's shared memory " + name + ": " + ErrnoText() +
                              " (the shm transport needs the receiver on the sender's host)");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
      ::close(fd);
      return InvalidArgumentError("shared memory " + name + ": expected at least " +
                                  std::to_string(bytes) + " bytes, found " +
                                  std::to_string(st.st_size));
    }
    void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED)
      return UnavailableError("mapping shared memory " + name + ": " + ErrnoText());
    return std::unique_ptr<Segment>(new Segment(name, static_cast<char*>(base), bytes, false));
  }
  char* data() const { return base_ + kHeaderBytes; }
  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  size_t capacity() const { return bytes_ - kHeaderBytes; }
  const std::string& name() const { return name_; }
  size_t bytes() const { return bytes_; }

 private:
  Segment(std::string name, char* base, size_t bytes, bool owner)
      : name_(std::move(name)), base_(base), bytes_(bytes), owner_(owner) {}
  std::string name_;
  char* base_;
  size_t bytes_;
  bool owner_;
};

// Receivers may take a version over the TCP chain after taking no bytes for this long at most.
Duration StallLimit(Duration transfer_timeout, Duration handshake_timeout) {
  return std::min(transfer_timeout, handshake_timeout);
}

// Where each tensor of `layout` lies in `segment`.
std::vector<char*> TensorPointers(const Segment& segment, const Layout& layout) {
  std::vector<char*> ptrs;
  ptrs.reserve(layout.tensors.size());
  for (size_t offset : layout.offsets) ptrs.push_back(segment.data() + offset);
  return ptrs;
}

// The host-memory sender: the version is copied once into a segment (shared memory for "shm",
// private memory for "tcp"); receivers that map the shared segment copy from it, the others
// are served by the TCP chain (tcp_chain.h).
class ShmSender : public HubSender {
 public:
  ShmSender(std::unique_ptr<SenderHub> hub, bool shared)
      : HubSender(std::move(hub)), shared_(shared) {
    hub_->Start([this](Transfer& transfer) { CatchUp(transfer); });
  }
  ~ShmSender() override { hub_.reset(); }  // stop the accept thread before the segment goes

  StatusOr<PublishReport> Publish(uint64_t version,
                                  const std::vector<ConstTensorView>& tensors) override {
    std::vector<TensorMeta> metas;
    metas.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].data == nullptr && tensors[i].meta.NumBytes() > 0) {
        return InvalidArgumentError("tensor \"" + tensors[i].meta.name + "\": data is null");
      }
      metas.push_back(tensors[i].meta);
    }
    return PublishStream(version, metas,
                         [&](size_t i) -> StatusOr<const void*> { return tensors[i].data; });
  }

  bool streams() const override { return true; }

  // The bytes go into the segment bucket by bucket as `source` hands them over; receivers copy
  // each bucket once it is announced.
  StatusOr<PublishReport> PublishStream(uint64_t version, const std::vector<TensorMeta>& tensors,
                                        const TensorSource& source) override {
    const auto start = Clock::now();
    TRANSPORT_ASSIGN_OR_RETURN(Layout layout,
                               Layout::Create(tensors, hub_->options().bucket_bytes));
    auto lock = hub_->LockTransfers();
    TRANSPORT_RETURN_IF_ERROR(CheckNewVersion(version, current_));
    if (!segment_ || segment_->capacity() < layout.total_bytes) {
      // A new name: receivers still mapping the old segment keep it until they remap.
      // The random part keeps a receiver on another host from mapping a segment of the same
      // name there (pids repeat across hosts and containers).
      char nonce[17];
      std::snprintf(
          nonce, sizeof(nonce), "%016llx",
          static_cast<unsigned long long>(std::random_device{}()) << 32 | std::random_device{}());
      const std::string name = "/rlmesh-weights-" + std::to_string(::getpid()) + "-" +
                               std::to_string(++segments_) + "-" + nonce;
      current_.reset();
      segment_.reset();
      if (shared_) {
        TRANSPORT_ASSIGN_OR_RETURN(segment_,
                                   Segment::Create(name, kHeaderBytes + layout.total_bytes));
      } else {
        TRANSPORT_ASSIGN_OR_RETURN(segment_, Segment::Private(kHeaderBytes + layout.total_bytes));
      }
    }
    Manifest manifest{version, segment_->name(), segment_->bytes(), std::move(layout)};
    const Layout& l = manifest.layout;
    // From here on the segment no longer holds the previous version whole.
    current_.reset();
    segment_->header()->version.store(version, std::memory_order_release);
    Transfer transfer = hub_->BeginTransfer(version);
    hub_->SendToAll(transfer, MessageType::kManifest, EncodeManifest(manifest));
    ChainDistributor chain(*hub_, transfer, l, TensorPointers(*segment_, l), Stall());
    // An error from `source`: the receivers are told the version is abandoned.
    auto abandon = [&](const Status& error, size_t i) {
      hub_->SendToAll(transfer, MessageType::kAbort, "");
      std::vector<ReceiverOutcome> outcomes;
      hub_->FinishTransfer(transfer, &outcomes);
      return Status(error.code(), "tensor \"" + l.tensors[i].name + "\" of version " +
                                      std::to_string(version) + ": " + error.message());
    };
    size_t fetched = 0;  // tensors [0, fetched) were handed over by `source`
    const char* data = nullptr;
    for (size_t k = 0; k < l.NumBuckets(); ++k) {
      for (const auto& p : l.Pieces(l.BucketBegin(k), l.BucketEnd(k))) {
        while (fetched <= p.tensor) {
          StatusOr<const void*> got = source(fetched);
          Status error = got.status();
          if (error.ok() && *got == nullptr && l.tensors[fetched].NumBytes() > 0)
            error = InvalidArgumentError("data is null");
          if (!error.ok()) return abandon(error, fetched);
          data = static_cast<const char*>(*got);
          ++fetched;
        }
        std::memcpy(segment_->data() + p.flat_offset, data + p.tensor_offset, p.bytes);
      }
      if (shared_) {
        std::string ready;
        AppendU64(&ready, k + 1);
        hub_->SendToAll(transfer, MessageType::kBucketsReady, ready);
      }
      chain.Advance(l.BucketEnd(k));
    }
    // Tensors of no bytes lie in no bucket; their source is still asked, in order.
    for (; fetched < l.tensors.size(); ++fetched) {
      StatusOr<const void*> got = source(fetched);
      if (!got.ok()) return abandon(got.status(), fetched);
    }
    chain.Finish();
    current_ = std::move(manifest);
    hub_->SetHaveCurrent();
    return hub_->FinishPublish(transfer, current_->layout, start);
  }

 private:
  // Transfer lock held: the segment holds the current version, complete (unless abandoned).
  void CatchUp(Transfer& transfer) {
    if (!current_) return;  // the last version was abandoned half-written: wait for the next
    transfer.version = current_->version;
    hub_->SendToAll(transfer, MessageType::kManifest, EncodeManifest(*current_));
    if (shared_) {
      std::string ready;
      AppendU64(&ready, current_->layout.NumBuckets());
      hub_->SendToAll(transfer, MessageType::kBucketsReady, ready);
    }
    ChainDistributor chain(*hub_, transfer, current_->layout,
                           TensorPointers(*segment_, current_->layout), Stall());
    chain.Finish();
  }

  Duration Stall() const {
    return StallLimit(hub_->options().transfer_timeout, hub_->options().handshake_timeout);
  }

  const bool shared_;
  // Guarded by the hub's transfer lock.
  std::unique_ptr<Segment> segment_;
  std::optional<Manifest> current_;
  int segments_ = 0;
};

// Copies from the sender's shared segment when it can map it ("shm" on the sender's host),
// else takes the version through the TCP chain ("tcp", or "shm" from another host).
class ShmReceiver : public WeightReceiver {
 public:
  ShmReceiver(const ReceiverOptions& options, std::unique_ptr<Connection> connection, bool shared)
      : options_(options), connection_(std::move(connection)), shared_(shared) {}

  StatusOr<ReceivedVersion> ReceiveNext(const DestinationFn& destination, Duration wait) override {
    if (!connection_)
      return UnavailableError("weight sender " + options_.endpoint + ": connection lost earlier");
    const auto wait_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
    auto first = connection_->Receive(wait_end);
    // Leftovers of a version this receiver took through the chain are void: a buckets-ready
    // notice of the shared segment that arrived after the last byte, or a CHAIN sent when the
    // sender chained it again after a failure upstream while its acknowledgement was on the way.
    while (first.ok() &&
           (first->type == MessageType::kChain || first->type == MessageType::kBucketsReady)) {
      first = connection_->Receive(wait_end);
    }
    if (!first.ok()) {
      if (first.status().code() == Code::kDeadlineExceeded) {
        return DeadlineExceededError("no new weight version from " + options_.endpoint +
                                     " within the wait");
      }
      return Lost(first.status());
    }
    if (first->type != MessageType::kManifest) {
      return Lost(InvalidArgumentError("expected a manifest, got message type " +
                                       std::to_string(static_cast<uint32_t>(first->type))));
    }
    const auto start = Clock::now();
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(options_.transfer_timeout);
    auto manifest = DecodeManifest(first->payload);
    if (!manifest.ok()) return Lost(manifest.status());
    const Layout& layout = manifest->layout;

    // Errors from here on fail this version only: keep reading its notices, then report.
    Status error;
    if (have_version_ && manifest->version <= last_version_) {
      error = FailedPreconditionError("version " + std::to_string(manifest->version) +
                                      " arrived after version " + std::to_string(last_version_));
    }
    bool chained = !shared_ || manifest->segment.empty();
    if (!chained && (!segment_ || segment_->name() != manifest->segment)) {
      segment_.reset();
      auto segment = Segment::Open(manifest->segment, manifest->segment_bytes);
      if (segment.ok()) {
        segment_ = std::move(*segment);
      } else if (segment.status().code() == Code::kUnavailable) {
        chained = true;  // not on the sender's host (or not sharing its /dev/shm)
      } else if (error.ok()) {
        error = segment.status();
      }
    }
    if (chained) return ReceiveChained(*manifest, destination, error, start, deadline);
    Status ready = connection_->Send(MessageType::kReady, "", deadline);
    if (!ready.ok()) return Lost(ready);
    if (error.ok() && segment_->capacity() < layout.total_bytes) {
      error =
          InvalidArgumentError("manifest: version needs " + std::to_string(layout.total_bytes) +
                               " bytes, the segment has " + std::to_string(segment_->capacity()));
    }
    std::vector<char*> destinations(layout.tensors.size(), nullptr);
    for (size_t i = 0; error.ok() && i < layout.tensors.size(); ++i) {
      auto d = destination(layout.tensors[i]);
      if (!d.ok()) {
        error = d.status();
      } else {
        destinations[i] = static_cast<char*>(*d);
      }
    }
    size_t done = 0;
    while (done < layout.NumBuckets()) {
      auto message = connection_->Receive(deadline);
      if (!message.ok()) return Lost(message.status());
      if (message->type == MessageType::kAbort)
        return AbortedError("the sender abandoned version " + std::to_string(manifest->version));
      uint64_t ready = 0;
      if (message->type != MessageType::kBucketsReady || !ReadU64(message->payload, 0, &ready) ||
          ready > layout.NumBuckets() || ready < done) {
        return Lost(InvalidArgumentError("expected a buckets-ready notice of at most " +
                                         std::to_string(layout.NumBuckets()) + " buckets"));
      }
      if (error.ok() && ready > done) {
        for (const auto& p : layout.Pieces(layout.BucketBegin(done), layout.BucketEnd(ready - 1))) {
          std::memcpy(destinations[p.tensor] + p.tensor_offset, segment_->data() + p.flat_offset,
                      p.bytes);
        }
      }
      done = ready;
    }
    if (error.ok()) {
      const uint64_t in_segment = segment_->header()->version.load(std::memory_order_acquire);
      if (in_segment != manifest->version) {
        error = AbortedError("the sender overwrote version " + std::to_string(manifest->version) +
                             " with " + std::to_string(in_segment) +
                             " while this receiver copied it (dropped as too slow)");
      }
    }
    Status sent =
        connection_->Send(MessageType::kAck, EncodeAck(manifest->version, error), deadline);
    if (!sent.ok()) return Lost(sent);
    if (!error.ok())
      return Annotate(error, "receiving weight version " + std::to_string(manifest->version));
    have_version_ = true;
    last_version_ = manifest->version;
    ReceivedVersion received = Received(*manifest, start);
    received.path = "shm";
    return received;
  }

 private:
  // The connection is out of step or gone: close it; later calls fail fast.
  Status Lost(const Status& status) {
    connection_.reset();
    return UnavailableError("weight sender " + options_.endpoint + ": " + status.message());
  }

  // The version through the TCP chain; `error` (already known) fails it on this receiver, which
  // still relays its bytes to the next one.
  StatusOr<ReceivedVersion> ReceiveChained(const Manifest& manifest,
                                           const DestinationFn& destination, Status error,
                                           Clock::time_point start, Clock::time_point deadline) {
    if (!listener_) {
      auto listener = ListenForChain(*connection_);
      if (!listener.ok()) return Lost(Annotate(listener.status(), "listening for the TCP chain"));
      listener_ = std::move(*listener);
    }
    const Layout& layout = manifest.layout;
    std::vector<char*> ptrs(layout.tensors.size(), nullptr);
    std::vector<std::vector<char>> scratch(layout.tensors.size());
    for (size_t i = 0; i < layout.tensors.size(); ++i) {
      if (error.ok()) {
        auto d = destination(layout.tensors[i]);
        if (d.ok()) {
          ptrs[i] = static_cast<char*>(*d);
          continue;
        }
        error = d.status();
      }
      scratch[i].resize(layout.tensors[i].NumBytes());
      ptrs[i] = scratch[i].data();
    }
    Status got =
        ReceiveThroughChain(*connection_, *listener_, manifest, ptrs, deadline,
                            StallLimit(options_.transfer_timeout, options_.connect_timeout));
    if (got.code() == Code::kAborted) return got;
    if (!got.ok()) return Lost(got);
    Status sent =
        connection_->Send(MessageType::kAck, EncodeAck(manifest.version, error), deadline);
    if (!sent.ok()) return Lost(sent);
    if (!error.ok())
      return Annotate(error, "receiving weight version " + std::to_string(manifest.version));
    have_version_ = true;
    last_version_ = manifest.version;
    ReceivedVersion received = Received(manifest, start);
    received.path = "tcp";
    return received;
  }

  const ReceiverOptions options_;
  std::unique_ptr<Connection> connection_;
  const bool shared_;
  std::unique_ptr<Listener> listener_;  // the TCP chain's data endpoint, once needed
  std::unique_ptr<Segment> segment_;
  bool have_version_ = false;
  uint64_t last_version_ = 0;
};

// Unlinks the segments of senders that died without unlinking theirs (SIGKILL, a crash):
// their names carry the pid, and a pid with no process behind it cannot be using one.
void RemoveStaleSegments() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string prefix = "rlmesh-weights-";
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      ::shm_unlink(("/" + name).c_str());
  }
  ::closedir(dir);
}

}  // namespace

StatusOr<std::unique_ptr<WeightSender>> CreateShmSender(const SenderOptions& options) {
  RemoveStaleSegments();
  TRANSPORT_ASSIGN_OR_RETURN(auto hub, SenderHub::Create(options));
  return std::unique_ptr<WeightSender>(new ShmSender(std::move(hub), /*shared=*/true));
}

StatusOr<std::unique_ptr<WeightReceiver>> CreateShmReceiver(const ReceiverOptions& options) {
  TRANSPORT_ASSIGN_OR_RETURN(auto connection, DialSender(options));
  return std::unique_ptr<WeightReceiver>(
      new ShmReceiver(options, std::move(connection), /*shared=*/true));
}

StatusOr<std::unique_ptr<WeightSender>> CreateTcpSender(const SenderOptions& options) {
  TRANSPORT_ASSIGN_OR_RETURN(auto hub, SenderHub::Create(options));
  return std::unique_ptr<WeightSender>(new ShmSender(std::move(hub), /*shared=*/false));
}

StatusOr<std::unique_ptr<WeightReceiver>> CreateTcpReceiver(const ReceiverOptions& options) {
  TRANSPORT_ASSIGN_OR_RETURN(auto connection, DialSender(options));
  return std::unique_ptr<WeightReceiver>(
      new ShmReceiver(options, std::move(connection), /*shared=*/false));
}

}  // namespace rlmesh::transport
