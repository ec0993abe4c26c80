#!/usr/bin/env bash
# `baton run` and a stage's checkpoints where they can go wrong: at the stage's end (the
# final checkpoint unreadable, damaged or in a path another attempt would meet the same),
# one a killed baton run never journaled, one saved just before baton run was killed, and a
# save on a full disk; on tests/run/run.yaml or a one-rank recipe, with the helpers of
# run-common.sh. CASE:
#   disk-full     rank 1's write of the checkpoint at step 10 fails for a full disk
#                 (BATON_FAULT_SAVE_ENOSPC, in every attempt, as a disk that stays full):
#                 the run ends after that attempt, exit 1, saying the disk is full, naming
#                 the file and how to go on, not retried; `baton resume` once there is
#                 room completes it. The attempt is rank 1's failure, not a hang of the
#                 ranks that wait for it until the kill grace ends them. `baton status`
#                 says the rank's message and why it was not retried once each.
#   ckpt-then-kill  kill -9 `baton run` after stage extend's final checkpoint but before
#                 the stage is journaled complete (its workers held at exit by a wrapper);
#                 `baton resume` completes it without a step, and status must show the
#                 loss and tokens/s of its step 16 as the worker logged them, not 0; a
#                 stage with no step shows "-" (JSON null). Each stage's closing validation
#                 loss is in valid.jsonl, TensorBoard (valid/loss) and status once, as its
#                 rank 0 logged it, though extend evaluated again in the resume.
#   final-unread  every rank exits 0, but the stage's final checkpoint cannot be read
#                 (its manifest.pb made a directory: EIO, as EMFILE would be): a failure
#                 said as such and retried, not "without the stage's final checkpoint"
#                 and given up; the next attempt, the manifest back, completes the run.
#   final-damaged every rank exits 0, but the stage's final checkpoint's manifest is damaged
#                 (a byte changed): said and retried; the next attempt's worker passes over
#                 it to the stage's previous checkpoint, trains the last steps again and
#                 saves the final checkpoint anew: the run completes.
#   ckpt-credit   rank 0 without the control channel (its token dropped) and `baton run`
#                 killed (kill -9) once it saved a checkpoint: that checkpoint, which no
#                 baton run journaled, is journaled without an attempt as the next baton
#                 run's attempt starts, not credited to that attempt; the checkpoints that
#                 attempt saves are its own.
#   final-broken  every rank exits 0, but the stage's final checkpoint cannot be read for a
#                 cause another attempt would meet the same (a file where its directory
#                 belongs: ENOTDIR): the run fails at once (exit 1, one attempt), naming
#                 the path and the error; once put right, `baton resume` completes it.
#   save-too-long a run directory whose path leaves no room for a checkpoint's files (4060
#                 bytes: ENAMETOOLONG at the first save): the attempt fails at once, exit
#                 2, not retried (every restart would meet the same path), its message
#                 ending with the cause though the path alone is longer than a message.
#   stop-after-final  SIGTERM to `baton run` once every rank of a stage has saved its final
#                 checkpoint, run the closing validation and exited 0, but before the ranks'
#                 end is seen (a --worker wrapper holds each rank until released; the stop's
#                 SIGTERM ends it with the worker's 0): the stage is complete, not stopped.
#                 For the first stage the run stops before the next one (exit 75, said) and
#                 the resume trains the next stages only; for the last stage the run is
#                 completed (exit 0), and a resume has nothing to do. Every attempt once,
#                 each stage's validation once.
#   check-final.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
# strike_after CMD: wrap.sh, a --worker that runs the worker and, the first time it exits
# 0, runs CMD once (the stage's final checkpoint struck after the workers' success)
strike_after() {
  cat >wrap.sh <<SH
#!/bin/sh
[ -e $work/struck ] && exec $worker "\$@"
$worker "\$@" || exit \$?
touch $work/struck
$1
SH
  chmod 0755 wrap.sh
}

