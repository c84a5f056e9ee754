#!/usr/bin/env bash
# find_nccl.sh, which tells tests/gpu/run.sh where NCCL is, on made-up layouts: a CUDA toolkit
# without NCCL next to a Python whose `nvidia` package holds an nvidia-nccl wheel's files (the
# device machine's case: include/nccl.h and lib/libnccl.so.2 only), NCCL_HOME set by hand, and
# a toolkit with NCCL. Then, where a CUDA toolkit is installed, the standalone tests/gpu CMake
# project configured with that NCCL_HOME must take the wheel's libnccl.so.2 over the toolkit's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/find_nccl.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
expect() {  # expect WHAT GOT WANTED
  if [[ $2 != "$3" ]]; then echo "FAIL $1: got '$2', wanted '$3'"; status=1; else echo "ok   $1"; fi
}

wheel=$tmp/site/nvidia/nccl
mkdir -p "$wheel/include" "$wheel/lib" "$tmp/cuda/include" "$tmp/cuda-with-nccl/include"
printf '#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n' > "$wheel/include/nccl.h"
: > "$wheel/lib/libnccl.so.2"
printf '#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n' > "$tmp/cuda-with-nccl/include/nccl.h"

# case NAME PYTHONPATH NCCL_HOME(empty: unset) WANT_HOME WANT_HEADER WANT_VERSION INCLUDE_DIR...:
# find_nccl in a subshell of its own (it exports NCCL_HOME), which reports its mismatches back.
case_() {
  local name=$1 pythonpath=$2 preset=$3 want_home=$4 want_header=$5 want_version=$6
  shift 6
  (
    if [[ -n $preset ]]; then export NCCL_HOME=$preset; else unset NCCL_HOME; fi
    export PYTHONPATH=$pythonpath
    find_nccl python3 "$@"
    expect "$name: NCCL_HOME" "${NCCL_HOME:-}" "$want_home"
    expect "$name: header" "$nccl_h" "$want_header"
    expect "$name: version" "$nccl_version" "$want_version"
    exit $status
  ) || status=1
}
case_ "the wheel when the toolkit has no NCCL" "$tmp/site" "" \
  "$wheel" "$wheel/include/nccl.h" 2.28.9 "$tmp/cuda/include" "$tmp/none"
case_ "NCCL_HOME set by hand stays" "$tmp/site" "$tmp/cuda-with-nccl" \
  "$tmp/cuda-with-nccl" "$tmp/cuda-with-nccl/include/nccl.h" 2.21.5 "$tmp/cuda/include"
case_ "the toolkit's NCCL first" "$tmp/site" "" \
  "" "$tmp/cuda-with-nccl/include/nccl.h" 2.21.5 "$tmp/cuda-with-nccl/include"
case_ "no NCCL anywhere" "$tmp/empty" "" "" "" "" "$tmp/cuda/include"

# CMake, where a CUDA toolkit is installed (both CMake projects use the same find calls).
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [[ -x $cuda_home/bin/nvcc ]]; then
  # A real header: the configure only looks for the files, it links nothing.
  [[ -e $cuda_home/include/nccl.h ]] && cp "$cuda_home/include/nccl.h" "$wheel/include/nccl.h"
  if PATH=$cuda_home/bin:$PATH NCCL_HOME=$wheel cmake -S "$here" -B "$tmp/build" > "$tmp/cmake.log" 2>&1; then
    expect "CMake with NCCL_HOME: the wheel's library" \
      "$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$tmp/build/CMakeCache.txt")" "$wheel/lib/libnccl.so.2"
    expect "CMake with NCCL_HOME: the wheel's headers" \
      "$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$tmp/build/CMakeCache.txt")" "$wheel/include"
  else
    echo "FAIL CMake configure with NCCL_HOME=$wheel:"; tail -5 "$tmp/cmake.log"; status=1
  fi
else
  echo "skip CMake: no CUDA toolkit at $cuda_home"
fi
exit $status
