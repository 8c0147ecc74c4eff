// SPDX-License-Identifier: Apache-2.0
//
// Design tests for fptree: splits, leaf removal, micro-log recovery, flush
// budgets, recovery round trips, concurrency, byte-string keys, bulk load,
// out of space.  The shared conformance suite (tests/) covers the model
// equivalence of every operation.

#include "trees/fptree/fptree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pmtree/counters.h"
#include "pmtree/pool.h"
#include "trees/fptree/layout.h"

namespace pmtree {
namespace {

using fptree::FpLeaf;
using fptree::FpMeta;

uint64_t Seed() {
  const char* e = getenv("PMTREE_SEED");
  uint64_t s = e ? strtoull(e, nullptr, 0) : 0x5eed0f9;
  printf("seed %llu (replay with PMTREE_SEED)\n", static_cast<unsigned long long>(s));
  return s;
}

// A pool file under /dev/shm that the fixture removes.
class FpTreeFile {
 public:
  FpTreeFile() {
    static std::atomic<int> n{0};
    path_ = "/dev/shm/pmtree_fptree_test_" + std::to_string(getpid()) + "_" + std::to_string(n++);
  }
  ~FpTreeFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Handle {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<Tree> tree;
  void Crash() {
    tree.reset();
    pool.reset();
  }
};

Handle CreateOn(const std::string& path, uint64_t size = 64 << 20, uint32_t node_size = 0) {
  Handle h;
  PoolOptions po;
  po.overwrite = true;
  auto p = Pool::Create(path, size, "fptree", 0, po);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  h.pool = std::move(*p);
  TreeOptions o;
  o.node_size = node_size;
  auto t = CreateFpTree(h.pool.get(), o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  h.tree = std::move(*t);
  return h;
}

Handle Reopen(const std::string& path) {
  Handle h;
  auto p = Pool::Open(path, "fptree");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  h.pool = std::move(*p);
  auto t = RecoverFpTree(h.pool.get(), TreeOptions{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  h.tree = std::move(*t);
  return h;
}

void ExpectContents(Tree* t, const std::map<uint64_t, uint64_t>& model) {
  std::vector<Tree::Entry> out(model.size() + 10);
  size_t n = t->Scan(0, std::span<Tree::Entry>(out));
  ASSERT_EQ(n, model.size());
  size_t i = 0;
  for (const auto& [k, v] : model) {
    EXPECT_EQ(out[i].first, k);
    EXPECT_EQ(out[i].second, v);
    uint64_t got = 0;
    EXPECT_TRUE(t->Lookup(k, &got));
    EXPECT_EQ(got, v);
    i++;
  }
}

FpMeta* Meta(Pool* p) { return p->At<FpMeta>(p->root(0)); }

TEST(FpTreeTest, SplitMovesUpperHalfToNewLeaf) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  for (uint64_t k = 1; k <= 12; k++) ASSERT_TRUE(*h.tree->Insert(k * 10, k));
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1u);
  ASSERT_TRUE(*h.tree->Insert(65, 99));  // the 13th key splits the full leaf
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 2u);
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  // Lower half (10..60 plus 65) stays, upper half (70..120) moved right.
  FpMeta* m = Meta(h.pool.get());
  const FpLeaf* left = h.pool->At<FpLeaf>(m->head);
  const FpLeaf* right = h.pool->At<FpLeaf>(left->next);
  EXPECT_EQ(__builtin_popcountll(left->bitmap), 7);
  EXPECT_EQ(__builtin_popcountll(right->bitmap), 6);
  for (uint64_t bm = right->bitmap; bm; bm &= bm - 1) EXPECT_GE(right->entries[__builtin_ctzll(bm)].key, 70u);
}

TEST(FpTreeTest, RandomWorkloadMatchesModelAndVerifies) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  std::mt19937_64 rng(Seed());
  std::map<uint64_t, uint64_t> model;
  for (int i = 0; i < 20000; i++) {
    uint64_t k = rng() % 5000, v = rng();
    switch (rng() % 4) {
      case 0:
      case 1: {
        bool fresh = model.emplace(k, v).second;
        ASSERT_EQ(*h.tree->Insert(k, v), fresh);
        break;
      }
      case 2: {
        bool had = model.erase(k) > 0;
        ASSERT_EQ(*h.tree->Remove(k), had);
        break;
      }
      case 3: {
        bool had = model.count(k) > 0;
        if (had) model[k] = v;
        ASSERT_EQ(*h.tree->Update(k, v), had);
        break;
      }
    }
    if (i % 4000 == 0) {
      ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
    }
  }
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  ExpectContents(h.tree.get(), model);
  std::vector<Tree::Entry> out(50);
  size_t n = h.tree->ScanRange(1000, 1100, std::span<Tree::Entry>(out));
  auto it = model.lower_bound(1000);
  for (size_t i = 0; i < n; i++, ++it) EXPECT_EQ(out[i].first, it->first);
  EXPECT_TRUE(it == model.end() || it->first > 1100 || n == out.size());
}

TEST(FpTreeTest, EmptiedLeafLeavesListAndIndex) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  for (uint64_t k = 0; k < 120; k++) ASSERT_TRUE(*h.tree->Insert(k, k));
  uint64_t before = h.tree->Stats().leaf_nodes;
  for (uint64_t k = 0; k < 120; k++)
    if (k < 40 || k >= 80) {
      ASSERT_TRUE(*h.tree->Remove(k));
    }
  EXPECT_LT(h.tree->Stats().leaf_nodes, before);
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  for (uint64_t k = 40; k < 80; k++) ASSERT_TRUE(*h.tree->Remove(k));
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1u);
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  ASSERT_TRUE(*h.tree->Insert(7, 7));
}

