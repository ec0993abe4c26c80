#!/usr/bin/env bash
# `baton run` under low resource limits and with its run directory taken away, with the
# helpers of run-common.sh. CASE:
#   as-limit      under `ulimit -v 200000` (too little for OpenBLAS's 128 MB GEMM buffer
#                 and a worker), with OPENBLAS_NUM_THREADS=2, then OMP_NUM_THREADS=2:
#                 baton run does not hang (OpenBLAS starts no thread pool as it loads,
#                 whose fork handler would wait on it for ever, whatever the variables
#                 say) and every rank says what it cannot allocate and names the limit,
#                 having started no thread (none spins, the exit waits on none); exit 2
#                 after one attempt, not retried. A model too big for `ulimit -v 900000` alike: the
#                 model's message names the limit, one attempt, exit 2.
#   dir-removed   the run directory removed (rm -rf) while a stage trains: baton run says so
#                 within a second or two, kills its workers and exits 1, and nothing of the
#                 run directory is made again (no checkpoints/ from the workers).
#   dir-moved     the run directory renamed (mv) while a stage trains: baton run says where
#                 it went and stops (exit 1), nothing is made at the old path, and `baton
#                 resume` of the new path completes the run.
#   fsize         under `ulimit -f 900` (KB) with 2 ranks: no rank dies of SIGXFSZ; the
#                 shared-memory segment that cannot be reserved is said (file, size, limit),
#                 removed, and the group works over Gloo; the first checkpoint's shard that
#                 cannot be written names the file and the limit; exit 2 after one attempt.
#                 Under `ulimit -f 12`, baton run's own write of metrics.jsonl fails with
#                 EFBIG, said, not a death by SIGXFSZ.
#   fd-low        a soft open-files limit of 16 (hard 4096) is raised before the PMIx server
#                 and the control channel start (said), and the run completes; a hard one of
#                 16 is refused before they start: exit 2, baton's own message, nothing from
#                 PMIx or libevent, and no run directory left (none journaled).
#   pmix-stuck    the embedded PMIx server stuck as the second stage's attempt starts (test
#                 hook BATON_FAULT_PMIX_STUCK=2: its registration times out): said, not
#                 retried in that process; baton run continues as `baton resume` in a fresh
#                 process (executed in its place, still named baton), which completes the
#                 run: exit 0, one failure, one restart, one recovery; a lock its caller
#                 took on fd 9 (exec 9>lock; flock 9) is held throughout. Run through the
#                 dynamic loader (which executing /proc/self/exe would run): exit 1 naming
#                 the resume (the failure not retried in this process, JSON continued
#                 false), which completes it (retried in a fresh process, JSON continued
#                 true, as after a fresh process killed first). A resume by hand while the
#                 fresh process starts (BATON_FAULT_AFRESH_WAIT) finds the run's locks
#                 held: exit 2.
#                 Status lists the failure as retried in a fresh process (no step: JSON
#                 null, text "before its first step") and the stage as continued, never
#                 given up; the fresh process killed (-9) while it waits leaves the run
#                 stopped, not failed; stopped (SIGINT) there after its attempt started,
#                 exit 75, the resume's first step is the failure's recovery all the same.
#   pmix-stuck-exec  the fresh process never runs an attempt. Its execution fails (test hook
#                 BATON_FAULT_AFRESH_EXEC): exit 1 naming the resume; status (text and
#                 JSON) has the failure to be retried in a fresh process (JSON continued
#                 null) and the stage not continued yet, the run stopped; the resume by
#                 hand retries it (continued, JSON true). It gives up before its attempt (a
#                 checkpoint removed while it waits, BATON_FAULT_AFRESH_WAIT): the failure
#                 not retried (JSON continued false), the stage given up before its attempt,
#                 then given up.
#   pmix-stuck-again  stuck at every process's first registration (BATON_FAULT_PMIX_STUCK=1):
#                 three fresh processes, then exit 1 saying so and naming the resume; four
#                 failures journaled, three restarts; failed; each process has its control
#                 channel.
#   pmix-stuck-progress  stuck at every process's second registration, six stages: each
#                 fresh process completes a stage first, so five continuations in a row do
#                 not end the run (the limit counts those without progress): exit 0.
#   launch-removed  the launcher's temp dir ($TMPDIR/baton-launch-*) removed (rm -rf, as a
#                 temp-file cleaner would) while the first of three stages trains, and again
#                 while the second does (each held by the test hook BATON_FAULT_STEP_HOLD
#                 until it is): made again as each next stage starts, said once, and the
#                 run completes with no failure; nothing is left in $TMPDIR.
#   launch-squatted  the launcher's temp dir removed while the last stage trains and its
#                 name taken (a squatter in a shared /tmp): by a link to a dir that holds a
#                 link named after the job's dir to a victim's files, and in a second run by
#                 a dir of the same user with a file in it. Neither the end of the job nor
#                 the end of the run removes anything of theirs: the victim's files, the
#                 links and the other dir are all there after it; the runs complete.
#   launch-pidns  a baton run in another PID namespace (unshare --pid) sharing $TMPDIR, its
#                 pid one no process here has: a baton run here, whose server sweeps the
#                 temp dirs of servers that are gone, leaves that run's dir alone (its lock
#                 is held), and that run completes without making it again. SKIPPED (77)
#                 where unshare --pid or setting the namespace's next pid is not permitted.
#   check-limits.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
# start_slow_r1: baton run of a slow 60-step dp2 stage in r1 (bpid), once it is at step 2;
# no checkpoint for seconds after that step: none starts before what the case does is seen
start_slow_r1() {
  two_rank_recipe slow 60 >slow.yaml
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run slow.yaml --run-dir r1 \
    --set defaults.checkpoint.every_steps=40 >run.out 2>&1 &
  bpid=$!
  wait_step 0 2 >/dev/null
}
# wait_continuation FILE: until the baton run writing FILE says it continues in a fresh
# process (up to 60 s: stage a trains first, slow on a loaded machine), else fail; what
# the case does next (a kill, a resume by hand) is meant for that fresh process
wait_continuation() {
  for _ in $(seq 600); do
    grep -q "continuing in a fresh process" "$1" && return 0
    sleep 0.1
  done
  cat "$1"
  fail "no continuation line in $1 after 60 s"
}
# stuck_run N RECIPE RC FRESH: baton run of RECIPE in r1 with each process's Nth PMIx
# registration stuck (BATON_FAULT_PMIX_STUCK=N) exits RC after FRESH continuations
stuck_run() {
  local rc n
  set +e
  BATON_FAULT_PMIX_STUCK=$1 "$baton" run "$2" --run-dir r1 --quiet >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == "$3" ]] || { cat run.out; fail "baton run exited $rc, stuck at each process's registration $1, not $3"; }
  n=$(grep -c "continuing in a fresh process" run.out || true)
  [[ $n == "$4" ]] || { cat run.out; fail "$n fresh processes, not $4"; }
}
# one_attempt_fatal: run.out is of a run that failed once, exit 2, not retried
one_attempt_fatal() {
  [[ $rc == 2 ]] || fail "baton run exited $rc, not 2"
  grep -q 'attempt 0 failed: .*(a configuration error: not retried)' run.out ||
    fail "the failed attempt is not said to be final"
  ! grep -q "restarting stage" run.out || fail "the attempt was retried"
}
case $case in
as-limit)
  if grep -q __asan_init "$baton"; then
    echo "SKIPPED: the address-space limit (a sanitizer build reserves terabytes of it)"
    exit 77
  fi
  two_rank_recipe small 8 >small.yaml
  # ctest sets OPENBLAS_NUM_THREADS=1; here each variable asks for 2 threads instead, which
  # OpenBLAS would start as baton loads (it then spins in fork(), SIGTERM blocked, only
  # SIGKILL ends it) and the ranks before their check (they then hang at exit until the
  # heartbeat timeout calls it a hang); on 1 CPU the ranks run 1 thread
  for var in OPENBLAS_NUM_THREADS OMP_NUM_THREADS; do
    set +e
    (ulimit -v 200000
     env -u OPENBLAS_NUM_THREADS "$var=2" timeout -s KILL 60 "$baton" run small.yaml \
       --run-dir "r1-$var" >run.out 2>&1)
    rc=$?
    set -e
    [[ $rc != 137 ]] || fail "baton run under ulimit -v 200000 and $var=2 hung (killed after 60 s)"
    one_attempt_fatal
    ! grep -q "hang: " run.out || fail "with $var=2 a rank was taken for hung"
    [[ $(grep -Ec "^\[a rank [01]\] baton-worker: cannot allocate [0-9]+ MB for OpenBLAS's [12] thread\(s\) \(a 128 MB GEMM buffer each[^)]*\): Cannot allocate memory \(the address-space limit, ulimit -v, is 200000 KB\)" run.out) == 2 ]] ||
      fail "with $var=2 the ranks do not both say what they cannot allocate under which limit"
  done
  # a model that does not fit: 4 x 50M parameters, with Adam's moments 3.2 GB
  two_rank_recipe big 8 '' '{arch: llama, dim: 2048, n_layers: 4, n_heads: 16, n_kv_heads: 4, ffn_dim: 5632, vocab_size: 272, rope: {theta: 10000}}' >big.yaml
  set +e
  (ulimit -v 900000; timeout -s KILL 120 "$baton" run big.yaml --run-dir r2 >run.out 2>&1)
  rc=$?
  set -e
  one_attempt_fatal
  grep -q "rank [01] reported: model: cannot allocate .* (the address-space limit, ulimit -v, is 900000 KB)" run.out ||
    fail "the model's allocation failure does not name the limit"
  ;;
