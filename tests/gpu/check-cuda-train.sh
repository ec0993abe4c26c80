#!/usr/bin/env bash
# Training on the CUDA backend against the CPU engine, through the real worker
# (train.c, the fused AdamW, checkpoints from device memory): each stage of
# cuda-train.yaml and cuda-train-moe.yaml (MoE layers: moe_dev.c through either backend's
# ops) runs as `baton-worker --single-process` with cluster.device cpu and with
# cluster.device cuda, from the same seed and data.
#  - fp32 (dense, MoE, MoE recomputed whole): every step's loss within 1e-4 relative,
#    final parameters within 1e-4 of the largest (only float32 summation orders differ);
#  - bf16 and fp8 (every layer's GEMMs in fp8, as the log must say): the first step's loss
#    within 1e-3, every step's within 1e-2, final parameters within 2e-2 (the CPU rounds GEMM inputs exactly as the GPU does, but an
#    accumulation-order difference can flip one input's rounding downstream);
#  - determinism: the bf16 and moe-bf16 stages run twice on the GPU give the same losses
#    and parameters bit for bit;
#  - checkpoints: the bf16 stage stopped after 4 steps (checkpoint saved from device
#    memory) and resumed (loaded into device memory) ends bit-equal to the run without a
#    stop.
#   check-cuda-train.sh BATON BATON_WORKER SOURCE_DIR [CUDA_WORKER]
# The parameter comparison needs numpy in /usr/bin/python3, or in $BATON_PYTHON.
# CUDA_WORKER (default BATON_WORKER) runs the cuda side. Only a machine without a GPU makes
# the test print SKIPPED and exit 77: the worker says "no CUDA device" (no /dev/nvidia*
# node, the driver finds none, or none is installed), or it was built without CUDA and this
# machine has no NVIDIA device node either (/dev/nvidiactl, /dev/nvidia0, /dev/dxg; the
# list is $BATON_GPU_NODES where set, for tests of this rule). A worker built without CUDA
# on a machine with a GPU fails the test: the GPU check would otherwise pass vacuously. The
# emulated worker
# (tests/gpu: baton-worker-emulated) runs the kernels on the CPU emulation instead; it
# is slow (minutes per step), so BATON_CUDA_TRAIN_QUICK=1 shrinks the check to 2 steps of
# 2 x 16 tokens, the fp32, bf16 and moe-fp32 stages and a stop after step 1 (no
# determinism rerun).
set -euo pipefail
baton=$1 worker=$2 src=$3 gpu_worker=${4:-$2}
work=$(mktemp -d /tmp/baton-test-cuda-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
text=/usr/share/games/fortunes
if [[ ! -r $text ]]; then # a GPU machine without the fortune package: the repo's prose
  text=$work/text
  cat "$src"/*.md "$src"/bench/*.md | awk 'NF == 0 { print "%"; next } { print }' >"$text"
fi
"$baton" data prepare --input "$text" --split-on-percent --output data/fortunes >/dev/null
steps=8 stop=4 stages="fp32 bf16 fp8 moe-fp32 moe-full moe-bf16" shrink=()
if [[ -n "${BATON_CUDA_TRAIN_QUICK:-}" ]]; then
  steps=2 stop=1 stages="fp32 bf16 moe-fp32"
  shrink=(-e 's/steps: 8/steps: 2/; s/seq_len: 64/seq_len: 16/; s/global_batch: 4/global_batch: 2/'
          -e 's/micro_batch: 2/micro_batch: 1/')
fi
stages=${BATON_CUDA_TRAIN_STAGES:-$stages} # a subset, e.g. "moe-fp32" (the resume check needs bf16)
for r in "" moe-; do
  yaml=$src/tests/gpu/cuda-train${r:+-moe}.yaml
  sed "${shrink[@]}" -e 's/device: cpu/device: cuda/' "$yaml" >"${r}cuda.yaml"
  sed "${shrink[@]}" -e '' "$yaml" >"${r}cpu.yaml"
done
failures=0

losses() { sed -En 's/^step +([0-9]+)\/[0-9]+  loss ([0-9.]+).*/\1 \2/p' "$1"; }

run() { # NAME DEVICE STAGE [worker options]; a failure shows the log's end
  local name=$1 dev=$2 stage=$3 w=$worker
  shift 3
  [[ $dev == cuda ]] && w=$gpu_worker
  local recipe=$dev.yaml
  [[ $stage == moe-* ]] && recipe=moe-$dev.yaml
  "$baton" spec "$recipe" --stage "$stage" --out "$name.pb"
  "$w" --spec "$name.pb" --single-process --eval-windows 0 "$@" >"$name.log" 2>&1 && return 0
  echo "FAIL: $name ($dev, stage $stage) exited $?; the end of its log:"
  tail -n 30 "$name.log"
  return 1
}

gpu_node() { # prints this machine's first NVIDIA device node, if it has one
  local n
  for n in ${BATON_GPU_NODES-/dev/nvidiactl /dev/nvidia0 /dev/dxg}; do
    [[ -e $n ]] && { echo "$n"; return 0; }
  done
  return 1
}

# The GPU side first: no device is a skip; no CUDA in this worker, only where no GPU is.
if ! run probe cuda fp32 --steps 1 >/dev/null; then
  reason=$(grep -Eo "no CUDA device.*" probe.log | head -n 1 || true)
  if [[ -z "$reason" ]] && grep -q "built without the CUDA backend" probe.log; then
    if node=$(gpu_node); then
      echo "FAIL: this machine has a GPU ($node) but the worker was built without the CUDA" \
        "backend (BATON_CUDA=AUTO found no nvcc or NCCL?):"
      cat probe.log
      exit 1
    fi
    reason="the worker was built without the CUDA backend and there is no GPU (no /dev/nvidia* node)"
  fi
  if [[ -n "$reason" ]]; then
    echo "SKIPPED: $reason"
    exit 77
  fi
  echo "FAIL: the CUDA worker failed:"
  cat probe.log
  exit 1
fi

compare() { # STAGE STEP1_TOL STEP_TOL PARAM_TOL
  local s=$1
  run "$s.cpu" cpu "$s" --dump-params "$s.cpu.params" &&
    run "$s.gpu" cuda "$s" --dump-params "$s.gpu.params" || { failures=$((failures + 1)); return; }
  paste <(losses "$s.cpu.log") <(losses "$s.gpu.log") | awk -v s="$s" -v t1="$2" -v t="$3" -v steps=$steps '
    { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r
      lim = $1 == 1 ? t1 : t
      if ($1 != $3 || r > lim) { printf "%s: step %s loss %s on the GPU vs %s\n", s, $1, $4, $2; bad = 1 } }
    END { if (n != steps) { print s ": " n " steps"; bad = 1 }
          printf "%s: %d steps, GPU vs CPU losses max relative difference %.3g\n", s, n, worst
          exit bad }' || failures=$((failures + 1))
  "${BATON_PYTHON:-/usr/bin/python3}" - "$s.cpu.params" "$s.gpu.params" "$s" "$4" <<'PY' || failures=$((failures + 1))
import sys
import numpy as np
ref, got = (np.fromfile(p, dtype="<f4").astype(np.float64) for p in sys.argv[1:3])
rel = np.abs(ref - got).max() / np.abs(ref).max() if ref.size == got.size else float("inf")
print(f"{sys.argv[3]}: final parameters ({got.size} of {ref.size}) GPU vs CPU max relative difference {rel:.3g}")
sys.exit(0 if rel <= float(sys.argv[4]) else 1)
PY
}

for s in $stages; do
  case $s in
    fp32 | moe-fp32 | moe-full) compare "$s" 1e-4 1e-4 1e-4 ;;
    *) compare "$s" 1e-3 1e-2 2e-2 ;;
  esac
