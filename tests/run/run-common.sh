# Sourced by check-run.sh, check-supervise.sh and check-trust.sh (their arguments: BATON
# BATON_WORKER SOURCE_DIR CASE): a private work directory removed on exit with every process the case started,
# the prepared data, the recipe, and the helpers the cases share.
baton=$1 worker=$2 src=$3 case=$4
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-run.XXXXXX)
export TMPDIR=$work/tmp # what the runs leave there goes with $work, whatever happens
mkdir "$TMPDIR"
bpid= bg_pids= # bg_pids: other processes a case started in the background
cleanup() {
  [[ -n $bpid ]] && kill -9 "$bpid" 2>/dev/null
  [[ -z $bg_pids ]] || kill -9 $bg_pids 2>/dev/null || true
  pkill -9 -f -- "--spec $work/" 2>/dev/null || true
  # gone before the directory goes: one finishing a write (a file made in it) would keep
  # rm -rf from emptying it (a stale /tmp/baton-test-run.* seen after a failed case)
  [[ -n $bpid ]] && wait "$bpid" 2>/dev/null
  local i
  for ((i = 0; i < 50; i++)); do
    pgrep -f -- "--spec $work/" >/dev/null || break
    sleep 0.1
  done
  rm -rf "$work" 2>/dev/null || { sleep 0.5; rm -rf "$work"; }
}
trap cleanup EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null
recipe=$src/tests/run/run.yaml
fail() { { echo "$case: $*"; [[ -f run.out ]] && tail -20 run.out; } >&2; exit 1; }

# same_losses REF GOT [SHRUNK_STAGE]: exact per stage, within 1e-5 for SHRUNK_STAGE; both
# files must hold a line for each of $recipe's stages (two empty files are no match)
same_losses() {
  /usr/bin/python3 - "$(grep -c '^  - name:' "$recipe")" "$@" <<'PY'
import sys
want = int(sys.argv.pop(1))
ref = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
shrunk = sys.argv[3] if len(sys.argv) > 3 else None
ok = want > 0 and len(ref) == len(got) == want
if not ok:
    print(f"{len(ref)} reference and {len(got)} stage losses, expected {want} (the recipe's stages)")
for a, b in zip(ref, got):
    r = abs(float(a[2]) - float(b[2])) / abs(float(a[2]))
    good = a[:2] == b[:2] and (r <= 1e-5 if a[0] == shrunk else a[2] == b[2])
    print("%-12s %s vs %s (relative %.2g)%s" % (a[0], b[2], a[2], r, "" if good else "  <- differs"))
    ok = ok and good
sys.exit(0 if ok else 1)
PY
}
# same_metrics REF GOT: every step's loss and grad_norm in GOT's metrics.jsonl equal REF's,
# bit for bit, each step once; and the closing validations alike
same_metrics() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
def rows(d, f, key):
    return [(r["stage"] if "stage" in r else r["stage_index"], r.get("step"), r[key])
            for r in map(json.loads, open(d + "/" + f))]
for f, keys in (("metrics.jsonl", ("loss", "grad_norm")), ("valid.jsonl", ("valid_loss",))):
    for k in keys:
        a, b = rows(sys.argv[1], f, k), rows(sys.argv[2], f, k)
        bad = [(x, y) for x, y in zip(a, b) if x != y]
        assert len(a) == len(b) and not bad, (f, k, len(a), len(b), bad[:3])
print("metrics.jsonl and valid.jsonl equal the reference's")
PY
}
# stage_losses DIR: "name loss" per stage, as the journal has them
stage_losses() {
  "$baton" status "$1" --json | /usr/bin/python3 -c '
import json, sys
for s in json.load(sys.stdin)["stages"]: print(s["name"], s["state"], "%.9g" % s["loss"])'
}
# journal_ckpts DIR: "stage attempt step name" per CHECKPOINT_COMMITTED record of DIR's
# (attempt "-" in a record without one: a checkpoint found as an attempt started)
# journal (schema/journal.proto, framed as run/journal.c writes it), read here so that
# nothing of baton's own reading is taken on trust
journal_ckpts() {
  /usr/bin/python3 - "$1/journal" <<'PY'
import struct, sys
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7F) << s; s += 7
        if c < 0x80: return v, i
