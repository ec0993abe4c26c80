#!/usr/bin/env bash
# The loss-spike guard (worker/engine/train_spike.h) and the fp8 calibration from scratch
# or at a precision hand-off (train_fp8_calibrate in worker/engine/train.c), on
# tests/spike/spike.yaml. CASE:
#   guard     BATON_FAULT_SPIKE_STEPS=15 (a fault-injection hook: step 15's gradients x1000):
#             the update of step 15 is skipped, so the weights after step 15 equal those
#             after step 14, bitwise; the run goes on to the end; a run without the hook
#             sees no spike.
#   resume-armed  the guard's window is in checkpoints: 20 steps saved (one process), then
#             resumed with step 23 spiking, 3 steps in, inside what was the guard's blind
#             warm-up: caught; so under pp2 from the same checkpoint (both ranks undo it:
#             their shards after step 23 are bitwise those after 22); the window survives a
#             reshard to tp2; a run of spikes in progress too (11, 12 saved, 13 after a
#             resume: one rollback request for 11..13); a checkpoint without it (saved with
#             the guard off, as an older one) resumes without error, the guard warming up
#             again (23 not caught).
#   rollback  three spiking steps in a row: the worker stops without saving, exit 76,
#             naming the samples of those steps.
#   calib     the fp8 stage after the fp32 one calibrates its scales (none is 1 after).
#   calib-overlap  the same with each layer's gradients reduced during the backward
#             (BATON_DP_OVERLAP=1, train_dp_overlap.h): the calibration's reductions are
#             completed and thrown away, so the fp8 stage's losses and gradient norms equal
#             those of the run without (within 1e-5 relative).
#   calib-fallback  the fp8 stage's own checkpoint refused (a damaged amax history): the
#             fallback to the fp32 stage's checkpoint is a hand-off as the first one was
#             (step 0, calibrated, the same losses), nothing of the refused one left; also
#             under pp2 with only stage 1's shard damaged (rank 0 loads it, rank 1 refuses
#             it: both fall back alike).
#   calib-moe an fp8 MoE stage from scratch: the calibration's routing is not counted in
#             step 1's MoE figures (dropped pairs as the fp32 run's, not twice).
#   guard-fp8 the guard in an fp8 stage: the skipped step's amaxes leave no trace, so the
#             checkpoint after the skipped step 15 has step 14's fp8 scales and histories
#             (and weights), exactly.
#   run       `baton run` with steps 15..17 spiking in attempt 0 only: ROLLBACK journaled,
#             the later checkpoints moved aside, the window skipped, the run completes; the
#             next stage's data starts after the window's samples too.
#   rollback-limit  steps 15..17 spiking in every attempt, no checkpoint before them
#             (every_steps 0): exactly RUN_MAX_ROLLBACKS = 5 rollbacks, each "to the
#             stage's start", then the 6th request fails the run (exit 1, not retried,
#             "giving up after 5 rollbacks"): six attempts, not seven.
#   rollback-limit-ckpts  the same with steps 25..27 spiking and a checkpoint every 13
#             steps, so each attempt saves step 26 between the spikes: the 6th request
#             sets it aside too (from step 25 on: checkpoint 13's saved window arms the
#             guard for them) and drops `latest` (journaled as a ROLLBACK without a window),
#             so `baton resume` restarts at step 13, before the spikes, meets them with
#             the guard armed and gives up at once (the count is kept); resumed
#             without the spikes, the stage completes from step 13. And spikes at 12..14
#             with the checkpoint at 13 the only one: set aside, the resume starts the
#             stage afresh (not refused for a journaled checkpoint gone).
#   rollback-limit-blind  after those, spikes at 30..32 on a resume (from 13, saving 26):
#             the request, refused, sets aside nothing before them (from 30 on): 26, 4
#             steps before them, carries the guard's window, so the next resume starts at
#             26, says on baton's terminal that it took the window back, and meets the
#             spikes armed (exit 1) rather than in a blind warm-up; only a checkpoint
#             without a window (an older one) needs the 10 steps of warm-up set aside
#             (run_set_aside_refused_from, tests/unit/test_set_aside.c).
#   nonfinite lr 1e30 without clipping or guard: step 2's loss is NaN on every attempt
#             from the stage's start; retried once, then not again (exit 1 after 2
#             attempts, not max_restarts + 1 = 6), saying what to change (clipping, the
#             guard) and that a faulty GPU can do it too; status says why.
#   nonfinite-newer-start  the same with a checkpoint every step, clipping and the guard
#             on: attempt 0 from step 0, attempts 1 and 2 from step 1, NaN at step 2 each
#             time: attempt 1, from another start, is retried, attempt 2 not (3 attempts,
#             2 restarts); the advice leaves out clipping and the guard, already set.
#   fp16-floor  an fp16 stage whose scale overflows at its precision.loss_scale.min on
#             every attempt: not retried a second time, said as such (an fp16 overflow at
#             the loss scale's floor, not a non-finite loss), the advice naming a lower min
#             first; and a checkpoint saved at scale 0.0625 (min 0.0625) resumed under
#             the default min 1: the worker says it lifts the scale to 1.
#   check-spike.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
baton=$1 worker=$2 src=$3 case=$4
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-spike.XXXXXX)
export TMPDIR=$work/tmp # what the runs leave there goes with $work
mkdir "$TMPDIR"
cleanup() {
  pkill -9 -f -- "--spec $work/" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
recipe=$src/tests/spike/spike.yaml
fail() { echo "$case: $*"; exit 1; }
"$baton" spec "$recipe" --out s0.pb
w() { "$worker" --spec "$work/s0.pb" --single-process --eval-windows 0 "$@"; }

case $case in
guard-fp8)
  # the fp8 stage, started from scratch (a copy of the recipe with it first)
  /usr/bin/python3 - "$recipe" fp8.yaml <<'PY'
