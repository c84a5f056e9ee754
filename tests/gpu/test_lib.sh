# shellcheck shell=bash
# Sourced by the shell tests of tests/gpu: `tmp`, a scratch folder removed at exit; `fail
# MESSAGE`, which says it and marks the test failed; `finish NAME`, which exits with the
# test's status (saying "NAME: OK" when nothing failed).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() {
  echo "FAIL: $*"
  status=1
}
finish() {
  ((status == 0)) && echo "$1: OK"
  exit "$status"
}
