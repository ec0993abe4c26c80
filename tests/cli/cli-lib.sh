# Sourced by the tests/cli check scripts: a private work directory, failure counting and
# `expect`. Needs $baton and $src set; leaves the caller in the work directory.
#   cli_workdir NAME: mktemp -d /tmp/baton-test-NAME.XXXXXX as $work, removed at exit

cli_workdir() {
  work=$(mktemp -d "/tmp/baton-test-$1.XXXXXX") || exit 1
  trap 'rm -rf "$work"' EXIT
  cd "$work" || exit 1
}

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
ok() { echo "ok   $*"; }

# expect STATUS PATTERN -- PROGRAM ARGS...: the exit status, and stdout+stderr matching
# the extended regex PATTERN (the command said with baton for $baton, paths below $src
# relative to it).
expect() {
  local status=$1 pattern=$2 out rc cmd
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  cmd=$* # as one string: ${*#...} would strip each word on its own
  cmd=${cmd//"$baton "/baton } cmd=${cmd//"$src/"/}
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "$cmd -> exit $rc (want $status), output:"
    echo "$out" | head -n 5
  else
    ok "$cmd -> $rc"
  fi
}