fsize)
  two_rank_recipe small 8 >small.yaml
  set +e
  (ulimit -f 900; timeout -s KILL 120 "$baton" run small.yaml --run-dir r1 >run.out 2>&1)
  rc=$?
  set -e
  ! grep -q SIGXFSZ run.out || fail "a rank died of SIGXFSZ"
  one_attempt_fatal
  seg=$(sed -En "s|^\[a rank 0\] baton-worker: warning: a group of ranks on one host works over Gloo \(TCP\), not shared memory: (/dev/shm/baton-comm-[0-9a-f-]+): cannot reserve [0-9.]+ MB: File too large \(the file-size limit, ulimit -f, is 900 KB\)$|\1|p" run.out)
  [[ -n $seg ]] || fail "no warning naming the segment that could not be reserved and the limit"
  [[ ! -e $seg ]] || fail "$seg was left behind"
  grep -q "reported: checkpoint s00-step00000004: .*/rank-0000[01].bin: cannot write tensor .*: File too large (the file-size limit, ulimit -f, is 900 KB)" run.out ||
    fail "the checkpoint write's failure does not name the file and the limit"
  # baton's own file past the limit (metrics.jsonl passes 12 KB near step 40): EFBIG, said,
  # its records held back; not a death by SIGXFSZ (exit 153) taking the workers with it
  two_rank_recipe long 60 | sed 's/every_steps: 4/every_steps: 1000/' >long.yaml
  set +e
  (ulimit -f 12; timeout -s KILL 120 "$baton" run long.yaml --run-dir r2 >run.out 2>&1)
  rc=$?
  set -e
  [[ $rc != 153 ]] || fail "baton run died of SIGXFSZ"
  grep -q "^baton run: .*/r2/metrics.jsonl: cannot append: File too large" run.out ||
    fail "metrics.jsonl's write past ulimit -f not said"
  ;;
