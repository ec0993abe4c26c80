#!/usr/bin/env bash
# A run's kept recipe (RUN_DIR/recipe.yaml) edited between runs, with the helpers of
# run-common.sh. CASE:
#   edit-stages   a run stopped in its second stage: stage a removed, a stage inserted
#                 before b, a and b swapped, and b (in progress) removed are each refused by
#                 resume, exit 2, before any worker starts (no spec written, the journal
#                 unchanged), naming the stage and what changed; b renamed in place with a
#                 stage appended continues b from its stop checkpoint and completes.
#   edit-extend   a completed run whose recipe gains a stage: status says stopped (not
#                 completed) with the stage pending, resume trains it (a hand-off from b's
#                 final checkpoint at b's data position), exit 0; more steps for that last
#                 stage: resume continues it from its final checkpoint to the new end.
#   edit-extend-append  a completed run whose last stage gains steps (12 -> 15) and which
#                 gains a stage c, both trained by one resume: every record of
#                 metrics.jsonl and valid.jsonl lies at its own global step, increasing
#                 (c's at 4 + 15 + step, after b's new steps, not on top of them), and
#                 TensorBoard holds each once.
#   edit-extend-check   the pre-launch resume check on an extended last stage: a seed
#                 changed with b given more steps is refused, exit 2, before any worker
#                 (nothing journaled); b's extension stopped past its old end: status shows
#                 the step it reached and the steps it completed with (12, not where the
#                 extension stopped), its steps then set below its stop checkpoint (above
#                 12) refused the same way, set to the checkpoint's step it completes;
#                 set back to 12 with a stage appended, refused (the new stage would take
#                 b's extension checkpoint, past b's end, as its hand-off).
#   edit-name     the recipe's name: changed while a stage is in progress: resume refuses,
#                 exit 2, naming both names, before any worker starts; put back, it continues.
#   edit-diff     baton run EDITED.yaml --run-dir of a run kept for another recipe: refused,
#                 exit 2, naming the differing fields (file:line, path, old and new), a stage
#                 added, and how to continue (the kept copy, baton resume); comments only:
#                 said so.
#   check-edit.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
one_rank_recipe ed "checkpoint: {every_steps: 2}" "{name: a, steps: 4}" "{name: b, steps: 12}" \
  >ed.yaml

# stopped_run: r1 stopped by SIGTERM in stage b at step 5 or later, kept as r1.bak
stopped_run() {
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 1 5 >/dev/null
  stop_run
  cp -a r1 r1.bak
}
# edited DIR PYTHON: a copy of r1.bak as DIR, its recipe.yaml changed by PYTHON (on s)
edited() {
  rm -rf "$1"
  cp -a r1.bak "$1"
  /usr/bin/python3 -c "
import sys
p = sys.argv[2] + '/recipe.yaml'
s = open(p).read()
exec(sys.argv[1])
open(p, 'w').write(s)" "$2" "$1"
}
# refused DIR PATTERN: resume of DIR exits 2 saying PATTERN, and starts nothing
refused() {
  local rc=0 specs journal
  specs=$(ls "$1/specs" | wc -l) journal=$(md5sum <"$1/journal")
  "$baton" resume "$1" --quiet >"$1.out" 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat "$1.out"; fail "$1: resume exited $rc, not 2"; }
  grep -qE "$2" "$1.out" || { cat "$1.out"; fail "$1: resume did not say: $2"; }
  [[ $(ls "$1/specs" | wc -l) == "$specs" && $(md5sum <"$1/journal") == "$journal" ]] ||
    fail "$1: the refused resume started an attempt or wrote the journal"
  "$baton" status "$1" --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["state"] == "stopped"' || fail "$1: status is not stopped"
}

case $case in
edit-stages)
  stopped_run
  edited del 's = s.replace("  - {name: a, steps: 4}\n", "")'
  refused del 'the recipe.s stage 1 is "b", the run.s stage 2, and the run.s stage "a" is no longer in it'
  edited ins 's = s.replace("  - {name: b", "  - {name: x, steps: 8}\n  - {name: b")'
  refused ins 'stage "b" was the run.s stage 2 and is the recipe.s stage 3 now'
  edited swap 's = s.replace("  - {name: a, steps: 4}\n  - {name: b, steps: 12}\n", "  - {name: b, steps: 12}\n  - {name: a, steps: 4}\n")'
  refused swap 'stage "a" was the run.s stage 1 and is the recipe.s stage 2 now'
  edited delb 's = s.replace("  - {name: b, steps: 12}\n", "")'
  refused delb 'stage "b", the run.s stage 2, is no longer in the recipe'
  grep -q "nothing was started.*init: $work/delb/checkpoints/s01-step" delb.out ||
    { cat delb.out; fail "the refusal does not say how to go on"; }
  # renamed in place, one stage appended: continued
  edited ren 's = s.replace("name: b,", "name: b2,") + "  - {name: c, steps: 2}\n"'
  "$baton" resume ren --quiet >ren.out 2>&1 || { cat ren.out; fail "resume of a renamed stage failed"; }
  grep -q "started from $work/ren at step [5-9]" ren/logs/s01-a01.log ||
    { grep started ren/logs/s01-a01.log; fail "the renamed stage did not continue from its checkpoint"; }
  [[ $(stage_losses ren | cut -d' ' -f1,2 | tr '\n' ' ') == "a done b2 done c done " ]] ||
    { stage_losses ren; fail "the renamed run did not complete"; }
  echo "$case: removed, inserted, swapped stages refused before any worker; a rename in place continued"
  ;;
