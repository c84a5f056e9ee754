#!/usr/bin/env bash
# Builds and runs the NCCL weight transport's GPU test and bandwidth benchmark on a machine
# with NVIDIA GPUs, the CUDA toolkit (with NCCL), CMake and a C++ compiler, and nothing else
# of rlmesh's dependencies (no gRPC, LibTorch, Abseil or GoogleTest: the programs here and
# common/transport need none of them).
#
#   tests/gpu/run.sh [build-dir]     (default: build-gpu next to this repository's top)
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_HOME when NCCL is elsewhere,
# CUDA_VISIBLE_DEVICES to choose the GPUs (at least 2: one per rank).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${1:-$repo/build-gpu}"
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"

cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"

echo "== NCCL transport test"
set +e
"$build/nccl_transport_gpu_test"
rc=$?
set -e
if [ "$rc" -eq 2 ]; then
  echo "tests/gpu/run.sh: built, but not run: this machine lacks the GPUs (see the line above)" >&2
  exit 2
fi
[ "$rc" -eq 0 ] || exit "$rc"
echo "== NCCL transport bandwidth vs plain ncclBroadcast"
"$build/nccl_bandwidth_bench" "${@:2}"
