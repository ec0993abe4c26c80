#!/usr/bin/env bash
# A completed run's kept recipe (RUN_DIR/recipe.yaml) edited, then resumed or shown, with
# the helpers of run-common.sh. CASE:
#   edit-data-end       a completed stage's steps or global_batch edited and a stage
#                       appended: the new stage starts where the run's data ended (the
#                       journal's record of b's completion, = b's final checkpoint's
#                       next_sample), not where the edited recipe would put it; the
#                       STAGE_COMPLETED records carry that end.
#   edit-status-moved   stages removed, inserted or reordered (which resume refuses):
#                       status says so, text and --json, and shows the run's stages under
#                       the names they trained with, never one stage's history under
#                       another's name.
#   edit-status-running status of a completed run's appended stage being trained: running,
#                       without the line that tells to run 'baton resume'.
#   check-edit-data.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
one_rank_recipe ed "checkpoint: {every_steps: 2}" "{name: a, steps: 4}" "{name: b, steps: 6}" \
  >ed.yaml

# started DIR STAGE: the global sample the stage's first attempt started at
started() {
  sed -En 's/^\[0\] started from .* at step [0-9]+ \(global sample ([0-9]+)\).*/\1/p' \
    "$1/logs/s0$2-a00.log"
}
# next_sample CKPT: the sample its stage reads next, as baton ckpt inspect says
next_sample() {
  "$baton" ckpt inspect "$1" --json | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin)["next_sample"])'
}
# edited_resume DIR SED: a copy of r1 as DIR, its recipe.yaml edited by SED and stage c
# appended, resumed to the end
edited_resume() {
  rm -rf "$1"
  cp -a r1 "$1"
  sed -i "$2" "$1/recipe.yaml"
  echo '  - {name: c, steps: 2}' >>"$1/recipe.yaml"
  "$baton" resume "$1" --quiet >"$1.out" 2>&1 || { cat "$1.out"; fail "resume of $1 failed"; }
}

case $case in
edit-data-end)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  end=$(next_sample r1/checkpoints/s01-step00000006)
  [[ $end == 40 ]] || fail "b's final checkpoint reads $end next, not 40 (a 4 + b 6 steps of 4)"
  # b's steps lowered after it completed (10 -> 4: not trained again)
  edited_resume low 's/{name: b, steps: 6}/{name: b, steps: 4}/'
  [[ $(started low 2) == "$end" ]] || { grep started low/logs/s02-a00.log; fail "c did not start at b's end $end after b's steps were lowered"; }
  # a's steps raised, a's global_batch doubled after they completed
  edited_resume high 's/{name: a, steps: 4}/{name: a, steps: 9}/'
  [[ $(started high 2) == "$end" ]] || { grep started high/logs/s02-a00.log; fail "c did not start at b's end $end after a's steps were raised"; }
  edited_resume batch 's/{name: a, steps: 4}/{name: a, steps: 4, global_batch: 8}/'
  [[ $(started batch 2) == "$end" ]] || { grep started batch/logs/s02-a00.log; fail "c did not start at b's end $end after a's global_batch changed"; }
  # the journal records where each stage ended; so c's end is where a d appended starts
  c_end=$(next_sample low/checkpoints/s02-step00000002)
  sed -i 's/{name: c, steps: 2}/{name: c, steps: 1}/' low/recipe.yaml
  echo '  - {name: d, steps: 1}' >>low/recipe.yaml
  "$baton" resume low --quiet >low2.out 2>&1 || { cat low2.out; fail "resume of low with d failed"; }
  [[ $c_end == $((end + 8)) && $(started low 3) == "$c_end" ]] ||
    { grep started low/logs/s03-a00.log; fail "d did not start at c's end $c_end"; }
  echo "$case: an appended stage starts where the run's data ended ($end), whatever the edits"
  ;;
*)
  fail "unknown case"
  ;;
esac
