# Shared by check-dp.sh, check-tp.sh and check-pp.sh: run a stage once as one process
# (`baton-worker --single-process`, the reference) and once under `baton launch -n N`
# with its parallel layout, then require every step's loss and the final (global)
# parameters to agree within 1e-5 relative. Source it, then:
#   layout_setup BATON BATON_WORKER SOURCE_DIR [CASE]   (CASE: run only that case)
#   layout_wanted NAME || return 0                       (at the top of each case)
#   layout_run NAME RANKS RECIPE STAGE
#   layout_finish "summary line"

layout_setup() {
  baton=$1 worker=$2 src=$3 only=${4:-}
  ran=0 failures=0
  # Under ASan, OpenPMIx's own leaks are suppressed (see that file); ours are not.
  export LSAN_OPTIONS="suppressions=$src/tests/launch/lsan-pmix.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  work=$(mktemp -d /tmp/baton-test-layout.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  "$baton" data prepare --input /usr/share/games/fortunes --split-on-percent \
    --output data/fortunes >/dev/null
}

layout_wanted() { # NAME
  [[ -z "$only" || "$1" == "$only" ]] || return 1
  ran=$((ran + 1))
}

layout_losses() { sed -En 's/^(\[0\] )?step +([0-9]+)\/[0-9]+  loss ([0-9.]+).*/\2 \3/p' "$1"; }

layout_compare_losses() { # NAME REF_LOG LOG
  paste <(layout_losses "$2") <(layout_losses "$3") | awk -v name="$1" '
    { n++; if ($1 != $3) { print name ": step mismatch"; bad = 1 }
      d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r
      if (d > 1e-5 * $2) { printf "%s: step %d loss %s vs %s\n", name, $1, $4, $2; bad = 1 } }
    END { if (n != 20) { print name ": " n " steps"; bad = 1 }
          printf "%s: %d steps, losses max relative difference %.3g\n", name, n, worst
          exit bad }'
}

# fp8: a float rounding difference (the order of a sum) moves quantized values a step, so
# the layouts agree with their reference to the printed digits only for the first steps:
# steps 1..EARLY within 1e-6 relative, all 20 within 1e-3.
layout_fp8_losses() { # NAME REF_LOG LOG EARLY
  paste <(layout_losses "$2") <(layout_losses "$3") | awk -v name="$1" -v early="$4" '
    { n++; d = $2 - $4; if (d < 0) d = -d; r = d / $2
      if ($1 != $3) { print name ": step mismatch"; bad = 1 }
      if (($1 <= early && r > 1e-6) || r > 1e-3) { printf "%s: step %d loss %s vs %s\n", name, $1, $4, $2; bad = 1 }
      if ($1 <= early && r > we) we = r; if (r > worst) worst = r }
    END { if (n != 20) { print name ": " n " steps"; bad = 1 }
          printf "%s: losses max relative difference %.3g in the first %d steps, %.3g in all 20\n", name, we, early, worst
          exit bad }'
}

# TOL: the largest difference over the largest parameter, 1e-5 unless given. L2_TOL: the
# difference's norm over the parameters' norm too (fp8: one parameter's whole AdamW step
# sets the largest difference, the norm follows them all).
layout_compare_params() { # NAME REF_PARAMS PARAMS [TOL [L2_TOL]]
  /usr/bin/python3 - "$2" "$3" "$1" "${4:-1e-5}" "${5:-}" <<'PY'
import sys
import numpy as np
ref, got = (np.fromfile(p, dtype="<f4").astype(np.float64) for p in sys.argv[1:3])
name, tol, l2_tol = sys.argv[3], float(sys.argv[4]), sys.argv[5]
same = ref.size == got.size
rel = np.abs(ref - got).max() / np.abs(ref).max() if same else float("inf")
print(f"{name}: final parameters ({got.size} of {ref.size}) max relative difference {rel:.3g}"
      f" (limit {tol:g})")
ok = rel <= tol
if l2_tol:
    l2 = np.linalg.norm(ref - got) / np.linalg.norm(ref) if same else float("inf")
    print(f"{name}: final parameters' difference, L2 relative {l2:.3g} (limit {float(l2_tol):g})")
    ok = ok and l2 <= float(l2_tol)
sys.exit(0 if ok else 1)
PY
}

# LAYOUT_EVAL=N: both runs also evaluate N windows after training, and the validation
# losses must agree as the training losses do.
layout_run() { # NAME RANKS RECIPE STAGE
  local name=$1 n=$2 recipe=$3 stage=$4 eval=${LAYOUT_EVAL:-0}
  "$baton" spec "$recipe" --stage "$stage" --out "$name.pb"
  "$worker" --spec "$name.pb" --single-process --eval-windows "$eval" \
    --dump-params "$name.ref" >"$name.ref.log"
  timeout 300 "$baton" launch -n "$n" -- "$worker" --spec "$name.pb" --eval-windows "$eval" \
    --comm-timeout 30 --dump-params "$name.params" >"$name.log"
  layout_compare_losses "$name" "$name.ref.log" "$name.log" || failures=$((failures + 1))
  layout_compare_params "$name" "$name.ref" "$name.params" || failures=$((failures + 1))
  if ((eval > 0)); then layout_compare_eval "$name" "$name.ref.log" "$name.log" ||
    failures=$((failures + 1)); fi
}

