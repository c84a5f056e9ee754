# NCCL for the CUDA targets, after find_package(CUDAToolkit); included by RlmeshCuda.cmake and by
# tests/gpu's standalone project. NCCL_HOME (environment) first, then the toolkit's folders and
# the system's. A Python wheel's NCCL (nvidia-nccl-cu*, which tests/gpu/run.sh finds on a GPU
# machine whose toolkit has none) ships libnccl.so.2 without the libnccl.so link.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS $ENV{NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
  HINTS $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
