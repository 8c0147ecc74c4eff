// SPDX-License-Identifier: Apache-2.0
//
// The volatile baseline's own tests (the conformance suite covers the rest).

#include <gtest/gtest.h>

#include <vector>

#include "pmtree/registry.h"

namespace pmtree {
namespace {

// Every key count up to three levels, at every node size of the documented
// range's small end and the fills the experiments use: BulkLoad never builds
// a node over capacity (V1), whatever the remainder of the last level.
TEST(VolatileTreeTest, BulkLoadNeverOverfillsANodeAtAnyCountFillOrNodeSize) {
  const TreeFactory* f = FindTree("volatile");
  ASSERT_NE(f, nullptr);
  for (uint32_t node_size : {128u, 192u, 256u}) {
    for (double fill : {0.5, 0.7, 1.0}) {
      for (uint64_t n = 1; n <= 400; n++) {
        TreeOptions o;
        o.node_size = node_size;
        auto h = CreateTree(*f, "", 0, o);
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        std::vector<Tree::InputEntry> in;
        for (uint64_t k = 0; k < n; k++) in.emplace_back(k, k);
        ASSERT_TRUE(h->tree->BulkLoad(in, fill).ok());
        Status s = h->tree->Verify();
        ASSERT_TRUE(s.ok()) << "node size " << node_size << ", fill " << fill << ", " << n << " keys: " << s.ToString();
        ASSERT_EQ(h->tree->Stats().entries, n);
      }
    }
  }
}

}  // namespace
}  // namespace pmtree
