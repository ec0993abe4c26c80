#!/usr/bin/env bash
# `baton eval` end to end on a checkpoint of eval.yaml trained two steps in one process:
#  - its forward-only model (no activations kept for a backward, no attention
#    probabilities) gives the loss the worker's closing validation gives (the training
#    model, which keeps them all) over the same windows, within 1e-6;
#  - --seq-len 8K runs under a 1 GB address-space limit (ulimit -v), where the T x T
#    attention probabilities alone would take 2 GiB (1 window x 4 heads x 8192^2 floats
#    x 2 layers): memory linear in T (without the limit under a sanitizer);
#  - a checkpoint holding a NaN weight (an HF export with one poisoned float, imported):
#    --json prints valid JSON with "loss": null, stderr names the tensor, exit 1 (a NaN
#    with its sign bit set printed "nan" too); --passkey the same, its accuracies null;
#  - --passkey on a dataset without documents says so;
#  - a checkpoint removed while read (a run's retention): the run's newest one read instead,
#    or, named itself, said to be removed (not damaged); each of the 3 tried removed, said
#    so at the end;
#  - a --seq-len beyond the context the checkpoint is for warns: the seq_len it trained at,
#    or its RoPE scaling's extent as plan counts it (llama3: twice original x factor); so do
#    --passkey documents of which the model reads more tokens than that.
#   check-eval.sh BATON BATON_WORKER SOURCE_DIR
set -euo pipefail
baton=$1 worker=$2 src=$3
py=/usr/bin/python3
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-eval.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# 400 short documents, half of them for validation (about 20000 tokens)
mkdir text
for i in $(seq 1 400); do
  printf 'Document %d: %d plus %d is %d, and %d times %d is %d.\n' \
    "$i" "$i" $((i * 7 % 13)) $((i + i * 7 % 13)) "$i" $((i % 9)) $((i * (i % 9))) >"text/$i.txt"
done
"$baton" data prepare --input text --output data/text --valid-fraction 0.5 >/dev/null
"$baton" spec "$src/tests/run/eval.yaml" --stage base --out base.pb
"$worker" --spec base.pb --single-process --eval-windows 8 --save-every 0 --run-dir r >train.log
ck=r/checkpoints/s00-step00000002
[[ -d $ck ]] || fail "no checkpoint $ck: $(cat train.log)"

json_loss() { "$py" -c 'import json, sys; print(json.load(sys.stdin)["loss"])'; }
# the worker's validation (every activation kept) against eval's forward-only pass
want=$(sed -En 's/^valid loss ([0-9.]+) .* over 8 windows of .*/\1/p' train.log)
got=$("$baton" eval "$ck" --data data/text_valid --seq-len 256 --num-seqs 8 --json 2>short.err | json_loss)
[[ ! -s short.err ]] || fail "eval at the trained seq_len 256 says: $(cat short.err)"
"$py" -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6)' "$want" "$got" ||
  fail "eval at seq_len 256: $got, the worker's validation $want"
echo "ok eval $got = the worker's validation $want"

# a checkpoint removed while eval reads it (a run's retention; BATON_FAULT_CKPT_REMOVE
# removes it once opened): given the run directory, eval says so and reads the newest
# checkpoint left; given the checkpoint itself, it says it was removed, not damaged
mkdir -p r2/checkpoints && cp -r "$ck" r2/checkpoints/s00-step00000001 && cp -r "$ck" r2/checkpoints/
echo s00-step00000002 >r2/checkpoints/latest
rc=0
gone=$(BATON_FAULT_CKPT_REMOVE=s00-step00000002 "$baton" eval r2 --data data/text_valid --seq-len 256 \
  --num-seqs 8 --json 2>gone.err | json_loss) || rc=$?
