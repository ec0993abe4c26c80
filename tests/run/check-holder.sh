#!/usr/bin/env bash
# Who holds a run directory (orchestrator/run/run_holder.h: the record in RUN_DIR/lock) and
# baton stop, with the helpers of run-common.sh. CASE:
#   holder-status  a running run names its process (pid, host, command) in status, text
#                  and --json, and in the refusal of a second resume; baton stop --wait
#                  stops it (exit 75 of the run), after which nothing is named and the
#                  lock file is empty; a resume is named as such, and gone once it ends.
#   holder-stale   a baton run killed with SIGKILL leaves its record behind: never shown
#                  as running (lock free), nor named while another process holds the
#                  lock (its pid gone); baton stop signals no process the record names
#                  that does not hold the lock file, nor one on another host, which
#                  the refusal of a second run names with how to stop it there (a Slurm
#                  job's: scancel's form too); the lock file deleted while the directory
#                  is held: the refusal says so, and how to find the holder.
#   holder-edit    the kept recipe edited while the run runs: status warns that the edit
#                  is taken at the next resume (--json: holder.recipe_edited); the resume
#                  that read it is not warned about.
#   holder-edit-plan  the kept recipe's steps edited and a stage appended while the run
#                  runs: status (text and --json) shows the stages, steps and ETA of what
#                  runs, from RUN_DIR/running-recipe.yaml (the bytes it read), and says so;
#                  also with the kept recipe missing or a link, and it says when the edit
#                  cannot be read or moves the run's stages (the next resume refuses it);
#                  that copy missing, a link or of other bytes (a baton older than it): no
#                  planned steps, no ETA, the journal's stages only, and which it is said;
#                  stopped, or once a resume read the edit, the kept recipe's; the closing
#                  summary of a run edited while it ran says what resume trains. Each run
#                  is held after each step (BATON_FAULT_STEP_HOLD) while status looks.
#   holder-pidfd   pidfds refused (EPERM from pidfd_open, then from pidfd_send_signal, as a
#                  seccomp profile answers): baton stop signals the checked pid all the
#                  same; a holder that ends between its check and the signal: "ended
#                  meanwhile" (exit 3). LD_PRELOAD $BATON_TEST_PIDFD_LIB (pidfd_fault.c).
#                  And a record with a negative stopping= is no record.
#   check-holder.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
one_rank_recipe hold "checkpoint: {every_steps: 2}" "{name: a, steps: 400}" >hold.yaml
host=$(hostname)

