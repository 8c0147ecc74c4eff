// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of the CDDS B-Tree (`cdds`, Venkataraman, UIUC 2011,
// §4.3-4.4): every byte the tree keeps in the pool.  docs/trees/cdds.md
// explains the version protocol, write orders and recovery rules that give
// these bytes their meaning.
//
// Two kinds of blocks live in the heap:
//   CddsMeta  one 64-byte line, anchored in pool root slot 0
//   nodes     `node_size` bytes each, leaves and inner nodes alike
// plus the key blobs of src/trees/common/keys.h when keys are byte strings.
// Every reference is a byte offset from the pool base (0 = none).

#ifndef PMTREE_TREES_CDDS_LAYOUT_H_
#define PMTREE_TREES_CDDS_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace pmtree::cdds {

// CddsMeta byte table (64-byte aligned, 64 bytes, pool root slot 0):
//
//   off  size  field            meaning
//   0    8     magic            kMetaMagic ("CDDSTRE1")
//   8    4     version          kLayoutVersion
//   12   4     node_size        bytes per node: 512, 1024, 2048 or 4096
//   16   4     key_kind         KeyKind of the key slots (0 = u64, 1 = byte strings)
//   20   4     flags            bit 0 (kFlagBoundsRelaxed): a delete once skipped
//                               its merge for lack of space, so nodes may hold
//                               m_l live entries or fewer (§4.4.6); set with one
//                               8-byte store of bytes 16..23
//   24   8     root             offset of the root node (one atomic 8-byte
//                               store: root split, root promotion)
//   32   8     current_version  the most recent consistent version (§4.3):
//                               the single commit word of every operation,
//                               stored only after all of the operation's
//                               writes are persistent
//   40   8     node_limit       every node that may carry the node magic ends
//                               at or below this offset (a multiple of
//                               kNodeLimitStep, raised and persisted before a
//                               node above it is written: N1 in cdds_gc.cc);
//                               recovery scans the free space below it
//   48   16    reserved         zero
struct CddsMeta {
  uint64_t magic;
  uint32_t version;
  uint32_t node_size;
  uint32_t key_kind;
  uint32_t flags;
  uint64_t root;
  uint64_t current_version;
  uint64_t node_limit;
  uint64_t reserved[2];
};
static_assert(sizeof(CddsMeta) == 64);
static_assert(offsetof(CddsMeta, root) == 24);
static_assert(offsetof(CddsMeta, current_version) == 32);
static_assert(offsetof(CddsMeta, root) % 8 == 0 && offsetof(CddsMeta, current_version) % 8 == 0,
              "root and current_version are written with one atomic 8-byte store each");
static_assert(offsetof(CddsMeta, root) / 64 == offsetof(CddsMeta, current_version) / 64,
              "a root split's pointer store is written back by the commit's persist of the same line");

static_assert(offsetof(CddsMeta, key_kind) % 8 == 0, "key_kind and flags form one 8-byte word");
static_assert(offsetof(CddsMeta, node_limit) == 40, "node_limit is one atomic 8-byte store");

inline constexpr uint32_t kFlagBoundsRelaxed = 1;
inline constexpr uint64_t kMetaMagic = 0x3145525453444443ull;  // "CDDSTRE1" little-endian
// Version 2 added the node magic (NodeHeader::magic) and CddsMeta::node_limit;
// a version-1 pool is Incompatible.
inline constexpr uint32_t kLayoutVersion = 2;
inline constexpr uint32_t kLayoutVersionBeforeNodeMagic = 1;
// node_limit moves in steps of 1 MiB: one persist per MiB of heap that nodes reach.
inline constexpr uint64_t kNodeLimitStep = 1ull << 20;

