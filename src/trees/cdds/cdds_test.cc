// SPDX-License-Identifier: Apache-2.0
//
// CDDS B-Tree design tests: versioned entries and dead-entry reuse, copy-on-
// write splits and merges against the §4.4.6 bounds, garbage collection
// (reclaiming entries and nodes, respecting snapshots), snapshots against a
// model that keeps every version (also under a concurrent writer and
// collector), instant restart, and the crash explorer (zero violations in
// ADR and eADR, small and random workloads, site coverage, crashes during GC
// and recovery, a negative control), and the node magic (N1-N4 in
// cdds_gc.cc: a crashed pool whose damage cut a subtree off is refused, GC
// clears the magic of what it frees, the format before it is Incompatible).
//
// Randomness is seeded; failures print the seed and PMTREE_SEED replays it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "crash/explorer.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"
#include "testutil.h"
#include "trees/cdds/cdds.h"
#include "trees/cdds/layout.h"
#include "trees/common/upcast.h"

namespace pmtree {
namespace {

using testutil::Seed;

double Extra(const TreeStats& st, const std::string& key) {
  for (const auto& [k, v] : st.extra)
    if (k == key) return v;
  ADD_FAILURE() << "no Stats().extra entry " << key;
  return -1;
}

template <KeyPolicy KP>
struct Fixture {
  std::unique_ptr<PoolImpl> pool;
  std::unique_ptr<CddsTree<KP>> tree;
};

template <KeyPolicy KP = U64Keys>
Fixture<KP> Make(uint32_t gc_every = 8, uint32_t node_size = 512, uint64_t pool_size = 64ull << 20,
                 bool counting = false) {
  PoolOptions po;
  // The flush budgets count the hardware backend's flushes and fences.
  po.backend = counting ? BackendKind::kHardware : BackendKind::kDram;
  po.counting = counting;
  po.use_env = false;
  Fixture<KP> f;
  auto p = PoolImpl::CreateAnonymous(pool_size, "cdds", static_cast<uint64_t>(KP::kKind), po);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  f.pool = std::move(*p);
  TreeOptions o;
  o.node_size = node_size;
  o.key_kind = KP::kKind;
  o.extra["gc_every"] = std::to_string(gc_every);
  auto t = CddsTree<KP>::Create(f.pool.get(), o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  f.tree = std::move(*t);
  return f;
}

// The persistence cost of one operation on this thread (counting pools).
template <class Op>
PersistCounters CostOf(Op&& op) {
  counters::BeginOperation();
  PersistCounters before = counters::ThisThread();
  op();
  return counters::ThisThread() - before;
}

using Model = std::map<uint64_t, uint64_t>;

// A pool file under /dev/shm, removed however the test ends.
struct ShmPath {
  explicit ShmPath(const std::string& tag)
      : path("/dev/shm/pmtree-cdds-" + std::to_string(getpid()) + "-" + tag + ".pool") {
    unlink(path.c_str());
  }
  ~ShmPath() { unlink(path.c_str()); }
  std::string path;
};

void ExpectAt(CddsTree<U64Keys>& t, uint64_t v, const Model& m) {
  std::vector<Tree::Entry> out(m.size() + 10);
  auto n = t.ScanAt(v, 0, nullptr, std::span(out));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, m.size()) << "version " << v;
  size_t i = 0;
  for (const auto& [k, val] : m) {
    ASSERT_EQ(out[i].first, k) << "version " << v;
    ASSERT_EQ(out[i].second, val) << "version " << v << " key " << k;
    uint64_t got = 0;
    auto r = t.LookupAt(v, k, &got);
    ASSERT_TRUE(r.ok() && *r) << "version " << v << " key " << k;
    ASSERT_EQ(got, val);
    i++;
  }
}

TEST(CddsTreeTest, UpdatesAndDeletesEndVersionsAndFullLeavesReuseDeadEntries) {
  auto f = Make(/*gc_every=*/0);
  auto& t = *f.tree;
  for (uint64_t k = 1; k <= 10; k++) ASSERT_TRUE(*t.Insert(k, k));
  const uint64_t v0 = t.current_version();
  ASSERT_TRUE(*t.Update(3, 33));
  ASSERT_TRUE(*t.Remove(4));
  EXPECT_EQ(t.current_version(), v0 + 2) << "one version per operation (§4.3)";
  TreeStats st = t.Stats();
  EXPECT_EQ(Extra(st, "dead_entries"), 2) << "the old value of 3 and the removed 4 stay until reused";
  EXPECT_EQ(st.entries, 9u);
  // The leaf holds 11 of 15 slots: four more fill it, the next reuses a dead
  // entry instead of splitting (can_reuse_version).
  for (uint64_t k = 11; k <= 15; k++) ASSERT_TRUE(*t.Insert(k, k));
  st = t.Stats();
  EXPECT_EQ(Extra(st, "dead_entry_reuses"), 1);
  EXPECT_EQ(Extra(st, "leaf_splits"), 0);
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  uint64_t v = 0;
  ASSERT_TRUE(t.Lookup(3, &v));
  EXPECT_EQ(v, 33u);
  EXPECT_FALSE(t.Lookup(4, &v));
}

TEST(CddsTreeTest, SplitsAndMergesKeepTheLiveEntryBounds) {
  for (uint32_t node_size : {512u, 1024u, 4096u}) {
    SCOPED_TRACE("node_size " + std::to_string(node_size));
    auto f = Make(8, node_size);
    auto& t = *f.tree;
    const uint64_t seed = Seed();
    SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    Model m;
    for (int i = 0; i < 6000; i++) {
      uint64_t k = rng() % 2000;
      if (rng() % 3 == 0) {
        ASSERT_EQ(*t.Remove(k), m.erase(k) == 1);
      } else {
        ASSERT_EQ(*t.Upsert(k, i), m.count(k) == 0);
        m[k] = i;
      }
      if (i % 500 == 0) {
        ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
      }
    }
    // Thin the tree out: nodes fall to m_l live entries and merge or copy.
    for (uint64_t k = 0; k < 2000; k++) {
      if (k % 10 != 0) {
        ASSERT_EQ(*t.Remove(k), m.erase(k) == 1);
      }
    }
    ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectAt(t, t.current_version(), m));
    TreeStats st = t.Stats();
    EXPECT_GT(Extra(st, "leaf_splits"), 0);
    EXPECT_GT(Extra(st, "merges") + Extra(st, "copies"), 0);
    EXPECT_GT(Extra(st, "gc_steps"), 0);
  }
}

TEST(CddsTreeTest, GarbageCollectionReclaimsDeadEntriesAndNodes) {
  auto f = Make(/*gc_every=*/0);
  auto& t = *f.tree;
  for (uint64_t k = 0; k < 3000; k++) ASSERT_TRUE(*t.Insert(k, k));
  for (uint64_t k = 0; k < 3000; k += 2) ASSERT_TRUE(*t.Remove(k));
  TreeStats before = t.Stats();
  EXPECT_GT(Extra(before, "dead_entries"), 0);
  EXPECT_GT(Extra(before, "garbage_nodes"), 0) << "copy-on-write leaves dead nodes behind";
  ASSERT_TRUE(t.CollectGarbage().ok());
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  TreeStats after = t.Stats();
  EXPECT_EQ(Extra(after, "dead_entries"), 0);
  EXPECT_EQ(Extra(after, "garbage_nodes"), 0);
  EXPECT_GT(Extra(after, "gc_nodes_freed"), 0);
  EXPECT_LT(after.pm_bytes, before.pm_bytes);
  EXPECT_EQ(after.pm_bytes, f.pool->allocator().bytes_in_use());
  EXPECT_EQ(after.entries, 1500u);
}

// ---- the node magic (N1-N4 in cdds_gc.cc) -------------------------------------------

const cdds::CddsMeta* MetaOf(const PoolImpl& p) { return p.At<cdds::CddsMeta>(p.root(0)); }
const cdds::NodeHeader* NodeAt(const PoolImpl& p, uint64_t off) { return p.At<cdds::NodeHeader>(off); }
cdds::NodeEntry* EntriesAt(const PoolImpl& p, uint64_t off) {
  return p.At<cdds::NodeEntry>(off + sizeof(cdds::NodeHeader));
}

// Every node the root reaches through owner entries (C6, not moved), as
// recovery's walk does: live and dead subtrees alike.
std::vector<uint64_t> OwnedNodes(const PoolImpl& p, uint64_t from = 0) {
  std::vector<uint64_t> out, stack{from != 0 ? from : MetaOf(p)->root};
  while (!stack.empty()) {
    const uint64_t off = stack.back();
    stack.pop_back();
    out.push_back(off);
    if (NodeAt(p, off)->level == 0) continue;
    const cdds::NodeEntry* es = EntriesAt(p, off);
    for (uint64_t i = 0; i < NodeAt(p, off)->num_entries; i++)
      if ((es[i].end & cdds::kMovedBit) == 0) stack.push_back(es[i].value);
  }
  return out;
}

TEST(CddsTreeTest, GarbageCollectionClearsTheMagicOfTheNodesItFrees) {
  auto f = Make(/*gc_every=*/0);
  auto& t = *f.tree;
  for (uint64_t k = 0; k < 3000; k++) ASSERT_TRUE(*t.Insert(k, k));
  for (uint64_t k = 0; k < 3000; k += 2) ASSERT_TRUE(*t.Remove(k));
  const std::vector<uint64_t> before = OwnedNodes(*f.pool);
  const uint64_t magic = NodeAt(*f.pool, MetaOf(*f.pool)->root)->magic;
  ASSERT_NE(magic, 0u);
  for (uint64_t off : before) ASSERT_EQ(NodeAt(*f.pool, off)->magic, magic) << "every committed node has it (N2)";
  const auto gone = [&] { return Extra(t.Stats(), "gc_nodes_freed") + Extra(t.Stats(), "root_promotions"); };
  const double gone_before = gone();
  ASSERT_TRUE(t.CollectGarbage().ok());
  // Verify also scans the free space for the magic (N3 in process).
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  const std::vector<uint64_t> after = OwnedNodes(*f.pool);
  const std::set<uint64_t> kept(after.begin(), after.end());
  size_t freed = 0;
  for (uint64_t off : before) {
    if (kept.count(off) != 0) continue;
    freed++;
    EXPECT_EQ(NodeAt(*f.pool, off)->magic, 0u) << "freed node at " << off;
  }
  EXPECT_GT(freed, 10u);
  EXPECT_EQ(static_cast<double>(freed), gone() - gone_before);
  for (uint64_t off : after) EXPECT_EQ(NodeAt(*f.pool, off)->magic, magic);
}

// A crashed pool whose damage cuts a subtree off is refused at recovery
// (N4), instead of rebuilding the allocator around the loss; an undamaged
// crashed pool with the same history opens.
TEST(CddsTreeTest, CrashRecoveryRefusesASubtreeCutByDamage) {
  enum class Cut { kNone, kChildPointerZeroed, kStartAboveCv, kCountLowered, kNodeZeroed };
  for (Cut cut : {Cut::kNone, Cut::kChildPointerZeroed, Cut::kStartAboveCv, Cut::kCountLowered, Cut::kNodeZeroed}) {
    SCOPED_TRACE("cut " + std::to_string(static_cast<int>(cut)));
    const ShmPath shm("cut");
    PoolOptions po;
    po.backend = BackendKind::kDram;
    po.use_env = false;
    {
      auto h = CreateTree(*FindTree("cdds"), shm.path, 16ull << 20, {}, po);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      // Inserts, updates and deletes: splits, merges and GC freeing nodes.
      for (uint64_t k = 0; k < 4000; k++) ASSERT_TRUE(*h->tree->Insert(k * 7 % 4001, k));
      for (uint64_t k = 0; k < 4000; k += 3) ASSERT_TRUE(*h->tree->Remove(k * 7 % 4001));
      for (uint64_t k = 1; k < 4000; k += 5) (void)*h->tree->Upsert(k * 7 % 4001, k + 1);
      PoolImpl& p = PoolImpl::Of(*h->pool);
      const uint64_t root = MetaOf(p)->root;
      ASSERT_GE(NodeAt(p, root)->level, 2u);
      // A node one level above the leaves, with its first live entry.
      uint64_t inner = root;
      while (NodeAt(p, inner)->level > 1) inner = EntriesAt(p, inner)[NodeAt(p, inner)->num_entries - 1].value;
      cdds::NodeEntry* es = EntriesAt(p, inner);
      uint32_t live = 0;
      while (es[live].end != 0) live++;
      ASSERT_GT(NodeAt(p, inner)->num_entries, live + 1u);
      auto poke = [&](uint64_t* word, uint64_t v) {
        p.Store64(word, v);
        p.Persist(word, 8);
      };
      switch (cut) {
        case Cut::kNone: break;
        case Cut::kChildPointerZeroed: poke(&es[live].value, 0); break;
        case Cut::kStartAboveCv: poke(&es[live].start, MetaOf(p)->current_version + 5); break;
        case Cut::kCountLowered:
          poke(reinterpret_cast<uint64_t*>(p.At<char>(inner)), NodeAt(p, inner)->num_entries - 1);
          break;
        case Cut::kNodeZeroed:
          for (uint32_t b = 0; b < 512; b += 8) poke(p.At<uint64_t>(es[live].value + b), 0);
          break;
      }
      h->tree.reset();  // no Close: a crash
    }
    auto h = OpenTree(shm.path, FindTree("cdds"), {}, po);
    if (cut == Cut::kNone) {
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_TRUE(h->tree->Verify().ok()) << h->tree->Verify().ToString();
      continue;
    }
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), Status::Code::kCorruption) << h.status().ToString();
    if (cut == Cut::kStartAboveCv || cut == Cut::kCountLowered) {
      EXPECT_NE(h.status().ToString().find("unreachable"), std::string::npos) << h.status().ToString();
    }
  }
}

