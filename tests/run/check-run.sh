#!/usr/bin/env bash
# `baton run` end to end on tests/run/run.yaml (three stages, 4 workers on 2 virtual
# nodes). CASE:
#   faults        kill -9 a random worker at a random step three times, SIGSTOP one once
#                 (a hang, blamed on the stopped rank), and kill a whole virtual node once
#                 (in the last stage: it is excluded and, with no spare, dp shrinks
#                 2 -> 1); the run must finish by
#                 itself, the journal must show five recoveries and the exclusion, and every
#                 stage must end on exactly the uninterrupted run's loss (within 1e-5 after
#                 the shrink).
#   spare         the same recipe with a spare node: a whole node killed in the first
#                 stage is replaced by the spare, the layout stays, and every loss is exact.
#   kill-baton    kill -9 `baton run` itself mid-stage, run it again on the same run
#                 directory: it continues and ends on the same losses, and the killed
#                 run's launch temp dir is gone (the second run removed it).
#   bad-input     a bad recipe, an unwritable run directory, missing data: exit 2 with a
#                 clear message before any worker starts; data with tokens outside the
#                 model's vocabulary fails the run (exit 2) after one attempt, not retried.
#   stop          SIGTERM to `baton run`: the workers checkpoint and it exits 75;
#                 `baton resume`, from another directory, finishes with the uninterrupted
#                 losses (it works in the directory the run started in).
#   overrides     --set and --nodes: applied, kept with the run, reapplied by resume, a
#                 different set on the same run directory refused, bad ones exit 2; the
#                 kept copy edited: taken (the last stage given a step more), said once,
#                 journaled (status shows it); a kept --set this baton refuses: exit 2,
#                 saying to edit RUN_DIR/overrides; the kept copy removed: resume and run
#                 exit 2 naming the run's --set (the journal's RUN_STARTED has its
#                 CRC32C), the run's own --set writes it again; a run without --set
#                 resumes without its (empty) copy.
#   topology      a layout whose TP groups span the two virtual nodes: the report warns;
#                 with cluster.strict_topology validation refuses it (exit 2, nothing
#                 started), and workers placed across hosts refuse before their first step;
#                 a one-rank run's report names its host (no group to list).
#   early-exit    workers that all exit 0 before the stage's last step (a wrapper adding
#                 --steps 3; /bin/true): the attempt fails without the stage's final
#                 checkpoint, is not retried, the run exits 1 and no stage is done.
#   partials      stale checkpoints/*.partial directories (planted, and one left by a rank
#                 killed mid-save in attempt 0) are gone before every attempt starts, said
#                 in one line; nothing else is touched (a symlink named *.partial and
#                 its target, a file, a nested one, a longer name, one outside checkpoints/);
#                 a planted sNN-stepN.deleting is swept too, a *.deleting of another name
#                 (mybackup.deleting, s+1-step2.deleting) is not.
#   retain-kill   rank 0 killed (an LD_PRELOAD'ed unlink; BATON_TEST_KILL_ON_UNLINK_LIB)
#                 while retention removes pretrain's checkpoint at step 5, its manifest
#                 and some shards gone: the half-removed checkpoint bears a name that the
#                 next attempt's sweep removes, saying so; nothing of it is left when the
#                 run ends on the uninterrupted losses.
#   stop-hung     SIGTERM to `baton run` while a worker is SIGSTOPped: the hang is still
#                 seen, so it exits 75 within heartbeat_timeout, not RUN_STOP_GRACE_S; a
#                 second SIGINT kills the workers at once (one line, exit 75 within 4 s);
#                 `baton resume` completes the run.
#   give-up       every attempt's worker exits 1: after max_restarts the run gives up (exit
#                 1) and `baton status` says failed, not stopped (text and JSON), with the
#                 reason and the last failure's cause (with the rank's last line on
#                 stderr, cut to 240 bytes: no Fatal came), and counts no recovery; SIGTERM
#                 instead (the stop case) leaves it stopped. Resumed with a working
#                 worker, it completes and counts one recovery (the resume's first step).
#   replay        kill -9 a worker of pretrain after its checkpoint at step 5: the resumed
#                 attempt repeats the steps after its checkpoint, and metrics.jsonl must
#                 still hold each step once (those before the checkpoint from attempt 0,
#                 the rest from attempt 1) and the event file TensorBoard's restart marker
#                 (session_log START) at the first repeated step.
#   lost-metrics  `baton run` stopped (SIGSTOP) once it has a record of stage extend while
#                 the workers go on past a checkpoint, then killed -9: the steps it never
#                 received are in rank 0's metrics log (logs/s01-a00.metrics), and
#                 `baton resume` takes them from there before it starts, so that
#                 metrics.jsonl holds every step once, equal to the uninterrupted run's,
#                 and TensorBoard has them too.
#   fp16-skips    the fp16 overflow stage of tests/engine/fp16.yaml (scale 2^40: the first
#                 steps overflow): `baton run`'s progress lines show the skipped count and
#                 the scale as the worker logged them, and metrics.jsonl and TensorBoard
#                 have train/loss_scale and train/overflow per step; the run's summary and
#                 `baton status` (text and JSON skipped_steps) count the skipped steps per
#                 stage, and recovery_s_avg is null for a stage that never recovered.
#   status-live   `baton status` of a run in progress (pretrain at step 8 or more): the
#                 running stage's wall time counts from its attempt's start to now (not
#                 0.0), and an ETA from the recent pace is in the text ("stage ETA") and
#                 the JSON ("eta_s", the stage's and the run's: later stages' tokens at
#                 the running stage's tokens/s); none for other stages.
#   early-signal  a SIGTERM while `baton run`'s shared libraries initialize, before main
#                 (a preloaded library's initializer sends it; BATON_TEST_EARLY_SIGNAL_LIB):
#                 it waits blocked for the supervisor, which stops the run: exit 75, not
#                 143, and `baton resume` completes it.
#   init-end      checkpoint.every_steps: 0 saves only at the stage's end (-1 refused);
#                 a run whose init is that checkpoint, of another ffn_dim, is refused
#                 naming model.ffn_dim and both values.
#   old-names     a run stopped mid-stage whose kept recipe names its stage "a.b 1" (as
#                 runs started before the stage-name rule could): `baton resume` warns
#                 and completes it, as does `baton run` on its directory; a new run with
#                 that recipe is refused (exit 2) and makes no directory.
#   metrics-locked  rank 0's metrics log of attempt 0 locked by another process (as a dead
#                 node's lock stays on a network file system) and that attempt's rank
#                 killed: the log is waited for once (10 s), after the attempt, not again
#                 before the next one, and the message says it is still locked, not whose.
#   recovery-stages  one rank, three stages; a wrapper fails stage a's attempt 0 at its
#                 step-5 checkpoint (attempt 1 recovers at step 6) and stage b's attempt 0
#                 after its last step (attempt 1 completes it without a step): the journal
#                 holds exactly one recovery, stage a's, and none for stage c's first step.
#   init-handoff  a new run whose init: is another run's stage-0 checkpoint starts its first
#                 stage from step 0 (its warmup, its own data position) with those weights,
#                 however alike the two runs' recipes are: both without name: (so both
#                 record the same empty name), or the same recipe again with fewer and more
#                 steps; a run with init: stopped mid-stage still resumes its own
#                 checkpoints, by `baton run` again and by `baton resume`, also when they
#                 and the run directory predate the run id (ckpt_edit --drop-run-id), and a
#                 new run whose init: names such an older checkpoint takes its weights.
#   fp8-calibrated  the fp8 stage's GEMMs run in fp8 (not all left in bf16 by
#                 first_last_bf16): rank 0 logs its fp8 GEMMs and scales calibrated, finite
#                 and positive, and the final checkpoint's fp8 states are active and finite.
#   check-run.sh BATON BATON_WORKER SOURCE_DIR CASE
#   (the supervisor's judgements, pauses, journal and history: check-supervise.sh; what
#   another user could do to a run, its modes and limits: check-trust.sh; a stage's final
#   checkpoint going wrong and a full disk: check-final.sh; what they all share:
#   run-common.sh)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"

case $case in
faults)
  reference
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  strike 0 4 10 KILL
  strike 0 16 24 KILL
  strike 1 3 8 STOP
  stopped_pid=$struck_pids
  strike 2 2 5 KILL
  strike 2 7 10 KILL 2 3 # node1: ranks 2 and 3
  wait "$bpid" || fail "baton run exited $?"
  bpid=
  stage_losses r1 >r1.losses
  same_losses ref.losses r1.losses fp8 || fail "the stages did not end on the uninterrupted losses"
  "$baton" status r1 --json >status.json
  /usr/bin/python3 - status.json "$stopped_pid" <<'PY' || fail "journal check"
import json, sys
s = json.load(open(sys.argv[1]))
rec = s["recovery_s"]
print("restarts", s["restarts"], "recoveries (s):", " ".join("%.2f" % r for r in rec))
assert s["state"] == "completed" and s["restarts"] == 5 and len(rec) == 5, s
# the failures and recoveries the text lists, one by one
fl, rl = s["failure_list"], s["recovery_list"]
stages = [x["stage"] for x in fl]
assert stages == ["pretrain", "pretrain", "extend", "fp8", "fp8"], fl
assert [x["recovery_s"] for x in rl] == rec and [x["stage"] for x in rl] == stages, rl
for x, r in zip(fl, rl):
    assert x["retryable"] and r["attempt"] == x["attempt"] + 1 and r["time"] >= x["time"], (x, r)
    assert x["stage_index"] == ["pretrain", "extend", "fp8"].index(x["stage"]), x
