// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of Circ-Tree (docs/trees/circtree.md).  Every byte the
// tree keeps in a pool is described here; nothing else is persistent.
//
// A tree is one meta block (anchored in pool root slot 0) and nodes.  A node
// is one 64-byte header line followed by its array of KV pairs, the paper's
// "array of KV pairs" of `node_size` bytes (512, 1024, 2048 or 4096: a power
// of two, so `(b + i) & (N - 1)` replaces `(b + i) % N`).  A node therefore
// occupies 64 + node_size bytes.  Leaves (LN) and inner nodes (IN) share the
// layout; `level` tells them apart (0 = leaf).  All references are pool
// offsets (0 = none).
//
// The array is circular: logical position i of a node with base b lives in
// physical slot (b + i) & (N - 1); the node holds `count` pairs at logical
// positions [0, count), in ascending key order.

#ifndef PMTREE_TREES_CIRCTREE_LAYOUT_H_
#define PMTREE_TREES_CIRCTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace pmtree::circtree {

inline constexpr uint64_t kMetaMagic = 0x4545525443524943ull;  // "CIRCTREE" little-endian
// Version 2 added Meta::leaves; a version-1 pool ("the format before the leaf
// count") is Incompatible.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kDefaultNodeSize = 512;
inline constexpr uint32_t kMinNodeSize = 512;
inline constexpr uint32_t kMaxNodeSize = 4096;
inline constexpr uint64_t kLine = 64;

// Meta block: the tree header (64 B, one cache line, 64-aligned).
//
//   off  size  field         meaning
//   0    8     magic         kMetaMagic; anything else is not a Circ-Tree
//   8    4     version       kFormatVersion
//   12   4     node_size     bytes of a node's KV array (fixed at creation)
//   16   8     root          offset of the root node; changed only by a root
//                            split (one Store64: the commit point of the split)
//   24   4     key_kind      KeyKind of the pool's keys (0 = u64, 1 = bytes)
//   28   4     variant       0 = circtree; 1 = circtree-paper (test-only)
//   32   8     zero_value    64-bit keys only: the value of key 0
//   40   8     zero_present  64-bit keys only: 1 when key 0 is in the tree.
//                            Key 0 lives here, not in a leaf, because a leaf
//                            slot whose key word is 0 is the paper's NULL
//                            (docs/trees/circtree.md, "Deviations")
//   48   8     leaves        a lower bound on the leaves of the durable leaf
//                            level (invariant C13): 1 at creation; a leaf
//                            split stores count + 1 only after the persist
//                            that links its new leaf, a merge stores
//                            count - 1 and persists it before the merge's
//                            commit (M3); crash recovery refuses a leaf level
//                            that reaches fewer, then stores the exact count
//   56   8     reserved      zero
//
// The paper's crash flag ("flagged up when Circ-Tree starts and cleared in
// case of a normal exit") is the pool header's clean-shutdown flag.
struct Meta {
  uint64_t magic;
  uint32_t version;
  uint32_t node_size;
  uint64_t root;
  uint32_t key_kind;
  uint32_t variant;
  uint64_t zero_value;
  uint64_t zero_present;
  uint64_t leaves;
  uint64_t reserved;
};
static_assert(sizeof(Meta) == 64);
static_assert(offsetof(Meta, root) == 16);
static_assert(offsetof(Meta, zero_value) == 32);
static_assert(offsetof(Meta, zero_present) == 40);
static_assert(offsetof(Meta, leaves) == 48);
static_assert(offsetof(Meta, leaves) % 8 == 0, "the leaf count is one atomic 8-byte store");

