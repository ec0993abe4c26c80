#!/usr/bin/env bash
# Checkpoints survive faults: nothing marked complete is ever incomplete, damage is
# pinpointed by `baton ckpt verify`, loading refuses it and falls back to the previous
# complete checkpoint, and the resumed run ends on the uninterrupted run's losses.
#   check-faults.sh BATON BATON_WORKER SOURCE_DIR CASE CKPT_EDIT
#   CASE: kill-during-write | flipped-byte | truncated | disk-full | async-save |
#         async-in-flight | bad-tool-input | all-damaged | index-after-commit
set -euo pipefail
baton=$1 worker=$2 src=$3 case=$4 ckpt_edit=$5
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-faults.XXXXXX)
cleanup() { # any rank left (their --spec lies in $work), then $work
  pkill -9 -f -- "--spec $work/" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
sed "s/RANKS/2/; s/LAYOUT/{tp: 2}/" "$src/tests/ckpt/reshard.yaml" >tp2.yaml
sed "s/RANKS/1/; s/LAYOUT/{tp: 1}/" "$src/tests/ckpt/reshard.yaml" >one.yaml
sed "s/RANKS/2/; s/LAYOUT/{dp: 2}/" "$src/tests/ckpt/reshard.yaml" >dp2.yaml
"$baton" spec tp2.yaml --out tp2.pb
"$baton" spec one.yaml --out one.pb
"$baton" spec dp2.yaml --out dp2.pb

fail() { echo "$case: $*"; exit 1; }
losses() { sed -En 's/^(\[0\] )?step +([0-9]+)\/[0-9]+  loss ([0-9.]+).*/\2 \3/p' "$@"; }
tp2() { timeout 300 "$baton" launch -n 2 -- "$worker" --spec "$work/tp2.pb" --eval-windows 0 \
  --comm-timeout 30 "$@"; }
one() { "$worker" --spec "$work/one.pb" --eval-windows 0 "$@"; }
steps=20 # reshard.yaml's
# tail_losses LOG FROM: "step loss" of LOG's steps FROM to the last, after checking that
# there is one line for each (so that two logs with no losses found never compare equal);
# run in $(...), it fails the case through the caller's `|| exit 1`
tail_losses() {
  local got
  got=$(losses "$1" | awk -v f="$2" '$1 >= f')
  [[ $(grep -c . <<<"$got") -eq $((steps - $2 + 1)) ]] ||
    fail "$1: expected the losses of steps $2 to $steps, found: ${got:-none}" >&2
  echo "$got"
}
# same_tail REF LOG FROM: LOG's steps are REF's from step FROM on, bitwise
same_tail() {
  local ref got
  ref=$(tail_losses "$1" "$3") && got=$(tail_losses "$2" "$3") || exit 1
  diff <(echo "$ref") <(echo "$got") || fail "losses after the resume differ from the uninterrupted run"
}

case $case in
kill-during-write)
  tp2 >ref.log
  # rank 1 dies halfway through writing its shard of step 10's checkpoint
  if BATON_FAULT_SAVE_EXIT=1:10 tp2 --run-dir run --save-every 5 >a.log 2>a.err; then
    fail "the job survived a rank killed during the checkpoint write"
  fi
  [[ -d run/checkpoints/s00-step00000010.partial ]] || fail "no partial checkpoint left"
  [[ ! -e run/checkpoints/s00-step00000010 ]] || fail "step 10 published though incomplete"
  [[ $(cat run/checkpoints/latest) == s00-step00000005 ]] || fail "latest is not step 5"
  "$baton" ckpt verify run >verify.log || fail "the previous checkpoint does not verify"
  grep -q "s00-step00000005: .* intact" verify.log || fail "verify did not pick step 5"
  tp2 --run-dir run --init run --save-every 5 >b.log
  grep -q "started from run at step 5" b.log || fail "did not resume at step 5"
  same_tail ref.log b.log 6
  [[ ! -e run/checkpoints/s00-step00000010.partial ]] || fail "the stale partial stayed"
  echo "$case: rank killed mid-write: step 10 never published, resumed from step 5, steps 6-20 bitwise"
  ;;
