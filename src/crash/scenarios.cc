// SPDX-License-Identifier: Apache-2.0
//
// The explorer's scenarios (explorer.h, BuildScenarios): pre-states found by
// watching a probe tree grow, the alphabet of operations run from each, and
// the random workload.

#include <algorithm>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "crash/explorer.h"
#include "crash/explorer_internal.h"
#include "pmtree/counters.h"

namespace pmtree::crash {
namespace {

struct Probe {
  std::unique_ptr<PoolImpl> pool;
  std::unique_ptr<Tree> tree;
};

Result<Probe> OpenProbe(const TreeFactory& f, const ExploreOptions& o) {
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.counting = false;
  po.use_env = false;
  Probe p;
  PMTREE_ASSIGN_OR_RETURN(p.pool, PoolImpl::CreateAnonymous(o.pool_size, f.name, PoolLayoutFlags(o.keys), po));
  PMTREE_ASSIGN_OR_RETURN(p.tree, CreateFor(f, p.pool.get(), o));
  return p;
}

Op Insert(uint64_t k, uint64_t v) { return Op{OpKind::kInsert, k, v}; }
Op Remove(uint64_t k) { return Op{OpKind::kRemove, k, 0}; }

struct PreState {
  std::string name;
  std::vector<Op> ops;
  std::vector<Op> letters;  // operations this pre-state adds to the alphabet
};

// Insert counts at which a probe tree first splits its root leaf (s1), a
// non-root leaf (s2) and gains a third level (s3); 0: not seen.  And the
// first insert that changed each design counter of Stats().extra, in order
// of appearance.
struct Growth {
  uint64_t s1 = 0, s2 = 0, s3 = 0;
  std::vector<std::pair<std::string, uint64_t>> first_change;
};

// Keys 10, 20, ..., 10 * kMaxProbe at most: enough for three levels.
constexpr uint64_t kMaxProbe = 3000;

std::vector<Op> Inserts(uint64_t n) {
  std::vector<Op> v;
  for (uint64_t i = 1; i <= n; i++) v.push_back(Insert(10 * i, ValueFor(10 * i, 0)));
  return v;
}

// Watches Stats() while a probe tree grows by ascending inserts.
Result<Growth> WatchGrowth(const TreeFactory& f, const ExploreOptions& o) {
  PMTREE_ASSIGN_OR_RETURN(Probe p, OpenProbe(f, o));
  Growth g;
  std::vector<TreeStats> st(1, p.tree->Stats());
  std::set<std::string> seen_counters;
  for (uint64_t n = 1; n <= kMaxProbe; n++) {
    auto r = p.tree->Insert(10 * n, ValueFor(10 * n, 0));
    if (!r.ok()) break;  // out of space: enough
    st.push_back(p.tree->Stats());
    const TreeStats& a = st[n - 1];
    const TreeStats& b = st[n];
    // The one-key tree is the base: some trees count a DRAM root above their
    // single leaf as a level (LB+-Tree: height 2 from the start).
    if (n >= 2 && g.s1 == 0 && (b.leaf_nodes > st[1].leaf_nodes || b.height > st[1].height)) g.s1 = n;
    else if (g.s1 != 0 && g.s2 == 0 && b.leaf_nodes > a.leaf_nodes) g.s2 = n;
    if (g.s3 == 0 && b.height >= 3 && a.height < 3) g.s3 = n;
    for (const auto& [name, value] : b.extra) {
      if (seen_counters.count(name)) continue;
      double before = 0;
      for (const auto& [an, av] : a.extra)
        if (an == name) before = av;
      if (value != before) {
        seen_counters.insert(name);
        g.first_change.emplace_back(name, n);
      }
    }
    if (g.s3 != 0 && g.s2 != 0) break;
  }
  return g;
}

// Merge threshold: from the first two-leaf state, remove the smallest keys
// until the leaf count drops.  The same for a node with a left neighbour
// (trees that merge only): from the first three-leaf state, remove keys
// upward from the median.
Status AddMergeThresholds(const TreeFactory& f, const ExploreOptions& o, const Growth& g, std::vector<PreState>* out) {
  {
    PMTREE_ASSIGN_OR_RETURN(Probe q, OpenProbe(f, o));
    for (const Op& op : Inserts(g.s1)) (void)q.tree->Insert(op.key, op.value);
    const uint64_t leaves = q.tree->Stats().leaf_nodes;
    for (uint64_t i = 1; i < g.s1; i++) {
      (void)q.tree->Remove(10 * i);
      if (q.tree->Stats().leaf_nodes < leaves) {
        auto pre = Inserts(g.s1);
        for (uint64_t j = 1; j < i; j++) pre.push_back(Remove(10 * j));
        out->push_back({"merge-threshold", pre, {Remove(10 * i)}});
        break;
      }
    }
  }
  if (g.s2 == 0 || out->empty() || out->back().name != "merge-threshold") return Status::Ok();
  PMTREE_ASSIGN_OR_RETURN(Probe q, OpenProbe(f, o));
  for (const Op& op : Inserts(g.s2)) (void)q.tree->Insert(op.key, op.value);
  const uint64_t leaves = q.tree->Stats().leaf_nodes;
  for (uint64_t i = g.s2 / 2; i <= g.s2; i++) {
    (void)q.tree->Remove(10 * i);
    if (q.tree->Stats().leaf_nodes < leaves) {
      auto pre = Inserts(g.s2);
      for (uint64_t j = g.s2 / 2; j < i; j++) pre.push_back(Remove(10 * j));
      out->push_back({"merge-threshold-middle", pre, {Remove(10 * i)}});
      break;
    }
  }
  return Status::Ok();
}

// With ExploreOptions::reclaim_each_op: the merge-threshold state after its
// merge, refilled by ascending inserts up to the one before the next leaf
// split.  The blocks the merge retired (and a collapsed root) are free by
// then, so that split writes its new nodes where they were: a persist that
// matters only once retired memory is reused (Circ-Tree's meta.root after a
// root collapse) is checked here.
Status AddRefilledAfterMerge(const TreeFactory& f, const ExploreOptions& o, std::vector<PreState>* out) {
  std::vector<Op> pre;
  for (const PreState& p : *out) {
    if (p.name != "merge-threshold") continue;
    pre = p.ops;
    pre.insert(pre.end(), p.letters.begin(), p.letters.end());
  }
  if (pre.empty()) return Status::Ok();
  PMTREE_ASSIGN_OR_RETURN(Probe q, OpenProbe(f, o));
  Model m;
  for (const Op& op : pre) {
    PMTREE_RETURN_IF_ERROR(RunOp(*q.tree, op).status());
    ApplyEffect(&m, EffectOf(m, op));
  }
  const uint64_t leaves = q.tree->Stats().leaf_nodes;
  uint64_t k = m.empty() ? 10 : m.rbegin()->first + 10;
  for (uint64_t i = 0; i < kMaxProbe; i++, k += 10) {
    const Op op = Insert(k, ValueFor(k, 0));
    if (!RunOp(*q.tree, op).ok()) break;
    if (q.tree->Stats().leaf_nodes > leaves) {
      out->push_back({"refilled-after-merge", pre});
      break;
    }
    pre.push_back(op);
  }
  return Status::Ok();
}

// Descending keys: every insert lands in the first leaf, every split keeps
// the new key in the old (left) node, and the second split splits a node
// that has split before (LB+-Tree flips its alt bit back).  The state just
// before that second split.
Status AddDescending(const TreeFactory& f, const ExploreOptions& o, std::vector<PreState>* out) {
  PMTREE_ASSIGN_OR_RETURN(Probe q, OpenProbe(f, o));
  const uint64_t top = 10 * (kMaxProbe + 1);
  const uint64_t leaves0 = q.tree->Stats().leaf_nodes;
  std::vector<Op> pre;
  int splits = 0;
  for (uint64_t i = 0; i < kMaxProbe && splits < 2; i++) {
    const Op op = Insert(top - 10 * i, ValueFor(top - 10 * i, 0));
    if (!q.tree->Insert(op.key, op.value).ok()) break;
    const uint64_t leaves = q.tree->Stats().leaf_nodes;
    if (leaves > leaves0 + static_cast<uint64_t>(splits)) splits++;
    if (splits == 2) out->push_back({"descending-leaf-full", pre});
    pre.push_back(op);
  }
  return Status::Ok();
}

// Pre-states found by watching Stats() while a probe tree grows: the
// moments just before its first leaf split, a non-root leaf split, a new
// level, a merge, and the first change of each design counter of
// Stats().extra (LB+-Tree's first entry move, its first hint record, ...);
// the moment before the second split of the first leaf when keys arrive in
// descending order (a node that splits again after a split); with
// reclaim_each_op, the refill after the merge; plus an empty
// tree and a churned one.
Result<std::vector<PreState>> FindPreStates(const TreeFactory& f, const ExploreOptions& o, Growth* growth) {
  std::vector<PreState> out;
  out.push_back({"empty", {}});
  PMTREE_ASSIGN_OR_RETURN(*growth, WatchGrowth(f, o));
  const Growth& g = *growth;
  if (g.s1 == 0) {
    // Stats() tells nothing about nodes: fall back to fixed sizes.
    for (uint64_t n : {1, 16, 64}) out.push_back({std::to_string(n) + "-keys", Inserts(n)});
    return out;
  }
  std::set<uint64_t> sizes{0};  // insert-only pre-states already present, by key count
  auto add_inserts = [&](const std::string& name, uint64_t n) {
    if (sizes.insert(n).second) out.push_back({name, Inserts(n)});
  };
  if (g.s1 >= 3) add_inserts("root-leaf-one-short", g.s1 - 2);
  add_inserts("root-leaf-full", g.s1 - 1);
  if (g.s2 != 0) add_inserts("leaf-full", g.s2 - 1);
  if (g.s3 != 0) add_inserts("inner-full", g.s3 - 1);
  // A counter that first changes at the n-th insert names a path the
  // workload's operations reach from the state before it (the first change
  // at insert 1 is the empty pre-state).  At most 8, in order of appearance.
  size_t counters = 0;
  for (const auto& [name, n] : g.first_change) {
    if (n < 2 || counters >= 8) continue;
    if (sizes.count(n - 1)) continue;
    add_inserts("before-first-" + name, n - 1);
    counters++;
  }
  PMTREE_RETURN_IF_ERROR(AddMergeThresholds(f, o, g, &out));
  if (o.reclaim_each_op) PMTREE_RETURN_IF_ERROR(AddRefilledAfterMerge(f, o, &out));
  PMTREE_RETURN_IF_ERROR(AddDescending(f, o, &out));
  // Churn: a full-ish tree with every other key of its first half removed
  // (dead slots, reusable entries, rings that wrap).
  const uint64_t n = g.s2 != 0 ? g.s2 : 2 * g.s1;
  auto pre = Inserts(n);
  for (uint64_t i = 1; i <= n / 2; i += 2) pre.push_back(Remove(10 * i));
  out.push_back({"churn", pre});
  return out;
}

std::vector<Op> Alphabet(const PreState& p, bool reopen) {
  Model m;
  for (const Op& op : p.ops) ApplyEffect(&m, EffectOf(m, op));
  const uint64_t max = m.empty() ? 10 : m.rbegin()->first;
  const uint64_t a = max + 5 - 10;  // new, inside the last leaf (shifts the largest key)
  const uint64_t b = max + 5;       // new, after every key
  uint64_t c = a;                   // existing, not the largest, when there is one
  if (m.size() >= 2) c = std::prev(m.end(), 2)->first;
  else if (m.size() == 1) c = max;
  // New, below every key: lands in the first leaf, so splits keep the new key
  // in the old (left) node and LB+-Tree moves entries out of line 0.
  const uint64_t min = m.empty() ? 10 : m.begin()->first;
  const uint64_t low = min / 2;
  // Every mutating entry point, each with a present and an absent key:
  // insert (new: a, b; present after an earlier letter), remove (c; a is
  // absent unless inserted first), upsert of a present key, update of a
  // present (c) and of an absent key (b).
  std::vector<Op> ops = {Insert(a, ValueFor(a, 1)), Insert(b, ValueFor(b, 1)), Remove(c),
                         Op{OpKind::kUpsert, c, ValueFor(c, 2)}, Remove(a), Op{OpKind::kUpdate, c, ValueFor(c, 3)},
                         Op{OpKind::kUpdate, b, ValueFor(b, 3)}};
  if (low < min && !m.count(low)) ops.push_back(Insert(low, ValueFor(low, 1)));
  // The merge-threshold pre-states stop just before the removal that
  // merges a leaf: that removal is a letter there.
  for (const Op& op : p.letters)
    if (m.count(op.key) && op.key != c) ops.push_back(op);
  // Close and reopen: the clean-shutdown writes and instant restart, and the
  // operations after it run on the restarted tree.
  if (reopen) ops.push_back(Op{OpKind::kReopen, 0, 0});
  return ops;
}

std::vector<Op> RandomOps(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const uint64_t domain = std::max<uint64_t>(16, n / 2);
  std::vector<Op> v;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t r = rng();
    uint64_t k = 1 + (r >> 16) % domain;
    uint64_t val = ValueFor(k, i + 1);
    int w = static_cast<int>(r % 100);
    if (w < 50) v.push_back(Insert(k, val));
    else if (w < 70) v.push_back(Remove(k));
    else if (w < 85) v.push_back(Op{OpKind::kUpsert, k, val});
    else v.push_back(Op{OpKind::kUpdate, k, val});
  }
  return v;
}

// Allocations `op` makes on a probe tree after `pre` (0 when it fails).
Result<uint64_t> AllocationsOf(const TreeFactory& f, const ExploreOptions& o, const std::vector<Op>& pre,
                               const Op& op) {
  PMTREE_ASSIGN_OR_RETURN(Probe p, OpenProbe(f, o));
  for (const Op& x : pre) PMTREE_RETURN_IF_ERROR(RunOp(*p.tree, x).status());
  const uint64_t before = counters::ThisThread().allocations;
  if (!RunOp(*p.tree, op).ok()) return uint64_t{0};
  return counters::ThisThread().allocations - before;
}

// The operation of `base` on a pool that is full from its 1st, 2nd, 3rd and
// last allocation (ExploreOptions::out_of_space), checked: a failure may
// strike between a split's new node and its parent, between a key blob and
// its slot, in the middle of a bulk load.
Status AddOutOfSpaceScenarios(const TreeFactory& f, const ExploreOptions& o, const std::string& prefix,
                              const std::vector<Op>& pre, const Op& base, std::vector<Scenario>* out) {
  PMTREE_ASSIGN_OR_RETURN(uint64_t allocs, AllocationsOf(f, o, pre, base));
  std::set<uint64_t> at;
  for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{3}, allocs})
    if (n >= 1 && n <= allocs) at.insert(n);
  for (uint64_t n : at) {
    Op op = base;
    op.fail_alloc = static_cast<uint32_t>(n);
    Scenario s;
    s.ops.push_back(Op{OpKind::kCreate, 0, 0});
    s.ops.insert(s.ops.end(), pre.begin(), pre.end());
    s.ops.push_back(op);
    s.name = prefix + OpString(op);
    s.check_from = s.ops.size() - 1;
    out->push_back(std::move(s));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<Scenario>> BuildScenarios(const TreeFactory& f, const ExploreOptions& o) {
  if (!f.persistent()) return Status::InvalidArgument(std::string(f.name) + " is not a persistent tree");
  PMTREE_RETURN_IF_ERROR(CheckKeyShape(f, o.keys));
  std::vector<Scenario> out;
  const Op create{OpKind::kCreate, 0, 0};
  if (o.workload == Workload::kRandom) {
    Scenario s;
    s.name = "random(" + std::to_string(o.ops) + " ops, seed " + std::to_string(o.seed) + ")";
    s.ops.push_back(create);
    auto ops = RandomOps(o.ops, o.seed);
    s.ops.insert(s.ops.end(), ops.begin(), ops.end());
    s.check_from = 0;
    out.push_back(std::move(s));
    return out;
  }
  out.push_back(Scenario{"create", {create}, 0});
  Growth g;
  PMTREE_ASSIGN_OR_RETURN(auto pres, FindPreStates(f, o, &g));
  // Bulk loads into the new tree, checked: one entry, a full root leaf, a
  // few leaves, past the third level; full and partly filled leaves.  The
  // two-leaf loads are pre-states too, so every letter also runs on the
  // layout a bulk load leaves.
  if (o.bulk_load) {
    std::set<uint64_t> sizes;
    for (uint64_t n : {uint64_t{1}, g.s1 > 1 ? g.s1 - 1 : 16, g.s2 != 0 ? g.s2 + 1 : 64, g.s3 + 1})
      if (n > 0) sizes.insert(n);
    for (uint64_t n : sizes) {
      for (uint64_t fill : {100, 70}) {
        const Op bulk{OpKind::kBulkLoad, n, fill};
        out.push_back(Scenario{OpString(bulk), {create, bulk}, 1});
      }
    }
    const uint64_t n = g.s2 != 0 ? g.s2 + 1 : 64;
    for (uint64_t fill : {100, 70}) pres.push_back({"bulk-" + std::to_string(fill), {Op{OpKind::kBulkLoad, n, fill}}});
  }
  const uint32_t depth = std::clamp<uint32_t>(o.depth, 1, 3);
  // Breadth first (every pre-state at depth 1, then 2, ...), so a time budget
  // cuts the deepest sequences, not whole pre-states.
  for (uint32_t d = 1; d <= depth; d++) {
    for (const PreState& p : pres) {
      auto alpha = Alphabet(p, o.reopen);
      size_t count = 1;
      for (uint32_t i = 0; i < d; i++) count *= alpha.size();
      for (size_t code = 0; code < count; code++) {
        Scenario s;
        s.ops.push_back(create);
        s.ops.insert(s.ops.end(), p.ops.begin(), p.ops.end());
        std::string seq;
        size_t c = code;
        for (uint32_t i = 0; i < d; i++) {
          const Op& op = alpha[c % alpha.size()];
          c /= alpha.size();
          s.ops.push_back(op);
          seq += (seq.empty() ? "" : " ") + OpString(op);
        }
        s.name = p.name + " (" + std::to_string(p.ops.size()) + " ops) then " + seq;
        s.check_from = o.check_all_ops ? 1 : s.ops.size() - 1;
        out.push_back(std::move(s));
      }
    }
  }
  // Last (a time budget cuts them first): every letter that allocates, and
  // a bulk load of three levels, failing on a full pool.
  if (o.out_of_space) {
    for (const PreState& p : pres)
      for (const Op& letter : Alphabet(p, false))
        PMTREE_RETURN_IF_ERROR(AddOutOfSpaceScenarios(
            f, o, p.name + " (" + std::to_string(p.ops.size()) + " ops) then ", p.ops, letter, &out));
    // A tree without a bulk load of its own inserts one by one, and a
    // failure leaves a prefix: no single M1 to check.
    if (o.bulk_load && (f.capabilities & kCapBulkLoadFill))
      PMTREE_RETURN_IF_ERROR(
          AddOutOfSpaceScenarios(f, o, "", {}, Op{OpKind::kBulkLoad, g.s3 != 0 ? g.s3 + 1 : 64, 100}, &out));
  }
  return out;
}

}  // namespace pmtree::crash
