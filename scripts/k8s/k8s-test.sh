#!/usr/bin/env bash
# `make k8s-test`: the chart on a real one-node Kubernetes built here from Debian's packages.
# Builds the cluster's binaries once (reused from build-k8s/ afterwards), starts the cluster,
# builds the rlmesh image from the build output and loads it, runs tests/k8s/k8s_test.mjs,
# and stops the cluster again, whether the test passed or not. Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
scripts/k8s/cluster.sh build
if [[ -e /var/run/netns/rlmesh-k8s ]]; then
  echo "k8s-test: a cluster from an earlier run is still up; stopping it" >&2
  scripts/k8s/cluster.sh down
fi
trap 'scripts/k8s/cluster.sh down' EXIT
scripts/k8s/cluster.sh up
scripts/k8s/images.sh
echo "k8s-test: cluster and images ready after $(($(date +%s) - start)) s" >&2
node tests/k8s/k8s_test.mjs
echo "k8s-test: passed in $(($(date +%s) - start)) s" >&2
