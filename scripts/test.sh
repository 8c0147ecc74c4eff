#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Sets up (scripts/setup.sh) and runs the whole test suite: unit, conformance
# over every registered tree, CLI, examples, and the bounded crash exploration.
# Tests are chosen by CTest label (see pmtree_test in CMakeLists.txt):
#   scripts/test.sh           the default run (label "long" excluded)
#   scripts/test.sh --long    also the long explorations
#   scripts/test.sh --tsan    the tests labelled "concurrent" (every test whose
#                             name says Concurrent or Thread, across all trees)
#                             in a ThreadSanitizer build (build-tsan/)
#   scripts/test.sh --asan    a bounded set of test binaries ($ASAN_TESTS) in
#                             an AddressSanitizer + UBSan build (build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# The ASan+UBSan set: the persistence layer, every tree through the
# conformance suite, the shared lock toolbox, the CLI end to end and the
# Redis-protocol server (its parser, commands and protocol fuzzing) and its
# replication (RDB codec, fake and pmtree replicas: 9 tests, 2.5 s), and the
# short corruption campaign (damaged pools of every tree, `pmtree inspect`
# run on each copy under ASan too: 61 tests, about 55 CPU s, 2 min 17 s on
# a loaded 2-core machine).  Chosen to keep the stage to a few minutes on 2
# cores (docs/architecture.md).
ASAN_TESTS=${PMTREE_ASAN_TESTS:-"pm_test conformance_test common_test cli_test server_test replication_test corruption_test"}
case "${1:-}" in
  --tsan)
    # Only the test binaries are built (target concurrent_tests: every
    # GoogleTest binary but the explorer's and the CLI's): a full TSan build
    # would double CI time for nothing it checks.
    export PMTREE_SANITIZE=thread PMTREE_BUILD_DIR=${PMTREE_TSAN_BUILD_DIR:-build-tsan}
    PMTREE_TARGETS=concurrent_tests scripts/setup.sh
    # halt_on_error: a report fails the test instead of only printing.
    # The suppressions cover only libraries not built with TSan (tsan.supp).
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp ${TSAN_OPTIONS:-}" \
      ctest --test-dir "$PMTREE_BUILD_DIR" -L concurrent -j "$jobs" \
      --output-on-failure --timeout 900 --no-tests=error
    ;;
  --asan)
    export PMTREE_SANITIZE=address PMTREE_BUILD_DIR=${PMTREE_ASAN_BUILD_DIR:-build-asan}
    PMTREE_TARGETS=$ASAN_TESTS scripts/setup.sh
    # Each binary's tests carry its name as a label.  detect_leaks stays on:
    # a leak fails the test like any other report.
    ASAN_OPTIONS="abort_on_error=1 ${ASAN_OPTIONS:-}" UBSAN_OPTIONS="print_stacktrace=1 ${UBSAN_OPTIONS:-}" \
      ctest --test-dir "$PMTREE_BUILD_DIR" -L "^($(echo "$ASAN_TESTS" | tr ' ' '|'))\$" -LE long -j "$jobs" \
      --output-on-failure --timeout 900 --no-tests=error
    ;;
  --long) scripts/setup.sh
    ctest --test-dir "${PMTREE_BUILD_DIR:-build}" -j "$jobs" --output-on-failure --timeout 900 ;;
  "") scripts/setup.sh
    ctest --test-dir "${PMTREE_BUILD_DIR:-build}" -LE long -j "$jobs" --output-on-failure --timeout 900 ;;
  *) echo "usage: scripts/test.sh [--long | --tsan | --asan]" >&2; exit 2 ;;
esac