// R3 with the magic: a crash inside a GC step, after the compaction left
// the root one live entry and before the promotion, is recovered by
// promoting the root, whose magic recovery clears first (else the old root
// would be free space with the magic).
TEST(CddsTreeTest, RecoveryPromotingARootClearsItsMagic) {
  const ShmPath shm("promote");
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.use_env = false;
  TreeOptions o;
  o.extra["gc_every"] = "0";
  uint64_t live_keys = 0;
  {
    auto h = CreateTree(*FindTree("cdds"), shm.path, 16ull << 20, o, po);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 1; k <= 16; k++) ASSERT_TRUE(*h->tree->Insert(k * 10, k));  // a root split
    for (uint64_t k = 1; Extra(h->tree->Stats(), "merges") == 0; k++) ASSERT_TRUE(*h->tree->Remove(k * 10));
    live_keys = h->tree->Stats().entries;
    PoolImpl& p = PoolImpl::Of(*h->pool);
    const uint64_t root = MetaOf(p)->root;
    cdds::NodeEntry* es = EntriesAt(p, root);
    int live = -1;
    for (uint64_t i = 0; i < NodeAt(p, root)->num_entries; i++)
      if (es[i].end == 0) {
        ASSERT_EQ(live, -1) << "one live entry after the merge";
        live = static_cast<int>(i);
      }
    ASSERT_GE(live, 0);
    // What the GC step would have done before the crash: the dead subtrees
    // lose their magic (N3), then the compaction leaves the live entry alone.
    const std::vector<uint64_t> kept = OwnedNodes(p, es[live].value);
    for (uint64_t off : OwnedNodes(p)) {
      if (off == root || std::find(kept.begin(), kept.end(), off) != kept.end()) continue;
      auto* magic = p.At<uint64_t>(off + offsetof(cdds::NodeHeader, magic));
      p.Store64(magic, 0);
      p.Persist(magic, 8);
    }
    const cdds::NodeEntry e = es[live];
    for (uint64_t* w : {&es[0].start, &es[0].key, &es[0].value, &es[0].end}) p.Store64(w, 0);
    p.Store64(&es[0].key, e.key);
    p.Store64(&es[0].value, e.value);
    p.Store64(&es[0].start, e.start);
    p.Persist(&es[0], sizeof(e));
    auto* count = p.At<uint64_t>(root + offsetof(cdds::NodeHeader, num_entries));
    p.Store64(count, 1);
    p.Persist(count, 8);
    h->tree.reset();  // no Close: a crash
  }
  auto h = OpenTree(shm.path, FindTree("cdds"), o, po);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(Extra(h->tree->Stats(), "root_promotions"), 1);
  EXPECT_EQ(h->tree->Stats().entries, live_keys);
  EXPECT_TRUE(h->tree->Verify().ok()) << h->tree->Verify().ToString();
}

