# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/nvtree/nvtree.cc src/trees/nvtree/adaptive.cc)
pmtree_test(nvtree_test src/trees/nvtree/nvtree_test.cc LINK pmtree_trees)
