// SPDX-License-Identifier: Apache-2.0
//
// Design tests for WO-tree (docs/trees/wotree.md).  The conformance suite
// (tests/conformance_test.cc) covers the tree interface against a std::map
// model; these tests cover what is specific to the design: node sizes of 4..32
// lines, the flush budgets of §4.2 (a leaf insert or delete costs O(1) flushes
// whatever the node size), splits at every level, instant restart after a
// clean close versus repair after a crash, concurrency, and the crash
// explorer: zero violations for wotree, the paper's split order caught.
// Seeded randomness prints its seed; PMTREE_SEED replays it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "crash/explorer.h"
#include "pm/pool_impl.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"
#include "testutil.h"
#include "trees/wotree/blink_frame_test.h"
#include "trees/wotree/layout.h"

namespace pmtree::wotree {
namespace {

constexpr uint64_t kPoolSize = 256ull << 20;

using blink_frame_test::Measure;
using blink_frame_test::NodeSize;
using testutil::Seed;

const TreeFactory& Wo(const char* name = "wotree") {
  const TreeFactory* f = FindTree(name);
  EXPECT_NE(f, nullptr);
  return *f;
}

PoolOptions Counting() {
  PoolOptions po;
  po.backend = BackendKind::kHardware;
  po.use_env = false;
  po.counting = true;
  return po;
}

double Extra(const TreeStats& st, const std::string& name) {
  for (const auto& [k, v] : st.extra)
    if (k == name) return v;
  ADD_FAILURE() << "no Stats().extra entry " << name;
  return -1;
}

void ExpectModel(Tree& t, const std::map<uint64_t, uint64_t>& model) {
  Status v = t.Verify();
  ASSERT_TRUE(v.ok()) << v.ToString();
  std::vector<Tree::Entry> out(model.size() + 1);
  ASSERT_EQ(t.Scan(0, out), model.size());
  size_t i = 0;
  for (const auto& [k, val] : model) {
    ASSERT_EQ(out[i].first, k);
    ASSERT_EQ(out[i].second, val);
    i++;
  }
}

// ---- layout and options -------------------------------------------------------------

TEST(WoTreeTest, NodeSizesOfFourToThirtyTwoLinesSetTheCapacities) {
  struct Case {
    uint32_t size;
    int leaf_cap, inner_cap;
  };
  for (Case c : {Case{256, 12, 12}, Case{512, 27, 28}, Case{1024, 57, 60}, Case{2048, 118, 124}}) {
    auto h = CreateTree(Wo(), "", kPoolSize, NodeSize(c.size));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    const TreeStats st = h->tree->Stats();
    EXPECT_EQ(Extra(st, "leaf_capacity"), c.leaf_cap) << c.size;
    EXPECT_EQ(Extra(st, "inner_capacity"), c.inner_cap) << c.size;
  }
  auto def = CreateTree(Wo(), "", kPoolSize, {});
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(Extra(def->tree->Stats(), "leaf_capacity"), 57) << "default: 16 lines";
  for (uint32_t bad : {192u, 1000u, 2112u, 4096u}) {
    auto r = CreateTree(Wo(), "", kPoolSize, NodeSize(bad));
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument) << bad;
  }
}

// ---- flush budgets (§4.2.1, §4.2.3) ---------------------------------------------------

// Algorithm 1: the entry, then the bitmap, then the slot array -- a bounded
// number of lines and three fences whatever the node size (the native B+-tree
// flushes O(n) shifted lines).
TEST(WoTreeTest, LeafInsertWithoutSplitCostsConstantFlushesAtEveryNodeSize) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  for (uint32_t size : {256u, 512u, 1024u, 2048u}) {
    auto h = CreateTree(Wo(), "", kPoolSize, NodeSize(size), Counting());
    ASSERT_TRUE(h.ok());
    Tree& t = *h->tree;
    const int cap = static_cast<int>(Extra(t.Stats(), "leaf_capacity"));
    std::mt19937_64 rng(seed);
    std::map<uint64_t, uint64_t> model;
    uint64_t max_flushes = 0, max_fences = 0;
    for (int i = 0; i < cap; i++) {
      uint64_t k = rng() % 100000;
      while (model.count(k)) k = rng() % 100000;
      PersistCounters c = Measure([&] { ASSERT_TRUE(t.Insert(k, k + 1).value()); });
      model[k] = k + 1;
      EXPECT_GE(c.fences, 2u);
      max_flushes = std::max(max_flushes, c.flushes);
      max_fences = std::max(max_fences, c.fences);
    }
    // Entry line + bitmap line + at most the two further lines of the
    // longest slot array (118 bytes from offset 40); three fences.
    EXPECT_LE(max_flushes, 4u) << size;
    EXPECT_LE(max_fences, 3u) << size;
    EXPECT_EQ(t.Stats().leaf_nodes, 1u) << "no split yet";
    ASSERT_NO_FATAL_FAILURE(ExpectModel(t, model));
  }
}

