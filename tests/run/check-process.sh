#!/usr/bin/env bash
# baton and baton-worker started in an odd process state, with the helpers of
# run-common.sh. CASE:
#   sigchld-ignored  started with SIGCHLD ignored (Python's signal(SIGCHLD, SIG_IGN) before
#                 exec; the kernel would reap the children itself): `baton launch` of ranks
#                 that exit 0 exits 0, one that exits 3 is said with status 3; a one-rank
#                 run completes; a failing sbatch fails `baton submit` (status 1), a working
#                 one gives its job id.
#   fds-closed    `baton run` started with fds 0, 1 and 2 closed, stopped by SIGTERM: its
#                 messages go nowhere, not into the journal (the first file it opens
#                 would otherwise be fd 2): status reads the run and resume completes it.
#   umask-owner   under umask 0277 (the owner's own write and execute bits masked) a run
#                 completes, every file of its run directory 0600 and every directory
#                 0700; under umask 0777 status reads it; `baton data prepare`'s files are
#                 0600 under 0277 (the group's and others' bits still masked) and 0640
#                 under 027 (as before).
#   clock-step    the wall clock stepped (LD_PRELOAD rt_shift: an hour back in baton-worker
#                 after every read, an hour forward in baton): the PMIx waits of `baton
#                 launch` do not time out at once, and a 2-rank run whose checkpoint save
#                 takes 13 s (BATON_FAULT_SAVE_SLEEP), heartbeat_timeout 10 s, completes: the
#                 pacer's heartbeats during the save keep coming.
#   close-range   close_range(2) missing (LD_PRELOAD no_close_range: ENOSYS, as on Linux
#                 before 5.9): a descriptor baton was given (fd 9, not close-on-exec) reaches
#                 neither a rank of `baton launch`, nor sbatch (`baton submit`), nor a rank
#                 of the fresh process a stuck PMIx server makes baton run continue in;
#                 that process itself keeps it, as through any exec (a flock on it held).
#                 The ranks of the first process do not get it either.
#   check-process.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
# sigchld_ign CMD...: CMD executed with SIGCHLD ignored
sigchld_ign() {
  /usr/bin/python3 -c 'import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
os.execv(sys.argv[1], sys.argv[1:])' "$@"
}
# fake_sbatch BODY: an sbatch first in PATH that runs the shell code BODY
fake_sbatch() {
  mkdir -p fake
  printf '#!/bin/sh\n%s\n' "$1" >fake/sbatch
  chmod +x fake/sbatch
}
# modes DIR: every mode but 600 for a file and 700 for a directory in DIR, one a line
modes() { find "$1" \( -type f ! -perm 600 \) -o \( -type d ! -perm 700 \) -printf '%m %p\n'; }
case $case in
sigchld-ignored)
  set +e
  sigchld_ign "$baton" launch -n 2 -- /bin/true >launch.out 2>&1
  rc=$?
  [[ $rc == 0 ]] || { cat launch.out; fail "baton launch of /bin/true exited $rc with SIGCHLD ignored, not 0"; }
  sigchld_ign "$baton" launch -n 2 -- /bin/sh -c 'exit 3' >launch.out 2>&1
  rc=$?
  set -e
  [[ $rc == 3 ]] || { cat launch.out; fail "baton launch of 'exit 3' exited $rc, not 3"; }
  grep -q '^baton launch: rank [01] (node node0, pid [0-9]*) exited with status 3$' launch.out ||
    { cat launch.out; fail "the rank's status 3 was not said"; }
  one_rank_recipe one '' '{name: a, steps: 2}' >one.yaml
  sigchld_ign "$baton" run one.yaml --run-dir r1 --quiet >run.out 2>&1 ||
    fail "baton run failed with SIGCHLD ignored"
  fake_sbatch 'echo "sbatch: error: Batch job submission failed: Invalid account"; exit 1'
  set +e
  PATH=$work/fake:$PATH sigchld_ign "$baton" submit one.yaml --run-dir s1 >submit.out 2>&1
  rc=$?
  set -e
  [[ $rc != 0 ]] || { cat submit.out; fail "baton submit exited 0 though sbatch failed"; }
  grep -q "sbatch .* failed (status 1): sbatch: error: Batch job submission failed" submit.out ||
    { cat submit.out; fail "sbatch's failure was not said"; }
  [[ ! -s s1/job_id ]] || fail "a job id was kept: $(cat s1/job_id)"
  fake_sbatch 'echo 4242'
  PATH=$work/fake:$PATH sigchld_ign "$baton" submit one.yaml --run-dir s2 >submit.out 2>&1 ||
    { cat submit.out; fail "baton submit failed with a working sbatch"; }
  [[ $(cat s2/job_id) == 4242 ]] || fail "job_id holds '$(cat s2/job_id)', not 4242"
  ;;
