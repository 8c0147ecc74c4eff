// SPDX-License-Identifier: Apache-2.0
//
// Design tests shared by the leaf-list designs (fptree, wbtree; the code
// they test is trees/common/leaf_list_tree.h), written once as the
// value-parameterised suite LeafListTreeTest.  A design's test file includes
// this header, puts its tests in namespace pmtree::leaf_list_test (so the
// helpers need no using-declarations), describes itself in a LeafListDesign
// and instantiates the suite with it:
//
//   INSTANTIATE_TEST_SUITE_P(FpTree, LeafListTreeTest, testing::Values(kFpDesign),
//                            LeafListDesignName);
//
// so each design's binary runs every shared test on that design
// ("FpTree/LeafListTreeTest.CloseAndReopenKeepsEverything/fptree").  The
// helpers (pool files, Handle, CreateOn, Reopen, ExpectContents) serve the
// design's own tests too.  Include it in one test source per binary only.

#ifndef PMTREE_TREES_COMMON_LEAF_LIST_TREE_TEST_H_
#define PMTREE_TREES_COMMON_LEAF_LIST_TREE_TEST_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/counters.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"
#include "trees/common/leaf_list_layout.h"

namespace pmtree {
namespace leaf_list_test {

// What the shared tests need to know about a design.
struct LeafListDesign {
  const char* name;  // registry name, pool layout name, test parameter name
  Result<std::unique_ptr<Tree>> (*create)(PoolImpl*, const TreeOptions&);
  Result<std::unique_ptr<Tree>> (*recover)(PoolImpl*, const TreeOptions&);
  Result<std::unique_ptr<BytesTree>> (*create_bytes)(PoolImpl*, const TreeOptions&);
  Result<std::unique_ptr<BytesTree>> (*recover_bytes)(PoolImpl*, const TreeOptions&);
  int capacity_256;            // entries of a 256 B leaf
  uint64_t bulk_leaves_at_70;  // leaves of an 8000-key bulk load at fill 0.7, 256 B leaves
  // The keys of the valid entries of the leaf at `leaf_off` (U64 keys).
  std::vector<uint64_t> (*leaf_keys)(const PoolImpl*, uint64_t leaf_off);
  // Budget of a split plus the insert that caused it (U64 keys, 256 B leaves);
  // the design's doc derives the counts.
  uint64_t split_flushes;
  uint64_t split_fences;
  // Crafts the persistent state of a crash in the middle of splitting the
  // full first leaf into the allocated leaf `new_leaf`, as the design's split
  // leaves it just after its split log is persisted and before the old leaf
  // changes (the new leaf's contents, if the design writes them first, and
  // the split log).
  void (*craft_split_crash)(PoolImpl*, uint64_t new_leaf);
  // The leaf magic (docs/pool_format.md): the byte offset of its 8-byte word
  // in a leaf of `node_size` bytes, its bits in that word, and the meta magic
  // of the format before it.
  uint32_t (*magic_word)(uint32_t node_size);
  uint64_t magic_mask;
  uint64_t older_meta_magic;
};

inline std::string LeafListDesignName(const testing::TestParamInfo<LeafListDesign>& info) {
  return info.param.name;
}

inline uint64_t Seed() {
  const char* e = getenv("PMTREE_SEED");
  uint64_t s = e ? strtoull(e, nullptr, 0) : 0x5eed0f9;
  printf("seed %llu (replay with PMTREE_SEED)\n", static_cast<unsigned long long>(s));
  return s;
}

// A pool file under /dev/shm that the fixture removes.
class PoolFile {
 public:
  explicit PoolFile(const LeafListDesign& d) {
    static std::atomic<int> n{0};
    path_ = std::string("/dev/shm/pmtree_") + d.name + "_test_" + std::to_string(getpid()) + "_" +
            std::to_string(n++);
  }
  ~PoolFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Handle {
  std::unique_ptr<PoolImpl> pool;
  std::unique_ptr<Tree> tree;
  void Crash() {
    tree.reset();
    pool.reset();
  }
};

inline Handle CreateOn(const LeafListDesign& d, const std::string& path, uint64_t size = 64 << 20,
                       uint32_t node_size = 0) {
  Handle h;
  PoolOptions po;
  po.overwrite = true;
  auto p = PoolImpl::Create(path, size, d.name, 0, po);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  h.pool = std::move(*p);
  TreeOptions o;
  o.node_size = node_size;
  auto t = d.create(h.pool.get(), o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  h.tree = std::move(*t);
  return h;
}

inline Handle Reopen(const LeafListDesign& d, const std::string& path) {
  Handle h;
  auto p = PoolImpl::Open(path, d.name);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  h.pool = std::move(*p);
  auto t = d.recover(h.pool.get(), TreeOptions{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  h.tree = std::move(*t);
  return h;
}

inline void ExpectContents(Tree* t, const std::map<uint64_t, uint64_t>& model) {
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

inline LeafListMeta* Meta(PoolImpl* p) { return p->At<LeafListMeta>(p->root(0)); }

// The persistence cost of `op`, run as one operation on the counting backend.
template <class Op>
PersistCounters CostOf(Op&& op) {
  counters::BeginOperation();
  PersistCounters a = counters::Snapshot();
  op();
  return counters::Snapshot() - a;
}

class LeafListTreeTest : public testing::TestWithParam<LeafListDesign> {
 protected:
  const LeafListDesign& design() const { return GetParam(); }
};

TEST_P(LeafListTreeTest, RandomWorkloadMatchesModelAndVerifies) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
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
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
  std::vector<Tree::Entry> out(50);
  size_t n = h.tree->ScanRange(1000, 1100, std::span<Tree::Entry>(out));
  auto it = model.lower_bound(1000);
  for (size_t i = 0; i < n; i++, ++it) EXPECT_EQ(out[i].first, it->first);
  EXPECT_TRUE(it == model.end() || it->first > 1100 || n == out.size());
}

TEST_P(LeafListTreeTest, EmptiedLeafLeavesListAndIndex) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
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

// Flush budgets both designs share (docs/trees/fptree.md and
// docs/trees/wbtree.md, "Flush budgets"); the insert and split budgets differ
// and are each design's own tests.
TEST_P(LeafListTreeTest, DeleteCostsOneFlushOneFence) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  ASSERT_TRUE(*h.tree->Insert(2, 2));
  PersistCounters d = CostOf([&] { ASSERT_TRUE(*h.tree->Remove(2)); });
  EXPECT_EQ(d.flushes, 1u);
  EXPECT_EQ(d.fences, 1u);
  EXPECT_EQ(d.lines, 1u);
  uint64_t v;
  EXPECT_TRUE(h.tree->Lookup(1, &v));  // wbtree: found by scanning, the slot array is invalid
  EXPECT_FALSE(h.tree->Lookup(2, &v));
}

TEST_P(LeafListTreeTest, UpdateCostsOneFlushOneFence) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  PersistCounters d = CostOf([&] { ASSERT_TRUE(*h.tree->Update(1, 5)); });
  EXPECT_EQ(d.flushes, 1u);
  EXPECT_EQ(d.fences, 1u);
}

TEST_P(LeafListTreeTest, SplitWithInsertCostsTheLoggedBudget) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  for (uint64_t k = 1; k <= static_cast<uint64_t>(design().capacity_256); k++)
    ASSERT_TRUE(*h.tree->Insert(k * 10, k));
  PersistCounters d = CostOf([&] { ASSERT_TRUE(*h.tree->Insert(5, 5)); });
  printf("split + insert: %s\n", d.ToString().c_str());
  EXPECT_EQ(d.flushes, design().split_flushes);
  EXPECT_EQ(d.fences, design().split_fences);
}

TEST_P(LeafListTreeTest, CloseAndReopenKeepsEverything) {
  PoolFile f(design());
  std::map<uint64_t, uint64_t> model;
  {
    Handle h = CreateOn(design(), f.path(), 64 << 20, 512);
    for (uint64_t k = 0; k < 3000; k++) {
      ASSERT_TRUE(*h.tree->Insert(k * 7, k));
      model[k * 7] = k;
    }
    ASSERT_TRUE(h.tree->Close().ok());
    h.tree.reset();
  }
  Handle h = Reopen(design(), f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
}

inline double StatExtra(Tree* t, const std::string& name) {
  for (const auto& [k, v] : t->Stats().extra)
    if (k == name) return v;
  ADD_FAILURE() << "no Stats().extra entry " << name;
  return -1;
}

// Instant restart (R0): a clean close saves the index's routes as an image;
// the next open builds the index from it without reading the leaves, frees
// the image, and the tree is whole.  After a crash, or with a damaged image,
// the walk runs instead (and reclaims the image); a cut leaf list after a
// clean close disagrees with the image and is reported by the walk.
TEST_P(LeafListTreeTest, CleanCloseRestartsFromTheImageAndFallsBackToTheWalk) {
  PoolFile f(design());
  std::map<uint64_t, uint64_t> model;
  {
    Handle h = CreateOn(design(), f.path(), 64 << 20, 256);
    for (uint64_t k = 0; k < 5000; k++) {
      ASSERT_TRUE(*h.tree->Insert(k * 13 % 5003, k));
      model[k * 13 % 5003] = k;
    }
    ASSERT_TRUE(h.tree->Close().ok());
    ASSERT_TRUE(h.tree->Close().ok()) << "a second Close does nothing";
  }
  {
    Handle h = Reopen(design(), f.path());
    EXPECT_EQ(StatExtra(h.tree.get(), "instant_restart"), 1);
    EXPECT_EQ(Meta(h.pool.get())->restart, 0u) << "the image is consumed";
    ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();  // bytes in use == reached: image freed
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
    for (uint64_t k = 6000; k < 7000; k++) {  // splits on the rebuilt index
      ASSERT_TRUE(*h.tree->Insert(k, k));
      model[k] = k;
    }
    ASSERT_TRUE(h.tree->Close().ok());
  }
  {
    // A damaged image is not used: the walk rebuilds everything.
    auto p = PoolImpl::Open(f.path(), design().name);
    ASSERT_TRUE(p.ok());
    uint64_t* img = (*p)->At<uint64_t>(Meta(p->get())->restart);
    img[0] ^= 1;  // magic
    ASSERT_TRUE((*p)->Close().ok());  // a pool-only close keeps the tree's clean image state
  }
  {
    Handle h = Reopen(design(), f.path());
    EXPECT_EQ(StatExtra(h.tree.get(), "instant_restart"), 0);
    ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
    h.Crash();
  }
  {
    Handle h = Reopen(design(), f.path());
    EXPECT_EQ(StatExtra(h.tree.get(), "instant_restart"), 0) << "after a crash the walk runs";
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
    ASSERT_TRUE(h.tree->Close().ok());
  }
  {
    // A cut leaf list after a clean close: the image names leaves the list
    // no longer reaches; the walk's saved-bytes check refuses the pool.
    auto p = PoolImpl::Open(f.path(), design().name);
    ASSERT_TRUE(p.ok());
    LeafListMeta* m = Meta(p->get());
    (*p)->Store64(&(*p)->At<uint64_t>(m->head)[1], 0);  // the first leaf's next (kLeafListNextOffset)
    ASSERT_TRUE((*p)->Close().ok());
    auto p2 = PoolImpl::Open(f.path(), design().name);
    ASSERT_TRUE(p2.ok());
    auto t = design().recover(p2->get(), TreeOptions{});
    EXPECT_EQ(t.status().code(), Status::Code::kCorruption) << t.status().ToString();
  }
}

TEST_P(LeafListTreeTest, CrashMidWorkloadKeepsAcknowledgedOperations) {
  PoolFile f(design());
  std::mt19937_64 rng(Seed());
  std::map<uint64_t, uint64_t> model;
  Handle h = CreateOn(design(), f.path());
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
    h = Reopen(design(), f.path());
    ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
  }
}

// Recovery rule R1 of both designs: a crash after the split log is persisted
// (fptree: before the new leaf is written; wbtree: after it), before the old
// leaf changed, is finished by redoing the split.
TEST_P(LeafListTreeTest, RecoveryRedoesSplitFromLog) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 1; k <= static_cast<uint64_t>(design().capacity_256); k++) {
    ASSERT_TRUE(*h.tree->Insert(k, k));
    model[k] = k;
  }
  uint64_t nl = *h.pool->allocator().Allocate(256);
  design().craft_split_crash(h.pool.get(), nl);
  h.Crash();
  h = Reopen(design(), f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 2u);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
}

// The shared delete-log recovery step (fptree's rule R4, wbtree's R3): a
// crash after a delete emptied a leaf and the delete log was persisted,
// before the unlink, is finished by redoing the unlink.
TEST_P(LeafListTreeTest, RecoveryRedoesUnlinkFromDeleteLog) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  std::map<uint64_t, uint64_t> model;
  for (uint64_t k = 1; k <= static_cast<uint64_t>(design().capacity_256) + 1; k++) {
    ASSERT_TRUE(*h.tree->Insert(k, k));
    model[k] = k;
  }
  LeafListMeta* m = Meta(h.pool.get());
  uint64_t l1 = m->head;
  uint64_t l2 = h.pool->Load64(h.pool->At<uint64_t>(l1 + kLeafListNextOffset));
  for (uint64_t k : design().leaf_keys(h.pool.get(), l2)) model.erase(k);
  uint64_t* right_bitmap = h.pool->At<uint64_t>(l2 + kLeafListBitmapOffset);
  h.pool->Store64(right_bitmap, 0);
  h.pool->Persist(right_bitmap, 8);
  h.pool->Store64(&m->delete_log.leaf, l2);
  h.pool->Store64(&m->delete_log.other, l1);
  h.pool->Persist(&m->delete_log, 16);
  h.Crash();
  h = Reopen(design(), f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1u);
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
}

