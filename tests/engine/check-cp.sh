#!/usr/bin/env bash
# Context-parallel training reproduces the one-process run at seq_len 256: ring attention
# over cp2 and cp4 (zigzag split), cp2 with full recomputation, cp2 x dp2 with ZeRO-1, 2
# and 3, cp2 alone with ZeRO-3 (its shards over the cp ranks), Ulysses over cp2 (with
# and without full recomputation), tp2 x cp2, pp2 x cp2 and pp2 x cp2 interleaved (2 chunks
# a stage), launched by `baton launch`: every step's
# loss and the final parameters agree with `baton-worker --single-process` within 1e-5
# relative.
#   check-cp.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

cp_case() { # NAME RANKS TP PP CP STAGE [SED]
  layout_wanted "$1" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $2/; s/tp: 1, pp: 1, cp: 2,/tp: $3, pp: $4, cp: $5,/;
       ${7:-}" "$src/tests/engine/cp.yaml" >"$1.yaml"
  layout_run "$1" "$2" "$1.yaml" "$6"
}

cp_case cp2 2 1 1 2 ring
cp_case cp4 4 1 1 4 ring
cp_case cp2-full 2 1 1 2 ring-full
cp_case cp2-dp2-zero1 4 1 1 2 ring-zero1
cp_case cp2-dp2-zero2 4 1 1 2 ring-zero2
cp_case cp2-dp2-zero3 4 1 1 2 ring-zero3
cp_case cp2-zero3 2 1 1 2 ring-zero3 # dp 1: ZeRO-3 shards over the cp ranks alone
cp_case cp2-ulysses 2 1 1 2 ulysses
cp_case cp2-ulysses-full 2 1 1 2 ulysses-full
cp_case tp2-cp2 4 2 1 2 ring
cp_case pp2-cp2 4 1 2 2 ring
# interleaved: 4 layers, stage s holds layers s and s + 2
cp_case pp2-v2-cp2 4 1 2 2 ring "s/n_layers: 2/n_layers: 4/; s/zero: 0}/zero: 0, virtual_stages: 2}/"
layout_finish "all context-parallel runs match the one-process run"
