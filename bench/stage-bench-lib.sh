# Shared by the benchmarks that train a recipe's stages side by side under `baton launch`
# (run-pipeline-bench.sh, run-moe-sp-bench.sh); sourced, not run.
#   bench_rounds BIN RECIPE RANKS ROUNDS STAGE...
# In the current directory: prepares the fortunes corpus (once), then trains each stage in
# turn, ROUNDS times; each stage's tokens/s of the steps after the first two gather in
# STAGE.tps, each run's CPU seconds (user + sys of `baton launch` and its workers, the whole
# run: setup and every step) in STAGE.cpu, and its last run's output in STAGE.log.
# `median <FILE` prints a median (the mean of the middle two for an even count).

median() {
  sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

bench_rounds() {
  local bin=$1 recipe=$2 ranks=$3 rounds=$4 s r
  shift 4
  [[ -e data/fortunes_train.bin ]] || "$bin/baton" data prepare \
    --input /usr/share/games/fortunes --split-on-percent --output data/fortunes >/dev/null
  for s in "$@"; do
    "$bin/baton" spec "$recipe" --stage "$s" --out "$s.pb"
    : >"$s.tps"
    : >"$s.cpu"
  done
  for ((r = 0; r < rounds; r++)); do
    for s in "$@"; do
      { TIMEFORMAT='%3U %3S' && time "$bin/baton" launch -n "$ranks" -- "$bin/baton-worker" \
        --spec "$s.pb" --eval-windows 0 --save-every 0 --run-dir "run-$s" --comm-timeout 120 \
        >"$s.log" 2>"$s.err"; } 2>"$s.time" || { cat "$s.err" >&2; return 1; }
      awk '{ print $1 + $2 }' "$s.time" >>"$s.cpu"
      sed -En 's/^\[0\] step +([0-9]+)\/[0-9]+ .* ([0-9.]+) tok\/s.*/\1 \2/p' "$s.log" |
        awk '$1 > 2 {print $2}' >>"$s.tps"
      rm -rf "run-$s"
    done
  done
  for s in "$@"; do
    [[ -s $s.tps ]] || { echo "$s: no step lines read from the worker's output" >&2; return 1; }
  done
}
