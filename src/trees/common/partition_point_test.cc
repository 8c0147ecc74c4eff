// SPDX-License-Identifier: Apache-2.0
#include "trees/common/partition_point.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace pmtree {
namespace {

// Against std::lower_bound / std::upper_bound on every prefix of a sorted
// array with repeats, for targets below, between, on and above its keys.
TEST(PartitionPointTest, MatchesTheStandardLowerAndUpperBound) {
  const std::vector<int> keys = {2, 4, 4, 4, 7, 9, 9, 12};
  for (uint32_t n = 0; n <= keys.size(); n++) {
    for (int t = 0; t <= 13; t++) {
      auto end = keys.begin() + n;
      uint32_t lb = PartitionPoint(0, n, [&](uint32_t i) { return keys[i] < t; });
      uint32_t ub = PartitionPoint(0, n, [&](uint32_t i) { return keys[i] <= t; });
      EXPECT_EQ(lb, std::lower_bound(keys.begin(), end, t) - keys.begin()) << "n=" << n << " t=" << t;
      EXPECT_EQ(ub, std::upper_bound(keys.begin(), end, t) - keys.begin()) << "n=" << n << " t=" << t;
    }
  }
}

TEST(PartitionPointTest, SearchesOnlyItsRangeAndProbesLogarithmically) {
  const std::vector<int> keys = {1, 1, 1, 5, 5, 5, 5, 5};
  int probes = 0;
  auto below3 = [&](uint32_t i) {
    EXPECT_GE(i, 2u);
    EXPECT_LT(i, 6u);
    probes++;
    return keys[i] < 3;
  };
  EXPECT_EQ(PartitionPoint(2, 6, below3), 3u);
  EXPECT_LE(probes, 3);
  EXPECT_EQ(PartitionPoint(4, 4, below3), 4u);  // empty range: no probe
  EXPECT_LE(probes, 3);
}

}  // namespace
}  // namespace pmtree