// N1: every node ends below node_limit, raised in 1 MiB steps as nodes reach
// higher offsets (so the recovery scan covers them and stops near them).
TEST(CddsTreeTest, TheNodeLimitCoversEveryNode) {
  auto f = Make(/*gc_every=*/8);
  for (uint64_t k = 0; k < 40000; k++) ASSERT_TRUE(*f.tree->Insert(k, k));
  uint64_t max_end = 0;
  for (uint64_t off : OwnedNodes(*f.pool)) max_end = std::max<uint64_t>(max_end, off + 512);
  ASSERT_GT(max_end, 2u << 20);
  EXPECT_GE(MetaOf(*f.pool)->node_limit, max_end);
  EXPECT_LE(MetaOf(*f.pool)->node_limit, max_end + cdds::kNodeLimitStep);
}

// A pool made before the node magic (layout version 1) has freed nodes
// whose magic word was never cleared: Incompatible, never opened.
TEST(CddsTreeTest, APoolOfTheFormatBeforeTheNodeMagicIsIncompatible) {
  const ShmPath shm("v1");
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.use_env = false;
  {
    auto h = CreateTree(*FindTree("cdds"), shm.path, 16ull << 20, {}, po);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(*h->tree->Insert(1, 1));
    PoolImpl& p = PoolImpl::Of(*h->pool);
    auto* word = p.At<uint64_t>(p.root(0) + offsetof(cdds::CddsMeta, version));  // version | node_size << 32
    p.Store64(word, (*word & ~0xffffffffull) | cdds::kLayoutVersionBeforeNodeMagic);
    p.Persist(word, 8);
    ASSERT_TRUE(h->tree->Close().ok());
  }
  auto h = OpenTree(shm.path, FindTree("cdds"), {}, po);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Status::Code::kIncompatible) << h.status().ToString();
  EXPECT_NE(h.status().ToString().find("before the node magic"), std::string::npos) << h.status().ToString();
}

