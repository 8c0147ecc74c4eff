// SPDX-License-Identifier: Apache-2.0
//
// CheckSpaceAccounted: the last check of Verify() in a design that keeps a
// reserve of spare nodes (fastfair's invariant 10, circtree's C10): every byte
// the allocator counts in use is a block the walk reached or a spare, so a
// leak (a block nothing reaches) or a double use (a block reached twice, or
// reached and spare) shows as a difference.

#ifndef PMTREE_TREES_COMMON_SPACE_CHECK_H_
#define PMTREE_TREES_COMMON_SPACE_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "pmtree/status.h"

namespace pmtree {

// `invariant` names the design and the invariant ("fastfair: invariant 10").
inline Status CheckSpaceAccounted(std::string_view invariant, uint64_t reached_bytes, uint64_t spare_bytes,
                                  uint64_t in_use) {
  if (reached_bytes + spare_bytes == in_use) return Status::Ok();
  return Status::Corruption(std::string(invariant) + " violated: " + std::to_string(reached_bytes) +
                            " bytes reached + " + std::to_string(spare_bytes) + " reserved != " +
                            std::to_string(in_use) + " bytes in use (leak or double use)");
}

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_SPACE_CHECK_H_
