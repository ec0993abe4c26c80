#!/usr/bin/env bash
# A stage's data position against its data, over a mixture of two small sources (A and B
# of 64 windows each at weights 3:1, so A is drawn 768 times a block of 1024):
#   - a resume of the same stage equals the run that never stopped (every loss);
#   - the checkpoint records the sources' token and document counts and the sample order
#     (`baton ckpt inspect --json`);
#   - data rewritten under the same prefix since the checkpoint: the resume is refused,
#     exit 2, naming the dataset and both counts, with no fall back to an older
#     checkpoint, also when the newest is damaged and the older one would be loaded; a
#     worker given that checkpoint by --init (the remedy the refusal names) with this
#     spec, which `baton spec` wrote and so belongs to no run, continues from it, warned;
#   - a checkpoint from before the counts and the order were recorded (ckpt_edit
#     --drop-data) resumes in the order it was saved under (by slot: other samples than
#     the run that never stopped), and a resume of that resume keeps it (equal losses).
#   check-resume-data.sh BATON BATON_WORKER CKPT_EDIT
set -euo pipefail
baton=$1 worker=$2 edit=$3
py=/usr/bin/python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-resume-data.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# text NAME SEED LETTERS: 512 bytes of random letters
text() { "$py" -c "import random, sys; random.seed($2); sys.stdout.write(''.join(random.choice('$3') for _ in range(512)))" >"$1"; }
text a.txt 1 abcdefghij
text b.txt 2 KLMNOPQRST
"$baton" data prepare --input a.txt --output d/A --valid-fraction 0 >/dev/null
"$baton" data prepare --input b.txt --output d/B --valid-fraction 0 >/dev/null
cat >mix.yaml <<'EOF'
name: mixres
seed: 7
model: {arch: llama, dim: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, ffn_dim: 64, vocab_size: 320, norm_eps: 1e-5, rope: {theta: 10000}}
cluster: {nodes: 1, gpus_per_node: 1, device: cpu, gpu: {memory: 2GB, peak_tflops_bf16: 0.1, peak_tflops_fp32: 0.1}}
data: {mix: [{path: d/A_train, weight: 3}, {path: d/B_train, weight: 1}], valid: d/A_train}
defaults:
  seq_len: 8
  global_batch: 4
  micro_batch: 4
  parallel: {tp: 1, pp: 1, dp: 1, cp: 1}
  precision: fp32
  optimizer: {lr: 1e-2, warmup_steps: 0, schedule: constant, weight_decay: 0}
  checkpoint: {every_steps: 5, keep: 100}
stages:
  - {name: s1, steps: 20}
EOF
"$baton" spec mix.yaml --stage 0 --out s.pb >/dev/null

