#!/usr/bin/env bash
# Builds baton and runs every test: the normal build (-Werror), then the whole suite
# again under AddressSanitizer + UndefinedBehaviorSanitizer (less the tests labelled slow,
# and the slurm ones, which bring up a whole test cluster and run once, in the normal
# build), then the recipe fuzzer for a fixed time (clang/libFuzzer). Build directories:
# build/, build-asan/, build-fuzz/.
#   FUZZ_SECONDS=60 (0 skips the fuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-60}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

step() { printf '\n== %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "normal build"
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --parallel "$jobs"
ctest --test-dir build --output-on-failure --parallel "$jobs"

step "sanitizer build (ASan + UBSan)"
cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DBATON_SANITIZE=ON >/dev/null
cmake --build build-asan --parallel "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --parallel "$jobs" --label-exclude 'slow|slurm'

if [[ "$fuzz_seconds" -gt 0 ]]; then
  step "recipe fuzzer, ${fuzz_seconds}s"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug \
    -DBATON_FUZZ=ON >/dev/null
  cmake --build build-fuzz --parallel "$jobs" --target fuzz_recipe
  corpus=$(mktemp -d)
  trap 'rm -rf "$corpus"' EXIT
  cp recipes/*.yaml tests/recipes/bad/* "$corpus"/
  build-fuzz/tests/fuzz_recipe -max_total_time="$fuzz_seconds" -max_len=8192 -timeout=10 \
    -print_final_stats=1 -artifact_prefix=build-fuzz/ "$corpus" 2>&1 | tail -n 15
fi
step "done"
