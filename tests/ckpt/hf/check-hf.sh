#!/usr/bin/env bash
# `baton ckpt export --format hf` and `import --format hf` end to end:
#  - each RoPE variant of hf.yaml (none, linear, ntk, llama3, yarn, yarn with
#    "truncate": false) and a tp2 checkpoint,
#    exported in fp32: an independent float64 PyTorch LLaMA (hf_llama_loss.py, reading
#    model.safetensors and config.json itself) gives the loss `baton eval` gives on the
#    checkpoint, within 1e-5 relative; and the same oracle with a different RoPE in
#    config.json does not (the comparison can fail; for truncate false the control only
#    drops that key, so the oracle must honour it);
#  - the file layout: header padded to 8, tensors sorted by name and laid out in that
#    order, exactly the model's 3 + 9 L tensors (no optimizer state), metadata format pt;
#  - --dtype bf16: BF16 tensors, loss within 1e-2 relative;
#  - export -> import -> export gives byte-identical files (fp32 and bf16), and the
#    imported checkpoint evaluates to exactly the original's loss;
#  - bad usage and bad input: exit 2 with a message naming the input, nothing left behind.
# SKIPPED (77) where /usr/bin/python3 cannot import torch.
#   check-hf.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3 ckpt_edit=$4
# Under ASan, OpenPMIx's own leaks are suppressed (see that file); ours are not.
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
here=$src/tests/ckpt/hf
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: $py cannot import torch (apt-get install python3-torch)"
  exit 77
fi
work=$(mktemp -d /tmp/baton-test-hf.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
T=64 N=8 data=data/fortunes_valid

"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1

train() { # STAGE RANKS: a checkpoint of the stage's last step under run-STAGE
  "$baton" spec "$here/hf.yaml" --stage "$1" --out "$1.pb" || return 1
  local args=(--spec "$1.pb" --eval-windows 0 --save-every 0 --run-dir "run-$1")
  if [[ $2 -eq 1 ]]; then
    "$worker" "${args[@]}" --single-process >"$1.log"
  else
    timeout 300 "$baton" launch -n "$2" -- "$worker" "${args[@]}" --comm-timeout 30 >"$1.log"
  fi
}
json_loss() { "$py" -c 'import json, sys; print(repr(json.load(sys.stdin)["loss"]))'; }
eval_loss() { "$baton" eval "$1" --data "$data" --seq-len $T --num-seqs $N --json | json_loss; }
# torch_losses DIR...: the oracle on every DIR in one run (torch imported once), into
# torch.jsonl; torch_loss DIR then reads DIR's
torch_losses() { "$py" "$here/hf_llama_loss.py" "$@" "$data" $T $N >torch.jsonl || fail "oracle"; }
torch_loss() { grep -F "{\"dir\": \"$1\"," torch.jsonl | json_loss; }
# within WHAT A B TOL: |a - b| <= TOL |a|; beyond: the opposite. Both fail unless A and
# B are finite decimal numbers: mawk's NaN compares true with <= (and ==), so a nan or
# inf loss must be rejected by its printed form before any comparison.
finite='^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$'
within() {
  awk -v w="$1" -v a="$2" -v b="$3" -v tol="$4" -v num="$finite" 'BEGIN {
    if (a !~ num || b !~ num) { printf "%s: %s vs %s, not both finite numbers\n", w, a, b; exit 1 }
    d = a - b; if (d < 0) d = -d
    r = a != 0 ? d / (a < 0 ? -a : a) : 1
    printf "%s: %s vs %s, relative difference %.3g (tolerance %s)\n", w, a, b, r, tol
    exit !(r <= tol) }' || fail "$1"
}
beyond() {
  awk -v w="$1" -v a="$2" -v b="$3" -v tol="$4" -v num="$finite" 'BEGIN {
    if (a !~ num || b !~ num) { printf "%s: %s vs %s, not both finite numbers\n", w, a, b; exit 1 }
    d = a - b; if (d < 0) d = -d
    r = a != 0 ? d / (a < 0 ? -a : a) : 0
    printf "%s: %s vs %s, relative difference %.3g (must exceed %s)\n", w, a, b, r, tol
    exit !(r > tol) }' || fail "$1"
}
# check_format DIR DTYPE LAYERS: the safetensors layout export promises.
check_format() {
  "$py" - "$1/model.safetensors" "$2" "$3" <<'PY' || fail "$1: file layout"
import json, struct, sys
path, dtype, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
blob = open(path, "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
assert n % 8 == 0 and blob[8 + n - 1 : 8 + n] in (b"}", b" "), "header not padded to 8"
h = json.loads(blob[8 : 8 + n])
assert h.pop("__metadata__") == {"format": "pt"}, "metadata"
names = sorted(h)
per = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
       "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
       "mlp.down_proj"]
want = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"] + [
    f"model.layers.{l}.{p}.weight" for l in range(layers) for p in per]
