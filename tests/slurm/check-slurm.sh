#!/usr/bin/env bash
# `baton run --launcher slurm` on a real Slurm test cluster (deploy/slurm/test-cluster.sh:
# munged, slurmctld and two slurmd, each test host in a network namespace of its own).
# CASE:
#   losses    tests/run/run.yaml shortened (three stages: tp2 x pp2, dp4, tp2 x dp2 fp8),
#             4 ranks on 2 test hosts through `srun --mpi=pmix` inside `salloc`: every
#             per-step loss in metrics.jsonl must equal the local launcher's exactly, and
#             the journal's topology must show ranks on both hosts. An allocation with
#             fewer CPUs than ranks ends with exit 2 (Slurm's refusal, not retried).
#   nodeloss  the same recipe through `baton submit` (sbatch); mid-way through the fp8
#             stage every process of test host bt-n1 (its slurmd, slurmstepd and workers)
#             is killed: the run must finish on bt-n0 with dp 2 -> 1, the journal must show
#             node1 excluded, and the final losses must match the uninterrupted local
#             run's: pretrain's and extend's within 1e-5, fp8's within 1e-3 (the shrunk
#             layout sums in another order, which fp8 turns into quantization steps: a
#             dp2 -> dp1 resume of this fp8 stage measured 1.6e-5 .. 3.3e-5 at step 40 in
#             one process group, 6.2e-5 at its worst step; 1e-3 is the engine tests' fp8
#             bound, tests/engine/layout-lib.sh). Then bt-n1 comes back and a stage is
#             appended: a new job (sbatch run/baton.sbatch) must run it on both hosts,
#             the exclusion having been the earlier job's.
#   requeue   the same through `baton submit ... --requeue`; `scontrol requeue` mid-way
#             through fp8 (Slurm's SIGTERM: the workers checkpoint, baton exits 75); the
#             job runs again, `baton resume` continues from that checkpoint, and every
#             stage ends on exactly the uninterrupted run's loss.
#   stop      `baton submit ... --export=BATON_COMM_SHM` (sbatch's --export without ALL
#             must not reach baton's steps); mid-way through fp8 the workers get Slurm's
#             SIGTERM before baton does and the job is cancelled (a time limit's race):
#             the run must be stopped, no host excluded, and `sbatch run/baton.sbatch`
#             must finish it on exactly the uninterrupted run's losses.
#   orphan    baton run --launcher slurm SIGKILLed mid-way through fp8 inside an allocation
#             that outlives it: every worker gone within 10 s (srun dies with baton, and
#             Slurm ends its step), and `baton resume` completes the run on exactly the
#             uninterrupted run's losses.
#   batonterm baton run --launcher slurm itself SIGTERMed mid-way through fp8 inside an
#             allocation: the workers get the stop as SIGTERM (not srun's SIGKILL), save a
#             stop checkpoint and exit 75, baton exits 75, and `baton resume` continues
#             fp8 from that step on exactly the uninterrupted run's losses. Then a SIGTERM
#             to baton after pretrain's last step (its ranks exited 0, held by a wrapper):
#             srun exits 0 as its tasks do, and pretrain counts as complete.
#   build     a worker of another build (this build's, its version changed in the binary)
#             given with --worker, 4 ranks on 2 test hosts inside an allocation that
#             outlives baton: refused at its Hello, exit 2, not retried, named; once baton
#             has exited no worker runs and no step of the job is left (srun SIGKILLed, the
#             step's tasks cancelled with SIGKILL), and no step was trained, nothing saved
#             (srun killed alone, the tasks went on: the stage trained and checkpoints saved).
#   lostreply `baton submit` whose sbatch queues the job but fails as on a reply lost on its
#             way back ("Socket timed out on send/recv operation"): the run directory is
#             kept, the squeue command the message gives finds the job, and the job
#             completes the run there.
#   quoting   `baton submit` with a run directory and a working directory holding a space,
#             quotes, '$', '`', '#' and '%', a job name with spaces and a comment with
#             quotes: the real sbatch takes the script (the --dry-run one, byte for byte),
#             squeue shows the name, and the job completes the run there.
# Teardown (the cluster, every process) happens on any exit. Exit 77 (SKIPPED, with the
# reason) only when this machine cannot host the cluster: not root, no network
# namespaces, Slurm or munge not installed.
#   check-slurm.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
baton=$1 worker=$2 src=$3 case=$4
# One test cluster per machine (fixed namespace names and addresses, /tmp/baton-slurm-test).
# ctest's RESOURCE_LOCK keeps the cases of one ctest run apart, but a case of a second run
# (another build's, a CI clone's) would start its own cluster by bringing this one down
# under the running case ("salloc ended before the fp8 stage's step 8", or a hang). So the
# whole case runs under a machine-wide lock, and a second one waits for it (up to 300 s).
# flock -o: the lock's descriptor is not passed on, so no daemon the case starts holds it.
lock=/tmp/baton-slurm-test.lock
if [[ $(id -u) -eq 0 && -z ${BATON_SLURM_TEST_LOCK_HELD:-} ]]; then # else SKIPPED below
  set +e
  BATON_SLURM_TEST_LOCK_HELD=1 flock -o -E 99 -w 300 "$lock" bash "$0" "$@"
  rc=$?
  [[ $rc != 99 ]] || echo "slurm.$case: FAILED: another test cluster held $lock for 300 s" >&2
  exit $((rc == 99 ? 1 : rc))
