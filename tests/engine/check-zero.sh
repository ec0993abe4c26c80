#!/usr/bin/env bash
# ZeRO-2 and ZeRO-3 reproduce the one-process run: for dp2 and dp4, tp2 x dp2, with full
# recomputation (ZeRO-3 over dp2 and pp2 x dp2), selective (ZeRO-2 over dp2), ZeRO-2
# under pp2 x dp2 (each unit's gradients reduce-scattered as the backward finishes it,
# model_zero.h's unit buffers, no whole gradient buffer) and ZeRO-2/3 under an interleaved
# pp2 x dp2 (ZeRO-3 with 5 micro-batches a step too), launched by `baton launch`, every step's loss and the final parameters
# (ZeRO-3's shards gathered) agree with `baton-worker --single-process` within 1e-5
# relative. Also: the bytes every rank reports it allocated for parameters, gradients and
# optimizer state are each within 10% of `baton plan --json`'s memory_per_gpu figures
# (under pp the largest rank's, the plan giving its heaviest stage's), and rank 0's
# data-parallel traffic per step is within 10% of the plan's comm_bytes_per_step.dp.
#   check-zero.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

# STAGE zeroN-v2: zero.yaml's model under an interleaved pipeline (virtual_stages 2),
# in a stage of its own (zero.yaml's pp1 cases could not validate it).
zero_case() { # NAME RANKS TP PP STAGE [SED]: SED edits the recipe further
  layout_wanted "$1" || return 0
  local edit="s/gpus_per_node: 2/gpus_per_node: $2/; s/tp: 1, pp: 1,/tp: $3, pp: $4,/; ${6:-}"
  if [[ $5 == *-v2* ]]; then
    { sed '/^stages:/q' "$src/tests/engine/zero.yaml" | sed "$edit"
      echo "  - {name: $5, parallel: {virtual_stages: 2, zero: ${5:4:1}}$([[ $5 == *full ]] && echo ', recompute: full')}"
    } >"$1.yaml"
  else
    sed "$edit" "$src/tests/engine/zero.yaml" >"$1.yaml"
  fi
  layout_run "$1" "$2" "$1.yaml" "$5"
  # under pp the stages differ: the plan's figures are its heaviest stage's
  layout_check_plan "$1" "$5" "$([[ $4 == 1 ]] || echo heaviest)" || failures=$((failures + 1))
}

zero_case dp2-zero2 2 1 1 zero2
zero_case dp2-zero3 2 1 1 zero3
zero_case dp4-zero2 4 1 1 zero2
zero_case dp4-zero3 4 1 1 zero3
zero_case tp2-dp2-zero2 4 2 1 zero2
zero_case tp2-dp2-zero3 4 2 1 zero3
# tp4 over 2 kv heads: each kv head's k/v slices on two ranks, their gradient shards summed
zero_case tp4-kv2-dp2-zero2 8 4 1 zero2
zero_case tp4-kv2-dp2-zero3 8 4 1 zero3
zero_case dp2-zero3-full 2 1 1 zero3-full
zero_case pp2-dp2-zero3-full 4 1 2 zero3-full
zero_case dp2-zero2-selective 2 1 1 zero2-selective
zero_case pp2-dp2-zero2 4 1 2 zero2
# an uneven split (parallel.stage_layers), the heavier stage last: the plan's figures
# are its ranks'
zero_case pp2-dp2-zero3-layers13 4 1 2 zero3 "s/zero: 2}/zero: 2, stage_layers: [1, 3]}/"
# interleaved with uneven chunks: 5 layers as 2 + 1 + 1 + 1 over pp2 x v2
zero_case pp2-v2-dp2-zero3-layers2111 4 1 2 zero3-v2 "s/n_layers: 4/n_layers: 5/;
  s/zero: 2}/zero: 2, virtual_stages: 2, stage_layers: [2, 1, 1, 1]}/"
# interleaved: each chunk's units gathered / reduce-scattered as its passes reach them
zero_case pp2-v2-dp2-zero2 4 1 2 zero2-v2
zero_case pp2-v2-dp2-zero3 4 1 2 zero3-v2
zero_case pp2-v2-dp2-zero3-full 4 1 2 zero3-v2-full
# 5 micro-batches a step over pp2 (groups of 2 and 3): the plan replays the same order
zero_case pp2-v2-dp2-zero3-m5 4 1 2 zero3-v2 "s/global_batch: 8/global_batch: 10/"
layout_finish "ZeRO-2 and ZeRO-3 runs match the one-process run and the plan"
