// The NCCL weight transport on real GPUs, one process per rank (sender on device 0, receiver i
// on device i): bit-exact odd-sized float32/bfloat16 tensors across bucket edges, versions in
// order, a late joiner caught up with the current version, and a receiver SIGKILLed in the
// middle of a broadcast that is dropped while the others still get the version. Exit code 0
// when everything passed, 1 on a failure, 2 when this machine cannot run it (no GPU, or fewer
// than 2), with the reason on stderr.
#include <cuda_runtime.h>

#include <cstdio>
#include <thread>

#include "common/transport/nccl_transport.h"
#include "common/transport/transport.h"
#include "tests/gpu/cuda_helpers.h"
#include "tests/gpu/gpu_harness.h"

namespace rlmesh::gpu_tests {
namespace {

using transport::DType;
using transport::TensorMeta;

std::vector<TensorMeta> Tensors() {
  return {{"embed", DType::kBFloat16, {151, 37}}, {"q.weight", DType::kFloat32, {7, 11}},
          {"q.bias", DType::kFloat32, {7}},       {"norm", DType::kBFloat16, {1}},
          {"up", DType::kBFloat16, {1001, 3, 3}}, {"empty", DType::kFloat32, {0, 5}},
          {"big", DType::kFloat32, {3 << 20}},    {"lm_head", DType::kBFloat16, {513, 17}}};
}

constexpr size_t kBucketBytes = (1 << 20) + 1000;  // odd: elements straddle bucket edges

// Device buffers for every tensor of Tensors() on the current device.
struct DeviceTensors {
  std::vector<void*> ptrs;
  explicit DeviceTensors(const std::vector<TensorMeta>& metas) {
    for (const auto& m : metas) {
      void* p = nullptr;
      Cuda(cudaMalloc(&p, m.NumBytes() == 0 ? 1 : m.NumBytes()), "cudaMalloc");
      ptrs.push_back(p);
    }
  }
  ~DeviceTensors() {
    for (void* p : ptrs) cudaFree(p);
  }
  void Fill(const std::vector<TensorMeta>& metas, uint64_t version) {
    for (size_t i = 0; i < metas.size(); ++i) {
      auto bytes = Pattern(version, i, metas[i].NumBytes());
      Cuda(cudaMemcpy(ptrs[i], bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload");
    }
  }
  // "" when every tensor holds Pattern(version, i).
  std::string Check(const std::vector<TensorMeta>& metas, uint64_t version) {
    Cuda(cudaDeviceSynchronize(), "sync");
    for (size_t i = 0; i < metas.size(); ++i) {
      std::vector<char> got(metas[i].NumBytes());
      Cuda(cudaMemcpy(got.data(), ptrs[i], got.size(), cudaMemcpyDeviceToHost), "download");
      if (got != Pattern(version, i, got.size()))
        return metas[i].name + " differs in version " + std::to_string(version);
    }
    return "";
  }
};

// Receives `versions` (in order) on `device` and checks each; `die_in_version` > 0 makes it
// signal through `notify` and wait for SIGKILL when that version starts arriving.
int RunReceiver(const std::string& endpoint, int device, const std::vector<uint64_t>& versions,
                uint64_t die_in_version = 0, int notify = -1) {
  Cuda(cudaSetDevice(device), "cudaSetDevice");
  const auto metas = Tensors();
  DeviceTensors dest(metas);
  transport::ReceiverOptions options;
  options.endpoint = endpoint;
  options.name = "device-" + std::to_string(device);
  options.device = device;
  auto receiver = transport::CreateNcclReceiver(options);
  if (!receiver.ok()) {
    std::fprintf(stderr, "receiver %d: %s\n", device, receiver.status().ToString().c_str());
    return 3;
  }
  for (uint64_t v : versions) {
    auto destination = [&](const TensorMeta& meta) -> transport::StatusOr<void*> {
      if (die_in_version == v) {
        if (::write(notify, "x", 1) != 1) _exit(4);
        while (true) ::pause();
      }
      for (size_t i = 0; i < metas.size(); ++i) {
        if (metas[i] == meta) return dest.ptrs[i];
      }
      return transport::InvalidArgumentError("unexpected tensor " + meta.name);
    };
    auto got = (*receiver)->ReceiveNext(destination, transport::Duration(120));
    if (!got.ok() || got->version != v) {
      std::fprintf(stderr, "receiver %d: expected version %llu: %s\n", device,
                   static_cast<unsigned long long>(v),
                   got.ok() ? ("got " + std::to_string(got->version)).c_str()
                            : got.status().ToString().c_str());
      return 5;
    }
    if (std::string e = dest.Check(metas, v); !e.empty()) {
      std::fprintf(stderr, "receiver %d: %s\n", device, e.c_str());
      return 6;
    }
  }
  return 0;
}

void WaitReceivers(transport::WeightSender& sender, int n) {
  while (sender.NumReceivers() < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace
}  // namespace rlmesh::gpu_tests

int main() {
  using namespace rlmesh::gpu_tests;
  using namespace rlmesh;
  const int devices = CountDevices();
  if (devices < 2) {
    std::fprintf(
        stderr,
        "nccl_transport_gpu_test: needs at least 2 GPUs (sender and receiver ranks on their own "
        "devices), found %d; nothing was tested\n",
        devices);
    return 2;
  }
  const bool with_third = devices >= 3;
  // Every rank's process is forked now, before this process makes a CUDA call.
  Child first([](const std::string& ep) { return RunReceiver(ep, 1, {1, 2, 3}); });
  int kill_pipe[2];
  if (::pipe(kill_pipe) != 0) return 1;
  std::unique_ptr<Child> doomed, late;
  if (with_third) {
    doomed = std::make_unique<Child>(
        [&](const std::string& ep) { return RunReceiver(ep, 2, {2}, 2, kill_pipe[1]); });
    late = std::make_unique<Child>([](const std::string& ep) {
      return RunReceiver(ep, 2, {2, 3});
    });
  }
  const auto metas = Tensors();
  Cuda(cudaSetDevice(0), "cudaSetDevice");
  transport::SenderOptions options;
  options.bucket_bytes = kBucketBytes;
  options.transfer_timeout = transport::Duration(60);
  auto sender = transport::CreateNcclSender(options);
  if (!sender.ok()) {
    std::fprintf(stderr, "sender: %s\n", sender.status().ToString().c_str());
    return 1;
  }
  DeviceTensors source(metas);
  auto views = [&] {
    std::vector<transport::ConstTensorView> v;
    for (size_t i = 0; i < metas.size(); ++i) v.push_back({metas[i], source.ptrs[i]});
    return v;
  };

  std::printf("[ RUN ] bit-exact odd-sized float32/bfloat16 across bucket edges (version 1)\n");
  first.Send((*sender)->endpoint());
  WaitReceivers(**sender, 1);
  source.Fill(metas, 1);
  auto r1 = (*sender)->Publish(1, views());
  GPU_CHECK(r1.ok(), r1.ok() ? "" : r1.status().ToString());
  if (r1.ok())
    GPU_CHECK(r1->dropped() == 0 && r1->receivers.size() == 1, "receiver 1 acknowledged version 1");

  if (with_third) {
    std::printf("[ RUN ] receiver killed mid-broadcast is dropped; the other gets version 2\n");
    doomed->Send((*sender)->endpoint());
    WaitReceivers(**sender, 2);
    source.Fill(metas, 2);
    transport::StatusOr<transport::PublishReport> r2 = transport::InternalError("not run");
    std::thread publish([&] { r2 = (*sender)->Publish(2, views()); });
    char c;
    GPU_CHECK(::read(kill_pipe[0], &c, 1) == 1, "doomed receiver reached version 2");
    doomed->Kill();
    publish.join();
    GPU_CHECK(doomed->Wait() == 128 + SIGKILL, "doomed receiver was killed");
    GPU_CHECK(r2.ok(), r2.ok() ? "" : r2.status().ToString());
    if (r2.ok()) {
      for (const auto& r : r2->receivers) {
        GPU_CHECK(r.name == "device-2" ? !r.ok : r.ok, r.name + ": " + r.error);
      }
    }
    std::printf("[ RUN ] late joiner receives the current version 2 first, then version 3\n");
    late->Send((*sender)->endpoint());
  } else {
    std::printf("[ SKIP ] killed-receiver and late-joiner cases need 3 GPUs, found %d\n", devices);
    source.Fill(metas, 2);
    auto r2 = (*sender)->Publish(2, views());
    GPU_CHECK(r2.ok() && r2->dropped() == 0,
              r2.ok() ? r2->receivers[0].error : r2.status().ToString());
  }
  std::printf("[ RUN ] versions in order (version 3)\n");
  if (with_third) WaitReceivers(**sender, 2);
  source.Fill(metas, 3);
  auto r3 = (*sender)->Publish(3, views());
  GPU_CHECK(
      r3.ok() && r3->dropped() == 0,
      r3.ok() ? (r3->receivers.empty() ? "" : r3->receivers[0].error) : r3.status().ToString());
  GPU_CHECK(first.Wait() == 0, "receiver 1 got versions 1, 2, 3 intact");
  if (late) GPU_CHECK(late->Wait() == 0, "late joiner got versions 2, 3 intact");
  if (Failures() > 0) {
    std::printf("nccl_transport_gpu_test: %d FAILED checks\n", Failures());
    return 1;
  }
  std::printf("nccl_transport_gpu_test: all passed\n");
  return 0;
}
