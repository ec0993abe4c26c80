#!/usr/bin/env bash
# A checkpoint removed while a `baton ckpt` tool reads it, as a running run's retention
# removes its older checkpoints as it saves new ones (BATON_FAULT_CKPT_REMOVE=NAME[,NAME]
# removes it once the tool opened it, as retention does: renamed aside, then deleted).
# For verify, pack and reshard (export's first two cases are ckpt.tools', inspect's
# ckpt.inspect's, push's ckpt.store.http's, eval's run.eval's):
#  - given the run directory, a note says so and the run's newest checkpoint left is read
#    instead (pack's default archive named for it), exit 0;
#  - given the checkpoint itself, it says it was removed while being read: verify exit 2,
#    never DAMAGED; pack and reshard exit 1, nothing left (no output, no .partial, no
#    directory made for it);
#  - every one of the 3 tries removed (export too): a final message saying so and how to
#    avoid it, not a missing file; nothing left, the checkpoint not tried untouched.
#   check-gone.sh BATON SOURCE_DIR
set -u
baton=$1 src=$2
py=/usr/bin/python3
[[ -x $py ]] || { echo "SKIPPED: $py is not installed"; exit 77; }
work=$(mktemp -d /tmp/baton-test-ckpt-gone.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
# fail, ok and expect (baton ckpt ARGS exits STATUS with PATTERN) come from server-lib.sh
source "$src/tests/ckpt/store/server-lib.sh"
"$py" "$src/tests/ckpt/make_hf.py" hf 64 2 272 && "$baton" ckpt import hf --out ck >/dev/null ||
  exit 1

# mkrun DIR N: run directory DIR holding checkpoints s00-step00000001 .. N (latest: N)
mkrun() {
  rm -rf "$1" && mkdir -p "$1/checkpoints" || exit 1
  for i in $(seq "$2"); do cp -r ck "$1/checkpoints/s00-step0000000$i" || exit 1; done
  echo "s00-step0000000$2" >"$1/checkpoints/latest"
}
# gone_run NAME -- ARGS: baton ckpt ARGS of run r, its newest (s00-step00000002) removed
# once opened: exit 0 and the note; the output in $out
gone_run() {
  local what=$1 rc
  shift 2
  mkrun r 2
  out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000002 "$baton" ckpt "$@" 2>&1)
  rc=$?
  if [[ $rc -eq 0 && ! -e r/checkpoints/s00-step00000002 ]] &&
    grep -q "^baton ckpt $what: note: r/checkpoints/s00-step00000002 was removed while it was being read (the run's retention, as it saved a newer one); reading r/checkpoints/s00-step00000001, the newest of r, instead$" <<<"$out" &&
    ! grep -q DAMAGED <<<"$out"; then
    ok "$what of a run whose newest checkpoint went while read: the next newest read"
    return 0
  fi
  fail "$what of a run whose newest checkpoint went while read: exit $rc: $out"
  return 1
}
# gone_itself STATUS NAME -- ARGS: baton ckpt ARGS of r/checkpoints/s00-step00000001,
# removed once opened: exit STATUS saying so, nothing new left in the directory
gone_itself() {
  local status=$1 what=$2 rc before
  shift 3
  mkrun r 1
  before=$(ls -A)
  out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000001 "$baton" ckpt "$@" 2>&1)
  rc=$?
  [[ $rc -eq $status && $(ls -A) == "$before" ]] &&
    grep -q "^baton ckpt $what: r/checkpoints/s00-step00000001: the checkpoint was removed while it was being read (a run's retention removes its older checkpoints as it saves new ones); nothing is wrong with the others: name the run directory to read its newest$" <<<"$out" &&
    ! grep -q DAMAGED <<<"$out" &&
    ok "$what of a checkpoint removed while read -> $status, said so, nothing left" ||
    fail "$what of a checkpoint removed while read: exit $rc (want $status), left $(comm -13 <(echo "$before") <(ls -A)): $out"
}
# gone_all STATUS NAME -- ARGS: baton ckpt ARGS of run r holding 4 checkpoints, each of the
# 3 it reads removed once opened: exit STATUS with the final message, nothing new left,
# s00-step00000001 untouched
gone_all() {
  local status=$1 what=$2 rc before
  shift 3
  mkrun r 4
  before=$(ls -A)
  out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000004,s00-step00000003,s00-step00000002 \
    "$baton" ckpt "$@" 2>&1)
  rc=$?
  [[ $rc -eq $status && $(ls -A) == "$before" && -z $(diff -r ck r/checkpoints/s00-step00000001) ]] &&
    [[ $(grep -c "^baton ckpt $what: note: r/checkpoints/s00-step0000000[43] was removed while it was being read" <<<"$out") -eq 2 ]] &&
    grep -q "^baton ckpt $what: r/checkpoints/s00-step00000002 was removed while it was being read, as was each checkpoint of r read before it (3 tried; a run's retention removes its older checkpoints as it saves new ones, here faster than one is read): none is damaged; try again, or name a stage's final checkpoint, which retention keeps$" <<<"$out" &&
    ! grep -Eq "DAMAGED|No such file" <<<"$out" &&
    ok "$what of a run whose every checkpoint tried went while read -> $status, said so, nothing left" ||
    fail "$what of a run whose every checkpoint tried went: exit $rc (want $status), left $(comm -13 <(echo "$before") <(ls -A)): $out"
}

