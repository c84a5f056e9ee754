#!/usr/bin/env bash
# tests/gpu/deps.sh list, without downloading: the packages carried to a GPU machine resolve
# through apt-cache to what the build needs (the libraries and their runtime parts, protoc,
# grpc_cpp_plugin's package, pkg-config) and leave the C library and the compiler's runtime to
# that machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
list=$(tests/gpu/deps.sh list)
status=0
for p in libgrpc++-dev libgrpc++1.51 protobuf-compiler-grpc libprotobuf-dev libprotobuf32 \
  protobuf-compiler libprotoc32 libabsl-dev libabsl20220623 prometheus-cpp-dev \
  libprometheus-cpp-core1.0 libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev \
  libyaml-cpp-dev libpcre2-dev libutf8proc-dev zlib1g-dev libssl-dev libssl3 libre2-9 \
  libc-ares2 pkgconf; do
  grep -qx -- "$p" <<<"$list" || { echo "missing from deps.sh list: $p"; status=1; }
done
for p in libc6 libc6-dev libstdc++6 libgcc-s1 linux-libc-dev libcrypt1; do
  if grep -qx -- "$p" <<<"$list"; then echo "deps.sh list carries $p (the target's own must be used)"; status=1; fi
done
# Every library package scripts/setup.sh installs for the build is carried too, but LibTorch's.
for p in $(sed -n '/^packages=(/,/^)/p' scripts/setup.sh | tr -s ' ' '\n' |
  grep -E -- '-dev$|^protobuf-compiler' | sort -u); do
  case $p in libtorch-dev | libgloo-dev) continue ;; esac
  grep -qx -- "$p" <<<"$list" || { echo "scripts/setup.sh installs $p, deps.sh does not carry it"; status=1; }
done
[[ $status -eq 0 ]] && echo "deps.sh list: $(wc -l <<<"$list") packages, as expected"
exit $status
