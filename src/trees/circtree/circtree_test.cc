// SPDX-License-Identifier: Apache-2.0
//
// Circ-Tree design tests (docs/trees/circtree.md).  The shared conformance
// suite covers the interface against a std::map model; these cover the
// design: the layout, both searches over wrapped rings, the flush budget of
// bidirectional shifting, every recovery case of §5.5 reached by a crash
// after each store of an operation (a store-budget backend leaves exactly
// the image a crash there leaves), the split stop points, instant restart,
// byte-string keys, concurrency, and bounded crash-explorer runs.
// Seeded randomness prints its seed; PMTREE_SEED replays it.

#include "trees/circtree/circtree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "crash/explorer.h"
#include "pm/pool_impl.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"
#include "testutil.h"
#include "trees/common/upcast.h"

namespace pmtree::circtree {
namespace {

using U64Tree = CircTree<U64Keys>;
constexpr uint64_t kPoolSize = 8ull << 20;

using testutil::Seed;

std::string TmpPath(const std::string& tag) {
  static std::atomic<int> n{0};
  return "/dev/shm/pmtree_circtree_test_" + std::to_string(getpid()) + "_" + tag + "_" + std::to_string(n++);
}

double Extra(const TreeStats& st, const std::string& name) {
  for (const auto& [k, v] : st.extra)
    if (k == name) return v;
  ADD_FAILURE() << "no Stats().extra entry " << name;
  return -1;
}

std::map<uint64_t, uint64_t> Contents(U64Tree& t) {
  std::vector<Tree::Entry> out(100000);
  const size_t n = t.Scan(0, std::span(out));
  std::map<uint64_t, uint64_t> m;
  for (size_t i = 0; i < n; i++) m[out[i].first] = out[i].second;
  for (const auto& [k, v] : m) {
    uint64_t got = 0;
    EXPECT_TRUE(t.Lookup(k, &got)) << k;
    EXPECT_EQ(got, v) << k;
  }
  return m;
}

PoolOptions PlainOptions() {
  PoolOptions po;
  po.use_env = false;
  po.counting = false;
  return po;
}

Result<std::unique_ptr<U64Tree>> MakeTree(PoolImpl* pool, uint32_t node_size, bool linear = false) {
  TreeOptions o;
  o.node_size = node_size;
  if (linear) o.extra["search"] = "linear";
  return U64Tree::Create(pool, o);
}

// The node at `off` as the pool holds it (read-only inspection).
struct NodeView {
  uint32_t b, n;
};
NodeView ViewOf(PoolImpl& pool, uint64_t off) {
  const Node* x = pool.At<Node>(off);
  return {static_cast<uint32_t>(x->hdr.base_count), static_cast<uint32_t>(x->hdr.base_count >> 32)};
}

// ---- layout, options -----------------------------------------------------------------------

TEST(CircTreeTest, LayoutMatchesThePaper) {
  // §4.1: array pointer (8 B), base location (4 B), number of keys (4 B), a
  // lock (8 B), the sibling pointer (8 B) -- the 32-byte paper header.
  EXPECT_EQ(offsetof(NodeHeader, array), 0u);
  EXPECT_EQ(offsetof(NodeHeader, base_count), 8u);
  EXPECT_EQ(offsetof(NodeHeader, lock), 16u);
  EXPECT_EQ(offsetof(NodeHeader, sibling), 24u);
  EXPECT_EQ(PackBaseCount(3, 5), (5ull << 32) | 3u);
  // §6.1: the node size is the array of KV pairs; 4 KB holds 256 pairs.
  EXPECT_EQ(Slots(4096), 256u);
  EXPECT_EQ(Slots(512), 32u);
}

TEST(CircTreeTest, InvalidNodeSizeAndUnknownOptionsAreRejected) {
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, PlainOptions());
  ASSERT_TRUE(pool.ok());
  for (uint32_t bad : {256u, 768u, 8192u}) {
    auto t = MakeTree(pool->get(), bad);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find("512, 1024, 2048 or 4096"), std::string_view::npos);
  }
  TreeOptions o;
  o.extra["search"] = "fast";
  EXPECT_EQ(U64Tree::Create(pool->get(), o).status().code(), Status::Code::kInvalidArgument);
  o.extra = {{"strategy", "x"}};
  EXPECT_EQ(U64Tree::Create(pool->get(), o).status().code(), Status::Code::kInvalidArgument);
}

// ---- search ---------------------------------------------------------------------------------

// Random inserts and deletes make rings wrap past slot N-1 in many nodes;
// binary search over one segment and the linear variant must agree with the
// model in every node size.
TEST(CircTreeTest, BinaryAndLinearSearchAgreeAcrossWrappedRings) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  for (uint32_t ns : {512u, 1024u, 2048u, 4096u}) {
    for (bool linear : {false, true}) {
      SCOPED_TRACE("node size " + std::to_string(ns) + (linear ? " linear" : " binary"));
      auto pool = PoolImpl::CreateAnonymous(64ull << 20, "circtree", 0, PlainOptions());
      ASSERT_TRUE(pool.ok());
      auto t = MakeTree(pool->get(), ns, linear);
      ASSERT_TRUE(t.ok());
      U64Tree& tree = **t;
      EXPECT_EQ(tree.linear_search(), linear);
      std::map<uint64_t, uint64_t> model;
      std::mt19937_64 rng(seed + ns);
      for (int i = 0; i < 6000; i++) {
        const uint64_t k = rng() % 4000;
        if (rng() % 3 == 0) {
          ASSERT_EQ(*tree.Remove(k), model.erase(k) == 1);
        } else {
          ASSERT_EQ(*tree.Insert(k, k * 7), model.emplace(k, k * 7).second);
        }
      }
      for (uint64_t k = 0; k < 4000; k++) {
        uint64_t v = 0;
        ASSERT_EQ(tree.Lookup(k, &v), model.count(k) == 1) << k;
        if (model.count(k)) {
          EXPECT_EQ(v, k * 7);
        }
      }
      EXPECT_EQ(Contents(tree), model);
      ASSERT_TRUE(tree.Verify().ok()) << tree.Verify().ToString();
      EXPECT_GT(Extra(tree.Stats(), "wraps"), 0);
      EXPECT_GT(Extra(tree.Stats(), "left_shifts"), 0);
      EXPECT_GT(Extra(tree.Stats(), "right_shifts"), 0);
    }
  }
}

