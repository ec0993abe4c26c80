#!/usr/bin/env bash
# Messages for values that are out of range, empty, or the wrong kind of file:
#  - a number past its type names the bound it crossed ("out of range (at most
#    4294967295)"), not a range that holds values the field refuses (0 for nodes);
#  - an empty path or value is quoted as '' and the message says what to give (exit 2),
#    never a bare ": cannot open";
#  - ckpt unpack of a directory or of a file that is no archive, ckpt import of a missing
#    directory or a file: said plainly, exit 2 as their --help promises;
#  - where a message starts, the same in every command: one about a place in a recipe
#    starts with that place, FILE:LINE:COL:, as a compiler's does (editors and CI find it
#    at the start of the line), whichever command read the recipe (a warning
#    "FILE:LINE:COL: warning:"); any other starts with "baton CMD:" (a warning with "baton
#    CMD: warning:"), also one that quotes a value looking like a place ("--set
#    seed=1:2:3: ...") and a recipe's warning about a value a --set wrote;
#  - help texts fit 80 columns.
#   check-messages.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3
recipe=$src/tests/engine/precision.yaml
. "$src/tests/cli/cli-lib.sh"
cli_workdir messages

big=99999999999999999999
# ---- numbers past their bound ----
expect 2 "^baton plan: --nodes $big: cluster\.nodes: value \"$big\" is out of range \(at most 4294967295\)$" -- \
  "$baton" plan "$recipe" --nodes $big
expect 2 "^baton plan: --set seed=$big: seed: value \"$big\" is out of range \(at most 18446744073709551615\)$" -- \
  "$baton" plan "$recipe" --set seed=$big
expect 2 "^baton eval: --seq-len '$big': need an integer from 1 to 18446744073709551615 " -- \
  "$baton" eval ck --data d --seq-len $big --num-seqs 1
expect 2 "^baton ckpt export: --max-position expects a count from 1 to 4294967295, such as 4096 " -- \
  "$baton" ckpt export ck --out ex --max-position $big
expect 2 "^baton-worker: --steps '$big' is out of range \(1 to 4294967295\)$" -- \
  "$worker" --spec nope.pb --steps $big
expect 2 "^baton-worker: --eval-windows '4294967296' is out of range \(0 to 4294967295\)$" -- \
  "$worker" --spec nope.pb --eval-windows 4294967296

# ---- empty values ----
expect 2 "^baton plan: '': an empty file name; give the recipe's path \(a YAML file\)$" -- "$baton" plan ""
expect 2 "^baton spec: '': an empty file name; give the recipe's path" -- "$baton" spec ""
expect 2 "^baton ckpt inspect: '': an empty name; give a checkpoint or run directory$" -- \
  "$baton" ckpt inspect ""
expect 2 "^baton ckpt verify: '': an empty name; give a checkpoint or run directory$" -- \
  "$baton" ckpt verify ""
expect 2 "^baton eval: '': an empty name; give a checkpoint or run directory$" -- \
  "$baton" eval "" --data d --seq-len 8 --num-seqs 1
expect 2 "^baton status: '': an empty name; give a run directory$" -- "$baton" status ""
expect 2 "^baton stop: '': an empty name; give a run directory$" -- "$baton" stop ""
expect 2 "^baton resume: '': an empty name; give a run directory$" -- "$baton" resume ""
expect 2 "^baton run: --run-dir '': an empty name; give a run directory$" -- \
  "$baton" run "$recipe" --run-dir ""
expect 2 "^baton data inspect: '': an empty dataset prefix; give PREFIX \(PREFIX\.bin and PREFIX\.idx\)$" -- \
  "$baton" data inspect ""
expect 2 "^baton plan: --nodes '': give a count, such as --nodes 2$" -- "$baton" plan "$recipe" --nodes ""
expect 2 "^baton plan: --gpus-per-node '': give a count, such as --gpus-per-node 2$" -- \
  "$baton" plan "$recipe" --gpus-per-node ""
expect 2 "^baton ckpt unpack: '': name the archive \(FILE\.tar\.zst\)$" -- "$baton" ckpt unpack ""
expect 2 "^baton ckpt import: '': name the Hugging Face model's directory$" -- \
  "$baton" ckpt import "" --out im
expect 2 "^baton-worker: --spec '': name the StageSpec file" -- "$worker" --spec ""

# ---- ckpt unpack and import given the wrong kind of file ----
mkdir pk
expect 2 "^baton ckpt unpack: pk: a directory, not a packed checkpoint \(FILE\.tar\.zst\)$" -- \
  "$baton" ckpt unpack pk --into up
