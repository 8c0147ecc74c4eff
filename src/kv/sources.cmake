# SPDX-License-Identifier: Apache-2.0
# The key-value store (src/kv/README.md): depends on the trees through the
# registry and the tree interface only.
add_library(pmtree_kv
  src/kv/records.cc
  src/kv/store.cc
  src/kv/recovery.cc
  src/kv/txn.cc
  src/kv/iterator.cc)
add_library(pmtree::kv ALIAS pmtree_kv)
set_target_properties(pmtree_kv PROPERTIES EXPORT_NAME kv)
target_include_directories(pmtree_kv PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(pmtree_kv PUBLIC pmtree_trees)

pmtree_test(kv_test
  src/kv/kv_test.cc
  src/kv/kv_clear_test.cc
  src/kv/kv_conformance_test.cc
  src/kv/kv_crash_test.cc
  src/kv/kv_concurrent_test.cc
  src/kv/kv_publication_test.cc
  src/kv/kv_example_test.cc
  src/kv/kv_fence_crash_test.cc
  src/kv/kv_update_many_test.cc)
if(BUILD_TESTING)
  target_compile_definitions(kv_test PRIVATE
    PMTREE_KV_EXAMPLE_SOURCE="${CMAKE_SOURCE_DIR}/src/kv/kv_example_test.cc"
    PMTREE_KV_DOC="${CMAKE_SOURCE_DIR}/docs/kv.md")
  # 200 kills per engine (the default run does 20).
  add_test(NAME kv_crash_long COMMAND kv_test --gtest_filter=AllEngines/KvCrashTest.*)
  set_tests_properties(kv_crash_long PROPERTIES ENVIRONMENT PMTREE_KV_KILLS=200 LABELS long TIMEOUT 1800)
endif()
