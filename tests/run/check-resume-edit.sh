#!/usr/bin/env bash
# A run stopped in its second stage whose kept recipe (RUN_DIR/recipe.yaml, the copy
# `baton resume` reads) is edited before the resume: a one-rank llama over the fortunes,
# stages a (10 steps) and b (20), stopped by SIGTERM in b (its helpers from
# run-common.sh). CASE:
#   edit-steps-done   a's steps lowered 10 -> 4: the resume continues b from its stop
#                     checkpoint and metrics.jsonl keeps every record, a's 1..10 and b's
#                     1..20 once each, b's at global steps 10 + step (the steps a completed
#                     with), TensorBoard without a restart marker and holding every record.
#   edit-steps-below  b's steps lowered below its stop checkpoint's step: refused before
#                     any worker starts (exit 2, naming the stage, the checkpoint's step and
#                     the new steps, and the way on), nothing journaled; raised back to the
#                     checkpoint's step, the resume completes the stage.
#   edit-data-keys    seed, b's seq_len and (on a mixture) a source's weight changed
#                     mid-stage: refused before any worker starts (exit 2, naming the field
#                     and its old and new values), nothing journaled; the worker refuses
#                     them too (a spec written by hand, as its own check), and its manifests
#                     record the mixture weights (a checkpoint without them: those of the
#                     spec it was saved under); at a stage boundary (a stopped in a, b's
#                     seq_len changed) the resume goes on.
#   edit-model-shape  model.dim changed mid-stage: refused before any worker starts (exit
#                     2, naming model.dim 64 -> 96), nothing journaled, no word of damage;
#                     the worker alone refuses it naming the recipe, not damage.
#   edit-newer-format b's newest checkpoint made a newer baton's (its format_version past
#                     this baton's): the resume is refused before any worker starts (exit
#                     2, naming the checkpoint, its format, the newest this baton reads and
#                     the ways on), nothing journaled; the worker alone refuses it too (exit
#                     2), with --init the run directory or its checkpoints/, instead of
#                     falling back to an older checkpoint; moved aside, the resume goes on.
#   edit-notes        resume says once which kept --set overrides it reapplies; status of a
#                     run whose kept recipe no longer parses says so, steps '?' (null); a
#                     FIFO at RUN_DIR/recipe.yaml, overrides or journal: status and resume
#                     end at once (never wait for a writer), naming it; resume exits 2;
#                     status on a kept overrides file it cannot read (a FIFO, a link, over
#                     1 MiB) says why, and "is missing" only for one that is.
#   fifo-writes       a FIFO where a resume writes a file of the run's own, never
#                     waited on: at an attempt's log or its spec's temp file, the attempt
#                     fails at once naming it, not retried (exit 1, no worker started); at
#                     rank 0's metrics log, the worker says so and goes on; at the lock
#                     file, resume refuses it (exit 2), a directory there too, named as
#                     the lock file; at metrics.jsonl or valid.jsonl (a FIFO, a
#                     directory), resume refuses it before anything starts (exit 2,
#                     nothing journaled), never running without the control channel; a
#                     spec whose fsync fails with EINVAL (BATON_FAULT_FSYNC_EINVAL: no
#                     file planted) is retried.
#   check-resume-edit.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"