fi
# The test hosts stand for machines that share no /dev/shm: every group on Gloo (TCP), as
# there, for the local reference runs too, so that their sums are in the same order.
export BATON_COMM_SHM=0
cluster=$src/deploy/slurm/test-cluster.sh
cdir=/tmp/baton-slurm-test
work=$(mktemp -d /tmp/baton-test-slurm.XXXXXX)
apid=
cleanup() {
  [[ -n $apid ]] && kill -9 "$apid" 2>/dev/null
  "$cluster" down --dir "$cdir" >/dev/null 2>&1 || true
  pkill -9 -f -- "--spec $work/" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# On a failure the outputs and the daemons' logs are shown: the cluster's go with it.
fail() { { echo "slurm.$case: FAILED: $*"; for f in "$work"/*.out "$work"/run/slurm-*.out; do
  [[ -f $f ]] && { echo "--- $f"; tail -n 25 "$f"; }; done
  for f in "$cdir"/log/slurm*.log; do [[ -f $f ]] && { echo "--- $f"; tail -n 12 "$f"; }; done; } >&2
  exit 1; }

set +e
"$cluster" up --nodes 2 --dir "$cdir" 2>"$work/up.err"
rc=$?
set -e
if [[ $rc -eq 77 ]]; then
  echo "SKIPPED: slurm.$case: $(cat "$work/up.err")"
  exit 77
fi
[[ $rc -eq 0 ]] || fail "the test cluster did not come up: $(cat "$work/up.err")"
export SLURM_CONF=$cdir/slurm.conf

cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
recipe=$src/tests/run/run.yaml
fp8_steps=$([[ $case == losses ]] && echo 6 || echo 40)
sets=(--set stages.pretrain.steps=6 --set stages.extend.steps=4 --set stages.fp8.steps=$fp8_steps)

# per_step DIR: "stage step loss" per line of metrics.jsonl
per_step() {
  /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1] + "/metrics.jsonl"):
    d = json.loads(l)
    print(d["stage"], d["step"], repr(d["loss"]))' "$1"
}

secs() { /usr/bin/python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
# wait_step JOB N: until the fp8 stage logged step N (the job must still run)
wait_step() {
  for ((i = 0; i < 600; i++)); do
    grep -q "\"stage\": \"fp8\".*\"step\": $2," run/metrics.jsonl 2>/dev/null && return 0
    squeue -h -j "$1" 2>/dev/null | grep . >/dev/null || fail "job $1 ended before the fp8 stage's step $2"
    sleep 0.2
  done
  fail "job $1 did not reach the fp8 stage's step $2 within 120 s"
}
# wait_done JOB: until Slurm no longer lists the job
wait_done() {
  for ((i = 0; i < 900; i++)); do
    squeue -h -j "$1" 2>/dev/null | grep . >/dev/null || return 0
    sleep 0.2
  done
  fail "job $1 still runs after 180 s"
}
# final_losses TOL [STAGE STAGE_TOL]: every stage's last logged step and loss, slurm vs
# local, within TOL (relative; 0: exactly), STAGE's within STAGE_TOL
final_losses() {
  /usr/bin/python3 - local run "$@" <<'PY'
import json, sys
def last(d):
    out = {}
    for l in open(d + "/metrics.jsonl"):
        m = json.loads(l)
        out[m["stage"]] = (m["step"], m["loss"])
    return out
a, b = last(sys.argv[1]), last(sys.argv[2])
own = {sys.argv[4]: float(sys.argv[5])} if len(sys.argv) > 5 else {}
ok = a.keys() == b.keys()
for s in a:
    r = abs(a[s][1] - b[s][1]) / abs(a[s][1])
    tol = own.get(s, float(sys.argv[3]))
    print("%-9s step %d: slurm %.7f local %.7f (relative %.2g)" % (s, b[s][0], b[s][1], a[s][1], r))
    ok = ok and a[s][0] == b[s][0] and r <= tol
sys.exit(0 if ok else 1)
PY
}
t0=$(date +%s.%N)
if [[ $case != quoting && $case != build && $case != lostreply ]]; then # the others' reference
  "$baton" run "$recipe" --run-dir local "${sets[@]}" --quiet >local.out 2>&1 ||
    fail "the local run failed"
fi
t1=$(date +%s.%N)

case $case in
losses)
  salloc --nodes=2 --ntasks-per-node=2 --no-kill --quiet --time=5 \
    "$baton" run "$recipe" --run-dir run --launcher slurm "${sets[@]}" >slurm.out 2>&1 &
  apid=$!
  wait $apid || fail "baton run --launcher slurm exited $?"
  apid=
  grep -rqs "collectives over Gloo (TCP), as BATON_COMM_SHM=0 asks" run/logs/ ||
    fail "the workers under srun did not run their collectives over Gloo"
  t2=$(date +%s.%N)
  per_step local >local.losses
  per_step run >slurm.losses
  [[ $(wc -l <local.losses) -eq 16 ]] || fail "the local run logged $(wc -l <local.losses) steps, not 16"
  diff local.losses slurm.losses >/dev/null ||
    fail "per-step losses differ: $(diff local.losses slurm.losses | head -8)"
  strings run/journal | grep "bt-n0 bt-n1" >/dev/null || fail "the journal's topology has no group spanning bt-n0 and bt-n1"
  grep -q "srun --mpi=pmix\|Slurm job" slurm.out || fail "slurm.out does not show the Slurm launcher"
  # An allocation with fewer CPUs than ranks: Slurm refuses the step; a configuration
  # error (exit 2) after one attempt, not retried, with Slurm's words and the fix.
  set +e
  salloc --nodes=2 --ntasks-per-node=1 --no-kill --quiet --time=5 \
    "$baton" run "$recipe" --run-dir small --launcher slurm "${sets[@]}" >small.out 2>&1
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "a too small allocation: baton run exited $rc, not 2"
  grep -q "Unable to create step.*--ntasks-per-node" small.out || fail "no clear error: $(tail -3 small.out)"
  grep -q "not retried" small.out || fail "the refused step was retried"
  echo "slurm.losses: 16 per-step losses equal to the local launcher's" \
    "(local $(secs "$t0" "$t1") s, slurm $(secs "$t1" "$t2") s)"
  ;;
nodeloss)
  "$baton" submit "$recipe" --run-dir "$work/run" "${sets[@]}" --time=5 >submit.out 2>&1 ||
    fail "baton submit failed: $(cat submit.out)"
  job=$(head -n 1 submit.out)
  [[ $job =~ ^[0-9]+$ ]] || fail "baton submit printed '$job', not a job id"
  grep -q "^#SBATCH --time=5$" run/baton.sbatch || fail "the sbatch option is not in the script"
  wait_step "$job" 8
  "$cluster" kill-host bt-n1 --dir "$cdir" >kill.out
  wait_done "$job"
  t2=$(date +%s.%N)
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the run did not complete: $(head -c 400 status.json)"
  strings run/journal | grep "node1 (Slurm host bt-n1, job $job) lost" >/dev/null || fail "the journal shows no exclusion of node1"
  grep -q "data parallelism shrinks from 2 to 1" run/slurm-"$job".out || fail "no dp shrink reported"
  ! grep -q "cannot read Slurm's node states" run/slurm-"$job".out ||
    fail "this Slurm's sinfo refused baton's: $(grep "cannot read Slurm's node states" run/slurm-"$job".out)"
  why=$(grep -o "node1 (Slurm host bt-n1, job $job) lost: .*" run/slurm-"$job".out | head -n 1)
  final_losses 1e-5 fp8 1e-3 || fail "final losses differ"
  # bt-n1 back (its slurmd again), a stage appended: a new job on both hosts uses both,
  # as the exclusion belonged to the job that lost bt-n1.
  nsenter --net=/var/run/netns/bt-n1 slurmd -f "$SLURM_CONF" -N bt-n1
  for ((i = 0; i < 150; i++)); do
    [[ $(sinfo -h -n bt-n1 -o %t 2>/dev/null) == idle ]] && break
    sleep 0.2
  done
  printf '  - name: more\n    steps: 2\n    parallel: {tp: 1, pp: 1, dp: 4}\n' >>run/recipe.yaml
  job2=$(sbatch --parsable run/baton.sbatch) || fail "sbatch run/baton.sbatch failed"
  wait_done "$job2"
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the extended run did not complete: $(head -c 400 status.json)"
  ! grep -q "data parallelism shrinks" run/slurm-"$job2".out ||
    fail "job $job2 (bt-n1 healthy) ran shrunk: an earlier job's exclusion was kept"
  grep -A1 "^\[more\] topology of attempt" run/slurm-"$job2".out | grep bt-n1 >/dev/null ||
    fail "the appended stage did not run on bt-n1 in job $job2"
  echo "slurm.nodeloss: bt-n1 killed mid-stage, node1 excluded ($why), dp 2 -> 1;" \
    "submitted run completed in $(secs "$t1" "$t2") s; a later job used bt-n1 again"
  ;;
requeue)
  "$baton" submit "$recipe" --run-dir "$work/run" "${sets[@]}" --time=5 --requeue \
    >submit.out 2>&1 || fail "baton submit failed: $(cat submit.out)"
  job=$(head -n 1 submit.out)
  wait_step "$job" 8
  scontrol requeue "$job" || fail "scontrol requeue $job failed"
  # Slurm holds a requeued job back for a while (BeginTime); let it start again now, but
  # only once the old run's steps are gone (no node still completing, and a second more):
  # released sooner, Slurm can kill it as "non-startable: Job credential revoked".
  for ((i = 0; i < 150; i++)); do
    [[ $(squeue -h -j "$job" -o %T 2>/dev/null) == PENDING &&
      -z $(sinfo -h -t completing -o %N 2>/dev/null) ]] && break
    sleep 0.2
  done
  sleep 1
  scontrol update JobId="$job" StartTime=now || fail "cannot release requeued job $job"
  wait_done "$job"
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the run did not complete: $(head -c 400 status.json)"
  grep -q "restart count 1" run/slurm-"$job".out || fail "the job did not run a second time"
  from=$(sed -n 's/^\[fp8\] started from .* at step \([0-9]*\) .*/\1/p' run/slurm-"$job".out | tail -n 1)
  [[ -n $from && $from -ge 8 ]] || fail "the requeued job did not resume fp8 from its stop checkpoint (from '$from')"
  final_losses 0 || fail "final losses differ from the uninterrupted run"
  echo "slurm.requeue: requeued at fp8 step 8, resumed from step $from, losses exact;" \
    "$(secs "$t1" "$(date +%s.%N)") s"
  ;;
stop)
  # --export=BATON_COMM_SHM: sbatch's --export without ALL (NONE plus that variable) must
  # not reach baton's own steps (SLURM_EXPORT_ENV), or the workers lose baton's variables.
  "$baton" submit "$recipe" --run-dir "$work/run" "${sets[@]}" --time=5 \
    --export=BATON_COMM_SHM >submit.out 2>&1 || fail "baton submit failed: $(cat submit.out)"
  job=$(head -n 1 submit.out)
  wait_step "$job" 8
  # The workers get Slurm's SIGTERM before baton does, as at a time limit: baton held,
  # the steps signalled, the job then cancelled; baton goes on once the job is ending.
  bp=$(ip netns pids bt-n0 | xargs -r ps -o pid=,comm= -p | awk '$2 == "baton" {print $1}')
  [[ -n $bp ]] || fail "no baton process on bt-n0"
  kill -STOP "$bp"
  scancel --signal=TERM "$job"
  for ((i = 0; i < 100; i++)); do
    ip netns pids bt-n1 | xargs -r ps -o comm= -p | grep baton-worker >/dev/null || break
    sleep 0.1
  done
  sleep 1
  scancel "$job"
  kill -CONT "$bp"
  wait_done "$job"
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "stopped"' status.json || fail "the run did not stop: $(head -c 400 status.json)"
  ! strings run/journal | grep "excluded" >/dev/null || fail "a host was excluded: $(strings run/journal | grep excluded)"
  job2=$(sbatch --parsable run/baton.sbatch) || fail "sbatch run/baton.sbatch failed"
  wait_done "$job2"
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the resubmitted run did not complete: $(head -c 400 status.json)"
  ! strings run/journal | grep "excluded" >/dev/null || fail "a host was excluded: $(strings run/journal | grep excluded)"
  final_losses 0 || fail "final losses differ from the uninterrupted run"
  echo "slurm.stop: workers stopped by Slurm before baton (--export without ALL): no host" \
    "excluded, resumed in job $job2, losses exact; $(secs "$t1" "$(date +%s.%N)") s"
  ;;
orphan)
  # baton killed (SIGKILL: the OOM killer, say) inside an allocation that outlives it: its
  # srun dies with it (PR_SET_PDEATHSIG), and Slurm ends the step, so no worker trains on
  # unsupervised (measured: gone within 0.1 s, Slurm 22.05); then `baton resume` in a new
  # allocation finishes on exactly the uninterrupted run's losses.
  salloc --nodes=2 --ntasks-per-node=2 --no-kill --quiet --time=5 bash -c \
    '"$0" run "$1" --run-dir run --launcher slurm "${@:2}" >slurm.out 2>&1 & echo $! >baton.pid; wait; for ((i = 0; i < 600; i++)); do [[ -e alloc.done ]] && break; sleep 0.2; done' \
    "$baton" "$recipe" "${sets[@]}" &
  apid=$!
  for ((i = 0; i < 600; i++)); do
    grep -q '"stage": "fp8".*"step": 8,' run/metrics.jsonl 2>/dev/null && break
    kill -0 "$apid" 2>/dev/null || fail "salloc ended before the fp8 stage's step 8"
    sleep 0.2
  done
  job=$(squeue -h -o %i | head -n 1)
  [[ -n $job ]] || fail "no allocation listed"
  pgrep -f -- "--spec $work/" >/dev/null || fail "no worker runs at fp8 step 8"
  kill -9 "$(cat baton.pid)"
  for ((i = 0; i < 100; i++)); do
    pgrep -f -- "--spec $work/" >/dev/null || break
    sleep 0.1
  done
  gone_s=$((i / 10)).$((i % 10))
  ! pgrep -af -- "--spec $work/" || fail "workers still run 10 s after baton was killed"
  squeue -h -j "$job" | grep . >/dev/null || fail "the allocation ended with baton: nothing was shown"
  touch alloc.done # the allocation's shell waits for this (up to 120 s) rather than sleeping 120 s
  scancel "$job"
  wait "$apid" 2>/dev/null || true
  apid=
  wait_done "$job"
  salloc --nodes=2 --ntasks-per-node=2 --no-kill --quiet --time=5 \
    "$baton" resume run --launcher slurm >resume.out 2>&1 || fail "baton resume --launcher slurm exited $?"
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the resumed run did not complete: $(head -c 400 status.json)"
  final_losses 0 || fail "final losses differ from the uninterrupted run"
  echo "slurm.orphan: baton killed at fp8 step 8: its workers were gone ${gone_s} s later, the resume" \
    "completed on exactly the uninterrupted run's losses; $(secs "$t1" "$(date +%s.%N)") s"
  ;;
batonterm)
  # baton run itself gets SIGTERM mid-way through fp8 (--signal=B:TERM@120, baton stop):
  # the stop must reach the workers as SIGTERM (scancel --signal=TERM on the step), not as
  # srun's "forcing job termination" (SIGKILL to every task): they write a stop checkpoint
  # at the step they were at and exit 75, baton exits 75, and `baton resume` continues
  # from that step to exactly the uninterrupted run's losses.
  salloc --nodes=2 --ntasks-per-node=2 --no-kill --quiet --time=5 bash -c \
    '"$0" run "$1" --run-dir run --launcher slurm "${@:2}" >slurm.out 2>&1 & echo $! >baton.pid
     wait $!; echo $? >baton.rc' "$baton" "$recipe" "${sets[@]}" &
  apid=$!
  for ((i = 0; i < 600; i++)); do
    grep -q '"stage": "fp8".*"step": 8,' run/metrics.jsonl 2>/dev/null && break
    kill -0 "$apid" 2>/dev/null || fail "salloc ended before the fp8 stage's step 8"
    sleep 0.2
  done
  kill -TERM "$(cat baton.pid)"
  wait "$apid" 2>/dev/null || true
  apid=
  [[ $(cat baton.rc 2>/dev/null) == 75 ]] || fail "baton run exited $(cat baton.rc 2>/dev/null), not 75"
  ! grep -q "forcing job termination" slurm.out || fail "srun got the SIGTERM: $(grep forcing slurm.out)"
  grep -q "got SIGTERM: asking the workers to checkpoint and stop" slurm.out ||
    fail "baton did not say the stop"
  ! pgrep -af -- "--spec $work/" || fail "workers still run after baton exited"
  salloc --nodes=2 --ntasks-per-node=2 --no-kill --quiet --time=5 \
    "$baton" resume run --launcher slurm >resume.out 2>&1 || fail "baton resume --launcher slurm exited $?"
  from=$(sed -n 's/^\[fp8\] started from .* at step \([0-9]*\) .*/\1/p' resume.out | tail -n 1)
  [[ -n $from && $from -ge 8 ]] ||
    fail "the resume did not continue fp8 from the stop checkpoint (from '$from'; periodic ones every 5 steps)"
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the resumed run did not complete: $(head -c 400 status.json)"
  final_losses 0 || fail "final losses differ from the uninterrupted run"
  # The stop after a stage's last step: the ranks of pretrain's attempt exited 0 and are
  # held (a wrapper; held.PID made) when baton gets SIGTERM; the held ones end with their
  # worker's 0 on that SIGTERM, so srun exits 0 and the stage counts as complete (srun's
  # own SIGTERM would have SIGKILLed them: not complete, pretrain trained again).
  cat >held-worker <<WRAPPER
