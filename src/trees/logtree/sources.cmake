# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/logtree/logtree.cc)
pmtree_test(logtree_test src/trees/logtree/logtree_test.cc LINK pmtree_trees)
