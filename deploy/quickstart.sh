#!/usr/bin/env bash
# The default run, as far as baton goes today: plan the tiny three-stage recipe, prepare
# the fortunes corpus, then train the recipe's first stage (pretrain, tp2 x pp2) as 4
# PMIx-launched workers on the CPU engine and report the validation loss. Everything
# lands in runs/quickstart/. (The stage-to-stage hand-off comes with `baton run`.)
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
echo "== training stage 'pretrain' of $recipe: 4 workers, tp2 x pp2"
"$top/$bin/baton" spec "$recipe" --stage pretrain --out pretrain.pb
"$top/$bin/baton" launch -n 4 -- "$top/$bin/baton-worker" --spec pretrain.pb --log-every 25 \
  --eval-windows 190
