#!/usr/bin/env bash
# Where the commands' output goes, and what happens when it cannot go there:
#  - `baton spec --out FILE`: a new or regular file written atomically, a symbolic link
#    followed (the link kept, its target replaced), a FIFO, /dev/null and /dev/stdout
#    written in place (never replaced by a regular file), a directory, a dangling link
#    and an empty name refused (exit 2);
#  - a failed write to stdout (a full disk: /dev/full, a closed stdout) is said
#    ("baton: write error: ...") and exits 1, for baton and baton-worker; a closed pipe
#    still ends the command by SIGPIPE (141);
#  - `baton launch ... | head -1`: the reader going away stops the job (exit 141), said
#    once; a full stdout is said once, and the job's success becomes exit 1; a full
#    non-blocking stdout (EAGAIN) is waited for, nothing lost;
#  - `baton --help COMMAND` is COMMAND's help; launch takes -nN and -n=N.
#   check-outputs.sh BATON BATON_WORKER SOURCE_DIR
set -u
baton=$1 worker=$2 src=$3
recipe=$src/tests/engine/precision.yaml
# print_suppressions=0: under AddressSanitizer the leak report of suppressed PMIx leaks
# would land on the stderr the launch checks read whole
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
. "$src/tests/cli/cli-lib.sh"
cli_workdir outputs

# ---- baton spec --out ----
"$baton" spec "$recipe" --out ref.pb || fail "spec --out ref.pb"
size=$(stat -c %s ref.pb)
[[ $size -gt 0 ]] || fail "spec --out wrote nothing"
echo old >reg
expect 0 "^$" -- "$baton" spec "$recipe" --out reg
cmp -s reg ref.pb && ok "a regular file is replaced" || fail "reg is not the spec"
echo old >target && ln -s target link
expect 0 "^$" -- "$baton" spec "$recipe" --out link
[[ -L link ]] && cmp -s target ref.pb && ok "a link is followed, kept" ||
  fail "link: $(ls -l link target)"
[[ ! -e link.partial && ! -e target.partial ]] || fail "a .partial was left: $(ls)"
mkfifo fifo
timeout 20 sh -c 'wc -c <fifo' >fifo.count &
reader=$!
expect 0 "^$" -- timeout 20 "$baton" spec "$recipe" --out fifo
wait $reader
inplace=0
[[ -p fifo && $(cat fifo.count) == "$size" ]] && inplace=1 && ok "a FIFO is written in place" ||
  fail "fifo: $(ls -l fifo), read $(cat fifo.count) bytes, not $size"
# /dev/null stays the character device, /dev/stdout the link: tried only once the FIFO
# above was written in place, so that a baton that replaces what it writes to (the bug,
# as root) puts only the test's own FIFO at risk, never the machine's /dev
if ((inplace == 0)); then
  fail "SKIPPED --out /dev/null and /dev/stdout: the FIFO was not written in place"
elif [[ -c /dev/null ]]; then
  expect 0 "^$" -- "$baton" spec "$recipe" --out /dev/null
  [[ -c /dev/null ]] && ok "/dev/null is still a character device" ||
    fail "/dev/null is no longer a character device"
fi
if ((inplace == 1)); then
  got=$("$baton" spec "$recipe" --out /dev/stdout | wc -c)
  [[ $got == "$size" ]] && ok "--out /dev/stdout into a pipe" || fail "--out /dev/stdout: $got bytes"
  echo keep >log
  "$baton" spec "$recipe" --out /dev/stdout >>log
  [[ $(head -n 1 log) == keep && $(stat -c %s log) == $((size + 5)) ]] &&
    ok "--out /dev/stdout appends to a >> file" || fail "--out /dev/stdout >> log: $(stat -c %s log)"
fi
# /dev/stdout spelled otherwise, or a link to it, is the descriptor too: `>> log` appends
if ((inplace == 1)); then
  echo keep >log2 && ln -s /dev/stdout mystdout
  for name in //dev/stdout /dev/./stdout /dev/fd/../fd/1 mystdout; do
    "$baton" spec "$recipe" --out "$name" >>log2
  done
  [[ $(head -n 1 log2) == keep && $(stat -c %s log2) == $((4 * size + 5)) ]] &&
    ok "--out //dev/stdout, /dev/./stdout, /dev/fd/../fd/1, a link to /dev/stdout append to a >> file" ||
    fail "--out /dev/stdout spelled otherwise >> log: $(stat -c %s log2) bytes, first line $(head -n 1 log2)"
