# SPDX-License-Identifier: Apache-2.0
target_sources(pmtree_trees PRIVATE src/trees/cdds/cdds.cc src/trees/cdds/cdds_gc.cc)
pmtree_test(cdds_test src/trees/cdds/cdds_test.cc)
