#!/usr/bin/env bash
# `baton run` end to end on tests/run/run.yaml (three stages, 4 workers on 2 virtual
# nodes, as check-run.sh, with its helpers from run-common.sh): what the supervisor
# judges and keeps (damaged checkpoints, placement at run time, MFU, a lost journal, its
# own pauses, a full journal, a stop checkpoint lost, run history, status). CASE:
#   damaged-ckpts every checkpoint of a stopped run damaged (4 bytes of a shard, CRC32C):
#                 `baton resume` fails promptly, exit 1, after two attempts that found no
#                 usable checkpoint (not max_restarts + 1), saying so; status says failed.
#   strict-runtime  cluster.strict_topology, 3 virtual nodes of 4 (tp2 x pp3 x dp2, placed
#                 as planned); node2 killed whole: with no spare dp shrinks to 1, and the
#                 launcher spreads the 6 ranks 3 + 3 where the plan puts 4 + 2, so a tp
#                 group spans hosts: baton run refuses the attempt once the ranks said
#                 where they are (exit 2, not retried, status failed).
#   mfu           the MFU a worker logs (metrics.jsonl) is over the peak the plan takes:
#                 fp32 stages' bf16 / 2 or cluster.gpu.peak_tflops_fp32, bf16's its own;
#                 and baton eval of the first stage's final checkpoint gives its closing
#                 validation loss (valid.jsonl) over the same windows.
#   lost-journal  a run stopped in extend, then its journal deleted or emptied: `baton
#                 resume` and `baton run` refuse (exit 2), nothing changed; a journal from
#                 before pretrain completed: pretrain starts from its own final checkpoint
#                 (extend's newer ones refused), trains no step, leaves that checkpoint
#                 untouched, and the run ends on the uninterrupted losses; every checkpoint
#                 deleted: resume fails (exit 1) naming the journaled checkpoint, no attempt.
#   pause         `baton run` SIGSTOPped while pretrain's workers finish it (and, where
#                 PMIx_Finalize gives up on the paused server, exit): every step's metrics
#                 and each closing validation are recorded once, no failed attempt, and
#                 the losses are the uninterrupted run's.
#   pause-hang    `baton run` not running for longer than heartbeat_timeout (5 s), twice in
#                 pretrain: SIGSTOPped for 7 s while its ranks, held by a wrapper, have not
#                 started, and 7 s together with every rank (as a frozen container would be):
#                 it says so and forgives the ranks' silence over it (no failure); a worker
#                 SIGSTOPped in extend afterwards is still a hang, seen within about
#                 heartbeat_timeout: the run completes with that one failure.
#   pause-slow    `baton run` held by a debugger (no SIGCONT: as frozen or starved) for 12 s
#                 while a rank is stopped: only heartbeat_timeout of the gap is forgiven,
#                 so the hang is seen at once afterwards, not 5 s later, also after a
#                 SIGCONT with no stop a few steps before (excusing that turn only);
#                 skipped without gdb.
#   journal-full  journal appends failing from record 6 on (BATON_FAULT_JOURNAL_FULL, as on
#                 a full disk): the workers checkpoint and stop, the run exits 1 saying
#                 why, once; `baton resume` ends on the uninterrupted losses.
#   spec-full     the next attempt's spec cannot be written for a full disk (ENOSPC, by
#                 the BATON_FAULT_SPEC_FULL hook: a link to /dev/full is refused, never
#                 written through): `baton resume` exits
#                 1 at once, naming the stage and the cause, without burning its restarts;
#                 `baton status` says failed with that cause as the failure's; the next
#                 resume (with room) ends on the uninterrupted
#                 losses.
#   lock          a second `baton resume` of a running run is refused (exit 2, nothing
#                 started), also after the run's `lock` file was deleted as "stale" (the
#                 run directory itself is locked too; the refusal says that the lock
#                 file was deleted, and how to find the holder); status still says
#                 running; the first run completes.
#   stop-kill     rank 1 killed -9 while the SIGTERM stop checkpoint is written: exit 75,
#                 saying that the stop checkpoint was not completed, which rank died and
#                 from which checkpoint a resume continues; the resume ends on the
#                 uninterrupted losses.
#   history       a two-stage run stopped in its second stage: every checkpoint of that
#                 stage deleted (the first's left): resume refuses (exit 1) naming the
#                 journaled one, starts no attempt, changes nothing, status says failed;
#                 every one of them damaged instead (shard bytes; an empty manifest): the
#                 worker takes no earlier stage's hand-off, and after two attempts the run
#                 exits 1 naming the damage and 'baton ckpt verify';
#                 its newest checkpoint renamed as a later stage's, nothing else left: baton
#                 run and the worker both judge it by its manifest, and the stage resumes
#                 from it to the losses of a plain resume; the journal lost and
#                 checkpoints/ unreadable (not a directory; chmod 000, as nobody when run
#                 as root, else SKIPPED): exit 2 naming the directory and why.
#   ckpt-unlisted pretrain stopped, then its checkpoints/ unreadable (chmod 000; as nobody
#                 when run as root, else SKIPPED, 77) as `baton resume` starts: the attempt
#                 fails before any worker starts, naming the directory and the error, and
#                 is retried; made readable after the first failure, the stage resumes
#                 from its stop checkpoint and the run completes (status: the failures
#                 retryable); unreadable for good: exit 1 after max_restarts (6), the
#                 checkpoints and logs/ untouched.
#   status-killed a hang (rank 1 SIGSTOPped), then `baton run` killed -9: status's
#                 failure_list has the hang's rank, pid and node, exit_status and signal
#                 null; the stage's wall time counts the killed attempt to its last line
#                 of metrics (not 0, not to now), and after a resume to its last record;
#                 a hang with no rank stopped (one slow) names the silent rank and its pid.
#   stop-signal   SIGTERM from this shell to one rank (not 0) of pretrain, SIGINT to one of
#                 extend: every rank saves a stop checkpoint and exits 75; the failure
#                 (baton run's line, status's failure_list) names that rank, its pid, the
#                 signal and its sender, and the step, not the first rank that exited 75;
#                 the stage restarts from that step.
#   pause-start   `baton run` SIGSTOPped as soon as pretrain's rank 0 has joined, before its
#                 Hello (held back 1 s by a test hook), and held until pretrain's final
#                 checkpoint: its step lines (losses to 6 decimals) are read before its
#                 Metrics; status's losses are still those of an uninterrupted run, exactly.
#   check-supervise.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
case $case in
damaged-ckpts)
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 12 >/dev/null
  stop_run
  n=0
  for c in r1/checkpoints/s00-step*; do
    printf '\x5a\x5a\x5a\x5a' | dd of="$c/rank-00000.bin" bs=1 seek=200 conv=notrunc status=none
    n=$((n + 1))
  done
  ((n >= 2)) || fail "$n checkpoints to damage, expected 2 or more"
  t0=$SECONDS
  set +e; "$baton" resume r1 --quiet >resume.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] || { cat resume.out; fail "resume from damaged checkpoints: exit $rc, not 1"; }
  grep -q "not retried: no usable checkpoint in two attempts in a row" resume.out ||
    { cat resume.out; fail "no clear message"; }
  [[ $(grep -c "restarting stage" resume.out) == 1 ]] || { cat resume.out; fail "not exactly one retry"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
p = s["stages"][0]
assert s["state"] == "failed" and p["state"] == "failed" and p["attempts"] == 3, (s["state"], p)
assert "no usable checkpoint" in s["failure"]["last_cause"], s["failure"]' ||
    fail "status does not say failed after 2 attempts of the resume"
  echo "$case: $n damaged checkpoints: resume failed after 2 attempts in $((SECONDS - t0)) s"
  ;;
strict-runtime)
  cat >topo.yaml <<'YAML'
