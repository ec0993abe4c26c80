#!/usr/bin/env bash
# Tensor-parallel training reproduces the one-process run: for tp2, tp2 x dp2 with
# ZeRO-1 and tp4 over 2 kv heads (each kv head replicated on two ranks), all with sequence
# parallelism (the recipe's default: model_sp.h; tp2 also with full recomputation), and
# tp2 without it, launched by
# `baton launch`, every step's loss and the final parameters (gathered from the tp
# shards into the one-process tensors) agree with `baton-worker --single-process`
# within 1e-5 relative. tp2-dump-nomem, tp2-pp2-dump-nomem: a rank that cannot allocate
# a gather's buffers makes every rank fail promptly (below).
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
# --dump-params when world rank BAD cannot allocate its buffers for the tp gather
# (BATON_FAULT_DUMP_NOMEM=tp:BAD): every rank allocates all the dump's buffers (the tp
# gather's sized for the largest tensor) and votes on them over world before any
# collective, so all fail at once: BAD saying it is out of memory, every other rank that
# rank BAD could not allocate its buffers (none waits in, or fails in, a tp allgather or
# pp send/recv the failed rank never enters). tp2: rank 1 of the one tp group; tp2-pp2:
# rank 3 only, so that the other tp group (pp stage 0) is not failing on its own.
tp_dump_nomem() { # NAME RANKS PP BAD
  local name=$1 n=$2 bad=$4 rc=0 t0=$SECONDS r
  layout_wanted "$name" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $n/; s/tp: 2,/tp: 2, pp: $3,/" \
    "$src/tests/engine/tp.yaml" >"$name.yaml"
  "$baton" spec "$name.yaml" --stage plain --out "$name.pb"
  BATON_FAULT_DUMP_NOMEM=tp:$bad timeout 120 "$baton" launch -n "$n" -- "$worker" \
    --spec "$name.pb" --eval-windows 0 --comm-timeout 60 --steps 2 --dump-params "$name.dumped" \
    >"$name.log" 2>&1 || rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s"
  local ok=1
  [[ $rc != 0 && $rc != 124 ]] && ((SECONDS - t0 < 50)) || ok=0
  grep -q "^\[$bad\] .*cannot gather the parameters: out of memory for the tp gather" \
    "$name.log" || ok=0
  local other="cannot gather the parameters: rank $bad could not allocate its buffers for the gather"
  for ((r = 0; r < n; r++)); do
    ((r == bad)) || grep -q "^\[$r\] .*$other" "$name.log" || ok=0
  done
  if ((!ok)) || grep -Eq "allgather|recv:|send:|left the group" "$name.log"; then
    tail -8 "$name.log"
    echo "$name: rank $bad's failed allocation was not a prompt failure of every rank naming it"
    failures=$((failures + 1))
  fi
}
tp_dump_nomem tp2-dump-nomem 2 1 1
tp_dump_nomem tp2-pp2-dump-nomem 4 2 3
layout_finish "all tensor-parallel runs match the one-process run"