// §4.2.3: the bitmap, then the slot array; nothing moves.
TEST(WoTreeTest, LeafDeleteCostsConstantFlushesAtEveryNodeSize) {
  for (uint32_t size : {256u, 512u, 1024u, 2048u}) {
    auto h = CreateTree(Wo(), "", kPoolSize, NodeSize(size), Counting());
    ASSERT_TRUE(h.ok());
    Tree& t = *h->tree;
    const int cap = static_cast<int>(Extra(t.Stats(), "leaf_capacity"));
    std::map<uint64_t, uint64_t> model;
    for (int i = 0; i < cap; i++) {
      ASSERT_TRUE(t.Insert(10 * i, i).value());
      model[10 * i] = i;
    }
    for (int i = 0; i < cap; i += 3) {
      PersistCounters c = Measure([&] { ASSERT_TRUE(t.Remove(10 * i).value()); });
      model.erase(10 * i);
      EXPECT_LE(c.flushes, 3u) << size;
      EXPECT_LE(c.fences, 2u) << size;
      EXPECT_GE(c.fences, 1u) << size;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectModel(t, model));
  }
}

// §4.3.1: an inner insert flushes the lines its shift crosses, not one line
// per shifted record.  A 16-line inner node holds 60 records in 15 record
// lines; a separator inserted at the front shifts all of them.
TEST(WoTreeTest, InnerInsertFlushesPerCrossedLineNotPerShiftedRecord) {
  auto h = CreateTree(Wo(), "", kPoolSize, NodeSize(1024), Counting());
  ASSERT_TRUE(h.ok());
  Tree& t = *h->tree;
  // Ascending keys: every leaf split appends a separator to the one inner node.
  uint64_t k = 1000000;
  while (Extra(t.Stats(), "leaf_splits") < 40) ASSERT_TRUE(t.Insert(k++, 1).value());
  ASSERT_EQ(Extra(t.Stats(), "root_splits"), 1);
  // Fill the first leaf with small keys until it splits: its separator goes
  // to the front of the inner node, shifting ~40 records over ~10 lines.
  uint64_t small = 0;
  PersistCounters split{};
  const double before = Extra(t.Stats(), "leaf_splits");
  while (Extra(t.Stats(), "leaf_splits") == before) {
    split = Measure([&] { ASSERT_TRUE(t.Insert(small++, 2).value()); });
  }
  // Leaf split: new leaf (up to 16 lines) + log + old header + log clear +
  // the inner shift: ~10 record lines + count, not 40 records.
  EXPECT_LE(split.flushes, 16u + 1 + 3 + 1 + 14u);
  EXPECT_LE(split.fences, 6u + 12u);
  EXPECT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

// ---- structure ------------------------------------------------------------------------

TEST(WoTreeTest, RandomInsertsAndDeletesGrowThreeLevelsAndKeepEveryKey) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  auto h = CreateTree(Wo(), "", kPoolSize, NodeSize(256));
  ASSERT_TRUE(h.ok());
  Tree& t = *h->tree;
  std::mt19937_64 rng(seed);
  std::map<uint64_t, uint64_t> model;
  for (int i = 0; i < 20000; i++) {
    const uint64_t k = rng() % 50000;
    if (rng() % 4 == 0) {
      EXPECT_EQ(t.Remove(k).value(), model.erase(k) == 1);
    } else {
      EXPECT_EQ(t.Upsert(k, i).value(), model.count(k) == 0);
      model[k] = i;
    }
    if (i % 5000 == 0) {
      ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectModel(t, model));
  const TreeStats st = t.Stats();
  EXPECT_GE(st.height, 4u);
  EXPECT_GT(Extra(st, "inner_splits"), 0);
}

// Bulk load (the frame's, shared with sortedtree): the fill honoured, levels
// built bottom-up that Verify accepts (F2-F6), inserts and deletes after it
// split and move right as usual, refused on a tree that holds an entry, an
// out-of-space load leaves the empty tree and frees everything, and the
// loaded tree survives a crash (destroyed without Close) and recovery.
TEST(WoTreeTest, BulkLoadHonoursTheFillAndBehavesLikeAnInsertedTree) {
  for (const char* name : {"wotree", "sortedtree"}) {
    for (double fill : {0.5, 1.0}) {
      SCOPED_TRACE(std::string(name) + " fill " + std::to_string(fill));
      const std::string path = "/dev/shm/pmtree_wotree_bulk_" + std::to_string(getpid());
      std::map<uint64_t, uint64_t> model;
      {
        auto h = CreateTree(Wo(name), path, 64ull << 20, NodeSize(256));
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        std::vector<Tree::InputEntry> in;
        for (uint64_t i = 0; i < 20000; i++) {
          in.push_back({i * 4, i});
          model[i * 4] = i;
        }
        ASSERT_TRUE(h->tree->BulkLoad(in, fill).ok());
        ASSERT_NO_FATAL_FAILURE(ExpectModel(*h->tree, model));
        const TreeStats st = h->tree->Stats();
        EXPECT_NEAR(st.leaf_fill, fill, 0.1);
        EXPECT_GE(st.height, 3u);
        EXPECT_EQ(h->tree->BulkLoad(in, fill).code(), Status::Code::kInvalidArgument) << "tree not empty";
        for (uint64_t i = 0; i < 20000; i += 3) {
          ASSERT_TRUE(h->tree->Insert(i * 4 + 1, i).value());
          model[i * 4 + 1] = i;
          ASSERT_TRUE(h->tree->Remove(i * 4 + 4).value() == (i * 4 + 4 < 80000));
          model.erase(i * 4 + 4);
        }
        ASSERT_NO_FATAL_FAILURE(ExpectModel(*h->tree, model));
        // Destroyed without Close: a crash.
      }
      {
        auto h = OpenTree(path, &Wo(name), {});
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        ASSERT_NO_FATAL_FAILURE(ExpectModel(*h->tree, model));
      }
      unlink(path.c_str());
    }
    // Byte-string keys.
    auto hb = CreateBytesTree(Wo(name), "", 64ull << 20, NodeSize(512));
    ASSERT_TRUE(hb.ok()) << hb.status().ToString();
    std::vector<std::string> keys;
    for (int i = 0; i < 3000; i++) keys.push_back("bulk-" + std::to_string(100000 + i) + std::string(i % 40, 'q'));
    std::vector<BytesTree::InputEntry> bin;
    for (size_t i = 0; i < keys.size(); i++) bin.push_back({keys[i], i});
    ASSERT_TRUE(hb->tree->BulkLoad(bin, 0.7).ok());
    ASSERT_TRUE(hb->tree->Verify().ok()) << hb->tree->Verify().ToString();
    uint64_t v = 0;
    ASSERT_TRUE(hb->tree->Lookup(keys[2345], &v));
    EXPECT_EQ(v, 2345u);
    // Out of space midway: nothing loaded, nothing leaked.
    auto hs = CreateTree(Wo(name), "", 1ull << 20, NodeSize(256));
    ASSERT_TRUE(hs.ok()) << hs.status().ToString();
    const uint64_t in_use = PoolImpl::Of(*hs->pool).allocator().bytes_in_use();
    std::vector<Tree::InputEntry> big;
    for (uint64_t i = 0; i < 200000; i++) big.push_back({i, i});
    EXPECT_TRUE(hs->tree->BulkLoad(big, 1.0).IsOutOfSpace());
    ASSERT_TRUE(hs->tree->Verify().ok()) << hs->tree->Verify().ToString();
    EXPECT_EQ(hs->tree->Stats().entries, 0u);
    EXPECT_EQ(PoolImpl::Of(*hs->pool).allocator().bytes_in_use(), in_use);
    ASSERT_TRUE(hs->tree->Insert(7, 7).value());
  }
}

// ---- restart and recovery -----------------------------------------------------------

TEST(WoTreeTest, CleanCloseRestartsInstantlyAndACrashRunsTheRepairs) {
  const std::string path = "/dev/shm/pmtree_wotree_test_" + std::to_string(getpid());
  std::map<uint64_t, uint64_t> model;
  {
    auto h = CreateTree(Wo(), path, 64ull << 20, NodeSize(256));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 0; k < 3000; k++) {
      ASSERT_TRUE(h->tree->Insert(k * 7 % 3001, k).value());
      model[k * 7 % 3001] = k;
    }
    ASSERT_TRUE(h->tree->Close().ok());
  }
  {
    auto h = OpenTree(path, &Wo(), {});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(Extra(h->tree->Stats(), "recovered_after_crash"), 0) << "instant restart";
    ASSERT_NO_FATAL_FAILURE(ExpectModel(*h->tree, model));
    ASSERT_TRUE(h->tree->Remove(7).value());
    model.erase(7);
    // Destroyed without Close: a crash.
  }
  {
    auto h = OpenTree(path, &Wo(), {});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(Extra(h->tree->Stats(), "recovered_after_crash"), 1);
    ASSERT_NO_FATAL_FAILURE(ExpectModel(*h->tree, model));
  }
  unlink(path.c_str());
}

