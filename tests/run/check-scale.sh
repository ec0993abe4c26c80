#!/usr/bin/env bash
# `baton run` on clusters of thousands of nodes, with the helpers of run-common.sh and, for
# --launcher slurm, fake scontrol/srun/squeue/scancel on PATH (no Slurm needed: the fake
# srun records the step's argv and the host files it names, and starts no worker; the
# tests labelled slurm are the proof of the launcher on a real one). CASE:
#   slurm-hosts    an allocation of 2048 hosts with 52-character names (100 KB of them):
#                  all read, the step's srun gets --nodes=2048 and --nodelist=FILE (a path
#                  in the run directory) holding exactly the allocation's hosts in order,
#                  no argument cut short and no --exclude; an allocation one host short is
#                  refused, naming its 2047 hosts.
#   slurm-exclude  40 hosts with 117-character names (4.7 KB, past the 4 KB the node list
#                  was once cut at), nodes 38 + 2 spares: srun reports a node failure on
#                  host 5, which is excluded; the next attempt's --nodelist file holds the
#                  38 others (a spare in its place) and its --exclude file host 5; `baton
#                  resume` excludes it again from the journal (the long name read back).
#                  A FIFO at a host file's temp file: the resume stops (exit 1) naming it;
#                  a link at a host file: replaced (0600), its target untouched.
#                  Host 30 lost, whose name host 3's begins: only it excluded.
#   slurm-probe    2048 hosts (2046 nodes + 2 spares), the first attempt failing: one
#                  sinfo --local for every host (SLURM_JOB_NODELIST), no host queried one by
#                  one, ONE probe step over every host Slurm has nothing against (the failed
#                  task's too), a second sinfo only where hosts were silent in it, and the
#                  next attempt started within 10 s. A task's failure, Slurm having node100
#                  down*, node5 dead: both excluded, node100 on Slurm's word (not probed);
#                  no task named: the same step; a host whose launch failed excluded (again
#                  on resume), also for "Job credential revoked" (a host's word, not the
#                  job's end); one host silent: excluded; a step cut off at its limit with
#                  846 hosts silent: none excluded, said; the step refused as a whole for a
#                  host gone down since the first sinfo: that host alone excluded (the second
#                  sinfo); probes failing everywhere: none excluded; every host draining
#                  (Reboot ASAP): none excluded; Slurm having every host down*: none
#                  excluded, said; the probe saying the job is ending: a stop when squeue
#                  agrees, else no verdict from it.
#   node-cap       more nodes + spare_nodes than a run takes (16384): baton run and submit
#                  refuse at once, naming the cap and the key, making nothing; baton plan
#                  warns and plans; nodes + spare_nodes past 2^32 never wraps.
#   local-nodes    260 virtual nodes of the local launcher (a worker that exits 2 at once):
#                  all 260 ranks started, none taken for lost (no shrinking).
source "$(dirname "$0")/run-common.sh"

recipe_of() { # recipe_of NAME NODES SPARES RESTARTS: a tiny one-stage recipe, dp = nodes
  cat >"$1.yaml" <<EOF
name: $1
model: {arch: llama, dim: 32, n_layers: 2, n_heads: 2, ffn_dim: 64, vocab_size: 320}
cluster: {nodes: $2, gpus_per_node: 1, spare_nodes: $3, device: cpu}
data: {train: data/fortunes_train}
defaults:
  seq_len: 32
  global_batch: $2
  micro_batch: 1
  parallel: {tp: 1, pp: 1, dp: auto}
  restart: {max_restarts: $4, backoff: 0.1s}
stages:
  - {name: a, steps: 2}
EOF
}

fake_slurm() {
  mkdir -p fake
  cat >fake/scontrol <<'EOF'
#!/bin/sh
case "$1 $2" in
"show hostnames") exec cat "$FAKE_HOSTS" ;;
"show node") echo "scontrol show node $4" >>"$FAKE_CALLS"; echo "NodeName=$4 State=IDLE" ;;
esac
exit 0
EOF
  # sinfo: every host idle (listed twice: two partitions) or in state $FAKE_ALLSTATE,
  # $FAKE_DOWN "down*", and $FAKE_DOWN2 from its second call on; with FAKE_SINFO=fail it fails
  cat >fake/sinfo <<'EOF'
