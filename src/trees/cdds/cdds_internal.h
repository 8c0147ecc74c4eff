// SPDX-License-Identifier: Apache-2.0
//
// Helpers shared by the two halves of the CDDS B-Tree (cdds.cc: operations;
// cdds_gc.cc: garbage collection, recovery, Verify, Stats).  Not a public
// header.

#ifndef PMTREE_TREES_CDDS_CDDS_INTERNAL_H_
#define PMTREE_TREES_CDDS_CDDS_INTERNAL_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "trees/cdds/cdds.h"
#include "trees/cdds/layout.h"

namespace pmtree::cdds {

inline std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

inline uint64_t EndVersion(uint64_t end) { return end & kVersionMask; }
inline bool Moved(uint64_t end) { return (end & kMovedBit) != 0; }
// Lines 19-20 of Algorithm 1.
inline bool VisibleAt(const NodeEntry& e, uint64_t v) {
  return e.start <= v && (e.end == 0 || EndVersion(e.end) > v);
}
// Live in the writer's view: not ended, not a copy in progress.
inline bool Live(const NodeEntry& e) { return e.end == 0 && e.start != kInvalidVersion; }
inline uint64_t LineOf(const void* p) { return reinterpret_cast<uintptr_t>(p) / 64; }

// An entry read with acquire loads (readers run concurrently with writers'
// Store64s).
inline NodeEntry LoadEntry(const NodeEntry* p) {
  NodeEntry e;
  e.key = PoolImpl::Load64(&p->key);
  e.value = PoolImpl::Load64(&p->value);
  e.start = PoolImpl::Load64(&p->start);
  e.end = PoolImpl::Load64(&p->end);
  return e;
}

inline constexpr uint32_t kMaxCapacity = NodeCapacity(kMaxNodeSize);

}  // namespace pmtree::cdds

namespace pmtree {

// One writer operation at version v = current + 1 (cdds.cc, "Op").
template <KeyPolicy KP>
struct CddsTree<KP>::Op {
  uint64_t cv = 0;       // the last consistent version
  uint64_t v = 0;        // v' of the algorithms
  uint64_t before = 0;   // entries that ended at or before this are reclaimable
  uint64_t old_root = 0;
  bool root_changed = false;
  std::vector<uint64_t> touched;    // existing nodes written (rolled back by Abort)
  std::vector<uint64_t> new_nodes;  // allocated by this operation
  std::vector<uint64_t> new_slots;  // key slots made by this operation
  // Overwritten dead entries that owned a key blob and, in inner nodes, a
  // child subtree: released after the operation (commit or abort).
  std::vector<std::pair<cdds::NodeEntry, uint32_t>> released;
};

// A reader's copy of one node, taken under the node's seqlock.
template <KeyPolicy KP>
struct CddsTree<KP>::NodeCopy {
  uint32_t n = 0;
  uint16_t level = 0;
  cdds::NodeEntry e[cdds::kMaxCapacity];
};

}  // namespace pmtree

#endif  // PMTREE_TREES_CDDS_CDDS_INTERNAL_H_