fds-closed)
  two_rank_recipe slow 60 'checkpoint: {every_steps: 40}' >slow.yaml
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run slow.yaml --run-dir r1 <&- >&- 2>&- &
  bpid=$!
  wait_step 0 2 >/dev/null
  std=$(readlink "/proc/$bpid/fd/0" "/proc/$bpid/fd/1" "/proc/$bpid/fd/2" | tr '\n' ' ')
  stop_run
  "$baton" status r1 >status.out 2>&1 || { cat status.out; fail "status of the stopped run failed"; }
  grep -q '^run .*: stopped' status.out || { cat status.out; fail "the run is not said stopped"; }
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "the stopped run did not resume"; }
  # what it held as 0, 1 and 2: /dev/null, not its run's files
  [[ $std == "/dev/null /dev/null /dev/null " ]] || fail "baton run's fds 0, 1 and 2 were $std"
  ;;
umask-owner)
  one_rank_recipe one 'checkpoint: {every_steps: 1}' '{name: a, steps: 2}' >one.yaml
  (umask 0277 && "$baton" run one.yaml --run-dir r1 --quiet) >run.out 2>&1 ||
    fail "baton run under umask 0277 failed"
  bad=$(modes r1)
  [[ -z $bad ]] || fail "under umask 0277, not 0600/0700: $bad"
  (umask 0777 && "$baton" status r1) >status.out 2>&1 ||
    { cat status.out; fail "status under umask 0777 failed"; }
  grep -q '^run .*: completed' status.out || { cat status.out; fail "the run is not said completed"; }
  for m in 0277:600 027:640; do
    (umask "${m%:*}" && "$baton" data prepare --input /usr/share/games/fortunes \
      --split-on-percent --output "d${m%:*}/f" >/dev/null) || fail "data prepare under umask ${m%:*}"
    bad=$(find "d${m%:*}" -type f ! -perm "${m#*:}" -printf '%m %p\n')
    [[ -z $bad ]] || fail "data prepare under umask ${m%:*}, not ${m#*:}: $bad"
  done
  ;;
clock-step)
  [[ -f ${BATON_TEST_RT_SHIFT_LIB:-} ]] || fail "BATON_TEST_RT_SHIFT_LIB is not set"
  # under ASan the preloaded library comes before its runtime: allowed (as in check-run.sh)
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  BATON_TEST_RT_SHIFT_S=-3600 LD_PRELOAD=$BATON_TEST_RT_SHIFT_LIB \
    "$baton" launch -n 2 -- /bin/true >launch.out 2>&1 ||
    { cat launch.out; fail "baton launch failed with the wall clock stepped an hour forward"; }
  # one save, 13 s, longer than heartbeat_timeout: only the pacer's heartbeats during it
  # keep the ranks from being taken for hung (a pacer waiting on the wall clock, set back an
  # hour, sends none). 10 s, not less: a start slowed by a loaded host, before any rank is
  # heard, must not be taken for a hang either.
  two_rank_recipe saves 2 'checkpoint: {every_steps: 2, keep: 1},
           restart: {max_restarts: 0, heartbeat_timeout: 10s}' >saves.yaml
  set +e
  BATON_TEST_RT_SHIFT_S=-3600 BATON_TEST_RT_SHIFT_WORKER_S=3600 BATON_FAULT_SAVE_SLEEP=13 \
    LD_PRELOAD=$BATON_TEST_RT_SHIFT_LIB "$baton" run saves.yaml --run-dir r1 --worker "$worker" \
    --quiet >run.out 2>&1
  rc=$?
  set -e
  [[ $rc == 0 ]] || { cat run.out; fail "baton run exited $rc with the wall clock stepped, not 0"; }
  ! grep -q "sent no heartbeat" run.out || { cat run.out; fail "a save was taken for a hang"; }
  ;;