flipped-byte | truncated)
  one --run-dir run --save-every 10 >ref.log
  bin=run/checkpoints/s00-step00000020/rank-00000.bin
  if [[ $case == flipped-byte ]]; then
    # the byte's complement: a fixed value is a no-op where the byte already holds it
    # (0x5a did, on one machine's OpenBLAS)
    byte=$(od -A n -t u1 -j 700000 -N 1 "$bin")
    printf "\\x$(printf %02x $((byte ^ 0xff)))" | dd of="$bin" bs=1 seek=700000 conv=notrunc status=none
  else
    truncate -s 1000000 "$bin"
  fi
  if "$baton" ckpt verify run >verify.log; then fail "verify missed the damage"; fi
  grep -E "DAMAGED: .*rank-00000.bin: (bytes \[[0-9]+, [0-9]+\) damaged|truncated at byte 1000000)" \
    verify.log >/dev/null || { cat verify.log; fail "verify did not locate the damage"; }
  if one --init run/checkpoints/s00-step00000020 --steps 1 >x.log 2>x.err; then
    fail "the damaged checkpoint was loaded"
  fi
  grep -Eq "CRC32C mismatch|truncated" x.err || { cat x.err; fail "no clear refusal"; }
  one --init run >b.log 2>b.err
  grep -q "checkpoint refused" b.err || fail "no refusal printed"
  grep -q "falling back to run/checkpoints/s00-step00000010" b.err || fail "no fallback"
  same_tail ref.log b.log 11
  grep -q "^started from .* (1 shard file opened)$" b.log || fail "one shard file not said as one"
  echo "$case: verify located it ($(grep -c DAMAGED: verify.log) line(s)), loading fell back to step 10, steps 11-20 bitwise"
  ;;
disk-full)
  if ! unshare -Urm true 2>/dev/null; then
    echo "SKIPPED: no user namespaces here to mount a small tmpfs"
    exit 77
  fi
  one >ref.log
  mkdir -p small
  # a 2 MB tmpfs holds the step 5 checkpoint (1.5 MB) but not step 10's as well
  unshare -Urm bash -c "mount -t tmpfs -o size=2m tmpfs small && \
    { \"$worker\" --spec \"$work/one.pb\" --eval-windows 0 --run-dir small/run --save-every 5 --steps 12 \
        >a.log 2>a.err; echo \$? >a.rc; } ; \"$baton\" ckpt verify small/run >verify.log; \
    echo \$? >verify.rc; cp -r small/run saved"
  [[ $(cat a.rc) != 0 ]] || fail "a full disk went unnoticed"
  grep -q "No space left on device" a.err || { cat a.err; fail "no clear disk-full message"; }
  [[ $(cat verify.rc) == 0 ]] && grep -q "s00-step00000005: .* intact" verify.log ||
    { cat verify.log; fail "the previous checkpoint is not the intact latest"; }
  [[ ! -e saved/checkpoints/s00-step00000010 ]] || fail "a half-written checkpoint was published"
  one --init saved >b.log
  same_tail ref.log b.log 6
  echo "$case: ENOSPC reported, step 5 stayed latest and intact, resumed bitwise"
  ;;
async-save)
  # async saves change nothing in training, and their checkpoints resume bitwise
  tp2 >ref.log
  tp2 --run-dir run --save-every 5 --async-save >a.log
  ref=$(tail_losses ref.log 1) && got=$(tail_losses a.log 1) || exit 1
  [[ $ref == "$got" ]] || fail "async saves changed the losses"
  grep -q "snapshot taken, writing in the background" a.log || fail "the saves were not async"
  ls run/checkpoints | grep -c '^s00-step' | grep -x 3 >/dev/null || fail "retention did not keep 3"
  for c in run/checkpoints/s00-step*; do "$baton" ckpt verify "$c" >/dev/null || fail "$c"; done
  tp2 --init run/checkpoints/s00-step00000010 >b.log
  same_tail ref.log b.log 11
  echo "$case: losses unchanged, 3 checkpoints kept and intact, resumed from step 10 bitwise"
  ;;
async-in-flight)
  # Every async save copies into the one host buffer the first save allocated. Each write
  # takes 0.5 s more (BATON_FAULT_SAVE_SLEEP, before any byte is written), so the next save
  # comes while the one before is in flight: it must wait for it, never copy over the bytes
  # still to be written. Each of the 10 checkpoints holds what a sync save of its step wrote.
  cp one.yaml keep.yaml && echo "    checkpoint: {keep: 10}" >>keep.yaml
  "$baton" spec keep.yaml --out keep.pb
  "$worker" --spec "$work/keep.pb" --eval-windows 0 --run-dir sync --save-every 2 >s.log
  BATON_FAULT_SAVE_SLEEP=0.5 "$worker" --spec "$work/keep.pb" --eval-windows 0 --run-dir async \
    --save-every 2 --async-save >a.log
  ref=$(tail_losses s.log 1) && got=$(tail_losses a.log 1) || exit 1
  [[ $ref == "$got" ]] || fail "async saves changed the losses"
  [[ $(grep -c "snapshot taken, writing in the background" a.log) == 10 ]] || fail "not 10 async saves"
  # a save still in flight when the next save's step ended (its commit logged after that step)
  awk '/^step +4\// { s = 1 } s && /^checkpoint s00-step00000002: committed/ { f = 1 } END { exit !f }' \
    a.log || fail "no save was in flight at the next one (the test would check nothing)"
  n=0
  for c in sync/checkpoints/s00-step*; do
    for f in "$c"/rank-*; do
      cmp "$f" "async/checkpoints/${c##*/}/${f##*/}" || fail "${c##*/}: async differs from sync"
      n=$((n + 1))
    done
  done
  [[ $n == 10 ]] || fail "compared $n shard files, not 10"
  "$baton" ckpt verify async >/dev/null || fail "the async checkpoints do not verify"
  echo "$case: 10 async saves, each in flight at the next, their shards byte for byte the sync saves'"
  ;;
