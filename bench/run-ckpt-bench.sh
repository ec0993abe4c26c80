#!/usr/bin/env bash
# Checkpoint I/O against tools that move the same bytes on the same disk (not a test).
#   bench/run-ckpt-bench.sh BUILD_BIN_DIR [WORK_DIR] [ROUNDS]
# Each round, like for like:
#  - save: baton-worker writes a ~0.6 GB checkpoint (weights + AdamW moments of a
#    ~50M-parameter model) from memory and fsyncs it. The peers write the same files from
#    memory to the same directory too: `cp -r` + sync from the page cache (the source read
#    first; a copy inside the kernel), and dd bs=4M conv=fsync from a copy in /dev/shm
#    (through user memory as a save is, each file fsynced as the save fsyncs its shard);
#  - load: a new worker loads the checkpoint, cat reads the same files into /dev/null; both
#    cold (the page cache dropped first) where we may drop it, else both warm (read once
#    first): the first line says which;
#  - the training stall of async saves: the first (allocating the host copy) and the next
#    (reusing it), against the sync save.
# Prints medians, throughput ratios (goal >= 0.8) and each side's CPU time (user + sys; the
# worker's own count for baton's side). `sync` leaves part of its writeback to the kernel's
# flusher threads, which no process is charged for: cp's CPU is a lower bound. The workers
# run with OPENBLAS_NUM_THREADS=1 (no BLAS thread spinning through the save).
set -euo pipefail
bin=$1 work=${2:-$(mktemp -d /tmp/baton-ckpt-bench.XXXXXX)} rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work" && cd "$work"
shm=$(mktemp -d /dev/shm/baton-ckpt-bench.XXXXXX)
trap 'rm -rf "$work"/run "$work"/run2 "$work"/copy "$shm"' EXIT
[[ -e data/fortunes_train.bin ]] || "$bin/baton" data prepare --input /usr/share/games/fortunes \
  --split-on-percent --output data/fortunes >/dev/null
"$bin/baton" spec "$src/bench/ckpt-bench.yaml" --out bench.pb
export OPENBLAS_NUM_THREADS=1
cold=1
sync
echo 3 2>/dev/null >/proc/sys/vm/drop_caches || cold=0
# cold: drop the page cache; warm: read FILES... into it
prepare_read() {
  if ((cold)); then sync && echo 3 >/proc/sys/vm/drop_caches; else cat "$@" >/dev/null; fi
}
# timed FILE CMD...: appends "wall cpu" (seconds; cpu = user + sys of CMD and its children)
timed() {
  local out=$1 t
  shift
  t=$( { TIMEFORMAT='%3R %3U %3S'; time "$@" >/dev/null; } 2>&1 | tail -n 1)
  awk '{ print $1, $2 + $3 }' <<<"$t" >>"$out"
}
worker() { "$bin/baton-worker" --spec bench.pb --single-process --eval-windows 0 "$@"; }
# the worker's "in W s (C s CPU)" / "loaded in W s, C s CPU" as "W C"
save_t() { sed -En 's/^checkpoint .*: saved in ([0-9.]+) s \(([0-9.]+) s CPU\)$/\1 \2/p'; }
load_t() { sed -En 's/^started from .* loaded in ([0-9.]+) s, ([0-9.]+) s CPU .*/\1 \2/p'; }
stall_t() { sed -En 's/^checkpoint .*: snapshot taken.* in ([0-9.]+) s( \(.*)?$/\1/p'; }
cp_sync() { cp -r "$1" copy && sync; }
dd_all() { for f in "$shm"/*; do dd if="$f" of="copy/${f##*/}" bs=4M conv=fsync status=none; done; }
: >save.t; : >cp.t; : >dd.t; : >load.t; : >cat.t; : >async1.t; : >async2.t
for ((r = 0; r < rounds; r++)); do
  rm -rf run copy && sync
  worker --steps 1 --run-dir run --save-every 0 | save_t >>save.t
  ck=$(ls -d run/checkpoints/s00-*)
  bytes=$(du -sb "$ck" | cut -f1)
  cat "$ck"/* >/dev/null && sync
  timed cp.t cp_sync "$ck"
  rm -rf copy "${shm:?}"/* && mkdir copy && cp "$ck"/* "$shm"/ && sync
  timed dd.t dd_all
  rm -rf copy "${shm:?}"/*
  prepare_read "$ck"/*
  worker --init "$ck" --run-dir run2 --save-every 0 --steps 1 | load_t >>load.t
  rm -rf run2
  prepare_read "$ck"/*
  timed cat.t cat "$ck"/*
  rm -rf run && sync
  # two async saves: step 1's allocates the host copy, step 2's (the stage's end) reuses it
  worker --steps 2 --run-dir run --save-every 1 --async-save | stall_t >a.t
  sed -n 1p a.t >>async1.t && sed -n 2p a.t >>async2.t
done
# median of column $1 of the lines on stdin (the mean of the middle two for an even count)
median() {
  awk -v c="${1:-1}" '{ print $c }' | sort -g |
    awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
m() { median "$2" <"$1.t"; }
awk -v b="$bytes" -v n="$rounds" -v cold="$cold" \
  -v s="$(m save 1)" -v sc="$(m save 2)" -v c="$(m cp 1)" -v cc="$(m cp 2)" \
  -v d="$(m dd 1)" -v dc="$(m dd 2)" -v l="$(m load 1)" -v lc="$(m load 2)" \
  -v k="$(m cat 1)" -v kc="$(m cat 2)" -v a1="$(m async1 1)" -v a2="$(m async2 1)" 'BEGIN {
  mb = b / 1e6
  printf "checkpoint: %.0f MB, medians of %d rounds; loads %s\n", mb, n,
    cold ? "cold (page cache dropped first)" : "warm (could not drop the page cache: read once first)"
  printf "%-34s %7s %8s %7s %12s %9s\n", "", "wall s", "MB/s", "CPU s", "ratio(wall)", "ratio(CPU)"
  row("save (baton, from memory)", s, sc, 0, 0)
  row("  cp -r + sync (page cache)", c, cc, s, sc)
  row("  dd bs=4M conv=fsync (/dev/shm)", d, dc, s, sc)
  row("load (baton)", l, lc, 0, 0)
  row("  cat > /dev/null", k, kc, l, lc)
  printf "async save: training stalled %.3f s (first save) and %.3f s (next save, the host copy reused) against %.3f s for the sync save\n", a1, a2, s
}
# ratio: the peer over baton (above 1: baton faster, or using less CPU); none for baton
function row(name, w, u, bw, bu) {
  printf "%-34s %7.3f %8.0f %7.3f", name, w, mb / w, u
  if (bw > 0) printf " %12.2f %9.2f", w / bw, (bu > 0 ? u / bu : 0)
  printf "\n"
}'