// Node header (64 B, the node's first cache line).  The first 32 bytes are
// the paper's header (Figure 2) in the paper's order; the second 32 bytes
// are what a B-link tree with recovery needs beyond it.
//
//   off  size  field       meaning
//   0    8     array       offset of the KV array: always this node + 64
//   8    4     base        paper's base location b: physical slot of the
//                          smallest key, 0..N-1
//   12   4     count       paper's number of valid keys n, 0..N-1
//                          (base and count form one 8-byte word changed by
//                          one Store64: the commit point of every insert and
//                          delete)
//   16   8     lock        paper's lock word.  Locking is done in DRAM
//                          (StripedVersionLocks); this word is always written
//                          0 and recovery clears it
//   24   8     sibling     right sibling at the same level, 0 = rightmost
//   32   8     low_key     key slot: the smallest key this node may hold (its
//                          fence); valid iff flags & kHasLowKey.  A node's
//                          high fence is its sibling's low_key
//   40   4     level       0 = leaf, parent = child + 1
//   44   4     flags       kHasLowKey: every node but the first of its level
//                          (a merge that makes a node the first of its level
//                          stores low_key = 0 before clearing the flag; a set
//                          flag with low_key 0 reads as "no low key")
//   48   8     merge       merge mark: while a left sibling's pairs are copied
//                          into this node's free slots, this node's
//                          base_count before the merge | kMergeMark; cleared
//                          by the store group that commits the merge; 0 at rest
//   56   8     reserved    zero
struct NodeHeader {
  uint64_t array;
  uint64_t base_count;
  uint64_t lock;
  uint64_t sibling;
  uint64_t low_key;
  uint32_t level;
  uint32_t flags;
  uint64_t merge;
  uint64_t reserved;
};
static_assert(sizeof(NodeHeader) == 64);
static_assert(offsetof(NodeHeader, base_count) == 8);
static_assert(offsetof(NodeHeader, base_count) % 8 == 0, "base + count is one atomic 8-byte store");
static_assert(offsetof(NodeHeader, lock) == 16);
static_assert(offsetof(NodeHeader, sibling) == 24);
static_assert(offsetof(NodeHeader, low_key) == 32);
static_assert(offsetof(NodeHeader, level) == 40);
static_assert(offsetof(NodeHeader, merge) == 48);

inline constexpr uint32_t kHasLowKey = 1u << 0;
// Bit 63 of NodeHeader::merge (a base_count word never sets it: count <= 255).
inline constexpr uint64_t kMergeMark = 1ull << 63;

// base_count word: bits 0..31 base, bits 32..63 count.
inline constexpr uint64_t PackBaseCount(uint32_t base, uint32_t count) {
  return (static_cast<uint64_t>(count) << 32) | base;
}

// KV pair (16 B): key slot (U64Keys: the key; BytesKeys: prefix + blob
// offset, src/trees/common/keys.h) and value (leaf: the 8-byte value; inner:
// child offset).  Four pairs share a cache line; a pair never straddles two.
//
// NULL.  Each pair has an *identity word*: the key slot in a leaf (keys are
// unique and never 0 there: key 0 of a 64-bit tree lives in the meta block,
// and a byte-key slot is never 0), the child offset in an inner node.  A pair
// whose identity word is 0 is NULL (the paper's "NULLs (zeros)"); every slot
// outside [0, count) is all-zero at rest.  Two adjacent pairs with the same
// identity are a transient duplicate of a shift (recovery, circtree.cc).
//
// Inner nodes: logical position 0 holds the leftmost child; its key word is
// unused ("each IN has an unused key", §4.1).  Position i >= 1 holds
// separator s_i and the child for keys in [s_i, s_{i+1}).
struct Pair {
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(Pair) == 16);
static_assert(kLine % sizeof(Pair) == 0, "pairs never straddle a cache line");

struct Node {
  NodeHeader hdr;
  Pair pairs[1];  // Slots(node_size) pairs in the pool
};
static_assert(offsetof(Node, pairs) == 64, "the KV array is cache-line aligned, apart from the header");
static_assert(alignof(Node) == 8);

// Physical slots N of a node's array; a power of two.
inline constexpr uint32_t Slots(uint32_t node_size) { return node_size / sizeof(Pair); }
// Pairs a node holds at most: N - 1.  One slot always stays free so the
// empty slots left and right of the occupied range are distinct slots
// whenever an insert runs (recovery tells a left shift from a right shift by
// which of them is non-NULL).
inline constexpr uint32_t Capacity(uint32_t node_size) { return Slots(node_size) - 1; }
// Bytes of pool a node occupies.
inline constexpr uint64_t NodeBytes(uint32_t node_size) { return sizeof(NodeHeader) + node_size; }
static_assert(Slots(512) == 32 && Capacity(512) == 31);
static_assert(Slots(4096) == 256 && Capacity(4096) == 255);
static_assert(NodeBytes(512) == 576);

}  // namespace pmtree::circtree

#endif  // PMTREE_TREES_CIRCTREE_LAYOUT_H_
