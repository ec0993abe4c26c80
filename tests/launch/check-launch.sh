#!/usr/bin/env bash
# `baton launch` end to end: one case per run, named by $1.
#   check-launch.sh CASE BATON PROGRAM
# PROGRAM is pmix_probe, or one of OpenPMIx's example clients for example-* cases.
#
# Every case runs baton launch with TMPDIR pointing at a fresh directory and a unique
# tag on the ranks' command lines, then checks the exit status and the messages, and
# that afterwards no process carrying the tag is left and the temp root is empty (no
# socket, rendezvous file or temp dir left behind). Whatever happens, the EXIT trap
# kills leftovers by pid and removes the directory.
set -u
case=$1 baton=$2 prog=$3
tag="baton-launch-test-$case-$$-$RANDOM"
work=$(mktemp -d "${TMPDIR:-/tmp}/baton-launch-test.XXXXXX")
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"
failures=0 out="" rc=0 secs=0
# Sanitizer builds: OpenPMIx's own leaks are not ours (see the file).
export LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

cleanup() {
  local pids
  pids=$(pgrep -f -- "$tag")
  for p in $pids; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$case]: $*"
  failures=$((failures + 1))
}

# launch ARGS...: runs baton launch ARGS with a hard outer bound (under `ulimit $ulim` when
# ulim is set); sets out, rc, secs.
launch() {
  local t0=$SECONDS
  out=$(if [[ -n ${ulim:-} ]]; then ulimit $ulim || exit 99; fi
    timeout -s KILL 45 "$baton" launch "$@" 2>&1)
  rc=$?
  secs=$((SECONDS - t0))
  printf '%s\n' "$out" | sed 's/^/    | /'
  echo "    -> exit $rc after ${secs}s"
}

expect_rc() { [[ $rc -eq $1 ]] || fail "exit status $rc, expected $1"; }
expect_line() { grep -Eq -- "$1" <<<"$out" || fail "no line matching: $1"; }
expect_no_line() { ! grep -Eq -- "$1" <<<"$out" || fail "unexpected line matching: $1"; }
expect_count() {
  local n
  n=$(grep -Ec -- "$2" <<<"$out")
  [[ $n -eq $1 ]] || fail "$n lines match '$2', expected $1"
}

# Nothing of the job may survive it: no rank, no file under the temp root.
expect_clean() {
  local left
  left=$(pgrep -af -- "$tag")
  [[ -z $left ]] || fail "processes left behind: $left"
  left=$(ls -A "$TMPDIR")
  [[ -z $left ]] || fail "left in the temp root: $left"
}

# probe_ok N K: every rank reported ok, on its own prefixed line.
probe_ok() {
  local n=$1 r
  for ((r = 0; r < n; r++)); do
    expect_line "^\[$r\] pmix_probe rank $r/$n: .*: ok$"
  done
  expect_count "$n" ': ok$'
}

P=("$prog" --tag "$tag")

case $case in
usage)
  launch --help
  expect_rc 0
  expect_line '^usage: baton launch -n N'
  launch
  expect_rc 2
  launch -n 0 -- "${P[@]}" --size 1
  expect_rc 2
  launch -n 2 --nodes 3 -- "${P[@]}" --size 2
  expect_rc 2
  expect_line 'every node needs a rank'
  launch -n 2
  expect_rc 2
  expect_line 'no CMD'
  launch -n 2 --bogus 1 -- "${P[@]}"
  expect_rc 2
  expect_line "unknown option '--bogus'"
  launch -n 2 --timeout abc -- "${P[@]}"
  expect_rc 2
  ;;
not-found)
  launch -n 2 -- /nonexistent/dir/prog
  expect_rc 127
  expect_line '/nonexistent/dir/prog: No such file'
  launch -n 2 -- no-such-command-baton-test
  expect_rc 127
  expect_line 'command not found in PATH'
  touch "$work/not-exec"
  launch -n 2 -- "$work/not-exec"
  expect_rc 126
  expect_line 'not an executable file'
  ;;