// Figure 1d: a new smallest key goes left of the base without shifting.
TEST(CircTreeTest, DescendingInsertsShiftNothing) {
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, PlainOptions());
  auto t = MakeTree(pool->get(), 4096);
  ASSERT_TRUE(t.ok());
  for (uint64_t k = 255; k >= 1; --k) ASSERT_TRUE(*(*t)->Insert(k, k));
  const TreeStats st = (*t)->Stats();
  EXPECT_EQ(Extra(st, "pairs_shifted"), 0);
  EXPECT_EQ(Extra(st, "splits"), 0);
  EXPECT_EQ(st.entries, 255u);
  ASSERT_TRUE((*t)->Verify().ok());
}

// ---- flush budgets (counting backend; deterministic) ------------------------------------------

struct Cost {
  uint64_t flushes, fences;
};

template <class F>
Cost Measure(F&& op) {
  counters::BeginOperation();
  const PersistCounters before = counters::Snapshot();
  op();
  const PersistCounters d = counters::Snapshot() - before;
  return {d.flushes, d.fences};
}

// Distinct cache lines of the physical slots b + first .. b + last (mod N).
uint64_t LinesOf(uint32_t b, int64_t first, int64_t last, uint32_t slots) {
  std::set<uint64_t> lines;
  for (int64_t i = first; i <= last; i++) lines.insert(((b + i) & (slots - 1)) / (kLine / sizeof(Pair)));
  return lines.size();
}

// An insert at logical position pos of a node with n pairs: the shift toward
// the nearer end flushes the lines it and the new pair touch, plus the
// header, and never more than the shift toward the far end would.
TEST(CircTreeTest, InsertFlushesTouchedLinesPlusHeaderNeverMoreThanTheFarEnd) {
  const uint32_t ns = 1024, slots = Slots(ns), n = 40;
  for (uint32_t pos = 0; pos <= n; pos++) {
    SCOPED_TRACE("position " + std::to_string(pos));
    PoolOptions po;
    po.use_env = false;
    auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, po);
    auto t = MakeTree(pool->get(), ns);
    ASSERT_TRUE(t.ok());
    for (uint64_t i = 1; i <= n; i++) ASSERT_TRUE(*(*t)->Insert(10 * i, i));
    const NodeView v = ViewOf(**pool, (*t)->root_offset());
    ASSERT_EQ(v.n, n);
    const uint64_t left = LinesOf(v.b, -1, static_cast<int64_t>(pos) - 1, slots) + 1;
    const uint64_t right = LinesOf(v.b, pos, n, slots) + 1;
    const Cost c = Measure([&] { ASSERT_TRUE(*(*t)->Insert(10 * pos + 5, 1)); });
    EXPECT_EQ(c.flushes, pos <= n / 2 ? left : right);
    EXPECT_EQ(c.fences, c.flushes);
    EXPECT_LE(c.flushes, std::max(left, right));
    EXPECT_LE(c.flushes, pos <= n / 2 ? right : left) << "the far end would have cost less";
  }
}

TEST(CircTreeTest, DeleteFlushesTouchedLinesPlusHeader) {
  const uint32_t ns = 1024, slots = Slots(ns), n = 40;
  for (uint32_t pos = 0; pos < n; pos++) {
    SCOPED_TRACE("position " + std::to_string(pos));
    PoolOptions po;
    po.use_env = false;
    auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, po);
    auto t = MakeTree(pool->get(), ns);
    ASSERT_TRUE(t.ok());
    for (uint64_t i = 1; i <= n; i++) ASSERT_TRUE(*(*t)->Insert(10 * i, i));
    const NodeView v = ViewOf(**pool, (*t)->root_offset());
    const bool right = pos + 1 == n || pos > n / 2;
    const uint64_t expect = (right ? LinesOf(v.b, pos, n - 1, slots) : LinesOf(v.b, 0, pos, slots)) + 1;
    const Cost c = Measure([&] { ASSERT_TRUE(*(*t)->Remove(10 * (pos + 1))); });
    EXPECT_EQ(c.flushes, expect);
    EXPECT_EQ(c.fences, c.flushes);
  }
}

TEST(CircTreeTest, UpdateIsOneEightByteStorePersisted) {
  PoolOptions po;
  po.use_env = false;
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, po);
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  for (uint64_t k = 1; k <= 20; k++) ASSERT_TRUE(*(*t)->Insert(k, k));
  const Cost c = Measure([&] { ASSERT_TRUE(*(*t)->Update(7, 70)); });
  EXPECT_EQ(c.flushes, 1u);
  EXPECT_EQ(c.fences, 1u);
}

// ---- recovery: a crash after every store of an operation --------------------------------------

// Applies the first `budget` stores (8-byte stores and writes, in program
// order) and drops the rest: destroying the pool afterwards leaves exactly
// the image of a crash right after that store (a prefix of the store order
// is a crash image in ADR and eADR alike).  Flushes and fences do nothing.
class StoreBudgetBackend final : public PersistBackend {
 public:
  StoreBudgetBackend(char* view, char* alias, std::atomic<int64_t>* budget, std::atomic<int64_t>* taken)
      : view_(view), alias_(alias), budget_(budget), taken_(taken) {}
  void Write(void* dst, const void* src, size_t n, const Site&) override {
    if (Take()) std::memcpy(A(dst), src, n);
  }
  void Store64(void* dst, uint64_t v, const Site&) override {
    if (Take()) __atomic_store_n(reinterpret_cast<uint64_t*>(A(dst)), v, __ATOMIC_RELEASE);
  }
  void Zero(void* dst, size_t n, const Site&) override {
    if (Take()) std::memset(A(dst), 0, n);
  }
  void NtWrite(void* dst, const void* src, size_t n, const Site& s) override { Write(dst, src, n, s); }
  void Flush(const void*, size_t, const Site&) override {}
  void Fence(const Site&) override {}
  std::string Describe() const override { return "store-budget"; }

 private:
  char* A(void* p) const { return alias_ + (static_cast<char*>(p) - view_); }
  bool Take() {
    const int64_t b = budget_->load();
    if (b == 0) return false;
    if (b > 0) budget_->store(b - 1);
    taken_->fetch_add(1);
    return true;
  }
  char* view_;
  char* alias_;
  std::atomic<int64_t>* budget_;
  std::atomic<int64_t>* taken_;
};

struct SweepResult {
  RecoveryReport sum;
  int64_t stores = 0;
};

