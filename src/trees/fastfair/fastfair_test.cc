// SPDX-License-Identifier: Apache-2.0
//
// Design tests for FAST+FAIR (docs/trees/fastfair.md).  The shared
// conformance suite (tests/conformance_test.cc) covers the tree interface
// against a std::map model; these tests cover what is specific to the
// design: splits at each level, FAST shifts, recovery of every intermediate
// split state, flush budgets, the flawed variant, concurrency, edge keys.
// Seeded randomness prints its seed; PMTREE_SEED replays it.

#include "trees/fastfair/fastfair.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
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

namespace pmtree::fastfair {
namespace {

constexpr uint64_t kPoolSize = 64ull << 20;

using testutil::Seed;

double Extra(const TreeStats& st, const std::string& name) {
  for (const auto& [k, v] : st.extra)
    if (k == name) return v;
  return -1;
}

// A tree in a pool file under /dev/shm, so that it can be "crashed" (objects
// destroyed without Close) and reopened through the real open/recover path.
template <KeyPolicy KP = U64Keys>
class Harness {
 public:
  using Tree = FastFairTree<KP>;
  explicit Harness(uint32_t node_size = 256, Flaws flaws = {}, uint64_t pool_size = kPoolSize)
      : path_(testutil::TempPoolPath()), flaws_(flaws) {
    auto pool = PoolImpl::Create(path_, pool_size, layout(), static_cast<uint64_t>(KP::kKind));
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(pool).value();
    TreeOptions o;
    o.node_size = node_size;
    o.key_kind = KP::kKind;
    auto t = Tree::Create(pool_.get(), o, flaws_);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    tree_ = std::move(t).value();
  }
  ~Harness() {
    tree_.reset();
    pool_.reset();
    unlink(path_.c_str());
  }
  std::string layout() const { return flaws_.any() ? "fastfair-orig" : "fastfair"; }
  Tree& tree() { return *tree_; }
  PoolImpl& pool() { return *pool_; }

  // Simulated crash: no Close, so the pool is not marked clean.
  // held: as a key-value store opens its tree, with the allocator's rebuild
  // held until the tree's recovery returns, then released and the deferred
  // work run (allocator.h, "Owners").
  Status CrashAndRecover(bool held = false) {
    tree_.reset();
    pool_.reset();
    return Reopen(held);
  }
  Status CloseAndReopen() {
    PMTREE_RETURN_IF_ERROR(tree_->Close());
    tree_.reset();
    pool_.reset();
    return Reopen();
  }

 private:
  Status Reopen(bool held = false) {
    PMTREE_ASSIGN_OR_RETURN(pool_, PoolImpl::Open(path_, layout()));
    if (held) pool_->allocator().HoldRebuild();
    PMTREE_ASSIGN_OR_RETURN(tree_, Tree::Recover(pool_.get(), TreeOptions{}, flaws_.any()));
    if (held) {
      pool_->allocator().ReleaseRebuild();
      PMTREE_RETURN_IF_ERROR(pool_->allocator().RunDeferredRebuildChecks());
    }
    return Status::Ok();
  }

  std::string path_;
  Flaws flaws_;
  std::unique_ptr<PoolImpl> pool_;
  std::unique_ptr<Tree> tree_;
};

template <class T>
void ExpectContents(T& tree, const std::map<uint64_t, uint64_t>& model) {
  Status v = tree.Verify();
  ASSERT_TRUE(v.ok()) << v.ToString();
  for (const auto& [k, val] : model) {
    uint64_t got = ~val;
    ASSERT_TRUE(tree.Lookup(k, &got)) << "key " << k << " missing";
    ASSERT_EQ(got, val) << "key " << k;
  }
  std::vector<std::pair<uint64_t, uint64_t>> out(model.size() + 1);
  size_t n = tree.Scan(uint64_t{0}, std::span(out));
  ASSERT_EQ(n, model.size());
  size_t i = 0;
  for (const auto& kv : model) {
    ASSERT_EQ(out[i].first, kv.first);
    ASSERT_EQ(out[i].second, kv.second);
    i++;
  }
}

// ---- options -------------------------------------------------------------------

TEST(FastFairTest, NodeSizeAcceptsMultiplesOf64From256To4096AndRejectsOthers) {
  for (uint32_t ok : {0u, 256u, 320u, 512u, 1024u, 4096u}) EXPECT_TRUE(CheckNodeSize(ok).ok()) << ok;
  for (uint32_t bad : {1u, 128u, 192u, 300u, 4160u, 8192u}) {
    Status s = CheckNodeSize(bad);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("multiples of 64 from 256 to 4096"), std::string_view::npos);
  }
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "fastfair", 0);
  ASSERT_TRUE(pool.ok());
  TreeOptions o;
  o.extra["strategy"] = "x";
  EXPECT_EQ((Create<uint64_t, false>(pool->get(), o).status().code()), Status::Code::kInvalidArgument);
  EXPECT_EQ((Create<uint64_t, true>(pool->get(), o).status().code()), Status::Code::kInvalidArgument);
  o.extra = {{"flaws", "remove-flush"}};
  EXPECT_EQ((Create<uint64_t, false>(pool->get(), o).status().code()), Status::Code::kInvalidArgument);
  o.extra = {{"flaws", "no-such-flaw"}};
  EXPECT_EQ((Create<uint64_t, true>(pool->get(), o).status().code()), Status::Code::kInvalidArgument);
}

