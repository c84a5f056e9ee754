// Bandwidth of the CUDA IPC weight transport next to a plain cudaMemcpy of the same bytes
// between the same devices, measured in the same run: the sender on device 0 publishes each
// message (split into `tensors` tensors of one allocation, as a caching allocator holds them) to
// one receiver process on `receiver_device`. The plain copy is the ceiling; the transport adds
// the manifest, the acknowledgement and one copy launch a tensor. Median of `iterations`
// publishes after one that is not counted (its receiver maps the allocation first). Target:
// ratio >= 0.8.
//
//   cuda_ipc_bench [--mib=256,1024,4096] [--tensors=8] [--iterations=5] [--receiver_device=0]
// Exit code 0 when every publish succeeded (whatever the ratio), 1 on a failure or a bad
// argument, 2 when this machine lacks the GPUs.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "common/transport/cuda_ipc_transport.h"
#include "common/transport/nccl_transport.h"
#include "tests/gpu/cuda_helpers.h"
#include "tests/gpu/gpu_harness.h"

namespace rlmesh::gpu_tests {
namespace {

struct BenchOptions {
  std::vector<size_t> sizes = {size_t{256} << 20, size_t{1} << 30, size_t{4} << 30};
  int tensors = 8;
  int iterations = 5;
  int receiver_device = 0;
};

// `bytes` cut into `n` bfloat16 tensors laid end to end at 256-byte boundaries.
std::vector<transport::ConstTensorView> Split(const char* base, size_t bytes, int n) {
  std::vector<transport::ConstTensorView> views;
  const size_t each = bytes / n / 256 * 256;
  for (int i = 0; i < n; ++i) {
    const size_t size = i + 1 < n ? each : bytes - each * (n - 1);
    views.push_back(
        {{"w" + std::to_string(i), transport::DType::kBFloat16, {static_cast<int64_t>(size / 2)}},
         base + each * i});
  }
  return views;
}

// The receiver process: one destination region reused by every message; checks the first byte
// of every tensor of each message's last version.
int Receiver(const std::string& endpoint, const BenchOptions& options) {
  Cuda(cudaSetDevice(options.receiver_device), "cudaSetDevice");
  const size_t most = *std::max_element(options.sizes.begin(), options.sizes.end());
  char* dest = nullptr;
  Cuda(cudaMalloc(&dest, most), "cudaMalloc");
  transport::ReceiverOptions receiver_options;
  receiver_options.endpoint = endpoint;
  receiver_options.name = "bench";
  receiver_options.device = options.receiver_device;
  auto receiver = transport::CreateCudaIpcReceiver(receiver_options);
  if (!receiver.ok()) {
    std::fprintf(stderr, "receiver: %s\n", receiver.status().ToString().c_str());
    return 3;
  }
  for (size_t bytes : options.sizes) {
    const auto views = Split(dest, bytes, options.tensors);
    auto destination = [&](const transport::TensorMeta& meta) -> transport::StatusOr<void*> {
      for (const auto& v : views) {
        if (v.meta == meta) return const_cast<void*>(v.data);
      }
      return transport::InvalidArgumentError("unexpected tensor " + meta.name);
    };
    uint64_t version = 0;
    for (int i = 0; i < options.iterations + 1; ++i) {
      auto got = (*receiver)->ReceiveNext(destination, transport::Duration(300));
      if (!got.ok()) {
        std::fprintf(stderr, "receiver: %s\n", got.status().ToString().c_str());
        return 4;
      }
      version = got->version;
    }
    for (const auto& v : views) {
      unsigned char first = 0;
      Cuda(cudaMemcpy(&first, v.data, 1, cudaMemcpyDeviceToHost), "download");
      if (first != (version & 0xff)) {
        std::fprintf(stderr, "receiver: tensor %s of version %llu starts with %d\n",
                     v.meta.name.c_str(), static_cast<unsigned long long>(version), first);
        return 5;
      }
    }
  }
  return 0;
}

double Median(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// Median seconds of a plain cudaMemcpy of `bytes` from `src` to `dst` (after one warm-up).
double PlainCopy(char* dst, const char* src, size_t bytes, int iterations) {
  std::vector<double> seconds;
  for (int i = 0; i < iterations + 1; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
    Cuda(cudaDeviceSynchronize(), "sync");
    if (i > 0)
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return Median(seconds);
}

bool Parse(int argc, char** argv, BenchOptions* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string value = a.substr(a.find('=') + 1);
    if (a.rfind("--mib=", 0) == 0) {
      options->sizes.clear();
      std::istringstream list(value);
      for (std::string mib; std::getline(list, mib, ',');)
        options->sizes.push_back(static_cast<size_t>(std::stod(mib) * (1 << 20)));
    } else if (a.rfind("--tensors=", 0) == 0) {
      options->tensors = std::max(1, std::stoi(value));
    } else if (a.rfind("--iterations=", 0) == 0) {
      options->iterations = std::max(1, std::stoi(value));
    } else if (a.rfind("--receiver_device=", 0) == 0) {
      options->receiver_device = std::stoi(value);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return false;
    }
  }
  for (size_t bytes : options->sizes) {
    if (bytes < static_cast<size_t>(options->tensors) * 256) {
      std::fprintf(stderr, "--mib: %zu bytes cannot hold %d tensors\n", bytes, options->tensors);
      return false;
    }
  }
  return !options->sizes.empty();
}

}  // namespace
}  // namespace rlmesh::gpu_tests

int main(int argc, char** argv) {
  using namespace rlmesh;
  using namespace rlmesh::gpu_tests;
  BenchOptions options;
  if (!Parse(argc, argv, &options)) return 1;
  const int devices = CountDevices();
  if (devices < 1 || options.receiver_device < 0 || options.receiver_device >= devices) {
    std::fprintf(stderr,
                 "cuda_ipc_bench: needs a GPU for the sender (device 0) and device %d for "
                 "the receiver, found %d GPUs; nothing was measured\n",
                 options.receiver_device, devices);
    return 2;
  }
  Child child([&options](const std::string& line) { return Receiver(line, options); });
  Cuda(cudaSetDevice(0), "cudaSetDevice");
  transport::SenderOptions sender_options;
  auto sender = transport::CreateCudaIpcSender(sender_options);
  if (!sender.ok()) {
    std::fprintf(stderr, "%s\n", sender.status().ToString().c_str());
    return 1;
  }
  child.Send((*sender)->endpoint());
  int access = 0;
  if (options.receiver_device != 0 &&
      cudaDeviceCanAccessPeer(&access, 0, options.receiver_device) == cudaSuccess && access)
    Cuda(cudaDeviceEnablePeerAccess(options.receiver_device, 0), "cudaDeviceEnablePeerAccess");
  while ((*sender)->NumReceivers() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  std::printf(
      "cuda_ipc_bench: sender on GPU 0, 1 receiver process on GPU %d, %d tensors a message, "
      "median of %d\n\n",
      options.receiver_device, options.tensors, options.iterations);
  std::printf(
      "| message | cudaMemcpy GB/s | rlmesh cuda_ipc GB/s | ratio | first publish ms |\n"
      "|---|---|---|---|---|\n");
  uint64_t version = 0;
  int failures = 0;
  double worst = 1e9;
  // The last message's allocation: the receiver maps it until the next version's manifest no
  // longer names it, so it is freed only after that version's first publish.
  char* previous = nullptr;
  for (size_t bytes : options.sizes) {
    char* src = nullptr;
    char* dst = nullptr;
    Cuda(cudaMalloc(&src, bytes), "cudaMalloc");
    Cuda(cudaSetDevice(options.receiver_device), "cudaSetDevice");
    Cuda(cudaMalloc(&dst, bytes), "cudaMalloc");
    Cuda(cudaSetDevice(0), "cudaSetDevice");
    const double plain = PlainCopy(dst, src, bytes, options.iterations);
    Cuda(cudaFree(dst), "cudaFree");
    const auto views = Split(src, bytes, options.tensors);
    std::vector<double> seconds;
    double first = 0;
    for (int i = 0; i < options.iterations + 1; ++i) {
      Cuda(cudaMemset(src, static_cast<int>(++version & 0xff), bytes), "cudaMemset");
      Cuda(cudaDeviceSynchronize(), "sync");
      auto report = (*sender)->Publish(version, views);
      if (!report.ok() || report->dropped() > 0) {
        std::fprintf(
            stderr, "publish failed: %s\n",
            report.ok() ? report->receivers[0].error.c_str() : report.status().ToString().c_str());
        ++failures;
        continue;
      }
      if (i == 0) first = report->seconds;
      if (i > 0) seconds.push_back(report->seconds);
      if (previous != nullptr) Cuda(cudaFree(previous), "cudaFree");
      previous = nullptr;
    }
    previous = src;
    if (seconds.empty()) continue;
    const double ours = bytes / Median(seconds) / 1e9;
    const double ceiling = bytes / plain / 1e9;
    worst = std::min(worst, ours / ceiling);
    std::printf("| %zu MiB | %.1f | %.1f | %.2f | %.2f |\n", bytes >> 20, ceiling, ours,
                ours / ceiling, first * 1e3);
  }
  failures += child.Wait() != 0;
  if (previous != nullptr) Cuda(cudaFree(previous), "cudaFree");
  if (failures == 0) {
    std::printf("\ncuda_ipc_bench: lowest ratio %.2f (target >= 0.80): %s\n", worst,
                worst >= 0.8 ? "met" : "NOT met");
  }
  return failures == 0 ? 0 : 1;
}