// Flush budgets of the design (docs/trees/fptree.md, "Flush budgets").
TEST(FpTreeTest, InsertWithoutSplitCostsThreeFlushesTwoFences) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  counters::BeginOperation();
  PersistCounters a = counters::Snapshot();
  ASSERT_TRUE(*h.tree->Insert(2, 2));
  PersistCounters d = counters::Snapshot() - a;
  EXPECT_EQ(d.flushes, 3u);  // entry line, fingerprint line; bitmap (header line again)
  EXPECT_EQ(d.fences, 2u);
  EXPECT_EQ(d.lines, 2u);
}

TEST(FpTreeTest, DeleteCostsOneFlushOneFence) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  ASSERT_TRUE(*h.tree->Insert(2, 2));
  counters::BeginOperation();
  PersistCounters a = counters::Snapshot();
  ASSERT_TRUE(*h.tree->Remove(2));
  PersistCounters d = counters::Snapshot() - a;
  EXPECT_EQ(d.flushes, 1u);
  EXPECT_EQ(d.fences, 1u);
  EXPECT_EQ(d.lines, 1u);
}

// A leaf split with its log, then the insert that caused it (U64 keys, 256 B
// leaves); docs/trees/fptree.md derives the count.
TEST(FpTreeTest, SplitWithInsertCostsTheLoggedBudget) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  for (uint64_t k = 1; k <= 12; k++) ASSERT_TRUE(*h.tree->Insert(k * 10, k));
  counters::BeginOperation();
  PersistCounters a = counters::Snapshot();
  ASSERT_TRUE(*h.tree->Insert(5, 5));
  PersistCounters d = counters::Snapshot() - a;
  printf("split + insert: %s\n", d.ToString().c_str());
  EXPECT_EQ(d.flushes, 11u);
  EXPECT_EQ(d.fences, 6u);
}

TEST(FpTreeTest, UpdateCostsOneFlushOneFence) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  counters::BeginOperation();
  PersistCounters a = counters::Snapshot();
  ASSERT_TRUE(*h.tree->Update(1, 5));
  PersistCounters d = counters::Snapshot() - a;
  EXPECT_EQ(d.flushes, 1u);
  EXPECT_EQ(d.fences, 1u);
}

