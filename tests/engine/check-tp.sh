#!/usr/bin/env bash
# Tensor-parallel training reproduces the one-process run: for tp2, tp2 x dp2 with
# ZeRO-1 and tp4 over 2 kv heads (each kv head replicated on two ranks), all with sequence
# parallelism (the recipe's default: model_sp.h; tp2 also with full recomputation), and
# tp2 without it, launched by
# `baton launch`, every step's loss and the final parameters (gathered from the tp
# shards into the one-process tensors) agree with `baton-worker --single-process`
# within 1e-5 relative.
#   check-tp.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

tp_case() { # NAME RANKS TP STAGE
  layout_wanted "$1" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $2/; s/tp: 2,/tp: $3,/" "$src/tests/engine/tp.yaml" \
    >"$1.yaml"
  layout_run "$1" "$2" "$1.yaml" "$4"
}

tp_case tp2 2 2 plain
tp_case tp2-dp2-zero1 4 2 zero1
tp_case tp4-kv2 4 4 plain
tp_case tp2-no-sp 2 2 no-sp
tp_case tp2-full 2 2 full
layout_finish "all tensor-parallel runs match the one-process run"
