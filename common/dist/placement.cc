#include "common/dist/placement.h"

#include "absl/strings/str_cat.h"

namespace rlmesh::dist {

bool BuildSettingsHaveCuda(absl::string_view show_config) {
  constexpr absl::string_view kKey = "USE_CUDA=";
  const size_t at = show_config.find(kKey);
  if (at == absl::string_view::npos) return false;
  absl::string_view value = show_config.substr(at + kKey.size());
  value = value.substr(0, value.find_first_of(", \n"));
  return value == "ON" || value == "True" || value == "TRUE" || value == "1";
}

absl::Status CheckCudaDevice(absl::string_view key, int index, const CudaHere& here) {
  const std::string what =
      index < 0 ? absl::StrCat(key, " cuda") : absl::StrCat(key, " cuda:", index);
  if (!here.libtorch_has_cuda && here.visible_gpus < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": this build's LibTorch (", here.libtorch_version,
        ") has no CUDA (built with USE_CUDA=OFF, as Debian's and the CPU image's are): use a "
        "build against a CUDA LibTorch (the rlmesh-cuda image, docs/deploy.md), or cpu"));
  }
  if (here.visible_gpus < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": this process sees no CUDA device (check the driver and CUDA_VISIBLE_DEVICES)"));
  }
  if (index >= here.visible_gpus) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": this process sees only ", here.visible_gpus,
                     here.visible_gpus == 1 ? " CUDA device" : " CUDA devices",
                     " (check CUDA_VISIBLE_DEVICES)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RankPlacement> PlaceRank(const std::string& device, int local_rank,
                                        int ranks_per_node, const CudaHere& here) {
  if (ranks_per_node < 1 || local_rank < 0 || local_rank >= ranks_per_node) {
    return absl::InvalidArgumentError(absl::StrCat("placing a rank: local rank ", local_rank,
                                                   " is not one of ", ranks_per_node,
                                                   " ranks per node"));
  }
  RankPlacement placement;
  if (device == "cpu") {
    placement.device = "cpu";
    placement.backend = "gloo";
    placement.summary = "on the CPU, the group over Gloo";
    return placement;
  }
  if (device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("rlmesh.device: expected cpu or cuda, got \"", device, "\""));
  }
  if (absl::Status usable = CheckCudaDevice("rlmesh.device", -1, here); !usable.ok()) return usable;
  const int visible_gpus = here.visible_gpus;
  placement.cuda_device = local_rank % visible_gpus;
  placement.device = absl::StrCat("cuda:", placement.cuda_device);
  if (visible_gpus >= ranks_per_node) {
    placement.backend = "nccl";
    placement.summary = absl::StrCat("on ", placement.device, " of ", visible_gpus,
                                     " GPUs, the group's CUDA tensors over NCCL");
  } else {
    placement.backend = "gloo";
    placement.summary =
        absl::StrCat("on ", placement.device, ": ", ranks_per_node, " ranks share ", visible_gpus,
                     visible_gpus == 1 ? " GPU" : " GPUs",
                     ", so the group runs over Gloo through host copies (NCCL takes one rank "
                     "per GPU)");
  }
  return placement;
}

}  // namespace rlmesh::dist
