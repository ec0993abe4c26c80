#!/usr/bin/env bash
# MoE blocks on each tp rank's own rows (sequence parallelism) against every tp rank
# running them on every row (without it), side by side (not a test).
#   bench/run-moe-sp-bench.sh BUILD_BIN_DIR [WORK_DIR] [ROUNDS]
# Trains bench/moe-sp-bench.yaml's two stages (tp2, every layer MoE) under
# `baton launch -n 2`, one after the other, ROUNDS times; prints each one's median tokens/s
# over the steps after the first two, the ratio to the run without sequence parallelism,
# and the tp bytes rank 0 sent a step.
set -euo pipefail
bin=$1 work=${2:-$(mktemp -d /tmp/baton-moe-sp-bench.XXXXXX)} rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work" && cd "$work"
[[ -e data/fortunes_train.bin ]] || "$bin/baton" data prepare --input /usr/share/games/fortunes \
  --split-on-percent --output data/fortunes >/dev/null
stages=(no-sp sp)
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for s in "${stages[@]}"; do
  "$bin/baton" spec "$src/bench/moe-sp-bench.yaml" --stage "$s" --out "$s.pb"
  : >"$s.tps"
done
for ((r = 0; r < rounds; r++)); do
  for s in "${stages[@]}"; do
    "$bin/baton" launch -n 2 -- "$bin/baton-worker" --spec "$s.pb" --eval-windows 0 \
      --save-every 0 --run-dir "run-$s" --comm-timeout 120 >"$s.log"
    sed -En 's/^\[0\] step +([0-9]+)\/[0-9]+ .* ([0-9.]+) tok\/s.*/\1 \2/p' "$s.log" |
      awk '$1 > 2 {print $2}' >>"$s.tps"
    rm -rf "run-$s"
  done
done
base=$(median <no-sp.tps)
for s in "${stages[@]}"; do
  [[ -s $s.tps ]] || { echo "$s: no step lines read from the worker's output" >&2; exit 1; }
  tp=$(sed -En 's/^\[0\] communication per step.* tp ([0-9]+) .*/\1/p' "$s.log")
  awk -v s="$s" -v t="$(median <"$s.tps")" -v b="$base" -v n="$rounds" -v tp="$tp" 'BEGIN {
    printf "%-6s %8.0f tok/s (median, %d rounds)  ratio to no-sp %.3f  tp %d B/step\n",
           s, t, n, t / b, tp }'
done
