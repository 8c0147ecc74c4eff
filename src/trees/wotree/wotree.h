// SPDX-License-Identifier: Apache-2.0
//
// WO-tree (Ma et al., "Write-Optimized B+ Tree Index Technology for
// Persistent Memory", JCST 36(5) 2021): registry entry points.  Design,
// write orders, recovery rules and every deviation from the paper:
// docs/trees/wotree.md.  Persistent layout: layout.h.  The frame (inner
// nodes, descent, recovery, Verify) is blink_frame.h.
//
// Thread safety and durability: pmtree/tree.h.  Readers descend inner nodes
// without locks (version-validated) and read leaves under a shared leaf lock;
// writers lock the leaf they change, and the inner node they insert into.
//
// Variants.  `wotree` is the corrected tree.  `wotree-paper` (test-only)
// splits leaves in Algorithm 3's printed order -- no leaf log, the old leaf's
// stores not ordered after the new leaf's flush -- so the crash explorer can
// show the flaw (docs/trees/wotree.md, "Flaws found").

#ifndef PMTREE_TREES_WOTREE_WOTREE_H_
#define PMTREE_TREES_WOTREE_WOTREE_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "pm/pool_impl.h"
#include "pmtree/tree.h"

namespace pmtree::wotree {

// Node size: TreeOptions::node_size 0 (= 1024 B, 16 lines) or a multiple of
// 64 from 256 to 2048 (the paper's 4..32 cache lines).
inline constexpr std::string_view kNodeSizeRule = "256..2048, multiple of 64 (4..32 cache lines)";

template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> CreatePaper(PoolImpl* pool, const TreeOptions& options);
// Recovers either variant (the pool records which).
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

}  // namespace pmtree::wotree

#endif  // PMTREE_TREES_WOTREE_WOTREE_H_