name: strict-runtime
seed: 7
model: {arch: llama, dim: 64, n_layers: 3, n_heads: 4, n_kv_heads: 2, ffn_dim: 176,
        vocab_size: 272, rope: {theta: 10000}}
cluster: {nodes: 3, gpus_per_node: 4, device: cpu, strict_topology: true}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults:
  seq_len: 64
  global_batch: 8
  micro_batch: 1
  optimizer: {lr: 3e-3, min_lr: 3e-4, warmup_steps: 2, grad_clip: 0.5}
  checkpoint: {every_steps: 2, keep: 2}
  restart: {max_restarts: 3, backoff: 0.2s, heartbeat_timeout: 20s}
stages:
  - name: pretrain
    steps: 12
    parallel: {tp: 2, pp: 3, dp: 2}
YAML
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run topo.yaml --run-dir r1 >run.out 2>&1 &
  bpid=$!
  strike 0 2 4 KILL 8 9 10 11 # node2
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 2 ]] || fail "exit $rc, not 2"
  grep -q "topology of attempt 0 (as planned)" run.out || fail "attempt 0 was not placed as planned"
  grep -q "node2 lost: every rank on it was killed; excluded" run.out || fail "node2 not excluded"
  grep -q "1 node lost, no spare left: data parallelism shrinks from 2 to 1 on 2 nodes," run.out || fail "dp did not shrink"
  grep -q "topology of attempt 1 (REFUSED: strict_topology)" run.out || fail "no runtime refusal"
  grep -q "tp group \[2 3\]: node0 node1  <- spans hosts" run.out || fail "the spread group is not named"
  grep -q "rank 3 landed on node1, the plan put it on node 0" run.out || fail "the misplaced rank is not named"
  grep -q 'attempt 1 failed: topology: .*strict_topology is set (a configuration error: not retried)' run.out ||
    fail "the attempt did not fail on the topology"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
p = s["stages"][0]
assert s["state"] == "failed" and p["attempts"] == 2, (s["state"], p)
assert s["failure"]["last_cause"].startswith("topology: "), s["failure"]' || fail "status after the refusal"
  echo "$case: attempt 1 after the dp shrink refused at run time: $(grep -m1 'spans hosts' run.out)"
  ;;
mfu)
  # one worker, an fp32 stage then a bf16 one; the implied peak of every step is the
  # plan's FLOPs per step over (step time x logged mfu)
  cat >mfu.yaml <<'YAML'
name: mfu
model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 176, vocab_size: 272}
cluster: {nodes: 1, gpus_per_node: 1, device: cpu, gpu: {memory: 2GB, peak_tflops_bf16: 0.05}}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults: {seq_len: 64, global_batch: 4, optimizer: {lr: 1e-3}}
stages:
  - {name: full, steps: 3, precision: fp32}
  - {name: half, steps: 3, precision: bf16}
  - {name: own, steps: 3, precision: fp32}
  - {name: eight, steps: 3, precision: {type: fp8, first_last_bf16: false}} # GEMMs in fp8
YAML
  sed 's/peak_tflops_bf16: 0.05}/peak_tflops_bf16: 0.05, peak_tflops_fp32: 0.01}/' mfu.yaml >mfu32.yaml
  for r in mfu mfu32; do
    "$baton" run $r.yaml --run-dir $r --quiet >$r.out 2>&1 || { cat $r.out; fail "the $r run failed"; }
    "$baton" plan $r.yaml --json >$r.plan.json
  done
  /usr/bin/python3 - <<'PY' || fail "the logged mfu is not over the plan's peak"
import json
for run, want in (("mfu", {"full": 0.025, "half": 0.05, "own": 0.025, "eight": 0.1}),
                  ("mfu32", {"full": 0.01, "half": 0.05, "own": 0.01, "eight": 0.1})):
    flops = {s["name"]: s["flops_per_step"] for s in json.load(open(run + ".plan.json"))["stages"]}
    rows = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    steps = {st: sum(r["stage"] == st for r in rows) for st in want}
    assert steps == {st: 3 for st in want} and len(rows) == 12, (run, "rows per stage", steps)
    for r in rows:
        peak = flops[r["stage"]] / (r["step_time_s"] * r["mfu"]) / 1e12
        assert abs(peak - want[r["stage"]]) <= 1e-6 * want[r["stage"]], (run, r["stage"], peak)
print("the logged mfu divides by the plan's peak: fp32 bf16/2 or peak_tflops_fp32, bf16 its own")
PY
  # baton eval on a stage's final checkpoint reproduces its closing validation (the same
  # windows: the first N of the valid set in file order)
  # (stage full in fp32, half in bf16, eight in fp8: eval takes the checkpoint's precision,
  # an fp8 one's delayed scaling with it)
  for i in 0 1 3; do
    read -r vloss vn < <(/usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open("mfu/valid.jsonl")][int(sys.argv[1])]
print(r["valid_loss"], r["windows"])' $i)
    got=$("$baton" eval mfu/checkpoints/s0$i-step00000003 --data data/fortunes_valid --seq-len 64 \
      --num-seqs "$vn" --json | sed -En 's/.*"loss": ([^,]+),.*/\1/p')
    /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6 * a)' \
      "$vloss" "$got" || fail "stage $i: baton eval gives $got, the run's validation $vloss over $vn windows"
  done
  # (PREFIX.bin names PREFIX, as for baton data)
  "$baton" eval mfu/checkpoints/s00-step00000003 --data data/fortunes_valid.bin --seq-len 64 \
    --num-seqs 1000000 | grep "of data/fortunes_valid (all it holds)" >/dev/null ||
    fail "eval of PREFIX.bin beyond the set's windows"
  echo "$case: fp32 stages' MFU against bf16/2 (or peak_tflops_fp32), bf16's against its peak;" \
    "baton eval $got = the run's valid loss $vloss"
  ;;
