#!/usr/bin/env bash
# The GPU checks in one command, for a machine with NVIDIA GPUs, the CUDA toolkit, CMake,
# ninja and a Python whose PyTorch is built for CUDA, and none of rlmesh's other dependencies:
# those come as Debian packages that `tests/gpu/deps.sh download` fetched beforehand, on a
# Debian 12 machine, into build-gpu-deps/ (carry that folder along).
#
#   tests/gpu/run.sh [--skip-project] [-- nccl_bandwidth_bench arguments]
#
# Stages, each a row of the summary table printed at the end (OK, FAIL or SKIP, and why):
#   deps       build-gpu-deps/debs unpacked into a private prefix (tests/gpu/deps.sh unpack)
#   project    the whole project configured and built in build-gpu-full against the LibTorch
#              of the machine's Python (torch.utils.cmake_prefix_path; TORCH_PREFIX, a folder
#              holding share/cmake/Torch or lib/cmake/Torch, overrides), with CUDA and NCCL
#   parity     `rlmesh logprobs` of the tiny quickstart model on the same token ids: CUDA float32
#              and CUDA bfloat16 against the CPU float32 path, the largest differences printed
#              (bounds 1e-3 and 0.1)
#   grpo_*     the quickstart's GRPO run for 5 steps on CUDA: the tiny model in float32 and in
#              bfloat16 (fp32 master weights), and a ~116M random Llama in bfloat16; grpo_cuda_ipc
#              the float32 one with rlmesh.weight_sync.transport=cuda_ipc, grpo_nccl_same_node
#              with nccl (the replica and the reference on the trainer's node take cuda_ipc by
#              themselves); each failed if any version went inline (the trainer's "sending it
#              inline" line in the run's logs), the last two also unless the replica's log says
#              versions came over cuda_ipc
#   grpo_group2 the same 5 steps with 2 trainer ranks and 2 reference ranks on CUDA (one GPU:
#              they share it, the groups over Gloo; two or more: a GPU each, over NCCL)
#   trainer_group the trainer group on CUDA tensors: dist::Group over NCCL (one rank; two on 2
#              GPUs) and over Gloo through host memory (two ranks sharing GPU 0), and the actor
#              trained by such groups against one rank (ActorGroupTest's OnCuda cases: W = 1
#              over NCCL against the CPU, W = 2 on GPU 0 over Gloo, W = 2 on 2 GPUs over NCCL)
#   conformance the project's transport conformance suite (ctest in build-gpu-full): the nccl
#              cases with a GPU per rank (2 or 3), the cuda_ipc cases on one; skips counted
#   decode_*   `rlmesh generate` of a ~116M random Llama in bfloat16 on CUDA, 256 new tokens at
#              batch 1 and batch 64: tokens/s, batch 1 against the memory-bandwidth bound
#              (2 x the plain cudaMemcpy GB/s of cuda_ipc_bench's 1 GiB row, over the weights'
#              bytes: each decode step reads every weight once)
#   nccl_*     the NCCL backend's test and bandwidth benchmark (2 GPUs)
#   cuda_ipc_* the CUDA IPC backend's test and benchmark against a plain cudaMemcpy (1 GPU)
#   nccl_collectives the group's NCCL collectives without LibTorch: one rank's sums, gathers
#              and reduce-scatters, a join whose second rank never comes (a timeout), two
#              ranks when there are 2 GPUs
# The transport programs build standalone in build-gpu with only the CUDA toolkit (and NCCL),
# so they run even when the project stage cannot. The table also gives the GPU, the driver,
# CUDA and LibTorch versions; it is written to $OUT/gpu-summary.txt when OUT is set (the
# device machine's output folder), else build-gpu/summary.txt, again after every row, so that
# a run stopped at its time limit leaves the rows it reached (its last line says "running"
# until the end, then "finished, exit N"). With OUT set, the last 256 KiB of every log the
# rows point to are packed into $OUT/gpu-logs.tar.gz at each failure and at the end: the
# machine's own files are gone once the call returns. Exit code: 1 when a check failed, 2
# when none failed but some were skipped for want of GPUs, else 0.
# Environment: CUDA_HOME (default /usr/local/cuda), NCCL_HOME when NCCL is elsewhere (else the
# toolkit's, the system's or the Python's nvidia-nccl wheel is found), PYTHON
# (default python3), CUDA_VISIBLE_DEVICES, JOBS (default nproc), RLMESH_COMMIT (the commit the
# table names when the tree has no .git).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$cuda_home/bin:$PATH"
python="${PYTHON:-python3}"
jobs="${JOBS:-$(nproc)}"
skip_project=0
bench_args=()
while (($#)); do
  case "$1" in
    --skip-project) skip_project=1 ;;
    --) shift; bench_args=("$@"); break ;;
    *) sed -n '2,/^[^#]/{/^#/p}' "$0" >&2; exit 2 ;;
  esac
  shift
