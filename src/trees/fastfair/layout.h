// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of FAST+FAIR (docs/trees/fastfair.md).  Every byte the
// tree keeps in a pool is described here; nothing else is persistent.
//
// A tree is one meta block (anchored in pool root slot 0) and nodes of
// `node_size` bytes (256..4096, a multiple of 64; 512 by default).  A node is
// one 64-byte header line followed by `Capacity(node_size)` 16-byte records.
// Leaves and inner nodes share the layout; `level` tells them apart (0 =
// leaf).  All references are pool offsets (0 = none).

#ifndef PMTREE_TREES_FASTFAIR_LAYOUT_H_
#define PMTREE_TREES_FASTFAIR_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace pmtree::fastfair {

inline constexpr uint64_t kMetaMagic = 0x5249414654534146ull;  // "FASTFAIR" little-endian
// 2 since the meta block keeps the leaf count; a version-1 pool (whose
// count word was reserved, 0) is Incompatible.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kDefaultNodeSize = 512;
inline constexpr uint32_t kMinNodeSize = 256;
inline constexpr uint32_t kMaxNodeSize = 4096;
inline constexpr uint64_t kLine = 64;

// Meta block: the tree header (64 B, one cache line, 64-aligned).
//
//   off  size  field      meaning
//   0    8     magic      kMetaMagic; anything else is not a FAST+FAIR tree
//   8    4     version    kFormatVersion
//   12   4     node_size  bytes per node (fixed at creation)
//   16   8     root       offset of the root node; changed only by a root
//                         split (one Store64: the commit point of the split)
//   24   4     key_kind   KeyKind of the pool's keys (0 = u64, 1 = bytes)
//   28   4     variant    0 = fastfair; else fastfair-orig (test-only) and the
//                         flaws it re-enables (Flaws::Bits, fastfair.h)
//   32   8     leaves     a lower bound of the leaves in the leaf chain that no
//                         crash state exceeds: 1 at creation; a leaf split
//                         stores it after the link of its new leaf is durable
//                         (made durable by the parent insert's fence), a bulk
//                         load after its root switch, Close and recovery the
//                         exact count.  Nodes are never freed (but a bulk
//                         load's old empty root), so recovery's walk must
//                         reach at least this many leaves, else the chain was
//                         cut: Corruption, not a loss absorbed (issue 17)
//   40   24    reserved   zero
struct Meta {
  uint64_t magic;
  uint32_t version;
  uint32_t node_size;
  uint64_t root;
  uint32_t key_kind;
  uint32_t variant;
  uint64_t leaves;
  uint64_t reserved[3];
};
static_assert(sizeof(Meta) == 64);
static_assert(offsetof(Meta, root) == 16);
static_assert(offsetof(Meta, root) % 8 == 0, "root is written with one atomic 8-byte store");
static_assert(offsetof(Meta, leaves) == 32);

// Node header (64 B, the node's first cache line).
//
//   off  size  field           meaning
//   0    8     sibling         right sibling at the same level (FAIR), 0 = rightmost
//   8    8     leftmost        inner: child for keys below records[0].key; leaf: 0
//   16   8     low_key         key slot: the smallest key this node may hold (its
//                              fence); valid iff flags & kHasLowKey.  A node's
//                              high fence is its sibling's low_key.
//   24   4     level           0 = leaf, parent = child + 1
//   28   4     flags           kHasLowKey: every node but the first of its level
//   32   8     switch_counter  paper's switch counter: even while inserts shift
//                              right (read left to right), odd while deletes
//                              shift left (read right to left)
//   40   8     count           records in use, [0, count); may include one
//                              transient duplicate (see below)
//   48   8     lock            the paper's lock word.  Locking is done in DRAM
//                              (a striped seqlock table, fastfair.h); this word
//                              is always written 0 and recovery clears it
//   56   8     reserved        zero
//
// Record (16 B): key slot (U64Keys: the key; BytesKeys: prefix + blob
// offset, src/trees/common/keys.h) and value (leaf: the 8-byte value; inner:
// child offset).  Record i of a node lives at offset 64 + 16 * i, so four
// records share a cache line and a record never straddles two lines.
//
// Transient duplicates (FAST).  Shifting copies records one 8-byte word at a
// time, so a node may hold two adjacent records with the same key slot.  Rule
// (the "right-valid" rule): record i < count - 1 whose key slot equals record
// i + 1's is invalid and ignored; the last record in use is always valid.  No
// key or value is reserved as a terminator: the end of a node is `count`, so
// keys 0 and UINT64_MAX and the value 0 are ordinary.
struct NodeHeader {
  uint64_t sibling;
  uint64_t leftmost;
  uint64_t low_key;
  uint32_t level;
  uint32_t flags;
  uint64_t switch_counter;
  uint64_t count;
  uint64_t lock;
  uint64_t reserved;
};
static_assert(sizeof(NodeHeader) == 64);
static_assert(offsetof(NodeHeader, sibling) == 0);
static_assert(offsetof(NodeHeader, low_key) == 16);
static_assert(offsetof(NodeHeader, switch_counter) == 32);
static_assert(offsetof(NodeHeader, count) == 40);
static_assert(offsetof(NodeHeader, lock) == 48);

inline constexpr uint32_t kHasLowKey = 1u << 0;

struct Record {
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(Record) == 16);
static_assert(kLine % sizeof(Record) == 0, "records never straddle a cache line");

struct Node {
  NodeHeader hdr;
  Record records[1];  // Capacity(node_size) records in the pool
};
static_assert(offsetof(Node, records) == 64);
static_assert(alignof(Node) == 8);

inline constexpr uint32_t Capacity(uint32_t node_size) {
  return (node_size - sizeof(NodeHeader)) / sizeof(Record);
}
static_assert(Capacity(256) == 12);
static_assert(Capacity(512) == 28);
static_assert(Capacity(4096) == 252);

}  // namespace pmtree::fastfair

#endif  // PMTREE_TREES_FASTFAIR_LAYOUT_H_
