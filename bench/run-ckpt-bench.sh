#!/usr/bin/env bash
# Checkpoint I/O against cp/cat of the same bytes on the same disk (not a test).
#   bench/run-ckpt-bench.sh BUILD_BIN_DIR [WORK_DIR] [ROUNDS]
# Saves a ~0.6 GB checkpoint (weights + AdamW moments of a ~50M-parameter model) with
# baton-worker, copies the same files with `cp -r` + sync (which copies inside the kernel,
# copy_file_range) and with dd (through user memory, as a save must), loads the checkpoint back in a
# new worker, and reads the same files with cat > /dev/null (page cache dropped first
# when we may), ROUNDS times; prints medians and the throughput ratios (goal >= 0.8),
# then the training stall of an async save against the sync save.
set -euo pipefail
bin=$1 work=${2:-$(mktemp -d /tmp/baton-ckpt-bench.XXXXXX)} rounds=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work" && cd "$work"
trap 'rm -rf "$work"/run "$work"/copy' EXIT
[[ -e data/fortunes_train.bin ]] || "$bin/baton" data prepare --input /usr/share/games/fortunes \
  --split-on-percent --output data/fortunes >/dev/null
"$bin/baton" spec "$src/bench/ckpt-bench.yaml" --out bench.pb
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { print b - a }'; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
: >save.t; : >cp.t; : >dd.t; : >load.t; : >cat.t; : >async.t
for ((r = 0; r < rounds; r++)); do
  rm -rf run copy
  "$bin/baton-worker" --spec bench.pb --single-process --eval-windows 0 --steps 1 \
    --run-dir run --save-every 0 | sed -En 's/^checkpoint .* saved in ([0-9.]+) s/\1/p' >>save.t
  ck=$(ls -d run/checkpoints/s00-*)
  bytes=$(du -sb "$ck" | cut -f1)
  drop
  t0=$(now); cp -r "$ck" copy; sync; t1=$(now)
  elapsed "$t0" "$t1" >>cp.t
  rm -rf copy && mkdir copy && drop
  t0=$(now)
  for f in "$ck"/*; do dd if="$f" of="copy/${f##*/}" bs=4M conv=fsync status=none; done
  t1=$(now)
  elapsed "$t0" "$t1" >>dd.t
  drop
  "$bin/baton-worker" --spec bench.pb --single-process --eval-windows 0 --init "$ck" \
    --run-dir run2 --save-every 0 --steps 1 |
    sed -En 's/^started from .* loaded in ([0-9.]+) s/\1/p' >>load.t
  rm -rf run2
  drop
  t0=$(now); cat "$ck"/* >/dev/null; t1=$(now)
  elapsed "$t0" "$t1" >>cat.t
  rm -rf run
  "$bin/baton-worker" --spec bench.pb --single-process --eval-windows 0 --steps 1 \
    --run-dir run --save-every 0 --async-save |
    sed -En 's/^checkpoint .* snapshot taken.* in ([0-9.]+) s/\1/p' >>async.t
done
save=$(median <save.t) cp=$(median <cp.t) dd=$(median <dd.t) load=$(median <load.t) cat=$(median <cat.t)
async=$(median <async.t)
awk -v b="$bytes" -v s="$save" -v c="$cp" -v d="$dd" -v l="$load" -v k="$cat" -v a="$async" -v n="$rounds" 'BEGIN {
  mb = b / 1e6
  printf "checkpoint: %.0f MB, medians of %d rounds\n", mb, n
  printf "save  %.3f s  %7.0f MB/s   cp -r + sync %.3f s  %7.0f MB/s   ratio %.2f\n", s, mb / s, c, mb / c, c / s
  printf "                               dd bs=4M conv=fsync %.3f s  %7.0f MB/s   ratio %.2f\n", d, mb / d, d / s
  printf "load  %.3f s  %7.0f MB/s   cat > /dev/null %.3f s  %7.0f MB/s   ratio %.2f\n", l, mb / l, k, mb / k, k / l
  printf "async save: training stalled %.3f s (snapshot) against %.3f s for the sync save\n", a, s }'