#!/usr/bin/env bash
"$worker" "\$@"; rc=\$?
if [[ \$rc == 0 && "\$*" == *"/specs/s00-a00.pb"* ]]; then
  trap 'exit \$rc' TERM
  : >"$work/held.\$\$"
  for ((i = 0; i < 1200; i++)); do [[ -e "$work/release" ]] && break; sleep 0.05 & wait \$!; done
fi
exit \$rc
WRAPPER
  chmod +x held-worker
  salloc --nodes=2 --ntasks-per-node=2 --no-kill --quiet --time=5 bash -c \
    '"$0" run "$1" --run-dir fin --launcher slurm "${@:2}" >fin.out 2>&1 & echo $! >fin.pid
     wait $!; echo $? >fin.rc' "$baton" "$recipe" --worker "$work/held-worker" \
    --set stages.pretrain.steps=6 --set stages.1.steps=2 --set stages.fp8.steps=2 &
  apid=$!
  for ((i = 0; i < 600; i++)); do
    [[ $(ls held.* 2>/dev/null | wc -l) -ge 4 ]] && break
    kill -0 "$apid" 2>/dev/null || fail "salloc ended before pretrain's 4 ranks were held"
    sleep 0.2
  done
  kill -TERM "$(cat fin.pid)"
  for ((i = 0; i < 100; i++)); do
    grep -q "got SIGTERM: asking the workers" fin.out && break
    sleep 0.1
  done
  : >release
  wait "$apid" 2>/dev/null || true
  apid=
  [[ $(cat fin.rc 2>/dev/null) == 75 ]] || fail "a stop after pretrain's end: exit $(cat fin.rc 2>/dev/null), not 75"
  grep -q 'stage "pretrain": the stop came after its last step' fin.out ||
    fail "pretrain's completion under the stop was not said: $(tail -4 fin.out)"
  grep -q 'stopping before stage "extend"' fin.out || fail "no stop before extend: $(tail -4 fin.out)"
  echo "slurm.batonterm: baton SIGTERMed at fp8 step 8: workers saved a stop checkpoint, exit 75;" \
    "resumed from step $from, losses exact; a stop after pretrain's last step completed it;" \
    "$(secs "$t1" "$(date +%s.%N)") s"
  ;;