fi
expect 1 "^baton spec: /dev/fd/0: cannot write: descriptor 0 is not open for writing$" -- \
  sh -c "exec '$baton' spec '$recipe' --out /dev/fd/0 </dev/null"
# the .partial is made new: a FIFO there is no hang, a hard link there is not written
# through (both refused, named); a leftover regular file of one's own is replaced
mkfifo p1.partial
expect 1 "^baton spec: p1: cannot write: p1.partial, where it is written first, is there and is not a regular file, not a leftover of yours; remove it$" -- \
  timeout 10 "$baton" spec "$recipe" --out p1
echo victim >victim && ln victim p2.partial
expect 1 "^baton spec: p2: cannot write: p2.partial, where it is written first, is there and is a file with other hard links" -- \
  "$baton" spec "$recipe" --out p2
[[ $(cat victim) == victim && ! -e p1 && ! -e p2 && -p p1.partial ]] && ok "a FIFO or hard link at .partial: untouched" ||
  fail "a planted .partial: victim $(cat victim | head -c 20), $(ls -l p1* p2*)"
echo left >p3.partial
expect 0 "^$" -- "$baton" spec "$recipe" --out p3
cmp -s p3 ref.pb && [[ ! -e p3.partial ]] && ok "a leftover .partial of one's own is replaced" ||
  fail "p3: $(ls -l p3*)"
# a replaced file keeps its permissions
echo old >private && chmod 600 private
expect 0 "^$" -- "$baton" spec "$recipe" --out private
[[ $(stat -c %a private) == 600 ]] && cmp -s private ref.pb && ok "a 0600 file replaced stays 0600" ||
  fail "private: mode $(stat -c %a private)"
# a link another user planted in a sticky directory others may write is not followed
# (protected_symlinks, whatever the sysctl says); one's own there is
if [[ $(id -u) == 0 ]] && id nobody >/dev/null 2>&1; then
  mkdir -m 1777 ww && echo precious >precious && ln -s ../precious ww/spec.pb && chown -h nobody ww/spec.pb
  expect 2 "^baton spec: ww/spec.pb: not followed: the symbolic link ww/spec.pb is uid $(id -u nobody)'s, in ww, a sticky directory others may write \(mode 1777\)" -- \
    "$baton" spec "$recipe" --out ww/spec.pb
  [[ $(cat precious) == precious ]] && ok "another user's link in a sticky directory: not followed" ||
    fail "precious was written through another user's link"
  ln -s ../precious ww/mine.pb
  expect 0 "^$" -- "$baton" spec "$recipe" --out ww/mine.pb
  cmp -s precious ref.pb && ok "one's own link in a sticky directory: followed" || fail "ww/mine.pb not followed"
else
  echo "SKIPPED: another user's link in a sticky directory (needs root and user nobody)"
fi
mkdir dir
expect 2 "^baton spec: dir: a directory, not a file; name a file to write$" -- "$baton" spec "$recipe" --out dir
ln -s missing dangling
expect 2 "^baton spec: dangling: a symbolic link to a missing file" -- "$baton" spec "$recipe" --out dangling
[[ -L dangling && ! -e missing ]] || fail "a dangling link was replaced or followed"
expect 2 "^baton spec: --out '': name the file to write$" -- "$baton" spec "$recipe" --out ""
expect 1 "^baton spec: nodir/x.pb: cannot write: No such file or directory$" -- "$baton" spec "$recipe" --out nodir/x.pb

# ---- a failed write to stdout ----
full() { # full PROG ARGS...: run with stdout on /dev/full
  local err rc
  err=$("$@" 2>&1 >/dev/full)
  rc=$?
  if [[ $rc -eq 1 && $err == *"write error"* ]]; then ok "$* >/dev/full -> 1"; else
    fail "$* >/dev/full -> exit $rc, stderr: $err"
  fi
}
if [[ -c /dev/full ]]; then
  full "$baton" --help
  full "$baton" --version
  full "$baton" plan --help
  full "$baton" plan "$recipe"
  full "$baton" plan "$recipe" --json
  full "$baton" spec "$recipe"
  full "$baton" help ckpt verify
  full "$worker" --help
  expect 1 "^baton: write error: No space left on device$" -- bash -c "'$baton' spec '$recipe' >/dev/full"