// ---- the leaf count (F9, issue 17) ----------------------------------------------------

TEST(WoTreeTest, CrashRecoveryRefusesACutLeafChainTwiceInARow) {
  blink_frame_test::ExpectCrashRecoveryRefusesACutLeafChain(Wo());
}

TEST(WoTreeTest, APoolOfTheFormatBeforeTheLeafCountIsIncompatible) {
  blink_frame_test::ExpectAPoolOfTheFormatBeforeTheLeafCountIsIncompatible(Wo());
}

// A leaf split at 4 lines, with the root split of the first one: the leaf
// count (F9) adds one flush of the meta line and no fence, the separator
// insert's first fence making it durable.  Before the count: 9 flushes, 6 fences, 8 lines and 8, 6, 7.
// The first split's count shares the meta line with the root switch.
TEST(WoTreeTest, LeafSplitCostsOneMoreFlushForTheLeafCount) {
  const blink_frame_test::SplitCost c = blink_frame_test::MeasureLeafSplits(Wo());
  EXPECT_EQ(c.root.flushes, 10u);
  EXPECT_EQ(c.root.fences, 6u);
  EXPECT_EQ(c.root.lines, 8u);
  EXPECT_EQ(c.leaf.flushes, 9u);
  EXPECT_EQ(c.leaf.fences, 6u);
  EXPECT_EQ(c.leaf.lines, 8u);
}

