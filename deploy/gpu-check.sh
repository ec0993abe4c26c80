#!/usr/bin/env bash
# The GPU checks of the CUDA engine in one go (docs/gpu.md, "GPU checks (owed)"), for a machine with an
# H100/H200, CUDA and NCCL: builds the CUDA parts, runs every GPU test (they must PASS,
# not SKIP) and the benchmark, and leaves five files in OUT_DIR (default gpu-check-out):
#   summary.txt   one line per check: PASS / SKIP / FAIL (exit N) and its seconds
#   bench.jsonl   bench_gpu's measurements (tokens/s, MFU, attention TFLOP/s)
#   checks.log    every check's output, each under a "==== NAME" header
#   build.log     configure and build
#   nvidia-smi.txt
# (few files: a device session brings back at most 8). Each step has its own time limit
# so that the whole run fits in about 10 minutes on 16 cores; a failing step does not stop
# the others. Exit status 0 when every check passed.
#   deploy/gpu-check.sh [--budget SECONDS] [OUT_DIR]
#   deploy/gpu-check.sh [--budget SECONDS] --bundle BUNDLE.tar.xz [OUT_DIR]
# --budget: the whole run ends within SECONDS (a device command's limit): each step's
# limit is cut to what is left, and a step that no longer fits is NOT RUN (a failure).
# Before anything else a preflight checks the GPU, the driver's CUDA version (13 or later
# for the bundle) and CUDA's libraries, and stops at once (exit 3) when nothing could pass.
# With --bundle nothing is built: the executables come from deploy/gpu-bundle.sh's bundle
# (built on a machine with the Debian packages; for an image without them), CUDA's
# libraries (libcudart, libcublasLt, libnccl) from this machine's toolkit or its Python
# packages (nvidia-*), found below.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bundle="" budget=${BATON_GPU_CHECK_BUDGET:-0}
while [[ ${1:-} == --* ]]; do
  case $1 in
  --bundle) bundle=$(readlink -f "${2:?--bundle needs a bundle path}") ;;
  --budget) budget=${2:?--budget needs SECONDS} ;;
  *) echo "gpu-check.sh: unknown option $1" >&2 && exit 2 ;;
  esac
  shift 2
done
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu-check.sh: --budget $budget: expected seconds" >&2 && exit 2; }
deadline=$((SECONDS + budget))
out=$(mkdir -p "${1:-gpu-check-out}" && cd "${1:-gpu-check-out}" && pwd)
build=${BATON_GPU_BUILD:-$src/build-gpu}
jobs=$(nproc)
status=0
: >"$out/summary.txt"
: >"$out/checks.log"
: >"$out/build.log"
: >"$out/bench.jsonl"

step() { # NAME LIMIT_S LOG command...: runs it, appends its output to LOG under a header
  local name=$1 limit=$2 log=$3 t0=$SECONDS rc tmp
  shift 3
  if ((budget > 0 && deadline - SECONDS < limit)); then
    limit=$((deadline - SECONDS))
    if ((limit < 10)); then # not worth starting: say so, so that the summary is whole
      printf '%-20s %-16s %4d s\n' "$name" "NOT RUN (budget)" 0 | tee -a "$out/summary.txt"
      status=1
      return
    fi
  fi
  tmp=$(mktemp)
  timeout "$limit" "$@" >"$tmp" 2>&1
  rc=$?
  { echo "==== $name (exit $rc): $*"; cat "$tmp"; } >>"$log"
  grep -h '^{' "$tmp" >>"$out/bench.jsonl" || true
  rm -f "$tmp"
  local verdict=PASS
  if [[ $rc -eq 77 ]]; then
    verdict=SKIP status=1 # a GPU check that skips on a GPU machine is a failure here
  elif [[ $rc -ne 0 ]]; then
    verdict="FAIL (exit $rc)" status=1
  fi
  printf '%-20s %-16s %4d s\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$out/summary.txt"
}

# Preflight: a machine where nothing could pass says so in seconds, not after every
# step's time limit.
if ! nvidia-smi >"$out/nvidia-smi.txt" 2>&1; then
  echo "preflight: nvidia-smi failed (no GPU or no driver; see nvidia-smi.txt)" |
    tee -a "$out/summary.txt"
  exit 3
fi
driver_cuda=$(sed -En 's/.*CUDA Version: *([0-9]+)\.([0-9]+).*/\1 \2/p' "$out/nvidia-smi.txt" | head -n 1)
echo "preflight: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader \
  2>/dev/null | head -n 1), driver CUDA ${driver_cuda/ /.}" | tee -a "$out/summary.txt"
if [[ -n $bundle && -n $driver_cuda && ${driver_cuda%% *} -lt 13 ]]; then
  echo "preflight: the driver supports CUDA ${driver_cuda/ /.}; the bundle is built with" \
    "CUDA 13 (needs a 580 or later driver): every check would fail" | tee -a "$out/summary.txt"
  exit 3
fi
# check-cuda-train.sh compares parameters with numpy: the first python3 that has it.
for py in /usr/bin/python3 "$(command -v python3 || true)"; do
  [[ -x $py ]] && "$py" -c 'import numpy' 2>/dev/null && export BATON_PYTHON=$py && break
done