kills = [x for x in fl if x["stage"] != "extend"]
for x in kills: # kill -9 of a worker: who and how, as the cause says
    assert x["signal"] == "SIGKILL" and x["exit_status"] == 137, x
    assert x["cause"].startswith("rank %d (node %s, pid %d) killed by signal SIGKILL" %
                                 (x["rank"], x["node"], x["pid"])), x
hang = fl[2]
assert "is stopped" in hang["cause"] and "pid %s)" % sys.argv[2] in hang["cause"], hang
PY
  "$baton" status r1 >status.txt
  grep -Eq "failure: stage extend .*hang: rank [0-9]+ \(pid $stopped_pid\) is stopped .*rank [0-9]+ sent no heartbeat" status.txt ||
    { cat status.txt; fail "the SIGSTOP was not seen as a hang of pid $stopped_pid"; }
  grep -q "node excluded: stage fp8 .*node1 lost" status.txt || { cat status.txt; fail "node1 not excluded"; }
  # each recovery is the restarted attempt's first step: one past where it started from
  /usr/bin/python3 - status.txt r1/logs <<'PY' || fail "a recovery names a later step"
import os, re, sys
names = {0: "pretrain", 1: "extend", 2: "fp8"}
start = {}
for f in os.listdir(sys.argv[2]):
    m = re.match(r"s(\d+)-a(\d+)\.log$", f)
    if not m:
        continue
    k = re.search(r"^\[0\] started from .* at step (\d+)", open(os.path.join(sys.argv[2], f)).read(), re.M)
    start[(names[int(m.group(1))], int(m.group(2)))] = int(k.group(1)) if k else 0
rec = re.findall(r"recovered: stage (\S+) attempt (\d+), step (\d+)", open(sys.argv[1]).read())
assert len(rec) == 5, rec
for st, at, step in rec:
    assert int(step) == start[(st, int(at))] + 1, (st, at, step, start[(st, int(at))])
PY
  grep -q "data parallelism shrinks from 2 to 1 on 1 node" status.txt ||
    { cat status.txt; fail "no DP shrink after the node loss"; }
  echo "$case: 5 failures, 5 recoveries, node1 excluded with dp 2 -> 1, losses as uninterrupted"
  ;;
spare)
  sed 's/cluster: {nodes: 2, gpus_per_node: 2, device: cpu}/cluster: {nodes: 2, gpus_per_node: 2, spare_nodes: 1, device: cpu}/' \
    "$recipe" >spare.yaml
  grep -q spare_nodes spare.yaml || fail "could not add a spare to the recipe"
  recipe=$PWD/spare.yaml
  reference
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  strike 0 5 12 KILL 0 1 # node0: ranks 0 and 1
  wait "$bpid" || fail "baton run exited $?"
  bpid=
  stage_losses r1 >r1.losses
  same_losses ref.losses r1.losses || fail "the stages did not end on the uninterrupted losses"
  "$baton" status r1 >status.txt
  grep -q "node excluded: stage pretrain .*node0 lost" status.txt || { cat status.txt; fail "node0 not excluded"; }
  grep -q "a spare node replaces a lost one" status.txt || { cat status.txt; fail "the spare was not used"; }
  echo "$case: node0 lost, the spare took its place, every loss exact"
  ;;
kill-baton)
  reference
  # the struck stage's steps take 0.1 s more: ranks that outlived baton run would finish
  # it, its final checkpoint, in the 1 s and more its last 10 steps take, and are caught by
  # that however long they take to go
  slow_stage 1 0.1 "exec "
  "$baton" run "$recipe" --run-dir r1 --quiet --worker "$PWD/wrap.sh" >run.out 2>&1 &
  bpid=$!
  wait_step 1 6 >/dev/null
  kill -9 "$bpid"
  wait "$bpid" 2>/dev/null || true
  bpid=
  workers_gone r1 30
  [[ ! -e r1/checkpoints/s01-step00000016 ]] || fail "workers outlived baton run: extend completed"
  [[ -n $(ls -A "$TMPDIR") ]] || fail "the killed baton run left no launch temp dir to sweep"
  # again through a --worker wrapper that does not exec (a container runtime's shape): the
  # ranks below it die with baton run too, not only the wrapper
  slow_stage 2 0.1 ""
  "$baton" run "$recipe" --run-dir r1 --quiet --worker "$PWD/wrap.sh" >run1b.out 2>&1 &
  bpid=$!
  wait_step 2 2 >/dev/null
  kill -9 "$bpid"
  wait "$bpid" 2>/dev/null || true
  bpid=
  workers_gone r1 30
  [[ ! -e r1/checkpoints/s02-step00000012 ]] || fail "workers below a wrapper outlived baton run: fp8 completed"
  "$baton" run "$recipe" --run-dir r1 --quiet >run2.out 2>&1 || { cat run2.out; fail "the second baton run failed"; }
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "the continued run did not end on the same losses"
  # fp8 trains on extend's data at its seq_len: it continues after extend's 16 x 8 samples
  pos=$("$baton" ckpt inspect r1 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["data_position"])')
  [[ $pos == 224 ]] || fail "the final checkpoint's data position is $pos, not 16 x 8 + 12 x 8 = 224"
  # the killed run's launch temp dir was removed by the next one (launch_tmpdir.h)
  left=$(ls -A "$TMPDIR")
  [[ -z $left ]] || fail "left in TMPDIR: $left"
  echo "$case: killed mid-stage, continued, same losses, nothing left in TMPDIR"
  ;;
stop)
  reference
  "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 12 >/dev/null
  stop_run
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "stopped" and s["failure"] is None, s
assert s["stages"][0]["state"] == "stopped", s["stages"]' || fail "a stopped run is not reported stopped"
  # resumed from another directory: it works where the run started (the data's relative
  # paths resolve there)
  mkdir elsewhere
  (cd elsewhere && "$baton" resume ../r1 >../run2.out 2>&1) || { cat run2.out; fail "resume failed"; }
  grep -q "^baton resume: working in $work, where the run started" run2.out ||
    { head -3 run2.out; fail "resume did not say where it works"; }
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "the resumed run did not end on the same losses"
  echo "$case: SIGTERM -> exit 75, resumed from another directory to the same losses"
  ;;
bad-input)
  expect2() { # WHAT PATTERN CMD...
    local what=$1 pat=$2
    shift 2
    set +e; "$@" >out.txt 2>&1; local rc=$?; set -e
    [[ $rc == 2 ]] || { cat out.txt; fail "$what: exit $rc, not 2"; }
    grep -Eq "$pat" out.txt || { cat out.txt; fail "$what: unclear message"; }
    [[ -z $(pgrep -f -- "--spec $work/" || true) ]] || fail "$what: a worker started"
    echo "$what: $(head -1 out.txt)"
  }
  printf 'name: x\nstages: [{name: a, steps: -3}]\n' >bad.yaml
  expect2 "bad recipe" "^bad\\.yaml:2:[0-9]+: " "$baton" run bad.yaml --run-dir bad
  mkdir ro && chmod 500 ro
  if [[ $(id -u) != 0 ]]; then
    expect2 "unwritable run dir" "ro/run.*(cannot create|not writable)" "$baton" run "$recipe" --run-dir ro/run
  else
    : >notadir
    expect2 "unwritable run dir" "notadir/run: cannot create" "$baton" run "$recipe" --run-dir notadir/run
  fi
  mv data data.hidden
  expect2 "missing data" "data/fortunes_train.*baton data prepare" "$baton" run "$recipe" --run-dir nodata
  [[ ! -e nodata ]] || fail "missing data: the run directory was created anyway"
  mv data.hidden data
  # data the model cannot read (byte tokens up to 257, a 256-token vocabulary): the
  # worker says so and the run fails at once (exit 2), not after max_restarts attempts
  set +e; "$baton" run "$recipe" --run-dir vocab --set model.vocab_size=256 >vocab.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] || { tail -5 vocab.out; fail "vocabulary mismatch: exit $rc, not 2"; }
  grep -q "outside the model's vocabulary \[0, 256)" vocab.out || { tail -5 vocab.out; fail "vocabulary mismatch: unclear"; }
  [[ $(ls vocab/logs/s00-a*.log | wc -l) == 1 ]] || fail "vocabulary mismatch: retried ($(ls vocab/logs))"
  echo "vocabulary mismatch: one attempt, $(grep -m1 -o "token id [0-9]* .*vocabulary \[0, 256)" vocab.out)"
  ;;
overrides)
  sets=(--set stages.pretrain.steps=6 --set stages.1.steps=3 --set stages.fp8.steps=2
        --set defaults.optimizer.lr=1e-3)
  "$baton" run "$recipe" --run-dir r1 --quiet "${sets[@]}" >run.out 2>&1 || fail "the run failed"
  "$baton" status r1 --json >s.json
  /usr/bin/python3 -c '
