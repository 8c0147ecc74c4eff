# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/circtree/circtree.cc src/trees/circtree/recovery.cc)
pmtree_test(circtree_test src/trees/circtree/circtree_test.cc)