build)
  mkdir other && /usr/bin/python3 -c '
import sys
b = open(sys.argv[1], "rb").read()
o = b.replace(b"(git ", b"(gix ").replace(b"(src ", b"(srx ")
assert o != b
open(sys.argv[2], "wb").write(o)' "$worker" other/baton-worker && chmod +x other/baton-worker
  salloc --nodes=2 --ntasks-per-node=2 --no-kill --quiet --time=5 bash -c \
    '"$0" run "$1" --run-dir run --launcher slurm "${@:2}" >slurm.out 2>&1; echo $? >baton.rc
     for ((i = 0; i < 600; i++)); do [[ -e checked ]] && break; sleep 0.2; done' \
    "$baton" "$recipe" "${sets[@]}" --worker "$work/other/baton-worker" &
  apid=$!
  for ((i = 0; i < 600; i++)); do
    [[ -s baton.rc ]] && break
    kill -0 "$apid" 2>/dev/null || fail "salloc ended before baton did"
    sleep 0.1
  done
  [[ $(cat baton.rc 2>/dev/null) == 2 ]] || fail "baton run exited $(cat baton.rc 2>/dev/null), not 2"
  grep -q "failed: the worker is of another build: $work/other/baton-worker (rank [0-9] on .*(a configuration error: not retried)$" slurm.out ||
    fail "no refusal said: $(tail -3 slurm.out)"
  job=$(squeue -h -o %i | head -n 1)
  [[ -n $job ]] || fail "no allocation listed"
  ! pgrep -af -- "--spec $work/" || fail "workers of another build still run after baton exited"
  for ((i = 0; i < 100; i++)); do # a cancelled step is listed for a second or two
    [[ -z $(squeue -h --steps -j "$job" -o %j | grep -v '^extern$\|^interactive$') ]] && break
    sleep 0.1
  done
  ((i < 100)) || fail "steps of the job still run 10 s after baton exited: $(squeue -h --steps -j "$job")"
  # srun SIGKILLed alone left the tasks running: they trained the stage and saved
  [[ -z $(ls -A run/checkpoints 2>/dev/null) ]] || fail "the refused workers saved: $(ls run/checkpoints)"
  ! grep -q '"step"' run/metrics.jsonl 2>/dev/null || fail "the refused workers trained: $(head -2 run/metrics.jsonl)"
  touch checked # the allocation's command ends
  scancel "$job"
  wait "$apid" 2>/dev/null || true
  apid=
  echo "slurm.build: a worker of another build refused at its Hello under srun, exit 2; none" \
    "left running, no step left, nothing saved; $(secs "$t1" "$(date +%s.%N)") s"
  ;;
