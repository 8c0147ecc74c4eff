// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of WO-tree (Ma et al., JCST 2021; docs/trees/wotree.md).
// Every byte the tree keeps in a pool is described here.  The B-link frame
// (meta block, inner nodes, the node prefix) is shared with the native sorted
// B+-tree baseline `sortedtree`, whose own leaf layout is in
// src/trees/sortedtree/layout.h.
//
// A tree is one meta block (pool root slot 0) and nodes of `node_size` bytes
// (4..32 cache lines: 256..2048, a multiple of 64; 1024 = 16 lines by
// default).  All references are pool offsets (0 = none).  Every node opens
// with the same 24-byte prefix (next, low_key, level, flags), so the frame
// moves right along a level without knowing the node kind.

#ifndef PMTREE_TREES_WOTREE_LAYOUT_H_
#define PMTREE_TREES_WOTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "trees/common/leaf_list_layout.h"

namespace pmtree::wotree {

// Version 2 added Meta::leaves (byte 32, the leaf count of issue 17); a pool
// of version 1 (where the word was reserved and 0) is Incompatible.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kMinNodeSize = 256;    // 4 cache lines
inline constexpr uint32_t kMaxNodeSize = 2048;   // 32 cache lines
inline constexpr uint32_t kDefaultNodeSize = 1024;  // 16 cache lines (the paper's default)
inline constexpr uint64_t kLine = 64;

// ---- Meta: the tree's anchor, referenced by pool root slot 0 ----------------------------
//
//   off   size  field      meaning
//   0     8     magic      the design's magic (kWoMagic, sortedtree's kSortedMagic)
//   8     4     version    kFormatVersion
//   12    4     node_size  bytes per node (fixed at creation)
//   16    8     root       offset of the root node; changed only by a root split
//                          (one Store64: the commit point of a new level)
//   24    4     key_kind   KeyKind of the pool's keys (0 = u64, 1 = bytes)
//   28    4     variant    0; kVariantPaperSplit = wotree-paper (test-only)
//   32    8     leaves     a lower bound of the leaves in the leaf chain that no
//                          crash state exceeds (invariant F9): 1 at creation; a
//                          leaf split stores it after the leaf policy's Split
//                          returned, i.e. after the link of the new leaf is
//                          durable (flushed there, made durable by the parent
//                          insert's first fence); a bulk load after its commit;
//                          Close and crash recovery the exact count.  Leaves are
//                          never freed (but a bulk load's old empty root), so
//                          recovery's walk must reach at least this many
//                          leaves, else the chain was cut: Corruption, not a
//                          loss absorbed by the allocator rebuild (issue 17)
//   40    24    reserved   zero
//   64    1024  leaf_log   kLeafLogs partial-WAL records for leaf splits
//                          (§4.3.4, Fig. 8).  LeafListLog byte table in
//                          trees/common/leaf_list_layout.h; here:
//                            leaf  = the leaf being split
//                            other = its new right sibling, complete and
//                                    persisted before the record is written
//                          Set when `leaf` != 0; recovery redoes the old
//                          leaf's half of the split and clears it.
//                          sortedtree never sets one.
inline constexpr int kLeafLogs = kLeafListSplitLogs;  // concurrent leaf splits

struct Meta {
  uint64_t magic;
  uint32_t version;
  uint32_t node_size;
  uint64_t root;
  uint32_t key_kind;
  uint32_t variant;
  uint64_t leaves;
  uint64_t reserved[3];
  LeafListLog leaf_log[kLeafLogs];
};
static_assert(sizeof(Meta) == 64 + 64 * kLeafLogs);
static_assert(offsetof(Meta, root) == 16);
static_assert(offsetof(Meta, root) % 8 == 0, "root is written with one atomic 8-byte store");
static_assert(offsetof(Meta, leaves) == 32);
static_assert(offsetof(Meta, leaves) % 8 == 0, "leaves is written with one atomic 8-byte store");
static_assert(offsetof(Meta, leaf_log) == 64);

inline constexpr uint64_t kWoMagic = 0x3130454552544f57ull;  // "WOTREE01" as little-endian bytes
inline constexpr uint32_t kVariantPaperSplit = 1;

// ---- NodePrefix: the first 24 bytes of every node ------------------------------------
//
//   off  size  field    meaning
//   0    8     next     right sibling at the same level (§4.3.2), 0 = rightmost
//   8    8     low_key  key slot of the smallest key the node may hold: the
//                       separator its split created; valid iff kHasLowKey.
//                       Written before the node is reachable, never changed.
//                       A node's upper bound is its `next`'s low_key.
//   16   4     level    0 = leaf, a parent is its children's level + 1
//   20   4     flags    kHasLowKey: every node but the first of its level;
//                       kWritten: set in every node the tree writes, so a
//                       reachable all-zero block (a node linked before its
//                       content was persistent, F7) is caught, not trusted
struct NodePrefix {
  uint64_t next;
  uint64_t low_key;
  uint32_t level;
  uint32_t flags;
};
static_assert(sizeof(NodePrefix) == 24);
static_assert(offsetof(NodePrefix, low_key) == 8);
static_assert(offsetof(NodePrefix, level) == 16);

inline constexpr uint32_t kHasLowKey = 1u << 0;
inline constexpr uint32_t kWritten = 1u << 1;

// ---- InnerNode: node_size bytes, 64 B aligned (§4.3, Fig. 3(a)) -------------------------
//
//   off  size      field     meaning
//   0    24        prefix    NodePrefix
//   24   8         count     records in use, [0, count); may include one
//                            transient duplicate (below)
//   32   8         leftmost  child for keys below records[0].key
//   40   24        reserved  zero
//   64   16 * cap  records   sorted {key slot, child offset}
//
// Record i lives at offset 64 + 16 * i: four records share a cache line and
// none straddles two.  Child records[i].child holds the keys in
// [records[i].key, records[i+1].key); records[i].key is that child's low_key.
//
// Transient duplicate (§4.3.1, the paper's "left and right pointers are the
// same"): a record whose child equals its left neighbour's (records[-1] is
// `leftmost`) is left over from an interrupted right shift and is ignored.
// Children are unique in a consistent node, so nothing else matches.
struct InnerRecord {
  uint64_t key;    // key slot (trees/common/keys.h)
  uint64_t child;  // node offset
};
static_assert(sizeof(InnerRecord) == 16);
static_assert(kLine % sizeof(InnerRecord) == 0, "records never straddle a cache line");

struct InnerNode {
  NodePrefix prefix;
  uint64_t count;
  uint64_t leftmost;
  uint64_t reserved[3];
  InnerRecord records[1];  // InnerCapacity(node_size) records in the pool
};
static_assert(offsetof(InnerNode, count) == 24);
static_assert(offsetof(InnerNode, leftmost) == 32);
static_assert(offsetof(InnerNode, records) == 64);

inline constexpr uint32_t InnerCapacity(uint32_t node_size) { return (node_size - 64) / 16; }
static_assert(InnerCapacity(256) == 12 && InnerCapacity(1024) == 60 && InnerCapacity(2048) == 124);

// ---- WoLeaf: node_size bytes, 64 B aligned (§4.2, Fig. 3(b)) ---------------------------
//
//   off  size      field    meaning
//   0    24        prefix   NodePrefix (level 0)
//   24   16        bitmap   bmp: bit i set = entry i is valid (two words, bit
//                           i in word i / 64).  The truth about which entries
//                           the leaf holds.
//   40   1         count    slot[0]: number of valid entries
//   41   cap       slot     slot[1..count]: entry indices in ascending key order
//   ...            pad      to H = RoundUp16(41 + cap)
//   H    16 * cap  entries  unsorted {key slot, value}
//
//   node_size (lines)  H    cap
//   256   (4)          64   12
//   512   (8)          80   27
//   1024  (16)         112  57
//   2048  (32)         160  118
//
// The slot array is derived data: at rest it lists exactly the valid entries
// in key order (invariant W6).  A crash between an insert's or delete's
// bitmap and slot-array flushes (Algorithm 1 has no single commit point) can
// leave them disagreeing; recovery rebuilds the slot array from the bitmap.
struct LeafEntry {
  uint64_t key;    // key slot
  uint64_t value;
};
static_assert(sizeof(LeafEntry) == 16);

struct WoLeaf {
  NodePrefix prefix;
  uint64_t bitmap[2];
  uint8_t slot[1];  // slot[0] = count, slot[1..cap]
};
static_assert(offsetof(WoLeaf, bitmap) == 24);
static_assert(offsetof(WoLeaf, slot) == 40);

inline constexpr uint32_t WoLeafHeader(int cap) { return static_cast<uint32_t>((41 + cap + 15) / 16 * 16); }
inline constexpr int WoLeafCapacity(uint32_t node_size) {
  int cap = 0;
  while (WoLeafHeader(cap + 1) + 16u * static_cast<uint32_t>(cap + 1) <= node_size) cap++;
  return cap;
}
static_assert(WoLeafCapacity(256) == 12 && WoLeafHeader(12) == 64);
static_assert(WoLeafCapacity(512) == 27 && WoLeafHeader(27) == 80);
static_assert(WoLeafCapacity(1024) == 57 && WoLeafHeader(57) == 112);
static_assert(WoLeafCapacity(2048) == 118 && WoLeafHeader(118) == 160);
static_assert(WoLeafCapacity(kMaxNodeSize) <= 128, "two bitmap words");
static_assert(WoLeafCapacity(kMaxNodeSize) < 256, "one-byte slot array entries");

}  // namespace pmtree::wotree

#endif  // PMTREE_TREES_WOTREE_LAYOUT_H_