TEST_P(LeafListTreeTest, ConcurrentWritersAndReadersLeaveAValidTree) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
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
  ASSERT_NO_FATAL_FAILURE(ExpectContents(h.tree.get(), model));
}

TEST_P(LeafListTreeTest, ByteStringKeysWorkAndRecover) {
  PoolFile f(design());
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(Seed());
  {
    PoolOptions po;
    po.overwrite = true;
    auto p = PoolImpl::Create(f.path(), 64 << 20, design().name, 1, po);
    ASSERT_TRUE(p.ok());
    auto t = design().create_bytes(p->get(), TreeOptions{});
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
  auto p = PoolImpl::Open(f.path(), design().name);
  ASSERT_TRUE(p.ok());
  auto t = design().recover_bytes(p->get(), TreeOptions{});
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
  EXPECT_FALSE(design().recover(p->get(), TreeOptions{}).ok());
}

TEST_P(LeafListTreeTest, BulkLoadHonoursFillFactor) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  std::vector<Tree::InputEntry> in;
  for (uint64_t k = 0; k < 8000; k++) in.emplace_back(k * 2, k);
  ASSERT_TRUE(h.tree->BulkLoad(in, 0.7).ok());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  // floor(0.7 * capacity) entries per leaf: fptree 8 of 12, wbtree 9 of 14.
  EXPECT_EQ(h.tree->Stats().leaf_nodes, design().bulk_leaves_at_70);
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  EXPECT_FALSE(h.tree->BulkLoad(in, 1.0).ok());  // not empty any more
  h.Crash();
  h = Reopen(design(), f.path());
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
  EXPECT_EQ(h.tree->Stats().entries, 8001u);
}