// Builds a tree with `setup`, closes it cleanly, then for every k runs `op`
// on a copy of the pool with only its first k stores applied, crashes,
// recovers, and checks Verify() and that the contents are the state before
// or after `op` (after, once every store landed).  Returns the recovery
// reports summed over all k.
// held: recover as a key-value store opens its tree, with the allocator's
// rebuild held (HoldRebuild) until the tree's recovery returns, then
// released and the deferred work run.
SweepResult SweepCrashes(uint32_t node_size, const std::function<void(U64Tree&)>& setup,
                         const std::function<void(U64Tree&)>& op, bool held = false) {
  SweepResult res;
  const std::string base = TmpPath("base"), work = TmpPath("work");
  std::map<uint64_t, uint64_t> m0, m1;
  {
    auto pool = PoolImpl::Create(base, kPoolSize, "circtree", 0, PlainOptions());
    EXPECT_TRUE(pool.ok());
    auto t = MakeTree(pool->get(), node_size);
    EXPECT_TRUE(t.ok());
    setup(**t);
    m0 = Contents(**t);
    EXPECT_TRUE((*t)->Close().ok());
  }
  std::atomic<int64_t> budget{-1}, taken{0};
  PoolOptions bo = PlainOptions();
  bo.backend = BackendKind::kCustom;
  bo.backend_factory = [&](char* view, char* alias, uint64_t) {
    return std::make_unique<StoreBudgetBackend>(view, alias, &budget, &taken);
  };
  // The run with every store applied: its store count and the state after.
  auto run = [&](int64_t k) {
    std::filesystem::copy_file(base, work, std::filesystem::copy_options::overwrite_existing);
    auto pool = PoolImpl::Open(work, "circtree", bo);
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    auto t = U64Tree::Recover(pool->get(), {});
    EXPECT_TRUE(t.ok());
    taken = 0;
    budget = k;
    op(**t);
    budget = -1;
  };
  run(-1);
  res.stores = taken.load();
  {
    auto pool = PoolImpl::Open(work, "circtree", PlainOptions());
    auto t = U64Tree::Recover(pool->get(), {});
    EXPECT_TRUE(t.ok());
    m1 = Contents(**t);
  }
  for (int64_t k = 0; k <= res.stores; k++) {
    SCOPED_TRACE("crash after store " + std::to_string(k) + " of " + std::to_string(res.stores));
    run(k);
    auto pool = PoolImpl::Open(work, "circtree", PlainOptions());
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    if (!pool.ok()) continue;
    Allocator& a = (*pool)->allocator();
    if (held) a.HoldRebuild();
    auto t = U64Tree::Recover(pool->get(), {});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) continue;
    if (held) {
      a.ReleaseRebuild();
      const Status deferred = a.RunDeferredRebuildChecks();
      EXPECT_TRUE(deferred.ok()) << deferred.ToString();
    }
    EXPECT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
    const auto got = Contents(**t);
    if (k == res.stores)
      EXPECT_EQ(got, m1);
    else
      EXPECT_TRUE(got == m0 || got == m1);
    const RecoveryReport& r = (*t)->recovery_report();
    EXPECT_TRUE(r.crashed);
    res.sum.insert_undone += r.insert_undone;
    res.sum.insert_committed += r.insert_committed;
    res.sum.delete_finished += r.delete_finished;
    res.sum.delete_committed += r.delete_committed;
    res.sum.split_cleared += r.split_cleared;
    res.sum.stale_words_zeroed += r.stale_words_zeroed;
    res.sum.root_splits_completed += r.root_splits_completed;
    res.sum.children_linked += r.children_linked;
    res.sum.merges_undone += r.merges_undone;
    res.sum.merges_finished += r.merges_finished;
    res.sum.merged_unlinked += r.merged_unlinked;
    res.sum.children_unlinked += r.children_unlinked;
    res.sum.separators_fixed += r.separators_fixed;
    res.sum.roots_collapsed += r.roots_collapsed;
  }
  unlink(base.c_str());
  unlink(work.c_str());
  return res;
}

void Fill(U64Tree& t, uint64_t n) {
  for (uint64_t i = 1; i <= n; i++) ASSERT_TRUE(*t.Insert(10 * i, 1000 + i));
}

// Cases 1a and 1b, left shift: undo with duplicates, commit without.
TEST(CircTreeRecoveryTest, InsertShiftingLeftIsUndoneOrCommittedAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { Fill(t, 20); }, [](U64Tree& t) { (void)t.Insert(35, 7); });
  EXPECT_GT(r.stores, 8);
  EXPECT_GT(r.sum.insert_undone, 0u);
  EXPECT_GT(r.sum.insert_committed, 0u);
  EXPECT_GT(r.sum.stale_words_zeroed, 0u);
}

// Cases 1a and 1b, right shift.
TEST(CircTreeRecoveryTest, InsertShiftingRightIsUndoneOrCommittedAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { Fill(t, 20); }, [](U64Tree& t) { (void)t.Insert(165, 7); });
  EXPECT_GT(r.sum.insert_undone, 0u);
  EXPECT_GT(r.sum.insert_committed, 0u);
}

// Cases 2a and 2b, a delete in the left half (smaller pairs shift right).
TEST(CircTreeRecoveryTest, DeleteInTheLeftHalfIsFinishedOrCommittedAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { Fill(t, 20); }, [](U64Tree& t) { (void)t.Remove(40); });
  EXPECT_GT(r.sum.delete_finished, 0u);
  EXPECT_GT(r.sum.delete_committed, 0u);
}

// Cases 2a and 2b, a delete in the right half (greater pairs shift left).
TEST(CircTreeRecoveryTest, DeleteInTheRightHalfIsFinishedOrCommittedAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { Fill(t, 20); }, [](U64Tree& t) { (void)t.Remove(170); });
  EXPECT_GT(r.sum.delete_finished, 0u);
  EXPECT_GT(r.sum.delete_committed, 0u);
}

// Cases 3b and 4: a root leaf splits; crashes between the link and the root
// switch leave copies to clear and a root with a sibling.
TEST(CircTreeRecoveryTest, RootSplitIsCompletedAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { Fill(t, 31); }, [](U64Tree& t) { (void)t.Insert(15, 7); });
  EXPECT_GT(r.sum.split_cleared, 0u);
  EXPECT_GT(r.sum.root_splits_completed, 0u);
}

// The same under a held rebuild, as `pmtree serve` and every key-value store
// open their tree: completing the root split allocates the new root, which
// must wait until the store has reported its blocks (Busy before the fix;
// a SIGKILL test of the store on circtree found it, 2026-11-29).
TEST(CircTreeRecoveryTest, RootSplitIsCompletedUnderAHeldRebuild) {
  SweepResult r = SweepCrashes(
      512, [](U64Tree& t) { Fill(t, 31); }, [](U64Tree& t) { (void)t.Insert(15, 7); }, /*held=*/true);
  EXPECT_GT(r.sum.root_splits_completed, 0u);
}

// Cases 3b and 5: a non-root leaf splits; the parent may miss the new child.
TEST(CircTreeRecoveryTest, LeafSplitBelowTheRootIsLinkedAfterEveryStore) {
  SweepResult r = SweepCrashes(
      512, [](U64Tree& t) { Fill(t, 31 + 16); }, [](U64Tree& t) { (void)t.Insert(10 * 47 + 5, 7); });
  EXPECT_GT(r.sum.split_cleared, 0u);
  EXPECT_GT(r.sum.children_linked, 0u);
}

