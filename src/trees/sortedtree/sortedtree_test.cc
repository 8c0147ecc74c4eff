// SPDX-License-Identifier: Apache-2.0
//
// Design tests for sortedtree, the native sorted B+-tree of the WO-tree paper
// (docs/trees/sortedtree.md).  The conformance suite covers the interface;
// these tests cover the baseline's cost model (a leaf insert persists every
// record it shifts, so its flushes grow with the records above the key,
// unlike WO-tree's), its FAIR-order splits, concurrency, and the crash
// explorer (zero violations at 4 and 16 lines, ADR and eADR).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "crash/explorer.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"
#include "testutil.h"
#include "trees/wotree/blink_frame_test.h"

namespace pmtree::sortedtree {
namespace {

constexpr uint64_t kPoolSize = 256ull << 20;

using blink_frame_test::Measure;
using blink_frame_test::NodeSize;
using testutil::Seed;

const TreeFactory& Sorted() {
  const TreeFactory* f = FindTree("sortedtree");
  EXPECT_NE(f, nullptr);
  return *f;
}

// §2.3: an insert below every key shifts all records of the leaf and persists
// each; an insert above every key shifts nothing.
TEST(SortedTreeTest, LeafInsertPersistsEveryShiftedRecord) {
  PoolOptions po;
  po.use_env = false;
  po.counting = true;
  auto h = CreateTree(Sorted(), "", kPoolSize, NodeSize(1024), po);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Tree& t = *h->tree;
  for (uint64_t k = 1; k <= 40; k++) ASSERT_TRUE(t.Insert(100 + k, k).value());
  PersistCounters append = Measure([&] { ASSERT_TRUE(t.Insert(1000, 0).value()); });
  EXPECT_EQ(append.fences, 2u) << "record, then count";
  PersistCounters front = Measure([&] { ASSERT_TRUE(t.Insert(1, 0).value()); });
  // The copy beyond the count, the count, 40 shifted records, the new record.
  EXPECT_EQ(front.fences, 1u + 1 + 40 + 1);
  PersistCounters del = Measure([&] { ASSERT_TRUE(t.Remove(1).value()); });
  EXPECT_EQ(del.fences, 41u + 1) << "each shifted record, then the count";
  EXPECT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

TEST(SortedTreeTest, ConcurrentInsertsLookupsAndRemovesThenVerify) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  auto h = CreateTree(Sorted(), "", kPoolSize, NodeSize(256));
  ASSERT_TRUE(h.ok());
  Tree& t = *h->tree;
  constexpr int kThreads = 4;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; id++) {
    threads.emplace_back([&, id] {
      std::mt19937_64 rng(seed + id);
      std::map<uint64_t, uint64_t> mine;  // keys congruent to id mod kThreads
      for (uint64_t i = 0; i < 3000; i++) {
        const uint64_t k = (rng() % 10000) * kThreads + id;
        if (rng() % 4 == 0) {
          if (t.Remove(k).value() != (mine.erase(k) == 1)) bad++;
        } else {
          t.Upsert(k, i).value();
          mine[k] = i;
        }
      }
      for (const auto& [k, v] : mine) {
        uint64_t got = 0;
        if (!t.Lookup(k, &got) || got != v) bad++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

// ---- the leaf count (F9, issue 17) ----------------------------------------------------

TEST(SortedTreeTest, CrashRecoveryRefusesACutLeafChainTwiceInARow) {
  blink_frame_test::ExpectCrashRecoveryRefusesACutLeafChain(Sorted());
}

TEST(SortedTreeTest, APoolOfTheFormatBeforeTheLeafCountIsIncompatible) {
  blink_frame_test::ExpectAPoolOfTheFormatBeforeTheLeafCountIsIncompatible(Sorted());
}

// A leaf split at 4 lines, with the root split of the first one: the leaf
// count (F9) adds one flush of the meta line and no fence, the separator
// insert's first fence making it durable.  Before the count: 8 flushes, 5 fences, 7 lines and 7, 5, 6.
// The first split's count shares the meta line with the root switch.
TEST(SortedTreeTest, LeafSplitCostsOneMoreFlushForTheLeafCount) {
  const blink_frame_test::SplitCost c = blink_frame_test::MeasureLeafSplits(Sorted());
  EXPECT_EQ(c.root.flushes, 9u);
  EXPECT_EQ(c.root.fences, 5u);
  EXPECT_EQ(c.root.lines, 7u);
  EXPECT_EQ(c.leaf.flushes, 8u);
  EXPECT_EQ(c.leaf.fences, 5u);
  EXPECT_EQ(c.leaf.lines, 7u);
}

// The default run's share: every two-operation sequence at 4 lines (ADR),
// one-operation sequences at 16 lines (ADR and eADR), a seeded random
// workload at 4 lines.  The full matrix (depth 3, both sizes, both modes,
// mutation score, kill harness) is wotree_long_test (label "long").
TEST(SortedTreeCrashTest, SmallAndRandomWorkloadsHaveNoViolationsAtFourAndSixteenLines) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  blink_frame_test::ExpectNoCrashViolations(Sorted(),
                                            {{256, crash::Mode::kAdr, crash::Workload::kSmall, 2},
                                             {1024, crash::Mode::kAdr, crash::Workload::kSmall, 1},
                                             {1024, crash::Mode::kEadr, crash::Workload::kSmall, 1},
                                             {256, crash::Mode::kAdr, crash::Workload::kRandom, 1}},
                                            seed, 300, [](const auto&, const auto&) {});
}

}  // namespace
}  // namespace pmtree::sortedtree
