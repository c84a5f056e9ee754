// The CUDA IPC weight transport on a real GPU: a sender on device 0 and receivers in other
// processes (device 0, and device 1 when it has peer access to 0), plus one in the sender's own
// process. Checks bit-exact delivery of mixed dtypes and sizes (empty, one element, larger than
// a bucket; several tensors in one allocation; tensors in memory CUDA IPC cannot share:
// cudaMallocAsync pools and pinned host memory), the version numbers of reports and receivers,
// a late joiner caught up with the current version first, and a receiver SIGKILLed in the
// middle of a transfer that is dropped while the others complete. Exit code 0 when everything
// passed, 1 on a failure, 2 when this machine has no GPU, with the reason on stderr.
#include <cuda_runtime.h>
#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <thread>

#include "common/transport/cuda_ipc_transport.h"
#include "common/transport/nccl_transport.h"
#include "common/transport/transport.h"
#include "tests/gpu/cuda_helpers.h"
#include "tests/gpu/gpu_harness.h"

namespace rlmesh::gpu_tests {
namespace {

using transport::DType;
using transport::TensorMeta;

// Where a source tensor lives on the sender.
enum class Kind {
  kSlab,    // a slice of one cudaMalloc shared by several tensors (exported at an offset)
  kOwn,     // its own cudaMalloc
  kPool,    // cudaMallocAsync: not exportable, goes through the sender's export buffer
  kPinned,  // cudaMallocHost: host memory, likewise
};

struct TestTensor {
  TensorMeta meta;
  Kind kind;
};

std::vector<TestTensor> Tensors() {
  return {{{"embed", DType::kBFloat16, {151, 37}}, Kind::kSlab},
          {{"q.weight", DType::kFloat32, {7, 11}}, Kind::kSlab},
          {{"q.bias", DType::kFloat16, {7}}, Kind::kOwn},
          {{"norm", DType::kBFloat16, {1}}, Kind::kSlab},
          {{"step", DType::kInt64, {1}}, Kind::kOwn},
          {{"mask", DType::kBool, {13}}, Kind::kPinned},
          {{"codes", DType::kInt8, {1001}}, Kind::kPool},
          {{"empty", DType::kFloat32, {0, 5}}, Kind::kOwn},
          {{"big", DType::kFloat32, {3 << 20}}, Kind::kOwn},
          {{"big.pooled", DType::kBFloat16, {(1 << 20) + 3}}, Kind::kPool},
          {{"scale", DType::kFloat64, {3}}, Kind::kPinned},
          {{"ids", DType::kInt32, {77}}, Kind::kSlab},
          {{"bytes", DType::kUInt8, {5}}, Kind::kSlab},
          {{"lm_head", DType::kBFloat16, {513, 17}}, Kind::kSlab}};
}

std::vector<TensorMeta> Metas() {
  std::vector<TensorMeta> metas;
  for (const auto& t : Tensors()) metas.push_back(t.meta);
  return metas;
}

size_t PayloadBytes() {
  size_t n = 0;
  for (const auto& m : Metas()) n += m.NumBytes();
  return n;
}

constexpr size_t kBucketBytes = (1 << 20) + 1000;  // odd: elements straddle bucket edges

// The sender's tensors, each in the memory its Kind says, on device 0.
class Sources {
 public:
  Sources() {
    const auto tensors = Tensors();
    size_t slab_bytes = 0;
    std::vector<size_t> slab_offsets;
    for (const auto& t : tensors) {
      slab_offsets.push_back(slab_bytes);
      if (t.kind == Kind::kSlab) slab_bytes += (t.meta.NumBytes() + 255) / 256 * 256;
    }
    Cuda(cudaMalloc(&slab_, slab_bytes), "cudaMalloc slab");
    Cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t bytes = tensors[i].meta.NumBytes() == 0 ? 1 : tensors[i].meta.NumBytes();
      void* p = nullptr;
      switch (tensors[i].kind) {
        case Kind::kSlab:
          p = static_cast<char*>(slab_) + slab_offsets[i];
          break;
        case Kind::kOwn:
          Cuda(cudaMalloc(&p, bytes), "cudaMalloc");
          break;
        case Kind::kPool:
          Cuda(cudaMallocAsync(&p, bytes, stream_), "cudaMallocAsync");
          Cuda(cudaStreamSynchronize(stream_), "sync");
          break;
        case Kind::kPinned:
          Cuda(cudaMallocHost(&p, bytes), "cudaMallocHost");
          break;
      }
      ptrs_.push_back(p);
    }
  }
  ~Sources() {
    const auto tensors = Tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].kind == Kind::kOwn) cudaFree(ptrs_[i]);
      if (tensors[i].kind == Kind::kPool) cudaFreeAsync(ptrs_[i], stream_);
      if (tensors[i].kind == Kind::kPinned) cudaFreeHost(ptrs_[i]);
    }
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaFree(slab_);
  }
  void Fill(uint64_t version) {
    const auto metas = Metas();
    for (size_t i = 0; i < metas.size(); ++i) {
      auto bytes = Pattern(version, i, metas[i].NumBytes());
      Cuda(cudaMemcpy(ptrs_[i], bytes.data(), bytes.size(), cudaMemcpyDefault), "upload");
    }
    Cuda(cudaDeviceSynchronize(), "sync");
  }
  std::vector<transport::ConstTensorView> Views() const {
    std::vector<transport::ConstTensorView> views;
    const auto metas = Metas();
    for (size_t i = 0; i < metas.size(); ++i) views.push_back({metas[i], ptrs_[i]});
    return views;
  }

 private:
  void* slab_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> ptrs_;
};

