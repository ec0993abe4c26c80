#!/usr/bin/env bash
# The `baton ckpt` tools' outputs and reports, on checkpoints imported from small Hugging
# Face models that make_hf.py writes:
#  - reshard and import write --out and nothing else: the folder above keeps its `latest`
#    (a file, a directory, a run's pointer) and its other .partial directories;
#  - a write failure (a file size limit, SIGXFSZ ignored or not) leaves no .partial and
#    none of the directories created for --out; an empty or existing --out is exit 2;
#    missing parents are created;
#  - export writes config.json and model.safetensors with the same mode (0644, umask 022),
#    and refuses a directory in the way of either before replacing the other; it removes
#    the partial directories beside --out that an export no longer running left on this
#    host (DIR.partial-HOST-PID-XXXXXX, its .lock not locked), and nothing else: a live
#    export's is kept whatever its pid says (one blocked on a FIFO; the sweeper in another
#    PID namespace where unshare -p can run);
#  - export of a checkpoint removed while it is read (a run's retention): given the run,
#    its newest checkpoint left is exported, with a note; given the checkpoint, exit 1
#    saying so, nothing left;
#  - import with tie_word_embeddings true takes the head from the embedding, as
#    transformers does, with a note when the file's own lm_head.weight differs;
#  - verify reports bytes appended to a shard file as damage (file and byte range);
#  - permission problems are reported as such (not as "no such checkpoint" or damage);
#    under root, which may read anything, checked as nobody (setpriv); SKIPPED (77) where
#    baton cannot run as nobody.
#   check-tools.sh BATON SOURCE_DIR
set -u
baton=$1 src=$2
py=/usr/bin/python3
[[ -x $py ]] || { echo "SKIPPED: $py is not installed"; exit 77; }
work=$(mktemp -d /tmp/baton-test-ckpt-tools.XXXXXX)
trap 'chmod -R u+rwX "$work" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
# fail, ok and expect (baton ckpt ARGS exits STATUS with PATTERN) come from server-lib.sh
source "$src/tests/ckpt/store/server-lib.sh"
make_hf() { "$py" "$src/tests/ckpt/make_hf.py" "$@"; }
umask 022

make_hf hf 64 2 272 && "$baton" ckpt import hf --out ck/small >/dev/null || exit 1
make_hf hf-big 128 1 8192 && "$baton" ckpt import hf-big --out ck/big >/dev/null || exit 1

# ---- only --out is written ----
mkdir rs3 && echo notes >rs3/latest && mkdir rs3/s00-step00000009.partial
expect 0 "rs3/b: written" -- reshard ck/small --to tp2 --out rs3/b
expect 0 "imported" -- import hf --out rs3/imp
[[ $(cat rs3/latest) == notes ]] && ok "reshard/import: the folder's latest file kept" ||
  fail "rs3/latest is now '$(cat rs3/latest)'"
[[ -d rs3/s00-step00000009.partial ]] && ok "reshard/import: another .partial kept" ||
  fail "rs3/s00-step00000009.partial was removed"
mkdir -p rs4/latest
expect 0 "rs4/b: written" -- reshard ck/small --to tp2 --out rs4/b
expect 0 "imported" -- import hf --out rs4/imp
[[ -d rs4/latest && -z $(ls -A rs4/latest) ]] && ok "a directory named latest left alone" ||
  fail "rs4/latest changed"
mkdir -p run/checkpoints && cp -r ck/small run/checkpoints/s00-step00000001 &&
  echo s00-step00000001 >run/checkpoints/latest
expect 0 "written" -- reshard ck/small --to tp2 --out run/checkpoints/foo
expect 0 "imported" -- import hf --out run/checkpoints/bar
[[ $(cat run/checkpoints/latest) == s00-step00000001 ]] && ok "a run's latest pointer kept" ||
  fail "run/checkpoints/latest is now '$(cat run/checkpoints/latest)'"

# ---- failures, and the output paths ----
(trap '' XFSZ; ulimit -f 100; "$baton" ckpt reshard ck/big --to tp1 --out n1/n2/r2 >out 2>&1)
rc=$?
[[ $rc -eq 1 && ! -e n1 ]] && grep -q "File too large" out &&
  ok "reshard past a file size limit -> 1, no .partial, no directories left" ||
  fail "reshard past a file size limit: exit $rc, left $(find n1 2>/dev/null): $(cat out)"
