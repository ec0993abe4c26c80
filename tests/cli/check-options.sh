#!/usr/bin/env bash
# How the `baton` and `baton-worker` command lines are written, whatever the command:
#  - "--opt=value" is "--opt value" for every option that takes a value, in every command
#    (each option its --help lists is tried: the same output and exit status either way,
#    and for submit the same batch script), with the same checks (given twice, which every
#    option but --set and --input refuses, as every flag does); a flag given a value is
#    refused; nothing after "--" or after launch's CMD is touched;
#  - "--" ends the options of every command (an operand after it that starts with '-' is
#    the path ./OPERAND, "-" too), but for launch (CMD follows) and submit (sbatch's options follow);
#  - an option that takes a value, followed by something that looks like an option, is
#    refused naming both ("--run-dir --quiet": the value is missing), in both programs;
#    "--opt=--x" and "./--x" mean it;
#  - baton-worker --comm-timeout takes a duration as recipes write one (2.5s, 500ms, 1m);
#  - `baton help GROUP SUB` is `baton GROUP SUB --help`;
#  - a missing argument is said first, then the usage;
#  - durations and rates in the units recipes use (launch --timeout 500ms);
#  - the run directory: a file there refused without a mode warning, a relative one that
#    cannot be made named with the working directory, a worker not found named where baton
#    looked.
#   check-options.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3
recipes=$src/recipes
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
. "$src/tests/cli/cli-lib.sh"
cli_workdir options

# ---- every option a command's --help lists takes "=value" (or, a flag, refuses it) ----
# The options are those of the usage lines (up to the first empty line) and those at the
# start of a help line ("  --out DIR   ...", "  --nodes K, --gpus-per-node G ...").
# For each:
#  - "--opt=x" must never come back as an unknown option or an unexpected argument quoted
#    whole;
#  - an option that takes a value gives the same output and exit status as "--opt=x" and
#    "--opt x" (submit with --dry-run, comparing the batch scripts too: an option missing
#    from submit's table would be sbatch's, an "#SBATCH --opt=x" line);
#  - given twice (a value, in both spellings, or a flag) it is refused naming it: --set
#    and --input are the ones that repeat; submit refuses --launcher and --listen.
cmds=(run resume submit status stop plan spec launch eval "ckpt inspect" "ckpt verify"
  "ckpt reshard" "ckpt export" "ckpt import" "ckpt pack" "ckpt unpack" "ckpt push" "ckpt pull"
  "data prepare" "data passkey" "data inspect")
# submit --dry-run writes its script only once the recipe's data is there
small=$src/tests/engine/precision.yaml
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1
# a value each option accepts, where 1 is not one (given twice, the second is refused
# whatever the checks on its value)
declare -A good=([--dtype]=fp32 [--format]=hf [--launcher]=local [--to]=tp1 [--length]=200
  [--valid-fraction]=0 [--listen]=127.0.0.1)
# spelled PROG ARGS...: the exit status and output of PROG ARGS, and for submit the
# batch script it wrote (in sub/, removed after)
spelled() {
  local out
  out=$("$@" 2>&1)
  echo "exit $? $out"
  [[ -f sub/baton.sbatch ]] && cat sub/baton.sbatch
  rm -rf sub
}
tried=0 compared=0 twice=0
for c in "${cmds[@]}" worker; do
  if [[ $c == worker ]]; then prog=("$worker"); else read -ra prog <<<"$baton $c"; fi
  help=$("${prog[@]}" --help)
  opts=$({
    sed '/^$/q' <<<"$help" | grep -oE -- '--[a-z][a-z0-9-]*'
    grep -E '^  --' <<<"$help" | grep -oE -- '(^  |, )--[a-z][a-z0-9-]*' | sed 's/^[ ,]*//'
  } | sort -u)
  [[ -n $opts || $c == "ckpt verify" ]] || { fail "$c --help lists no option"; continue; }
  args=("${prog[@]}")
  [[ $c == submit ]] && args+=("$small" --dry-run --run-dir=sub)
  for o in $opts; do
    [[ $o == --help || $o == --version || ($c == submit && ($o == --dry-run || $o == --run-dir)) ]] && continue
    out=$("${prog[@]}" "$o=x" 2>&1)
    tried=$((tried + 1))
    if grep -Eq "(unknown|unexpected)[^']*'$o=x'" <<<"$out"; then
      fail "$c $o=x: $(head -n 1 <<<"$out")"
    fi
    v=${good[$o]:-1}
    if grep -q "takes no value" <<<"$out"; then
      out=$("${args[@]}" "$o" "$o" 2>&1)
      want="$o given twice; give it once"
    else
      a=$(spelled "${args[@]}" "$o=x") b=$(spelled "${args[@]}" "$o" x)
      compared=$((compared + 1))
      [[ $a == "$b" ]] || fail "$c: $o=x and $o x differ: $(diff <(echo "$a") <(echo "$b") | head -n 6)"
      [[ $o == --set || $o == --input ]] && continue
      out=$(spelled "${args[@]}" "$o=$v" "$o" "$v")
      want="$o given twice \\('$v' and '$v'\\); give it once"
      [[ $c == submit && ($o == --launcher || $o == --listen) ]] && want="baton submit: $o is not submit's"
    fi
    twice=$((twice + 1))
    grep -Eq -- "$want" <<<"$out" || fail "$c $o given twice: $(head -n 2 <<<"$out")"
  done
done
ok "$tried options tried as --opt=x, $compared compared with --opt x, $twice given twice"
((tried > 60)) || fail "only $tried options found in the --help texts"

# the same result as "--opt value"
diff <("$baton" plan "$recipes/tiny-cpu.yaml" --json --nodes 1 --set stages.0.steps=7 2>&1) \
  <("$baton" plan "$recipes/tiny-cpu.yaml" --json --nodes=1 --set=stages.0.steps=7 2>&1) >/dev/null &&
  ok "plan --nodes=1 --set=K=V is plan --nodes 1 --set K=V" || fail "plan with '=' differs"