done
# The fp8 stage really ran GEMMs in fp8 (cuda-train.yaml: first_last_bf16 false).
if [[ " $stages " == *" fp8 "* ]] && ! grep -Eq "^fp8: [1-9][0-9]* of" fp8.gpu.log; then
  echo "FAIL: the fp8 stage ran no GEMM in fp8: $(grep '^fp8:' fp8.gpu.log || echo 'no fp8 line')"
  failures=$((failures + 1))
fi

# Determinism: the same GPU runs again (a dense and an MoE stage).
if [[ -z "${BATON_CUDA_TRAIN_QUICK:-}" ]]; then
  for s in bf16 moe-bf16; do
    [[ " $stages " == *" $s "* ]] || continue
    run "$s.again" cuda "$s" --dump-params "$s.again.params" || true
    if cmp -s <(losses "$s.gpu.log") <(losses "$s.again.log") &&
      cmp -s "$s.gpu.params" "$s.again.params"; then
      echo "$s: two GPU runs are bit-equal (losses and parameters)"
    else
      echo "FAIL: two GPU runs of the $s stage differ"
      failures=$((failures + 1))
    fi
  done
fi

# Checkpoint from device memory and back: stop after $stop steps, resume.
resume_check() {
  run bf16.first cuda bf16 --steps $stop --run-dir ckrun &&
    run bf16.resumed cuda bf16 --init ckrun --run-dir ckrun --dump-params bf16.resumed.params || true
  if [[ -f bf16.resumed.params ]] && cmp -s <(losses bf16.gpu.log | tail -n $((steps - stop))) <(losses bf16.resumed.log) &&
    cmp -s bf16.gpu.params bf16.resumed.params; then
    echo "bf16: stopped after $stop steps and resumed on the GPU: bit-equal to the uninterrupted run"
  else
    echo "FAIL: the resumed GPU run differs from the uninterrupted one"
    diff <(losses bf16.gpu.log) <(losses bf16.resumed.log) || true
    failures=$((failures + 1))
  fi
}
[[ " $stages " != *" bf16 "* ]] || resume_check