assert names == sorted(want), f"tensors {names}"
at = 0
for k in names:  # data in name order, back to back, to the end of the file
    assert h[k]["dtype"] == dtype, f"{k}: dtype {h[k]['dtype']}"
    assert h[k]["data_offsets"][0] == at, f"{k}: offsets"
    at = h[k]["data_offsets"][1]
assert 8 + n + at == len(blob), "file size"
print(f"{path}: {len(names)} tensors, {dtype}, header {n} bytes, sorted, no optimizer state")
PY
}
# control DIR OUT: a copy whose config.json has another RoPE (YaRN's "truncate": false
# dropped, else the scaling dropped, or without one, half the base).
control() {
  rm -rf "$2" && cp -r "$1" "$2" && "$py" - "$2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
if c["rope_scaling"] and "truncate" in c["rope_scaling"]:
    del c["rope_scaling"]["truncate"]
elif c["rope_scaling"]:
    c["rope_scaling"] = None
else:
    c["rope_theta"] /= 2
json.dump(c, open(sys.argv[1], "w"))
PY
}

# ---- export against the PyTorch oracle ----
cases=() oracle=()
for case in plain:1 linear:1 ntk:1 llama3:1 yarn:1 yarn-notrunc:1 tp2:2; do
  s=${case%:*} ranks=${case#*:}
  train "$s" "$ranks" || { fail "$s: training to make a checkpoint"; continue; }
  "$baton" ckpt export "run-$s" --format hf --out "hf-$s" >/dev/null || { fail "$s: export"; continue; }
  check_format "hf-$s" F32 2
  control "hf-$s" "ctl-$s" || { fail "$s: control copy"; continue; }
  cases+=("$s") oracle+=("hf-$s" "ctl-$s")
done
grep -q '"rope_type": "yarn"' hf-yarn/config.json || fail "yarn: rope_scaling not in config.json"
grep -q '"truncate": false' hf-yarn-notrunc/config.json || fail "yarn-notrunc: no \"truncate\": false"
# the context the checkpoint records, the seq_len 64 it was trained at (longer than the
# scaling's original 16), not twice original x factor (256), which only Llama 3.1 has
grep -q '"max_position_embeddings": 64,' hf-llama3/config.json ||
  fail "llama3: max_position_embeddings $(grep -o '"max_position_embeddings": [0-9]*' hf-llama3/config.json), not 64"
grep -q '"max_position_embeddings": 64,' hf-yarn/config.json ||
  fail "yarn: max_position_embeddings $(grep -o '"max_position_embeddings": [0-9]*' hf-yarn/config.json), not 64"
"$baton" ckpt export run-plain --dtype bf16 --out hf16 >/dev/null || fail "export --dtype bf16"
check_format hf16 BF16 2
torch_losses "${oracle[@]}" hf16
for s in "${cases[@]}"; do
  ref=$(eval_loss "run-$s")
  within "$s: baton eval vs PyTorch on the export" "$ref" "$(torch_loss "hf-$s")" 1e-5
  beyond "$s: ... with another RoPE" "$ref" "$(torch_loss "ctl-$s")" 1e-5
done
[[ ${#cases[@]} -eq 7 ]] || fail "only ${#cases[@]} of 7 cases reached the oracle"
within "plain: bf16 export vs fp32 checkpoint" "$(eval_loss run-plain)" "$(torch_loss hf16)" 1e-2

# ---- round trips ----
"$baton" ckpt import --format hf hf-plain --out ck/imp --recipe-name rt >/dev/null || fail "import"
"$baton" ckpt export ck/imp --out hf-rt >/dev/null || fail "export of the import"
cmp hf-plain/model.safetensors hf-rt/model.safetensors || fail "fp32 round trip changed the weights"
cmp hf-plain/config.json hf-rt/config.json || fail "fp32 round trip changed config.json"
[[ "$(eval_loss run-plain)" == "$(eval_loss ck/imp)" ]] || fail "the import evaluates differently"
"$baton" ckpt import hf16 --out ck/imp16 >/dev/null || fail "import of bf16"
"$baton" ckpt export ck/imp16 --dtype bf16 --out hf16-rt >/dev/null || fail "export of bf16 import"
cmp hf16/model.safetensors hf16-rt/model.safetensors || fail "bf16 round trip changed the weights"
for s in linear ntk llama3 yarn yarn-notrunc tp2; do # every rope_scaling reads back as it was written
  "$baton" ckpt import "hf-$s" --out "ck/imp-$s" >/dev/null &&
    "$baton" ckpt export "ck/imp-$s" --out "hf-rt-$s" >/dev/null &&
    cmp "hf-$s/config.json" "hf-rt-$s/config.json" || fail "$s: config.json round trip"
done
echo "round trips: byte-identical model.safetensors and config.json"
# transformers 5's layout (rope_theta inside "rope_parameters", the top-level one null)
# imports as the same model: its export is the original config.json (ntk's folded base
# is not the default 10000, yarn-notrunc has a scaling)
for s in ntk yarn-notrunc; do
  rm -rf "hf-v5-$s" && cp -r "hf-$s" "hf-v5-$s" && "$py" - "hf-v5-$s/config.json" <<'PY' &&
import json, sys
c = json.load(open(sys.argv[1]))
rp = c.pop("rope_scaling") or {"rope_type": "default"}
c["rope_parameters"] = dict(rp, rope_theta=c["rope_theta"])
c["rope_theta"] = None
json.dump(c, open(sys.argv[1], "w"))
PY
    "$baton" ckpt import "hf-v5-$s" --out "ck/imp-v5-$s" >/dev/null &&
    "$baton" ckpt export "ck/imp-v5-$s" --out "hf-rt-v5-$s" >/dev/null &&
    cmp "hf-$s/config.json" "hf-rt-v5-$s/config.json" || fail "$s: transformers 5 layout"
done

# ---- a run that starts from the imported model (recipe key init) ----
sed -n '1,/^stages:/p' "$here/hf.yaml" >one.yaml && echo '  - {name: plain, steps: 3}' >>one.yaml
"$baton" run one.yaml --run-dir fine --set init=ck/imp --quiet --worker "$worker" >fine.out 2>&1 ||
  fail "run from the import: $(tail -n 3 fine.out)"
grep -rqh "started from ck/imp at step 0" fine/logs || fail "the run did not start from the import"
! grep -rqh "trained with another RoPE" fine/logs || fail "a RoPE note for the same RoPE"
# an init checkpoint of another RoPE: the worker notes the fields (the stage uses its own)
"$baton" run one.yaml --run-dir fine-rope --set init=ck/imp-yarn-notrunc --quiet \
  --worker "$worker" >fine-rope.out 2>&1 || fail "run from the yarn import: $(tail -n 3 fine-rope.out)"
# (hf.yaml's stages overlay one another: yarn-notrunc has the ntk stage's theta 5000)
grep -rqhF 'ck/imp-yarn-notrunc was trained with another RoPE than stage "plain" trains with (rope.theta 5000 -> 10000, rope.scaling.type yarn -> none): the stage uses its own' fine-rope/logs ||
  fail "no RoPE note for an init checkpoint of another RoPE"
rc=0
"$baton" run one.yaml --run-dir nowhere-run --set init=nowhere --quiet >bad.out 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q "init: nowhere: no such checkpoint" bad.out ||
  fail "init of a missing checkpoint: exit $rc: $(cat bad.out)"
# another model's checkpoint: refused by the workers as a configuration error, not retried
rc=0
"$baton" run one.yaml --run-dir other --set init=ck/imp --set model.n_layers=1 --quiet \
  --worker "$worker" >other.out 2>&1 || rc=$?
attempts=$("$baton" status other --json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["stages"][0]["attempts"])')
[[ $rc == 2 && $attempts == 1 ]] && grep -q "saved from a different model" other.out ||
  fail "init of another model: exit $rc after $attempts attempt(s): $(tail -n 3 other.out)"
echo "a run starts from the imported model; a missing init is refused before it starts, another model's after one attempt"

# ---- usage and bad input ----
expect() { # STATUS PATTERN -- ARGS
  local status=$1 pattern=$2 out rc
  shift 3
  out=$("$baton" ckpt "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "baton ckpt $* -> exit $rc (want $status, /$pattern/): $(tail -n 3 <<<"$out")"
  else
    echo "ok   baton ckpt $* -> $rc"
  fi
}
bad() { # NAME PYTHON-EDIT: a copy of hf-plain with config.json edited by the snippet
  rm -rf "$1" && cp -r hf-plain "$1" &&
    "$py" -c "import json; p='$1/config.json'; c=json.load(open(p)); $2; json.dump(c, open(p, 'w'))"
}
expect 0 'usage: baton ckpt export' -- export --help
expect 0 'usage: baton ckpt import' -- import --help
expect 2 '--out DIR is required' -- export run-plain
expect 2 'nowhere' -- export nowhere --out x
expect 2 "--dtype 'fp16'" -- export run-plain --dtype fp16 --out x
expect 2 "--format 'gguf' is not supported" -- export run-plain --format gguf --out x
expect 2 'unknown option' -- import hf-plain --out ck/x --frobnicate
mkdir -p b1 && printf '{"hidden_size": 64,\n  "vocab_size": }' >b1/config.json &&
  cp hf-plain/model.safetensors b1/
expect 2 'b1/config.json:2:17: invalid JSON' -- import b1 --out ck/b1
bad b2 'del c["num_hidden_layers"]'
expect 2 'b2/config.json: missing "num_hidden_layers"' -- import b2 --out ck/b2
bad b3 'c["rope_scaling"] = {"rope_type": "dynamic", "factor": 2.0}'
expect 2 "rope_scaling type 'dynamic' is not supported" -- import b3 --out ck/b3
bad b3n 'c["rope_theta"] = None'
expect 2 'b3n/config.json: "rope_theta" is null: give the base as a number' -- import b3n --out ck/b3n
bad b4 'c["intermediate_size"] = 128'
expect 2 "b4/model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has shape \[176, 64\]; config.json implies \[128, 64\]" \
  -- import b4 --out ck/b4
bad b5 'c["hidden_act"] = "gelu"'
expect 2 '"hidden_act" must be silu' -- import b5 --out ck/b5
rm -rf b6 && cp -r hf-plain b6 && head -c 100000 hf-plain/model.safetensors >b6/model.safetensors
expect 2 'b6/model.safetensors: truncated' -- import b6 --out ck/b6
rm -f b6/model.safetensors
expect 2 'b6/model.safetensors: cannot open' -- import b6 --out ck/b6
printf 'garbage!' >b6/model.safetensors
expect 2 'b6/model.safetensors: header length' -- import b6 --out ck/b6
# the safetensors header edited (h: its bytes), the header length and padding made again
badst() { # NAME PYTHON-EDIT
  rm -rf "$1" && cp -r hf-plain "$1" && "$py" - "$1/model.safetensors" "$2" <<'PY'
import json, struct, sys
p, edit = sys.argv[1], sys.argv[2]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, body = b[8:8 + n].rstrip(b" "), b[8 + n:]
exec(edit)
h += b" " * (-len(h) % 8)
open(p, "wb").write(struct.pack("<Q", len(h)) + h + body)
PY
}
# names baton cannot keep or print as they are: refused, escaped in the message
badst b7 'h = h.replace(b"\"model.norm.weight\"", b"\"model.norm.weight\\u0000x\"")'
expect 2 'b7/model.safetensors:1:[0-9]+: invalid JSON: \\u0000 \(NUL\) in a string' -- import b7 --out ck/b7
badst b8 'h = h.replace(b"\"model.norm.weight\"", b"\"bad\xff\xfe\"")'
expect 2 'b8/model.safetensors:1:[0-9]+: invalid JSON: a string that is not UTF-8' -- import b8 --out ck/b8
badst b9 'h = h.replace(b"\"model.norm.weight\"", b"\"model.norm.weight\\n\\u0001\"")'
expect 2 "b9/model.safetensors: tensor 'model\.norm\.weight\\\\n\\\\x01': its name holds a control character \(byte 17" \
  -- import b9 --out ck/b9
# two tensors over the same bytes: the overlap named, not the hole it leaves elsewhere
badst b10 'd = json.loads(h); k = "model.layers.0.self_attn."; d[k + "o_proj.weight"]["data_offsets"] = d[k + "q_proj.weight"]["data_offsets"]; h = json.dumps(d).encode()'
expect 2 "b10/model.safetensors: tensor 'model.layers.0.self_attn.(o|q)_proj.weight': its data \[[0-9]+, [0-9]+\) overlaps tensor 'model.layers.0.self_attn.(o|q)_proj.weight''s" \
  -- import b10 --out ck/b10
expect 2 "--recipe-name '': name the recipe" -- import hf-plain --out ck/rn1 --recipe-name ''
expect 2 "--recipe-name 'we\"ird\\\\n\\\\x01': byte 6 is a control character or not UTF-8" \
  -- import hf-plain --out ck/rn2 --recipe-name $'we"ird\n\x01'
expect 2 "--recipe-name 'a\\\\xff': byte 1" -- import hf-plain --out ck/rn3 --recipe-name $'a\xff'
expect 2 "--out 'ck/imp' already exists" -- import hf-plain --out ck/imp
left=$(ls -A ck | grep -Ev '^(imp|imp16|imp-[a-z0-9-]+|latest)$')
[[ -z "$left" ]] || fail "failed imports left behind: $left"

# ---- max_position_embeddings and what has no Hugging Face form ----
# a linear scaling keeps its context through import and export (HF's linear has no
# original_max_position: the import keeps max_position_embeddings / factor)
bad lin 'c["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}; c["max_position_embeddings"] = 256'
"$baton" ckpt import lin --out ck/lin >/dev/null && "$baton" ckpt export ck/lin --out hf-lin >/dev/null &&
  cmp lin/config.json hf-lin/config.json >/dev/null 2>&1 ||
  "$py" - lin/config.json hf-lin/config.json <<'PY' || fail "linear: max_position_embeddings or rope_scaling changed"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert b["max_position_embeddings"] == 256, b["max_position_embeddings"]
assert b["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}, b["rope_scaling"]
PY
# an imported Llama 3.2 (llama3, factor 32 for 8192: 131072) exports the context it came
# with, not twice original x factor (524288); so does one of another shape (256)
for l in 131072:8192 256:16; do
  bad l32 "c['rope_scaling'] = {'rope_type': 'llama3', 'factor': 32.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, 'original_max_position_embeddings': ${l#*:}}; c['max_position_embeddings'] = ${l%:*}"
  rm -rf ck/l32 hf-l32
  "$baton" ckpt import l32 --out ck/l32 >/dev/null && "$baton" ckpt export ck/l32 --out hf-l32 >/dev/null &&
    "$py" - l32/config.json hf-l32/config.json <<'PY' || fail "llama3 factor 32: max_position_embeddings or rope_scaling changed"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert b["max_position_embeddings"] == a["max_position_embeddings"], (b["max_position_embeddings"], a["max_position_embeddings"])
assert b["rope_scaling"] == a["rope_scaling"], b["rope_scaling"]
PY
done
# the plain model's context is the seq_len it was trained at (the checkpoint keeps it);
# one saved before that was kept: the default, said out loud
grep -q '"max_position_embeddings": 64,' hf-plain/config.json || fail "the plain export's context is not its seq_len 64"
cp -r run-plain run-old && "$ckpt_edit" "$(ls -d run-old/checkpoints/s*)" --drop-seq-len || fail "ckpt_edit"
expect 0 "note: max_position_embeddings is 2048, Hugging Face's default" -- export run-old --out hf-note
expect 0 "exported" -- export run-old --out hf-note2 --max-position 64
grep -q '"max_position_embeddings": 64,' hf-note2/config.json || fail "--max-position 64 not in config.json"
# below the original context a llama3 or yarn scaling records (16): refused, nothing written
expect 2 "--max-position 8 is below the original context of the checkpoint's llama3 RoPE scaling, original_max_position 16" \
  -- export run-llama3 --out hf-short --max-position 8
expect 2 "yarn RoPE scaling, original_max_position 16" -- export run-yarn --out hf-short --max-position 15
[[ -e hf-short ]] && fail "a refused --max-position left hf-short"
expect 0 "exported" -- export run-llama3 --out hf-orig --max-position 16
# a failed export leaves no --out, no partial directory beside it, and a directory that
# was there as it was
cp -r run-plain run-cut && shard=$(ls run-cut/checkpoints/*/rank-*.bin | head -n 1) &&
  truncate -s 100000 "$shard"
expect 1 'run-cut/checkpoints/.*truncated' -- export run-cut --out hf-cut
mkdir -p mine && echo keep >mine/notes.txt
expect 1 'truncated' -- export run-cut --out mine
[[ ! -e hf-cut && -z "$(ls -d hf-cut.partial-* mine.partial-* 2>/dev/null)" ]] ||
  fail "a failed export left $(ls -d hf-cut* mine.partial-* 2>/dev/null)"
[[ "$(ls -A mine)" == notes.txt ]] || fail "a failed export changed mine/: $(ls -A mine)"
expect 0 "exported" -- export run-plain --out mine
[[ "$(ls -A mine | tr '\n' ' ')" == "config.json model.safetensors notes.txt " ]] ||
  fail "an export into mine/: $(ls -A mine)"
# an MoE model: refused, saying why, before anything is written
"$baton" spec "$src/tests/engine/moe.yaml" --set defaults.steps=2 --set defaults.parallel.ep=1 \
  --set cluster.gpus_per_node=1 --out moe.pb &&
  "$worker" --spec moe.pb --eval-windows 0 --save-every 0 --run-dir run-moe --single-process \
    >moe.log 2>&1 || fail "training an MoE checkpoint"
expect 2 'mixture of experts \(n_experts 4, top_k 2\): MoE models are not exportable to the Hugging Face LLaMA format' \
  -- export run-moe --out hf-moe
[[ ! -e hf-moe && -z "$(ls -d hf-moe.partial-* 2>/dev/null)" ]] || fail "a refused MoE export left hf-moe"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "Hugging Face export/import: all checks passed"