import json, sys
s = json.load(open("s.json"))
got = [(x["step"], x["steps"]) for x in s["stages"]]
assert s["state"] == "completed" and got == [(6, 6), (3, 3), (2, 2)], got
print("overrides: stages ran", got)'
  [[ $(wc -l <r1/overrides) == 4 ]] || fail "the overrides were not kept"
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume of a completed run failed"; }
  grep -q "already completed" resume.out || fail "resume did not see the completed run"
  set +e
  "$baton" run "$recipe" --run-dir r1 --set stages.pretrain.steps=7 >x.out 2>&1; rc1=$?
  "$baton" run "$recipe" --run-dir r2 --set stages.nope.steps=7 >y.out 2>&1; rc2=$?
  "$baton" run "$recipe" --run-dir r3 --nodes 3 >z.out 2>&1; rc3=$?
  set -e
  [[ $rc1 == 2 ]] && grep -q "other --set overrides" x.out || { cat x.out; fail "other overrides accepted"; }
  [[ $rc2 == 2 ]] && grep -q "the recipe has no stage 'nope'" y.out || { cat y.out; fail "bad stage accepted"; }
  [[ $rc3 == 2 ]] && grep -q "cluster has 3 nodes" z.out || { cat z.out; fail "--nodes not applied"; }
  # The kept copy lost or edited: refused (resume would reapply other overrides), never
  # written afresh; the run's own --set writes it again.
  cp r1/overrides kept
  rm r1/overrides
  started="(the run was started with --set stages.pretrain.steps=6 --set stages.1.steps=3 --set stages.fp8.steps=2 --set defaults.optimizer.lr=1e-3)"
  set +e
  "$baton" resume r1 --quiet >m1.out 2>&1; rc1=$?
  "$baton" run "$recipe" --run-dir r1 --quiet >m2.out 2>&1; rc2=$?
  set -e
  [[ $rc1 == 2 ]] && grep -qF "r1/overrides is missing $started" m1.out ||
    { cat m1.out; fail "resume without the overrides: exit $rc1"; }
  [[ $rc2 == 2 ]] && grep -qF "r1/overrides is missing $started" m2.out ||
    { cat m2.out; fail "run without the overrides: exit $rc2"; }
  [[ ! -e r1/overrides ]] || fail "the lost overrides were written afresh"
  # An edited copy is taken as an edit of the kept recipe is, and said: the last stage
  # given a step more, written by hand (an empty line, no last newline). RUN_STARTED is
  # journaled again with it, so that status and the next resume see it as the run's.
  printf '%s\n\n%s' "$(head -2 kept)" "$(tail -n +3 kept | sed 's/fp8.steps=2/fp8.steps=3/')" >r1/overrides
  "$baton" resume r1 >m3.out 2>&1 || { cat m3.out; fail "resume with edited overrides failed"; }
  grep -qF "r1/overrides was edited $started: taken as it is now, as an edit of the kept recipe.yaml is" m3.out &&
    grep -q 'now has more, from stage "fp8" (3 steps, completed with 2) on: training it' m3.out ||
    { cat m3.out; fail "the edited overrides were not said, or not trained"; }
  [[ -d r1/checkpoints/s02-step00000003 ]] || fail "the edit's step not trained: $(ls r1/checkpoints)"
  "$baton" status r1 --json >s3.json 2>s3.err
  [[ ! -s s3.err ]] || { cat s3.err; fail "status warned about the overrides the run took"; }
  /usr/bin/python3 -c '
import json
got = [(x["step"], x["steps"]) for x in json.load(open("s3.json"))["stages"]]
assert got == [(6, 6), (3, 3), (3, 3)], got' || fail "status did not take the edited overrides"
  "$baton" resume r1 >m3b.out 2>&1 || { cat m3b.out; fail "resume after the edit failed"; }
  ! grep -q "was edited" m3b.out && grep -q "already completed" m3b.out ||
    { cat m3b.out; fail "the edit said again, or the run not completed"; }
  # A kept --set this baton's checks refuse (as one an older baton let through): how to go on
  cp r1/overrides edited && printf '\ndefaults.optimizer.eps=1e-40\n' >>r1/overrides
  set +e
  "$baton" resume r1 --quiet >m3c.out 2>&1; rc3=$?
  set -e
  [[ $rc3 == 2 ]] && grep -q "^baton resume: --set defaults.optimizer.eps=1e-40: .*eps must be at least" m3c.out &&
    grep -q "^baton resume: this baton (.*) refuses it: edit .*/r1/overrides (the run's --set, one KEY=VALUE per line) and run 'baton resume' again, which continues the run" m3c.out ||
    { cat m3c.out; fail "a refused kept --set: exit $rc3, no way on said"; }
  cp edited r1/overrides
  sets=(--set stages.pretrain.steps=6 --set stages.1.steps=3 --set stages.fp8.steps=3
        --set defaults.optimizer.lr=1e-3)
  printf '%s\n' "${sets[@]/--set/}" | sed '/^$/d; s/^ //' >kept
  rm r1/overrides
  set +e
  "$baton" resume r1 --quiet >m3d.out 2>&1; rc3=$?
  set -e
  [[ $rc3 == 2 ]] && grep -qF "r1/overrides is missing (the run went on with --set stages.pretrain.steps=6 --set stages.1.steps=3 --set stages.fp8.steps=3 --set defaults.optimizer.lr=1e-3)" m3d.out ||
    { cat m3d.out; fail "resume without the edited overrides: exit $rc3"; }
  "$baton" run "$recipe" --run-dir r1 --quiet "${sets[@]}" >m4.out 2>&1 ||
    { cat m4.out; fail "the run's own --set did not write the overrides again"; }
  cmp -s kept r1/overrides || fail "the overrides written again differ: $(cat r1/overrides)"
  "$baton" resume r1 --quiet >m5.out 2>&1 || { cat m5.out; fail "resume after the restore failed"; }
  grep -q "already completed" m5.out || fail "resume after the restore did not see the completed run"
  # A run without --set: a lost (empty) copy changes nothing, so it is written again.
  sed -E 's/^    steps: 30$/    steps: 4/; s/^    steps: (16|12)$/    steps: 2/' "$recipe" >plain.yaml
  "$baton" run plain.yaml --run-dir r4 --quiet >p1.out 2>&1 || { cat p1.out; fail "the plain run failed"; }
  rm r4/overrides
  "$baton" resume r4 --quiet >p2.out 2>&1 || { cat p2.out; fail "resume of a run without --set refused"; }
  grep -q "already completed" p2.out && [[ -f r4/overrides && ! -s r4/overrides ]] ||
    { cat p2.out; fail "the plain run's overrides were not written again, empty"; }
  echo "$case: applied, kept, reapplied on resume; conflicting and bad ones exit 2; a lost copy exit 2, an edited one taken"
  ;;
topology)
  sets=(--set stages.pretrain.parallel.order=pp-tp-cp-dp --set stages.pretrain.steps=4
        --set stages.1.steps=2 --set stages.fp8.steps=2)
  "$baton" run "$recipe" --run-dir r1 "${sets[@]}" >run.out 2>&1 || fail "the warned run failed"
  grep -q "topology of attempt 0 (WARNING)" run.out || fail "no topology warning"
  grep -q "tp group \[0 2\]: node0 node1  <- spans hosts" run.out || fail "the report lacks the group"
  grep -q "topology of attempt 0 (as planned)" run.out || fail "no report for the good stages"
  # The planned layout spreads a tp group over the nodes: validation refuses it (plan and
  # run alike) before any worker starts.
  set +e
  "$baton" run "$recipe" --run-dir r2 "${sets[@]}" --set cluster.strict_topology=true >strict.out 2>&1
  rc=$?
  "$baton" plan "$recipe" "${sets[@]}" --set cluster.strict_topology=true >plan.out 2>&1
  rcp=$?
  set -e
  [[ $rc == 2 && $rcp == 2 ]] || { cat strict.out plan.out; fail "strict_topology: exit $rc/$rcp, not 2"; }
  grep -q "a tp group of 2 ranks spans nodes (gpus_per_node 2), which cluster.strict_topology refuses" \
    strict.out || { cat strict.out; fail "run did not refuse the planned layout"; }
  [[ ! -e r2/journal ]] || fail "a refused run started"
  # Planned within a node, placed across hosts (4 virtual nodes of one rank): the
  # workers refuse once they see their hosts, before any step.
  "$baton" spec "$recipe" --stage pretrain --set stages.pretrain.steps=4 \
    --set cluster.strict_topology=true --out strict.pb
  set +e
  timeout 120 "$baton" launch -n 4 --nodes 4 -- "$worker" --spec strict.pb --eval-windows 0 \
    >w.out 2>&1
  rc=$?
  set -e
  [[ $rc != 0 ]] || { cat w.out; fail "strict_topology: the spread-out job ran"; }
  grep -q "tensor-parallel group spans hosts (rank 0 on node0, rank 1 on node1)" w.out ||
    { cat w.out; fail "the worker did not refuse"; }
  ! grep -q "step *1/" w.out || fail "a refused stage trained"
  # One rank: no group to list, so the report names the rank's host, not nothing.
  cat >one.yaml <<'EOF'
name: one-rank
model: {arch: llama, dim: 32, n_layers: 1, n_heads: 2, n_kv_heads: 2, ffn_dim: 64,
        vocab_size: 272, rope: {theta: 10000}}
cluster: {nodes: 1, gpus_per_node: 1, device: cpu}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults: {seq_len: 32, global_batch: 2, micro_batch: 1, optimizer: {lr: 1e-3}}
stages:
  - {name: only, steps: 2, parallel: {tp: 1, pp: 1, dp: 1}}
EOF
  "$baton" run one.yaml --run-dir r3 >one.out 2>&1 || { cat one.out; fail "the one-rank run failed"; }
  grep -A1 "topology of attempt 0 (as planned):$" one.out |
    grep "^  rank 0: node0 (the only rank: no tp, cp, ep, dp or pp group)$" >/dev/null ||
    { cat one.out; fail "the one-rank report is empty"; }
  echo "$case: warned; refused under strict_topology by validation, and by the workers placed across hosts; one rank's host named"
  ;;
