#!/usr/bin/env bash
# `baton run` and what another local user could do to a run (plant a worker file or links
# in its run directory, flood its control port), the run directory's modes, the kept
# --worker and the open-files limit, with the helpers of run-common.sh. CASE:
#   fd-limit      32 ranks under `ulimit -n 120`: refused before any worker starts, exit 2,
#                 not retried (every attempt would fail alike on EMFILE), the limits and
#                 the count needed named; status says failed, not retryable.
#   worker-kept   a run started with --worker (a wrapper that logs each rank it starts,
#                 given by a relative path), stopped by SIGTERM, is resumed from another
#                 directory with no --worker: the wrapper starts its ranks again, and the
#                 resume says so; status shows it; an explicit --worker replaces it for
#                 that invocation (the kept one stays), said even under --quiet.
#   worker-planted  a `worker` file in a fresh run directory is never run (the new run
#                 removes it); in a run that started, one that another user could have
#                 written (the directory writable by group and others: the run directory
#                 itself refused; the file writable by its group, owned by another uid, a
#                 symbolic link) is refused by resume and run alike, exit 2, naming the
#                 file and why, and nothing is started.
#   control-flood  under `ulimit -n 128`, 400 idle connections to the control port (no
#                 Hello, each one dropped opened again, as any local user could) while a
#                 two-stage run goes on: baton holds few descriptors (the connections
#                 without a Hello are capped), the rank's own connection gets in, and the
#                 run completes, exit 0, across the stage boundary. Each rank holds its
#                 Hello back 1 s after its connect (BATON_FAULT_HELLO_DELAY), so the flood
#                 gets its connection dropped before the Hello is read: it connects again
#                 and keeps the channel.
#   run-dir-trust  a run under umask 000 leaves nothing in its run directory that group or
#                 others may read or write (files 0600, directories 0700); an existing run
#                 directory writable by group or others (0777, 0770; run and resume), or
#                 (as root) one another user made (0700, owned by nobody, with links in
#                 it), is refused, exit 2, naming it, its owner and mode; a symbolic link
#                 planted in one's own directory for the journal, metrics.jsonl,
#                 valid.jsonl, lock, secret, workdir, job_id, baton.sbatch (run and
#                 submit), recipe.yaml, overrides, specs/, logs/, checkpoints/, tb/
#                 or rolled-back/ is refused, exit 2, and nothing is written where it
#                 points; a secret file others may read is refused; a directory others may read is
#                 a warning that names the command (baton resume: warning: ...); a directory
#                 above it that anyone may rename entries in (0777, not sticky) is refused,
#                 exit 2, naming it, before the run directory is made (run and resume), a
#                 sticky one (1777) is not; a symbolic link on the path held in such a
#                 directory (or pointing under one) is refused alike; a plain file on the
#                 path is not called one (making the run directory says "Not a directory");
#                 (as root) one that a group or another user may (0775 of another group,
#                 0755 owned by nobody) is a warning naming it, except in a user namespace
#                 (unshare -r) for the overflow uid it shows for the users it does not map;
#                 (as root) a symbolic link on the path that another user planted in a
#                 sticky directory others may write is refused (run, submit, resume), one
#                 of one's own there followed.
#   check-trust.sh BATON BATON_WORKER SOURCE_DIR CASE
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run-common.sh"
case $case in
worker-kept)
  sets=(--set stages.pretrain.steps=12 --set stages.1.steps=2 --set stages.fp8.steps=2)
  mkdir bin
  printf '#!/bin/sh\necho "$PMIX_RANK $*" >>%q/wrap.log\nexec %q "$@"\n' "$work" "$worker" >bin/wrap.sh
  chmod +x bin/wrap.sh
  BATON_FAULT_STEP_SLEEP=0.15 "$baton" run "$recipe" --run-dir r1 --quiet "${sets[@]}" \
    --worker bin/wrap.sh >run.out 2>&1 &
  bpid=$!
  wait_step 0 3 >/dev/null
  stop_run
  [[ $(grep -c "s00-a00.pb" wrap.log) == 4 ]] || fail "the wrapper did not start attempt 0's 4 ranks"
  [[ $(cat r1/worker) == "$work/bin/wrap.sh" ]] || fail "r1/worker is '$(cat r1/worker)', not the wrapper's absolute path"
  mkdir elsewhere
  (cd elsewhere && "$baton" resume ../r1 >../resume.out 2>&1) || { cat resume.out; fail "resume failed"; }
  grep -qF "baton resume: worker $work/bin/wrap.sh, as the run was started with ($work/r1/worker)" resume.out ||
    { head -5 resume.out; fail "resume did not say which worker it runs"; }
  [[ $(grep -c "s00-a01.pb" wrap.log) == 4 ]] || fail "resume did not start pretrain's ranks through the wrapper"
  [[ $(grep -c "s02-a00.pb" wrap.log) == 4 ]] || fail "resume did not start fp8's ranks through the wrapper"
  "$baton" status r1 | grep -F "  worker: $work/bin/wrap.sh (the --worker the run was started with" >/dev/null ||
    { "$baton" status r1; fail "status does not show the run's worker"; }
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["state"] == "completed" and s["worker"] == sys.argv[1] and s["job_id"] is None, s' \
    "$work/bin/wrap.sh" || fail "status --json: no worker"
  # --worker given: it replaces the kept one for this invocation, which says so
  "$baton" resume r1 --quiet --worker "$worker" >again.out 2>&1 || { cat again.out; fail "resume --worker failed"; }
  grep -qF "baton resume: worker $worker (--worker), not the $work/bin/wrap.sh the run was started with" again.out ||
    { cat again.out; fail "resume --worker did not say it replaces the run's worker"; }
  [[ $(cat r1/worker) == "$work/bin/wrap.sh" ]] || fail "resume --worker changed the kept worker"
  echo "$case: the run's --worker kept ($(cat r1/worker)) and used by resume; --worker replaces it, said"
  ;;