// Case 6 and stale words: a lock word left set and a half-written slot.
TEST(CircTreeRecoveryTest, RecoveryClearsLockWordsAndStaleWords) {
  const std::string path = TmpPath("lock");
  uint64_t root;
  {
    auto pool = PoolImpl::Create(path, kPoolSize, "circtree", 0, PlainOptions());
    auto t = MakeTree(pool->get(), 512);
    ASSERT_NO_FATAL_FAILURE(Fill(**t, 10));
    root = (*t)->root_offset();
    Node* x = (*pool)->At<Node>(root);
    const NodeView v = ViewOf(**pool, root);
    (*pool)->Store64(&x->hdr.lock, 1);
    (*pool)->Store64(&x->pairs[(v.b + v.n + 3) & 31].value, 99);  // a value without its key
  }  // crash
  auto pool = PoolImpl::Open(path, "circtree", PlainOptions());
  auto t = U64Tree::Recover(pool->get(), {});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->recovery_report().locks_cleared, 1u);
  EXPECT_EQ((*t)->recovery_report().stale_words_zeroed, 1u);
  EXPECT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
  EXPECT_EQ(Contents(**t).size(), 10u);
  unlink(path.c_str());
}

// Each Figure 5 stop point, crashed there, recovers to a verified tree that
// holds every earlier key; the new key is there when it went right (it was
// copied into the sibling at step 3).
TEST(CircTreeRecoveryTest, EverySplitStopPointRecovers) {
  for (StopPoint sp : {StopPoint::kSplitSiblingPersisted, StopPoint::kSplitLinked, StopPoint::kSplitCleared,
                       StopPoint::kSplitCommitted}) {
    for (uint64_t key : {15ull, 10ull * 31 + 5}) {
      SCOPED_TRACE("stop point " + std::to_string(static_cast<int>(sp)) + " key " + std::to_string(key));
      const std::string path = TmpPath("stop");
      std::map<uint64_t, uint64_t> before;
      {
        auto pool = PoolImpl::Create(path, kPoolSize, "circtree", 0, PlainOptions());
        auto t = MakeTree(pool->get(), 512);
        ASSERT_NO_FATAL_FAILURE(Fill(**t, 31));
        before = Contents(**t);
        (*t)->SetStopHookForTest([sp](StopPoint p) { return p == sp; });
        EXPECT_EQ((*t)->Insert(key, 7).status().code(), Status::Code::kInternal);
      }
      auto pool = PoolImpl::Open(path, "circtree", PlainOptions());
      auto t = U64Tree::Recover(pool->get(), {});
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
      auto got = Contents(**t);
      auto after = before;
      after[key] = 7;
      EXPECT_TRUE(got == before || got == after);
      if (sp != StopPoint::kSplitSiblingPersisted && key > 160) {
        EXPECT_EQ(got, after);
      }
      EXPECT_EQ((*t)->Stats().leaf_nodes, sp == StopPoint::kSplitSiblingPersisted ? 1u : 2u);
      unlink(path.c_str());
    }
  }
}

// ---- merges (§5.3) ----------------------------------------------------------------------------------

// Removals in a fixed shuffled order down to a few keys: every Verify()
// passes (C12 included), the contents follow a model, leaves and inner nodes
// merge, and the root collapses back to a single leaf.  (The order is fixed:
// whether the last nodes end up under one parent depends on it, since a node
// only tries to merge when a delete in it leaves it underfull.)
TEST(CircTreeMergeTest, RemovalsMergeNodesAndCollapseTheRoot) {
  const uint64_t seed = 42;
  for (uint32_t ns : {512u, 4096u}) {
    SCOPED_TRACE("node size " + std::to_string(ns));
    auto pool = PoolImpl::CreateAnonymous(64ull << 20, "circtree", 0, PlainOptions());
    auto t = MakeTree(pool->get(), ns);
    ASSERT_TRUE(t.ok());
    const uint64_t n = ns == 512 ? 3000 : 40000;
    std::vector<uint64_t> keys;
    std::map<uint64_t, uint64_t> model;
    for (uint64_t i = 1; i <= n; i++) {
      ASSERT_TRUE(*(*t)->Insert(10 * i, i));
      keys.push_back(10 * i);
      model[10 * i] = i;
    }
    const uint32_t height = (*t)->Stats().height;
    ASSERT_GE(height, 3u);
    std::shuffle(keys.begin(), keys.end(), std::mt19937_64(seed));
    for (size_t j = 0; j + 5 < keys.size(); j++) {
      ASSERT_TRUE(*(*t)->Remove(keys[j]));
      model.erase(keys[j]);
      if (j % 997 == 0) {
        ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
      }
    }
    ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
    EXPECT_EQ(Contents(**t), model);
    const TreeStats st = (*t)->Stats();
    EXPECT_GT(Extra(st, "merges"), 0.0);
    EXPECT_GE(Extra(st, "root_collapses"), static_cast<double>(height - 1));
    EXPECT_EQ(st.height, 1u);
    EXPECT_EQ(st.leaf_nodes, 1u);
  }
}

// Ascending removals keep every leaf and inner node at or above N / 2 pairs
// while it has a right sibling under the same parent that can take it: the
// first leaf merges as soon as it drops below N / 2.
TEST(CircTreeMergeTest, UnderfullLeafMergesIntoItsRightSibling) {
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, PlainOptions());
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  ASSERT_NO_FATAL_FAILURE(Fill(**t, 48));  // leaves of 16, 16 and 16 pairs under one root
  ASSERT_EQ((*t)->Stats().leaf_nodes, 3u);
  ASSERT_TRUE(*(*t)->Remove(170));  // the middle leaf: 15 < 16, its right sibling has room
  EXPECT_EQ((*t)->Stats().leaf_nodes, 2u);
  EXPECT_EQ(Extra((*t)->Stats(), "merges"), 1.0);
  ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
  ASSERT_TRUE(*(*t)->Remove(10));  // the first leaf: 15 + 31 does not fit
  EXPECT_EQ((*t)->Stats().leaf_nodes, 2u);
  ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
  EXPECT_EQ(Contents(**t).size(), 46u);
}

