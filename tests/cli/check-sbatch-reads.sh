#!/usr/bin/env bash
# baton submit's #SBATCH lines read back by the real sbatch, with no Slurm daemon: `sbatch
# -vvv --test-only` under a dummy slurm.conf (its controller on port 1, which nothing
# answers) prints every word it parsed from the script's #SBATCH lines ("Found in script,
# argument ...") before it tries to connect. Each script's words must be exactly the
# values given: run directories and option values with spaces, quotes, '#', '%', '$',
# a leading ':', a trailing space (a tab in a new run directory is refused: cli.options); an empty value joined to its long option; and
# a template's own placeholders within its quotes. Exit 77 (SKIPPED) where sbatch is
# not installed, or does not print what it parsed.
#   check-sbatch-reads.sh BATON SOURCE_DIR
set -u
baton=$1 src=$2
command -v sbatch >/dev/null || { echo "SKIPPED: no sbatch"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }
work=$(mktemp -d /tmp/baton-test-sbatch.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
unset $(env | sed -n 's/^\(SBATCH_[A-Za-z_]*\|SLURM_[A-Za-z_]*\)=.*/\1/p')
cat >slurm.conf <<'EOF'
ClusterName=baton-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=1
NodeName=localhost CPUs=1
PartitionName=p Nodes=localhost
EOF
export SLURM_CONF=$work/slurm.conf
small=$src/tests/engine/precision.yaml
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1

# read SCRIPT: the words sbatch found in SCRIPT's #SBATCH lines, one a line (sbatch is
# stopped once it has listed its options: it would go on trying to connect for ~20 s)
read_back() {
  # emptied here first: the background job's own '>' may open the file only after the
  # loop below has read the previous script's listing (seen under load in CI)
  : >sbatch.out
  sbatch -vvv --test-only "$1" >sbatch.out 2>&1 &
  local pid=$! i
  for ((i = 0; i < 400; i++)); do
    grep -q "end of defined options" sbatch.out && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  sed -n '/end of defined options/q;s/^sbatch: debug2: Found in script, argument "\(.*\)"$/\1/p' sbatch.out
}
printf '#!/bin/sh\n#SBATCH --comment="a b"\ntrue\n' >probe.sh
[[ $(read_back probe.sh) == "--comment=a b" ]] ||
  { echo "SKIPPED: sbatch -vvv --test-only does not list what it parsed: $(head -n 3 sbatch.out)"; exit 77; }

# check NAME SCRIPT WORD...: sbatch reads exactly WORD... from SCRIPT
check() {
  local name=$1 script=$2 got want
  shift 2
  got=$(read_back "$script")
  want=$(printf '%s\n' "$@")
  [[ $got == "$want" ]] && ok "$name" || {
    fail "$name: sbatch read:"
    diff <(echo "$want") <(echo "$got") | head -n 10
  }
}

n=0
for d in "a b" 'q"u' "s'q" "h#sh" "p%j" "trail " '$(id)' "m'\"n" 'x`y`'; do
  n=$((n + 1))
  dir="$work/r$n $d"
  out=$("$baton" submit "$small" --run-dir "$dir" --dry-run --partition '' --time 5 \
    --comment="it's \"a\" b #c" -J ':x y' -- -p 'de bug' --reservation :r 2>&1) ||
    { fail "submit --run-dir '$dir': $out"; continue; }
  check "run directory '$d'" "$dir/baton.sbatch" --job-name=precision --nodes=1 \
    --ntasks-per-node=1 --no-kill --open-mode=append "--output=${dir//%/%%}/slurm-%j.out" \
    "--chdir=$work" --partition= --time=5 "--comment=it's \"a\" b #c" -J ":x y" -p "de bug" \
    --reservation=:r
done

# a template's placeholders within its own quotes, and in a filename pattern
cat >t.in <<'TPL'
#!/bin/bash
#SBATCH --chdir=@RUN_DIR@
#SBATCH -e @RUN_DIR@/e-%j
#SBATCH --comment="in @RUN_DIR@" --job-name='@JOB_NAME@'
#SBATCH --output='@RUN_DIR@/o-%j'
true
TPL
d2="$work/t %d \"q\" 'a'"
"$baton" submit "$small" --run-dir "$d2" --dry-run --template t.in >/dev/null 2>&1 ||
  fail "submit --template t.in"
check "a template's placeholders" "$d2/baton.sbatch" "--chdir=$d2" -e "${d2//%/%%}/e-%j" \
  "--comment=in $d2" --job-name=precision "--output=${d2//%/%%}/o-%j"

# what a line cannot carry is refused (exit 2), or else must read back right: an empty
# value given apart to a short option (sbatch drops the empty word and takes the next
# one as the value); a placeholder after a template's backslash (its opening quote made
# literal)
d3="$work/e"
if "$baton" submit "$small" --run-dir "$d3" --dry-run -- -p '' --time=5 >/dev/null 2>&1; then
  check "-p '' --time=5" "$d3/baton.sbatch" --job-name=precision --nodes=1 --ntasks-per-node=1 \
    --no-kill --open-mode=append "--output=$d3/slurm-%j.out" "--chdir=$work" -p "" --time=5
else ok "-p '' refused"; fi
printf '#!/bin/bash\n#SBATCH --comment=x\\@RUN_DIR@ --job-name=j\ntrue\n' >bs.in
d4="$work/b s"
if "$baton" submit "$small" --run-dir "$d4" --dry-run --template bs.in >/dev/null 2>&1; then
  check "a placeholder after a backslash" "$d4/baton.sbatch" "--comment=x\\$d4" --job-name=j
else ok "a placeholder after a backslash refused"; fi

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