TEST(FpTreeTest, CloseAndReopenKeepsEverything) {
  FpTreeFile f;
  std::map<uint64_t, uint64_t> model;
  {
    Handle h = CreateOn(f.path(), 64 << 20, 512);
    for (uint64_t k = 0; k < 3000; k++) {
      ASSERT_TRUE(*h.tree->Insert(k * 7, k));
      model[k * 7] = k;
    }
    ASSERT_TRUE(h.tree->Close().ok());
    h.tree.reset();
  }
  Handle h = Reopen(f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  ExpectContents(h.tree.get(), model);
}

TEST(FpTreeTest, CrashMidWorkloadKeepsAcknowledgedOperations) {
  FpTreeFile f;
  std::mt19937_64 rng(Seed());
  std::map<uint64_t, uint64_t> model;
  Handle h = CreateOn(f.path());
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < 3000; i++) {
      uint64_t k = rng() % 4000;
      if (rng() % 3 == 0) {
        ASSERT_EQ(*h.tree->Remove(k), model.erase(k) > 0);
      } else {
        ASSERT_EQ(*h.tree->Upsert(k, i), model.count(k) == 0);
        model[k] = i;
      }
    }
    h.Crash();  // destroy without Close
    h = Reopen(f.path());
    ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
    ExpectContents(h.tree.get(), model);
  }
}

// Recovery rule R1: a crash after the split log is persisted, before the old
// leaf changed, is finished by redoing the split.
TEST(FpTreeTest, RecoveryRedoesSplitFromLog) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 1; k <= 12; k++) {
    ASSERT_TRUE(*h.tree->Insert(k, k));
    model[k] = k;
  }
  FpMeta* m = Meta(h.pool.get());
  uint64_t nl = *h.pool->allocator().Allocate(256);
  h.pool->Store64(&m->split_log[3].leaf, m->head);
  h.pool->Store64(&m->split_log[3].other, nl);
  h.pool->Persist(&m->split_log[3], 16);
  h.Crash();
  h = Reopen(f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 2u);
  ExpectContents(h.tree.get(), model);
}

// Recovery rule R4: a crash after a delete emptied a leaf and the delete log
// was persisted, before the unlink, is finished by redoing the unlink.
TEST(FpTreeTest, RecoveryRedoesUnlinkFromDeleteLog) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 1; k <= 13; k++) {
    ASSERT_TRUE(*h.tree->Insert(k, k));
    model[k] = k;
  }
  FpMeta* m = Meta(h.pool.get());
  uint64_t l1 = m->head;
  FpLeaf* left = h.pool->At<FpLeaf>(l1);
  uint64_t l2 = left->next;
  FpLeaf* right = h.pool->At<FpLeaf>(l2);
  for (uint64_t bm = right->bitmap; bm; bm &= bm - 1) model.erase(right->entries[__builtin_ctzll(bm)].key);
  h.pool->Store64(&right->bitmap, 0);
  h.pool->Persist(&right->bitmap, 8);
  h.pool->Store64(&m->delete_log.leaf, l2);
  h.pool->Store64(&m->delete_log.other, l1);
  h.pool->Persist(&m->delete_log, 16);
  h.Crash();
  h = Reopen(f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1u);
  ExpectContents(h.tree.get(), model);
}

TEST(FpTreeTest, ConcurrentWritersAndReadersLeaveAValidTree) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  constexpr int kThreads = 4;
  constexpr uint64_t kPer = 3000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPer; i++) {
        uint64_t k = i * kThreads + t;
        ASSERT_TRUE(*h.tree->Insert(k, k + 1));
        uint64_t v;
        ASSERT_TRUE(h.tree->Lookup(k, &v));
        ASSERT_EQ(v, k + 1);
        if (i % 3 == 0) {
          ASSERT_TRUE(*h.tree->Remove(k));
        }
        if (i % 100 == 0) {
          std::vector<Tree::Entry> out(20);
          size_t n = h.tree->Scan(k, std::span<Tree::Entry>(out));
          for (size_t j = 1; j < n; j++) ASSERT_LT(out[j - 1].first, out[j].first);
        }
      }
    });
  }
  for (auto& th : ts) th.join();
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  std::map<uint64_t, uint64_t> model;
  for (int t = 0; t < kThreads; t++)
    for (uint64_t i = 0; i < kPer; i++)
      if (i % 3 != 0) model[i * kThreads + t] = i * kThreads + t + 1;
  ExpectContents(h.tree.get(), model);
}