# stopped_run DATA STAGE AT: r1, a run of edit.yaml (with data: DATA, or the fortunes)
# stopped in stage STAGE (0: a, 1: b) once it reached step AT (its stop checkpoint at
# that step or a little later)
stopped_run() {
  one_rank_recipe edit "checkpoint: {every_steps: 4, keep: 3}" \
    '{name: a, steps: 10}' '{name: b, steps: 20}' >edit.yaml
  [[ -z $1 ]] || sed -i "s|^data: .*|data: $1|" edit.yaml
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run edit.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step "$2" "$3" >/dev/null
  stop_run
}
# stop_step [STAGE [DIR]]: the step of the stage's (b's) newest checkpoint in DIR (r1)
stop_step() {
  local c
  c=$(ls -d "${2:-r1}"/checkpoints/s0"${1:-1}"-step* | tail -1)
  echo $((10#${c##*step}))
}
# resumes DIR: `baton resume DIR` completes the run
resumes() {
  "$baton" resume "$1" --quiet >resume.out 2>&1 || { cat resume.out; fail "resume of $1 failed"; }
  "$baton" status "$1" --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["state"] == "completed", j["state"]' || fail "$1 did not complete"
}
# worker_refuses DIR WANT: the worker alone, on a spec of DIR's recipe's stage b
# (`baton spec`), resuming DIR's checkpoints, exits 2 saying WANT (grep -E) and no word
# of damage
worker_refuses() {
  "$baton" spec "$1/recipe.yaml" --stage b --out b.pb
  set +e
  "$worker" --spec b.pb --run-dir "$1" --init "$1" --single-process >worker.out 2>&1
  local rc=$?
  set -e
  [[ $rc == 2 ]] || { tail -5 worker.out; fail "the worker resumed the edited $1: exit $rc"; }
  grep -Eq -- "$2" worker.out || { tail -5 worker.out; fail "the worker does not say '$2'"; }
  ! grep -q "damaged" worker.out || { tail -3 worker.out; fail "the worker speaks of damage"; }
}
# refused DIR WANT...: `baton resume DIR` exits 2 at once saying each WANT (grep -E), with
# no attempt journaled and no worker log written
refused() {
  local dir=$1 logs journal
  shift
  logs=$(ls "$dir/logs" | wc -l) journal=$(stat -c %s "$dir/journal")
  set +e
  "$baton" resume "$dir" --quiet >resume.out 2>&1
  local rc=$?
  set -e
  [[ $rc == 2 ]] || { cat resume.out; fail "resume of the edited $dir exited $rc, not 2"; }
  for w in "$@"; do
    grep -Eq -- "$w" resume.out || { cat resume.out; fail "the refusal does not say '$w'"; }
  done
  [[ $(ls "$dir/logs" | wc -l) == "$logs" ]] || fail "$dir: a worker started: $(ls "$dir/logs")"
  [[ $(stat -c %s "$dir/journal") == "$journal" ]] || fail "$dir: the refusal was journaled"
  ! grep -q "damaged\|ckpt verify" resume.out || { cat resume.out; fail "a refusal for an edit speaks of damage"; }
  cat resume.out
}

case $case in
edit-steps-done)
  stopped_run "" 1 6
  k=$(stop_step)
  sed -i 's/{name: a, steps: 10}/{name: a, steps: 4}/' r1/recipe.yaml
  "$baton" resume r1 --quiet >resume.out 2>&1 || { cat resume.out; fail "resume failed"; }
  /usr/bin/python3 - r1/metrics.jsonl "$k" <<'PY' || fail "metrics.jsonl lost or repeated records"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = {}
for r in rows:
    got.setdefault(r["stage"], []).append(r["step"])
print({s: (len(v), min(v), max(v)) for s, v in got.items()}, "stopped at b", sys.argv[2])
assert got.get("a") == list(range(1, 11)), ("a", got.get("a"))
assert got.get("b") == list(range(1, 21)), ("b", got.get("b"))
bad = [r for r in rows if r["stage"] == "b" and r["global_step"] != 10 + r["step"]]
assert not bad, ("b's global steps do not follow a's 10", bad[:2])
PY
  /usr/bin/python3 "$src/tests/control/read_tb.py" r1/tb r1/metrics.jsonl >tb.txt ||
    fail "TensorBoard lacks records of metrics.jsonl"
  ! grep -q "session_log START" tb.txt || { grep "session_log" tb.txt; fail "a restart marker without a restart"; }
  ;;
edit-steps-below)
  stopped_run "" 1 6
  k=$(stop_step)
  sed -i 's/{name: b, steps: 20}/{name: b, steps: 3}/' r1/recipe.yaml
  refused r1 'stage "b" has steps: 3' "checkpoints/s01-step0*$k is at step $k" \
    "Set its steps to $k or more" "new stage"
  sed -i "s/{name: b, steps: 3}/{name: b, steps: $k}/" r1/recipe.yaml
  resumes r1
  [[ $(stop_step) == "$k" ]] || fail "b went on past its checkpoint's step $k"
  ;;