lost-journal)
  reference
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 20 >/dev/null
  cp r1/journal journal.mid # pretrain not completed yet (a torn last record is dropped)
  wait_step 1 6 >/dev/null
  stop_run
  [[ -f r1/checkpoints/s00-step00000030/manifest.pb ]] || fail "no final checkpoint of pretrain"
  cp -a r1 r2 && cp -a r1 r3 && cp -a r1 r4
  prints() { (cd "$1/checkpoints" && find . -type f -printf '%p %i %s %T@\n' | sort && md5sum */*); }
  prints r1 >before.txt
  # the journal deleted, emptied: refused before anything starts, nothing changed
  for how in deleted emptied; do
    if [[ $how == deleted ]]; then rm r1/journal; else : >r1/journal; fi
    for cmd in resume run; do
      set +e
      if [[ $cmd == resume ]]; then "$baton" resume r1 --quiet >lost.out 2>&1; else
        "$baton" run "$recipe" --run-dir r1 --quiet >lost.out 2>&1; fi
      rc=$?; set -e
      [[ $rc == 2 ]] || { cat lost.out; fail "$cmd with the journal $how: exit $rc, not 2"; }
      grep -q "journal is missing or empty, but a run already worked in this directory" lost.out ||
        { cat lost.out; fail "$cmd with the journal $how: no clear message"; }
    done
  done
  prints r1 >after.txt
  diff before.txt after.txt || fail "the checkpoints changed"
  [[ ! -e r1/logs/s00-a01.log && ! -e r1/logs/s01-a01.log ]] || fail "an attempt was started"
  # a journal from before pretrain completed (an older backup): pretrain runs again from
  # its own final checkpoint, never from extend's newer ones, trains no step and leaves
  # that checkpoint as it was; the run ends on the uninterrupted losses
  cp journal.mid r3/journal
  n01=$(find r3/checkpoints -maxdepth 1 -name 's01-step*' ! -name '*.partial' | wc -l)
  final=$(stat -c '%i %Y' r3/checkpoints/s00-step00000030/manifest.pb)
  "$baton" resume r3 --quiet >resume3.out 2>&1 || { cat resume3.out; fail "resume with the older journal failed"; }
  log=$(ls -t r3/logs/s00-a*.log | head -1)
  grep -q "started from $work/r3 at step 30" "$log" || { cat "$log"; fail "pretrain did not start from its final checkpoint"; }
  [[ $(grep -c "passing over .*/s01-step.*a stage never starts from a later stage's checkpoint" "$log") == "$n01" ]] ||
    { cat "$log"; fail "extend's $n01 checkpoints were not passed over (once each)"; }
  grep -q "checkpoint s00-step00000030: already there" "$log" || { cat "$log"; fail "no word on the final checkpoint"; }
  ! grep -Eq "^\[0\] step +[0-9]+/30" "$log" || fail "pretrain trained again"
  [[ $(stat -c '%i %Y' r3/checkpoints/s00-step00000030/manifest.pb) == "$final" ]] ||
    fail "pretrain's final checkpoint was written again"
  same_metrics ref r3 || fail "the run did not end on the uninterrupted losses"
  # the same with extend's newest checkpoint unreadable: passing over stops at it, its
  # load fails, and the fallback refuses extend's older one too (not loaded by pretrain)
  cp journal.mid r4/journal
  newest=$(find r4/checkpoints -maxdepth 1 -name 's01-step*' ! -name '*.partial' | sort | tail -1)
  echo garbage >"$newest/manifest.pb"
  "$baton" resume r4 --quiet >resume4.out 2>&1 || { cat resume4.out; fail "resume r4 failed"; }
  log=$(ls -t r4/logs/s00-a*.log | head -1)
  grep -q "started from $work/r4 at step 30" "$log" ||
    { cat "$log"; fail "pretrain started from another stage's checkpoint after an unreadable one"; }
  # every checkpoint gone: extend would start from random weights; it fails instead, naming
  # the checkpoint the journal says pretrain ended with, before any worker starts
  rm -rf r2/checkpoints
  set +e; "$baton" resume r2 --quiet >resume2.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] || { cat resume2.out; fail "resume without checkpoints: exit $rc, not 1"; }
  grep -q "stage \"extend\": the journal records checkpoint checkpoints/s01-step.* as committed, but it is gone" resume2.out ||
    { cat resume2.out; fail "no message naming the missing checkpoint"; }
  [[ ! -e r2/logs/s01-a01.log ]] || fail "an attempt was started without a checkpoint"
  "$baton" status r2 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "failed" and s["stages"][1]["state"] == "failed", s
assert "is gone" in s["failure"]["reason"], s["failure"]' || { "$baton" status r2; fail "status does not say failed"; }
  # no attempt started, so no failure of one to name
  "$baton" status r2 | grep -q '^run r2: failed (stage extend: the journal records checkpoint .*; last failure: none journaled); ' ||
    { "$baton" status r2; fail "status of a stage given up before an attempt"; }
  echo "$case: no journal -> exit 2, nothing changed; an older journal -> pretrain from its own final checkpoint; no checkpoints -> exit 1"
  ;;
pause)
  reference
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 25 >/dev/null
  kill -STOP "$bpid"
  # the workers go on without it: pretrain ends (final checkpoint, closing validation) while
  # baton run is stopped; they exit once PMIx_Finalize gives up on the paused server
  deadline=$((SECONDS + 15))
  while pgrep -f -- "--spec $work/r1/specs/s00-a00.pb" >/dev/null && ((SECONDS < deadline)); do
    sleep 0.1
  done
  gone=$(pgrep -f -- "--spec $work/r1/specs/s00-a00.pb" >/dev/null && echo no || echo yes)
  sleep 2
  kill -CONT "$bpid"
  wait "$bpid" || { cat run.out; fail "baton run exited $?"; }
  bpid=
  [[ ! -e r1/logs/s00-a01.log ]] || { cat run.out; fail "pretrain was restarted"; }
  /usr/bin/python3 - r1/metrics.jsonl r1/valid.jsonl <<'PY' || { cat run.out; fail "metrics or validation lost"; }
import json, sys
steps = [(r["stage"], r["step"]) for r in map(json.loads, open(sys.argv[1]))]
want = [("pretrain", k) for k in range(1, 31)] + [("extend", k) for k in range(1, 17)] + \
       [("fp8", k) for k in range(1, 13)]
assert steps == want, [x for x in want if x not in steps]
valid = [r["stage_index"] for r in map(json.loads, open(sys.argv[2]))]
assert valid == [0, 1, 2], valid
PY
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["failures"] == 0, s' || fail "status counts a failure"
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "the run did not end on the uninterrupted losses"
  echo "$case: baton run paused while pretrain ended (workers gone before it went on: $gone): every step and validation recorded, no failure"
  ;;
