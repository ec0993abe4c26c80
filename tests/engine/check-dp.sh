#!/usr/bin/env bash
# Data-parallel training reproduces the one-process run: for dp2, dp2 + ZeRO-1 and
# dp4 + ZeRO-1 launched by `baton launch`, every step's loss and the final parameters
# agree with `baton-worker --single-process` within 1e-5 relative; ZeRO-1's optimizer
# memory per rank is 1/dp of the one-process figure.
#   check-dp.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
baton=$1 worker=$2 src=$3
only=${4:-} # run only this case (ctest registers each case on its own)
ran=0
# OpenPMIx 4.2 leaks a little in every client; the sanitizer build must not fail on it.
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-dp.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
failures=0

losses() { sed -En 's/^(\[0\] )?step +([0-9]+)\/[0-9]+  loss ([0-9.]+).*/\2 \3/p' "$1"; }
optim_mb() { sed -En 's/.*optimizer ([0-9.]+) MB.*/\1/p' "$1" | head -n 1; }

compare() { # NAME REF_LOG LOG REF_PARAMS PARAMS
  local name=$1
  if ! paste <(losses "$2") <(losses "$3") | awk -v name="$name" '
      { n++; if ($1 != $3) { print name ": step mismatch"; bad = 1 }
        d = $2 - $4; if (d < 0) d = -d
        if (d > 1e-5 * $2) { printf "%s: step %d loss %s vs %s\n", name, $1, $4, $2; bad = 1 } }
      END { if (n != 20) { print name ": " n " steps"; bad = 1 }; exit bad }'; then
    failures=$((failures + 1))
  fi
  if ! /usr/bin/python3 - "$4" "$5" "$name" <<'PY'
import sys
import numpy as np
ref, got = (np.fromfile(p, dtype="<f4").astype(np.float64) for p in sys.argv[1:3])
rel = np.abs(ref - got).max() / np.abs(ref).max() if ref.size == got.size else float("inf")
print(f"{sys.argv[3]}: final parameters max relative difference {rel:.3g}")
sys.exit(0 if rel <= 1e-5 else 1)
PY
  then
    failures=$((failures + 1))
  fi
}

run_case() { # NAME RANKS STAGE
  [[ -z "$only" || "$1" == "$only" ]] || return 0
  ran=$((ran + 1))
  local name=$1 n=$2 stage=$3
  sed "s/gpus_per_node: 2/gpus_per_node: $n/" "$src/tests/engine/dp.yaml" >"dp$n.yaml"
  "$baton" spec "dp$n.yaml" --stage "$stage" --out "$name.pb"
  "$worker" --spec "$name.pb" --single-process --eval-windows 0 --dump-params "$name.ref" \
    >"$name.ref.log"
  timeout 300 "$baton" launch -n "$n" -- "$worker" --spec "$name.pb" --eval-windows 0 \
    --comm-timeout 30 --dump-params "$name.params" >"$name.log"
  compare "$name" "$name.ref.log" "$name.log" "$name.ref" "$name.params"
  echo "$name: optimizer $(optim_mb "$name.log") MB per rank vs $(optim_mb "$name.ref.log") MB in one process"
}

run_case dp2 2 plain
run_case dp2-zero1 2 zero1
run_case dp4-zero1 4 zero1

# ZeRO-1 shards the optimizer state: 1/dp of the one-process memory (up to padding).
for c in "dp2-zero1 2" "dp4-zero1 4"; do
  set -- $c
  [[ -f "$1.log" ]] || continue
  if ! awk -v a="$(optim_mb "$1.log")" -v r="$(optim_mb "$1.ref.log")" -v n="$2" \
      'BEGIN { d = a - r / n; if (d < 0) d = -d; exit !(d <= 0.01 * r / n + 0.01) }'; then
    echo "FAIL: $1 optimizer memory is not 1/$2 of the one-process figure"
    failures=$((failures + 1))
  fi
done
[[ $ran -gt 0 ]] || { echo "FAIL: no case named '$only'"; exit 1; }
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "all data-parallel runs match the one-process run"