edit-data-keys)
  ckpt_edit=$(dirname "$baton")/../tests/ckpt_edit
  stopped_run "" 1 6
  cp -a r1 rs
  sed -i 's/^seed: 3$/seed: 4/' rs/recipe.yaml
  refused rs "seed 3 -> 4" "would index other samples" "Put the old value back"
  worker_refuses rs "cannot resume: seed 3 -> 4"
  cp -a r1 rq
  sed -i 's/{name: b, steps: 20}/{name: b, steps: 20, seq_len: 32}/' rq/recipe.yaml
  refused rq "seq_len 64 -> 32" "would index other samples"
  worker_refuses rq "cannot resume: seq_len 64 -> 32"
  # b ended at its checkpoint: nothing more is read, the seed may change
  k=$(stop_step 1 rs)
  sed -i "s/{name: b, steps: 20}/{name: b, steps: $k}/" rs/recipe.yaml
  resumes rs
  # a mixture stopped in a: a weight changed is refused, by the orchestrator and the
  # worker (the manifest records the weights); the same shares, scaled, and b's seq_len
  # changed at the boundary go on
  rm -rf r1
  stopped_run "{mix: [{path: data/fortunes_train, weight: 3}, {path: data/fortunes_valid, weight: 1}], valid: data/fortunes_valid}" 0 3
  [[ $(stop_step 0) -lt 10 ]] || fail "a ran to its end before the stop"
  cp -a r1 rw
  sed -i 's/weight: 3}/weight: 1}/' rw/recipe.yaml
  refused rw "data.mix weight of data/fortunes_train 3 -> 1 \(its share 0.75 -> 0.5\)"
  sed -i 's/{name: b, steps: 20}/{name: b, steps: 4}/' rw/recipe.yaml # b a stage to spec
  "$baton" spec rw/recipe.yaml --stage a --out a.pb
  set +e
  "$worker" --spec a.pb --run-dir rw --init rw --single-process >worker.out 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q "cannot resume: data.mix weight of data/fortunes_train 3 -> 1" worker.out ||
    { tail -3 worker.out; fail "the worker resumed a under other weights: exit $rc"; }
  # checkpoints of an older baton, which recorded no weights: those of the spec the stage
  # was saved under (specs/s00-a00.pb) are compared; the same shares, scaled, go on
  cp -a r1 ro
  for c in ro/checkpoints/s00-step*; do "$ckpt_edit" "$c" --drop-weights; done
  "$baton" ckpt inspect ro --json | /usr/bin/python3 -c '
import json, sys
assert all("weight" not in d for d in json.load(sys.stdin)["data"])' || fail "ckpt_edit --drop-weights left a weight"
  cp -a ro rsc
  sed -i 's/weight: 3}/weight: 1}/' ro/recipe.yaml
  refused ro "data.mix weight of data/fortunes_train 3 -> 1 \(its share 0.75 -> 0.5\) in .*/ro/recipe.yaml since it was saved \(the checkpoint, saved by a baton that did not record them, ran under the weights of specs/s00-a00.pb\)"
  sed -i 's/weight: 3}/weight: 6}/; s/weight: 1}/weight: 2}/' rsc/recipe.yaml
  resumes rsc
  sed -i 's/weight: 3}/weight: 6}/; s/weight: 1}/weight: 2}/' r1/recipe.yaml
  sed -i 's/{name: b, steps: 20}/{name: b, steps: 20, seq_len: 32}/' r1/recipe.yaml
  resumes r1
  ;;
edit-model-shape)
  stopped_run "" 1 6
  sed -i 's/dim: 64,/dim: 96,/' r1/recipe.yaml
  refused r1 'stage "b" cannot resume from its checkpoint checkpoints/s01-step' \
    "model.dim 64 in the checkpoint, 96 in this stage" "put it back"
  # the worker alone (no baton run to refuse first) refuses every checkpoint of b and
  # takes no hand-off from a, naming the recipe, not damage
  worker_refuses r1 "not falling back to it \(put the stage's model back in the recipe\)"
  ;;