import re, sys
text = open(sys.argv[1]).read()
prec = re.search(r"^    precision: \{type: fp8.*$", text, re.M).group(0)
text = text.replace("  - name: pretrain\n", "  - name: pretrain\n" + prec + "\n", 1)
open(sys.argv[2], "w").write(text)
PY
  "$baton" spec fp8.yaml --out f.pb
  f() { "$worker" --spec "$work/f.pb" --single-process --eval-windows 0 "$@"; }
  f --steps 14 --run-dir a --save-every 0 >a.out
  # from scratch: no scaling state to start from, so step 1's micro-batches calibrate it
  grep -q "^fp8 scales calibrated from 4 micro-batch(es)" a.out || { cat a.out; fail "no calibration"; }
  BATON_FAULT_SPIKE_STEPS=15 f --steps 15 --run-dir b --save-every 0 >b.out
  grep -Eq "^step +15: loss spike" b.out || { cat b.out; fail "no spike at step 15"; }
  fp8() { "$baton" ckpt inspect "$1" --json | /usr/bin/python3 -c '
import json, sys; print(json.dumps(json.load(sys.stdin)["fp8"], sort_keys=True))'; }
  [[ -n $(fp8 a | tr -d '[]') ]] || fail "no fp8 state in the checkpoint"
  [[ $(fp8 a) == "$(fp8 b)" ]] || fail "the skipped step changed the fp8 scaling state"
  cmp a/checkpoints/s00-step00000014/rank-00000.bin b/checkpoints/s00-step00000015/rank-00000.bin ||
    fail "the skipped step changed the weights or moments"
  echo "$case: after the skipped fp8 step 15: step 14's scales, histories, weights and moments"
  ;;
guard)
  w --steps 14 --dump-params a.bin >a.out
  BATON_FAULT_SPIKE_STEPS=15 w --steps 15 --dump-params b.bin >b.out
  grep -E "^step +15: loss spike \(z=[0-9.e+]+ > 6.0\): update skipped" b.out ||
    { cat b.out; fail "no spike reported at step 15"; }
  cmp a.bin b.bin || fail "the weights after the skipped step 15 differ from those after step 14"
  BATON_FAULT_SPIKE_STEPS=15 w >c.out || { tail c.out; fail "the run with a spike did not finish"; }
  grep -Eq "^step +24/24" c.out || fail "the run with a spike stopped early"
  [[ $(grep -c "loss spike" c.out) == 1 ]] || { grep spike c.out; fail "expected exactly one spike"; }
  w >d.out
  ! grep -q "loss spike" d.out || { grep spike d.out; fail "a spike without the fault hook"; }
  echo "$case: step 15 skipped, weights after it bitwise those after step 14; no false spike"
  ;;
