#!/usr/bin/env bash
# The default run, as far as baton goes today: plan the tiny three-stage recipe, prepare
# the fortunes corpus, then train the recipe's first stage (pretrain) in one process on
# the CPU engine and report the validation loss. Everything lands in runs/quickstart/.
# (Several worker processes and the stage-to-stage hand-off come with `baton run`.)
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
echo "== training stage 'pretrain' of $recipe in one process (the reference layout)"
"$top/$bin/baton" spec "$recipe" --stage pretrain --out pretrain.pb
"$top/$bin/baton-worker" --spec pretrain.pb --single-process --log-every 25 --eval-windows 190
