#!/usr/bin/env bash
# Trains tests/engine/precision.yaml's model three times on the fortunes corpus (fp32,
# bf16, fp8 with delayed scaling; 200 steps each) and checks the final validation
# losses: the model learned (fp32 well below the uniform ln(vocab) = 5.6), bf16 within
# 1% and fp8 within 2% of fp32 (the issue asks for 2% and 5%; this model does better,
# and a broken delayed-scaling loop lands near 5.6%), and fp8 really differs from bf16.
#   check-precision.sh BATON BATON_WORKER SOURCE_DIR
set -euo pipefail
baton=$1 worker=$2 src=$3
work=$(mktemp -d /tmp/baton-test-precision.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null

declare -A loss
for stage in fp32 bf16 fp8; do
  "$baton" spec "$src/tests/engine/precision.yaml" --stage "$stage" --out "$stage.pb"
  "$worker" --spec "$stage.pb" --log-every 50 | tee "$stage.log"
  loss[$stage]=$(sed -n 's/^valid loss \([0-9.]*\) .*/\1/p' "$stage.log")
done
echo "valid loss: fp32 ${loss[fp32]}  bf16 ${loss[bf16]}  fp8 ${loss[fp8]}"
awk -v f="${loss[fp32]}" -v b="${loss[bf16]}" -v e="${loss[fp8]}" 'BEGIN {
  bad = 0
  if (!(f > 0 && f < 3.0)) { print "FAIL: fp32 did not learn: " f; bad = 1 }
  rb = (b - f) / f; if (rb < 0) rb = -rb
  re = (e - f) / f; if (re < 0) re = -re
  printf "bf16 vs fp32: %.4f%%   fp8 vs fp32: %.4f%%\n", 100 * rb, 100 * re
  if (rb > 0.01) { print "FAIL: bf16 more than 1% from fp32"; bad = 1 }
  if (re > 0.02) { print "FAIL: fp8 more than 2% from fp32"; bad = 1 }
  if (e == b) { print "FAIL: fp8 equals bf16 exactly: fp8 GEMMs did not run"; bad = 1 }
  exit bad
}'