# train LOG ARGS...: the worker, one process, its step lines ("STEP LOSS") in LOG
train() {
  local log=$1 rc=0
  shift
  "$worker" --spec s.pb --single-process --eval-windows 0 "$@" >"$log.out" 2>"$log.err" || rc=$?
  [[ $rc == 0 ]] || { cat "$log.out" "$log.err" >&2; fail "worker exit $rc: $*"; }
  awk '$1 == "step" { split($2, s, "/"); print s[1] + 0, $4 }' "$log.out" >"$log"
}
# steps LOG FROM TO: the losses of steps FROM..TO
steps() { awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b' "$1"; }

train full.log --run-dir full
[[ $(wc -l <full.log) == 20 ]] || fail "the full run logged $(wc -l <full.log) steps"
train part.log --run-dir part --steps 10
cp -a part old
cp -a part changed
train resumed.log --run-dir part --init part
[[ $(steps resumed.log 11 20) == "$(steps full.log 11 20)" ]] ||
  fail "the resume differs from the run that never stopped: $(diff <(steps resumed.log 11 20) <(steps full.log 11 20))"
echo "ok a mixture stage resumed equals the run that never stopped"

"$baton" ckpt inspect part/checkpoints/s00-step00000010 --json | "$py" -c '
import json, sys
j = json.load(sys.stdin)
want = [{"path": "d/A_train", "tokens": 513, "documents": 1}, {"path": "d/B_train", "tokens": 513, "documents": 1}]
assert j["data"] == want, j["data"]
assert j["sample_order"] == 1, j["sample_order"]' || fail "the checkpoint's data counts"
shown=$("$baton" ckpt inspect part/checkpoints/s00-step00000010)
grep -qF "  training data: d/A_train (513 tokens, 1 document), d/B_train (513 tokens, 1 document); mixture order per source" <<<"$shown" ||
  fail "ckpt inspect does not show the data: $shown"
echo "ok the checkpoint records the data counts and the order"

# B rewritten under the same prefix (more text): the resume is refused, not retried
# from an older checkpoint, and nothing is trained
text b.txt 3 KLMNOPQRST
cat b.txt b.txt >b2.txt
"$baton" data prepare --input b2.txt --output d/B --valid-fraction 0 >/dev/null
rc=0
"$worker" --spec s.pb --single-process --eval-windows 0 --run-dir changed --init changed >changed.out 2>changed.err || rc=$?
[[ $rc == 2 ]] || { cat changed.out changed.err >&2; fail "a resume over rewritten data: exit $rc, not 2"; }
grep -qF "changed/checkpoints/s00-step00000010: stage \"s1\" cannot resume: its training data d/B_train changed since this checkpoint (1025 tokens, 1 document now; 513, 1 when saved as d/B_train)" changed.err ||
  { cat changed.err >&2; fail "the refusal does not name the dataset and its counts"; }
! grep -q "^step\|falling back" changed.out changed.err || fail "a refused resume trained or fell back"
# the newest checkpoint damaged (an empty manifest): the one that is loaded, the older
# one, is checked, and refused alike
cp -a changed damaged
: >damaged/checkpoints/s00-step00000010/manifest.pb
rc=0
"$worker" --spec s.pb --single-process --eval-windows 0 --run-dir damaged --init damaged >damaged.out 2>damaged.err || rc=$?
[[ $rc == 2 ]] || { cat damaged.out damaged.err >&2; fail "a fallback over rewritten data: exit $rc, not 2"; }
grep -qF "damaged/checkpoints/s00-step00000005: stage \"s1\" cannot resume: its training data d/B_train changed" damaged.err ||
  { cat damaged.err >&2; fail "the older checkpoint a fallback loads was not checked"; }
! grep -q "^step" damaged.out || fail "a fallback over rewritten data trained"
# the remedy the refusal names: a new run from these weights (init: DIR) is not refused,
# only warned about, whether init names the checkpoint or the run directory
for init in changed/checkpoints/s00-step00000010 changed; do
  rm -rf fresh
  train remedy.log --run-dir fresh --init "$init"
  [[ $(wc -l <remedy.log) == 10 ]] || fail "init: $init over rewritten data logged $(wc -l <remedy.log) steps, not 10"
  grep -qF "warning: changed/checkpoints/s00-step00000010: stage \"s1\" continues from it as init names it, though its training data d/B_train changed" remedy.log.err ||
    { cat remedy.log.err >&2; fail "init: $init over rewritten data: no warning"; }
done
echo "ok the remedy (init: the checkpoint, in a new run) works over rewritten data, warned"
text b.txt 2 KLMNOPQRST # the original B again
"$baton" data prepare --input b.txt --output d/B --valid-fraction 0 >/dev/null
train changed.log --run-dir changed --init changed
[[ $(steps changed.log 11 20) == "$(steps full.log 11 20)" ]] || fail "a resume over the data put back differs"
echo "ok a resume over rewritten data refused, exit 2"

# a checkpoint from before the counts and the order were kept: the order by slot
"$edit" old/checkpoints/s00-step00000010 --drop-data
"$baton" ckpt inspect old/checkpoints/s00-step00000010 --json | "$py" -c '
import json, sys
j = json.load(sys.stdin)
assert j["data"] == [] and j["sample_order"] == 0, (j["data"], j["sample_order"])' || fail "ckpt_edit --drop-data"
cp -a old old2
train old.log --run-dir old --init old
[[ $(wc -l <old.log) == 10 ]] || fail "the resume of the old checkpoint logged $(wc -l <old.log) steps"
[[ $(steps old.log 11 20) != "$(steps full.log 11 20)" ]] ||
  fail "an old checkpoint resumed in the new order (its samples would differ from those it was trained beside)"
shown=$("$baton" ckpt inspect old/checkpoints/s00-step00000015)
grep -qF "; mixture order by slot (older)" <<<"$shown" ||
  fail "a resumed old checkpoint's stage saved another order"
train old2a.log --run-dir old2 --init old2 --steps 5 # to step 15
train old2b.log --run-dir old2 --init old2
[[ $(steps old2b.log 16 20) == "$(steps old.log 16 20)" ]] ||
  fail "the order by slot was not kept through a second resume: $(diff <(steps old2b.log 16 20) <(steps old.log 16 20))"
echo "ok an older checkpoint resumes in its own order, kept through its stage's checkpoints"
echo PASS
