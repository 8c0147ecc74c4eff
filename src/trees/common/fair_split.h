// SPDX-License-Identifier: Apache-2.0
//
// PublishSplit: the end of a split in the designs whose new sibling is
// reachable through its left sibling before any parent names it (FAST+FAIR's
// rule; fastfair and circtree).  Once the split node is committed, the
// caller, still holding the split node's lock, hands over here:
//
//   - the split node was the root: under the root mutex, a new root over the
//     two halves is installed (`install_root`), then the node is unlocked;
//   - otherwise the node is unlocked first, then the separator of the new
//     sibling goes into the parent (`insert_separator`).
//
// Only kInternal fails the operation: the pair is already in.  Out of space
// leaves a root with a sibling, or a sibling no parent names; lookups stay
// correct through the sibling pointers, and the design completes the split
// later (CompleteRootSplit on the next writer at that level, or recovery).

#ifndef PMTREE_TREES_COMMON_FAIR_SPLIT_H_
#define PMTREE_TREES_COMMON_FAIR_SPLIT_H_

#include <mutex>

#include "pmtree/status.h"

namespace pmtree {

// `was_root`: the split node is the root.  Only the holder of the root's lock
// changes the root, so the caller's check is stable while it holds it.
template <class InstallRoot, class Unlock, class InsertSeparator>
Status PublishSplit(bool was_root, std::mutex& root_mu, InstallRoot install_root, Unlock unlock,
                    InsertSeparator insert_separator) {
  if (was_root) {
    std::lock_guard<std::mutex> g(root_mu);
    Status rs = install_root();
    unlock();
    if (rs.code() == Status::Code::kInternal) return rs;
    return Status::Ok();
  }
  unlock();
  Status ps = insert_separator();
  if (ps.code() == Status::Code::kInternal) return ps;
  return Status::Ok();
}

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_FAIR_SPLIT_H_
