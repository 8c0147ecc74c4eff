# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/wotree/wotree.cc)
pmtree_test(wotree_test src/trees/wotree/wotree_test.cc)