# holder_json DIR: status --json's holder as "pid command this_host recipe_edited", or
# "null"
holder_json() {
  "$baton" status "$1" --json | /usr/bin/python3 -c '
import json, sys
h = json.load(sys.stdin)["holder"]
print("null" if h is None else "%s %s %s %s %s" % ("null" if h["pid"] is None else h["pid"],
      h["command"], h["host"], h["this_host"], h["recipe_edited"]))'
}
# plan_json DIR: status --json's steps_from, each stage's name:steps, eta or no-eta, then
# holder.kept_recipe and holder.running_copy ("-" without a holder)
plan_json() {
  "$baton" status "$1" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
h = j["holder"]
print(j["steps_from"], " ".join("%s:%s" % (s["name"], s["steps"]) for s in j["stages"]),
      "no-eta" if j["eta_s"] is None else "eta",
      "-" if h is None else "%s %s" % (h["kept_recipe"], h["running_copy"]))'
}
# start_run CMD...: baton CMD in the background ($bpid), its steps slowed, until step 2 of
# its own attempt (an earlier attempt's log, a resume's predecessor, is passed over)
start_run() {
  struck=$(newest_log 0)
  BATON_FAULT_STEP_SLEEP=0.1 "$baton" "$@" --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 2 >/dev/null
}
# start_held CMD...: start_run's, but stage a held after each step while hold.0 is there
# (BATON_FAULT_STEP_HOLD), from its own attempt's first step (in metrics.jsonl too) on
start_held() {
  local i lines
  struck=$(newest_log 0)
  lines=$(n_metrics)
  : >hold.0
  BATON_FAULT_STEP_HOLD=$PWD/hold BATON_FAULT_STEP_SLEEP=0.1 "$baton" "$@" --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 1 >/dev/null
  for ((i = 0; i < 600; i++)); do
    (($(n_metrics) > lines)) && return 0
    sleep 0.1
  done
  fail "the held step never reached r1/metrics.jsonl"
}
# n_metrics: the lines r1/metrics.jsonl holds (0 without it)
n_metrics() { if [[ -f r1/metrics.jsonl ]]; then wc -l <r1/metrics.jsonl; else echo 0; fi; }
# crc_of FILE: its CRC32C, as 8 hex digits
crc_of() {
  PYTHONPATH=$src/tests/lib /usr/bin/python3 -c 'import sys; from crc32c import crc32c
print("%08x" % crc32c(open(sys.argv[1], "rb").read()))' "$1"
}
# long_eta DIR: once status --json has an ETA of an hour or more (two metrics lines, the
# pace of 0.1 s a step), the text's "stage ETA N s (Hh MMm)" or "(Dd HHh MMm)" says N
long_eta() {
  local i n=0 line
  for ((i = 0; i < 200; i++)); do
    n=$("$baton" status "$1" --json 2>/dev/null |
      /usr/bin/python3 -c 'import json,sys; e=json.load(sys.stdin)["eta_s"]; print(0 if e is None else int(e))') || n=0
    ((n >= 3700)) && break
    sleep 0.05
  done
  ((n >= 3700)) || fail "no ETA of an hour or more in $1's status --json"
  line=$("$baton" status "$1" | grep '^  now: ') || fail "no now: line in $1's status"
  /usr/bin/python3 - "$line" <<'PY' || fail "status does not give a long stage's ETA in hours and minutes: $line"
import re, sys
m = re.search(r"stage ETA (\d+) s \((?:(\d+)d (\d{2})h|(\d+)h) (\d{2})m\)", sys.argv[1])
assert m, sys.argv[1]
d, h = (int(m[2]), int(m[3])) if m[2] else (0, int(m[4]))
assert d == 0 or h < 24
assert d * 1440 + h * 60 + int(m[5]) == (int(m[1]) + 30) // 60, sys.argv[1]
PY
}
# forge_line PID HOST [FIELDS]: a holder's record for PID on HOST (and FIELDS, "k=v ..."),
# its CRC32C right
forge_line() {
  PYTHONPATH=$src/tests/lib /usr/bin/python3 - "$@" <<'PY'
import sys
from crc32c import crc32c
pid, host = sys.argv[1:3]
line = "pid=%s host=%s since=1700000000 command=run recipe_crc32c=00000000" % (pid, host)
line += "".join(" " + f for f in sys.argv[3:])
print(line + " crc32c=%08x" % crc32c(line.encode()))
PY
}
# forge DIR PID HOST [FIELDS]: that record written into DIR/lock in place (the file, its inode,
# kept: the lock file stays the lock)
forge() {
  local line
  line=$(forge_line "${@:2}")
  printf '%s\n' "$line" 1<>"$1/lock"
  truncate -s $((${#line} + 1)) "$1/lock"
}
# fake_holder: a process holding r1's lock (sleep), recorded in it ($holder)
fake_holder() {
  rm -rf r1 && mkdir r1 && : >r1/lock
  (exec 8<r1 9<>r1/lock && flock 8 && exec sleep 60) >/dev/null 2>&1 &
  holder=$!
  bg_pids="$bg_pids $holder"
  locked r1
  forge r1 "$holder" "$host"
}
# locked DIR: until DIR's lock (its flock) is held
locked() {
  local i
  for ((i = 0; i < 200; i++)); do
    flock -n "$1" true 2>/dev/null || return 0
    sleep 0.05
  done
  fail "$1 never locked"
}
# attempt_started N: until attempt N of stage 0 has trained a step (wait_step may have seen
# an earlier attempt's)
attempt_started() {
  local i
  for ((i = 0; i < 600; i++)); do
    grep -q '^\[0\] step ' "r1/logs/s00-a0$1.log" 2>/dev/null && return 0
    sleep 0.1
  done
  ls r1/logs
  fail "attempt $1 never trained a step"
}
# tagged PID: SIGTERM with baton stop's value (RUN_HOLDER_STOP_VALUE), sent directly
tagged() {
  /usr/bin/python3 -c 'import ctypes, sys
sys.exit(ctypes.CDLL(None).sigqueue(int(sys.argv[1]), 15, 0x62737470))' "$1"
}
# said_n PATTERN N: until run.out holds N lines matching PATTERN (60 s at most)
said_n() {
  local i
  for ((i = 0; i < 600; i++)); do
    (($(grep -c "$1" run.out) >= $2)) && return 0
    sleep 0.1
  done
  cat run.out
  fail "baton run never said '$1' $2 times"
}

# nobody_cases: as nobody (root only, with setpriv: SKIPPED otherwise), a record naming a
# process of the same user whose /proc/PID/fd cannot be read (not dumpable) is not
# believed: not signalled, status says not verified; and baton stop of another user's run
# directory closed to others says permission denied
nobody_cases() {
  local nb="setpriv --reuid=nobody --regid=nogroup --clear-groups" sp rc
  if ! [[ $(id -u) == 0 ]] || ! command -v setpriv >/dev/null || ! chmod 711 "$work" ||
    ! $nb test -x "$baton" 2>/dev/null; then
    echo "$case: SKIPPED (not root, or no setpriv): the nobody cases"
    return 0
  fi
  mkdir -m 700 closed && : >closed/journal
  set +e; $nb "$baton" stop closed >stop5.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] && grep -q "closed/journal: cannot read: Permission denied" stop5.out ||
    { cat stop5.out; fail "baton stop of another user's closed run directory exited $rc"; }
  mkdir -m 777 nob
  install -d -o nobody -m 700 nob/r
  install -o nobody -m 600 r1/journal nob/r/journal
  install -o nobody -m 600 /dev/null nob/r/lock
  $nb flock nob/r sleep 60 >/dev/null 2>&1 &
  bg_pids="$bg_pids $!"
  $nb /usr/bin/python3 -c 'import ctypes, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); time.sleep(60)' &
  sp=$!
  bg_pids="$bg_pids $sp"
  sleep 0.3
  forge nob/r "$sp" "$host"
  set +e; $nb "$baton" stop nob/r >stop6.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] && grep -q "pid $sp, which the lock file records, cannot be checked to hold it (/proc/$sp/fd cannot be read): not signalled" stop6.out ||
    { cat stop6.out; fail "baton stop of a pid it cannot check exited $rc"; }
  kill -0 "$sp" || fail "baton stop signalled a process it could not check"
  $nb "$baton" status nob/r >st6.out 2>&1 || true
  grep -q "running (baton run pid $sp on $host, since .* (recorded; not verified: /proc/$sp/fd cannot be read))" st6.out ||
    { cat st6.out; fail "status of a record it cannot check"; }
  hidepid_case "$nb"
}
# hidepid_case NB: with /proc mounted hidepid=2 (another user's processes have no
# /proc/PID), a root process holding a run directory open to all is, to nobody (NB), a
# holder not verified, never a stale record: status names it so, baton stop says it is
# not permitted. SKIPPED where no such /proc can be mounted (unshare -m).
hidepid_case() {
  local hidden="unshare -m sh -c 'mount -t proc -o hidepid=2 proc /proc && exec \"\$@\"' sh" hp rc
  if ! eval "$hidden true" 2>/dev/null; then
    echo "$case: SKIPPED (no /proc mounted hidepid=2 in a mount namespace): the hidepid case"
    return 0
  fi
  install -d -m 755 hid
  install -m 644 r1/journal hid/journal && install -m 644 r1/recipe.yaml hid/recipe.yaml
  install -m 644 /dev/null hid/lock
  (exec 8<hid 9<hid/lock && flock 8 && exec sleep 60) >/dev/null 2>&1 &
  hp=$!
  bg_pids="$bg_pids $hp"
  locked hid
  forge hid "$hp" "$host"
  eval "$hidden $1 \"\$baton\" status hid" >st7.out 2>&1 || true
  grep -q "running (baton run pid $hp on $host, since .* (recorded; not verified: /proc/$hp/fd cannot be read))" st7.out ||
    { cat st7.out; fail "status under hidepid=2 of another user's holder"; }
  set +e; eval "$hidden $1 \"\$baton\" stop hid" >stop7.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] && grep -q "not permitted to signal baton run pid $hp (another user's process" stop7.out ||
    { cat stop7.out; fail "baton stop under hidepid=2 of another user's holder exited $rc"; }
  kill -0 "$hp" || fail "baton stop signalled another user's process"
}

