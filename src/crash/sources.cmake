# SPDX-License-Identifier: Apache-2.0
# The crash-state explorer (src/crash/README.md): depends on pm and the tree
# interface; the registry only for the CLI and tests.
add_library(pmtree_crash
  src/crash/trace.cc
  src/crash/shadow.cc
  src/crash/model.cc
  src/crash/check.cc
  src/crash/key_shapes.cc
  src/crash/explorer.cc
  src/crash/scenarios.cc
  src/crash/worker.cc
  src/crash/worker_lazy.cc
  src/crash/supervisor.cc
  src/crash/mutation.cc
  src/crash/lazy.cc
  src/crash/access.cc
  src/crash/kill.cc
  src/crash/kv_explore.cc)
target_include_directories(pmtree_crash PUBLIC include src)
target_link_libraries(pmtree_crash PUBLIC pmtree_trees pmtree_kv PRIVATE nlohmann_json::nlohmann_json)
list(APPEND PMTREE_TOOL_LIBS pmtree_crash)
# Byte-precise read tracking decodes each faulting instruction with Zydis
# (src/crash/access.h); without it the tracker keeps its line-sized
# over-approximation and the lazy search's byte-level repeat is skipped.
if(PMTREE_USE_ZYDIS)
  find_package(zydis CONFIG QUIET)
  if(TARGET Zydis::Zydis)
    target_link_libraries(pmtree_crash PRIVATE Zydis::Zydis)
    target_compile_definitions(pmtree_crash PRIVATE PMTREE_USE_ZYDIS)
  else()
    message(STATUS "pmtree: Zydis not found (libzydis-dev): the crash explorer tracks reads per line")
  endif()
endif()

pmtree_test(crash_test src/crash/crash_test.cc src/crash/test_trees.cc)
pmtree_test(lazy_test src/crash/lazy_test.cc src/crash/access_test.cc src/crash/test_trees.cc)
# Every registered persistent tree, bounded (a few minutes in all).
pmtree_test(crash_all_trees_test tests/crash_all_trees_test.cc)

# The nightly exploration: label "long", excluded from the default run
# (ctest -L long runs it).
if(BUILD_TESTING)
  add_executable(crash_long_test tests/crash_long_test.cc)
  target_link_libraries(crash_long_test PRIVATE pmtree_all GTest::gtest GTest::gtest_main)
  target_include_directories(crash_long_test PRIVATE src tests)
  gtest_discover_tests(crash_long_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "long" TIMEOUT 7200)
endif()

# The explorer on kv::Store scenarios, every engine, ADR and eADR (under a
# minute in all); the long variant takes a 64 KiB value and three seeds.
pmtree_test(crash_kv_test tests/crash_kv_test.cc)
pmtree_test(crash_kv_long_test tests/crash_kv_test.cc LONG)
if(BUILD_TESTING)
  target_compile_definitions(crash_kv_long_test PRIVATE PMTREE_KV_CRASH_LONG=1)
endif()