edit-newer-format)
  ckpt_edit=$(dirname "$baton")/../tests/ckpt_edit
  stopped_run "" 1 6
  k=$(stop_step)
  newest=$(ls -d r1/checkpoints/s01-step* | tail -1)
  [[ $(ls -d r1/checkpoints/s0* | wc -l) -ge 2 ]] || fail "no older checkpoint to fall back to"
  "$ckpt_edit" "$newest" --set-format 3
  refused r1 "${newest##*/}/manifest.pb: checkpoint format 3, written by a newer baton \(this one reads up to format 2\)" \
    "Resume the run with that baton \(upgrade this one\), or move ${newest##*/} out of .*/r1/checkpoints"
  worker_refuses r1 "${newest##*/}/manifest.pb: checkpoint format 3, written by a newer baton.*not falling back"
  ! grep -q "^baton-worker: falling back to" worker.out || { cat worker.out; fail "the worker fell back"; }
  set +e
  "$worker" --spec b.pb --init r1/checkpoints --single-process >worker.out 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q "written by a newer baton.*not falling back" worker.out &&
    ! grep -q "^baton-worker: falling back to" worker.out ||
    { tail -5 worker.out; fail "the worker (--init a checkpoint root) went past the newer checkpoint: exit $rc"; }
  mv "$newest" newer.ckpt
  resumes r1
  ;;
edit-notes)
  # a run with a kept override: resume says once which it reapplies (over recipe.yaml)
  one_rank_recipe edit "" '{name: a, steps: 2}' '{name: b, steps: 4}' >edit.yaml
  "$baton" run edit.yaml --run-dir r1 --quiet --set stages.b.steps=3 >run.out 2>&1 || fail "run failed"
  "$baton" resume r1 >resume.out 2>&1 || { cat resume.out; fail "resume of a completed run failed"; }
  [[ $(grep -c "reapplying the run's overrides" resume.out) == 1 ]] &&
    grep -q "overrides (.*/r1/overrides), which take precedence over its recipe.yaml: --set stages.b.steps=3$" resume.out ||
    { cat resume.out; fail "resume does not say once which overrides it reapplies"; }
  # a kept recipe that no longer parses: status says why it shows '?'
  echo "stages: [" >>r1/recipe.yaml
  "$baton" status r1 >status.out 2>status.err || fail "status failed"
  grep -q "warning: the run's kept recipe cannot be read (.*recipe.yaml" status.err ||
    { cat status.err status.out; fail "status does not say the recipe cannot be read"; }
  grep -Eq '^  \? +done +2/\? ' status.out || { cat status.out; fail "status shows steps it does not know"; }
  "$baton" status r1 --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
