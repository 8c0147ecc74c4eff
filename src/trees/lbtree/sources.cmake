# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/lbtree/lbtree.cc src/trees/lbtree/simd.cc)
pmtree_test(lbtree_test src/trees/lbtree/lbtree_test.cc LINK pmtree_trees)