expect 0 'steps: 7$' -- "$baton" spec "$recipes/tiny-cpu.yaml" --stage=long-context \
  --set=stages.long-context.steps=7
# ... with the same checks: once, whichever spelling
expect 2 "^baton run: --run-dir given twice \\('a' and 'b'\\); give it once$" -- \
  "$baton" run r.yaml --run-dir=a --run-dir b
expect 2 "^baton plan: --nodes given twice \\('2' and '3'\\); give it once$" -- \
  "$baton" plan "$recipes/tiny-cpu.yaml" --nodes=2 --nodes=3
expect 2 "^baton eval: --data given twice \\('d' and 'e'\\)" -- "$baton" eval run --data=d --data e --seq-len=8 --num-seqs=1
expect 2 "^baton run: --run-dir needs a value$" -- "$baton" run r.yaml --run-dir
# an empty value is a value ("--out=" is --out ''), the value keeps its own '='
expect 2 "^baton ckpt reshard: --out '': name a new checkpoint directory" -- \
  "$baton" ckpt reshard nowhere --to=tp2 --out=
# a flag takes no value
expect 2 "^baton plan: --json takes no value \\(got '--json=1'\\); see 'baton plan --help'$" -- \
  "$baton" plan "$recipes/tiny-cpu.yaml" --json=1
expect 2 "^baton run: --quiet takes no value \\(got '--quiet=yes'\\)" -- "$baton" run r.yaml --quiet=yes
expect 2 "^baton data prepare: --progress takes no value" -- "$baton" data prepare --progress=1
expect 2 "^baton ckpt inspect: --json takes no value" -- "$baton" ckpt inspect x --json=
expect 2 "^baton-worker: --async-save takes no value \\(got '--async-save=1'\\)$" -- "$worker" --async-save=1
# an option the command does not know keeps its '=' in the message
expect 2 "^baton plan: unknown option '--bogus=1'" -- "$baton" plan "$recipes/tiny-cpu.yaml" --bogus=1
# the worker's own
expect 2 "nope\\.pb: cannot open" -- "$worker" --spec=nope.pb
expect 2 "^baton-worker: --steps expects a count, got 'many'" -- "$worker" --spec=nope.pb --steps=many
# launch: its options only; CMD's arguments and everything after -- stay as given
expect 0 '^\[0\] --timeout=5 --nodes=2$' -- "$baton" launch -n 1 --timeout=5m -- echo --timeout=5 --nodes=2
expect 0 '^\[0\] --nodes=3$' -- "$baton" launch --np=1 echo --nodes=3
# submit: its own options (--nodes=2 is baton's --nodes 2); sbatch's keep their '=', after
# -- every one is sbatch's
expect 2 "^baton submit: --nodes given twice \\('2' and '3'\\)" -- "$baton" submit "$small" --nodes=2 --nodes 3
expect 0 "wrote $work/s1/baton.sbatch" -- "$baton" submit "$small" --run-dir=s1 --dry-run --time=5 \
  --set=stages.fp32.steps=3
grep -qx "#SBATCH --time=5" s1/baton.sbatch && ok "submit: --time=5 is sbatch's" ||
  fail "submit: no '#SBATCH --time=5' in s1/baton.sbatch"
expect 2 "sbatch option '--nodes=2': the batch script sets --nodes itself.*baton submit --nodes K, before any --" -- \
  "$baton" submit "$small" --run-dir s2 --dry-run -- --nodes=2
# data prepare: --input's several values, and the others
expect 0 "^prepared [0-9]+ documents" -- "$baton" data prepare --input=/usr/share/games/fortunes/fortunes \
  --output=data/f2 --valid-fraction=0 --split-on-percent
# counts of one are singular
expect 0 "^  train: data/f3_train\.bin/\.idx  1 document, [0-9]+ tokens$" -- \
  "$baton" data prepare --input=/usr/share/games/fortunes/fortunes --output=data/f3 --valid-fraction=0

# ---- "--" ends the options, in every command ----
cp "$recipes/tiny-cpu.yaml" ./-dash.yaml
diff <("$baton" plan "$recipes/tiny-cpu.yaml" 2>&1) <("$baton" plan -- "$recipes/tiny-cpu.yaml" 2>&1) >/dev/null &&
  ok "plan -- RECIPE is plan RECIPE" || fail "plan -- RECIPE differs from plan RECIPE"
diff <("$baton" plan ./-dash.yaml --json 2>&1) <("$baton" plan --json -- -dash.yaml 2>&1) >/dev/null &&
  ok "plan --json -- -dash.yaml plans the file -dash.yaml" || fail "plan -- -dash.yaml: $("$baton" plan -- -dash.yaml 2>&1 | head -n 1)"
expect 0 '^# StageSpec: stage 1 "long-context"' -- "$baton" spec --stage 1 -- -dash.yaml
# after it, what looks like an option is an operand, a path
expect 2 "^baton plan: \./--json: cannot open: No such file or directory$" -- "$baton" plan -- --json
expect 2 "^baton plan: one recipe at a time \(got '\./-dash\.yaml' and '\./--json'\)$" -- \
  "$baton" plan ./-dash.yaml -- --json
expect 2 "^baton run: \./-q\.yaml: cannot open: No such file or directory$" -- "$baton" run --quiet -- -q.yaml
expect 2 "^baton status: nowhere: no such directory$" -- "$baton" status -- nowhere
expect 2 "^baton resume: \./-r: no such directory$" -- "$baton" resume -- -r
expect 2 "^baton ckpt verify: \./-c: no such checkpoint or run directory$" -- "$baton" ckpt verify -- -c
expect 2 "^baton data inspect: \./-d\.idx: cannot open" -- "$baton" data inspect -- -d
expect 2 "^baton stop: \./-s: no such directory$" -- "$baton" stop --wait -- -s
expect 2 "^baton stop: one run directory at a time \(got 'nowhere' and '\./--wait'\)$" -- \
  "$baton" stop -- nowhere --wait