TEST(CddsTreeTest, GarbageCollectionKeepsWhatASnapshotSees) {
  auto f = Make(/*gc_every=*/1);
  auto& t = *f.tree;
  Model m;
  for (uint64_t k = 0; k < 500; k++) {
    ASSERT_TRUE(*t.Insert(k, k));
    m[k] = k;
  }
  const uint64_t snap = t.GetSnapshot();
  const Model at_snap = m;
  for (uint64_t k = 0; k < 500; k++) {
    if (k % 3 == 0) {
      ASSERT_TRUE(*t.Remove(k));
      m.erase(k);
    } else {
      ASSERT_TRUE(*t.Update(k, k + 7));
      m[k] = k + 7;
    }
  }
  ASSERT_TRUE(t.CollectGarbage().ok());
  EXPECT_EQ(t.oldest_retained_version(), snap);
  ASSERT_NO_FATAL_FAILURE(ExpectAt(t, snap, at_snap));
  ASSERT_NO_FATAL_FAILURE(ExpectAt(t, t.current_version(), m));
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  const double dead_pinned = Extra(t.Stats(), "dead_entries");
  EXPECT_GT(dead_pinned, 0);
  ASSERT_TRUE(t.ReleaseSnapshot(snap).ok());
  EXPECT_FALSE(t.ReleaseSnapshot(snap).ok());
  EXPECT_FALSE(t.LookupAt(snap, 1, nullptr).ok()) << "a released, superseded version is refused";
  ASSERT_TRUE(t.CollectGarbage().ok());
  EXPECT_EQ(Extra(t.Stats(), "dead_entries"), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectAt(t, t.current_version(), m));
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

// PinVersion (the VersionedTree face the KV store uses): an older version
// can be pinned until a GC horizon passes it, never after.
TEST(CddsTreeTest, PinVersionPinsAnOlderVersionOnlyWhileGcHasNotPassedIt) {
  auto f = Make(/*gc_every=*/0);
  auto& t = *f.tree;
  ASSERT_EQ(t.versions(), static_cast<VersionedTree<uint64_t>*>(&t));
  for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE(*t.Insert(k, k));
  const uint64_t v0 = t.current_version();
  const uint64_t held = t.GetSnapshot();  // keeps GC's horizon at v0
  for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE(*t.Update(k, k + 1000));
  const uint64_t v1 = t.current_version();
  ASSERT_TRUE(t.CollectGarbage().ok());
  // v0 < v1 is still retained by `held`: pinning it again is allowed.
  ASSERT_TRUE(t.PinVersion(v0).ok());
  EXPECT_EQ(t.PinVersion(v1 + 1).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(t.ReleaseSnapshot(held).ok());
  uint64_t value = 0;
  ASSERT_TRUE(*t.LookupAt(v0, 7, &value));  // still pinned once
  EXPECT_EQ(value, 7u);
  ASSERT_TRUE(t.ReleaseSnapshot(v0).ok());
  for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE(*t.Update(k, k + 2000));
  ASSERT_TRUE(t.CollectGarbage().ok());  // a horizon past v1 and v0
  EXPECT_EQ(t.PinVersion(v0).code(), Status::Code::kBusy);
  EXPECT_EQ(t.PinVersion(v1).code(), Status::Code::kBusy);
  ASSERT_TRUE(t.PinVersion(t.current_version()).ok());
  ASSERT_TRUE(*t.LookupAt(t.current_version(), 7, &value));
  EXPECT_EQ(value, 2007u);
  ASSERT_TRUE(t.ReleaseSnapshot(t.current_version()).ok());
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

// A model that keeps every version: snapshots taken at any point return
// exactly that moment's state, across later writes, merges and GC.
TEST(CddsTreeTest, SnapshotsMatchAModelThatKeepsEveryVersion) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto f = Make(/*gc_every=*/3);
  auto& t = *f.tree;
  Model m;
  std::map<uint64_t, Model> held;  // pinned version -> model at that moment
  for (int i = 0; i < 4000; i++) {
    uint64_t k = rng() % 400;
    switch (rng() % 4) {
      case 0:
        ASSERT_EQ(*t.Remove(k), m.erase(k) == 1);
        break;
      default:
        ASSERT_EQ(*t.Upsert(k, i), m.count(k) == 0);
        m[k] = i;
    }
    if (rng() % 200 == 0) {
      uint64_t v = t.GetSnapshot();
      held[v] = m;
    }
    if (!held.empty() && rng() % 300 == 0) {
      auto it = std::next(held.begin(), static_cast<long>(rng() % held.size()));
      ASSERT_NO_FATAL_FAILURE(ExpectAt(t, it->first, it->second));
      ASSERT_TRUE(t.ReleaseSnapshot(it->first).ok());
      held.erase(it);
    }
  }
  for (const auto& [v, model] : held) ExpectAt(t, v, model);
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

// One writer, one collector and two readers at once: every snapshot a reader
// takes equals the writer's model of that version.  Run under TSan in CI.
TEST(CddsTreeTest, ConcurrentSnapshotsMatchTheWritersModelWhileGcRuns) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  auto f = Make(/*gc_every=*/2);
  auto& t = *f.tree;
  std::mutex mu;
  std::map<uint64_t, Model> history;  // version -> state
  history[t.current_version()] = {};
  std::atomic<bool> done{false};
  std::atomic<int> errors{0}, checked{0};
  std::thread writer([&] {
    std::mt19937_64 rng(seed);
    Model m;
    for (int i = 0; i < 3000; i++) {
      uint64_t k = rng() % 300;
      if (rng() % 3 == 0) {
        if (*t.Remove(k) != (m.erase(k) == 1)) errors++;
      } else {
        if (*t.Upsert(k, i) != (m.count(k) == 0)) errors++;
        m[k] = i;
      }
      std::lock_guard lock(mu);
      history[t.current_version()] = m;  // the only writer: this op's version
    }
    done = true;
  });
  std::thread collector([&] {
    while (!done) (void)t.CollectGarbage();
  });
  auto reader = [&](uint64_t rseed) {
    std::mt19937_64 rng(rseed);
    std::vector<Tree::Entry> out(400);
    while (!done) {
      const uint64_t v = t.GetSnapshot();
      auto n = t.ScanAt(v, 0, nullptr, std::span(out));
      Model want;
      for (;;) {  // the writer records version v right after committing it
        std::lock_guard lock(mu);
        auto it = history.find(v);
        if (it != history.end()) {
          want = it->second;
          break;
        }
      }
      if (!n.ok() || *n != want.size()) {
        errors++;
      } else {
        size_t i = 0;
        for (const auto& [k, val] : want) {
          if (out[i].first != k || out[i].second != val) errors++;
          i++;
        }
      }
      uint64_t k = rng() % 300, got = 0;
      auto r = t.LookupAt(v, k, &got);
      if (!r.ok() || *r != (want.count(k) == 1) || (*r && got != want[k])) errors++;
      if (!t.ReleaseSnapshot(v).ok()) errors++;
      checked++;
    }
  };
  std::thread r1(reader, seed ^ 1), r2(reader, seed ^ 2);
  writer.join();
  collector.join();
  r1.join();
  r2.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(checked.load(), 0);
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

TEST(CddsTreeTest, ByteStringKeysShareBlobsAcrossVersionsWithoutLeaks) {
  auto f = Make<BytesKeys>(/*gc_every=*/4);
  auto& t = *f.tree;
  std::map<std::string, uint64_t> m;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 4000; i++) {
    std::string k = "key-" + std::to_string(rng() % 700) + std::string(rng() % 40, 'x');
    if (rng() % 3 == 0) {
      ASSERT_EQ(*t.Remove(k), m.erase(k) == 1);
    } else {
      ASSERT_EQ(*t.Upsert(k, i), m.count(k) == 0);
      m[k] = i;
    }
  }
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  ASSERT_TRUE(t.CollectGarbage().ok());
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  std::vector<BytesTree::Entry> out(m.size() + 1);
  ASSERT_EQ(t.Scan(std::string_view(), std::span(out)), m.size());
  size_t i = 0;
  for (const auto& [k, v] : m) {
    EXPECT_EQ(out[i].first, k);
    EXPECT_EQ(out[i].second, v);
    i++;
  }
}

// BulkLoad: one version, the fill honoured (clamped so every non-root node
// keeps more than m_l live entries), a tree of several levels that Verify
// accepts, then ordinary inserts, deletes (merges) and GC on top; refused on
// a tree that holds an entry; a failure (full pool) leaves the tree empty.
TEST(CddsTreeTest, BulkLoadBuildsOneVersionAtTheFillThenBehavesLikeAnyTree) {
  for (double fill : {0.3, 0.7, 1.0}) {
    SCOPED_TRACE("fill " + std::to_string(fill));
    auto f = Make(/*gc_every=*/8);
    auto& t = *f.tree;
    std::vector<Tree::InputEntry> in;
    Model m;
    for (uint64_t i = 0; i < 20000; i++) {
      in.push_back({i * 4, i});
      m[i * 4] = i;
    }
    const uint64_t v0 = t.current_version();
    ASSERT_TRUE(t.BulkLoad(in, fill).ok());
    EXPECT_EQ(t.current_version(), v0 + 1) << "a bulk load is one version";
    ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
    const TreeStats st = t.Stats();
    const double want = std::max(fill, 2.0 * (t.min_live() + 1) / t.capacity());
    EXPECT_NEAR(st.leaf_fill, want, 0.1);
    EXPECT_GE(st.height, 4u) << "20,000 entries in 512 B nodes take several levels";
    EXPECT_EQ(st.pm_bytes, f.pool->allocator().bytes_in_use()) << "the replaced root leaf is freed";
    ASSERT_NO_FATAL_FAILURE(ExpectAt(t, t.current_version(), m));
    EXPECT_EQ(t.BulkLoad(in, fill).code(), Status::Code::kInvalidArgument) << "tree not empty";
    for (uint64_t i = 0; i < 20000; i += 3) {
      ASSERT_TRUE(*t.Insert(i * 4 + 1, i));
      m[i * 4 + 1] = i;
      ASSERT_TRUE(*t.Remove(i * 4));
      m.erase(i * 4);
    }
    ASSERT_TRUE(t.CollectGarbage().ok());
    ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectAt(t, t.current_version(), m));
  }
  // Byte-string keys, and a load that runs out of space midway.
  auto fb = Make<BytesKeys>();
  std::vector<std::string> keys;
  for (int i = 0; i < 3000; i++) keys.push_back("bulk-" + std::to_string(100000 + i) + std::string(i % 50, 'y'));
  std::vector<BytesTree::InputEntry> bin;
  for (size_t i = 0; i < keys.size(); i++) bin.push_back({keys[i], i});
  ASSERT_TRUE(fb.tree->BulkLoad(bin, 0.7).ok());
  ASSERT_TRUE(fb.tree->Verify().ok()) << fb.tree->Verify().ToString();
  uint64_t v = 0;
  ASSERT_TRUE(fb.tree->Lookup(keys[1234], &v));
  EXPECT_EQ(v, 1234u);
  auto small = Make(8, 512, 1ull << 20);
  const uint64_t in_use = small.pool->allocator().bytes_in_use();
  std::vector<Tree::InputEntry> big;
  for (uint64_t i = 0; i < 200000; i++) big.push_back({i, i});
  EXPECT_TRUE(small.tree->BulkLoad(big, 1.0).IsOutOfSpace());
  ASSERT_TRUE(small.tree->Verify().ok()) << small.tree->Verify().ToString();
  EXPECT_EQ(small.tree->Stats().entries, 0u);
  EXPECT_EQ(small.pool->allocator().bytes_in_use(), in_use) << "an aborted load frees what it allocated";
  ASSERT_TRUE(*small.tree->Insert(7, 7));
}

TEST(CddsTreeTest, CleanCloseRestartsWithoutRecoveryWork) {
  const ShmPath shm("restart");
  const std::string& path = shm.path;
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.use_env = false;
  Model m;
  {
    auto h = CreateTree(*FindTree("cdds"), path, 16ull << 20, {}, po);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 0; k < 2000; k++) {
      ASSERT_TRUE(*h->tree->Insert(k * 3, k));
      m[k * 3] = k;
    }
    for (uint64_t k = 0; k < 2000; k += 5) {
      ASSERT_TRUE(*h->tree->Remove(k * 3));
      m.erase(k * 3);
    }
    ASSERT_TRUE(h->tree->Close().ok());
  }
  auto h = OpenTree(path, FindTree("cdds"), {}, po);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->pool->clean_shutdown());
  TreeStats st = h->tree->Stats();
  EXPECT_EQ(Extra(st, "recovery_entries_discarded") + Extra(st, "recovery_nodes_reverted"), 0);
  EXPECT_EQ(st.entries, m.size());
  EXPECT_TRUE(h->tree->Verify().ok()) << h->tree->Verify().ToString();
}