TEST(FastFairTest, OrigFlawsCanBeChosenOneAtATimeAndAreRecordedInThePool) {
  Flaws f;
  ASSERT_TRUE(Flaws::Parse("root-split,header-flush", &f).ok());
  EXPECT_FALSE(f.remove_flush);
  EXPECT_TRUE(f.root_split);
  EXPECT_TRUE(f.header_flush);
  ASSERT_TRUE(Flaws::Parse("all", &f).ok());
  EXPECT_EQ(f.Bits(), 7u);
  Harness<> h(256, Flaws{true, false, false});
  ASSERT_TRUE(*h.tree().Insert(1, 1));
  ASSERT_TRUE(h.CloseAndReopen().ok());  // recovered as fastfair-orig with the same flaw
  EXPECT_TRUE(h.tree().Lookup(1, nullptr));
  EXPECT_EQ(h.tree().name(), "fastfair-orig");
}

TEST(FastFairTest, DefaultNodeIs512BytesWith28Records) {
  Harness<> h(0);
  EXPECT_EQ(h.tree().node_size(), 512u);
  EXPECT_EQ(h.tree().capacity(), 28u);
}

// ---- splits --------------------------------------------------------------------

TEST(FastFairTest, LeafSplitMovesUpperHalfToNewSiblingAndGrowsARoot) {
  Harness<> h(256);  // 12 records per node
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 1; k <= 12; k++) {
    ASSERT_TRUE(*h.tree().Insert(k * 10, k));
    model[k * 10] = k;
  }
  EXPECT_EQ(h.tree().Stats().height, 1u);
  ASSERT_TRUE(*h.tree().Insert(125, 99));  // 13th key: the root leaf splits
  model[125] = 99;
  TreeStats st = h.tree().Stats();
  EXPECT_EQ(st.height, 2u);
  EXPECT_EQ(st.leaf_nodes, 2u);
  EXPECT_EQ(st.inner_nodes, 1u);
  EXPECT_EQ(Extra(st, "splits"), 1);
  EXPECT_EQ(Extra(st, "root_splits"), 1);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

TEST(FastFairTest, InnerAndRootSplitsKeepEveryKeyReachable) {
  Harness<> h(256);
  std::map<uint64_t, uint64_t> model;
  uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 5000; i++) {
    uint64_t k = rng();
    auto r = h.tree().Insert(k, i);
    ASSERT_TRUE(r.ok());
    if (*r) model[k] = i;
  }
  TreeStats st = h.tree().Stats();
  EXPECT_GE(st.height, 4u);  // 5000 keys, <= 12 per leaf, <= 13 children per inner node
  EXPECT_GE(Extra(st, "root_splits"), 3);
  EXPECT_EQ(st.entries, model.size());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

