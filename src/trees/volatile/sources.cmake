# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/volatile/volatile_tree.cc)
pmtree_test(volatile_test src/trees/volatile/volatile_tree_test.cc)
