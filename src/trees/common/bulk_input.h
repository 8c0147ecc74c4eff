// SPDX-License-Identifier: Apache-2.0
//
// CheckBulkLoadInput: the argument rules every design's BulkLoad shares
// (pmtree/tree.h): 0 < fill <= 1, each key acceptable to the design's key
// check (over-long byte strings are InvalidArgument), keys strictly
// ascending.  Checked before the design takes a lock or writes a byte, so a
// refused load changes nothing.

#ifndef PMTREE_TREES_COMMON_BULK_INPUT_H_
#define PMTREE_TREES_COMMON_BULK_INPUT_H_

#include <span>
#include <string>

#include "pmtree/status.h"

namespace pmtree {

// check_key(key) -> Status, e.g. &KP::CheckArg.
template <class Entry, class CheckKey>
Status CheckBulkLoadInput(std::span<const Entry> sorted, double fill, CheckKey check_key) {
  if (!(fill > 0 && fill <= 1)) return Status::InvalidArgument("bulk load: fill must be in (0, 1]");
  for (size_t i = 0; i < sorted.size(); i++) {
    PMTREE_RETURN_IF_ERROR(check_key(sorted[i].first));
    if (i > 0 && !(sorted[i - 1].first < sorted[i].first))
      return Status::InvalidArgument("bulk load: input not strictly ascending at index " + std::to_string(i));
  }
  return Status::Ok();
}

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_BULK_INPUT_H_
