// Where one rank of a trainer (or reference) group runs: its device and the group's backend.
// On cpu every rank computes on the host and the group runs on Gloo. On cuda a node with a GPU
// for each of its ranks gives local rank i GPU i and the group runs on NCCL (CUDA tensors stay
// on the devices); a node with fewer GPUs than ranks lets the ranks share them round-robin,
// and the group runs on Gloo through host copies (NCCL takes one rank per GPU).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace rlmesh::dist {

struct RankPlacement {
  std::string device;    // "cpu" or "cuda:N"
  std::string backend;   // GroupOptions::backend: "gloo" or "nccl"
  int cuda_device = -1;  // N on cuda
  std::string summary;   // one line for the rank's log
};

// `device` is rlmesh.device ("cpu" or "cuda"); `local_rank` this rank's place among the
// `ranks_per_node` ranks of its node; `visible_gpus` the CUDA devices this process sees.
// FailedPrecondition on cuda when it sees none; InvalidArgument for a bad argument.
absl::StatusOr<RankPlacement> PlaceRank(const std::string& device, int local_rank,
                                        int ranks_per_node, int visible_gpus);

}  // namespace rlmesh::dist
