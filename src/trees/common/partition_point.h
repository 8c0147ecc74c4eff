// SPDX-License-Identifier: Apache-2.0
//
// PartitionPoint: the one binary search of the trees' sorted node arrays.
// Every node search is the same loop over indices (lower bound: "key below
// the target"; upper bound: "key at or below the target"); what differs is
// how an index's key is loaded (a plain field, an atomic, a slot of a
// circular array, a blob compared by the key policy), so the loop takes the
// predicate over an index.  std::partition_point needs an iterator over the
// keys, which the atomic and circular layouts do not have.
//
// Probes are those of the hand-written loop it replaces (mid = (lo + hi) / 2),
// so a tree that switches to it reads the same words in the same order.

#ifndef PMTREE_TREES_COMMON_PARTITION_POINT_H_
#define PMTREE_TREES_COMMON_PARTITION_POINT_H_

#include <cstdint>

namespace pmtree {

// The first index i in [lo, hi) with !before(i), or hi when there is none.
// Precondition: before(i) is true for a prefix of [lo, hi) and false after.
template <class Before>
uint32_t PartitionPoint(uint32_t lo, uint32_t hi, Before&& before) {
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (before(mid))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_PARTITION_POINT_H_
