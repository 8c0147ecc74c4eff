// SPDX-License-Identifier: Apache-2.0
//
// `volatile`: an in-DRAM B+-tree, the speed-of-light reference the papers
// compare against (Circ-Tree's "volatile B+-tree").  It has no persistence
// and no recovery; its node size is an option so its fan-out matches the
// persistent trees it is compared with.
//
// Structure: sorted inner nodes and leaves of `capacity` entries each
// (capacity = node_size / 16, for 8-byte key slots and 8-byte values or
// child pointers), leaves chained left to right for scans.  Removal does not
// rebalance: a leaf may underflow or empty (lazy deletion, as many in-memory
// B+-trees do); lookups and scans stay correct.
//
// Concurrency: one reader/writer lock for the whole tree.  Readers run in
// parallel; writers are serialised.  Simple and obviously correct, which is
// what a reference needs; it is not a concurrency baseline.

#ifndef PMTREE_TREES_VOLATILE_VOLATILE_TREE_H_
#define PMTREE_TREES_VOLATILE_VOLATILE_TREE_H_

#include <memory>
#include <string_view>

#include "pmtree/pool.h"
#include "pmtree/tree.h"

namespace pmtree::volatile_tree {

// K is the tree's key argument type: uint64_t or std::string_view.
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(Pool* pool, const TreeOptions& options);
// A volatile tree has nothing to recover: NotSupported.
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(Pool* pool, const TreeOptions& options);

}  // namespace pmtree::volatile_tree

#endif  // PMTREE_TREES_VOLATILE_VOLATILE_TREE_H_
