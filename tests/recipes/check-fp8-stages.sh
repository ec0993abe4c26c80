#!/usr/bin/env bash
# Every test and shipped recipe with an fp8 stage runs GEMMs in fp8 there: `baton plan`
# warns "no GEMM runs in fp8" for none of them. With first_last_bf16 (on by default) a
# model of one or two layers keeps every layer in bf16, and the LM head is bf16, so such a
# stage trains as bf16 and a test of it tests nothing of fp8 (tests/run/run.yaml did).
# Checked: the *.yaml under tests/ (but tests/recipes/bad/, meant to fail) and recipes/,
# with a template's RANKS made 4, and the recipes the test scripts write from a quoted
# here-document (<<'YAML'). A file that does not plan (exit 2) fails the check.
#   check-fp8-stages.sh BATON SOURCE_DIR
set -euo pipefail
baton=$1 src=$2
work=$(mktemp -d /tmp/baton-test-fp8.XXXXXX)
trap 'rm -rf "$work"' EXIT

# the here-document recipes: FILE.LINE.yaml for each one with stages: and fp8 in it
/usr/bin/python3 - "$src" "$work" <<'PY'
import glob, os, re, sys
src, out = sys.argv[1:]
for f in sorted(glob.glob(os.path.join(src, "tests", "**", "*.sh"), recursive=True)):
    text = open(f).read()
    for m in re.finditer(r"<<-?'(\w+)'\n(.*?)\n\1\n", text, re.S):
        body = m.group(2)
        if re.search(r"^stages:", body, re.M) and "fp8" in body:
            line = text[:m.start()].count("\n") + 1
            name = os.path.relpath(f, src).replace("/", "_")
            open(os.path.join(out, f"{name}.{line}.yaml"), "w").write(body + "\n")
PY

checked=0 bad=0 seen=""
check() { # FILE SHOWN_AS
  local err rc=0
  grep -q fp8 "$1" || return 0
  sed 's/\bRANKS\b/4/g' "$1" >"$work/plan.yaml"
  err=$("$baton" plan "$work/plan.yaml" 2>&1 >/dev/null) || rc=$?
  if ((rc == 2)); then
    echo "FAIL: $2 does not plan: ${err//"$work/plan.yaml"/$2}"
    bad=$((bad + 1))
  elif grep -q "no GEMM runs in fp8" <<<"$err"; then
    err=$(grep -m1 'no GEMM runs in fp8' <<<"$err")
    echo "FAIL: ${err//"$work/plan.yaml"/$2}"
    bad=$((bad + 1))
  fi
  checked=$((checked + 1)) seen="$seen $2"
}
while IFS= read -r f; do
  check "$f" "${f#"$src"/}"
done < <(find "$src/tests" "$src/recipes" -name '*.yaml' -not -path '*/tests/recipes/bad/*' | sort)
for f in "$work"/*.yaml; do
  [[ $f == "$work/plan.yaml" || ! -e $f ]] || check "$f" "the here-document at $(basename "$f" .yaml)"
done
# not vacuous: the run tests' recipe and run.mfu's here-document were among those checked
[[ $seen == *" tests/run/run.yaml"* && $seen == *"check-supervise.sh."* ]] ||
  { echo "FAIL: tests/run/run.yaml or check-supervise.sh's mfu recipe not checked: $seen"; exit 1; }
echo "$checked recipes with fp8: $bad run no GEMM in fp8 in an fp8 stage"
((bad == 0))