TEST(CddsTreeTest, AFullPoolAbortsTheOperationAndKeepsTheTreeConsistent) {
  auto f = Make(8, 512, 2ull << 20);
  auto& t = *f.tree;
  Model m;
  bool full = false;
  for (uint64_t i = 0; i < 1000000 && !full; i++) {
    uint64_t k = i * 0x9e3779b97f4a7c15ull;
    auto r = t.Insert(k, i);
    if (!r.ok()) {
      ASSERT_TRUE(r.status().IsOutOfSpace()) << r.status().ToString();
      full = true;
    } else {
      m[k] = i;
    }
  }
  ASSERT_TRUE(full);
  EXPECT_GT(Extra(t.Stats(), "aborted_operations"), 0);
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectAt(t, t.current_version(), m));
}

// A delete that cannot get a node for its merge still succeeds; the meta
// flag it sets keeps Verify's §4.4.6 check relaxed after a restart.
TEST(CddsTreeTest, AMergeSkippedForLackOfSpaceIsRememberedAcrossRestart) {
  const ShmPath shm("skip");
  const std::string& path = shm.path;
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.use_env = false;
  Model m;
  {
    TreeOptions o;
    o.extra["gc_every"] = "0";  // nothing frees space behind the merges
    auto h = CreateTree(*FindTree("cdds"), path, 2ull << 20, o, po);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t i = 0;; i++) {
      uint64_t k = i * 0x9e3779b97f4a7c15ull;
      auto r = h->tree->Insert(k, i);
      if (!r.ok()) break;
      m[k] = i;
    }
    double skips = 0;
    int n = 0;
    for (auto it = m.begin(); it != m.end() && skips == 0;) {
      ASSERT_TRUE(*h->tree->Remove(it->first));
      it = m.erase(it);
      if (++n % 64 == 0) skips = Extra(h->tree->Stats(), "underflow_skips");
    }
    ASSERT_GT(skips, 0) << "no merge ran out of space";
    ASSERT_TRUE(h->tree->Verify().ok()) << h->tree->Verify().ToString();
    ASSERT_TRUE(h->tree->Close().ok());
  }
  auto h = OpenTree(path, FindTree("cdds"), {}, po);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->tree->Verify().ok()) << h->tree->Verify().ToString();
  EXPECT_EQ(h->tree->Stats().entries, m.size());
}