fd-limit)
  # 32 ranks under `ulimit -n 120`: refused before any worker starts, exit 2, not retried
  # (every attempt would fail alike on EMFILE), the limits and the count needed named
  cat >wide.yaml <<'YAML'
name: wide
seed: 3
model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 176,
        vocab_size: 272, rope: {theta: 10000}}
cluster: {nodes: 2, gpus_per_node: 16, device: cpu}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults:
  seq_len: 32
  global_batch: 32
  micro_batch: 1
  parallel: {tp: 1, pp: 1, dp: 32}
  restart: {max_restarts: 3, backoff: 0.2s}
stages:
  - name: pretrain
    steps: 2
YAML
  set +e; (ulimit -n 120; "$baton" run wide.yaml --run-dir r1 >run.out 2>&1); rc=$?; set -e
  [[ $rc == 2 ]] || fail "baton run under ulimit -n 120 exited $rc, not 2"
  grep -Eq "^baton run: cannot launch the workers: 32 ranks need about [0-9]+ open files here .* RLIMIT_NOFILE allows 120 \(soft\) and 120 \(hard\)" run.out ||
    fail "no message naming the limits"
  ! grep -q "restarting stage" run.out || fail "the launch was retried"
  "$baton" status r1 --json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
fl = s["failure_list"]
assert s["state"] == "failed" and s["stages"][0]["attempts"] == 1, s
assert len(fl) == 1 and not fl[0]["retryable"] and "RLIMIT_NOFILE" in fl[0]["cause"], fl' ||
    fail "status after the refused launch"
  echo "$case: 32 ranks under ulimit -n 120 refused at once (exit 2), not retried"
  ;;
