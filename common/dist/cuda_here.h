// What this process has for rlmesh.device = cuda, read from LibTorch (common/dist/placement.h
// decides with it). Header-only, so that the torch translation units that need it (the group,
// the model options) add no new one.
#pragma once

#include <ATen/Version.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <string>

#include "common/dist/placement.h"

namespace rlmesh::dist {

inline CudaHere CudaHereNow() {
  CudaHere here;
  here.visible_gpus = static_cast<int>(torch::cuda::device_count());
  // A process that sees a GPU has CUDA whatever LibTorch's build settings say.
  here.libtorch_has_cuda = here.visible_gpus > 0 || BuildSettingsHaveCuda(at::show_config());
  here.libtorch_version = TORCH_VERSION;
  return here;
}

}  // namespace rlmesh::dist