slow-save)
  # Every checkpoint write takes 7 s, longer than the 5 s heartbeat_timeout: the workers'
  # heartbeats go on during the save (worker_pacer.h), so nothing is taken for a hang.
  BATON_FAULT_SAVE_SLEEP=7 "$baton" run "$recipe" --run-dir r1 --set stages.pretrain.steps=6 \
    --set stages.1.steps=2 --set stages.fp8.steps=2 >run.out 2>&1 || fail "the run failed"
  ! grep -q "hang:" run.out || fail "a slow save was taken for a hang"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
st = json.load(sys.stdin)["stages"]
assert all(s["state"] == "done" and s["restarts"] == 0 for s in st), st' ||
    fail "restarts after slow saves"
  echo "$case: 7 s saves under a 5 s heartbeat_timeout, no restart"
  ;;
moe)
  # An MoE stage under ep2: its loads reach metrics.jsonl and TensorBoard.
  "$baton" run "$src/tests/engine/moe.yaml" --run-dir r1 --set stages.train.steps=6 \
    >run.out 2>&1 || fail "the MoE run failed"
  /usr/bin/python3 - r1/metrics.jsonl <<'PY' || fail "no MoE figures in metrics.jsonl"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 6, rows
for r in rows:
    m = r["moe"]
    assert len(m["expert_load"]) == 4 and m["load_max_mean"] >= 1 and m["dropped"] == 0, m
    assert abs(sum(m["expert_load"]) - 4) < 1e-3, m
    assert r["memory_bytes"] > 0, r
print("metrics.jsonl: per-expert load", rows[-1]["moe"]["expert_load"],
      "max/mean", rows[-1]["moe"]["load_max_mean"], "memory_bytes", rows[-1]["memory_bytes"])
PY
  /usr/bin/python3 "$src/tests/control/read_tb.py" r1/tb >tb.txt || fail "unreadable events"
  [[ $(grep -c "^moe/load_max_mean " tb.txt) == 6 ]] || fail "no MoE scalars in the TensorBoard events"
  # the memory a step reports covers every part rank 0's worker says it allocated, the MoE
  # layers' caches included (MB figures rounded to 0.01)
  /usr/bin/python3 - r1/metrics.jsonl r1/logs/s00-a00.log <<'PY' || fail "memory_bytes misses a part"
import json, re, sys
got = json.loads(open(sys.argv[1]).readline())["memory_bytes"]
log = open(sys.argv[2]).read()
mb = re.search(r"^\[0\] memory: params ([\d.]+) MB, grads ([\d.]+) MB, optimizer ([\d.]+) MB, "
               r"activations ([\d.]+) MB .*\+ ([\d.]+) MB", log, re.M).groups()
moe = int(re.search(r"^\[0\] MoE caches allocated by this rank: (\d+) bytes", log, re.M).group(1))
want = sum(float(x) for x in mb) * 1e6 + moe
assert got >= want - 0.03e6, (got, want)
PY
  # the aux loss is the mean over the step's micro-batches: the same step at micro_batch 2
  # (half as many) logs about the same value, not twice or half of it
  "$baton" run "$src/tests/engine/moe.yaml" --run-dir r2 --set stages.train.steps=1 \
    --set defaults.micro_batch=2 >run2.out 2>&1 || fail "the MoE run at micro_batch 2 failed"
  /usr/bin/python3 - r1/metrics.jsonl r2/metrics.jsonl <<'PY' || fail "aux loss depends on micro_batch"
import json, sys
a, b = (json.loads(open(f).readline())["moe"]["aux_loss"] for f in sys.argv[1:])
assert a > 0 and 0.8 < b / a < 1.25, (a, b)
PY
  echo "$case: per-expert load, max/mean and dropped pairs in metrics.jsonl and TensorBoard"
  ;;
early-exit)
  sets=(--set stages.pretrain.steps=8 --set stages.1.steps=3 --set stages.fp8.steps=2)
  printf '#!/bin/bash\nexec "%s" "$@" --steps 3\n' "$worker" >short.sh
  chmod +x short.sh
  for w in "$PWD/short.sh" /bin/true; do
    rm -rf r1
    set +e; "$baton" run "$recipe" --run-dir r1 --quiet "${sets[@]}" --worker "$w" >run.out 2>&1
    rc=$?; set -e
    [[ $rc == 1 ]] || fail "$w: exit $rc, not 1"
    if [[ $w == */short.sh ]]; then
      why="workers exited 0 at step 3 of 8 without the stage's final checkpoint"
    else
      why="workers exited 0 without a completed step \(the stage has 8\) and without the stage's final checkpoint"
    fi
    grep -Eq "stage \"pretrain\" attempt 0 failed: $why .*not retried" run.out ||
      fail "$w: no clear cause"
    "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
st = [(x["state"], x["attempts"]) for x in s["stages"]]
assert s["state"] != "completed" and st[0] == ("failed", 1), st
assert all(x["state"] != "done" for x in s["stages"]), st' || fail "$w: a stage counted as done"
    echo "$w: $(grep -m1 'failed:' run.out)"
  done
  echo "$case: workers exiting 0 short of the final checkpoint fail the run (exit 1), not retried"
  ;;
partials)
  sets=(--set stages.pretrain.steps=8 --set stages.1.steps=3 --set stages.fp8.steps=2)
  ck=r1/checkpoints
  # r1 as a run directory (its lock file there) whose checkpoints/ holds what is planted
  # below; a directory with no lock or journal and files in checkpoints/ is no run's
  mkdir -m 0700 r1 && : >r1/lock
  mkdir -p "$ck/s00-step00000003.partial" "$ck/junk.partial" "$ck/keep/inner.partial" \
    "$ck/s00-step00000003.partial.d" outside \
    "$ck/s00-step00000002.deleting" "$ck/mybackup.deleting" "$ck/s+1-step2.deleting"
  : >"$ck/mybackup.deleting/x"
  head -c 1048576 /dev/zero >"$ck/s00-step00000003.partial/rank-00000.bin"
  : >"$ck/junk.partial/x"
  echo precious >outside/precious
  ln -s "$work/outside" "$ck/link.partial"
  : >"$ck/file.partial"
  # each rank notes its attempt and the *.partial names in checkpoints/ it starts with;
  # rank 1 of attempt 0 dies halfway through writing step 5's checkpoint (its .partial
  # stays behind for attempt 1); attempt 0's ranks put a *.partial beside checkpoints/,
  # which the sweep before attempt 1 leaves (a new run dir holding it would be refused
  # as no run's)
  cat >wrap.sh <<EOF
#!/bin/bash
{ echo "\$*" | grep -o 's00-a[0-9]*' || true; ls -A "$work/$ck" | grep '[.]partial\$' || true; } \
  >>"$work/seen.\$\$"
[[ "\$*" == *s00-a00.pb* ]] && export BATON_FAULT_SAVE_EXIT=1:5 && mkdir -p "$work/r1/other.partial"
exec "$worker" "\$@"
EOF
  chmod +x wrap.sh
  "$baton" run "$recipe" --run-dir r1 --quiet "${sets[@]}" --worker "$PWD/wrap.sh" >run.out 2>&1 ||
    fail "the run failed"
  grep -q 'restarting stage "pretrain"' run.out || fail "attempt 0 did not fail as planned"
  [[ $(grep -c "removed .* unfinished checkpoint save" run.out) == 2 ]] ||
    fail "not one line per sweep (before attempt 0 and before attempt 1)"
  grep -q "removed 2 unfinished checkpoint save(s) .*: .*s00-step00000003.partial" run.out ||
    fail "the planted .partial was not reported"
  grep -q "removed 1 unfinished checkpoint save(s) .*: s00-step00000005.partial" run.out ||
    fail "attempt 0's .partial was not reported"
  if grep -Eq '^(s00-step|junk)' seen.*; then
    grep -E '^(s00-step|junk)' seen.*; fail "a worker started beside a stale .partial"
  fi
  [[ $(cat seen.* | grep -c '^s00-a01$') == 4 ]] || fail "attempt 1 did not start 4 ranks"
  [[ -L $ck/link.partial && $(cat outside/precious) == precious ]] ||
    fail "the symlink or its target was touched"
  [[ -f $ck/file.partial && -d $ck/keep/inner.partial && -d $ck/s00-step00000003.partial.d &&
    -d r1/other.partial ]] || fail "something other than a stale .partial was removed"
  [[ ! -e $ck/s00-step00000003.partial && ! -e $ck/junk.partial ]] || fail "stale .partial left"
  # a .deleting is retention's: only a checkpoint's name is swept
  grep -q "removed what is left of 1 checkpoint(s) whose removal by retention was cut short in .*: s00-step00000002.deleting$" run.out ||
    fail "the planted s00-step00000002.deleting was not swept alone"
  [[ -f $ck/mybackup.deleting/x && -d $ck/s+1-step2.deleting && ! -e $ck/s00-step00000002.deleting ]] ||
    fail "a .deleting directory not named as a checkpoint was removed"
  echo "$case: $(grep -m1 'removed' run.out)"
  ;;
