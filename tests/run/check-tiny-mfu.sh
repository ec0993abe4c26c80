#!/usr/bin/env bash
# recipes/tiny-cpu.yaml's peak is a CPU worker's, so the MFU its workers log is a possible
# one: each stage's StageSpec run for a few steps under `baton launch` with its layout (4
# workers on however few cores), every rank's logged GFLOP/s over `baton plan --json`'s
# peak_flops for the stage (the peak the workers' logged MFU divides by, run.mfu) below
# 1: an MFU a machine can log. The engine reaches 0.1-0.2 of a core's FMA rate on these
# small GEMMs (2 shared cores); the recipe's former peak (bf16 0.05 TFLOP/s, fp32 half
# that) read 0.6-0.8 here and 1.2-1.4 on a tester's machine.
#   check-tiny-mfu.sh BATON BATON_WORKER SOURCE_DIR
set -euo pipefail
baton=$1 worker=$2 src=$3
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-tinymfu.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
"$baton" data passkey --output data/passkey128_train --n-docs 200 --length 128 >/dev/null
"$baton" data passkey --output data/passkey512_train --n-docs 50 --length 512 >/dev/null
recipe=$src/recipes/tiny-cpu.yaml
"$baton" plan "$recipe" --json >plan.json
failures=0
for stage in pretrain long-context fp8; do
  "$baton" spec "$recipe" --stage "$stage" --out "$stage.pb"
  timeout 200 "$baton" launch -n 4 -- "$worker" --spec "$stage.pb" --steps 6 --eval-windows 0 \
    --comm-timeout 60 >"$stage.log"
  /usr/bin/python3 - "$stage" plan.json "$stage.log" <<'PY' || failures=$((failures + 1))
import json, re, sys
stage, plan_path, log_path = sys.argv[1:4]
peak = next(s for s in json.load(open(plan_path))["stages"] if s["name"] == stage)["peak_flops"]
rates = [float(m.group(1)) * 1e9 for l in open(log_path)
         if (m := re.search(r"step +\d+/\d+ .* ([0-9.]+) GFLOP/s/rank", l))]
if not rates:
    sys.exit(f"{stage}: no step logged its GFLOP/s")
mfu = max(rates) / peak
print(f"{stage}: the most GFLOP/s a rank logged over {len(rates)} steps, over the peak "
      f"{peak / 1e12:g} TFLOP/s: MFU {mfu:.3f}")
sys.exit(0 if mfu < 1.0 else 1)
PY
done
((failures == 0)) || { echo "$failures stage(s) log an MFU of 1 or more: is the recipe's peak a CPU's?"; exit 1; }
echo "tiny-cpu's stages log an MFU below 1"