// A receiver's destination buffers, one cudaMalloc a tensor on the current device.
class Destinations {
 public:
  Destinations() {
    for (const auto& m : Metas()) {
      void* p = nullptr;
      Cuda(cudaMalloc(&p, m.NumBytes() == 0 ? 1 : m.NumBytes()), "cudaMalloc");
      ptrs_.push_back(p);
    }
  }
  ~Destinations() {
    for (void* p : ptrs_) cudaFree(p);
  }
  transport::DestinationFn Fn() {
    return [this](const TensorMeta& meta) -> transport::StatusOr<void*> {
      const auto metas = Metas();
      for (size_t i = 0; i < metas.size(); ++i) {
        if (metas[i] == meta) return ptrs_[i];
      }
      return transport::InvalidArgumentError("unexpected tensor " + meta.name);
    };
  }
  // "" when every tensor holds Pattern(version, i).
  std::string Check(uint64_t version) const {
    const auto metas = Metas();
    for (size_t i = 0; i < metas.size(); ++i) {
      std::vector<char> got(metas[i].NumBytes());
      Cuda(cudaMemcpy(got.data(), ptrs_[i], got.size(), cudaMemcpyDeviceToHost), "download");
      if (got != Pattern(version, i, got.size()))
        return metas[i].name + " differs in version " + std::to_string(version);
    }
    return "";
  }

 private:
  std::vector<void*> ptrs_;
};

// A receiver process's part: the versions it must receive in order; a write to `fd` after it
// holds `signal_after` intact; and, when `die_in` is set, a write to `fd` once that version
// starts arriving, then a wait for SIGKILL.
struct ReceiverPlan {
  std::string name;
  int device = 0;
  std::vector<uint64_t> versions;
  int fd = -1;
  uint64_t signal_after = 0;
  uint64_t die_in = 0;
};

// Receives plan.versions in order and checks each; 0 when all arrived intact.
int RunReceiver(const std::string& endpoint, const ReceiverPlan& plan) {
  Cuda(cudaSetDevice(plan.device), "cudaSetDevice");
  Destinations dest;
  transport::ReceiverOptions options;
  options.endpoint = endpoint;
  options.name = plan.name;
  options.device = plan.device;
  auto receiver = transport::CreateCudaIpcReceiver(options);
  if (!receiver.ok()) {
    std::fprintf(stderr, "%s: %s\n", plan.name.c_str(), receiver.status().ToString().c_str());
    return 3;
  }
  for (uint64_t v : plan.versions) {
    transport::DestinationFn destination = dest.Fn();
    if (plan.die_in == v) {
      destination = [&](const TensorMeta&) -> transport::StatusOr<void*> {
        if (::write(plan.fd, "x", 1) != 1) _exit(4);
        while (true) ::pause();
      };
    }
    auto got = (*receiver)->ReceiveNext(destination, transport::Duration(120));
    if (!got.ok() || got->version != v || got->path != "cuda_ipc" ||
        got->tensors != Metas().size() || got->bytes != PayloadBytes()) {
      std::fprintf(
          stderr, "%s: expected version %llu (%zu tensors, %zu bytes, path cuda_ipc): %s\n",
          plan.name.c_str(), static_cast<unsigned long long>(v), Metas().size(), PayloadBytes(),
          got.ok() ? ("got version " + std::to_string(got->version) + ", " +
                      std::to_string(got->tensors) + " tensors, " + std::to_string(got->bytes) +
                      " bytes, path " + got->path)
                         .c_str()
                   : got.status().ToString().c_str());
      return 5;
    }
    if (std::string e = dest.Check(v); !e.empty()) {
      std::fprintf(stderr, "%s: %s\n", plan.name.c_str(), e.c_str());
      return 6;
    }
    if (plan.signal_after == v && ::write(plan.fd, "x", 1) != 1) return 7;
  }
  return 0;
}

