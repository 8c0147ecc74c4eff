// SPDX-License-Identifier: Apache-2.0
//
// NodeReserve: the nodes one operation may need, allocated before it changes
// anything, so that running out of space can strike only before the first
// store to a reachable node (contract item 5 of pmtree/tree.h: a failed
// operation leaves the state before the call).  A leaf split that cascades
// takes its inner nodes and a new root from the reserve; what it does not
// take goes back to the allocator when the reserve goes out of scope.
//
// Reserved blocks are volatile state: a crash before they are linked leaves
// them unreachable, and recovery's allocator rebuild frees them.

#ifndef PMTREE_TREES_COMMON_NODE_RESERVE_H_
#define PMTREE_TREES_COMMON_NODE_RESERVE_H_

#include <cstdint>
#include <vector>

#include "pmtree/allocator.h"
#include "pmtree/status.h"

namespace pmtree {

class NodeReserve {
 public:
  NodeReserve(Allocator& alloc, uint64_t node_size) : alloc_(alloc), node_size_(node_size) {}
  ~NodeReserve() {
    for (uint64_t off : nodes_) alloc_.Free(off, node_size_);
  }
  NodeReserve(const NodeReserve&) = delete;
  NodeReserve& operator=(const NodeReserve&) = delete;

  // Allocates until `n` nodes are held.  OutOfSpace when the pool cannot
  // supply them (what was allocated is freed with the reserve).
  Status Fill(size_t n) {
    while (nodes_.size() < n) {
      PMTREE_ASSIGN_OR_RETURN(uint64_t off, alloc_.Allocate(node_size_));
      nodes_.push_back(off);
    }
    return Status::Ok();
  }
  // A reserved node, or a new allocation when the reserve is empty (another
  // thread grew the tree after Fill, so the cascade is one level longer).
  Result<uint64_t> Take() {
    if (nodes_.empty()) return alloc_.Allocate(node_size_);
    const uint64_t off = nodes_.back();
    nodes_.pop_back();
    return off;
  }

 private:
  Allocator& alloc_;
  const uint64_t node_size_;
  std::vector<uint64_t> nodes_;
};

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_NODE_RESERVE_H_
