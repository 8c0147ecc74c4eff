// SPDX-License-Identifier: Apache-2.0
//
// UpcastTree: turns a design's Result<unique_ptr<Concrete>> into the
// Result<unique_ptr<Tree>> (or BytesTree) its registry entry point returns,
// passing an error status through.  One helper for every design whose
// factory returns the concrete class (logtree, cdds).

#ifndef PMTREE_TREES_COMMON_UPCAST_H_
#define PMTREE_TREES_COMMON_UPCAST_H_

#include <memory>
#include <utility>

#include "pmtree/status.h"

namespace pmtree {

template <class Base, class T>
Result<std::unique_ptr<Base>> UpcastTree(Result<std::unique_ptr<T>> r) {
  if (!r.ok()) return r.status();
  return std::unique_ptr<Base>(std::move(*r));
}

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_UPCAST_H_