case $case in
holder-status)
  # a long stage: its ETA (0.1 s a step) also in hours and minutes
  sed 's/steps: 400}/steps: 400000}/' hold.yaml >long.yaml
  start_run run long.yaml --run-dir r1
  "$baton" status r1 >st.out
  grep -q "^run r1: running (baton run pid $bpid on $host, since [0-9-]* [0-9:]*); " st.out ||
    { cat st.out; fail "status does not name the running baton run"; }
  long_eta r1
  [[ $(holder_json r1) == "$bpid run $host True False" ]] || { holder_json r1; fail "status --json's holder"; }
  set +e; "$baton" resume r1 --quiet >second.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "r1: another baton run is working in this run directory (baton run pid $bpid on $host, since .*; stop it with 'baton stop $work/r1' or kill -TERM $bpid)\$" second.out ||
    { cat second.out; fail "the refusal of a second resume does not name the holder"; }
  # baton stop --wait says what it did before it waits (flushed, into a file): the run is
  # held (SIGSTOP) until that is seen
  kill -STOP "$bpid"
  "$baton" stop r1 --wait >stop.out 2>&1 &
  spid=$!
  for ((i = 0; i < 100; i++)); do
    grep -q "^baton stop: r1: waiting until it exits" stop.out && break
    sleep 0.05
  done
  grep -q "^baton stop: r1: asked baton run pid $bpid to stop (SIGTERM)" stop.out &&
    grep -q "^baton stop: r1: waiting until it exits" stop.out ||
    { kill -CONT "$bpid"; cat stop.out; fail "baton stop --wait said nothing before it waited"; }
  kill -CONT "$bpid"
  wait "$spid" || { cat stop.out; fail "baton stop --wait exited $?"; }
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 75 ]] || { cat run.out; fail "baton run exited $rc after baton stop, not 75"; }
  grep -q "^baton stop: r1: baton run pid [0-9]* let go of the run directory" stop.out &&
    grep -q "^run r1: stopped; " stop.out && grep -q "^  checkpoints: s00-step" stop.out ||
    { cat stop.out; fail "baton stop --wait did not say the stop and the run's state"; }
  [[ ! -s r1/lock ]] || { cat r1/lock; fail "the lock file still holds a record after the run stopped"; }
  "$baton" status r1 >st2.out
  grep -q "^run r1: stopped; " st2.out && ! grep -q "pid" st2.out || { cat st2.out; fail "status of the stopped run"; }
  [[ $(holder_json r1) == null ]] || fail "status --json names a holder of a stopped run"
  set +e; "$baton" stop r1 >stop2.out 2>&1; rc=$?; set -e
  [[ $rc == 3 ]] && grep -q "no baton run is working in it: nothing to stop" stop2.out ||
    { cat stop2.out; fail "baton stop of a stopped run exited $rc"; }
  # a resume: named as one, and nothing once it completes
  sed -i 's/steps: 400000/steps: 40/' r1/recipe.yaml
  start_run resume r1
  [[ $(holder_json r1) == "$bpid resume $host True False" ]] || { holder_json r1; fail "status --json's holder of a resume"; }
  wait "$bpid" || { cat run.out; fail "the resume exited $?"; }
  bpid=
  [[ ! -s r1/lock && $(holder_json r1) == null ]] || fail "a completed run still names its holder"
  echo "$case: the holder named in status, --json and the refusal; baton stop --wait stopped it"
  ;;