// Flush budget of a merge (counting backend): the delete's lines and header,
// then the leaf count (M0, flushed only), M1 mark (1), the copied lines in
// the sibling, M3 header (1), the NULLed lines of the merged node and its
// commit (1), the parent's lines (the new separator and the delete) and
// header, and the root switch (1).
TEST(CircTreeMergeTest, MergeFlushesItsLinesAndOneHeaderPersistPerStep) {
  PoolOptions po;
  po.use_env = false;
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, po);
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  ASSERT_NO_FATAL_FAILURE(Fill(**t, 32));  // root + leaves X (10..160) and R (170..320), 16 pairs each
  const uint64_t root = (*t)->root_offset();
  const Node* p = (*pool)->At<Node>(root);
  const NodeView pv = ViewOf(**pool, root);
  const uint64_t x = p->pairs[pv.b].value, r = p->pairs[(pv.b + 1) & 31].value;
  const NodeView xv = ViewOf(**pool, x), rv = ViewOf(**pool, r);
  ASSERT_EQ(xv.n, 16u);
  ASSERT_EQ(rv.n, 16u);
  const uint32_t slots = Slots(512);
  const uint64_t del = LinesOf(xv.b, 0, 0, slots) + 1;                          // remove position 0
  const uint64_t copy = LinesOf(rv.b, -15, -1, slots);                          // M2
  const uint64_t nulls = LinesOf((xv.b + 1) & (slots - 1), 0, 14, slots);      // M4
  const uint64_t parent = LinesOf(pv.b, 0, 1, slots) + 1;  // M6: R's separator, then position 0's NULL
  const Cost c = Measure([&] { ASSERT_TRUE(*(*t)->Remove(10)); });
  // M0: the leaf count's flush, fenced by M1's persist (before it: flushes ==
  // fences).
  EXPECT_EQ(c.flushes, 1 + del + 1 + copy + 1 + nulls + 1 + parent + 1);
  EXPECT_EQ(c.fences, c.flushes - 1);
  EXPECT_EQ((*t)->root_offset(), r);  // collapsed
  EXPECT_EQ(ViewOf(**pool, r).n, 31u);
}

// Cases 7a, 7b, 7c and 9: the first leaf merges into its sibling and the
// root collapses; a crash after every store recovers.
TEST(CircTreeRecoveryTest, FirstLeafMergeAndRootCollapseRecoverAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { Fill(t, 32); }, [](U64Tree& t) { (void)t.Remove(10); });
  EXPECT_GT(r.sum.merges_undone, 0u);
  EXPECT_GT(r.sum.merges_finished, 0u);
  EXPECT_GT(r.sum.merged_unlinked, 0u);
  EXPECT_GT(r.sum.separators_fixed, 0u);
  EXPECT_GT(r.sum.roots_collapsed, 0u);
}

// Case 8, IN one child long: a middle leaf merges; a crash between the
// unlink and the parent's delete leaves the parent naming it.
TEST(CircTreeRecoveryTest, MiddleLeafMergeRemovesTheParentsExtraChildAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { Fill(t, 48); }, [](U64Tree& t) { (void)t.Remove(170); });
  EXPECT_GT(r.sum.merges_undone, 0u);
  EXPECT_GT(r.sum.merged_unlinked, 0u);
  EXPECT_GT(r.sum.children_unlinked, 0u);
  EXPECT_GT(r.sum.separators_fixed, 0u);
}

// Inner nodes merge too: ascending removals from a three-level tree until
// one removal cascades a leaf merge into an inner merge and a root
// collapse; a crash after every store of that removal recovers.
TEST(CircTreeRecoveryTest, InnerMergeCascadeRecoversAfterEveryStore) {
  uint64_t last = 0;
  {
    auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, PlainOptions());
    auto t = MakeTree(pool->get(), 512);
    ASSERT_NO_FATAL_FAILURE(Fill(**t, 600));
    ASSERT_EQ((*t)->Stats().height, 3u);
    for (uint64_t i = 1; i <= 600 && last == 0; i++) {
      ASSERT_TRUE(*(*t)->Remove(10 * i));
      if ((*t)->Stats().height == 2) last = i;
    }
  }
  ASSERT_NE(last, 0u);
  SweepResult r = SweepCrashes(
      512,
      [&](U64Tree& t) {
        ASSERT_NO_FATAL_FAILURE(Fill(t, 600));
        for (uint64_t i = 1; i < last; i++) ASSERT_TRUE(*t.Remove(10 * i));
      },
      [&](U64Tree& t) { (void)t.Remove(10 * last); });
  EXPECT_GT(r.sum.merges_undone, 0u);
  EXPECT_GT(r.sum.merged_unlinked, 0u);
  EXPECT_GT(r.sum.roots_collapsed, 0u);
}

// The merge stop points: committed (the merged node still holds its pairs)
// and unlinked (its parent still names it: IN one child long).
TEST(CircTreeRecoveryTest, EveryMergeStopPointRecovers) {
  for (StopPoint sp : {StopPoint::kMergeCommitted, StopPoint::kMergeUnlinked}) {
    SCOPED_TRACE("stop point " + std::to_string(static_cast<int>(sp)));
    const std::string path = TmpPath("mstop");
    std::map<uint64_t, uint64_t> after;
    {
      auto pool = PoolImpl::Create(path, kPoolSize, "circtree", 0, PlainOptions());
      auto t = MakeTree(pool->get(), 512);
      ASSERT_NO_FATAL_FAILURE(Fill(**t, 48));
      (*t)->SetStopHookForTest([sp](StopPoint p) { return p == sp; });
      ASSERT_TRUE(*(*t)->Remove(170));
      after = Contents(**t);
    }
    auto pool = PoolImpl::Open(path, "circtree", PlainOptions());
    auto t = U64Tree::Recover(pool->get(), {});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
    EXPECT_EQ(Contents(**t), after);
    const RecoveryReport& rr = (*t)->recovery_report();
    EXPECT_EQ(rr.merged_unlinked, sp == StopPoint::kMergeCommitted ? 1u : 0u);
    EXPECT_EQ(rr.children_unlinked, 1u);  // the parent names the node either way
    EXPECT_EQ((*t)->Stats().leaf_nodes, 2u);
    unlink(path.c_str());
  }
}

// ---- restart ------------------------------------------------------------------------------------

TEST(CircTreeTest, CleanCloseRestartsInstantlyWithoutReadingNodes) {
  const std::string path = TmpPath("clean");
  {
    auto pool = PoolImpl::Create(path, kPoolSize, "circtree", 0, PlainOptions());
    auto t = MakeTree(pool->get(), 512);
    ASSERT_NO_FATAL_FAILURE(Fill(**t, 2000));
    ASSERT_TRUE((*t)->Close().ok());
  }
  auto pool = PoolImpl::Open(path, "circtree", PlainOptions());
  auto t = U64Tree::Recover(pool->get(), {});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)->recovery_report().crashed);
  EXPECT_EQ((*t)->recovery_report().nodes, 0u);
  EXPECT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
  EXPECT_EQ(Contents(**t).size(), 2000u);
  unlink(path.c_str());
}

