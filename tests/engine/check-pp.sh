#!/usr/bin/env bash
# Pipeline-parallel training (1F1B) reproduces the one-process run: for pp2, pp2 with
# full recomputation, pp2 x dp2 with ZeRO-1, pp3 (uneven layers), pp4 (one layer per
# stage, 8 micro-batches), tp2 x pp2 and tp2 x pp2 x dp2 with ZeRO-1, launched by `baton launch`, every step's loss and the final parameters
# (gathered from the stages, and the tp shards, into the one-process tensors) agree with
# `baton-worker --single-process` within 1e-5 relative.
#   check-pp.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
baton=$1 worker=$2 src=$3
only=${4:-} # run only this case (ctest registers each case on its own)
ran=0
# Under ASan, OpenPMIx's own leaks are suppressed (see that file); ours are not.
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-pp.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
failures=0

losses() { sed -En 's/^(\[0\] )?step +([0-9]+)\/[0-9]+  loss ([0-9.]+).*/\2 \3/p' "$1"; }

compare() { # NAME REF_LOG LOG REF_PARAMS PARAMS
  local name=$1
  if ! paste <(losses "$2") <(losses "$3") | awk -v name="$name" '
      { n++; if ($1 != $3) { print name ": step mismatch"; bad = 1 }
        d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r
        if (d > 1e-5 * $2) { printf "%s: step %d loss %s vs %s\n", name, $1, $4, $2; bad = 1 } }
      END { if (n != 20) { print name ": " n " steps"; bad = 1 }
            printf "%s: %d steps, losses max relative difference %.3g\n", name, n, worst
            exit bad }'; then
    failures=$((failures + 1))
  fi
  if ! /usr/bin/python3 - "$4" "$5" "$name" <<'PY'
import sys
import numpy as np
ref, got = (np.fromfile(p, dtype="<f4").astype(np.float64) for p in sys.argv[1:3])
rel = np.abs(ref - got).max() / np.abs(ref).max() if ref.size == got.size else float("inf")
print(f"{sys.argv[3]}: final parameters ({got.size} of {ref.size}) max relative difference {rel:.3g}")
sys.exit(0 if rel <= 1e-5 else 1)
PY
  then
    failures=$((failures + 1))
  fi
}

run_case() { # NAME RANKS TP PP STAGE
  [[ -z "$only" || "$1" == "$only" ]] || return 0
  ran=$((ran + 1))
  local name=$1 n=$2 tp=$3 pp=$4 stage=$5
  sed "s/gpus_per_node: 2/gpus_per_node: $n/; s/tp: 1, pp: 2,/tp: $tp, pp: $pp,/" \
    "$src/tests/engine/pp.yaml" >"$name.yaml"
  "$baton" spec "$name.yaml" --stage "$stage" --out "$name.pb"
  "$worker" --spec "$name.pb" --single-process --eval-windows 0 --dump-params "$name.ref" \
    >"$name.ref.log"
  timeout 300 "$baton" launch -n "$n" -- "$worker" --spec "$name.pb" --eval-windows 0 \
    --comm-timeout 30 --dump-params "$name.params" >"$name.log"
  compare "$name" "$name.ref.log" "$name.log" "$name.ref" "$name.params"
}

run_case pp2 2 1 2 plain
run_case pp2-full 2 1 2 full
run_case pp2-dp2-zero1 4 1 2 zero1
run_case pp3-uneven 3 1 3 plain # layers 2 + 1 + 1: the remainder goes to stage 0
run_case pp4 4 1 4 plain
run_case tp2-pp2 4 2 2 plain
run_case tp2-pp2-dp2-zero1 8 2 2 zero1

[[ $ran -gt 0 ]] || { echo "FAIL: no case named '$only'"; exit 1; }
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all pipeline-parallel runs match the one-process run"