def fields(b):
    i, f = 0, {}
    while i < len(b):
        key, i = varint(b, i)
        n, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v, i = b[i:i + 8], i + 8
        elif w == 5: v, i = b[i:i + 4], i + 4
        elif w == 2:
            l, i = varint(b, i); v, i = b[i:i + l], i + l
        else: raise ValueError("wire type %d" % w)
        f[n] = v
    return f
data, off = open(sys.argv[1], "rb").read(), 0
while off + 8 <= len(data):
    n = struct.unpack_from("<I", data, off)[0]
    r = fields(data[off + 8:off + 8 + n]); off += 8 + n
    if r.get(3) == 4:  # CHECKPOINT_COMMITTED: stage_index 4, attempt 5, step 6, detail 11
        print(r.get(4, 0), r.get(5, "-"), r.get(6), r[11].decode())
PY
}
# journal_drop_data_end DIR: DIR's journal as a baton older than the STAGE_COMPLETED
# record's data_end (field 19) wrote it: that field taken out of every such record, each
# record's CRC32C made again (framing of run/journal.c: length, CRC32C, record)
journal_drop_data_end() {
  PYTHONPATH=$src/tests/lib /usr/bin/python3 - "$1/journal" <<'PY'
import struct, sys
from crc32c import crc32c
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7F) << s; s += 7
        if c < 0x80: return v, i
def without_data_end(b):
    i, kept, kind, dropped = 0, bytearray(), None, 0
    while i < len(b):
        start = i
        key, i = varint(b, i)
        n, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: i += 8
        elif w == 5: i += 4
        elif w == 2:
            l, i = varint(b, i); i += l
        else: raise ValueError("wire type %d" % w)
        if n == 3: kind = v
        if n == 19: dropped = 1
        else: kept += b[start:i]
    return (bytes(kept), 1) if kind == 7 and dropped else (b, 0)
data, off, out, n_dropped = open(sys.argv[1], "rb").read(), 0, bytearray(), 0
while off + 8 <= len(data):
    n = struct.unpack_from("<I", data, off)[0]
    r, d = without_data_end(data[off + 8:off + 8 + n]); off += 8 + n
    out += struct.pack("<II", len(r), crc32c(r)) + r
    n_dropped += d
assert off == len(data) and n_dropped > 0, (off, len(data), n_dropped)
open(sys.argv[1], "wb").write(out)
PY
}
reference() {
  "$baton" run "$recipe" --run-dir ref --quiet >ref.out 2>&1 || { cat ref.out; fail "the reference run failed"; }
  stage_losses ref >ref.losses
}

