#!/usr/bin/env bash
# What tests/gpu/run.sh leaves of a run, checked without a GPU or a build: the table is
# written again after every row, so a run killed at the device machine's time limit still
# leaves the rows it reached (last line "state: running"); a run that ends says how ("state:
# finished, exit N"); with OUT set, the logs its rows point to come back packed in
# $OUT/gpu-logs.tar.gz, and nothing else is left in OUT. A made-up repo holds run.sh and a
# broken build-gpu-deps; a `cmake` first on PATH stands in for the transport programs' build,
# failing at once in one run and never returning in the other.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/gpu/test_lib.sh
. "$here/test_lib.sh"

repo="$tmp/repo"
mkdir -p "$repo/tests/gpu" "$repo/build-gpu-deps/debs" "$tmp/bin" "$tmp/ended" "$tmp/killed"
cp "$here/run.sh" "$here/deps.sh" "$here/find_nccl.sh" "$repo/tests/gpu/"
echo "not a package" > "$repo/build-gpu-deps/debs/libbroken_1.0_amd64.deb"
run() {  # OUT-FOLDER: run.sh --skip-project as the device would, with the stand-in cmake
  PATH="$tmp/bin:$PATH" OUT="$1" RLMESH_COMMIT=abc1234 CUDA_HOME="$tmp/no-cuda" \
    PYTHON="$tmp/no-python" bash "$repo/tests/gpu/run.sh" --skip-project
}

# 1. A run that ends: the deps and transports rows fail, and the logs behind them come back.
printf '#!/bin/sh\necho "stand-in cmake: configure failed"\nexit 1\n' > "$tmp/bin/cmake"
chmod +x "$tmp/bin/cmake"
run "$tmp/ended" > "$tmp/ended.log" 2>&1
rc=$?
summary="$tmp/ended/gpu-summary.txt"
[[ $rc == 1 ]] || fail "a run with failed rows exited $rc, not 1"
grep -Eq '^rlmesh GPU checks, [0-9T:-]+Z, commit abc1234$' "$summary" || fail "header: $(head -1 "$summary")"
grep -Eq '^deps +FAIL deps.sh unpack: ' "$summary" || fail "no failed deps row"
grep -Eq '^transports +FAIL see .*/build-gpu/transports.log' "$summary" || fail "no failed transports row"
[[ $(tail -1 "$summary") == "state: finished, exit 1" ]] || fail "last line: $(tail -1 "$summary")"
# What run.sh printed last is the table it left.
diff <(tail -n "$(wc -l < "$summary")" "$tmp/ended.log") "$summary" > /dev/null ||
  fail "the printed table is not the one in OUT"
mkdir "$tmp/unpacked"
tar -xzf "$tmp/ended/gpu-logs.tar.gz" -C "$tmp/unpacked" || fail "no readable gpu-logs.tar.gz"
grep -q "SHA256SUMS" "$tmp/unpacked/build-gpu/deps.log" 2>/dev/null || fail "deps.log not packed"
grep -q "stand-in cmake: configure failed" "$tmp/unpacked/build-gpu/transports.log" 2>/dev/null ||
  fail "transports.log not packed"
left=$(cd "$tmp/ended" && ls -A | tr '\n' ' ')
[[ $left == "gpu-logs.tar.gz gpu-summary.txt " ]] || fail "OUT holds: $left"

# 2. A run killed while the transports build (which never ends): its rows so far, marked as
# still running. The stand-in says when the build has started; then the whole session goes.
printf '#!/bin/sh\necho $$ > "%s"\nexec sleep 600\n' "$tmp/building" > "$tmp/bin/cmake"
setsid bash -c "$(declare -f run); tmp='$tmp' repo='$repo'; run '$tmp/killed'" \
  > "$tmp/killed.log" 2>&1 &
disown  # its end is awaited below, without the shell's "Killed" notice
for _ in $(seq 600); do  # up to 60 s
  [[ -s $tmp/building ]] && break
  sleep 0.1
done
session=$(ps -o sid= -p "$(cat "$tmp/building" 2> /dev/null)" 2> /dev/null | tr -d ' ')
if [[ -n $session ]]; then
  pkill -9 -s "$session"
  for _ in $(seq 100); do  # gone within 10 s
    pgrep -s "$session" > /dev/null || break
    sleep 0.1
  done
else
  fail "the transports build never started: $(tail -3 "$tmp/killed.log")"
fi
summary="$tmp/killed/gpu-summary.txt"
grep -Eq '^deps +FAIL ' "$summary" 2>/dev/null || fail "the killed run left no deps row"
grep -Eq '^conformance +SKIP ' "$summary" || fail "the killed run left no conformance row"
grep -Eq '^transports ' "$summary" && fail "a transports row before the build ended"
[[ $(tail -1 "$summary") == "state: running" ]] || fail "killed run's last line: $(tail -1 "$summary")"

finish "run.sh's record"