all-damaged)
  # Every checkpoint damaged in rank 1's shard only: the load fails on every rank, and
  # rank 0, whose own reads were fine, names the rank whose log says why.
  tp2 --run-dir run --save-every 5 >/dev/null
  for c in run/checkpoints/s00-step*; do
    printf '\x5a\x5a\x5a\x5a' | dd of="$c/rank-00001.bin" bs=1 seek=200 conv=notrunc status=none
  done
  if tp2 --run-dir run --init run >b.log 2>&1; then fail "a run started from damaged checkpoints"; fi
  grep -q "^\[1\] .*no usable checkpoint (the oldest refused: .*rank-00001.bin: .*CRC32C mismatch" b.log ||
    { cat b.log; fail "rank 1 did not say why"; }
  grep -q "^\[0\] .*no usable checkpoint (the oldest refused: on rank 1: its log says why)" b.log ||
    { cat b.log; fail "rank 0 did not name rank 1"; }
  echo "$case: every checkpoint refused on rank 1; rank 0 names it"
  ;;
vote-rank-lost)
  # Rank 1 dies (BATON_FAULT_LOAD_EXIT) right before each of the load's votes in turn: rank 0
  # says a rank was lost during the vote, with the comm's reason, and exits 1 (retried by
  # baton run), never that the checkpoint is refused, a newer baton's, or its data changed
  # (a user would move a good checkpoint aside). The newer and stop votes come after a
  # refusal: step 20's shard of rank 1 damaged.
  tp2 --run-dir run --save-every 5 >/dev/null
  lost() { # VOTE WHAT: rank 0's line for a rank lost before vote VOTE
    local rc=0
    BATON_FAULT_LOAD_EXIT=1:$1 tp2 --run-dir run --init run >"$1.log" 2>&1 || rc=$?
    [[ $rc != 0 ]] || fail "$1: the run went on without rank 1"
    grep -q "^\[0\] .*the ranks could not agree on $2: a rank was lost during the vote (comm 'world' .*: allreduce: .*1 (global 1)" "$1.log" ||
      { cat "$1.log"; fail "$1: rank 0 did not say rank 1 was lost during the vote"; }
    ! grep -Eq "newer baton|data changed|no usable checkpoint" "$1.log" ||
      { cat "$1.log"; fail "$1: a lost rank taken for a refusal"; }
  }
  lost skip "the checkpoints to pass over"
  lost data "loading it"
  lost load "loading it"
  grep -q "this rank found nothing wrong with the checkpoint" load.log || fail "load: not said fine"
  printf '\x5a\x5a\x5a\x5a' | dd of=run/checkpoints/s00-step00000020/rank-00001.bin bs=1 seek=200 \
    conv=notrunc status=none
  lost newer "falling back to an older checkpoint"
  lost stop "falling back to it"
  echo "$case: a rank lost before each vote said as such, never as a refusal"
  ;;
