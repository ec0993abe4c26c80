#!/usr/bin/env bash
# MoE blocks on each tp rank's own rows (sequence parallelism) against every tp rank
# running them on every row (without it), side by side (not a test).
#   bench/run-moe-sp-bench.sh BUILD_BIN_DIR [WORK_DIR] [ROUNDS]
# Trains bench/moe-sp-bench.yaml's two stages (tp2, every layer MoE) under
# `baton launch -n 2`, one after the other, ROUNDS times; prints each one's median tokens/s
# over the steps after the first two, the ratio to the run without sequence parallelism,
# the median CPU time of a run (user + sys of baton launch and its workers) and no-sp's over
# it ("cpu": above 1, less CPU than no-sp; steadier than the wall clock on a shared host),
# and the tp and dp bytes rank 0 sent a step (with sequence parallelism the routed
# experts' gradient sum goes over their holders, the edp group drawn from tp x dp,
# counted with dp).
set -euo pipefail
bin=$1 work=${2:-$(mktemp -d /tmp/baton-moe-sp-bench.XXXXXX)} rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
source "$src/bench/stage-bench-lib.sh"
mkdir -p "$work" && cd "$work"
stages=(no-sp sp)
bench_rounds "$bin" "$src/bench/moe-sp-bench.yaml" 2 "$rounds" "${stages[@]}"
base=$(median <no-sp.tps) base_cpu=$(median <no-sp.cpu)
for s in "${stages[@]}"; do
  tp=$(sed -En 's/^\[0\] communication per step.* tp ([0-9]+) .*/\1/p' "$s.log")
  dp=$(sed -En 's/^\[0\] communication per step.* dp ([0-9]+) .*/\1/p' "$s.log")
  awk -v s="$s" -v t="$(median <"$s.tps")" -v b="$base" -v c="$(median <"$s.cpu")" \
    -v bc="$base_cpu" -v n="$rounds" -v tp="$tp" -v dp="${dp:-0}" 'BEGIN {
    printf "%-6s %8.0f tok/s (median, %d rounds)  ratio to no-sp %.3f  CPU %.1f s, cpu %.3f  tp %d dp %d B/step\n",
           s, t, n, t / b, c, bc / c, tp, dp }'
done