# ---- verify ----
gone_run verify -- verify r &&
  grep -q "^r/checkpoints/s00-step00000001: .* checked: intact$" <<<"$out" ||
  fail "verify of the run: $out"
gone_itself 2 verify -- verify r/checkpoints/s00-step00000001
gone_all 2 verify -- verify r
# no checkpoint left in the run after the one read went: said so, not damaged
mkrun r 1
out=$(BATON_FAULT_CKPT_REMOVE=s00-step00000001 "$baton" ckpt verify r 2>&1)
rc=$?
[[ $rc -eq 2 ]] && ! grep -q DAMAGED <<<"$out" &&
  grep -q "^baton ckpt verify: r/checkpoints/s00-step00000001 was removed while it was being read (a run's retention removes its older checkpoints as it saves new ones), and r holds no complete checkpoint now: none is damaged$" <<<"$out" &&
  ok "verify of a run whose only checkpoint went while read -> 2, said so" ||
  fail "verify of a run whose only checkpoint went: exit $rc: $out"
# still damage where there is damage (the checkpoint stays)
mkrun r 1
printf 'x' | dd of=r/checkpoints/s00-step00000001/rank-00000.bin bs=1 seek=100 conv=notrunc 2>/dev/null
expect 1 "^r/checkpoints/s00-step00000001: .* checked: DAMAGED$" -- verify r

# ---- pack ----
gone_run pack -- pack r &&
  [[ -f s00-step00000001.tar.zst && -z $(ls -d s00-step00000002* 2>/dev/null) ]] &&
  grep -q "^packed r/checkpoints/s00-step00000001 into s00-step00000001.tar.zst$" <<<"$out" &&
  ok "pack of the run: the archive named for the checkpoint read" ||
  fail "pack of the run: $(ls): $out"
rm -f s00-step00000001.tar.zst
gone_itself 1 pack -- pack r/checkpoints/s00-step00000001 --out sub/p.tar.zst
gone_all 1 pack -- pack r --out sub/p.tar.zst

# ---- reshard ----
gone_run reshard -- reshard r --to tp2 --out rs1 &&
  grep -q "^rs1: written for tp2,.* from r/checkpoints/s00-step00000001$" <<<"$out" &&
  [[ -f rs1/manifest.pb ]] && ok "reshard of the run: written" || fail "reshard of the run: $out"
rm -rf rs1
gone_itself 1 reshard -- reshard r/checkpoints/s00-step00000001 --to tp2 --out sub/rs
gone_all 1 reshard -- reshard r --to tp2 --out sub/rs

# ---- export (its run and checkpoint cases: ckpt.tools) ----
gone_all 1 export -- export r --out sub/ex

rm -rf r
[[ $failures -eq 0 ]] || exit 1
