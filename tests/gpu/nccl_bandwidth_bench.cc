// Bandwidth of the NCCL weight transport next to a plain ncclBroadcast of the same bytes among
// the same ranks (one process per GPU: sender on device 0, a receiver on every other device).
// For each message size it prints GB/s of both and their ratio; the plain broadcast is the
// ceiling (the transport adds bucketing, packing copies and the control exchange).
//
//   nccl_bandwidth_bench [--bucket_mb=256] [--iterations=5]
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "common/transport/nccl_transport.h"
#include "tests/gpu/cuda_helpers.h"
#include "tests/gpu/gpu_harness.h"

namespace rlmesh::gpu_tests {
namespace {

const std::vector<size_t> kSizes = {1 << 20, 16 << 20, 128 << 20, 512 << 20, size_t{1} << 30};

void Nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(rc));
    std::exit(1);
  }
}

std::string Hex(const ncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < sizeof(id); ++i) {
    const auto b = static_cast<uint8_t>(id.internal[i]);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

ncclUniqueId Unhex(const std::string& text) {
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof(id); ++i)
    id.internal[i] = static_cast<char>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  return id;
}

// Median seconds of `iterations` plain broadcasts of `bytes` from rank 0 on `comm`.
double PlainBroadcast(ncclComm_t comm, void* buffer, size_t bytes, int iterations,
                      cudaStream_t stream) {
  std::vector<double> seconds;
  for (int i = 0; i < iterations + 1; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Nccl(ncclBroadcast(buffer, buffer, bytes, ncclUint8, 0, comm, stream), "ncclBroadcast");
    Cuda(cudaStreamSynchronize(stream), "sync");
    if (i > 0)
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

int Receiver(const std::string& line, int iterations) {
  std::istringstream in(line);
  std::string hex, endpoint;
  int rank = 0, world = 0;
  in >> hex >> endpoint >> rank >> world;
  Cuda(cudaSetDevice(rank), "cudaSetDevice");
  ncclComm_t comm;
  Nccl(ncclCommInitRank(&comm, world, Unhex(hex), rank), "ncclCommInitRank");
  cudaStream_t stream;
  Cuda(cudaStreamCreate(&stream), "stream");
  void* buffer = nullptr;
  Cuda(cudaMalloc(&buffer, kSizes.back()), "cudaMalloc");
  for (size_t bytes : kSizes) PlainBroadcast(comm, buffer, bytes, iterations, stream);
  ncclCommDestroy(comm);

  transport::ReceiverOptions options;
  options.endpoint = endpoint;
  options.name = "rank-" + std::to_string(rank);
  options.device = rank;
  auto receiver = transport::CreateNcclReceiver(options);
  if (!receiver.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, receiver.status().ToString().c_str());
    return 3;
  }
  auto destination = [&](const transport::TensorMeta&) -> transport::StatusOr<void*> {
    return buffer;
  };
  for (size_t s = 0; s < kSizes.size(); ++s) {
    for (int i = 0; i < iterations + 1; ++i) {
      auto got = (*receiver)->ReceiveNext(destination, transport::Duration(300));
      if (!got.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, got.status().ToString().c_str());
        return 4;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace rlmesh::gpu_tests

int main(int argc, char** argv) {
  using namespace rlmesh;
  using namespace rlmesh::gpu_tests;
  size_t bucket_bytes = 256 << 20;
  int iterations = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--bucket_mb=", 0) == 0)
      bucket_bytes = static_cast<size_t>(std::stod(a.substr(12)) * (1 << 20));
    else if (a.rfind("--iterations=", 0) == 0)
      iterations = std::max(1, std::stoi(a.substr(13)));
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const int devices = CountDevices();
  if (devices < 2) {
    std::fprintf(stderr, "nccl_bandwidth_bench: needs at least 2 GPUs (one per rank), found %d\n",
                 devices);
    return 2;
  }
  std::vector<std::unique_ptr<Child>> children;
  for (int r = 1; r < devices; ++r) {
    children.push_back(std::make_unique<Child>(
        [iterations](const std::string& line) { return Receiver(line, iterations); }));
  }
  ncclUniqueId id;
  Nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  Cuda(cudaSetDevice(0), "cudaSetDevice");
  transport::SenderOptions options;
  options.bucket_bytes = bucket_bytes;
  auto sender = transport::CreateNcclSender(options);
  if (!sender.ok()) {
    std::fprintf(stderr, "%s\n", sender.status().ToString().c_str());
    return 1;
  }
  for (int r = 1; r < devices; ++r) {
    children[r - 1]->Send(Hex(id) + " " + (*sender)->endpoint() + " " + std::to_string(r) + " " +
                          std::to_string(devices));
  }
  ncclComm_t comm;
  Nccl(ncclCommInitRank(&comm, devices, id, 0), "ncclCommInitRank");
  cudaStream_t stream;
  Cuda(cudaStreamCreate(&stream), "stream");
  void* buffer = nullptr;
  Cuda(cudaMalloc(&buffer, kSizes.back()), "cudaMalloc");
  Cuda(cudaMemset(buffer, 7, kSizes.back()), "cudaMemset");
  std::vector<double> plain;
  for (size_t bytes : kSizes)
    plain.push_back(PlainBroadcast(comm, buffer, bytes, iterations, stream));
  ncclCommDestroy(comm);

  while ((*sender)->NumReceivers() < devices - 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::printf("%d GPUs (1 sender, %d receivers), bucket %zu MiB, median of %d\n\n", devices,
              devices - 1, bucket_bytes >> 20, iterations);
  std::printf(
      "| message | ncclBroadcast GB/s | rlmesh NCCL transport GB/s | ratio |\n|---|---|---|---|\n");
  uint64_t version = 0;
  int failures = 0;
  for (size_t s = 0; s < kSizes.size(); ++s) {
    transport::ConstTensorView view{
        {"w", transport::DType::kBFloat16, {static_cast<int64_t>(kSizes[s] / 2)}}, buffer};
    std::vector<double> seconds;
    for (int i = 0; i < iterations + 1; ++i) {
      auto report = (*sender)->Publish(++version, {view});
      if (!report.ok() || report->dropped() > 0) {
        std::fprintf(
            stderr, "publish failed: %s\n",
            report.ok() ? report->receivers[0].error.c_str() : report.status().ToString().c_str());
        ++failures;
        continue;
      }
      if (i > 0) seconds.push_back(report->seconds);
    }
    if (seconds.empty()) continue;
    std::sort(seconds.begin(), seconds.end());
    const double ours = kSizes[s] / seconds[seconds.size() / 2] / 1e9;
    const double theirs = kSizes[s] / plain[s] / 1e9;
    std::printf("| %zu MiB | %.2f | %.2f | %.2f |\n", kSizes[s] >> 20, theirs, ours, ours / theirs);
  }
  for (auto& c : children) failures += c->Wait() != 0;
  return failures == 0 ? 0 : 1;
}
