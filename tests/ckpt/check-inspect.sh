#!/usr/bin/env bash
# `baton ckpt inspect` of an fp8 checkpoint saved under pp2 (tests/ckpt/inspect.yaml):
# the tensors listed model first, in layer order (layer 10 after 9), then each optimizer
# state's, text and JSON alike; the columns aligned however long a name is; sizes in a
# unit that fits (the amax histories' few KB not "0.00 MB"); the fp8 states counted as
# active and placeholders (scale 1, all-zero history: layers 0 and 11 under
# first_last_bf16, and the head), as the states themselves say; --help describing --json
# and the exit statuses. A checkpoint removed while inspect reads its fp8 histories (a run's
# retention; BATON_FAULT_CKPT_REMOVE removes it once opened): given the run, the newest
# left is listed, with a note; given the checkpoint itself, exit 1 saying it was removed
# (no listing of it); every one of the 3 tries removed, a final message saying so.
#   check-inspect.sh BATON BATON_WORKER SOURCE_DIR
set -euo pipefail
baton=$1 worker=$2 src=$3
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-inspect.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
"$baton" spec "$src/tests/ckpt/inspect.yaml" --out inspect.pb
timeout 300 "$baton" launch -n 2 -- "$worker" --spec inspect.pb --eval-windows 0 \
  --comm-timeout 30 --run-dir run --save-every 2 >train.log 2>&1 || { cat train.log; fail "training"; }
"$baton" ckpt inspect run >inspect.txt || fail "inspect exited $?"
"$baton" ckpt inspect run --json >inspect.json || fail "inspect --json exited $?"
cat inspect.txt
# a path is printed as it is (a backslash not doubled, as verify prints it); --json
# escapes it as JSON does; a control character is still escaped in the text
mkdir 'b\s' && ln -s "$work/run" $'b\\s/r\t'
"$baton" ckpt inspect $'b\\s/r\t' >bs.txt || fail "inspect of b\\s/r<tab> exited $?"
grep -q '^checkpoint b\\s/r\\t/checkpoints/s00-step[0-9]* (format' bs.txt || { head -1 bs.txt; fail "the path in inspect's text"; }
"$baton" ckpt inspect $'b\\s/r\t' --json | /usr/bin/python3 -c '
import json, sys; d = json.load(sys.stdin); assert d["dir"].startswith("b\\s/r\t/"), d["dir"]' ||
  fail "the path in inspect's --json"

/usr/bin/python3 - inspect.txt inspect.json <<'PY' || fail "inspect's listing"
import json, re, sys
text = open(sys.argv[1]).read().splitlines()
j = json.load(open(sys.argv[2]))
keys = [t["key"] for t in j["tensors"]]

# the expected order, from the model's structure alone
LAYER = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
         "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
         "mlp.down_proj"]
def model_pos(name):
    if name == "model.embed_tokens.weight": return (0,)
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name)
    if m: return (1, int(m.group(1)), LAYER.index(m.group(2)))
    return (2 + ["model.norm.weight", "lm_head.weight"].index(name),)
def pos(key):
    for s, p in ((1, "optim.exp_avg."), (2, "optim.exp_avg_sq.")):
        if key.startswith(p): return (s,) + model_pos(key[len(p):])
    return (0,) + model_pos(key)
want = sorted(keys, key=pos)
assert len(keys) == 3 * (2 + 12 * 9 + 1), len(keys)
assert keys == want, "JSON order:\n" + "\n".join(f"{a:60} {b}" for a, b in zip(keys, want) if a != b)

# the text lists the same tensors in the same order, every column starting in one place
head = next(i for i, l in enumerate(text) if l.split()[:2] == ["tensor", "shape"])
rows = text[head + 1:head + 1 + len(keys)]
assert [r.split()[0] for r in rows] == keys, "the text's order differs from the JSON's"
hdr = text[head]
for r, t in zip(rows, j["tensors"]):
    # shape and dtype start under their heading, shards and bytes end under theirs
    for col, field in (("shape", "x".join(map(str, t["shape"]))), ("dtype", t["dtype"])):
        at = hdr.index(col)
        assert r[at - 1] == " " and r[at:at + len(field)] == field, f"{col}:\n{hdr}\n{r}"
    for col, field in (("shards", str(t["shards"])), ("bytes", str(t["bytes"]))):
        end = hdr.index(col) + len(col)
        assert r[end - len(field) - 1:end] == " " + field and r[end:end + 1] in ("", " "), \
            f"{col}:\n{hdr}\n{r}"