close-range)
  [[ -f ${BATON_TEST_NO_CLOSE_RANGE_LIB:-} ]] || fail "BATON_TEST_NO_CLOSE_RANGE_LIB is not set"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  export LD_PRELOAD=$BATON_TEST_NO_CLOSE_RANGE_LIB
  : >stray
  # shellcheck disable=SC2016 # the rank's own $$
  "$baton" launch -n 2 -- /bin/sh -c 'ls -l /proc/$$/fd' 9>stray >launch.out 2>&1 ||
    { cat launch.out; fail "baton launch failed"; }
  grep -q '^\[1\] .* 2 -> ' launch.out || { cat launch.out; fail "no listing of the rank's fds"; }
  ! grep -q stray launch.out || { cat launch.out; fail "fd 9 reached a rank"; }
  # the close loop goes past the highest descriptor open (3000 here), not on to the
  # open-files limit (which baton run raises, often to 1048576: a million close() calls a
  # rank); the preload says when a close() reaches 4096
  if [[ $(ulimit -Hn) == unlimited || $(ulimit -Hn) -ge 8192 ]]; then
    # shellcheck disable=SC2016 # the rank's own $$
    (ulimit -Sn 8192 && BATON_TEST_CLOSE_REPORT=4096 "$baton" launch -n 2 -- \
      /bin/sh -c 'ls -l /proc/$$/fd' 3000>stray >launch.out 2>&1) || { cat launch.out; fail "baton launch with fd 3000 failed"; }
    grep -q '^\[1\] .* 2 -> ' launch.out || { cat launch.out; fail "no listing of the rank's fds"; }
    ! grep -q stray launch.out || { cat launch.out; fail "fd 3000 reached a rank"; }
    ! grep -q "close() loop reached" launch.out || { cat launch.out; fail "the close loop went on to the open-files limit"; }
  fi
  one_rank_recipe two 'checkpoint: {every_steps: 2}' '{name: a, steps: 2}' '{name: b, steps: 2}' >two.yaml
  fake_sbatch 'case $(readlink /proc/$$/fd/9) in *stray) echo "fd 9 inherited"; exit 1;; esac; echo 4242'
  PATH=$work/fake:$PATH "$baton" submit two.yaml --run-dir s1 9>stray >submit.out 2>&1 ||
    { cat submit.out; fail "baton submit failed (fd 9 reached sbatch?)"; }
  # the fresh process of a stuck PMIx server: its workers list what their baton holds,
  # and whether the lock on fd 9 is still held (flock -n fails); every rank what it holds
  # shellcheck disable=SC2016 # expanded by the wrapper
  printf '#!/bin/bash\nls -l /proc/$$/fd >own.$$\n[[ -n ${BATON_AFRESH:-} ]] && { ls -l /proc/$PPID/fd >fds.$$; flock -n stray true 2>/dev/null && echo free >>lock.log || echo held >>lock.log; }\nexec "%s" "$@"\n' \
    "$worker" >wrap.sh
  chmod +x wrap.sh
  (
    exec 9>stray
    flock 9
    BATON_FAULT_PMIX_STUCK=2 exec "$baton" run two.yaml --run-dir r1 --worker ./wrap.sh --quiet >run.out 2>&1
  ) || { cat run.out; fail "baton run failed with its PMIx server stuck once"; }
  grep -q "continuing in a fresh process" run.out || { cat run.out; fail "no fresh process"; }
  compgen -G 'fds.*' >/dev/null || fail "no worker of the fresh process listed its baton's fds"
  # baton's caller's descriptor goes along, as through any exec (its lock held throughout),
  # but reaches no rank
  grep -qh ' 9 -> .*/stray$' fds.* || { cat fds.*; fail "fd 9, its caller's, did not go along into the fresh process"; }
  [[ $(sort -u lock.log) == held ]] || { cat lock.log; fail "the caller's lock on fd 9 was released across the fresh process"; }
  ! grep -h stray own.* || fail "fd 9 reached a rank"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "$case: ok"
