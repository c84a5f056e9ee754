#!/bin/sh
# Builds the Python package `rlmesh` (messages and gRPC stubs of proto/, and
# rlmesh.reward_worker, which runs verl reward files for rlmesh-reward) into OUT:
#   build_package.sh PROTOC GRPC_PYTHON_PLUGIN OUT
# with Debian's protoc 3.21 and /usr/bin/grpc_python_plugin (`python3 -m grpc_tools.protoc`
# of Debian bundles protoc 3.5, which refuses proto3 `optional`). The standard health proto
# is generated as rlmesh.grpc_health.v1 (same proto package grpc.health.v1, so it talks to
# any gRPC health service) because a top-level `grpc` package would hide grpcio's.
set -eu
protoc=$1
plugin=$2
out=$3
src=$(cd "$(dirname "$0")/.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/rlmesh/v1" "$stage/rlmesh/grpc_health/v1"
cp "$src"/rlmesh/v1/*.proto "$stage/rlmesh/v1/"
cp "$src/grpc/health/v1/health.proto" "$stage/rlmesh/grpc_health/v1/"
rm -rf "$out/rlmesh"
mkdir -p "$out"
files=$(cd "$stage" && find rlmesh -name '*.proto' | LC_ALL=C sort)
(cd "$stage" && "$protoc" -I . --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" $files)
for d in rlmesh/v1 rlmesh/grpc_health rlmesh/grpc_health/v1; do
  printf '"""Generated from proto/ by proto/python/build_package.sh; do not edit."""\n' \
    > "$out/$d/__init__.py"
done
cp "$src/python/rlmesh_init.py" "$out/rlmesh/__init__.py"
cp "$src/python/reward_worker.py" "$out/rlmesh/reward_worker.py"
cp "$src/python/pyproject.toml" "$out/pyproject.toml"
