#!/usr/bin/env bash
# A rehearsal, on this CPU machine, of what tests/gpu/run.sh meets on a GPU machine, so that device
# time is not spent finding out that the project does not build there. The device machine has a
# newer GCC, a LibTorch 2.x (a CUDA PyTorch's), CMake, ninja and Python, and none of gRPC,
# Protobuf, Abseil or prometheus-cpp. The rehearsal makes such a root with mmdebstrap from Debian
# 13 (trixie: GCC 14, Debian's LibTorch 2.6 for the CPU, Gloo's headers, no Protobuf headers),
# mounts this machine's CUDA toolkit into it and a copy of the working tree
# (build-gpu-rehearsal/src) at /src, and there:
#   1. runs tests/gpu/run.sh as the device would (TORCH_PREFIX=/usr): the carried Debian 12
#      packages unpacked into their private prefix, the whole project built against LibTorch 2.x
#      with them, the standalone transport programs built; the GPU rows say SKIP;
#   2. runs the project's unit and integration tests on that build (LibTorch 2.x, on the CPU),
#      but for the TLS and tokenizer-parity ones, which need what the root lacks;
#   3. runs the quickstart on it and prints its validation reward before and after.
#
#   tests/gpu/rehearse.sh [--fresh]     (make gpu-rehearsal)
#
# Needs root (chroot, and mounts in a mount namespace of its own, gone when it ends) and
# Debian's mirror (MIRROR, default http://deb.debian.org/debian). The root (root/) and the
# tree with its builds (src/) are kept in build-gpu-rehearsal/ and reused: an unchanged tree
# rebuilds in seconds; --fresh makes the root again. The summary is also written to
# build-gpu-rehearsal/summary.txt. Exit code 0 when all three passed. About 20 minutes on 2
# cores the first time (the build: 12.5 minutes).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/build-gpu-rehearsal"
root="$out/root"
src="$out/src"  # the tree and its builds, mounted at /src in the root
mirror="${MIRROR:-http://deb.debian.org/debian}"
jobs="${JOBS:-$(nproc)}"
fresh=0
case "${1:-}" in
  --fresh) fresh=1 ;;
  "") ;;
  *) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
