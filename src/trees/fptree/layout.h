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

namespace pmtree::fptree {

// ---- FpMicroLog: one 64 B line --------------------------------------------------------
//
//   off  size  field   meaning
//   0    8     leaf    split log: PCurrentLeaf, the leaf being split
//                      delete log: PCurrentLeaf, the empty leaf being unlinked
//   8    8     other   split log: PNewLeaf, the new right sibling
//                      delete log: PPrevLeaf, its predecessor (0 = the list head)
//   16   48    pad     keeps each log in its own line
//
// A log is "set" when `leaf` != 0; recovery replays it and clears both words.
struct FpMicroLog {
  uint64_t leaf;
  uint64_t other;
  uint8_t pad[48];
};
static_assert(sizeof(FpMicroLog) == 64);
static_assert(offsetof(FpMicroLog, other) == 8);

inline constexpr int kSplitLogs = 16;  // concurrent leaf splits (FPTree's log queue)

// ---- FpMeta: the tree's anchor, referenced by pool root slot 0 ---------------------------
//
//   off   size  field       meaning
//   0     8     magic       kFpMagic
//   8     8     head        offset of the first (left-most) leaf; never 0
//   16    4     node_size   leaf size in bytes (256, 512 or 1024)
//   20    4     key_kind    KeyKind of the tree (0 u64, 1 bytes)
//   24    40    reserved    zero
//   64    64    delete_log  the delete micro-log (removals are serialised)
//   128   1024  split_log   kSplitLogs split micro-logs
struct FpMeta {
  uint64_t magic;
  uint64_t head;
  uint32_t node_size;
  uint32_t key_kind;
  uint8_t reserved[40];
  FpMicroLog delete_log;
  FpMicroLog split_log[kSplitLogs];
};
static_assert(sizeof(FpMeta) == 128 + 64 * kSplitLogs);
static_assert(offsetof(FpMeta, head) == 8);
static_assert(offsetof(FpMeta, node_size) == 16);
static_assert(offsetof(FpMeta, delete_log) == 64);
static_assert(offsetof(FpMeta, split_log) == 128);

inline constexpr uint64_t kFpMagic = 0x3130454552545046ull;  // "FPTREE01" as little-endian bytes

// ---- FpLeaf: node_size bytes, 64 B aligned -----------------------------------------------
//
//   off  size      field         meaning
//   0    8         bitmap        bit i set = entry slot i holds a valid entry (i < capacity)
//   8    8         next          offset of the right sibling leaf (0 = last leaf)
//   16   48        fingerprints  one-byte hash of the key of slot i (valid where the bit is set)
//   64   16 * cap  entries       unsorted {key slot, value} pairs
//
// Line 0 is the header line: bitmap, sibling pointer and the fingerprint
// array (FPTree keeps the fingerprints in the first cache line so a search
// touches one line before the matching entry).  capacity =
// min(48, (node_size - 64) / 16): 12 at 256 B, 28 at 512 B, 48 at 1 KB (the
// 1 KB leaf is limited by the 48 fingerprint bytes; its last 192 B are unused).
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
static_assert(offsetof(FpLeaf, next) == 8);
static_assert(offsetof(FpLeaf, fingerprints) == 16);
static_assert(offsetof(FpLeaf, entries) == 64);

inline constexpr uint32_t kFpDefaultNodeSize = 256;

inline constexpr int FpCapacity(uint32_t node_size) {
  int c = static_cast<int>((node_size - 64) / 16);
  return c < kMaxFingerprints ? c : kMaxFingerprints;
}
static_assert(FpCapacity(256) == 12 && FpCapacity(512) == 28 && FpCapacity(1024) == 48);

}  // namespace pmtree::fptree

#endif  // PMTREE_TREES_FPTREE_LAYOUT_H_