TEST(FpTreeTest, ByteStringKeysWorkAndRecover) {
  FpTreeFile f;
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(Seed());
  {
    PoolOptions po;
    po.overwrite = true;
    auto p = Pool::Create(f.path(), 64 << 20, "fptree", 1, po);
    ASSERT_TRUE(p.ok());
    auto t = CreateFpTreeBytes(p->get(), TreeOptions{});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto& tree = *t;
    for (int i = 0; i < 3000; i++) {
      std::string k = "key/" + std::string(rng() % 5, 'x') + std::to_string(rng() % 2000);
      if (rng() % 4 == 0) {
        ASSERT_EQ(*tree->Remove(k), model.erase(k) > 0);
      } else {
        ASSERT_EQ(*tree->Upsert(k, i), model.count(k) == 0);
        model[k] = i;
      }
    }
    ASSERT_TRUE(tree->Verify().ok()) << tree->Verify().ToString();
    EXPECT_FALSE(tree->Insert(std::string(kMaxKeyBytes + 1, 'a'), 1).ok());
    // Crash: destroy without Close.
  }
  auto p = Pool::Open(f.path(), "fptree");
  ASSERT_TRUE(p.ok());
  auto t = RecoverFpTreeBytes(p->get(), TreeOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Verify().ok()) << (*t)->Verify().ToString();
  std::vector<BytesTree::Entry> out(model.size() + 1);
  size_t n = (*t)->Scan("", std::span<BytesTree::Entry>(out));
  ASSERT_EQ(n, model.size());
  size_t i = 0;
  for (const auto& [k, v] : model) {
    EXPECT_EQ(out[i].first, k);
    EXPECT_EQ(out[i].second, v);
    i++;
  }
  // A u64 recover on a byte-key pool is refused.
  EXPECT_FALSE(RecoverFpTree(p->get(), TreeOptions{}).ok());
}

TEST(FpTreeTest, BulkLoadHonoursFillFactor) {
  FpTreeFile f;
  Handle h = CreateOn(f.path());
  std::vector<Tree::InputEntry> in;
  for (uint64_t k = 0; k < 8000; k++) in.emplace_back(k * 2, k);
  ASSERT_TRUE(h.tree->BulkLoad(in, 0.7).ok());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1000u);  // 0.7 * 12 slots -> 8 entries per leaf
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  EXPECT_FALSE(h.tree->BulkLoad(in, 1.0).ok());  // not empty any more
  h.Crash();
  h = Reopen(f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  EXPECT_EQ(h.tree->Stats().entries, 8001u);
}

TEST(FpTreeTest, InvalidOptionsAreRejected) {
  auto p = Pool::CreateAnonymous(8 << 20, "fptree", 0);
  ASSERT_TRUE(p.ok());
  TreeOptions o;
  o.node_size = 300;
  EXPECT_EQ(CreateFpTree(p->get(), o).status().code(), Status::Code::kInvalidArgument);
  o.node_size = 0;
  o.extra["bogus"] = "1";
  EXPECT_EQ(CreateFpTree(p->get(), o).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RecoverFpTree(p->get(), TreeOptions{}).status().code(), Status::Code::kNotFound);
}

TEST(FpTreeTest, OutOfSpaceLeavesTreeUsable) {
  auto p = Pool::CreateAnonymous(kMinPoolSize, "fptree", 0);
  ASSERT_TRUE(p.ok());
  auto t = CreateFpTree(p->get(), TreeOptions{});
  ASSERT_TRUE(t.ok());
  Tree& tree = **t;
  uint64_t k = 0;
  for (;; k++) {
    auto r = tree.Insert(k, k);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().IsOutOfSpace()) << r.status().ToString();
      break;
    }
  }
  ASSERT_TRUE(tree.Verify().ok()) << tree.Verify().ToString();
  uint64_t v;
  EXPECT_TRUE(tree.Lookup(0, &v));
  EXPECT_FALSE(tree.Lookup(k, &v));
  for (uint64_t i = 0; i < k; i += 2) ASSERT_TRUE(*tree.Remove(i));
  ASSERT_TRUE(tree.Verify().ok()) << tree.Verify().ToString();
  ASSERT_TRUE(*tree.Insert(k, k));
}

}  // namespace
}  // namespace pmtree