probe-n1)
  launch -n 1 -- "${P[@]}" --size 1
  expect_rc 0
  probe_ok 1
  ;;
probe-n4-nodes2)
  launch -n 4 --nodes 2 -- "${P[@]}" --size 4 --nodes 2
  expect_rc 0
  probe_ok 4
  expect_line '^\[1\] .* node 0 \(node0\) local 1/2: ok$'
  expect_line '^\[2\] .* node 1 \(node1\) local 0/2: ok$'
  ;;
probe-n8-nodes2)
  launch -n 8 --nodes 2 -- "${P[@]}" --size 8 --nodes 2
  expect_rc 0
  probe_ok 8
  expect_line '^\[7\] .* node 1 \(node1\) local 3/4: ok$'
  ;;
probe-n5-nodes3)
  # Uneven: nodes of 2, 2 and 1 ranks.
  launch -n 5 --nodes 3 -- "${P[@]}" --size 5 --nodes 3
  expect_rc 0
  probe_ok 5
  expect_line '^\[4\] .* node 2 \(node2\) local 0/1: ok$'
  ;;
exit-code)
  # The others linger, so the launcher must end them.
  launch -n 4 --kill-grace 2 -- "${P[@]}" --size 4 --fault-rank 2 --exit-code 3 --linger
  expect_rc 3
  expect_line '^baton launch: rank 2 \(node node0, pid [0-9]+\) exited with status 3 without calling PMIx_Finalize; stopped 3 other ranks: 0 1 3$'
  expect_count 3 '^baton launch: stopped rank [013] .*: killed by signal SIGTERM$'
  expect_no_line ': ok$'
  ;;
exit-code-peers-react)
  # The others' fences fail at once and they exit 4, often before rank 2 is reaped:
  # the launcher must still name rank 2.
  for i in 1 2 3 4 5; do
    launch -n 4 -- "${P[@]}" --size 4 --fault-rank 2 --exit-code 3
    expect_rc 3
    expect_line '^baton launch: rank 2 \(node node0, pid [0-9]+\) exited with status 3'
  done
  ;;
kill-sigkill)
  launch -n 4 --nodes 2 -- "${P[@]}" --size 4 --nodes 2 --fault-rank 3 --kill-self 9 --at init \
    --linger
  expect_rc 137
  expect_line '^baton launch: rank 3 \(node node1, pid [0-9]+\) killed by signal SIGKILL; stopped 3 other ranks: 0-2$'
  expect_count 3 '^baton launch: stopped rank [012] .*: killed by signal SIGTERM$'
  ;;
kill-in-fence)
  # The others are waiting in the fence when rank 5 dies.
  launch -n 8 --nodes 2 -- "${P[@]}" --size 8 --nodes 2 --fault-rank 5 --kill-self 11 --at fence
  expect_rc 139
  expect_line '^baton launch: rank 5 \(node node1, pid [0-9]+\) killed by signal SIGSEGV'
  expect_no_line ': ok$'
  ;;
early-exit)
  # A rank leaves with status 0 but without PMIx_Finalize before the fence: the others'
  # fence must fail (never complete with its data missing), and the job with it.
  launch -n 4 -- "${P[@]}" --size 4 --fault-rank 1 --exit-code 0 --at init
  expect_rc 1
  expect_line '^baton launch: rank 1 \(node node0, pid [0-9]+\) exited with status 0 without calling PMIx_Finalize'
  expect_no_line ': ok$'
  ;;
abort)
  launch -n 4 -- "${P[@]}" --size 4 --fault-rank 2 --abort 7
  expect_rc 7
  expect_line '^baton launch: rank 2 \(node node0, pid [0-9]+\) called PMIx_Abort\(7\): pmix_probe abort on rank 2'
  expect_no_line ': ok$'
  ;;