pause-hang)
  # pretrain's first attempt's ranks wait for the file go before they start
  cat >gate-worker <<WRAPPER
#!/usr/bin/env bash
if [[ "\$*" == *"/specs/s00-a00.pb"* ]]; then
  : >"$work/gate.\$\$"
  until [[ -e "$work/go" ]]; do sleep 0.05; done
fi
exec "$worker" "\$@"
WRAPPER
  chmod +x gate-worker
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --worker "$PWD/gate-worker" \
    --quiet >run.out 2>&1 &
  bpid=$!
  wait_files "gate.*" 4 60 "its 4 ranks started"
  kill -STOP "$bpid" || { cat run.out; fail "baton run ended before its ranks were let go"; }
  sleep 7
  : >go
  kill -CONT "$bpid" || { cat run.out; fail "baton run ended while stopped (killed by another process?)"; }
  log=$(wait_step 0 8)
  pids=$(worker_pids "$log")
  kill -STOP "$bpid"
  kill -STOP $pids
  sleep 7
  kill -CONT $pids
  kill -CONT "$bpid"
  log=$(wait_step 1 3)
  kill -STOP $(worker_pids "$log" 1)
  t0=$SECONDS
  until grep -q 'hang:' run.out; do
    ((SECONDS - t0 <= 20)) || fail "a worker stopped after the pauses was not seen as hung"
    sleep 0.1
  done
  took=$((SECONDS - t0))
  wait "$bpid" || { cat run.out; fail "baton run exited $?"; }
  bpid=
  # each 7 s stop is said once, as a stop (SIGCONT seen); other slow turns of a busy
  # machine may be said too, as gaps without a SIGCONT
  [[ $(grep -Ec 'was stopped for ([6-9]|[1-9][0-9])\.[0-9] s \(it got SIGCONT' run.out) == 2 ]] ||
    { cat run.out; fail "the two pauses were not said"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
fl = s["failure_list"]
assert s["state"] == "completed" and len(fl) == 1, fl
assert fl[0]["stage"] == "extend" and "hang" in fl[0]["cause"], fl[0]
assert s["stages"][0]["attempts"] == 1, s["stages"][0]' || { cat run.out; fail "status"; }
  echo "$case: two 7 s pauses of baton run forgiven; a worker stopped afterwards seen hung after $took s"
  ;;
pause-slow)
  # a debugger holds baton run for 12 s (ptrace: no SIGCONT comes, as with a frozen
  # container or a starved process) while a rank is stopped: at most heartbeat_timeout
  # (5 s) of that is forgiven, so the hang is seen as soon as baton run runs again
  command -v gdb >/dev/null || { echo "$case: skipped (no gdb)"; exit 77; }
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  log=$(wait_step 0 2)
  # a SIGCONT without a stop (job control's bg, a tool's kill -CONT) excuses at most the
  # turn that reads it, not the debugger's hold below: baton run has read it once it has
  # recorded a step that rank 0 finished after it
  kill -CONT "$bpid"
  step=$(($(sed -En 's/^\[0\] step +([0-9]+)\/.*/\1/p' "$log" | tail -1) + 1))
  deadline=$((SECONDS + 60))
  until grep -q "\"stage_index\": 0, \"attempt\": 0, \"step\": $step," r1/metrics.jsonl 2>/dev/null; do
    ((SECONDS < deadline)) || fail "step $step never recorded"
    sleep 0.05
  done
  kill -STOP $(worker_pids "$log" 1)
  # gdb -batch exits 0 when it cannot attach (its last command, the sleep, succeeds):
  # whether it held baton run is read from what it says
  gdb -nx -batch -p "$bpid" -ex 'info proc' -ex 'shell sleep 12' >gdb.out 2>&1 || true
  if grep -q 'ptrace:' gdb.out || ! grep -q "^process $bpid\$" gdb.out; then
    cat gdb.out
    echo "$case: skipped (gdb cannot attach here)"
    exit 77
  fi
  t0=$SECONDS
  until grep -q 'hang:' run.out; do
    ((SECONDS - t0 <= 20)) || { cat run.out; fail "the stopped rank was not seen as hung"; }
    sleep 0.1
  done
  took=$((SECONDS - t0))
  ((took <= 3)) || { cat run.out; fail "the hang took $took s after the debugger let go: the whole 12 s were forgiven"; }
  # up to 5 s (heartbeat_timeout) forgiven in all: slow turns before the debugger (a
  # busy machine) may have used part of it
  grep -Eq 'was not running for [0-9.]+ s and got no SIGCONT .*: [0-5]\.[0-9] s of the ranks.* silence forgiven.*no more is forgiven' run.out ||
    { cat run.out; fail "the gap without SIGCONT was not said"; }
  ! grep -q 'was stopped for' run.out || { cat run.out; fail "a ptrace stop taken for SIGSTOP"; }
  wait "$bpid" || { cat run.out; fail "baton run exited $?"; }
  bpid=
  echo "$case: 12 s under a debugger, 5 s of it forgiven: the stopped rank seen hung $took s after"
  ;;
journal-full)
  reference
  set +e
  BATON_FAULT_JOURNAL_FULL=6 BATON_FAULT_STEP_SLEEP=0.05 "$baton" run "$recipe" --run-dir r1 \
    --quiet >run.out 2>&1
  rc=$?; set -e
  [[ $rc == 1 ]] || { cat run.out; fail "a journal that cannot be written: exit $rc, not 1"; }
  grep -q "journal: cannot append a record: No space left on device .*stopping the run" run.out ||
    { cat run.out; fail "no clear message"; }
  [[ $(grep -c "cannot append" run.out) == 1 ]] || { cat run.out; fail "said more than once"; }
  grep -q "stopping at step" r1/logs/s00-a00.log || fail "the workers were not stopped"
  [[ ! -e r1/logs/s00-a01.log && ! -e r1/logs/s01-a00.log ]] || fail "the run went on"
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume failed"; }
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "the resumed run did not end on the uninterrupted losses"
  # the first record (the stage's start) not written: no worker is started at all
  set +e
  BATON_FAULT_JOURNAL_FULL=1 "$baton" run "$recipe" --run-dir r2 --quiet >run2.out 2>&1
  rc=$?; set -e
  [[ $rc == 1 ]] || { cat run2.out; fail "the stage's start not journaled: exit $rc, not 1"; }
  [[ ! -s r2/logs/s00-a00.log && ! -d r2/checkpoints ]] || fail "workers ran without a journaled start"
  echo "$case: the journal full at record 6: the run stopped (exit 1), resumed to the same losses;" \
    "at record 1: no worker started"
  ;;