edit-extend)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  echo '  - {name: c, steps: 3}' >>r1/recipe.yaml
  "$baton" status r1 >st.out
  grep -q "^run r1: stopped" st.out && grep -qE '^  c +pending +0/3' st.out &&
    grep -q "now has more, from stage \"c\" (new) on" st.out || { cat st.out; fail "status of the extended run"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["state"] == "stopped"' || fail "status --json says completed"
  "$baton" resume r1 >res.out 2>&1 || { cat res.out; fail "resume of the extended run failed"; }
  grep -q "the run completed, but its recipe .* now has more, from stage \"c\" (new) on: training it" res.out ||
    { cat res.out; fail "resume did not say it trains the new stage"; }
  grep -q "started from $work/r1 at step 0 (global sample 64)" r1/logs/s02-a00.log ||
    { grep started r1/logs/s02-a00.log; fail "c did not take b's hand-off at b's data position"; }
  [[ $(stage_losses r1 | cut -d' ' -f1,2 | tr '\n' ' ') == "a done b done c done " ]] ||
    { stage_losses r1; fail "the extended run did not complete"; }
  sed -i 's/{name: c, steps: 3}/{name: c, steps: 5}/' r1/recipe.yaml
  "$baton" status r1 | grep -E '^  c +stopped +3/5' >/dev/null || { "$baton" status r1; fail "c with more steps not shown stopped"; }
  "$baton" resume r1 >res2.out 2>&1 || { cat res2.out; fail "resume of the longer stage failed"; }
  grep -q 'from stage "c" (5 steps, completed with 3) on: training it' res2.out ||
    { cat res2.out; fail "resume did not say it continues c"; }
  grep -q "started from $work/r1 at step 3 " r1/logs/s02-a01.log ||
    { grep started r1/logs/s02-a01.log; fail "c did not continue from its final checkpoint"; }
  "$baton" status r1 | grep -E '^  c +done +5/5' >/dev/null || { "$baton" status r1; fail "c not done 5/5"; }
  "$baton" resume r1 >res3.out 2>&1 && grep -q "already completed" res3.out ||
    { cat res3.out; fail "the completed run was not seen as completed"; }
  echo "$case: a completed run's new stage and new steps trained by resume"
  ;;
edit-extend-append)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  sed -i 's/{name: b, steps: 12}/{name: b, steps: 15}/' r1/recipe.yaml
  echo '  - {name: c, steps: 3}' >>r1/recipe.yaml
  "$baton" resume r1 >res.out 2>&1 || { cat res.out; fail "resume of the extended run failed"; }
  grep -q 'from stage "b" (15 steps, completed with 12) on: training it' res.out ||
    { cat res.out; fail "resume did not say it continues b"; }
  [[ $(stage_losses r1 | cut -d' ' -f1,2 | tr '\n' ' ') == "a done b done c done " ]] ||
    { stage_losses r1; fail "the extended run did not complete"; }
  /usr/bin/python3 - r1 <<'PY' || fail "global steps of the extended run overlap"
import json, sys
for f in ("metrics.jsonl", "valid.jsonl"):
    rows = [json.loads(l) for l in open(sys.argv[1] + "/" + f)]
    g = [r["global_step"] for r in rows]
    print(f, [(r["stage"], r["step"], r["global_step"]) for r in rows if r["stage"] != "a"])
    assert all(x < y for x, y in zip(g, g[1:])), (f, "global steps not increasing", g)
    bad = [r for r in rows if r["stage"] == "c" and r["global_step"] != 4 + 15 + r["step"]]
    assert not bad, (f, "c's global steps do not follow b's 15", bad[:2])
    assert max(r["step"] for r in rows if r["stage"] == "b") == 15, (f, "b did not reach 15")
PY
  /usr/bin/python3 "$src/tests/control/read_tb.py" r1/tb r1/metrics.jsonl >tb.txt ||
    fail "TensorBoard holds a step twice or lacks records of metrics.jsonl"
  echo "$case: b's new steps and the new stage c at their own global steps"
  ;;
