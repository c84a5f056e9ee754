#!/usr/bin/env bash
# Checks the Prometheus files with Debian's promtool: the alert rules parse
# (check rules), their unit tests pass (test rules), and the local scrape config is valid
# (check config). Fails with a clear message when promtool is missing.
set -euo pipefail
repo=${RLMESH_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
promtool=$(command -v promtool || true)
if [[ -z $promtool ]]; then
  echo "promtool not found: run scripts/setup.sh (Debian package prometheus)" >&2
  exit 1
fi
cd "$repo/deploy/prometheus"
"$promtool" check rules rules/rlmesh-alerts.yml
"$promtool" test rules rules/*_test.yml
# The targets file of a run does not exist here; promtool only warns about that.
"$promtool" check config prometheus-local.yml
# The copy the chart ships must pass too (tests/deploy/monitoring_test.mjs checks it is equal).
"$promtool" check rules "$repo/helm/rlmesh/files/rlmesh-alerts.yml"