# "-" too: no command reads standard input, and the parsers would take "-" for an option
expect 2 "^baton plan: \./-: cannot open" -- "$baton" plan -- - </dev/null
expect 2 "^baton status: \./-: no such directory$" -- "$baton" status -- -
expect 2 "^baton ckpt verify: \./-: no such checkpoint or run directory$" -- "$baton" ckpt verify -- -
expect 2 "^baton ckpt inspect: \./-: no such checkpoint or run directory$" -- "$baton" ckpt inspect -- -
# launch and submit read "--" themselves (CMD follows; sbatch's options follow): unchanged
expect 0 '^\[0\] -- -x$' -- "$baton" launch -n 1 -- echo -- -x

# ---- a value that looks like an option: its value is most likely missing ----
expect 2 "^baton run: --run-dir needs a value; '--quiet' looks like an option \(write \./--quiet for a file of that name\)$" -- \
  "$baton" run --run-dir --quiet "$small"
[[ ! -e ./--quiet ]] && ok "run --run-dir --quiet made no directory --quiet" || fail "run --run-dir --quiet made ./--quiet"
expect 2 "^baton spec: --out needs a value; '--stage' looks like an option \(write \./--stage for a file of that name\)$" -- \
  "$baton" spec "$recipes/tiny-cpu.yaml" --out --stage 1
[[ ! -e ./--stage ]] && ok "spec --out --stage wrote no file --stage" || fail "spec --out --stage wrote ./--stage"
expect 2 "^baton plan: --nodes needs a value; '--json' looks like an option \(write --nodes=--json if you mean it\)$" -- \
  "$baton" plan "$recipes/tiny-cpu.yaml" --nodes --json
expect 2 "^baton plan: --set needs a value; '-h' looks like an option" -- "$baton" plan "$recipes/tiny-cpu.yaml" --set -h
expect 2 "^baton launch: --kill-grace needs a value; '--' looks like an option" -- \
  "$baton" launch -n 2 --kill-grace -- true
expect 2 "^baton ckpt unpack: --into needs a value; '--help' looks like an option \(write \./--help " -- \
  "$baton" ckpt unpack a.tar.zst --into --help
expect 2 "^baton data prepare: --output needs a value; '-x' looks like an option \(write \./-x " -- \
  "$baton" data prepare --input /usr/share/games/fortunes/fortunes --output -x
expect 2 "^baton-worker: --spec needs a value; '--steps' looks like an option \(write \./--steps for a file of that name\)$" -- \
  "$worker" --spec --steps 3
expect 2 "^baton-worker: --steps needs a value; '--single-process' looks like an option" -- \
  "$worker" --spec nope.pb --steps --single-process
expect 2 "^baton-worker: --spec needs a value$" -- "$worker" --spec
# a negative number is a value, which the option's own check refuses
expect 2 "^baton plan: --nodes -1: cluster\.nodes: expected a positive integer" -- \
  "$baton" plan "$recipes/tiny-cpu.yaml" --nodes -1
# ... meant as written: "--opt=--x" or "./--x"
expect 0 "^$" -- "$baton" spec "$recipes/tiny-cpu.yaml" --out=--x
expect 0 "^$" -- "$baton" spec "$recipes/tiny-cpu.yaml" --out ./-y
[[ -s ./--x && -s ./-y ]] && ok "spec --out=--x and --out ./-y wrote --x and -y" || fail "spec --out=--x or ./-y wrote nothing"

# ---- baton-worker --comm-timeout: a duration ----
for t in 2.5s 500ms 1m 30; do
  expect 2 "^baton-worker: nope\.pb: cannot open" -- "$worker" --spec nope.pb --comm-timeout "$t"
done
expect 2 "^baton-worker: --comm-timeout '5x': expected a duration such as 250ms, 300s, 5m, 1h or 2d" -- \
  "$worker" --spec nope.pb --comm-timeout 5x
expect 2 "^baton-worker: --comm-timeout '0': out of range, from 1ms to 1000000s$" -- \
  "$worker" --spec nope.pb --comm-timeout=0
expect 2 "^baton-worker: --comm-timeout '2000000s': out of range" -- \
  "$worker" --spec nope.pb --comm-timeout 2000000s
expect 0 "^  --comm-timeout T +how long any collective may wait for a peer: a duration$" -- "$worker" --help

# ---- baton help GROUP SUB ----
for c in "ckpt verify" "ckpt push" "data prepare" "data inspect"; do
  [[ $("$baton" help $c) == "$("$baton" $c --help)" ]] && ok "baton help $c is baton $c --help" ||
    fail "baton help $c is not baton $c --help"
done
[[ $("$baton" help ckpt) == "$("$baton" ckpt --help)" ]] && ok "baton help ckpt" || fail "baton help ckpt"
# ... a --help after them asks for the same
for c in "run" "launch" "ckpt verify" "ckpt"; do
  [[ $("$baton" help $c --help 2>&1) == "$("$baton" $c --help)" ]] && ok "baton help $c --help is baton $c --help" ||
    fail "baton help $c --help: $("$baton" help $c --help 2>&1 | head -n 1)"
done
expect 0 "^usage: baton \\[--help\\]" -- "$baton" help --help
expect 2 "^baton ckpt: unknown subcommand 'bogus'" -- "$baton" help ckpt bogus
expect 2 "^baton help: one command at a time, not 'x'" -- "$baton" help ckpt verify x
expect 2 "^baton help: one command at a time, not 'x'" -- "$baton" help run x

