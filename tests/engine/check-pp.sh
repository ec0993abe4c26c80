#!/usr/bin/env bash
# Pipeline-parallel training (1F1B) reproduces the one-process run: for pp2, pp2 with
# full recomputation, pp2 x dp2 with ZeRO-1, pp3 (uneven layers), pp4 (one layer per
# stage, 8 micro-batches), interleaved stages (virtual_stages 2, with 3, 5 and 9
# micro-batches too, not multiples of pp), tp2 x pp2, tp2 x pp2 x dp2 with ZeRO-1, pp2 x dp2 with the
# dp all-reduce during the backward (BATON_DP_OVERLAP=1) and pp4 with the sends waited for
# late (BATON_PP_OVERLAP=1: pipeline.h's communication-queue bookkeeping, over Gloo),
# launched by `baton launch`, every step's loss and the final parameters
# (gathered from the stages, and the tp shards, into the one-process tensors) agree with
# `baton-worker --single-process` within 1e-5 relative.
#   check-pp.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

# An interleaved run's log then: the ranks of the plan's heaviest pipeline stage hold the
# activation slots and received-gradient buffers `baton plan` counts for it.
pp_check_slots() { # NAME STAGE
  "$baton" plan "$1.yaml" --json >"$1.plan.json"
  /usr/bin/python3 - "$1" "$2" "$1.plan.json" "$1.log" <<'PY'
import json, re, sys
name, stage, plan_path, log_path = sys.argv[1:5]
mem = next(s for s in json.load(open(plan_path))["stages"] if s["name"] == stage)["memory_per_gpu"]
want = (mem["activation_slots"], mem["grad_buffers"])
pat = re.compile(r"^\[\d+\] interleaved pipeline: stage (\d+) of .*, (\d+) activation slots, "
                 r"(\d+) received-gradient buffers")
got = {(int(m.group(2)), int(m.group(3))) for l in open(log_path)
       if (m := pat.match(l)) and int(m.group(1)) == mem["heaviest_pp_stage"]}
print(f"{name}: stage {mem['heaviest_pp_stage']}'s slots and gradient buffers {sorted(got)}, "
      f"plan {want}")
sys.exit(0 if got == {want} else 1)
PY
}

pp_case() { # NAME RANKS TP PP STAGE [SED]: STAGE interleaved*: layout_interleaved_recipe's
  layout_wanted "$1" || return 0
  local edit="s/gpus_per_node: 2/gpus_per_node: $2/; s/tp: 1, pp: 2,/tp: $3, pp: $4,/; ${6:-}"
  if [[ $5 == interleaved* ]]; then
    layout_interleaved_recipe "$edit" >"$1.yaml"
  else
    sed "$edit" "$src/tests/engine/pp.yaml" >"$1.yaml"
  fi
  layout_run "$1" "$2" "$1.yaml" "$5"
  if [[ $5 == interleaved* ]]; then pp_check_slots "$1" "$5" || failures=$((failures + 1)); fi
}