fd-low)
  two_rank_recipe small 4 >small.yaml
  set +e
  (ulimit -Sn 16; ulimit -Hn 4096; timeout -s KILL 120 "$baton" run small.yaml --run-dir r1 >run.out 2>&1)
  rc=$?
  set -e
  [[ $rc == 0 ]] || fail "baton run under a soft ulimit -n 16 exited $rc, not 0"
  grep -q "^baton run: 2 ranks need about [0-9]* open files here, over the soft limit (RLIMIT_NOFILE, ulimit -n) of 16: raised it to 4096" run.out ||
    fail "the soft limit's raise is not said"
  set +e
  (ulimit -n 16; timeout -s KILL 120 "$baton" run small.yaml --run-dir r2 >run.out 2>&1)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "baton run under ulimit -n 16 exited $rc, not 2"
  grep -q "^baton run: cannot start: 2 ranks need about [0-9]* open files here .* RLIMIT_NOFILE allows 16 (soft) and 16 (hard)" run.out ||
    fail "no message of baton's naming the limits"
  ! grep -Eq "PMIX ERROR|^\[(err|warn)\]" run.out || fail "PMIx or libevent failed first"
  [[ ! -e r2 ]] || fail "the refused run left its run directory r2: $(ls -A r2 | tr '\n' ' ')"
  ;;