layout_compare_eval() { # NAME REF_LOG LOG
  local want got
  want=$(sed -En 's/^valid loss ([0-9.]+) .*/\1/p' "$2" | tail -1)
  got=$(sed -En 's/^\[0\] valid loss ([0-9.]+) .*/\1/p' "$3" | tail -1)
  awk -v n="$1" -v w="$want" -v g="$got" 'BEGIN {
    d = w - g; if (d < 0) d = -d
    printf "%s: validation loss %s, one process %s\n", n, g, w
    exit (w == "" || g == "" || d > 1e-5 * w) }'
}

# pp.yaml with interleaved stages instead of its own (virtual_stages 2; pp.yaml's pp3 and
# pp4 cases could not validate them): stages interleaved, interleaved-zero1,
# interleaved-full; SED edits it further.
layout_interleaved_recipe() { # SED
  sed '/^stages:/q' "$src/tests/engine/pp.yaml" | sed "${1:-}"
  cat <<'EOF'
  - {name: interleaved, parallel: {virtual_stages: 2}}
  - {name: interleaved-zero1, parallel: {virtual_stages: 2, zero: 1}}
  - {name: interleaved-full, recompute: full, parallel: {virtual_stages: 2, zero: 0}}
EOF
}

# A layout_run's log then: every one of RANKS ranks printed a line matching PATTERN.
layout_check_ranks_say() { # NAME RANKS PATTERN WHAT
  local n
  n=$(grep -c "$3" "$1.log" || true)
  if [[ $n -ne $2 ]]; then
    echo "FAIL: $1: $n of $2 ranks $4"
    failures=$((failures + 1))
  fi
}

# BATON_DP_OVERLAP=1 layout_run ... then this: every rank reduced its data-parallel
# gradients per layer during the backward (train_dp_overlap.h).
layout_check_overlap() { # NAME RANKS
  layout_check_ranks_say "$1" "$2" "per layer .*during the backward" \
    "reduced their gradients per layer during the backward"
}

# BATON_PP_OVERLAP=1 layout_run ... then this: every rank deferred its pipeline sends
# (pipeline.h).
layout_check_pp_overlap() { # NAME RANKS
  layout_check_ranks_say "$1" "$2" "pipeline transfers: sends waited for late" \
    "deferred their pipeline sends"
}

layout_finish() { # SUMMARY
  [[ $ran -gt 0 ]] || { echo "FAIL: no case named '$only'"; exit 1; }
  [[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
  echo "$1"
}

# A layout_run's (or launch's) log then: every rank's "model state allocated" figures
# (parameters, gradients, optimizer; one line from each of the plan's world ranks, none
# missing) and rank 0's dp bytes per step within 10% of
# `baton plan --json`'s for STAGE of NAME.yaml. With MODE "heaviest" (pipeline stages
# that hold different layers) the plan's figures, its heaviest stage's, must be the
# largest rank's within 10%, and no rank's above them by more.
layout_check_plan() { # NAME STAGE [MODE]
  "$baton" plan "$1.yaml" --json >"$1.plan.json"
  /usr/bin/python3 - "$1" "$2" "$1.plan.json" "$1.log" "${3:-every}" <<'PY'
import json, re, sys
name, stage, plan_path, log_path, mode = sys.argv[1:6]
plan = next(s for s in json.load(open(plan_path))["stages"] if s["name"] == stage)
mem = plan["memory_per_gpu"]
pat = re.compile(r"^\[(\d+)\] model state allocated by this rank \(zero \d\): params (\d+) "
                 r"grads (\d+) optimizer (\d+) bytes")
bad, ranks, most, seen = 0, 0, {}, set()
for line in open(log_path):
    m = pat.match(line)
    if not m:
        continue
    ranks += 1
    seen.add(int(m.group(1)))
    got = dict(zip(("params", "grads", "optimizer"), map(float, m.groups()[1:])))
    for k, v in got.items():
        most[k] = max(most.get(k, 0), v)
        rel = abs(v - mem[k]) / mem[k]
        off = rel > 0.10 if mode == "every" else v > 1.10 * mem[k]
        if m.group(1) == "0" or off:
            print(f"{name}: rank {m.group(1)} {k} allocated {v:.0f} B, plan {mem[k]:.0f} ({rel:.2%})")
        bad |= off
if mode != "every":
    for k, v in most.items():
        rel = abs(v - mem[k]) / mem[k]
        print(f"{name}: the most any rank allocated for {k}: {v:.0f} B, plan {mem[k]:.0f} ({rel:.2%})")
        bad |= rel > 0.10
# the plan's dp traffic is its busiest rank's (under pp its busiest stage's): the most any
# rank sent
sent = [float(re.search(r" dp (\d+)", l).group(1)) for l in open(log_path)
        if re.match(r"^\[\d+\] communication per step", l)]
if not sent:
    sys.exit(f"{name}: no rank printed its communication per step")
dp = max(sent)
want = plan["comm_bytes_per_step"]["dp"]
rel = abs(dp - want) / want if want else float(dp != 0)
print(f"{name}: dp measured {dp:.0f} B/step, plan {want:.0f} ({rel:.2%}); {ranks} ranks checked")
if ranks != plan["world"] or seen != set(range(plan["world"])):
    print(f"{name}: model state lines from ranks {sorted(seen)} ({ranks} lines), "
          f"expected one from each of the plan's {plan['world']} ranks")
    bad = 1
sys.exit(1 if bad or rel > 0.10 or ranks == 0 else 0)
PY
}
