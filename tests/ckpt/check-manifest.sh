#!/usr/bin/env bash
# manifest.pb is checked like the shards: it carries its own CRC32C, so a flipped bit
# anywhere in it makes `baton ckpt verify` exit 1 naming the file (never "intact"), and a
# worker resuming from it refuses (never starting at a flipped step on shifted data);
# verify also checks the manifest's tensor list against the model it records. A manifest
# written before the checksum still loads; verify notes that it is unchecked and still
# finds a renamed tensor in it.
#   check-manifest.sh BATON BATON_WORKER SOURCE_DIR CKPT_EDIT
set -u
baton=$1 worker=$2 src=$3 ckpt_edit=$4
work=$(mktemp -d /tmp/baton-test-manifest.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
# fail, ok and expect (baton ckpt ARGS exits STATUS with PATTERN) come from server-lib.sh
source "$src/tests/ckpt/store/server-lib.sh"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1
sed "s/RANKS/1/; s/LAYOUT/{tp: 1}/; s/n_layers: 2/n_layers: 1/; s/warmup_steps: 5/warmup_steps: 1/" \
  "$src/tests/ckpt/reshard.yaml" >one.yaml
"$baton" spec one.yaml --out one.pb 2>/dev/null || exit 1
one() { "$worker" --spec "$work/one.pb" --eval-windows 0 "$@"; }
one --run-dir run --save-every 4 --steps 4 >/dev/null || exit 1
ck=run/checkpoints/s00-step00000004
man=$ck/manifest.pb
expect 0 "intact" -- verify "$ck"
if "$baton" ckpt verify "$ck" | grep "note:" >/dev/null; then fail "a checksummed manifest got a note"; fi

# flip BIT of byte POS of manifest.pb in directory DIR (a copy of $ck)
flip() {
  local dir=$1 pos=$2 bit=$3 byte
  byte=$(od -A n -t u1 -j "$pos" -N 1 "$dir/manifest.pb")
  printf "\\x$(printf %02x $((byte ^ (1 << bit))))" |
    dd of="$dir/manifest.pb" bs=1 seek="$pos" conv=notrunc status=none
}

# ---- random single-bit flips (fixed seed): every one is damage ----
size=$(stat -c %s "$man")
cp -r "$ck" x
RANDOM=11
missed=0 tried=0
for _ in $(seq 48); do
  pos=$(((RANDOM * 32768 + RANDOM) % size)) bit=$((RANDOM % 8))
  cp "$man" x/manifest.pb
  flip x "$pos" "$bit"
  tried=$((tried + 1))
  out=$("$baton" ckpt verify x 2>&1)
  rc=$?
  if [[ $rc -ne 1 ]] || ! grep -q "DAMAGED: .*x/manifest.pb" <<<"$out"; then
    missed=$((missed + 1))
    echo "byte $pos bit $bit: exit $rc: $(head -n 2 <<<"$out")"
  fi
done
((missed == 0)) && ok "verify: $tried random bit flips of manifest.pb, each DAMAGED (exit 1)" ||
  fail "verify: $missed of $tried bit flips of manifest.pb not reported as damage"
# the first bytes (the checksum's own field) and the last (the checksummed mark)
missed=0
for pos in 0 1 2 5 6 $((size - 3)) $((size - 2)) $((size - 1)); do
  for bit in 0 1 2 3 4 5 6 7; do
    cp "$man" x/manifest.pb
    flip x "$pos" "$bit"
    "$baton" ckpt verify x >/dev/null 2>&1
    rc=$?
    [[ $rc -eq 1 ]] || { missed=$((missed + 1)); echo "byte $pos bit $bit: exit $rc"; }
  done
done
((missed == 0)) && ok "verify: every bit of the checksum's field and the last bytes" ||
  fail "verify: $missed flips at the ends of manifest.pb not reported"

# ---- the step a resume starts at, flipped: refused by the worker and every tool ----
cp "$man" x/manifest.pb
# field 5 (step): tag 0x28, then the varint 4; step 4 -> 5
pos=$(/usr/bin/python3 -c "import sys; print(open(sys.argv[1], 'rb').read().find(b'\x28\x04', 6) + 1)" "$man")
flip x "$pos" 0
out=$(one --init x --steps 8 2>&1)
rc=$?
if [[ $rc -ne 0 ]] && grep -q "x/manifest.pb: damaged" <<<"$out" && ! grep -q "started from" <<<"$out"; then
  ok "worker: a resume from a manifest with a flipped step refused"
else
  fail "worker: resume from a flipped step: exit $rc: $(tail -n 3 <<<"$out")"
fi
expect 1 "DAMAGED: .*x/manifest.pb: damaged: its CRC32C" -- verify x
expect 2 "x/manifest.pb: damaged" -- inspect x
expect 2 "x/manifest.pb: damaged" -- export x --out hf
expect 2 "x/manifest.pb: damaged" -- reshard x --to tp2 --out rs
out=$("$baton" eval x --data data/fortunes_valid --seq-len 64 --num-seqs 1 2>&1)
[[ $? -eq 2 ]] && grep -q "x/manifest.pb: damaged" <<<"$out" && ok "eval: refused" ||
  fail "eval of a damaged manifest: $out"

# ---- a manifest from before the checksum ----
rm -rf old && cp -r "$ck" old && "$ckpt_edit" old --drop-checksum || exit 1
expect 0 "note: old/manifest.pb carries no checksum" -- verify old
expect 0 "intact" -- verify old
one --init old --steps 6 >old.log 2>&1 && grep -q "started from old at step 4" old.log &&
  ok "worker: a manifest without a checksum still resumes" || fail "resume of old: $(tail -n 3 old.log)"
# a tensor renamed in it: the name's bytes changed in place, the message still decodes
rename() { # rename DIR FROM TO (same length)
  /usr/bin/python3 - "$1/manifest.pb" "$2" "$3" <<'PY'
import os, sys
p, a, b = sys.argv[1], os.fsencode(sys.argv[2]), os.fsencode(sys.argv[3])
d = open(p, "rb").read()
assert len(a) == len(b) and d.count(a) >= 1
open(p, "wb").write(d.replace(a, b, 1))
PY
}
rm -rf old2 && cp -r old old2 && rename old2 model.norm.weight mofel.norm.weight
expect 1 "DAMAGED: old2/manifest.pb: tensor model.norm.weight, which the checkpoint's model needs, is missing" -- verify old2
expect 1 "DAMAGED: old2/manifest.pb: tensor mofel.norm.weight is not one of the checkpoint's model" -- verify old2
rm -rf old3 && cp -r old old3 && rename old3 optim.exp_avg.model.layers.0.mlp.up_proj optim.exp]avg.model.layers.0.mlp.up_proj
expect 1 "tensor optim.exp_avg.model.layers.0.mlp.up_proj.weight, which the checkpoint's model needs, is missing" -- verify old3
# names holding control characters and bytes that are not UTF-8 (a manifest no baton
# writes now, but one may be read): inspect escapes them in text, keeps its JSON valid
rm -rf old4 && cp -r old old4 && rename old4 model.norm.weight $'model.norm.weig\x01\xff' &&
  rename old4 reshard $'resh\nrd'
"$baton" ckpt inspect old4 >insp.txt 2>&1
grep -q '^  recipe resh\\nrd, stage 0 "train"' insp.txt &&
  grep -Eq '^  model\.norm\.weig\\x01\\xff +64 ' insp.txt &&
  ok "inspect: control characters and bytes that are not UTF-8 escaped in text" ||
  fail "inspect text: $(head -n 3 insp.txt | cat -v)"
"$baton" ckpt inspect old4 --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["recipe"] == "resh\nrd", j["recipe"]
assert "model.norm.weig\x01\ufffd" in [t["key"] for t in j["tensors"]], j["tensors"]
' && ok "inspect --json: valid JSON, the name escaped" || fail "inspect --json of odd names"
# an imported model (no optimizer state) is whole without moments
/usr/bin/python3 "$src/tests/ckpt/make_hf.py" hf 64 2 272 >/dev/null 2>&1 &&
  "$baton" ckpt import hf --out imp >/dev/null &&
  expect 0 "intact" -- verify imp
((failures == 0)) || exit 1
