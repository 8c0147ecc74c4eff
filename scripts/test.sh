#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Sets up (scripts/setup.sh) and runs the whole test suite: unit, conformance
# over every registered tree, CLI, and the bounded crash exploration.  Long
# explorations (label "long") are left to scripts/test.sh --long.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
labels=(-LE long)
[[ "${1:-}" == "--long" ]] && labels=()
ctest --test-dir "${PMTREE_BUILD_DIR:-build}" "${labels[@]}" -j "$(nproc)" --output-on-failure --timeout 900