[[ $rc == 0 && $gone == "$got" ]] &&
  grep -q "note: r2/checkpoints/s00-step00000002 was removed while it was being read (the run's retention, as it saved a newer one); reading r2/checkpoints/s00-step00000001, the newest of r2, instead" gone.err ||
  fail "eval of a run whose newest checkpoint went while read: exit $rc, loss $gone: $(cat gone.err)"
rc=0
BATON_FAULT_CKPT_REMOVE=s00-step00000001 "$baton" eval r2/checkpoints/s00-step00000001 \
  --data data/text_valid --seq-len 256 --num-seqs 8 >gone.out 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "r2/checkpoints/s00-step00000001: the checkpoint was removed while it was being read" gone.out ||
  fail "eval of a checkpoint removed while read: exit $rc: $(cat gone.out)"
echo "ok eval of a checkpoint removed while read: $(cat gone.err)"
# each of the 3 checkpoints tried removed while read: a final message saying so, not a
# missing file
rm -rf r2 && mkdir -p r2/checkpoints
for i in 1 2 3 4; do cp -r "$ck" r2/checkpoints/s00-step0000000$i; done
rc=0
BATON_FAULT_CKPT_REMOVE=s00-step00000004,s00-step00000003,s00-step00000002 "$baton" eval r2 \
  --data data/text_valid --seq-len 256 --num-seqs 8 >gone.out 2>&1 || rc=$?
[[ $rc == 1 ]] && ! grep -q "No such file" gone.out &&
  grep -q "^baton eval: r2/checkpoints/s00-step00000002 was removed while it was being read, as was each checkpoint of r2 read before it (3 tried; a run's retention removes its older checkpoints as it saves new ones, here faster than one is read): none is damaged; try again, or name a stage's final checkpoint, which retention keeps$" gone.out ||
  fail "eval of a run whose every checkpoint tried went while read: exit $rc: $(cat gone.out)"
echo "ok eval of a run whose every checkpoint tried went while read"

# a long window in bounded memory (one BLAS thread: its buffers are address space too)
limit=1000000 # KiB
if grep -q __asan_init "$baton"; then
  echo "SKIPPED: the address-space limit (a sanitizer build reserves terabytes of it)"
  limit=unlimited
fi
rc=0
(ulimit -v $limit && OPENBLAS_NUM_THREADS=1 exec "$baton" eval "$ck" --data data/text_valid \
  --seq-len 8K --num-seqs 1 --json) >long.json 2>long.err || rc=$?
[[ $rc == 0 ]] || fail "eval --seq-len 8K under ulimit -v $limit: exit $rc: $(cat long.err)"
"$py" - long.json <<'PY' || fail "eval --seq-len 8K: $(cat long.json)"
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["tokens"] == 8192 and r["windows"] == 1 and math.isfinite(r["loss"]), r
assert 0 < r["loss"] < 8, r  # two steps in: about ln 272 = 5.6
PY
echo "ok eval at seq_len 8K within ulimit -v $limit: $(cat long.json)"
# ... beyond the 256 tokens the checkpoint was trained at: run, with a warning
grep -qF "baton eval: warning: --seq-len 8192 is beyond the context the checkpoint is for, 256 (the seq_len it was trained at)" long.err ||
  fail "eval --seq-len 8K of a checkpoint trained at 256 says: $(cat long.err)"

# ... or than its RoPE scaling extends to (128 x 4 = 512, beyond the 256 trained at)
"$baton" spec "$src/tests/run/eval.yaml" --stage base --out scaled.pb \
  --set 'model.rope={theta: 10000, scaling: {type: linear, factor: 4, original_max_position: 128}}'
