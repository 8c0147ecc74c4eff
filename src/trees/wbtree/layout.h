// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of wbtree (wB+-Tree, Chen & Jin, PVLDB 8(7) 2015, with
// slot+bitmap leaves): every struct this design keeps in the pool.  Inner
// nodes live in DRAM (trees/common/dram_inner_index.h), as in the LB+-Tree
// paper's comparison (§4.1).  docs/trees/wbtree.md gives the write orders.

#ifndef PMTREE_TREES_WBTREE_LAYOUT_H_
#define PMTREE_TREES_WBTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "trees/common/leaf_list_layout.h"

namespace pmtree::wbtree {

// ---- WbMeta and WbLog: the shared leaf-list meta block and logs ---------------------------
//
// WbMeta is LeafListMeta and WbLog is LeafListLog (byte tables in
// trees/common/leaf_list_layout.h): magic kWbMagic, head, node_size,
// key_kind, the delete log at 64 and kSplitLogs split redo logs at 128.
// What the two words of each log mean here:
//   split log   leaf = the leaf being split
//               other = the new right sibling, complete and persisted before
//                       the log is written
//   delete log  leaf = the empty leaf being unlinked
//               other = its predecessor (0 = the list head)
// A log is "set" when `leaf` != 0; recovery redoes the operation and clears it.
using WbLog = LeafListLog;
using WbMeta = LeafListMeta;

inline constexpr int kSplitLogs = kLeafListSplitLogs;  // concurrent leaf splits

inline constexpr uint64_t kWbMagic = 0x3130454552544257ull;  // "WBTREE01" as little-endian bytes

// ---- WbLeaf: node_size bytes, 64 B aligned -----------------------------------------------
//
//   off  size       field    meaning
//   0    8          bitmap   bit 0: the slot array is valid; bit 1+i: entry i is valid
//   8    8          next     offset of the right sibling leaf (0 = last leaf)
//   16   1          count    slot[0]: number of indices in the slot array
//   17   cap        slot     slot[1..count]: entry indices in ascending key order
//   ...             pad      up to the header size H
//   H    16 * cap   entries  unsorted {key slot, value} pairs
//
//   node_size  H    cap
//   256        32   14
//   512        48   29
//   1024       80   59
//
// The slot array is meaningful only while bitmap bit 0 is set; then it lists
// exactly the valid entries in key order (invariant 5), and a search is a
// binary search through it.  With bit 0 clear a search scans the valid
// entries; the next insert rewrites the slot array and sets the bit.
struct WbEntry {
  uint64_t key;    // key slot (trees/common/keys.h)
  uint64_t value;
};
static_assert(sizeof(WbEntry) == 16);

struct WbLeaf {
  uint64_t bitmap;
  uint64_t next;
  uint8_t slot[1];  // slot[0] = count, slot[1..cap]
};
static_assert(offsetof(WbLeaf, bitmap) == kLeafListBitmapOffset);
static_assert(offsetof(WbLeaf, next) == kLeafListNextOffset);
static_assert(offsetof(WbLeaf, slot) == 16);

inline constexpr uint64_t kSlotValid = 1;
inline constexpr uint32_t kWbDefaultNodeSize = 256;

inline constexpr uint32_t WbHeaderSize(uint32_t node_size) {
  return node_size == 256 ? 32 : (node_size == 512 ? 48 : 80);
}
inline constexpr int WbCapacity(uint32_t node_size) {
  return static_cast<int>((node_size - WbHeaderSize(node_size)) / 16);
}
static_assert(WbCapacity(256) == 14 && WbCapacity(512) == 29 && WbCapacity(1024) == 59);
static_assert(16 + 1 + WbCapacity(256) <= WbHeaderSize(256));
static_assert(16 + 1 + WbCapacity(512) <= WbHeaderSize(512));
static_assert(16 + 1 + WbCapacity(1024) <= WbHeaderSize(1024));
static_assert(1 + WbCapacity(1024) <= 64, "bitmap: one valid bit plus one bit per entry");

}  // namespace pmtree::wbtree

#endif  // PMTREE_TREES_WBTREE_LAYOUT_H_
