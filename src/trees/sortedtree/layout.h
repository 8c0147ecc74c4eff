// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of sortedtree, the "native B+-tree" WO-tree is measured
// against (Ma et al., JCST 2021, §2.3 and §5; docs/trees/sortedtree.md).
// The meta block, the node prefix and the inner nodes are WO-tree's frame
// (src/trees/wotree/layout.h: Meta with magic kSortedMagic, NodePrefix,
// InnerNode); the leaf is this file's.  Meta's leaf-log records are never
// set by sortedtree (its splits need no log).

#ifndef PMTREE_TREES_SORTEDTREE_LAYOUT_H_
#define PMTREE_TREES_SORTEDTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "trees/wotree/layout.h"

namespace pmtree::sortedtree {

inline constexpr uint64_t kSortedMagic = 0x3130444554524f53ull;  // "SORTED01" as little-endian bytes

// ---- SortedLeaf: node_size bytes, 64 B aligned -----------------------------------------
//
//   off  size      field     meaning
//   0    24        prefix    wotree::NodePrefix (level 0)
//   24   8         count     records in use, [0, count); may include one
//                            transient duplicate (below)
//   32   32        reserved  zero
//   64   16 * cap  records   {key slot, value} in ascending key order
//
// cap = (node_size - 64) / 16: 12, 28, 60, 124 at 4, 8, 16, 32 lines.
//
// Transient duplicate: a shift copies a record one 8-byte word at a time, so
// a crash can leave two adjacent records with the same key slot.  Rule: a
// record i < count - 1 whose key equals record i + 1's is invalid (its right
// copy is the valid one); the last record in use is always valid.  Values
// need not be unique, so the key (not the value) tells a duplicate.
struct SortedRecord {
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(SortedRecord) == 16);

struct SortedLeaf {
  wotree::NodePrefix prefix;
  uint64_t count;
  uint64_t reserved[4];
  SortedRecord records[1];  // SortedCapacity(node_size) records in the pool
};
static_assert(offsetof(SortedLeaf, count) == 24);
static_assert(offsetof(SortedLeaf, records) == 64);

inline constexpr int SortedCapacity(uint32_t node_size) { return static_cast<int>((node_size - 64) / 16); }
static_assert(SortedCapacity(256) == 12 && SortedCapacity(1024) == 60 && SortedCapacity(2048) == 124);

}  // namespace pmtree::sortedtree

#endif  // PMTREE_TREES_SORTEDTREE_LAYOUT_H_
