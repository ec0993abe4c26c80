#!/usr/bin/env bash
# Workers stopped mid-run save a checkpoint at the step every rank agreed on, exit 75,
# and that checkpoint resumes bitwise onto the uninterrupted run; meanwhile the control
# channel carried Hello, heartbeats and metrics (metrics.jsonl and TensorBoard agree).
#   check-stop.sh BATON BATON_WORKER TEST_CONTROL SOURCE_DIR CASE
#   CASE: stop-message     the orchestrator's server sends Stop to every rank at step 10
#         sigterm-rank     rank 1 alone gets SIGTERM at step 10
#         sigterm-launcher `baton launch` gets SIGTERM at step 10 and stops its ranks
set -euo pipefail
baton=$1 worker=$2 test_control=$3 src=$4 case=$5
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-stop.XXXXXX)
serve_pid= launch_pid=
cleanup() { # the launcher, the server, and any rank left (their --spec lies in $work)
  [[ -n "$launch_pid" ]] && kill -9 "$launch_pid" 2>/dev/null
  [[ -n "$serve_pid" ]] && kill -9 "$serve_pid" 2>/dev/null
  pkill -9 -f -- "--spec $work/" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
mkdir tmp
export TMPDIR=$work/tmp
fail() { echo "FAIL $case: $*"; exit 1; }
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
"$baton" spec "$src/tests/control/stop.yaml" --out base.pb
run2() { timeout 200 "$baton" launch -n 2 -- "$worker" --eval-windows 0 --comm-timeout 30 "$@"; }
losses() { sed -En 's/^(\[0\] )?step +([0-9]+)\/[0-9]+  loss ([0-9.]+).*/\2 \3/p' "$@"; }
steps=60 # stop.yaml's
run2 --spec "$work/base.pb" >ref.log

case $case in
stop-message) action=stop reason="test stop|another rank's request" want_rc=75 ;;
sigterm-rank) action=term1 reason="another rank's request" want_rc=75 ;;
sigterm-launcher) action=mark reason="SIGTERM from pid [0-9]+" want_rc=143 ;;
*) fail "unknown case" ;;
esac
BATON_CONTROL_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export BATON_CONTROL_TOKEN
"$test_control" serve base.pb ctl.pb run 2 10 "$action" >serve.log 2>&1 &
serve_pid=$!
for _ in $(seq 100); do [[ -s ctl.pb ]] && break; sleep 0.1; done
[[ -s ctl.pb ]] || { cat serve.log; fail "the test server did not start"; }
# in the background without `timeout` in between, so that $! is the launcher itself
"$baton" launch -n 2 -- "$worker" --eval-windows 0 --comm-timeout 30 --spec "$work/ctl.pb" \
  --run-dir run --save-every 0 >a.log 2>&1 &
launch_pid=$!
if [[ $case == sigterm-launcher ]]; then
  for _ in $(seq 300); do [[ -e run/reached ]] && break; sleep 0.1; done
  kill -TERM "$launch_pid"
fi
set +e
wait "$launch_pid"
rc=$?
launch_pid=
wait "$serve_pid"
serve_rc=$?
serve_pid=
set -e
cat serve.log
grep -v '\] step ' a.log || true
[[ $rc -eq $want_rc ]] || fail "baton launch exited $rc, expected $want_rc"
[[ $serve_rc -eq 0 ]] || fail "the test server did not see both ranks come and go"
grep -q "rejected 0, fatal none" serve.log || fail "the server refused someone or got a Fatal"
k=$(sed -En "s/^\[0\] stopping at step ([0-9]+) \((.*)\): saving a checkpoint$/\1/p" a.log)
[[ -n "$k" ]] || fail "rank 0 did not say it was stopping"
grep -Eq "stopping at step $k \(($reason)\)" a.log || fail "the stop's reason is not '$reason'"
((k >= 10 && k < 60)) || fail "stopped at step $k, expected 10 <= step < 60"
ckpt=$(printf 's00-step%08d' "$k")
[[ -f run/checkpoints/$ckpt/manifest.pb ]] || fail "no checkpoint $ckpt"
[[ $(cat run/checkpoints/latest) == "$ckpt" ]] || fail "latest is not $ckpt"
# every rank the launcher reports on ended with 75, none was killed
grep -q "killed by signal" a.log && fail "a rank was killed instead of stopping"
grep -E "exited with status [0-9]+" a.log | grep -v "exited with status 75" >/dev/null &&
  fail "a rank exited with another status than 75"
grep -q "baton-worker: " a.log && fail "a rank reported an error"
# metrics.jsonl: rank 0's steps 1..k (a line per step), the same in TensorBoard
[[ $(wc -l <run/metrics.jsonl) -eq $k ]] || fail "metrics.jsonl has $(wc -l <run/metrics.jsonl) lines, expected $k"
/usr/bin/python3 "$src/tests/control/read_tb.py" run/tb run/metrics.jsonl | tail -1
# the stop checkpoint resumes onto the uninterrupted run, bitwise
unset BATON_CONTROL_TOKEN
run2 --spec "$work/base.pb" --run-dir run --init run --save-every 0 >b.log
grep -q "started from run at step $k " b.log || fail "did not resume at step $k"
ref=$(losses ref.log | awk -v f="$k" '$1 > f') got=$(losses b.log)
for x in ref got; do # a loss for each step after k in both, so that none found is no match
  n=$(grep -c . <<<"${!x}" || true)
  [[ $n -eq $((steps - k)) ]] || fail "$x: $n losses after step $k, expected $((steps - k))"
done
diff <(echo "$ref") <(echo "$got") || fail "losses after the resume differ from the uninterrupted run"
echo "$case: stopped at step $k ($(sed -En 's/.*stopping at step [0-9]+ \((.*)\).*/\1/p' a.log)), exit $rc, checkpoint $ckpt resumed, steps $((k + 1))-60 bitwise"
