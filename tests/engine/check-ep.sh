#!/usr/bin/env bash
# Expert parallelism reproduces the one-process MoE run: for ep2 (dp2), ep4 (dp4, one
# expert per rank), ep2 over dp4 (two copies of each expert: the expert-data-parallel
# reduction) and ep2 x tp2, with the Switch aux loss; ep2 with capacity factor 1.0 (tokens
# dropped), ep2 with aux-loss-free bias balancing, MoE under pp2 and ep2 with full
# recomputation, ep2, ep2 over dp4 and ep2 x tp2 with ZeRO-1 (the dense tensors' optimizer
# state sharded over dp, the experts' over edp, with sequence parallelism drawn from
# tp x dp: tp2 x dp2 too, and resumed; ep drawn from the tp ranks (ep2 over tp2, ep4 over
# tp4 and over tp2 x dp2, with ZeRO-1, the dp overlap, resumed under the same layout and
# under ep2); every rank's memory and rank 0's dp
# traffic within 10% of the plan's; resumed from its checkpoint under the same layout and
# under zero 0), ep2 over dp2 and dp4 (zero 0 and 1) with each layer's gradients reduced
# during the backward (BATON_DP_OVERLAP=1), ep2 over dp4 and dp2 with ZeRO-2 and ZeRO-3
# (MoE units sharded over the expert-data-parallel group), MoE under context parallelism
# and under interleaved pipelines, launched by `baton launch`: every
# step's loss agrees with `baton-worker --single-process` within 1e-5 relative, the dropped
# (token, expert) pairs of every step are exactly the one-process counts, and the final
# checkpoint (each expert written by its owner) loaded into one process gives the
# one-process parameters within 1e-5, as does the layout's own final dump (`--dump-params`,
# each expert gathered from its ep rank). In fp8, resumed bitwise (the scaling states too),
# also from the checkpoint rewritten as format 1 saved it, and, without the experts'
# states, those calibrated and the loaded ones kept (tests/ckpt/ckpt_edit.c rewrites it;
# BATON_CKPT_EDIT, else next to BATON's directory: ../tests/ckpt_edit). --dump-params
# under ep2 with one rank's gather buffer not allocated fails every rank at once.
#   check-ep.sh BATON BATON_WORKER SOURCE_DIR [CASE]
set -euo pipefail
source "$(dirname "$0")/layout-lib.sh"
layout_setup "$@"

dropped() { sed -En 's/^(\[0\] )?step +([0-9]+)\/.* dropped ([0-9]+).*/\2 \3/p' "$1"; }
# ep_check_dropped NAME CAPPED: NAME.log's (token, expert) pairs dropped per step are the
# one-process run's, with a count for each of the 20 steps on both sides (none found is no
# match); CAPPED 1 (a capacity factor): some were dropped.
ep_check_dropped() {
  local ref got total
  ref=$(dropped "$1.ref.log") got=$(dropped "$1.log")
  total=$(awk '{s += $2} END {print s + 0}' <<<"$got")
  echo "$1: dropped pairs per step as one process ($total in all)"
  if [[ $(grep -c . <<<"$ref") -ne 20 || $(grep -c . <<<"$got") -ne 20 ]]; then
    echo "$1: expected the dropped count of each of 20 steps in $1.ref.log and $1.log"
    return 1
  fi
  [[ $ref == "$got" ]] || { echo "$1: dropped pairs differ from the one-process run"; return 1; }
  if [[ $2 == 1 ]] && ((total == 0)); then
    echo "$1: a capacity factor, yet no pair was dropped"
    return 1
  fi
}

# The experts' row buffers start with room for N K rows (moe_dev.h) and grow when a
# forward receives more: ep4 (one expert a rank, up to N ep rows) must have grown them on
# some rank, and still equal the one-process run.
ep_check_room() { # NAME
  local most
  most=$(sed -En 's/.*MoE: room for [0-9]+ rows .* received: ([0-9]+)\)/\1/p' "$1.log" | sort -n | tail -1)
  echo "$1: the most rows a forward brought to a rank's experts: ${most:-none} (N K = 128 reserved at first)"
  if [[ -z $most ]] || ((most <= 128)); then
    echo "$1: the experts' row buffers never grew"
    failures=$((failures + 1))
  fi
}

