#!/usr/bin/env bash
# A completed run's kept recipe (RUN_DIR/recipe.yaml) edited, then resumed or shown, with
# the helpers of run-common.sh. CASE:
#   edit-data-end       a completed stage's steps or global_batch edited and a stage
#                       appended: the new stage starts where the run's data ended (the
#                       journal's record of b's completion, = b's final checkpoint's
#                       next_sample), not where the edited recipe would put it; the
#                       STAGE_COMPLETED records carry that end.
#   edit-data-end-old   the same, the run's stages completed under a baton older than
#                       that record (its data_end taken out of the journal): the end is
#                       read from b's final checkpoint; with that checkpoint gone, from the
#                       recipe, said.
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
edit-data-end-old)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  end=$(next_sample r1/checkpoints/s01-step00000006)
  journal_drop_data_end r1
  # b's steps lowered after it completed: c starts where b's final checkpoint says it ended
  edited_resume low 's/{name: b, steps: 6}/{name: b, steps: 4}/'
  [[ $(started low 2) == "$end" ]] || { grep started low/logs/s02-a00.log; fail "c did not start at b's end $end (its final checkpoint's) after b's steps were lowered"; }
  ! grep -q "completed under an older baton" low.out || { cat low.out; fail "the end was read, but said taken from the recipe"; }
  # b's final checkpoint gone too: the recipe's end (a 4 + b 4 steps of 4), said
  rm -rf r1/checkpoints/s01-step00000006
  edited_resume gone 's/{name: b, steps: 6}/{name: b, steps: 4}/'
  [[ $(started gone 2) == 32 ]] || { grep started gone/logs/s02-a00.log; fail "c did not start at the recipe's end of b (32)"; }
  grep -q 'stage "b" completed under an older baton, which did not journal where its data ended, and its final checkpoint checkpoints/s01-step00000006 is gone: stage "c" starts at global sample 32' gone.out ||
    { cat gone.out; fail "the recipe's end taken without a word"; }
  echo "$case: without the journal's data end, b's final checkpoint tells ($end); without it, the recipe, said"
  ;;
edit-status-moved)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  # moved DIR PYTHON WANT STEPS: a copy of r1 as DIR, its recipe.yaml changed by PYTHON (on
  # s): status warns saying WANT (grep -E) and shows a and b as the run trained them (the
  # planned steps STEPS, '?' where the recipe lacks the stage), text and --json alike
  moved() {
    rm -rf "$1"
    cp -a r1 "$1"
    /usr/bin/python3 -c "
import sys
p = sys.argv[2] + '/recipe.yaml'
s = open(p).read()
exec(sys.argv[1])
open(p, 'w').write(s)" "$2" "$1"
    "$baton" status "$1" >"$1.st" 2>"$1.err" || fail "status of $1 failed"
    grep -Eq "warning: the kept recipe \($1/recipe.yaml\) no longer matches the run's stages: $3; 'baton resume' refuses it" "$1.err" ||
      { cat "$1.err" "$1.st"; fail "status of $1 does not warn: $3"; }
    local a b
    read -r a b <<<"${4//\?/[?]}"
    grep -Eq "^  a +done +4/$a " "$1.st" && grep -Eq "^  b +done +6/$b " "$1.st" &&
      [[ $(grep -cE '^  [a-z?]+ +(done|pending|stopped|running)' "$1.st") == 2 ]] &&
      grep -q "valid loss  a [0-9.]*  b [0-9.]*$" "$1.st" ||
      { cat "$1.st"; fail "status of $1 shows the history under other names"; }
    "$baton" status "$1" --json 2>/dev/null | /usr/bin/python3 -c '
import json, re, sys
j = json.load(sys.stdin)
steps = [None if x == "?" else int(x) for x in sys.argv[2].split()]
got = [(s["name"], s["state"], s["step"], s["steps"]) for s in j["stages"]]
assert got == [("a", "done", 4, steps[0]), ("b", "done", 6, steps[1])], got
assert re.search(sys.argv[1], j["recipe_mismatch"] or ""), j["recipe_mismatch"]' "$3" "$4" ||
      fail "status --json of $1"
    rc=0
    "$baton" resume "$1" --quiet >"$1.res" 2>&1 || rc=$?
    [[ $rc == 2 ]] || { cat "$1.res"; fail "resume of $1 exited $rc, not 2"; }
  }
  moved del 's = s.replace("  - {name: a, steps: 4}\n", "")' \
    'the recipe.s stage 1 is "b", the run.s stage 2, and the run.s stage "a" is no longer in it' "? 6"
  moved ins 's = s.replace("  - {name: b", "  - {name: x, steps: 8}\n  - {name: b")' \
    'stage "b" was the run.s stage 2 and is the recipe.s stage 3 now' "4 6"
  moved swap 's = s.replace("  - {name: a, steps: 4}\n  - {name: b, steps: 6}\n", "  - {name: b, steps: 6}\n  - {name: a, steps: 4}\n")' \
    'stage "a" was the run.s stage 1 and is the recipe.s stage 2 now' "4 6"
  # a stage renamed in place and one appended: no warning, the recipe's names
  cp -a r1 ren
  sed -i 's/name: b,/name: b2,/' ren/recipe.yaml
  echo '  - {name: c, steps: 2}' >>ren/recipe.yaml
  "$baton" status ren >ren.st 2>ren.err
  [[ ! -s ren.err ]] && grep -Eq '^  b2 +done +6/6 ' ren.st && grep -Eq '^  c +pending +0/2 ' ren.st ||
    { cat ren.err ren.st; fail "status of a stage renamed in place"; }
  echo "$case: status warns of moved stages and shows the run's own"
  ;;
edit-status-running)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  echo '  - {name: c, steps: 60}' >>r1/recipe.yaml
  "$baton" status r1 | grep "now has more, from stage \"c\" (new) on: 'baton resume" >/dev/null ||
    { "$baton" status r1; fail "status before the resume does not say what resume trains"; }
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" resume r1 --quiet >res.out 2>&1 &
  bpid=$! rpid=$!
  wait_step 2 2 >/dev/null
  "$baton" status r1 >st.out
  stop_run
  grep -q "^run r1: running (baton resume pid $rpid on [^)]*);" st.out && grep -Eq '^  c +running +[0-9]+/60 ' st.out ||
    { cat st.out; fail "status of the extension being trained"; }
  ! grep -q "'baton resume\|completed, but" st.out || { cat st.out; fail "status of a running extension tells to resume it"; }
  echo "$case: status of a running extension says running, no resume advice"
  ;;
*)
  fail "unknown case"
  ;;
esac