holder-stale)
  start_run run hold.yaml --run-dir r1
  kill -9 "$bpid"
  wait "$bpid" 2>/dev/null || true
  dead=$bpid bpid=
  workers_gone r1 10
  grep -q "^pid=$dead " r1/lock || { cat r1/lock; fail "the killed run's record is not in its lock file (nothing stale to test)"; }
  "$baton" status r1 >st.out
  grep -q "^run r1: stopped; " st.out && ! grep -q "pid" st.out || { cat st.out; fail "a stale record shown"; }
  [[ $(holder_json r1) == null ]] || fail "status --json names the killed run as the holder"
  set +e; "$baton" stop r1 >stop.out 2>&1; rc=$?; set -e
  [[ $rc == 3 ]] || { cat stop.out; fail "baton stop with a stale record exited $rc, not 3"; }
  # the lock held by a process that records nothing (the run directory's flock): running,
  # the dead pid not named, and not signalled
  (exec 8<r1 && flock 8 && exec sleep 60) >/dev/null 2>&1 &
  bg_pids=$! # the sleep itself, holding the flock: killed on exit
  for ((i = 0; i < 50; i++)); do
    [[ $("$baton" status r1 --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])') == running ]] && break
    sleep 0.1
  done
  "$baton" status r1 >st2.out
  grep -q "^run r1: running; " st2.out || { cat st2.out; fail "status of a run whose holder is not recorded"; }
  [[ $(holder_json r1) == null ]] || fail "status --json names a dead pid as the holder"
  set +e; "$baton" stop r1 >stop2.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] && grep -q "its process is not recorded" stop2.out || { cat stop2.out; fail "baton stop without a record exited $rc"; }
  # a record naming a live process that does not hold the lock file: not signalled
  sleep 60 >/dev/null 2>&1 &
  innocent=$!
  bg_pids="$bg_pids $innocent"
  forge r1 "$innocent" "$host"
  set +e; "$baton" stop r1 >stop3.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] && grep -q "pid $innocent, which the lock file records, does not hold it: not signalled" stop3.out ||
    { cat stop3.out; fail "baton stop of a pid not holding the lock exited $rc"; }
  kill -0 "$innocent" || fail "baton stop signalled a process that does not hold the lock"
  # ... nor named by status or a refusal (a stale record an older baton left, its pid reused)
  "$baton" status r1 >st3.out
  grep -q "^run r1: running; " st3.out || { cat st3.out; fail "status names a live pid that does not hold the lock"; }
  [[ $(holder_json r1) == null ]] || fail "status --json names a live pid that does not hold the lock"
  set +e; "$baton" resume r1 --quiet >second.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "another baton run is working in this run directory\$" second.out ||
    { cat second.out; fail "the refusal names a live pid that does not hold the lock"; }
  # a record of another host: said, not signalled
  forge r1 "$innocent" elsewhere.invalid
  grep -q "^run r1: running (baton run pid $innocent on elsewhere.invalid, since " <("$baton" status r1) ||
    { "$baton" status r1; fail "status does not name the other host's holder"; }
  set +e; "$baton" stop r1 >stop4.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "runs on elsewhere.invalid, not on this host: not signalled; stop it on elsewhere.invalid with 'baton stop $work/r1' or kill -TERM $innocent\$" stop4.out ||
    { cat stop4.out; fail "baton stop of another host's holder exited $rc"; }
  # ... and in the refusal of a second run, with how to stop it there
  busy="r1: another baton run is working in this run directory"
  elsewhere="$busy (baton run pid $innocent on elsewhere.invalid, since [0-9-]* [0-9:]*; stop it on elsewhere.invalid with 'baton stop $work/r1' or kill -TERM $innocent"
  set +e; "$baton" resume r1 --quiet >second2.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "$elsewhere)\$" second2.out ||
    { cat second2.out; fail "the refusal of a resume held on another host exited $rc"; }
  # ... a Slurm job's (RUN_DIR/job_id): scancel's form too
  echo 5678 >r1/job_id
  set +e; "$baton" stop r1 >stop4.out 2>&1; rc=$?; set -e
  "$baton" resume r1 --quiet >second3.out 2>&1 && fail "a resume held on another host by a Slurm job ran"
  rm r1/job_id
  [[ $rc == 2 ]] && grep -q "kill -TERM $innocent (or, where it runs as Slurm job 5678, the one in RUN_DIR/job_id, with scancel --signal=TERM --batch 5678)\$" stop4.out ||
    { cat stop4.out; fail "baton stop of another host's Slurm job's holder exited $rc"; }
  grep -q "$elsewhere (or, where it runs as Slurm job 5678, the one in RUN_DIR/job_id, with scancel --signal=TERM --batch 5678))\$" second3.out ||
    { cat second3.out; fail "the refusal of a resume held on another host by a Slurm job"; }
  kill -0 "$innocent" || fail "baton stop signalled a process for another host"
  # the lock file deleted (as "stale") while the directory is held: the refusal says so,
  # and how to find the process that holds it, whose record went with the file
  rm r1/lock
  set +e; "$baton" resume r1 --quiet >second4.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "$busy (its lock file was deleted, and with it the record of the process that holds the run, which still holds the directory: find it with 'fuser -v $work/r1' or pgrep -af 'baton (run|resume)' and stop it with kill -TERM PID, or wait until it ends; a run makes the lock file again as it takes the directory)\$" second4.out ||
    { cat second4.out; fail "the refusal of a resume held with its lock file deleted exited $rc"; }
  [[ ! -e r1/lock ]] || fail "the refused resume made a lock file"
  nobody_cases
  echo "$case: a stale record never shown or signalled; another host's holder said"
  ;;
