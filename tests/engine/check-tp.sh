#!/usr/bin/env bash
# Tensor-parallel training reproduces the one-process run: for tp2, tp2 x dp2 with
# ZeRO-1 and tp4 over 2 kv heads (each kv head replicated on two ranks), all with sequence
# parallelism (the recipe's default: model_sp.h; tp2 also with full recomputation), and
# tp2 without it, launched by
# `baton launch`, every step's loss and the final parameters (gathered from the tp
# shards into the one-process tensors) agree with `baton-worker --single-process`
# within 1e-5 relative. tp2-dump-nomem: a rank that cannot allocate a gather's buffers
# makes every rank fail promptly (below).
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
# --dump-params under tp2 when rank 1 cannot allocate its buffers for a tensor's gather
# (BATON_FAULT_DUMP_NOMEM=tp:1): both ranks vote on them before the allgather and fail at
# once, rank 1 saying it is out of memory and rank 0 that the other failed (none waits
# in an allgather the other never enters).
tp_dump_nomem() { # NAME
  local name=$1 rc=0 t0=$SECONDS
  layout_wanted "$name" || return 0
  "$baton" spec "$src/tests/engine/tp.yaml" --stage plain --out "$name.pb"
  BATON_FAULT_DUMP_NOMEM=tp:1 timeout 120 "$baton" launch -n 2 -- "$worker" --spec "$name.pb" \
    --eval-windows 0 --comm-timeout 60 --steps 2 --dump-params "$name.dumped" >"$name.log" 2>&1 ||
    rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s"
  if [[ $rc == 0 || $rc == 124 ]] || ((SECONDS - t0 >= 50)) ||
    ! grep -q "^\[1\] .*cannot gather the parameters: out of memory for .*'s tp gather" "$name.log" ||
    ! grep -q "^\[0\] .*cannot gather the parameters: another tp rank could not allocate its buffers" "$name.log"; then
    tail -5 "$name.log"
    echo "$name: a rank's failed allocation was not a prompt failure of every rank"
    failures=$((failures + 1))
  fi
}
tp_dump_nomem tp2-dump-nomem
layout_finish "all tensor-parallel runs match the one-process run"
