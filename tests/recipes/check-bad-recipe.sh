#!/usr/bin/env bash
# Runs `baton plan` on a malformed recipe and checks that it fails the way the file's
# first line says: exit status 2 and stderr containing the text after "# expect: ",
# with {file} standing for the recipe's file name. Also fails on a crash or on any
# sanitizer report.
#   check-bad-recipe.sh BATON RECIPE
set -u
baton=$1 recipe=$2
dir=$(dirname "$recipe") name=$(basename "$recipe")
expect=$(head -n 1 "$recipe" | sed -n 's/^# expect: //p')
if [[ -z "$expect" ]]; then
  echo "FAIL: $recipe has no '# expect: ' first line" >&2
  exit 1
fi
expect=${expect//\{file\}/$name}
err=$(cd "$dir" && "$baton" plan "$name" 2>&1 >/dev/null)
rc=$?
echo "exit $rc: $err"
if [[ $rc -ne 2 ]]; then
  echo "FAIL: expected exit status 2, got $rc" >&2
  exit 1
fi
if [[ "$err" != *"$expect"* ]]; then
  echo "FAIL: expected stderr to contain: $expect" >&2
  exit 1
fi
if [[ "$err" == *"Sanitizer"* || "$err" == *"runtime error"* ]]; then
  echo "FAIL: sanitizer report" >&2
  exit 1
fi
