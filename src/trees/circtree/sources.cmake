# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/circtree/circtree.cc src/trees/circtree/recovery.cc)
pmtree_test(circtree_test src/trees/circtree/circtree_test.cc)

# The full explorer matrix, mutation score and kill harness: label "long",
# excluded from the default run (ctest -L long runs it).
if(BUILD_TESTING)
  add_executable(circtree_long_test src/trees/circtree/circtree_long_test.cc)
  target_link_libraries(circtree_long_test PRIVATE pmtree_all GTest::gtest GTest::gtest_main)
  target_include_directories(circtree_long_test PRIVATE src tests)
  gtest_discover_tests(circtree_long_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "long" TIMEOUT 7200)
endif()