// Node byte table (64-byte aligned, node_size bytes; leaves and inner nodes):
//
//   off  size  field        meaning
//   0    8     num_entries  entries [0, num_entries) are meaningful (one
//                           atomic 8-byte store; get/set_num_entries of the
//                           paper's algorithms)
//   8    2     level        0 for a leaf; an inner node is one above its children
//   10    2    reserved0    zero
//   12   4     tag          kNodeTag, a guard against following a wild offset
//   16   8     magic        the pool's node magic (NodeMagic in cdds_gc.cc,
//                           from Pool::id()) or 0: set only while the node is
//                           reachable from the root through committed entries
//                           and cleared (persisted) before the last durable
//                           reference to it can go (N1-N4 in cdds_gc.cc), so
//                           free space carrying it is a node lost to damage
//   24   8     reserved     zero
//   32   32*n  entries      n = (node_size - 32) / 32, ordered by key, then
//                           by start version (§4.4.1)
//
// Entry byte table (32 bytes, 32-byte aligned: never crosses a cache line):
//
//   off  size  field  meaning
//   0    8     key    key slot (U64Keys: the key; BytesKeys: prefix16 | blob).
//                     Inner node: the largest key of the child's range when
//                     the entry was made; the last entry visible at a version
//                     also takes every larger key (the "maximum key" of §4.5).
//   8    8     value  leaf: the value; inner: offset of the child node
//   16   8     start  version that created the entry; kInvalidVersion while
//                     the entry is being copied (a torn copy is never
//                     mistaken for an entry: recovery discards start > cv)
//   24   8     end    0 = live; else bits 62..0 the version that ended it and
//                     bit 63 (kMovedBit) set when a newer entry (a copy-on-
//                     write copy or the next version of the key) took over
//                     the key blob and the child, which this entry then no
//                     longer owns
//
// An entry is visible at version v when start <= v and (end == 0 or
// (end & ~kMovedBit) > v) -- lines 19-20 of Algorithm 1.
struct NodeHeader {
  uint64_t num_entries;
  uint16_t level;
  uint16_t reserved0;
  uint32_t tag;
  uint64_t magic;
  uint64_t reserved;
};
static_assert(sizeof(NodeHeader) == 32);
static_assert(offsetof(NodeHeader, magic) == 16, "the node magic is one atomic 8-byte store");
static_assert(offsetof(NodeHeader, num_entries) == 0, "num_entries is one atomic 8-byte store");
static_assert(offsetof(NodeHeader, tag) == 12);

struct NodeEntry {
  uint64_t key;
  uint64_t value;
  uint64_t start;
  uint64_t end;
};
static_assert(sizeof(NodeEntry) == 32);
static_assert(offsetof(NodeEntry, start) == 16);
static_assert(offsetof(NodeEntry, end) == 24);
static_assert(64 % sizeof(NodeEntry) == 0 && sizeof(NodeHeader) % sizeof(NodeEntry) == 0,
              "entries are 32-byte aligned, so an entry never straddles two cache lines");

inline constexpr uint32_t kNodeTag = 0x53444443u;  // "CDDS"
inline constexpr uint64_t kInvalidVersion = ~0ull;
inline constexpr uint64_t kMovedBit = 1ull << 63;
inline constexpr uint64_t kVersionMask = kMovedBit - 1;

inline constexpr uint32_t kMinNodeSize = 512;
inline constexpr uint32_t kMaxNodeSize = 4096;
inline constexpr uint32_t kDefaultNodeSize = 512;
inline constexpr uint32_t kMaxHeight = 32;

// Entries a node of `node_size` bytes holds.
constexpr uint32_t NodeCapacity(uint32_t node_size) {
  return (node_size - sizeof(NodeHeader)) / sizeof(NodeEntry);
}
static_assert(NodeCapacity(512) == 15);
static_assert(NodeCapacity(4096) == 127);

// m_l of §4.4.6: the minimum number of live entries of a non-root node, k/5.
constexpr uint32_t MinLive(uint32_t capacity) { return capacity / 5; }
static_assert(MinLive(NodeCapacity(512)) == 3);
static_assert(4 * MinLive(NodeCapacity(512)) + 1 <= NodeCapacity(512),
              "split_insert into one node fits l <= 4 m_l live entries plus the new one");

}  // namespace pmtree::cdds

#endif  // PMTREE_TREES_CDDS_LAYOUT_H_
