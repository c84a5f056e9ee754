// The trainer group's NCCL collectives (common/dist/nccl_collectives.h) on real GPUs, without
// LibTorch: a communicator of one rank on GPU 0 (the sums, gathers and reduce-scatters run as
// NCCL kernels and must leave the bytes as they were; wrong arguments are refused), a rank
// that waits for a second one who never comes (the join times out instead of hanging), and,
// with two GPUs, two ranks in threads: sums, gathers and reduce-scatters against values
// computed here, then a rank that stops calling, which the other sees as a timeout and a
// broken communicator. Exit code 0 when everything passed, 1 on a failure, 2 when this machine
// has no GPU, with the reason on stderr; "two ranks: skipped" is printed with one GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/dist/nccl_collectives.h"
#include "tests/gpu/cuda_helpers.h"
#include "tests/gpu/gpu_harness.h"

namespace rlmesh::gpu_tests {
namespace {

using dist::NcclCollectives;
using dist::NcclElement;

// One phrase per part, for the summary line (run.sh's table shows the last line).
std::vector<std::string>& Notes() {
  static std::vector<std::string> notes;
  return notes;
}

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

// `count` values of T on device `device`, filled from `values`.
template <typename T>
T* Upload(int device, const std::vector<T>& values) {
  Cuda(cudaSetDevice(device), "cudaSetDevice");
  T* p = nullptr;
  Cuda(cudaMalloc(&p, values.size() * sizeof(T) + 1), "cudaMalloc");
  Cuda(cudaMemcpy(p, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice),
       "cudaMemcpy to the device");
  return p;
}

template <typename T>
std::vector<T> Download(int device, const T* p, size_t count) {
  Cuda(cudaSetDevice(device), "cudaSetDevice");
  std::vector<T> out(count);
  Cuda(cudaMemcpy(out.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost),
       "cudaMemcpy to the host");
  return out;
}

std::unique_ptr<NcclCollectives> JoinOrDie(const std::string& id, int rank, int world, int device,
                                           double timeout_s) {
  auto joined =
      NcclCollectives::Join(id, rank, world, device, timeout_s, "rank " + std::to_string(rank));
  if (!joined.ok()) {
    std::fprintf(stderr, "join failed: %s\n", joined.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(joined.value());
}

std::string NewIdOrDie() {
  auto id = NcclCollectives::NewId();
  if (!id.ok()) {
    std::fprintf(stderr, "ncclGetUniqueId failed: %s\n", id.status().ToString().c_str());
    std::exit(1);
  }
  return *id;
}

// bfloat16 bit patterns, every one different (a copy must keep them exactly).
std::vector<uint16_t> Bf16Words(size_t n, uint16_t seed) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>(seed + 7 * i);
  return out;
}

void OneRank() {
  const auto start = std::chrono::steady_clock::now();
  auto comm = JoinOrDie(NewIdOrDie(), 0, 1, 0, 30);
  const size_t n = 1 << 20;
  std::vector<float> floats(n);
  for (size_t i = 0; i < n; ++i) floats[i] = static_cast<float>(i) * 0.25f - 3.0f;
  float* f = Upload(0, floats);
  GPU_CHECK(comm->AllReduceSum(f, n, NcclElement::kFloat32, "sum f32").ok(), "sum f32");
  GPU_CHECK(Download(0, f, n) == floats, "a sum over one rank changed the values");
  std::vector<double> doubles = {1.5, -2.25, 1e300};
  double* d = Upload(0, doubles);
  GPU_CHECK(comm->AllReduceSum(d, 3, NcclElement::kFloat64, "sum f64").ok(), "sum f64");
  GPU_CHECK(Download(0, d, 3) == doubles, "a float64 sum over one rank changed the values");
  const auto words = Bf16Words(4097, 3);
  uint16_t* shard = Upload(0, words);
  uint16_t* full = Upload(0, std::vector<uint16_t>(words.size(), 0));
  GPU_CHECK(comm->AllGather(shard, full, words.size(), NcclElement::kBFloat16, "gather").ok(),
            "gather bf16");
  GPU_CHECK(Download(0, full, words.size()) == words, "a gather of one rank is not a copy");
  float* scattered = Upload(0, std::vector<float>(n, 0.0f));
  GPU_CHECK(comm->ReduceScatterSum(f, scattered, n, NcclElement::kFloat32, "scatter").ok(),
            "reduce-scatter f32");
  GPU_CHECK(Download(0, scattered, n) == floats, "a reduce-scatter of one rank is not a copy");
  const auto refused = comm->AllReduceSum(shard, 1, NcclElement::kBFloat16, "sum bf16");
  GPU_CHECK(refused.code() == transport::Code::kInvalidArgument &&
                refused.message().find("float32 or float64") != std::string::npos,
            refused.ToString());
  GPU_CHECK(comm->broken().ok(), "a refused call broke the communicator");
  auto short_id = NcclCollectives::Join("short", 0, 1, 0, 5, "rank 0");
  GPU_CHECK(!short_id.ok() && short_id.status().code() == transport::Code::kInvalidArgument,
            short_id.status().ToString());
  cudaFree(f);
  cudaFree(d);
  cudaFree(shard);
  cudaFree(full);
  cudaFree(scattered);
  Notes().push_back(
      "one rank in " +
      Seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
}

void AMissingRankTimesOut() {
  const auto start = std::chrono::steady_clock::now();
  auto joined = NcclCollectives::Join(NewIdOrDie(), 0, 2, 0, 3, "rank 0");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  GPU_CHECK(!joined.ok() && joined.status().code() == transport::Code::kDeadlineExceeded,
            joined.ok() ? std::string("joined without rank 1") : joined.status().ToString());
  GPU_CHECK(took < 30, "the join took " + std::to_string(took) + " s with a 3 s timeout");
  Notes().push_back("a missing rank refused after " + Seconds(took));
  if (!joined.ok()) std::printf("missing rank: %s\n", joined.status().message().c_str());
}

void TwoRanks() {
  const std::string id = NewIdOrDie();
  std::vector<std::unique_ptr<NcclCollectives>> comms(2);
  {
    std::vector<std::thread> joins;
    for (int r = 0; r < 2; ++r)
      joins.emplace_back([&, r] { comms[r] = JoinOrDie(id, r, 2, r, 10); });
    for (auto& t : joins) t.join();
  }
  const size_t n = 3000;  // per rank's shard; full buffers hold 2 n
  std::vector<std::vector<float>> sums(2), gathered(2), scattered(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      // Rank r: sum (r + 1) x i, gather its shard of [r n, (r + 1) n), scatter (r + 1) x i.
      std::vector<float> mine(2 * n);
      for (size_t i = 0; i < 2 * n; ++i) mine[i] = static_cast<float>((r + 1) * i);
      float* s = Upload(r, mine);
      GPU_CHECK(comms[r]->AllReduceSum(s, 2 * n, NcclElement::kFloat32, "sum").ok(), "sum");
      sums[r] = Download(r, s, 2 * n);
      std::vector<float> shard(n);
      for (size_t i = 0; i < n; ++i) shard[i] = static_cast<float>(r * n + i);
      float* sh = Upload(r, shard);
      float* full = Upload(r, std::vector<float>(2 * n, -1.0f));
      GPU_CHECK(comms[r]->AllGather(sh, full, n, NcclElement::kFloat32, "gather").ok(), "gather");
      gathered[r] = Download(r, full, 2 * n);
      float* out = Upload(r, std::vector<float>(n, -1.0f));
      float* in = Upload(r, mine);
      GPU_CHECK(comms[r]->ReduceScatterSum(in, out, n, NcclElement::kFloat32, "scatter").ok(),
                "scatter");
      scattered[r] = Download(r, out, n);
      for (float* p : {s, sh, full, out, in}) cudaFree(p);
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    bool sum_ok = true, gather_ok = true, scatter_ok = true;
    for (size_t i = 0; i < 2 * n; ++i) {
      sum_ok = sum_ok && sums[r][i] == static_cast<float>(3 * i);
      gather_ok = gather_ok && gathered[r][i] == static_cast<float>(i);
    }
    for (size_t i = 0; i < n; ++i) scatter_ok = scatter_ok && scattered[r][i] == 3.0f * (r * n + i);
    GPU_CHECK(sum_ok, "rank " + std::to_string(r) + ": the sums are wrong");
    GPU_CHECK(gather_ok, "rank " + std::to_string(r) + ": the gather is wrong");
    GPU_CHECK(scatter_ok, "rank " + std::to_string(r) + ": the reduce-scatter is wrong");
  }
  // Rank 1 stops calling: rank 0's next sum cannot finish, times out, and the communicator
  // stays broken.
  comms[1].reset();
  auto again = JoinOrDie(NewIdOrDie(), 0, 1, 0, 5);  // still usable alongside
  float* x = Upload(0, std::vector<float>(16, 1.0f));
  const auto start = std::chrono::steady_clock::now();
  auto comm0 = std::move(comms[0]);
  const transport::Status lost = comm0->AllReduceSum(x, 16, NcclElement::kFloat32, "alone");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  GPU_CHECK(!lost.ok(), "a sum with a rank gone succeeded");
  GPU_CHECK(took < 60, "the lost sum took " + std::to_string(took) + " s with a 10 s timeout");
  GPU_CHECK(comm0->AllReduceSum(x, 16, NcclElement::kFloat32, "later").code() == lost.code(),
            "a broken communicator accepted another call");
  GPU_CHECK(again->AllReduceSum(x, 16, NcclElement::kFloat32, "other").ok(),
            "another communicator was hurt by the broken one");
  cudaFree(x);
  Notes().push_back("two ranks on 2 GPUs; a lost rank refused after " + Seconds(took));
  std::printf("lost rank: %s\n", lost.message().c_str());
}

}  // namespace
}  // namespace rlmesh::gpu_tests

int main() {
  using namespace rlmesh::gpu_tests;
  const int devices = CountDevices();
  if (devices < 1) {
    std::fprintf(stderr,
                 "nccl_collectives_gpu_test: needs a GPU, found none; nothing was tested\n");
    return 2;
  }
  if (auto available = rlmesh::dist::NcclCollectives::Available(0); !available.ok()) {
    std::fprintf(stderr, "%s\n", available.ToString().c_str());
    return 1;
  }
  OneRank();
  AMissingRankTimesOut();
  if (devices >= 2) {
    TwoRanks();
  } else {
    Notes().push_back("two ranks skipped (1 GPU: NCCL takes one rank per GPU)");
  }
  if (Failures() > 0) {
    std::fprintf(stderr, "nccl_collectives_gpu_test: %d failures\n", Failures());
    return 1;
  }
  std::string line;
  for (const std::string& note : Notes()) line += (line.empty() ? "" : "; ") + note;
  std::printf("%s\n", line.c_str());
  return 0;
}