retain-kill)
  lib=${BATON_TEST_KILL_ON_UNLINK_LIB:?the test library}
  reference
  # ASan wants its runtime first among the libraries; the preloaded one comes before it
  LD_PRELOAD=$lib ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    BATON_TEST_UNLINK_DIR=/s00-step00000005 BATON_TEST_UNLINK_FILE=rank-00001.bin \
    BATON_TEST_UNLINK_ONCE=$work/struck "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 ||
    fail "baton run exited $?"
  [[ -f struck ]] || fail "no worker was killed while removing checkpoint s00-step00000005"
  grep -q "pretrain.*killed by signal SIGKILL" run.out || fail "the struck attempt did not fail"
  left=$(ls r1/checkpoints | grep step00000005 || true)
  [[ -z $left ]] || { ls -la r1/checkpoints/$left; fail "left in checkpoints/: $left"; }
  grep -q "removed what is left of 1 checkpoint(s) whose removal by retention was cut short in .*: s00-step00000005.deleting" run.out ||
    { cat run.out; fail "the half-removed checkpoint was not swept, saying so"; }
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "the run did not end on the uninterrupted losses"
  echo "$case: rank 0 killed while removing s00-step00000005; its remains swept, same losses"
  ;;
stop-hung)
  # $1: "hang" (one SIGTERM; the hang is seen within heartbeat_timeout, 5 s) or "again"
  # (a second SIGINT 1 s after the SIGTERM kills the workers at once)
  stop_hung() {
    rm -rf r1 && struck=
    BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
    bpid=$!
    strike 0 4 6 STOP
    local t0=$SECONDS
    kill -TERM "$bpid"
    if [[ $1 == again ]]; then sleep 1; kill -INT "$bpid"; fi
    set +e; wait "$bpid"; rc=$?; set -e
    bpid=
    local took=$((SECONDS - t0))
    [[ $rc == 75 ]] || fail "$1: baton run exited $rc, not 75"
    [[ -z $(pgrep -f -- "--spec $work/r1/" || true) ]] || fail "$1: workers outlived baton run"
    if [[ $1 == hang ]]; then
      ((took <= 20)) || fail "hang: the stop took $took s with a hung worker"
      grep -Eq 'hang: rank [0-9]+ \(pid [0-9]+\) is stopped .*sent no heartbeat' run.out || fail "hang: the hang was not seen"
    else
      ((took <= 4)) || fail "again: the second signal took $took s"
      [[ $(grep -c "got SIGINT after SIGTERM: killing the workers now" run.out) == 1 ]] ||
        fail "again: no single line for the second signal"
      ! grep -q 'hang:' run.out || fail "again: taken for a hang"
    fi
    echo "$1: exit 75 after $took s"
  }
  stop_hung hang
  stop_hung again
  "$baton" resume r1 --quiet >run2.out 2>&1 || { cat run2.out; fail "resume after the kill failed"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["state"] == "completed"' || fail "the resumed run did not complete"
  echo "$case: a hung worker ends the stop within heartbeat_timeout; a second signal kills at once; resumable"
  ;;
give-up)
  # it fails before any control channel (no Fatal): its last non-blank line on stderr, cut
  # to 240 bytes, is quoted in the failure
  long="a worker that always fails: $(printf 'x%.0s' $(seq 300))"
  printf '#!/bin/sh\necho "starting" >&2\necho "%s" >&2\necho >&2\nexit 1\n' "$long" >failing-worker
  chmod +x failing-worker
  set +e
  "$baton" run "$recipe" --run-dir r1 --worker "$PWD/failing-worker" --quiet \
    --set defaults.restart.max_restarts=2 --set defaults.restart.backoff=0.1s >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || fail "baton run exited $rc after exhausting its restarts, not 1"
  grep -q 'giving up after 2 restarts' run.out || fail "baton run did not say it gave up"
  "$baton" status r1 >status.txt
  head -1 status.txt
  grep -q "^run r1: failed (stage pretrain: giving up after 2 restarts (max_restarts); last failure: rank [0-9]* (node node[01], pid [0-9]*) exited with status 1); 3 failures, recovered 0 times$" status.txt ||
    { cat status.txt; fail "the run line does not say failed with the cause"; }
  grep -Eq "^  pretrain +failed +0/30 .* 3 +2 +-$" status.txt || { cat status.txt; fail "the stage is not failed"; }
  grep -Eq "^  extend +pending " status.txt || { cat status.txt; fail "the next stage is not pending"; }
  grep -q "gave up: stage pretrain: giving up after 2 restarts (max_restarts)" status.txt ||
    { cat status.txt; fail "no gave-up line"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "failed", s
assert (s["failures"], s["restarts"], s["recoveries"]) == (3, 2, 0), s
f = s["failure"]
assert f["stage"] == "pretrain" and f["reason"] == "giving up after 2 restarts (max_restarts)", f
quote = ("a worker that always fails: " + "x" * 300)[:240] + "..."
assert f["last_cause"].endswith("\x27s last line on stderr: " + quote), f
st = s["stages"]
assert [x["state"] for x in st] == ["failed", "pending", "pending"], st
assert (st[0]["attempts"], st[0]["restarts"]) == (3, 2), st[0]
# every failure the text lists, with where and who: the cause names the same rank and pid
fl = s["failure_list"]
assert [(x["stage"], x["stage_index"], x["attempt"]) for x in fl] == [("pretrain", 0, k) for k in range(3)], fl
for x in fl:
    assert x["cause"] == "rank %d (node %s, pid %d) exited with status 1; rank %d\x27s last line on stderr: %s" % (
        x["rank"], x["node"], x["pid"], x["rank"], quote), x
    assert (x["exit_status"], x["signal"], x["retryable"]) == (1, None, True), x
    assert x["step"] is None, x  # before the first step: the text says so too
assert fl[-1]["cause"] == f["last_cause"] and s["recovery_list"] == [], s' ||
    fail "status --json does not report the failed run"
  # ... and the text lists each of them
  [[ $(grep -c "^  failure: stage pretrain attempt [0-2] before its first step: rank \([0-9]\) (node node[01], pid [0-9]*) exited with status 1; rank \1's last line on stderr: ${long:0:240}\.\.\.$" status.txt) == 3 ]] ||
    { cat status.txt; fail "the text does not list the 3 failures"; }
  # resumed with a worker that works: its first step is the recovery from the last failure,
  # though another baton run journaled that failure
  "$baton" resume r1 --worker "$worker" --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume failed"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and (s["failures"], s["recoveries"]) == (3, 1), s
r = s["recovery_list"]
assert [(x["stage"], x["attempt"], x["step"]) for x in r] == [("pretrain", 3, 1)] and r[0]["recovery_s"] > 0, r' ||
    { "$baton" status r1; fail "the resumed run does not count its recovery"; }
  echo "$case: gave up after 2 restarts (exit 1); status says failed, with reason and cause; resumed: 1 recovery"
  ;;
replay)
  sets=(--set stages.pretrain.steps=12 --set stages.1.steps=2 --set stages.fp8.steps=2)
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet "${sets[@]}" >run.out 2>&1 &
  bpid=$!
  strike 0 6 7 KILL # between the checkpoints at 5 and 10, whatever a step or two of lag
  wait "$bpid" || fail "baton run exited $?"
  bpid=
  [[ -f r1/logs/s00-a01.log ]] || fail "pretrain was not restarted"
  # the step the restart resumed from (0: none of its checkpoints was complete)
  from=$(sed -En 's/^\[0\] started from .* at step ([0-9]+) .*/\1/p' r1/logs/s00-a01.log)
  from=${from:-0}
  last0=$(sed -En 's/^\[0\] step +([0-9]+)\/.*/\1/p' r1/logs/s00-a00.log | tail -1)
  ((last0 > from)) || fail "attempt 0 ended at step $last0, not past the checkpoint at $from"
  /usr/bin/python3 - r1/metrics.jsonl "$from" <<'PY' || fail "metrics.jsonl after the restart"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
frm = int(sys.argv[2])
steps = [r["global_step"] for r in rows]
assert steps == list(range(1, 17)), f"global steps {steps}, expected 1..16 once each"
for r in rows[:12]:
    assert r["attempt"] == (0 if r["step"] <= frm else 1), r
print(f"metrics.jsonl: steps 1-16 once each; pretrain's 1-{frm} from attempt 0, {frm + 1}-12 from attempt 1")
PY
  /usr/bin/python3 "$src/tests/control/read_tb.py" r1/tb r1/metrics.jsonl >tb.txt ||
    { tail -3 tb.txt; fail "the event file does not match metrics.jsonl"; }
  grep -qx "session_log START $((from + 1))" tb.txt || { grep session_log tb.txt; fail "no restart marker at step $((from + 1))"; }
  echo "$case: attempt 0 reached step $last0, resumed at $from; each step once, restart marker at $((from + 1))"
  ;;
