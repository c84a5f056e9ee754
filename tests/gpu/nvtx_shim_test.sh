#!/usr/bin/env bash
# cmake/RlmeshNvtxShim.cmake, which lets a CUDA LibTorch's CMake config load under a CUDA
# toolkit without the NVTX library (CUDA 12.9 and later). A made-up project does what PyTorch's
# config does when it finds no NVTX3 of its own: an imported target whose link interface names
# CUDA::nvToolsExt, linked into a program. With the shim included it must configure and build;
# without it, under such a toolkit, the configure must fail as PyTorch users see it fail.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [[ ! -x $cuda_home/bin/nvcc ]]; then
  echo "skip: no CUDA toolkit at $cuda_home"
  exit 0
fi
export PATH=$cuda_home/bin:$PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(nvtx_shim_check LANGUAGES CXX)
list(APPEND CMAKE_MODULE_PATH $repo/cmake)
if(WITH_SHIM)
  include(RlmeshNvtxShim)
else()
  find_package(CUDAToolkit REQUIRED)
endif()
if(TARGET CUDA::nvtx3)
  message(STATUS "toolkit: CUDA::nvtx3 is there")
endif()
# As a CUDA LibTorch's config without NVTX3 of its own.
add_library(libtorch_nvtx INTERFACE IMPORTED)
set_property(TARGET libtorch_nvtx PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvToolsExt)
file(WRITE \${CMAKE_BINARY_DIR}/main.cc "int main() { return 0; }\n")
add_executable(program \${CMAKE_BINARY_DIR}/main.cc)
target_link_libraries(program PRIVATE libtorch_nvtx)
CMAKE
status=0
if cmake -S "$tmp" -B "$tmp/with" -DWITH_SHIM=ON > "$tmp/with.log" 2>&1 &&
  cmake --build "$tmp/with" > "$tmp/with-build.log" 2>&1; then
  echo "ok   with the shim: configured and built"
else
  echo "FAIL with the shim:"; tail -8 "$tmp/with.log" "$tmp/with-build.log" 2>/dev/null; status=1
fi
if [[ -e $cuda_home/lib64/libnvToolsExt.so || -e $cuda_home/lib/libnvToolsExt.so ]]; then
  echo "skip without the shim: this toolkit still has libnvToolsExt"
elif ! grep -q 'CUDA::nvtx3 is there' "$tmp/with.log"; then
  echo "skip without the shim: this CMake has no CUDA::nvtx3"
elif cmake -S "$tmp" -B "$tmp/without" > "$tmp/without.log" 2>&1; then
  echo "FAIL without the shim: configured, so this test no longer shows what the shim is for"
  status=1
elif grep -q 'CUDA::nvToolsExt' "$tmp/without.log"; then
  echo "ok   without the shim: the configure fails on CUDA::nvToolsExt, as PyTorch's config does"
else
  echo "FAIL without the shim: the configure failed otherwise:"; tail -8 "$tmp/without.log"; status=1
fi
exit $status
