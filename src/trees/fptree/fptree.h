// SPDX-License-Identifier: Apache-2.0
//
// fptree: FPTree (Oukid, Lasperas, Nica, Willhalm, Lehner; SIGMOD 2016), the
// hybrid SCM-DRAM B+-tree that the LB+-Tree paper measures against, rebuilt
// from its published design on pmtree's persistence layer.
//
//  - Leaves in the pool (layout.h): a bitmap, a line of one-byte
//    fingerprints, unsorted {key slot, value} entries and a sibling offset.
//  - Inner nodes in DRAM (selective persistence), rebuilt from the leaf list
//    at recovery.
//  - Insert: write entry + fingerprint, persist; set the bitmap bit, persist.
//    Delete: clear the bitmap bit, persist.  Leaf split and the unlinking of
//    an empty leaf are protected by FPTree's micro-logs, which recovery
//    replays.
//  - Concurrency without TSX: a per-leaf (striped) reader/writer lock and
//    optimistic validation of the copy-on-write DRAM inner nodes (see
//    trees/common/dram_inner_index.h).  Readers take the leaf lock shared and
//    writers hold it until their last persist, so no lookup or scan returns
//    unpersisted data.
//
// Options: node_size 256 (default, the LB+-Tree comparison's size), 512 or
// 1024; no extra options.  Thread safety and durability: see pmtree/tree.h.
// Design notes, write orders, invariants: docs/trees/fptree.md.

#ifndef PMTREE_TREES_FPTREE_FPTREE_H_
#define PMTREE_TREES_FPTREE_FPTREE_H_

#include <memory>

#include "pm/pool_impl.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree::fptree {

// Registry entry points (the shape every design shares): K is uint64_t
// (Tree) or std::string_view (BytesTree).
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

}  // namespace pmtree::fptree

#endif  // PMTREE_TREES_FPTREE_FPTREE_H_