resume-armed)
  w --steps 20 --run-dir a --save-every 20 >a.out
  ck=a/checkpoints/s00-step00000020
  window() { "$baton" ckpt inspect "$1" --json | /usr/bin/python3 -c '
import json, sys; print(json.load(sys.stdin).get("spike_guard"))'; }
  [[ $(window "$ck") == "{'window': 20, 'spikes_in_a_row': 0, 'first_spike_step': None}" ]] ||
    fail "checkpoint 20 holds no window of 20 steps: $(window "$ck")"
  BATON_FAULT_SPIKE_STEPS=23 w --steps 3 --run-dir b --init "$ck" --save-every 0 >b.out
  grep -q "^started from $ck at step 20 " b.out || { cat b.out; fail "not resumed at step 20"; }
  grep -q "^loss-spike guard: 20 applied steps of its window taken from the checkpoint: armed$" b.out ||
    { cat b.out; fail "the resume does not say it took the window"; }
  grep -Eq "^step +23: loss spike" b.out || { cat b.out; fail "step 23, 3 steps after the resume, not caught"; }
  # another layout (pp2, two processes) from the same one-process checkpoint
  "$baton" spec "$recipe" --set stages.pretrain.parallel.pp=2 --set stages.pretrain.parallel.dp=1 \
    --out pp.pb
  p2() { timeout 120 "$baton" launch -n 2 -- "$worker" --spec "$work/pp.pb" --eval-windows 0 \
    --comm-timeout 20 --save-every 0 --init "$ck" "$@"; }
  p2 --steps 2 --run-dir c >c.out || { cat c.out; fail "pp2: the resume failed"; }
  BATON_FAULT_SPIKE_STEPS=23 p2 --steps 3 --run-dir d >d.out || { cat d.out; fail "pp2: the resume with the spike failed"; }
  grep -Eq "step +23: loss spike" d.out || { cat d.out; fail "pp2: step 23 not caught"; }
  for r in 0 1; do
    cmp c/checkpoints/s00-step00000022/rank-0000$r.bin d/checkpoints/s00-step00000023/rank-0000$r.bin ||
      fail "pp2: rank $r's weights after the skipped step 23 are not those after step 22"
  done
  "$baton" ckpt reshard "$ck" --to tp2 --out rs/tp2 >/dev/null
  [[ $(window rs/tp2) == "{'window': 20, 'spikes_in_a_row': 0, 'first_spike_step': None}" ]] || fail "reshard lost the window"
  # a run of spikes in progress is kept too: steps 11, 12 before the save, 13 after a resume
  BATON_FAULT_SPIKE_STEPS=11-12 w --steps 12 --run-dir f --save-every 12 >f.out
  [[ $(window f/checkpoints/s00-step00000012) == "{'window': 10, 'spikes_in_a_row': 2, 'first_spike_step': 11}" ]] ||
    fail "checkpoint 12 does not show the run of spikes from step 11: $(window f/checkpoints/s00-step00000012)"
  set +e
  BATON_FAULT_SPIKE_STEPS=13 w --steps 1 --run-dir f --init f >g.out 2>g.err
  rc=$?
  set -e
  [[ $rc == 76 ]] || { cat g.out g.err; fail "spikes 11, 12 saved, 13 after the resume: exit $rc, not 76"; }
  grep -q "3 loss spikes in a row at steps 11..13: .*global samples 80..103: skip \[80, 104)" g.err ||
    { cat g.err; fail "the run of spikes across the resume is not one window"; }
  # no window saved (the guard off, as in a checkpoint from before it was saved): warm-up
  "$baton" spec "$recipe" --set defaults.restart.spike_zscore=0 --out off.pb
  "$worker" --spec "$work/off.pb" --single-process --eval-windows 0 --steps 20 --run-dir o \
    --save-every 20 >o.out
  [[ $(window o/checkpoints/s00-step00000020) == None ]] || fail "a window saved with the guard off"
  BATON_FAULT_SPIKE_STEPS=23 w --steps 3 --run-dir e --init o/checkpoints/s00-step00000020 \
    --save-every 0 >e.out 2>e.err || { cat e.out e.err; fail "the resume without a window failed"; }
  grep -q "^started from .* at step 20 " e.out || { cat e.out; fail "no window: not resumed at step 20"; }
  ! grep -q "loss spike" e.out || fail "no window: the guard judged step 23 before its warm-up"
  echo "$case: step 23 caught 3 steps after a resume, one process and pp2; kept by reshard;" \
    "a run of spikes across a resume one request; none saved: warm-up"
  ;;
rollback)
  set +e
  BATON_FAULT_SPIKE_STEPS=15-17 w >r.out 2>r.err
  rc=$?
  set -e
  [[ $rc == 76 ]] || { cat r.out r.err; fail "exit $rc, not 76"; }
  grep -q "3 loss spikes in a row at steps 15..17" r.err || { cat r.err; fail "unclear message"; }
  # global batch 8: step 15 reads samples 112..119, step 17 up to 135
  grep -q "global samples 112..135: skip \[112, 136)" r.err || { cat r.err; fail "wrong window"; }
  ! grep -q "^checkpoint" r.out || fail "saved a checkpoint"
  echo "$case: exit 76, $(cat r.err)"
  ;;