lost-metrics)
  reference
  # extend's steps take 0.05 s more: baton run is stopped about a second before step 10
  # however late this script sees extend's first record
  slow_stage 1 0.05 "exec "
  "$baton" run "$recipe" --run-dir r1 --quiet --worker "$PWD/wrap.sh" >run.out 2>&1 &
  bpid=$!
  deadline=$((SECONDS + 120))
  until grep -q '"stage_index": 1' r1/metrics.jsonl 2>/dev/null; do
    ((SECONDS < deadline)) && kill -0 "$bpid" 2>/dev/null || fail "no record of stage extend"
    sleep 0.02
  done
  kill -STOP "$bpid"
  # the workers go on (a worker never waits on the channel) past extend's checkpoint at 10
  # (up to 90 s: a loaded 2-core machine took more than 12)
  deadline=$((SECONDS + 90))
  until [[ -f r1/checkpoints/s01-step00000010/manifest.pb ]] || ((SECONDS >= deadline)); do
    sleep 0.02
  done
  kill -9 "$bpid"
  wait "$bpid" 2>/dev/null || true
  bpid=
  [[ -f r1/checkpoints/s01-step00000010/manifest.pb ]] || fail "extend's checkpoint at step 10 was never committed"
  workers_gone r1 30
  last=$(/usr/bin/python3 -c '
import json, sys
print(max(r["step"] for r in map(json.loads, open(sys.argv[1])) if r["stage_index"] == 1))' r1/metrics.jsonl)
  ((last < 10)) || fail "the killed run received extend's step $last: no step to lose"
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume failed"; }
  same_metrics ref r1 || fail "metrics.jsonl differs from the uninterrupted run's"
  grep -q 'stage "extend": [0-9]* step record(s) of attempt 0 that baton run had not received taken from .*/logs/s01-a00.metrics' resume.out ||
    { cat resume.out; fail "the resume did not say it took the lost records"; }
  /usr/bin/python3 "$src/tests/control/read_tb.py" r1/tb r1/metrics.jsonl >tb.txt ||
    { tail -3 tb.txt; fail "the event file does not match metrics.jsonl"; }
  echo "$case: the killed run had extend up to step $last, its checkpoint at 10 committed; every step once after the resume"
  ;;
fp16-skips)
  sed -n '1,/^stages:/p' "$src/tests/engine/fp16.yaml" >fp16.yaml
  sed -n '/^  - name: overflow/,$p' "$src/tests/engine/fp16.yaml" >>fp16.yaml
  echo "  - {name: after, steps: 4}" >>fp16.yaml # fp16 again: takes the scale overflow found
  "$baton" run fp16.yaml --run-dir r1 >run.out 2>&1 || fail "the fp16 run failed"
  log=r1/logs/s00-a00.log
  # every rank prints the skip; rank 0's lines are the ones counted
  skips=$(grep -Ec '^\[0\] step +[0-9]+: update skipped: Inf/NaN in the fp16 gradients' "$log" || true)
  ((skips >= 3)) || fail "$skips overflow steps in the worker's log, expected a few"
  last_scale=$(sed -En 's/^\[0\] step +20\/20 .*  loss_scale ([^ ]+)$/\1/p' "$log")
  [[ $(grep '^\[overflow\] step 20/20 ' run.out) == *"  skipped $skips  scale $last_scale" ]] ||
    { grep '^\[overflow\]' run.out; fail "the last progress line lacks 'skipped $skips  scale $last_scale'"; }
  /usr/bin/python3 - r1/metrics.jsonl <<'PY' || fail "metrics.jsonl lacks the fp16 figures"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
after = [r for r in rows if r["stage"] == "after"]
rows = [r for r in rows if r["stage"] == "overflow"]
assert [r["step"] for r in rows] == list(range(1, 21)), rows
over = [r["step"] for r in rows if r["overflow"]]
assert rows[-1]["skipped_steps"] == len(over) and all(r["loss_scale"] > 0 for r in rows), rows[-1]
# the next fp16 stage starts from the scale the overflow stage ended with, not 2^40 again
assert [r["overflow"] for r in after] == [0] * 4, after
assert rows[-1]["loss_scale"] / 2 <= after[0]["loss_scale"] <= rows[-1]["loss_scale"] * 2, (rows[-1], after[0])
PY
  /usr/bin/python3 "$src/tests/control/read_tb.py" r1/tb r1/metrics.jsonl >tb.txt || fail "unreadable events"
  [[ $(grep -c "^train/loss_scale " tb.txt) == 24 ]] ||
    fail "train/loss_scale not per step"
  [[ $(grep -Ec "^train/overflow [0-9]+ 1.0$" tb.txt) == "$skips" && $(grep -c "^train/overflow " tb.txt) == 24 ]] ||
    { grep "^train/overflow" tb.txt; fail "train/overflow is not 1 at the $skips skipped steps"; }
  # the skips are in the run's closing summary and in status, text and JSON, per stage;
  # a stage without a recovery has no average recovery time (null, not 0.0)
  grep -q "^run .*r1: completed; 0 failures, recovered 0 times; $skips steps skipped$" run.out &&
    grep -q "^  skipped steps (update not applied):  overflow $skips (" run.out ||
    { tail -n 8 run.out; fail "the summary does not count the $skips skipped steps"; }
  "$baton" status r1 | grep "^  skipped steps (update not applied):  overflow $skips (" >/dev/null ||
    fail "status does not count the skipped steps"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
st = {x["name"]: x for x in json.load(sys.stdin)["stages"]}
assert (st["overflow"]["skipped_steps"], st["after"]["skipped_steps"]) == (int(sys.argv[1]), 0), st
assert all(x["recoveries"] == 0 and x["recovery_s_avg"] is None for x in st.values()), st' "$skips" ||
    fail "status --json: skipped_steps or recovery_s_avg"
  echo "$case: $(grep '^\[overflow\] step 20/20' run.out)"
  ;;
status-live)
  t0=$(date +%s.%N)
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 8 >/dev/null
  sleep 1
  "$baton" status r1 --json >live.json
  "$baton" status r1 >live.txt
  t1=$(date +%s.%N)
  /usr/bin/python3 - live.json "$t0" "$t1" <<'PY' || { cat live.json; fail "status --json of the running run"; }
import json, sys
s = json.load(open(sys.argv[1]))
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
st = s["stages"]
p = st[0]
assert s["state"] == "running" and p["state"] == "running", s
left = p["steps"] - p["step"]
# 8 steps of at least 0.15 s and a 1 s wait: over 2 s in the stage, less than since the launch
assert 2.0 <= p["wall_s"] <= t1 - t0, (p["wall_s"], t1 - t0)
# about the injected 0.15 s per step left, at most 3 s per step (2 shared cores)
assert p["eta_s"] is not None and 0.1 * left <= p["eta_s"] <= 3.0 * left, (p, left)
# the run's: the stage's, then extend's 16 x 8 x 128 and fp8's 12 x 8 x 128 tokens at the
# running stage's tokens/s
later = (16 * 8 * 128 + 12 * 8 * 128) / p["tokens_per_s"]
assert abs(s["eta_s"] - (p["eta_s"] + later)) <= 0.01 * s["eta_s"] + 0.01, (s["eta_s"], p, later)
assert all(x["eta_s"] is None for x in st[1:]), st
print(f"running: step {p['step']}/{p['steps']}, wall {p['wall_s']:.1f} s "
      f"(launched {t1 - t0:.1f} s ago), ETA {p['eta_s']:.1f} s")
PY
  grep -Eq "^  pretrain +running +[0-9]+/30 .* ([2-9]|[1-9][0-9]+)\.[0-9] +1 +0 " live.txt ||
    { cat live.txt; fail "the running stage's wall time is not shown"; }
  grep -Eq "^  now: stage pretrain step [0-9]+/30, .*s in the stage, stage ETA [0-9]+ s, run ETA [0-9]+ s \(later stages at this tokens/s\)$" live.txt ||
    { cat live.txt; fail "no ETA line"; }
  stop_run
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "stopped" and s["eta_s"] is None and s["stages"][0]["eta_s"] is None, s' ||
    fail "a stopped run still has an ETA"
  echo "$case: $(grep '^  now:' live.txt)"
  ;;
early-signal)
  lib=${BATON_TEST_EARLY_SIGNAL_LIB:?the test library}
  sets=(--set stages.pretrain.steps=4 --set stages.1.steps=2 --set stages.fp8.steps=2)
  set +e
  # ASan wants its runtime first among the libraries; the preloaded one comes before it
  BATON_TEST_EARLY_SIGNAL=1 LD_PRELOAD=$lib ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$baton" run "$recipe" --run-dir r1 --quiet "${sets[@]}" >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 75 ]] || fail "a SIGTERM before main: exit $rc, not 75"
  grep -q "got SIGTERM: asking the workers to checkpoint and stop" run.out || fail "the stop was not said"
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume failed"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["state"] == "completed"' || fail "the resumed run did not complete"
  echo "$case: SIGTERM before main -> exit 75, resumed to completion"
  ;;
worker-file)
  # a --worker wrapper that sends the ranks' output to files of its own: progress, the
  # failure's step, the recovery, the closing validation and the checkpoint commits (extend's
  # from the async writer's thread) come over the control channel
  sets=(--set stages.1.steps=2 --set stages.fp8.steps=2 --set stages.extend.checkpoint.async=true)
  mkdir bin w
  printf '#!/bin/sh\nexec %q "$@" >"%q/w/$(basename "$2" .pb).$PMIX_RANK" 2>&1\n' "$worker" "$work" >bin/wrap.sh
  chmod +x bin/wrap.sh
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 "${sets[@]}" \
    --worker bin/wrap.sh >run.out 2>&1 &
  bpid=$!
  k=$((6 + RANDOM % 10)) deadline=$((SECONDS + 120))
  until grep -Eq "^step +$k/" w/s00-a00.0 2>/dev/null; do
    ((SECONDS < deadline)) && kill -0 "$bpid" 2>/dev/null || fail "pretrain never reached step $k"
    sleep 0.05
  done
  pids=$(worker_pids r1/logs/s00-a00.log 1)
  [[ -n $pids ]] || fail "no rank 1 to strike"
  kill -9 $pids
  wait "$bpid" || fail "baton run exited $?"
  bpid=
  [[ ! -s r1/logs/s00-a00.log ]] || ! grep -q "\] step " r1/logs/s00-a00.log || fail "the wrapper's output reached baton run"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s, k = json.load(sys.stdin), int(sys.argv[1])