# ---- a missing argument said first, then the usage ----
expect 2 "^baton ckpt reshard: --to LAYOUT is required$" -- "$baton" ckpt reshard ck --out x
expect 2 "^baton ckpt reshard: --to LAYOUT and --out DIR are required$" -- "$baton" ckpt reshard ck
expect 2 "^baton ckpt reshard: missing CKPT$" -- "$baton" ckpt reshard --to tp2 --out x
expect 2 "^baton ckpt verify: missing CKPT$" -- "$baton" ckpt verify
expect 2 "^baton ckpt verify: one checkpoint at a time \\(got 'a' and 'b'\\)$" -- "$baton" ckpt verify a b
expect 2 "^baton ckpt verify: unknown option '--bogus'$" -- "$baton" ckpt verify --bogus
expect 2 "^baton ckpt inspect: missing CKPT$" -- "$baton" ckpt inspect
expect 2 "^baton ckpt inspect: one checkpoint at a time \\(got 'a' and 'b'\\)$" -- "$baton" ckpt inspect a b
expect 2 "^baton data inspect: missing PREFIX$" -- "$baton" data inspect
expect 2 "^baton spec: no recipe given$" -- "$baton" spec
expect 2 "^baton plan: no recipe given$" -- "$baton" plan
for c in "ckpt reshard ck" "ckpt verify" "ckpt inspect" "data inspect" spec plan; do
  [[ $("$baton" $c 2>&1 | sed -n 2p) == "usage: baton "* ]] && ok "$c: the reason, then the usage" ||
    fail "$c: the second line is not the usage"
done

# ---- durations and rates as recipes write them ----
t0=$(date +%s%N)
expect 124 "job timed out after 0\\.5 s" -- "$baton" launch -n 1 --timeout 500ms -- sleep 30
(($(date +%s%N) - t0 < 8000000000)) && ok "launch --timeout 500ms stopped the job at once" ||
  fail "launch --timeout 500ms took $((($(date +%s%N) - t0) / 1000000)) ms"
expect 0 '^\[0\] hi$' -- "$baton" launch -n 1 --timeout 1h --kill-grace=2s -- echo hi
expect 2 "^baton launch: --timeout 'soon': expected a duration such as 250ms, 300s, 5m, 1h or 2d" -- \
  "$baton" launch -n 1 --timeout soon -- true
expect 2 "^baton launch: --kill-grace '2d': out of range, from 0s to 100000s$" -- \
  "$baton" launch -n 1 --kill-grace 2d -- true
expect 2 "^baton launch: --timeout needs a value$" -- "$baton" launch -n 1 --timeout
expect 2 "^baton ckpt pull: --limit-rate '100X': expected bytes per second such as 500K or 100M \\(K/M/G/T are powers of two, 1K = 1024" -- \
  "$baton" ckpt pull http://127.0.0.1:9/x --limit-rate 100X
# below 1 byte per second would be 0, no limit: refused; 0 itself is no limit, said so
for r in 4b/s 0.5B/s 0.5; do
  expect 2 "^baton ckpt pull: --limit-rate '$r': below 1 byte per second \\(0 is no limit\\)$" -- \
    "$baton" ckpt pull http://127.0.0.1:9/x --limit-rate=$r
done
expect 0 "0 \\(the default\\): no limit" -- "$baton" ckpt push --help
# every duration is T, as pull's usage line says
expect 0 "^usage: baton ckpt pull URL .*--max-time T\\]" -- "$baton" ckpt pull --help
[[ $("$baton" ckpt pull --help; "$baton" ckpt push --help) != *" S]"* ]] && ok "push and pull: no 'S' for a duration" ||
  fail "push or pull --help still has '[... S]'"
expect 2 "^baton ckpt push: --stall-time '1y': expected a duration" -- \
  "$baton" ckpt push ck http://127.0.0.1:9/ --stall-time 1y
expect 2 "^baton ckpt export: --max-position expects a count from 1 to 4294967295, such as 4096 or 4K" -- \
  "$baton" ckpt export ck --out x --max-position 4X

# ---- the run directory ----
: >afile
out=$("$baton" run "$small" --run-dir afile 2>&1)
rc=$?
[[ $rc == 2 && $out == "baton run: afile: exists and is not a directory (give --run-dir another path)" ]] &&
  ok "run --run-dir on a file: refused, no mode warning" || fail "run --run-dir on a file: exit $rc: $out"
expect 2 "^baton run: afile/r: cannot create the run directory: Not a directory \\(relative to $work\\)$" -- \
  "$baton" run "$small" --run-dir afile/r
# an existing directory that is no run's and holds files of its own (a project's root,
# --run-dir .): refused, naming it, nothing written there; an empty one is taken, as is one
# holding only what baton names its own (a batch job's slurm-JOBID.out, written first)
mkdir proj proj/src && : >proj/notes && : >proj/.hidden
msg="exists and is not a baton run directory \\(it holds 3 entries of its own, such as '\\.hidden'\\), and a run's files are not mixed with others; give --run-dir a new or empty directory, or 'baton resume' a run directory$"
expect 2 "^baton run: $work/proj: $msg" -- "$baton" run "$small" --run-dir proj --quiet
cd proj && expect 2 "^baton run: $work/proj: $msg" -- "$baton" run "$small" --run-dir . --quiet \
  --set data.train="$work/data/fortunes_train" --set data.valid="$work/data/fortunes_valid"
cd "$work" || exit 1
expect 2 "^baton submit: $work/proj: $msg" -- "$baton" submit "$small" --run-dir proj --dry-run
[[ $(ls -A proj | tr '\n' ' ') == ".hidden notes src " ]] && ok "a directory that is no run's: nothing written in it" ||
  fail "a refused run wrote into proj: $(ls -A proj)"
mkdir emptyd sc && : >emptyd/slurm-12.out && printf '#!/bin/sh\nexit 1\n' >sc/scontrol && chmod +x sc/scontrol &&
  PATH=$work/sc:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 \
  expect 2 "^baton run: --launcher slurm: 'scontrol show hostnames h1' failed" -- \
  "$baton" run "$small" --run-dir emptyd --launcher slurm
