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
  // LibTorch 1.13 and 2.x list their build settings here ("USE_CUDA=ON" or "USE_CUDA=OFF");
  // a process that sees a GPU has CUDA whatever the text says.
  here.libtorch_has_cuda =
      here.visible_gpus > 0 || at::show_config().find("USE_CUDA=ON") != std::string::npos;
  here.libtorch_version = TORCH_VERSION;
  return here;
}

}  // namespace rlmesh::dist