TEST_P(LeafListTreeTest, InvalidOptionsAreRejected) {
  auto p = PoolImpl::CreateAnonymous(8 << 20, design().name, 0);
  ASSERT_TRUE(p.ok());
  TreeOptions o;
  o.node_size = 300;
  EXPECT_EQ(design().create(p->get(), o).status().code(), Status::Code::kInvalidArgument);
  o.node_size = 0;
  o.extra["bogus"] = "1";
  EXPECT_EQ(design().create(p->get(), o).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(design().recover(p->get(), TreeOptions{}).status().code(), Status::Code::kNotFound);
}

TEST_P(LeafListTreeTest, OutOfSpaceLeavesTreeUsable) {
  auto p = PoolImpl::CreateAnonymous(kMinPoolSize, design().name, 0);
  ASSERT_TRUE(p.ok());
  auto t = design().create(p->get(), TreeOptions{});
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

// ---- the leaf magic (docs/pool_format.md, "Detecting a loss after a crash") ----------------

inline uint64_t NextLeaf(const PoolImpl* p, uint64_t leaf) { return p->Load64(p->At<char>(leaf) + kLeafListNextOffset); }

// The leaf magic's bits of the leaf at `leaf` (0: none).
inline uint64_t MagicBitsOf(const LeafListDesign& d, const PoolImpl* p, uint64_t leaf, uint32_t node_size) {
  return p->Load64(p->At<char>(leaf) + d.magic_word(node_size)) & d.magic_mask;
}

// The delete that empties a leaf (not the last) also unlinks it: the
// delete's bitmap write (1 flush, 1 fence), the delete log with the cleared
// leaf magic (2 flushes, 1 fence: the magic's line is the one extra flush the
// leaf magic costs), the unlink (1, 1) and the log clear (1, 1).
TEST_P(LeafListTreeTest, DeleteThatUnlinksALeafClearsItsMagic) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  const uint64_t cap = static_cast<uint64_t>(design().capacity_256);
  for (uint64_t k = 1; k <= cap + 1; k++) ASSERT_TRUE(*h.tree->Insert(k * 10, k));  // two leaves
  const PoolImpl* p = h.pool.get();
  const uint64_t left = Meta(h.pool.get())->head, right = NextLeaf(p, left);
  ASSERT_NE(right, 0u);
  EXPECT_NE(MagicBitsOf(design(), p, left, 256), 0u);
  EXPECT_NE(MagicBitsOf(design(), p, right, 256), 0u);  // the split's new leaf has it too
  std::vector<uint64_t> keys = design().leaf_keys(p, right);
  std::sort(keys.begin(), keys.end());
  for (size_t i = 0; i + 1 < keys.size(); i++) ASSERT_TRUE(*h.tree->Remove(keys[i]));
  ASSERT_EQ(h.tree->Stats().leaf_nodes, 2u);
  PersistCounters d = CostOf([&] { ASSERT_TRUE(*h.tree->Remove(keys.back())); });
  EXPECT_EQ(h.tree->Stats().leaf_nodes, 1u);
  EXPECT_EQ(MagicBitsOf(design(), p, right, 256), 0u);
  EXPECT_NE(MagicBitsOf(design(), p, left, 256), 0u);
  EXPECT_EQ(d.flushes, 5u);
  EXPECT_EQ(d.fences, 4u);
  ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
}

// The leaf limit follows the leaves past the first MiB, and recovery after a
// crash finds a leaf cut off up there (issue 17): without the limit raised,
// the scan would stop at the first MiB and the loss would be absorbed.  Every
// node size (the magic's word differs between them).
TEST_P(LeafListTreeTest, CrashRecoveryFindsALeafCutOffPastTheFirstMiB) {
  for (uint32_t node_size : {256u, 512u, 1024u}) {
    SCOPED_TRACE("node size " + std::to_string(node_size));
    PoolFile f(design());
    Handle h = CreateOn(design(), f.path(), 64 << 20, node_size);
    // Ascending keys: each split adds the new leaf at the top of the heap.
    const uint64_t keys = 15000 * node_size / 64;
    for (uint64_t k = 0; k < keys; k++) ASSERT_TRUE(*h.tree->Insert(k, k));
    PoolImpl* p = h.pool.get();
    const LeafListMeta* m = Meta(p);
    uint64_t prev = 0, last = 0, max_end = 0;
    for (uint64_t off = m->head; off != 0; off = NextLeaf(p, off)) {
      EXPECT_NE(MagicBitsOf(design(), p, off, node_size), 0u) << off;
      prev = last;
      last = off;
      max_end = std::max<uint64_t>(max_end, off + node_size);
    }
    ASSERT_GT(max_end, 2u << 20);
    EXPECT_GE(m->leaf_limit, max_end);
    EXPECT_LE(m->leaf_limit, max_end + (1u << 20));
    // Cut the list before its last leaf, then crash.
    uint64_t* cut = p->At<uint64_t>(prev + kLeafListNextOffset);
    p->Store64(cut, 0);
    p->Persist(cut, 8);
    h.Crash();
    auto reopened = PoolImpl::Open(f.path(), design().name);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    auto t = design().recover(reopened->get(), TreeOptions{});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), Status::Code::kCorruption);
    EXPECT_NE(t.status().ToString().find("unreachable"), std::string::npos) << t.status().ToString();
  }
}

// The meta magic is the format version: a pool of the format before the
// leaf magic is Incompatible, not opened with freed leaves whose magic was
// never cleared.
TEST_P(LeafListTreeTest, APoolOfTheFormatBeforeTheLeafMagicIsIncompatible) {
  PoolFile f(design());
  Handle h = CreateOn(design(), f.path());
  ASSERT_TRUE(*h.tree->Insert(1, 1));
  LeafListMeta* m = Meta(h.pool.get());
  h.pool->Store64(&m->magic, design().older_meta_magic);
  h.pool->Persist(&m->magic, 8);
  h.Crash();
  auto p = PoolImpl::Open(f.path(), design().name);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto t = design().recover(p->get(), TreeOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kIncompatible) << t.status().ToString();
}

}  // namespace leaf_list_test
}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_LEAF_LIST_TREE_TEST_H_
