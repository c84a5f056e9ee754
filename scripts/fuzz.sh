#!/usr/bin/env bash
# Longer runs of the parser fuzz targets of tests/fuzz, with AddressSanitizer and
# UndefinedBehaviorSanitizer; `make test` runs only their short deterministic ctests. Engines:
#   libfuzzer  clang++ -fsanitize=fuzzer,address,undefined, coverage-guided, in build-fuzz/
#              (the default when clang++ can link a libFuzzer program)
#   driver     GCC -fsanitize=address,undefined with the deterministic mutation driver, in
#              build-fuzz-driver/ (the default otherwise)
# Each build compiles only the fuzz targets and the torch-free libraries they need (FUZZ_BUILD
# names another build folder). An input that fails is left in <build>/findings/<target>/; the
# exit status is 1 when one did.
#
#   scripts/fuzz.sh [--engine libfuzzer|driver] [--seconds S] [--iterations N] [--seed S]
#                   [TARGET ...]
#   TARGET: safetensors_header model_config tokenizer_json yaml_config dataset_row (all)
#   --seconds: libFuzzer's time per target (default 60); --iterations and --seed: the driver's
#   mutants per target (default 200000) and PRNG seed (default 1). JOBS sets build parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."

engine=
seconds=60
iterations=200000
seed=1
targets=()
while (($#)); do
  case $1 in
    --engine | --seconds | --iterations | --seed)
      (($# >= 2)) || { echo "fuzz.sh: $1 needs a value" >&2; exit 2; }
      declare "${1#--}=$2"
      shift 2
      ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(safetensors_header model_config tokenizer_json yaml_config dataset_row)

libfuzzer_links() {
  command -v clang++ >/dev/null || return 1
  local dir rc=0
  dir=$(mktemp -d)
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$dir/t.cc"
  clang++ -fsanitize=fuzzer,address,undefined "$dir/t.cc" -o "$dir/t" 2>/dev/null || rc=1
  rm -rf "$dir"
  return $rc
}
if [[ -z $engine ]]; then
  if libfuzzer_links; then engine=libfuzzer; else engine=driver; fi
fi

# UBSan reports stop the run (as a crash would) instead of scrolling past.
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLMESH_SANITIZE=ON -DRLMESH_CUDA=OFF)
case $engine in
  libfuzzer)
    build=${FUZZ_BUILD:-build-fuzz}
    # clang's warnings differ from GCC's, which the default -Werror is tuned for.
    [[ -f $build/build.ninja ]] || cmake -S . -B "$build" "${common[@]}" -DCMAKE_CXX_COMPILER=clang++ \
      -DRLMESH_WERROR=OFF -DRLMESH_FUZZ_ENGINE=libfuzzer \
      "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined"
    ;;
  driver)
    build=${FUZZ_BUILD:-build-fuzz-driver}
    [[ -f $build/build.ninja ]] || cmake -S . -B "$build" "${common[@]}" \
      "-DCMAKE_CXX_FLAGS=-fno-sanitize-recover=undefined"
    ;;
  *) echo "fuzz.sh: --engine: expected libfuzzer or driver, got \"$engine\"" >&2; exit 2 ;;
esac
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-max_allocation_size_mb=4096:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  findings=$build/findings/$t
  mkdir -p "$findings"
  echo "fuzz.sh: $t ($engine)"
  if [[ $engine == libfuzzer ]]; then
    # New inputs go to the first folder; the committed seeds are only read.
    mkdir -p "$build/corpus/$t"
    "$build/tests/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=4096 -malloc_limit_mb=4096 \
      -timeout=10 -max_len=1048576 -print_final_stats=1 -artifact_prefix="$findings/" \
      "$build/corpus/$t" "tests/fuzz/corpus/$t" || status=1
  else
    "$build/tests/fuzz_$t" --corpus "tests/fuzz/corpus/$t" --iterations "$iterations" \
      --seed "$seed" --crash-file "$findings/crash-input" || status=1
  fi
done
exit $status