[[ $(id -u) -eq 0 ]] || { echo "rehearse.sh: needs root (chroot and mounts)" >&2; exit 1; }
missing=()
for tool in mmdebstrap rsync; do command -v "$tool" >/dev/null || missing+=("$tool"); done
((${#missing[@]} == 0)) || DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
mkdir -p "$out"

# What run.sh carries to the device, fetched here as it would be.
[[ -f $repo/build-gpu-deps/debs/SHA256SUMS ]] || "$here/deps.sh" download

# The root's packages (the marker file holds the list the root was made with; another list makes
# it again). OpenBLAS: Debian's LibTorch falls back to the reference BLAS without it, many
# times slower. The Python packages are the tests' (the model-parity reference, the Python
# reward worker).
packages=build-essential,cmake,ninja-build,python3,libtorch-dev,libgloo-dev,libopenblas0-openmp,git,ca-certificates,file,python3-torch,python3-grpcio,python3-protobuf,python3-crcmod
if ((fresh)) || [[ $(cat "$root/etc/rlmesh-rehearsal" 2>/dev/null) != "$packages" ]]; then
  # A root that holds no mount can be removed; mounts only ever live in the namespace below.
  if findmnt -rn -o TARGET | grep -q "^$root"; then
    echo "rehearse.sh: something is mounted under $root; unmount it first" >&2
    exit 1
  fi
  rm -rf "$root" "$root.partial"
  # libtorch-dev depends on libprotobuf-dev; removing it leaves only the carried Protobuf, as on
  # the device (Debian's Caffe2 config still wants one; the carried one is the same 3.21.12).
  mmdebstrap --variant=apt --include="$packages" \
    --customize-hook='chroot "$1" dpkg --force-depends -r libprotobuf-dev' \
    --customize-hook="echo $packages > \"\$1/etc/rlmesh-rehearsal\"" \
    trixie "$root.partial" "$mirror" > "$out/mmdebstrap.log" 2>&1 ||
    { tail -5 "$out/mmdebstrap.log" >&2; exit 1; }
  mv "$root.partial" "$root"
fi

# The working tree (tracked and untracked files that git does not ignore) and the carried
# packages; the build folders inside stay between runs, also when the root is made again.
mkdir -p "$src/build-gpu"
(cd "$repo" && git ls-files -z -co --exclude-standard) |
  rsync -a --from0 --files-from=- --delete-missing-args "$repo/" "$src/"
rsync -a --delete "$repo/build-gpu-deps/" "$src/build-gpu-deps/"

cuda="$(realpath -e "${CUDA_HOME:-/usr/local/cuda}" 2>/dev/null || true)"
# The copy has no .git: run.sh's table names the commit it was told.
commit=$(git -C "$repo" rev-parse --short HEAD)
git -C "$repo" diff --quiet HEAD || commit+=" with uncommitted changes"
inside=$(cat <<'EOF'
set -uo pipefail
cd /src
status=0
JOBS=$JOBS TORCH_PREFIX=/usr RLMESH_COMMIT=$RLMESH_COMMIT tests/gpu/run.sh > /src/build-gpu/run.out 2>&1
grep -q '^project  *OK' build-gpu/summary.txt || status=1
torch=$(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' /usr/include/torch/csrc/api/include/torch/version.h)
echo "rehearsal root: Debian $(cat /etc/debian_version), $(g++ --version | head -1), LibTorch $torch, $(cmake --version | head -1)"
cat build-gpu/summary.txt
if ((status == 0)); then
  . build-gpu-deps/env.sh
  # Not here: the TLS tests (the root's openssl command cannot load the carried, older OpenSSL
  # that env.sh puts first) and the tokenizer parity tests (they need Node and tools/node).
  if (cd build-gpu-full && ctest -L '^(unit|integration)$' -E '^(TlsTest|TokenizerParityTest)[.]' \
      -j "$JOBS" --timeout 900 --output-on-failure) > build-gpu/ctest.log 2>&1; then
    echo "tests    OK   $(grep -m1 'tests passed' build-gpu/ctest.log)"
  else
    status=1
    echo "tests    FAIL $(grep -m1 'tests passed' build-gpu/ctest.log); see build-gpu-rehearsal/src/build-gpu/ctest.log:"
    sed -n '/The following tests FAILED/,$p' build-gpu/ctest.log | head -30
  fi
  rm -rf build-gpu/quickstart
  start=$(date +%s)
  if build-gpu-full/bin/rlmesh make-tiny-model --arch llama --out build-gpu/quickstart/model \
      --hidden 128 --layers 2 --heads 4 --kv-heads 4 --intermediate 352 --max-position 64 \
      --seed 1 > build-gpu/quickstart.log 2>&1 &&
    build-gpu-full/bin/rlmesh run deploy/configs/quickstart.yaml \
      actor_rollout_ref.model.path=build-gpu/quickstart/model rlmesh.run_dir=build-gpu/quickstart/run \
      trainer.default_local_dir=build-gpu/quickstart/ckpt >> build-gpu/quickstart.log 2>&1; then
    echo "quickstart OK $(grep -o 'finished .*' build-gpu/quickstart.log | tail -1) in $(($(date +%s) - start)) s"
  else
    status=1
    echo "quickstart FAIL $(tail -1 build-gpu/quickstart.log)"
  fi
fi
exit $status
EOF
)
set +e
unshare --mount --propagation private bash -euo pipefail -c '
  root=$1 src=$2 cuda=$3 jobs=$4 script=$5 commit=$6
  mount -t proc proc "$root/proc"
  mkdir -p "$root/src"
  mount --bind "$src" "$root/src"
  mount --bind /dev "$root/dev"
  if [[ -n $cuda ]]; then
    mkdir -p "$root$cuda"
    mount --bind -o ro "$cuda" "$root$cuda"
    [[ $cuda == /usr/local/cuda ]] || ln -sfn "$cuda" "$root/usr/local/cuda"
  fi
  chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root JOBS="$jobs" RLMESH_COMMIT="$commit" bash -c "$script"
' rehearse "$root" "$src" "$cuda" "$jobs" "$inside" "$commit" | tee "$out/summary.txt"
status=${PIPESTATUS[0]}
echo "rehearse.sh: $([[ $status -eq 0 ]] && echo passed || echo FAILED); logs in $src/build-gpu/ (run.out, project.log, ctest.log, quickstart.log)"
exit "$status"