[[ $(ls -A emptyd) == slurm-12.out ]] &&
  ok "an existing directory of baton's names alone is taken as a run directory (kept after, as it was)" ||
  fail "emptyd after a refused run: $(ls -A emptyd 2>&1)"
# ... a run refused in a directory that was there leaves it as it was: no lock file (which
# would make it a run's), nor any other file it wrote, whether refused after the run
# directory was opened (the allocation; said) or while opening it (a secret not the user's
# alone, after the lock was taken)
mkdir ed ps && : >ps/secret && chmod 644 ps/secret
PATH=$work/sc:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 \
  expect 2 "^baton run: nothing started: removed what it wrote in ed, which was there before$" -- \
  "$baton" run "$small" --run-dir ed --launcher slurm
expect 2 "^baton run: $work/ps/secret: not used as the run's secret" -- "$baton" run "$small" --run-dir ps --quiet
[[ -z $(ls -A ed) && $(ls -A ps) == secret ]] && ok "a refused run leaves a directory that was there as it was" ||
  fail "left after a refused run: ed: $(ls -A ed) ps: $(ls -A ps)"
# a directory that is no run's (no lock, no journal) holding a recipe.yaml or overrides put
# there by hand: the user's, refused as such (not as another recipe's run, which 'baton
# resume' would call no run's), nothing written in it; a copy holding the recipe's own
# bytes is taken (baton run D/recipe.yaml --run-dir D)
mkdir kr ko kb ks && : >kr/recipe.yaml && cp "$small" ko/recipe.yaml && echo a=1 >ko/overrides &&
  : >kb/recipe.yaml && : >kb/overrides && cp "$small" ks/recipe.yaml
kmsg() { # FILES WHAT: the note on the kept copies that are the user's
  echo "; with no lock or journal there, its $1 no run's cop.* but yours, as .* not the $2 given, byte for byte\\), and a run's files are not mixed with others"
}
expect 2 "^baton run: $work/kr: exists and is not a baton run directory \\(it holds 1 entry of its own, such as 'recipe\\.yaml'$(kmsg "recipe\\.yaml is" recipe)" -- \
  "$baton" run "$small" --run-dir kr --quiet
expect 2 "^baton submit: $work/ko: exists and is not a baton run directory \\(it holds 1 entry of its own, such as 'overrides'$(kmsg "overrides is" --set)" -- \
  "$baton" submit "$small" --run-dir ko --dry-run
expect 2 "^baton run: $work/kb: exists and is not a baton run directory \\(it holds 2 entries of its own, such as 'overrides'$(kmsg "recipe\\.yaml and overrides are" "recipe and --set")" -- \
  "$baton" run "$small" --run-dir kb --quiet --set defaults.steps=1
[[ $(ls -A kb ko kr | tr '\n' ' ') == "kb: overrides recipe.yaml  ko: overrides recipe.yaml  kr: recipe.yaml " ]] &&
  ok "a hand-put recipe.yaml or overrides in a directory that is no run's: nothing written" ||
  fail "written into: $(ls -A kb ko kr)"
expect 0 "wrote $work/ks/baton.sbatch" -- "$baton" submit ks/recipe.yaml --run-dir ks --dry-run
# a lock file the user may not write is named as such, not as the run directory (root: as
# root without the capability that overrides file modes)
nodac=()
[[ $(id -u) == 0 ]] && nodac=(setpriv --bounding-set=-dac_override,-dac_read_search)
chmod 444 ks/lock
expect 2 "^baton run: $work/ks/lock: the run's lock file cannot be opened for writing: Permission denied \\(make it writable by you: chmod u\\+w $work/ks/lock\\)$" -- \
  "${nodac[@]}" "$baton" run ks/recipe.yaml --run-dir ks --quiet
chmod 644 ks/lock
# a name of baton's counts only as its kind: a project's workdir/ directory (a run's is a
# file holding a path), a secret file, a logs file, no run's marks (lock, journal as
# regular files) nor baton's own; a file named like a batch job's output whose job id is
# no number is the user's
fmsg() { # N NAME: the refusal's words for N entries of its own, such as NAME
  local e=entries
  [[ $1 == 1 ]] && e=entry
  echo "exists and is not a baton run directory \\(it holds $1 $e of its own, such as '$2'\\)"
}
mkdir -p wd/workdir wd/src && : >wd/notes && mkdir jd && : >jd/secret && : >jd/notes &&
  mkdir lg && : >lg/logs && mkdir sn && : >sn/slurm-notes.out && : >sn/slurm-5_.out
expect 2 "^baton run: $work/wd: $(fmsg 3 notes)" -- "$baton" run "$small" --run-dir wd --quiet
expect 2 "^baton run: $work/jd: $(fmsg 1 notes)" -- "$baton" run "$small" --run-dir jd --quiet
expect 2 "^baton submit: $work/lg: $(fmsg 1 logs)" -- "$baton" submit "$small" --run-dir lg --dry-run
expect 2 "^baton submit: $work/sn: $(fmsg 2 slurm-5_.out)" -- "$baton" submit "$small" --run-dir sn --dry-run
[[ $(ls -A wd jd lg sn | tr '\n' ' ') == "jd: notes secret  lg: logs  sn: slurm-5_.out slurm-notes.out  wd: notes src workdir " ]] &&
  ok "names of baton's of another kind: nothing written" || fail "written into: $(ls -A wd jd lg sn)"
# ... with no mark, a name of baton's is its own only as a run's would be before it starts:
# a directory that holds anything (another tool's checkpoints/, logs/) is the user's, as is
# a workdir file that is not one absolute path of a directory; a batch job's directory
# whose lock file was deleted (its workdir, secret and run_id there) is still a run's,
# refused as another recipe's (or --set's) as it would be with its lock, the refusal saying
# that the lock file was deleted
mkdir -p oc/checkpoints/step-1000 oc/logs oc/tb && : >oc/checkpoints/step-1000/model.bin &&
  : >oc/logs/train.log && : >oc/tb/.DS_Store && mkdir wf && echo "my notes" >wf/workdir