TEST(FastFairTest, DescendingInsertsSplitAtTheLeftEdge) {
  Harness<> h(256);
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 2000; k > 0; k--) {
    ASSERT_TRUE(*h.tree().Insert(k, k + 1));
    model[k] = k + 1;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

// ---- deletes -------------------------------------------------------------------

TEST(FastFairTest, DeletesAtEveryPositionKeepOrderAndCounts) {
  Harness<> h(512);
  for (uint32_t pos = 0; pos < 20; pos++) {
    std::map<uint64_t, uint64_t> model;
    for (uint64_t k = 0; k < 20; k++) {
      ASSERT_TRUE(h.tree().Upsert(k, k * 7).ok());
      model[k] = k * 7;
    }
    ASSERT_TRUE(*h.tree().Remove(pos));
    model.erase(pos);
    EXPECT_FALSE(*h.tree().Remove(pos));
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
    ASSERT_TRUE(*h.tree().Insert(pos, pos * 7));
  }
}

TEST(FastFairTest, RemovingEverythingLeavesEmptyLeavesThatRefill) {
  Harness<> h(256);
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 0; k < 600; k++) ASSERT_TRUE(*h.tree().Insert(k, k));
  for (uint64_t k = 0; k < 600; k++) ASSERT_TRUE(*h.tree().Remove(k));
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
  for (uint64_t k = 0; k < 600; k += 3) {
    ASSERT_TRUE(*h.tree().Insert(k, k));
    model[k] = k;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

// ---- recovery round trips --------------------------------------------------------

TEST(FastFairTest, CloseAndReopenKeepsEverything) {
  Harness<> h(256);
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 0; k < 3000; k++) {
    ASSERT_TRUE(*h.tree().Insert(k * 3, k));
    model[k * 3] = k;
  }
  ASSERT_TRUE(h.CloseAndReopen().ok());
  EXPECT_FALSE(h.tree().recovery_report().crashed);
  EXPECT_EQ(h.tree().recovery_report().nodes, 0u) << "instant restart reads no node";
  ASSERT_TRUE(h.tree().Verify().ok()) << h.tree().Verify().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

// Each kind of operation, then a crash (no Close), then recovery.
TEST(FastFairTest, CrashAfterEachKindOfOperationRecoversIt) {
  Harness<> h(256);
  std::map<uint64_t, uint64_t> model;
  auto crash = [&](const char* what) {
    SCOPED_TRACE(what);
    Status s = h.CrashAndRecover();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(h.tree().recovery_report().crashed);
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
  };
  ASSERT_TRUE(*h.tree().Insert(5, 50));  // insert into a node with room
  model[5] = 50;
  crash("insert");
  for (uint64_t k = 10; k < 22; k++) {  // leaf + root split
    ASSERT_TRUE(*h.tree().Insert(k, k));
    model[k] = k;
  }
  crash("leaf and root split");
  for (uint64_t k = 100; k < 400; k++) {  // inner splits
    ASSERT_TRUE(*h.tree().Insert(k, k));
    model[k] = k;
  }
  crash("inner split");
  ASSERT_TRUE(*h.tree().Update(5, 55));
  model[5] = 55;
  crash("update");
  ASSERT_TRUE(*h.tree().Remove(150));
  model.erase(150);
  crash("remove");
  ASSERT_FALSE(*h.tree().Upsert(151, 0));
  model[151] = 0;
  crash("upsert");
}

TEST(FastFairTest, CrashAfterBulkLoadRecoversIt) {
  Harness<> h(512);
  std::vector<std::pair<uint64_t, uint64_t>> in;
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 0; k < 5000; k++) {
    in.push_back({k * 2, k});
    model[k * 2] = k;
  }
  ASSERT_TRUE(h.tree().BulkLoad(in, 0.7).ok());
  ASSERT_TRUE(h.CrashAndRecover().ok());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

// A split stopped at each FAIR step, then a crash: recovery must finish it.
struct StopCase {
  StopPoint point;
  bool root;          // the splitting node is the root
  bool held = false;  // recovered under a held rebuild, as a key-value store does
};

class FastFairStopTest : public ::testing::TestWithParam<StopCase> {};

TEST_P(FastFairStopTest, InterruptedSplitIsCompletedByRecovery) {
  const StopCase c = GetParam();
  Harness<> h(256);
  std::map<uint64_t, uint64_t> model;
  // Root case: 12 keys fill the root leaf.  Non-root case: a two-level tree
  // whose rightmost leaf is full.
  const uint64_t n = c.root ? 12 : 18;
  for (uint64_t k = 0; k < n; k++) {
    ASSERT_TRUE(*h.tree().Insert(k * 10, k));
    model[k * 10] = k;
  }
  if (c.point == StopPoint::kRootSplitBeforeSwap) {
    ASSERT_TRUE(c.root);
  }
  bool stopped = false;
  h.tree().SetStopHookForTest([&](StopPoint p) { return !stopped && p == c.point && (stopped = true); });
  const uint64_t key = c.root ? 5 : 175;  // goes left (root) / right (non-root)
  auto r = h.tree().Insert(key, 777);
  ASSERT_TRUE(stopped);
  ASSERT_FALSE(r.ok());
  const Status recovered = h.CrashAndRecover(c.held);
  ASSERT_TRUE(recovered.ok()) << recovered.ToString();
  const RecoveryReport& rep = h.tree().recovery_report();
  // The in-flight insert may or may not have happened.
  uint64_t v;
  if (h.tree().Lookup(key, &v)) {
    EXPECT_EQ(v, 777u);
    model[key] = 777;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
  switch (c.point) {
    case StopPoint::kSplitSiblingPersisted:
      EXPECT_EQ(rep.truncations + rep.orphans_linked + rep.root_splits_completed, 0u);
      break;
    case StopPoint::kSplitLinked:
      EXPECT_EQ(rep.truncations, 1u);
      EXPECT_EQ(c.root ? rep.root_splits_completed : rep.orphans_linked, 1u);
      break;
    case StopPoint::kSplitTruncated:
      EXPECT_EQ(rep.truncations, 0u);
      EXPECT_EQ(c.root ? rep.root_splits_completed : rep.orphans_linked, 1u);
      break;
    case StopPoint::kRootSplitBeforeSwap:
      EXPECT_EQ(rep.root_splits_completed, 1u);
      break;
  }
  // Continue: more inserts around the repaired split, then verify again.
  for (uint64_t k = 0; k < 300; k++) {
    ASSERT_TRUE(h.tree().Upsert(k * 10 + 1, k).ok());
    model[k * 10 + 1] = k;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

INSTANTIATE_TEST_SUITE_P(EveryFairStep, FastFairStopTest,
                         ::testing::Values(StopCase{StopPoint::kSplitSiblingPersisted, false},
                                           StopCase{StopPoint::kSplitLinked, false},
                                           StopCase{StopPoint::kSplitTruncated, false},
                                           StopCase{StopPoint::kSplitSiblingPersisted, true},
                                           StopCase{StopPoint::kSplitLinked, true},
                                           StopCase{StopPoint::kSplitTruncated, true},
                                           StopCase{StopPoint::kRootSplitBeforeSwap, true}));
// The repairs that allocate (a new root, a parent split by a linked child)
// under a held rebuild: Busy before they were deferred (2026-11-29).
INSTANTIATE_TEST_SUITE_P(UnderAHeldRebuild, FastFairStopTest,
                         ::testing::Values(StopCase{StopPoint::kSplitLinked, false, true},
                                           StopCase{StopPoint::kSplitTruncated, true, true},
                                           StopCase{StopPoint::kRootSplitBeforeSwap, true, true}));

TEST(FastFairTest, OrigVariantLeavesAnInterruptedRootSplitUnrepaired) {
  Harness<> h(256, Flaws::All());
  for (uint64_t k = 0; k < 12; k++) ASSERT_TRUE(*h.tree().Insert(k, k));
  h.tree().SetStopHookForTest([](StopPoint p) { return p == StopPoint::kRootSplitBeforeSwap; });
  ASSERT_FALSE(h.tree().Insert(100, 1).ok());
  ASSERT_TRUE(h.CrashAndRecover().ok());
  EXPECT_EQ(h.tree().recovery_report().root_splits_completed, 0u);
  Status v = h.tree().Verify();
  EXPECT_EQ(v.code(), Status::Code::kCorruption);
  EXPECT_NE(v.message().find("root has a sibling"), std::string_view::npos) << v.ToString();
  // Lookups still work through the sibling pointer.
  for (uint64_t k = 0; k < 12; k++) EXPECT_TRUE(h.tree().Lookup(k, nullptr)) << k;
  EXPECT_TRUE(h.tree().Lookup(100, nullptr));
}

// ---- flush budgets (counting backend; deterministic) --------------------------------

struct Cost {
  uint64_t flushes, fences, lines;
};

template <class F>
Cost Measure(F&& op) {
  counters::BeginOperation();
  PersistCounters before = counters::Snapshot();
  op();
  PersistCounters d = counters::Snapshot() - before;
  return {d.flushes, d.fences, d.lines};
}

// Node 512: records 0-3 share line 1, 4-7 line 2, 8-11 line 3; line 0 is the
// header (count).
TEST(FastFairTest, AppendToALeafFlushesTheRecordLineAndTheHeader) {
  Harness<> h(512);
  Cost c = Measure([&] { ASSERT_TRUE(*h.tree().Insert(10, 1)); });
  EXPECT_EQ(c.flushes, 2u);
  EXPECT_EQ(c.fences, 2u);
  EXPECT_EQ(c.lines, 2u);
}

TEST(FastFairTest, InsertWithRoomFlushesOnlyTheLinesTheShiftTouchesPlusTheHeader) {
  Harness<> h(512);
  for (uint64_t k = 1; k <= 3; k++) ASSERT_TRUE(*h.tree().Insert(k * 10, k));
  // Shift of records 0-2 into 1-3: one line (flushed for the copy into slot 3
  // and again at the end) plus the header.
  Cost c = Measure([&] { ASSERT_TRUE(*h.tree().Insert(5, 0)); });
  EXPECT_EQ(c.flushes, 3u);
  EXPECT_EQ(c.fences, 3u);
  EXPECT_EQ(c.lines, 2u);
  for (uint64_t k = 4; k <= 7; k++) ASSERT_TRUE(*h.tree().Insert(k * 10, k));
  // 8 records (lines 1-2), insert at the front: slot 8 in line 3, then lines
  // 2 and 1 as the shift leaves them, plus the header: 4 lines, each once.
  Cost c2 = Measure([&] { ASSERT_TRUE(*h.tree().Insert(1, 0)); });
  EXPECT_EQ(c2.flushes, 4u);
  EXPECT_EQ(c2.fences, 4u);
  EXPECT_EQ(c2.lines, 4u);
  // Insert just before the last record: slot 9 and record 8 share line 3,
  // which is flushed twice; the lines below are untouched.
  Cost c3 = Measure([&] { ASSERT_TRUE(*h.tree().Insert(65, 0)); });
  EXPECT_EQ(c3.flushes, 3u);
  EXPECT_EQ(c3.fences, 3u);
  EXPECT_EQ(c3.lines, 2u);
}

TEST(FastFairTest, RemoveFlushesEachShiftedLineOnceThenTheHeader) {
  Harness<> h(512);
  for (uint64_t k = 0; k < 8; k++) ASSERT_TRUE(*h.tree().Insert(k, k));
  // Remove record 0 of 8: records 1-7 move into 0-6 (lines 1 and 2), then the count.
  Cost c = Measure([&] { ASSERT_TRUE(*h.tree().Remove(0)); });
  EXPECT_EQ(c.flushes, 3u);
  EXPECT_EQ(c.fences, 3u);
  EXPECT_EQ(c.lines, 3u);
  // Removing the last record moves nothing: only the count.
  Cost c2 = Measure([&] { ASSERT_TRUE(*h.tree().Remove(7)); });
  EXPECT_EQ(c2.flushes, 1u);
  EXPECT_EQ(c2.fences, 1u);
  EXPECT_EQ(c2.lines, 1u);
}

TEST(FastFairTest, UpdateFlushesOneLineOnce) {
  Harness<> h(512);
  ASSERT_TRUE(*h.tree().Insert(1, 1));
  Cost c = Measure([&] { ASSERT_TRUE(*h.tree().Update(1, 2)); });
  EXPECT_EQ(c.flushes, 1u);
  EXPECT_EQ(c.fences, 1u);
}

// A leaf split (node 256, 12 records; the key goes to the new sibling):
// the new sibling's header and records, the link and truncation, the
// parent's separator; the first split also installs a root.  The leaf count
// (issue 17) adds one flush of the meta line to each leaf split and no
// fence: the parent insert's fence makes it durable.
TEST(FastFairTest, LeafSplitCostsTheFairStepsAndTheLeafCount) {
  Harness<> h(256);
  for (uint64_t k = 1; k <= 12; k++) ASSERT_TRUE(*h.tree().Insert(k * 10, k));
  Cost root = Measure([&] { ASSERT_TRUE(*h.tree().Insert(125, 0)); });  // leaf and root split
  ASSERT_EQ(h.tree().Stats().leaf_nodes, 2u);
  // Ascending keys fill the right leaf; the insert that splits it adds a
  // separator to the root (no root split).
  Cost leaf{};
  for (uint64_t k = 130;; k += 10) {
    Cost c = Measure([&] { ASSERT_TRUE(*h.tree().Insert(k, k)); });
    if (h.tree().Stats().leaf_nodes == 3) {
      leaf = c;
      break;
    }
  }
  EXPECT_EQ(Extra(h.tree().Stats(), "root_splits"), 1);
  std::printf("leaf + root split: %llu flushes, %llu fences, %llu lines; leaf split: %llu, %llu, %llu\n",
              static_cast<unsigned long long>(root.flushes), static_cast<unsigned long long>(root.fences),
              static_cast<unsigned long long>(root.lines), static_cast<unsigned long long>(leaf.flushes),
              static_cast<unsigned long long>(leaf.fences), static_cast<unsigned long long>(leaf.lines));
  // Before the leaf count: 7 flushes, 4 fences, 7 lines and 6, 4, 6.
  EXPECT_EQ(root.flushes, 8u);
  EXPECT_EQ(root.fences, 4u);
  EXPECT_EQ(root.lines, 7u);  // the count shares the meta line with the root switch
  EXPECT_EQ(leaf.flushes, 7u);
  EXPECT_EQ(leaf.fences, 4u);
  EXPECT_EQ(leaf.lines, 7u);
  const Meta* m = h.pool().At<Meta>(h.pool().root(0));
  EXPECT_EQ(m->leaves, 3u);
}

// The leaves of the tree in `pool`, in chain order.
std::vector<uint64_t> LeafChain(PoolImpl& pool) {
  const Meta* m = pool.At<Meta>(pool.root(0));
  uint64_t off = m->root;
  while (pool.At<Node>(off)->hdr.level > 0) off = pool.At<Node>(off)->hdr.leftmost;
  std::vector<uint64_t> chain;
  for (; off != 0; off = pool.At<Node>(off)->hdr.sibling) chain.push_back(off);
  return chain;
}

// Issue 17: after a crash, a leaf chain cut by damage (one zeroed sibling
// pointer) loses every leaf behind the cut.  The meta block's leaf count
// (invariant 11) makes recovery refuse the pool, and refuse it again,
// instead of rebuilding the allocator without those leaves.
TEST(FastFairTest, CrashRecoveryRefusesACutLeafChain) {
  Harness<> h(256);
  for (uint64_t k = 0; k < 5000; k++) ASSERT_TRUE(*h.tree().Insert(k * 7919 % 5003, k));
  std::vector<uint64_t> chain = LeafChain(h.pool());
  ASSERT_GT(chain.size(), 100u);
  EXPECT_EQ(h.pool().At<Meta>(h.pool().root(0))->leaves, chain.size());
  uint64_t* cut = &h.pool().At<Node>(chain[chain.size() - 3])->hdr.sibling;  // two leaves are lost
  h.pool().Store64(cut, 0);
  h.pool().Persist(cut, 8);
  for (int again = 0; again < 2; again++) {
    Status s = h.CrashAndRecover();
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
    EXPECT_NE(s.ToString().find("leaves unreachable"), std::string::npos) << s.ToString();
  }
}

// A pool of format version 1 (before the leaf count, whose word was
// reserved and 0) is Incompatible.
TEST(FastFairTest, APoolOfTheFormatBeforeTheLeafCountIsIncompatible) {
  Harness<> h(256);
  ASSERT_TRUE(*h.tree().Insert(1, 1));
  Meta* m = h.pool().At<Meta>(h.pool().root(0));
  ASSERT_EQ(m->version, kFormatVersion);
  const uint64_t word = (uint64_t{m->node_size} << 32) | 1;  // version 1, same node size
  h.pool().Store64(&m->version, word);
  h.pool().Persist(&m->version, 8);
  Status s = h.CrashAndRecover();
  EXPECT_EQ(s.code(), Status::Code::kIncompatible) << s.ToString();
  EXPECT_NE(s.ToString().find("predates the leaf count"), std::string::npos) << s.ToString();
}

TEST(FastFairTest, OrigRemoveFlushesALineWhenItsFirstRecordIsWrittenNotWhenItIsLeft) {
  // Flaw (1): removing record 1 of 8 rewrites records 1-3 (line 1) and 4-6
  // (line 2).  The original flushes line 2 as soon as record 4 is written,
  // and never flushes line 1 at all: only line 2 and the header are flushed.
  Harness<> h(512, Flaws::All());
  for (uint64_t k = 0; k < 8; k++) ASSERT_TRUE(*h.tree().Insert(k, k));
  Cost c = Measure([&] { ASSERT_TRUE(*h.tree().Remove(1)); });
  EXPECT_EQ(c.flushes, 2u);
  EXPECT_EQ(c.fences, 2u);
  EXPECT_EQ(c.lines, 2u);
  Harness<> fixed(512);
  for (uint64_t k = 0; k < 8; k++) ASSERT_TRUE(*fixed.tree().Insert(k, k));
  Cost f = Measure([&] { ASSERT_TRUE(*fixed.tree().Remove(1)); });
  EXPECT_EQ(f.flushes, 3u);
}

TEST(FastFairTest, OrigCreationDoesNotFlushTheTreeHeader) {
  // Flaw (3): only the pool's root slot is persisted; the meta block and the
  // first leaf are not.  The fixed tree persists both first.
  for (bool orig : {false, true}) {
    auto pool = PoolImpl::CreateAnonymous(kPoolSize, orig ? "fastfair-orig" : "fastfair", 0);
    ASSERT_TRUE(pool.ok());
    Cost c = Measure([&] {
      auto t = FastFairTree<U64Keys>::Create(pool->get(), TreeOptions{}, orig ? Flaws::All() : Flaws{});
      ASSERT_TRUE(t.ok());
    });
    EXPECT_EQ(c.flushes, orig ? 1u : 3u) << (orig ? "orig" : "fixed");
    EXPECT_EQ(c.fences, orig ? 1u : 2u) << (orig ? "orig" : "fixed");
    EXPECT_EQ(c.lines, orig ? 1u : 3u) << (orig ? "orig" : "fixed");
  }
}

// ---- edge keys and values ----------------------------------------------------------

TEST(FastFairTest, KeysZeroAndMaxAndValueZeroWorkAcrossSplits) {
  Harness<> h(256);
  std::map<uint64_t, uint64_t> model;
  const uint64_t kMax = UINT64_MAX;
  for (uint64_t k : {uint64_t{0}, kMax, uint64_t{1}, kMax - 1}) {
    ASSERT_TRUE(*h.tree().Insert(k, 0));
    model[k] = 0;
  }
  for (uint64_t i = 0; i < 200; i++) {
    uint64_t k = (i % 2) ? kMax - 2 - i : 2 + i;
    ASSERT_TRUE(*h.tree().Insert(k, i % 3 == 0 ? 0 : kMax));
    model[k] = i % 3 == 0 ? 0 : kMax;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
  std::vector<std::pair<uint64_t, uint64_t>> out(4);
  const uint64_t hi = kMax;
  ASSERT_EQ(h.tree().ScanRange(kMax - 1, hi, std::span(out)), 2u);
  EXPECT_EQ(out[0].first, kMax - 1);
  EXPECT_EQ(out[1].first, kMax);
  ASSERT_TRUE(*h.tree().Remove(0));
  ASSERT_TRUE(*h.tree().Remove(kMax));
  model.erase(0);
  model.erase(kMax);
  ASSERT_TRUE(h.CrashAndRecover().ok());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
}

// ---- byte-string keys ---------------------------------------------------------------

TEST(FastFairTest, ByteStringKeysSplitRemoveAndRecoverWithoutLeakingBlobs) {
  Harness<BytesKeys> h(256);
  uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::map<std::string, uint64_t> model;
  auto make_key = [&](int i) {
    // Common two-byte prefixes force blob comparisons; lengths 0..300.
    std::string k = (i % 4 == 0) ? "" : "ab";
    k += std::to_string(rng() % 2000);
    k.append(rng() % 300, 'x');
    return k;
  };
  for (int i = 0; i < 2000; i++) {
    std::string k = make_key(i);
    auto r = h.tree().Insert(k, i);
    ASSERT_TRUE(r.ok());
    if (*r) model[k] = i;
  }
  int removed = 0;
  for (auto it = model.begin(); it != model.end();) {
    if (rng() % 3 == 0) {
      ASSERT_TRUE(*h.tree().Remove(it->first));
      it = model.erase(it);
      removed++;
    } else {
      ++it;
    }
  }
  EXPECT_GT(removed, 0);
  auto check = [&] {
    Status v = h.tree().Verify();
    ASSERT_TRUE(v.ok()) << v.ToString();
    for (const auto& [k, val] : model) {
      uint64_t got;
      ASSERT_TRUE(h.tree().Lookup(k, &got)) << k;
      ASSERT_EQ(got, val);
    }
    std::vector<std::pair<std::string, uint64_t>> out(model.size() + 1);
    ASSERT_EQ(h.tree().Scan(std::string_view(""), std::span(out)), model.size());
    size_t i = 0;
    for (const auto& kv : model) ASSERT_EQ(out[i++].first, kv.first);
  };
  check();
  ASSERT_TRUE(h.CrashAndRecover().ok());
  check();
  ASSERT_TRUE(h.CloseAndReopen().ok());
  check();
}

TEST(FastFairTest, OverlongByteKeyIsInvalidArgument) {
  Harness<BytesKeys> h(512);
  std::string k(kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(h.tree().Insert(k, 1).status().code(), Status::Code::kInvalidArgument);
}

// ---- bulk load ------------------------------------------------------------------------

TEST(FastFairTest, BulkLoadHonoursTheFillFactor) {
  for (double fill : {0.7, 1.0}) {
    Harness<> h(512);
    std::vector<std::pair<uint64_t, uint64_t>> in;
    std::map<uint64_t, uint64_t> model;
    for (uint64_t k = 0; k < 10000; k++) {
      in.push_back({k * 5, k});
      model[k * 5] = k;
    }
    ASSERT_TRUE(h.tree().BulkLoad(in, fill).ok());
    TreeStats st = h.tree().Stats();
    const uint32_t per_leaf = static_cast<uint32_t>(fill * 28);
    EXPECT_EQ(st.leaf_nodes, (10000 + per_leaf - 1) / per_leaf) << fill;
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
    for (uint64_t k = 0; k < 2000; k++) {
      ASSERT_TRUE(*h.tree().Insert(k * 5 + 1, k));
      model[k * 5 + 1] = k;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), model));
  }
}

// ---- concurrency ------------------------------------------------------------------------

TEST(FastFairTest, ConcurrentInsertsLookupsRemovesThenVerify) {
  Harness<> h(256);
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 3000;
  uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  std::vector<std::map<uint64_t, uint64_t>> models(kThreads);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  // A reader scans continuously: keys must come out strictly ascending.
  std::thread reader([&] {
    std::vector<std::pair<uint64_t, uint64_t>> out(256);
    while (!stop.load()) {
      size_t n = h.tree().Scan(uint64_t{0}, std::span(out));
      for (size_t i = 1; i < n; i++)
        if (out[i - 1].first >= out[i].first) errors++;
      // Keys ≡ 3 mod 4 are inserted by thread 3 with value == key and never removed.
      for (size_t i = 0; i < n; i++)
        if (out[i].first % kThreads == 3 && out[i].second != out[i].first) errors++;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; t++) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      auto& m = models[t];
      for (uint64_t i = 0; i < kPerThread; i++) {
        const uint64_t k = (rng() % 100000) * kThreads + t;
        const uint64_t v = (t == 3) ? k : rng();
        auto r = h.tree().Upsert(k, v);
        if (!r.ok()) errors++;
        m[k] = v;
        if (t != 3 && rng() % 4 == 0 && !m.empty()) {
          const uint64_t victim = m.begin()->first;
          auto rr = h.tree().Remove(victim);
          if (!rr.ok() || !*rr) errors++;
          m.erase(victim);
        }
        uint64_t got = 0;
        const bool found = h.tree().Lookup(k, &got);
        if (found != (m.count(k) == 1) || (found && got != m[k])) errors++;
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(errors.load(), 0);
  std::map<uint64_t, uint64_t> all;
  for (auto& m : models) all.insert(m.begin(), m.end());
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree(), all));
}


// ---- crash exploration (src/crash, docs/crash_model.md) ----------------------------------

// Each flaw of fastfair-orig, switched on alone, is found by the explorer
// with the failure it causes (the ticket's message).  The shared negative
// control in tests/crash_all_trees_test.cc switches the same flaws on one at
// a time too, but checks the operation in flight and the replay command.
TEST(FastFairCrashTest, ExplorerFindsEachOrigFlawOnItsOwn) {
  struct Case {
    const char* flaw;
    const char* failure;  // substring of the ticket's failure
    const char* op;       // prefix of the operation in flight ("" = any)
  };
  const TreeFactory* f = FindTree("fastfair-orig");
  ASSERT_NE(f, nullptr);
  for (const Case& c : {Case{"header-flush", "bad magic", ""}, Case{"root-split", "root has a sibling", "insert"},
                        Case{"remove-flush", "contents after recovery", ""}}) {
    SCOPED_TRACE(c.flaw);
    crash::ExploreOptions o;
    o.depth = 1;
    o.max_tickets = 50;
    o.tree_options.extra["flaws"] = c.flaw;
    auto r = crash::Explore(*f, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GT(r->violations, 0u);
    bool found = false;
    for (const auto& t : r->tickets)
      found = found || (t.failure.find(c.failure) != std::string::npos && t.op.rfind(c.op, 0) == 0);
    EXPECT_TRUE(found) << "no ticket with '" << c.failure << "'";
  }
}

// Random keys exercise what the small workload's right-edge inserts do not:
// splits where the new key goes into the old (left) node, and inner splits
// in the middle of a level.  Small nodes make them frequent.
TEST(FastFairCrashTest, RandomWorkloadsWithSmallNodesHaveNoViolations) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  crash::ExploreOptions o;
  o.workload = crash::Workload::kRandom;
  o.ops = 300;
  o.seed = seed;
  o.tree_options.node_size = 256;
  auto r = crash::Explore(*FindTree("fastfair"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& t : r->tickets) ADD_FAILURE() << t.ToString();
  EXPECT_EQ(r->violations, 0u);
}

}  // namespace
}  // namespace pmtree::fastfair
