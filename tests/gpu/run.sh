#!/usr/bin/env bash
# Builds and runs the GPU weight transports' tests and bandwidth benchmarks (NCCL, CUDA IPC) on
# a machine with NVIDIA GPUs, the CUDA toolkit (with NCCL), CMake and a C++ compiler, and nothing
# else of rlmesh's dependencies (no gRPC, LibTorch, Abseil or GoogleTest: the programs here and
# common/transport need none of them).
#
#   tests/gpu/run.sh [build-dir]     (default: build-gpu next to this repository's top)
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_HOME when NCCL is elsewhere,
# CUDA_VISIBLE_DEVICES to choose the GPUs (NCCL: at least 2, one per rank; CUDA IPC: 1, and a
# second for its cross-device case). Exit code 2 when a program could not run for lack of GPUs
# (after running the others), else the first failure's, else 0. Extra arguments after build-dir
# go to nccl_bandwidth_bench; run cuda_ipc_bench by hand for its options.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${1:-$repo/build-gpu}"
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"

cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"

# Runs one test program; a failure ends the script, exit code 2 (this machine lacks the GPUs it
# needs; it said why) is remembered and the others still run.
skipped=0
run_test() {
  echo "== $1"
  set +e
  "$build/$2"
  local rc=$?
  set -e
  if [ "$rc" -eq 2 ]; then
    echo "tests/gpu/run.sh: $2 built, but not run: this machine lacks the GPUs (see the line above)" >&2
    skipped=1
    return 1
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
}

if run_test "NCCL transport test" nccl_transport_gpu_test; then
  echo "== NCCL transport bandwidth vs plain ncclBroadcast"
  "$build/nccl_bandwidth_bench" "${@:2}"
fi
if run_test "CUDA IPC transport test" cuda_ipc_gpu_test; then
  echo "== CUDA IPC transport bandwidth vs plain cudaMemcpy"
  "$build/cuda_ipc_bench"
fi
[ "$skipped" -eq 0 ] || exit 2