# The MoE layers' caches each rank of the plan's heaviest pipeline stage allocated equal
# `baton plan`'s moe_cache_bytes (none printed: none allocated).
ep_check_caches() { # NAME
  "$baton" plan "$1.yaml" --json >"$1.plan.json"
  /usr/bin/python3 - "$1" "$1.plan.json" "$1.log" <<'PY'
import json, re, sys
name, plan_path, log_path = sys.argv[1:4]
mem = json.load(open(plan_path))["stages"][0]["memory_per_gpu"]
want, stage = mem["moe_cache_bytes"], mem["heaviest_pp_stage"]
pat = re.compile(r"^\[\d+\] MoE caches allocated by this rank: (\d+) bytes \(pipeline stage (\d+)\)")
got = [int(m.group(1)) for l in open(log_path) if (m := pat.match(l)) and int(m.group(2)) == stage]
ok = set(got) == {want} if want else not got
print(f"{name}: MoE caches on stage {stage}'s ranks {sorted(set(got)) or 'none'} bytes, plan {want:.0f}")
sys.exit(0 if ok else 1)
PY
}

ep_case() { # NAME RANKS TP EP BALANCE [SED]: SED edits the recipe further
  local name=$1 n=$2
  layout_wanted "$name" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $n/; s/tp: 1, pp: 1, ep: 2,/tp: $3, pp: 1, ep: $4,/;
       s/balance: aux_loss, aux_loss_coef: 0.01/$5/; ${6:-}" "$src/tests/engine/moe.yaml" \
    >"$name.yaml"
  "$baton" spec "$name.yaml" --out "$name.pb"
  "$worker" --spec "$name.pb" --single-process --eval-windows 0 --dump-params "$name.ref" \
    >"$name.ref.log"
  timeout 300 "$baton" launch -n "$n" -- "$worker" --spec "$name.pb" --eval-windows 0 \
    --comm-timeout 30 --run-dir "$name.run" --dump-params "$name.dumped" >"$name.log"
  layout_compare_losses "$name" "$name.ref.log" "$name.log" || failures=$((failures + 1))
  # the layout's own dump: every expert gathered from its ep rank, at its place
  layout_compare_params "$name (--dump-params)" "$name.ref" "$name.dumped" ||
    failures=$((failures + 1))
  ep_check_dropped "$name" "$([[ $5 == *capacity_factor* ]] && echo 1)" || failures=$((failures + 1))
  "$worker" --spec "$name.pb" --single-process --eval-windows 0 --dump-params "$name.params" \
    --init "$name.run/checkpoints/s00-step00000020" >"$name.reload.log"
  layout_compare_params "$name" "$name.ref" "$name.params" || failures=$((failures + 1))
  if [[ ${BATON_DP_OVERLAP:-} == 1 ]]; then layout_check_overlap "$name" "$n"; fi
  if [[ $name == ep4 ]]; then ep_check_room "$name"; fi
  ep_check_caches "$name" || failures=$((failures + 1))
  if [[ $name == moe-pp2-dense0 ]] && grep -q "MoE caches .*(pipeline stage 0)" "$name.log"; then
    echo "$name: stage 0, all dense layers, allocated MoE caches"
    failures=$((failures + 1))
  fi
  if [[ $name == *-zero[123]* ]]; then
    layout_check_plan "$name" train "$([[ $name == *-v2-* ]] && echo heaviest)" ||
      failures=$((failures + 1))
  fi
}

aux="balance: aux_loss, aux_loss_coef: 0.01"
ep_case ep2 2 1 2 "$aux"
ep_case ep4 4 1 4 "$aux"
ep_case ep2-dp4 4 1 2 "$aux"
ep_case ep2-tp2 4 2 2 "$aux"
ep_case ep2-capacity 2 1 2 "$aux, capacity_factor: 1.0"
# MoE every other layer of four: only the MoE layers hold caches (as the plan counts)
ep_case ep2-every2 2 1 2 "$aux, every: 2" "s/n_layers: 2/n_layers: 4/"
ep_case ep2-bias 2 1 2 "balance: bias, bias_update_rate: 0.01"
# MoE layers under a pipeline (their caches per micro-batch slot) and recomputed whole.
ep_case moe-pp2 2 1 1 "$aux" "s/pp: 1, ep: 1,/pp: 2, ep: 1,/"
# the first two of four layers dense: stage 0 holds no MoE layer and no MoE caches
ep_case moe-pp2-dense0 2 1 1 "$aux, first_dense_layers: 2" \
  "s/pp: 1, ep: 1,/pp: 2, ep: 1,/; s/n_layers: 2/n_layers: 4/"
