# SPDX-License-Identifier: Apache-2.0
# Header-only shared code; its tests only.
pmtree_test(common_test src/trees/common/version_lock_test.cc src/trees/common/partition_point_test.cc
            src/trees/common/fair_traversal_test.cc
            LINK pmtree_trees)