run)
  BATON_FAULT_SPIKE_STEPS=15-17 BATON_FAULT_SPIKE_ATTEMPT=0 \
    "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "baton run failed"; }
  "$baton" status r1 >status.txt
  "$baton" status r1 --json >status.json
  cat status.txt
  grep -q "loss spikes at steps 15..17: skip \[112, 136)" status.txt ||
    { cat run.out; fail "baton status shows no rollback"; }
  grep -aq "skip \[112, 136)" r1/journal* || fail "no ROLLBACK record in the journal"
  [[ -d r1/rolled-back/s00-a00/s00-step00000016 ]] || { ls -R r1 | head -30; fail "checkpoint 16 not moved aside"; }
  grep -q "started from .* at step 12 (global sample 96)" r1/logs/s00-a01.log ||
    { grep started r1/logs/s00-a01.log; fail "attempt 1 did not start from step 12"; }
  ! grep -q "loss spike" r1/logs/s00-a01.log || fail "attempt 1 spiked"
  # the fp8 stage (same data, same seq_len) starts after what pretrain read: its 24 x 8
  # samples and the 24 of the window it skipped
  grep -q "started from .* at step 0 (global sample 216)" r1/logs/s01-a00.log ||
    { grep started r1/logs/s01-a00.log; fail "the fp8 stage did not start at sample 192 + 24"; }
  # and pretrain's final checkpoint says so: 192 logical, 216 read next
  "$baton" ckpt inspect r1/checkpoints/s00-step00000024 --json | /usr/bin/python3 -c '
import json, sys
m = json.load(sys.stdin)
assert (m["data_position"], m["skipped_samples"], m["next_sample"]) == (192, 24, 216), m' ||
    fail "inspect of the final checkpoint does not count the skipped window"
  [[ $("$baton" ckpt inspect r1/checkpoints/s00-step00000024) == *"next global sample 216 (192 logical + 24 skipped after loss spikes)"* ]] ||
    fail "inspect's text does not count the skipped window"
  /usr/bin/python3 - status.json <<'PY' || fail "status check"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["state"] == "completed" and s["restarts"] == 0, s
assert [st["state"] for st in s["stages"]] == ["done", "done"], s
print("completed; restarts", s["restarts"], "attempts", [st["attempts"] for st in s["stages"]])
PY
  echo "$case: rollback journaled, window skipped, run completed"
  ;;
rollback-limit)
  set +e
  BATON_FAULT_SPIKE_STEPS=15-17 "$baton" run "$recipe" --run-dir r1 --quiet \
    --set defaults.checkpoint.every_steps=0 >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run.out; fail "exit $rc, not 1"; }
  n=$(grep -c "rolled back to the stage's start (no checkpoint before the spikes)$" run.out) || true
  [[ $n == 5 ]] || { cat run.out; fail "$n rollbacks, not 5"; }
  grep -q "rollback 5 of at most 5" run.out || { cat run.out; fail "no count of the rollbacks"; }
  grep -q "attempt 5 failed: .*exited with status 76; .*(not retried: giving up after 5 rollbacks" run.out ||
    { cat run.out; fail "the 6th request is not refused as such"; }
  [[ -e r1/logs/s00-a05.log && ! -e r1/logs/s00-a06.log ]] || { ls r1/logs; fail "not 6 attempts"; }
  "$baton" status r1 >status.txt || true
  grep -q "failed (stage pretrain: giving up after 5 rollbacks; last failure: rank " status.txt ||
    { cat status.txt; fail "status does not say why"; }
  [[ $(grep -c "^  rollback: .*; rolled back to " status.txt) == 5 && $(grep -c "^  rollback: " status.txt) == 5 ]] ||
    { cat status.txt; fail "status: not 5 rollbacks"; }
  grep -q "^  rollback refused: stage pretrain attempt 5: loss spikes at steps 15..17 after 5 rollbacks: not rolled back, no samples skipped; .* so a resume starts from the stage's start" status.txt ||
    { cat status.txt; fail "status: the refused request is not listed"; }
  echo "$case: 5 rollbacks, the 6th request refused, exit 1"
  ;;