spec-full)
  reference
  BATON_FAULT_STEP_SLEEP=0.05 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 1 3 >/dev/null
  stop_run
  set +e
  BATON_FAULT_SPEC_FULL=s01-a01.pb "$baton" resume r1 --quiet >resume.out 2>&1
  rc=$?; set -e
  [[ $rc == 1 ]] || { cat resume.out; fail "a spec that cannot be written for a full disk: exit $rc, not 1"; }
  grep -q 'stage "extend": attempt 1 cannot start: .*specs/s01-a01.pb: cannot write: No space left on device' resume.out ||
    { cat resume.out; fail "no clear message naming the stage"; }
  grep -q "stage \"extend\": the disk is full: not retried, .*make room, then 'baton resume " resume.out ||
    { cat resume.out; fail "no word on what to do"; }
  ! grep -q "restarting\|(null)" resume.out || { cat resume.out; fail "restarts burnt on a full disk"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
f = s["failure_list"]
assert s["state"] == "failed" and len(f) == 1, s
assert f[0]["stage"] == "extend" and "No space left on device" in f[0]["cause"], f
print("status:", s["state"], "-", f[0]["cause"])' || fail "status does not name the full disk"
  "$baton" resume r1 --quiet >resume2.out 2>&1 || { cat resume2.out; fail "resume with room failed"; }
  # the attempt that could not start kept its number: the resume's is the next one, and
  # status counts the three of them, one restart after its failure
  [[ -e r1/logs/s01-a02.log && ! -e r1/logs/s01-a01.log ]] || { ls r1/logs; fail "the resume reused attempt 1"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
x = [t for t in s["stages"] if t["name"] == "extend"][0]
f, r = s["failure_list"], s["recovery_list"]
assert (x["attempts"], x["restarts"]) == (3, 1), x
assert [e["attempt"] for e in f] == [1] and all(e["attempt"] == 2 for e in r), (f, r)' ||
    { "$baton" status r1; fail "status: the attempts of extend do not add up"; }
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "the resumed run did not end on the uninterrupted losses"
  echo "$case: $(grep -o 'stage "extend": attempt 1 cannot start.*' resume.out | cut -c1-60)...; exit 1 at once; resumed with room"
  ;;
spec-oom)
  # a copy of the run directory's path for the resumed attempt's spec fails (out of
  # memory; LD_PRELOAD'ed strdup, BATON_TEST_FAIL_STRDUP_LIB): the first, run_dir, then
  # the second, init_checkpoint, which would start the stage again from step 0: each
  # attempt fails before any worker starts, and the next resumes from the stop checkpoint
  lib=${BATON_TEST_FAIL_STRDUP_LIB:?the test library}
  sets=(--set stages.1.steps=2 --set stages.fp8.steps=2)
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" run "$recipe" --run-dir r1 "${sets[@]}" --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 6 >/dev/null
  stop_run
  step=$(ls r1/checkpoints | sed -En 's/^s00-step0*([0-9]+)$/\1/p' | sort -n | tail -1)
  for nth in 1 2; do
    cp -a r1 "r$nth-oom"
    BATON_TEST_STRDUP_FAIL="$(pwd -P)/r$nth-oom" BATON_TEST_STRDUP_NTH=$nth LD_PRELOAD=$lib \
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
      "$baton" resume "r$nth-oom" --quiet >"resume$nth.out" 2>&1 || { cat "resume$nth.out"; fail "copy $nth failed: resume exit $?"; }
    grep -q 'stage "pretrain": attempt 1 cannot start: out of memory' "resume$nth.out" ||
      { cat "resume$nth.out"; fail "copy $nth failed: not said as the attempt's failure"; }
    [[ ! -e r$nth-oom/logs/s00-a01.log ]] || fail "copy $nth failed: attempt 1 started a worker"
    grep -q "started from $work/r$nth-oom at step $step " "r$nth-oom/logs/s00-a02.log" ||
      { head -5 "r$nth-oom/logs/s00-a02.log"; fail "copy $nth failed: attempt 2 did not resume at step $step"; }
  done
  echo "$case: a failed copy for the spec is a failed attempt, retried; the stage resumed at step $step"
  ;;
lock)
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" run "$recipe" --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 3 >/dev/null
  second() { # WHY: a second baton resume must be refused, starting nothing
    set +e; "$baton" resume r1 --quiet >second.out 2>&1; rc=$?; set -e
    [[ $rc == 2 ]] || { cat second.out; fail "$1: a second baton resume exited $rc, not 2"; }
    grep -q "r1: another baton run is working in this run directory${2:-}" second.out ||
      { cat second.out; fail "$1: no clear message"; }
    [[ ! -e r1/logs/s00-a01.log && ! -e r1/specs/s00-a01.pb ]] || fail "$1: the second one started an attempt"
  }
  second "the lock file in place"
  rm r1/lock
  second "the lock file deleted" " (its lock file was deleted, and with it the record of the process that holds the run, .*find it with 'fuser -v $work/r1'"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["state"] == "running"' || fail "status does not say running without the lock file"
  wait "$bpid" || { cat run.out; fail "the first baton run exited $?"; }
  bpid=
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["failures"] == 0, s' || fail "the first run did not complete cleanly"
  echo "$case: a second resume refused with and without the lock file; the first completed"
  ;;
stop-kill)
  reference
  BATON_FAULT_SAVE_SLEEP=1.5 BATON_FAULT_STEP_SLEEP=0.05 "$baton" run "$recipe" --run-dir r1 \
    --quiet >run.out 2>&1 &
  bpid=$!
  log=$(wait_step 0 7)
  kill -TERM "$bpid"
  deadline=$((SECONDS + 30))
  until compgen -G "r1/checkpoints/s00-step*.partial" >/dev/null; do
    ((SECONDS < deadline)) || fail "no checkpoint save after the stop"
    sleep 0.02
  done
  kill -9 $(worker_pids "$log" 1)
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 75 ]] || { cat run.out; fail "exit $rc, not 75"; }
  grep -Eq "the stop checkpoint at step [0-9]+ was not completed \(rank 1 \(node node0, pid [0-9]+\) was killed by signal SIGKILL\); a resume continues from checkpoints/s00-step000000(05|10) \(step (5|10)\)" run.out ||
    { cat run.out; fail "no word on the stop checkpoint"; }
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume failed"; }
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "the resumed run did not end on the uninterrupted losses"
  echo "$case: $(grep -o 'the stop checkpoint.*' run.out)"
  ;;
history)
  # a two-stage recipe on one worker (a second a run): stopped in stage second
  cat >h.yaml <<'YAML'
name: hist
model: {arch: llama, dim: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, ffn_dim: 64, vocab_size: 272}
cluster: {nodes: 1, gpus_per_node: 1, device: cpu}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults:
  seq_len: 32
  global_batch: 2
  optimizer: {lr: 1e-3}
  checkpoint: {every_steps: 2, keep: 5}
