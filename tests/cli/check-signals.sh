#!/usr/bin/env bash
# A command that writes files, stopped by SIGINT, SIGTERM or SIGHUP mid-way, removes its
# partial outputs and the directories it created, then dies of that signal (exit status
# 128 + N): data prepare, data passkey, ckpt reshard, export, import, pack and unpack. An
# export killed outright leaves its partial directory, which the next one removes.
# Each is started with its output under directories that do not exist yet; once its
# first partial output appears it is stopped (SIGSTOP), checked to be still mid-way, sent
# the signal and continued. A case whose command finished before it could be stopped is
# reported and not counted (a machine much faster than this test's sizes assume, or a
# command that no longer writes that partial output): fewer than 4 of the 7 checked fails,
# any not checked makes the test SKIPPED (77) once the checked ones passed.
#   check-signals.sh BATON SOURCE_DIR
set -u
baton=$1 src=$2
py=/usr/bin/python3
[[ -x $py ]] || { echo "SKIPPED: $py is not installed"; exit 77; }
work=$(mktemp -d /tmp/baton-test-signals.XXXXXX)
pid=
trap '[[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
checked=0 unchecked=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }
# A background job of a script starts with SIGINT ignored (which the commands respect):
# env --default-signal gives it the default back where coreutils has it.
intable=()
env --default-signal=INT true 2>/dev/null && intable=(env --default-signal=INT)

# stopped SIG GLOB TOP -- ARGS: baton ARGS, sent SIG once GLOB (its partial output)
# exists; then neither GLOB nor TOP (the first directory it had to create) may be left.
stopped() {
  local sig=$1 glob=$2 top=$3 prefix=()
  shift 4
  [[ $sig == INT ]] && prefix=("${intable[@]}")
  [[ $sig == INT && ${#prefix[@]} -eq 0 ]] && sig=TERM # no env --default-signal here
  "${prefix[@]}" "$baton" "$@" >out 2>&1 &
  pid=$!
  for _ in $(seq 4000); do
    compgen -G "$glob" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
  done
  kill -STOP "$pid" 2>/dev/null
  if ! compgen -G "$glob" >/dev/null; then
    kill -CONT "$pid" 2>/dev/null
    wait "$pid"
    pid=
    echo "note: baton $* finished before it could be stopped ($glob never seen or gone): not checked"
    unchecked=$((unchecked + 1))
    return
  fi
  checked=$((checked + 1))
  kill -"$sig" "$pid" && kill -CONT "$pid"
  wait "$pid"
  local rc=$? want=$((128 + $(kill -l "$sig")))
  pid=
  if [[ $rc -eq $want && ! -e $top ]] && ! compgen -G "$glob" >/dev/null &&
     grep -q "interrupted by SIG$sig" out; then
    ok "baton $* stopped by SIG$sig -> $rc, nothing left"
  else
    fail "baton $* stopped by SIG$sig: exit $rc (want $want), left: $(find "$top" 2>/dev/null | head -n 5): $(cat out)"
  fi
}

# Inputs large enough to take a while here: 40 MB of text, a 70 MB model.
head -c 30000000 /dev/urandom | base64 >text.txt
"$py" "$src/tests/ckpt/make_hf.py" hf 256 2 32768 || exit 1
"$baton" ckpt import hf --out ck >/dev/null || exit 1
"$baton" ckpt pack ck --out ck.tar.zst >/dev/null || exit 1

stopped INT 'd1/x/p_train.bin.partial' d1 -- data prepare --input text.txt --output d1/x/p
stopped HUP 'd2/x/pk.bin.partial' d2 -- data passkey --output d2/x/pk --n-docs 20000 --length 4096
stopped TERM 'r1/x/rs.partial/rank-00000.bin' r1 -- ckpt reshard ck --to tp2 --out r1/x/rs
stopped HUP 'e1/x/hf.partial-*/model.safetensors.tmp' e1 -- ckpt export ck --out e1/x/hf
stopped TERM 'i1/x/imp.partial/rank-00000.bin' i1 -- ckpt import hf --out i1/x/imp
stopped INT 'p1/x/ck.tar.zst.partial' p1 -- ckpt pack ck --out p1/x/ck.tar.zst
stopped TERM 'u1/x/ck.partial/rank-00000.bin' u1 -- ckpt unpack ck.tar.zst --into u1/x

# Killed outright (SIGKILL, or a second Ctrl-C before it cleaned up), an export leaves its
# partial directory, named for this host and its pid; the next export to the same --out,
# that process being gone, removes it.
"$baton" ckpt export ck --out k1/hf >out 2>&1 &
pid=$!
for _ in $(seq 4000); do
  compgen -G 'k1/hf.partial-*/model.safetensors.tmp' >/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.005
done
kill -9 "$pid" 2>/dev/null
wait "$pid"
killed=$pid pid=
host=$(hostname | tr -c 'A-Za-z0-9.\n-' '_')
left=$(compgen -G "k1/hf.partial-$host-$killed-??????")
if [[ -z $left && -e k1/hf ]]; then
  echo "note: the export finished before it could be killed: not checked"
  unchecked=$((unchecked + 1))
elif [[ -z $left ]]; then
  fail "the export killed by SIGKILL left $(ls -d k1/* 2>&1), not k1/hf.partial-$host-$killed-XXXXXX"
elif out=$("$baton" ckpt export ck --out k1/hf 2>&1) && [[ ! -e $left && -f k1/hf/config.json &&
  $out == *"removed $left, left by an export that no longer runs (pid $killed)"* ]]; then
  ok "an export killed by SIGKILL left $left; the next export removed it"
else
  fail "the export killed by SIGKILL left $left; the next: $out; now $(ls -d k1/*)"
fi

((checked >= 4)) || fail "only $checked of $((checked + unchecked)) cases could be stopped mid-way"
[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
if ((unchecked > 0)); then
  echo "SKIPPED: $unchecked of $((checked + unchecked)) cases not checked (the $checked checked passed)"
  exit 77
fi
echo "all signal checks passed"