#!/bin/sh
echo "sinfo $*" >>"$FAKE_CALLS"
[ "$FAKE_SINFO" = fail ] && { echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1; }
[ "$(grep -c '^sinfo' "$FAKE_CALLS")" -ge 2 ] && down2=$FAKE_DOWN2
awk -v down="${FAKE_DOWN:-}" -v down2="${down2:-}" -v all="${FAKE_ALLSTATE:-idle none}" '{
  s = $0 == down || $0 == down2 ? "down* Not responding" : all; print $0, s; print $0, s }' "$FAKE_HOSTS"
EOF
  # an old-style one-host probe ("true") succeeds. A probe step (printenv SLURMD_NODENAME)
  # is logged as "probe N FIRST" (its host file's count and first host); it prints its
  # hosts' names but $FAKE_DEAD's, whose launch fails (exit 1; srun's words end in
  # $FAKE_DEAD_WHY), and $FAKE_MUTE's (exit 1, nothing said). FAKE_PROBE=fail: no host
  # answers; refuse: the same when $FAKE_DOWN2 is probed; slow: the first 1200 answer, then
  # the step hangs; expired: the job is ending (squeue says COMPLETING from then on);
  # expired-word: srun's words alone. A run's step is recorded, then ends as $FAKE_STEP
  # says: "stop" exits 75 (its workers stopped); the first time (exit 1, its time in
  # $FAKE_LOG.failed) "nodefail" reports a node failure on $FAKE_LOST, "taskfail" task 7 on
  # $FAKE_TASKHOST failed, "silent" nothing; then it stops. The next step's start:
  # $FAKE_LOG.next.
  cat >fake/srun <<'EOF'
#!/bin/sh
for a in "$@"; do [ "$a" = true ] && { echo "probe-true $*" >>"$FAKE_CALLS"; exit 0; }; done
case " $* " in *" printenv SLURMD_NODENAME "*)
  for a in "$@"; do case "$a" in --nodelist=*) f=${a#--nodelist=} ;; esac; done
  echo "probe $(wc -l <"$f") $(head -n 1 "$f")" >>"$FAKE_CALLS"
  refused="srun: error: Unable to create step for job 4242: Requested node configuration is not available"
  case "$FAKE_PROBE" in
  fail) echo "$refused" >&2; exit 1 ;;
  refuse) grep -qxF -- "$FAKE_DOWN2" "$f" && { echo "$refused" >&2; exit 1; } ;;
  slow) head -n 1200 "$f"; exec sleep 60 ;;
  expired*)
    [ "$FAKE_PROBE" = expired ] && echo COMPLETING >"$FAKE_LOG.squeue"
    echo "srun: error: Unable to create step for job 4242: Job/step already completing or completed" >&2; exit 1 ;;
  esac
  grep -vxF -e "${FAKE_DEAD:-/}" -e "${FAKE_MUTE:-/}" "$f"
  if [ -n "$FAKE_DEAD" ] && grep -qxF -- "$FAKE_DEAD" "$f"; then
    echo "srun: error: Task launch for StepId=4242.9 failed on node $FAKE_DEAD: ${FAKE_DEAD_WHY:-Communication connection failure}" >&2
    exit 1
  fi
  [ -n "$FAKE_MUTE" ] && grep -qxF -- "$FAKE_MUTE" "$f" && exit 1
  exit 0 ;;
esac
[ -e "$FAKE_LOG.failed" ] && [ ! -e "$FAKE_LOG.next" ] && date +%s.%N >"$FAKE_LOG.next"
{
  echo "---- srun"
  for a in "$@"; do
    printf '%s\n' "$a"
    case "$a" in
    --nodelist=*) sed 's/^/nodelist-file: /' "${a#--nodelist=}" ;;
    --exclude=*) sed 's/^/exclude-file: /' "${a#--exclude=}" ;;
    esac
  done
} >>"$FAKE_LOG"
if [ "$FAKE_STEP" != stop ] && [ ! -e "$FAKE_LOG.failed" ]; then
  case $FAKE_STEP in
  nodefail) echo "srun: error: Node failure on $FAKE_LOST" >&2 ;;
  taskfail) echo "srun: error: $FAKE_TASKHOST: task 7: Exited with exit code 1" >&2 ;;
  esac
  date +%s.%N >"$FAKE_LOG.failed"
  exit 1