ep_case ep2-full 2 1 2 "$aux" "s/  micro_batch: 1/  micro_batch: 1\n  recompute: full/"
# fp8 experts: each expert weight's product with its own delayed scaling, its amaxes
# reduced over the expert's holders (ep2 x dp4: the edp pair; tp2 x ep2 folded: the
# holders drawn from tp x dp; ZeRO-2, which does not fold: the tp pair, then the edp
# pair), the state saved by global expert (reloaded by one process from the layout's
# checkpoint, which needs every expert's). Every rank scales its loss gradients by the
# global batch's micro-batch count and the first step runs with calibrated scales, so
# without tp each micro-batch's gradients, amaxes and fp8 values are one process's: the
# reference is the one-process run. Under tp the GEMMs' partial sums round differently
# and fp8 turns that into quantization steps from step 2 on (1.3e-5 against one
# process), as large as a missing amax reduction: the reference is then the same ranks
# with every expert on every rank (ep 1; ZeRO-2's: the fold's), whose GEMMs sum alike.
# The first 3 steps' losses must agree to the printed digits (without the holders' amax
# reduction step 2 differs by 1.3e-5; with a replica's own micro-batch count, as before,
# by 1.8e-4), all 20 within 1e-3 (measured: 6.1e-5 without tp, steps 1-7 equal; up to
# 1.6e-4 with it) and the final parameters within 1e-2 of the largest (measured: 2.8e-3
# without tp, 1.3e-3 .. 3.3e-3 with it; AdamW turns a tiny gradient's rounding into a
# whole step), their difference's L2 norm within 1e-2 of theirs (measured: 7.8e-4
# without tp, 9.4e-4 with it). ep2-dp4-fp8's largest within 3e-2: the dp4 sum's order
# decides where the run parts from one process's. Over Gloo (its ring's order) the losses
# stay equal to step 6 and the largest difference is 1.1e-3 (L2 7.2e-4); in shared memory
# (comm_shm.h, members in rank order) they part at step 3 (5.6e-7) and it is 1.25e-2
# (L2 6.3e-3, 2,914 of 183,104 parameters more than 1e-3 apart); a one-process reference
# whose OpenBLAS ran 2 threads moved it as far (1.3e-2): fp8's chaos, no wrong sum. ZeRO-2 within 3e-2 of both: it reduces each micro-batch's
# gradients before summing them (train_zero.h), another order of float additions, so
# its fp8 losses part from step 4 on (ZeRO-1's stay equal, parameters within 1e-6); the
# difference measured 3.8e-3 .. 4.0e-3 (L2) on one CPU, 9.4e-3 (L2) and 1.26e-2 (largest)
# on an AMD EPYC, whose OpenBLAS kernels round differently.
fp8p="s/^defaults:/defaults:\n  precision: {type: fp8, first_last_bf16: false}/"
ep_fp8_run() { # NAME RANKS: launched, its checkpoint reloaded into one process
  "$baton" spec "$1.yaml" --out "$1.pb"
  timeout 300 "$baton" launch -n "$2" -- "$worker" --spec "$1.pb" --eval-windows 0 \
    --comm-timeout 30 --run-dir "$1.run" >"$1.log"
  "$worker" --spec "$1.pb" --single-process --eval-windows 0 --dump-params "$1.params" \
    --init "$1.run/checkpoints/s00-step00000020" >"$1.reload.log"
}
ep_fp8_case() { # NAME RANKS TP EP [SED [REF_SED [TOL [L2_TOL]]]]: REF_SED makes the tp reference (ep 1)
  local name=$1 n=$2
  layout_wanted "$name" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: $n/; s/tp: 1, pp: 1, ep: 2,/tp: $3, pp: 1, ep: $4,/;
       $fp8p; ${5:-}" \
    "$src/tests/engine/moe.yaml" >"$name.yaml"
  ep_fp8_run "$name" "$n"
  if (($3 == 1)); then
    "$worker" --spec "$name.pb" --single-process --eval-windows 0 --dump-params "$name.ref.params" \
      >"$name.ref.log"
  else
    sed "${6:-s/ep: $4,/ep: 1,/}" "$name.yaml" >"$name.ref.yaml"
    ep_fp8_run "$name.ref" "$n"
  fi
  layout_fp8_losses "$name" "$name.ref.log" "$name.log" 3 || failures=$((failures + 1))
  layout_compare_params "$name" "$name.ref.params" "$name.params" "${7:-1e-2}" "${8:-${7:-1e-2}}" ||
    failures=$((failures + 1))
  if ! grep -Eq "fp8: ([0-9]+) of \1 expert weight products in fp8" "$name.log"; then
    echo "$name: the experts' products did not run in fp8"
    failures=$((failures + 1))
  fi
}
ep_fp8_case ep2-dp4-fp8 4 1 2 "" "" 3e-2 1e-2
ep_fp8_case ep2-tp2-fp8 4 2 2
# ZeRO-2 does not fold: each tp rank runs its rows through its experts, which its tp peer
# holds too (the tp max, then the holders' among dp: none under ep2 here, both dp ranks
# with ep 1); the reference is the fold's (ZeRO-0) holders
ep_fp8_case ep2-tp2-zero2-fp8 4 2 2 "s/zero: 0/zero: 2/" "s/zero: 2/zero: 0/" 3e-2
ep_fp8_case moe-tp2-dp2-zero2-fp8 4 2 1 "s/zero: 0/zero: 2/" "s/zero: 2/zero: 0/" 3e-2
cap="$aux, capacity_factor: 1.0"
# ep 1 over dp2: every dp rank holds every expert (rank 0 saves them); with ZeRO-2 the
# experts' gradients go through the unit buffers with the rest, with ZeRO-3 their weights
# too (recomputed whole), and the bias of aux-loss-free balancing is nudged in the shards
# (also under pp2).
ep_case moe-dp2 2 1 1 "$aux"
ep_case moe-dp2-zero2 2 1 1 "$cap" "s/zero: 0/zero: 2/"
ep_case moe-dp2-zero3-full 2 1 1 "$cap" "s/zero: 0/zero: 3/; s/  global_batch: 8/&\n  recompute: full/"
ep_case moe-dp2-zero3-bias 2 1 1 "balance: bias, bias_update_rate: 0.01" "s/zero: 0/zero: 3/"
ep_case moe-pp2-dp2-zero3-bias 4 1 1 "balance: bias, bias_update_rate: 0.01" \
  "s/zero: 0/zero: 3/; s/pp: 1, ep: 1,/pp: 2, ep: 1,/"