st = json.load(sys.stdin)["stages"]
assert [s["steps"] for s in st] == [None, None], st' || fail "status --json shows steps it does not know"
  # a FIFO in a kept file's place never makes status or resume wait for a writer: the
  # recipe (status says so and shows '?', resume refuses it), the overrides and the
  # journal (both refuse them), each named
  fifo_in() { # FILE: RUN_DIR/FILE made a FIFO, the file set aside (back with fifo_out)
    mv "r1/$1" "r1/$1.was" && mkfifo -m 600 "r1/$1"
  }
  fifo_out() { rm "r1/$1" && mv "r1/$1.was" "r1/$1"; }
  fifo_in recipe.yaml
  set +e
  timeout 20 "$baton" status r1 >status.out 2>status.err; src=$?
  timeout 20 "$baton" resume r1 --quiet >resume.out 2>&1; rrc=$?
  set -e
  [[ $src == 0 ]] && grep -q "kept recipe cannot be read (.*r1/recipe.yaml: cannot read: not a regular file" status.err ||
    { cat status.err; fail "status with a FIFO recipe.yaml: exit $src (124: it waited)"; }
  [[ $rrc == 2 ]] && grep -q "r1/recipe.yaml: cannot read: not a regular file" resume.out ||
    { cat resume.out; fail "resume with a FIFO recipe.yaml: exit $rrc (124: it waited)"; }
  fifo_out recipe.yaml
  for f in overrides journal; do
    fifo_in $f
    set +e
    timeout 20 "$baton" resume r1 --quiet >resume.out 2>&1; rrc=$?
    [[ $f == journal ]] && { timeout 20 "$baton" status r1 >status.out 2>&1; src=$?; }
    set -e
    [[ $rrc == 2 ]] && grep -q "r1/$f: cannot read: not a regular file" resume.out ||
      { cat resume.out; fail "resume with a FIFO at $f: exit $rrc (124: it waited)"; }
    if [[ $f == journal ]]; then
      [[ $src == 2 ]] && grep -q "r1: not a run directory (its journal is not a file)" status.out ||
        { cat status.out; fail "status with a FIFO journal: exit $src (124: it waited)"; }
    fi
    fifo_out $f
  done
  # status on a kept overrides file it cannot read says why, not that it is missing: a
  # FIFO, a link, one over 1 MiB; and one removed, that it is missing (the recipe parsing
  # again: status reads the overrides only then)
  sed -i '/^stages: \[$/d' r1/recipe.yaml
  overrides_warns() { # WANT: status exits 0 at once, its warning on r1/overrides says WANT
    set +e
    timeout 20 "$baton" status r1 >status.out 2>status.err; src=$?
    set -e
    [[ $src == 0 ]] && grep -q "warning: .*r1/overrides $1.*; showing the run's own overrides" status.err ||
      { cat status.err; fail "status on r1/overrides: exit $src (124: it waited), not saying '$1'"; }
  }
  fifo_in overrides
  overrides_warns "cannot be read (not a regular file"
  fifo_out overrides
  mv r1/overrides r1/overrides.was && ln -s overrides.was r1/overrides
  overrides_warns "cannot be read (a symbolic link"
  rm r1/overrides
  overrides_warns "is missing since the run started"
  head -c 1100000 /dev/zero | tr '\0' '#' >r1/overrides
  overrides_warns "cannot be read (File too large)"
  mv r1/overrides.was r1/overrides
  "$baton" status r1 >status.out 2>status.err || fail "status failed"
  [[ ! -s status.err ]] || { cat status.err; fail "status warns on the overrides put back"; }
  ;;
