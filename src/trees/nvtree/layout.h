// SPDX-License-Identifier: Apache-2.0
//
// Persistent layout of NV-Tree (docs/trees/nvtree.md).  Only the leaves (LNs,
// the paper's *critical data*), the meta block and, between a clean Close and
// the next open, the saved inner-node image live in the pool.  Inner nodes
// (IN/PLN, *reconstructable data*) live in DRAM and are described in
// nvtree.h.

#ifndef PMTREE_TREES_NVTREE_LAYOUT_H_
#define PMTREE_TREES_NVTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace pmtree::nvtree {

inline constexpr uint64_t kMetaMagic = 0x3245455254564eull;   // "NVTREE2"
// The format before the leaf count (Meta byte 56 reserved and 0): such a pool
// is Incompatible, not Corruption.
inline constexpr uint64_t kMetaMagicV1 = 0x3145455254564eull;  // "NVTREE1"
inline constexpr uint64_t kLeafMagic = 0x464145464c564eull;   // "NVLFEAF"
inline constexpr uint64_t kImageMagic = 0x474d49564e564eull;  // "NVNVIMG"

// ---- Meta block (root slot 0) ------------------------------------------------
//
//   off  size  field            meaning
//   0    8     magic            kMetaMagic
//   8    8     head             offset of the first LN of the leaf list (never 0)
//   16   4     node_size        default LN size in bytes (TreeOptions::node_size)
//   20   4     inner_node_size  IN/PLN size in bytes; fixes m (PLN keys) = size/16
//   24   4     strategy         workload-adaptive strategy (Strategy enum)
//   28   4     key_kind         KeyKind of the elements' key slots
//   32   8     inner_image      offset of the IN/PLN image saved by Close (0 = none);
//                               trusted only when the pool reports a clean shutdown
//   40   8     read_ps_line     media read cost, picoseconds per 64 B line (§5.4 T_r)
//   48   8     write_ps_line    media write+flush cost, picoseconds per line (§5.4 T_w)
//   56   8     leaves           leaf count: a lower bound of the LNs in the leaf
//                               list, exact whenever no operation runs
//                               (invariant 11 in nvtree.cc)
//
// Written once at creation and persisted before SetRoot(0); afterwards only
// `head` (an atomic switch, like any left-sibling pointer), `inner_image`
// (at Close and at the next open) and `leaves` (a split after its link is
// durable, a merge before its unlink is stored, a bulk load after its head
// store is durable, recovery) change.
struct Meta {
  uint64_t magic;
  uint64_t head;
  uint32_t node_size;
  uint32_t inner_node_size;
  uint32_t strategy;
  uint32_t key_kind;
  uint64_t inner_image;
  uint64_t read_ps_line;
  uint64_t write_ps_line;
  uint64_t leaves;
};
static_assert(sizeof(Meta) == 64);
static_assert(offsetof(Meta, head) == 8);
static_assert(offsetof(Meta, inner_image) == 32);
static_assert(offsetof(Meta, leaves) == 56);
static_assert(offsetof(Meta, head) % 8 == 0 && offsetof(Meta, inner_image) % 8 == 0);

// ---- LN_element ---------------------------------------------------------------
//
//   off  size  field  meaning
//   0    8     flag   kPositive (a KV-pair) or kNegative (cancels the
//                     POSITIVE element of the same key and value before it)
//   8    8     key    key slot of the key policy (the key, or a KeyBlob ref)
//   16   8     value  the 8-byte value
//
// An element is meaningful only below its leaf's nElement; bytes above it are
// garbage from an interrupted append and are overwritten by the next one.
inline constexpr uint64_t kPositive = 1;
inline constexpr uint64_t kNegative = 2;

struct LnElement {
  uint64_t flag;
  uint64_t key;
  uint64_t value;
};
static_assert(sizeof(LnElement) == 24);
static_assert(offsetof(LnElement, key) == 8 && offsetof(LnElement, value) == 16);

// ---- Leaf node (LN) ------------------------------------------------------------
//
//   off  size  field       meaning
//   0    8     n_element   the paper's nElement: elements [0, n_element) are
//                          committed.  One failure-atomic Store64 commits an
//                          insert/delete (+1) or an update (+2).
//   8    8     next        offset of the right sibling (0 = last leaf).  The
//                          single store that makes a split/replace/merge visible
//                          is a store to the left sibling's `next` (or Meta::head).
//   16   4     capacity    number of element slots (fixed at creation)
//   20   4     node_bytes  allocation size in bytes (adaptive: varies per LN)
//   24   8     magic       kLeafMagic (Verify and recovery sanity check)
//   32   32    reserved    0
//   64   24*c  elements    LnElement[capacity], unsorted, append-only
//
// A new LN is written completely (header, elements, n_element, next) and
// persisted before the store that links it; an LN is never modified after it
// is unlinked.
struct LeafHeader {
  uint64_t n_element;
  uint64_t next;
  uint32_t capacity;
  uint32_t node_bytes;
  uint64_t magic;
  uint64_t reserved[4];
};
static_assert(sizeof(LeafHeader) == 64);
static_assert(offsetof(LeafHeader, n_element) == 0 && offsetof(LeafHeader, next) == 8);
static_assert(offsetof(LeafHeader, capacity) == 16 && offsetof(LeafHeader, magic) == 24);

inline constexpr uint32_t kLeafHeaderBytes = sizeof(LeafHeader);
inline uint32_t LeafCapacity(uint32_t node_bytes) {
  return (node_bytes - kLeafHeaderBytes) / sizeof(LnElement);
}
inline LnElement* LeafElements(LeafHeader* h) {
  return reinterpret_cast<LnElement*>(reinterpret_cast<char*>(h) + kLeafHeaderBytes);
}

// ---- Inner-node image (saved at Close, §4.6 instant recovery) --------------------
//
// Image header:
//   off  size  field        meaning
//   0    8     magic        kImageMagic
//   8    8     bytes        total image size (allocation size)
//   16   8     checksum     HashBytes of bytes [64, bytes)
//   24   8     n_pln        number of PLNs
//   32   8     n_entries    number of LN entries over all PLNs (= number of LNs)
//   40   8     strings      offset (from the image start) of the separator string
//                           area (byte-string keys only; 0 for u64 keys)
//   48   16    reserved     0
// Then n_pln ImagePln records, then n_entries ImageEntry records in PLN order,
// then the string area: per separator a u32 length and its bytes (4-aligned).
struct ImageHeader {
  uint64_t magic;
  uint64_t bytes;
  uint64_t checksum;
  uint64_t n_pln;
  uint64_t n_entries;
  uint64_t strings;
  uint64_t reserved[2];
};
static_assert(sizeof(ImageHeader) == 64);

//   off  size  field     meaning
//   0    4     capacity  LN entries the PLN can hold (enlarged PLNs hold more)
//   4    4     count     LN entries in use
struct ImagePln {
  uint32_t capacity;
  uint32_t count;
};
static_assert(sizeof(ImagePln) == 8);

//   off  size  field      meaning
//   0    8     sep        separator: the u64 key, or for byte-string keys the
//                         offset of its string in the string area; kImageInf = +inf
//   8    8     ln         offset of the LN
//   16   8     n_element  the LN's nElement at Close (readers' scan bound)
inline constexpr uint64_t kImageInf = ~0ull;
struct ImageEntry {
  uint64_t sep;
  uint64_t ln;
  uint64_t n_element;
};
static_assert(sizeof(ImageEntry) == 24);

}  // namespace pmtree::nvtree

#endif  // PMTREE_TREES_NVTREE_LAYOUT_H_