rollback-limit-ckpts)
  set +e
  BATON_FAULT_SPIKE_STEPS=25-27 "$baton" run "$recipe" --run-dir r1 --quiet \
    --set defaults.checkpoint.every_steps=13 --set stages.pretrain.steps=40 >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run.out; fail "exit $rc, not 1"; }
  grep -q "attempt 5 failed: .*(not retried: giving up after 5 rollbacks" run.out ||
    { cat run.out; fail "the 6th request is not refused"; }
  grep -q "loss spikes at steps 25..27 after 5 rollbacks: not rolled back, no samples skipped; the checkpoints from step 25 on set aside, so a resume starts from checkpoint s00-step00000013, whose saved window arms the guard for them$" run.out ||
    { cat run.out; fail "the refused request does not say what it set aside"; }
  [[ -d r1/checkpoints/s00-step00000013 && ! -e r1/checkpoints/s00-step00000026 &&
    ! -e r1/checkpoints/latest && -d r1/rolled-back/s00-a05/s00-step00000026 ]] ||
    { ls -R r1/checkpoints r1/rolled-back; fail "step 26, saved between the spikes, is not set aside"; }
  set +e
  BATON_FAULT_SPIKE_STEPS=25-27 "$baton" resume r1 --quiet >resume.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat resume.out; fail "the resume exited $rc, not 1"; }
  grep -q "started from .* at step 13 " r1/logs/s00-a06.log || { cat r1/logs/s00-a06.log; fail "the resume did not start at step 13"; }
  grep -Eq "step +25: loss spike" r1/logs/s00-a06.log || fail "the resume did not judge step 25"
  grep -q "attempt 6 failed: .*(not retried: giving up after 5 rollbacks" resume.out ||
    { cat resume.out; fail "the resume got another rollback"; }
  [[ ! -e r1/logs/s00-a07.log ]] || fail "the resume made more than one attempt"
  "$baton" resume r1 --quiet >resume2.out 2>&1 || { cat resume2.out; fail "the resume without spikes failed"; }
  grep -q "started from .* at step 13 " r1/logs/s00-a07.log || { cat r1/logs/s00-a07.log; fail "not from step 13"; }
  # the only checkpoint inside the spikes: set aside, the stage starts afresh on resume
  set +e
  BATON_FAULT_SPIKE_STEPS=12-14 "$baton" run "$recipe" --run-dir r2 --quiet \
    --set defaults.checkpoint.every_steps=13 --set stages.pretrain.steps=20 >run2.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run2.out; fail "r2: exit $rc, not 1"; }
  [[ ! -e r2/checkpoints/s00-step00000013 && -d r2/rolled-back/s00-a05/s00-step00000013 ]] ||
    { ls -R r2/checkpoints r2/rolled-back; fail "r2: step 13 not set aside"; }
  "$baton" resume r2 --quiet >resume3.out 2>&1 || { cat resume3.out; fail "r2: the resume without spikes failed"; }
  ! grep -q "started from " r2/logs/s00-a06.log || fail "r2: the resume did not start the stage afresh"
  echo "$case: the 6th request set aside step 26 and latest; resumed at step 13 and refused at once; completed without the spikes"
  ;;
rollback-limit-blind)
  # the refused request with a checkpoint less than 11 steps before the spikes (26, spikes
  # at 30..32): its saved window arms the guard, so it is kept and the resume starts there
  set +e
  BATON_FAULT_SPIKE_STEPS=25-27 "$baton" run "$recipe" --run-dir r1 --quiet \
    --set defaults.checkpoint.every_steps=13 --set stages.pretrain.steps=40 >run.out 2>&1
  rc=$?
  BATON_FAULT_SPIKE_STEPS=30-32 "$baton" resume r1 --quiet >resume.out 2>&1
  rc2=$?
  set -e
  [[ $rc == 1 && $rc2 == 1 ]] || { cat run.out resume.out; fail "exits $rc, $rc2, not 1, 1"; }
  grep -q "loss spikes at steps 30..32 after 5 rollbacks: not rolled back, no samples skipped; the checkpoints from step 30 on set aside, so a resume starts from checkpoint s00-step00000026, whose saved window arms the guard for them$" resume.out ||
    { cat resume.out; fail "checkpoint 26, 4 steps before the spikes, with a window, is not the one kept"; }
  [[ -d r1/checkpoints/s00-step00000026 && ! -e r1/rolled-back/s00-a06 && ! -e r1/checkpoints/latest ]] ||
    { ls -R r1/checkpoints r1/rolled-back; fail "26 set aside, or latest kept"; }
  set +e
  BATON_FAULT_SPIKE_STEPS=30-32 "$baton" resume r1 >resume2.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat resume2.out; grep -E "started from|step +3[0-2]/" r1/logs/s00-a07.log; fail "the spikes were trained on: exit $rc"; }
  grep -q "started from .* at step 26 " r1/logs/s00-a07.log || { cat r1/logs/s00-a07.log; fail "not from step 26"; }
  grep -q "^\[pretrain\] loss-spike guard: 20 applied steps of its window taken from the checkpoint: armed$" resume2.out ||
    { cat resume2.out; fail "baton resume's terminal does not say the window was taken back"; }
  grep -Eq "step +30: loss spike" r1/logs/s00-a07.log || fail "step 30 not judged"
  echo "$case: checkpoint 26 kept with the spikes at 30..32 (its window); the resume from 26 met them armed, exit 1"
  ;;