else
  echo "SKIPPED: no /dev/full"
fi
expect 1 "^baton: write error: Bad file descriptor$" -- bash -c "'$baton' --version >&-"
# line-buffered (the run commands): the failed write comes before the last flush, its errno
# gone by then; the closed stdout is still named
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null || fail "data prepare"
expect 1 "^baton: write error: Bad file descriptor$" -- bash -c "'$baton' submit '$recipe' --run-dir sub1 --dry-run >&-"
# (the reader gone before baton writes: plan's output fits in a pipe's buffer)
{
  sleep 0.3
  exec "$baton" plan "$recipe" 2>plan.err
} | true
rc=${PIPESTATUS[0]}
[[ $rc == 141 && ! -s plan.err ]] && ok "a closed pipe: SIGPIPE, nothing said" ||
  fail "plan | true: exit $rc, stderr: $(cat plan.err)"

# ---- baton launch: its stdout's reader going away ----
start=$SECONDS
timeout 60 "$baton" launch -n 2 -- yes 2>launch.err | head -n 1 >launch.out
rc=${PIPESTATUS[0]}
[[ $rc == 141 && $(cat launch.out) =~ ^\[[01]\]\ y$ ]] &&
  grep -q "^baton launch: stdout's reader went away (a closed pipe): stopping all ranks$" launch.err &&
  [[ $(grep -c . launch.err) == 1 ]] && ok "launch | head -1 stops the job: 141 in $((SECONDS - start))s" ||
  fail "launch -- yes | head -1: exit $rc, stdout $(cat launch.out), stderr $(head -n 3 launch.err)"
if [[ -c /dev/full ]]; then
  timeout 60 "$baton" launch -n 2 -- sh -c 'echo a; echo b; echo c >&2' >/dev/full 2>launch.err
  rc=$?
  [[ $rc == 1 && $(grep -c "cannot write the ranks' output: No space left on device" launch.err) == 1 ]] &&
    grep -q '^\[[01]\] c$' launch.err && ok "launch >/dev/full: said once, exit 1" ||
    fail "launch >/dev/full: exit $rc, stderr: $(cat launch.err)"
fi
# A non-blocking stdout (a pipe shared with a program that set O_NONBLOCK) that is full
# for a moment: waited for, every line arrives and the job's status stays 0.
/usr/bin/python3 - "$baton" >launch.nb 2>launch.err <<'PY'
import os, subprocess, sys, time
r, w = os.pipe()
os.set_blocking(w, False)
p = subprocess.Popen([sys.argv[1], "launch", "-n", "2", "--", "seq", "1", "20000"], stdout=w)
os.close(w)
time.sleep(1.0)  # the pipe fills meanwhile: EAGAIN
data = b"".join(iter(lambda: os.read(r, 65536), b""))
print(p.wait(), data.count(b"\n"))
PY
[[ $(cat launch.nb) == "0 40000" && ! -s launch.err ]] && ok "launch, a full non-blocking stdout: waited for" ||
  fail "launch, a full non-blocking stdout: exit and lines $(cat launch.nb), stderr: $(head -n 3 launch.err)"
expect 0 '^\[1\] 1$' -- "$baton" launch -n2 -- sh -c 'echo $PMIX_RANK'
expect 0 '^\[1\] 1$' -- "$baton" launch -n=2 -- sh -c 'echo $PMIX_RANK'
expect 2 "^baton launch: -n/--np given twice \('2' and '3'\)" -- "$baton" launch -n2 -n 3 -- true

# ---- baton --help COMMAND ----
[[ $("$baton" --help run) == "$("$baton" run --help)" ]] && ok "baton --help run" ||
  fail "baton --help run: $("$baton" --help run 2>&1 | head -n 1)"
[[ $("$baton" -h ckpt verify) == "$("$baton" ckpt verify --help)" ]] && ok "baton -h ckpt verify" ||
  fail "baton -h ckpt verify"
expect 2 "^baton: unknown option '--bogus'" -- "$baton" --bogus
expect 2 "^baton ckpt: unknown subcommand 'bogus'" -- "$baton" ckpt bogus
expect 2 "^baton data: unknown option '--bogus'" -- "$baton" data --bogus

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all output checks passed"