// Exact persistence cost per operation on the counting hardware backend (no
// GC steps): the commit is one fence before and one persist of the version.
TEST(CddsTreeTest, FlushBudgetsPerOperation) {
  auto f = Make(/*gc_every=*/0, 512, 16ull << 20, /*counting=*/true);
  auto* t = &f.tree;
  for (uint64_t k = 10; k <= 100; k += 10) ASSERT_TRUE(*(*t)->Insert(k, k));
  struct Case {
    const char* what;
    std::function<void()> op;
    uint64_t flushes, fences;
  };
  // 10 entries in slots 0..9; entry i lives in cache line (i + 1) / 2.
  const Case cases[] = {
      // entry + num_entries, then the commit
      {"append", [&] { (void)*(*t)->Insert(110, 1); }, 3, 3},
      // 11 entries: the new last slot and num_entries persisted, one persist
      // per line the shift crosses (5), the new entry's line, the commit
      {"insert at slot 0", [&] { (void)*(*t)->Insert(5, 1); }, 9, 9},
      // the end version, then the commit
      {"remove", [&] { (void)*(*t)->Remove(50); }, 2, 2},
      // the old entry's end, the new version appended, the commit
      {"update", [&] { (void)*(*t)->Update(110, 2); }, 4, 3},
      {"lookup", [&] { uint64_t v; (void)(*t)->Lookup(20, &v); }, 0, 0},
  };
  for (const Case& c : cases) {
    PersistCounters pc = CostOf(c.op);
    EXPECT_EQ(pc.flushes, c.flushes) << c.what;
    EXPECT_EQ(pc.fences, c.fences) << c.what;
  }
  ASSERT_TRUE((*t)->Verify().ok());
}