// ---- the leaf count (invariant C13) ---------------------------------------------------------------

const Meta& MetaOf(PoolImpl& pool) { return *pool.At<Meta>(pool.root(0)); }

// The leaves of the tree in `pool`, in chain order (position 0 of each
// level's first node down to level 0).
std::vector<uint64_t> LeafChain(PoolImpl& pool) {
  uint64_t off = MetaOf(pool).root;
  while (pool.At<Node>(off)->hdr.level > 0) {
    const NodeView v = ViewOf(pool, off);
    off = pool.At<Node>(off)->pairs[v.b].value;
  }
  std::vector<uint64_t> chain;
  for (; off != 0; off = pool.At<Node>(off)->hdr.sibling) chain.push_back(off);
  return chain;
}

// Splits add to meta.leaves, merges take from it, and at rest it is exact.
TEST(CircTreeTest, SplitsAndMergesKeepTheLeafCountExact) {
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, PlainOptions());
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(MetaOf(**pool).leaves, 1u);
  ASSERT_NO_FATAL_FAILURE(Fill(**t, 3000));
  const uint64_t grown = (*t)->Stats().leaf_nodes;
  ASSERT_GT(grown, 100u);
  EXPECT_EQ(MetaOf(**pool).leaves, grown);
  for (uint64_t i = 1; i <= 3000; i++) {
    if (i % 7 != 0) {
      ASSERT_TRUE(*(*t)->Remove(10 * i));
    }
  }
  const uint64_t shrunk = (*t)->Stats().leaf_nodes;
  ASSERT_LT(shrunk, grown / 2);
  EXPECT_GT(Extra((*t)->Stats(), "merges"), 0);
  EXPECT_EQ(MetaOf(**pool).leaves, shrunk);
  EXPECT_EQ(LeafChain(**pool).size(), shrunk);
  ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
}

// Flush budget of the count: a leaf split stores it after the link's persist
// and only flushes it (the NULLs' persist fences it): one flush, no fence.
// A merge of a non-empty leaf flushes it before M1, whose persist fences it.
TEST(CircTreeTest, LeafSplitCostsOneMoreFlushForTheLeafCount) {
  PoolOptions po;
  po.use_env = false;
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, po);
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  ASSERT_NO_FATAL_FAILURE(Fill(**t, 31));  // one full root leaf
  const Cost root = Measure([&] { ASSERT_TRUE(*(*t)->Insert(1000, 1)); });  // leaf + root split
  ASSERT_EQ((*t)->Stats().leaf_nodes, 2u);
  // Fill the right leaf (16 pairs after the split) to 31 with ascending keys.
  for (uint64_t k = 1001; k < 1016; k++) ASSERT_TRUE(*(*t)->Insert(k, 1));
  const Cost leaf = Measure([&] { ASSERT_TRUE(*(*t)->Insert(1016, 1)); });  // leaf split, parent insert
  ASSERT_EQ((*t)->Stats().leaf_nodes, 3u);
  std::printf("leaf + root split: %llu flushes, %llu fences; leaf split: %llu, %llu\n",
              static_cast<unsigned long long>(root.flushes), static_cast<unsigned long long>(root.fences),
              static_cast<unsigned long long>(leaf.flushes), static_cast<unsigned long long>(leaf.fences));
  // Before the leaf count: 26 flushes, 10 fences and 17, 9.
  EXPECT_EQ(root.flushes, 27u);
  EXPECT_EQ(root.fences, 10u);
  EXPECT_EQ(leaf.flushes, 18u);
  EXPECT_EQ(leaf.fences, 9u);
  EXPECT_EQ(MetaOf(**pool).leaves, 3u);
}

// Leaves B (170..320, 16 pairs) and C (330..480 plus 15 keys between: 31, full)
// under one root: B's removals find no room in C until B is empty, so its
// last removal merges an empty leaf -- no M1, so M0 fences the count itself.
void EmptyLeafBesideAFullSibling(U64Tree& t) {
  Fill(t, 48);
  for (uint64_t k = 331; k <= 346; k++) {
    if (k != 340) {
      ASSERT_TRUE(*t.Insert(k, k));
    }
  }
  for (uint64_t k = 170; k < 320; k += 10) ASSERT_TRUE(*t.Remove(k));
  ASSERT_EQ(t.Stats().leaf_nodes, 3u);  // B holds only 320
}

TEST(CircTreeMergeTest, AnEmptyLeafMergesWithTheLeafCountFencedBeforeTheCommit) {
  PoolOptions po;
  po.use_env = false;
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, po);
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  ASSERT_NO_FATAL_FAILURE(EmptyLeafBesideAFullSibling(**t));
  EXPECT_EQ(MetaOf(**pool).leaves, 3u);
  const double merges = Extra((*t)->Stats(), "merges");
  const Cost c = Measure([&] { ASSERT_TRUE(*(*t)->Remove(320)); });
  std::printf("removal that merges an empty leaf: %llu flushes, %llu fences\n",
              static_cast<unsigned long long>(c.flushes), static_cast<unsigned long long>(c.fences));
  EXPECT_EQ(Extra((*t)->Stats(), "merges"), merges + 1);
  EXPECT_EQ((*t)->Stats().leaf_nodes, 2u);
  EXPECT_EQ(MetaOf(**pool).leaves, 2u);
  // M0 adds one flush and its own fence (AddLeaves with fence): 7 and 7,
  // 6 and 6 without the count.
  EXPECT_EQ(c.flushes, 7u);
  EXPECT_EQ(c.fences, 7u);
  ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
}

// The same merge crashed after every one of its stores recovers (cases 7c,
// 8) with a count no walk undercuts.
TEST(CircTreeRecoveryTest, EmptyLeafMergeRecoversAfterEveryStore) {
  SweepResult r = SweepCrashes(512, [](U64Tree& t) { EmptyLeafBesideAFullSibling(t); },
                               [](U64Tree& t) { (void)t.Remove(320); });
  EXPECT_GT(r.stores, 3);
  EXPECT_GT(r.sum.merged_unlinked + r.sum.children_unlinked, 0u);
}

