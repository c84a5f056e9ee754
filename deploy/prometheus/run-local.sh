#!/usr/bin/env bash
# Starts Prometheus (Debian's `prometheus`) scraping the services of a local `rlmesh run`
# and evaluating the rlmesh alert rules.
#   deploy/prometheus/run-local.sh RUN_DIR [extra prometheus flags...]
# RUN_DIR is the run folder (rlmesh.run_dir) holding targets.json. The TSDB goes to
# RUN_DIR/prometheus; the web UI listens on --web.listen-address (default :9090).
set -euo pipefail
if (($# < 1)); then
  echo "usage: $0 RUN_DIR [prometheus flags...]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
run_dir=$(cd "$1" && pwd)
shift
command -v prometheus >/dev/null || { echo "$0: prometheus not found (apt-get install prometheus)" >&2; exit 1; }
mkdir -p "$run_dir/prometheus"
config="$run_dir/prometheus/prometheus.yml"
sed -e "s#../../runs/quickstart/targets.json#$run_dir/targets.json#" \
    -e "s#rules/rlmesh-alerts.yml#$here/rules/rlmesh-alerts.yml#" \
    "$here/prometheus-local.yml" > "$config"
exec prometheus --config.file="$config" --storage.tsdb.path="$run_dir/prometheus/data" "$@"
