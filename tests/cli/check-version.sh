#!/usr/bin/env bash
# --version of both programs names the build's source: "baton 0.1.0 (git DESCRIBE)" and
# "baton-worker 0.1.0 (git DESCRIBE)", the same DESCRIBE (`git describe --always --dirty`
# at build time), which in a git checkout is its describe (less -dirty: the tree may have
# been touched since the build), with ", src H" (the sources' content hash) when dirty;
# outside one (a tarball, a container build without .git) cmake/baton_version.cmake writes
# "(src H)" (also for a tarball unpacked inside another repository, and an exported
# GIT_DIR of another repository is not described): H the same for the same sources
# wherever they are, another after an edit of one, not after a doc's. A value given to
# --version is refused.
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
re='^[0-9]+\.[0-9]+\.[0-9]+ \((git ([0-9A-Za-z._+-]+)(, src [0-9a-f]{12})?|src [0-9a-f]{12})\)$'
[[ ${b#baton } =~ $re ]] && id=${BASH_REMATCH[2]} || fail "baton --version: '$b'"
[[ ${w#baton-worker } =~ $re && $w == "baton-worker ${b#baton }" ]] ||
  fail "baton-worker --version '$w' is not baton's '$b'"
if [[ -e $src/.git ]] && want=$(git -C "$src" describe --always 2>/dev/null); then
  [[ ${id%-dirty} == "$want" ]] || fail "--version names '$id', the source is at '$want' (a stale build?)"
fi
# outside a git checkout: the sources' hash, the same for the same sources elsewhere,
# another after a source's edit, not after a doc's
ver() { # ver SOURCE_DIR: the BATON_VERSION it gets
  "$cmake" -DSOURCE_DIR="$1" -DOUT="$work/v.h" -DVERSION=0.1.0 -P "$src/cmake/baton_version.cmake" ||
    fail "cmake/baton_version.cmake failed"
  sed -n 's/^#define BATON_VERSION "\(.*\)"$/\1/p' "$work/v.h"
  rm -f "$work/v.h"
}
mkdir -p "$work/tarball/worker" "$work/tarball/docs" &&
  cp "$src/CMakeLists.txt" "$work/tarball/" && echo 'int x;' >"$work/tarball/worker/a.c" &&
  echo doc >"$work/tarball/docs/d.md" && cp -a "$work/tarball" "$work/copy" || fail "tarball"
v1=$(ver "$work/tarball")
[[ $v1 =~ ^0\.1\.0\ \(src\ [0-9a-f]{12}\)$ ]] || fail "outside a git checkout: '$v1'"
[[ $(ver "$work/copy") == "$v1" ]] || fail "the same sources elsewhere: $(ver "$work/copy"), not $v1"
echo doc2 >"$work/copy/docs/d.md"
[[ $(ver "$work/copy") == "$v1" ]] || fail "a doc's edit changed the build: $(ver "$work/copy")"
echo 'int y;' >>"$work/copy/worker/a.c"
v2=$(ver "$work/copy")
[[ $v2 =~ ^0\.1\.0\ \(src\ [0-9a-f]{12}\)$ && $v2 != "$v1" ]] || fail "a source's edit: '$v2' (was '$v1')"
# a tarball unpacked inside another repository: the sources' hash, not that one's commit
git init -q "$work/outer" && git -C "$work/outer" -c user.name=t -c user.email=t@t.invalid \
  commit -q --allow-empty -m x && mkdir "$work/outer/tarball" || fail "git init outer"
"$cmake" -DSOURCE_DIR="$work/outer/tarball" -DOUT="$work/v2.h" -DVERSION=0.1.0 \
  -P "$src/cmake/baton_version.cmake" >/dev/null || fail "cmake/baton_version.cmake failed"
grep -qx '#define BATON_VERSION "0.1.0 (src [0-9a-f]\{12\})"' "$work/v2.h" ||
  fail "a tarball inside another repository: $(cat "$work/v2.h")"
# an exported GIT_DIR (a build from a git hook) does not describe that repository
if [[ -e $src/.git ]] && want=$(git -C "$src" describe --always 2>/dev/null); then
  GIT_DIR="$work/outer/.git" "$cmake" -DSOURCE_DIR="$src" -DOUT="$work/v3.h" -DVERSION=0.1.0 \
    -P "$src/cmake/baton_version.cmake" >/dev/null || fail "cmake/baton_version.cmake failed"
  grep -q "^#define BATON_VERSION \"0.1.0 (git $want\(-dirty, src [0-9a-f]\{12\}\)\?)\"$" "$work/v3.h" ||
    fail "with GIT_DIR of another repository exported: $(cat "$work/v3.h"), want $want"
fi
"$worker" --version=1 >"$work/out" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "takes no value" "$work/out" || fail "baton-worker --version=1 exited $rc: $(cat "$work/out")"
((failures == 0)) && echo "cli.version: ok ($b; $w)"
exit $((failures > 0))