# stop_run: SIGTERM to the baton run in the background; it must stop (exit 75)
stop_run() {
  kill -TERM "$bpid"
  set +e; wait "$bpid"; rc=$?; set -e
  bpid=
  [[ $rc == 75 ]] || fail "baton run exited $rc on SIGTERM, not 75"
}
# newest_log STAGE: the newest attempt's log of stage STAGE
newest_log() { ls -t r1/logs/s0"$1"-a*.log 2>/dev/null | head -1 || true; }
# wait_step STAGE K: until rank 0 of the stage's newest attempt has completed step K; never
# in the attempt struck last (its restart may not have begun yet)
struck=
wait_step() {
  local deadline=$((SECONDS + 120)) log step
  while ((SECONDS < deadline)); do
    log=$(newest_log "$1")
    if [[ -n $log && $log != "$struck" ]]; then
      step=$(sed -En 's/^\[0\] step +([0-9]+)\/.*/\1/p' "$log" | tail -1)
      [[ -n $step && $step -ge $2 ]] && { echo "$log"; return 0; }
    fi
    kill -0 "$bpid" 2>/dev/null || fail "baton run ended early"
    sleep 0.05
  done
  fail "stage $1 never reached step $2"
}
# wait_files GLOB N SECONDS WHAT: until N files match GLOB (the ranks' marks, say), while
# baton run ($bpid) goes on; WHAT names the wait in the failure
wait_files() {
  local deadline=$((SECONDS + $3))
  until [[ $(compgen -G "$1" | wc -l) -ge $2 ]]; do
    kill -0 "$bpid" 2>/dev/null || fail "baton run ended before $4"
    ((SECONDS < deadline)) || fail "not within $3 s: $4"
    sleep 0.05
  done
}
# workers_gone DIR SECONDS: until no worker of run directory DIR is left (they follow a
# killed baton run within 0.2 s, a loaded machine's scheduling aside), else fails
workers_gone() {
  local deadline=$((SECONDS + $2))
  while pgrep -f -- "--spec $work/$1/" >/dev/null; do
    ((SECONDS < deadline)) ||
      { pgrep -af -- "--spec $work/$1/" | cut -c1-160; fail "workers outlived baton run by $2 s"; }
    sleep 0.05
  done
}
# slow_stage STAGE SECONDS PREFIX: wrap.sh, a --worker that runs the worker (PREFIX "exec "
# to exec it, "" not to) with stage STAGE's steps SECONDS longer (BATON_FAULT_STEP_SLEEP,
# for that stage's specs only)
slow_stage() {
  printf '#!/bin/bash\n[[ $* == *"/specs/s0%s-"* ]] && export BATON_FAULT_STEP_SLEEP=%s\n%s"%s" "$@"\n' \
    "$1" "$2" "$3" "$worker" >wrap.sh
  chmod +x wrap.sh
}
# The runs struck below take 0.15 s longer per step (BATON_FAULT_STEP_SLEEP, a test hook
# of baton-worker), so that a strike lands within a step or two of its aim however fast
# the steps are: a fast stage could otherwise end between wait_step and the strike.
# worker_pids LOG [RANK...]: the pids of that attempt's workers (all, or those ranks)
worker_pids() {
  local spec
  spec=$(basename "$1" .log)
  for p in $(pgrep -f -- "--spec $work/r1/specs/$spec.pb" || true); do
    local r
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^PMIX_RANK=//p')
    if [[ $# -eq 1 ]] || [[ " ${*:2} " == *" $r "* ]]; then echo "$p"; fi
  done
}
strike() { # STAGE FROM TO SIGNAL [RANKS...]: at a random step in [FROM, TO]
  local k=$(($2 + RANDOM % ($3 - $2 + 1))) log pids
  log=$(wait_step "$1" "$k")
  pids=$(worker_pids "$log" "${@:5}")
  [[ $# -eq 4 ]] && pids=$(shuf -n 1 <<<"$pids")
  [[ -n $pids ]] || { pgrep -af baton-worker | cut -c1-160; fail "no worker to strike in $log"; }
  echo "stage $1 step $k: SIG$4 to pid(s) $(echo $pids)"
  kill -s "$4" $pids
  struck=$log struck_pids=$pids
}
# two_rank_recipe NAME STEPS [EXTRA] [MODEL]: one dp2 stage over the fortunes; EXTRA more
# entries of its defaults (default: checkpoints every 4 steps, keep 2; 3 restarts, a 0.2 s
# backoff, a 10 s heartbeat timeout), MODEL another model (default: a tiny llama)
two_rank_recipe() {
  local extra=${3:-} model=${4:-}
  [[ -n $extra ]] || extra='checkpoint: {every_steps: 4, keep: 2},
           restart: {max_restarts: 3, backoff: 0.2s, heartbeat_timeout: 10s}'
  [[ -n $model ]] ||
    model='{arch: llama, dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 176, vocab_size: 272, rope: {theta: 10000}}'
  cat <<YAML
name: $1
seed: 3
model: $model
cluster: {nodes: 1, gpus_per_node: 2, device: cpu}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults: {seq_len: 64, global_batch: 4, micro_batch: 1, optimizer: {lr: 3e-3, warmup_steps: 1},
           $extra}
stages:
  - {name: a, steps: $2, parallel: {tp: 1, pp: 1, dp: 2}}
YAML
}
# one_rank_recipe NAME EXTRA STAGE...: a one-rank recipe over the fortunes (a tiny llama),
# EXTRA more entries of its defaults (YAML flow, may be empty), each STAGE a flow mapping.
one_rank_recipe() {
  local name=$1 extra=$2
  shift 2
  cat <<YAML
name: $name
seed: 3
model: {arch: llama, dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 176,
        vocab_size: 272, rope: {theta: 10000}}
cluster: {nodes: 1, gpus_per_node: 1, device: cpu}
data: {train: data/fortunes_train, valid: data/fortunes_valid}
defaults: {seq_len: 64, global_batch: 4, micro_batch: 1, optimizer: {lr: 3e-3, warmup_steps: 1}${extra:+, $extra}}
stages:
YAML
  printf '  - %s\n' "$@"
}
