#!/usr/bin/env bash
# Training-step throughput of baton's CPU engine against the same model in PyTorch,
# one thread each, same process environment, run alternately (baton, torch) per config
# in one invocation. Builds nothing: pass the bench_engine binary. See bench/README.md.
#
# usage: bench/run-engine-bench.sh BENCH_ENGINE [--coretype NAME|auto] [--dims "256 512 768"]
#            [--warmup N] [--steps N] [--rounds R] [--python PATH] [--json FILE]
#        bench/run-engine-bench.sh --table FILE   (the table again from a --json FILE)
#
#   --coretype NAME  export OPENBLAS_CORETYPE=NAME (e.g. Cooperlake, SkylakeX, Haswell,
#                    Prescott) for both sides; "auto" unsets OPENBLAS_CORETYPE and
#                    OPENBLAS_L2_SIZE first. Default: the environment as is. Where
#                    OPENBLAS_CORETYPE is then unset, both sides get the kernels baton runs
#                    with (bench_engine --blas-core: OpenBLAS's own choice, or baton's where
#                    OpenBLAS fell back to a pre-AVX2 kernel, worker/cpu/cpu_blas_core.h).
#   --warmup/--steps override the per-dim defaults (256: 2/10, 512: 1/7, 768: 1/4, others
#                    1/5), chosen so each side of each config takes under a minute on the
#                    2-core machine with OpenBLAS's default (Prescott) kernels.
#   --rounds R       repeat the whole alternation R times; the table shows each side's
#                    median over rounds of its per-run median step time.
#   --json FILE      also keep every run's JSON line in FILE.
#
# Table: tok/s and ms from each side's median wall-clock step; ratios baton/torch as
# throughput (torch ms / baton ms) from the median step ("median"), the fastest step
# ("best") and the median process CPU time ("cpu"). On a quiet machine the three agree;
# when other work shares the 2 cores, wall time swings and best and cpu are steadier.
#
# Exit status: 0 done, 1 a run failed, 2 bad command line.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

python=/usr/bin/python3
table() {
  "$python" - "$1" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cores = sorted({(r["impl"], r["blas_core"]) for r in runs})
print("# BLAS kernels: " + ", ".join(f"{i}: {c}" for i, c in cores))
dims = list(dict.fromkeys(r["dim"] for r in runs))
print(f"{'dim':>5} {'L':>2} {'H/KV':>6} {'ffn':>5} {'baton tok/s':>12} {'torch tok/s':>12} "
      f"{'median':>7} {'best':>6} {'cpu':>6} {'baton ms':>9} {'torch ms':>9}")
def med(rs, key):
    return statistics.median(r[key] for r in rs)
for d in dims:
    b = [r for r in runs if r["dim"] == d and r["impl"] == "baton"]
    t = [r for r in runs if r["dim"] == d and r["impl"] == "torch"]
    c = b[0]
    toks = c["batch"] * c["seq"]
    bms = med(b, "step_ms_median")
    hkv = f"{c['heads']}/{c['kv_heads']}"
    line = f"{d:>5} {c['layers']:>2} {hkv:>6} {c['ffn']:>5} {toks / bms * 1e3:>12.1f} "
    if t:
        tms = med(t, "step_ms_median")
        best = min(r["step_ms_min"] for r in t) / min(r["step_ms_min"] for r in b)
        cpu = med(t, "step_cpu_ms_median") / med(b, "step_cpu_ms_median")
        line += (f"{toks / tms * 1e3:>12.1f} {tms / bms:>6.2f}x {best:>5.2f}x {cpu:>5.2f}x "
                 f"{bms:>9.1f} {tms:>9.1f}")
    else:
        line += f"{'n/a':>12} {'n/a':>7} {'n/a':>6} {'n/a':>6} {bms:>9.1f} {'n/a':>9}"
    print(line)
EOF
}

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
case "$1" in
  -h|--help) usage; exit 0 ;;
  --table)
    [[ $# -eq 2 && -r $2 ]] || { echo "run-engine-bench: --table needs a readable JSON file" >&2; exit 2; }
    table "$2"; exit 0 ;;
esac
bin=$1; shift
[[ -x $bin ]] || { echo "run-engine-bench: $bin is not an executable (build bench_engine first)" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
dims="256 512 768"
coretype="" warmup="" steps="" rounds=1 json=""
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || { echo "run-engine-bench: $1 needs a value (see --help)" >&2; exit 2; }
  case "$1" in
    --coretype) coretype=$2 ;;
    --dims) dims=$2 ;;
    --warmup) warmup=$2 ;;
    --steps) steps=$2 ;;
    --rounds) rounds=$2 ;;
    --python) python=$2 ;;
    --json) json=$2 ;;
    *) echo "run-engine-bench: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
for v in $dims $warmup $steps $rounds; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "run-engine-bench: \"$v\" is not a non-negative integer" >&2; exit 2; }
done

# Both sides see exactly this environment: one BLAS thread, one OpenMP thread.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [[ $coretype == auto ]]; then
  unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
elif [[ -n $coretype ]]; then
  export OPENBLAS_CORETYPE=$coretype
fi
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  core=$("$bin" --blas-core) || { echo "run-engine-bench: $bin --blas-core failed" >&2; exit 1; }
  export OPENBLAS_CORETYPE=$core
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT

# dim -> "warmup steps"
schedule() {
  case $1 in
    256) echo "2 10" ;;
    512) echo "1 7" ;;
    768) echo "1 4" ;;
    *) echo "1 5" ;;
  esac
}

echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}" \
     "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1; $(getconf _NPROCESSORS_ONLN) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for d in $dims; do
    read -r w s <<<"$(schedule "$d")"
    w=${warmup:-$w} s=${steps:-$s}
    args=(--dim "$d" --layers 4 --vocab 4096 --seq 256 --batch 4 --warmup "$w" --steps "$s")
    echo "# round $r dim $d: baton" >&2
    "$bin" "${args[@]}" >>"$out" || { echo "run-engine-bench: bench_engine failed (dim $d)" >&2; exit 1; }
    echo "# round $r dim $d: torch" >&2
    rc=0
    "$python" "$here/torch_step.py" "${args[@]}" >>"$out" || rc=$?
    if [[ $rc -eq 77 ]]; then
      echo "run-engine-bench: SKIPPED torch side: torch is not importable by $python" >&2
    elif [[ $rc -ne 0 ]]; then
      echo "run-engine-bench: torch_step.py failed (dim $d, exit $rc)" >&2; exit 1
    fi
  done
done
[[ -z $json ]] || cp "$out" "$json"

table "$out"