// Structure changes: each new node gets the node magic after the commit
// (one flush per node, one fence: N2); GC clears the magic of the nodes it
// frees before the compaction that unlinks them (N3).
TEST(CddsTreeTest, FlushBudgetsOfStructureChanges) {
  auto f = Make(/*gc_every=*/0, 512, 16ull << 20, /*counting=*/true);
  CddsTree<U64Keys>& t = *f.tree;
  auto cost = [](auto&& op) { return CostOf(op); };
  // Without the node magic (layout version 1) each cost one fence less and
  // one flush less per new node: a root split 28 flushes and 3 fences, a
  // leaf split 31 and 4, a merge 24 and 4, this GC pass 3 and 3.
  auto expect = [](const char* what, const PersistCounters& pc, uint64_t flushes, uint64_t fences) {
    EXPECT_EQ(pc.flushes, flushes) << what;
    EXPECT_EQ(pc.fences, fences) << what;
  };
  for (uint64_t k = 1; k <= 15; k++) ASSERT_TRUE(*t.Insert(k * 10, k));
  // The 16th entry splits the root leaf: two leaves and a new root, each
  // given the magic after the commit.
  PersistCounters root_split = cost([&] { ASSERT_TRUE(*t.Insert(160, 16)); });
  ASSERT_EQ(t.counts().root_splits, 1u);
  expect("root split", root_split, 31, 4);
  // Fill the right leaf until it splits (the parent takes the separator in place).
  PersistCounters leaf_split{};
  for (uint64_t k = 17; t.counts().leaf_splits == 1; k++) leaf_split = cost([&] { ASSERT_TRUE(*t.Insert(k * 10, k)); });
  ASSERT_EQ(t.counts().leaf_splits, 2u);
  ASSERT_EQ(t.counts().root_splits, 1u);
  expect("leaf split", leaf_split, 33, 5);
  // Empty the leftmost leaf down to m_l live entries: a merge into one new leaf.
  PersistCounters merge{};
  for (uint64_t k = 1; t.counts().merges + t.counts().copies == 0; k++) merge = cost([&] { ASSERT_TRUE(*t.Remove(k * 10)); });
  ASSERT_EQ(t.counts().merges, 1u);
  expect("merge", merge, 25, 5);
  // GC frees the four dead nodes: their magic is cleared (four flushes)
  // under one fence before the compaction of the root drops their owners.
  const uint64_t freed_before = t.counts().gc_nodes_freed;
  PersistCounters gc = cost([&] { ASSERT_TRUE(t.CollectGarbage().ok()); });
  ASSERT_EQ(t.counts().gc_nodes_freed - freed_before, 4u);
  expect("gc pass", gc, 7, 4);
  ASSERT_TRUE(t.Verify().ok()) << t.Verify().ToString();
}

// ---- crash explorer ------------------------------------------------------------------

// The explorer drives u64 trees; this adapter runs CddsTree<BytesKeys>
// under it, each key an 8-byte big-endian string (order-preserving), so the
// key-blob ownership rules (C6) -- shared blobs, frees on reclamation -- are
// crash-tested too.
class BytesAsU64 final : public Tree {
 public:
  explicit BytesAsU64(std::unique_ptr<CddsTree<BytesKeys>> t) : t_(std::move(t)) {}
  static std::string Enc(uint64_t k) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; i++) s[i] = static_cast<char>(k >> (56 - 8 * i));
    return s;
  }
  static uint64_t Dec(const std::string& s) {
    uint64_t k = 0;
    for (char c : s) k = k << 8 | static_cast<unsigned char>(c);
    return k;
  }
  std::string_view name() const override { return "cdds"; }
  uint32_t capabilities() const override { return t_->capabilities(); }
  bool Lookup(uint64_t k, uint64_t* v) override { return t_->Lookup(Enc(k), v); }
  Result<bool> Insert(uint64_t k, uint64_t v) override { return t_->Insert(Enc(k), v); }
  Result<bool> Update(uint64_t k, uint64_t v) override { return t_->Update(Enc(k), v); }
  Result<bool> Upsert(uint64_t k, uint64_t v) override { return t_->Upsert(Enc(k), v); }
  Result<bool> Remove(uint64_t k) override { return t_->Remove(Enc(k)); }
  // The tree's own (one-version) bulk load, as its capabilities announce.
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override {
    std::vector<std::string> keys;
    for (const auto& [k, v] : sorted) keys.push_back(Enc(k));
    std::vector<BytesTree::InputEntry> in;
    for (size_t i = 0; i < sorted.size(); i++) in.emplace_back(keys[i], sorted[i].second);
    return t_->BulkLoad(in, fill);
  }
  size_t Scan(uint64_t start, const uint64_t* end, std::span<Entry> out) override {
    std::vector<BytesTree::Entry> tmp(out.size());
    std::string s = Enc(start), e = end ? Enc(*end) : std::string();
    std::string_view ev = e;
    size_t n = t_->Scan(s, end ? &ev : nullptr, std::span(tmp));
    for (size_t i = 0; i < n; i++) out[i] = Entry(Dec(tmp[i].first), tmp[i].second);
    return n;
  }
  Status Verify() override { return t_->Verify(); }
  TreeStats Stats() override { return t_->Stats(); }
  Status Close() override { return t_->Close(); }

  static Result<std::unique_ptr<Tree>> Create(PoolImpl* pool, const TreeOptions& o) {
    PMTREE_ASSIGN_OR_RETURN(auto t, CddsTree<BytesKeys>::Create(pool, o));
    return std::unique_ptr<Tree>(new BytesAsU64(std::move(t)));
  }
  static Result<std::unique_ptr<Tree>> Recover(PoolImpl* pool, const TreeOptions& o) {
    PMTREE_ASSIGN_OR_RETURN(auto t, CddsTree<BytesKeys>::Recover(pool, o));
    return std::unique_ptr<Tree>(new BytesAsU64(std::move(t)));
  }

 private:
  std::unique_ptr<CddsTree<BytesKeys>> t_;
};

const TreeFactory& BytesFactory() {
  static const TreeFactory f = [] {
    TreeFactory x = *FindTree("cdds");
    x.create = &RegistryEntry<&BytesAsU64::Create>;
    x.recover = &RegistryEntry<&BytesAsU64::Recover>;
    x.create_bytes = nullptr;
    x.recover_bytes = nullptr;
    return x;
  }();
  return f;
}