nonfinite)
  set +e
  "$baton" run "$recipe" --run-dir r1 --quiet --set defaults.optimizer.lr=1e30 \
    --set defaults.optimizer.min_lr=1 --set defaults.optimizer.grad_clip=0 \
    --set defaults.restart.spike_zscore=0 --set defaults.restart.max_restarts=5 >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run.out; fail "exit $rc, not 1"; }
  [[ $(grep -c "reported: step 2: loss is -\?nan" run.out) == 2 ]] || { cat run.out; fail "not 2 attempts at step 2"; }
  [[ $(grep -c "restarting stage" run.out) == 1 ]] || { cat run.out; fail "not exactly one retry"; }
  [[ -e r1/logs/s00-a01.log && ! -e r1/logs/s00-a02.log ]] || { ls r1/logs; fail "not 2 attempts"; }
  grep -q "attempt 1 failed: .*(not retried: the attempt before met a non-finite loss at this same step 2, starting from the same step 0: most likely the training itself, which a restart would meet again: lower optimizer.lr, set optimizer.grad_clip or set restart.spike_zscore to undo the finite loss spikes that lead up to it. A faulty GPU can do this too: .*'baton resume' retries it once more))$" run.out ||
    { cat run.out; fail "no advice"; }
  "$baton" status r1 >status.txt || true
  grep -q "failed (stage pretrain: a non-finite loss at step 2 again, from the same start: not retried;" status.txt ||
    { cat status.txt; fail "status does not say why"; }
  echo "$case: NaN at step 2 twice from step 0: not retried a second time, exit 1"
  ;;
nonfinite-newer-start)
  set +e
  "$baton" run "$recipe" --run-dir r1 --quiet --set defaults.optimizer.lr=1e30 \
    --set defaults.optimizer.min_lr=1 --set defaults.restart.max_restarts=5 \
    --set defaults.checkpoint.every_steps=1 >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run.out; fail "exit $rc, not 1"; }
  [[ -e r1/logs/s00-a02.log && ! -e r1/logs/s00-a03.log ]] || { ls r1/logs; fail "not 3 attempts"; }
  [[ $(grep -c "restarting stage" run.out) == 2 ]] || { cat run.out; fail "not exactly 2 restarts"; }
  ! grep -q "started from " r1/logs/s00-a00.log || fail "attempt 0 did not start at step 0"
  for a in 1 2; do
    grep -q "started from .* at step 1 " r1/logs/s00-a0$a.log || { cat r1/logs/s00-a0$a.log; fail "attempt $a did not start at step 1"; }
  done
  line=$(grep "attempt 2 failed: " run.out) || { cat run.out; fail "attempt 2 did not fail"; }
  [[ $line == *"(not retried: the attempt before met a non-finite loss at this same step 2, starting from the same step 1: most likely the training itself, which a restart would meet again: lower optimizer.lr. A faulty GPU"* ]] ||
    { echo "$line"; fail "the advice names settings the stage has (grad_clip 0.5, spike_zscore 6)"; }
  ! grep -q "attempt 1 failed: .*not retried" run.out || fail "attempt 1, from another start, was not retried"
  echo "$case: NaN at step 2 from step 0, then twice from step 1: retried once more for the newer start, exit 1 after 3 attempts"
  ;;
fp16-floor)
  # one fp16 stage on one rank; LS: its loss_scale
  f16() { # NAME LS
    sed -e 's/gpus_per_node: 2/gpus_per_node: 1/; s/dp: 2}/dp: 1}/' \
      -e '/^  - name: fp8/,$d' -e "s/^    steps: 24/    steps: 6\n    precision: {type: fp16, loss_scale: $2}/" \
      "$recipe" >"$1.yaml"
  }
  # overflows at the floor (2^40 backs off to 2^36, the min; step 2 overflows there): the
  # advice names loss_scale.min first
  f16 floor "{initial: 1099511627776, min: 68719476736, backoff_factor: 0.0625}"
  set +e
  "$baton" run floor.yaml --run-dir r1 --quiet >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run.out; fail "exit $rc, not 1"; }
  grep -q "step 2: the fp16 gradients hold Inf/NaN even at the loss scale's floor" run.out ||
    { cat run.out; fail "no overflow at the floor"; }
  grep -q "attempt 1 failed: .*(not retried: .*: lower precision.loss_scale.min (now 6.87195e+10) to keep backing off, lower optimizer.lr" run.out ||
    { cat run.out; fail "the advice does not name loss_scale.min"; }
  grep -q "attempt 1 failed: .*(not retried: the attempt before met an fp16 overflow at the loss scale's floor at this same step 2, starting from the same step 0: " run.out ||
    { cat run.out; fail "the give-up does not say it was an overflow at the floor"; }
  "$baton" status r1 >status.txt || true
  grep -q "failed (stage pretrain: an fp16 overflow at the loss scale's floor at step 2 again, from the same start: not retried;" status.txt ||
    { cat status.txt; fail "status does not say it was an overflow at the floor"; }
  # a checkpoint's scale below the floor: lifted, and said
  f16 low "{initial: 0.0625, min: 0.0625}"
  f16 default "{growth_interval: 2000}"
  "$baton" spec low.yaml --out low.pb
  "$baton" spec default.yaml --out default.pb
  "$worker" --spec "$work/low.pb" --single-process --eval-windows 0 --steps 2 --run-dir lo >lo.out
  "$worker" --spec "$work/default.pb" --single-process --eval-windows 0 --steps 1 --run-dir lo \
    --init lo >lo2.out 2>lo2.err || { cat lo2.out lo2.err; fail "the resume failed"; }
  grep -q "^started from lo at step 2 " lo2.out || { cat lo2.out; fail "not resumed at step 2"; }
  grep -q "warning: loss scale 0.0625 from lo is below precision.loss_scale.min (1): starting at 1, where an overflow fails the stage; give a lower precision.loss_scale.min to keep backing off$" lo2.err ||
    { cat lo2.err; fail "the lifted scale is not said"; }
  grep -Eq "^step +3/[0-9]+ .* loss_scale 1$" lo2.out || { cat lo2.out; fail "step 3 not at scale 1"; }
  echo "$case: the floor's overflow advised a lower loss_scale.min; a saved scale below it lifted and said"
  ;;
