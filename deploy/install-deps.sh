#!/usr/bin/env bash
# Installs every Debian package baton needs to build, run and test. Idempotent: when
# everything is present it prints nothing and exits 0. Needs root (or sudo) only when
# something is missing. Nothing is ever downloaded at run time.
#
#   deploy/install-deps.sh            build + run dependencies
#   deploy/install-deps.sh --test     also what the test suite needs
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config clang clang-format libclang-rt-14-dev
  libprotobuf-c-dev protobuf-c-compiler libyaml-dev
  libpmix-dev libpmix-bin libgloo-dev libibverbs-dev libhiredis-dev
  libopenblas-dev libarchive-dev libcurl4-openssl-dev
  fortunes-min fortunes
)
test_pkgs=(python3 python3-protobuf python3-numpy python3-torch nginx
  munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins iproute2
  zstd gdb util-linux)

want=("${build_pkgs[@]}")
if [[ "${1:-}" == "--test" ]]; then
  want+=("${test_pkgs[@]}")
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--test]" >&2
  exit 2
fi

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
