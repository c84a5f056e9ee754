# A stand-in CUDA::nvToolsExt for the CMake config of a CUDA LibTorch; included before
# find_package(Torch). PyTorch's config links its torch::nvtoolsext to CUDA::nvToolsExt when it
# does not find NVTX3 where PyTorch's own build had it, which a project using an installed
# LibTorch never has; CUDA 12.9 and later ship NVTX only as headers (CMake's CUDA::nvtx3), so
# that link names a target that does not exist and find_package(Torch) stops with "The link
# interface of target torch::nvtoolsext contains CUDA::nvToolsExt but the target was not
# found". Only when that target is missing and the header-only one is there.
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND AND NOT TARGET CUDA::nvToolsExt AND TARGET CUDA::nvtx3)
  add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
  target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
endif()
