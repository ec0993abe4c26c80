#!/usr/bin/env bash
# `baton eval --passkey` against an independent float64 PyTorch LLaMA (passkey_oracle.py)
# on a briefly trained checkpoint exported to Hugging Face format: the same greedy answer
# tokens at every answer digit of every document.
#   check-passkey.sh BATON BATON_WORKER SOURCE_DIR
set -euo pipefail
baton=$1 worker=$2 src=$3
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "SKIPPED: no torch in /usr/bin/python3"; exit 77; }
work=$(mktemp -d /tmp/baton-test-passkey.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
"$baton" data passkey --output data/pk --n-docs 6 --length 128 >/dev/null
"$baton" run "$src/tests/run/run.yaml" --run-dir r --quiet --worker "$worker" \
  --set stages.pretrain.steps=12 --set stages.extend.steps=1 --set stages.fp8.steps=1 >run.out
ck=r/checkpoints/s00-step00000012
"$baton" eval "$ck" --passkey data/pk --json >baton.json
"$baton" eval "$ck" --passkey data/pk
# data that is not passkey data is refused, not scored
rc=0
"$baton" eval "$ck" --passkey data/fortunes_valid >np.out 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "document 0 is not a passkey document" np.out ||
  { cat np.out; echo "eval --passkey of fortunes: exit $rc, not refused"; exit 1; }
"$baton" ckpt export "$ck" --format hf --out hf >/dev/null
/usr/bin/python3 "$src/tests/run/passkey_oracle.py" hf data/pk 6 baton.json
