#!/usr/bin/env bash
# Which baton-worker baton run starts, and a worker of another build refused by its Hello
# (orchestrator/run/run_checks.c: run_check_build). "Another build" is this build's worker
# with its version changed in the binary ("(git " -> "(gix "), as cli.options makes it.
#  - a launcher script found in PATH through a link named baton-worker, which picks the
#    program by the name it was started as ($0): started through that PATH entry, not
#    its target (said with both), and the run completes;
#  - the advice names where the worker came from: beside baton ("rebuild both programs"),
#    --worker ("give --worker ..."); found in PATH or kept: cli.options; the build is
#    checked before the topology (no topology report for a refused worker);
#  - a worker of another build on rank 1 of 2 only (a --worker wrapper): the attempt
#    refused, exit 2, no checkpoint; its failure record names rank 1 with its pid and
#    node, no exit status (baton killed it);
#  - a run refused so, resumed with --worker of this build: the kept worker replaced, the
#    run completes;
#  - BATON_WORKER_ANY_BUILD=1: a warning, and the run goes on;
#  - a build of the same commit with other sources (another hash H) said as such (this
#    build's version with H changed; only where this build names a commit);
#  - a build of the same sources without git ("V (src H)", a container's) is this build:
#    the run completes.
#   check-worker-build.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3
. "$src/tests/cli/cli-lib.sh"
# PMIx's own leaks at exit (a sanitizer build), as the other tests suppress them
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
cli_workdir worker-build
small=$src/tests/engine/precision.yaml
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || exit 1
steps=(--set defaults.steps=1)
rx() { sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$1"; } # $1 as an extended regex
ver=$("$baton" --version) ver=${ver#baton }
# patch SRC DST FROM TO: SRC with the build FROM replaced by TO (no longer), executable
patch() {
  /usr/bin/python3 -c '
import sys
v, o = sys.argv[3].encode(), sys.argv[4].encode()
b = open(sys.argv[1], "rb").read()
assert v in b and o != v and len(o) <= len(v)
open(sys.argv[2], "wb").write(b.replace(v, o + b"\0" * (len(v) - len(o))))' "$@" && chmod +x "$2"
}
other=${ver/"(git "/"(gix "} other=${other/"(src "/"(srx "} # built with git or without
mkdir other beside lnk real
patch "$worker" other/baton-worker "$ver" "$other" || fail "cannot make a worker of another build"
cp "$baton" beside/ && cp other/baton-worker beside/ && cp "$worker" real/baton-worker

# ---- a launcher script in PATH that picks the program by its name ($0) ----
cat >lnk/launcher.sh <<EOF
#!/bin/sh
exec "$work/real/\$(basename "\$0")" "\$@"
EOF
chmod +x lnk/launcher.sh && ln -s launcher.sh lnk/baton-worker && mkdir alone && cp "$baton" alone/
PATH=$work/lnk:/usr/bin:/bin expect 0 "^baton run: worker $(rx "$work/lnk/baton-worker") \\($(rx "$work/lnk/launcher.sh")\\), found in PATH \\(none beside baton\\)$" -- \
  alone/baton run "$small" --run-dir r-lnk "${steps[@]}"
grep -qaF "$work/lnk/baton-worker" r-lnk/journal && ok "the PATH entry journaled, not its target" ||
  fail "r-lnk's journal does not name $work/lnk/baton-worker"

# ---- the advice, by where the worker came from ----
head="the worker is of another build: "
# (checked before the topology: no topology report for it)
out=$(beside/baton run "$small" --run-dir r-beside "${steps[@]}" 2>&1)
rc=$?
want="^baton run: stage \"fp32\" attempt 0 failed: $head$(rx "$work/beside/baton-worker") \\(rank 0 on [^,]+, pid [0-9]+\\) is baton-worker $(rx "$other"), but this baton \\($(rx "$work/beside/baton")\\) is $(rx "$ver"); rebuild both programs from one source, and install both; 'baton resume [^']*/r-beside' then continues the run \\(a configuration error: not retried\\)$"
[[ $rc == 2 ]] && grep -Eq "$want" <<<"$out" && ! grep -q "topology of attempt" <<<"$out" &&
  ok "beside baton: rebuild both; the build checked before the topology" ||
  fail "a worker of another build beside baton: exit $rc: $out"
# baton's own program replaced while it runs (an install of another build over both):
# the worker that starts is the new one, and the advice is to resume with the new baton
mkdir del && cp "$baton" del/baton && cat >del/baton-worker <<EOF
#!/bin/sh
rm -f "$work/del/baton" && cp "$baton" "$work/del/baton"
exec "$work/other/baton-worker" "\$@"
EOF
chmod +x del/baton-worker
out=$(del/baton run "$small" --run-dir r-del "${steps[@]}" 2>&1)
rc=$?
want="^baton run: stage \"fp32\" attempt 0 failed: $head.* but this baton \\($(rx "$work/del/baton") \\(deleted\\)\\) is $(rx "$ver"); this baton's program was replaced or removed since it started \\(another build installed over it, likely with its worker\\): 'baton resume [^']*/r-del' with the baton installed now continues the run \\(a configuration error: not retried\\)$"
[[ $rc == 2 ]] && grep -Eq "$want" <<<"$out" && ok "baton replaced while it ran: resume with the new one" ||
  fail "baton replaced while it ran: exit $rc: $out"
expect 2 "^baton run: stage \"fp32\" attempt 0 failed: $head$(rx "$work/other/baton-worker") \\(rank 0 on [^,]+, pid [0-9]+\\) is baton-worker $(rx "$other"), but this baton \\($(rx "$baton")\\) is $(rx "$ver"); give --worker the baton-worker built with this baton \\(or a wrapper that starts it\\) \\(a configuration error: not retried\\)$" -- \
  "$baton" run "$small" --run-dir r-given --worker other/baton-worker "${steps[@]}"

# ---- the kept worker (of another build) replaced by a --worker given next ----
expect 0 "^baton resume: worker $(rx "$worker") \\(--worker\\), replacing $(rx "$work/other/baton-worker"), which the run was started with and which cannot start it; kept in .*/r-given/worker from now on$" -- \
  "$baton" resume r-given --worker "$worker"
[[ $("$baton" status r-given --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])') == completed &&
  $(cat r-given/worker) == "$worker" ]] && ok "resumed with this build's worker, which is kept" ||
  fail "r-given after the resume: $("$baton" status r-given 2>&1 | head -3); worker $(cat r-given/worker)"

# ---- rank 1 of 2 of another build ----
cat >mix.sh <<EOF
#!/bin/sh
[ "\$PMIX_RANK" = 1 ] && exec "$work/other/baton-worker" "\$@"
exec "$worker" "\$@"
EOF
chmod +x mix.sh
out=$("$baton" run "$small" --run-dir r-mix --gpus-per-node 2 --worker ./mix.sh "${steps[@]}" 2>&1)
rc=$?
pid=$(sed -n 's/.*another build: .* (rank 1 on node0, pid \([0-9]*\)) is baton-worker .*/\1/p' <<<"$out")
[[ $rc == 2 && -n $pid ]] && ok "rank 1 of another build: refused, named" ||
  fail "rank 1 of another build: exit $rc: $out"
[[ -z $(ls -A r-mix/checkpoints 2>/dev/null) ]] && ok "nothing saved by the refused attempt" ||
  fail "the refused attempt saved: $(ls r-mix/checkpoints)"
"$baton" status r-mix --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
f = s["failure_list"]
assert (s["state"], s["failures"], s["restarts"]) == ("failed", 1, 0), s
assert len(f) == 1 and not f[0]["retryable"], f
assert (f[0]["rank"], f[0]["pid"], f[0]["node"], f[0]["exit_status"]) == (1, int(sys.argv[1]), "node0", None), f' \
  "${pid:-0}" && ok "the failure record: rank 1, its pid and node, no exit status" ||
  fail "status r-mix: $("$baton" status r-mix --json 2>&1 | grep -A12 failure_list)"

# ---- BATON_WORKER_ANY_BUILD=1: said, not refused ----
BATON_WORKER_ANY_BUILD=1 expect 0 "^baton run: stage \"fp32\": warning: $head$(rx "$work/other/baton-worker") .*; going on, as BATON_WORKER_ANY_BUILD=1 asks$" -- \
  "$baton" run "$small" --run-dir r-any --worker other/baton-worker "${steps[@]}"

# ---- the same commit, other sources; the same sources without git ----
if [[ $ver =~ ^(.*\(git\ ([^,]*)),\ src\ ([0-9a-f])([0-9a-f]{11})\)$ ]]; then
  commit=${BASH_REMATCH[2]} commit=${commit%-dirty} h=${BASH_REMATCH[3]}${BASH_REMATCH[4]}
  [[ ${BASH_REMATCH[3]} == 0 ]] && d=1 || d=0
  edited="${BASH_REMATCH[1]}, src $d${BASH_REMATCH[4]})" nogit="${ver%% (*} (src $h)"
  mkdir edited nogit && patch "$worker" edited/baton-worker "$ver" "$edited" &&
    patch "$worker" nogit/baton-worker "$ver" "$nogit" || fail "cannot patch $edited or $nogit in"
  expect 2 "is baton-worker $(rx "$edited"), but this baton \\($(rx "$baton")\\) is $(rx "$ver"); both are of git $(rx "$commit"), with other uncommitted edits; give --worker " -- \
    "$baton" run "$small" --run-dir r-edited --worker edited/baton-worker "${steps[@]}"
  out=$("$baton" run "$small" --run-dir r-nogit --worker nogit/baton-worker "${steps[@]}" 2>&1)
  rc=$?
  [[ $rc == 0 && $(nogit/baton-worker --version) == "baton-worker $nogit" ]] &&
    ok "a worker of the same sources built without git: the same build" ||
    fail "a worker $nogit, this baton $ver: exit $rc: $out"
else
  ok "SKIP the same commit with other sources: this build ($ver) names no commit"
fi
((failures == 0)) && echo "cli.worker-build: ok"
exit $((failures > 0))