holder-edit)
  start_run run hold.yaml --run-dir r1
  "$baton" status r1 >st.out 2>st.err
  [[ ! -s st.err ]] || { cat st.err; fail "status warns before any edit"; }
  echo '  - {name: b, steps: 3}' >>r1/recipe.yaml
  "$baton" status r1 >st.out 2>st.err
  grep -q "^baton status: warning: r1/recipe.yaml was edited after the running baton run (pid $bpid) read it: that process trains the recipe it read, and the edit is taken at the next 'baton resume r1'" st.err ||
    { cat st.err; fail "no warning of the edit made while running"; }
  [[ $(holder_json r1 2>/dev/null) == "$bpid run $host True True" ]] || { holder_json r1; fail "status --json's recipe_edited"; }
  stop_run
  sed -i 's/steps: 400/steps: 40/' r1/recipe.yaml
  start_run resume r1
  "$baton" status r1 >st2.out 2>st2.err
  [[ ! -s st2.err ]] || { cat st2.err; fail "the resume, which read the edit, is warned about"; }
  [[ $(holder_json r1) == "$bpid resume $host True False" ]] || { holder_json r1; fail "status --json of the resume"; }
  wait "$bpid" || { cat run.out; fail "the resume exited $?"; }
  bpid=
  echo "$case: an edit made while running is said to be taken at the next resume"
  ;;