fi
exit 75
EOF
  printf '#!/bin/sh\ncase "$*" in *--steps*) exit 0 ;; esac\ncat "$FAKE_LOG.squeue" 2>/dev/null || echo RUNNING\n' >fake/squeue
  printf '#!/bin/sh\nexit 0\n' >fake/scancel
  chmod +x fake/*
}

# slurm_run LOG HOSTS STEP ARGS...: baton ARGS inside the fake allocation
slurm_run() {
  local log=$1 hosts=$2 step=$3
  shift 3
  PATH=$work/fake:$PATH FAKE_LOG=$work/$log FAKE_HOSTS=$work/$hosts FAKE_STEP=$step \
    FAKE_CALLS=$work/$log.calls SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='h[0-9]' "$baton" "$@" --listen 127.0.0.1 >run.out 2>&1
}

# step_of LOG K WHAT: the K-th step's (1-based) lines of WHAT ("arg", "nodelist-file",
# "exclude-file") as srun got them
step_of() {
  awk -v k="$2" -v what="$3" '/^---- srun/ { n++; next } n == k {
    if (what == "arg" && $0 !~ /^(nodelist|exclude)-file: /) print
    else if (index($0, what ": ") == 1) print substr($0, length(what) + 3) }' "$1"
}

case $case in
slurm-hosts)
  fake_slurm
  for ((i = 0; i < 2048; i++)); do
    printf 'gpu-r%03d-n%04d.frontier-like.cluster.example.org\n' $((i / 64)) $i
  done >hosts
  recipe_of big 2048 0 0
  slurm_run log hosts stop run big.yaml --run-dir r --launcher slurm --worker "$worker"
  rc=$?
  [[ $rc == 75 ]] || fail "exit $rc, expected 75 (the fake step's workers stop)"
  grep -q "^baton run: Slurm job 4242, 2048 hosts" run.out || fail "not 2048 hosts read"
  args=$(step_of log 1 arg)
  for want in --nodes=2048 --ntasks=2048 --ntasks-per-node=1 "--nodelist=$work/r/specs/s00-a00.hosts"; do
    grep -qxF -- "$want" <<<"$args" || fail "srun lacks $want: $(head -c 600 <<<"$args")"
  done
  grep -q -- "^--exclude" <<<"$args" && fail "an --exclude with no node excluded"
  step_of log 1 nodelist-file | cmp -s - hosts ||
    fail "the --nodelist file is not the allocation's 2048 hosts: $(step_of log 1 nodelist-file | wc -l) lines"
  long_args=$(awk 'length > 200' <<<"$args" | wc -l)
  [[ $long_args == 0 ]] || fail "$long_args srun arguments longer than 200 bytes"
  head -n 2047 hosts >hosts2047
  slurm_run log2 hosts2047 stop run big.yaml --run-dir r2 --launcher slurm --worker "$worker"
  rc=$?
  [[ $rc == 2 ]] || fail "an allocation one host short: exit $rc, expected 2"
  grep -q "wants 2048 nodes (nodes + spare_nodes) but allocation 4242 has 2047 hosts" run.out ||
    fail "an allocation one host short: not said"
  ;;
slurm-exclude)
  fake_slurm
  long=$(printf 'x%.0s' {1..110})
  for ((i = 0; i < 40; i++)); do printf 'dgx-%s-n%d\n' "$long" $i; done >hosts
  lost=$(sed -n 6p hosts) # node5, whose name begins those of node50.. (none here)
  [[ $(wc -c <hosts) -gt 4096 ]] || fail "the hosts' names are too short for the case"
  recipe_of ex 38 2 1
  FAKE_LOST=$lost slurm_run log hosts nodefail run ex.yaml --run-dir r --launcher slurm --worker "$worker"
  rc=$?
  [[ $rc == 75 ]] || fail "exit $rc, expected 75"
  grep -qF "node5 (Slurm host $lost, job 4242) lost: srun reported a node failure" run.out ||
    fail "host 5 not excluded"
  step_of log 1 nodelist-file | cmp -s - <(head -n 38 hosts) || fail "attempt 0's host file"
  step_of log 2 nodelist-file | cmp -s - <(sed -n '1,5p;7,39p' hosts) ||
    fail "attempt 1's host file is not the 38 hosts left: $(step_of log 2 nodelist-file | cut -c1-20 | tr '\n' ' ')"
  [[ $(step_of log 2 exclude-file) == "$lost" ]] || fail "attempt 1's --exclude file"
  grep -qxF -- "--exclude=$work/r/specs/s00-a01.exclude" <(step_of log 2 arg) ||
    fail "attempt 1's srun has no --exclude=FILE"
  # node30 lost: node3, whose name begins its name, is not
  recipe_of ex3 38 2 1
  FAKE_LOST=$(sed -n 31p hosts) slurm_run log4 hosts nodefail run ex3.yaml --run-dir r3 --launcher slurm --worker "$worker"
  step_of log4 2 nodelist-file | cmp -s - <(sed -n '1,30p;32,39p' hosts) ||
    fail "node30 lost: attempt 1's host file is not the 38 others: $(step_of log4 2 nodelist-file | sed 's/.*-//' | tr '\n' ' ')"
  # a FIFO where the next attempt's host file is written first: refused at once, never
  # waited on (resumable, exit 1); a link at the one after it: replaced, never followed
  mkfifo r/specs/s00-a02.hosts.tmp
  echo important >victim
  ln -s "$work/victim" r/specs/s00-a03.hosts
  PATH=$work/fake:$PATH FAKE_LOG=$work/log5 FAKE_HOSTS=$work/hosts FAKE_STEP=stop FAKE_CALLS=$work/log5.calls \
    SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='h[0-9]' timeout 20 "$baton" resume r \
    --launcher slurm --worker "$worker" --listen 127.0.0.1 >run.out 2>&1
  rc=$?
  [[ $rc == 1 ]] || fail "a FIFO at the host file's temp file: exit $rc, expected 1: $(tail -3 run.out)"
  grep -q "attempt 2 cannot start: .*/r/specs/s00-a02.hosts.tmp: cannot write: not a regular file" run.out ||
    fail "the FIFO not named: $(tail -3 run.out)"
  grep -q "configuration error" run.out && fail "a host file not written called a configuration error"
  grep -q "not retried, as baton never makes its own files so" run.out || fail "no resumable stop said"
  [[ ! -e log5 ]] || fail "srun started without its host file"
  rm r/specs/s00-a02.hosts.tmp
  slurm_run log3 hosts stop resume r --launcher slurm --worker "$worker"
  rc=$?
  [[ $rc == 75 ]] || fail "resume: exit $rc, expected 75"
  [[ $(cat victim) == important ]] || fail "the link at the host file was followed"
  [[ -f r/specs/s00-a03.hosts && ! -L r/specs/s00-a03.hosts ]] || fail "the link not replaced"
  [[ $(stat -c %a r/specs/s00-a03.hosts) == 600 ]] || fail "the host file is not 0600"
  [[ $(step_of log3 1 exclude-file) == "$lost" ]] || fail "resume: host 5 not excluded again"
  step_of log3 1 nodelist-file | cmp -s - <(sed -n '1,5p;7,39p' hosts) ||
    fail "resume: its host file is not the 38 hosts left"
  ;;