quoting)
  # A run directory and a working directory with a space, quotes, '$', '`', '#' and '%', a
  # job name with spaces, a comment with quotes and '#': sbatch takes the script (--hold,
  # so that squeue shows the job before it runs), the job runs in that working directory
  # with its output in that run directory, and the run completes.
  mkdir -p "$work/w d'x" && ln -s ../data "$work/w d'x/data" && cd "$work/w d'x"
  q="$work/q d'i\"r \$x \`y\` #z%w/run"
  qsets=(--set stages.fp32.steps=2 --set stages.bf16.steps=1 --set stages.fp8.steps=1
    --set defaults.optimizer.warmup_steps=1 --time=5 --hold --job-name "baton quoted job"
    --comment "it's \"q\" #1")
  prec=$src/tests/engine/precision.yaml
  "$baton" submit "$prec" --run-dir "$q" "${qsets[@]}" --dry-run >dry.out 2>&1 ||
    fail "baton submit --dry-run failed: $(cat dry.out)"
  cp "$q/baton.sbatch" "$work/dry.sbatch" && rm -rf "$work/q d'i\"r \$x \`y\` #z%w"
  "$baton" submit "$prec" --run-dir "$q" "${qsets[@]}" >submit.out 2>"$work/submit.err" ||
    fail "baton submit failed: $(cat "$work/submit.err")"
  job=$(head -n 1 submit.out)
  [[ $job =~ ^[0-9]+$ ]] || fail "baton submit printed '$job', not a job id"
  cmp -s "$work/dry.sbatch" "$q/baton.sbatch" || fail "the submitted script is not the --dry-run one"
  name=$(squeue -h -j "$job" -o %j)
  [[ $name == "baton quoted job" ]] || fail "squeue shows job $job as '$name'"
  info=$(scontrol show job "$job")
  grep -qF "Comment=it's \"q\" #1" <<<"$info" || fail "the job's comment: $(grep Comment <<<"$info")"
  grep -qxF "   WorkDir=$work/w d'x" <<<"$info" || fail "the job's working directory: $(grep WorkDir <<<"$info")"
  scontrol release "$job" || fail "scontrol release $job failed"
  wait_done "$job"
  "$baton" status "$q" --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the run did not complete: $(head -c 400 status.json)"
  grep -q "^baton: job $job on " "$q/slurm-$job.out" || fail "no job output in $q/slurm-$job.out"
  echo "slurm.quoting: sbatch took the quoted script, job '$name' ran in the quoted directories" \
    "and completed; $(secs "$t1" "$(date +%s.%N)") s"
  ;;
