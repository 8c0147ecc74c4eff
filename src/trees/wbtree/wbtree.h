// SPDX-License-Identifier: Apache-2.0
//
// wbtree: wB+-Tree (Chen & Jin, "Persistent B+-Trees in Non-Volatile Main
// Memory", PVLDB 8(7) 2015) with slot+bitmap leaves, the second baseline of
// the LB+-Tree paper, rebuilt from its published design on pmtree's
// persistence layer.
//
//  - Leaves in the pool (layout.h): unsorted entries, a bitmap whose bit 0
//    says whether the sorted slot (indirection) array is valid, and the slot
//    array through which a search runs a binary search.
//  - Inner nodes in DRAM, rebuilt from the leaf list at recovery, as in the
//    LB+-Tree paper's comparison setup (§4.1); the original keeps them in NVM
//    with the same node format (docs/trees/wbtree.md, "Deviations").
//  - Insert: two NVM-atomic-write sections.  Write the entry, flush; clear
//    the slot-valid bit, persist; write the slot array, persist; set the
//    entry's bit and the slot-valid bit with one 8-byte store, persist.
//    Delete: one 8-byte bitmap write clearing the entry bit and the
//    slot-valid bit, persisted.  Leaf split: a redo log naming the leaf and
//    its new sibling; unlinking an empty leaf: a delete log.
//  - Concurrency: per-leaf (striped) reader/writer locks and optimistic
//    validation of the copy-on-write DRAM inner nodes, exactly as fptree.
//
// Options: node_size 256 (default), 512 or 1024; no extra options.  Thread
// safety and durability: see pmtree/tree.h.

#ifndef PMTREE_TREES_WBTREE_WBTREE_H_
#define PMTREE_TREES_WBTREE_WBTREE_H_

#include <memory>

#include "pm/pool_impl.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree::wbtree {

// Registry entry points (the shape every design shares): K is uint64_t
// (Tree) or std::string_view (BytesTree).
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

}  // namespace pmtree::wbtree

#endif  // PMTREE_TREES_WBTREE_WBTREE_H_