st = [(x["name"], x["step"], x["steps"]) for x in s["stages"]]
assert all(a == b for _, a, b in st), ("completed stages at", st)
fl = s["failure_list"]
assert len(fl) == 1 and fl[0]["step"] is not None and k <= fl[0]["step"] <= k + 2, ("struck at", k, fl)
assert s["recoveries"] == 1 and len(s["recovery_list"]) == 1, s["recovery_list"]
print("stages", st, "failure at step", fl[0]["step"], "(struck after", k, ") recovered at",
      s["recovery_list"][0]["step"])' "$k" || fail "status after a run whose output went to files"
  for st in pretrain extend fp8; do
    grep -Eq "^\[$st\] valid loss [0-9.]+ " run.out || { cat run.out; fail "no valid loss line for $st"; }
  done
  grep -q "^\[pretrain\] recovered: step " run.out || fail "the recovery was not said"
  # every commit journaled as its stage's, with its step: each of pretrain's saves (every 5
  # steps; those the killed attempt lost are committed again), each stage's final one, and
  # every checkpoint retention kept
  grep -q "^checkpoint s01-step00000002: committed" w/s01-a00.0 || fail "extend's save was not async"
  journal_ckpts r1 >ckpts.txt
  ls r1/checkpoints | grep -E '^s[0-9]+-step[0-9]+$' >kept.txt
  /usr/bin/python3 - ckpts.txt kept.txt <<'PY' || { cat ckpts.txt; fail "checkpoint records in the journal"; }
import sys
recs = [l.split() for l in open(sys.argv[1])]
got = {(int(s), int(st)) for s, _, st, _ in recs}
assert all(n == "s%02d-step%08d" % (int(s), int(st)) for s, _, st, n in recs), recs
# those the Checkpoint message journaled are not journaled again from checkpoints/
assert len(recs) == len({(s, n) for s, _, _, n in recs}), ("journaled twice", recs)
want = {(0, k) for k in range(5, 31, 5)} | {(1, 2), (2, 2)}
assert want <= got, ("missing", sorted(want - got))
kept = {l.strip() for l in open(sys.argv[2])}
assert kept and kept <= {n for *_, n in recs}, ("kept but not journaled", kept)
print("journaled checkpoints:", " ".join(sorted({n for *_, n in recs})))
PY
  echo "$case: steps, the failure's step, the recovery, valid losses and checkpoint records without the ranks' output"
  ;;
worker-tokenless)
  # a --worker wrapper that drops BATON_CONTROL_TOKEN (as a container's clean environment
  # does): rank 0 trains without the control channel, so no Checkpoint message comes; the
  # commits are journaled from checkpoints/ all the same, once each, and the guard against
  # a stage whose checkpoints are gone holds
  sets=(--set stages.pretrain.steps=6 --set stages.extend.steps=12 --set stages.fp8.steps=2)
  mkdir bin
  printf '#!/bin/sh\nexec env -u BATON_CONTROL_TOKEN %q "$@"\n' "$worker" >bin/wrap.sh
  chmod +x bin/wrap.sh
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 "${sets[@]}" \
    --worker bin/wrap.sh >run.out 2>&1 &
  bpid=$!
  wait_files r1/checkpoints/s01-step00000005/manifest.pb 1 180 "extend's checkpoint at step 5"
  stop_run
  grep -q "BATON_CONTROL_TOKEN is not set; going on without it" r1/logs/s00-a00.log ||
    fail "the wrapper did not drop the token"
  said="rank 0 trained without ever connecting to the control channel"
  [[ $(grep -c "$said" run.out) == 1 ]] || { cat run.out; fail "not warned once that rank 0 never connected"; }
  # each journaled once (the stage and step its name says), every one kept journaled
  ckpts_once() { # DIR WANT...: the journal records each (stage, step) of WANT
    journal_ckpts "$1" >ckpts.txt
    ls "$1"/checkpoints | grep -E '^s[0-9]+-step[0-9]+$' >kept.txt
    /usr/bin/python3 - ckpts.txt kept.txt "${@:2}" <<'PY' || { cat ckpts.txt; fail "$1: checkpoint records in the journal"; }
import sys
recs = [l.split() for l in open(sys.argv[1])]
names = [(int(s), n) for s, _, _, n in recs]
assert all(n == "s%02d-step%08d" % (int(s), int(st)) for s, _, st, n in recs), recs
assert len(names) == len(set(names)), ("journaled twice", recs)
want = {tuple(map(int, w.split(":"))) for w in sys.argv[3:]}
got = {(int(s), int(st)) for s, _, st, _ in recs}
assert want <= got, ("missing", sorted(want - got))
kept = {l.strip() for l in open(sys.argv[2])}
assert kept and kept <= {n for _, n in names}, ("kept but not journaled", kept)
print("journaled checkpoints:", " ".join(n for _, n in names))
PY
  }
  ckpts_once r1 0:5 0:6 1:5
  cp -a r1 r2 # resumed whole below
  rm -rf r1/checkpoints/s01-*
  set +e; "$baton" resume r1 --quiet >gone.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] || { cat gone.out; fail "resume with extend's checkpoints gone: exit $rc, not 1"; }
  grep -q "the journal records checkpoint checkpoints/s01-step[0-9]* (step [0-9]*) as the stage's newest committed, but it is gone" gone.out ||
    { cat gone.out; fail "no word on extend's journaled checkpoint being gone"; }
  [[ ! -e r1/logs/s01-a01.log ]] || fail "extend was started again from step 0"
  "$baton" resume r2 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume through the wrapper failed"; }
  [[ $(grep -c "$said" resume.out) == 1 ]] || { cat resume.out; fail "the resume did not warn once"; }
  ckpts_once r2 0:5 0:6 1:5 1:12 2:2
  echo "$case: checkpoint commits journaled without the control channel, once each; gone ones refused"
  ;;
init-end)
  one_rank_recipe one 'checkpoint: {every_steps: 0, keep: 5}' '{name: a, steps: 5}' >one.yaml
  "$baton" run one.yaml --run-dir r1 --quiet >run.out 2>&1 || fail "the every_steps: 0 run failed"
  [[ $(cd r1/checkpoints && ls -d s*) == s00-step00000005 ]] ||
    fail "every_steps 0: checkpoints $(ls r1/checkpoints | tr '\n' ' '), not only the stage's end"
  set +e
  "$baton" plan one.yaml --set defaults.checkpoint.every_steps=-1 >neg.out 2>&1; rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q "every_steps: expected a non-negative integer" neg.out ||
    { cat neg.out; fail "every_steps -1: exit $rc"; }
  set +e
  "$baton" run one.yaml --run-dir r2 --quiet --set name=two --set init=r1 \
    --set model.ffn_dim=128 >init.out 2>&1; rc=$?
  set -e
  [[ $rc == 2 ]] || { tail -5 init.out; fail "init of another model: exit $rc, not 2"; }
  grep -qF "saved from a different model (model.ffn_dim 176 in the checkpoint, 128 in this stage)" init.out ||
    { tail -5 init.out; fail "init of another model: the dimension is not named"; }
  echo "$case: every_steps 0 saved only step 5; $(grep -o -m1 'saved from a different model (.*)' init.out)"
  ;;