stages:
  - {name: first, steps: 6}
  - {name: second, steps: 12}
YAML
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" run h.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 1 5 >/dev/null
  stop_run
  ck() { (cd "$1/checkpoints" && find . -printf '%p %i %s %T@\n' | sort); }
  newest=$(cd r1/checkpoints && ls -d s01-step* | sort | tail -1) # the journaled stop checkpoint
  [[ -n $newest && -d r1/checkpoints/s00-step00000006 ]] || fail "not stopped in stage second"
  for r in r2 r3 r4 r5 r6; do cp -a r1 $r; done
  # 1. every checkpoint of stage second gone, stage first's left: refused (exit 1, as when
  # every checkpoint is gone) naming the journaled one, not trained again from the hand-off
  rm -rf r2/checkpoints/s01-step*
  ck r2 >before.txt
  set +e; "$baton" resume r2 --quiet >resume2.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] || { cat resume2.out; fail "stage second's checkpoints gone: exit $rc, not 1"; }
  grep -q "stage \"second\": the journal records checkpoint checkpoints/$newest (step [0-9]*) as the stage's newest committed, but it is gone .* only another stage's is left (checkpoints/s00-step00000006)" resume2.out ||
    { cat resume2.out; fail "no clear message naming $newest"; }
  [[ ! -e r2/logs/s01-a01.log ]] || fail "an attempt was started from the hand-off"
  ck r2 | diff before.txt - || fail "the checkpoints changed"
  "$baton" status r2 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "failed" and s["stages"][1]["state"] == "failed", s