holder-edit-plan)
  # the run held after each step of stage a while hold.0 is there: every status below sees
  # it running, at the step it held at, however slowly this shell is scheduled
  start_held run hold.yaml --run-dir r1
  cmp -s hold.yaml r1/running-recipe.yaml || fail "r1/running-recipe.yaml is not the recipe the run read"
  sed -i 's/steps: 400/steps: 60/' r1/recipe.yaml
  echo '  - {name: b, steps: 3}' >>r1/recipe.yaml
  cp r1/recipe.yaml edited.yaml
  "$baton" status r1 >st.out 2>st.err
  grep -Eq '^  a +running +[0-9]+/400 ' st.out && ! grep -q '^  b ' st.out &&
    grep -q '^  now: stage a step [0-9]*/400, .*, stage ETA [0-9]* s' st.out ||
    { cat st.out; fail "status of a run whose recipe was edited while it runs does not show what runs"; }
  running="(the stages, steps and ETA shown are those of the recipe it read, kept as r1/running-recipe.yaml)"
  grep -q "edit is taken at the next 'baton resume r1' $running\$" st.err && (($(wc -l <st.err) == 1)) ||
    { cat st.err; fail "status does not say which recipe it shows"; }
  [[ $(plan_json r1) == "running-recipe.yaml a:400 eta edited taken" ]] || { plan_json r1; fail "status --json of the running plan"; }
  # the edit as the next resume takes it, said while what runs is shown: one it cannot read,
  # one whose stages moved among the run's
  echo 'stages: [' >>r1/recipe.yaml
  "$baton" status r1 >st.out 2>st.err
  grep -q "^baton status: warning: the run's kept recipe cannot be read (r1/recipe.yaml:.*): the next 'baton resume' refuses it until it is mended\$" st.err ||
    { cat st.err; fail "status does not say the edited kept recipe cannot be read"; }
  grep -Eq '^  a +running +[0-9]+/400 ' st.out || { cat st.out; fail "status of an edit that cannot be read does not show what runs"; }
  one_rank_recipe hold "checkpoint: {every_steps: 2}" "{name: z, steps: 3}" "{name: a, steps: 60}" >r1/recipe.yaml
  "$baton" status r1 >st.out 2>st.err
  grep -q "^baton status: warning: the kept recipe (r1/recipe.yaml), as edited, no longer matches the run's stages: stage \"a\" was the run's stage 1 and is the recipe's stage 2 now; the next 'baton resume' refuses it until they are back in their order\$" st.err ||
    { cat st.err; fail "status does not say the edited kept recipe moved the run's stages"; }
  [[ $(plan_json r1) == "running-recipe.yaml a:400 eta edited taken" ]] || { plan_json r1; fail "status --json of an edit that moved the stages"; }
  # one that is not valid as resume checks it, with the run's overrides
  one_rank_recipe hold "checkpoint: {every_steps: 2}" "{name: a, steps: 60, micro_batch: 3}" >r1/recipe.yaml
  "$baton" status r1 >st.out 2>st.err
  grep -q "^baton status: warning: the kept recipe (r1/recipe.yaml), as edited, is not valid: r1/recipe.yaml:[0-9]*:[0-9]*: defaults.global_batch: global_batch 4 is not a multiple of micro_batch .*; the next 'baton resume' refuses it until it is mended\$" st.err ||
    { cat st.err; fail "status does not say the edited kept recipe is not valid"; }
  # the kept recipe moved aside, or a link: what runs is shown all the same, and said
  for kept in missing link; do
    rm -f r1/recipe.yaml
    [[ $kept == link ]] && ln -s ../edited.yaml r1/recipe.yaml
    "$baton" status r1 >st.out 2>st.err
    now="is missing" until="back" word=missing
    [[ $kept == link ]] && now="cannot be read (a symbolic link (a run's own file is never followed))" until="readable again" word=unreadable
    grep -Eq '^  a +running +[0-9]+/400 ' st.out && grep -q '^  now: stage a step [0-9]*/400, ' st.out ||
      { cat st.out; fail "status of a run whose kept recipe is $kept does not show what runs"; }
    grep -Fxq "baton status: warning: r1/recipe.yaml, which the running baton run (pid $bpid) read, $now now: that process trains the recipe it read, and 'baton resume r1' refuses the run until it is $until $running" st.err &&
      (($(wc -l <st.err) == 1)) || { cat st.err; fail "status does not say the kept recipe is $kept"; }
    [[ $(plan_json r1) == "running-recipe.yaml a:400 eta $word taken" ]] || { plan_json r1; fail "status --json, the kept recipe $kept"; }
  done
  rm -f r1/recipe.yaml && cp edited.yaml r1/recipe.yaml
  # a copy of other bytes than the holder read, one that cannot be read, or none: neither
  # the edit's steps nor an ETA, nor its stage b, which the running process does not train
  ran=$(sed -En 's/.* recipe_crc32c=([0-9a-f]{8}) .*/\1/p' r1/lock)
  [[ $ran == $(crc_of hold.yaml) ]] || { cat r1/lock; fail "the holder's record does not name the recipe it read"; }
  cp r1/recipe.yaml r1/running-recipe.yaml
  for copy in other bad none; do
    case $copy in
    other) word=other why="r1/running-recipe.yaml holds other bytes than the recipe it read (CRC32C $(crc_of edited.yaml), its record names $ran)" ;;
    bad) word=unreadable why="its copy of the recipe it read, r1/running-recipe.yaml, cannot be read (a symbolic link (a run's own file is never followed))" ;;
    none) word=missing why="its copy of the recipe it read, r1/running-recipe.yaml, is missing (a baton older than this one started it, or the copy could not be written)" ;;
    esac
    "$baton" status r1 >st.out 2>st.err
    grep -Eq '^  a +running +[0-9]+/\? ' st.out && ! grep -q '^  now: ' st.out && ! grep -q '^  b ' st.out ||
      { cat st.out; fail "status shows planned steps or stages not running without the running recipe ($copy)"; }
    grep -Fq "edit is taken at the next 'baton resume r1' ($why: planned steps are shown as '?' (null in --json), with no ETA, and only the stages its journal has (1; the recipe it read may have more))" st.err ||
      { cat st.err; fail "status does not say why it lacks the running recipe ($copy)"; }
    [[ $(plan_json r1) == "None a:None no-eta edited $word" ]] || { plan_json r1; fail "status --json without the running recipe ($copy)"; }
    rm -f r1/running-recipe.yaml
    [[ $copy == other ]] && ln -s ../hold.yaml r1/running-recipe.yaml
  done
  # neither the kept recipe nor the copy: the journal's stages, under the names they trained
  # with, and why
  rm r1/recipe.yaml
  "$baton" status r1 >st.out 2>st.err
  grep -Eq '^  a +running +[0-9]+/\? ' st.out && (($(grep -c '^  [a-z?] ' st.out) == 1)) ||
    { cat st.out; fail "status without the kept recipe or its running copy"; }
  grep -Fxq "baton status: warning: the run's kept recipe cannot be read (r1/recipe.yaml: cannot open: No such file or directory): the stages the run started are shown under the names they trained with and planned steps as '?' (null in --json); 'baton resume' refuses it too until it is mended" st.err &&
    (($(wc -l <st.err) == 1)) || { cat st.err; fail "status does not say the kept recipe is missing"; }
  cp edited.yaml r1/recipe.yaml
  rm hold.0 # on, to its stop
  stop_run
  # a's steps edited again, past where the run stopped, so that the resume has steps to train
  at=$("$baton" status r1 --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["stages"][0]["step"])')
  sed -i "s/steps: 60}/steps: $((at + 30))}/" r1/recipe.yaml
  [[ $(plan_json r1) == "recipe.yaml a:$((at + 30)) b:3 no-eta -" ]] || { plan_json r1; fail "status --json of the stopped run"; }
  # a resume reads the edit: its plan is the kept recipe's; a stage appended while it runs
  # is not shown, and the closing summary says resume trains it
  start_held resume r1
  cmp -s r1/recipe.yaml r1/running-recipe.yaml || fail "the resume did not keep the recipe it read"
  "$baton" status r1 >st.out 2>st.err
  [[ ! -s st.err ]] || { cat st.err; fail "the resume, which read the edit, is warned about"; }
  [[ $(plan_json r1) == "recipe.yaml a:$((at + 30)) b:3 eta ok None" ]] || { plan_json r1; fail "status --json of the resume"; }
  echo '  - {name: c, steps: 2}' >>r1/recipe.yaml
  [[ $(plan_json r1) == "running-recipe.yaml a:$((at + 30)) b:3 eta edited taken" ]] || { plan_json r1; fail "status --json of the resume, edited"; }
  rm hold.0
  wait "$bpid" || { cat run.out; fail "the resume exited $?"; }
  bpid=
  grep -q "the run completed, but its recipe (recipe.yaml) now has more, from stage \"c\" (new) on: 'baton resume [^']*/r1' trains it" run.out ||
    { cat run.out; fail "the closing summary of a run edited while it ran"; }
  echo "$case: status of a run edited while it runs shows what runs, or no steps without its recipe"
  ;;