fifo-writes)
  # a completed run of stage a, stage b appended to its kept recipe: the resume trains b
  one_rank_recipe edit "" '{name: a, steps: 2}' >edit.yaml
  "$baton" run edit.yaml --run-dir r1 --quiet >run.out 2>&1 || fail "run failed"
  echo "  - {name: b, steps: 2}" >>r1/recipe.yaml
  # resume_refuses FILE WANT: a FIFO at RUN_DIR/FILE, a file the resume writes: it ends at
  # once, exit 1, saying WANT of it, no worker started, the attempt journaled as failed
  # and not retried; the FIFO then removed
  resume_refuses() {
    mkfifo -m 600 "r1/$1"
    set +e
    timeout -k 5 30 "$baton" resume r1 --quiet >resume.out 2>&1
    local rc=$?
    set -e
    [[ $rc == 1 ]] || { cat resume.out; fail "resume with a FIFO at $1: exit $rc, not 1 (124: it waited)"; }
    grep -q "stage \"b\": attempt [0-9]* cannot start: .*r1/$2: not a regular file" resume.out &&
      grep -q "not retried, as baton never makes its own files so: .*then 'baton resume " resume.out ||
      { cat resume.out; fail "resume with a FIFO at $1 does not say '$2: not a regular file', not retried"; }
    ! grep -q "restarting" resume.out || { cat resume.out; fail "restarts burnt on a FIFO at $1"; }
    [[ -p r1/$1 ]] || fail "the FIFO at $1 was replaced"
    ! ls r1/logs/s01-*.metrics >/dev/null 2>&1 || fail "a worker started: $(ls r1/logs)"
    rm "r1/$1"
  }
  # the attempt's log (attempt 0), then its spec's temp file (attempt 1: 0 is journaled)
  resume_refuses logs/s01-a00.log "logs/s01-a00.log: cannot create"
  resume_refuses specs/s01-a01.pb.tmp "specs/s01-a01.pb.tmp: cannot write"
  "$baton" status r1 | grep -q "logs/s01-a00.log: cannot create: not a regular file" ||
    { "$baton" status r1; fail "status does not name the FIFO at the log"; }
  # rank 0's metrics log of attempt 2: the worker says so and goes on without it
  mkfifo -m 600 r1/logs/s01-a02.metrics
  set +e
  timeout -k 5 60 "$baton" resume r1 --quiet >resume.out 2>&1
  rc=$?
  set -e
  [[ $rc == 0 ]] || { cat resume.out; fail "resume with a FIFO at rank 0's metrics log: exit $rc (124: it waited)"; }
  grep -q "s01-a02.metrics: cannot create: not a regular file.*going on without it" r1/logs/s01-a02.log ||
    { cat r1/logs/s01-a02.log; fail "the worker does not say its metrics log is no regular file"; }
  # the run's lock file: refused, naming it (exit 2), where a FIFO would open
  rm -f r1/logs/s01-a02.metrics r1/lock
  mkfifo -m 600 r1/lock
  set +e
  timeout -k 5 30 "$baton" resume r1 --quiet >resume.out 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q "r1/lock: cannot open: not a regular file" resume.out ||
    { cat resume.out; fail "resume with a FIFO at the lock file: exit $rc, not 2 naming it"; }
  # a directory there: named as the lock file, not as an unwritable run directory
  rm r1/lock && mkdir r1/lock
  set +e
  timeout -k 5 30 "$baton" resume r1 --quiet >resume.out 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q "r1/lock: cannot open: Is a directory (.*remove what is there" resume.out ||
    { cat resume.out; fail "resume with a directory at the lock file: exit $rc, not 2 naming it"; }
  rmdir r1/lock
  # stage c appended: a FIFO or a directory at metrics.jsonl or valid.jsonl (which the
  # control channel opens) is refused before anything starts (exit 2, naming it and the
  # way on), nothing journaled, never a run without the channel
  echo "  - {name: c, steps: 2}" >>r1/recipe.yaml
  cp r1/journal journal.was
  for f in metrics.jsonl valid.jsonl; do
    for kind in fifo dir; do
      [[ ! -e r1/$f ]] || mv "r1/$f" "r1/$f.was"
      if [[ $kind == fifo ]]; then mkfifo -m 600 "r1/$f"; else mkdir "r1/$f"; fi
      set +e
      timeout -k 5 30 "$baton" resume r1 --quiet >resume.out 2>&1
      rc=$?
      set -e
      [[ $rc == 2 ]] &&
        grep -Eq "r1/$f: cannot open: (not a regular file|Is a directory) .*remove it, then 'baton resume " resume.out ||
        { cat resume.out; fail "resume with a $kind at $f: exit $rc, not 2 naming it (124: it waited)"; }
      ! ls r1/logs/s02-* >/dev/null 2>&1 || fail "an attempt started with a $kind at $f: $(ls r1/logs)"
      cmp -s journal.was r1/journal || fail "the resume refused for a $kind at $f journaled"
      rm -r "r1/$f"
      [[ ! -e r1/$f.was ]] || mv "r1/$f.was" "r1/$f"
    done
  done
  # c's first spec fails to fsync with EINVAL (a file system without it): nothing was
  # planted at its temp file, so the attempt is retried, never refused as planted
  set +e
  BATON_FAULT_FSYNC_EINVAL=s02-a00.pb timeout -k 5 120 "$baton" resume r1 --quiet >resume.out 2>&1
  rc=$?
  set -e
  [[ $rc == 0 ]] && grep -q "specs/s02-a00.pb: cannot write: Invalid argument" resume.out &&
    grep -q 'restarting stage "c"' resume.out ||
    { cat resume.out; fail "a spec whose fsync failed (EINVAL) was not retried: exit $rc"; }
  ! grep -q "not retried" resume.out || { cat resume.out; fail "an fsync's EINVAL called planted"; }
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "$case: ok"
