# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/fptree/fptree.cc)
pmtree_test(fptree_test src/trees/fptree/fptree_test.cc LINK pmtree_trees)