calib)
  # The fp8 stage takes the fp32 stage's weights: a hand-off, so its scales are calibrated.
  "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 || { cat run.out; fail "baton run failed"; }
  log=r1/logs/s01-a00.log
  line=$(grep "fp8 scales calibrated from 2 micro-batch(es)" "$log") || { cat "$log"; fail "no calibration"; }
  echo "$line"
  /usr/bin/python3 - "$line" <<'PY' || fail "the calibrated scales are still 1"
import re, sys
lo, hi = map(float, re.search(r"scales in \[([^,]+), ([^\]]+)\]", sys.argv[1]).groups())
assert lo != 1.0 and hi != 1.0 and lo > 0, (lo, hi)
PY
  ! grep -q "fp8 scales calibrated" r1/logs/s00-a00.log || fail "the fp32 stage calibrated"
  echo "$case: the fp8 stage's first step runs with calibrated scales"
  ;;
calib-overlap)
  for o in 0 1; do
    BATON_DP_OVERLAP=$o "$baton" run "$recipe" --run-dir "o$o" --quiet >"o$o.out" 2>&1 ||
      { cat "o$o.out"; fail "baton run (BATON_DP_OVERLAP=$o) failed"; }
  done
  grep -q "per layer .*during the backward" o1/logs/s01-a00.log || fail "no overlapped reduction"
  steps() { sed -En 's/.*step +([0-9]+)\/[0-9]+ +loss ([0-9.]+) .* grad_norm ([0-9.]+) .*/\1 \2 \3/p' "$1"; }
  paste <(steps o0/logs/s01-a00.log) <(steps o1/logs/s01-a00.log) | awk -v c="$case" '
    { n++; for (i = 2; i <= 3; i++) { d = $i - $(i + 3); if (d < 0) d = -d
        if (d > 1e-5 * $i) { printf "%s: step %d: %s vs %s\n", c, $1, $i, $(i + 3); bad = 1 } } }
    END { printf "%s: %d fp8 steps, losses and grad norms as without the overlap\n", c, n
          exit bad || n != 4 }' || fail "the overlap changed the fp8 stage"
  ;;
