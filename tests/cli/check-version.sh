#!/usr/bin/env bash
# --version of both programs names the build's source: "baton 0.1.0 (git DESCRIBE)" and
# "baton-worker 0.1.0 (git DESCRIBE)", the same DESCRIBE (`git describe --always --dirty`
# at build time), which in a git checkout is its describe (less -dirty: the tree may have
# been touched since the build); outside one (a tarball) cmake/baton_version.cmake writes
# "unknown" (also for a tarball unpacked inside another repository, and an exported
# GIT_DIR of another repository is not described). A value given to --version is refused.
#   check-version.sh BATON BATON_WORKER SOURCE_DIR CMAKE
set -u
baton=$1 worker=$2 src=$3 cmake=$4
work=$(mktemp -d /tmp/baton-test-version.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
b=$("$baton" --version) || fail "baton --version exited $?"
w=$("$worker" --version) || fail "baton-worker --version exited $?"
re='^[0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9A-Za-z._+-]+)\)$'
[[ ${b#baton } =~ $re ]] && id=${BASH_REMATCH[1]} || fail "baton --version: '$b'"
[[ ${w#baton-worker } =~ $re && $w == "baton-worker ${b#baton }" ]] ||
  fail "baton-worker --version '$w' is not baton's '$b'"
if [[ -e $src/.git ]] && want=$(git -C "$src" describe --always 2>/dev/null); then
  [[ ${id%-dirty} == "$want" ]] || fail "--version names '$id', the source is at '$want' (a stale build?)"
fi
# outside a git checkout: unknown
mkdir "$work/tarball"
"$cmake" -DSOURCE_DIR="$work/tarball" -DOUT="$work/v.h" -DVERSION=0.1.0 \
  -P "$src/cmake/baton_version.cmake" || fail "cmake/baton_version.cmake failed"
grep -qx '#define BATON_VERSION "0.1.0 (git unknown)"' "$work/v.h" ||
  fail "outside a git checkout: $(cat "$work/v.h")"
# a tarball unpacked inside another repository: unknown, not that one's commit
git init -q "$work/outer" && git -C "$work/outer" -c user.name=t -c user.email=t@t.invalid \
  commit -q --allow-empty -m x && mkdir "$work/outer/tarball" || fail "git init outer"
"$cmake" -DSOURCE_DIR="$work/outer/tarball" -DOUT="$work/v2.h" -DVERSION=0.1.0 \
  -P "$src/cmake/baton_version.cmake" >/dev/null || fail "cmake/baton_version.cmake failed"
grep -qx '#define BATON_VERSION "0.1.0 (git unknown)"' "$work/v2.h" ||
  fail "a tarball inside another repository: $(cat "$work/v2.h")"
# an exported GIT_DIR (a build from a git hook) does not describe that repository
if [[ -e $src/.git ]] && want=$(git -C "$src" describe --always 2>/dev/null); then
  GIT_DIR="$work/outer/.git" "$cmake" -DSOURCE_DIR="$src" -DOUT="$work/v3.h" -DVERSION=0.1.0 \
    -P "$src/cmake/baton_version.cmake" >/dev/null || fail "cmake/baton_version.cmake failed"
  grep -q "^#define BATON_VERSION \"0.1.0 (git $want\(-dirty\)\?)\"$" "$work/v3.h" ||
    fail "with GIT_DIR of another repository exported: $(cat "$work/v3.h"), want $want"
fi
"$worker" --version=1 >"$work/out" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "takes no value" "$work/out" || fail "baton-worker --version=1 exited $rc: $(cat "$work/out")"
((failures == 0)) && echo "cli.version: ok ($b; $w)"
exit $((failures > 0))