assert "is gone" in s["failure"]["reason"], s["failure"]' || { "$baton" status r2; fail "status does not say failed"; }
  # no attempt started, so no failure of one to name
  "$baton" status r2 | grep -q '^run r2: failed (stage second: the journal records checkpoint .*; last failure: none journaled); ' ||
    { "$baton" status r2; fail "status of a stage given up before an attempt"; }
  # 1b. every checkpoint of stage second damaged instead (a shard's bytes overwritten, the
  # newest's manifest emptied), stage first's intact: the worker refuses them and does not
  # take the hand-off either, which would train the stage again from step 0: exit 1 after
  # two attempts, naming the damage and 'baton ckpt verify'
  for c in r6/checkpoints/s01-step*; do
    printf '\x5a\x5a\x5a\x5a' | dd of="$c/rank-00000.bin" bs=1 seek=200 conv=notrunc status=none
  done
  : >r6/checkpoints/"$newest"/manifest.pb
  set +e; "$baton" resume r6 --quiet >resume6.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] || { cat resume6.out; fail "stage second's checkpoints damaged: exit $rc, not 1"; }
  grep -q "no usable checkpoint of this stage: every one it saved was refused .*checkpoints/s00-step00000006, an earlier stage's, would train it again from step 0" resume6.out ||
    { cat resume6.out; fail "no clear message on the damaged checkpoints of stage second"; }
  grep -q "not retried: .*'baton ckpt verify' says where" resume6.out || { cat resume6.out; fail "no word on ckpt verify"; }
  grep -q "$newest/manifest.pb: not a checkpoint manifest (no model in it: empty or damaged)" r6/logs/s01-a01.log ||
    { cat r6/logs/s01-a01.log; fail "the empty manifest was not called so"; }
  ! grep -q "started from\|^\[0\] step " r6/logs/s01-a0[12].log || fail "stage second started from the hand-off"
  # 2. the stage's newest checkpoint under a later stage's name, nothing else left: baton run
  # and the worker both judge it by its manifest (stage second's), so the stage resumes from
  # it (by the name, baton run called it gone while the worker would have taken it)
  step=$((10#${newest#s01-step}))
  rm -rf r3/checkpoints/s00-step* && mv r3/checkpoints/"$newest" r3/checkpoints/s02-step99999999
  find r3/checkpoints -maxdepth 1 -name 's01-step*' -exec rm -rf {} +
  "$baton" resume r3 --quiet >resume3.out 2>&1 || { cat resume3.out; fail "resume of the renamed checkpoint failed"; }
  grep -q "started from $work/r3 at step $step " r3/logs/s01-a01.log ||
    { cat r3/logs/s01-a01.log; fail "stage second did not resume from its renamed checkpoint"; }
  "$baton" resume r1 --quiet >resume1.out 2>&1 || { cat resume1.out; fail "resume r1 failed"; }
  stage_losses r1 >r1.losses && stage_losses r3 >r3.losses
  diff r1.losses r3.losses || fail "the renamed checkpoint's resume ended elsewhere"
  # 3. the journal lost and checkpoints/ unreadable: no proof that no run worked here, so
  # refused (exit 2) naming the directory and why, nothing changed
  unreadable() { # RUN_DIR WHY [as]
    set +e; ${3:-} "$baton" resume "$1" --quiet >lost.out 2>&1; rc=$?; set -e
    [[ $rc == 2 ]] || { cat lost.out; fail "$2: exit $rc, not 2"; }
    grep -q "journal is missing or empty, and whether a run already worked in this directory cannot be told: $work/$1/checkpoints: cannot list checkpoints: $2; nothing was changed" lost.out ||
      { cat lost.out; fail "$2: no clear message"; }
    [[ ! -e $1/journal && ! -e $1/logs/s01-a01.log ]] || fail "$2: the run went on"
  }
  # (the attempts' specs gone too: checkpoints/ is all that could tell a run worked here)
  rm r4/journal r4/specs/*.pb r5/journal r5/specs/*.pb
  mv r4/checkpoints r4/ck && : >r4/checkpoints
  unreadable r4 "Not a directory"
  chmod 000 r5/checkpoints
  if [[ $(id -u) != 0 ]]; then
    unreadable r5 "Permission denied"
    eacces=checked
  elif command -v setpriv >/dev/null && chmod 711 "$work" &&
    setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$baton" 2>/dev/null; then
    chown -R nobody:nogroup r5 # as root, which ignores permissions: as nobody
    # (with a TMPDIR of its own: baton refuses one it cannot write before the run directory)
    mkdir tmp-nobody && chown nobody:nogroup tmp-nobody
    unreadable r5 "Permission denied" \
      "setpriv --reuid=nobody --regid=nogroup --clear-groups env TMPDIR=$work/tmp-nobody"
    eacces="checked as nobody"
  else
    eacces="SKIPPED: running as root, which ignores permissions, and baton cannot run as nobody here"
    echo "$case: chmod 000 checkpoints/ $eacces"
  fi
  chmod 700 r5/checkpoints
  echo "$case: second's checkpoints gone -> exit 1 naming $newest; renamed -> resumed from step $step by" \
    "manifest; checkpoints/ unreadable -> exit 2 (ENOTDIR; EACCES $eacces)"
  ;;
status-killed)
  # two ranks (dp 2) of one stage: rank 1 SIGSTOPped in attempt 0 (a hang), then `baton run`
  # killed -9 in attempt 1, which leaves that attempt without an end in the journal
  cat >k.yaml <<'YAML'
name: killed
model: {arch: llama, dim: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, ffn_dim: 64, vocab_size: 272}
cluster: {nodes: 1, gpus_per_node: 2, device: cpu}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults:
  seq_len: 32
  global_batch: 2
  parallel: {dp: 2}
  optimizer: {lr: 1e-3}
  checkpoint: {every_steps: 2, keep: 3}
  restart: {max_restarts: 2, backoff: 0.1s, heartbeat_timeout: 2s}
stages:
  - {name: only, steps: 60}
YAML
  t0=$(date +%s.%N)
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" run k.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  strike 0 3 3 STOP 1
  stopped_pid=$struck_pids
  log=$(wait_step 0 25)
  [[ $log == r1/logs/s00-a01.log ]] || fail "the hang did not end attempt 0"
  kill -9 "$bpid"
  wait "$bpid" 2>/dev/null || true
  t1=$(date +%s.%N)
  bpid=
  workers_gone r1 30
  # the wall time: the ended attempt 0, and attempt 1 to its last line of metrics (not 0, not
  # up to now); after a resume, attempt 1 still counts up to its last journaled record
  check_status() { # WHEN
    "$baton" status r1 --json >status.json
    /usr/bin/python3 - status.json r1/metrics.jsonl "$stopped_pid" "$t0" "$t1" "$1" <<'PY' || { "$baton" status r1; fail "status $1"; }
import json, sys
s = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2])]
pid, t0, t1, when = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
fl = s["failure_list"]
assert len(fl) == 1, fl
h = fl[0]  # the hang: the rank it was judged on (the stopped one), no exit status of its own
assert h["cause"].startswith("hang: rank 1 (pid %d) is stopped" % pid), h
assert h["rank"] == 1 and h["pid"] == pid and h["node"] == "node0", h
assert h["exit_status"] is None and h["signal"] is None, h
spans = {}
for r in lines:
    a = spans.setdefault(r["attempt"], [r["time"], r["time"]])
    a[0], a[1] = min(a[0], r["time"]), max(a[1], r["time"])
spans[0][1] = h["time"]  # attempt 0 lasted at least until its failure was journaled
least = sum(b - a for a, b in spans.values())
wall = s["stages"][0]["wall_s"]
# killed: attempt 1 to its last line of metrics, within the run's life; resumed: to its last
# journaled record, which may precede the checkpoint the resume started from when baton run
# was killed between its commit and its record (one save: two steps)
most = t1 - t0 if when == "killed" else 1e9
slack = 0 if when == "killed" else 0.5
print("%s: wall %.2f s, the attempts' metrics span %.2f s, at most %.2f" % (when, wall, least, most))
assert 1 in spans and least - slack <= wall <= most, (wall, least, most, spans)
PY
  }
  check_status killed
  "$baton" status r1 | grep "failure: stage only attempt 0 at step [0-9]*: hang: rank 1 (pid $stopped_pid) is stopped" >/dev/null ||
    { "$baton" status r1; fail "the text does not show the hang's rank"; }
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume failed"; }
  check_status resumed
  # a hang with no rank stopped: rank 1 slow (10 s a step); the rank judged on is named
  printf '#!/bin/bash\n[[ $PMIX_RANK == 1 ]] && export BATON_FAULT_STEP_SLEEP=10\nexec %q "$@"\n' \
    "$worker" >slow.sh && chmod +x slow.sh
  set +e; "$baton" run k.yaml --run-dir r2 --quiet --worker "$PWD/slow.sh" \
    --set defaults.restart.max_restarts=0 >run2.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] || { cat run2.out; fail "the slow rank's run: exit $rc, not 1"; }
  "$baton" status r2 --json | /usr/bin/python3 -c '
import json, sys
h = json.load(sys.stdin)["failure_list"][0]
# (the one silent longest: rank 0 may be, waiting on rank 1 where it sends nothing)
assert h["rank"] in (0, 1) and h["node"] == "node0" and h["pid"] > 0, h
assert h["cause"].startswith("hang: rank %d (pid %d) sent no heartbeat" % (h["rank"], h["pid"])), h
assert h["exit_status"] is None and h["signal"] is None, h' || { "$baton" status r2; fail "the silent rank is not in status"; }
  echo "$case: the hang journaled as rank 1 (pid $stopped_pid), exit status null; wall time after kill -9 counted"
  ;;
ckpt-unlisted)
  # pretrain stopped after step 12 (its stop checkpoint the newest), then checkpoints/
  # unreadable (chmod 000; as nobody when run as root, which ignores permissions)
  sets=(--set stages.1.steps=2 --set stages.fp8.steps=2)
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 "${sets[@]}" --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 12 >/dev/null
  stop_run
  newest=$(ls r1/checkpoints | grep -E '^s00-step[0-9]+$' | tail -1)
  step=$((10#${newest#s00-step}))
  as=()
  if [[ $(id -u) == 0 ]]; then
    command -v setpriv >/dev/null && chmod 711 "$work" &&
      setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$baton" 2>/dev/null || {
      echo "SKIPPED: running as root, which ignores permissions, and baton cannot run as nobody here"
      exit 77
    }
    chown -R nobody:nogroup r1 && mkdir tmp-nobody && chown nobody:nogroup tmp-nobody
    as=(setpriv --reuid=nobody --regid=nogroup --clear-groups env "TMPDIR=$work/tmp-nobody")
  fi
  cp -a r1 r2 # the same stopped run, for the cause that stays
  digest() { (cd "$1/checkpoints" && find . -type f -print0 | sort -z | xargs -0 md5sum | md5sum); }
  before=$(digest r1) logs=$(ls r1/logs | wc -l)
  cause="cannot start: $work/RUN/checkpoints: cannot list checkpoints: Permission denied; which checkpoint the stage starts from cannot be told, so no worker started"
  # 1. a cause that passes (the permission fixed after the first failure): the attempt is
  # retried, and the stage resumes from its stop checkpoint, not from step 0
  chmod 000 r1/checkpoints
  "${as[@]}" "$baton" resume r1 --quiet >resume1.out 2>&1 &
  bpid=$!
  deadline=$((SECONDS + 60))
  until grep -q 'restarting stage "pretrain"' resume1.out 2>/dev/null; do
    ((SECONDS < deadline)) && kill -0 "$bpid" 2>/dev/null || { cat resume1.out; fail "no retry of the unlistable checkpoints/"; }
    sleep 0.05
  done
  chmod 700 r1/checkpoints
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 0 ]] || { cat resume1.out; fail "resume after the permission was fixed: exit $rc, not 0"; }
  grep -qF "stage \"pretrain\": attempt " resume1.out && grep -qF "${cause//RUN/r1}" resume1.out ||
    { cat resume1.out; fail "no clear message naming checkpoints/ and the error"; }
  # every attempt of the resume (a00 was the stopped run's) started from the stop checkpoint
  resumed=(r1/logs/s00-a0[1-9].log)
  for l in "${resumed[@]}"; do
    grep -q "started from $work/r1 at step $step " "$l" ||
      { ls r1/logs; fail "$l: pretrain did not resume from its stop checkpoint at step $step"; }
  done
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
fl = [f for f in s["failure_list"] if "cannot list checkpoints" in f["cause"]]
assert s["state"] == "completed" and fl and all(f["retryable"] for f in fl), (s["state"], s["failure_list"])
# each attempt its own number, the unlistable ones counted: attempts = failures + 2 (the
# stopped one, the one that completed), a restart after each failure
p = s["stages"][0]
n = [f["attempt"] for f in fl]
assert n == list(range(1, len(n) + 1)), n
assert (p["attempts"], p["restarts"]) == (len(n) + 2, len(n)), (p, n)
assert all(r["attempt"] == len(n) + 1 for r in s["recovery_list"]), s["recovery_list"]' ||
    { "$baton" status r1; fail "status: not completed, the failure not journaled as retried, or attempts reused"; }
  # 2. a cause that stays: every restart fails alike (no worker starts), the run ends as
  # restarts exhausted do (exit 1, max_restarts 6), the checkpoints untouched
  chmod 000 r2/checkpoints
  set +e; "${as[@]}" "$baton" resume r2 --quiet >resume2.out 2>&1; rc=$?; set -e
  chmod 700 r2/checkpoints
  [[ $rc == 1 ]] || { cat resume2.out; fail "checkpoints/ unreadable for good: exit $rc, not 1"; }
  [[ $(grep -c 'restarting stage "pretrain"' resume2.out) == 6 ]] && grep -q "giving up after 6 restarts" resume2.out &&
    grep -qF "${cause//RUN/r2}" resume2.out || { cat resume2.out; fail "not 6 restarts then giving up, naming the cause"; }
  [[ $(digest r2) == "$before" && $(ls r2/logs | wc -l) == "$logs" ]] ||
    { ls -la r2/checkpoints r2/logs; fail "the checkpoints changed, or a worker started"; }
  echo "$case: checkpoints/ unreadable: retried, resumed from step $step once readable; unreadable for good: exit 1 after 6 restarts, nothing changed${as[*]:+ (as nobody)}"
  ;;
stop-signal)
  # a rank of pretrain other than 0 gets SIGTERM from this shell, one of extend SIGINT
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 >run.out 2>&1 &
  bpid=$!
  r=$((1 + RANDOM % 3)) q=$((1 + RANDOM % 3))
  strike 0 6 12 TERM "$r"
  tpid=$struck_pids
  strike 1 3 8 INT "$q"
  ipid=$struck_pids
  wait "$bpid" || fail "baton run exited $?"
  bpid=
  ! grep -q "exited with status 75" run.out || fail "a rank that exited 75 is blamed"
  # stopped_at STAGE RANK PID SIG: the step the failure line says every rank stopped at
  stopped_at() {
    sed -En "s/^baton run: stage \"$1\" attempt 0 failed: rank $2 \(node node[01], pid $3\) received SIG$4 \(from pid $$, not baton run\): every rank saved a stop checkpoint at step ([0-9]+) and exited 75\$/\1/p" run.out
  }
  t=$(stopped_at pretrain "$r" "$tpid" TERM) i=$(stopped_at extend "$q" "$ipid" INT)
  [[ -n $t ]] || fail "pretrain's failure does not name rank $r (pid $tpid) and its SIGTERM"
  [[ -n $i ]] || fail "extend's failure does not name rank $q (pid $ipid) and its SIGINT"
  grep -q "^\[pretrain\] started from .* at step $t " run.out || fail "pretrain not restarted from step $t"
  grep -q "^\[extend\] started from .* at step $i " run.out || fail "extend not restarted from step $i"
  grep -q "^\[$r\] rank $r: stopping at step $t (SIGTERM from pid $$)" r1/logs/s00-a00.log ||
    fail "rank $r does not say in its log why it stopped"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
fl = [(f["stage"], f["rank"], f["pid"], f["exit_status"], f["step"], f["cause"]) for f in s["failure_list"]]
assert s["state"] == "completed" and len(fl) == 2, (s["state"], fl)
for f, (stage, rank, pid, sig, step) in zip(fl, [("pretrain", '"$r, $tpid"', "SIGTERM", '"$t"'),
                                           ("extend", '"$q, $ipid"', "SIGINT", '"$i"')]):
    assert f[:5] == (stage, rank, pid, 75, step) and " received %s " % sig in f[5], f' ||
    { "$baton" status r1; fail "status does not name the signalled ranks"; }
  echo "$case: SIGTERM to rank $r (step $t), SIGINT to rank $q (step $i): named, restarted from their stop checkpoints"
  ;;
pause-start)
  # `baton run` SIGSTOPped as pretrain's rank 0 has joined (its metrics log made), before it
  # says Hello (held 1 s: BATON_FAULT_HELLO_DELAY), until pretrain's final checkpoint: every
  # step line (losses to 6 decimals) is read before any Metrics
  sets=(--set stages.pretrain.steps=10 --set stages.extend.steps=2 --set stages.fp8.steps=2)
  "$baton" run "$recipe" --run-dir ref "${sets[@]}" --quiet >ref.out 2>&1 || fail "the reference run failed"
  stage_losses ref >ref.losses
  BATON_FAULT_HELLO_DELAY=1 "$baton" run "$recipe" --run-dir r1 "${sets[@]}" >run.out 2>&1 &
  bpid=$!
  wait_files r1/logs/s00-a00.metrics 1 60 "pretrain's rank 0 joined"
  kill -STOP "$bpid"
  deadline=$((SECONDS + 60))
  until [[ -e r1/checkpoints/s00-step00000010/manifest.pb ]] || ((SECONDS > deadline)); do
    sleep 0.05
  done
  sleep 1 # its last lines flushed
  kill -CONT "$bpid"
  wait "$bpid" || fail "baton run exited $?"
  bpid=
  stage_losses r1 >r1.losses
  diff ref.losses r1.losses || fail "status's losses are not the uninterrupted run's"
  echo "$case: baton run paused before pretrain's first Metrics: status's losses exact"
  ;;
*) fail "unknown case" ;;
esac
