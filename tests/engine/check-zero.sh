#!/usr/bin/env bash
# ZeRO-2 and ZeRO-3 reproduce the one-process run: for dp2 and dp4, tp2 x dp2, with full
# recomputation (ZeRO-3 over dp2 and pp2 x dp2) and selective (ZeRO-2 over dp2), and
# ZeRO-2 over dp2, dp4 and pp2 x dp2 with each layer's gradients reduced during every
# backward (BATON_DP_OVERLAP=1: train_dp_overlap.h's path, synchronous over Gloo), launched
# by `baton launch`, every step's loss and the final parameters (ZeRO-3's shards
# gathered) agree with `baton-worker --single-process` within 1e-5 relative. Without pipeline parallelism also: the bytes
# every rank reports it allocated for parameters, gradients and optimizer state are each
# within 10% of `baton plan --json`'s memory_per_gpu figures, and rank 0's data-parallel
# traffic per step is within 10% of the plan's comm_bytes_per_step.dp.
#   check-zero.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

# The worker's "model state allocated" lines and its dp bytes against the plan.
zero_check_plan() { # NAME STAGE
  "$baton" plan "$1.yaml" --json >"$1.plan.json"
  /usr/bin/python3 - "$1" "$2" "$1.plan.json" "$1.log" <<'PY'
import json, re, sys
name, stage, plan_path, log_path = sys.argv[1:5]
plan = next(s for s in json.load(open(plan_path))["stages"] if s["name"] == stage)
mem = plan["memory_per_gpu"]
pat = re.compile(r"^\[(\d+)\] model state allocated by this rank \(zero \d\): params (\d+) "
                 r"grads (\d+) optimizer (\d+) bytes")
bad, ranks = 0, 0
for line in open(log_path):
    m = pat.match(line)
    if not m:
        continue
    ranks += 1
    got = dict(zip(("params", "grads", "optimizer"), map(float, m.groups()[1:])))
    for k, v in got.items():
        rel = abs(v - mem[k]) / mem[k]
        if m.group(1) == "0" or rel > 0.10:
            print(f"{name}: rank {m.group(1)} {k} allocated {v:.0f} B, plan {mem[k]:.0f} ({rel:.2%})")
        bad |= rel > 0.10
line = next(l for l in open(log_path) if l.startswith("[0] communication per step"))
dp = float(re.search(r" dp (\d+)", line).group(1))
want = plan["comm_bytes_per_step"]["dp"]
rel = abs(dp - want) / want
print(f"{name}: dp measured {dp:.0f} B/step, plan {want:.0f} ({rel:.2%}); {ranks} ranks checked")
sys.exit(1 if bad or rel > 0.10 or ranks == 0 else 0)
PY
}

zero_case() { # NAME RANKS TP PP STAGE
  layout_wanted "$1" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $2/; s/tp: 1, pp: 1,/tp: $3, pp: $4,/" \
    "$src/tests/engine/zero.yaml" >"$1.yaml"
  layout_run "$1" "$2" "$1.yaml" "$5"
  if [[ ${BATON_DP_OVERLAP:-} == 1 ]]; then layout_check_overlap "$1" "$2"; fi
  [[ $4 == 1 ]] || return 0
  zero_check_plan "$1" "$5" || failures=$((failures + 1))
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
# Each rank's chunks reduced to it per layer during every backward (train_dp_overlap.h).
BATON_DP_OVERLAP=1 zero_case dp2-zero2-overlap 2 1 1 zero2
BATON_DP_OVERLAP=1 zero_case dp4-zero2-overlap 4 1 1 zero2
BATON_DP_OVERLAP=1 zero_case pp2-dp2-zero2-overlap 4 1 2 zero2
layout_finish "ZeRO-2 and ZeRO-3 runs match the one-process run and the plan"