expect 2 "^baton run: $work/oc: $(fmsg 2 checkpoints)" -- "$baton" run "$small" --run-dir oc --quiet
expect 2 "^baton run: $work/wf: $(fmsg 1 workdir)" -- "$baton" run "$small" --run-dir wf --quiet
[[ $(ls -A oc oc/checkpoints oc/logs wf | tr '\n' ' ') == "oc: checkpoints logs tb  oc/checkpoints: step-1000  oc/logs: train.log  wf: workdir " ]] &&
  ok "another tool's checkpoints/ and logs/, a notes file named workdir: nothing written" ||
  fail "written into: $(ls -A oc oc/checkpoints oc/logs wf)"
"$baton" submit "$small" --run-dir sd --dry-run >/dev/null && rm sd/lock &&
  sed 's/^\(name: .*\)$/\1x/' "$small" >other.yaml && ! cmp -s other.yaml "$small" ||
  fail "no batch job's run directory to test"
expect 2 "^baton run: $work/sd: this run directory belongs to a run with another recipe .*; to start a new run, choose another --run-dir\. Its lock file was deleted; that does not free it for another run \(the workdir, secret and run_id there are the run's\); a baton resume makes the lock file again$" -- \
  "$baton" run other.yaml --run-dir sd --quiet
[[ ! -e sd/lock ]] && ok "the refused run of a directory whose lock was deleted: no lock made" ||
  fail "the refused run left a lock file in sd"
expect 2 "^baton run: $work/sd: this run directory belongs to a run with other --set overrides .*; to run with other overrides, choose another --run-dir\. Its lock file was deleted; that does not free it for another run \(the workdir, secret and run_id there are the run's\); a baton resume makes the lock file again$" -- \
  "$baton" run "$small" --run-dir sd --set stages.0.steps=7 --quiet
# ... nor a run's: a new run's name with a control character is refused though it holds
# a workdir/ directory
mkdir -p $'c\tw/workdir'
expect 2 "^baton run: --run-dir c\\\\tw: holds a control character" -- \
  "$baton" run "$small" --run-dir $'c\tw' --quiet
# what the file system puts in a fresh directory (a new disk's lost+found, an NFS
# client's .nfsXXXX), a Mac's Finder's .DS_Store and a batch job's output (slurm-JOBID.out
# or .err, an array task's slurm-JOBID_TASK.out) are no one's files: taken
mkdir -p fs/lost+found && : >fs/.nfs000000000012abcd00000001 && : >fs/.DS_Store && mkdir sl &&
  : >sl/slurm-5.err && : >sl/slurm-7_3.out && : >sl/slurm-7_3.err
expect 0 "wrote $work/fs/baton.sbatch" -- "$baton" submit "$small" --run-dir fs --dry-run
expect 0 "wrote $work/sl/baton.sbatch" -- "$baton" submit "$small" --run-dir sl --dry-run
# baton alone, without baton-worker beside it nor in PATH: where it looked is said
mkdir alone && cp "$baton" alone/
PATH=/usr/bin:/bin expect 2 "cannot launch the workers: baton-worker: command not found in PATH \\(looked for baton-worker beside baton, as $work/alone/baton-worker, then in PATH; give --worker PATH\\)" -- \
  alone/baton run "$small" --run-dir r-alone --quiet