// ---- concurrency (§4.3.5) -----------------------------------------------------------

TEST(WoTreeTest, ConcurrentInsertsLookupsScansAndRemovesThenVerify) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  auto h = CreateTree(Wo(), "", kPoolSize, NodeSize(256));
  ASSERT_TRUE(h.ok());
  Tree& t = *h->tree;
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 4000;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; id++) {
    threads.emplace_back([&, id] {
      std::mt19937_64 rng(seed + id);
      // Thread `id` owns keys congruent to id mod kThreads: it knows their state.
      std::map<uint64_t, uint64_t> mine;
      for (uint64_t i = 0; i < kPerThread; i++) {
        const uint64_t k = (rng() % 20000) * kThreads + id;
        switch (rng() % 5) {
          case 0:
            if (t.Remove(k).value() != (mine.erase(k) == 1)) bad++;
            break;
          case 1: {
            uint64_t v = 0;
            const bool found = t.Lookup(k, &v);
            if (found != (mine.count(k) == 1) || (found && v != mine[k])) bad++;
            break;
          }
          case 2: {
            std::vector<Tree::Entry> out(16);
            const size_t n = t.Scan(k, out);
            for (size_t j = 1; j < n; j++)
              if (out[j - 1].first >= out[j].first) bad++;
            break;
          }
          default:
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

// ---- crash exploration (src/crash, docs/crash_model.md) ------------------------------

// The default run's share of the exploration: every two-operation sequence
// at 4 lines in ADR mode (every flush/fence site covered), one-operation
// sequences at 16 lines in ADR and eADR, seeded random workloads at 4 and 16
// lines.  The full matrix (depth 3, both sizes and modes, mutation score,
// kill harness) is wotree_long_test (label "long").
TEST(WoTreeCrashTest, SmallAndRandomWorkloadsHaveNoViolationsAtFourAndSixteenLines) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  blink_frame_test::ExpectNoCrashViolations(
      Wo(),
      {{256, crash::Mode::kAdr, crash::Workload::kSmall, 2},
       {1024, crash::Mode::kAdr, crash::Workload::kSmall, 1},
       {1024, crash::Mode::kEadr, crash::Workload::kSmall, 1},
       {256, crash::Mode::kAdr, crash::Workload::kRandom, 1},
       {1024, crash::Mode::kEadr, crash::Workload::kRandom, 1}},
      seed, 400, [](const blink_frame_test::CrashCase& c, const crash::ExploreReport& r) {
        if (c.size == 256 && c.workload == crash::Workload::kSmall) {
          EXPECT_EQ(r.sites_covered, r.sites_total) << "every reached flush/fence site covered";
        }
      });
}

// Negative control: Algorithm 3 as printed (old leaf's next/bitmap/slot array
// stored before the new leaf is flushed, no log) is caught by the explorer
// during a leaf split.
TEST(WoTreeCrashTest, PaperSplitOrderIsCaughtDuringALeafSplit) {
  crash::ExploreOptions o;
  o.depth = 1;
  // wotree's bulk load is a run of inserts, so its scenarios would report the
  // same flaw first and crowd the inserts out of the tickets.
  o.bulk_load = false;
  o.tree_options.node_size = 256;
  o.max_tickets = 50;
  auto r = crash::Explore(Wo("wotree-paper"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  crash::PrintReport(*r, stdout);
  EXPECT_GT(r->violations, 0u);
  bool split = false;
  for (const auto& tk : r->tickets) split = split || tk.op.rfind("insert", 0) == 0;
  EXPECT_TRUE(split) << "no violation inside an insert (leaf split)";
}

}  // namespace
}  // namespace pmtree::wotree
