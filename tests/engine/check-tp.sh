#!/usr/bin/env bash
# Tensor-parallel training reproduces the one-process run: for tp2, tp2 x dp2 with
# ZeRO-1 and tp4 over 2 kv heads (each kv head replicated on two ranks), all with sequence
# parallelism (the recipe's default: model_sp.h; tp2 also with full recomputation), and
# tp2 without it, launched by
# `baton launch`, every step's loss and the final parameters (gathered from the tp
# shards into the one-process tensors) agree with `baton-worker --single-process`
# within 1e-5 relative; tp2-dp2-zero1-fp8 in fp8, within fp8's bounds (below).
# tp2-dump-nomem, tp2-pp2-dump-nomem: a rank that cannot allocate
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
# fp8 (every layer's GEMMs, first_last_bf16 off; delayed scaling) under tp2 x dp2 with
# ZeRO-1, the layout of tests/run/run.yaml's fp8 stage. The amaxes are max-reduced over
# tp (each rank sees its shard of a weight, of a row-parallel GEMM's input and of a
# column-parallel one's output gradient) and over dp (its own micro-batches): after step
# 1 every GEMM's amax history and scale equal one process's within 1e-5 relative
# (measured 2.3e-7, the partial sums' rounding; without the tp reduction 9.7e-2, without
# the dp one 3.8e-1, and step 1's loss then 2.8e-5 off). Losses: tp's partial sums round
# differently and fp8 turns that into quantization steps from step 2 on (as in
# check-ep.sh), so the first EARLY steps are compared with the same ranks at dp1 (tp2,
# 8 micro-batches a step: the same sums, ZeRO-1 apart; measured equal to the printed
# digits for 4 steps), all 20 with one process within 1e-3 (measured 3.2e-5), step 1's
# within 1e-6 (equal); the final parameters within 3e-2 of the largest (measured 1.4e-2:
# AdamW turns a tiny gradient's rounding into a whole step; check-ep.sh's bound) and
# 1e-2 in L2 (measured 3.3e-3; 2.6e-2 and 1.9e-2 without the tp or the dp reduction).
tp_fp8_case() { # NAME EARLY
  layout_wanted "$1" || return 0
  local name=$1
  local fp8="s/^defaults:/defaults:\n  precision: {type: fp8, first_last_bf16: false}/"
  sed "s/gpus_per_node: 2/gpus_per_node: 4/; $fp8" "$src/tests/engine/tp.yaml" >"$name.yaml"
  sed "$fp8" "$src/tests/engine/tp.yaml" >"$name.tp2.yaml"
  "$baton" spec "$name.yaml" --stage zero1 --out "$name.pb"
  "$baton" spec "$name.tp2.yaml" --stage zero1 --out "$name.tp2.pb"
  "$worker" --spec "$name.pb" --single-process --eval-windows 0 --save-every 0 \
    --dump-params "$name.ref" >"$name.ref.log"
  # the first step only, for its checkpoint's fp8 states: one process, then the layout
  "$worker" --spec "$name.pb" --single-process --eval-windows 0 --steps 1 \
    --run-dir "$name.one.run" >"$name.one.log"
  timeout 300 "$baton" launch -n 4 -- "$worker" --spec "$name.pb" --eval-windows 0 \
    --comm-timeout 30 --steps 1 --run-dir "$name.one4.run" >"$name.one4.log"
  timeout 300 "$baton" launch -n 4 -- "$worker" --spec "$name.pb" --eval-windows 0 \
    --comm-timeout 30 --save-every 0 --dump-params "$name.params" >"$name.log"
  timeout 300 "$baton" launch -n 2 -- "$worker" --spec "$name.tp2.pb" --eval-windows 0 \
    --comm-timeout 30 --save-every 0 >"$name.tp2.log"
  tp_fp8_states "$name" "$name".{one,one4}.run || failures=$((failures + 1))
  layout_fp8_losses "$name vs tp2" "$name.tp2.log" "$name.log" "$2" || failures=$((failures + 1))
  layout_fp8_losses "$name vs one process" "$name.ref.log" "$name.log" 1 || failures=$((failures + 1))
  layout_compare_params "$name" "$name.ref" "$name.params" 3e-2 1e-2 || failures=$((failures + 1))
  if ! grep -q "^fp8: 8 of 9 GEMMs in fp8" "$name.ref.log" ||
    ! grep -q "^\[0\] fp8 scales calibrated from 4 micro-batch(es): scales in" "$name.log"; then
    echo "$name: the GEMMs did not run in fp8, calibrated"
    failures=$((failures + 1))
  fi
}
tp_fp8_states() { # NAME REF_CKPT CKPT: every fp8 state's amax history and scale alike
  "$baton" ckpt inspect "$2" --json >"$1.states.ref.json"
  "$baton" ckpt inspect "$3" --json >"$1.states.json"
  /usr/bin/python3 - "$1" "$1.states.ref.json" "$1.states.json" <<'PY'
import json, sys
name = sys.argv[1]
a, b = ({s["name"]: s for s in json.load(open(f))["fp8"]} for f in sys.argv[2:4])
worst, where = 0.0, ""
for n, s in a.items():
    t = b.get(n)
    if t is None or t["pos"] != s["pos"] or len(t["amax_history"]) != len(s["amax_history"]):
        print(f"{name}: fp8 state {n} missing or of another shape after step 1"); sys.exit(1)
    for x, y in zip([s["scale"]] + s["amax_history"], [t["scale"]] + t["amax_history"]):
        r = abs(x - y) / abs(x) if x else abs(y)
        if r > worst: worst, where = r, f"{n}: {y} vs {x}"
active = sum(not s["placeholder"] for s in a.values())
print(f"{name}: {active} active fp8 states after step 1, max relative difference {worst:.3g}"
      f" from one process's{' (' + where + ')' if worst > 1e-5 else ''}")
sys.exit(0 if len(a) == len(b) and active > 0 and worst <= 1e-5 else 1)
PY
}
tp_fp8_case tp2-dp2-zero1-fp8 4
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
    ((r == bad)) || grep "^\[$r\] .*$other" >/dev/null "$name.log" || ok=0
  done
  if ((!ok)) || grep -E "allgather|recv:|send:|left the group" >/dev/null "$name.log"; then
    tail -8 "$name.log"
    echo "$name: rank $bad's failed allocation was not a prompt failure of every rank naming it"
    failures=$((failures + 1))
  fi
}
tp_dump_nomem tp2-dump-nomem 2 1 1
tp_dump_nomem tp2-pp2-dump-nomem 4 2 3
layout_finish "all tensor-parallel runs match the one-process run"