slurm-probe)
  fake_slurm
  for ((i = 0; i < 2048; i++)); do printf 'gpu-r%03d-n%04d\n' $((i / 64)) $i; done >hosts
  h() { sed -n "$(($1 + 1))p" hosts; } # host of node K
  recipe_of pr 2046 2 2
  # probe_run NAME STEP [VAR=VALUE...]: a run of 2046 nodes + 2 spares whose first attempt
  # fails as STEP says, the fake tools set by the VARs; its tools' calls in NAME.calls
  probe_run() {
    local name=$1 step=$2
    shift 2
    env "$@" PATH=$work/fake:$PATH FAKE_LOG=$work/$name FAKE_HOSTS=$work/hosts FAKE_STEP=$step \
      FAKE_CALLS=$work/$name.calls SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='gpu-r[000-031]-n[0000-2047]' \
      "$baton" run pr.yaml --run-dir "r-$name" --launcher slurm --worker "$worker" \
      --listen 127.0.0.1 >"$name.out" 2>&1
  }
  # calls_are NAME WANT...: the state queries ("sinfo": the one for every host) and probes
  # after NAME's failure, exactly; the next attempt within $LIMIT s (10)
  calls_are() {
    local name=$1 got spent
    shift
    got=$(sed 's/^sinfo --local --all --noheader --Node --nodes=gpu-r\[000-031\]-n\[0000-2047\] --format=%N %T %E$/sinfo/' "$name.calls" | tr '\n' '|')
    [[ $got == "$(printf '%s|' "$@")" ]] || fail "$name: calls '$(head -c 300 <<<"$got")', expected '$(printf '%s|' "$@")'"
    [[ -e $name.next ]] || return 0
    spent=$(awk '{ t[NR] = $1 } END { printf "%.2f", t[2] - t[1] }' "$name.failed" "$name.next")
    awk -v s="$spent" -v l="${LIMIT:-10}" 'BEGIN { exit !(s < l) }' || fail "$name: $spent s from the failure to the next attempt"
  }
  excluded() { grep -o '^baton run: node[0-9]* (Slurm host [^,]*, job 4242) lost: .*; excluded$' "$1.out"; }
  # nodes_are NAME K...: the nodes NAME excluded, in order
  nodes_are() {
    local name=$1 got
    shift
    got=$(excluded "$name" | cut -d' ' -f3 | tr '\n' ' ')
    [[ $got == "${*:+$* }" ]] || fail "$name: excluded '$got', expected '$*': $(excluded "$name" | head -3)"
  }
  # a task's failure on node7, Slurm has node100 down, node5 dead: node100 excluded on
  # Slurm's word (not probed), every other host probed in one step, node5 excluded
  probe_run pin taskfail FAKE_TASKHOST="$(h 7)" FAKE_DOWN="$(h 100)" FAKE_DEAD="$(h 5)"
  rc=$?
  [[ $rc == 75 ]] || fail "pin: exit $rc, expected 75: $(tail -3 pin.out)"
  calls_are pin sinfo "probe 2045 $(h 0)"
  [[ $(excluded pin | tail -n 1) == "baton run: node100 (Slurm host $(h 100), job 4242) lost: Slurm has $(h 100) in state down* (reason: Not responding); excluded" ]] ||
    fail "pin: node100 not excluded on Slurm's word: $(excluded pin | head -3)"
  nodes_are pin node5 node100
  cmp -s r-pin/specs/s00-a00.probe <(sed -n '1,100p;102,2046p' hosts) || fail "pin: the probe's hosts"
  step_of pin 2 nodelist-file | cmp -s - <(sed -n '1,5p;7,100p;102,2048p' hosts) || fail "pin: attempt 1's hosts"
  # no task named, node100 down: the same one step over the others
  probe_run judged silent FAKE_DOWN="$(h 100)"
  calls_are judged sinfo "probe 2045 $(h 0)"
  nodes_are judged node100
  # nothing pins it (srun named no task): one probe step over all 2046 hosts, the one whose
  # launch failed excluded with srun's words; again on resume, from the journal
  probe_run free silent FAKE_DEAD="$(h 5)"
  calls_are free sinfo "probe 2046 $(h 0)"
  [[ $(excluded free) == "baton run: node5 (Slurm host $(h 5), job 4242) lost: a probe step: srun: error: Task launch for StepId=4242.9 failed on node $(h 5): Communication connection failure; excluded" ]] ||
    fail "free: not node5 alone excluded: $(excluded free | head -3)"
  step_of free 2 nodelist-file | cmp -s - <(sed -n '1,5p;7,2047p' hosts) || fail "free: attempt 1's hosts"
  PATH=$work/fake:$PATH FAKE_LOG=$work/free-r FAKE_HOSTS=$work/hosts FAKE_STEP=stop FAKE_CALLS=$work/free-r.calls \
    SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=x "$baton" resume r-free --launcher slurm --worker "$worker" \
    --listen 127.0.0.1 >run.out 2>&1
  [[ $(step_of free-r 1 exclude-file) == "$(h 5)" ]] || fail "free: resume did not exclude node5 again"
  # the failed task's host dead (and sinfo failing): found by the one step
  probe_run dead taskfail FAKE_TASKHOST="$(h 7)" FAKE_DEAD="$(h 7)" FAKE_SINFO=fail
  calls_are dead sinfo "probe 2046 $(h 0)"
  grep -q "warning: cannot read Slurm's node states ('sinfo --Node' failed (status 1): sinfo: error: Unable to contact slurm controller)" dead.out ||
    fail "dead: sinfo's failure not said"
  nodes_are dead node7
  # a host's launch failing with words that would end the job ("revoked"): that host's
  probe_run revoked taskfail FAKE_TASKHOST="$(h 7)" FAKE_DEAD="$(h 9)" FAKE_DEAD_WHY="Job credential revoked"
  [[ $? == 75 ]] || fail "revoked: stopped: $(tail -3 revoked.out)"
  calls_are revoked sinfo "probe 2046 $(h 0)"
  nodes_are revoked node9
  # one host silent (srun says nothing of it), Slurm nothing against it asked again: excluded
  probe_run mute taskfail FAKE_TASKHOST="$(h 7)" FAKE_MUTE="$(h 9)"
  calls_are mute sinfo "probe 2046 $(h 0)" sinfo
  [[ $(excluded mute) == "baton run: node9 (Slurm host $(h 9), job 4242) lost: no answer from $(h 9) to a probe step on 2046 hosts of job 4242, which failed (status 1); excluded" ]] ||
    fail "mute: not node9 alone excluded: $(excluded mute | head -3)"
  # the step cut off at its limit (15 s + 2 ms a host), 846 hosts not answered yet: a slow
  # launch, not lost hosts
  LIMIT=30 probe_run slow silent FAKE_PROBE=slow
  LIMIT=30 calls_are slow sinfo "probe 2046 $(h 0)" sinfo
  grep -q "no answer from 846 of the 2046 hosts probed, and neither srun nor Slurm has anything against them (the probe step did not finish in 19 s): more than 1 in 100, taken for a slow or failing step, not lost hosts; none of them excluded" slow.out ||
    fail "slow: not said: $(grep -v 'lost: no answer' slow.out | tail -3)"
  nodes_are slow
  step_of slow 2 nodelist-file | cmp -s - <(head -n 2046 hosts) || fail "slow: attempt 1's hosts"
  # the step refused as a whole: node9 went down after the first sinfo; the second has it
  probe_run refuse silent FAKE_PROBE=refuse FAKE_DOWN2="$(h 9)"
  calls_are refuse sinfo "probe 2046 $(h 0)" sinfo
  grep -q "a probe step failed on every host probed (2046: .*Requested node configuration is not available): not a host's fault, none excluded on its word" refuse.out ||
    fail "refuse: not said"
  [[ $(excluded refuse) == "baton run: node9 (Slurm host $(h 9), job 4242) lost: Slurm has $(h 9) in state down* (reason: Not responding); excluded" ]] ||
    fail "refuse: not node9 alone excluded: $(excluded refuse | head -3)"
  # probes failing on every host, Slurm having nothing against any: nobody excluded
  probe_run nowhere silent FAKE_PROBE=fail
  calls_are nowhere sinfo "probe 2046 $(h 0)" sinfo
  grep -q "a probe step failed on every host probed (2046: .*Requested node configuration is not available): not a host's fault, none excluded on its word" nowhere.out ||
    fail "nowhere: not said"
  nodes_are nowhere
  step_of nowhere 2 nodelist-file | cmp -s - <(head -n 2046 hosts) || fail "nowhere: attempt 1's hosts"
  # every host draining (scontrol reboot ASAP): they run their job's steps; none excluded
  probe_run draining taskfail FAKE_TASKHOST="$(h 7)" FAKE_ALLSTATE="draining@ Reboot ASAP"
  calls_are draining sinfo "probe 2046 $(h 0)"
  nodes_are draining
  # Slurm has every host down*: its own trouble, none excluded on its word, none probed
  probe_run alldown silent FAKE_ALLSTATE="down* Not responding"
  calls_are alldown sinfo
  grep -q "Slurm has 2046 of the attempt's 2046 hosts down, failing or not responding (Slurm has $(h 0) in state down\* (reason: Not responding)): more than half, taken for Slurm's own trouble, not lost hosts; none of them excluded on its word" alldown.out ||
    fail "alldown: not said: $(tail -3 alldown.out)"
  nodes_are alldown
  step_of alldown 2 nodelist-file | cmp -s - <(head -n 2046 hosts) || fail "alldown: attempt 1's hosts"
  # the probe says the job is ending and squeue agrees: a stop, nothing excluded, no other
  # attempt
  probe_run ending taskfail FAKE_TASKHOST="$(h 7)" FAKE_PROBE=expired
  rc=$?
  [[ $rc == 75 ]] || fail "ending: exit $rc, expected 75"
  grep -q "Slurm job 4242 is ending (srun: error: Unable to create step for job 4242: Job/step already completing or completed): stopping, nothing excluded" ending.out ||
    fail "ending: not said: $(tail -3 ending.out)"
  [[ $(grep -c '^---- srun' ending) == 1 && -z $(excluded ending) ]] || fail "ending: went on"
  # ... and squeue has it RUNNING: no verdict from the step, the run goes on
  probe_run notending taskfail FAKE_TASKHOST="$(h 7)" FAKE_PROBE=expired-word
  [[ $? == 75 && $(grep -c '^---- srun' notending) == 2 ]] || fail "notending: stopped: $(tail -3 notending.out)"
  grep -q "a probe step said the job is ending (srun: error: Unable to create step for job 4242: Job/step already completing or completed) but squeue has job 4242 RUNNING: no host judged by the step" notending.out ||
    fail "notending: not said: $(tail -3 notending.out)"
  nodes_are notending
  