holder-stop-twice)
  # a resume (named as such), its stop checkpoint held until save.wait is removed
  one_rank_recipe slow "checkpoint: {every_steps: 1000}" "{name: a, steps: 400}" >slow.yaml
  start_run run slow.yaml --run-dir r1
  stop_run
  : >save.wait
  BATON_FAULT_SAVE_WAIT_FILE=$work/save.wait start_run resume r1
  attempt_started 1
  grep -q "^pid=$bpid " r1/lock || { cat r1/lock; ls r1/logs; fail "the resume did not start"; }
  # two baton stops at once (each may find the record not yet marked stopping): one stop
  "$baton" stop r1 >s1.out 2>&1 &
  p1=$!
  "$baton" stop r1 >s2.out 2>&1 || { cat s2.out; fail "the second of two baton stops exited $?"; }
  wait "$p1" || { cat s1.out; fail "the first of two baton stops exited $?"; }
  for ((i = 0; i < 300; i++)); do
    grep -q " stopping=[0-9]* crc32c=" r1/lock && break
    sleep 0.1
  done
  grep -q " stopping=[0-9]* crc32c=" r1/lock || { cat r1/lock; fail "the record does not say the run is stopping"; }
  "$baton" status r1 >st.out
  grep -q "^run r1: running (baton resume pid $bpid on $host, since [0-9-]* [0-9:]*, stopping since [0-9:]*); " st.out ||
    { cat st.out; fail "status does not say the run is stopping"; }
  # a later baton stop sends nothing; with --wait it waits
  set +e; "$baton" stop r1 >s3.out 2>&1; rc=$?; set -e
  [[ $rc == 0 ]] && grep -q "^baton stop: r1: its baton resume is already stopping since [0-9][0-9]:[0-9][0-9]:[0-9][0-9] (its workers write a stop checkpoint, then it exits): nothing sent (kill -TERM $bpid kills its workers now, losing the stop checkpoint)\$" s3.out ||
    { cat s3.out; fail "baton stop of a run already stopping exited $rc"; }
  "$baton" stop r1 --wait >s4.out 2>&1 &
  p4=$!
  for ((i = 0; i < 600; i++)); do
    grep -q "waiting until it exits" s4.out && break
    sleep 0.1
  done
  # baton stop's SIGTERM sent twice more (as by baton stops that raced the record): the
  # same stop, said, the workers not killed
  tagged "$bpid"
  said_n "got SIGTERM from baton stop (pid [0-9]*) while already stopping: the same stop, going on" 1
  tagged "$bpid"
  said_n "got SIGTERM from baton stop (pid [0-9]*) while already stopping: the same stop, going on" 2
  ! grep -q "killing the workers now" run.out || { cat run.out; fail "baton stop's SIGTERM killed the workers"; }
  rm save.wait
  wait "$p4" || { cat s4.out; fail "baton stop --wait of a run already stopping exited $?"; }
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 75 ]] || { cat run.out; fail "the resume exited $rc after baton stop, not 75"; }
  ! grep -q "killing the workers now\|was not completed" run.out || { cat run.out; fail "a second baton stop killed the workers"; }
  grep -q "^baton stop: r1: its baton resume is already stopping since " s4.out &&
    grep -q "^baton stop: r1: baton resume pid [0-9]* let go of the run directory" s4.out &&
    grep -q "^run r1: stopped; " s4.out && grep -q "^  checkpoints: s00-step" s4.out ||
    { cat s4.out; fail "baton stop --wait of a run already stopping"; }
  [[ ! -s r1/lock ]] || { cat r1/lock; fail "the lock file still holds a record"; }
  # baton stop's SIGTERM, then again: one stop; a plain SIGTERM after them still kills
  # the workers at once
  : >save.wait
  BATON_FAULT_SAVE_WAIT_FILE=$work/save.wait start_run resume r1
  attempt_started 2
  tagged "$bpid"
  said_n "got SIGTERM: asking the workers to checkpoint and stop" 1
  tagged "$bpid"
  said_n "the same stop, going on" 1
  ! grep -q "killing the workers now" run.out || { cat run.out; fail "baton stop's second SIGTERM killed the workers"; }
  kill -TERM "$bpid"
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  rm save.wait
  [[ $rc == 75 ]] && grep -q "got SIGTERM after SIGTERM: killing the workers now" run.out ||
    { cat run.out; fail "a plain SIGTERM after baton stop's did not kill the workers (exit $rc)"; }
  echo "$case: baton stop of a run already stopping sends nothing; two at once stop it once; its SIGTERM again is the same stop"
  ;;
holder-starting)
  # the lock held by a process that writes its record a moment later (a run starting):
  # baton stop waits for the record, then signals that process. The record is written
  # (shell builtins, no start-up) once go exists, made after baton stop has started.
  mkdir r1 && : >r1/lock # a run directory, as far as baton stop looks
  (
    exec 8<r1 9<>r1/lock
    flock 8
    until [[ -e go ]]; do sleep 0.02; done
    read -r line <rec
    printf '%s\n' "$line" >&9
    exec sleep 60
  ) >/dev/null 2>&1 &
  holder=$!
  bg_pids=$holder
  forge_line "$holder" "$host" >rec
  locked r1
  "$baton" stop r1 >stop.out 2>&1 &
  spid=$!
  sleep 0.2
  : >go
  set +e; wait "$spid"; rc=$?; set -e
  [[ $rc == 0 ]] && grep -q "^baton stop: r1: asked baton run pid $holder to stop (SIGTERM)" stop.out ||
    { cat stop.out; fail "baton stop as the run starts exited $rc"; }
  for ((i = 0; i < 100; i++)); do
    kill -0 "$holder" 2>/dev/null || break
    sleep 0.05
  done
  ! kill -0 "$holder" 2>/dev/null || fail "the process holding the lock was not signalled"
  echo "$case: baton stop waits for the record of a run starting"
  ;;
