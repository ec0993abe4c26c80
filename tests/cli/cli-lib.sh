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
# the extended regex PATTERN (the command named without $baton's and $src's directories).
expect() {
  local status=$1 pattern=$2 out rc
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "${*#"$baton "} -> exit $rc (want $status), output:"
    echo "$out" | head -n 5
  else
    ok "${*#"$src/"} -> $rc"
  fi
}