index-after-commit)
  # Rank 1's shard index renamed into the .partial directory lets rank 0 commit, which
  # renames that directory; rank 1 (BATON_FAULT_RENAMED_WAIT) syncs the directory only
  # after that, through the fd it opened before its rename: no failure, both checkpoints
  # committed and intact.
  BATON_FAULT_RENAMED_WAIT=rank-00001.pb timeout 300 "$baton" launch -n 2 -- "$worker" \
    --spec "$work/dp2.pb" --eval-windows 0 --comm-timeout 30 --run-dir run --save-every 10 \
    >a.log 2>&1 || { tail -n 5 a.log; fail "the run failed"; }
  for s in 10 20; do
    [[ -f run/checkpoints/s00-step000000$s/manifest.pb ]] || fail "step $s not committed"
  done
  ls -d run/checkpoints/*.partial 2>/dev/null && fail "a partial checkpoint was left"
  [[ $(cat run/checkpoints/latest) == s00-step00000020 ]] || fail "latest is not step 20"
  "$baton" ckpt verify run >verify.log || { cat verify.log; fail "the checkpoint does not verify"; }
  grep -q "s00-step00000020: .* intact" verify.log || { cat verify.log; fail "step 20 not intact"; }
  echo "$case: rank 1 synced its shard index's directory after rank 0 renamed it; steps 10 and 20 committed and intact"
  ;;
bad-tool-input)
  # The checkpoint tools refuse what they cannot do right, with a message and exit 2,
  # leaving nothing behind: a layout the model does not split into (tp 3 divides none of
  # 4 heads, ffn 176 and vocab 272; tp 8 exceeds the heads), a manifest that is empty.
  one --run-dir run --steps 2 >/dev/null
  for to in tp3 tp8 tp2,pp3; do
    rc=0
    "$baton" ckpt reshard run --to "$to" --out "out-$to" 2>err.log || rc=$?
    [[ $rc == 2 ]] || fail "reshard --to $to: exit $rc, want 2"
    grep -q "baton ckpt reshard: --to: " err.log || fail "reshard --to $to: $(cat err.log)"
    ls -d out-"$to"* 2>/dev/null && fail "reshard --to $to left output behind"
  done
  grep -q "parallel.tp 3 must divide model.n_heads (4)" <("$baton" ckpt reshard run --to tp3 \
    --out x 2>&1) || fail "reshard --to tp3 does not say why"
  grep -q "ep 2 needs an MoE model; this checkpoint's is dense" <("$baton" ckpt reshard run \
    --to ep2,dp2 --out x 2>&1) || fail "reshard --to ep2 of a dense model does not say why"
  # --to given empty, a degree given twice, --to twice: refused (were tp1 everywhere,
  # the last one taken)
  for args in "--to=" "--to=tp2,tp4" "--to=zero1,z0" "--to=tp1 --to=tp2"; do
    read -ra a <<<"${args//=/ }"
    [[ $args == "--to=" ]] && a=(--to "")
    rc=0
    "$baton" ckpt reshard run "${a[@]}" --out out-twice 2>err.log || rc=$?
    [[ $rc == 2 ]] && grep -Eq "no degree given|given twice" err.log ||
      fail "reshard $args: exit $rc: $(cat err.log)"
    [[ ! -e out-twice ]] || fail "reshard $args left output behind"
  done
  cp -a run/checkpoints/s00-step00000002 empty && : >empty/manifest.pb
  # verify: a checkpoint whose manifest is empty or cut short is damaged (exit 1), not a
  # usage error
  cp -a run/checkpoints/s00-step00000002 short && truncate -s 100 short/manifest.pb
  for d in empty short; do
    rc=0
    "$baton" ckpt verify $d >verify.log 2>&1 || rc=$?
    [[ $rc == 1 ]] || fail "ckpt verify of a damaged manifest ($d): exit $rc, want 1"
    # (cut short, the manifest's own CRC32C no longer matches: damaged as well)
    grep -Eq "^DAMAGED: .*$d/manifest.pb: (not a checkpoint manifest|damaged: its CRC32C)" verify.log ||
      fail "ckpt verify $d: $(cat verify.log)"
  done
  # ... but one of a newer baton's format is not known damaged: exit 2, said so (its
  # format_version set, the manifest's checksum made again, as a newer baton writes it)
  cp -a run/checkpoints/s00-step00000002 newer && "$ckpt_edit" newer --set-format 99
  rc=0
  "$baton" ckpt verify newer >verify.log 2>&1 || rc=$?
  [[ $rc == 2 ]] && grep -q "format 99, written by a newer baton" verify.log ||
    fail "ckpt verify of a newer format: exit $rc, $(cat verify.log)"
  for cmd in "inspect empty" "reshard empty --to tp2 --out y" \
    "export empty --format hf --out z"; do
    rc=0
    # shellcheck disable=SC2086 # the words of the command
    "$baton" ckpt $cmd 2>err.log || rc=$?
    [[ $rc == 2 ]] || fail "ckpt $cmd on an empty manifest: exit $rc, want 2"
    grep -q "empty/manifest.pb: not a checkpoint manifest (no model in it)" err.log ||
      fail "ckpt $cmd: $(cat err.log)"
  done
  [[ ! -e y && ! -e z ]] || fail "output left behind for an empty manifest"
  echo "$case: reshard to layouts the model does not split into and an empty manifest refused"
  ;;
*) fail "unknown case" ;;
esac
