# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/fastfair/fastfair.cc)
pmtree_test(fastfair_test src/trees/fastfair/fastfair_test.cc LINK pmtree_crash)
