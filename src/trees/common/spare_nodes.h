// SPDX-License-Identifier: Apache-2.0
//
// SpareNodes: the tree-wide reserve of allocated, unlinked nodes of the FAIR
// designs (fastfair, circtree).  A split first ensures enough spares for the
// levels it may climb, before it changes anything, so running out of space
// strikes only where the tree is still whole; it then takes its new nodes
// from here.  Spares outlive the operation (a later split uses them), Verify
// and Stats count them, and Close returns them to the allocator.  A crash
// leaves them unreachable and the recovery's allocator rebuild frees them.
//
// Why not NodeReserve (node_reserve.h, wotree): that reserve belongs to one
// operation and frees what it did not use when the operation ends; these
// designs let a split that could not finish its parent insert (out of space)
// leave the work to a later writer, which needs spares that stay.  Both are
// small; one class with both lifetimes would be harder to read than two.
//
// Thread safety: every member may be called from any thread.

#ifndef PMTREE_TREES_COMMON_SPARE_NODES_H_
#define PMTREE_TREES_COMMON_SPARE_NODES_H_

#include <cstdint>
#include <mutex>
#include <vector>

#include "pmtree/allocator.h"
#include "pmtree/status.h"

namespace pmtree {

class SpareNodes {
 public:
  // Allocates until `want` spares of `bytes` (aligned to `align`) are held.
  Status Ensure(Allocator& alloc, size_t want, uint64_t bytes, uint64_t align) {
    std::lock_guard<std::mutex> g(mu_);
    while (spares_.size() < want) {
      auto r = alloc.Allocate(bytes, align);
      if (!r.ok()) return r.status();
      spares_.push_back(*r);
    }
    return Status::Ok();
  }
  // A spare, or a newly allocated node when none is left.
  Result<uint64_t> Take(Allocator& alloc, uint64_t bytes, uint64_t align) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!spares_.empty()) {
        const uint64_t off = spares_.back();
        spares_.pop_back();
        return off;
      }
    }
    return alloc.Allocate(bytes, align);
  }
  // The allocator's bytes the spares hold (nodes of `bytes` each).
  uint64_t HeldBytes(uint64_t bytes) const {
    std::lock_guard<std::mutex> g(mu_);
    return spares_.size() * Allocator::RoundUp(bytes);
  }
  // Returns every spare to the allocator (at Close: the saved allocator
  // state then holds no leak).
  void FreeAll(Allocator& alloc, uint64_t bytes) {
    std::lock_guard<std::mutex> g(mu_);
    for (uint64_t off : spares_) alloc.Free(off, bytes);
    spares_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::vector<uint64_t> spares_;
};

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_SPARE_NODES_H_
