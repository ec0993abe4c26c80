#!/usr/bin/env bash
# `baton plan`'s activation and backward-buffer memory against what the workers allocate
# (worker/engine/model.c's size tables): for each case a one-step run of the small
# tp.yaml-like model, launched with its layout, every rank printing "activations allocated
# by this rank: A bytes ..., backward buffers and scratch W bytes (pipeline stage P)"; the
# ranks of the plan's heaviest pipeline stage must have allocated the plan's activations
# (less the MoE caches, printed apart) and backward buffers, to the byte. The cases cover
# the recompute modes, fp32 (which alone keeps the attention probabilities, without
# recomputation) against bf16 and fp8 (float32 activations all the same), tp with and
# without sequence parallelism, 1F1B and interleaved pipelines, and context parallelism
# (ring and Ulysses), and an MoE model (whose layers carve the dense ffn's activations too).
# Those ranks' model state (parameters, gradients, optimizer state) must be the plan's to
# the byte as well, also for an MoE model with aux-loss-free balancing (its per-expert
# bias) under ZeRO-1, -2 and -3.
#   check-plan-memory.sh BATON BATON_WORKER SOURCE_DIR
set -euo pipefail
baton=$1 worker=$2 src=$3
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-planmem.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
failures=0

dense="arch: llama"
moe="arch: moe, moe: {n_experts: 4, top_k: 2, expert_ffn_dim: 64, n_shared_experts: 1}"

# case NAME RANKS PRECISION RECOMPUTE PARALLEL [MODEL]
case_run() {
  local name=$1 n=$2 prec=$3 rec=$4 par=$5 model=${6:-$dense}
  cat >"$name.yaml" <<EOF
name: $name
seed: 3
model: {$model, dim: 64, n_layers: 4, n_heads: 4, n_kv_heads: 2, ffn_dim: 176,
        vocab_size: 272}
cluster: {nodes: 1, gpus_per_node: $n, device: cpu, gpu: {memory: 1GB, peak_tflops_bf16: 1}}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults:
  seq_len: 128
  global_batch: 8
  micro_batch: 2
  precision: $prec
  recompute: $rec
  parallel: {$par}
stages:
  - {name: s, steps: 1}
EOF
  "$baton" spec "$name.yaml" --out "$name.pb"
  "$baton" plan "$name.yaml" --json >"$name.plan.json"
  if ((n == 1)); then
    "$worker" --spec "$name.pb" --steps 1 --eval-windows 0 | sed 's/^/[0] /' >"$name.log"
  else
    timeout 120 "$baton" launch -n "$n" -- "$worker" --spec "$name.pb" --steps 1 \
      --eval-windows 0 --comm-timeout 30 >"$name.log"
  fi
  /usr/bin/python3 - "$name" "$name.plan.json" "$name.log" <<'PY' || failures=$((failures + 1))
import json, re, sys
name, plan_path, log_path = sys.argv[1:4]
mem = json.load(open(plan_path))["stages"][0]["memory_per_gpu"]
want_act = mem["activations"] - mem["moe_cache_bytes"]
want_back = mem["backward"]
pat = re.compile(r"^\[(\d+)\] activations allocated by this rank: (\d+) bytes in (\d+) slot\(s\), "
                 r"backward buffers and scratch (\d+) bytes \(pipeline stage (\d+)\)")
got = [m for l in open(log_path) if (m := pat.match(l))]
mine = [m for m in got if int(m.group(5)) == mem["heaviest_pp_stage"]]
if not mine:
    sys.exit(f"{name}: no rank of pipeline stage {mem['heaviest_pp_stage']} printed its "
             f"activations ({len(got)} ranks did)")
state = {m.group(1): m.groups()[1:] for l in open(log_path) if (m := re.match(
    r"^\[(\d+)\] model state allocated by this rank \(zero \d\): params (\d+) grads (\d+) "
    r"optimizer (\d+) bytes", l))}
bad = False
for m in mine:
    act, back = float(m.group(2)), float(m.group(4))
    ra, rb = abs(act - want_act) / want_act, abs(back - want_back) / want_back
    print(f"{name}: rank {m.group(1)} (stage {m.group(5)}, {m.group(3)} slots) activations "
          f"{act:.0f} B, plan {want_act:.0f} ({ra:.3%}); backward {back:.0f} B, plan "
          f"{want_back:.0f} ({rb:.3%})")
    bad |= act != want_act or back != want_back
    # the model state too: parameters, gradients, optimizer state
    got = dict(zip(("params", "grads", "optimizer"), map(float, state.get(m.group(1), ()))))
    off = [f"{k} {v:.0f} B, plan {mem[k]:.0f}" for k, v in got.items() if v != mem[k]]
    if len(got) != 3 or off:
        print(f"{name}: rank {m.group(1)} model state " + ("; ".join(off) or "not printed"))
        bad = True
sys.exit(1 if bad else 0)
PY
}

one="tp: 1, pp: 1, dp: 1"
case_run fp32-none 1 fp32 none "$one"
case_run fp32-selective 1 fp32 selective "$one"
case_run fp32-full 1 fp32 full "$one"
case_run bf16-none 1 bf16 none "$one"
case_run bf16-full 1 bf16 full "$one"
case_run fp8-selective 1 fp8 selective "$one"
case_run tp2-sp-bf16-none 2 bf16 none "tp: 2, pp: 1, dp: 1"
case_run tp2-nosp-fp32-selective 2 fp32 selective "tp: 2, pp: 1, dp: 1, sequence_parallel: false"
case_run pp2-fp32-none 2 fp32 none "tp: 1, pp: 2, dp: 1"
case_run tp2-pp2-bf16-full 4 bf16 full "tp: 2, pp: 2, dp: 1"
case_run pp2-v2-bf16-none 2 bf16 none "tp: 1, pp: 2, dp: 1, virtual_stages: 2"
case_run cp2-fp32-none 2 fp32 none "tp: 1, pp: 1, dp: 1, cp: 2"
case_run cp2-ulysses-bf16-none 2 bf16 none "tp: 1, pp: 1, dp: 1, cp: 2, cp_comm: ulysses"
case_run moe-ep2-bf16-selective 2 bf16 selective "tp: 1, pp: 1, dp: 2, ep: 2" "$moe"
# aux-loss-free balancing: each MoE layer's per-expert bias, held with a gradient and
# Adam's moments as the block's other parameters (also in ZeRO's units)
bias="${moe%\}}, balance: bias}"
case_run moe-bias-dp2-zero1 2 fp32 none "tp: 1, pp: 1, dp: 2, zero: 1" "$bias"
case_run moe-bias-ep2-zero3 2 fp32 none "tp: 1, pp: 1, dp: 2, ep: 2, zero: 3" "$bias"
case_run moe-bias-tp2-dp2-zero2 4 fp32 none "tp: 2, pp: 1, dp: 2, zero: 2" "$bias"

if ((failures > 0)); then
  echo "$failures case(s) where the plan's memory is not what the workers allocate"
  exit 1
fi
echo "the plan's model state, activations and backward buffers are what the workers allocate, every case"
