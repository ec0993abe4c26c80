#!/usr/bin/env bash
# Stale /dev/shm segments (comm_shm_sweep): a process killed while its group formed leaves
# /dev/shm/baton-comm-PID-*; the next process that forms a shared-memory group removes
# those of dead PIDs untouched for 10 minutes, and nothing else. Planted: a dead PID's
# old segment (removed), a dead PID's fresh one, a live PID's old one, an old one of a
# name not ours (all kept); then a real group of 2 ranks forms (test_comm collectives-w2).
#   check-sweep.sh TEST_COMM
set -euo pipefail
test_comm=$1
dead=
for ((p = $(cat /proc/sys/kernel/pid_max) - 1; p > 1000; p--)); do
  if [[ ! -e /proc/$p ]] && ! kill -0 "$p" 2>/dev/null; then dead=$p; break; fi
done
[[ -n $dead ]] || { echo "no unused pid"; exit 1; }
tag=sweeptest$$
stale=/dev/shm/baton-comm-$dead-${tag}a fresh=/dev/shm/baton-comm-$dead-${tag}b
live=/dev/shm/baton-comm-$$-${tag}c other=/dev/shm/baton-comm-${dead}x-${tag}d
trap 'rm -f "$stale" "$fresh" "$live" "$other"' EXIT
: >"$stale"; : >"$fresh"; : >"$live"; : >"$other"
touch -d '1 hour ago' "$stale" "$live" "$other"
unset BATON_COMM_SHM
"$test_comm" collectives-w2 >/dev/null
fail=0
[[ ! -e $stale ]] || { echo "FAIL: the dead pid $dead's old segment is still there"; fail=1; }
for f in "$fresh" "$live" "$other"; do
  [[ -e $f ]] || { echo "FAIL: $f was removed"; fail=1; }
done
((fail == 0)) && echo "comm.shm-sweep: dead pid $dead's old segment removed; a fresh one, a live pid's and another name kept"
exit $fail
