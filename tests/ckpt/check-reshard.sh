#!/usr/bin/env bash
# Checkpoints load under any layout: a stage trained 20 steps under layout A, saved at
# step 10, is resumed from that checkpoint under layout B; steps 11-20 must give A's
# losses within 1e-5 relative (and, when B is A, bitwise the same losses).
#   check-reshard.sh BATON BATON_WORKER SOURCE_DIR CASE
# CASE is A-to-B with layouts written as tp2pp2, dp4, dp2z1, dp2z3, cp2, tp1 ... (see layout;
# zN: parallel.zero N, so dp2z3 is ZeRO-3 over dp2; epN: expert parallelism, its ranks
# taken from dp, or from tp x dp when tp > 1 and zero < 2: the tp ranks fold in), with
# -offline appended: through `baton ckpt reshard --to B` instead of
# resharding on load. A CASE starting with moe- trains reshard-moe.yaml (an MoE model).
# moe-fp8-: the MoE model in fp8 (the experts' delayed scaling states by global expert,
# their histories in the shards: copied by the offline reshard, every one verified).
# ppNvM: an interleaved pipeline of M chunks per stage (parallel.virtual_stages); slDDD:
# parallel.stage_layers, one digit per stage (sl13: [1, 3]); a CASE with either trains
# the model with 4 layers instead of 2.
set -euo pipefail
baton=$1 worker=$2 src=$3 case=$4
export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d /tmp/baton-test-reshard.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
  --output data/fortunes >/dev/null

# layout name -> "ranks|parallel block"
layout() {
  local tp=1 pp=1 dp=1 cp=1 ep=1 z=0 v=1 s=$1
  [[ $s =~ tp([0-9]+) ]] && tp=${BASH_REMATCH[1]}
  [[ $s =~ pp([0-9]+) ]] && pp=${BASH_REMATCH[1]}
  [[ $s =~ dp([0-9]+) ]] && dp=${BASH_REMATCH[1]}
  [[ $s =~ cp([0-9]+) ]] && cp=${BASH_REMATCH[1]}
  [[ $s =~ ep([0-9]+) ]] && ep=${BASH_REMATCH[1]}
  [[ $s =~ (z|zero)([0-3]) ]] && z=${BASH_REMATCH[2]}
  [[ $s =~ pp[0-9]+v([0-9]+) ]] && v=${BASH_REMATCH[1]}
  local sl=""
  [[ $s =~ sl([0-9]+) ]] && sl=", stage_layers: [$(echo "${BASH_REMATCH[1]}" | sed 's/./&, /g; s/, $//')]"
  echo "$((tp * pp * dp * cp))|{tp: $tp, pp: $pp, cp: $cp, dp: $dp, ep: $ep, zero: $z, virtual_stages: $v$sl}"
}

# run_layout NAME LOG [worker options...]: trains under layout NAME
run_layout() {
  local name=$1 log=$2
  shift 2
  local spec ranks par
  IFS='|' read -r ranks par < <(layout "$name")
  sed "s/RANKS/$ranks/; s/LAYOUT/$par/; $layers" "$src/tests/ckpt/$recipe" >"$name.yaml"
  "$baton" spec "$name.yaml" --out "$name.pb"
  if [[ $ranks == 1 ]]; then
    "$worker" --spec "$name.pb" --eval-windows 0 "$@" >"$log"
  else
    timeout 300 "$baton" launch -n "$ranks" -- "$worker" --spec "$name.pb" --eval-windows 0 \
      --comm-timeout 30 "$@" >"$log"
  fi
}

losses() { sed -En 's/^(\[0\] )?step +([0-9]+)\/[0-9]+  loss ([0-9.]+).*/\2 \3/p' "$1"; }

