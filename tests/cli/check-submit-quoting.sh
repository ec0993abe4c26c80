#!/usr/bin/env bash
# baton submit's batch script for paths and sbatch options with characters that are
# special to the shell or to sbatch's own reading of #SBATCH lines (a space, quotes, '$',
# '`', '#', '%', a leading ':'): each written so that it reads back as given, the
# --dry-run script the very one submitted, and what an #SBATCH line cannot carry (a line
# break; a backslash in the --output path; an empty value given apart to a short option;
# a template's placeholder after a backslash) refused with exit 2 before anything is made.
# No Slurm needed: the exact #SBATCH lines are checked here (unit.test_sbatch_quote reads
# them back by sbatch's rules; slurm.quoting gives such a script to the real sbatch), and
# the script's shell lines are run by bash with stand-ins for exec and sbatch.
#   check-submit-quoting.sh BATON SOURCE_DIR
set -u
baton=$1 src=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }

# expect STATUS PATTERN -- ARGS...: baton ARGS exits STATUS, its output matches PATTERN
expect() {
  local status=$1 pattern=$2 out rc
  shift 3
  out=$("$baton" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "baton $* -> exit $rc (want $status), output:"
    echo "$out" | head -n 5
  else
    ok "baton $* -> $rc"
  fi
}
# has FILE LINE: FILE holds LINE exactly
has() { grep -qxF -- "$2" "$1" && ok "line: $2" || fail "$1 has no line: $2"; }

sub=$(mktemp -d /tmp/baton-test-quoting.XXXXXX)
trap 'rm -rf "$sub"' EXIT
small=$src/tests/engine/precision.yaml # fortunes data only, one device
# submit runs in a directory whose name needs quoting too (#SBATCH --chdir)
wd="$sub/w d'x"
mkdir -p "$wd" && cd "$wd" || exit 1
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1

d="$sub/q d'i\"r \$x \`y\` #z%w"
expect 0 "wrote $sub/q d'i\"r \\\$x \`y\` #z%w/baton\.sbatch \(not submitted: --dry-run\)" -- \
  submit "$small" --run-dir "$d" --dry-run --time 5 --job-name "my job" \
  --comment="it's \"a\" b" -J 'x y' -- -p 'de bug' --reservation :r
s=$d/baton.sbatch
has "$s" "#SBATCH --output=\"$sub/q d'i\\\"r \$x \`y\` #z%%w\"/slurm-%j.out"
has "$s" "#SBATCH --chdir=\"$sub/w d'x\""
has "$s" "#SBATCH --job-name=precision"
has "$s" "#SBATCH --time=5"
has "$s" "#SBATCH --job-name=\"my job\""
has "$s" "#SBATCH --comment=\"it's \\\"a\\\" b\""
has "$s" "#SBATCH -J \"x y\""
has "$s" "#SBATCH -p \"de bug\""
has "$s" "#SBATCH --reservation=\":r\""
# the shell's lines: exec's words, and the comment's command, are the paths as they are
want=$(printf '%s\n' resume "$d" --launcher slurm --worker)
got=$(bash -c 'exec() { printf "%s\n" "$@"; }; '"$(grep '^exec ' "$s")" | sed -n 2,6p)
[[ $got == "$want" ]] && ok "the script's exec line gives baton resume the run directory as it is" ||
  fail "exec's words: $got"
cmd=$(sed -n 's/^# `\(sbatch .*\)`\.$/\1/p' "$s")
got=$(bash -c 'sbatch() { printf "%s" "$1"; }; '"$cmd")
[[ $got == "$d/baton.sbatch" ]] && ok "the comment's sbatch command names the script" ||
  fail "the comment's command '$cmd' gives '$got'"

# the dry run's script is exactly the one sbatch is given
mkdir "$sub/bin" &&
  printf '#!/bin/sh\ncp "$2" "%s/submitted"\necho 4242\n' "$sub" >"$sub/bin/sbatch" &&
  chmod +x "$sub/bin/sbatch"
cp "$s" "$sub/dry" && rm -rf "$d"
PATH="$sub/bin:$PATH" expect 0 "^baton submit: job 4242, script $sub/q d'i" -- \
  submit "$small" --run-dir "$d" --time 5 --job-name "my job" \
  --comment="it's \"a\" b" -J 'x y' -- -p 'de bug' --reservation :r
cmp -s "$sub/dry" "$sub/submitted" && ok "--dry-run wrote the script that is submitted" ||
  fail "the submitted script differs from the --dry-run one: $(diff "$sub/dry" "$sub/submitted" | head -5)"

# what an #SBATCH line cannot carry: refused, naming it and the character, nothing made
expect 2 "^baton submit: the run directory '$sub/b\\\\s' holds '\\\\', which .*baton\.sbatch\.in:[0-9]+ cannot carry in a filename pattern \(--output" -- \
  submit "$small" --run-dir "$sub/b\\s" --dry-run
# (a new run directory with a line break is refused before, as with any control character)
expect 2 "^baton submit: --run-dir $sub/n\\\\nl: holds a control character \\(shown escaped\\)" -- \
  submit "$small" --run-dir "$sub/n"$'\n'"l" --dry-run
expect 2 "^baton submit: the sbatch option's value 'a\\\\nb' holds a line break" -- \
  submit "$small" --run-dir "$sub/c" --dry-run --comment $'a\nb'
# an empty value given apart to a short option: sbatch would drop it and take the next
# word as the value (cli.submit-sbatch-reads shows it); a long one is written joined
expect 2 "^baton submit: sbatch option '-p' given an empty value, which an #SBATCH line cannot carry" -- \
  submit "$small" --run-dir "$sub/c" --dry-run -- -p '' --time=5
# a template's placeholder right after a backslash (its opening quote would be literal)
printf '#!/bin/bash\n#SBATCH --comment=x\\@RUN_DIR@ --job-name=j\necho \\@RUN_DIR_Q@\n' >"$sub/bs.in"
expect 2 "^baton submit: $sub/bs.in:2: placeholder @RUN_DIR@ right after a backslash" -- \
  submit "$small" --run-dir "$sub/c" --dry-run --template "$sub/bs.in"
sed -i 2d "$sub/bs.in"
expect 2 "^baton submit: $sub/bs.in:2: placeholder @RUN_DIR_Q@ right after a backslash" -- \
  submit "$small" --run-dir "$sub/c" --dry-run --template "$sub/bs.in"
# sbatch options that print help or a version and submit nothing: refused, not written
for o in -h --help --usage -V --version; do
  expect 2 "^baton submit: sbatch option '$o' prints sbatch's (help|version) and submits nothing" -- \
    submit "$small" --run-dir "$sub/c" --dry-run -- "$o"
done
[[ ! -e "$sub/b\\s" && ! -e "$sub/n"$'\n'"l" && ! -e "$sub/c" ]] && ok "a refused submit made no run directory" ||
  fail "a refused submit left a run directory"

# a template's own placeholders: quoted for sbatch on #SBATCH lines ('%' doubled only in a
# filename pattern; within the template's own quotes, no quotes added), as they are
# elsewhere, the _Q ones for the shell
cat >"$sub/t.in" <<'TPL'
#!/bin/bash
#SBATCH --chdir=@RUN_DIR@
#SBATCH -e @RUN_DIR@/e-%j
#SBATCH --comment="in @RUN_DIR@"
#SBATCH --output='@RUN_DIR@/o-%j'
# run @RUN_DIR@
echo @RUN_DIR_Q@ @SCRIPT_Q@
TPL
d2="$sub/t %d \"q\""
e2="$sub/t %d \\\"q\\\""
expect 0 "wrote" -- submit "$small" --run-dir "$d2" --dry-run --template "$sub/t.in"
has "$d2/baton.sbatch" "#SBATCH --chdir=\"$e2\""
has "$d2/baton.sbatch" "#SBATCH -e \"$sub/t %%d \\\"q\\\"\"/e-%j"
has "$d2/baton.sbatch" "#SBATCH --comment=\"in $e2\""
has "$d2/baton.sbatch" "#SBATCH --output='$sub/t %%d \"q\"/o-%j'"
has "$d2/baton.sbatch" "# run $d2"
[[ $(bash "$d2/baton.sbatch") == "$d2 $d2/baton.sbatch" ]] && ok "@RUN_DIR_Q@ and @SCRIPT_Q@ are shell words" ||
  fail "the template's echo printed '$(bash "$d2/baton.sbatch")'"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
