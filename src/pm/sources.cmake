# SPDX-License-Identifier: Apache-2.0
# The persistence layer (src/pm/README.md): depends on the standard library,
# threads and libpmem2 only.  Its public headers are include/pmtree/.
add_library(pmtree_pm
  src/pm/status.cc
  src/pm/counters.cc
  src/pm/backends.cc
  src/pm/latency.cc
  src/pm/allocator.cc
  src/pm/pool.cc
  src/pm/write_profile.cc)
add_library(pmtree::pm ALIAS pmtree_pm)
set_target_properties(pmtree_pm PROPERTIES EXPORT_NAME pm)
target_compile_features(pmtree_pm PUBLIC cxx_std_20)
target_include_directories(pmtree_pm
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(pmtree_pm PUBLIC Threads::Threads PRIVATE PkgConfig::PMEM2)

pmtree_test(pm_test
  src/pm/allocator_test.cc
  src/pm/counters_test.cc
  src/pm/pool_test.cc
  src/pm/write_profile_test.cc
  LINK pmtree_pm)

# Every software prefetch goes through pmtree::Prefetch (src/pm/prefetch.h):
# GCC deletes calls to helpers that only use __builtin_prefetch, silently.
add_test(NAME prefetch_rule_test
  COMMAND sh -c "if grep -rnE --include=*.h --include=*.cc '__builtin_prefetch|_mm_prefetch' src include | grep -v '^src/pm/prefetch.h:'; then echo 'use pmtree::Prefetch (src/pm/prefetch.h) instead'; exit 1; fi"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(prefetch_rule_test PROPERTIES LABELS "unit" TIMEOUT 60)
