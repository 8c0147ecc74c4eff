// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "pmtree/registry.h"

namespace pmtree {
namespace {
TEST(WoTreeTest, Registered) { ASSERT_NE(FindTree("wotree"), nullptr); }
}  // namespace
}  // namespace pmtree
