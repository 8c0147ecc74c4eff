# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/cdds/cdds.cc src/trees/cdds/cdds_read.cc src/trees/cdds/cdds_gc.cc)
pmtree_test(cdds_test src/trees/cdds/cdds_test.cc)
# The exhaustive explorations of the same file: label "long" (ctest -L long).
if(BUILD_TESTING)
  add_executable(cdds_long_test src/trees/cdds/cdds_test.cc)
  target_compile_definitions(cdds_long_test PRIVATE PMTREE_CDDS_LONG_TESTS)
  target_link_libraries(cdds_long_test PRIVATE pmtree_all GTest::gtest GTest::gtest_main)
  target_include_directories(cdds_long_test PRIVATE src tests)
  gtest_discover_tests(cdds_long_test TEST_FILTER "CddsCrashLongTest.*" DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "long" TIMEOUT 7200)
endif()
