#!/usr/bin/env bash
# Builds the images the one-node cluster of scripts/k8s/cluster.sh runs, without a registry:
#   localhost/debian:12-slim   Debian 12 minbase from this machine's apt sources (mmdebstrap)
#   localhost/pause:3.2        Kubernetes' pause.c, compiled statically
#   localhost/rlmesh:k8s-test  deploy/docker/Dockerfile with PREBUILT: the binaries of $BUILD
#                              (default build/), not compiled again inside the image
# and loads them into the cluster's containerd (the cluster must be up). The base and pause
# images are built once and reused; the rlmesh image every time (the build output changes).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dir=${K8S_DIR:-$root/build-k8s}
dir=$(cd "$dir" && pwd)
state=$dir/state
build=${BUILD:-build}
image=${RLMESH_IMAGE:-localhost/rlmesh:k8s-test}
log() { echo "images: $*" >&2; }

# podman with its storage under $dir and the settings this machine needs: runc (crun refuses
# the hybrid cgroup layout), cgroupfs, and limits no higher than the current ones.
mkdir -p "$dir/containers"
cat >"$dir/containers/storage.conf" <<SC
[storage]
driver = "overlay"
graphroot = "$dir/containers/storage"
runroot = "$dir/containers/run"
SC
cat >"$dir/containers/containers.conf" <<CC
[containers]
default_ulimits = ["nofile=$(ulimit -n):$(ulimit -n)", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CC
export CONTAINERS_STORAGE_CONF=$dir/containers/storage.conf CONTAINERS_CONF=$dir/containers/containers.conf
has() { podman image exists "$1"; }

if ! has localhost/debian:12-slim; then
  log "building localhost/debian:12-slim with mmdebstrap"
  sources=/etc/apt/sources.list.d/debian.sources
  [[ -f $sources ]] || sources=/etc/apt/sources.list
  rm -f "$dir/debian.tar"
  mmdebstrap --variant=minbase --mode=root --quiet bookworm "$dir/debian.tar" "$sources"
  podman import "$dir/debian.tar" localhost/debian:12-slim >/dev/null
  rm -f "$dir/debian.tar"
fi

if ! has localhost/pause:3.2; then
  log "building localhost/pause:3.2"
  pause_src=$dir/src/kubernetes/build/pause/linux/pause.c
  [[ -f $pause_src ]] || { log "$pause_src missing: run scripts/k8s/cluster.sh build"; exit 1; }
  mkdir -p "$dir/pause"
  gcc -Os -static -o "$dir/pause/pause" "$pause_src"
  printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$dir/pause/Containerfile"
  podman build -q -t localhost/pause:3.2 -f "$dir/pause/Containerfile" "$dir/pause" >/dev/null
fi

# The rlmesh image from the build output: stripped binaries, the Python stubs, and any shared
# library they link from outside Debian's library folders (the CUDA runtime and NCCL when the
# build found the toolkit; they load without a GPU).
log "building $image from $build/bin"
ctx=$dir/image-context
rm -rf "$ctx" && mkdir -p "$ctx/bin" "$ctx/lib"
targets=$(sed -n 's/^ARG TARGETS="\([^"]*\)"/\1/p' deploy/docker/Dockerfile)
for t in $targets; do
  [[ -x $build/bin/$t ]] || { log "$build/bin/$t missing: run make build"; exit 1; }
  strip --strip-unneeded -o "$ctx/bin/$t" "$build/bin/$t"
  ldd "$build/bin/$t" | awk '$3 ~ /^\// && $3 !~ /^(\/usr)?\/lib\// {print $3}' | while read -r so; do
    cp -nL "$so" "$ctx/lib/"
  done
done
cp -r "$build/python" "$ctx/python"
podman build --network=host -f deploy/docker/Dockerfile --build-arg DEBIAN_IMAGE=localhost/debian:12-slim \
  --build-arg PREBUILT=. -t "$image" "$ctx" >"$dir/image-build.log" 2>&1 ||
  { tail -n 30 "$dir/image-build.log" >&2; exit 1; }
podman image prune -f >/dev/null  # the build stage

if [[ -S $state/containerd/containerd.sock ]]; then
  for i in localhost/pause:3.2 "$image"; do
    log "loading $i into the cluster"
    rm -f "$dir/image.tar"
    podman save -q --format docker-archive -o "$dir/image.tar" "$i" >/dev/null
    ctr --address "$state/containerd/containerd.sock" -n k8s.io images import "$dir/image.tar" >/dev/null
    rm -f "$dir/image.tar"
  done
fi