worker-planted)
  one_rank_recipe one '' '{name: a, steps: 2}' >one.yaml
  printf '#!/bin/sh\ntouch %q/pwned\nexec %q "$@"\n' "$work" "$worker" >evil.sh
  chmod 0755 evil.sh
  mkdir -m 0700 rp
  printf %s "$work/evil.sh" >rp/worker
  "$baton" run one.yaml --run-dir rp --quiet >run.out 2>&1 || fail "the run in a fresh directory failed"
  [[ ! -e pwned ]] || fail "a worker planted in a fresh run directory was run"
  [[ ! -e rp/worker ]] || fail "the planted rp/worker is still there"
  # refused: exit 2, naming the file and why; nothing run
  refused() { # WHY COMMAND...
    local why=$1 rc
    shift
    set +e; "$@" >ref.out 2>&1; rc=$?; set -e
    [[ $rc == 2 ]] || { cat ref.out; fail "$why: exit $rc, not 2"; }
    grep -qF "$work/rp/worker: the worker this run was started with is not used: $why" ref.out ||
      { cat ref.out; fail "$why: not said"; }
    [[ ! -e pwned ]] || fail "$why: the planted worker ran"
  }
  printf %s "$work/evil.sh" >rp/worker
  chmod 0777 rp
  for cmd in "resume rp --quiet" "run one.yaml --run-dir rp"; do
    set +e; "$baton" $cmd >ref.out 2>&1; rc=$?; set -e
    [[ $rc == 2 ]] && grep -qF "$work/rp: not used as a run directory: it is writable by group and others (mode 777)" ref.out ||
      { cat ref.out; fail "baton $cmd in a 0777 directory: exit $rc"; }
    [[ ! -e pwned ]] || fail "baton $cmd in a 0777 directory: the planted worker ran"
  done
  chmod 0700 rp
  chmod 0620 rp/worker
  refused "$work/rp/worker is writable by its group (mode 620)" "$baton" resume rp
  chmod 0600 rp/worker
  if [[ $(id -u) == 0 ]]; then
    chown 65534 rp/worker
    refused "$work/rp/worker is owned by uid 65534, not by you (uid 0)" "$baton" resume rp
    chown 0 rp/worker
  fi
  mv rp/worker target
  ln -s "$work/target" rp/worker
  set +e; "$baton" resume rp >ref.out 2>&1; rc=$?; set -e
  [[ $rc == 2 ]] && grep -qF "$work/rp/worker: cannot be read: a symbolic link" ref.out ||
    { cat ref.out; fail "a symbolic link for rp/worker: exit $rc"; }
  [[ ! -e pwned ]] || fail "the worker a symbolic link names was run"
  # the run's own worker, safe, is still taken (resume of the completed run)
  rm rp/worker
  printf %s "$worker" >rp/worker
  "$baton" resume rp >ok.out 2>&1 || { cat ok.out; fail "resume with a safe rp/worker failed"; }
  grep -qF "worker $worker, as the run was started with" ok.out || { cat ok.out; fail "the safe worker was not taken"; }
  echo "$case: a planted worker in a fresh directory never ran; refused in a started run (modes, owner, symlink)"
  ;;