# the fp8 states: placeholders are those with scale 1 and an all-zero history
f = j["fp8"]
ph = [s for s in f if s["scale"] == 1 and not any(s["amax_history"])]
assert all(s["placeholder"] == (s in ph) for s in f), "placeholder flags"
names = sorted(s["name"] for s in ph)
want_ph = sorted([f"layers.{l}.gemm{g}.{t}" for l in (0, 11) for g in range(4)
                  for t in ("x", "w", "dy")] + [f"head.{t}" for t in ("x", "w", "dy")])
assert names == want_ph, names
assert (j["fp8_states"], j["fp8_active"], j["fp8_placeholders"]) == (len(f), len(f) - 27, 27), j
layers = [int(s["name"].split(".")[1]) if s["name"].startswith("layers.") else 99 for s in f]
assert layers == sorted(layers), "fp8 states out of layer order"
line = next(l for l in text if "fp8 scaling state" in l)
assert line.endswith(f"; {len(f)} fp8 scaling state(s): {len(f) - 27} active, 27 placeholder(s)"), line

# sizes: bytes with a unit that keeps 3 significant digits or more
def unit(n):
    for u in ("B", "KB", "MB", "GB"):
        if n < 1000 or u == "GB": return f"{n:.0f} {u}" if u == "B" else f"{n:.2f} {u}"
        n /= 1000
total = sum(t["bytes"] for t in j["tensors"])
assert j["tensor_bytes"] == total
assert f"  {len(keys)} tensors, {total} bytes ({unit(total)})" in text, (total, unit(total))
hb = j["fp8_history_bytes"]
assert f"  {len(f)} fp8 amax histories in the shards, {hb} bytes ({unit(hb)})" in text, (hb, unit(hb))
assert not unit(hb).startswith("0.00")
print(f"{len(keys)} tensors in model order; {len(f)} fp8 states, 27 placeholders; "
      f"{unit(total)}, histories {unit(hb)}")
PY

# a checkpoint removed while inspect reads it (the fp8 histories are in its shards)
ck=$(ls -d run/checkpoints/s00-step* | tail -1)
mkrun() {
  rm -rf g && mkdir -p g/checkpoints
  for i in $(seq "$1"); do cp -r "$ck" "g/checkpoints/s00-step0000000$i"; done
}
mkrun 2
rc=0
BATON_FAULT_CKPT_REMOVE=s00-step00000002 "$baton" ckpt inspect g --json >g.json 2>g.err || rc=$?
[[ $rc == 0 ]] && /usr/bin/python3 -c '
import json, sys; d = json.load(open(sys.argv[1])); assert d["dir"] == "g/checkpoints/s00-step00000001", d["dir"]
assert d["fp8_states"] > 0 and all("amax_history" in s for s in d["fp8"])' g.json &&
  grep -q "^baton ckpt inspect: note: g/checkpoints/s00-step00000002 was removed while it was being read (the run's retention, as it saved a newer one); reading g/checkpoints/s00-step00000001, the newest of g, instead$" g.err ||
  fail "inspect of a run whose newest checkpoint went while read: exit $rc: $(cat g.err; head -c 300 g.json)"
mkrun 1
rc=0
BATON_FAULT_CKPT_REMOVE=s00-step00000001 "$baton" ckpt inspect g/checkpoints/s00-step00000001 \
  >g.out 2>g.err || rc=$?
[[ $rc == 1 && ! -s g.out ]] &&
  grep -q "^baton ckpt inspect: g/checkpoints/s00-step00000001: the checkpoint was removed while it was being read" g.err ||
  fail "inspect of a checkpoint removed while read: exit $rc: $(cat g.out g.err)"
mkrun 4
rc=0
BATON_FAULT_CKPT_REMOVE=s00-step00000004,s00-step00000003,s00-step00000002 "$baton" ckpt inspect g \
  >g.out 2>g.err || rc=$?
[[ $rc == 1 && ! -s g.out ]] &&
  grep -q "^baton ckpt inspect: g/checkpoints/s00-step00000002 was removed while it was being read, as was each checkpoint of g read before it (3 tried; " g.err ||
  fail "inspect of a run whose every checkpoint tried went while read: exit $rc: $(cat g.out g.err)"
echo "ok inspect of checkpoints removed while read"

"$baton" ckpt inspect --help >help.txt || fail "--help exited $?"
grep -q -- "--json " help.txt && grep -q "fp8_placeholders" help.txt &&
  grep -q "^Exit status: 0 shown; 1 " help.txt || { cat help.txt; fail "--help"; }
echo "ok"
