#!/usr/bin/env bash
# The `baton` command line: help, usage errors and exit statuses.
#   check-cli.sh BATON RECIPES_DIR
set -u
baton=$1 recipes=$2
# a run whose workers cannot start has brought up the PMIx server: its own leaks (as in
# check-launch.sh) are not ours
export LSAN_OPTIONS="suppressions=$recipes/../tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
failures=0

# expect STATUS PATTERN -- ARGS...: runs baton ARGS, checks the exit status and that
# stdout+stderr match the extended regex PATTERN.
expect() {
  local status=$1 pattern=$2
  shift 3
  local out rc
  out=$("$baton" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: baton $* -> exit $rc (want $status), output:"
    echo "$out" | head -n 5
    failures=$((failures + 1))
  else
    echo "ok   baton $* -> $rc"
  fi
}

expect 2 'usage: baton' -- 
expect 0 'plan +check a recipe' -- --help
expect 0 '^baton [0-9]+\.[0-9]+' -- --version
expect 2 "unknown command 'frobnicate'" -- frobnicate
expect 0 'eval +.*passkey accuracy' -- --help
# every command has its own help, with its exit statuses
expect 0 '^usage: baton resume RUN_DIR' -- resume --help
# which edits a run takes: said where the documentation says it
expect 0 '\(docs/running\.md:$' -- resume --help
expect 0 "^Changing a run's recipe\)\.$" -- resume --help
# --listen's default, said alike by run and resume
for c in run resume; do
  expect 0 '^ +\(default: its first non-loopback IPv4 address that is up\)$' -- $c --help
done
expect 0 '^usage: baton submit RECIPE .*--nodes K\] \[--gpus-per-node G\]' -- submit --help
for o in '--dry-run' '--template FILE' 'SBATCH_OPTION' '^Exit status: 0 submitted'; do
  expect 0 "$o" -- submit --help
done
[[ $("$baton" run --help) != *"baton submit"* ]] || { echo "FAIL: run --help shows submit's usage"; failures=$((failures + 1)); }
expect 2 "^baton resume: no run directory given" -- resume
# an option resume does not take is an unknown option (README), the overrides a run keeps
# said so; an extra argument is an unexpected one
expect 2 "^baton resume: unknown option '--set' \(a run keeps the overrides it was started with" -- resume r --set a=1
expect 2 "^baton resume: unknown option '--nodes=2' \(a run keeps the overrides" -- resume r --nodes=2
expect 2 "^baton resume: unknown option '--bogus'$" -- resume r --bogus
expect 2 "^baton run: unknown option '--bogus'$" -- run r.yaml --bogus
expect 2 "^baton resume: unexpected argument 'extra'$" -- resume r extra
# a value missing at the end is said so, not taken for an unexpected argument
expect 2 "^baton run: --launcher needs a value" -- run r.yaml --launcher
expect 2 "^baton run: --run-dir needs a value" -- run r.yaml --run-dir
expect 2 "^baton resume: --worker needs a value" -- resume r --worker
expect 2 "^baton submit: --template needs a value" -- submit r.yaml --template
expect 0 'default: \$BATON_SBATCH_TEMPLATE' -- submit --help
expect 0 '--gpus/-G' -- submit --help
for c in pack unpack push pull export; do expect 0 '^Exit status: 0 ' -- ckpt $c --help; done
expect 0 'context the checkpoint records, the seq_len it was' -- ckpt export --help
expect 0 'twice that \(right for Llama 3\.1, not 3\.2\)' -- ckpt export --help
expect 0 'usage: baton plan RECIPE' -- plan --help
expect 2 'usage: baton plan RECIPE' -- plan
expect 2 "unknown option '--bogus'" -- plan --bogus "$recipes/tiny-cpu.yaml"
expect 2 'one recipe at a time' -- plan "$recipes/tiny-cpu.yaml" "$recipes/llama3-405b.yaml"
expect 2 '/nonexistent/r.yaml: cannot open' -- plan /nonexistent/r.yaml
expect 2 'not a regular file|cannot read|is a directory' -- plan "$recipes"
expect 0 'fits \(' -- plan "$recipes/tiny-cpu.yaml"
expect 0 'stage 2 "fp8"' -- plan "$recipes/tiny-cpu.yaml"
expect 0 '"stages": ?\[' -- plan --json "$recipes/tiny-cpu.yaml"
# a stage that does not fit: exit 1, the plan printed whole, with what fits on the same
# devices (plan.figures re-plans each)
expect 1 '^  on the same 64 devices these fit \(recipe keys for the stage; best first\):$' -- \
  plan "$recipes/llama3-70b-64gpu.yaml" --set defaults.recompute=none --set defaults.micro_batch=2
expect 1 '^    parallel: \{tp: 4, pp: 8\}, recompute: full, micro_batch: 1: fits \(50\.23 of 80\.00 GB\), step [0-9.]+ s$' -- \
  plan "$recipes/llama3-70b-64gpu.yaml" --set defaults.recompute=none --set defaults.micro_batch=2
expect 1 'DOES NOT FIT: .*; or raise tp or pp \(what fits on the same devices: under "memory"\)$' -- \
  plan "$recipes/llama3-70b-64gpu.yaml" --set defaults.recompute=none --set defaults.micro_batch=2
expect 1 '"alternatives": \[\{"tp": 4,' -- \
  plan --json "$recipes/llama3-70b-64gpu.yaml" --set defaults.recompute=none --set defaults.micro_batch=2
expect 0 'Exit status: 0 every stage fits .* 1 some$' -- plan --help
# an interleaved pipeline that does not fit: the same split without interleaving is
# offered, and fits as offered
pi="$recipes/../tests/cli/plan-interleaved.yaml"
expect 1 '^    parallel: \{virtual_stages: 1\}, recompute: full, micro_batch: 1: fits' -- plan "$pi"
expect 0 '^  total .*: fits \(' -- plan "$pi" --set defaults.parallel.virtual_stages=1 \
  --set defaults.recompute=full --set defaults.micro_batch=1
# the search for what fits is bounded: a million devices, on one node or on 256, take
# seconds (a recipe fuzzer's extremes too), not minutes
# (a sanitizer build, at -O0 with its checks, takes several times longer)
limit=20
ldd "$baton" 2>/dev/null | grep libasan >/dev/null && limit=120
for shape in "1 1048576" "256 4096"; do
  read -r nodes gpn <<<"$shape"
  t0=$SECONDS
  out=$(timeout $limit "$baton" plan "$recipes/llama3-70b-64gpu.yaml" --set defaults.recompute=none \
    --set defaults.micro_batch=2 --set defaults.seq_len=64K --set cluster.nodes="$nodes" \
    --set cluster.gpus_per_node="$gpn" --set defaults.parallel.dp=32768 \
    --set defaults.global_batch=65536 2>&1)
  rc=$?
  if [[ $rc -ne 1 ]] || ! grep -q '^  on the same 1048576 devices these fit' <<<"$out"; then
    echo "FAIL: plan on $nodes x $gpn devices -> exit $rc after $((SECONDS - t0)) s (want 1, alternatives)"
    failures=$((failures + 1))
  else
    echo "ok   plan on $nodes x $gpn devices -> 1 in $((SECONDS - t0)) s"
  fi
done
# status and eval name the option that is unknown or missing, as plan does
expect 2 "^baton status: unknown option '--bogus'" -- status "$recipes" --bogus
expect 2 "^baton status: one run directory at a time \\(got 'a' and 'b'\\)" -- status a b
expect 2 "^baton status: no run directory given" -- status
# status says what RUN_DIR is when it is no run directory: missing, a file, a journal
# that is empty or not a file
msg=$(mktemp -d /tmp/baton-test-msg.XXXXXX)
mkdir "$msg/empty" "$msg/j0" "$msg/jdir" "$msg/jdir/journal" && : >"$msg/j0/journal" && : >"$msg/afile"
# resume says so too: a file is not a run directory
expect 2 "^baton resume: $msg/afile: not a directory \\(baton resume takes a run directory\\)$" -- \
  resume "$msg/afile"
expect 2 "^baton resume: $msg/missing: no such directory$" -- resume "$msg/missing"
# missing under a directory any user may write: said missing, not the directory above (it
# is judged for one that is there)
mkdir -m 0777 "$msg/open" && mkdir "$msg/open/r"
expect 2 "^baton resume: $msg/open/typo: no such directory$" -- resume "$msg/open/typo"
expect 2 "^baton resume: $msg/open/r: not used as a run directory: $msg/open, a directory above it, is writable by others" -- \
  resume "$msg/open/r"
expect 2 "^baton status: $msg/missing: no such directory$" -- status "$msg/missing"
expect 2 "^baton status: $msg/afile: not a directory \\(baton status takes a run directory\\)$" -- status "$msg/afile"
expect 2 "^baton status: $msg/empty: not a run directory \\(no journal\\)$" -- status "$msg/empty"
expect 2 "^baton status: $msg/j0: not a run directory \\(its journal is empty\\)$" -- status "$msg/j0"
# a journal cut short before its first whole record is there all the same: not "no journal"
mkdir "$msg/j5" && printf '\x20\x00\x00\x00\x01' >"$msg/j5/journal"
expect 2 "^baton status: $msg/j5: its journal holds no whole record \\(5 bytes: cut short or damaged\\)$" -- status "$msg/j5"
expect 2 "^baton status: $msg/jdir: not a run directory \\(its journal is not a file\\)$" -- status "$msg/jdir"
# baton stop says the same of them (run_dir_check_arg: one wording for both)
expect 2 "^baton stop: $msg/missing: no such directory$" -- stop "$msg/missing"
expect 2 "^baton stop: $msg/afile/r: no such directory$" -- stop "$msg/afile/r"
expect 2 "^baton stop: $msg/afile: not a directory \\(baton stop takes a run directory\\)$" -- stop "$msg/afile"
expect 2 "^baton stop: $msg/jdir: not a run directory \\(its journal is not a file\\)$" -- stop "$msg/jdir"
expect 2 "^baton stop: $msg/empty: not a run directory \\(no journal\\)$" -- stop "$msg/empty"
# a run whose journal was lost (an attempt's spec left, or a checkpoint) is one: said as
# resume says it, with what to do, not "not a run directory"
mkdir -p "$msg/lost/specs" && : >"$msg/lost/specs/s00-a00.pb"
lost="^baton status: $msg/lost/journal is missing or empty, but a run already worked in this directory \\(it holds specs/s00-a00\\.pb\\): .*; restore the journal, or start a new run in another --run-dir"
expect 2 "$lost" -- status "$msg/lost"
: >"$msg/lost/journal"
expect 2 "$lost" -- status "$msg/lost"
# a directory a baton run is making (it holds the lock; no journal nor workdir yet): exit 0
mkdir -m 700 "$msg/busy" && : >"$msg/busy/lock"
flock -x "$msg/busy" -c "echo \$\$ >'$msg/held.tmp' && mv '$msg/held.tmp' '$msg/held' && exec sleep 60" \
  </dev/null >/dev/null 2>&1 &
fpid=$!
for _ in $(seq 100); do [[ -s $msg/held ]] && break; sleep 0.1; done
expect 0 "^run $msg/busy: being created by a running baton run \\(no attempt yet\\)$" -- status "$msg/busy"
expect 0 '^\{"run_dir": ".*", "state": "running", .*"stages": \[\]' -- status "$msg/busy" --json
# held, with no journal but an attempt's spec (written after the journal): the journal was
# lost while the run works, not a run being created
mkdir -p "$msg/busy/specs" && : >"$msg/busy/specs/s00-a00.pb"
busy_lost="^baton status: $msg/busy/journal is missing or empty, but a baton run holds this directory and a run already worked in it \\(it holds specs/s00-a00\\.pb\\): the journal was lost while the run works"
expect 2 "$busy_lost" -- status "$msg/busy"
expect 2 "$busy_lost" -- status "$msg/busy" --json
kill "$(cat "$msg/held")" "$fpid" 2>/dev/null
wait "$fpid" 2>/dev/null
# an option that takes one value, or a flag, given twice is refused, as data and eval do
expect 2 "^baton status: --json given twice; give it once$" -- status "$msg/empty" --json --json
expect 2 "^baton plan: --json given twice; give it once$" -- plan --json --json "$recipes/tiny-cpu.yaml"
expect 2 "^baton spec: --stage given twice \\('1' and '2'\\); give it once$" -- \
  spec "$recipes/tiny-cpu.yaml" --stage 1 --stage 2
expect 2 "^baton spec: --out given twice" -- spec "$recipes/tiny-cpu.yaml" --out a --out b
expect 2 "^baton eval: --json given twice; give it once$" -- eval run --passkey p --json --json
expect 2 "^baton ckpt inspect: --json given twice; give it once$" -- ckpt inspect x --json --json
expect 2 "^baton ckpt pack: --out given twice \\('a' and 'b'\\); give it once$" -- ckpt pack x --out a --out b
expect 2 "^baton ckpt unpack: --into given twice \\('a' and 'b'\\); give it once$" -- ckpt unpack f --into a --into b
# --nodes and --gpus-per-node take one value each (--set repeats), in every command that
# shares the overrides; run, resume and submit's own options too
for c in spec plan run submit; do
  expect 2 "^baton $c: --nodes given twice \\('2' and '3'\\); give it once$" -- \
    $c "$recipes/tiny-cpu.yaml" --nodes 2 --set a=1 --nodes 3
  expect 2 "^baton $c: --gpus-per-node given twice \\('1' and '2'\\); give it once$" -- \
    $c "$recipes/tiny-cpu.yaml" --gpus-per-node 1 --gpus-per-node 2
done
[[ $("$baton" plan "$recipes/tiny-cpu.yaml" --nodes 2 --nodes 3 2>&1) != *usage:* ]] ||
  { echo "FAIL: plan shows its usage after an option given twice"; failures=$((failures + 1)); }
for o in --run-dir --worker --launcher --listen; do
  expect 2 "^baton run: $o given twice \\('a' and 'b'\\); give it once$" -- run r.yaml $o a $o b
done
expect 2 "^baton run: --quiet given twice; give it once$" -- run r.yaml --quiet --quiet
expect 2 "^baton resume: --worker given twice \\('a' and 'b'\\)" -- resume r --worker a --worker b
expect 2 "^baton resume: --quiet given twice; give it once$" -- resume r --quiet --quiet
expect 2 "^baton submit: --template given twice \\('a' and 'b'\\)" -- submit r.yaml --template a --template b
expect 2 "^baton submit: --dry-run given twice; give it once$" -- submit r.yaml --dry-run --dry-run
# launch, ckpt export/import/push/pull and data prepare too (check-options.sh tries every
# option of every command); launch's -n and --np are one option
expect 2 "^baton launch: -n/--np given twice \\('1' and '2'\\); give it once$" -- launch -n 1 --np 2 -- true
expect 2 "^baton launch: --timeout given twice \\('1' and '2'\\)" -- launch -n 1 --timeout 1 --timeout=2 -- true
expect 2 "^baton ckpt export: --out given twice \\('o1' and 'o2'\\); give it once$" -- ckpt export ck --out o1 --out=o2
expect 2 "^baton ckpt export: --dtype given twice \\('bf16' and 'fp32'\\)" -- ckpt export ck --out o --dtype bf16 --dtype=fp32
expect 2 "^baton ckpt import: --recipe-name given twice \\('a' and 'b'\\)" -- ckpt import hf --out x --recipe-name a --recipe-name=b
expect 2 "^baton ckpt push: --max-time given twice \\('1s' and '2s'\\)" -- ckpt push ck http://127.0.0.1:9/x --max-time 1s --max-time=2s
expect 2 "^baton ckpt pull: --into given twice \\('a' and 'b'\\)" -- ckpt pull http://127.0.0.1:9/x --into a --into=b
for f in --verbose --progress --split-on-percent; do
  expect 2 "^baton data prepare: $f given twice; give it once$" -- data prepare --input i --output o $f $f
done
# submit's job runs baton resume --launcher slurm itself: --launcher and --listen are
# refused in both spellings (not ignored, nor written as #SBATCH lines sbatch refuses)
for o in "--launcher local" "--launcher=local" "--listen 1.2.3.4" "--listen=1.2.3.4"; do
  expect 2 "^baton submit: ${o%%[ =]*} is not submit's: the job.*baton resume.*--launcher slurm" -- submit r.yaml $o
done
# a missing value is named as such, not as an unknown option
expect 2 "^baton spec: --stage needs a value$" -- spec "$recipes/tiny-cpu.yaml" --stage
expect 2 "^baton spec: unknown option '--bogus'$" -- spec "$recipes/tiny-cpu.yaml" --bogus
expect 2 "^baton data inspect: --doc needs a value$" -- data inspect x --doc
expect 2 "^baton eval: --passkey needs a value$" -- eval run --passkey
expect 2 "^baton eval: --seq-len needs a value$" -- eval run --data d --seq-len
expect 2 "^baton eval: unknown option '--bogus'$" -- eval run --data d --bogus
expect 2 "^baton eval: unknown option '--bogus'$" -- eval run --bogus x --data d
expect 2 "^baton eval: one checkpoint at a time \\(got 'a' and 'b'\\)$" -- eval a b --passkey p
expect 2 "^baton ckpt pack: --out needs a value$" -- ckpt pack x --out
expect 2 "^baton ckpt unpack: --into needs a value$" -- ckpt unpack f --into
# --stage takes an index as --set does: a plain 0-based number, not 01, +1 or " 1"
for s in 01 +1 " 1" 1x; do
  expect 2 "no stage \"${s/+/\\+}\"; stages are: pretrain, long-context, fp8" -- spec "$recipes/tiny-cpu.yaml" --stage "$s"
done
expect 0 '^# StageSpec: stage 1 "long-context"' -- spec "$recipes/tiny-cpu.yaml" --stage 1
# data inspect checks --doc's range before it shows anything; counts of one are singular
expect 0 "^wrote 1 passkey document of 128 tokens" -- data passkey --output "$msg/pk" --n-docs 1 --length 128
expect 2 "^baton data inspect: $msg/pk: --doc 5 is out of range: the dataset has 1 document \\(0-based\\)$" -- \
  data inspect "$msg/pk" --doc 5
[[ -z $("$baton" data inspect "$msg/pk" --doc 5 2>/dev/null) ]] ||
  { echo "FAIL: data inspect printed a summary before refusing --doc"; failures=$((failures + 1)); }
printf 'one line\n' >"$msg/one.txt"
expect 0 "^prepared 1 document, [0-9]+ tokens, from 1 file \\(0 archives\\)" -- \
  data prepare --input "$msg/one.txt" --output "$msg/one" --valid-fraction 0
expect 0 "take K and M" -- data passkey --help
# baton help COMMAND is COMMAND --help
[[ $("$baton" help run) == "$("$baton" run --help)" ]] ||
  { echo "FAIL: baton help run is not run --help"; failures=$((failures + 1)); }
expect 2 "^baton help: unknown command 'nope'" -- help nope
expect 0 "commands add their own codes; see 'baton COMMAND --help'" -- --help
# a recipe without name: reads "(unnamed)" in the lines for people; the field stays ""
grep -v '^name:' "$recipes/tiny-cpu.yaml" >"$msg/unnamed.yaml"
expect 0 '^== stage 0 "pretrain" \(1 of 3\), recipe \(unnamed\) ==$' -- plan "$msg/unnamed.yaml"
expect 0 '^# StageSpec: stage 0 "pretrain" of recipe \(unnamed\)$' -- spec "$msg/unnamed.yaml"
expect 0 '^recipe_name: ""$' -- spec "$msg/unnamed.yaml"
# a file given for a checkpoint is said to be one, not "no such checkpoint"
expect 2 "^baton ckpt inspect: $msg/afile: not a directory \\(give a checkpoint or run directory\\)$" -- \
  ckpt inspect "$msg/afile"
expect 2 "^baton ckpt inspect: $msg/missing: no such checkpoint or run directory$" -- ckpt inspect "$msg/missing"
rm -rf "$msg"
expect 2 "^baton eval: missing --data PREFIX \\(with --seq-len T and --num-seqs N\\), or --passkey PREFIX" -- eval run
expect 2 "^baton eval: --data needs --num-seqs N" -- eval run --data d --seq-len 8
expect 2 "^baton eval: --data needs --seq-len T" -- eval run --data d --num-seqs 8
expect 2 "^baton eval: --data and --passkey are two modes" -- eval run --data d --passkey p
expect 2 "^baton eval: no checkpoint: give CKPT or RUN_DIR" -- eval --passkey p
expect 2 "^baton eval: --seq-len 2000000 is above the limit" -- eval run --data d --seq-len 2000000 --num-seqs 1
# counts as recipes write them (K, M: powers of two); options that take one value, once
expect 2 "^baton eval: --seq-len 2097152 is above the limit" -- eval run --data d --seq-len 2M --num-seqs 1
expect 2 "^baton eval: --num-seqs '1X': need an integer from 1 to 18446744073709551615 \\(K and M" -- eval run --data d --seq-len 8 --num-seqs 1X
expect 2 "^baton eval: --seq-len '0': need an integer from 1 to 18446744073709551615 " -- eval run --data d --seq-len 0 --num-seqs 1
expect 2 "^baton eval: --data given twice \\('d' and 'e'\\); give it once" -- eval run --data d --data e --seq-len 8 --num-seqs 1
expect 2 "^baton eval: --seq-len given twice \\('8' and '16'\\)" -- eval run --data d --seq-len 8 --seq-len 16 --num-seqs 1
expect 2 "^baton eval: --passkey given twice" -- eval run --passkey p --passkey q
# --passkey evaluates whole documents: a --seq-len is refused, not ignored
expect 2 "^baton eval: --passkey takes no --seq-len: each document is evaluated whole" -- eval run --passkey p --seq-len 64
expect 0 '"predicted": \[\.\.\.\]\},' -- eval --help
# plan takes baton run's overrides, so a layout can be tried before it is run
expect 0 'pipeline bubble [0-9.]+% of the stages.*\(equal stages: \(pp-1\)/\(v\*m\+pp-1\) = 0\.1%\)' -- \
  plan "$recipes/llama3-70b-64gpu.yaml" --set defaults.parallel.virtual_stages=5
expect 0 'tp 8 x cp 1 x dp 4 x pp 4 = 128 ranks' -- plan "$recipes/llama3-70b-64gpu.yaml" --nodes 16 \
  --set defaults.parallel.dp=4
expect 0 '16 nodes x 4 GPUs' -- plan "$recipes/llama3-70b-64gpu.yaml" --gpus-per-node 4 --nodes 16 \
  --set defaults.parallel.dp=4 --set defaults.parallel.tp=4
expect 2 '--set defaults.parallel.bogus=1.*unknown key "bogus"' -- plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.bogus=1
expect 2 "expected KEY=VALUE" -- plan "$recipes/tiny-cpu.yaml" --set nothing
expect 2 "usage: baton plan" -- plan "$recipes/tiny-cpu.yaml" --set
# an empty value is the empty string, which only a string field takes
expect 2 "^baton plan: --set name=: name: the recipe name is empty" -- plan "$recipes/tiny-cpu.yaml" --set name=
expect 2 "^baton plan: --set stages\\.0\\.steps=: empty value for stages\\[0\\]\\.steps, which is not a string" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.0.steps=
expect 0 "valid: \"\"$" -- spec "$recipes/tiny-cpu.yaml" --stage 0 --set data.valid=
# status and ckpt inspect say what their JSON holds and how they exit
expect 0 'failure_list \(per failure: stage, stage_index, attempt, time, step,' -- status --help
expect 0 '^Exit status: 0 shown, 2 usage or RUN_DIR is not a run directory' -- status --help
expect 0 '^  --json +one JSON object instead' -- ckpt inspect --help
expect 0 '^Exit status: 0 shown; 1 a checkpoint or an fp8 state that cannot be read' -- ckpt inspect --help
# spec resolves a stage with the same overrides (a cuda stage of the tiny recipe, say)
expect 0 'usage: baton spec RECIPE.*--set' -- spec --help
expect 0 'device: cuda$' -- spec "$recipes/tiny-cpu.yaml" --stage fp8 --set cluster.device=cuda
expect 0 'steps: 7$' -- spec "$recipes/tiny-cpu.yaml" --stage long-context --set stages.long-context.steps=7
expect 0 'nodes: 2$' -- spec "$recipes/tiny-cpu.yaml" --nodes 2 --set stages.long-context.parallel.dp=2
# ... printing every value the worker reads: the schema's defaults marked, real numbers
# in the fewest digits that read back (min_lr 0.0003, not 0.00029999999999999997)
expect 0 '^    zero: 1  # default$' -- spec "$recipes/tiny-cpu.yaml" --stage fp8
expect 0 '^    first_last_bf16: true  # default$' -- spec "$recipes/tiny-cpu.yaml" --stage fp8
expect 0 '^      high_freq_factor: 4\.0  # default$' -- spec "$recipes/tiny-cpu.yaml" --stage fp8
expect 0 '^    min_lr: 0\.0003$' -- spec "$recipes/tiny-cpu.yaml" --stage fp8
expect 0 '^        weight: 0\.8$' -- spec "$recipes/tiny-cpu.yaml" --stage fp8
# ... always with a dot, the exponent signed (8.0e-5, 3.5e+20, 10000.0; not C's 8e-05 nor
# 3.5e20, which YAML 1.1 readers such as PyYAML read as strings, nor 10000, an integer),
# and what is printed reads back as the very same double: through baton's own recipe
# loader (the binary StageSpecs equal), and as a float through PyYAML's safe_load
# (spec_yaml_floats.py: every real field of the spec a float, weight_decay the value given;
# weight_decay takes any double >= 0, where eps must be a normal float32)
rt=$(mktemp -d /tmp/baton-test-real.XXXXXX)
floats=(python3 "$recipes/../tests/cli/spec_yaml_floats.py" "$recipes/../schema")
yaml_check() { # yaml_check SPEC_TEXT [FIELD=VALUE ...]: PyYAML reads every real as a float
  local out rc
  out=$("${floats[@]}" "$@" 2>&1)
  rc=$?
  if [[ $rc -eq 77 || $rc -eq 127 ]]; then echo "note: not checked with PyYAML: $out"
  elif [[ $rc -ne 0 ]]; then echo "$out" | head -n 5; failures=$((failures + 1))
  else echo "$out"; fi
}
for pair in 8e-5:8.0e-5 1e-10:1.0e-10 3.5e20:3.5e+20 5e-324:5.0e-324 0.0001:0.0001 10000:10000.0 \
  0.30000000000000004:0.30000000000000004 1e15:1.0e+15 1e14:100000000000000.0 \
  2.2250738585072014e-308:2.2250738585072014e-308 1.7976931348623157e308:1.7976931348623157e+308; do
  v=${pair%%:*} want=${pair#*:}
  "$baton" spec "$recipes/tiny-cpu.yaml" --set defaults.optimizer.weight_decay="$v" >"$rt/spec.yaml"
  got=$(sed -n 's/^    weight_decay: //p' "$rt/spec.yaml")
  "$baton" spec "$recipes/tiny-cpu.yaml" --set defaults.optimizer.weight_decay="$v" --out "$rt/a.pb"
  "$baton" spec "$recipes/tiny-cpu.yaml" --set defaults.optimizer.weight_decay="$got" --out "$rt/b.pb"
  if [[ $got != "$want" ]] || ! cmp -s "$rt/a.pb" "$rt/b.pb"; then
    echo "FAIL: spec prints weight_decay $v as '$got' (want '$want', reading back the same double)"
    failures=$((failures + 1))
  else
    echo "ok   spec prints weight_decay $v as $got, which reads back"
  fi
  yaml_check "$rt/spec.yaml" stage.optimizer.weight_decay="$v"
done
# every stage of every shipped recipe, the defaults shown too
for r in "$recipes"/*.yaml; do
  n=$("$baton" plan --json "$r" 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["stages"]))' 2>/dev/null || echo 1)
  for ((st = 0; st < n; st++)); do
    "$baton" spec "$r" --stage $st >"$rt/$(basename "$r" .yaml)-$st.yaml" &&
      yaml_check "$rt/$(basename "$r" .yaml)-$st.yaml"
  done
done
rm -rf "$rt"
expect 0 '^  norm_eps: 1\.0e-5$' -- spec "$recipes/tiny-cpu.yaml"
# ... those the resolver fills in too: the seed, n_kv_heads, heartbeat_timeout, the
# actions reset and data_from_start, an fp16 stage's loss scaling
off=$recipes/../tests/cli/rope-off.yaml
for want in '^seed: 1234  # default$' '^      seconds: 300\.0  # default$' '^    reset: false  # default$' \
  '^  data_from_start: false  # default$' '^      initial: 65536\.0  # default$'; do
  expect 0 "$want" -- spec "$off" --stage 1 --set defaults.precision=fp16
done
nokv=$(mktemp /tmp/baton-test-nokv.XXXXXX.yaml)
sed 's/ n_kv_heads: 2,//' "$off" >"$nokv"
expect 0 '^  n_kv_heads: 4  # default$' -- spec "$nokv"
rm -f "$nokv"
# ... and not where the recipe gives them
for want in '^seed: 1234$' '^      seconds: 30\.0$' '^  n_kv_heads: 2$'; do
  expect 0 "$want" -- spec "$recipes/tiny-cpu.yaml" --stage 1
done
expect 0 '^    reset: true$' -- spec "$recipes/tiny-cpu.yaml" --stage 1 --set stages.1.optimizer.reset=true
expect 0 '^  data_from_start: false$' -- spec "$recipes/tiny-cpu.yaml" --stage 1 --set defaults.data_from_start=false
# ... and the stage's RoPE once, as model.rope: not the overlay with a default theta
if "$baton" spec "$recipes/tiny-cpu.yaml" --stage long-context | grep '^    theta: 10000\.0  # default$' >/dev/null; then
  echo "FAIL: baton spec shows the stage's rope overlay with the default theta"
  failures=$((failures + 1))
fi
expect 2 '--set defaults.parallel.bogus=1.*unknown key "bogus"' -- spec "$recipes/tiny-cpu.yaml" --set defaults.parallel.bogus=1
expect 2 "--set needs a value" -- spec "$recipes/tiny-cpu.yaml" --set
# an empty path segment is refused by name, never taken as stage 0 or turned into bad YAML
for k in stages..steps model..dim .model.dim model.dim. stages.pretrain..steps; do
  expect 2 "^baton spec: --set $k=5: the key \"$k\" has an empty path segment at character [0-9]+ " -- \
    spec "$recipes/tiny-cpu.yaml" --stage pretrain --set "$k=5"
done
expect 2 "^baton spec: --set stages\\.\\.steps=5: the key" -- spec "$recipes/tiny-cpu.yaml" --set stages..steps=5 --set stages.pretrain.steps=5
expect 2 "the key \"model.d:im\" has ':' in the path segment \"d:im\"" -- \
  plan "$recipes/tiny-cpu.yaml" --set model.d:im=64
# the recipe name is the default run directory's (runs/<name>): one plain name, checked
expect 2 "^baton plan: --set name=a/b: name: the recipe name \"a/b\" has '/'" -- \
  plan "$recipes/tiny-cpu.yaml" --set name=a/b
# a bad value given by --set is reported at the override, never at a line of the file
# (nor at a line of the document the override is loaded as); the recipe's own mistakes
# keep their file:line:column
expect 2 "^baton plan: --set stages\.0\.steps=abc: stages\[0\]\.steps: expected a positive integer" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.0.steps=abc
expect 2 "^baton plan: --set stages\.fp8\.precision=bogus: stages\[2\]\.precision: expected one of fp32, bf16" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.fp8.precision=bogus
expect 2 "^baton plan: --set stages\.0\.steps=0: stages\[0\]\.steps: expected a positive number of steps" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.0.steps=0
expect 2 "^baton spec: --set stages\.0\.steps=0: stages\[0\]\.steps: expected a positive" -- \
  spec "$recipes/tiny-cpu.yaml" --set stages.0.steps=5 --set stages.0.steps=0
expect 2 "^baton plan: --set model\.n_heads=0: model\.n_heads: expected a positive number of heads" -- \
  plan "$recipes/tiny-cpu.yaml" --set model.n_heads=0
expect 2 "^baton plan: --set stages\.1\.rope=\{scaling: \{factor: 0\.5\}\}: stages\[1\]\.rope\.scaling\.factor: scaling factor must be at least 1" -- \
  plan "$recipes/tiny-cpu.yaml" --set "stages.1.rope={scaling: {factor: 0.5}}"
expect 2 "^baton plan: --set defaults\.parallel\.tp=3: defaults\.parallel: tp×pp×cp = 3×2×1 is more than" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.tp=3
expect 2 "^baton plan: --set model\.rope\.theta=\{: YAML syntax error: did not find expected node content$" -- \
  plan "$recipes/tiny-cpu.yaml" --set "model.rope.theta={"
expect 2 "^baton plan: --nodes abc: cluster\\.nodes: expected a positive integer" -- \
  plan "$recipes/tiny-cpu.yaml" --nodes abc
# "auto" is parallel.dp's alone: any other integer field refuses it by name (it was read as 0)
expect 2 "^baton plan: --set model\\.n_heads=auto: model\\.n_heads: \"auto\" is only for parallel\\.dp" -- \
  plan "$recipes/tiny-cpu.yaml" --set model.n_heads=auto
expect 2 "^baton plan: --nodes auto: cluster\\.nodes: \"auto\" is only for parallel\\.dp" -- \
  plan "$recipes/tiny-cpu.yaml" --nodes auto
expect 2 "^baton plan: --set stages\\.0\\.steps=abc: stages\\[0\\]\\.steps: expected a positive integer \\(such as 8, 8K = 8192\\), got \"abc\"$" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.0.steps=abc
expect 0 "tp 2 x cp 1 x dp 1 x pp 2 = 4 ranks" -- plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.dp=auto
# a data block without training data is refused at validation, at its place, not by run
expect 2 "^baton plan: --set data\\.mix=\\[\\]: data: no training data \\(give train or mix\\)" -- \
  plan "$recipes/tiny-cpu.yaml" --set data.mix=[]
expect 2 "^baton spec: --set data\\.mix=\\[\\]: data: no training data" -- spec "$recipes/tiny-cpu.yaml" --set data.mix=[]
# parallel.order may leave out a dimension of size 1 (cp 1 in stage 0), not one larger
expect 0 "cp 1 x dp 1 x pp 2 = 4 ranks .*order tp-dp-pp$" -- plan "$recipes/tiny-cpu.yaml" \
  --set defaults.parallel.order=tp-dp-pp --set stages.1.parallel.order=tp-cp-dp-pp
# ... an order inherited from where that held is reported at the stage that makes the
# dimension larger, naming where the order came from (tests/recipes/bad/order-inherited.yaml)
expect 2 "tiny-cpu\\.yaml:[0-9]+:[0-9]+: stages\\[1\\]\\.parallel\\.cp: parallel\\.order \"tp-dp-pp\" omits cp, which is 2 in this stage; the order is inherited from defaults\\.parallel\\.order \\(--set defaults\\.parallel\\.order=tp-dp-pp\\).*e\\.g\\. \"tp-cp-dp-pp\"" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.order=tp-dp-pp
# ... the stage's own order, at its place
expect 2 "^baton plan: --set stages\\.1\\.parallel\\.order=tp-dp-pp: stages\\[1\\]\\.parallel\\.order: parallel\\.order \"tp-dp-pp\": \"cp\" is missing, and cp is 2" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.1.parallel.order=tp-dp-pp
# an element of any list, by its 0-based index (as stages); past the end: the list's length
expect 0 "^      weight: 0\\.5$" -- spec "$recipes/tiny-cpu.yaml" --stage 0 --set data.mix.0.weight=0.5
expect 0 'path: "data/x"' -- spec "$recipes/tiny-cpu.yaml" --stage 1 --set stages.1.data.mix.1.path=data/x
expect 2 "^baton plan: --set data\\.mix\\.2\\.weight=1: data\\.mix \\(.*tiny-cpu\\.yaml:27:3\\) has 2 elements, so index 2 is out of range \\(0-based, 0 to 1\\); to change its length, give the whole list: data\\.mix=\\[\\.\\.\\.\\]$" -- \
  plan "$recipes/tiny-cpu.yaml" --set data.mix.2.weight=1
# an index is a plain 0-based number: "01" is refused, not taken as 1
expect 2 "^baton plan: --set data\\.mix\\.01\\.weight=1: index \"01\" of data\\.mix has a leading zero; write an index as a plain 0-based number, data\\.mix\\.1$" -- \
  plan "$recipes/tiny-cpu.yaml" --set data.mix.01.weight=1
expect 2 "^baton spec: --set stages\\.00\\.steps=3: index \"00\" of stages has a leading zero" -- \
  spec "$recipes/tiny-cpu.yaml" --set stages.00.steps=3
expect 2 "^baton plan: --set defaults\\.parallel\\.stage_layers\\.1=3: defaults\\.parallel\\.stage_layers is not in the recipe" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.stage_layers.1=3
# sequence parallelism's split refused at the override of seq_len or tp that caused it (the
# recipe sets no sequence_parallel), the later of them when both are given
expect 2 "^baton plan: --set defaults\\.seq_len=3: defaults\\.seq_len: sequence parallelism needs the per-rank sequence 3 divisible by tp 2 \\(stage 0" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.seq_len=3
expect 2 "^baton plan: --set defaults\\.parallel\\.tp=4: defaults\\.parallel: sequence parallelism needs the per-rank sequence 6 divisible by tp 4 \\(stage 0" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.seq_len=6 --set defaults.parallel.tp=4 \
  --set defaults.parallel.pp=1
# a split given by --set holds whatever the order: a later --set of pp does not drop it
# (as it drops the file's), so an invalid one is refused, as in the file
expect 2 "^baton plan: --set defaults\\.parallel\\.stage_layers=\\[1,1,1,2\\]: defaults\\.parallel\\.stage_layers: the stages' layers add up to 5 but the model has n_layers 4" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.stage_layers=[1,1,1,2] \
  --set defaults.parallel.pp=4 --set defaults.parallel.tp=1
# an element of a list the stage inherits: the list is copied into the stage first, and
# every stage resolves as if the whole list were given there (for data, the whole block:
# a stage's data block replaces the one before it, so valid is copied too)
same_spec() { # DESCRIPTION -- SETS_A... -- SETS_B...
  local what=$1 a=() b=() st
  shift 2
  while [[ $1 != -- ]]; do a+=("$1"); shift; done
  shift
  b=("$@")
  for st in 0 1 2; do
    if ! diff <("$baton" spec "$recipes/tiny-cpu.yaml" --stage $st "${a[@]}" 2>&1) \
      <("$baton" spec "$recipes/tiny-cpu.yaml" --stage $st "${b[@]}" 2>&1) >/dev/null; then
      echo "FAIL: $what: stage $st resolves otherwise than with the whole list given"
      failures=$((failures + 1))
      return
    fi
  done
  echo "ok   $what"
}
same_spec "an inherited data.mix element" -- --set stages.2.data.mix.0.weight=0.5 -- \
  --set 'stages.2.data={mix: [{path: data/fortunes_train, weight: 0.5}, {path: data/passkey512_train, weight: 0.2}], valid: data/fortunes_valid}'
same_spec "an inherited stage_layers element" -- --set defaults.parallel.stage_layers=[1,3] \
  --set stages.0.parallel.stage_layers.0=3 --set stages.pretrain.parallel.stage_layers.1=1 -- \
  --set defaults.parallel.stage_layers=[1,3] --set stages.0.parallel.stage_layers=[3,1]
expect 0 "^      weight: 0\\.5$" -- spec "$recipes/tiny-cpu.yaml" --stage 0 --set stages.0.data.mix.0.weight=0.5
expect 2 "^baton plan: --set stages\\.0\\.parallel\\.stage_layers\\.0=2: stages\\[0\\]\\.parallel\\.stage_layers: the stages' layers add up to 5" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.stage_layers=[1,3] --set stages.0.parallel.stage_layers.0=2
# ... not one the stage does not inherit (a pp it changes drops the split)
expect 2 "^baton plan: --set stages\\.1\\.parallel\\.stage_layers\\.0=2: stages\\[1\\]\\.parallel\\.stage_layers is not in the recipe" -- \
  plan "$recipes/tiny-cpu.yaml" --set defaults.parallel.stage_layers=[1,3] --set stages.1.parallel.stage_layers.0=2
# what runs but likely not as meant is a warning: plan and spec go on (exit 0)
expect 0 "^baton plan: warning: --set stages\\.long-context\\.seq_len=2048: stages\\[1\\]\\.seq_len: seq_len 2048 is beyond the context the RoPE scaling extends to" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.long-context.seq_len=2048
expect 0 "original_max_position 64 is not the seq_len 128 the previous stage \\(\"pretrain\"\\) trained at" -- \
  spec "$recipes/tiny-cpu.yaml" --stage 0 --set stages.long-context.rope.scaling.original_max_position=64
expect 0 "tiny-cpu\\.yaml:[0-9]+:[0-9]+: defaults\\.optimizer\\.warmup_steps: warmup_steps 20 is more than the stage's 10 steps" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.0.steps=10
# ... and so is a stage that turns the scaling off while its seq_len stays beyond the
# context the scaling extended (once: the stage after it inherits the same), not one
# that goes back within it
expect 0 "^baton plan: warning: --set stages\\.fp8\\.rope\\.scaling\\.type=none: stages\\[2\\]\\.rope\\.scaling: RoPE scaling is off from this stage, but seq_len 512 is beyond original_max_position 128, the context the previous stage's llama3 scaling extended \\(to 1024\\).* \\(stage 2 \"fp8\"\\)$" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.fp8.rope.scaling.type=none
[[ $("$baton" plan "$recipes/../tests/cli/rope-off-long.yaml" 2>&1 >/dev/null) == \
  *"/rope-off-long.yaml:11:33: warning: stages[2].rope.scaling: RoPE scaling is off from this stage, but seq_len 1024 is beyond original_max_position 256, the context the previous stage's linear scaling extended (to 1024): "*'(stage 2 "c")' ]] ||
  { echo "FAIL: scaling off not warned about once, at the stage that turns it off"; failures=$((failures + 1)); }
[[ -z $("$baton" plan "$recipes/tiny-cpu.yaml" --set stages.fp8.rope.scaling.type=none --set stages.fp8.seq_len=128 \
  --set stages.fp8.parallel.cp=1 --set stages.fp8.parallel.dp=2 2>&1 >/dev/null) ]] ||
  { echo "FAIL: scaling turned off at the pretraining context warned about"; failures=$((failures + 1)); }
[[ -z $("$baton" plan "$recipes/tiny-cpu.yaml" 2>&1 >/dev/null) ]] || { echo "FAIL: tiny-cpu.yaml plans with warnings"; failures=$((failures + 1)); }
# plan also lists the recipe's warnings with each stage's own, in the text and the JSON
expect 0 "^  - --set stages\\.long-context\\.seq_len=2048: stages\\[1\\]\\.seq_len: seq_len 2048 is beyond the context the RoPE scaling extends to" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.long-context.seq_len=2048
"$baton" plan "$recipes/tiny-cpu.yaml" --set stages.0.steps=10 --set stages.long-context.seq_len=2048 --json 2>/dev/null |
  /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)["stages"]
assert any("warmup_steps 20 is more than the stage" in w for w in s[0]["warnings"]), s[0]["warnings"]
assert any("seq_len 2048 is beyond the context" in w for w in s[1]["warnings"]), s[1]["warnings"]
assert not any("seq_len 2048" in w for w in s[0]["warnings"] + s[2]["warnings"]), s' &&
  echo "ok   plan --json lists the recipe's warnings with their stages" ||
  { echo "FAIL: plan --json does not list the recipe's warnings with their stages"; failures=$((failures + 1)); }
# an fp16 stage after an fp16 stage starts from the loss scale that stage ended with: plan
# and spec say so, and an initial the stage gives itself is warned about (once: the stage
# inheriting it is not); under optimizer.reset its initial holds, unwarned
carry=$recipes/../tests/cli/fp16-carry.yaml
expect 0 '^[^ ]*/fp16-carry\.yaml:9:[0-9]+: warning: stages\[1\]\.precision\.loss_scale\.initial: initial 8 is not used: an fp16 stage after an fp16 stage \("a"\) starts from the loss scale that stage ended with' -- \
  plan "$carry"
expect 0 '^ +loss scale 1024, x2 after 1 clean steps' -- plan "$carry"
expect 0 '^ +loss scale carried from stage "a" \(the one it ended with; initial 8 is not used\), x2 after 100 clean steps' -- plan "$carry"
expect 0 '^ +loss scale carried from stage "b" \(' -- plan "$carry"
expect 0 '^  - .*initial 8 is not used: an fp16 stage after an fp16 stage \("a"\)' -- plan "$carry"
expect 0 '^# precision\.loss_scale\.initial is not used: the stage starts from the loss$' -- spec "$carry" --stage b
expect 0 '^ +loss scale 8, x2 after 100 clean steps' -- plan "$carry" --set stages.b.optimizer.reset=true
expect 0 '^ +loss scale 1024, or the one init.s checkpoint ended with where an fp16 stage saved it' -- \
  plan "$carry" --set init=elsewhere
# --json says the same: each stage's loss_scale, its source and the stage it carries from
plan_scales() {
  "$baton" plan "$carry" --json "$@" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
for s in json.load(sys.stdin)["stages"]:
    ls = s["loss_scale"]
    print(s["name"], ls and "%s %s %g %g %d %g" % (ls["source"], ls["carried_from"], ls["initial"],
          ls["growth_factor"], ls["growth_interval"], ls["backoff_factor"]))'
}
want='a initial None 1024 2 1 0.5
b carried a 8 2 100 0.5
c carried b 8 2 100 0.5'
[[ $(plan_scales) == "$want" &&
  $(plan_scales --set stages.b.optimizer.reset=true --set init=elsewhere | cut -d' ' -f1-3) == 'a init None
b initial None
c carried b' &&
  $("$baton" plan "$recipes/tiny-cpu.yaml" --json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print({s["loss_scale"] for s in json.load(sys.stdin)["stages"]})') == '{None}' ]] && echo "ok   plan --json: each fp16 stage's loss_scale (initial, carried from the stage before, init), null for others" ||
  { echo "FAIL: plan --json loss_scale: $(plan_scales)"; failures=$((failures + 1)); }
# a stage name of any length is carried_from whole (it names the stage in "name")
long=$(mktemp /tmp/baton-test-long.XXXXXX.yaml)
sed "s/{name: a,/{name: $(printf 'a%.0s' $(seq 97)),/" "$carry" >"$long"
[[ $("$baton" plan "$long" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)["stages"]
print(len(s[0]["name"]), s[1]["loss_scale"]["carried_from"] == s[0]["name"])') == "97 True" &&
  $("$baton" plan "$long" 2>/dev/null) == *"carried from stage \"$(printf 'a%.0s' $(seq 97))\" ("* ]] &&
  echo "ok   plan: a 97-character stage name is carried_from whole" ||
  { echo "FAIL: plan cuts a long stage name in carried_from"; failures=$((failures + 1)); }
rm -f "$long"
[[ $("$baton" plan "$carry" 2>&1 >/dev/null | grep -c ': warning: ') == 1 &&
  -z $("$baton" plan "$carry" --set stages.b.optimizer.reset=true 2>&1 >/dev/null) &&
  $("$baton" spec "$carry" --stage b --set stages.b.optimizer.reset=true 2>/dev/null) != *"is not used"* &&
  $("$baton" spec "$carry" --stage a 2>/dev/null) != *"is not used"* ]] &&
  echo "ok   an unused loss_scale.initial warned about once, none under optimizer.reset" ||
  { echo "FAIL: the unused loss_scale.initial warnings"; failures=$((failures + 1)); }
# an fp8 stage whose every layer is a first or last one under first_last_bf16 (and the
# head bf16) runs no product in fp8: a warning, in the stage's list and the JSON too
prec=$recipes/../tests/engine/precision.yaml
expect 0 '^baton plan: warning: --set stages\.fp8\.precision\.first_last_bf16=true: stages\[2\]\.precision: no GEMM runs in fp8: first_last_bf16 .* all 2 layers of the model, and the LM head is bf16, so the stage trains as bf16' -- \
  plan "$prec" --set stages.fp8.precision.first_last_bf16=true
expect 0 '^  - .*no GEMM runs in fp8: first_last_bf16' -- plan "$prec" --set stages.fp8.precision.first_last_bf16=true
"$baton" plan "$prec" --set stages.fp8.precision.first_last_bf16=true --json 2>/dev/null |
  /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)["stages"]
assert any("no GEMM runs in fp8" in w for w in s[2]["warnings"]), s[2]["warnings"]
assert not any("no GEMM runs in fp8" in w for w in s[0]["warnings"] + s[1]["warnings"]), s' &&
  [[ -z $("$baton" plan "$prec" 2>&1 >/dev/null) &&
    -z $("$baton" plan "$prec" --set model.n_layers=3 --set stages.fp8.precision.first_last_bf16=true 2>&1 >/dev/null) ]] &&
  echo "ok   an fp8 stage with no fp8 GEMM warned about (text and JSON), not one with one" ||
  { echo "FAIL: the warning about an fp8 stage with no fp8 GEMM"; failures=$((failures + 1)); }
expect 0 "^== stage 1 \"b\"" -- plan "$recipes/../tests/cli/rope-off.yaml"
expect 2 "^baton spec: --gpus-per-node 0: cluster\\.gpus_per_node: expected at least 1 device per node" -- \
  spec "$recipes/tiny-cpu.yaml" --gpus-per-node 0
expect 2 "/heads-vs-tp\.yaml:9:14: defaults\.parallel\.tp: tp 4 does not divide n_heads 6" -- \
  plan "$recipes/../tests/recipes/bad/heads-vs-tp.yaml" --set stages.0.steps=3
expect 2 "--set stages\.nosuch\.steps=3: the recipe has no stage 'nosuch' \(its stages: pretrain, long-context, fp8" -- \
  plan "$recipes/tiny-cpu.yaml" --set stages.nosuch.steps=3
# reshard names what is wrong with a layout it cannot write, not only the syntax
expect 2 "--to dp2,ep4: ep 4 must divide the ranks the experts spread over, tp x dp x cp = 2" -- \
  ckpt reshard nowhere --to dp2,ep4 --out x
expect 2 "--to dp2,zero3: zero 3: reshard writes zero 0 or 1" -- ckpt reshard nowhere --to dp2,zero3 --out x
# an error the file's line is cited for says which overrides were in effect (one of them
# may be the cause: a cluster shrunk under the file's layout)
expect 2 "tiny-cpu\.yaml:[0-9]+:[0-9]+: defaults\.parallel: .*3 devices.* \(with --set cluster\.gpus_per_node=3 in effect\)$" -- \
  plan "$recipes/tiny-cpu.yaml" --set cluster.gpus_per_node=3
# ... and an override of another field of the block the check reads is not its cause
expect 2 "tiny-cpu\.yaml:[0-9]+:[0-9]+: defaults\.parallel: tp×pp×cp.*3 devices.* \(with --set cluster\.gpus_per_node=3, --set defaults\.parallel\.zero=1 in effect\)$" -- \
  plan "$recipes/tiny-cpu.yaml" --set cluster.gpus_per_node=3 --set defaults.parallel.zero=1

# baton submit --dry-run: the script asks for the devices of a CUDA recipe, runs where
# submit ran (relative data paths), and refuses what an #SBATCH line cannot hold (how the
# rest is quoted: cli/check-submit-quoting.sh).
sub=$(mktemp -d /tmp/baton-test-submit.XXXXXX)
trap 'rm -rf "$sub"' EXIT
small=$recipes/../tests/engine/precision.yaml # fortunes data only, one device
(
  cd "$sub" || exit 1
  "$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
    --output data/fortunes >/dev/null || exit 1
  expect 0 "wrote $sub/r1/baton.sbatch \(not submitted" -- submit "$small" --run-dir r1 --dry-run
  # a run submit made that has not started (its job in the queue): status says so, exit 0
  expect 0 "^run r1: not started yet \(batch script r1/baton\.sbatch written, no job id kept" -- status r1
  expect 0 "^  fp32 +pending +0/" -- status r1
  expect 0 '"state": "not_started", .*"job_id": null' -- status r1 --json
  grep -qx "#SBATCH --chdir=$sub" r1/baton.sbatch || { echo "FAIL: no --chdir"; exit 1; }
  grep -q -- "--gpus-per-node" r1/baton.sbatch && { echo "FAIL: a CPU recipe asks for GPUs"; exit 1; }
  # without --run-dir: runs/<name>, or for a recipe without a name runs/<file stem>, so
  # that two unnamed recipes get a directory each
  expect 0 "wrote $sub/runs/precision/baton.sbatch" -- submit "$small" --dry-run
  grep -v '^name:' "$small" >unnamed-a.yaml && cp unnamed-a.yaml unnamed-b.yml
  expect 0 "wrote $sub/runs/unnamed-a/baton.sbatch" -- submit unnamed-a.yaml --dry-run
  expect 0 "wrote $sub/runs/unnamed-b/baton.sbatch" -- submit unnamed-b.yml --dry-run
  grep -qx "#SBATCH --job-name=unnamed-b" runs/unnamed-b/baton.sbatch ||
    { echo "FAIL: an unnamed recipe's job is not named as its run directory"; exit 1; }
  # the stem stands in for the name, so it is checked as one: no hidden runs/.x, no runs/.
  grep -v '^name:' "$small" >.x.yaml && cp .x.yaml ..yaml
  expect 2 "^baton submit: \.x\.yaml: the recipe has no name:, so its file's stem would name the run directory, and the stem \"\.x\" starts with '\.'.*; add a name: to the recipe" -- \
    submit .x.yaml --dry-run
  expect 2 "^baton run: \.\.yaml: the recipe has no name:.*the stem \"\.\" starts with '\.'" -- run ..yaml
  [[ ! -e runs/.x ]] || { echo "FAIL: a stem that is no name made a run directory"; exit 1; }
  expect 0 "wrote $sub/rx/baton.sbatch" -- submit .x.yaml --run-dir rx --dry-run
  # any other stem names its directory as it always did: runs/exp+1, runs/ünï
  cp .x.yaml exp+1.yaml && cp .x.yaml ünï.yaml && cp .x.yaml "llama 3.yaml"
  cp .x.yaml "$(printf 'a\tb.yaml')"
  expect 0 "wrote $sub/runs/exp\+1/baton.sbatch" -- submit exp+1.yaml --dry-run
  grep -qx "#SBATCH --job-name=exp+1" runs/exp+1/baton.sbatch ||
    { echo "FAIL: exp+1.yaml's job is not named exp+1"; exit 1; }
  expect 0 "wrote $sub/runs/ünï/baton.sbatch" -- submit ünï.yaml --dry-run
  # a space is fine in runs/llama 3, quoted on the #SBATCH line (cli.submit-quoting)
  expect 0 "wrote $sub/runs/llama 3/baton.sbatch" -- submit "llama 3.yaml" --dry-run
  grep -qxF "#SBATCH --job-name=\"llama 3\"" "runs/llama 3/baton.sbatch" ||
    { echo "FAIL: llama 3.yaml's job name is not quoted for sbatch"; exit 1; }
  expect 2 "^baton run: a\sb\.yaml: the recipe has no name:.*the stem \"a\sb\" holds a control character" -- \
    run "$(printf 'a\tb.yaml')"
  expect 0 "wrote" -- submit "$small" --run-dir r2 --dry-run --set cluster.device=cuda \
    --set cluster.gpus_per_node=2 --set defaults.parallel.dp=2
  grep -qx "#SBATCH --gpus-per-node=2" r2/baton.sbatch || { echo "FAIL: no --gpus-per-node=2"; exit 1; }
  expect 2 "echo INJECTED' holds a line break, which an #SBATCH line cannot" -- \
    submit "$small" --run-dir r3 --dry-run $'--comment=x\necho INJECTED'
  [[ ! -e r3/baton.sbatch ]] || { echo "FAIL: a script with a line break was written"; exit 1; }
  # options the script sets itself are refused (Slurm takes the later line: the allocation
  # would not be the run's); a value given apart joins its option; errors say submit
  expect 2 "sbatch option '--nodes=2': the batch script sets --nodes itself .*baton submit --nodes K" -- \
    submit "$small" --run-dir r5 --dry-run -- --nodes=2
  expect 2 "sbatch option '-o': the batch script sets --output itself" -- \
    submit "$small" --run-dir r5 --dry-run -- --time=5 -o /tmp/x.out
  expect 2 "sbatch option '--ntasks-per-node=8'" -- submit "$small" --run-dir r5 --dry-run --ntasks-per-node=8
  expect 2 "sbatch option '--out=x': the batch script sets --output itself" -- \
    submit "$small" --run-dir r5 --dry-run --out=x
  expect 2 "sbatch option '--ntasks=3': the batch script sets --ntasks itself" -- \
    submit "$small" --run-dir r5 --dry-run --ntasks=3
  # a value-taking option given bare would make sbatch refuse the script
  expect 2 "sbatch option '--time' needs a value \(--time=VALUE or --time VALUE\)" -- \
    submit "$small" --run-dir r5 --dry-run --requeue --time
  expect 2 "sbatch option '-p' needs a value \(-p VALUE or -pVALUE\)" -- submit "$small" --run-dir r5 --dry-run -p --requeue
  # --gpus: a CPU recipe's job asks for no GPU; a CUDA recipe's asks for --gpus-per-node
  expect 2 "sbatch option '--gpus=2': the recipe runs on CPUs .*set cluster\.device: cuda" -- \
    submit "$small" --run-dir r5 --dry-run --gpus=2
  expect 2 "sbatch option '-G': the recipe runs on CPUs" -- submit "$small" --run-dir r5 --dry-run -G 2
  expect 2 "sbatch option '--gpus=2': the batch script sets --gpus itself" -- submit "$small" --run-dir r5 \
    --dry-run --gpus=2 --set cluster.device=cuda --set cluster.gpus_per_node=2 --set defaults.parallel.dp=2
  [[ ! -e r5 ]] || { echo "FAIL: a refused submit left its run directory"; exit 1; }
  # a refused submit leaves no run directory (nor a parent it made) to block a corrected
  # retry with other --set overrides; nor does one whose sbatch fails
  expect 2 "^baton submit: batch template nope\.in: No such file or directory \(give another with --template FILE or BATON_SBATCH_TEMPLATE=FILE\)" -- \
    submit "$small" --run-dir n1/n2/r9 --dry-run --template nope.in --set stages.fp32.steps=3
  expect 2 "^baton submit: sbatch option '-N': the batch script sets --nodes" -- \
    submit "$small" --run-dir r9 --dry-run --set stages.fp32.steps=3 -p debug -- -N 2
  BATON_SBATCH_TEMPLATE=nope.in expect 2 "^baton submit: batch template nope\.in" -- \
    submit "$small" --run-dir r9 --dry-run
  [[ ! -e n1 && ! -e r9 && ! -e r3 ]] ||
    { echo "FAIL: a refused submit left a run directory"; exit 1; }
  mkdir fakebin && printf '#!/bin/sh\necho "sbatch: error: no" >&2\nexit 1\n' >fakebin/sbatch && chmod +x fakebin/sbatch
  # squeue, asked before a refused submit's directory goes: $FAKE_SQ's lines, status $FAKE_SQ_RC
  printf '#!/bin/sh\n[ -n "$FAKE_SQ" ] && printf "%%s\\n" "$FAKE_SQ"\nexit ${FAKE_SQ_RC:-0}\n' >fakebin/squeue && chmod +x fakebin/squeue
  PATH="$sub/fakebin:$PATH" expect 1 "^baton submit: sbatch .*/r9/baton.sbatch failed \(status 1\): sbatch: error: no" -- \
    submit "$small" --run-dir r9 --set stages.fp32.steps=3
  [[ ! -e r9 ]] || { echo "FAIL: a submit whose sbatch failed left its run directory"; exit 1; }
  # ... but an sbatch failure that is no clear refusal keeps it: Slurm may have queued the
  # job (a reply lost after slurmctld took it, sbatch killed at its timeout), and the job
  # would start on a removed directory. The lost reply as the real sbatch words it:
  printf '#!/bin/sh\necho "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2\nexit 1\n' >fakebin/sbatch
  PATH="$sub/fakebin:$PATH" expect 1 "^baton submit: kept $sub/r10: sbatch did not say that Slurm refused the job .*squeue --me --format=%i,%T,%o.* look for $sub/r10/baton\.sbatch .* submit the script with 'sbatch $sub/r10/baton\.sbatch', or remove the directory with 'rm -r $sub/r10'$" -- \
    submit "$small" --run-dir r10 --set stages.fp32.steps=3
  [[ -f r10/baton.sbatch && -f r10/recipe.yaml ]] ||
    { echo "FAIL: a submit whose sbatch lost its reply removed its run directory"; exit 1; }
  # ... an sbatch that hangs, killed at the timeout (60 s; BATON_FAULT_SBATCH_TIMEOUT, a
  # test hook, shortens it)
  printf '#!/bin/sh\nexec sleep 30\n' >fakebin/sbatch
  BATON_FAULT_SBATCH_TIMEOUT=1 PATH="$sub/fakebin:$PATH" expect 1 "^baton submit: sbatch $sub/r11/baton\.sbatch gave no answer within 1 s and was killed" -- \
    submit "$small" --run-dir r11 --set stages.fp32.steps=3
  [[ -f r11/baton.sbatch ]] || { echo "FAIL: a submit whose sbatch was killed removed its run directory"; exit 1; }
  # ... and one killed by a signal, or of a status sbatch does not exit with
  printf '#!/bin/sh\nkill -9 $$\n' >fakebin/sbatch
  PATH="$sub/fakebin:$PATH" expect 1 "^baton submit: kept $sub/r12: sbatch did not say" -- \
    submit "$small" --run-dir r12 --set stages.fp32.steps=3
  # a refusal from slurmctld, or no connection to it at all, is clean: removed
  printf '#!/bin/sh\necho "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)" >&2\nexit 1\n' >fakebin/sbatch
  PATH="$sub/fakebin:$PATH" expect 1 "connect failure\)$" -- submit "$small" --run-dir r13 --set stages.fp32.steps=3
  [[ -f r12/baton.sbatch && ! -e r13 ]] ||
    { echo "FAIL: sbatch killed by a signal: r12 $(ls r12 2>&1); connect failure: r13 $(ls r13 2>&1)"; exit 1; }
  # a lost reply worded as a plain errno (slurm_recv_timeout), even after a long preamble
  # that would push it out of a buffer kept from its head: kept
  { printf '#!/bin/sh\n'
    for i in $(seq 80); do printf 'echo "sbatch: error: warning %d: some long words about the partition and its limits" >&2\n' "$i"; done
    printf 'echo "sbatch: error: Batch job submission failed: Connection reset by peer" >&2\nexit 1\n'; } >fakebin/sbatch
  PATH="$sub/fakebin:$PATH" expect 1 "^baton submit: kept $sub/r14: sbatch did not say" -- \
    submit "$small" --run-dir r14 --set stages.fp32.steps=3
  [[ -f r14/baton.sbatch ]] || { echo "FAIL: Connection reset by peer: r14 removed"; exit 1; }
  # a refusal in words baton does not know, while squeue lists a job of the script: submitted
  printf '#!/bin/sh\necho "sbatch: error: Batch job submission failed: Something new" >&2\nexit 1\n' >fakebin/sbatch
  FAKE_SQ="12,$sub/other/baton.sbatch
77,$sub/r15/baton.sbatch" PATH="$sub/fakebin:$PATH" expect 0 "^baton submit: but squeue lists job 77 for $sub/r15/baton\.sbatch: it was submitted \(sbatch's reply was lost\)" -- \
    submit "$small" --run-dir r15 --set stages.fp32.steps=3
  [[ $(cat r15/job_id 2>&1) == 77 ]] || { echo "FAIL: a job squeue lists: r15/job_id '$(cat r15/job_id 2>&1)'"; exit 1; }
  # ... squeue failing: kept; squeue listing none of it: removed
  FAKE_SQ_RC=1 PATH="$sub/fakebin:$PATH" expect 1 "^baton submit: kept $sub/r16: squeue could not confirm that Slurm queued no job of it" -- \
    submit "$small" --run-dir r16 --set stages.fp32.steps=3
  FAKE_SQ="12,$sub/other/baton.sbatch" PATH="$sub/fakebin:$PATH" expect 1 "failed \(status 1\): sbatch: error: Batch job submission failed: Something new$" -- \
    submit "$small" --run-dir r17 --set stages.fp32.steps=3
  [[ -f r16/baton.sbatch && ! -e r17 ]] ||
    { echo "FAIL: squeue failing: r16 $(ls r16 2>&1); squeue listing none: r17 $(ls r17 2>&1)"; exit 1; }
  # a refusal with the site's SLURM_EXIT_ERROR, or worded "sbatch: fatal:": removed, no "kept"
  printf '#!/bin/sh\necho "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified" >&2\nexit 7\n' >fakebin/sbatch
  out=$(SLURM_EXIT_ERROR=7 PATH="$sub/fakebin:$PATH" "$baton" submit "$small" --run-dir r18 --set stages.fp32.steps=3 2>&1)
  [[ $? == 1 && ! -e r18 && $out != *kept* ]] ||
    { echo "FAIL: a refusal under SLURM_EXIT_ERROR=7: r18 $(ls r18 2>&1): $out"; exit 1; }
  printf '#!/bin/sh\necho "sbatch: fatal: Invalid --time specification" >&2\nexit 1\n' >fakebin/sbatch
  PATH="$sub/fakebin:$PATH" expect 1 "failed \(status 1\): sbatch: fatal: Invalid --time" -- \
    submit "$small" --run-dir r19 --set stages.fp32.steps=3
  [[ ! -e r19 ]] || { echo "FAIL: an 'sbatch: fatal:' refusal kept r19"; exit 1; }
  echo "ok   sbatch's lost replies kept, refusals confirmed with squeue, SLURM_EXIT_ERROR and fatal taken"
  expect 0 "wrote $sub/r9/baton.sbatch" -- submit "$small" --run-dir r9 --dry-run --set stages.fp32.steps=4
  # a submitted job's id is kept, and status names it while the job waits
  mkdir okbin && printf '#!/bin/sh\necho "4242;cluster1"\n' >okbin/sbatch && chmod +x okbin/sbatch
  # ... 0600 whatever the umask (022 here: a file made with the usual 0666 would be 0644)
  mask=$(umask)
  umask 022
  PATH="$sub/okbin:$PATH" expect 0 "^baton submit: job 4242, script $sub/rq/baton\.sbatch" -- \
    submit "$small" --run-dir rq
  umask "$mask"
  [[ $(stat -c %a rq/job_id) == 600 && $(cat rq/job_id) == 4242 ]] &&
    echo "ok   submit keeps the job id in RUN_DIR/job_id, 0600" ||
    { echo "FAIL: rq/job_id: mode $(stat -c %a rq/job_id), '$(cat rq/job_id)'"; failures=$((failures + 1)); }
  expect 0 "^run rq: not started yet \(submitted as Slurm job 4242, batch script rq/baton\.sbatch" -- status rq
  # a site's message (job_submit plugin, cli_filter) before the id: the id is the line that is one
  mkdir infobin && printf '#!/bin/sh\necho "sbatch: INFO: no account given, using default" >&2\necho "4343;cluster1"\n' >infobin/sbatch && chmod +x infobin/sbatch
  PATH="$sub/infobin:$PATH" expect 0 "^baton submit: job 4343, script $sub/rj/baton\.sbatch, output $sub/rj/slurm-4343\.out" -- \
    submit "$small" --run-dir rj --set stages.fp32.steps=3
  [[ $(cat rj/job_id) == 4343 ]] || { echo "FAIL: rj/job_id '$(cat rj/job_id)'"; exit 1; }
  expect 0 '"state": "not_started", .*"job_id": "4242"' -- status rq --json
  # ... and says so when squeue no longer has it queued (cancelled, failed, purged)
  mkdir sqbin && printf '#!/bin/sh\necho PENDING\n' >sqbin/squeue && chmod +x sqbin/squeue
  PATH="$sub/sqbin:$PATH" expect 0 "it starts when the job does: squeue -j 4242 says PENDING\)" -- status rq
  printf '#!/bin/sh\necho CANCELLED\n' >sqbin/squeue
  PATH="$sub/sqbin:$PATH" expect 0 "^run rq: not started yet \(submitted as Slurm job 4242, which is no longer queued: squeue says CANCELLED; its output is" -- status rq
  printf '#!/bin/sh\necho "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n' >sqbin/squeue
  PATH="$sub/sqbin:$PATH" expect 0 "no longer queued: squeue says it does not know the job" -- status rq
  # a run directory that was there is kept
  expect 2 "sbatch option '-o'" -- submit "$small" --run-dir r9 --dry-run --set stages.fp32.steps=4 -o x
  [[ -e r9/baton.sbatch ]] || { echo "FAIL: a refused submit removed a run directory it did not make"; exit 1; }
  expect 0 "wrote" -- submit --time 1:00:00 "$small" --requeue --run-dir r6 --dry-run \
    -p debug -- --qos high -J name --exclusive
  want=$'#SBATCH --time=1:00:00\n#SBATCH --requeue\n#SBATCH -p debug\n#SBATCH --qos=high\n#SBATCH -J name\n#SBATCH --exclusive'
  [[ $(grep -A7 -- "^#SBATCH --chdir" r6/baton.sbatch | grep -v "^$" | tail -6) == "$want" ]] ||
    { echo "FAIL: the sbatch options were not written as given:"; cat r6/baton.sbatch; exit 1; }
  expect 2 "^baton submit: unexpected argument 'extra'" -- submit "$small" extra --run-dir r7
  expect 2 "^baton submit: .*no-such-data" -- submit "$small" --run-dir r7 --dry-run \
    --set data.train=no-such-data
  # a relative data path resolves where baton runs: the message names that directory
  expect 2 "^baton run: stage \"fp32\": training data no-such-data: no-such-data\\.idx: cannot open: .* \\(relative to $sub; make it with 'baton data prepare'\\)$" -- \
    run "$small" --run-dir r8 --set data.train=no-such-data
  expect 2 "^baton run: init: no-such-ckpt: .*\\(relative to $sub; make one with" -- \
    run "$small" --run-dir r8 --set init=no-such-ckpt
  # passkey documents are made by data passkey; every missing dataset is named at once
  expect 2 "^baton run: stage \"fp32\": training data data/passkey64_train: .* \(relative to $sub; make it with 'baton data passkey'\)$" -- \
    run "$small" --run-dir r8 --set data.train=data/passkey64_train
  expect 2 "^baton run: 2 datasets the recipe reads cannot be read \(relative paths resolve against $sub\):$" -- \
    run "$small" --run-dir r8 --set data.train=no-such-data --set data.valid=data/passkey64_valid
  expect 2 "^  stage \"fp32\": training data no-such-data: no-such-data\.idx: cannot open: .* \(make it with 'baton data prepare'\)$" -- \
    run "$small" --run-dir r8 --set data.train=no-such-data --set data.valid=data/passkey64_valid
  expect 2 "^  stage \"fp32\": validation data data/passkey64_valid: .* \(make it with 'baton data passkey'\)$" -- \
    run "$small" --run-dir r8 --set data.train=no-such-data --set data.valid=data/passkey64_valid
  # a dataset that is there but unreadable (token ids stored as float32, dtype code 7) is
  # named with why, and with no hint to make it
  cp data/fortunes_train.bin data/float_train.bin
  /usr/bin/python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[17] = 7; open(sys.argv[2], "wb").write(b)' \
    data/fortunes_train.idx data/float_train.idx
  expect 2 "^baton run: stage \"fp32\": training data data/float_train: data/float_train\.idx: dtype code 7 is a float type; token ids need an integer dtype \(1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16\)$" -- \
    run "$small" --run-dir r8 --set data.train=data/float_train
  rm data/float_train.bin data/float_train.idx
  # a stale TMPDIR (a finished job's scratch): exit 2 naming it, before anything is made
  TMPDIR=$sub/gone expect 2 "^baton run: \\\$TMPDIR \($sub/gone\): No such file or directory; .*set TMPDIR to a writable directory" -- \
    run "$small" --run-dir r8
  TMPDIR=$sub/gone expect 2 "^baton launch: \\\$TMPDIR \($sub/gone\): No such file or directory" -- \
    launch -n 1 -- true
  # one too long for the launcher's files below it (about 4000 bytes): the same, said so
  long=$sub/ltmp
  while ((${#long} < 4000)); do
    n=$((4000 - ${#long} - 1))
    long=$long/$(printf 'd%.0s' $(seq $((n < 60 ? n : 60))))
  done
  mkdir -p "$long"
  TMPDIR=$long expect 2 "^baton run: \\\$TMPDIR \(.*\): too long \([0-9]+ bytes, at most 3968: the launcher's files go below it\)" -- \
    run "$small" --run-dir r8
  rm -rf "$sub/ltmp"
  [[ ! -e r8 ]] || { echo "FAIL: a run with missing data made its run directory"; exit 1; }
  # resume continues a run: a directory that never held one is refused, as status says,
  # not trained from scratch; one that submit made (no journal yet) is a run
  mkdir -p norun empty && cp "$small" norun/recipe.yaml
  expect 2 "^baton resume: $sub/norun: not a run directory \(no journal\)" -- resume norun --quiet
  expect 2 "^baton resume: $sub/empty: not a run directory \(no journal\)" -- resume empty
  : >norun/journal
  expect 2 "^baton resume: $sub/norun: not a run directory \(its journal is empty\)" -- resume norun
  [[ ! -e norun/workdir && ! -e norun/specs ]] || { echo "FAIL: resume of a non-run wrote into it"; exit 1; }
  # a run whose working directory moved (the project renamed): refused, saying how to go
  # on; the new path written into RUN_DIR/workdir with echo (a newline after it) is taken
  mkdir proj && ln -s ../data proj/data
  (cd proj && "$baton" submit "$small" --run-dir ../wd --dry-run >/dev/null) || { echo "FAIL: submit in proj"; exit 1; }
  mv proj proj-moved
  expect 2 "^baton resume: $sub/wd: the run's working directory $sub/proj, where its relative data paths resolve, cannot be entered: No such file or directory; if it moved, write its new path into $sub/wd/workdir \(echo NEW_PATH > $sub/wd/workdir\) and resume again$" -- \
    resume wd --quiet
  echo "$sub/empty" >wd/workdir
  expect 2 "^baton resume: 2 datasets the recipe reads cannot be read \(relative paths resolve against $sub/empty\):$" -- \
    resume wd --quiet
  # --run-dir=~/x (no '~' expanded after '='): a new run directory refused, nothing made,
  # saying how to write it; ./~/x as it says, and one there already, are taken
  for c in run "submit --dry-run"; do
    expect 2 "^baton ${c% *}: --run-dir '~/t/r': the shell did not expand '~' \(it does not after '='\), so a directory named '~' would be made here; write --run-dir ~/t/r \(with a space\) or \\\$HOME/t/r, or \./~/t/r for a directory named '~'$" -- \
      $c "$small" --run-dir=~/t/r
  done
  expect 2 "^baton run: --run-dir '~': the shell did not expand '~'" -- run "$small" --run-dir '~'
  [[ ! -e '~' ]] || { echo "FAIL: a directory named '~' was made"; exit 1; }
  expect 0 "wrote $sub/~/t/r/baton.sbatch" -- submit "$small" --run-dir ./~/t/r --dry-run
  expect 0 "wrote $sub/~/t/r/baton.sbatch" -- submit "$small" --run-dir=~/t/r --dry-run
  # a --worker that cannot be launched: exit 2 before anything is journaled
  expect 2 "^baton resume: cannot launch the workers: /nonexistent: No such file or directory$" -- \
    resume r1 --quiet --worker /nonexistent
  expect 0 "^run r1: not started yet" -- status r1
  # workers exec refuses (an executable file that is no program): exit 2, not retried,
  # journaled as the failure's cause
  printf 'not a program\n' >notprog && chmod +x notprog
  expect 2 "cannot launch the workers: rank 0: cannot execute $sub/notprog: Exec format error" -- \
    resume r1 --quiet --worker ./notprog
  expect 0 "last failure: cannot launch the workers: rank 0: cannot execute $sub/notprog" -- status r1
  # a relative TMPDIR names a directory where resume is given, not in the run's working
  # directory resume enters ($sub): taken, made absolute, and so the workers see it
  mkdir -p elsewhere/reltmp
  printf '#!/bin/sh\necho "$TMPDIR" >%s/worker-tmpdir\nexit 2\n' "$sub" >tmpworker
  chmod +x tmpworker
  out=$(cd elsewhere && TMPDIR=reltmp "$baton" resume ../r1 --quiet --worker ../tmpworker 2>&1)
  want=$(cd elsewhere/reltmp && pwd -P)
  if grep -q "TMPDIR" <<<"$out" || [[ $(cat worker-tmpdir 2>/dev/null) != "$want" ]]; then
    echo "FAIL: resume with TMPDIR=reltmp (relative to where it was given): workers saw '$(cat worker-tmpdir 2>/dev/null)', not $want; said:"
    echo "$out" | head -n 5
    failures=$((failures + 1))
  else
    echo "ok   baton resume with a relative TMPDIR"
  fi
  exit "$failures"
) || failures=$((failures + $?))
# a run directory kept for one recipe names the other one's difference in plain words
(
  cd "$sub" || exit 1
  sed 's/^name: .*/name: other/' "$small" >other.yaml
  expect 2 "r1: this run directory belongs to a run with another recipe \\(kept in " -- \
    submit other.yaml --run-dir r1 --dry-run
  expect 2 "run 'baton resume [^']*r1' \\(docs/running\\.md, \"Changing a run's recipe\", says which edits a run takes\\)" -- \
    submit other.yaml --run-dir r1 --dry-run
  expect 2 "r1: this run directory belongs to a run with other --set overrides \\(kept in " -- \
    submit "$small" --run-dir r1 --dry-run --set stages.0.steps=3
  exit "$failures"
) || failures=$((failures + $?))

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