;;
node-cap)
  recipe_of cap 16385 0 0
  recipe_of capspare 16384 1 0
  for r in cap capspare; do
    expect=cluster.nodes
    [[ $r == capspare ]] && expect=cluster.spare_nodes
    for cmd in "run $r.yaml --run-dir r-$r --quiet" "submit $r.yaml --run-dir s-$r --dry-run"; do
      "$baton" $cmd >run.out 2>&1
      rc=$?
      [[ $rc == 2 ]] || fail "$cmd: exit $rc, expected 2"
      grep -q "^$r.yaml:3:[0-9]*: $expect: 1638[45] nodes + [01] spare_nodes is more than the 16384 nodes a run takes" run.out ||
        fail "$cmd: not refused naming the cap and $expect"
    done
    [[ ! -e r-$r && ! -e s-$r ]] || fail "a refused $r made its run directory"
    "$baton" plan $r.yaml >plan.out 2>run.out || fail "plan $r.yaml failed"
    grep -q "^$r.yaml:3:[0-9]*: warning: $expect: .* is more than the 16384 nodes a run takes: baton run and submit refuse this cluster" run.out ||
      fail "plan $r.yaml: no warning"
  done
  "$baton" submit cap.yaml --run-dir s --dry-run --set cluster.nodes=64 \
    --set cluster.spare_nodes=4294967232 >run.out 2>&1
  [[ $? == 2 ]] && grep -q "64 nodes + 4294967232 spare_nodes is more than the 4194304 baton plans for (its device limit)" run.out ||
    fail "spare_nodes wrapping nodes + spare_nodes past 2^32 not refused"
  ;;
local-nodes)
  cat >fakeworker <<EOF
#!/bin/sh
case "\$1" in --version) exec "$worker" --version ;; esac
echo "\${PMIX_RANK:-?}" >>"$work/started"
exit 2
EOF
  chmod +x fakeworker
  recipe_of many 260 0 0
  "$baton" run many.yaml --run-dir r --worker "$work/fakeworker" >run.out 2>&1
  rc=$?
  [[ $rc == 2 ]] || fail "exit $rc, expected 2 (the workers' configuration error)"
  grep -q "shrinks\|lost" run.out && fail "nodes taken for lost"
  [[ $(sort -un started | wc -l) == 260 ]] || fail "$(sort -un started | wc -l) of 260 ranks started"
  ;;
*) fail "unknown case" ;;
esac
echo "$case: ok"