dir-removed)
  start_slow_r1
  rm -rf r1
  gone=$SECONDS
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 1 ]] || fail "baton run exited $rc after its run directory was removed, not 1"
  ((SECONDS - gone <= 5)) || fail "baton run went on for $((SECONDS - gone)) s"
  grep -q "^baton run: $work/r1: the run directory was removed while the run ran" run.out ||
    fail "no message saying the run directory is gone"
  grep -q "^baton run: stopped: $work/r1 was removed while the run ran" run.out ||
    fail "no closing line"
  ! grep -q "restarting stage" run.out || fail "the attempt was retried"
  [[ ! -e r1 ]] || { find r1; fail "the run directory was made again"; }
  ;;
dir-moved)
  start_slow_r1
  mv r1 r1-moved
  moved=$SECONDS
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 1 ]] || fail "baton run exited $rc after its run directory was moved, not 1"
  ((SECONDS - moved <= 5)) || fail "baton run went on for $((SECONDS - moved)) s"
  grep -q "^baton run: $work/r1: the run directory was moved to $work/r1-moved while the run ran" run.out ||
    { cat run.out; fail "no message saying where the run directory went"; }
  grep -q "^baton run: stopped: $work/r1 was moved while the run ran; continue with 'baton resume $work/r1-moved'" run.out ||
    fail "no closing line naming the resume"
  ! grep -q "restarting stage" run.out || fail "the attempt was retried"
  sleep 0.5 # a worker's last write would have landed by now
  [[ ! -e r1 ]] || { find r1; fail "the run directory was made again at its old path"; }
  "$baton" resume r1-moved --quiet >resume.out 2>&1 || { cat resume.out; fail "the moved run did not resume"; }
  "$baton" status r1-moved --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed", s' || fail "the resumed run is not complete"
  ;;