# The folders holding CUDA's libraries here (the toolkit's, or the nvidia-* Python
# packages'), for the bundle's programs (deploy/gpu-bundle.sh leaves these out).
cuda_lib_dirs() {
  local dirs=() lib f sites
  # every site-packages folder (the nvidia-* wheels may sit in any), the user's too
  sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' \
    2>/dev/null || true)
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    f=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }')
    # shellcheck disable=SC2086 # sites: a list of folders
    [[ -n $f ]] || f=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /usr/local/lib /opt \
      $sites -name "$lib" 2>/dev/null | head -n 1)
    if [[ -z $f ]]; then
      local hurt="every check" # libnccl: baton-cuda.so links it, so the worker's too
      [[ $lib == libnccl.so.2 ]] && hurt="cuda_train and the nccl checks (baton-cuda.so links it)"
      echo "preflight: $lib not found on this machine: $hurt will fail" | tee -a "$out/summary.txt" >&2
    elif [[ " ${dirs[*]} " != *" $(dirname "$f") "* ]]; then
      dirs+=("$(dirname "$f")")
    fi
  done
  local IFS=:
  echo "${dirs[*]}"
}

if [[ -n $bundle ]]; then
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' EXIT
  step unpack 60 "$out/build.log" tar -C "$unpacked" -xJf "$bundle"
  export BATON_BUNDLE_CUDA_LIBS=$(cuda_lib_dirs)
  echo "bundle of commit $(cat "$unpacked/baton-bundle/COMMIT" 2>/dev/null); CUDA libraries:" \
    "$BATON_BUNDLE_CUDA_LIBS" >>"$out/build.log"
  # Built from this tree? A bundle older than the tests and recipes here fails them.
  if [[ -e $unpacked/baton-bundle/SOURCES.sha256 ]]; then
    stale=$(cd "$src" && sha256sum -c --quiet "$unpacked/baton-bundle/SOURCES.sha256" 2>&1 |
      sed -En 's/: FAILED.*$//p' | head -n 5 | tr '\n' ' ')
    if [[ -n $stale ]]; then
      echo "preflight: the bundle was built from other sources than this tree's (differing:" \
        "${stale% }): rebuild it with deploy/gpu-bundle.sh" | tee -a "$out/summary.txt"
      exit 3
    fi
  else
    echo "preflight: the bundle records no sources (older deploy/gpu-bundle.sh)" |
      tee -a "$out/summary.txt"
  fi
  bin=$unpacked/baton-bundle/bin
  baton=$bin/baton worker=$bin/baton-worker cuda_ops=$bin/test_cuda_ops bench=$bin/bench_gpu
  nccl=$bin/test_nccl
else
  # The build needs deploy/install-deps.sh's Debian packages; a machine image without
  # them (a bare CUDA image) fails at configure: say which are missing first (then use
  # --bundle).
  missing=""
  for m in openblas libprotobuf-c yaml-0.1 libarchive pmix libcurl; do
    pkg-config --exists "$m" 2>/dev/null || missing="$missing $m"
  done
  [[ -e /usr/share/cmake/Gloo ]] || missing="$missing gloo"
  command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || missing="$missing nvcc"
  [[ -n ${BATON_PYTHON:-} ]] || missing="$missing python3-numpy"
  [[ -z "$missing" ]] || echo "missing dependencies:$missing (see --bundle)" |
    tee -a "$out/summary.txt"
  step configure 120 "$out/build.log" cmake -S "$src" -B "$build" -DBATON_CUDA=ON \
    -DCMAKE_BUILD_TYPE=Release
  step build 420 "$out/build.log" cmake --build "$build" -j "$jobs" --target baton baton-worker \
    test_cuda_ops bench_gpu
  step build-nccl 120 "$out/build.log" cmake --build "$build" -j "$jobs" --target test_nccl
  baton=$build/bin/baton worker=$build/bin/baton-worker cuda_ops=$build/tests/test_cuda_ops
  bench=$build/bin/bench_gpu nccl=$build/tests/test_nccl
fi
step cuda_ops 240 "$out/checks.log" "$cuda_ops"
# The figure the issue asks for first (bf16 MFU of the ~1.1B model at 4K), before the
# longer checks: a session whose time runs out still brings it back.
step "bench-bf16-4096" 120 "$out/checks.log" "$bench" model --seq 4096 --prec bf16
step cuda_train 300 "$out/checks.log" bash "$src/tests/gpu/check-cuda-train.sh" "$baton" "$worker" \
  "$src"
# NCCL with one GPU: the one-rank scenarios (the two-rank ones need two devices).
for s in collectives-w1 host-w1 queued-w1 side-queue-w1; do
  step "nccl-$s" 60 "$out/checks.log" "$nccl" "$s"
done
# tokens/s and MFU of the ~1.1B model (bf16, fp8) at 4K and 8K, attention TFLOP/s
for seq in 4096 8192; do
  for prec in bf16 fp8; do
    [[ $seq$prec == 4096bf16 ]] && continue # ran first
    step "bench-$prec-$seq" 120 "$out/checks.log" "$bench" model --seq "$seq" \
      --prec "$prec"
  done
  step "attn-$seq" 60 "$out/checks.log" "$bench" attention --seq "$seq"
done
# The peer of bench-fp8-4096: the same run with the fp8 values carried in bf16 (the path
# before the fp8 tensor cores); its JSON line says "fp8_gemms_carried" > 0.
step "bench-fp8carried-4096" 120 "$out/checks.log" env BATON_CUDA_FP8=carried \
  "$bench" model --seq 4096 --prec fp8
# The peer of bench-bf16-4096 with attention on the float32 kernels (the tensor-core
# kernels' share of the step).
step "bench-bf16attn32-4096" 120 "$out/checks.log" env BATON_CUDA_ATTENTION=fp32 \
  "$bench" model --seq 4096 --prec bf16
# The peer of bench-bf16-4096 converting each weight in every product (no weight cache:
# its JSON line says "weight_cache_bytes":0).
step "bench-bf16nowcache-4096" 120 "$out/checks.log" env BATON_WEIGHT_CACHE=0 \
  "$bench" model --seq 4096 --prec bf16
exit $status
