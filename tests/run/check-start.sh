#!/usr/bin/env bash
# What `baton run` says and does as it starts, with the helpers of run-common.sh. CASE:
#   no-fit   a recipe whose stages `baton plan` says do not fit in cluster.gpu.memory (exit
#            1): baton run warns once per stage still to train, naming the stage and the
#            plan's figures, and runs it all the same (the CPU engine only declares the
#            memory); a stage that fits, or one completed, gets no word.
#   signal-echo  SIGINT sent twice by one process 0.3 s apart while a stage trains slowly (as
#            `timeout -s INT` sends it, to baton run and then to its process group): one
#            stop, said once; the stop checkpoint completes (exit 75) and the resume goes on
#            from it. A third SIGINT from that process, or one from another, still kills the
#            workers at once.
#   recipe-pipe  a recipe from a pipe (`cat r.yaml | baton run /dev/stdin`), from `<(...)` and
#            from a FIFO is read once: RUN_DIR/recipe.yaml holds its bytes (not an empty
#            second read), so `baton status` names the stages and a stopped run resumes;
#            another recipe from a pipe on that directory is refused naming what differs,
#            and says to write the new text into the kept copy (a file's: to copy it);
#            `baton submit --dry-run` from a pipe keeps the bytes too; a FIFO with no writer
#            yet ends on SIGTERM or SIGINT (exit 124 from timeout, not a hang only SIGKILL
#            ends), nothing made; on SIGINT too where baton run was started with it ignored;
#            a SIGHUP where it was started with that ignored (nohup) is no stop: the
#            recipe written after it is read and run.
#   nohup    baton run started with SIGHUP ignored (nohup) and sent one while it trains:
#            no stop, the run completes (exit 0); started without, the SIGHUP stops it
#            (exit 75).
#   check-start.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"

# fifo_waiting PID: until PID waits in a FIFO's open for a writer (20 s at most)
fifo_waiting() {
  local i
  for ((i = 0; i < 1000; i++)); do
    grep -Eq 'fifo|partner' "/proc/$1/wchan" 2>/dev/null && return 0
    kill -0 "$1" 2>/dev/null || fail "pid $1 ended before it waited for the FIFO"
    sleep 0.02
  done
  fail "pid $1 never waited in the FIFO's open"
}
# ended_within SECONDS: waits for $bpid, killed (SIGKILL) after SECONDS; its status in rc
ended_within() {
  (
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep "$1" &
    s=$!
    wait "$s" && kill -KILL "$bpid" 2>/dev/null
  ) >/dev/null 2>&1 &
  local killer=$!
  set +e; wait "$bpid"; rc=$?; set -e
  kill "$killer" 2>/dev/null || true
  wait "$killer" 2>/dev/null || true
  bpid=
}

case $case in
no-fit)
  # a: 2.99 MB on its one rank, b (micro_batch 2): 3.92 MB; 2 MB declared
  one_rank_recipe fit "" '{name: a, steps: 2}' '{name: b, steps: 2, micro_batch: 2}' |
    sed 's/device: cpu}/device: cpu, gpu: {memory: 2MB}}/' >fit.yaml
  set +e
  "$baton" plan fit.yaml >plan.out
  rc=$?
  set -e
  [[ $rc == 1 ]] || fail "baton plan exited $rc, not 1 (does not fit)"
  for want in "2.99 MB: DOES NOT FIT (2.99 MB of 2.00 MB)" "3.92 MB: DOES NOT FIT (3.92 MB of 2.00 MB)"; do
    grep -qF "$want" plan.out || { cat plan.out; fail "the plan does not say '$want'"; }
  done
  "$baton" run fit.yaml --run-dir r1 --quiet >run.out 2>&1 || fail "baton run of fit.yaml failed"
  for s in 'a" does not fit in memory: its heaviest rank \(pipeline stage 0\) needs 2.99 MB, cluster.gpu.memory is 2.00 MB' \
    'b" does not fit in memory: its heaviest rank \(pipeline stage 0\) needs 3.92 MB, cluster.gpu.memory is 2.00 MB'; do
    [[ $(grep -Ec "^baton run: warning: stage \"$s \('baton plan' says what fits\); starting it all the same \(on the CPU engine that memory is only declared\)$" run.out) == 1 ]] ||
      fail "baton run does not warn once: stage \"$s"
  done
  grep -q "completed; 0 failures" run.out || fail "the run did not complete"
  # b given more steps: a completed, so only b is said
  sed -i 's/{name: b, steps: 2,/{name: b, steps: 3,/' r1/recipe.yaml
  "$baton" resume r1 --quiet >run.out 2>&1 || fail "resume failed"
  [[ $(grep -c "does not fit" run.out) == 1 ]] && grep -q 'stage "b" does not fit' run.out ||
    fail "resume does not warn of b alone"
  # 4 MB: both fit, nothing said
  sed -i 's/memory: 2MB/memory: 4MB/' fit.yaml
  "$baton" run fit.yaml --run-dir r2 --quiet >run.out 2>&1 || fail "baton run of the 4 MB recipe failed"
  ! grep -q "does not fit" run.out || fail "a warning for stages that fit"
  ;;