calib-fallback)
  # The fp8 stage's own checkpoint refused (its last amax history damaged): the worker
  # falls back to the fp32 stage's checkpoint, a hand-off, and starts the stage as from
  # that one (nothing of the refused checkpoint left: step 0, calibrated), so its losses
  # are those of the first hand-off.
  "$baton" spec "$recipe" --stage fp8 --out s1.pb
  f1() { "$worker" --spec "$work/s1.pb" --single-process --eval-windows 0 "$@"; }
  w --steps 4 --run-dir r --save-every 0 >a.out
  f1 --steps 2 --run-dir r --init r --save-every 0 >b.out
  ck=r/checkpoints/s01-step00000002
  [[ -f $ck/manifest.pb ]] || { cat b.out; fail "no fp8 checkpoint at step 2"; }
  printf '\x5a' | dd of="$ck/rank-00000.bin" bs=1 seek=$(($(stat -c %s "$ck/rank-00000.bin") - 2)) \
    conv=notrunc status=none
  f1 --steps 2 --run-dir r2 --init r --save-every 0 >c.out 2>c.err || { cat c.out c.err; fail "no fallback"; }
  grep -q "checkpoint refused: .*fp8_history\..*CRC32C" c.err || { cat c.err; fail "not refused for the history"; }
  grep -q "falling back to r/checkpoints/s00-step00000004" c.err || { cat c.err; fail "no fallback to s00"; }
  grep -q "^started from r at step 0 " c.out || { grep started c.out; fail "did not start at step 0"; }
  grep -q "^fp8 scales calibrated" c.out || fail "the hand-off was not calibrated"
  losses() { sed -En 's/^(\[[0-9]+\] )?step +([0-9]+)\/[0-9]+ +loss ([0-9.]+).*/\2 \3/p' "$1"; }
  [[ $(losses b.out) == "$(losses c.out)" && -n $(losses c.out) ]] ||
    { paste <(losses b.out) <(losses c.out); fail "the fallback's losses differ from the hand-off's"; }
  echo "$case: refused, fell back to the fp32 stage's checkpoint, steps 1-2 as the first hand-off's"
  # The same under pp2, the damage in pipeline stage 1's shard alone: rank 0 loads the
  # fp8 checkpoint, rank 1 refuses it, and both fall back to the same clean hand-off.
  sed '/^  - name: fp8/,$ s/parallel: {tp: 1, pp: 1, dp: 2}/parallel: {tp: 1, pp: 2, dp: 1}/' \
    "$recipe" >pp.yaml
  "$baton" spec pp.yaml --stage fp8 --out pp.pb
  p2() { timeout 120 "$baton" launch -n 2 -- "$worker" --spec "$work/pp.pb" --eval-windows 0 \
    --comm-timeout 20 --save-every 0 "$@"; }
  mkdir -p q/checkpoints && cp -r r/checkpoints/s00-step00000004 q/checkpoints/
  p2 --steps 2 --run-dir q --init q >d.out || { cat d.out; fail "the pp2 hand-off failed"; }
  ck=q/checkpoints/s01-step00000002
  [[ -f $ck/rank-00001.bin ]] || { ls "$ck"; fail "no pipeline stage 1 shard"; }
  printf '\x5a' | dd of="$ck/rank-00001.bin" bs=1 seek=$(($(stat -c %s "$ck/rank-00001.bin") - 2)) \
    conv=notrunc status=none
  p2 --steps 2 --run-dir q2 --init q >e.out 2>e.err || { cat e.out e.err; fail "pp2: no fallback"; }
  grep -q "falling back to q/checkpoints/s00-step00000004" e.out e.err || { cat e.err; fail "pp2: no fallback"; }
  grep -q "started from q at step 0 " e.out || { grep started e.out; fail "pp2: not at step 0"; }
  [[ $(losses d.out) == "$(losses e.out)" && -n $(losses e.out) ]] ||
    { paste <(losses d.out) <(losses e.out); fail "pp2: the fallback's losses differ from the hand-off's"; }
  echo "$case: pp2, stage 1's shard damaged: both ranks fell back to the same clean hand-off"
  ;;
calib-moe)
  # An fp8 MoE stage from scratch (capacity 1.0): the calibration's forward passes route
  # tokens too, but step 1's counts are step 1's alone (its dropped pairs within 10% of
  # the fp32 run's from the same weights; with the calibration's counted too, about 2x).
  for p in fp32 fp8; do
    sed "s/gpus_per_node: 2/gpus_per_node: 1/; s/ep: 2,/ep: 1,/;
         s/aux_loss_coef: 0.01/aux_loss_coef: 0.01, capacity_factor: 1.0/;
         s/^defaults:/defaults:\n  precision: {type: $p, first_last_bf16: false}/" \
      "$src/tests/engine/moe.yaml" >"moe-$p.yaml"
    "$baton" spec "moe-$p.yaml" --out "moe-$p.pb"
    "$worker" --spec "$work/moe-$p.pb" --single-process --eval-windows 0 --steps 1 >"moe-$p.out"
  done
  grep -q "^fp8 scales calibrated" moe-fp8.out || fail "the fp8 stage did not calibrate"
  d32=$(sed -En 's/^step +1\/.* dropped ([0-9]+).*/\1/p' moe-fp32.out)
  d8=$(sed -En 's/^step +1\/.* dropped ([0-9]+).*/\1/p' moe-fp8.out)
  echo "$case: step 1 dropped ${d8:-?} pairs under fp8, ${d32:-?} under fp32"
  [[ -n $d8 && -n $d32 ]] && ((d32 > 0 && 10 * d8 <= 11 * d32 && 10 * d8 >= 9 * d32)) ||
    fail "step 1's MoE counts include the calibration's"
  ;;
*) fail "unknown case" ;;
esac