"$worker" --spec scaled.pb --single-process --eval-windows 0 --save-every 0 --run-dir rs >/dev/null
"$baton" eval rs --data data/text_valid --seq-len 512 --num-seqs 1 >scaled.out 2>scaled.err
[[ ! -s scaled.err ]] || fail "eval at the scaled context 512 says: $(cat scaled.err)"
grep -q " over 1 window of 512+1 tokens of " scaled.out || fail "eval of one window says: $(cat scaled.out)"
"$baton" eval rs --data data/text_valid --seq-len 1K --num-seqs 1 >/dev/null 2>scaled.err
grep -qF "warning: --seq-len 1024 is beyond the context the checkpoint is for, 512 (its RoPE scaling's original_max_position 128 x factor 4)" scaled.err ||
  fail "eval --seq-len 1K beyond the scaled context says: $(cat scaled.err)"
echo "ok eval beyond the trained context: $(cat scaled.err)"
# ... llama3's extends to twice original x factor, as plan counts it (128 x 2 x 2 = 512):
# no warning at 512, one naming the doubling beyond it
"$baton" spec "$src/tests/run/eval.yaml" --stage base --out l3.pb \
  --set 'model.rope={theta: 10000, scaling: {type: llama3, factor: 2, original_max_position: 128, low_freq_factor: 1, high_freq_factor: 4}}'
"$worker" --spec l3.pb --single-process --eval-windows 0 --save-every 0 --run-dir rl3 >/dev/null
"$baton" eval rl3 --data data/text_valid --seq-len 512 --num-seqs 1 >/dev/null 2>l3.err
[[ ! -s l3.err ]] || fail "eval at llama3's scaled context 512 says: $(cat l3.err)"
"$baton" eval rl3 --data data/text_valid --seq-len 1K --num-seqs 1 >/dev/null 2>l3.err
grep -qF "warning: --seq-len 1024 is beyond the context the checkpoint is for, 512 (its RoPE scaling's original_max_position 128 x factor 2 x 2 for llama3)" l3.err ||
  fail "eval --seq-len 1K beyond llama3's scaled context says: $(cat l3.err)"
echo "ok eval beyond llama3's context: $(cat l3.err)"

# a NaN weight: valid JSON, the tensor named, exit 1
"$baton" ckpt export "$ck" --out hf >/dev/null
# poison HF_DIR TENSOR INDEX BITS: the float32 of those bits at TENSOR[INDEX]
poison() {
  "$py" - "$1/model.safetensors" "$2" "$3" "$4" <<'PY'
import json, struct, sys
path, name, index, bits = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4], 16)
with open(path, "r+b") as f:
    n, = struct.unpack("<Q", f.read(8))
    meta = json.loads(f.read(n))[name]
    assert meta["dtype"] == "F32"
    f.seek(8 + n + meta["data_offsets"][0] + 4 * index)
    f.write(struct.pack("<I", bits))
PY
}
cp -r hf hf-neg
poison hf model.layers.1.mlp.up_proj.weight 5 7fc00000
"$baton" ckpt import hf --out nan/ck >/dev/null
rc=0
"$baton" eval nan/ck --data data/text_valid --seq-len 64 --num-seqs 4 --json >nan.json 2>nan.err || rc=$?
[[ $rc == 1 ]] || fail "eval of a NaN checkpoint: exit $rc, not 1"
"$py" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["loss"] is None, r' nan.json ||
  fail "eval --json of a NaN checkpoint: $(cat nan.json)"
grep -qF "baton eval: loss is not finite (nan): the checkpoint holds NaN/Inf weights: model.layers.1.mlp.up_proj.weight, the first, has nan at element 5" nan.err ||
  fail "eval of a NaN checkpoint says: $(cat nan.err)"
echo "ok a NaN weight: $(cat nan.json); $(cat nan.err)"
# a NaN with its sign bit set: printed "nan" all the same, never "-nan"
poison hf-neg model.layers.0.self_attn.q_proj.weight 3 ffc00000
"$baton" ckpt import hf-neg --out nan/neg >/dev/null
rc=0
"$baton" eval nan/neg --data data/text_valid --seq-len 64 --num-seqs 4 >neg.out 2>neg.err || rc=$?
[[ $rc == 1 ]] || fail "eval of a -NaN checkpoint: exit $rc, not 1"
grep -qF "baton eval: loss is not finite (nan): the checkpoint holds NaN/Inf weights: model.layers.0.self_attn.q_proj.weight, the first, has nan at element 3" neg.err &&
  ! grep -q -- "-nan" neg.err || fail "eval of a -NaN checkpoint says: $(cat neg.err)"