signal-echo)
  one_rank_recipe echo "checkpoint: {every_steps: 100}" '{name: a, steps: 40}' >echo.yaml
  # start_stop: baton run of echo.yaml at step 2, its worker stopped (SIGSTOP: a long step,
  # which the stop waits for), sent SIGINT; the worker goes on 0.5 s later
  start_stop() {
    rm -rf r1
    BATON_FAULT_STEP_SLEEP=0.1 "$baton" run echo.yaml --run-dir r1 --quiet >run.out 2>&1 &
    bpid=$!
    wpids=$(worker_pids "$(wait_step 0 2)")
    kill -STOP $wpids
    kill -INT "$bpid"
    (sleep 0.5; kill -CONT $wpids 2>/dev/null || true) &
  }
  ended() { # WANT: baton run's exit status
    set +e; wait "$bpid"; rc=$?; set -e
    bpid=
    [[ $rc == "$1" ]] || fail "baton run exited $rc, not $1"
  }
  # said PATTERN: wait (10 s at most) until baton run has said PATTERN: a signal sent
  # before it has read the one before could merge with it
  said() {
    local i
    for ((i = 0; i < 500; i++)); do
      grep -q "$1" run.out && return 0
      sleep 0.02
    done
    fail "baton run never said '$1'"
  }
  start_stop
  said "got SIGINT: asking the workers"
  kill -INT "$bpid"
  ended 75
  grep -q "got SIGINT again from the same process (pid $$), baton run's parent, within 1.0 s (as \`timeout\` does" run.out ||
    fail "the echoed SIGINT is not said"
  ! grep -q "killing the workers now\|was not completed" run.out || fail "the echo killed the workers"
  step=$(ls -d r1/checkpoints/s00-step* | tail -1)
  step=$((10#${step##*step}))
  ((step >= 2)) || fail "no stop checkpoint (newest at step $step)"
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume failed"; }
  grep -q "^\[0\] started from .* at step $step " r1/logs/s00-a01.log ||
    { grep "started from" r1/logs/s00-a01.log; fail "the resume did not go on from step $step"; }
  # a third from the same process kills; so does a second from another process
  start_stop
  said "got SIGINT: asking the workers"
  kill -INT "$bpid"
  said "got SIGINT again from the same process"
  kill -INT "$bpid"
  ended 75
  grep -q "got SIGINT after SIGINT: killing the workers now" run.out || fail "a third SIGINT did not kill"
  start_stop
  said "got SIGINT: asking the workers"
  /bin/kill -INT "$bpid"
  ended 75
  grep -q "got SIGINT after SIGINT: killing the workers now" run.out ||
    fail "a SIGINT from another process did not kill"
  # two from one process that is not baton run's parent (a second shell's kill): no echo.
  # The worker stopped meanwhile (SIGSTOP), so that the stop cannot complete before the
  # second
  rm -rf r1
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" run echo.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wpids=$(worker_pids "$(wait_step 0 2)")
  kill -STOP $wpids
  bash -c 'kill -INT '"$bpid"'; for ((i = 0; i < 500; i++)); do
    grep -q "got SIGINT: asking" run.out && break; sleep 0.02; done; kill -INT '"$bpid"
  kill -CONT $wpids 2>/dev/null || true
  ended 75
  grep -q "got SIGINT after SIGINT: killing the workers now" run.out ||
    fail "a second SIGINT from a process not baton run's parent did not kill"
  ;;
nohup)
  one_rank_recipe hup "checkpoint: {every_steps: 100}" '{name: a, steps: 20}' >hup.yaml
  # started with SIGHUP ignored (nohup, a shell's trap '' HUP): a hangup (an ssh connection
  # lost) is no stop, the run completes
  (trap '' HUP; BATON_FAULT_STEP_SLEEP=0.05 exec "$baton" run hup.yaml --run-dir r1 --quiet >run.out 2>&1) &
  bpid=$!
  wait_step 0 2 >/dev/null
  kill -HUP "$bpid"
  ended_within 120
  [[ $rc == 0 ]] || fail "baton run started with SIGHUP ignored, sent one, exited $rc, not 0"
  ! grep -q "got SIGHUP" run.out || fail "a SIGHUP ignored from the start was taken as a stop"
  # not ignored: a SIGHUP is a stop (exit 75)
  rm -rf r1
  BATON_FAULT_STEP_SLEEP=0.05 "$baton" run hup.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 2 >/dev/null
  kill -HUP "$bpid"
  ended_within 120
  [[ $rc == 75 ]] || fail "baton run sent SIGHUP exited $rc, not 75"
  grep -q "got SIGHUP: asking the workers" run.out || fail "the SIGHUP is not said"
  ;;
recipe-pipe)
  one_rank_recipe piped "checkpoint: {every_steps: 2}" '{name: a, steps: 30}' '{name: b, steps: 2}' >p.yaml
  # piped, stopped mid-stage a, resumed
  cat p.yaml | BATON_FAULT_STEP_SLEEP=0.1 "$baton" run /dev/stdin --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 2 >/dev/null
  stop_run
  cmp p.yaml r1/recipe.yaml || fail "the kept recipe.yaml is not the piped recipe's bytes"
  "$baton" status r1 >status.out 2>&1 || { cat status.out; fail "baton status failed"; }
  ! grep -q "kept recipe cannot be read" status.out || { cat status.out; fail "status cannot read the kept recipe"; }
  grep -Eq '^  a +stopped' status.out && grep -Eq '^  b +' status.out ||
    { cat status.out; fail "status does not name stages a and b"; }
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume of the piped run failed"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["state"] == "completed"' || fail "the resumed piped run did not complete"
  # another recipe from a pipe on that directory: refused, naming what differs
  set +e
  sed 's/name: b, steps: 2/name: b, steps: 3/' p.yaml | "$baton" run /dev/stdin --run-dir r1 --quiet >other.out 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] || { cat other.out; fail "another piped recipe on r1: exit $rc, not 2"; }
  grep -q "belongs to a run with another recipe .*differs from it: .*steps" other.out ||
    { cat other.out; fail "the refusal does not say what differs"; }
  # whose bytes are gone: no `cp /dev/stdin KEPT` (it would wait for the terminal), but
  # the text written into the kept copy by what made it; a file's is copied
  grep -qF "To continue the run with the edit, write the new recipe into the kept copy with what made it, as /dev/stdin gives its text once (e.g. envsubst < t.yaml > $work/r1/recipe.yaml) and run 'baton resume $work/r1'" other.out ||
    { cat other.out; fail "the refusal of a piped recipe does not say to write the kept copy"; }
  ! grep -q "cp /dev/stdin" other.out || { cat other.out; fail "the refusal says to copy /dev/stdin"; }
  sed 's/name: b, steps: 2/name: b, steps: 3/' p.yaml >p3.yaml
  set +e
  "$baton" run p3.yaml --run-dir r1 --quiet >other.out 2>&1
  set -e
  grep -qF "make it the kept copy (cp p3.yaml $work/r1/recipe.yaml)" other.out ||
    { cat other.out; fail "the refusal of a recipe file does not say to copy it"; }
  cmp p.yaml r1/recipe.yaml || fail "the refused recipe changed the kept copy"
  # <(...) and a FIFO whose writer comes after baton run opens it
  sed 's/steps: 30/steps: 2/' p.yaml >q.yaml
  timeout -k 5 60 "$baton" run <(cat q.yaml) --run-dir r2 --quiet >run.out 2>&1 || fail "baton run <(...) failed"
  cmp q.yaml r2/recipe.yaml || fail "the kept recipe.yaml is not <(...)'s bytes"
  mkfifo r.fifo
  timeout -k 5 60 "$baton" run r.fifo --run-dir r3 --quiet >run.out 2>&1 &
  bpid=$!
  sleep 0.3
  cat q.yaml >r.fifo
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 0 ]] || fail "baton run of a FIFO exited $rc, not 0 (124/137: it hung)"
  cmp q.yaml r3/recipe.yaml || fail "the kept recipe.yaml is not the FIFO's bytes"
  # a FIFO with no writer: baton run waits, and SIGTERM or SIGINT ends it (KILL 5 s later
  # would be 137); nothing is made
  for sig in TERM INT; do
    set +e; timeout -s $sig -k 5 1 "$baton" run r.fifo --run-dir r4 --quiet >run.out 2>&1; rc=$?; set -e
    [[ $rc == 124 ]] || fail "SIG$sig to baton run waiting for a FIFO's writer: exit $rc, not 124"
    [[ ! -e r4 ]] || fail "baton run waiting for a FIFO's writer made its run directory"
  done
  # started with SIGINT ignored (a background job of a shell without job control): a stop
  # for baton run all the same, as once the run goes on; sent once baton run waits in the
  # FIFO's open (ignored before its first code blocks it, it would be lost)
  sh -c 'trap "" INT; exec "$0" "$@"' "$baton" run r.fifo --run-dir r4 --quiet >run.out 2>&1 &
  bpid=$!
  fifo_waiting "$bpid"
  kill -INT "$bpid"
  ended_within 20
  [[ $rc == 130 ]] || fail "SIGINT, ignored from the start, to baton run waiting for a FIFO's writer: exit $rc, not 130"
  [[ ! -e r4 ]] || fail "baton run waiting for a FIFO's writer made its run directory"
  # started with SIGHUP ignored (nohup): a hangup while it waits is no stop; it reads the
  # recipe once written and runs it
  (trap '' HUP; exec "$baton" run r.fifo --run-dir r6 --quiet >run.out 2>&1) &
  bpid=$!
  fifo_waiting "$bpid"
  kill -HUP "$bpid"
  sleep 0.3
  kill -0 "$bpid" 2>/dev/null || fail "SIGHUP, ignored from the start, ended baton run waiting for a FIFO's writer"
  cat q.yaml >r.fifo
  ended_within 120
  [[ $rc == 0 ]] || fail "baton run started with SIGHUP ignored, sent one, exited $rc, not 0"
  cmp q.yaml r6/recipe.yaml || fail "the kept recipe.yaml is not the FIFO's bytes"
  # baton submit from a pipe keeps the bytes too (its job resumes the kept copy)
  cat q.yaml | BATON_SBATCH_TEMPLATE=$src/deploy/slurm/baton.sbatch.in \
    "$baton" submit /dev/stdin --run-dir r5 --dry-run >run.out 2>&1 || fail "submit --dry-run from a pipe failed"
  cmp q.yaml r5/recipe.yaml || fail "submit's kept recipe.yaml is not the piped recipe's bytes"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "$case: ok"
