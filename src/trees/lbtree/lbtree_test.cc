// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "pmtree/registry.h"

namespace pmtree {
namespace {
TEST(LbTreeTest, Placeholder) { EXPECT_NE(FindTree("lbtree"), nullptr); }
}  // namespace
}  // namespace pmtree