control-flood)
  one_rank_recipe two '' '{name: a, steps: 4}' '{name: b, steps: 4}' >two.yaml
  # the rank waits for the flood before it starts (every attempt's rank alike)
  printf '#!/bin/sh\nwhile [ ! -e %q/go ]; do sleep 0.05; done\nexec %q "$@"\n' "$work" "$worker" >wait.sh
  chmod 0755 wait.sh
  (ulimit -n 128 && export BATON_FAULT_HELLO_DELAY=1 &&
    exec "$baton" run two.yaml --run-dir r1 --worker "$work/wait.sh") >run.out 2>&1 &
  bpid=$!
  wait_files r1/specs/s00-a00.pb 1 60 "the first attempt's spec"
  port=$(grep -aoE '127\.0\.0\.1:[0-9]+' r1/specs/s00-a00.pb | head -1 | cut -d: -f2)
  [[ -n $port ]] || fail "no control address in the spec"
  /usr/bin/python3 "$src/tests/run/flood.py" 127.0.0.1 "$port" 400 >flood.out &
  bg_pids=$!
  deadline=$((SECONDS + 30))
  until [[ -s flood.out ]]; do ((SECONDS < deadline)) || fail "the flood never started"; sleep 0.05; done
  sleep 2 # the connections held past a few rounds of eviction
  nfd=$(ls "/proc/$bpid/fd" | wc -l)
  ((nfd < 64)) || fail "baton run holds $nfd descriptors under the flood ($(cat flood.out))"
  touch go
  deadline=$((SECONDS + 120))
  while kill -0 "$bpid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -0 "$bpid" 2>/dev/null && fail "the run under the flood did not end within 120 s"
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  kill "$bg_pids"
  bg_pids=
  [[ $rc == 0 ]] || { cat run.out; fail "the run under the flood exited $rc"; }
  ! grep -h "control" r1/logs/*.log | grep -v "closed before baton run acknowledged the Hello" ||
    fail "a rank did not keep its control connection"
  grep -q "closed before baton run acknowledged the Hello" r1/logs/*.log ||
    fail "no rank's connection was dropped before its Hello (the test tests nothing)"
  [[ $(grep -c '"stage": "b"' r1/metrics.jsonl) == 4 ]] ||
    fail "metrics.jsonl lacks stage b's steps: $(cat r1/metrics.jsonl)"
  echo "$case: $(cat flood.out) idle connections; baton held $nfd descriptors and completed both stages;" \
    "$(cat r1/logs/*.log | grep -c "closed before baton run acknowledged the Hello") Hello(s) dropped and sent again"
  ;;
run-dir-trust)
  one_rank_recipe one '' '{name: a, steps: 2}' >one.yaml
  (umask 000 && "$baton" run one.yaml --run-dir r0 --quiet) >run.out 2>&1 || fail "the run under umask 000 failed"
  open=$(find r0 -perm /077 -printf '%m %p\n')
  [[ -z $open ]] || fail "under umask 000, open to group or others: $open"
  # refused: exit 2, the message, nothing written in DIR (no journal) nor through links
  echo ORIGINAL >victim
  mkdir -m 0700 vdir
  refused() { # DIR MESSAGE COMMAND...
    local dir=$1 msg=$2 rc
    shift 2
    set +e; "$baton" "$@" >ref.out 2>&1; rc=$?; set -e
    [[ $rc == 2 ]] && grep -qF "$msg" ref.out || { cat ref.out; fail "$dir: exit $rc, or not said: $msg"; }
    [[ $(cat victim) == ORIGINAL && -z $(ls -A vdir) ]] || fail "$dir: written through a planted link"
  }
  for mode in 777 770; do
    mkdir -m $mode rw$mode
    refused rw$mode "$work/rw$mode: not used as a run directory: it is writable by" run one.yaml --run-dir rw$mode
    [[ -z $(ls -A rw$mode) ]] || fail "rw$mode: written in: $(ls -A rw$mode)"
  done
  cp -a r0 rr
  chmod 0777 rr
  refused rr "$work/rr: not used as a run directory: it is writable by group and others (mode 777)" resume rr
  chmod 0700 rr
  for name in journal metrics.jsonl valid.jsonl lock specs logs checkpoints tb secret run_id workdir \
    job_id baton.sbatch recipe.yaml running-recipe.yaml overrides rolled-back; do
    mkdir -m 0700 "l-$name"
    case $name in specs | logs | checkpoints | tb | rolled-back) target=$work/vdir ;; *) target=$work/victim ;; esac
    ln -s "$target" "l-$name/$name"
    refused "l-$name" "$work/l-$name/$name: a symbolic link, which baton does not use in a run directory" \
      run one.yaml --run-dir "l-$name"
  done
  # baton submit writes its script through no planted link either
  refused l-baton.sbatch "$work/l-baton.sbatch/baton.sbatch: a symbolic link" \
    submit one.yaml --run-dir l-baton.sbatch --dry-run
  # a secret that is not the user's alone (planted, or left readable) is not the run's token
  mkdir -m 0700 s-open
  printf '%064d\n' 7 >s-open/secret && chmod 0644 s-open/secret
  refused s-open "$work/s-open/secret: not used as the run's secret: it is not yours alone" \
    run one.yaml --run-dir s-open
  # a link where an earlier run's file was, then resume
  mv rr/metrics.jsonl rr/m.old && ln -s "$work/victim" rr/metrics.jsonl
  refused rr "$work/rr/metrics.jsonl: a symbolic link" resume rr
  nb="setpriv --reuid=nobody --regid=nogroup --clear-groups"
  if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null && chmod 711 "$work" && $nb true 2>/dev/null; then
    mkdir -m 1777 shared
    $nb sh -c "mkdir -m 0700 shared/rn && ln -s $work/victim shared/rn/metrics.jsonl && ln -s $work/vdir shared/rn/tb"
    refused shared/rn "$work/shared/rn: not used as a run directory: it is owned by uid $(id -u nobody), not by you (uid 0) (mode 700)" \
      run one.yaml --run-dir shared/rn
    owner="another user's 0700 directory refused"
    # a symbolic link on the path that another user planted in a sticky directory others
    # may write (in /tmp: made first, to a directory of yours, and re-pointed at will) is
    # refused, as --out refuses one (run, submit, resume), nothing written where it
    # points; one of your own there is followed
    cp -a r0 vrun
    $nb sh -c "ln -s $work/vdir shared/planted && ln -s $work/vrun shared/prun"
    ln -s "$work/vrun" shared/own
    planted="not used as a run directory: the symbolic link $work/shared/planted on its path is uid $(id -u nobody)'s, in $work/shared, a sticky directory others may write (mode 1777)"
    refused shared/planted "shared/planted: $planted" run one.yaml --run-dir shared/planted
    refused shared/planted "shared/planted/r: $planted" submit one.yaml --run-dir shared/planted/r --dry-run
    refused shared/prun "shared/prun: ${planted//planted/prun}" resume shared/prun
    "$baton" resume shared/own >own.out 2>&1 || { cat own.out; fail "resume through a link of one's own in a sticky directory"; }
    owner+="; a link another user planted in a sticky directory refused"
  else
    owner="SKIPPED (not root, or no setpriv): another user's directory"
  fi
  chmod 0755 rr
  rm rr/metrics.jsonl && mv rr/m.old rr/metrics.jsonl
  "$baton" resume rr >warn.out 2>&1 || { cat warn.out; fail "resume in a 0755 directory failed"; }
  grep -qF "baton resume: warning: $work/rr is readable by other users (mode 755)" warn.out ||
    { cat warn.out; fail "no 'baton resume: warning:' for a 0755 run directory"; }
  # a directory above the run directory that anyone may rename entries in (0777, not
  # sticky) is refused, before the run directory is made, and for a run already there
  # (resume); sticky (1777, as /tmp) is fine
  mkdir -m 0777 ww && mkdir -m 0700 ww/mid
  refused ww "ww/mid/new: not used as a run directory: $work/ww, a directory above it, is writable by others without the sticky bit (mode 0777)" \
    run one.yaml --run-dir ww/mid/new
  [[ ! -e ww/mid/new ]] || fail "ww/mid/new made under a parent anyone may rename"
  cp -a r0 ww/mid/r0
  refused ww "ww/mid/r0: not used as a run directory: $work/ww, a directory above it, is writable by others" resume ww/mid/r0
  # a symbolic link on the path, in a directory anyone may rename entries in, is no way
  # around it (whoever may re-point the link chooses where the run goes): refused, exit 2,
  # however the path reaches it (absolute, "..", a relative link), nothing made where it
  # points; nor is one in a safe directory pointing under such a directory
  mkdir -m 0700 safe mine
  ln -s "$work/safe" ww/l && ln -s ../safe ww/rl && ln -s "$work/ww/mid" mine/l
  for pl in "$work/ww/l/runA l" "ww/../ww/l/runB l" "ww/rl/runC rl"; do
    read -r p l <<<"$pl"
    refused ww "$p: not used as a run directory: $work/ww, a directory above $work/ww/$l (a symbolic link on its path), is writable by others without the sticky bit (mode 0777)" \
      run one.yaml --run-dir "$p"
  done
  refused ww "mine/l/runD: not used as a run directory: $work/ww, a directory above it, is writable by others" \
    submit one.yaml --run-dir mine/l/runD --dry-run
  [[ -z $(ls -A safe) && ! -e ww/mid/runD ]] || fail "made through a link under a parent anyone may rename: $(ls -A safe ww/mid)"
  ln -s "$work/safe" mine/ok
  "$baton" submit one.yaml --run-dir mine/ok/runE --dry-run >link.out 2>&1 && [[ -e safe/runE/baton.sbatch ]] ||
    { cat link.out; fail "a link in a safe directory to a safe one refused"; }
  # a file on the path is not "a directory above it": making the run directory says why
  touch plain && chmod 0666 plain
  refused plain "plain/run: cannot create the run directory: Not a directory" run one.yaml --run-dir plain/run
  ! grep -q "a directory above" ref.out || { cat ref.out; fail "a file judged as a directory above the run directory"; }
  chmod 1777 ww
  "$baton" resume ww/mid/r0 >sticky.out 2>&1 || { cat sticky.out; fail "resume under a sticky 1777 parent failed"; }
  ! grep -q "warning" sticky.out || { cat sticky.out; fail "a sticky parent warned of"; }
  parents="a 0777 parent refused, a sticky one accepted"
  # one some other users may rename entries in (group-writable, not the user's private
  # group; owned by another user) is a warning naming it
  if [[ $(id -u) == 0 ]] && getent group nogroup >/dev/null && id nobody >/dev/null 2>&1; then
    mkdir -m 0775 gw && chgrp nogroup gw && chmod 0775 gw
    "$baton" run one.yaml --run-dir gw/r --quiet >gw.out 2>&1 || { cat gw.out; fail "the run under a group-writable parent failed"; }
    grep -qF "baton run: warning: gw/r is under $work/gw, which is writable by its group (gid $(getent group nogroup | cut -d: -f3)) without the sticky bit (mode 0775)" gw.out ||
      { cat gw.out; fail "no warning for a group-writable parent"; }
    mkdir -m 0755 ow && chown nobody ow && mkdir -m 0700 ow/mine
    "$baton" run one.yaml --run-dir ow/mine/r --quiet >ow.out 2>&1 || { cat ow.out; fail "the run under another user's parent failed"; }
    grep -qF "$work/ow, which is owned by uid $(id -u nobody), neither root nor you" ow.out ||
      { cat ow.out; fail "no warning for a parent another user owns"; }
    parents+="; group-writable and another user's warned of"
    # in a user namespace (unshare -r, apptainer --fakeroot) the users it does not map,
    # host root among them, show as the overflow uid: a parent of that uid is not warned
    # of (nobody here is that uid too), a 0777 one still refused
    if unshare -r true 2>/dev/null && [[ $(cat /proc/sys/kernel/overflowuid) == $(id -u nobody) ]]; then
      unshare -r "$baton" submit one.yaml --run-dir ow/mine/ns --dry-run >ns.out 2>&1 || { cat ns.out; fail "submit in a user namespace failed"; }
      ! grep -q "warning" ns.out || { cat ns.out; fail "in a user namespace, the overflow uid's parent warned of"; }
      chmod 0777 ow
      set +e; unshare -r "$baton" submit one.yaml --run-dir ow/mine/ns2 --dry-run >ns.out 2>&1; rc=$?; set -e
      [[ $rc == 2 ]] && grep -qF "$work/ow, a directory above it, is writable by others without the sticky bit" ns.out ||
        { cat ns.out; fail "in a user namespace, a 0777 parent of the overflow uid: exit $rc"; }
      chmod 0755 ow
      parents+="; in a user namespace the overflow uid's not warned of"
    else
      parents+="; SKIPPED (no unshare -r): the overflow uid in a user namespace"
    fi
  fi
  echo "$case: umask 000 left nothing open; 0777/0770 and planted links refused; $owner; $parents"
  ;;
*) fail "unknown case" ;;
esac