(ulimit -f 100; "$baton" ckpt reshard ck/big --to tp1 --out n1/n2/r2 >out 2>&1)
rc=$?
[[ $rc -eq 153 && ! -e n1 ]] && ok "reshard stopped by SIGXFSZ -> 153, nothing left" ||
  fail "reshard stopped by SIGXFSZ: exit $rc, left $(find n1 2>/dev/null): $(cat out)"
for cmd in "import hf-big --out i1/i2/x" "export ck/big --out e1/e2/x"; do
  (ulimit -f 100; "$baton" ckpt $cmd >out 2>&1)
  rc=$?
  [[ $rc -eq 153 && ! -e ${cmd##* --out }  && ! -e ${cmd##* --out }.partial &&
     -z $(ls -d [ie]1 2>/dev/null) ]] && ok "$cmd stopped by SIGXFSZ -> 153, nothing left" ||
    fail "$cmd under ulimit -f: exit $rc, left $(ls -d [ie]1 2>/dev/null): $(cat out)"
done
expect 2 "--out ''" -- reshard ck/small --to tp1 --out ""
expect 2 "--out ''" -- import hf --out ""
expect 2 "--out ''" -- export ck/small --out ""
expect 2 "already exists" -- reshard ck/small --to tp1 --out rs3/b
expect 2 "already exists" -- import hf --out rs3/b
expect 0 "written" -- reshard ck/small --to tp1 --out p1/p2/r
expect 0 "imported" -- import hf --out p3/p4/i
expect 0 "exported" -- export ck/small --out p5/p6/e
[[ -d p1/p2/r && -d p3/p4/i && -f p5/p6/e/config.json ]] && ok "missing parents created" ||
  fail "missing parents: $(find p1 p3 p5)"

# ---- export's modes ----
modes=$(stat -c '%a' p5/p6/e p5/p6/e/config.json p5/p6/e/model.safetensors | tr '\n' ' ')
[[ $modes == "755 644 644 " ]] && ok "export: directory 755, both files 644 (umask 022)" ||
  fail "export modes (dir, config.json, model.safetensors): $modes"
# a directory in the way of one of the two files in an existing --out: refused (exit 2)
# before either file is replaced, the rest of the directory untouched
mkdir -p ex-in/config.json && cp p5/p6/e/model.safetensors ex-in/ && echo keep >ex-in/notes
sum=$(md5sum <ex-in/model.safetensors)
expect 2 "ex-in/config.json: a directory is in the way of the export" -- export ck/big --out ex-in
[[ $(md5sum <ex-in/model.safetensors) == "$sum" && -d ex-in/config.json && $(cat ex-in/notes) == keep &&
   -z $(ls -d ex-in.partial-* 2>/dev/null) ]] &&
  ok "export: a directory in the way refused, model.safetensors kept" ||
  fail "export with ex-in/config.json a directory: $(ls -la ex-in ex-in.partial-* 2>&1)"
# an export's partial directory is named for its host and pid (DIR.partial-HOST-PID-XXXXXX)
# and holds .lock, which the export keeps an OFD lock on while it runs: the next export to
# DIR removes those of this host whose lock is free, and nothing else
host=$(hostname | tr -c 'A-Za-z0-9.\n-' '_')
dead=$(sh -c 'echo $$')
while kill -0 "$dead" 2>/dev/null; do dead=$(sh -c 'echo $$'); done
gone="ex-sw.partial-$host-$dead-aB3xYz"
mkdir "$gone" && echo half >"$gone/model.safetensors.tmp" && : >"$gone/.lock"
kept=("ex-sw.partial-other$host-$dead-aB3xYz" "ex-sw.partial-Qw12Er" "ex-sw.partial-$host-$dead-aB3xY"
      "ex-sw.partial-$host-$dead-aB3xYz0" "ex-swx.partial-$host-$dead-aB3xYz")
for k in "${kept[@]}"; do mkdir "$k" && : >"$k/.lock"; done
# without a lock file (an older baton's, or not yet locked): kept, whatever its pid
kept+=("ex-sw.partial-$host-$$-nOlOck" "ex-sw.partial-$host-$dead-nOlOck")
mkdir "${kept[@]: -2}"
mkdir target && ln -s target "ex-sw.partial-$host-$dead-lInK12" && : >"ex-sw.partial-$host-$dead-fIlE12"
mkdir "ex-sw.partial-$host-$dead-lInKlk" && : >target/lock && ln -s ../target/lock "ex-sw.partial-$host-$dead-lInKlk/.lock"
kept+=("ex-sw.partial-$host-$dead-lInKlk")
expect 0 "removed $gone, left by an export that no longer runs \\(pid $dead\\)" -- export ck/small --out ex-sw
left=$(ls -d "${kept[@]}" target "ex-sw.partial-$host-$dead-lInK12" "ex-sw.partial-$host-$dead-fIlE12" 2>/dev/null | wc -l)
[[ ! -e $gone && $left -eq 11 && -f ex-sw/config.json ]] &&
  ok "export: a partial whose lock is free removed, the others kept" ||
  fail "export's sweep: $gone $([[ -e $gone ]] && echo kept || echo removed), $left of 11 others kept: $(ls -d ex-sw*)"
# a live export (blocked opening its checkpoint's shard, a FIFO) holds its partial's lock:
# its partial is kept by a sweep that cannot see its pid (here: renamed to a pid that is
# gone, as an export in another PID namespace sharing the hostname looks), and removed
# once it is killed
cp -r ck/small ck/fifo && rm ck/fifo/rank-00000.bin && mkfifo ck/fifo/rank-00000.bin
"$baton" ckpt export ck/fifo --out ex-live >live.out 2>&1 &
live=$!
for _ in $(seq 100); do ls ex-live.partial-$host-$live-*/.lock >/dev/null 2>&1 && break; sleep 0.1; done
part=$(ls -d ex-live.partial-$host-$live-* 2>/dev/null)
[[ -n $part ]] || fail "the blocked export made no partial directory: $(cat live.out)"
if [[ -n $part ]] && unshare -p -f --mount-proc true 2>/dev/null; then
  # the sweeper in a PID namespace of its own, where the live export's pid does not exist;
  # also a partial without a lock file whose process is alive here (sleep)
  sleep 1000 & sleeper=$!
  mkdir "ex-live.partial-$host-$sleeper-sLeEp1" && echo data >"ex-live.partial-$host-$sleeper-sLeEp1/x"
  out=$(unshare -p -f --mount-proc "$baton" ckpt export ck/small --out ex-live 2>&1)
  [[ -d $part && -d ex-live.partial-$host-$sleeper-sLeEp1 ]] && ! grep -q removed <<<"$out" &&
    ok "export in another PID namespace: a live export's partial kept" ||
    fail "export in another PID namespace removed a live export's partial: $out"
  kill "$sleeper"; wait "$sleeper" 2>/dev/null
  rm -rf "ex-live.partial-$host-$sleeper-sLeEp1"
else
  echo "note: unshare -p cannot run here: the sweep across PID namespaces is checked by renaming only"
fi
if [[ -n $part ]]; then
  moved="ex-live.partial-$host-$dead-${part: -6}"
  mv "$part" "$moved"
  out=$("$baton" ckpt export ck/small --out ex-live 2>&1)
  [[ -d $moved ]] && ! grep -q removed <<<"$out" &&
    ok "export: a live export's partial named for a pid that is gone kept (its lock held)" ||
    fail "export removed a live export's partial (renamed for pid $dead): $out"
  kill -KILL "$live"; wait "$live" 2>/dev/null
  expect 0 "removed $moved, left by an export that no longer runs" -- export ck/small --out ex-live
  [[ ! -e $moved ]] || fail "the killed export's partial $moved was kept"
else
  kill -KILL "$live"; wait "$live" 2>/dev/null
fi

# ---- tied embeddings ----
make_hf tied 64 2 272 --tied --head other
expect 0 "note: .*tie_word_embeddings is true, so the head is model.embed_tokens.weight.*differs" \
  -- import tied --out ck/tied
expect 0 "exported" -- export ck/tied --out ex-tied
# head_vs_embedding FILE: make_hf.py --compare's exit, 0 same bytes, 3 different, else an error
head_vs_embedding() {
  "$py" "$src/tests/ckpt/make_hf.py" --compare "$1" lm_head.weight model.embed_tokens.weight
}
head_vs_embedding ex-tied/model.safetensors
rc=$?
[[ $rc -eq 0 ]] && ok "tied: the head is the embedding" ||
  fail "tied: the imported head is the file's lm_head.weight, not the embedding (compare exit $rc)"
make_hf tied2 64 2 272 --tied --head same
out=$("$baton" ckpt import tied2 --out ck/tied2 2>&1) && ! grep -q note <<<"$out" &&
  ok "tied, lm_head.weight equal to the embedding: no note" || fail "tied2: $out"
make_hf untied 64 2 272 --head other
expect 0 "imported" -- import untied --out ck/untied
expect 0 "exported" -- export ck/untied --out ex-untied
head_vs_embedding ex-untied/model.safetensors
rc=$?
[[ $rc -eq 3 ]] && ok "untied: the head is the file's own" ||
  fail "untied: compare exit $rc (0: the head became the embedding; else the export is missing or bad)"

# ---- verify: trailing bytes ----
cp -r ck/small tr && chmod -R u+w tr
size=$(stat -c %s tr/rank-00000.bin)
printf 'extra' >>tr/rank-00000.bin
expect 1 "DAMAGED: tr/rank-00000.bin: bytes \[$size, $((size + 5))\) lie after the last range" -- verify tr
expect 1 "^1 problem found$" -- verify tr

# ---- export of a checkpoint removed while it is read (a run's retention) ----
# BATON_FAULT_CKPT_REMOVE removes it once opened, as `baton eval`'s test does: given the
# run, export says so and exports the newest checkpoint left; given the checkpoint itself,
# exit 1 saying it was removed (not damaged), and no --out nor partial directory left
mkdir -p rm-run/checkpoints && cp -r ck/small rm-run/checkpoints/s00-step00000001 &&
  cp -r ck/small rm-run/checkpoints/s00-step00000002 && echo s00-step00000002 >rm-run/checkpoints/latest
out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000002 "$baton" ckpt export rm-run --out ex-rm1 2>&1)
rc=$?
[[ $rc -eq 0 && -f ex-rm1/model.safetensors ]] &&
  grep -q "baton ckpt export: note: rm-run/checkpoints/s00-step00000002 was removed while it was being read (the run's retention, as it saved a newer one); reading rm-run/checkpoints/s00-step00000001, the newest of rm-run, instead" <<<"$out" &&
  grep -q "exported 21 tensors (fp32) of rm-run/checkpoints/s00-step00000001 " <<<"$out" &&
  ok "export of a run whose newest checkpoint went while read: the next newest exported" ||
  fail "export of a run whose newest checkpoint went while read: exit $rc: $out"
