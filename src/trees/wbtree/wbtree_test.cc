// SPDX-License-Identifier: Apache-2.0
//
// Design tests for wbtree: the shared leaf-list suite (leaf removal, delete-log
// recovery, recovery round trips, concurrency, byte-string keys, bulk load,
// options, out of space; trees/common/leaf_list_tree_test.h) instantiated for
// wbtree, and wbtree's own tests: splits, split-log recovery, flush budgets.  The
// shared conformance suite (tests/) covers the model equivalence of every
// operation.

#include "trees/wbtree/wbtree.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/counters.h"
#include "trees/common/leaf_list_tree_test.h"
#include "trees/wbtree/layout.h"

namespace pmtree {
namespace leaf_list_test {
namespace {

using wbtree::WbLeaf;
using wbtree::WbMeta;

const wbtree::WbEntry* EntryOf(const WbLeaf* l, int i) {
  return reinterpret_cast<const wbtree::WbEntry*>(reinterpret_cast<const char*>(l) + 32 + 16 * i);
}

std::vector<uint64_t> WbLeafKeys(const PoolImpl* p, uint64_t leaf_off) {
  const WbLeaf* leaf = p->At<WbLeaf>(leaf_off);
  std::vector<uint64_t> keys;
  for (uint64_t bm = leaf->bitmap & ~1ull & ~wbtree::kWbMagicMask; bm; bm &= bm - 1) keys.push_back(EntryOf(leaf, __builtin_ctzll(bm) - 1)->key);
  return keys;
}

// wB+-Tree persists the complete new leaf before its split redo log.
void WbCraftSplitCrash(PoolImpl* pool, uint64_t new_leaf) {
  WbMeta* m = Meta(pool);
  const WbLeaf* leaf = pool->At<WbLeaf>(m->head);
  auto* n = pool->At<WbLeaf>(new_leaf);
  // The new leaf as SplitLeaf writes it: keys 8..14 packed, identity slot array.
  for (int j = 0; j < 7; j++)
    pool->Write(const_cast<wbtree::WbEntry*>(EntryOf(n, j)), EntryOf(leaf, leaf->slot[8 + j]), 16);
  uint8_t hdr[32] = {};
  uint64_t bm = (((1ull << 7) - 1) << 1) | 1, next = leaf->next;
  memcpy(hdr, &bm, 8);
  memcpy(hdr + 8, &next, 8);
  hdr[16] = 7;
  for (int j = 0; j < 7; j++) hdr[17 + j] = static_cast<uint8_t>(j);
  pool->Write(n, hdr, 32);
  pool->Persist(n, 256);
  pool->Store64(&m->split_log[5].leaf, m->head);
  pool->Store64(&m->split_log[5].other, new_leaf);
  pool->Persist(&m->split_log[5], 16);
}

const LeafListDesign kWbDesign{"wbtree",
                               &wbtree::Create<uint64_t>,
                               &wbtree::Recover<uint64_t>,
                               &wbtree::Create<std::string_view>,
                               &wbtree::Recover<std::string_view>,
                               /*capacity_256=*/14,
                               /*bulk_leaves_at_70=*/889,
                               &WbLeafKeys,
                               // 10 before the leaf magic: FinishSplit flushes the new leaf's magic
                               // (its bitmap word again) under the old leaf's fence.
                               /*split_flushes=*/11,
                               /*split_fences=*/7,
                               &WbCraftSplitCrash,
                               &wbtree::WbMagicWord,
                               wbtree::kWbMagicMask,
                               wbtree::kWbMagicV1};

INSTANTIATE_TEST_SUITE_P(WbTree, LeafListTreeTest, testing::Values(kWbDesign), LeafListDesignName);

TEST(WbTreeTest, SplitMovesUpperHalfToNewLeaf) {
  PoolFile f(kWbDesign);
  Handle h = CreateOn(kWbDesign, f.path());
  for (uint64_t k = 1; k <= 14; k++) ASSERT_TRUE(*h.tree->Insert(k * 10, k));
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1u);
  ASSERT_TRUE(*h.tree->Insert(65, 99));  // the 15th key splits the full leaf
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 2u);
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  // Lower half (10..70 plus 65) stays, upper half (80..140) moved right,
  // packed from entry 0 with a valid slot array.
  WbMeta* m = Meta(h.pool.get());
  const WbLeaf* left = h.pool->At<WbLeaf>(m->head);
  const WbLeaf* right = h.pool->At<WbLeaf>(left->next);
  EXPECT_EQ(__builtin_popcountll(left->bitmap & ~1ull & ~wbtree::kWbMagicMask), 8);
  EXPECT_EQ(right->bitmap & ~wbtree::kWbMagicMask, (((1ull << 7) - 1) << 1) | 1);
  EXPECT_EQ(right->bitmap & wbtree::kWbMagicMask, left->bitmap & wbtree::kWbMagicMask);  // the leaf magic
  EXPECT_EQ(right->slot[0], 7);
  for (int j = 1; j <= 7; j++) EXPECT_EQ(EntryOf(right, right->slot[j])->key, 70u + 10 * j);
}

// Flush budgets of the design (docs/trees/wbtree.md, "Flush budgets"): the
// entry, the slot-valid bit, the slot array, the bitmap -- four flushes; the
// entry shares the invalidation's fence.
TEST(WbTreeTest, InsertWithoutSplitCostsFourFlushesThreeFences) {
  PoolFile f(kWbDesign);
  Handle h = CreateOn(kWbDesign, f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  PersistCounters d = CostOf([&] { ASSERT_TRUE(*h.tree->Insert(2, 2)); });  // entry 1 lies in the header line
  EXPECT_EQ(d.flushes, 4u);
  EXPECT_EQ(d.fences, 3u);
  EXPECT_EQ(d.lines, 1u);
  d = CostOf([&] { ASSERT_TRUE(*h.tree->Insert(3, 3)); });  // entry 2 starts line 1
  EXPECT_EQ(d.flushes, 4u);
  EXPECT_EQ(d.fences, 3u);
  EXPECT_EQ(d.lines, 2u);
}

// After a delete the slot array is already invalid: the insert skips the
// invalidating write: three flushes, two fences.
TEST(WbTreeTest, InsertAfterDeleteCostsThreeFlushesTwoFences) {
  PoolFile f(kWbDesign);
  Handle h = CreateOn(kWbDesign, f.path());
  for (uint64_t k = 1; k <= 4; k++) ASSERT_TRUE(*h.tree->Insert(k, k));
  ASSERT_TRUE(*h.tree->Remove(2));
  PersistCounters d = CostOf([&] { ASSERT_TRUE(*h.tree->Insert(7, 7)); });
  EXPECT_EQ(d.flushes, 3u);
  EXPECT_EQ(d.fences, 2u);
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
}

}  // namespace
}  // namespace leaf_list_test
}  // namespace pmtree
