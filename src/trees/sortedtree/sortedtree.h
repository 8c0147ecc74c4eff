// SPDX-License-Identifier: Apache-2.0
//
// sortedtree: the native sorted persistent B+-tree the WO-tree paper
// measures against (§2.3, §5), on WO-tree's B-link frame.  Design, write
// orders, recovery and deviations: docs/trees/sortedtree.md; leaf layout:
// layout.h.  Thread safety and durability: pmtree/tree.h.

#ifndef PMTREE_TREES_SORTEDTREE_SORTEDTREE_H_
#define PMTREE_TREES_SORTEDTREE_SORTEDTREE_H_

#include <cstdint>
#include <memory>

#include "pm/pool_impl.h"
#include "pmtree/tree.h"

namespace pmtree::sortedtree {

// Node sizes as WO-tree's (wotree::kNodeSizeRule); default 1024 B.
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

}  // namespace pmtree::sortedtree

#endif  // PMTREE_TREES_SORTEDTREE_SORTEDTREE_H_
