# Sourced by tests/gpu/run.sh and find_nccl_test.sh.
#
# find_nccl PYTHON INCLUDE_DIR...
#   Where the build takes NCCL from: NCCL_HOME when set; else the first INCLUDE_DIR holding
#   nccl.h (the CUDA toolkit's, the system's), found by CMake by itself; else the nvidia-nccl
#   wheel the Python's PyTorch loads (include/nccl.h and lib/libnccl.so.2, without the
#   libnccl.so link, in a folder of the `nvidia` package), exported as NCCL_HOME, where both
#   CMake projects look first. Sets nccl_h to the header the build will use (empty: none) and
#   nccl_version to its version.
find_nccl() {
  local python=$1 dir home
  shift
  nccl_h=""
  if [[ -z ${NCCL_HOME:-} ]]; then
    for dir in "$@"; do
      [[ -e $dir/nccl.h ]] && { nccl_h=$dir/nccl.h; break; }
    done
    if [[ -z $nccl_h ]]; then
      home=$("$python" - 2>/dev/null <<'PY'
import glob, os
import nvidia
for root in nvidia.__path__:
    for header in sorted(glob.glob(os.path.join(root, "**", "include", "nccl.h"), recursive=True)):
        home = os.path.dirname(os.path.dirname(header))
        if glob.glob(os.path.join(home, "lib*", "libnccl.so*")):
            print(home)
            raise SystemExit
PY
)
      [[ -n $home ]] && export NCCL_HOME=$home
    fi
  fi
  [[ -n ${NCCL_HOME:-} && -e $NCCL_HOME/include/nccl.h ]] && nccl_h=$NCCL_HOME/include/nccl.h
  nccl_version=""
  if [[ -n $nccl_h ]]; then
    nccl_version=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$nccl_h")
  fi
  return 0
}
