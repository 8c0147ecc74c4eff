# SPDX-License-Identifier: Apache-2.0
# The key-value store (src/kv/README.md): depends on the trees through the
# registry and the tree interface only.
add_library(pmtree_kv
  src/kv/records.cc
  src/kv/store.cc
  src/kv/recovery.cc
  src/kv/txn.cc
  src/kv/iterator.cc)
target_include_directories(pmtree_kv PUBLIC include PRIVATE src)
target_link_libraries(pmtree_kv PUBLIC pmtree_trees)

pmtree_test(kv_test
  src/kv/kv_test.cc
  src/kv/kv_conformance_test.cc)
if(BUILD_TESTING)
  target_link_libraries(kv_test PRIVATE pmtree_kv)
endif()
