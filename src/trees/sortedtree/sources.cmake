# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/sortedtree/sortedtree.cc)
pmtree_test(sortedtree_test src/trees/sortedtree/sortedtree_test.cc)