out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000001 "$baton" ckpt export rm-run/checkpoints/s00-step00000001 \
  --out ex-rm2 2>&1)
rc=$?
[[ $rc -eq 1 && -z $(ls -d ex-rm2* 2>/dev/null) ]] &&
  grep -q "^baton ckpt export: rm-run/checkpoints/s00-step00000001: the checkpoint was removed while it was being read" <<<"$out" &&
  ok "export of a checkpoint removed while read -> 1, said so, nothing left" ||
  fail "export of a checkpoint removed while read: exit $rc, left $(ls -d ex-rm2* 2>/dev/null): $out"

# ---- export: --max-position as a count in recipes' units, joined by '=' ----
expect 0 "exported" -- export ck/small --out ex4k --max-position=4K
grep -q '"max_position_embeddings": 4096,' ex4k/config.json && ok "export --max-position=4K: 4096" ||
  fail "export --max-position=4K: $(grep max_position ex4k/config.json)"

# ---- permissions ----
# root may read anything: as root, the checks run as nobody (setpriv), who then owns perm/
runner=$baton skipped= owner=
if [[ $(id -u) -eq 0 ]]; then
  drop=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  if command -v setpriv >/dev/null && chmod 711 "$work" && "${drop[@]}" test -x "$baton" 2>/dev/null; then
    printf '#!/bin/sh\nexec %s "%s" "$@"\n' "${drop[*]}" "$baton" >as-nobody && chmod 755 as-nobody
    runner=$work/as-nobody owner=nobody:nogroup
    echo "note: the permission checks run as nobody (running as root, which may read anything)"
  else
    skipped="the permission checks (running as root, and baton cannot run as nobody here)"
  fi
fi
if [[ -z $skipped ]]; then
  mkdir -p perm/p && cp -r ck/small perm/p/c && { [[ -z $owner ]] || chown -R "$owner" perm; } &&
    chmod 000 perm/p
  baton=$runner expect 1 "perm/p/c: cannot access: Permission denied" -- inspect perm/p/c
  chmod 755 perm/p && chmod 000 perm/p/c/rank-00000.bin
  out=$("$runner" ckpt verify perm/p/c 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] && grep -q "perm/p/c/rank-00000.bin: cannot read (Permission denied)" <<<"$out" &&
    ! grep -q DAMAGED <<<"$out" && ok "verify of an unreadable shard -> 2, not damage" ||
    fail "verify of an unreadable shard -> $rc: $out"
fi

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
[[ -z $skipped ]] || { echo "SKIPPED: $skipped"; exit 77; }
echo "all ckpt tool checks passed"
