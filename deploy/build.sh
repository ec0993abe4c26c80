#!/usr/bin/env bash
# Configures and builds baton into build/ (or $BUILD_DIR). Extra arguments go to cmake's
# configure step, e.g. deploy/build.sh -DBATON_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
elif [[ $# -gt 0 ]]; then
  cmake -S . -B "$build" "$@" >/dev/null
fi
cmake --build "$build" --parallel "$(nproc)"
