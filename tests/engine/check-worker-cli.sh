#!/usr/bin/env bash
# baton-worker's command line: help, usage errors, specs it cannot run (exit 2, never
# retried), and a short real run (exit 0, loss printed and decreasing).
#   check-worker-cli.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3
work=$(mktemp -d /tmp/baton-test-worker.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
expect() { # STATUS PATTERN -- ARGS...
  local status=$1 pattern=$2 out rc
  shift 3
  out=$("$worker" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: baton-worker $* -> exit $rc (want $status):"
    echo "$out" | tail -n 5
    failures=$((failures + 1))
  else
    echo "ok   baton-worker $* -> $rc"
  fi
}
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1
"$baton" data passkey --output data/passkey128_train --n-docs 50 --length 128 >/dev/null || exit 1
"$baton" spec "$src/recipes/tiny-cpu.yaml" --stage pretrain --out tiny.pb || exit 1
"$baton" spec "$src/tests/engine/precision.yaml" --stage fp32 --out small.pb || exit 1
printf 'not a protobuf\377\377\377' >junk.pb

expect 0 'usage: baton-worker' -- --help
expect 2 'usage: baton-worker' --
expect 2 "unknown option" -- --spec small.pb --frobnicate 3
expect 2 "expects a count, got 'many'" -- --spec small.pb --steps many
expect 2 'missing.pb: cannot open' -- --spec missing.pb
expect 2 'junk.pb: not a StageSpec' -- --spec junk.pb
expect 2 'layout tp2 pp2 cp1 dp1 ep1 is not supported by this worker' -- --spec tiny.pb
expect 0 'step +3/300' -- --spec tiny.pb --single-process --steps 3 --eval-windows 0
expect 0 'valid loss [0-9.]+ ' -- --spec small.pb --steps 30 --log-every 10 --eval-windows 8

# The loss after 30 steps is below the loss after 10.
out=$("$worker" --spec small.pb --steps 30 --log-every 10 --eval-windows 0)
l10=$(sed -En 's/^step +10\/200  loss ([0-9.]*).*/\1/p' <<<"$out")
l30=$(sed -En 's/^step +30\/200  loss ([0-9.]*).*/\1/p' <<<"$out")
if ! awk -v a="$l10" -v b="$l30" 'BEGIN { exit !(a > 0 && b > 0 && b < a) }'; then
  echo "FAIL: loss did not fall: step 10 $l10, step 30 $l30"
  failures=$((failures + 1))
fi
# The same spec and seed give bitwise the same parameters.
"$worker" --spec small.pb --steps 30 --eval-windows 0 --dump-params a.f32 >/dev/null
"$worker" --spec small.pb --steps 30 --eval-windows 0 --dump-params b.f32 >/dev/null
if ! cmp -s a.f32 b.f32 || [[ ! -s a.f32 ]]; then
  echo "FAIL: two runs of the same spec end with different parameters"
  failures=$((failures + 1))
fi
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