// Issue 17: after a crash, a leaf list cut by damage (one zeroed sibling
// pointer) loses every leaf behind the cut.  The meta block's leaf count
// (C13) makes recovery refuse the pool, and refuse it again on the next
// open, instead of rebuilding the allocator without those leaves; Verify
// refuses the same cut in a live tree.
TEST(CircTreeRecoveryTest, CrashRecoveryRefusesACutLeafListTwiceInARow) {
  const std::string path = TmpPath("cut");
  uint64_t leaves = 0;
  {
    auto pool = PoolImpl::Create(path, kPoolSize, "circtree", 0, PlainOptions());
    auto t = MakeTree(pool->get(), 512);
    ASSERT_TRUE(t.ok());
    for (uint64_t k = 1; k <= 5000; k++) ASSERT_TRUE(*(*t)->Insert(k * 7919 % 5003 + 1, k));
    leaves = (*t)->Stats().leaf_nodes;
  }  // crash
  {
    auto pool = PoolImpl::Open(path, "circtree", PlainOptions());
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    const std::vector<uint64_t> chain = LeafChain(**pool);
    ASSERT_GT(chain.size(), 100u);
    ASSERT_EQ(chain.size(), leaves);
    EXPECT_EQ(MetaOf(**pool).leaves, leaves);
    uint64_t* cut = &(*pool)->At<Node>(chain[chain.size() - 3])->hdr.sibling;  // two leaves are lost
    (*pool)->Store64(cut, 0);
    (*pool)->Persist(cut, sizeof(uint64_t));
  }  // crash again, with the cut durable
  for (int again = 0; again < 2; again++) {
    SCOPED_TRACE("open " + std::to_string(again));
    auto pool = PoolImpl::Open(path, "circtree", PlainOptions());
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    auto t = U64Tree::Recover(pool->get(), {});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), Status::Code::kCorruption) << t.status().ToString();
    EXPECT_NE(t.status().ToString().find("leaves unreachable"), std::string::npos) << t.status().ToString();
  }
  unlink(path.c_str());
}

TEST(CircTreeTest, VerifyRefusesALiveTreeWhoseLeafListIsCut) {
  auto pool = PoolImpl::CreateAnonymous(kPoolSize, "circtree", 0, PlainOptions());
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  ASSERT_NO_FATAL_FAILURE(Fill(**t, 500));
  ASSERT_TRUE((*t)->Verify().ok());
  const std::vector<uint64_t> chain = LeafChain(**pool);
  uint64_t* cut = &(*pool)->At<Node>(chain[chain.size() - 2])->hdr.sibling;
  (*pool)->Store64(cut, 0);
  (*pool)->Persist(cut, sizeof(uint64_t));
  const Status s = (*t)->Verify();
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find("C13"), std::string::npos) << s.ToString();
}

// A pool of format version 1 (before the leaf count, whose word was
// reserved and 0) is Incompatible, with a message that says why.
TEST(CircTreeTest, APoolOfTheFormatBeforeTheLeafCountIsIncompatible) {
  const std::string path = TmpPath("v1");
  {
    auto pool = PoolImpl::Create(path, kPoolSize, "circtree", 0, PlainOptions());
    auto t = MakeTree(pool->get(), 512);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(*(*t)->Insert(1, 1));
    Meta* m = (*pool)->At<Meta>((*pool)->root(0));
    ASSERT_EQ(m->version, kFormatVersion);
    const uint64_t word = (uint64_t{m->node_size} << 32) | 1;  // version 1, same node size
    (*pool)->Store64(&m->version, word);
    (*pool)->Store64(&m->leaves, 0);
    (*pool)->Persist(m, sizeof(Meta));
  }  // crash
  auto pool = PoolImpl::Open(path, "circtree", PlainOptions());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  auto t = U64Tree::Recover(pool->get(), {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kIncompatible) << t.status().ToString();
  EXPECT_NE(t.status().ToString().find("the format before the leaf count"), std::string::npos)
      << t.status().ToString();
  unlink(path.c_str());
}

// ---- byte-string keys -----------------------------------------------------------------------------

TEST(CircTreeTest, ByteStringKeysSurviveACrash) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  const std::string path = TmpPath("bytes");
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(seed);
  {
    auto h = CreateBytesTree(*FindTree("circtree"), path, 64ull << 20, TreeOptions{}, PlainOptions());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (int i = 0; i < 4000; i++) {
      std::string k = "key" + std::to_string(rng() % 1500) + std::string(rng() % 40, 'x');
      if (rng() % 4 == 0) {
        ASSERT_EQ(*h->tree->Remove(k), model.erase(k) == 1);
      } else {
        ASSERT_EQ(*h->tree->Upsert(k, i), !model.count(k));
        model[k] = i;
      }
    }
    ASSERT_TRUE(h->tree->Verify().ok()) << h->tree->Verify().ToString();
  }  // crash
  auto h = OpenBytesTree(path, FindTree("circtree"), TreeOptions{}, PlainOptions());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(h->tree->Verify().ok()) << h->tree->Verify().ToString();
  for (const auto& [k, v] : model) {
    uint64_t got = 0;
    ASSERT_TRUE(h->tree->Lookup(k, &got)) << k;
    EXPECT_EQ(got, v);
  }
  EXPECT_EQ(h->tree->Stats().entries, model.size());
  unlink(path.c_str());
}

// ---- concurrency (run under ThreadSanitizer by scripts/test.sh --tsan) -------------------------------

// Inserts the stable keys k * stride (value k, k = 1..stable), then runs
// writer(w, errors) on `writers` threads while one reader looks the stable
// keys up and checks that scans come back sorted, until every writer is
// done.  Returns the errors the reader and the writers counted.
int RunWritersBesideAReader(U64Tree& tree, uint64_t stable, uint64_t stride, uint64_t seed, int writers,
                            const std::function<void(int, std::atomic<int>&)>& writer) {
  for (uint64_t k = 1; k <= stable; k++) EXPECT_TRUE(*tree.Insert(k * stride, k));
  std::atomic<int> done{0};
  std::atomic<int> errors{0};
  std::thread reader([&] {
    std::mt19937_64 rng(seed ^ 7);
    std::vector<Tree::Entry> out(64);
    while (done.load() < writers) {
      const uint64_t k = 1 + rng() % stable;
      uint64_t v = 0;
      if (!tree.Lookup(k * stride, &v) || v != k) errors++;
      const size_t n = tree.Scan(rng() % (stable * stride), std::span(out));
      for (size_t i = 1; i < n; i++)
        if (!(out[i - 1].first < out[i].first)) errors++;
    }
  });
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; w++) {
    threads.emplace_back([&, w] {
      writer(w, errors);
      done++;
    });
  }
  for (auto& th : threads) th.join();
  reader.join();
  return errors.load();
}

