#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Sets up (scripts/setup.sh) and runs the whole test suite: unit, conformance
# over every registered tree, CLI, and the bounded crash exploration.
#   scripts/test.sh           the default run (label "long" excluded)
#   scripts/test.sh --long    also the long explorations
#   scripts/test.sh --tsan    the concurrent tests only, in a ThreadSanitizer
#                             build (build-tsan/): every test whose name says
#                             Concurrent or Thread, across all trees
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --tsan)
    # Only the test binaries that hold concurrent tests are built: a full
    # TSan build would double CI time for nothing it checks.
    export PMTREE_SANITIZE=thread PMTREE_BUILD_DIR=${PMTREE_TSAN_BUILD_DIR:-build-tsan}
    targets="conformance_test pm_test bench_test kv_test"
    for d in src/trees/*/; do
      t=$(basename "$d")_test
      grep -qs "pmtree_test($t " "$d/sources.cmake" && targets+=" $t"
    done
    PMTREE_TARGETS=$targets scripts/setup.sh
    # halt_on_error: a report fails the test instead of only printing.
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
      ctest --test-dir "$PMTREE_BUILD_DIR" -R 'Concurrent|Thread' -j "$(nproc)" \
      --output-on-failure --timeout 900 --no-tests=error
    ;;
  --long) scripts/setup.sh
    ctest --test-dir "${PMTREE_BUILD_DIR:-build}" -j "$(nproc)" --output-on-failure --timeout 900 ;;
  "") scripts/setup.sh
    ctest --test-dir "${PMTREE_BUILD_DIR:-build}" -LE long -j "$(nproc)" --output-on-failure --timeout 900 ;;
  *) echo "usage: scripts/test.sh [--long | --tsan]" >&2; exit 2 ;;
esac
