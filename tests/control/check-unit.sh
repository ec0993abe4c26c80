#!/usr/bin/env bash
# The control channel's server and client in one process (test_control unit), then the
# TensorBoard file it wrote read back by an independent reader against metrics.jsonl.
#   check-unit.sh TEST_CONTROL SOURCE_DIR/tests/control
set -euo pipefail
test_control=$1 here=$2
work=$(mktemp -d /tmp/baton-test-control.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$test_control" unit "$work/run"
# the build each Hello names: compared whole (200 bytes), absent (an older worker)
"$test_control" build "$work/build"
/usr/bin/python3 "$here/read_tb.py" "$work/run/tb" "$work/run/metrics.jsonl"
# The reader must notice damage: one flipped byte in the last record's payload.
cp -r "$work/run/tb" "$work/bad"
f=$(ls "$work"/bad/events.out.tfevents.*)
size=$(stat -c %s "$f")
printf '\x5a' | dd of="$f" bs=1 seek=$((size - 8)) conv=notrunc status=none
if /usr/bin/python3 "$here/read_tb.py" "$work/bad" >/dev/null 2>&1; then
  echo "FAIL: the reader accepted a damaged event file"
  exit 1
fi
echo "control unit: a damaged event file is refused"
# A restart: each step once in metrics.jsonl (the repeated ones from the new attempt, a
# killed writer's torn line gone), and TensorBoard's restart marker where the steps repeat.
"$test_control" replay "$work/replay"
/usr/bin/python3 - "$work/replay/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["global_step"], r["attempt"]) for r in rows]
want = [(100 + s, 0) for s in (1, 2, 3)] + [(100 + s, 1) for s in range(4, 9)]
assert got == want, f"metrics.jsonl (global_step, attempt): {got}, expected {want}"
print("control replay: metrics.jsonl holds steps 101-108 once each, 104-108 from attempt 1")
PY
# valid.jsonl: attempt 0's validation at 106 went with the repeated steps, a torn line with
# the reopening, attempt 1's at 108 is there once
/usr/bin/python3 - "$work/replay/valid.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["global_step"], r["attempt"], r["valid_loss"]) for r in rows]
assert got == [(108, 1, 5.0)], f"valid.jsonl (global_step, attempt, valid_loss): {got}"
print("control replay: valid.jsonl holds attempt 1's validation at 108 once")
PY
/usr/bin/python3 "$here/read_tb.py" "$work/replay/tb" "$work/replay/metrics.jsonl" >"$work/replay.tb"
grep -qx "session_log START 104" "$work/replay.tb" || { cat "$work/replay.tb"; echo "FAIL: no restart marker at step 104"; exit 1; }
[[ $(grep -c "^train/loss " "$work/replay.tb") == 8 ]] || { cat "$work/replay.tb"; echo "FAIL: not 8 loss points"; exit 1; }
[[ $(grep "^valid/loss " "$work/replay.tb") == "valid/loss 108 5.0" ]] ||
  { cat "$work/replay.tb"; echo "FAIL: valid/loss is not 5.0 at 108 alone"; exit 1; }
tail -1 "$work/replay.tb"
# Records told apart by stage and step, never by global step: a stage whose steps count
# from another offset (a recipe edited) drops none of another stage's records, and a
# restart of it drops only its own from the repeated step on. (Its TensorBoard points
# are not read back: under two offsets the same global steps repeat there, which baton
# run avoids by counting a completed stage's steps as the journal has them;
# run.edit-steps-done checks TensorBoard end to end.)
"$test_control" stages "$work/stages"
/usr/bin/python3 - "$work/stages" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
got = [(r["stage"], r["step"], r["attempt"]) for r in rows]
want = ([("a", s, 0) for s in range(1, 11)] + [("b", s, 0) for s in range(1, 5)] +
        [("b", s, 2) for s in range(5, 10)])
assert got == want, f"metrics.jsonl (stage, step, attempt): {got}, expected {want}"
valid = [(r["stage"], r["step"]) for r in map(json.loads, open(sys.argv[1] + "/valid.jsonl"))]
assert valid == [("a", 10)], f"valid.jsonl: {valid}"
print("control stages: a's records and validation kept, b's once each, 5-9 from attempt 2")
PY
# A gap in the middle of metrics.jsonl (a full outbox dropped steps 105-107) filled from
# rank 0's metrics log: each step once, and TensorBoard's restart marker at 105, where the
# steps from the gap on are written again.
"$test_control" gap "$work/gap"
/usr/bin/python3 "$here/read_tb.py" "$work/gap/middle/tb" "$work/gap/middle/metrics.jsonl" >"$work/gap.tb"
grep -qx "session_log START 105" "$work/gap.tb" || { cat "$work/gap.tb"; echo "FAIL: no restart marker at step 105"; exit 1; }
[[ $(grep "^train/loss " "$work/gap.tb" | cut -d' ' -f2 | tr '\n' ' ') == "101 102 103 104 105 106 107 108 109 110 " ]] ||
  { cat "$work/gap.tb"; echo "FAIL: train/loss is not at 101-110 once each"; exit 1; }
echo "control gap: metrics.jsonl and TensorBoard hold steps 101-110 once each"
# A log with holes (steps 104 and 111 and the validation missing from it, metrics.jsonl
# lacking 103): every step and the validation once in TensorBoard too.
/usr/bin/python3 "$here/read_tb.py" "$work/gap/holed/tb" "$work/gap/holed/metrics.jsonl" >"$work/holed.tb"
[[ $(grep "^train/loss " "$work/holed.tb" | cut -d' ' -f2 | tr '\n' ' ') == "101 102 103 104 105 106 107 108 109 110 111 " ]] ||
  { cat "$work/holed.tb"; echo "FAIL: train/loss is not at 101-111 once each"; exit 1; }
[[ $(grep "^valid/loss " "$work/holed.tb") == "valid/loss 111 4.5" ]] ||
  { cat "$work/holed.tb"; echo "FAIL: valid/loss is not 4.5 at 111 alone"; exit 1; }
echo "control gap: a log with holes: metrics.jsonl and TensorBoard hold steps 101-111 once each"
# A dead log's orphans (every step after it) written back one at a time: each step once,
# and the replay's memory does not grow with them.
"$test_control" orphans "$work/orphans"
# A full disk (BATON_FAULT_METRICS_ENOSPC, set by each case): records written whole or
# not at all, held back and written once there is room, a rewind never appending the
# repeated steps after the stale ones (test_control_enospc.c). Every line of metrics.jsonl
# and valid.jsonl parses, and every event record has good CRCs and every step's values
# (but for "edited" and "reopen", where stage b's step sits past a's restart marker, which
# TensorBoard drops as it would in any run).
for case in moment rewind edited reopen torn bound slow quiet; do
  "$test_control" enospc "$work/enospc-$case" "$case"
  /usr/bin/python3 - "$work/enospc-$case" <<'PY'
import json, sys
for name in ("metrics.jsonl", "valid.jsonl"):
    try:
        lines = open(f"{sys.argv[1]}/{name}").read().splitlines()
    except FileNotFoundError:
        continue
    keys = [(r["stage_index"], r["step"]) for r in map(json.loads, lines)]
    assert len(keys) == len(set(keys)), f"{name}: a step twice: {keys}"
PY
  [[ $case == edited || $case == reopen ]] ||
    /usr/bin/python3 "$here/read_tb.py" "$work/enospc-$case/tb" "$work/enospc-$case/metrics.jsonl" >/dev/null
done
echo "control enospc: metrics.jsonl, valid.jsonl and TensorBoard whole after a full disk"