case $case in
ckpt-then-kill)
  # The wrapper holds stage extend's first attempt once its worker exited 0 (its final
  # checkpoint written), until baton run is killed: a builtin read on a FIFO, so nothing
  # outlives the wrapper, which dies with its launcher.
  mkfifo hold.fifo
  cat >held-worker <<WRAPPER
#!/usr/bin/env bash
"$worker" "\$@"; rc=\$?
if [[ \$rc == 0 && "\$*" == *"/specs/s01-a00.pb"* ]]; then
  : >"$work/held.\$\$"
  read -r -t 60 <>"$work/hold.fifo"
fi
exit \$rc
WRAPPER
  chmod +x held-worker
  "$baton" run "$recipe" --run-dir r1 --worker "$PWD/held-worker" --quiet >run.out 2>&1 &
  bpid=$!
  # all 4 ranks of extend held: a rank may exit before rank 0 has committed the checkpoint
  wait_files "held.*" 4 120 "stage extend was held (its 4 ranks finished)"
  kill -9 "$bpid"
  wait "$bpid" 2>/dev/null || true
  bpid=
  [[ -d r1/checkpoints/s01-step00000016 ]] || fail "no final checkpoint of stage extend"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
st = json.load(sys.stdin)["stages"]
assert [s["state"] for s in st] == ["done", "stopped", "pending"], st
assert st[2]["loss"] is None and st[2]["tokens_per_s"] is None, st[2]' ||
    fail "status before the resume"
  "$baton" status r1 | grep -E "^  fp8 +pending +0/12 +- +- " >/dev/null || { "$baton" status r1; fail "an unknown loss is not -"; }
  "$baton" resume r1 >resume.out 2>&1 || { cat resume.out; fail "resume failed"; }
  [[ $(ls r1/logs/s01-a*.log | wc -l) == 2 ]] || fail "stage extend was not resumed by a second attempt"
  # the attempt with no step left says where it started before its closing validation
  grep -E '^\[extend\] (started from|valid loss)' resume.out | head -n 1 | grep "started from" >/dev/null ||
    { grep -E '^\[extend\]' resume.out; fail "the resumed attempt's validation came before its 'started from'"; }
  ! grep -q "step *16/16" r1/logs/s01-a01.log || fail "the resumed attempt trained step 16 again"
  logged=$(sed -En 's/^\[0\] step +16\/16 +loss ([0-9.]+) .* ([0-9]+) tok\/s .*/\1 \2/p' r1/logs/s01-a00.log)
  [[ -n $logged ]] || fail "no step 16 in the first attempt's log"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
loss, tok = map(float, sys.argv[1].split())
st = json.load(sys.stdin)["stages"]
e = st[1]
print("extend: status loss %r tok/s %r; the worker logged %r, %r" % (e["loss"], e["tokens_per_s"], loss, tok))
assert [s["state"] for s in st] == ["done", "done", "done"], st
assert e["step"] == 16 and abs(e["loss"] - loss) < 5e-7 and abs(e["tokens_per_s"] - tok) <= 1, e' \
    "$logged" || fail "the completed stage does not show its last step's loss and tokens/s"
  printf -v want '%.4f +%s' "${logged%% *}" "${logged##* }"
  "$baton" status r1 | grep -E "^  extend +done +16/16 +$want " >/dev/null ||
    { "$baton" status r1; fail "the text shows another loss or tokens/s"; }
  # each stage's closing validation once in valid.jsonl, TensorBoard and status, as its
  # rank 0 logged it, though extend evaluated twice (before the kill and in the resume)
  [[ $(grep -c "valid loss" r1/logs/s01-a01.log) == 1 ]] || fail "the resumed attempt did not evaluate"
  for i in 0 1 2; do
    sed -En 's/^\[0\] valid loss ([0-9.]+) .* over ([0-9]+) windows.*/\1 \2/p' "$(ls r1/logs/s0$i-a*.log | tail -1)"
  done >valid.logged
  /usr/bin/python3 "$src/tests/control/read_tb.py" r1/tb >tb.txt || fail "unreadable events"
  "$baton" status r1 --json >status.json
  /usr/bin/python3 - valid.logged r1/valid.jsonl tb.txt status.json <<'PY' || fail "the validation losses"
