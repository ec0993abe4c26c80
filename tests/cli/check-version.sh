#!/usr/bin/env bash
# --version of both programs names the build: "baton 0.1.0 (git DESCRIBE, src H)" and
# "baton-worker 0.1.0 (git DESCRIBE, src H)", the same, DESCRIBE `git describe --always`
# at build time (less -dirty: the tree may have been touched since the build), -dirty when
# a source file is changed or untracked; outside a git checkout (a tarball, a container
# build without .git) cmake/baton_version.cmake writes "(src H)" (also for a tarball
# unpacked inside another repository, and an exported GIT_DIR of another repository is
# not described). H, what baton run compares builds by, covers the source files only: the
# same for the same sources wherever they are, with git or without, after a doc's edit, a
# non-source file's or a stale generated one's; another after a source's edit or an
# untracked source file; a link to a directory outside (not followed) and a FIFO under a
# source dir neither hang nor fail it. A value given to --version is refused.
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
re='^[0-9]+\.[0-9]+\.[0-9]+ \((git ([0-9A-Za-z._+-]+), )?src [0-9a-f]{12}\)$'
[[ ${b#baton } =~ $re ]] && id=${BASH_REMATCH[2]} || fail "baton --version: '$b'"
[[ ${w#baton-worker } =~ $re && $w == "baton-worker ${b#baton }" ]] ||
  fail "baton-worker --version '$w' is not baton's '$b'"
if [[ -e $src/.git ]] && want=$(git -C "$src" describe --always 2>/dev/null); then
  [[ ${id%-dirty} == "$want" ]] || fail "--version names '$id', the source is at '$want' (a stale build?)"
fi
# outside a git checkout: the sources' hash, the same for the same sources elsewhere,
# another after a source's edit, not after a doc's
ver() { # ver SOURCE_DIR: the BATON_VERSION it gets (at most 20 s)
  timeout 20 "$cmake" -DSOURCE_DIR="$1" -DOUT="$work/v.h" -DVERSION=0.1.0 \
    -P "$src/cmake/baton_version.cmake" >"$work/v.out" 2>&1 ||
    fail "cmake/baton_version.cmake failed in $1: $(cat "$work/v.out")"
  sed -n 's/^#define BATON_VERSION "\(.*\)"$/\1/p' "$work/v.h" 2>/dev/null
  rm -f "$work/v.h"
}
mkdir -p "$work/tarball/worker/sub" "$work/tarball/docs" &&
  cp "$src/CMakeLists.txt" "$work/tarball/" && echo 'int x;' >"$work/tarball/worker/a.c" &&
  echo 'int z;' >"$work/tarball/worker/sub/z.h" &&
  echo doc >"$work/tarball/docs/d.md" && cp -a "$work/tarball" "$work/copy" || fail "tarball"
v1=$(ver "$work/tarball")
[[ $v1 =~ ^0\.1\.0\ \(src\ [0-9a-f]{12}\)$ ]] || fail "outside a git checkout: '$v1'"
[[ $(ver "$work/copy") == "$v1" ]] || fail "the same sources elsewhere: $(ver "$work/copy"), not $v1"
echo doc2 >"$work/copy/docs/d.md"
[[ $(ver "$work/copy") == "$v1" ]] || fail "a doc's edit changed the build: $(ver "$work/copy")"
# not sources: a note, a stale generated file, a link to a directory outside holding a
# FIFO (not followed), a FIFO, even one named as a source (never opened: no hang)
mkdir -p "$work/outside" && mkfifo "$work/outside/fifo.c" && echo 'int o;' >"$work/outside/o.c" &&
  echo note >"$work/copy/worker/notes.md" && echo 'int g;' >"$work/copy/worker/m.pb-c.c" &&
  ln -s "$work/outside" "$work/copy/worker/outside" && mkfifo "$work/copy/worker/pipe" &&
  mkfifo "$work/copy/worker/pipe.c" && ln -s "$work/outside" "$work/copy/worker/dir.h" ||
  fail "non-sources"
[[ $(ver "$work/copy") == "$v1" ]] || fail "a non-source changed the build: $(ver "$work/copy")"
echo 'int y;' >>"$work/copy/worker/sub/z.h"
v2=$(ver "$work/copy")
[[ $v2 =~ ^0\.1\.0\ \(src\ [0-9a-f]{12}\)$ && $v2 != "$v1" ]] || fail "a source's edit: '$v2' (was '$v1')"
# in a git checkout: the same H as without git; a doc's edit is no edit of the build; a
# source's edit or an untracked source file makes it dirty, and another build
h1=${v1#*src } h1=${h1%)}
if command -v git >/dev/null; then
  g=$work/git
  gitc() { git -C "$g" -c user.name=t -c user.email=t@t.invalid "$@"; }
  cp -a "$work/tarball" "$g" && git init -q "$g" && gitc add -A && gitc commit -q -m x &&
    c=$(git -C "$g" describe --always) || fail "git init"
  [[ $(ver "$g") == "0.1.0 (git $c, src $h1)" ]] ||
    fail "a git checkout of the same sources: $(ver "$g"), want 0.1.0 (git $c, src $h1)"
  echo doc3 >"$g/docs/d.md" && echo 'int u;' >"$g/docs/u.c"
  [[ $(ver "$g") == "0.1.0 (git $c, src $h1)" ]] || fail "a doc's edit in git: $(ver "$g")"
  echo 'int w;' >"$g/worker/sub/w.c"
  v3=$(ver "$g")
  [[ $v3 =~ ^0\.1\.0\ \(git\ $c-dirty,\ src\ [0-9a-f]{12}\)$ && $v3 != *"$h1"* ]] ||
    fail "an untracked source in git: '$v3'"
  rm "$g/worker/sub/w.c" && echo 'int y;' >>"$g/worker/sub/z.h"
  [[ $(ver "$g") == "0.1.0 (git $c-dirty, ${v2#*(}" ]] || fail "a source's edit in git: $(ver "$g"), want the H of $v2"
fi
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
  grep -q "^#define BATON_VERSION \"0.1.0 (git $want\(-dirty\)\?, src [0-9a-f]\{12\})\"$" "$work/v3.h" ||
    fail "with GIT_DIR of another repository exported: $(cat "$work/v3.h"), want $want"
fi
"$worker" --version=1 >"$work/out" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "takes no value" "$work/out" || fail "baton-worker --version=1 exited $rc: $(cat "$work/out")"
((failures == 0)) && echo "cli.version: ok ($b; $w)"
exit $((failures > 0))