holder-pidfd)
  [[ -n ${BATON_TEST_PIDFD_LIB:-} ]] || fail "BATON_TEST_PIDFD_LIB is not set"
  # a sanitizer build's runtime is not first of the libraries with the preload in front
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  # (a record whose stopping= is not a time after 1970 is no record: nothing said of it)
  fake_holder
  forge r1 "$holder" "$host" stopping=-5
  set +e; "$baton" stop r1 >stop.out 2>&1; rc=$?; set -e
  [[ $rc == 1 ]] && grep -q "its process is not recorded" stop.out ||
    { cat stop.out; fail "baton stop believes a record with stopping=-5 (exit $rc)"; }
  for mode in open-eperm send-eperm; do
    fake_holder
    set +e; LD_PRELOAD=$BATON_TEST_PIDFD_LIB BATON_TEST_PIDFD=$mode "$baton" stop r1 >stop.out 2>&1; rc=$?; set -e
    [[ $rc == 0 ]] && grep -q "^baton stop: r1: asked baton run pid $holder to stop (SIGTERM)" stop.out ||
      { cat stop.out; fail "baton stop with pidfds refused ($mode) exited $rc"; }
    for ((i = 0; i < 100; i++)); do
      kill -0 "$holder" 2>/dev/null || break
      sleep 0.05
    done
    ! kill -0 "$holder" 2>/dev/null || fail "the holder was not signalled ($mode)"
  done
  fake_holder
  set +e; LD_PRELOAD=$BATON_TEST_PIDFD_LIB BATON_TEST_PIDFD=open-kill "$baton" stop r1 >stop.out 2>&1; rc=$?; set -e
  [[ $rc == 3 ]] && grep -q "^baton stop: r1: baton run pid $holder ended meanwhile: nothing to stop" stop.out ||
    { cat stop.out; fail "baton stop of a holder that ended meanwhile exited $rc"; }
  echo "$case: pidfds refused, baton stop signals the checked pid; a holder ended meanwhile said"
  ;;
holder-pidns)
  # a run in another PID namespace (unshare -p: its pid 1 here is init): named as such,
  # never by its pid nor with a kill command; baton stop inside that namespace stops it
  if ! [[ $(id -u) == 0 ]] || ! unshare -p -f --mount-proc true 2>/dev/null; then
    echo "$case: SKIPPED (not root, or unshare -p -f --mount-proc fails)"
    exit 77
  fi
  BATON_FAULT_STEP_SLEEP=0.1 unshare -p -f --mount-proc "$baton" run hold.yaml --run-dir r1 --quiet >run.out 2>&1 &
  bpid=$!
  wait_step 0 2 >/dev/null
  grep -q "^pid=1 .* pidns=[0-9]* crc32c=" r1/lock || { cat r1/lock; fail "the record holds no PID namespace"; }
  "$baton" status r1 >st.out
  grep -q "^run r1: running (baton run in another PID namespace (a container) on $host, since [0-9-]* [0-9:]*); " st.out ||
    { cat st.out; fail "status of a run in another PID namespace"; }
  [[ $(holder_json r1) == "null run $host True False" ]] || { holder_json r1; fail "status --json's holder in another namespace"; }
  set +e; "$baton" resume r1 --quiet >second.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "another PID namespace (a container) on $host, since .*; stop it from inside that namespace with 'baton stop $work/r1')\$" second.out &&
    ! grep -q "kill" second.out || { cat second.out; fail "the refusal of a run in another namespace"; }
  set +e; "$baton" stop r1 >stop.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -q "its baton run runs in another PID namespace (a container) on this host, whose process ids are not this one's: not signalled; stop it from inside that namespace with 'baton stop $work/r1'\$" stop.out ||
    { cat stop.out; fail "baton stop of a run in another namespace exited $rc"; }
  inner=$(pgrep -P "$bpid" | head -1)
  # (not --wait: the namespace's processes are killed as its pid 1, the run, exits)
  nsenter -t "$inner" -p -m -w"$work" "$baton" stop r1 >stop2.out 2>&1 || { cat stop2.out; fail "baton stop inside the namespace failed"; }
  grep -q "^baton stop: r1: asked baton run pid 1 to stop (SIGTERM)" stop2.out || { cat stop2.out; fail "baton stop inside the namespace"; }
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 75 ]] || { cat run.out stop2.out; fail "the run in the namespace exited $rc, not 75"; }
  # this host's run seen from inside another namespace: named as in another one too
  sed -i 's/steps: 400/steps: 40/' r1/recipe.yaml
  start_run resume r1
  unshare -p -f --mount-proc "$baton" status r1 >st2.out
  grep -q "^run r1: running (baton resume in another PID namespace (a container) on $host, since " st2.out ||
    { cat st2.out; fail "status from inside another namespace"; }
  wait "$bpid" || { cat run.out; fail "the resume exited $?"; }
  bpid=
  echo "$case: a run in another PID namespace named as such, stopped from inside it"
  ;;
*)
  fail "unknown case"
  ;;
esac