crash::ExploreReport Explore(const TreeFactory& f, crash::Workload w, crash::Mode mode, uint32_t depth,
                             uint64_t ops = 300) {
  crash::ExploreOptions o;
  o.workload = w;
  o.mode = mode;
  o.depth = depth;
  o.ops = ops;
  o.seed = 1;
  auto r = crash::Explore(f, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  for (const auto& tk : r->tickets) ADD_FAILURE() << tk.ToString();
  return *r;
}

crash::ExploreReport Explore(crash::Workload w, crash::Mode mode, uint32_t depth, uint64_t ops = 300) {
  return Explore(*FindTree("cdds"), w, mode, depth, ops);
}

#if !defined(PMTREE_CDDS_LONG_TESTS)

bool Covered(const crash::ExploreReport& r, const std::string& function_part) {
  for (const auto& s : r.sites)
    if (s.function.find(function_part) != std::string::npos && s.covered) return true;
  return false;
}

// The default run: bounded explorations (the exhaustive ones are in the
// `long` build of this file below).
TEST(CddsCrashTest, SmallWorkloadHasNoViolationsAndCoversEverySite) {
  for (crash::Mode mode : {crash::Mode::kAdr, crash::Mode::kEadr}) {
    crash::ExploreReport r = Explore(crash::Workload::kSmall, mode, 1);
    EXPECT_EQ(r.violations, 0u);
    EXPECT_GT(r.recovery_crash_images, 0u) << "crashes during recovery";
    if (mode != crash::Mode::kAdr) continue;
    for (const auto& s : r.sites) EXPECT_TRUE(s.covered) << s.name << " " << s.function;
    // Crash points inside the writers' incremental GC, a root split and a
    // commit.
    EXPECT_TRUE(Covered(r, "RewriteEntries"));
    EXPECT_TRUE(Covered(r, "TryPromoteRoot"));
    EXPECT_TRUE(Covered(r, "InsertEntry"));
    EXPECT_TRUE(Covered(r, "ReplaceNodes"));
    EXPECT_TRUE(Covered(r, "Commit"));
  }
}

TEST(CddsCrashTest, ByteStringKeysHaveNoViolations) {
  crash::ExploreReport r = Explore(BytesFactory(), crash::Workload::kSmall, crash::Mode::kAdr, 1);
  EXPECT_EQ(r.violations, 0u);
  crash::ExploreReport q = Explore(BytesFactory(), crash::Workload::kRandom, crash::Mode::kAdr, 3, 120);
  EXPECT_EQ(q.violations, 0u);
}

TEST(CddsCrashTest, RandomWorkloadHasNoViolations) {
  crash::ExploreReport r = Explore(crash::Workload::kRandom, crash::Mode::kAdr, 3, 120);
  EXPECT_EQ(r.violations, 0u);
}

#else

TEST(CddsCrashLongTest, SmallWorkloadsOfThreeOperationsHaveNoViolations) {
  for (crash::Mode mode : {crash::Mode::kAdr, crash::Mode::kEadr}) {
    crash::ExploreReport r = Explore(crash::Workload::kSmall, mode, 3);
    EXPECT_EQ(r.violations, 0u);
    EXPECT_EQ(r.sites_covered, r.sites_total);
  }
}

TEST(CddsCrashLongTest, ByteStringKeysOfThreeOperationsHaveNoViolations) {
  crash::ExploreReport r = Explore(BytesFactory(), crash::Workload::kSmall, crash::Mode::kAdr, 3);
  EXPECT_EQ(r.violations, 0u);
  crash::ExploreReport q = Explore(BytesFactory(), crash::Workload::kRandom, crash::Mode::kAdr, 3, 1000);
  EXPECT_EQ(q.violations, 0u);
}

// Every flush/fence site dropped in turn, with u64 and with byte-string keys
// (some sites guard only key blobs): each mutant must be caught by one of
// the two, or be redundant in both.
TEST(CddsCrashLongTest, MutantsAreCaughtWithU64OrByteStringKeys) {
  crash::ExploreOptions o;
  o.depth = 2;
  auto u = crash::Mutate(*FindTree("cdds"), o);
  auto b = crash::Mutate(BytesFactory(), o);
  ASSERT_TRUE(u.ok() && b.ok());
  std::map<std::string, std::string> outcome;  // site@kind -> best outcome
  auto rank = [](const std::string& s) { return s == "caught" ? 2 : s == "redundant" ? 1 : 0; };
  for (const auto* rep : {&*u, &*b}) {
    for (const auto& m : rep->list) {
      std::string key = m.site + "@" + m.kind;
      if (!outcome.count(key) || rank(m.outcome) > rank(outcome[key])) outcome[key] = m.outcome;
    }
  }
  // Sites of the shared key code (keys.h) are excluded: MakeSlot persists
  // every blob for all trees, which CDDS's commit fence makes redundant here.
  int caught = 0, survived = 0;
  for (const auto& [site, out] : outcome) {
    if (site.find("src/trees/cdds/") == std::string::npos) continue;
    caught += out == "caught";
    survived += out == "survived";
    if (out == "survived") std::printf("mutant survived both key kinds: %s\n", site.c_str());
  }
  std::printf("cdds sites: %d mutants caught, %d survived, %zu in all\n", caught, survived, outcome.size());
  EXPECT_GE(caught, 0.95 * (caught + survived)) << caught << " caught, " << survived << " survived";
}

TEST(CddsCrashLongTest, RandomWorkloadsHaveNoViolations) {
  for (crash::Mode mode : {crash::Mode::kAdr, crash::Mode::kEadr}) {
    crash::ExploreReport r = Explore(crash::Workload::kRandom, mode, 3, 1000);
    EXPECT_EQ(r.violations, 0u);
  }
}

#endif

// Negative control: without the fence before the commit store, the explorer
// finds committed versions whose entries are not durable.
TEST(CddsCrashTest, DroppingTheCommitFenceIsCaught) {
  crash::ExploreReport base = Explore(crash::Workload::kSmall, crash::Mode::kAdr, 1);
  std::string site;
  for (const auto& s : base.sites)
    if (s.function.find("Commit") != std::string::npos && s.kind == "fence" && site.empty()) site = s.name;
  ASSERT_FALSE(site.empty());
  crash::ExploreOptions o;
  o.depth = 1;
  o.drop_site = site;
  o.drop_fence = true;
  o.max_tickets = 1;
  auto r = crash::Explore(*FindTree("cdds"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->violations, 0u) << "dropping " << site << " went unnoticed";
}

}  // namespace
}  // namespace pmtree
