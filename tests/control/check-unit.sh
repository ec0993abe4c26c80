#!/usr/bin/env bash
# The control channel's server and client in one process (test_control unit), then the
# TensorBoard file it wrote read back by an independent reader against metrics.jsonl.
#   check-unit.sh TEST_CONTROL SOURCE_DIR/tests/control
set -euo pipefail
test_control=$1 here=$2
work=$(mktemp -d /tmp/baton-test-control.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$test_control" unit "$work/run"
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