// Runs `body` in a child and returns its exit code, so that this process asks CUDA questions
// and still forks its receivers before its own first CUDA call.
int InChild(const std::function<int()>& body) {
  Child probe([&body](const std::string&) { return body(); });
  probe.Send("");
  return probe.Wait();
}

// Whether a receiver on device 1 can map device 0's memory: CUDA IPC across GPUs needs peer
// access.
bool PeerAccess() {
  return InChild([] {
           int can = 0;
           return cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess && can == 1 ? 1 : 0;
         }) == 1;
}

// Reads one byte from `fd` within `seconds`; false on timeout or end of file.
bool AwaitByte(int fd, int seconds) {
  pollfd p{fd, POLLIN, 0};
  char c = 0;
  return ::poll(&p, 1, seconds * 1000) == 1 && ::read(fd, &c, 1) == 1;
}

void WaitReceivers(transport::WeightSender& sender, int n) {
  while (sender.NumReceivers() < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// Every one of `n` receivers acknowledged `version` and the report counts the payload once.
void ExpectDelivered(const transport::StatusOr<transport::PublishReport>& report, uint64_t version,
                     size_t n) {
  GPU_CHECK(report.ok(), report.ok() ? "" : report.status().ToString());
  if (!report.ok()) return;
  GPU_CHECK(report->version == version, "report of version " + std::to_string(report->version));
  GPU_CHECK(report->bytes == PayloadBytes(), std::to_string(report->bytes) + " bytes reported");
  GPU_CHECK(report->receivers.size() == n,
            std::to_string(report->receivers.size()) + " receivers, expected " + std::to_string(n));
  for (const auto& r : report->receivers) GPU_CHECK(r.ok, r.name + ": " + r.error);
}

}  // namespace
}  // namespace rlmesh::gpu_tests