# ZeRO-2/3 under ep: each MoE layer's unit sharded over the expert-data-parallel group
# (ep2 over dp4: 2 ranks; ep2 over dp2: one, the unit whole), its dense part all-reduced
# over ep; with full recomputation and with the bias of aux-loss-free balancing nudged in
# the shards.
ep_case ep2-dp4-zero2 4 1 2 "$cap" "s/zero: 0/zero: 2/"
ep_case ep2-dp4-zero3 4 1 2 "$cap" "s/zero: 0/zero: 3/"
ep_case ep2-zero3 2 1 2 "$aux" "s/zero: 0/zero: 3/"
ep_case ep2-zero2 2 1 2 "$aux" "s/zero: 0/zero: 2/"
ep_case ep2-dp4-zero3-full 4 1 2 "$cap" "s/zero: 0/zero: 3/; s/  global_batch: 8/&\n  recompute: full/"
ep_case ep2-dp4-zero3-bias 4 1 2 "balance: bias, bias_update_rate: 0.01" "s/zero: 0/zero: 3/"
# An interleaved pipeline (pp2 x 2 chunks of 4 layers), alone with bias balancing and with
# ep2 over dp2: the checkpoint's layers come from both stages in turn.
vp="s/n_layers: 2/n_layers: 4/; s/pp: 1, ep: \([12]\),/pp: 2, ep: \\1,/; s/zero: 0}/zero: 0, virtual_stages: 2}/"
ep_case moe-pp2-v2-bias 2 1 1 "balance: bias, bias_update_rate: 0.01" "$vp"
ep_case ep2-pp2-v2 4 1 2 "$cap" "$vp"
# MoE every other layer: stage 0 holds layers 0 and 2 (both MoE), stage 1 layers 1 and 3
# (dense); each rank's allocations as the plan's (ZeRO-1 over dp2).
ep_case moe-pp2-v2-dp2-zero1 4 1 1 "$aux, every: 2" "$vp; s/zero: 0,/zero: 1,/"
# uneven chunks (parallel.stage_layers): 5 layers as 1 + 1 + 2 + 1, MoE every other one
ep_case moe-pp2-v2-layers1121 2 1 1 "$aux, every: 2" "s/n_layers: 2/n_layers: 5/;
  s/pp: 1, ep: 1,/pp: 2, ep: 1,/; s/zero: 0}/zero: 0, virtual_stages: 2, stage_layers: [1, 1, 2, 1]}/"
