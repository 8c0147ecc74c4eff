// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of fptree (FPTree, Oukid et al., SIGMOD 2016): every
// struct this design keeps in the pool.  Inner nodes live in DRAM
// (trees/common/dram_inner_index.h) and have no persistent form.
// docs/trees/fptree.md explains the write orders that keep these consistent.

#ifndef PMTREE_TREES_FPTREE_LAYOUT_H_
#define PMTREE_TREES_FPTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "trees/common/leaf_list_layout.h"

namespace pmtree::fptree {

// ---- FpMeta and FpMicroLog: the shared leaf-list meta block and logs ----------------------
//
// FpMeta is LeafListMeta and FpMicroLog is LeafListLog (byte tables in
// trees/common/leaf_list_layout.h): magic kFpMagic, head, node_size,
// key_kind, the delete micro-log at 64 and kSplitLogs split micro-logs at 128.
// What the two words of each micro-log mean here:
//   split log   leaf = PCurrentLeaf, the leaf being split
//               other = PNewLeaf, the new right sibling (written before the new leaf)
//   delete log  leaf = PCurrentLeaf, the empty leaf being unlinked
//               other = PPrevLeaf, its predecessor (0 = the list head)
// A log is "set" when `leaf` != 0; recovery replays it and clears both words.
using FpMicroLog = LeafListLog;
using FpMeta = LeafListMeta;

inline constexpr int kSplitLogs = kLeafListSplitLogs;  // concurrent leaf splits (FPTree's log queue)

// The meta magic is the format version: "FPTREE02" since leaves carry the
// leaf magic (below); a "FPTREE01" pool is refused as Incompatible, since
// this build would take its freed leaves (magic word never cleared) for
// lost ones.
inline constexpr uint64_t kFpMagic = 0x3230454552545046ull;     // "FPTREE02" as little-endian bytes
inline constexpr uint64_t kFpMagicV1 = 0x3130454552545046ull;   // "FPTREE01": before the leaf magic

// ---- FpLeaf: node_size bytes, 64 B aligned -----------------------------------------------
//
//   off  size      field         meaning
//   0    8         bitmap        bit i set = entry slot i holds a valid entry (i < capacity)
//   8    8         next          offset of the right sibling leaf (0 = last leaf)
//   16   48        fingerprints  one-byte hash of the key of slot i (valid where the bit is set)
//   64   16 * cap  entries       unsorted {key slot, value} pairs
//   M    8         leaf_magic    the pool's leaf magic (LeafListTree::LeafMagic) while the
//                                leaf is in the list; 0 once it is unlinked
//
// Line 0 is the header line: bitmap, sibling pointer and the fingerprint
// array (FPTree keeps the fingerprints in the first cache line so a search
// touches one line before the matching entry).  capacity =
// min(48, (node_size - 64) / 16): 12 at 256 B, 28 at 512 B, 48 at 1 KB (the
// 1 KB leaf is limited by the 48 fingerprint bytes; its last 192 B are unused).
// The leaf magic sits where no fingerprint or entry does: M = 56 (the last
// fingerprint bytes, unused at 12 and 28 entries) at 256 and 512 B, M = 832
// (the first unused word after the entries) at 1 KB.  Recovery after a crash
// reports free space carrying the magic as a lost leaf (docs/pool_format.md).
struct FpEntry {
  uint64_t key;    // key slot (trees/common/keys.h)
  uint64_t value;
};
static_assert(sizeof(FpEntry) == 16);

inline constexpr int kMaxFingerprints = 48;

struct FpLeaf {
  uint64_t bitmap;
  uint64_t next;
  uint8_t fingerprints[kMaxFingerprints];
  FpEntry entries[1];  // capacity entries follow
};
static_assert(offsetof(FpLeaf, bitmap) == kLeafListBitmapOffset);
static_assert(offsetof(FpLeaf, next) == kLeafListNextOffset);
static_assert(offsetof(FpLeaf, fingerprints) == 16);
static_assert(offsetof(FpLeaf, entries) == 64);

inline constexpr uint32_t kFpDefaultNodeSize = 256;

inline constexpr int FpCapacity(uint32_t node_size) {
  int c = static_cast<int>((node_size - 64) / 16);
  return c < kMaxFingerprints ? c : kMaxFingerprints;
}
static_assert(FpCapacity(256) == 12 && FpCapacity(512) == 28 && FpCapacity(1024) == 48);

inline constexpr uint32_t FpMagicOffset(uint32_t node_size) {
  return FpCapacity(node_size) <= 40 ? 56 : 64 + 16 * static_cast<uint32_t>(FpCapacity(node_size));
}
static_assert(FpMagicOffset(256) == 56 && FpMagicOffset(512) == 56 && FpMagicOffset(1024) == 832);
static_assert(16 + FpCapacity(512) <= 56, "the magic word is past every fingerprint in use");
static_assert(64 + 16 * FpCapacity(512) <= 512 && FpMagicOffset(1024) + 8 <= 1024);

}  // namespace pmtree::fptree

#endif  // PMTREE_TREES_FPTREE_LAYOUT_H_