pmix-stuck)
  one_rank_recipe two 'checkpoint: {every_steps: 2}' '{name: a, steps: 2}' '{name: b, steps: 2}' >two.yaml
  # the workers' parent is their baton: its name (comm) in each process, and what it holds;
  # whether the lock its caller took on fd 9 is still held (flock -n fails)
  # shellcheck disable=SC2016 # expanded by the wrapper
  printf '#!/bin/bash\nheld=$(flock -n user.lock true 2>/dev/null && echo free || echo held)\necho "${BATON_AFRESH:-0} $(cat /proc/$PPID/comm) ${BATON_COMM-none} ${BATON_RUN_LOCKS-none} $held" >>comm.log\nexec "%s" "$@"\n' \
    "$worker" >wrap.sh
  chmod +x wrap.sh
  set +e
  (
    exec 9>user.lock
    flock 9
    BATON_FAULT_PMIX_STUCK=2 exec "$baton" run two.yaml --run-dir r1 --worker ./wrap.sh --quiet >run.out 2>&1
  )
  rc=$?
  set -e
  [[ $rc == 0 ]] || { cat run.out; fail "baton run exited $rc with its PMIx server stuck once, not 0"; }
  grep -q 'cannot register PMIx namespace .*: the embedded PMIx server did not answer in 30 s' run.out ||
    { cat run.out; fail "the stuck server was not said"; }
  grep -q "^baton run: stage \"b\": the embedded PMIx server is stuck: continuing in a fresh process, as 'baton resume $work/r1'\$" run.out ||
    { cat run.out; fail "no line saying it continues in a fresh process"; }
  ! grep -q "restarting stage" run.out || { cat run.out; fail "retried in the same process"; }
  # named baton, not "exe" (pgrep, pkill and killall find it), the variables gone
  # a descriptor its caller handed it (fd 9, locked) goes along, as through any exec
  [[ $(cat comm.log) == $'0 baton none none held\n1 baton none none held' ]] ||
    { cat comm.log; fail "the fresh process is not named baton, passed on what it was handed, or dropped its caller's lock"; }
  # the fresh process's attempt is a restart, its first step the failure's recovery
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["failures"] == 1, s
assert s["restarts"] == 1 and s["recoveries"] == 1 and len(s["recovery_list"]) == 1, s
f = s["failure_list"][0]
assert f["server_stuck"] is True and f["continued"] is True, f' ||
    fail "the run is not complete with one failure (continued), one restart and one recovery"
  # run by the dynamic loader, /proc/self/exe is the loader: the resume is named instead
  ldso=$(sed -n 's/^ *\[Requesting program interpreter: \(.*\)\]$/\1/p' < <(readelf -l "$baton"))
  [[ -x $ldso ]] || fail "no program interpreter found for $baton"
  set +e
  BATON_FAULT_PMIX_STUCK=2 "$ldso" "$baton" run two.yaml --run-dir r2 --worker "$worker" --quiet >ld.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat ld.out; fail "baton run through $ldso exited $rc with its PMIx server stuck, not 1"; }
  grep -q "^baton run: stage \"b\": the embedded PMIx server is stuck: not retried in this process; 'baton resume $work/r2' continues in a fresh one\$" ld.out ||
    { cat ld.out; fail "no give-up naming the resume"; }
  # given up in this process: not retried (JSON continued false) until the resume by hand,
  # which retries it as a fresh process would (continued, JSON true: as when a fresh
  # process baton run started was killed first, pmix-stuck-exec)
  afresh_is() { # RUN_DIR TEXT JSON: the one failure's text and JSON continued
    "$baton" status "$1" >afresh.txt
    grep -q "^  failure: stage b .* ($2)\$" afresh.txt || { cat afresh.txt; fail "$1: the failure is not ($2)"; }
    "$baton" status "$1" --json | /usr/bin/python3 -c '
import json, sys
f = json.load(sys.stdin)["failure_list"]
assert [(x["server_stuck"], x["continued"]) for x in f] == [(True, json.loads(sys.argv[1]))], f' "$3" ||
      fail "$1: the JSON failure is not continued: $3"
  }
  afresh_is r2 "not retried in this process" false
  "$baton" resume r2 --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume failed"; }
  afresh_is r2 "retried in a fresh process" true
  # a resume by hand while the fresh process starts finds the run's locks held
  BATON_FAULT_PMIX_STUCK=2 BATON_FAULT_AFRESH_WAIT=6 "$baton" run two.yaml --run-dir r3 --quiet >r3.out 2>&1 &
  bpid=$!
  wait_continuation r3.out
  set +e
  "$baton" resume r3 --quiet >other.out 2>&1
  rc=$?
  wait "$bpid"
  brc=$?
  set -e
  first=$bpid bpid=
  # named by the record its first process wrote: the same pid, through the exec
  if [[ $rc != 2 ]] || ! grep -q "another baton run is working in this run directory (baton run pid $first on " other.out; then
    cat r3.out other.out
    fail "a resume by hand took the run over (exit $rc) while the fresh process started"
  fi
  [[ $brc == 0 ]] || { cat r3.out; fail "the fresh process exited $brc, not 0"; }
  "$baton" status r1 >status.txt
  grep -q "^  failure: stage b attempt 0 before its first step: cannot launch the workers: .* (retried in a fresh process)\$" status.txt ||
    { cat status.txt; fail "the stuck server's failure is not listed as retried in a fresh process"; }
  grep -q "^  continued: stage b: the embedded PMIx server is stuck: continuing in a fresh process, as 'baton resume $work/r1'\$" status.txt ||
    { cat status.txt; fail "no line saying the stage continued in a fresh process"; }
  ! grep -q "gave up\|not retried" status.txt || { cat status.txt; fail "status says the run gave up"; }
  # killed while the fresh process waits to take the run over: stopped, not failed
  BATON_FAULT_PMIX_STUCK=2 BATON_FAULT_AFRESH_WAIT=30 "$baton" run two.yaml --run-dir r4 --quiet >r4.out 2>&1 &
  bpid=$!
  wait_continuation r4.out
  kill -9 "$bpid"
  wait "$bpid" || true
  bpid=
  "$baton" status r4 >status4.txt
  grep -q "^run r4: stopped; 1 failure, recovered 0 times\$" status4.txt ||
    { cat r4.out status4.txt; fail "a continuation killed before its attempt is not a stopped run"; }
  grep -q "^  failure: stage b .* (to be retried in a fresh process)\$" status4.txt &&
    grep -q "^  not continued yet: stage b: " status4.txt ||
    { cat status4.txt; fail "a continuation killed before its attempt is listed as retried"; }
  # stopped (SIGINT) as its attempt starts: the resume's first step is the recovery
  BATON_FAULT_PMIX_STUCK=2 BATON_FAULT_AFRESH_WAIT=2 "$baton" run two.yaml --run-dir r5 --quiet >r5.out 2>&1 &
  bpid=$!
  wait_continuation r5.out
  kill -INT "$bpid"
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 75 ]] || { cat r5.out; fail "the fresh process stopped by SIGINT exited $rc, not 75"; }
  "$baton" resume r5 --quiet >resume5.out 2>&1 || { cat resume5.out; fail "the resume of r5 failed"; }
  "$baton" status r5 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["failures"] == 1, s
