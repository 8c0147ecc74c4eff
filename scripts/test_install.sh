#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The embedding check (CI runs it after the tests): what a user of the
# library meets on a fresh machine.
#   1. `cmake --install` of the tested build (build/, or PMTREE_BUILD_DIR)
#      into a temporary prefix: headers, libraries, the CLI, the CMake
#      package and the pkg-config file must all be there, and nothing of src/.
#   2. examples/ configured and built as an outside project against the
#      installed package (find_package(pmtree)), then run through ctest.
#   3. One example compiled by hand with `pkg-config --cflags --libs pmtree`.
#   4. examples/ configured with pmtree as a subproject (add_subdirectory):
#      the configure must not look for GoogleTest, CLI11, nlohmann_json,
#      LMDB or Berkeley DB.
# Any failure stops the script with a message naming the step.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build_dir=${PMTREE_BUILD_DIR:-build}
[[ -f "$build_dir/CMakeCache.txt" ]] || scripts/setup.sh
cmake --build "$build_dir" -j "$(nproc)" >/dev/null
work=$(mktemp -d "${TMPDIR:-/tmp}/pmtree-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "test_install: FAILED: $*" >&2; exit 1; }

echo "test_install: 1. installing $build_dir into $work/prefix" >&2
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null || fail "cmake --install"
prefix=$work/prefix
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build_dir/CMakeCache.txt")
for f in include/pmtree/registry.h include/pmtree/tree.h include/pmtree/pool.h "$libdir/libpmtree_pm.a" \
         "$libdir/libpmtree_trees.a" "$libdir/libpmtree_kv.a" include/pmtree/kv.h "$libdir/cmake/pmtree/pmtreeConfig.cmake" \
         "$libdir/cmake/pmtree/pmtreeConfigVersion.cmake" "$libdir/pkgconfig/pmtree.pc" bin/pmtree; do
  [[ -e "$prefix/$f" ]] || fail "$f was not installed"
done
extra=$(cd "$prefix/include" && find . -type f ! -path './pmtree/*.h')
[[ -z "$extra" ]] || fail "headers outside include/pmtree were installed: $extra"
"$prefix/bin/pmtree" --help >/dev/null || fail "the installed CLI does not run"

echo "test_install: 2. examples/ against the installed package (find_package)" >&2
cmake -S examples -B "$work/examples" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null ||
  fail "configuring examples/ with find_package(pmtree)"
cmake --build "$work/examples" -j "$(nproc)" >/dev/null || fail "building examples/ against the package"
ctest --test-dir "$work/examples" --output-on-failure --no-tests=error || fail "running the examples"

echo "test_install: 3. an example built with pkg-config" >&2
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046  # pkg-config's output is a list of flags
g++ examples/quickstart.cc $(pkg-config --cflags --libs pmtree) -o "$work/quickstart" ||
  fail "compiling examples/quickstart.cc with pkg-config"
"$work/quickstart" "$work/quickstart.pool" >/dev/null || fail "running the pkg-config build of quickstart"

echo "test_install: 4. pmtree as a subproject needs none of the tools' dependencies" >&2
cmake -S examples -B "$work/subproject" -G Ninja -DPMTREE_SOURCE_DIR="$src" >/dev/null ||
  fail "configuring examples/ with pmtree as a subproject"
found=$(grep -E '^(GTest_DIR|CLI11_DIR|nlohmann_json_DIR|PMTREE_LMDB_LIBRARY|PMTREE_BDB_LIBRARY)[:=]' \
        "$work/subproject/CMakeCache.txt" | grep -v NOTFOUND || true)
[[ -z "$found" ]] || fail "the subproject configure looked for a tool dependency: $found"
echo "test_install: ok" >&2