edit-extend-check)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  cp -a r1 r1.bak
  edited seed 's = s.replace("{name: b, steps: 12}", "{name: b, steps: 15}").replace("seed: 3\n", "seed: 4\n")'
  refused seed 'stage "b" cannot resume from its checkpoint checkpoints/s01-step0*12: seed 3 -> 4'
  # b's extension stopped past its old end
  sed -i 's/{name: b, steps: 12}/{name: b, steps: 40}/' r1/recipe.yaml
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" resume r1 --quiet >ext.out 2>&1 &
  bpid=$!
  wait_step 1 17 >/dev/null
  stop_run
  c=$(ls -d r1/checkpoints/s01-step* | tail -1)
  k=$((10#${c##*step}))
  ((k >= 16)) || fail "b's stop checkpoint is at step $k, before 16"
  "$baton" status r1 >st.out
  grep -q 'now has more, from stage "b" (40 steps, completed with 12) on' st.out ||
    { cat st.out; fail "status does not say b completed with 12"; }
  step=$(sed -En 's/^  b +stopped +([0-9]+)\/40 .*/\1/p' st.out)
  [[ -n $step ]] && ((step >= k)) || { cat st.out; fail "status shows b at step '$step', not the $k its checkpoint reached"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
b = json.load(sys.stdin)["stages"][1]
assert b["step"] >= int(sys.argv[1]) and b["state"] == "stopped", b' "$k" ||
    fail "status --json shows a stale step for b"
  # the extension undone (b back to 12) with a stage appended: c would take b's step-$k
  # checkpoint, past the end b completed at, as its hand-off: refused
  sed -i 's/{name: b, steps: 40}/{name: b, steps: 12}\n  - {name: c, steps: 2}/' r1/recipe.yaml
  refused r1 "stage \"c\" would start from checkpoints/s01-step0*$k, stage \"b\"'s, past step 12"
  sed -i -e 's/{name: b, steps: 12}/{name: b, steps: 40}/' -e '/{name: c, steps: 2}/d' r1/recipe.yaml
  sed -i 's/{name: b, steps: 40}/{name: b, steps: 14}/' r1/recipe.yaml
  refused r1 "stage \"b\" has steps: 14 in .* but its checkpoint checkpoints/s01-step0*$k is at step $k"
  sed -i "s/{name: b, steps: 14}/{name: b, steps: $k}/" r1/recipe.yaml
  "$baton" resume r1 --quiet >res.out 2>&1 || { cat res.out; fail "resume with b's steps at its checkpoint's failed"; }
  "$baton" status r1 | grep -E "^  b +done +$k/$k " >/dev/null || { "$baton" status r1; fail "b not done $k/$k"; }
  echo "$case: an extended stage's edits refused before launch, its status step current"
  ;;
edit-name)
  stopped_run
  edited ren 's = s.replace("name: ed\n", "name: ed2\n")'
  refused ren 'the recipe.s name: is "ed2" now, but stage "b" is in progress under the name "ed", which its checkpoints record'
  grep -q "Put back name: ed in $work/ren/recipe.yaml" ren.out || { cat ren.out; fail "no way on"; }
  sed -i 's/^name: ed2$/name: ed/' ren/recipe.yaml
  "$baton" resume ren --quiet >ren2.out 2>&1 || { cat ren2.out; fail "resume with the name put back failed"; }
  grep -q "started from $work/ren at step [5-9]" ren/logs/s01-a01.log ||
    { grep started ren/logs/s01-a01.log; fail "b did not continue from its checkpoint"; }
  echo "$case: the recipe renamed mid-stage refused, naming both names"
  ;;
edit-diff)
  "$baton" run ed.yaml --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "the run failed"; }
  sed 's/steps: 12}/steps: 14}/' ed.yaml >add.yaml
  echo '  - {name: c, steps: 3}' >>add.yaml
  rc=0
  "$baton" run add.yaml --run-dir r1 --quiet >add.out 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat add.out; fail "run of an edited recipe exited $rc, not 2"; }
  line=$(grep -n 'steps: 14' add.yaml | cut -d: -f1)
  grep -qF "add.yaml differs from it: add.yaml:$line: stages[1].steps: 12 in the run's recipe, 14 here; add.yaml:$((line + 1)): stages[2]: \"c\" added" add.out ||
    { cat add.out; fail "the refusal does not name the differences"; }
  grep -qF "make it the kept copy (cp add.yaml $work/r1/recipe.yaml) and run 'baton resume $work/r1'" add.out ||
    { cat add.out; fail "the refusal does not say how to continue with the edit"; }
  { cat ed.yaml; echo "# a comment"; } >comment.yaml
  rc=0
  "$baton" run comment.yaml --run-dir r1 --quiet >comment.out 2>&1 || rc=$?
  [[ $rc == 2 ]] && grep -q "only in comments or layout" comment.out ||
    { cat comment.out; fail "a comment-only difference not said"; }
  echo "$case: the refusal names the differences and the way on"
  ;;
*)
  fail "unknown case"
  ;;
esac