expect 2 "^baton ckpt unpack: nope\.tar\.zst: no such archive$" -- "$baton" ckpt unpack nope.tar.zst --into up
cp "$recipe" r.yaml
expect 2 "^baton ckpt unpack: r\.yaml: not a packed checkpoint \(a zstd-compressed tar, as baton ckpt pack writes\): " -- \
  "$baton" ckpt unpack r.yaml --into up
expect 2 "^baton ckpt import: '/nonexistent-baton-dir': no such directory$" -- \
  "$baton" ckpt import /nonexistent-baton-dir --out im
expect 2 "^baton ckpt import: 'r\.yaml': not a directory; give the Hugging Face model's directory \(config\.json and model\.safetensors\)$" -- \
  "$baton" ckpt import r.yaml --out im
[[ ! -e up && ! -e im ]] || fail "a refused unpack or import left $(ls -d up im 2>/dev/null)"

# ---- where a message starts ----
printf 'name: t\nstages: [{name: a, steps: -3}]\n' >bad.yaml
want='bad.yaml:2:27: stages[0].steps: expected a positive integer (such as 8, 8K = 8192), got "-3"'
for c in plan "plan --json" spec run submit; do
  out=$("$baton" $c bad.yaml 2>&1)
  rc=$?
  [[ $rc == 2 && $out == "$want" ]] && ok "$c bad.yaml: the recipe's place first" ||
    fail "$c bad.yaml: exit $rc: $out"
done
for c in plan spec run submit; do
  expect 2 "^baton $c: --nodes 2x: cluster\.nodes: expected a positive integer" -- \
    "$baton" $c "$recipe" --nodes 2x
  expect 2 "^baton $c: '': an empty file name; give the recipe's path" -- "$baton" $c ""
  expect 2 "^baton $c: --nodes 1:2:3: cluster\.nodes: expected a positive integer" -- \
    "$baton" $c "$recipe" --nodes 1:2:3
  expect 2 "^baton $c: --set seed=1:2:3: seed: expected a non-negative integer" -- \
    "$baton" $c "$recipe" --set seed=1:2:3
done
tiny=$src/recipes/tiny-cpu.yaml
for c in plan "spec --stage 1"; do
  expect 0 "^baton ${c%% *}: warning: --set stages\.long-context\.seq_len=2048: stages\[1\]\.seq_len: seq_len 2048 is beyond" -- \
    "$baton" $c "$tiny" --set stages.long-context.seq_len=2048
done
expect 0 "^[^ ]*/fp16-carry\.yaml:9:[0-9]+: warning: stages\[1\]\.precision\.loss_scale\.initial: initial 8 is not used" -- \
  "$baton" plan "$src/tests/cli/fp16-carry.yaml"
warns=$("$baton" plan "$tiny" --set stages.long-context.seq_len=2048 --set stages.0.steps=10 2>&1 >/dev/null)
[[ -n $warns ]] && ! grep -v -e '^baton plan: warning: ' -e '^[^ ]*tiny-cpu\.yaml:[0-9]*:[0-9]*: warning: ' <<<"$warns" &&
  ok "plan's warnings start with the place or baton plan:" || fail "plan's warnings: $warns"
[[ ! -e runs ]] || fail "a refused run or submit made runs/"
printf 'hello world\n' >one.txt
expect 0 "^baton data prepare: warning: the validation set is empty: 1 document at fraction 0\.01$" -- \
  "$baton" data prepare --input one.txt --output one --valid-fraction 0.01

# ---- help texts: lines of at most 80 columns, and ckpt inspect --json's field list
# names run_id, as the README does ----
for c in run submit resume status stop plan spec launch eval "ckpt inspect" "ckpt verify" "ckpt reshard" \
  "ckpt export" "ckpt import" "ckpt pack" "ckpt unpack" "ckpt push" "ckpt pull" \
  "data prepare" "data passkey" "data inspect" worker; do
  if [[ $c == worker ]]; then prog=("$worker"); else read -ra prog <<<"$baton $c"; fi
  wide=$("${prog[@]}" --help | awk 'length($0) > 80 { print length($0) ": " $0 }')
  [[ -z $wide ]] && ok "$c --help fits 80 columns" || fail "$c --help: ${wide:0:200}"
done
"$baton" ckpt inspect --help | grep 'skipped_steps, run_id' >/dev/null && ok "ckpt inspect --help names run_id" ||
  fail "ckpt inspect --help does not name run_id"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all message checks passed"
