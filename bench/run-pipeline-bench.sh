#!/usr/bin/env bash
# Interleaved pipeline stages against non-interleaved 1F1B (not a test).
#   bench/run-pipeline-bench.sh BUILD_BIN_DIR [WORK_DIR] [ROUNDS]
# Trains bench/pipeline-bench.yaml's stages (pp2, 8 micro-batches a step: 1F1B, then 2 and
# 4 chunks per stage) under `baton launch -n 2`, one after the other, ROUNDS times; prints
# each one's median tokens/s over the steps after the first two, the ratio to 1F1B, and
# the bubble `baton plan` expects, (pp-1)/(v m + pp-1). Both stages run on one machine, a
# process each: the bubble is time a process waits.
set -euo pipefail
bin=$1 work=${2:-$(mktemp -d /tmp/baton-pipeline-bench.XXXXXX)} rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work" && cd "$work"
[[ -e data/fortunes_train.bin ]] || "$bin/baton" data prepare --input /usr/share/games/fortunes \
  --split-on-percent --output data/fortunes >/dev/null
stages=(1f1b interleaved interleaved4)
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for s in "${stages[@]}"; do
  "$bin/baton" spec "$src/bench/pipeline-bench.yaml" --stage "$s" --out "$s.pb"
  : >"$s.tps"
done
for ((r = 0; r < rounds; r++)); do
  for s in "${stages[@]}"; do
    "$bin/baton" launch -n 2 -- "$bin/baton-worker" --spec "$s.pb" --eval-windows 0 \
      --save-every 0 --run-dir "run-$s" --comm-timeout 120 |
      sed -En 's/^\[0\] step +([0-9]+)\/[0-9]+ .* ([0-9.]+) tok\/s.*/\1 \2/p' |
      awk '$1 > 2 {print $2}' >>"$s.tps"
    rm -rf "run-$s"
  done
done
for s in "${stages[@]}"; do
  [[ -s $s.tps ]] || { echo "$s: no step lines read from the worker's output" >&2; exit 1; }
done
pp=2 m=8 # bench/pipeline-bench.yaml's
base=$(median <1f1b.tps)
for s in "${stages[@]}"; do
  v=$(case $s in 1f1b) echo 1 ;; interleaved) echo 2 ;; *) echo 4 ;; esac)
  awk -v s="$s" -v t="$(median <"$s.tps")" -v b="$base" -v v="$v" -v n="$rounds" -v pp="$pp" \
    -v m="$m" 'BEGIN {
    printf "%-13s v=%d  %8.0f tok/s (median, %d rounds)  ratio to 1F1B %.3f  plan bubble %.1f%%\n",
           s, v, t, n, t / b, 100 * (pp - 1) / (v * m + pp - 1) }'
done
