// SPDX-License-Identifier: Apache-2.0
//
// Design tests for fptree: the shared leaf-list suite (leaf removal, delete-log
// recovery, recovery round trips, concurrency, byte-string keys, bulk load,
// options, out of space; trees/common/leaf_list_tree_test.h) instantiated for
// fptree, and fptree's own tests: splits, split-log recovery, flush budgets.  The
// shared conformance suite (tests/) covers the model equivalence of every
// operation.

#include "trees/fptree/fptree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/counters.h"
#include "trees/common/leaf_list_tree_test.h"
#include "trees/fptree/layout.h"

namespace pmtree {
namespace leaf_list_test {
namespace {

using fptree::FpLeaf;
using fptree::FpMeta;

std::vector<uint64_t> FpLeafKeys(const PoolImpl* p, uint64_t leaf_off) {
  const FpLeaf* leaf = p->At<FpLeaf>(leaf_off);
  std::vector<uint64_t> keys;
  for (uint64_t bm = leaf->bitmap; bm; bm &= bm - 1) keys.push_back(leaf->entries[__builtin_ctzll(bm)].key);
  return keys;
}

// FPTree persists its split log (PCurrentLeaf, PNewLeaf) before it writes
// the new leaf.
void FpCraftSplitCrash(PoolImpl* pool, uint64_t new_leaf) {
  FpMeta* m = Meta(pool);
  pool->Store64(&m->split_log[3].leaf, m->head);
  pool->Store64(&m->split_log[3].other, new_leaf);
  pool->Persist(&m->split_log[3], 16);
}

const LeafListDesign kFpDesign{"fptree",
                               &fptree::Create<uint64_t>,
                               &fptree::Recover<uint64_t>,
                               &fptree::Create<std::string_view>,
                               &fptree::Recover<std::string_view>,
                               /*capacity_256=*/12,
                               /*bulk_leaves_at_70=*/1000,
                               &FpLeafKeys,
                               /*split_flushes=*/11,
                               // 6 before the leaf magic: the split log is now persisted (its
                               // own fence) before the new leaf's copy, which carries the magic.
                               /*split_fences=*/7,
                               &FpCraftSplitCrash,
                               &fptree::FpMagicOffset,
                               /*magic_mask=*/~0ull,
                               fptree::kFpMagicV1};

INSTANTIATE_TEST_SUITE_P(FpTree, LeafListTreeTest, testing::Values(kFpDesign), LeafListDesignName);

TEST(FpTreeTest, SplitMovesUpperHalfToNewLeaf) {
  PoolFile f(kFpDesign);
  Handle h = CreateOn(kFpDesign, f.path());
  for (uint64_t k = 1; k <= 12; k++) ASSERT_TRUE(*h.tree->Insert(k * 10, k));
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1u);
  ASSERT_TRUE(*h.tree->Insert(65, 99));  // the 13th key splits the full leaf
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 2u);
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  // Lower half (10..60 plus 65) stays, upper half (70..120) moved right.
  FpMeta* m = Meta(h.pool.get());
  const FpLeaf* left = PoolImpl::Of(h.pool.get())->At<FpLeaf>(m->head);
  const FpLeaf* right = PoolImpl::Of(h.pool.get())->At<FpLeaf>(left->next);
  EXPECT_EQ(__builtin_popcountll(left->bitmap), 7);
  EXPECT_EQ(__builtin_popcountll(right->bitmap), 6);
  for (uint64_t bm = right->bitmap; bm; bm &= bm - 1) EXPECT_GE(right->entries[__builtin_ctzll(bm)].key, 70u);
}

// Flush budgets of the design (docs/trees/fptree.md, "Flush budgets").
TEST(FpTreeTest, InsertWithoutSplitCostsThreeFlushesTwoFences) {
  PoolFile f(kFpDesign);
  Handle h = CreateOn(kFpDesign, f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  PersistCounters d = CostOf([&] { ASSERT_TRUE(*h.tree->Insert(2, 2)); });
  EXPECT_EQ(d.flushes, 3u);  // entry line, fingerprint line; bitmap (header line again)
  EXPECT_EQ(d.fences, 2u);
  EXPECT_EQ(d.lines, 2u);
}

}  // namespace
}  // namespace leaf_list_test
}  // namespace pmtree