init-handoff)
  ckpt_edit=$(dirname "$baton")/../tests/ckpt_edit
  # steps DIR: the steps metrics.jsonl holds, in order; first DIR: the first attempt's
  # "started from" step (none: "-")
  steps() { /usr/bin/python3 -c 'import json, sys
print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1] + "/metrics.jsonl")))' "$1"; }
  started() { sed -En 's/^\[0\] started from (.*) at step ([0-9]+) \(global sample ([0-9]+)\).*/\1 \2 \3/p' "$1"; }
  # handoff DIR STEPS INIT: DIR's one stage trained steps 1..STEPS from INIT's weights, from
  # its step 0 and sample 0, its warmup included (the lr of step 1 below step 3's)
  handoff() {
    local want
    want=$(seq -s ' ' 1 "$2")
    [[ $(started "$1/logs/s00-a00.log") == "$3 0 0" ]] ||
      { grep -h "started from\|step .*/" "$1/logs/s00-a00.log" | head -3; fail "$1: not a hand-off from $3 at step 0"; }
    [[ $(steps "$1") == "$want" ]] || fail "$1: trained steps $(steps "$1"), not $want"
    /usr/bin/python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
assert r[0]["lr"] < r[2]["lr"], (r[0]["lr"], r[2]["lr"])' "$1" || fail "$1: no warmup"
  }
  # A: neither recipe has name:, the second another stage over other windows
  one_rank_recipe x 'checkpoint: {every_steps: 0}' '{name: pretrain, steps: 8}' |
    sed '/^name:/d' >u1.yaml
  "$baton" run u1.yaml --run-dir u1 --quiet >run.out 2>&1 || fail "u1 failed"
  {
    one_rank_recipe x 'checkpoint: {every_steps: 4}' \
      '{name: finetune, steps: 12, seq_len: 32, optimizer: {warmup_steps: 5}}' | sed '/^name:/d'
    echo "init: u1/checkpoints/s00-step00000008"
  } >u2.yaml
  "$baton" run u2.yaml --run-dir u2 --quiet >run.out 2>&1 || fail "u2 failed"
  handoff u2 12 u1/checkpoints/s00-step00000008
  echo "$case: unnamed recipes: a hand-off at step 0, steps $(steps u2 | cut -d' ' -f1-3) ..."
  # B: the same named recipe again in a new run, init: its final checkpoint, fewer steps
  # (this stage's own final step would be past them) and more
  one_rank_recipe same 'checkpoint: {every_steps: 0}' \
    '{name: a, steps: 8, optimizer: {warmup_steps: 5}}' >same.yaml
  "$baton" run same.yaml --run-dir s1 --quiet >run.out 2>&1 || fail "s1 failed"
  for n in 6 12; do
    "$baton" run same.yaml --run-dir "s$n" --quiet --set init=s1/checkpoints/s00-step00000008 \
      --set stages.a.steps="$n" >run.out 2>&1 || fail "the same recipe with init, $n steps, failed"
    handoff "s$n" "$n" s1/checkpoints/s00-step00000008
  done
  echo "$case: the same named recipe: hand-offs of 6 and 12 steps from step 0"
  # C: u2's recipe stopped mid-stage: baton run again resumes, also with its checkpoints
  # and directory as an older baton left them; then baton resume
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run u2.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 5 >/dev/null
  stop_run
  own=$(cd r1/checkpoints && ls -d s00-step* | tail -1)
  at=$((10#${own#s00-step}))
  ((at >= 4)) || fail "r1 stopped with checkpoint $own"
  for c in r1/checkpoints/s00-step*; do "$ckpt_edit" "$c" --drop-run-id; done
  rm r1/run_id
  "$baton" ckpt inspect "r1/checkpoints/$own" --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["run_id"] is None' || fail "ckpt_edit --drop-run-id"
  cp -a "r1/checkpoints/$own" older # for D: retention may remove it from r1
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run u2.yaml --run-dir r1 --quiet >run2.out 2>&1 &
  bpid=$!
  log=$(wait_step 0 $((at + 2)))
  stop_run
  [[ $(started "$log") == "$work/r1 $at $((at * 4))" ]] ||
    { grep -h "started from" "$log"; fail "baton run again did not resume r1 at step $at"; }
  "$baton" resume r1 >run3.out 2>&1 || { cat run3.out; fail "the resume failed"; }
  log=$(newest_log 0)
  at=$(started "$log" | cut -d' ' -f2)
  ((at > 4)) || { grep -h "started from" "$log"; fail "baton resume started r1 at step $at"; }
  [[ $(steps r1) == "$(seq -s ' ' 1 12)" ]] || fail "r1: steps $(steps r1)"
  "$baton" ckpt inspect r1/checkpoints/s00-step00000012 --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["run_id"] == open("r1/run_id").read(), "run id"' ||
    fail "the resumed run's checkpoint does not record the run id"
  echo "$case: r1 resumed by baton run (older checkpoints) and by baton resume (step $at)"
  # D: such an older checkpoint named by a new run's init: a hand-off
  sed "s|^init: .*|init: older|" u2.yaml >u3.yaml
  "$baton" run u3.yaml --run-dir u3 --quiet >run.out 2>&1 || fail "u3 failed"
  handoff u3 12 older
  echo "$case: an older checkpoint named by init: a hand-off"
  ;;
recovery-stages)
  one_rank_recipe three 'checkpoint: {every_steps: 5, keep: 5}, restart: {max_restarts: 3, backoff: 0.1s}' \
    '{name: a, steps: 6}' '{name: b, steps: 5}' '{name: c, steps: 3}' >three.yaml
  cat >fail.sh <<SH
#!/bin/bash
case "\$*" in
*/s00-a00.pb*) "$worker" "\$@" --steps 5; exit 1 ;;
*/s01-a00.pb*) "$worker" "\$@" || exit; exit 1 ;;
esac
exec "$worker" "\$@"
SH
  chmod +x fail.sh
  "$baton" run three.yaml --run-dir r1 --quiet --worker "$PWD/fail.sh" >run.out 2>&1 ||
    fail "the run failed"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
fl, rl = s["failure_list"], s["recovery_list"]
assert s["state"] == "completed", s["state"]
assert [x["stage"] for x in fl] == ["a", "b"], fl
assert [(x["stage"], x["step"]) for x in rl] == [("a", 6)], rl' ||
    fail "the journal does not hold exactly stage a's recovery"
  echo "$case: failures in a and b, one recovery (stage a, step 6)"
  ;;
old-names)
  one_rank_recipe one 'checkpoint: {every_steps: 2}' '{name: a, steps: 8}' >one.yaml
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run one.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 3 >/dev/null
  stop_run
  # the name an older baton accepted, in the kept recipe
  sed -i 's/name: a, steps/name: "a.b 1", steps/' r1/recipe.yaml
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume of a run named before the rule failed"; }
  grep -qF "$work"'/r1/recipe.yaml:9:6: warning: stages[0].name: stage name "a.b 1" has '"'.'"' at character 2' resume.out ||
    { cat resume.out; fail "resume did not warn about the stage name"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
st = s["stages"][0]
assert s["state"] == "completed" and st["name"] == "a.b 1" and st["step"] == 8, s' ||
    fail "the resumed run did not complete stage \"a.b 1\""
  "$baton" run r1/recipe.yaml --run-dir r1 --quiet >again.out 2>&1 || { cat again.out; fail "baton run on the run's directory failed"; }
  grep -qF 'r1/recipe.yaml:9:6: warning: stages[0].name: stage name "a.b 1"' again.out ||
    { cat again.out; fail "baton run on the run's directory did not warn"; }
  cp r1/recipe.yaml new.yaml
  set +e; "$baton" run new.yaml --run-dir r2 >new.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -qE '^new\.yaml:9:6: stages\[0\]\.name: stage name "a\.b 1" has' new.out ||
    { cat new.out; fail "a new run with stage \"a.b 1\": exit $rc"; }
  [[ ! -e r2 ]] || fail "the refused new run made r2"
  echo "$case: a run named before the rule resumed and completed, warned; a new one refused"
  ;;
metrics-locked)
  one_rank_recipe one 'checkpoint: {every_steps: 2}, restart: {max_restarts: 2, backoff: 0.2s}' \
    '{name: a, steps: 8}' >one.yaml
  # r1 as a run directory (its lock file there) whose log is locked
  mkdir -m 0700 r1 r1/logs
  : >r1/lock
  : >r1/logs/s00-a00.metrics
  # a POSIX lock conflicts with the worker's and baton run's OFD locks alike
  /usr/bin/python3 -c '
import fcntl, sys, time
f = open(sys.argv[1], "r+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
open(sys.argv[2], "w").close()
time.sleep(120)' r1/logs/s00-a00.metrics locked &
  lpid=$!
  while [[ ! -e locked ]]; do kill -0 "$lpid" 2>/dev/null || fail "the lock was not taken"; sleep 0.05; done
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run one.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  strike 0 3 4 KILL
  wait "$bpid" || { kill "$lpid"; fail "baton run exited $?"; }
  bpid=
  kill "$lpid"
  [[ $(grep -c "s00-a00.metrics: rank 0's metrics log is still locked after 10 s (a worker still running, or a stale lock on a network file system); read it as it is" run.out) == 1 ]] ||
    { cat run.out; fail "the locked log was not said to be locked exactly once"; }
  /usr/bin/python3 - r1/metrics.jsonl <<'PY' || fail "metrics.jsonl"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == list(range(1, 9)), steps
PY
  echo "$case: a locked metrics log waited for once; $(grep -c 'still locked' run.out) message"
  ;;
fp8-calibrated)
  # the fp8 stage (tp2 x dp2, ZeRO-1) really runs GEMMs in fp8, its scales calibrated and
  # finite, as the cases above take for granted
  "$baton" run "$recipe" --run-dir r1 --quiet --set stages.pretrain.steps=1 \
    --set stages.extend.steps=1 --set stages.fp8.steps=2 >run.out 2>&1 || fail "the run failed"
  log=r1/logs/s02-a00.log
  ! grep -q "no GEMM runs in fp8" "$log" || { cat "$log"; fail "the fp8 stage ran no GEMM in fp8"; }
  grep -Eq '^\[0\] fp8: [1-9][0-9]* of [0-9]+ GEMMs in fp8' "$log" ||
    { cat "$log"; fail "rank 0 ran no GEMM in fp8"; }
  cal=$(grep -m1 '^\[0\] fp8 scales calibrated from' "$log") ||
    { cat "$log"; fail "no fp8 calibration logged"; }
  "$baton" ckpt inspect r1 --json | /usr/bin/python3 -c '
import json, math, re, sys
lo, hi = map(float, re.search(r"scales in \[([^,]+), ([^]]+)\]$", sys.argv[1]).groups())
assert 0 < lo <= hi and math.isfinite(hi), ("calibrated scales", lo, hi)
c = json.load(sys.stdin)
assert c["stage"] == "fp8" and c["fp8_active"] > 0, (c["stage"], c["fp8_active"])
for s in c["fp8"]:
    vals = [s["scale"]] + s["amax_history"]
    assert s["placeholder"] or (s["scale"] > 0 and all(map(math.isfinite, vals))), s' "$cal" ||
    fail "the fp8 scales: $cal"
  echo "$case: ${cal#\[0\] }; $(sed -En 's/^\[0\] (fp8: .* GEMMs in fp8.*)/\1/p' "$log")"
  ;;
*) fail "unknown case" ;;
esac
