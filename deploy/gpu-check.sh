#!/usr/bin/env bash
# The GPU checks of the CUDA engine in one go (README "GPU checks"), for a machine with an
# H100/H200, CUDA and NCCL: builds the CUDA parts, runs every GPU test (they must PASS,
# not SKIP) and the benchmark, and writes each output to OUT_DIR (default gpu-check-out):
#   nvidia-smi.txt, build.log, cuda_ops.log, cuda_train.log, nccl.log, bench.jsonl,
#   summary.txt (one line per check: PASS/FAIL/SKIP and its time)
# Each step has its own time limit so that the whole run fits in about 10 minutes on 16
# cores; a failing step does not stop the others. Exit status 0 when every check passed.
#   deploy/gpu-check.sh [OUT_DIR]
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-gpu-check-out}" && cd "${1:-gpu-check-out}" && pwd)
build=${BATON_GPU_BUILD:-$src/build-gpu}
jobs=$(nproc)
status=0

step() { # NAME LIMIT_S LOG command...
  local name=$1 limit=$2 log=$3 t0=$SECONDS rc
  shift 3
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  local verdict=PASS
  [[ $rc -eq 77 ]] && verdict=SKIP
  [[ $rc -ne 0 && $rc -ne 77 ]] && verdict="FAIL (exit $rc)" && status=1
  [[ $rc -eq 77 ]] && status=1 # a GPU check that skips on a GPU machine is a failure here
  printf '%-20s %-16s %4d s\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$out/summary.txt"
}

: >"$out/summary.txt"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$out/summary.txt"
# The build needs deploy/install-deps.sh's Debian packages; a machine image without them
# (a bare CUDA image) fails at configure: say which are missing first.
missing=""
for m in openblas libprotobuf-c yaml-0.1 libarchive pmix libcurl; do
  pkg-config --exists "$m" 2>/dev/null || missing="$missing $m"
done
[[ -e /usr/share/cmake/Gloo ]] || missing="$missing gloo"
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || missing="$missing nvcc"
[[ -z "$missing" ]] || echo "missing build dependencies:$missing" | tee -a "$out/summary.txt"
step configure 120 "$out/build.log" cmake -S "$src" -B "$build" -DBATON_CUDA=ON \
  -DCMAKE_BUILD_TYPE=Release
step build 420 "$out/build.log.2" cmake --build "$build" -j "$jobs" --target baton baton-worker \
  test_cuda_ops test_nccl bench_gpu
cat "$out/build.log.2" >>"$out/build.log" && rm -f "$out/build.log.2"
step cuda_ops 240 "$out/cuda_ops.log" "$build/tests/test_cuda_ops"
step cuda_train 300 "$out/cuda_train.log" bash "$src/tests/gpu/check-cuda-train.sh" \
  "$build/bin/baton" "$build/bin/baton-worker" "$src"
# NCCL with one GPU: the one-rank scenarios (the two-rank ones need two devices).
for s in collectives-w1 host-w1; do
  step "nccl-$s" 60 "$out/nccl.$s.log" "$build/tests/test_nccl" "$s"
done
# tokens/s and MFU of the ~1.1B model (bf16, fp8) at 4K and 8K, attention TFLOP/s
for seq in 4096 8192; do
  for prec in bf16 fp8; do
    step "bench-$prec-$seq" 120 "$out/bench.$prec.$seq.log" "$build/bin/bench_gpu" model \
      --seq "$seq" --prec "$prec"
    grep '^{' "$out/bench.$prec.$seq.log" >>"$out/bench.jsonl"
  done
  step "attn-$seq" 60 "$out/bench.attn.$seq.log" "$build/bin/bench_gpu" attention --seq "$seq"
  grep '^{' "$out/bench.attn.$seq.log" >>"$out/bench.jsonl"
done
exit $status
