// SPDX-License-Identifier: Apache-2.0
//
// Test helpers shared by the two designs over BlinkFrame (wotree_test.cc and
// sortedtree_test.cc): a node-size option, the persists of one operation,
// the default run's crash exploration over a table of cases, and the leaf
// count's tests (F9, issue 17), which both designs run.

#ifndef PMTREE_TREES_WOTREE_BLINK_FRAME_TEST_H_
#define PMTREE_TREES_WOTREE_BLINK_FRAME_TEST_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "crash/explorer.h"
#include "pm/pool_impl.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"
#include "trees/wotree/layout.h"

namespace pmtree::blink_frame_test {

inline TreeOptions NodeSize(uint32_t n) {
  TreeOptions o;
  o.node_size = n;
  return o;
}

// The flushes and fences `op` issues (with a counting pool).
template <class F>
PersistCounters Measure(F&& op) {
  counters::BeginOperation();
  const PersistCounters before = counters::Snapshot();
  op();
  return counters::Snapshot() - before;
}

struct CrashCase {
  uint32_t size;  // node size in bytes
  crash::Mode mode;
  crash::Workload workload;
  uint32_t depth;  // operations per sequence (small workload)
};

// Explores each case (random workloads: `ops` operations from `seed`) and
// expects no violation; check(case, report) adds a design's own expectations.
template <class Check>
void ExpectNoCrashViolations(const TreeFactory& tree, std::initializer_list<CrashCase> cases, uint64_t seed,
                             uint64_t ops, Check&& check) {
  for (const CrashCase& c : cases) {
    crash::ExploreOptions o;
    o.mode = c.mode;
    o.workload = c.workload;
    o.depth = c.depth;
    o.ops = ops;
    o.seed = seed;
    o.tree_options.node_size = c.size;
    o.max_tickets = 5;
    auto r = crash::Explore(tree, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    crash::PrintReport(*r, stdout);
    for (const auto& site : r->sites)
      if (!site.covered) std::printf("  uncovered: %s@%s\n", site.name.c_str(), site.kind.c_str());
    for (const auto& tk : r->tickets) ADD_FAILURE() << tk.ToString();
    EXPECT_EQ(r->violations, 0u);
    check(c, *r);
  }
}

// ---- the leaf count (F9, issue 17) ----------------------------------------------------

inline wotree::Meta* MetaOf(Pool& pool) {
  PoolImpl& p = PoolImpl::Of(pool);
  return p.At<wotree::Meta>(p.root(0));
}

// The leaves of the tree in `pool`, in chain order (level 0 from the
// leftmost leaf through `next`).
inline std::vector<uint64_t> LeafChain(Pool& pool) {
  PoolImpl& p = PoolImpl::Of(pool);
  uint64_t off = MetaOf(pool)->root;
  while (p.At<wotree::NodePrefix>(off)->level > 0) off = p.At<wotree::InnerNode>(off)->leftmost;
  std::vector<uint64_t> chain;
  for (; off != 0; off = p.At<wotree::NodePrefix>(off)->next) chain.push_back(off);
  return chain;
}

inline std::string ScratchPool(const char* what) {
  return "/dev/shm/pmtree_blink_" + std::string(what) + "_" + std::to_string(getpid());
}

// A crashed pool whose leaf chain is cut (one zeroed `next`: the last two
// leaves lost) is refused with Corruption naming F9, and refused again on
// the next open: a detected loss stays detected (recovery repairs nothing
// before the check).  Before the cut the count is exact after the splits,
// after a clean close and reopen, and after a bulk load.
inline void ExpectCrashRecoveryRefusesACutLeafChain(const TreeFactory& tree) {
  const std::string path = ScratchPool("cut");
  {
    auto h = CreateTree(tree, path, 64ull << 20, NodeSize(256));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 0; k < 3000; k++) ASSERT_TRUE(h->tree->Insert(k * 7919 % 3001, k).value());
    EXPECT_EQ(MetaOf(*h->pool)->leaves, LeafChain(*h->pool).size()) << "each split counted its leaf";
    ASSERT_TRUE(h->tree->Close().ok());
  }
  {
    auto h = OpenTree(path, &tree, {});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    const std::vector<uint64_t> chain = LeafChain(*h->pool);
    ASSERT_GT(chain.size(), 100u);
    EXPECT_EQ(MetaOf(*h->pool)->leaves, chain.size()) << "Close stored the exact count";
    ASSERT_TRUE(h->tree->Verify().ok());
    PoolImpl& p = PoolImpl::Of(*h->pool);
    uint64_t* cut = &p.At<wotree::NodePrefix>(chain[chain.size() - 3])->next;
    p.Store64(cut, 0);
    p.Persist(cut, 8);
    // Destroyed without Close: a crash.
  }
  for (int again = 0; again < 2; again++) {
    auto h = OpenTree(path, &tree, {});
    ASSERT_FALSE(h.ok()) << "open " << again << ": a cut leaf chain was accepted";
    EXPECT_EQ(h.status().code(), Status::Code::kCorruption) << h.status().ToString();
    EXPECT_NE(h.status().ToString().find("leaves unreachable"), std::string::npos) << h.status().ToString();
    EXPECT_NE(h.status().ToString().find("F9"), std::string::npos) << h.status().ToString();
  }
  unlink(path.c_str());
  // A bulk load stores the exact count after its commit.
  auto b = CreateTree(tree, "", 64ull << 20, NodeSize(256));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  std::vector<Tree::InputEntry> in;
  for (uint64_t k = 0; k < 2000; k++) in.emplace_back(k * 3, k);
  ASSERT_TRUE(b->tree->BulkLoad(in, 0.7).ok());
  EXPECT_EQ(MetaOf(*b->pool)->leaves, LeafChain(*b->pool).size());
  EXPECT_TRUE(b->tree->Verify().ok()) << b->tree->Verify().ToString();
}

// A pool of format version 1 (before the leaf count, whose word was reserved
// and 0) is Incompatible, with a message that says why.
inline void ExpectAPoolOfTheFormatBeforeTheLeafCountIsIncompatible(const TreeFactory& tree) {
  const std::string path = ScratchPool("v1");
  {
    auto h = CreateTree(tree, path, 16ull << 20, NodeSize(256));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(h->tree->Insert(1, 1).value());
    wotree::Meta* m = MetaOf(*h->pool);
    ASSERT_EQ(m->version, wotree::kFormatVersion);
    PoolImpl& p = PoolImpl::Of(*h->pool);
    const uint64_t word = (uint64_t{m->node_size} << 32) | 1;  // version 1, the same node size
    p.Store64(&m->version, word);
    p.Store64(&m->leaves, 0);
    p.Persist(m, 64);
    ASSERT_TRUE(h->tree->Close().ok());
  }
  auto h = OpenTree(path, &tree, {});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Status::Code::kIncompatible) << h.status().ToString();
  EXPECT_NE(h.status().ToString().find("predates the leaf count"), std::string::npos) << h.status().ToString();
  unlink(path.c_str());
}

