#!/usr/bin/env bash
# Data-parallel training reproduces the one-process run: for dp2, dp2 + ZeRO-1,
# dp4 + ZeRO-1, and dp2, dp4 with each layer's gradients all-reduced during the last
# backward, dp2 and dp4 + ZeRO-1 with each layer's gradients reduced to the ranks whose
# shards hold them (BATON_DP_OVERLAP=1: train_dp_overlap.h's path, synchronous over Gloo)
# launched by `baton launch`, every step's loss and the final parameters
# agree with `baton-worker --single-process` within 1e-5 relative; ZeRO-1's optimizer
# memory per rank is 1/dp of the one-process figure.
#   check-dp.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

optim_mb() { sed -En 's/.*optimizer ([0-9.]+) MB.*/\1/p' "$1" | head -n 1; }

dp_case() { # NAME RANKS STAGE
  layout_wanted "$1" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $2/" "$src/tests/engine/dp.yaml" >"$1.yaml"
  layout_run "$1" "$2" "$1.yaml" "$3"
  local got ref
  got=$(optim_mb "$1.log") ref=$(optim_mb "$1.ref.log")
  echo "$1: optimizer $got MB per rank vs $ref MB in one process"
  [[ "$3" == zero1 ]] || return 0
  if [[ -z $got || -z $ref ]]; then # no figure found on a side: nothing to compare
    echo "FAIL: $1: no 'optimizer N MB' figure in $1.log or $1.ref.log"
    failures=$((failures + 1))
    return 0
  fi
  # ZeRO-1 shards the optimizer state: 1/dp of the one-process memory (up to padding).
  if ! awk -v a="$got" -v r="$ref" -v n="$2" \
      'BEGIN { d = a - r / n; if (d < 0) d = -d; exit !(d <= 0.01 * r / n + 0.01) }'; then
    echo "FAIL: $1 optimizer memory is not 1/$2 of the one-process figure"
    failures=$((failures + 1))
  fi
}

overlap_case() { # NAME RANKS STAGE: each layer's gradients all-reduced in the backward
  layout_wanted "$1" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $2/" "$src/tests/engine/dp.yaml" >"$1.yaml"
  BATON_DP_OVERLAP=1 layout_run "$1" "$2" "$1.yaml" "$3"
  layout_check_overlap "$1" "$2"
}

dp_case dp2 2 plain
dp_case dp2-zero1 2 zero1
dp_case dp4-zero1 4 zero1
# fp8 (every layer's GEMMs, delayed scaling, calibrated before step 1) under ZeRO-1 over
# dp4: each rank scales its loss gradients by the global batch's micro-batch count, so
# its micro-batches' gradients, amaxes and fp8 values are one process's; the sums over dp
# round differently, which fp8 turns into quantization steps later (layout_fp8_losses:
# the first 5 steps to the printed digits, measured 6; all within 1e-3, measured 1.1e-4;
# the parameters within 2e-2 of the largest, measured 7.5e-3: AdamW turns a tiny
# gradient's rounding into a whole step; the difference's L2 norm within 1e-2 of
# theirs, measured 7.4e-4). With each replica's own count (before) step 2 differed by
# 1.8e-4.
fp8_case() { # NAME RANKS STAGE
  layout_wanted "$1" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $2/;
       s/^defaults:/defaults:\n  precision: {type: fp8, first_last_bf16: false}/" \
    "$src/tests/engine/dp.yaml" >"$1.yaml"
  "$baton" spec "$1.yaml" --stage "$3" --out "$1.pb"
  "$worker" --spec "$1.pb" --single-process --eval-windows 0 --dump-params "$1.ref" >"$1.ref.log"
  timeout 300 "$baton" launch -n "$2" -- "$worker" --spec "$1.pb" --eval-windows 0 \
    --comm-timeout 30 --dump-params "$1.params" >"$1.log"
  layout_fp8_losses "$1" "$1.ref.log" "$1.log" 5 || failures=$((failures + 1))
  layout_compare_params "$1" "$1.ref" "$1.params" 2e-2 1e-2 || failures=$((failures + 1))
  if ! grep -q "^fp8: 8 of 9 GEMMs in fp8" "$1.ref.log" || ! grep -q "fp8 scales calibrated" "$1.log"; then
    echo "$1: the GEMMs did not run in fp8, calibrated"
    failures=$((failures + 1))
  fi
}

fp8_case dp4-zero1-fp8 4 zero1
overlap_case dp2-overlap 2 plain
overlap_case dp4-overlap 4 plain
overlap_case dp2-zero1-overlap 2 zero1 # each unit reduced to its shards' ranks
overlap_case dp4-zero1-overlap 4 zero1
layout_finish "all data-parallel runs match the one-process run"