# Context parallelism: each rank routes its two chunks of every sequence, yet the aux loss
# and the capacity count the whole sequence as one process does (two sequences per
# micro-batch, so the chunks' order crosses sequences); alone, with ep taking its ranks
# from cp (also with ZeRO-1), over dp2 with ep2, and recomputed whole.
cp2="s/ep: [0-9], dp: auto/&, cp: 2/; s/  micro_batch: 1/  micro_batch: 2/"
ep_case moe-cp2 2 1 1 "$cap" "$cp2"
ep_case ep2-cp2 2 1 2 "$cap" "$cp2"
ep_case ep2-cp2-zero1 2 1 2 "$cap" "$cp2; s/zero: 0/zero: 1/"
ep_case ep2-cp2-dp2 4 1 2 "$cap" "$cp2"
ep_case moe-cp2-full 2 1 1 "$cap" "$cp2; s/  global_batch: 8/  global_batch: 8\n  recompute: full/"
# Sequence parallelism: each tp rank runs the MoE block on its own rows (a contiguous run
# of its cp rank's), yet the capacity and the aux loss count the whole sequences: tp2
# (each rank half a sequence), tp4 (a quarter: the first chunk's pairs on two ranks),
# tp2 x cp2 with two sequences per micro-batch (each tp rank one sequence's two chunks),
# ep2 x tp2 with ZeRO-3 (the MoE parts of the shards summed over tp), with bias balancing
# recomputed whole, and on sequences of odd length.
ep_case moe-tp2 2 2 1 "$cap"
ep_case moe-tp4 4 4 1 "$cap"
ep_case moe-tp2-cp2 4 2 1 "$cap" "$cp2"
ep_case ep2-tp2-zero3 4 2 2 "$cap" "s/zero: 0/zero: 3/"
ep_case moe-tp2-bias-full 2 2 1 "balance: bias, bias_update_rate: 0.01" \
  "s/  global_batch: 8/&\n  recompute: full/"
# tp3 on sequences of 63 tokens, 21 rows a rank: without cp the rows' order is the
# tokens', whatever the sequences' length
ep_case moe-tp3-odd 3 3 1 "$cap" "s/  seq_len: 64/  seq_len: 63/;
  s/dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2/dim: 96, n_layers: 2, n_heads: 3, n_kv_heads: 3/;
  s/vocab_size: 272/vocab_size: 273/; s/ffn_dim: 176/ffn_dim: 192/"