# CASE ending in -offline: `baton ckpt reshard` rewrites the checkpoint for B first.
offline=0 recipe=reshard.yaml
[[ $case == *-offline ]] && offline=1
[[ $case == moe-* ]] && recipe=reshard-moe.yaml
layers=""
[[ $case =~ pp[0-9]+v[0-9]|sl[0-9] ]] && layers="s/n_layers: 2/n_layers: 4/"
pair=${case%-offline}
pair=${pair#moe-}
fp8=0
if [[ $pair == fp8-* ]]; then # every layer's GEMMs, the experts' too, in fp8
  fp8=1 pair=${pair#fp8-}
  layers="${layers:+$layers; }s/^    micro_batch: 1/&\n    precision: {type: fp8, first_last_bf16: false}/"
fi
a=${pair%%-to-*} b=${pair##*-to-}
init=runA/checkpoints/s00-step00000010
run_layout "$a" a.log --run-dir runA --save-every 10
if ((offline)); then
  to=$b # slDDD as reshard's layers=D+D+D
  [[ $to =~ sl([0-9]+) ]] && to=${to/sl${BASH_REMATCH[1]}/,layers=$(sed 's/./&+/g; s/+$//' <<<"${BASH_REMATCH[1]}")}
  "$baton" ckpt reshard "$init" --to "$to" --out resharded/s00-step00000010 >/dev/null
  "$baton" ckpt verify resharded/s00-step00000010 >verify.log ||
    { echo "$case: the resharded checkpoint fails verification"; cat verify.log; exit 1; }
  # inspect shows the layout in --to's syntax, interleaving and stage split included
  shown=$("$baton" ckpt inspect resharded/s00-step00000010 | sed -En 's/^  saved under ([^ ]+) by .*/\1/p')
  if [[ $to =~ v([0-9]+) ]] && [[ $shown != *",v${BASH_REMATCH[1]},"* ]]; then
    echo "$case: inspect shows '$shown', without the v${BASH_REMATCH[1]} of --to $to"; exit 1
  fi
  if [[ $to =~ layers=([0-9+]+) ]] && [[ $shown != *",layers=${BASH_REMATCH[1]},"* ]]; then
    echo "$case: inspect shows '$shown', without the layers=${BASH_REMATCH[1]} of --to $to"; exit 1
  fi
  if ((fp8)); then # every fp8 state's history copied into a shard and checked
    states=$("$baton" ckpt inspect resharded/s00-step00000010 | sed -En 's/.*; ([0-9]+) fp8 scaling state.*/\1/p')
    grep -q ": [0-9]* tensors, ${states:-none} fp8 histories, " verify.log && ((states > 0)) ||
      { echo "$case: $states fp8 states, but verify checked other histories"; cat verify.log; exit 1; }
    echo "$case: $(cat verify.log)"
  fi
  init=resharded/s00-step00000010
fi
run_layout "$b" b.log --run-dir runB --init "$init"
grep -q "started from $init at step 10" b.log ||
  { echo "$case: B did not resume at step 10"; cat b.log; exit 1; }
paste <(losses a.log | awk '$1 > 10') <(losses b.log) | awk -v name="$case" -v same=$([[ $a == "$b" ]] && echo 1 || echo 0) '
  { n++; if ($1 != $3) { print name ": step mismatch " $1 " " $3; bad = 1 }
    d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r
    if (same && $2 != $4) { printf "%s: step %d loss %s, never-stopped %s\n", name, $1, $4, $2; bad = 1 }
    if (d > 1e-5 * $2) { printf "%s: step %d loss %s vs %s\n", name, $1, $4, $2; bad = 1 } }
  END { if (n != 10) { print name ": " n " steps compared"; bad = 1 }
        printf "%s: steps 11-20 after the reload, max relative loss difference %.3g%s\n",
               name, worst, same ? " (bitwise required)" : ""
        exit bad }'
if ((fp8 && offline)); then
  # the last history's last float damaged: verify names it, inspect --json still lists
  # every state, that one with an error instead of its history, and exits 1
  ck=resharded/s00-step00000010
  chmod u+w "$ck/rank-00000.bin"
  printf '\x5a' | dd of="$ck/rank-00000.bin" bs=1 seek=$(($(stat -c %s "$ck/rank-00000.bin") - 2)) \
    conv=notrunc status=none
  if "$baton" ckpt verify "$ck" >verify2.log; then echo "$case: verify missed a damaged history"; exit 1; fi
  grep -q "damaged (CRC32C mismatch): tensor fp8_history\." verify2.log ||
    { echo "$case: verify did not name the history"; cat verify2.log; exit 1; }
  if "$baton" ckpt inspect "$ck" --json >inspect.json 2>inspect.err; then
    echo "$case: inspect --json exited 0 on a damaged history"; exit 1
  fi
  /usr/bin/python3 - inspect.json "$states" <<'PY' || { echo "$case: inspect --json"; cat inspect.err; exit 1; }
import json, sys
f = json.load(open(sys.argv[1]))["fp8"]
bad = [s for s in f if s["amax_history"] is None]
assert len(f) == int(sys.argv[2]) and len(bad) == 1 and "CRC32C" in bad[0]["error"], bad
print(f"{len(f)} states listed, {bad[0]['name']}: {bad[0]['error']}")
PY
fi
