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

// The meta magic is the format version: "WBTREE02" since leaves carry the
// leaf magic (below); a "WBTREE01" pool is refused as Incompatible, since
// this build would take its freed leaves (magic bits never cleared, or
// bitmap bits that were never the magic) for lost ones or miss real losses.
inline constexpr uint64_t kWbMagic = 0x3230454552544257ull;    // "WBTREE02" as little-endian bytes
inline constexpr uint64_t kWbMagicV1 = 0x3130454552544257ull;  // "WBTREE01": before the leaf magic

// ---- WbLeaf: node_size bytes, 64 B aligned -----------------------------------------------
//
//   off  size       field    meaning
//   0    8          bitmap   bit 0: the slot array is valid; bit 1+i: entry i is valid
//   8    8          next     offset of the right sibling leaf (0 = last leaf)
//   16   1          count    slot[0]: number of indices in the slot array
//   17   cap        slot     slot[1..count]: entry indices in ascending key order
//   ...             pad      up to the header size H
//   H    16 * cap   entries  unsorted {key slot, value} pairs
//   M    4          leaf_magic  the pool's leaf magic, 32 bits (LeafListTree::LeafMagic
//                               under kWbMagicMask) while the leaf is in the list; 0
//                               once it is unlinked
//
//   node_size  H    cap  M
//   256        32   14   4   (the bitmap word's upper half: bits 32-63, entry bits end at 14)
//   512        48   29   4   (the bitmap word's upper half: entry bits end at 29)
//   1024       80   59   76  (the header's last 4 bytes, after slot[59] at 75; the bitmap
//                             uses bits 0-59)
//
// The leaf magic takes no entry: the 256 and 512 B bitmaps leave their upper
// 32 bits unused, and the 1 KB header its last 4 bytes.  It is the upper half
// of the 8-byte word at WbMagicWord (0 or 72), written by one 8-byte store
// that keeps the lower half.  A split gives the new leaf the magic only in
// FinishSplit, once the split log naming it is durable (the old leaf keeps
// its own); recovery reports free space carrying the magic as a lost leaf
// (docs/pool_format.md).  32 bits: a free 64 B step holding the magic by
// chance is a false Corruption with probability 2^-32.
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

inline constexpr uint64_t kWbMagicMask = 0xffffffff00000000ull;  // the upper half of its word
inline constexpr uint32_t WbMagicWord(uint32_t node_size) { return node_size == 1024 ? 72 : 0; }
static_assert(1 + WbCapacity(512) <= 32, "256 and 512 B: the bitmap's upper half is free");
static_assert(16 + 1 + WbCapacity(1024) <= WbMagicWord(1024) + 4 && WbMagicWord(1024) + 8 == WbHeaderSize(1024),
              "1 KB: bytes 76-79 follow the last slot and end the header");

}  // namespace pmtree::wbtree

#endif  // PMTREE_TREES_WBTREE_LAYOUT_H_
