// SPDX-License-Identifier: Apache-2.0
#include "trees/common/fair_traversal.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pmtree {
namespace {

// The error names the node and the message, as the designs' NodeError does.
Status Err(uint64_t off, const std::string& what) {
  return Status::Corruption("node " + std::to_string(off) + ": " + what);
}

TEST(CheckChildOrderTest, ParentsNamingTheChainBelowInOrderPass) {
  EXPECT_TRUE(CheckChildOrder({64, 128, 192}, {64, 128, 192}, 1, "unnamed", Err).ok());
  EXPECT_TRUE(CheckChildOrder({}, {}, 1, "unnamed", Err).ok());
}

TEST(CheckChildOrderTest, ANodeNoParentNamesGetsTheDesignsMessage) {
  Status s = CheckChildOrder({64, 128, 192}, {64, 128}, 1, "split not linked", Err);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "node 192: split not linked");
}

TEST(CheckChildOrderTest, ASwappedOrExtraChildIsAChildOrderError) {
  Status s = CheckChildOrder({64, 128, 192}, {64, 192, 128}, 2, "unnamed", Err);
  EXPECT_EQ(s.message(), "node 192: child order of level 2 differs from the sibling chain below");
  s = CheckChildOrder({64}, {64, 256}, 1, "unnamed", Err);
  EXPECT_EQ(s.message(), "node 256: child order of level 1 differs from the sibling chain below");
}

}  // namespace
}  // namespace pmtree
