#!/usr/bin/env bash
# The default run: plan the tiny three-stage recipe, prepare the fortunes corpus, then
# `baton run` it: pretrain (tp2 x pp2), a 4x context extension (tp2 x dp2, llama3 RoPE
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
echo "== baton run $recipe: every stage, supervised (run directory $run/run)"
"$top/$bin/baton" run "$recipe" --run-dir run
echo
echo "== baton status"
"$top/$bin/baton" status run
echo
echo "Metrics: $run/run/metrics.jsonl, TensorBoard: tensorboard --logdir $run/run/tb"
