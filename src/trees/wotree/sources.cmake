# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/wotree/wotree.cc)
pmtree_test(wotree_test src/trees/wotree/wotree_test.cc)
# The long explorations of wotree and sortedtree: label "long", excluded from
# the default run (ctest -L long runs it).
if(BUILD_TESTING)
  add_executable(wotree_long_test src/trees/wotree/wotree_long_test.cc)
  target_link_libraries(wotree_long_test PRIVATE pmtree_all GTest::gtest GTest::gtest_main)
  target_include_directories(wotree_long_test PRIVATE src tests)
  gtest_discover_tests(wotree_long_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "long" TIMEOUT 7200)
endif()