# ZeRO-1: dense tensors sharded over dp, experts over edp (ep2-dp4: edp 2; ep2: none),
# drawn from tp x dp with sequence parallelism (ep2-tp2: the ep group is the tp group,
# edp the dp one).
z1="s/zero: 0/zero: 1/"
ep_case ep2-zero1 2 1 2 "$aux" "$z1"
ep_case ep2-dp4-zero1 4 1 2 "$aux" "$z1"
ep_case ep2-tp2-zero1 4 2 2 "$aux" "$z1"
# The tp ranks folded into the experts' data parallelism (sequence parallelism, zero 0/1:
# stages/layout.h's layout_fold_tp_experts): tp2 x dp2 without ep shards the experts'
# optimizer state over all 4 ranks (the plan's optimizer figure holds every rank to it)
# and reduces their gradients over tp x dp in one collective, during the backward too.
ep_case moe-tp2-dp2-zero1 4 2 1 "$aux" "$z1"
BATON_DP_OVERLAP=1 ep_case moe-tp2-dp2-zero1-overlap 4 2 1 "$aux" "$z1"
BATON_DP_OVERLAP=1 ep_case moe-tp2-dp2-overlap 4 2 1 "$aux"
# ep drawn from the tp ranks (the fold: the expert view over tp x cp x dp, ep fastest)
ep_case ep2-over-tp2 2 2 2 "$aux"
ep_case ep4-over-tp4 4 4 4 "$cap"
ep_case ep4-over-tp2-dp2 4 2 4 "$aux"
ep_case ep4-over-tp2-dp2-zero1 4 2 4 "$aux" "$z1"
BATON_DP_OVERLAP=1 ep_case ep4-over-tp2-dp2-overlap 4 2 4 "$cap"
ep_case ep2-over-tp4 4 4 2 "$aux"
ep_case ep2-over-tp2-pp2-zero1 4 2 2 "$aux" "$z1; s/pp: 1, ep: 2,/pp: 2, ep: 2,/; s/n_layers: 2/n_layers: 4/"
ep_case ep4-over-tp2-cp2 4 2 4 "$cap" "$cp2"
# ZeRO-1 without data parallelism (dp x cp = 1): the dense tensors' optimizer state whole
# on every rank, the experts' sharded over their holders, which are tp ranks (tp2 without
# ep: both; tp4 with ep2: two a expert).
ep_case moe-tp2-zero1 2 2 1 "$aux" "$z1"
ep_case ep2-over-tp4-zero1 4 4 2 "$aux" "$z1"
# ...and their gradients reduced during the backward, with no dp peer at all
BATON_DP_OVERLAP=1 ep_case ep2-over-tp4-zero1-overlap 4 4 2 "$aux" "$z1"
BATON_DP_OVERLAP=1 ep_case moe-tp2-overlap 2 2 1 "$aux"
# ZeRO-1's sharded moments in the checkpoint: trained under ep2 x dp4 + ZeRO-1 (saved at
# step 10; SED_A: another layout), resumed at step 10 under the same layout (TOL exact:
# the losses of steps 11-20 bitwise the same) and under ep2 x dp2 with zero 0 (TOL 1e-5:
# within 1e-5 relative). EP_EDIT: ckpt_edit's options (tests/ckpt/ckpt_edit.c), applied
# to the checkpoint at step 10 before it is resumed.
ckpt_edit=${BATON_CKPT_EDIT:-$(dirname "$baton")/../tests/ckpt_edit}
ep_same_fp8() { # NAME CKPT_A CKPT_B: their fp8 states (none in either: the same too)
  local a b
  a=$("$baton" ckpt inspect "$2" --json | /usr/bin/python3 -c 'import json, sys
print(json.dumps(json.load(sys.stdin)["fp8"], sort_keys=True))')
  b=$("$baton" ckpt inspect "$3" --json | /usr/bin/python3 -c 'import json, sys
print(json.dumps(json.load(sys.stdin)["fp8"], sort_keys=True))')
  if [[ $a != "$b" ]]; then
    echo "$1: the fp8 scaling states at step 20 differ from the run without a stop"
    return 1
  fi
  [[ $a == "[]" ]] || echo "$1: the fp8 scaling states at step 20 equal the run without a stop"
}
ep_resume() { # NAME RANKS_B SED_B TOL [SED_A]
  local name=$1 init=$1.a.run/checkpoints/s00-step00000010
  layout_wanted "$name" || return 0
  sed "s/gpus_per_node: 2/gpus_per_node: 4/; $z1; ${5:-}" "$src/tests/engine/moe.yaml" >"$name.a.yaml"
  sed "s/gpus_per_node: 2/gpus_per_node: $2/; $3" "$src/tests/engine/moe.yaml" >"$name.b.yaml"
  "$baton" spec "$name.a.yaml" --out "$name.a.pb"
  "$baton" spec "$name.b.yaml" --out "$name.b.pb"
  timeout 300 "$baton" launch -n 4 -- "$worker" --spec "$name.a.pb" --eval-windows 0 \
    --comm-timeout 30 --run-dir "$name.a.run" --save-every 10 >"$name.a.log"
  if [[ -n ${EP_EDIT:-} ]]; then
    # shellcheck disable=SC2086 # EP_EDIT is the tool's options, split into words
    "$ckpt_edit" "$init" $EP_EDIT
    local head
    head=$("$baton" ckpt inspect "$init" | sed -n 1p)
    echo "$head"
    if [[ $EP_EDIT == *--format-1* && $head != *" (format 1)" ]]; then
      echo "$name: the checkpoint resumed from is not of format 1"
      failures=$((failures + 1))
    fi
  fi
  timeout 300 "$baton" launch -n "$2" -- "$worker" --spec "$name.b.pb" --eval-windows 0 \
    --comm-timeout 30 --run-dir "$name.b.run" --init "$init" >"$name.b.log"
  paste <(layout_losses "$name.a.log" | awk '$1 > 10') <(layout_losses "$name.b.log") |
    awk -v name="$name" -v tol="$4" '
      { n++; d = $2 - $4; if (d < 0) d = -d; if (d > worst) worst = d
        if ($1 != $3 || (tol == "exact" && $2 != $4) || (tol != "exact" && d > tol * $2)) bad = 1 }
      END { printf "%s: steps 11-20 resumed, %d losses, max difference %.3g\n", name, n, worst
            exit bad || n != 10 }' || failures=$((failures + 1))
  # a bitwise resume ends with the same fp8 scaling states (scales, positions, histories)
  if [[ $4 == exact ]] && ! ep_same_fp8 "$name" "$name".{a,b}.run/checkpoints/s00-step00000020; then
    failures=$((failures + 1))
  fi
  # every tensor, moment and fp8 history read through one open file per shard file
  local files opened
  files=$(find "$name.a.run/checkpoints/s00-step00000010" -name 'rank-*.bin' | wc -l)
  opened=$(sed -En 's/^(\[0\] )?started from .*\(([0-9]+) shard files? opened\)$/\2/p' "$name.b.log")
  echo "$name: rank 0 opened ${opened:-no} shard file(s) of the checkpoint's $files"
  if [[ -z $opened ]] || ((opened < 1 || opened > files)); then failures=$((failures + 1)); fi
}
ep_resume ep2-dp4-zero1-resume 4 "$z1" exact
ep_resume ep2-dp4-zero1-to-ep2 2 "" 1e-5
# The experts' moments sharded over tp x dp (each tp rank writes its part) resumed under
# ep2 x dp2, zero 0.
ep_resume moe-tp2-dp2-zero1-to-ep2 2 "" 1e-5 "s/tp: 1, pp: 1, ep: 2,/tp: 2, pp: 1, ep: 1,/"
ep_resume ep4-over-tp2-zero1-resume 4 "$z1; s/tp: 1, pp: 1, ep: 2,/tp: 2, pp: 1, ep: 4,/" exact \
  "s/tp: 1, pp: 1, ep: 2,/tp: 2, pp: 1, ep: 4,/"
ep_resume ep4-over-tp2-zero1-to-ep2 2 "" 1e-5 "s/tp: 1, pp: 1, ep: 2,/tp: 2, pp: 1, ep: 4,/"
ep_resume moe-tp2-dp2-zero1-resume 4 "$z1; s/tp: 1, pp: 1, ep: 2,/tp: 2, pp: 1, ep: 1,/" exact \
  "s/tp: 1, pp: 1, ep: 2,/tp: 2, pp: 1, ep: 1,/"
# the experts' moments sharded over tp4's holders alone (dp 1), resumed bitwise and as ep2
ep_resume ep2-over-tp4-zero1-resume 4 "$z1; s/tp: 1, pp: 1, ep: 2,/tp: 4, pp: 1, ep: 2,/" exact \
  "s/tp: 1, pp: 1, ep: 2,/tp: 4, pp: 1, ep: 2,/"
ep_resume ep2-over-tp4-zero1-to-ep2 2 "" 1e-5 "s/tp: 1, pp: 1, ep: 2,/tp: 4, pp: 1, ep: 2,/"
# fp8 experts' delayed-scaling state (by global expert, written by the first holder)
# resumed bitwise
ep_resume ep2-dp4-fp8-resume 4 "$z1; $fp8p" exact "$fp8p"
# ...and from that checkpoint as a format-1 baton saved it (histories inline in the
# manifest, the gradients' as per-replica loss scaling made them, dp times larger): the
# loader divides them by the saving layout's dp (ckpt_fp8_legacy_factor), bitwise again
EP_EDIT=--format-1 ep_resume ep2-dp4-fp8-format1 4 "$z1; $fp8p" exact "$fp8p"
# ...and without the routed experts' states (saved before the experts ran fp8): those are
# calibrated before step 11, the loaded ones kept as saved (ep_fp8_partial_states)
ep_fp8_partial() { # NAME
  layout_wanted "$1" || return 0
  ran=$((ran - 1)) # ep_resume counts it
  EP_EDIT="--drop-fp8 .expert" ep_resume "$1" 4 "$z1; $fp8p" 1e-3 "$fp8p"
  local n
  n=$(sed -En 's/^(\[0\] )?fp8: .* holds no scaling state for ([0-9]+) expert operand\(s\) .*/\2/p' "$1.b.log")
  echo "$1: the loader reported ${n:-no} expert operand(s) without a state"
  if [[ -z $n ]] || ! grep -Eq "^(\[0\] )?fp8 scales calibrated from" "$1.b.log"; then
    failures=$((failures + 1))
    return
  fi
  "$baton" ckpt inspect "$1.a.run/checkpoints/s00-step00000010" --json >"$1.a10.json"
  "$baton" ckpt inspect "$1.b.run/checkpoints/s00-step00000020" --json >"$1.b20.json"
  ep_fp8_partial_states "$1" "$1.a10.json" "$1.b20.json" || failures=$((failures + 1))
}
# The states at step 20 of a run resumed at step 10 from a checkpoint without the routed
# experts' states: each loaded state 10 amaxes further on, the rest of its history the
# saved one (calibration recorded nothing there); each expert's 11 (calibration, then 10
# steps), its scale no longer 1.
ep_fp8_partial_states() { # NAME SAVED_JSON RESUMED_JSON
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, saved, got = sys.argv[1], *(
    {f["name"]: f for f in json.load(open(p))["fp8"]} for p in sys.argv[2:4])
bad, loaded, fresh = [], 0, 0
for k, f in got.items():
    h, n = f["amax_history"], len(f["amax_history"])
    if ".expert" in k:
        fresh += 1
        if f["pos"] != 11 % n or f["scale"] == 1.0: bad.append(f"{k}: pos {f['pos']}, scale {f['scale']}")
        continue
    s = saved.get(k)
    new = {(s["pos"] + i) % n for i in range(10)} if s else set()
    if s is None or f["pos"] != (s["pos"] + 10) % n or any(
            h[i] != s["amax_history"][i] for i in range(n) if i not in new):
        bad.append(f"{k}: pos {f['pos']} (saved {s and s['pos']}), history not the saved one")
    loaded += 1
print(f"{name}: {loaded} loaded state(s) kept, {fresh} expert state(s) calibrated; "
      f"{len(bad)} wrong{': ' + bad[0] if bad else ''}")
sys.exit(1 if bad or not fresh or not loaded else 0)
PY
}
ep_fp8_partial ep2-dp4-fp8-partial
# Each layer's gradients all-reduced during the backward (train_dp_overlap.h), the
# experts' over the expert-data-parallel group (ep2 over dp4) or not at all (ep2 over dp2).
BATON_DP_OVERLAP=1 ep_case ep2-overlap 2 1 2 "$aux"
BATON_DP_OVERLAP=1 ep_case ep2-dp4-overlap 4 1 2 "$aux"
BATON_DP_OVERLAP=1 ep_case ep2-dp4-zero1-overlap 4 1 2 "$aux" "$z1"
# --dump-params under ep2 when rank 1 cannot allocate the experts' gather buffer
# (BATON_FAULT_DUMP_NOMEM=1) or the one for its stage's parameters (=stage:1): every rank
# fails at once, having agreed on it before any collective (none waits in one the other
# never enters), rank 0 saying rank 1 failed.
ep_dump_nomem() { # NAME FAULT WHAT: rank 1's buffer WHAT cannot be had (BATON_FAULT_DUMP_NOMEM=FAULT)
  local name=$1 fault=$2 what=$3 rc=0 t0=$SECONDS
  layout_wanted "$name" || return 0
  sed "s/tp: 1, pp: 1, ep: 2,/tp: 1, pp: 1, ep: 2,/; s/balance: aux_loss, aux_loss_coef: 0.01/$aux/" \
    "$src/tests/engine/moe.yaml" >"$name.yaml"
  "$baton" spec "$name.yaml" --out "$name.pb"
  BATON_FAULT_DUMP_NOMEM=$fault timeout 120 "$baton" launch -n 2 -- "$worker" --spec "$name.pb" \
    --eval-windows 0 --comm-timeout 60 --steps 2 --dump-params "$name.dumped" >"$name.log" 2>&1 || rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s"
  if [[ $rc == 0 || $rc == 124 ]] || ((SECONDS - t0 >= 50)) ||
    ! grep -q "^\[1\] .*cannot gather the parameters: out of memory for the $what" "$name.log" ||
    ! grep -q "^\[0\] .*cannot gather the parameters: rank 1 could not allocate its buffers for the gather" "$name.log"; then
    tail -5 "$name.log"
    echo "$name: a rank's failed allocation was not a prompt failure of every rank"
    failures=$((failures + 1))
  fi
}
ep_dump_nomem ep2-dump-nomem 1 "experts' gather"
ep_dump_nomem ep2-dump-nomem-stage stage:1 "stage's parameters"
layout_finish "all expert-parallel runs match the one-process run"