TEST(CircTreeTest, ConcurrentWritersAndReadersKeepEveryKeyThroughSplits) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  auto pool = PoolImpl::CreateAnonymous(64ull << 20, "circtree", 0, PlainOptions());
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  U64Tree& tree = **t;
  constexpr int kWriters = 2;
  // Keys 4..4000 are stable; writer w owns keys k * 4 + 1 + w: inserts them
  // all, removes half.
  const int errors = RunWritersBesideAReader(tree, 1000, 4, seed, kWriters, [&](int w, std::atomic<int>& err) {
    for (uint64_t k = 0; k < 3000; k++)
      if (!*tree.Insert(k * 4 + 1 + w, k)) err++;
    for (uint64_t k = 0; k < 3000; k += 2)
      if (!*tree.Remove(k * 4 + 1 + w)) err++;
  });
  EXPECT_EQ(errors, 0);
  ASSERT_TRUE(tree.Verify().ok()) << tree.Verify().ToString();
  EXPECT_EQ(tree.Stats().entries, 1000u + kWriters * 1500u);
  // C13 at rest: concurrent splits stored the count in count_mu_'s order.
  EXPECT_EQ(MetaOf(**pool).leaves, tree.Stats().leaf_nodes);
}

// Merges under concurrency (§5.4): writers insert and then remove all their
// keys, so leaves and inner nodes merge (and in most runs the root
// collapses) while the reader looks up and scans the stable keys (run under ThreadSanitizer by
// scripts/test.sh --tsan).
TEST(CircTreeTest, ConcurrentRemovalsMergeWhileReadersFindEveryStableKey) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  auto pool = PoolImpl::CreateAnonymous(64ull << 20, "circtree", 0, PlainOptions());
  auto t = MakeTree(pool->get(), 512);
  ASSERT_TRUE(t.ok());
  U64Tree& tree = **t;
  // Keys 64..6400 are stable; writer w owns keys j * 64 + 1 + w (between
  // the stable keys and beyond them): four rounds of insert-all, remove-all.
  const int errors = RunWritersBesideAReader(tree, 100, 64, seed, 2, [&](int w, std::atomic<int>& err) {
    for (int round = 0; round < 4; round++) {
      for (uint64_t j = 0; j < 2000; j++)
        if (!*tree.Insert(j * 64 + 1 + w, j)) err++;
      for (uint64_t j = 0; j < 2000; j++)
        if (!*tree.Remove(j * 64 + 1 + w)) err++;
    }
  });
  EXPECT_EQ(errors, 0);
  ASSERT_TRUE(tree.Verify().ok()) << tree.Verify().ToString();
  const TreeStats st = tree.Stats();
  EXPECT_EQ(st.entries, 100u);
  // Leaves merge in every run; whether the root collapses (inner nodes
  // merging down to one) depends on the interleaving, so it is not asserted.
  EXPECT_GT(Extra(st, "merges"), 0.0);
  EXPECT_EQ(MetaOf(**pool).leaves, st.leaf_nodes);  // C13 at rest, splits and merges interleaved
}

// ---- crash explorer (bounded; the full matrix is circtree_long_test) ----------------------------

TEST(CircTreeCrashTest, SmallWorkloadOneOperationDeepHasNoViolations) {
  crash::ExploreOptions o;
  o.depth = 1;
  o.tree_options.node_size = 512;
  auto r = crash::Explore(*FindTree("circtree"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& t : r->tickets) ADD_FAILURE() << t.ToString();
  EXPECT_EQ(r->violations, 0u);
}

TEST(CircTreeCrashTest, RandomWorkloadHasNoViolations) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  crash::ExploreOptions o;
  o.workload = crash::Workload::kRandom;
  o.ops = 150;
  o.seed = seed;
  o.tree_options.node_size = 512;
  auto r = crash::Explore(*FindTree("circtree"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& t : r->tickets) ADD_FAILURE() << t.ToString();
  EXPECT_EQ(r->violations, 0u);
}

// The persist of meta.root after a root collapse (merge step M7) matters
// only once the retired old root's block is reused: recovery case 9 redoes
// the collapse from the old root while that node is intact.  With
// reclaim_each_op the explorer frees retired blocks between operations and
// adds the pre-state where the next split takes them, so dropping that
// persist is caught; without it the same mutant shows no violation.
TEST(CircTreeCrashTest, CollapsePersistIsCaughtOnceTheOldRootIsReused) {
  crash::ExploreOptions o;
  o.depth = 1;
  o.bulk_load = false;
  o.out_of_space = false;
  o.continuation_ops = 0;
  o.tree_options.node_size = 512;
  o.reclaim_each_op = true;
  auto base = crash::Explore(*FindTree("circtree"), o);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  ASSERT_EQ(base->violations, 0u);
  std::string site;
  for (const auto& s : base->sites)
    if (s.kind == "flush" && s.function.find("CollapseRoot") != std::string::npos) site = s.name;
  ASSERT_FALSE(site.empty()) << "no flush site in CollapseRoot was reached";
  o.drop_site = site;
  o.stop_at_first_violation = true;
  auto reused = crash::Explore(*FindTree("circtree"), o);
  ASSERT_TRUE(reused.ok()) << reused.status().ToString();
  ASSERT_FALSE(reused->tickets.empty());
  EXPECT_NE(reused->tickets[0].scenario.find("refilled-after-merge"), std::string::npos) << reused->tickets[0].ToString();
  o.reclaim_each_op = false;
  auto kept = crash::Explore(*FindTree("circtree"), o);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->violations, 0u);
}

// circtree-paper (test-only, not in the registry): the paper's value
// identity and value-first pair writes.  The explorer must find its flaw
// (docs/trees/circtree.md, "Paper flaws").
TEST(CircTreeCrashTest, ExplorerFindsThePaperVariantsFlaw) {
  const TreeFactory paper{"circtree-paper",
                          "TEST ONLY: Circ-Tree with the paper's value identity and value-first pair writes",
                          kCapPersistent | kCapConcurrent | kCapInstantRestart | kCapAssumesLineOrder | kCapTestOnly,
                          kDefaultNodeSize,
                          kNodeSizeRule,
                          &RegistryEntry<&Create<uint64_t, true>>,
                          &RegistryEntry<&Recover<uint64_t, true>>,
                          nullptr,
                          nullptr};
  crash::ExploreOptions o;
  o.depth = 1;
  o.max_tickets = 50;
  o.continuation_ops = 0;
  o.tree_options.node_size = 512;
  auto r = crash::Explore(paper, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->violations, 0u);
  // Rule 1b commits a new pair whose value landed without its key (the
  // slot's key word is still 0 or the shifted neighbour's key): a key that
  // was never written appears, or two pairs share a key.
  bool wrong_key = false, duplicate_key = false;
  for (const auto& t : r->tickets) {
    wrong_key = wrong_key || t.failure.find("unexpected key 0") != std::string::npos;
    duplicate_key = duplicate_key || t.failure.find("keys not strictly increasing") != std::string::npos;
  }
  EXPECT_TRUE(wrong_key);
  EXPECT_TRUE(duplicate_key);
}

}  // namespace
}  // namespace pmtree::circtree
