#!/usr/bin/env bash
# ZeRO-2 and ZeRO-3 reproduce the one-process run: for dp2 and dp4, tp2 x dp2, with full
# recomputation (ZeRO-3 over dp2 and pp2 x dp2), selective (ZeRO-2 over dp2) and ZeRO-2
# under pp2 x dp2 (each unit's gradients reduce-scattered as the backward finishes it,
# model_zero.h's unit buffers, no whole gradient buffer), launched by `baton launch`, every step's loss and the final parameters (ZeRO-3's shards
# gathered) agree with `baton-worker --single-process` within 1e-5 relative. Without pipeline parallelism also: the bytes
# every rank reports it allocated for parameters, gradients and optimizer state are each
# within 10% of `baton plan --json`'s memory_per_gpu figures, and rank 0's data-parallel
# traffic per step is within 10% of the plan's comm_bytes_per_step.dp.
#   check-zero.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

zero_case() { # NAME RANKS TP PP STAGE
  layout_wanted "$1" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $2/; s/tp: 1, pp: 1,/tp: $3, pp: $4,/" \
    "$src/tests/engine/zero.yaml" >"$1.yaml"
  layout_run "$1" "$2" "$1.yaml" "$5"
  if [[ ${BATON_DP_OVERLAP:-} == 1 ]]; then layout_check_overlap "$1" "$2"; fi
  [[ $4 == 1 ]] || return 0
  layout_check_plan "$1" "$5" || failures=$((failures + 1))
}

zero_case dp2-zero2 2 1 1 zero2
zero_case dp2-zero3 2 1 1 zero3
zero_case dp4-zero2 4 1 1 zero2
zero_case dp4-zero3 4 1 1 zero3
zero_case tp2-dp2-zero2 4 2 1 zero2
zero_case tp2-dp2-zero3 4 2 1 zero3
zero_case dp2-zero3-full 2 1 1 zero3-full
zero_case pp2-dp2-zero3-full 4 1 2 zero3-full
zero_case dp2-zero2-selective 2 1 1 zero2-selective
zero_case pp2-dp2-zero2 4 1 2 zero2
layout_finish "ZeRO-2 and ZeRO-3 runs match the one-process run and the plan"
