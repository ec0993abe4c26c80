#!/usr/bin/env bash
# The `baton` command line: help, usage errors and exit statuses.
#   check-cli.sh BATON RECIPES_DIR
set -u
baton=$1 recipes=$2
failures=0

# expect STATUS PATTERN -- ARGS...: runs baton ARGS, checks the exit status and that
# stdout+stderr match the extended regex PATTERN.
expect() {
  local status=$1 pattern=$2
  shift 3
  local out rc
  out=$("$baton" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: baton $* -> exit $rc (want $status), output:"
    echo "$out" | head -n 5
    failures=$((failures + 1))
  else
    echo "ok   baton $* -> $rc"
  fi
}

expect 2 'usage: baton' -- 
expect 0 'plan +check a recipe' -- --help
expect 0 '^baton [0-9]+\.[0-9]+' -- --version
expect 2 "unknown command 'frobnicate'" -- frobnicate
expect 0 'usage: baton plan RECIPE' -- plan --help
expect 2 'usage: baton plan RECIPE' -- plan
expect 2 "unknown option '--bogus'" -- plan --bogus "$recipes/tiny-cpu.yaml"
expect 2 'one recipe at a time' -- plan "$recipes/tiny-cpu.yaml" "$recipes/llama3-405b.yaml"
expect 2 '/nonexistent/r.yaml: cannot open' -- plan /nonexistent/r.yaml
expect 2 'not a regular file|cannot read|is a directory' -- plan "$recipes"
expect 0 'fits \(' -- plan "$recipes/tiny-cpu.yaml"
expect 0 'stage 2 "fp8"' -- plan "$recipes/tiny-cpu.yaml"
expect 0 '"stages": ?\[' -- plan --json "$recipes/tiny-cpu.yaml"

[[ $failures -eq 0 ]] || { echo "$failures failure(s)"; exit 1; }
