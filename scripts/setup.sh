#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Installs what pmtree needs from Debian 12 (when missing) and builds it into
# build/.  Idempotent: a second run only rebuilds what changed.
#   PMTREE_BUILD_TYPE  Release | RelWithDebInfo (default) | Debug
#   PMTREE_BUILD_DIR   build directory (default build)
#   PMTREE_SANITIZE    address | thread (a sanitizer build; use another build dir)
#   PMTREE_TARGETS     build only these CMake targets (space-separated; default all)
#   PMTREE_CCACHE      0: compile without ccache (default: use it when installed)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config libpmem2-dev libgtest-dev libgmock-dev libcli11-dev
          nlohmann-json3-dev liblmdb-dev libdb++-dev libabsl-dev python3-matplotlib redis-tools
          librocksdb-dev ccache libzydis-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

build_dir=${PMTREE_BUILD_DIR:-build}
werror=OFF
[[ -n "${CI:-}" ]] && werror=ON
# ccache keyed on paths relative to this checkout (CCACHE_BASEDIR, and no
# working directory in the hash of -g builds), so a second clone -- CI's --
# reuses what an earlier build compiled.
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_C_COMPILER_LAUNCHER=)
if [[ "${PMTREE_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" -G Ninja "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE="${PMTREE_BUILD_TYPE:-RelWithDebInfo}" \
  -DPMTREE_SANITIZE="${PMTREE_SANITIZE:-}" \
  -DPMTREE_WERROR="$werror" >/dev/null
targets=()
for t in ${PMTREE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
echo "setup: built $build_dir (${PMTREE_TARGETS:-all targets})" >&2
