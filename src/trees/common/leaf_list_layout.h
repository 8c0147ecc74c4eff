// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout shared by the leaf-list designs (fptree, wbtree): the
// meta block that anchors a linked list of PM leaves whose inner nodes live
// in DRAM, and the two-word redo logs (one delete log, kLeafListSplitLogs
// split logs) that protect the list's structure modifications.  Each design
// keeps its own leaf layout and magic in its layout.h and says there what
// the two words of a split log mean for it; trees/common/leaf_list_tree.h
// holds the code that reads and writes these structs.

#ifndef PMTREE_TREES_COMMON_LEAF_LIST_LAYOUT_H_
#define PMTREE_TREES_COMMON_LEAF_LIST_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace pmtree {

// ---- LeafListLog: one 64 B line -------------------------------------------------------
//
//   off  size  field  meaning
//   0    8     leaf   split log: the leaf being split
//                     delete log: the empty leaf being unlinked
//   8    8     other  split log: the new right sibling
//                     delete log: its predecessor (0 = the list head)
//   16   48    pad    keeps each log in its own line
//
// A log is "set" when `leaf` != 0; recovery redoes the operation it names
// and clears both words.
struct LeafListLog {
  uint64_t leaf;
  uint64_t other;
  uint8_t pad[48];
};
static_assert(sizeof(LeafListLog) == 64);
static_assert(offsetof(LeafListLog, other) == 8);

inline constexpr int kLeafListSplitLogs = 16;  // concurrent leaf splits (a log queue)
inline constexpr uint64_t kLeafListRestartMagic = 0x3154525453524c4cull;  // "LLRSTRT1" little-endian

// ---- LeafListMeta: the tree's anchor, referenced by pool root slot 0 ---------------------
//
//   off   size  field       meaning
//   0     8     magic       the design's magic (kFpMagic, kWbMagic)
//   8     8     head        offset of the first (left-most) leaf; never 0
//   16    4     node_size   leaf size in bytes (256, 512 or 1024)
//   20    4     key_kind    KeyKind of the tree (0 u64, 1 bytes)
//   24    8     restart     offset of the restart image a clean Close wrote
//                           (0 = none); trusted only when the pool reports a
//                           clean shutdown and the image matches the leaf list
//   32    8     restart_bytes  the image's size in bytes (written with restart)
//   40    8     leaf_limit  designs with a leaf magic (fptree, wbtree): every leaf ever
//                           allocated ends at or below this offset (raised in
//                           1 MiB steps, persisted before the leaf is written),
//                           so recovery's scan for lost leaves stops here; 0
//                           otherwise
//   48    16    reserved    zero
//   64    64    delete_log  the delete log (removals are serialised)
//
// Restart image (one heap block, 8-byte words): kLeafListRestartMagic, the
// number of leaves n, the image's bytes; then per leaf in key order: its
// offset and the lower bound that routes to it -- a u64 key in one word, or a
// byte string as a 4-byte length and the bytes, padded to whole words (the
// first leaf's bound is stored but unused).
//   128   1024  split_log   kLeafListSplitLogs split logs
struct LeafListMeta {
  uint64_t magic;
  uint64_t head;
  uint32_t node_size;
  uint32_t key_kind;
  uint64_t restart;
  uint64_t restart_bytes;
  uint64_t leaf_limit;
  uint8_t reserved[16];
  LeafListLog delete_log;
  LeafListLog split_log[kLeafListSplitLogs];
};
static_assert(sizeof(LeafListMeta) == 128 + 64 * kLeafListSplitLogs);
static_assert(alignof(LeafListMeta) == 8);
static_assert(offsetof(LeafListMeta, head) == 8);
static_assert(offsetof(LeafListMeta, node_size) == 16);
static_assert(offsetof(LeafListMeta, key_kind) == 20);
static_assert(offsetof(LeafListMeta, restart) == 24 && offsetof(LeafListMeta, restart_bytes) == 32,
              "restart and restart_bytes share the meta's first line: one persist writes both");
static_assert(offsetof(LeafListMeta, leaf_limit) == 40);
static_assert(offsetof(LeafListMeta, delete_log) == 64);
static_assert(offsetof(LeafListMeta, split_log) == 128);

// Every leaf of a leaf-list design opens with these two words; the rest of
// the leaf (and the meaning of the bitmap's bits) is the design's own.
//
//   off  size  field   meaning
//   0    8     bitmap  validity bits of the leaf's entries (design-specific layout)
//   8    8     next    offset of the right sibling leaf (0 = last leaf)
inline constexpr size_t kLeafListBitmapOffset = 0;
inline constexpr size_t kLeafListNextOffset = 8;

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_LEAF_LIST_LAYOUT_H_
