#!/usr/bin/env bash
# Kill one rank of a 4-rank run mid-step: the other ranks stop with a clear error well
# within the communication timeout, `baton launch` exits nonzero naming the killed rank,
# and no process, socket or temporary directory is left behind. By default a
# data-parallel run (dp.yaml's zero1: collectives); RECIPE and STAGE pick another, e.g.
# pp.yaml's plain (pp2 x dp2: the pipeline's point to point) or cp.yaml's ring (cp2 x dp2:
# ring attention's).
#   check-kill.sh BATON BATON_WORKER SOURCE_DIR [RECIPE STAGE]
set -u
baton=$1 worker=$2 src=$3 recipe=${4:-dp.yaml} stage=${5:-zero1}
# OpenPMIx 4.2 leaks a little in every client; the sanitizer build must not fail on it.
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-kill.XXXXXX)
launch_pid=
cleanup() {
  [[ -n "$launch_pid" ]] && kill -9 "$launch_pid" 2>/dev/null
  pkill -9 -f "$work/" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1
mkdir tmp
export TMPDIR=$work/tmp
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1
sed "s/gpus_per_node: 2/gpus_per_node: 4/; s/steps: 20/steps: 100000/" \
  "$src/tests/engine/$recipe" >kill.yaml
"$baton" spec kill.yaml --stage "$stage" --out "$work/kill.pb" || exit 1

"$baton" launch -n 4 -- "$worker" --spec "$work/kill.pb" --eval-windows 0 --comm-timeout 20 \
  --log-every 5 >launch.log 2>&1 &
launch_pid=$!
started=0
for _ in $(seq 1 300); do # wait for training to run (at most 30 s)
  grep -Eq 'step +5/' launch.log && { started=1; break; }
  sleep 0.1
done
if [[ $started -ne 1 ]]; then
  echo "FAIL: the job did not reach step 5 within 30 s"; cat launch.log; exit 1
fi
mapfile -t pids < <(pgrep -P "$launch_pid" | sort -n) # the ranks, in start order
if [[ ${#pids[@]} -ne 4 ]]; then
  echo "FAIL: expected 4 workers, found ${#pids[@]}"; cat launch.log; exit 1
fi
victim=${pids[2]}
t0=$(date +%s.%N)
kill -9 "$victim"
wait "$launch_pid"
rc=$?
launch_pid=
t1=$(date +%s.%N)
grep -v ' step ' launch.log
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[[ $rc -eq 137 ]] || fail "baton launch exited $rc, expected 137 (128 + SIGKILL)"
grep -Eq "baton launch: rank [0-9] \(node node0, pid $victim\) killed by signal SIGKILL" launch.log ||
  fail "baton launch did not name the killed rank (pid $victim)"
grep -Eq '^\[[0-9]\] baton-worker: .*(peer|Connection|connection)' launch.log ||
  fail "no surviving rank reported the lost peer"
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }' ||
  fail "the job took more than 10 s to stop after the kill"
sleep 0.2
pgrep -f -- "$work/kill.pb" >/dev/null && fail "worker processes left behind"
left=$(find "$TMPDIR" -mindepth 1 | head -n 5)
[[ -z "$left" ]] || fail "temporary files left behind: $left"
[[ $failures -eq 0 ]] || exit 1
echo "killed rank stopped the job in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s; nothing left behind"
