#!/usr/bin/env bash
# The CUDA engine is a module (baton-cuda.so, worker/main/worker_cuda.h) that baton-worker
# loads for stages with cluster.device: cuda only:
#  - baton-worker itself loads no CUDA library (none in its ldd closure), so a CPU worker
#    starts in milliseconds;
#  - a cuda stage, single-process and under `baton launch -n 2` (NCCL's device count): it
#    runs where there is a GPU, else it exits 2 saying there is no CUDA device (which
#    shows the module loaded and answered), or, for a worker built without CUDA (the
#    sanitizer build), that it was built without the CUDA backend; and then
#    tests/gpu/check-cuda-train.sh fails (a GPU is there) or skips (none is);
#  - the module missing or not a module: exit 2, naming the file and dlopen's reason;
#    --help says where the module is taken from and whether it is there.
#   check-cuda-module.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3
# Under ASan, OpenPMIx's own leaks are suppressed (see that file); ours are not.
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-cuda-module.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { # NAME STATUS PATTERN CMD...: CMD exits STATUS and prints PATTERN
  local name=$1 status=$2 pattern=$3 out rc
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "$name: exit $rc (want $status, and /$pattern/):"
    echo "$out" | tail -n 5
  else
    echo "ok   $name: exit $rc, $(grep -Eo -- "$pattern" <<<"$out" | head -n 1)"
  fi
}

linked=$(ldd "$worker" | grep -Eo 'lib(cudart|cublas|cublasLt|nccl|cuda)\.so[.0-9]*' | sort -u)
[[ -z $linked ]] || fail "baton-worker links CUDA libraries itself: $(echo $linked)"

module=$(dirname "$worker")/../lib/baton-cuda.so
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1
sed 's/device: cpu/device: cuda/' "$src/tests/engine/precision.yaml" >cuda.yaml
"$baton" spec cuda.yaml --stage fp32 --out cuda.pb || exit 1
sed 's/gpus_per_node: 1/gpus_per_node: 2/' cuda.yaml >cuda2.yaml
"$baton" spec cuda2.yaml --stage fp32 --out cuda2.pb || exit 1

if [[ -f $module ]]; then
  if "$worker" --spec cuda.pb --single-process --steps 1 --eval-windows 0 >gpu.log 2>&1; then
    echo "ok   a GPU is present: the cuda stage ran"
  else
    check "cuda stage, one process" 2 'no CUDA device' \
      "$worker" --spec cuda.pb --single-process --steps 1 --eval-windows 0
    check "cuda stage, 2 ranks (NCCL)" 2 'NCCL needs a CUDA device|no CUDA device' \
      timeout 120 "$baton" launch -n 2 -- "$worker" --spec cuda2.pb --steps 1 --eval-windows 0
  fi
  # a copy of the worker with no module beside it, and one with a file that is not one
  mkdir -p bare/bin junk/bin junk/lib
  cp "$worker" bare/bin/ && cp "$worker" junk/bin/
  echo 'not a shared object' >junk/lib/baton-cuda.so
  check "module missing" 2 'CUDA engine cannot be loaded: .*bare/lib/baton-cuda.so' \
    bare/bin/baton-worker --spec cuda.pb --single-process --steps 1 --eval-windows 0
  check "--help names the module" 0 "^  $(cd "$(dirname "$module")" && pwd)/baton-cuda.so\$" \
    "$worker" --help
  check "--help says it is missing" 0 'bare/lib/baton-cuda.so, which is missing' \
    bare/bin/baton-worker --help
  check "module not a module" 2 'CUDA engine cannot be loaded: .*junk/lib/baton-cuda.so' \
    junk/bin/baton-worker --spec cuda.pb --single-process --steps 1 --eval-windows 0
else
  check "--help says it is not built" 0 '^  not built \(' "$worker" --help
  check "cuda stage, worker without CUDA" 2 'built without the CUDA backend' \
    "$worker" --spec cuda.pb --single-process --steps 1 --eval-windows 0
  check "cuda stage, 2 ranks, worker without CUDA" 2 'built without the CUDA backend' \
    timeout 120 "$baton" launch -n 2 -- "$worker" --spec cuda2.pb --steps 1 --eval-windows 0
  # gpu.cuda_train's script given this worker: a skip only where there is no GPU (its
  # device nodes named by BATON_GPU_NODES here: one that exists, one that does not)
  touch "$work/nvidia0"
  check "GPU training check, worker without CUDA, a GPU" 1 \
    'has a GPU \(.*/nvidia0\) but the worker was built without the CUDA backend' \
    env BATON_GPU_NODES="$work/nvidia0" bash "$src/tests/gpu/check-cuda-train.sh" "$baton" \
    "$worker" "$src"
  check "GPU training check, worker without CUDA, no GPU" 77 \
    '^SKIPPED: the worker was built without the CUDA backend and there is no GPU' \
    env BATON_GPU_NODES="$work/no-such-node" bash "$src/tests/gpu/check-cuda-train.sh" \
    "$baton" "$worker" "$src"
fi
# and the CPU stage still runs
sed 's/device: cuda/device: cpu/' cuda.yaml >cpu.yaml
"$baton" spec cpu.yaml --stage fp32 --out cpu.pb || exit 1
check "cpu stage" 0 'step +2/200' "$worker" --spec cpu.pb --single-process --steps 2 --eval-windows 0
[[ $failures == 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
