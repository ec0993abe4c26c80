#!/usr/bin/env bash
# What only bf16 products read travels in bf16 (model.h: comm_bf16): sequence
# parallelism's gathers into bf16 GEMMs and, under expert parallelism, the rows dispatched
# to the experts and their output gradients. Those products round their operands to bf16
# anyway, so a run must give the same bits as with every transfer in float32
# (BATON_COMM_BF16=0), in fewer bytes. Cases, on tests/engine/moe.yaml (tp2 x ep2, a
# dense layer every other one): bf16; fp8 with its first and last layers in fp8 too,
# where only the head's gathers may travel in bf16 — a gather into an fp8 product sent in
# bf16 would change its amax and quantization, and so would the experts' rows, which go
# into fp8 products too (their ep bytes stay float32's); fp8 with those layers in bf16,
# recomputed whole (the first layer's experts' rows in bf16).
#   check-comm-bf16.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

sent() { sed -En 's/^\[0\] communication per step, sent by this rank: tp ([0-9]+) .* ep ([0-9]+) bytes/\1 \2/p' "$1"; }

bf16_case() { # NAME SED [ep-same]: ep-same: the experts' rows stay float32
  local name=$1
  layout_wanted "$name" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: 4/; s/tp: 1, pp: 1, ep: 2,/tp: 2, pp: 1, ep: 2,/;
       s/n_layers: 2/n_layers: 4/; s/aux_loss_coef: 0.01/&, every: 2/; $2" \
    "$src/tests/engine/moe.yaml" >"$name.yaml"
  "$baton" spec "$name.yaml" --out "$name.pb"
  for v in 0 1; do
    BATON_COMM_BF16=$v timeout 300 "$baton" launch -n 4 -- "$worker" --spec "$name.pb" \
      --eval-windows 0 --comm-timeout 30 --steps 8 --save-every 0 --run-dir "$name.$v.run" \
      --dump-params "$name.$v.params" >"$name.$v.log"
  done
  local same="8 steps bit-equal"
  if ! cmp -s <(layout_losses "$name.0.log") <(layout_losses "$name.1.log") ||
    ! cmp -s "$name.0.params" "$name.1.params" || [[ -z $(layout_losses "$name.1.log") ]]; then
    same="losses or parameters differ with the bf16 transfers"
    failures=$((failures + 1))
  fi
  read -r tp0 ep0 < <(sent "$name.0.log")
  read -r tp1 ep1 < <(sent "$name.1.log")
  echo "$name: $same; rank 0 sent tp $tp1 (float32: $tp0), ep $ep1 (float32: $ep0) bytes a step"
  if ((tp1 >= tp0)) || { [[ -z ${3:-} ]] && ((ep1 >= ep0)); }; then
    echo "$name: the bf16 transfers did not send fewer bytes"
    failures=$((failures + 1))
  fi
  if [[ -n ${3:-} ]] && ((ep1 != ep0)); then
    echo "$name: the rows to fp8 experts did not all travel in float32"
    failures=$((failures + 1))
  fi
}

bf16_case bf16 "s/^defaults:/defaults:\n  precision: {type: bf16}/"
bf16_case fp8 "s/^defaults:/defaults:\n  precision: {type: fp8, first_last_bf16: false}/" ep-same
# fp8 with the first and last layers in bf16, recomputed whole: their gathers in bf16,
# the others' in float32, the recomputed forward's too
bf16_case fp8-full "s/^defaults:/defaults:\n  precision: {type: fp8}\n  recompute: full/"
layout_finish "the bf16 transfers give the float32 transfers' bits"