struct SplitCost {
  PersistCounters root;  // the first leaf split, which also grows a root
  PersistCounters leaf;  // a later leaf split whose separator goes into the root
};

// The cost of leaf splits at 4 lines (ascending keys, so every split is at
// the right end and its separator an append to the root).
inline SplitCost MeasureLeafSplits(const TreeFactory& tree) {
  PoolOptions po;
  po.backend = BackendKind::kHardware;
  po.use_env = false;
  po.counting = true;
  SplitCost out;
  auto h = CreateTree(tree, "", 16ull << 20, NodeSize(256), po);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  if (!h.ok()) return out;
  Tree& t = *h->tree;
  for (uint64_t k = 1;; k++) {
    const uint64_t before = t.Stats().leaf_nodes;
    PersistCounters c = Measure([&] { EXPECT_TRUE(t.Insert(k * 10, k).value()); });
    const uint64_t after = t.Stats().leaf_nodes;
    if (after == before) continue;
    EXPECT_EQ(MetaOf(*h->pool)->leaves, after);
    if (after == 2) out.root = c;
    if (after == 3) {
      out.leaf = c;
      break;
    }
  }
  std::printf("%s at 256 B: leaf + root split %llu flushes, %llu fences, %llu lines; leaf split %llu, %llu, %llu\n",
              std::string(t.name()).c_str(), static_cast<unsigned long long>(out.root.flushes),
              static_cast<unsigned long long>(out.root.fences), static_cast<unsigned long long>(out.root.lines),
              static_cast<unsigned long long>(out.leaf.flushes), static_cast<unsigned long long>(out.leaf.fences),
              static_cast<unsigned long long>(out.leaf.lines));
  EXPECT_TRUE(t.Verify().ok());
  return out;
}

}  // namespace pmtree::blink_frame_test

#endif  // PMTREE_TREES_WOTREE_BLINK_FRAME_TEST_H_