lostreply)
  # sbatch that queues the job but fails with the words of a reply lost on the way back
  # (slurmctld took the job, then "Socket timed out on send/recv operation"): baton submit
  # must keep the run directory, and the squeue command it gives must find the job, which
  # then runs there and completes the run.
  real=$(command -v sbatch)
  mkdir lost && cat >lost/sbatch <<WRAP
#!/bin/sh
"$real" "\$@" >"$work/real-sbatch.out" 2>&1
echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2
exit 1
WRAP
  chmod +x lost/sbatch
  set +e
  PATH="$work/lost:$PATH" "$baton" submit "$src/tests/engine/precision.yaml" --run-dir "$work/run" \
    --set stages.fp32.steps=2 --set stages.bf16.steps=1 --set stages.fp8.steps=1 \
    --set defaults.optimizer.warmup_steps=1 --time=5 >submit.out 2>&1
  rc=$?
  set -e
  [[ $rc == 1 ]] || fail "baton submit exited $rc, not 1: $(cat submit.out)"
  grep -q "^baton submit: kept $work/run: sbatch did not say that Slurm refused the job" submit.out ||
    fail "baton submit did not say it kept the run directory: $(cat submit.out)"
  [[ -f run/baton.sbatch ]] || fail "the run directory was removed"
  # the check the message gives: squeue --me --format=%i,%T,%o, the script's path
  grep -q "'squeue --me --format=%i,%T,%o'" submit.out || fail "no squeue command said"
  job=$(squeue --me --noheader --format=%i,%T,%o | grep -F ",$work/run/baton.sbatch" | cut -d, -f1)
  [[ $job =~ ^[0-9]+$ && $job == "$(cat real-sbatch.out)" ]] ||
    fail "squeue --format=%o does not find the job of $work/run/baton.sbatch ('$job'; sbatch said $(cat real-sbatch.out))"
  wait_done "$job"
  "$baton" status run --json >status.json || fail "baton status failed"
  grep -q '"state": "completed"' status.json || fail "the run did not complete: $(head -c 400 status.json)"
  echo "slurm.lostreply: sbatch queued job $job and lost the reply: the run directory was kept," \
    "squeue's script column found the job, and it completed the run; $(secs "$t1" "$(date +%s.%N)") s"
  ;;
*) echo "check-slurm.sh: unknown case $case" >&2; exit 2 ;;
esac
