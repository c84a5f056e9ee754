// Where one rank of a trainer (or reference) group runs: its device and the group's backend.
// On cpu every rank computes on the host and the group runs on Gloo. On cuda a node with a GPU
// for each of its ranks gives local rank i GPU i and the group runs on NCCL (CUDA tensors stay
// on the devices); a node with fewer GPUs than ranks lets the ranks share them round-robin,
// and the group runs on Gloo through host copies (NCCL takes one rank per GPU).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::dist {

// What this process has for rlmesh.device = cuda (common/dist/cuda_here.h reads it).
struct CudaHere {
  bool libtorch_has_cuda = false;  // LibTorch built with CUDA (USE_CUDA=ON)
  int visible_gpus = 0;            // CUDA devices this process sees
  std::string libtorch_version;    // for the message
};

// Whether LibTorch's build settings (at::show_config()) say it was built with CUDA: its
// "USE_CUDA=..." is ON (LibTorch 1.13, 2.x), True or 1 (older); OFF in a CPU build.
bool BuildSettingsHaveCuda(absl::string_view show_config);

// OK when this process can compute on CUDA device `index` (-1: the default one); otherwise
// FailedPrecondition naming `key` (rlmesh.device, --device) and the reason: a LibTorch without
// CUDA (a CPU build such as Debian's, or the CPU image), no GPU visible, or `index` past the
// visible ones.
absl::Status CheckCudaDevice(absl::string_view key, int index, const CudaHere& here);

struct RankPlacement {
  std::string device;    // "cpu" or "cuda:N"
  std::string backend;   // GroupOptions::backend: "gloo" or "nccl"
  int cuda_device = -1;  // N on cuda
  std::string summary;   // one line for the rank's log
};

// `device` is rlmesh.device ("cpu" or "cuda"); `local_rank` this rank's place among the
// `ranks_per_node` ranks of its node; `here` what this process has for CUDA.
// FailedPrecondition on cuda when it cannot use a GPU (CheckCudaDevice); InvalidArgument for a
// bad argument.
absl::StatusOr<RankPlacement> PlaceRank(const std::string& device, int local_rank,
                                        int ranks_per_node, const CudaHere& here);

}  // namespace rlmesh::dist
