# SPDX-License-Identifier: Apache-2.0
# The benchmark driver (src/bench/README.md): a library the CLI's `bench`
# subcommand fronts.  Depends on the trees (through the registry only),
# nlohmann_json, and the peers LMDB, Berkeley DB, absl::btree_map and, when
# found, RocksDB (Debian: liblmdb-dev, libdb++-dev / libdb5.3-dev, libabsl-dev,
# librocksdb-dev; scripts/setup.sh installs them).
find_package(absl CONFIG REQUIRED)

find_path(PMTREE_LMDB_INCLUDE lmdb.h)
find_library(PMTREE_LMDB_LIBRARY lmdb)
find_path(PMTREE_BDB_INCLUDE db.h)
find_library(PMTREE_BDB_LIBRARY NAMES db-5.3 db)
if(NOT PMTREE_LMDB_INCLUDE OR NOT PMTREE_LMDB_LIBRARY)
  message(FATAL_ERROR "LMDB not found: install liblmdb-dev (scripts/setup.sh does)")
endif()
if(NOT PMTREE_BDB_INCLUDE OR NOT PMTREE_BDB_LIBRARY)
  message(FATAL_ERROR "Berkeley DB not found: install libdb++-dev (scripts/setup.sh does)")
endif()

# RocksDB (Debian librocksdb-dev, through pkg-config) is optional: without it
# the rocksdb peers are left out and `bench --tree rocksdb` says why.
pkg_check_modules(ROCKSDB QUIET IMPORTED_TARGET rocksdb)

add_library(pmtree_bench
  src/bench/workload.cc
  src/bench/stats.cc
  src/bench/tree_target.cc
  src/bench/peer_common.cc
  src/bench/peers.cc
  src/bench/ycsb.cc
  src/bench/media.cc
  src/bench/driver.cc
  src/bench/output.cc
  src/bench/suites.cc
  src/bench/suites/common.cc
  src/bench/suites/overview.cc
  src/bench/suites/nvtree.cc
  src/bench/suites/circtree.cc
  src/bench/suites/wotree.cc
  src/bench/suites/cdds.cc
  src/bench/suites/lbtree.cc)
target_include_directories(pmtree_bench PUBLIC src PRIVATE ${PMTREE_LMDB_INCLUDE} ${PMTREE_BDB_INCLUDE})
target_link_libraries(pmtree_bench
  PUBLIC pmtree_kv pmtree_trees nlohmann_json::nlohmann_json
  PRIVATE ${PMTREE_LMDB_LIBRARY} ${PMTREE_BDB_LIBRARY} absl::btree)
if(ROCKSDB_FOUND)
  target_sources(pmtree_bench PRIVATE src/bench/peer_rocksdb.cc)
  target_compile_definitions(pmtree_bench PRIVATE PMTREE_HAVE_ROCKSDB)
  target_link_libraries(pmtree_bench PRIVATE PkgConfig::ROCKSDB)
  message(STATUS "bench: RocksDB ${ROCKSDB_VERSION} found; the rocksdb peers are built")
else()
  message(STATUS "bench: pkg-config found no rocksdb (librocksdb-dev); the rocksdb peers are left out")
endif()

# Recorded in every report; output.cc prefers the live `git describe` of the
# source tree when it is available at run time.
execute_process(COMMAND git -C ${PROJECT_SOURCE_DIR} describe --always --dirty
  OUTPUT_VARIABLE PMTREE_CONFIGURE_GIT_REV OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT PMTREE_CONFIGURE_GIT_REV)
  set(PMTREE_CONFIGURE_GIT_REV "unknown")
endif()
set_source_files_properties(src/bench/output.cc PROPERTIES COMPILE_DEFINITIONS
  "PMTREE_BUILD_TYPE=\"${CMAKE_BUILD_TYPE}\";PMTREE_GIT_REV=\"${PMTREE_CONFIGURE_GIT_REV}\";PMTREE_SOURCE_DIR=\"${PROJECT_SOURCE_DIR}\"")
set_source_files_properties(src/bench/suites.cc PROPERTIES COMPILE_DEFINITIONS
  "PMTREE_SOURCE_DIR=\"${PROJECT_SOURCE_DIR}\"")

list(APPEND PMTREE_TOOL_LIBS pmtree_bench)

pmtree_test(bench_test
  src/bench/workload_test.cc
  src/bench/driver_test.cc
  src/bench/suites_test.cc
  src/bench/ycsb_test.cc
  src/bench/peers_test.cc
  src/bench/media_test.cc
  LINK pmtree_bench)
# The CLI's `bench` subcommand, and the figures over its output (below).
if(BUILD_TESTING AND PMTREE_BUILD_TOOLS)
  pmtree_test(bench_cli_test src/bench/bench_cli_test.cc LINK pmtree_bench)
  target_compile_definitions(bench_cli_test PRIVATE PMTREE_CLI="$<TARGET_FILE:pmtree>")
  add_dependencies(bench_cli_test pmtree)
endif()

# The figures package (python/pmtree_figures) over a short real `pmtree bench`
# run.  Debian's python3-matplotlib is importable only by /usr/bin/python3;
# the test exits 77 (skipped, with the reason) when it is not.
if(BUILD_TESTING AND PMTREE_BUILD_TOOLS)
  if(EXISTS /usr/bin/python3)
    add_test(NAME figures_test
      COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/python/tests/test_figures.py --pmtree $<TARGET_FILE:pmtree>)
  else()
    add_test(NAME figures_test COMMAND sh -c "echo 'SKIPPED: /usr/bin/python3 not found'; exit 77")
  endif()
  set_tests_properties(figures_test PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
