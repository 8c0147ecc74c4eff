# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/wbtree/wbtree.cc)
pmtree_test(wbtree_test src/trees/wbtree/wbtree_test.cc LINK pmtree_trees)