done
build="$repo/build-gpu"
mkdir -p "$build"
summary="${OUT:+$OUT/gpu-summary.txt}"
summary="${summary:-$build/summary.txt}"
started=$(date -u +%Y-%m-%dT%H:%MZ)
commit=${RLMESH_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null)}
rows=()
failed=0
skipped=0
# The table as far as it goes; STATE is its last line ("running", or "finished, exit N").
write_summary() {
  {
    echo "rlmesh GPU checks, $started, commit ${commit:-unknown}"
    echo "GPU: ${gpu:-none visible}; CUDA toolkit: ${nvcc_version:-no nvcc}; LibTorch: ${torch_info:-no torch in $python}; NCCL: ${nccl_version:+$nccl_version in }${nccl_h:-none found}"
    printf '%s\n' "${rows[@]}"
    echo "state: $1"
  } > "$summary.tmp" && mv "$summary.tmp" "$summary"
}
# The logs behind the rows (build-gpu and build-gpu-full/Testing), the last 256 KiB of each,
# into $OUT/gpu-logs.tar.gz; nothing without OUT, where the logs stay where they are.
save_logs() {
  [[ -n ${OUT:-} ]] || return 0
  local tmp f rel
  tmp=$(mktemp -d) || return 0
  while IFS= read -r -d '' f; do
    rel=${f#"$repo"/}
    mkdir -p "$tmp/$(dirname "$rel")" && tail -c 262144 "$f" > "$tmp/$rel"
  done < <(find "$build" "$repo/build-gpu-full/Testing" -maxdepth 6 -type f \
    \( -name '*.log' -o -name '*.err' \) -print0 2>/dev/null)
  tar -czf "$OUT/gpu-logs.tar.gz.part" -C "$tmp" . 2>/dev/null &&
    mv "$OUT/gpu-logs.tar.gz.part" "$OUT/gpu-logs.tar.gz"
  rm -rf "$tmp"
}
# record NAME OK|FAIL|SKIP DETAIL
record() {
  rows+=("$(printf '%-16s %-4s %s' "$1" "$2" "$3")")
  echo "== $1: $2 $3" >&2
  [[ $2 == FAIL ]] && failed=1
  [[ $2 == SKIP ]] && skipped=1
  write_summary running
  [[ $2 == FAIL ]] && save_logs
  return 0
}

# NCCL: NCCL_HOME, else the toolkit's or the system's, else the Python's nvidia-nccl wheel.
# shellcheck source=tests/gpu/find_nccl.sh
. "$here/find_nccl.sh"
find_nccl "$python" "$cuda_home/include" /usr/include

# What this machine is.
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
nvcc_version=$(nvcc --version 2>/dev/null | grep -Eo 'release [0-9.]+' | head -1)
torch_info=$("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null)

# deps
deps="$repo/build-gpu-deps"
if [[ -d $deps/debs ]]; then
  if "$here/deps.sh" unpack "$deps" > "$build/deps.log" 2>&1; then
    # shellcheck disable=SC1091
    . "$deps/env.sh"
    record deps OK "$(ls "$deps"/debs/*.deb | wc -l) Debian packages in $deps/prefix"
  else
    record deps FAIL "$(tail -1 "$build/deps.log")"
  fi
else
  record deps SKIP "no $deps/debs: run tests/gpu/deps.sh download on Debian 12 first"
fi

# project
if ((skip_project)); then
  record project SKIP "--skip-project"
else
  torch_prefix="${TORCH_PREFIX:-$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)}"
  if [[ -z $torch_prefix ]]; then
    record project SKIP "no LibTorch: $python cannot import torch and TORCH_PREFIX is not set"
  elif ! command -v protoc >/dev/null || ! command -v pkg-config >/dev/null; then
    record project SKIP "no protoc or pkg-config: the deps stage did not provide them"
  else
    start=$(date +%s)
    # Warnings are not errors here: the machine's compiler is not the one CI builds with, and
    # a newer GCC warns about code in libstdc++ itself (GCC 14's -Warray-bounds inside
    # std::vector<bool> of LibTorch's autograd). The build log keeps them.
    # With a CUDA toolkit the CUDA backends are required (RLMESH_CUDA=ON): a build that could
    # not find NCCL stops here, saying so, instead of building without them.
    if cmake -S "$repo" -B "$repo/build-gpu-full" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DRLMESH_WERROR=OFF -DRLMESH_CUDA="$([[ -x $cuda_home/bin/nvcc ]] && echo ON || echo AUTO)" \
        -DCMAKE_PREFIX_PATH="$torch_prefix;${CMAKE_PREFIX_PATH:-}" \
        > "$build/project.log" 2>&1 &&
      cmake --build "$repo/build-gpu-full" -j "$jobs" >> "$build/project.log" 2>&1; then
      # cmake/RlmeshCuda.cmake says so at every configure (RLMESH_HAVE_CUDA is not cached).
      cuda_in_build=$(grep -c 'and NCCL found; building the NCCL targets' "$build/project.log" || true)
      record project OK "built in $(($(date +%s) - start)) s against $torch_prefix (CUDA backends: $([[ $cuda_in_build -gt 0 ]] && echo yes || echo no))"
    else
      record project FAIL "see $build/project.log: $(grep -m1 -E 'error:|Error:|CMake Error' "$build/project.log" | cut -c1-160)"
    fi
  fi
fi

# The CUDA checks on the project's own binaries.
bin="$repo/build-gpu-full/bin"
work="$build/checks"
big="$work/model-116m"  # also the decode rows' model, after the transports
cuda_skip=""
[[ -x $bin/rlmesh ]] || cuda_skip="no build-gpu-full/bin/rlmesh (project stage)"
[[ -n $cuda_skip || -n $gpu ]] || cuda_skip="no GPU visible (nvidia-smi)"
if [[ -n $cuda_skip ]]; then
  record parity SKIP "$cuda_skip"
  record grpo SKIP "$cuda_skip"
  record grpo_group2 SKIP "$cuda_skip"
  record trainer_group SKIP "$cuda_skip"
  record conformance SKIP "$cuda_skip"
else
  rm -rf "$work"
  mkdir -p "$work"
  model="$work/model"
  "$bin/rlmesh" make-tiny-model --arch llama --out "$model" --hidden 128 --layers 2 --heads 4 \
    --kv-heads 4 --intermediate 352 --max-position 64 --seed 1 > "$work/model.log" 2>&1
  "$bin/rlmesh" make-tiny-model --arch llama --out "$big" --hidden 1024 --layers 9 --heads 16 \
    --kv-heads 16 --intermediate 2816 --max-position 512 --dtype bfloat16 --seed 1 \
    > "$work/model-116m.log" 2>&1
  "$python" - "$work/ids.jsonl" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as out:
    for _ in range(64):
        out.write(str([random.randrange(0, 256) for _ in range(random.randrange(8, 48))]) + "\n")
PY
  ok=1
  for way in "cpu float32" "cuda float32" "cuda bfloat16"; do
    set -- $way
    "$bin/rlmesh" logprobs --model "$model" --device "$1" --dtype "$2" --batch-size 16 \
      < "$work/ids.jsonl" > "$work/lp-$1-$2.jsonl" 2> "$work/lp-$1-$2.err" || ok=0
  done
  if ((ok)); then
    detail=$("$python" - "$work" <<'PY'
import json, sys
d = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{d}/lp-{name}.jsonl")]
base = rows("cpu-float32")
out, bad = [], False
for name, bound in (("cuda-float32", 1e-3), ("cuda-bfloat16", 0.1)):
    most = max(abs(a - b) for r, s in zip(base, rows(name)) for a, b in zip(r, s))
    out.append(f"{name} max |dlogp| {most:.2e} (bound {bound:g})")
    bad = bad or most > bound
print(("FAIL " if bad else "OK ") + "; ".join(out))
PY
)
    record parity "${detail%% *}" "${detail#* }"
  else
    record parity FAIL "rlmesh logprobs failed: $(cat "$work"/lp-*.err | tail -1)"
  fi
  # name model dtype transport: 5 quickstart steps on CUDA.
  for run in "float32 $model float32 shm" "bfloat16 $model bfloat16 shm" \
      "116m_bf16 $big bfloat16 shm" "cuda_ipc $model float32 cuda_ipc" \
      "nccl_same_node $model float32 nccl"; do
    set -- $run
    start=$(date +%s)
    # The services' logs: the trainer's fallbacks, the replica's "came over <path>" lines.
    logs="$work/run-$1/logs"
    if (cd "$repo" && timeout 600 "$bin/rlmesh" run deploy/configs/quickstart.yaml \
        "actor_rollout_ref.model.path=$2" rlmesh.device=cuda "rlmesh.dtype=$3" \
        "rlmesh.weight_sync.transport=$4" \
        trainer.total_training_steps=5 trainer.test_freq=-1 trainer.save_freq=-1 \
        trainer.val_before_train=false "rlmesh.run_dir=$work/run-$1" \
        "trainer.default_local_dir=$work/ckpt-$1") > "$work/grpo-$1.log" 2>&1 &&
      [[ $(wc -l < "$work/run-$1/metrics.jsonl") -eq 5 ]] &&
      ! grep -q 'sending it inline' "$logs"/*.log &&
      { [[ $4 == shm ]] || grep -q 'came over cuda_ipc' "$logs"/rollout-*.log; }; then
      record "grpo_$1" OK "5 quickstart steps on CUDA in $(($(date +%s) - start)) s; $(grep '^step 5/' "$work/grpo-$1.log" | cut -c1-120)"
    else
      record "grpo_$1" FAIL "see $work/grpo-$1.log: $(grep -m1 -E 'rlmesh run:|Error|error|failed|Could not' "$work/grpo-$1.log" | cut -c1-160)"
    fi
  done
  # Two trainer ranks and two reference ranks on CUDA: on one GPU they share it over Gloo, on
  # two or more each rank takes its own over NCCL (the ranks' logs say which).
  start=$(date +%s)
  logs="$work/run-group2/logs"
  if (cd "$repo" && timeout 600 "$bin/rlmesh" run deploy/configs/quickstart.yaml \
      "actor_rollout_ref.model.path=$model" rlmesh.device=cuda rlmesh.dtype=float32 \
      trainer.n_gpus_per_node=2 rlmesh.reference.world_size=2 \
      trainer.total_training_steps=5 trainer.test_freq=-1 trainer.save_freq=-1 \
      trainer.val_before_train=false "rlmesh.run_dir=$work/run-group2" \
      "trainer.default_local_dir=$work/ckpt-group2") > "$work/grpo-group2.log" 2>&1 &&
    [[ $(wc -l < "$work/run-group2/metrics.jsonl") -eq 5 ]] &&
    grep -q 'trainer: rank 1 on cuda:' "$logs"/trainer-1.log &&
    grep -q 'reference: rank 1 on cuda:' "$logs"/reference-1.log; then
    record grpo_group2 OK "5 quickstart steps, 2 trainer and 2 reference ranks on CUDA in $(($(date +%s) - start)) s; $(grep -h -m1 'trainer: rank 1 on' "$logs"/trainer-1.log | cut -c1-110)"
  else
    record grpo_group2 FAIL "see $work/grpo-group2.log and $logs: $(grep -h -m1 -E 'rlmesh run:|Error|error|failed' "$work/grpo-group2.log" "$logs"/trainer*.log 2>/dev/null | head -1 | cut -c1-160)"
  fi
  # The trainer group on CUDA tensors: dist::Group over NCCL (one rank; two with two GPUs) and
  # over Gloo through host memory (two ranks sharing GPU 0), then the actor trained by such
  # groups against one rank (ActorGroupTest's OnCuda cases).
  group_ok=1
  group_detail=""
  # gtest_cuda PROGRAM FILTER: runs the project's test program PROGRAM on the FILTER cases.
  gtest_cuda() {
    local exe log="$work/$1-cuda.log"
    exe=$(find "$repo/build-gpu-full/" -name "$1" -type f -perm -u+x | head -1)
    if [[ -z $exe ]]; then
      echo "no $1 in build-gpu-full" > "$log"
      group_ok=0
    elif ! timeout 300 "$exe" --gtest_filter="$2" > "$log" 2>&1; then
      group_ok=0
    fi
    group_detail+="$1 $(grep -c '^\[       OK \]' "$log") passed, $(grep -c '^\[  SKIPPED \] .*(' "$log") skipped; "
  }
  gtest_cuda group_test '*NcclBackend*:*CudaTensors*'
  gtest_cuda actor_group_test '*OnCuda*'
  updates=$(grep -Eo "from W = 1's: [0-9.e+-]+" "$work/actor_group_test-cuda.log" | awk '{print $NF}' | paste -sd, -)
  if ((group_ok)); then
    record trainer_group OK "${group_detail}update differences ${updates:-none} (skipped: 2 GPUs needed)"
  else
    record trainer_group FAIL "see $work/*-cuda.log: $(grep -h -m1 -E 'Failure|FAILED|rror|no .* in build' "$work"/group_test-cuda.log "$work"/actor_group_test-cuda.log | head -1 | cut -c1-160)"
  fi
  if (cd "$repo/build-gpu-full" && timeout 300 ctest -R TransportConformanceTest \
      --output-on-failure) > "$work/conformance.log" 2>&1; then
    record conformance OK "$(grep -m1 'tests passed' "$work/conformance.log"); $(grep -c -- '\*\*\*Skipped' "$work/conformance.log") skipped (nccl: a GPU per rank, cuda_ipc: 1)"
  else
    record conformance FAIL "see $work/conformance.log: $(grep -m1 -E 'Failed|tests passed' "$work/conformance.log" | cut -c1-160)"
  fi
fi

# The transport programs, standalone.
if cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release > "$build/transports.log" 2>&1 &&
  cmake --build "$build" -j "$jobs" >> "$build/transports.log" 2>&1; then
  # run_check NAME PROGRAM [ARGS...]: the program's last line is the detail; exit 2 = no GPUs.
  run_check() {
    local name=$1 program=$2 rc
    shift 2
    "$build/$program" "$@" > "$build/$program.log" 2>&1
    rc=$?
    local last
    last=$(tail -1 "$build/$program.log")
    case $rc in
      0) record "$name" OK "$last" ;;
      2) record "$name" SKIP "$last" ;;
      *) record "$name" FAIL "exit $rc: $last" ;;
    esac
    return "$rc"
  }
  run_check nccl_test nccl_transport_gpu_test &&
    run_check nccl_bench nccl_bandwidth_bench "${bench_args[@]}"
  run_check cuda_ipc_test cuda_ipc_gpu_test && run_check cuda_ipc_bench cuda_ipc_bench
  run_check nccl_collectives nccl_collectives_gpu_test
else
  record transports FAIL "see $build/transports.log"
fi

# Decode speed, after the transport benchmarks (the bound uses cuda_ipc_bench's copy rate).
if [[ -z $cuda_skip ]]; then
  weight_bytes=$(du -cb "$big"/*.safetensors | tail -1 | cut -f1)
  copy=$(grep -E '^\| 1024 MiB \|' "$build/cuda_ipc_bench.log" 2>/dev/null | cut -d'|' -f3 | tr -d ' ')
  for n in 1 64; do
    if "$bin/rlmesh" generate --model "$big" --prompt "12345=" --n "$n" --temperature 0 \
        --max-new-tokens 256 --stop-id 258 --device cuda --dtype bfloat16 --json \
        > "$work/decode-$n.jsonl" 2> "$work/decode-$n.err"; then
      rate=$(grep -Eo '[0-9.]+ tokens/s' "$work/decode-$n.err" | cut -d' ' -f1)
      detail="$rate tokens/s at batch $n, $((weight_bytes >> 20)) MiB of weights"
      if [[ $n == 1 && -n $copy ]]; then
        detail+=$("$python" -c "b=2*$copy*1e9/$weight_bytes; print(f'; bound {b:.0f} tokens/s, ratio {$rate/b:.2f}')")
      fi
      record "decode_b$n" OK "$detail"
    else
      record "decode_b$n" FAIL "$(tail -1 "$work/decode-$n.err")"
    fi
  done
else
  record decode SKIP "$cuda_skip"
fi

code=0
((skipped)) && code=2
((failed)) && code=1
write_summary "finished, exit $code"
save_logs
cat "$summary"
exit "$code"
