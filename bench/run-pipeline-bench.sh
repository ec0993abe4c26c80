#!/usr/bin/env bash
# Interleaved pipeline stages against non-interleaved 1F1B (not a test).
#   bench/run-pipeline-bench.sh BUILD_BIN_DIR [WORK_DIR] [ROUNDS]
# Trains bench/pipeline-bench.yaml's stages (pp2, 8 micro-batches a step: 1F1B, then 2 and
# 4 chunks per stage) under `baton launch -n 2`, one after the other, ROUNDS times; prints
# each one's median tokens/s over the steps after the first two, the ratio to 1F1B, the
# median CPU time of a run (user + sys of baton launch and its workers) and 1F1B's over it
# ("cpu": above 1, less CPU than 1F1B), and the bubble `baton plan` expects,
# (pp-1)/(v m + pp-1). Both stages run on one machine, a process each: the bubble is time
# a process waits (on a futex, no CPU), so it shows in the wall-clock ratio only; a
# neighbour's load slows the wall clock and leaves the CPU time as it was.
set -euo pipefail
bin=$1 work=${2:-$(mktemp -d /tmp/baton-pipeline-bench.XXXXXX)} rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
source "$src/bench/stage-bench-lib.sh"
mkdir -p "$work" && cd "$work"
stages=(1f1b interleaved interleaved4)
bench_rounds "$bin" "$src/bench/pipeline-bench.yaml" 2 "$rounds" "${stages[@]}"
pp=2 m=8 # bench/pipeline-bench.yaml's
base=$(median <1f1b.tps) base_cpu=$(median <1f1b.cpu)
for s in "${stages[@]}"; do
  v=$(case $s in 1f1b) echo 1 ;; interleaved) echo 2 ;; *) echo 4 ;; esac)
  awk -v s="$s" -v t="$(median <"$s.tps")" -v b="$base" -v c="$(median <"$s.cpu")" \
    -v bc="$base_cpu" -v v="$v" -v n="$rounds" -v pp="$pp" -v m="$m" 'BEGIN {
    printf "%-13s v=%d  %8.0f tok/s (median, %d rounds)  ratio to 1F1B %.3f  CPU %.1f s, cpu %.3f  plan bubble %.1f%%\n",
           s, v, t, n, t / b, c, bc / c, 100 * (pp - 1) / (v * m + pp - 1) }'
done