import json, struct, sys
logged = [tuple(l.split()) for l in open(sys.argv[1])]
assert len(logged) == 3, logged
rows = [json.loads(l) for l in open(sys.argv[2])]
assert [(r["stage_index"], r["global_step"]) for r in rows] == [(0, 30), (1, 46), (2, 58)], rows
tb = [l.split() for l in open(sys.argv[3]) if l.startswith("valid/loss ")]
st = json.load(open(sys.argv[4]))["stages"]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
for r, (loss, n), t, s in zip(rows, logged, tb, st):
    assert abs(r["valid_loss"] - float(loss)) <= 5e-7 and r["windows"] == int(n), (r, loss, n)
    assert int(t[1]) == r["global_step"] and float(t[2]) == f32(r["valid_loss"]), (t, r)
    assert abs(s["valid_loss"] - r["valid_loss"]) <= 1e-8 * r["valid_loss"], (s, r)
assert len(tb) == 3, tb
print("valid.jsonl, TensorBoard, status:", [r["valid_loss"] for r in rows])
PY
  "$baton" status r1 | grep -E "^  valid loss  pretrain [0-9.]+  extend [0-9.]+  fp8 [0-9.]+$" >/dev/null ||
    { "$baton" status r1; fail "status shows no valid loss line"; }
  echo "$case: stage completed by a resume without a step shows loss $logged (the worker's step 16)"
  ;;
stop-after-final)
  # hold.spec names the spec whose ranks, once their worker exited 0, wait (held.PID made)
  # until release is made; the stop's SIGTERM to a held rank ends it with the worker's status
  cat >held-worker <<WRAPPER
#!/usr/bin/env bash
"$worker" "\$@"; rc=\$?
if [[ \$rc == 0 && "\$*" == *"/specs/\$(cat "$work/hold.spec")"* ]]; then
  trap 'exit \$rc' TERM
  : >"$work/held.\$\$"
  for ((i = 0; i < 1200; i++)); do [[ -e "$work/release" ]] && break; sleep 0.05 & wait \$!; done
fi
exit \$rc
WRAPPER
  chmod +x held-worker
  sets=(--set stages.pretrain.steps=6 --set stages.1.steps=2 --set stages.fp8.steps=2)
  # stop_held CMD...: runs baton CMD in the background, SIGTERM once the 4 ranks of
  # hold.spec's attempt are held, then releases them; rc: its exit status
  stop_held() {
    rm -f held.* release
    "$baton" "$@" --quiet >run.out 2>&1 &
    bpid=$!
    wait_files "held.*" 4 120 "the 4 ranks of $(cat hold.spec) were held"
    kill -TERM "$bpid"
    # the stop under way while the ranks are still held: baton said it read the signal
    # (however long a loaded machine keeps it from running), only then are they released
    local deadline=$((SECONDS + 60))
    until grep -q "got SIGTERM: asking the workers to checkpoint and stop" run.out; do
      ((SECONDS < deadline)) || fail "baton did not say it got the SIGTERM within 60 s"
      sleep 0.05
    done
    : >release
    set +e; wait "$bpid"; rc=$?; set -e
    bpid=
  }
  echo s00-a00.pb >hold.spec
  stop_held run "$recipe" --run-dir r1 --worker "$PWD/held-worker" "${sets[@]}"
  [[ $rc == 75 ]] || fail "a stop after pretrain's end: exit $rc, not 75"
  grep -q '^baton run: stage "pretrain": the stop came after its last step: .* the stage is complete$' run.out ||
    fail "pretrain's completion under the stop was not said"
  grep -q '^baton run: stopping before stage "extend"$' run.out || fail "the stop before extend was not said"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
