#!/usr/bin/env bash
# baton-worker's command line: help, usage errors, specs it cannot run (exit 2, never
# retried), a short real run (exit 0, loss printed and decreasing), and what a run says
# of its fp8 calibration (none of the GEMMs in fp8: the stage's, or rank 0's under pp).
#   check-worker-cli.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-worker.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
expect() { # STATUS PATTERN -- ARGS...
  local status=$1 pattern=$2 out rc
  shift 3
  out=$("$worker" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: baton-worker $* -> exit $rc (want $status):"
    echo "$out" | tail -n 5
    failures=$((failures + 1))
  else
    echo "ok   baton-worker $* -> $rc"
  fi
}
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1
"$baton" data passkey --output data/passkey128_train --n-docs 50 --length 128 >/dev/null || exit 1
"$baton" spec "$src/recipes/tiny-cpu.yaml" --stage pretrain --out tiny.pb || exit 1
"$baton" spec "$src/tests/engine/precision.yaml" --stage fp32 --out small.pb || exit 1
printf 'not a protobuf\377\377\377' >junk.pb

expect 0 'usage: baton-worker' -- --help
expect 2 'usage: baton-worker' --
expect 2 "unknown option" -- --spec small.pb --frobnicate 3
expect 2 "expects a count, got 'many'" -- --spec small.pb --steps many
# a count that must be at least 1 refuses 0 (--steps 0 used to run the whole stage)
expect 2 "^baton-worker: --steps must be at least 1, got '0' \\(leave it out for the default\\)$" -- --spec small.pb --steps 0
expect 2 "^baton-worker: --log-every must be at least 1, got '0'" -- --spec small.pb --log-every 0
expect 2 'missing.pb: cannot open' -- --spec missing.pb
expect 2 'junk.pb: not a StageSpec' -- --spec junk.pb
# the paths its options name are checked before the ranks join and train: a typo is bad
# usage (exit 2), said at once, not after the stage has trained
refused() { # PATTERN ARGS...: exit 2 with PATTERN, and no step trained first
  local out
  out=$("$worker" --spec small.pb --steps 2 --eval-windows 2 "${@:2}" 2>&1)
  if [[ $? -ne 2 ]] || ! grep -Eq -- "$1" <<<"$out" || grep '^step ' >/dev/null <<<"$out"; then
    echo "FAIL: baton-worker ${*:2} not refused before training:"
    echo "$out" | tail -n 3
    failures=$((failures + 1))
  else
    echo "ok   baton-worker ${*:2} -> 2"
  fi
}
refused '^baton-worker: --valid no/such: no/such\.idx: cannot open: No such file or directory$' --valid no/such
refused '^baton-worker: --dump-params no/such/p\.f32: its directory does not exist$' --dump-params no/such/p.f32
refused '^baton-worker: --dump-params \./: a directory, not a file to write$' --dump-params ./
refused '^baton-worker: --init no/such: no such checkpoint or run directory$' --init no/such
expect 2 'layout tp2 pp2 cp1 dp1 ep1 is not supported by this worker' -- --spec tiny.pb
expect 0 'step +3/300' -- --spec tiny.pb --single-process --steps 3 --eval-windows 0
expect 0 'valid loss [0-9.]+ ' -- --spec small.pb --steps 30 --log-every 10 --eval-windows 8
# an fp8 stage with no GEMM in fp8 (2 layers, both first or last under first_last_bf16):
# said so, not an empty range of scales
"$baton" spec "$src/tests/engine/precision.yaml" --stage fp8 \
  --set stages.fp8.precision.first_last_bf16=true --out nofp8.pb 2>/dev/null || exit 1
expect 0 '^fp8: no GEMM runs in fp8 \(the LM head is bf16, and first_last_bf16 keeps the first and the last layer, all 2 of the model.s, in bf16\): no scale to calibrate$' \
  -- --spec nofp8.pb --steps 1 --eval-windows 0
# pp2 with the first pipeline stage holding only layer 0 (bf16 under first_last_bf16), the
# second layers 1-3 (1 and 2 in fp8): the stage has fp8 GEMMs (no plan warning), rank 0
# none, which it says rather than an empty range of scales
sed 's/n_layers: 2/n_layers: 4/; s/gpus_per_node: 1/gpus_per_node: 2/
  s/^defaults:/defaults:\n  parallel: {pp: 2, stage_layers: [1, 3]}/' \
  "$src/tests/engine/precision.yaml" >pp2.yaml
set_bf16=(--set stages.fp8.precision.first_last_bf16=true)
"$baton" spec pp2.yaml --stage fp8 "${set_bf16[@]}" --out pp2.pb || exit 1
out=$(timeout 120 "$baton" launch -n 2 -- "$worker" --spec pp2.pb --steps 1 --eval-windows 0 2>&1)
rc=$? plan=$("$baton" plan pp2.yaml "${set_bf16[@]}" 2>&1)
if [[ $rc == 0 ]] && grep -q '^\[0\] pipeline stage 0 of 2: model layers 0-0' <<<"$out" &&
  grep -Eq "^\[0\] fp8 scales calibrated from 2 micro-batch\(es\) \(rank 0's GEMMs all run in bf16: its layers are the model's first or last, under first_last_bf16\)$" <<<"$out" &&
  [[ $plan != *"no GEMM runs in fp8"* ]]; then
  echo "ok   pp2 fp8, pipeline stage 0 only layer 0: rank 0 says none of its GEMMs runs in fp8"
else
  echo "FAIL: pp2 fp8 with rank 0's layers all bf16 -> exit $rc:"
  grep -E "^\[0\] (fp8|pipeline stage)|rror" <<<"$out" | tail -n 5
  grep "no GEMM runs in fp8" <<<"$plan"
  failures=$((failures + 1))
fi
"$baton" spec "$src/tests/engine/precision.yaml" --stage fp8 --out fp8.pb || exit 1
expect 0 '^fp8 scales calibrated from 2 micro-batch\(es\): scales in \[[0-9]' \
  -- --spec fp8.pb --steps 1 --eval-windows 0
# A validation set smaller than the windows asked for: each window once, said so; one with
# no whole window (a small corpus's split): not evaluated, and the stage still succeeds.
head -c 1300 /usr/share/games/fortunes/fortunes >few.txt
"$baton" data prepare --input few.txt --output data/few --valid-fraction 0 >/dev/null || exit 1
expect 0 'valid loss [0-9.]+ .* over 20 windows of data/few_train \(all it holds\)' -- \
  --spec small.pb --steps 1 --valid data/few_train
printf 'tiny' >tiny.txt
"$baton" data prepare --input tiny.txt --output data/tiny --valid-fraction 0 >/dev/null || exit 1
expect 0 'valid loss not evaluated: data/tiny_train holds no window of seq_len \+ 1 = 65 tokens' \
  -- --spec small.pb --steps 1 --valid data/tiny_train

# The loss after 30 steps is below the loss after 10.
out=$("$worker" --spec small.pb --steps 30 --log-every 10 --eval-windows 0)
l10=$(sed -En 's/^step +10\/200  loss ([0-9.]*).*/\1/p' <<<"$out")
l30=$(sed -En 's/^step +30\/200  loss ([0-9.]*).*/\1/p' <<<"$out")
if ! awk -v a="$l10" -v b="$l30" 'BEGIN { exit !(a > 0 && b > 0 && b < a) }'; then
  echo "FAIL: loss did not fall: step 10 $l10, step 30 $l30"
  failures=$((failures + 1))
fi
# The same spec and seed give bitwise the same parameters.
"$worker" --spec small.pb --steps 30 --eval-windows 0 --dump-params a.f32 >/dev/null
"$worker" --spec small.pb --steps 30 --eval-windows 0 --dump-params b.f32 >/dev/null
if ! cmp -s a.f32 b.f32 || [[ ! -s a.f32 ]]; then
  echo "FAIL: two runs of the same spec end with different parameters"
  failures=$((failures + 1))
fi

# OpenBLAS's threads (worker/cpu/cpu_threads.h): one process takes the CPUs it may run
# on, each of 4 ranks of `baton launch` its share (2 virtual nodes: still one host), and
# OpenBLAS's own variable overrides both. (ctest pins OPENBLAS_NUM_THREADS=1 for the
# other tests, so that layouts and their one-process reference sum alike.)
blas_want() { # RANKS -> "THREADS CPUS"
  local cpus
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  echo "$((cpus / $1 > 1 ? cpus / $1 : 1)) $cpus"
}
blas_check() { # WHAT RANKS OUTPUT
  local want cpus got
  read -r want cpus <<<"$(blas_want "$2")"
  got=$(sed -En 's/^(\[0\] )?cpu backend: ([0-9]+) BLAS thread\(s\) per rank \(([0-9]+) CPUs \/ ([0-9]+) rank.*/\2 \3 \4/p' <<<"$3")
  # OpenBLAS caps the count at its build's maximum (32 or more).
  if [[ "$got" == "$want $cpus $2" ]] || { read -r g _ <<<"$got"; ((g >= 32 && g < want)); }; then
    echo "ok   $1: $got (threads, CPUs, ranks on this host)"
  else
    echo "FAIL: $1: '$got' (threads, CPUs, ranks), want '$want $cpus $2'"
    failures=$((failures + 1))
  fi
}
(
  unset OPENBLAS_NUM_THREADS GOTO_NUM_THREADS OMP_NUM_THREADS
  sed "s/gpus_per_node: 2/gpus_per_node: 4/" "$src/tests/engine/dp.yaml" >dp4.yaml
  "$baton" spec dp4.yaml --stage plain --out dp4.pb || exit 1
  blas_check "one process" 1 "$("$worker" --spec dp4.pb --single-process --steps 1 --eval-windows 0)"
  out=$(timeout 120 "$baton" launch -n 4 --nodes 2 -- "$worker" --spec dp4.pb --steps 1 \
    --eval-windows 0 --comm-timeout 30)
  blas_check "4 ranks" 4 "$out"
  # Their collectives in shared memory (worker/comm/comm_shm.h), or over Gloo when asked.
  comm_check() { # WHAT PATTERN OUTPUT
    if grep -Eq "^\[0\] cpu backend: $2" <<<"$3"; then echo "ok   $1"; else
      echo "FAIL: $1: no '$2' in:"; grep -F 'cpu backend' <<<"$3"; failures=$((failures + 1)); fi
  }
  comm_check "4 ranks: shared memory" 'collectives and point to point in shared memory \(all 4 ranks on one host' "$out"
  comm_check "4 ranks: Gloo when BATON_COMM_SHM=0" \
    'collectives over Gloo \(TCP\), as BATON_COMM_SHM=0 asks' \
    "$(BATON_COMM_SHM=0 timeout 120 "$baton" launch -n 4 --nodes 2 -- "$worker" --spec dp4.pb \
      --steps 1 --eval-windows 0 --comm-timeout 30)"
  exit "$failures"
) || failures=$((failures + 1))
# the variable's count, at most the CPUs, applied by the worker (OpenBLAS starts no pool as
# it loads, worker/cpu/cpu_blas_defer.h)
three=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
three=$((three < 3 ? three : 3))
OPENBLAS_NUM_THREADS=3 expect 0 "cpu backend: $three BLAS thread\\(s\\) per rank \\(set by OPENBLAS_NUM_THREADS\\)" \
  -- --spec small.pb --steps 1 --eval-windows 0

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