hang-timeout)
  launch -n 4 --timeout 2 -- "${P[@]}" --size 4 --fault-rank 0 --hang
  expect_rc 124
  expect_line '^baton launch: job timed out after 2 s; stopped 4 ranks: 0-3$'
  [[ $secs -le 25 ]] || fail "took ${secs}s"
  ;;
hang-ignore-term)
  # The hung rank ignores SIGTERM: SIGKILL follows after the 1 s grace.
  launch -n 2 --timeout 1 --kill-grace 1 -- "${P[@]}" --size 2 --fault-rank 1 --hang --ignore-term
  expect_rc 124
  expect_line '^baton launch: stopped rank 1 \(node node0, pid [0-9]+\): killed by signal SIGKILL$'
  [[ $secs -le 25 ]] || fail "took ${secs}s"
  ;;
fence-timeout)
  # No launcher timeout: the waiting ranks' own fence timeout ends the job.
  launch -n 3 -- "${P[@]}" --size 3 --fault-rank 2 --hang --fence-timeout 2
  expect_rc 4
  expect_line 'fence over 3 ranks timed out after 2 s'
  expect_line '^baton launch: rank [01] \(node node0, pid [0-9]+\) exited with status 4'
  ;;
signal-launcher)
  # SIGTERM to baton launch itself stops every rank and exits 128 + 15.
  timeout -s KILL 45 "$baton" launch -n 3 -- "${P[@]}" --size 3 --fault-rank 0 --hang \
    >"$work/out" 2>&1 &
  pid=$!
  for ((i = 0; i < 50; i++)); do
    [[ $(pgrep -fc -- "$tag") -ge 4 ]] && break
    sleep 0.1
  done
  sleep 0.3
  kill -TERM "$(pgrep -P "$pid" -x baton || echo "$pid")"
  wait "$pid"
  rc=$?
  out=$(cat "$work/out")
  printf '%s\n' "$out" | sed 's/^/    | /'
  expect_rc 143
  expect_line '^baton launch: got SIGTERM, stopping all ranks$'
  expect_line '^baton launch: job stopped; stopped 3 ranks: 0-2$'
  ;;
fd-limit)
  # 32 ranks need about 4 descriptors each: refused before any starts (exit 2, the limits
  # and the count named), never a start that fails part way on EMFILE
  ulim="-n 100" launch -n 32 -- sh -c : "$tag"
  expect_rc 2
  expect_line '^baton launch: 32 ranks need about [0-9]+ open files here .* RLIMIT_NOFILE allows 100 \(soft\) and 100 \(hard\): raise the hard limit \(ulimit -Hn [0-9]+'
  expect_no_line 'Too many open files'
  # a soft limit under the hard one is raised to it, and that is said
  ulim="-Sn 100" launch -n 32 -- sh -c : "$tag"
  expect_rc 0
  expect_line '^baton launch: 32 ranks need about [0-9]+ open files here, over the soft limit \(RLIMIT_NOFILE, ulimit -n\) of 100: raised it to [0-9]+ \(the hard limit '
  ;;
comm)
  # baton keeps its name (comm: what ps -C, pgrep, top and killall match) also where it
  # executed itself again for OpenBLAS's kernels (worker/cpu/cpu_blas_core.h): the
  # rank's parent is the launcher
  launch -n 2 -- sh -c 'cat /proc/$PPID/comm' "$tag"
  expect_rc 0
  expect_line '^\[0\] baton$'
  expect_line '^\[1\] baton$'
  ;;
hostname-env)
  # each rank's PMIX_HOSTNAME names its own virtual node (PMIx_server_setup_fork would
  # give every rank the server's node0)
  launch -n 4 --nodes 4 -- sh -c 'echo "host $PMIX_HOSTNAME"' "$tag"
  expect_rc 0
  for r in 0 1 2 3; do expect_line "^\[$r\] host node$r$"; done
  launch -n 5 --nodes 2 -- sh -c 'echo "host $PMIX_HOSTNAME"' "$tag"
  expect_rc 0
  expect_line '^\[2\] host node0$'
  expect_line '^\[3\] host node1$'
  ;;