int main() {
  using namespace rlmesh::gpu_tests;
  using namespace rlmesh;
  const int devices = CountDevices();
  if (devices < 1) {
    std::fprintf(stderr, "cuda_ipc_gpu_test: needs a GPU, found none; nothing was tested\n");
    return 2;
  }
  const bool peer = devices >= 2 && PeerAccess();
  // Every receiver process is forked now, before this process makes a CUDA call. Each signal
  // pipe's write end is held by its one child only, so that child's death reads as end of file.
  Child first([](const std::string& ep) { return RunReceiver(ep, {"first", 0, {1, 2, 3}}); });
  std::unique_ptr<Child> cross;
  if (peer) {
    cross = std::make_unique<Child>([](const std::string& ep) {
      return RunReceiver(ep, {"cross-device", 1, {1, 2, 3}});
    });
  }
  int kill_pipe[2];
  if (::pipe(kill_pipe) != 0) return 1;
  // Joins after version 1 and is caught up with it, then dies in version 2.
  Child doomed([&](const std::string& ep) {
    return RunReceiver(ep, {"doomed", 0, {1, 2}, kill_pipe[1], /*signal_after=*/1, /*die_in=*/2});
  });
  ::close(kill_pipe[1]);
  int caught_pipe[2];
  if (::pipe(caught_pipe) != 0) return 1;
  Child late([&](const std::string& ep) {
    return RunReceiver(ep, {"late", peer ? 1 : 0, {2, 3}, caught_pipe[1], /*signal_after=*/2});
  });
  ::close(caught_pipe[1]);

  Cuda(cudaSetDevice(0), "cudaSetDevice");
  transport::SenderOptions options;
  options.bucket_bytes = kBucketBytes;
  options.transfer_timeout = transport::Duration(60);
  auto sender = transport::CreateCudaIpcSender(options);
  if (!sender.ok()) {
    std::fprintf(stderr, "sender: %s\n", sender.status().ToString().c_str());
    return 1;
  }
  const std::string endpoint = (*sender)->endpoint();
  Sources source;
  int in_process_rc = -1;
  std::thread in_process([&] {
    in_process_rc = RunReceiver(endpoint, {"in-process", 0, {1, 2, 3}});
  });
  const int steady = cross ? 3 : 2;  // first, cross-device, in-process
  // After a failed stage the next would only wait out timeouts: stop, and let the receivers go.
  auto stop_early = [&] {
    std::printf("cuda_ipc_gpu_test: %d FAILED checks; later stages not run\n", Failures());
    sender->reset();  // the in-process receiver finds its connection closed
    in_process.join();
    return 1;
  };

  std::printf("[ RUN ] version 1: mixed dtypes and sizes, bit-exact, %d receivers\n", steady);
  first.Send(endpoint);
  if (cross) cross->Send(endpoint);
  WaitReceivers(**sender, steady);
  source.Fill(1);
  ExpectDelivered((*sender)->Publish(1, source.Views()), 1, steady);
  if (Failures() > 0) return stop_early();

  std::printf("[ RUN ] version 2: a receiver killed mid-transfer is dropped, the others get it\n");
  doomed.Send(endpoint);
  GPU_CHECK(AwaitByte(kill_pipe[0], 120), "doomed receiver was caught up with version 1 intact");
  if (Failures() > 0) return stop_early();
  source.Fill(2);
  transport::StatusOr<transport::PublishReport> r2 = transport::InternalError("not run");
  std::thread publish([&] { r2 = (*sender)->Publish(2, source.Views()); });
  GPU_CHECK(AwaitByte(kill_pipe[0], 120), "doomed receiver reached version 2");
  doomed.Kill();
  publish.join();
  GPU_CHECK(doomed.Wait() == 128 + SIGKILL, "doomed receiver was killed");
  GPU_CHECK(r2.ok(), r2.ok() ? "" : r2.status().ToString());
  if (r2.ok()) {
    GPU_CHECK(r2->version == 2 && r2->receivers.size() == static_cast<size_t>(steady + 1),
              "report of version 2 names every receiver");
    for (const auto& r : r2->receivers) {
      if (r.name == "doomed") {
        GPU_CHECK(!r.ok && r.error.find("connection closed during the transfer of version 2") !=
                               std::string::npos,
                  "doomed: " + r.error);
      } else {
        GPU_CHECK(r.ok, r.name + ": " + r.error);
      }
    }
  }
  GPU_CHECK((*sender)->NumReceivers() == steady, "the dropped receiver is no longer subscribed");
  if (Failures() > 0) return stop_early();

  std::printf("[ RUN ] a late joiner gets the current version 2 before any new one\n");
  late.Send(endpoint);
  GPU_CHECK(AwaitByte(caught_pipe[0], 120), "late joiner received version 2 intact");
  if (Failures() > 0) return stop_early();

  std::printf("[ RUN ] version 3 to every receiver, the late joiner included\n");
  source.Fill(3);
  ExpectDelivered((*sender)->Publish(3, source.Views()), 3, steady + 1);

  std::printf("[ RUN ] versions only increase\n");
  auto again = (*sender)->Publish(3, source.Views());
  GPU_CHECK(!again.ok() && again.status().code() == transport::Code::kInvalidArgument,
            again.ok() ? "version 3 published twice" : again.status().ToString());

  in_process.join();
  GPU_CHECK(in_process_rc == 0, "in-process receiver got versions 1, 2, 3 intact");
  GPU_CHECK(first.Wait() == 0, "receiver on device 0 got versions 1, 2, 3 intact");
  if (cross) GPU_CHECK(cross->Wait() == 0, "receiver on device 1 got versions 1, 2, 3 intact");
  GPU_CHECK(late.Wait() == 0, "late joiner got versions 2, 3 intact");
  if (!cross) {
    std::printf("[ SKIP ] a receiver on another GPU: needs 2 GPUs with peer access, found %d%s\n",
                devices, devices >= 2 ? " without it" : "");
  }
  if (Failures() > 0) {
    std::printf("cuda_ipc_gpu_test: %d FAILED checks\n", Failures());
    return 1;
  }
  std::printf("cuda_ipc_gpu_test: all passed\n");
  return 0;
}
