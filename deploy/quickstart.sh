#!/usr/bin/env bash
# The default run: plan the tiny three-stage recipe, prepare the fortunes corpus, then
# `baton run` it: pretrain (tp2 x pp2), a 4x context extension (tp2 x cp2, llama3 RoPE
# rescale) and an fp8 stage, each handed the previous stage's checkpoint, as 4
# PMIx-launched workers on the CPU engine; then `baton status`. Everything lands in
# runs/quickstart/ (the run directory is runs/quickstart/run).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
bin=${BUILD_DIR:-build}/bin
recipe=$top/recipes/tiny-cpu.yaml
run=runs/quickstart

"$bin/baton" plan "$recipe"
mkdir -p "$run"
chmod 700 "$run"
cd "$run"
echo
echo "== preparing the fortunes corpus in $run/data"
"$top/$bin/baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes
echo
echo
echo "== passkey documents: for training (128 and 512 tokens) and for evaluation"
"$top/$bin/baton" data passkey --output data/passkey128_train --n-docs 2000 --length 128 \
  --seed 1 >/dev/null
"$top/$bin/baton" data passkey --output data/passkey512_train --n-docs 500 --length 512 \
  --seed 2 >/dev/null
"$top/$bin/baton" data passkey --output data/passkey128_eval --n-docs 50 --length 128 \
  --seed 11 >/dev/null
"$top/$bin/baton" data passkey --output data/passkey512_eval --n-docs 50 --length 512 \
  --seed 12 >/dev/null
echo
echo "== baton run $recipe: every stage, supervised (run directory $run/run)"
"$top/$bin/baton" run "$recipe" --run-dir run
echo
echo "== baton status"
"$top/$bin/baton" status run
echo
echo "== passkey retrieval (greedy, 50 documents each), before and after the context extension"
printf '%-26s %14s %14s\n' "checkpoint" "128 tokens" "512 tokens"
for ck in run/checkpoints/s0?-step*; do
  acc() { "$top/$bin/baton" eval "$ck" --passkey "$1" --json |
    sed -E 's/.*"passkey_accuracy": ([0-9.e+-]+), "digit_accuracy": ([0-9.e+-]+).*/\1 \2/' |
    awk '{ printf "%3.0f%% (%3.0f%% dig)", 100 * $1, 100 * $2 }'; }
  printf '%-26s %14s %14s\n' "${ck##*/}" "$(acc data/passkey128_eval)" "$(acc data/passkey512_eval)"
done
echo
echo "Metrics: $run/run/metrics.jsonl, TensorBoard: tensorboard --logdir $run/run/tb"