st = [(s["name"], s["state"], s["step"], s["attempts"]) for s in d["stages"]]
assert d["state"] == "stopped" and st == [("pretrain", "done", 6, 1), ("extend", "pending", 0, 0),
                                          ("fp8", "pending", 0, 0)], (d["state"], st)' ||
    { "$baton" status r1; fail "status after a stop at pretrain's end"; }
  [[ $(ls r1/logs/*.log | wc -l) == 1 && $(wc -l <r1/valid.jsonl) == 1 ]] ||
    { ls r1/logs; cat r1/valid.jsonl; fail "another attempt, or not one validation"; }
  echo s02-a00.pb >hold.spec
  stop_held resume r1
  [[ $rc == 0 ]] || fail "a stop after the last stage's end: exit $rc, not 0"
  grep -q '^baton resume: stage "fp8": the stop came after its last step: .* the stage is complete$' run.out ||
    fail "fp8's completion under the stop was not said"
  "$baton" resume r1 >again.out 2>&1 || { cat again.out; fail "resuming the completed run failed"; }
  grep -q "the run has already completed" again.out || { cat again.out; fail "the completed run was resumed"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
st = [(s["name"], s["state"], s["step"], s["attempts"]) for s in d["stages"]]
assert d["state"] == "completed" and st == [("pretrain", "done", 6, 1), ("extend", "done", 2, 1),
                                            ("fp8", "done", 2, 1)], (d["state"], st)' ||
    { "$baton" status r1; fail "status after a stop at the last stage's end"; }
  logs=$(cd r1/logs && echo *.log)
  [[ $logs == "s00-a00.log s01-a00.log s02-a00.log" ]] || fail "attempts $logs, not one per stage"
  /usr/bin/python3 - r1/valid.jsonl <<'PY' || fail "not one validation per stage"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["stage_index"] for r in rows] == [0, 1, 2], rows
PY
  echo "$case: a stop after a stage's final checkpoint and validation completed it (exit 75 before the next stage, exit 0 after the last)"
  ;;
disk-full)
  set +e
  BATON_FAULT_SAVE_ENOSPC=1:10 "$baton" run "$recipe" --run-dir r1 --quiet \
    --set stages.pretrain.steps=12 --set stages.1.steps=2 --set stages.fp8.steps=2 >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run.out; fail "baton run exited $rc on a full disk, not 1"; }
  [[ $(grep -c 'attempt [0-9]* failed' run.out) == 1 ]] || { cat run.out; fail "a full disk was retried"; }
  grep -q 'stage "pretrain": the disk is full (rank 1: .*s00-step00000010.partial/rank-00001.bin: cannot write tensor .*: No space left on device): not retried, .*then '"'baton resume $PWD/r1'" run.out ||
    { cat run.out; fail "the give-up line does not say the disk is full"; }
  # the ranks waiting for rank 1 (rank 0 in the commit) outlive SIGTERM until the kill grace
  # ends them: the failure is rank 1's, never a hang of theirs meanwhile
  grep -q 'attempt 0 failed: rank 1 .*exited with status 1' run.out && ! grep -q 'hang:' run.out ||
    { cat run.out; fail "the full disk's attempt is not rank 1's failure"; }
  # status says the rank's message once (the failure line) and why it was not retried once
  # (the gave-up line); its first line the first clause of each
  "$baton" status r1 >status.txt
  grep -q "^run r1: failed (stage pretrain: the disk is full (rank 1); last failure: rank 1 (node node[01], pid [0-9]*) exited with status 1); 1 failure, recovered 0 times$" status.txt ||
    { cat status.txt; fail "status's first line is not short"; }
  [[ $(grep -o 'No space left on device' status.txt | wc -l) == 1 &&
     $(grep -o 'as every restart would train to the same save' status.txt | wc -l) == 1 ]] ||
    { cat status.txt; fail "status repeats the full disk's message or why it was not retried"; }
  grep -q "^  gave up: stage pretrain: the disk is full (rank 1); not retried, .*then 'baton resume $PWD/r1'$" status.txt ||
    { cat status.txt; fail "no gave-up line saying the disk is full"; }
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume after a full disk failed"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["failures"] == 1, s' || fail "the resumed run is not complete"
  echo "$case: a checkpoint save on a full disk ends the run at once (exit 1, not retried); resumed, it completes"
  ;;
final-unread)
  one_rank_recipe one 'restart: {max_restarts: 2, backoff: 2s}' '{name: a, steps: 2}' >one.yaml
  ck=$work/r1/checkpoints/s00-step00000002
  strike_after "mv $ck/manifest.pb $ck/manifest.keep && mkdir $ck/manifest.pb"
  "$baton" run one.yaml --run-dir r1 --worker "$work/wrap.sh" --quiet >run.out 2>&1 &
  bpid=$!
  # the manifest back within the restart's backoff, as a passing EMFILE or EIO would be
  deadline=$((SECONDS + 60))
  until grep -q "restarting stage" run.out; do
    kill -0 "$bpid" 2>/dev/null && ((SECONDS < deadline)) || { cat run.out; fail "no restart after the unreadable final checkpoint"; }
    sleep 0.05
  done
  rmdir "$ck/manifest.pb" && mv "$ck/manifest.keep" "$ck/manifest.pb"
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 0 ]] || { cat run.out; fail "the run whose final checkpoint could not be read once exited $rc"; }
  grep -qF "stage \"a\" attempt 0 failed: workers exited 0, but the stage's final checkpoint cannot be read: $ck/manifest.pb: cannot read" run.out ||
    { cat run.out; fail "the unreadable final checkpoint was not said"; }
  echo "$case: an unreadable final checkpoint said and retried; the run completed"
  ;;
final-damaged)
  one_rank_recipe one 'restart: {max_restarts: 2, backoff: 1s}, checkpoint: {every_steps: 2}' \
    '{name: a, steps: 4}' >one.yaml
  ck=$work/r1/checkpoints/s00-step00000004
  strike_after "/usr/bin/python3 -c 'import sys; b = bytearray(open(sys.argv[1], \"rb\").read()); b[-1] ^= 0x55; open(sys.argv[1], \"wb\").write(b)' $ck/manifest.pb"
  set +e; "$baton" run one.yaml --run-dir r1 --worker "$work/wrap.sh" --quiet >run.out 2>&1; rc=$?; set -e
  [[ -e struck ]] || { cat run.out; fail "the manifest was never damaged"; }
  [[ $rc == 0 ]] || { cat run.out; fail "the run whose final checkpoint was damaged exited $rc"; }
  grep -qF "stage \"a\" attempt 0 failed: workers exited 0, but the stage's final checkpoint cannot be read: $ck/manifest.pb: damaged" run.out ||
    { cat run.out; fail "the damaged final checkpoint was not said"; }
  grep -q "restarting stage" run.out || { cat run.out; fail "not retried"; }
  cat r1/logs/* | grep "falling back to $work/r1/checkpoints/s00-step00000002" >/dev/null ||
    { cat run.out r1/logs/*; fail "attempt 1 did not start from the stage's previous checkpoint"; }
  "$baton" ckpt verify "$ck" >verify.out 2>&1 || { cat verify.out; fail "the final checkpoint saved again does not verify"; }
  echo "$case: a damaged final checkpoint said, retried and saved again; the run completed"
  ;;
ckpt-credit)
  one_rank_recipe one 'checkpoint: {every_steps: 2}' '{name: a, steps: 6}' >one.yaml
  printf '#!/bin/sh\nexec env -u BATON_CONTROL_TOKEN %q "$@"\n' "$worker" >wrap.sh
  chmod +x wrap.sh
  BATON_FAULT_STEP_SLEEP=0.3 "$baton" run one.yaml --run-dir r1 --worker "$work/wrap.sh" --quiet >run.out 2>&1 &
  bpid=$!
  wait_files r1/checkpoints/s00-step00000002/manifest.pb 1 120 "the checkpoint at step 2"
  kill -9 "$bpid"
  wait "$bpid" 2>/dev/null || true
  bpid=
  for _ in $(seq 50); do
    [[ -z $(pgrep -f -- "--spec $work/r1/" || true) ]] && break
    sleep 0.1
  done
  [[ -z $(pgrep -f -- "--spec $work/r1/" || true) ]] || fail "workers outlived baton run"
  [[ -z $(journal_ckpts r1) ]] || fail "a checkpoint journaled before the kill: $(journal_ckpts r1)"
  "$baton" run one.yaml --run-dir r1 --quiet >run2.out 2>&1 || { cat run2.out; fail "the second baton run failed"; }
  journal_ckpts r1 >ckpts.txt
  grep -qx "0 - 2 s00-step00000002" ckpts.txt || { cat ckpts.txt; fail "the killed attempt's checkpoint credited to an attempt"; }
  grep -qx "0 1 6 s00-step00000006" ckpts.txt || { cat ckpts.txt; fail "attempt 1's final checkpoint not its own"; }
  echo "$case: $(tr '\n' ';' <ckpts.txt)"
  ;;
final-broken)
  one_rank_recipe one 'restart: {max_restarts: 2, backoff: 1s}' '{name: a, steps: 2}' >one.yaml
  ck=$work/r1/checkpoints/s00-step00000002
  strike_after "mv $ck $ck.keep && echo planted >$ck"
  set +e; "$baton" run one.yaml --run-dir r1 --worker "$work/wrap.sh" --quiet >run.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] || { cat run.out; fail "exit $rc, not 1"; }
  grep -qF "stage \"a\" attempt 0 failed: workers exited 0, but the stage's final checkpoint cannot be read: $ck/manifest.pb: cannot read: Not a directory (not retried" run.out ||
    { cat run.out; fail "the cause was not said"; }
  ! grep -q "restarting stage" run.out || { cat run.out; fail "retried"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
st = [(x["state"], x["attempts"]) for x in s["stages"]]
assert s["state"] == "failed" and st == [("failed", 1)], (s["state"], st)' || fail "status"
  rm "$ck" && mv "$ck.keep" "$ck"
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume once put right failed"; }
  [[ $("$baton" status r1 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])') == completed ]] ||
    fail "the resumed run is not completed"
  echo "$case: a final checkpoint unreadable for good failed the run at once; resumed once put right"
  ;;
save-too-long)
  one_rank_recipe one 'restart: {max_restarts: 2, backoff: 1s}, checkpoint: {every_steps: 2}' \
    '{name: a, steps: 4}' >one.yaml
  long=$work
  while ((${#long} < 4060)); do
    n=$((4060 - ${#long} - 1))
    long=$long/$(printf 'd%.0s' $(seq $((n < 60 ? n : 60))))
  done
  set +e; "$baton" run one.yaml --run-dir "$long" --quiet >run.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] || { cat run.out; fail "exit $rc, not 2"; }
  grep -q "^baton run: stage \"a\" attempt 0 failed: .*checkpoint s00-step00000002: $work/d.*/checkpoints/s00-step.*: File name too long (a configuration error: not retried)$" run.out ||
    { cut -c1-300 run.out; fail "the cause was not said"; }
  ! grep -q "restarting stage" run.out || { cut -c1-300 run.out; fail "retried"; }
  echo "$case: a checkpoint path too long failed the run at once (exit 2), saying why"
  ;;
*) fail "unknown case" ;;
esac