assert s["restarts"] == 1 and s["recoveries"] == 1, s
assert [x["step"] for x in s["failure_list"]] == [None], s' ||
    fail "a failure whose restart was stopped before its first step was not recovered by the resume"
  ;;
pmix-stuck-exec)
  one_rank_recipe two 'checkpoint: {every_steps: 2}' '{name: a, steps: 2}' '{name: b, steps: 2}' >two.yaml
  set +e
  BATON_FAULT_PMIX_STUCK=2 BATON_FAULT_AFRESH_EXEC=1 "$baton" run two.yaml --run-dir r1 --quiet >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || { cat run.out; fail "baton run exited $rc, its fresh process not executed, not 1"; }
  grep -q "^baton run: cannot continue in a fresh process (/proc/self/exe: Permission denied); 'baton resume $work/r1' does\$" run.out ||
    { cat run.out; fail "the failed execution is not said with the resume"; }
  "$baton" status r1 >status.txt
  grep -q "^run r1: stopped; 1 failure, recovered 0 times\$" status.txt ||
    { cat status.txt; fail "a run whose fresh process never ran is not stopped"; }
  grep -q "^  failure: stage b attempt 0 before its first step: cannot launch the workers: .* (to be retried in a fresh process)\$" status.txt ||
    { cat status.txt; fail "the failure is not listed as to be retried in a fresh process"; }
  grep -q "^  not continued yet: stage b: the embedded PMIx server is stuck: continuing in a fresh process" status.txt ||
    { cat status.txt; fail "the stage is not listed as not continued yet"; }
  ! grep -q "(retried in a fresh process)\|^  continued:" status.txt ||
    { cat status.txt; fail "status says a fresh process retried the stage, none ran"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
f = s["failure_list"]
assert s["state"] == "stopped" and len(f) == 1, s
assert f[0]["server_stuck"] is True and f[0]["continued"] is None and f[0]["retryable"] is False, f' ||
    fail "the JSON failure is not a stuck server's to be continued"
  # the resume by hand is the fresh process: it retries the failure
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "the resume failed"; }
  "$baton" status r1 >status.txt
  grep -q "^  failure: stage b .* (retried in a fresh process)\$" status.txt &&
    grep -q "^  continued: stage b: " status.txt ||
    { cat status.txt; fail "the resumed failure is not listed as retried in a fresh process"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
f = s["failure_list"]
assert s["state"] == "completed" and [(x["server_stuck"], x["continued"]) for x in f] == [(True, True)], s' ||
    fail "the JSON failure is not continued once the resume retried it"
  # the fresh process gives up before its attempt: stage a's checkpoint removed as it waits
  BATON_FAULT_PMIX_STUCK=2 BATON_FAULT_AFRESH_WAIT=8 "$baton" run two.yaml --run-dir r2 --quiet >r2.out 2>&1 &
  bpid=$!
  wait_continuation r2.out
  rm -rf r2/checkpoints/*
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 1 ]] || { cat r2.out; fail "the fresh process, its checkpoint gone, exited $rc, not 1"; }
  "$baton" status r2 >status2.txt
  grep -q "^run r2: failed (stage b: the journal records checkpoint " status2.txt ||
    { cat r2.out status2.txt; fail "the run given up before the fresh attempt is not failed"; }
  grep -q "^  failure: stage b attempt 0 before its first step: cannot launch the workers: .* (not retried)\$" status2.txt ||
    { cat status2.txt; fail "the failure given up before its retry is not listed as not retried"; }
  grep -q "^  given up before its attempt: stage b: the embedded PMIx server is stuck: continuing in a fresh process" status2.txt &&
    grep -q "^  gave up: stage b: the journal records checkpoint " status2.txt ||
    { cat status2.txt; fail "the stage is not listed as given up before its attempt, then given up"; }
  ! grep -q "retried in a fresh process\|^  continued:" status2.txt ||
    { cat status2.txt; fail "status says a fresh process retried the stage, none did"; }
  "$baton" status r2 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
f = s["failure_list"]
assert s["state"] == "failed" and [(x["server_stuck"], x["continued"]) for x in f] == [(True, False)], s' ||
    fail "the JSON failure given up before its retry is not one not continued"
  ;;
pmix-stuck-again)
  one_rank_recipe one 'checkpoint: {every_steps: 2}' '{name: a, steps: 2}' >one.yaml
  stuck_run 1 one.yaml 1 3
  # each has its control channel, whose TensorBoard file the same pid opens in the same second
  ! grep -q "no control channel" run.out || { cat run.out; fail "a fresh process had no control channel"; }
  grep -q "^baton resume: stage \"a\": the embedded PMIx server is stuck: not retried in this process; 'baton resume $work/r1' continues in a fresh one\$" run.out ||
    { cat run.out; fail "no last give-up naming the resume"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "failed" and s["failures"] == 4 and s["restarts"] == 3, s' ||
    fail "not a failed run with four failures and three restarts"
  "$baton" status r1 | grep -q "^run r1: failed" || { "$baton" status r1; fail "status does not say failed"; }
  ;;
pmix-stuck-progress)
  # stuck at every process's second registration: each fresh process completes a stage first
  one_rank_recipe six 'checkpoint: {every_steps: 2}' '{name: a, steps: 2}' '{name: b, steps: 2}' \
    '{name: c, steps: 2}' '{name: d, steps: 2}' '{name: e, steps: 2}' '{name: f, steps: 2}' >six.yaml
  stuck_run 2 six.yaml 0 5
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["failures"] == 5 and s["recoveries"] == 5, s' ||
    fail "the run is not complete with five failures, each recovered"
  ;;
launch-removed)
  one_rank_recipe three 'checkpoint: {every_steps: 100}' '{name: a, steps: 4}' \
    '{name: b, steps: 4}' '{name: c, steps: 2}' >three.yaml
  # each of stages a and b held after every step while hold.<stage index> is there: the rm
  # lands while that stage trains, however late this shell is scheduled
  touch hold.0 hold.1
  BATON_FAULT_STEP_HOLD=$PWD/hold "$baton" run three.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  for stage in 0 1; do
    wait_step $stage 1 >/dev/null
    dirs=("$TMPDIR"/baton-launch-*)
    [[ ${#dirs[@]} == 1 && -d ${dirs[0]} ]] || fail "not one launch dir in $TMPDIR: ${dirs[*]}"
    [[ $stage == 0 ]] && first=${dirs[0]}
    [[ ${dirs[0]} == "$first" ]] || fail "the launch dir was made again as ${dirs[0]}, not $first"
    rm -rf "${dirs[0]}"
    rm hold.$stage
  done
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 0 ]] || fail "baton run exited $rc with its launch dir removed, not 0"
  n=$(grep -c "^baton run: the launcher's temp dir $first was removed while the run ran (a temp-file cleaner?): made it again\$" run.out || true)
  [[ $n == 1 ]] || fail "the launch dir made again said $n times, not once"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["failures"] == 0, s' || fail "the run is not complete without failures"
  [[ -z $(ls -A "$TMPDIR") ]] || fail "left in $TMPDIR: $(ls -A "$TMPDIR")"
  ;;
launch-squatted)
  one_rank_recipe two 'checkpoint: {every_steps: 100}' '{name: a, steps: 2}' '{name: b, steps: 3}' >two.yaml
  mkdir -p victim/deep lair
  echo v >victim/v.txt
  echo d >victim/deep/d.txt
  echo l >lair/keep.txt
  for squat in link dir; do
    rm -rf r1 # wait_step reads r1's logs
    touch hold.1 # stage b, the last, held after each step until the squatter is in place
    BATON_FAULT_STEP_HOLD=$PWD/hold "$baton" run two.yaml --run-dir r1 --quiet >run.out 2>&1 &
    bpid=$!
    wait_step 1 1 >/dev/null
    dirs=("$TMPDIR"/baton-launch-*)
    [[ ${#dirs[@]} == 1 && -d ${dirs[0]} ]] || fail "not one launch dir in $TMPDIR: ${dirs[*]}"
    job=$(ls "${dirs[0]}" | grep -v '^dir-locked$')
    [[ $job == baton-* ]] || fail "no job dir in ${dirs[0]}: $job"
    rm -rf "${dirs[0]}" # a temp-file cleaner; then the squatter takes the name
    if [[ $squat == link ]]; then
      ln -s "$PWD/lair" "${dirs[0]}"
      ln -s "$PWD/victim" "lair/$job"
    else
      mkdir "${dirs[0]}"
      echo theirs >"${dirs[0]}/theirs"
    fi
    rm hold.1
    set +e; wait "$bpid"; rc=$?; set -e
    bpid=
    [[ $rc == 0 ]] || { cat run.out; fail "baton run exited $rc with its launch dir squatted ($squat), not 0"; }
    [[ -f victim/v.txt && -f victim/deep/d.txt && -f lair/keep.txt ]] ||
      fail "files of the victim or the squatter were removed ($squat): $(find victim lair)"
    if [[ $squat == link ]]; then
      [[ -L ${dirs[0]} && -L lair/$job ]] || fail "the squatter's links were removed"
      rm "${dirs[0]}" "lair/$job"
    else
      [[ -f ${dirs[0]}/theirs ]] || fail "the squatter's dir ${dirs[0]} was removed"
      rm -r "${dirs[0]}"
    fi
  done
  [[ -z $(ls -A "$TMPDIR") ]] || fail "left in $TMPDIR: $(ls -A "$TMPDIR")"
  ;;
launch-pidns)
  unshare --pid --fork --mount-proc true 2>/dev/null ||
    { echo "SKIPPED: unshare --pid --fork --mount-proc is not permitted here"; exit 77; }
  # a pid no process of this namespace has (counting down from the largest)
  pid=$(($(cat /proc/sys/kernel/pid_max) - 1))
  while [[ -e /proc/$pid ]]; do pid=$((pid - 1)); done
  unshare --pid --fork --mount-proc bash -c 'echo $(($1 - 1)) >/proc/sys/kernel/ns_last_pid' - "$pid" 2>/dev/null ||
    { echo "SKIPPED: the next pid of a new PID namespace cannot be set (/proc/sys/kernel/ns_last_pid)"; exit 77; }
  one_rank_recipe two 'checkpoint: {every_steps: 100}' '{name: a, steps: 30}' '{name: b, steps: 2}' >two.yaml
  one_rank_recipe one '' '{name: a, steps: 2}' >one.yaml
  # --kill-child: the namespace's processes go with unshare (the cleanup's kill -9)
  BATON_FAULT_STEP_SLEEP=0.1 unshare --pid --fork --mount-proc --kill-child bash -c '
    echo $(($1 - 1)) >/proc/sys/kernel/ns_last_pid || exit
    "$2" run two.yaml --run-dir r1 --quiet # forked (not exec-ed: pid 1 here): pid $1
    exit $?' \
    - "$pid" "$baton" >run.out 2>&1 &
  bpid=$!
  wait_step 0 2 >/dev/null
  dirs=("$TMPDIR"/baton-launch-"$pid"-*)
  [[ ${#dirs[@]} == 1 && -d ${dirs[0]} ]] ||
    fail "no launch dir of pid $pid in $TMPDIR: $(ls -A "$TMPDIR")"
  "$baton" run one.yaml --run-dir r2 --quiet >r2.out 2>&1 || { cat r2.out; fail "the run here failed"; }
  [[ -d ${dirs[0]} ]] || fail "the run here swept ${dirs[0]} of a live run in another PID namespace"
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 0 ]] || fail "the run in another PID namespace exited $rc, not 0"
  ! grep -q "made it again" run.out || fail "its launch dir had to be made again"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "$case: ok"