# Parallel layouts on the GPU (BATON_CUDA_TRAIN_LAYOUTS=1: needs a GPU per rank, or the
# emulated worker, whose ranks connect over Gloo): the fp32 stage as dp2 with ZeRO-1, tp2
# and pp2, the moe-fp32 stage as ep2 (expert parallelism's exchanges of device buffers)
# and tp2 (each tp rank's MoE blocks on its own rows, the chunk counts gathered over tp),
# under `baton launch -n 2` against the one-process CPU run, losses within 1e-4; the
# moe-bf16 stage as ep2 (the rows to the experts packed in bf16), within 1e-2.
layout() { # NAME PARALLEL [STAGE [TOLERANCE]]
  local name=$1 stage=${3:-fp32} tol=${4:-1e-4} recipe=cuda.yaml
  [[ $stage == moe-* ]] && recipe=moe-cuda.yaml
  sed -E "s/gpus_per_node: 1/gpus_per_node: 2/; s/parallel: \{zero: 0\}/parallel: $2/" \
    "$recipe" >"$name.yaml"
  "$baton" spec "$name.yaml" --stage "$stage" --out "$name.pb"
  timeout 3000 "$baton" launch -n 2 -- "$gpu_worker" --spec "$name.pb" --eval-windows 0 \
    --comm-timeout 600 >"$name.log" 2>&1 || { echo "FAIL: $name"; tail -n 20 "$name.log"; return 1; }
  paste <(losses "$stage.cpu.log") <(sed 's/^\[0\] //' "$name.log" | losses /dev/stdin) |
    awk -v s="$name" -v steps=$steps -v tol="$tol" '
      { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r
        if ($1 != $3 || r > tol) { printf "%s: step %s loss %s vs %s\n", s, $1, $4, $2; bad = 1 } }
      END { if (n != steps) { print s ": " n " steps"; bad = 1 }
            printf "%s: %d steps on the GPU, losses vs the CPU max relative difference %.3g\n",
                   s, n, worst; exit bad }'
}
wanted() { [[ "${BATON_CUDA_TRAIN_LAYOUTS:-}" == 1 || " ${BATON_CUDA_TRAIN_LAYOUTS:-} " == *" $1 "* ]]; }
if [[ -n "${BATON_CUDA_TRAIN_LAYOUTS:-}" ]]; then # 1: all, or names: "ep2 tp2"
  ! wanted dp2-zero1 || layout dp2-zero1 "{dp: 2, zero: 1}" || failures=$((failures + 1))
  ! wanted tp2 || layout tp2 "{tp: 2, zero: 0}" || failures=$((failures + 1))
  ! wanted pp2 || layout pp2 "{pp: 2, zero: 0}" || failures=$((failures + 1))
  ! wanted ep2 || layout ep2 "{dp: 2, ep: 2, zero: 0}" moe-fp32 || failures=$((failures + 1))
  ! wanted moe-tp2 || layout moe-tp2 "{tp: 2, zero: 0}" moe-fp32 || failures=$((failures + 1))
  ! wanted ep2-bf16 || layout ep2-bf16 "{dp: 2, ep: 2, zero: 0}" moe-bf16 1e-2 ||
    failures=$((failures + 1))
fi

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "the CUDA engine reproduces the CPU engine"