tmpfiles)
  # systemd-tmpfiles --clean, with everything under $TMPDIR past its age (1 s), run while
  # the job lives: the launcher's dir, locked (launch_tmpdir.h), is skipped with the job's
  # dir in it; what is not locked goes
  command -v systemd-tmpfiles >/dev/null || { echo "SKIPPED: no systemd-tmpfiles here"; exit 77; }
  mkdir "$TMPDIR/old" && echo "d $TMPDIR - - - 1s" >"$work/tmpfiles.conf"
  launch -n 1 -- sh -c 'sleep 2.5; systemd-tmpfiles --clean "$1" || exit 9
    [ -d "$BATON_JOB_DIR" ] && echo kept || echo removed' "$tag" "$work/tmpfiles.conf"
  expect_rc 0
  expect_line '^\[0\] kept$'
  [[ ! -e $TMPDIR/old ]] || fail "systemd-tmpfiles removed nothing: $TMPDIR/old is there"
  ;;
many-stopped)
  # one rank of 16 fails: the 15 the launcher stopped are named in ranges, one line per
  # way they ended, not a line each
  launch -n 16 --nodes 4 -- sh -c '[ "$PMIX_RANK" = 5 ] && exit 3; while :; do sleep 0.2; done' "$tag"
  expect_rc 3
  expect_line '^baton launch: rank 5 \(node node1, pid [0-9]+\) exited with status 3; stopped 15 other ranks: 0-4 6-15$'
  expect_line '^baton launch: stopped 15 ranks \(0-4 6-15\): killed by signal SIGTERM$'
  expect_count 0 '^baton launch: stopped rank '
  # two ways of ending: ranks 9 and 15 turn SIGTERM into exit 7; each line names only
  # its own ranks
  launch -n 16 --nodes 4 -- sh -c 'case $PMIX_RANK in 5) sleep 0.5; exit 3 ;; 9|15) trap "exit 7" TERM ;; esac
    while :; do sleep 0.1; done' "$tag"
  expect_rc 3
  expect_line '^baton launch: stopped 13 ranks \(0-4 6-8 10-14\): killed by signal SIGTERM$'
  expect_line '^baton launch: stopped 2 ranks \(9 15\): exited with status 7$'
  ;;
example-hello)
  launch -n 4 -- "$prog" "$tag"
  expect_rc 0
  for r in 0 1 2 3; do
    expect_line "^\[$r\] Client ns baton-[0-9]+-0 rank $r:PMIx_Finalize successfully completed$"
  done
  expect_count 4 'PMIx_Finalize successfully completed'
  ;;
example-client)
  launch -n 4 -- "$prog" "$tag"
  expect_rc 0
  # Every rank gets every rank's value (client.c exits 0 even when a Get fails).
  expect_count 16 '^\[[0-3]\] Client ns baton-[0-9]+-0 rank [0-3]: PMIx_Get .* returned correct$'
  expect_count 4 'PMIx_Finalize successfully completed'
  expect_no_line 'failed'
  ;;
api)
  # Here BATON is test_launch_api and PROGRAM the probe.
  out=$(timeout -s KILL 45 "$baton" "$prog" "$tag" 2>&1)
  rc=$?
  printf '%s\n' "$out" | sed 's/^/    | /'
  expect_rc 0
  expect_line '^ok: attempts baton-[0-9]+-0 \(failed\), baton-[0-9]+-1, baton-[0-9]+-2; caller stop; blame$'
  ;;
*)
  echo "unknown case '$case'"
  exit 2
  ;;
esac

expect_clean
if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s) in case $case"
  exit 1
fi
echo "ok [$case]"
