// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of the LCB+Tree (`logtree`): every byte the log-based
// consistent B+-tree keeps in the pool.  docs/trees/logtree.md explains the
// write orders and recovery rules that give these bytes their meaning.
//
// Three kinds of blocks live in the heap:
//   LogTreeMeta  one 64-byte line, anchored in pool root slot 0
//   the undo log one LogHeader line followed by `log_slots` record slots
//   nodes        `node_size` bytes each, leaves and inner nodes alike
// plus the key blobs of src/trees/common/keys.h when keys are byte strings.
// Every reference is a byte offset from the pool base (0 = none).

#ifndef PMTREE_TREES_LOGTREE_LAYOUT_H_
#define PMTREE_TREES_LOGTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace pmtree::logtree {

// LogTreeMeta byte table (64-byte aligned, 64 bytes, pool root slot 0):
//
//   off  size  field      meaning
//   0    8     magic      kMetaMagic ("LOGTREE1")
//   8    4     version    kLayoutVersion
//   12   4     node_size  bytes per node: 512, 1024, 2048 or 4096
//   16   4     key_kind   KeyKind of the slots (0 = u64, 1 = byte strings)
//   20   4     log_slots  record slots in the undo log
//   24   8     root       offset of the root node; changed only under the log
//                         (root split, root collapse, bulk load)
//   32   8     log        offset of the LogHeader
//   40   24    reserved   zero
struct LogTreeMeta {
  uint64_t magic;
  uint32_t version;
  uint32_t node_size;
  uint32_t key_kind;
  uint32_t log_slots;
  uint64_t root;
  uint64_t log;
  uint64_t reserved[3];
};
static_assert(sizeof(LogTreeMeta) == 64);
static_assert(offsetof(LogTreeMeta, root) == 24);
static_assert(offsetof(LogTreeMeta, root) % 8 == 0, "root is written with one atomic 8-byte store");
static_assert(offsetof(LogTreeMeta, log) == 32);

inline constexpr uint64_t kMetaMagic = 0x3145455254474f4cull;  // "LOGTREE1" little-endian
inline constexpr uint32_t kLayoutVersion = 1;

// LogHeader byte table (64-byte aligned, first line of the undo log):
//
//   off  size  field      meaning
//   0    8     count      number of valid undo records of the operation in
//                         flight; 0 = no operation in flight.  The single
//                         8-byte commit word: an operation appends record i
//                         and then stores count = i + 1; it commits by
//                         storing count = 0.
//   8    8     magic      kLogMagic
//   16   4     slots      record slots that follow (== LogTreeMeta::log_slots)
//   20   4     slot_size  bytes per slot: 64 + node_size
//   24   40    reserved   zero
//
// Record slot i starts at log + 64 + i * slot_size:
//
//   off  size       field   meaning
//   0    8          target  offset of the bytes this record saved
//   8    4          len     bytes saved (multiple of 8, at most node_size)
//   12   4          seq     i, the record's index (a check for recovery)
//   16   48         reserved
//   64   len        data    the original bytes at target, before the operation
struct LogHeader {
  uint64_t count;
  uint64_t magic;
  uint32_t slots;
  uint32_t slot_size;
  uint64_t reserved[5];
};
static_assert(sizeof(LogHeader) == 64);
static_assert(offsetof(LogHeader, count) == 0, "count is the commit word, one atomic 8-byte store");

struct LogRecordHeader {
  uint64_t target;
  uint32_t len;
  uint32_t seq;
  uint64_t reserved[6];
};
static_assert(sizeof(LogRecordHeader) == 64, "record data starts on its own cache line");

inline constexpr uint64_t kLogMagic = 0x474f4c4f444e55ull;  // "UNDOLOG"

// Node byte table (64-byte aligned, node_size bytes; leaves and inner nodes):
//
//   off   size  field    meaning
//   0     2     level    0 for a leaf; an inner node is one above its children
//   2     2     count    leaf: entries; inner: separator keys (children = count + 1)
//   4     4     tag      kNodeTag, a guard against following a wild offset
//   8     8     link     leaf: right sibling leaf (0 = rightmost);
//                        inner: child 0, the leftmost child
//   16    16*n  entries  sorted by key, n = (node_size - 16) / 16
//
// Entry byte table (16 bytes):
//   0     8     key      key slot (U64Keys: the key; BytesKeys: prefix16 | blob)
//   8     8     value    leaf: the value; inner: child i + 1, holding keys >= key
//
// Entries [count, n) are garbage and never read.
struct NodeHeader {
  uint16_t level;
  uint16_t count;
  uint32_t tag;
  uint64_t link;
};
static_assert(sizeof(NodeHeader) == 16);
static_assert(offsetof(NodeHeader, link) == 8);

struct NodeEntry {
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(NodeEntry) == 16);

inline constexpr uint32_t kNodeTag = 0x4e47544cu;  // "LTGN"

inline constexpr uint32_t kMinNodeSize = 512;
inline constexpr uint32_t kMaxNodeSize = 4096;
inline constexpr uint32_t kDefaultNodeSize = 512;

// Entries a node of `node_size` bytes holds.
constexpr uint32_t NodeCapacity(uint32_t node_size) {
  return (node_size - sizeof(NodeHeader)) / sizeof(NodeEntry);
}
static_assert(NodeCapacity(512) == 31);
static_assert(NodeCapacity(4096) == 255);
static_assert(NodeCapacity(kMaxNodeSize) < 65536, "count is 16 bits");

// Record slots in the undo log.  An operation logs at most two nodes per
// level (a merge touches the node or its left sibling, and the parent) plus
// the meta line, so 64 slots serve trees of up to 31 levels -- far beyond any
// pool (a 512-byte-node tree of 31 levels would index > 2^30 leaves).
inline constexpr uint32_t kLogSlots = 64;
inline constexpr uint32_t kMaxHeight = (kLogSlots - 2) / 2;

}  // namespace pmtree::logtree

#endif  // PMTREE_TREES_LOGTREE_LAYOUT_H_