# ... and with a baton-worker of another build first in PATH (this build's, its version
# changed in the binary: a real worker whose Hello names another build): the worker it
# found is said, and refused once a rank says Hello, killed, as a configuration error
# (exit 2, not retried) naming both programs and both builds; journaled as such, and
# resumable once the right worker is there (each attempt's worker in the journal)
rx() { sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$1"; } # $1 as an extended regex
ver=$("$baton" --version) ver=${ver#baton }
mkdir otherbin samebin && cp "$worker" samebin/baton-worker &&
  /usr/bin/python3 -c '
import sys
v = sys.argv[1].encode(); o = v.replace(b"(git ", b"(gix ")
b = open(sys.argv[2], "rb").read()
assert v in b and o != v
open(sys.argv[3], "wb").write(b.replace(v, o))' "$ver" "$worker" otherbin/baton-worker &&
  chmod +x otherbin/baton-worker
other=${ver/"(git "/"(gix "}
[[ $(otherbin/baton-worker --version) == "baton-worker $other" ]] && ok "a worker of another build" ||
  fail "otherbin/baton-worker --version: $(otherbin/baton-worker --version 2>&1)"
out=$(PATH=$work/otherbin:/usr/bin:/bin alone/baton run "$small" --run-dir r-other --set defaults.steps=1 2>&1)
rc=$?
want="^baton run: stage \"fp32\" attempt 0 failed: the worker is of another build: $(rx "$work/otherbin/baton-worker") \\(rank 0 on [^,]+, pid [0-9]+\\) is baton-worker $(rx "$other"), but this baton \\($(rx "$work/alone/baton")\\) is $(rx "$ver"); use the baton-worker built with this baton \\(looked for baton-worker beside baton, as $(rx "$work/alone/baton-worker"), then in PATH; give --worker PATH\\) \\(a configuration error: not retried\\)$"
[[ $rc == 2 ]] && grep -qxF "baton run: worker $work/otherbin/baton-worker, found in PATH (none beside baton)" <<<"$out" &&
  grep -Eq "$want" <<<"$out" && ok "a worker of another build found in PATH: said, refused" ||
  fail "run with a worker of another build: exit $rc: $out"
"$baton" status r-other --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "failed", s["state"]
assert (s["failures"], s["restarts"]) == (1, 0), s
assert not any(f["retryable"] for f in s["failure_list"]), s["failure_list"]
assert all("another build" in f["cause"] for f in s["failure_list"]), s["failure_list"]' &&
  ok "the worker of another build: failed, not retried" || fail "status r-other: $("$baton" status r-other 2>&1)"
PATH=$work/samebin:/usr/bin:/bin expect 0 "^baton resume: worker $work/samebin/baton-worker, found in PATH \\(none beside baton\\)$" -- \
  alone/baton resume r-other
"$baton" status r-other --json | /usr/bin/python3 -c 'import json, sys; assert json.load(sys.stdin)["state"] == "completed"' &&
  grep -qaF "$work/samebin/baton-worker" r-other/journal && grep -qaF "$work/otherbin/baton-worker" r-other/journal &&
  ok "resumed with this build's worker; each attempt's worker journaled" ||
  fail "resume r-other: $("$baton" status r-other 2>&1)"
expect 2 "cannot launch the workers: /nonexistent/w: No such file or directory$" -- \
  "$baton" run "$small" --run-dir r-w --quiet --worker /nonexistent/w
# ... refused before any attempt: the run directory either made is removed again, and
# nothing is made for a --worker that is not an executable file (a directory, a plain
# file) nor for --launcher slurm outside an allocation, so a corrected retry starts afresh
[[ ! -e r-alone && ! -e r-w ]] && ok "run with a worker that cannot be launched: no run directory left" ||
  fail "a run refused for its worker left its run directory ($(ls -d r-alone r-w 2>&1))"
: >plain
expect 2 "^baton run: cannot launch the workers: $work: not an executable file$" -- \
  "$baton" run "$small" --run-dir r-d --quiet --worker "$work"
expect 2 "^baton run: cannot launch the workers: $work/plain: not an executable file$" -- \
  "$baton" run "$small" --run-dir r-d/sub --quiet --worker ./plain
expect 2 "^baton run: --launcher slurm: SLURM_JOB_ID and SLURM_JOB_NODELIST are not set" -- \
  env -u SLURM_JOB_ID -u SLURM_JOB_NODELIST "$baton" run "$small" --run-dir r-d --launcher slurm
# inside an "allocation" whose hosts scontrol cannot list: the directory made is removed
mkdir fakebin && printf '#!/bin/sh\nexit 1\n' >fakebin/scontrol && chmod +x fakebin/scontrol
PATH=$work/fakebin:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 expect 2 "^baton run: --launcher slurm: 'scontrol show hostnames h1' failed" -- \
  "$baton" run "$small" --run-dir r-d/sub --launcher slurm
[[ ! -e r-d ]] && ok "refused runs (a directory or plain file for --worker, slurm): nothing made" ||
  fail "a refused run left r-d: $(ls -R r-d)"
# ... however many directories it made (70 here: the run directory and all above it)
deep=deep$(printf '/d%.0s' {1..69})
PATH=$work/fakebin:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 expect 2 "^baton run: nothing started: removed deep, which it made$" -- \
  "$baton" run "$small" --run-dir "$deep" --launcher slurm
[[ ! -e deep ]] && ok "a refused run removes the 70 directories it made" ||
  fail "a refused run left of the 70 directories it made: $(find deep | tail -1)"
# ... and only what it made itself: another run's directory made beside it meanwhile (a
# sweep's runs that both found sweep/ missing) is kept, with the parent both share; a file
# baton does not write, put in the run directory meanwhile, is kept, with that directory
mkdir fakebin2 && cat >fakebin2/scontrol <<EOF
#!/bin/sh
mkdir -p "$work/sweep/b" "$work/sweep2/a" && echo x >"$work/sweep/b/journal" && echo n >"$work/sweep2/a/notes"
exit 1
EOF
chmod +x fakebin2/scontrol
PATH=$work/fakebin2:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 expect 2 "^baton run: nothing started: removed sweep/a, which it made; kept sweep, which it made: other files are in it now$" -- \
  "$baton" run "$small" --run-dir sweep/a --launcher slurm
[[ -f sweep/b/journal && ! -e sweep/a ]] && ok "a refused run removes its own directory, not another's beside it" ||
  fail "a refused run removed another's directory or kept its own: $(ls -R sweep 2>&1)"
rm -rf sweep2 && mkdir sweep2 && PATH=$work/fakebin2:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 \
  expect 2 "^baton run: nothing started: kept sweep2/a, which it made: other files are in it now$" -- \
  "$baton" run "$small" --run-dir sweep2/a --launcher slurm
[[ $(ls -A sweep2/a) == notes ]] && ok "a refused run removes only its own files from its directory" ||
  fail "a refused run's directory holds: $(ls -A sweep2/a 2>&1)"
# On NFS, the lock file removed while baton still holds it open stays as .nfsXXXX (the
# client's "silly rename") until its descriptor closes, and the client removes it a moment
# later: the run directory is not empty at its first rmdir. Emulated by planting such a
# name (no NFS here): one that goes 0.5 s later (as the client's removal would) must not
# keep the directory, and one that stays must be named as what it is, not as other files.
mkdir fakebin3 && cat >fakebin3/scontrol <<EOF
#!/bin/sh
for d in "$work"/nfs1 "$work"/nfs2; do [ -d "\$d" ] && : >"\$d/.nfs0000000000001234"; done
(sleep 0.5; rm -f "$work/nfs2/.nfs0000000000001234") >/dev/null 2>&1 </dev/null &
exit 1
EOF
chmod +x fakebin3/scontrol
PATH=$work/fakebin3:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 expect 2 "^baton run: nothing started: kept nfs1, which it made: nothing is in it but \.nfs0000000000001234, which NFS keeps for a removed file that is still open" -- \
  "$baton" run "$small" --run-dir nfs1 --launcher slurm
PATH=$work/fakebin3:$PATH SLURM_JOB_ID=1 SLURM_JOB_NODELIST=h1 expect 2 "^baton run: nothing started: removed nfs2, which it made$" -- \
  "$baton" run "$small" --run-dir nfs2 --launcher slurm
[[ $(ls -A nfs1) == .nfs0000000000001234 && ! -e nfs2 ]] && ok "NFS's .nfsXXXX: waited for, then named" ||
  fail "nfs1 holds '$(ls -A nfs1 2>&1)', nfs2: $(ls -A nfs2 2>&1)"
# a worker exec refuses (an executable file that is no program): exit 2 at once, not
# retried; the retry with a --worker that works replaces the kept one for good (resume
# would take it again), and the failure counts no restart and no recovery
printf 'not a program\n' >notprog && chmod +x notprog
expect 2 "^baton run: cannot launch the workers: rank 0: cannot execute $work/notprog: Exec format error$" -- \
  "$baton" run "$small" --run-dir r-x --quiet --worker ./notprog --set defaults.steps=1
expect 0 "^baton run: worker $worker \\(--worker\\), replacing $work/notprog, which the run was started with and which cannot start it; kept in $work/r-x/worker from now on$" -- \
  "$baton" run "$small" --run-dir r-x --quiet --worker "$worker" --set defaults.steps=1
[[ $(cat r-x/worker) == "$worker" ]] && ok "the kept worker replaced" || fail "r-x/worker is $(cat r-x/worker)"
"$baton" status r-x --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed", s["state"]
assert (s["failures"], s["restarts"], s["recoveries"]) == (1, 0, 0), s
assert [(x["attempts"], x["restarts"]) for x in s["stages"]] == [(2, 0), (1, 0), (1, 0)], s["stages"]' &&
  ok "status: the failure not retried counts no restart nor recovery" || fail "status r-x: $("$baton" status r-x)"

# ---- a command a message shows runs as it is, copied from between its quotes ----
# (stages/util/shquote.h): a path with a space or a quote is shell-quoted in it, the command
# then shown in "..."; one that needs no quotes stays in '...'
q="$work/r q'x y"
mkdir "$q"
expect 2 "^baton resume: $q: not a run directory \\(no journal\\); start a run with \"baton run RECIPE --run-dir '$work/r q'\\\\''x y'\"$" -- \
  "$baton" resume "$q"
mkdir r-d2
expect 2 "^baton resume: $work/r-d2: not a run directory \\(no journal\\); start a run with 'baton run RECIPE --run-dir $work/r-d2'$" -- \
  "$baton" resume r-d2
# a run stopped: "continue with" a command whose words, read by the shell, are baton resume
# and the run directory
"$baton" run "$small" --run-dir "$q/run" --quiet --set defaults.steps=100000 >stop.out 2>&1 &
pid=$!
for ((i = 0; i < 300; i++)); do
  [[ -s $q/run/metrics.jsonl ]] && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
rc=$?
cmd=$(sed -n 's/^baton run: stopped; continue with "\(.*\)"$/\1/p' stop.out)
eval "set -- $cmd"
[[ $rc == 75 && $# == 3 && $1 == baton && $2 == resume && $3 == "$(realpath "$q/run")" ]] &&
  ok "a stopped run's command, copied, is baton resume RUN_DIR: $cmd" ||
  fail "a stopped run (exit $rc) says: $(cat stop.out)"
# a run whose working directory moved, its run directory's path with a space and a quote:
# the echo the message shows, NEW_PATH replaced, writes RUN_DIR/workdir (not a file cut at
# the space), and the resume then takes the new path
mkdir "$work/p j" && ln -s ../data "$work/p j/data"
(cd "$work/p j" && "$baton" submit "$small" --run-dir "$q/wd" --dry-run >/dev/null) || fail "submit in 'p j'"
mv "$work/p j" "$work/p k" && mkdir "$work/e m"
cmd=$("$baton" resume "$q/wd" --quiet 2>&1 |
  sed -n 's/.*if it moved, write its new path into .* (\(echo NEW_PATH > .*\)) and resume again$/\1/p')
(eval "${cmd/NEW_PATH/"'$work/e m'"}")
[[ $(cat "$q/wd/workdir" 2>&1) == "$work/e m" ]] && ok "a moved working directory: the echo shown, copied: $cmd" ||
  fail "the echo shown for a moved working directory ($cmd) did not write $q/wd/workdir"
expect 2 "^baton resume: 2 datasets the recipe reads cannot be read \\(relative paths resolve against $work/e m\\):$" -- \
  "$baton" resume "$q/wd" --quiet
# a directory above the run directory that any user may write: the chmod shown, copied,
# makes it one baton takes
o="$work/o w'x"
mkdir -m 0777 "$o"
cmd=$("$baton" submit "$small" --run-dir "$o/r" --dry-run 2>&1 |
  sed -n 's/.*, or make it so with "\(chmod o-w [^"]*\)" (or "chmod +t .*")$/\1/p')
eval "$cmd"
[[ -n $cmd && $(stat -c %a "$o") == 775 ]] && ok "a directory above open to others: the chmod shown, copied: $cmd" ||
  fail "the chmod shown for $o ($cmd) did not take o-w away"
expect 0 "wrote $o/r/baton.sbatch" -- "$baton" submit "$small" --run-dir "$o/r" --dry-run
# a new run directory whose path holds a control character: refused, nothing made
expect 2 "^baton run: --run-dir n\\\\nl: holds a control character \\(shown escaped\\), which would break every line that names the run directory; choose another --run-dir$" -- \
  "$baton" run "$small" --run-dir $'n\nl' --quiet
expect 2 "^baton submit: --run-dir t\\\\tb/x: holds a control character" -- \
  "$baton" submit "$small" --run-dir $'t\tb/x' --dry-run
[[ ! -e $'n\nl' && ! -e $'t\tb' ]] && ok "a run directory with a control character: nothing made" ||
  fail "a refused run directory with a control character was made"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo PASS