echo "ok a negative NaN weight: $(cat neg.err)"

# --passkey on the NaN checkpoint: null accuracies, the tensor named, exit 1 (the healthy
# checkpoint: numbers, exit 0)
"$baton" data passkey --output pk/pk --n-docs 3 --length 200 >/dev/null
"$baton" eval "$ck" --passkey pk/pk --json >pk.json 2>pk.err || fail "eval --passkey: exit $?"
"$py" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["docs"] == 3 and 0 <= r["passkey_accuracy"] <= 1, r' pk.json ||
  fail "eval --passkey --json: $(cat pk.json)"
[[ ! -s pk.err ]] || fail "eval --passkey of documents within the trained 256 says: $(cat pk.err)"
# documents longer than the 256 tokens the checkpoint trained at: the --seq-len warning, for
# the tokens the model reads (up to the last answer digit: 259 of 259 are within, 260 not)
"$baton" data passkey --output pk/long --n-docs 2 --length 260 >/dev/null
"$baton" data passkey --output pk/edge --n-docs 2 --length 259 >/dev/null
"$baton" eval "$ck" --passkey pk/edge >/dev/null 2>pk.err || fail "eval --passkey (259): exit $?"
[[ ! -s pk.err ]] || fail "eval --passkey of 259-token documents (256 read) says: $(cat pk.err)"
"$baton" eval "$ck" --passkey pk/long >/dev/null 2>pk.err || fail "eval --passkey (260): exit $?"
grep -qF "baton eval: warning: the longest passkey document, 260 tokens (of which the model reads 257), is beyond the context the checkpoint is for, 256 (the seq_len it was trained at): the retrieval measures how far the model extrapolates" pk.err ||
  fail "eval --passkey of 260-token documents says: $(cat pk.err)"
echo "ok eval --passkey beyond the trained context: $(cat pk.err)"
rc=0
"$baton" eval nan/ck --passkey pk/pk --json >pknan.json 2>pknan.err || rc=$?
[[ $rc == 1 ]] || fail "eval --passkey of a NaN checkpoint: exit $rc, not 1: $(cat pknan.err)"
"$py" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["passkey_accuracy"] is None and r["digit_accuracy"] is None and r["docs"] == 3, r' pknan.json ||
  fail "eval --passkey --json of a NaN checkpoint: $(cat pknan.json)"
grep -qF "baton eval: logits are not finite in 3 of 3 passkey documents: the checkpoint holds NaN/Inf weights: model.layers.1.mlp.up_proj.weight, the first, has nan at element 5" pknan.err ||
  fail "eval --passkey of a NaN checkpoint says: $(cat pknan.err)"
rc=0
"$baton" eval nan/ck --passkey pk/pk >pknan.out 2>pknan.err || rc=$?
[[ $rc == 1 && ! -s pknan.out ]] || fail "eval --passkey of a NaN checkpoint (text): exit $rc: $(cat pknan.out)"
echo "ok --passkey on a NaN weight: $(cat pknan.err)"

# passkey data without a document
"$py" -c '
import struct
open("empty.idx", "wb").write(b"MMIDIDX\0\0" + struct.pack("<QBQQq", 1, 8, 0, 1, 0))
open("empty.bin", "wb").close()'
rc=0
"$baton" eval "$ck" --passkey empty >empty.out 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "empty holds no document to evaluate" empty.out ||
  fail "eval --passkey of an empty dataset: exit $rc: $(cat empty.out)"
echo "ok eval --passkey of an empty dataset: $(cat empty.out)"
echo PASS