pp_case pp2 2 1 2 plain
pp_case pp2-full 2 1 2 full
pp_case pp2-dp2-zero1 4 1 2 zero1
pp_case pp3-uneven 3 1 3 plain # layers 2 + 1 + 1: the remainder goes to stage 0
# parallel.stage_layers: an uneven split chosen by the recipe; each stage's ranks say
# they hold its layers
sl() { echo "s/dp: auto, zero: 0}/dp: auto, zero: 0, stage_layers: [$1]}/"; }
# pp_check_held NAME PATTERN WANT...: for each stage k a rank printed PATTERN, %k standing
# for k, %n for the number of stages and %l for WANT k (the model layers it holds)
pp_check_held() {
  layout_wanted "$1" || return 0
  local name=$1 pat=$2 k=0 want line
  shift 2
  for want in "$@"; do
    line=${pat//%k/$k}
    line=${line//%n/$#}
    line=${line//%l/$want}
    if ! grep -q "$line" "$name.log"; then
      echo "$name: no rank of stage $k reports model layers $want"
      failures=$((failures + 1))
    fi
    k=$((k + 1))
  done
  echo "$name: the stages hold model layers$(printf ' [%s]' "$@")"
}
held="pipeline stage %k of %n: model layers %l (parallel.stage_layers)"
held_v2="interleaved pipeline: stage %k of %n holds 2 chunks of at most .* (model layers %l)"
pp_case pp2-layers13 2 1 2 plain "$(sl "1, 3")"
pp_check_held pp2-layers13 "$held" 0-0 1-3
pp_case pp3-layers112 3 1 3 plain "$(sl "1, 1, 2")"
pp_check_held pp3-layers112 "$held" 0-0 1-1 2-3
pp_case pp2-dp2-zero1-layers31 4 1 2 zero1 "$(sl "3, 1")"
pp_check_held pp2-dp2-zero1-layers31 "$held" 0-2 3-3
# interleaved with uneven chunks (stage_layers lists the pp x v chunks in model order):
# 5 layers over pp2 x v2, which no even split allows, and 6 as 1 + 1 + 3 + 1
vsl() { echo "s/n_layers: 4/n_layers: $1/; s/dp: auto, zero: 0}/dp: auto, zero: 0, virtual_stages: 2, stage_layers: [$2]}/"; }
pp_case pp2-v2-layers2111 2 1 2 interleaved "$(vsl 5 "2, 1, 1, 1")"
pp_check_held pp2-v2-layers2111 "$held_v2" "0 1 3" "2 4"
pp_case pp2-v2-dp2-zero1-layers1131 4 1 2 interleaved-zero1 "$(vsl 6 "1, 1, 3, 1")"
pp_check_held pp2-v2-dp2-zero1-layers1131 "$held_v2" "0 2 3 4" "1 5"
# the head's chunk shorter than its stage's other one (its input at the slot's end),
# evaluated, and recomputed whole
LAYOUT_EVAL=2 pp_case pp2-v2-layers1211 2 1 2 interleaved "$(vsl 5 "1, 2, 1, 1")"
pp_check_held pp2-v2-layers1211 "$held_v2" "0 3" "1 2 4"
pp_case pp2-v2-full-layers1211 2 1 2 interleaved-full "$(vsl 5 "1, 2, 1, 1")"
pp_check_held pp2-v2-full-layers1211 "$held_v2" "0 3" "1 2 4"
pp_case pp4 4 1 4 plain
pp_case tp2-pp2 4 2 2 plain
pp_case tp2-pp2-dp2-zero1 8 2 2 zero1
# zero 0 with each stage's layers all-reduced over dp during the last backward
BATON_DP_OVERLAP=1 BATON_PP_OVERLAP=1 pp_case pp2-dp2-overlap 4 1 2 plain
[[ ! -f pp2-dp2-overlap.log ]] || layout_check_overlap pp2-dp2-overlap 4
[[ ! -f pp2-dp2-overlap.log ]] || layout_check_pp_overlap pp2-dp2-overlap 4
# every stage's sends waited for only before their buffers are written again
BATON_PP_OVERLAP=1 pp_case pp4-overlap 4 1 4 plain
[[ ! -f pp4-overlap.log ]] || layout_check_pp_overlap pp4-overlap 4
# interleaved (virtual_stages 2: pipe_schedule.h): pp2 gives each stage layers {0, 2} or {1, 3}
LAYOUT_EVAL=2 pp_case pp2-v2 2 1 2 interleaved # evaluation goes round the stages twice
pp_case pp2-v2-full 2 1 2 interleaved-full
pp_case pp2-v2-dp2-zero1 4 1 2 interleaved-zero1
pp_case tp2-pp2-v2 4 2 2 interleaved
# pp4 x 2 chunks of 8 layers: stage s holds layers s and s + 4; the last sends to the first
LAYOUT_EVAL=2 pp_case pp4-v2 4 1 4 interleaved "s/n_layers: 4/n_layers: 8/"
# the interleaved schedule's sends waited for only before their buffers are written again
BATON_PP_OVERLAP=1 pp_case pp4-v2-overlap 4 1 4 interleaved "s/n_layers: 4/n_layers: 8/"
[[ ! -f pp4-v2-overlap.log ]] || layout_check_pp_overlap pp4-v2-overlap 4
# micro-batches not a multiple of pp (pipe_schedule.h): groups of pp, the remainder joining
# the last group: 3 (one group), 5 (2 + 3), and pp4 over 9 (4 + 5)
pp_case pp2-v2-m3 2 1 2 interleaved "s/global_batch: 8/global_batch: 3/"
pp_case pp2-v2-m5 2 1 2 interleaved-zero1 "s/global_batch: 8/global_batch: 5/"
pp_case pp4-v2-m9 4 1 4 interleaved "s/n_layers: 4/n_layers: 8/; s/global_batch: 8/global_batch: 9/"
BATON_DP_OVERLAP=1 pp_case pp2-v2-dp2-overlap 4 1 2 interleaved
[[ ! -f pp2-v2-dp2-overlap.log ]] || layout_check_overlap pp2-v2-dp2-overlap 4
layout_finish "all pipeline-parallel runs match the one-process run"
