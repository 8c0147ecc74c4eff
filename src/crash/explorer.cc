// SPDX-License-Identifier: Apache-2.0
//
// The crash-state explorer: scenarios, tracing, replay, image checks, the
// supervising parent process, and mutation testing.  See explorer.h and
// docs/crash_model.md.

#include "crash/explorer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "crash/explorer_internal.h"
#include "crash/lazy.h"
#include "crash/shadow.h"
#include "crash/trace.h"

namespace pmtree::crash {

using json = nlohmann::json;

// ---- names ---------------------------------------------------------------------------

std::string OpString(const Op& op) {
  switch (op.kind) {
    case OpKind::kCreate: return "create";
    case OpKind::kInsert: return "insert(" + std::to_string(op.key) + ")";
    case OpKind::kUpdate: return "update(" + std::to_string(op.key) + ")";
    case OpKind::kUpsert: return "upsert(" + std::to_string(op.key) + ")";
    case OpKind::kRemove: return "remove(" + std::to_string(op.key) + ")";
    case OpKind::kReopen: return "reopen";
    case OpKind::kBulkLoad:
      return "bulkload(" + std::to_string(op.key) + " keys, fill " + std::to_string(op.value) + "%)";
  }
  return "?";
}

std::string_view WorkloadName(Workload w) { return w == Workload::kSmall ? "small" : "random"; }

Status ParseWorkload(std::string_view text, Workload* w) {
  if (text == "small") *w = Workload::kSmall;
  else if (text == "random") *w = Workload::kRandom;
  else return Status::InvalidArgument("unknown workload '" + std::string(text) + "'; valid: small, random");
  return Status::Ok();
}

std::string_view LazyModeName(LazyMode m) {
  return m == LazyMode::kOff ? "off" : m == LazyMode::kOn ? "on" : "auto";
}

Status ParseLazyMode(std::string_view text, LazyMode* m) {
  if (text == "off") *m = LazyMode::kOff;
  else if (text == "auto") *m = LazyMode::kAuto;
  else if (text == "on") *m = LazyMode::kOn;
  else return Status::InvalidArgument("unknown lazy mode '" + std::string(text) + "'; valid: off, auto, on");
  return Status::Ok();
}

std::string ImageRefString(const ImageRef& r) {
  return std::to_string(r.scenario) + ":" + std::to_string(r.point) + ":" + std::to_string(r.image);
}

Status ParseImageRef(std::string_view text, ImageRef* r) {
  unsigned long long a, b, c;
  char tail;
  std::string t(text);
  if (std::sscanf(t.c_str(), "%llu:%llu:%llu%c", &a, &b, &c, &tail) != 3)
    return Status::InvalidArgument("an image is SCENARIO:POINT:IMAGE (three numbers), got '" + t + "'");
  *r = ImageRef{a, b, c};
  return Status::Ok();
}

std::string Ticket::ToString() const {
  std::string s = "VIOLATION at image " + ImageRefString(where) + "\n";
  s += "  scenario: " + scenario + "\n";
  s += "  in flight: " + op + "\n";
  s += "  crash point: " + point + "\n";
  s += "  image: " + image + "\n";
  s += "  failure: " + failure + "\n";
  s += "  replay: " + command + "\n";
  return s;
}

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ---- scenarios -----------------------------------------------------------------------

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

// Both 4-byte halves of a value differ between versions, so a value store
// torn in two (a split-store mutant, or a real torn commit) is visible.
uint64_t ValueFor(uint64_t key, uint64_t version) { return ((version + 1) << 40) | (key * 1000 + version); }

// Pre-states found by watching Stats() while a probe tree grows: the
// moments just before its first leaf split, a non-root leaf split, a new
// level, a merge, and the first change of each design counter of
// Stats().extra (LB+-Tree's first entry move, its first hint record, ...);
// the moment before the second split of the first leaf when keys arrive in
// descending order (a node that splits again after a split); plus an empty
// tree and a churned one.
// Insert counts at which a probe tree first splits its root leaf (s1), a
// non-root leaf (s2) and gains a third level (s3); 0: not seen.
struct Growth {
  uint64_t s1 = 0, s2 = 0, s3 = 0;
};

Result<std::vector<PreState>> FindPreStates(const TreeFactory& f, const ExploreOptions& o, Growth* growth) {
  std::vector<PreState> out;
  out.push_back({"empty", {}});
  PMTREE_ASSIGN_OR_RETURN(Probe p, OpenProbe(f, o));
  const uint64_t kMax = 3000;
  std::vector<TreeStats> st(1, p.tree->Stats());
  uint64_t s1 = 0, s2 = 0, s3 = 0;
  // Design counters: name -> the first insert that changed it.
  std::vector<std::pair<std::string, uint64_t>> first_change;
  std::set<std::string> seen_counters;
  for (uint64_t n = 1; n <= kMax; n++) {
    auto r = p.tree->Insert(10 * n, ValueFor(10 * n, 0));
    if (!r.ok()) break;  // out of space: enough
    st.push_back(p.tree->Stats());
    const TreeStats& a = st[n - 1];
    const TreeStats& b = st[n];
    // The one-key tree is the base: some trees count a DRAM root above their
    // single leaf as a level (LB+-Tree: height 2 from the start).
    if (n >= 2 && s1 == 0 && (b.leaf_nodes > st[1].leaf_nodes || b.height > st[1].height)) s1 = n;
    else if (s1 != 0 && s2 == 0 && b.leaf_nodes > a.leaf_nodes) s2 = n;
    if (s3 == 0 && b.height >= 3 && a.height < 3) s3 = n;
    for (const auto& [name, value] : b.extra) {
      if (seen_counters.count(name)) continue;
      double before = 0;
      for (const auto& [an, av] : a.extra)
        if (an == name) before = av;
      if (value != before) {
        seen_counters.insert(name);
        first_change.emplace_back(name, n);
      }
    }
    if (s3 != 0 && s2 != 0) break;
  }
  *growth = Growth{s1, s2, s3};
  auto inserts = [](uint64_t n) {
    std::vector<Op> v;
    for (uint64_t i = 1; i <= n; i++) v.push_back(Insert(10 * i, ValueFor(10 * i, 0)));
    return v;
  };
  if (s1 == 0) {
    // Stats() tells nothing about nodes: fall back to fixed sizes.
    for (uint64_t n : {1, 16, 64}) out.push_back({std::to_string(n) + "-keys", inserts(n)});
    return out;
  }
  std::set<uint64_t> sizes{0};  // insert-only pre-states already present, by key count
  auto add_inserts = [&](const std::string& name, uint64_t n) {
    if (sizes.insert(n).second) out.push_back({name, inserts(n)});
  };
  if (s1 >= 3) add_inserts("root-leaf-one-short", s1 - 2);
  add_inserts("root-leaf-full", s1 - 1);
  if (s2 != 0) add_inserts("leaf-full", s2 - 1);
  if (s3 != 0) add_inserts("inner-full", s3 - 1);
  // A counter that first changes at the n-th insert names a path the
  // workload's operations reach from the state before it (the first change
  // at insert 1 is the empty pre-state).  At most 8, in order of appearance.
  size_t counters = 0;
  for (const auto& [name, n] : first_change) {
    if (n < 2 || counters >= 8) continue;
    if (sizes.count(n - 1)) continue;
    add_inserts("before-first-" + name, n - 1);
    counters++;
  }
  // Merge threshold: from the first two-leaf state, remove the smallest keys
  // until the leaf count drops.
  {
    PMTREE_ASSIGN_OR_RETURN(Probe q, OpenProbe(f, o));
    auto ops = inserts(s1);
    for (const Op& op : ops) (void)q.tree->Insert(op.key, op.value);
    const uint64_t leaves = q.tree->Stats().leaf_nodes;
    for (uint64_t i = 1; i < s1; i++) {
      (void)q.tree->Remove(10 * i);
      if (q.tree->Stats().leaf_nodes < leaves) {
        auto pre = inserts(s1);
        for (uint64_t j = 1; j < i; j++) pre.push_back(Remove(10 * j));
        out.push_back({"merge-threshold", pre, {Remove(10 * i)}});
        break;
      }
    }
  }
  // The same for a node with a left neighbour (trees that merge only): from
  // the first three-leaf state, remove keys upward from the median.
  if (s2 != 0 && !out.empty() && out.back().name == "merge-threshold") {
    PMTREE_ASSIGN_OR_RETURN(Probe q, OpenProbe(f, o));
    for (const Op& op : inserts(s2)) (void)q.tree->Insert(op.key, op.value);
    const uint64_t leaves = q.tree->Stats().leaf_nodes;
    for (uint64_t i = s2 / 2; i <= s2; i++) {
      (void)q.tree->Remove(10 * i);
      if (q.tree->Stats().leaf_nodes < leaves) {
        auto pre = inserts(s2);
        for (uint64_t j = s2 / 2; j < i; j++) pre.push_back(Remove(10 * j));
        out.push_back({"merge-threshold-middle", pre, {Remove(10 * i)}});
        break;
      }
    }
  }
  // Descending keys: every insert lands in the first leaf, every split keeps
  // the new key in the old (left) node, and the second split splits a node
  // that has split before (LB+-Tree flips its alt bit back).  The state just
  // before that second split.
  {
    PMTREE_ASSIGN_OR_RETURN(Probe q, OpenProbe(f, o));
    const uint64_t top = 10 * (kMax + 1);
    const uint64_t leaves0 = q.tree->Stats().leaf_nodes;
    std::vector<Op> pre;
    int splits = 0;
    for (uint64_t i = 0; i < kMax && splits < 2; i++) {
      const Op op = Insert(top - 10 * i, ValueFor(top - 10 * i, 0));
      if (!q.tree->Insert(op.key, op.value).ok()) break;
      const uint64_t leaves = q.tree->Stats().leaf_nodes;
      if (leaves > leaves0 + static_cast<uint64_t>(splits)) splits++;
      if (splits == 2) out.push_back({"descending-leaf-full", pre});
      pre.push_back(op);
    }
  }
  // Churn: a full-ish tree with every other key of its first half removed
  // (dead slots, reusable entries, rings that wrap).
  {
    uint64_t n = s2 != 0 ? s2 : 2 * s1;
    auto pre = inserts(n);
    for (uint64_t i = 1; i <= n / 2; i += 2) pre.push_back(Remove(10 * i));
    out.push_back({"churn", pre});
  }
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
  return out;
}

namespace {

// ---- the worker ----------------------------------------------------------------------

// State shared between the supervising parent and its worker (MAP_SHARED).
struct Shared {
  std::atomic<uint64_t> scenario{0}, point{0}, image{0};
  std::atomic<uint32_t> phase{0};  // kPhase*
  std::atomic<uint64_t> cur_op{0};
  std::atomic<int64_t> heartbeat_ms{0};
  std::atomic<uint64_t> images{0}, points{0}, points_exhaustive{0}, dedup{0}, continuations{0},
      recovery_images{0}, scenarios_done{0}, violations{0}, mutant_points{0}, mutant_points_exhaustive{0},
      lazy_points{0}, lazy_runs{0}, lazy_nondeterministic{0}, lazy_abandoned{0}, lazy_faults{0};
  std::atomic<uint64_t> fault_addr{0}, fault_pc{0};
  std::atomic<int> fault_in_view{0};
  std::atomic<int> budget_hit{0};
  std::atomic<int> stop{0};
};
enum : uint32_t { kPhaseIdle = 0, kPhaseTrace = 1, kPhaseCheck = 2, kPhaseRecoveryCrash = 3 };

int64_t NowMs() { return static_cast<int64_t>(Now() * 1000); }

// Fault bookkeeping for the worker's signal handler.
Shared* g_shared = nullptr;
std::atomic<const char*> g_view{nullptr};
std::atomic<uint64_t> g_view_size{0};

void OnFault(int sig, siginfo_t* si, void* ucv) {
  if (g_shared != nullptr) {
    const auto addr = reinterpret_cast<uint64_t>(si->si_addr);
    g_shared->fault_addr.store(addr);
#if defined(__x86_64__)
    auto* uc = static_cast<ucontext_t*>(ucv);
    g_shared->fault_pc.store(static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]));
#else
    (void)ucv;
#endif
    const char* v = g_view.load();
    if (v != nullptr && addr >= reinterpret_cast<uint64_t>(v) && addr < reinterpret_cast<uint64_t>(v) + g_view_size.load())
      g_shared->fault_in_view.store(1);
  }
  // Returning re-executes the faulting instruction with the default action:
  // the worker dies and the parent reports the position.
  signal(sig, SIG_DFL);
}

// The command line that replays image `r`.
std::string ReplayCommand(const TreeFactory& f, const ExploreOptions& o, const ImageRef& r) {
  std::string c = "pmtree crash --tree " +
                  (o.tree_name_for_command.empty() ? std::string(f.name) : o.tree_name_for_command);
  c += " --mode " + std::string(ModeName(o.mode));
  c += " --workload " + std::string(WorkloadName(o.workload));
  if (o.keys != KeyShape::kU64) c += " --keys " + std::string(KeyShapeName(o.keys));
  c += " --seed " + std::to_string(o.seed);
  if (o.workload == Workload::kRandom) c += " --ops " + std::to_string(o.ops);
  if (o.workload == Workload::kSmall && o.depth != 3) c += " --depth " + std::to_string(o.depth);
  if (o.workload == Workload::kSmall && o.reopen) c += " --reopen";
  if (o.workload == Workload::kSmall && !o.bulk_load) c += " --no-bulk-load";
  if (o.workload == Workload::kSmall && o.check_all_ops) c += " --check-all-ops";
  if (o.continuation_every != 8) c += " --continuation-every " + std::to_string(o.continuation_every);
  if (o.recovery_crash_every != 0) c += " --recovery-crash-every " + std::to_string(o.recovery_crash_every);
  if (o.tree_options.node_size != 0) c += " --node-size " + std::to_string(o.tree_options.node_size);
  for (const auto& [k, v] : o.tree_options.extra) c += " --tree-option " + k + "=" + v;
  if (o.max_images != 4096) c += " --max-images " + std::to_string(o.max_images);
  if (o.samples != 512) c += " --samples " + std::to_string(o.samples);
  if (o.lazy != LazyMode::kAuto) c += " --lazy " + std::string(LazyModeName(o.lazy));
  if (o.lazy_max_runs != 16384) c += " --lazy-max-runs " + std::to_string(o.lazy_max_runs);
  if (o.pool_size != (4ull << 20)) c += " --pool-size " + std::to_string(o.pool_size);
  if (!o.drop_site.empty()) c += " --drop " + o.drop_site + (o.drop_fence ? "@fence" : "@flush");
  if (!o.split_site.empty()) c += " --split-store " + o.split_site;
  if (o.inject_leak) c += " --inject-leak";
  c += " --replay " + ImageRefString(r);
  return c;
}

struct TraceRun {
  TraceLog log;
  std::vector<Effect> effects;  // per operation
  std::string failure;          // the workload itself failed
  uint64_t failed_op = 0;
};

struct PointInfo {
  std::string description;
};

class Worker {
 public:
  Worker(const TreeFactory& f, const ExploreOptions& o, const std::vector<Scenario>& scenarios, Shared* sh,
         int results_fd, double deadline)
      : f_(f), o_(o), scenarios_(scenarios), sh_(sh), results_fd_(results_fd), deadline_(deadline) {}

  Status Init() {
    PMTREE_RETURN_IF_ERROR(img_.Open(o_.pool_size));
    PMTREE_RETURN_IF_ERROR(rec_a_.Open(o_.pool_size));
    PMTREE_RETURN_IF_ERROR(rec_b_.Open(o_.pool_size));
    return Status::Ok();
  }

  // Runs scenarios from `from` on.
  void Run(const ImageRef& from) {
    for (uint64_t s = from.scenario; s < scenarios_.size(); s++) {
      if (o_.replay && s != o_.replay->scenario) continue;
      if (OutOfTime()) return;
      ImageRef start = s == from.scenario ? from : ImageRef{s, 0, 0};
      RunScenario(s, start);
      sh_->scenarios_done.store(s + 1);
      if (sh_->stop.load()) return;
    }
  }

 private:
  bool OutOfTime() {
    if (deadline_ > 0 && Now() > deadline_) {
      sh_->budget_hit.store(1);
      return true;
    }
    return false;
  }

  void Emit(const json& j) {
    std::string line = j.dump() + "\n";
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      ssize_t w = write(results_fd_, p, left);
      if (w <= 0) return;
      p += w;
      left -= static_cast<size_t>(w);
    }
  }

  void Trace(const Scenario& sc, TraceRun* run) {
    sh_->phase.store(kPhaseTrace);
    TracingBackend* tb = nullptr;
    PoolOptions po;
    po.backend = BackendKind::kCustom;
    po.backend_factory = TracingFactory(&run->log, &tb);
    po.counting = false;
    po.use_env = false;
    auto created = PoolImpl::CreateAnonymous(o_.pool_size, f_.name, PoolLayoutFlags(o_.keys), po, /*read_only_view=*/true);
    if (!created.ok()) {
      run->failure = "cannot create the traced pool: " + created.status().ToString();
      return;
    }
    std::unique_ptr<PoolImpl> pool = std::move(*created);
    g_view.store(pool->base());
    g_view_size.store(pool->size());
    Model m;
    std::unique_ptr<Tree> tree;
    for (size_t i = 0; i < sc.ops.size(); i++) {
      const Op& op = sc.ops[i];
      sh_->cur_op.store(i);
      Effect e = EffectOf(m, op);
      e.bulk_prefix_ok = op.kind == OpKind::kBulkLoad && !(f_.capabilities & kCapBulkLoadFill);
      run->effects.push_back(e);
      tb->BeginOp(i);
      Result<bool> r = false;
      switch (op.kind) {
        case OpKind::kCreate: {
          auto t = CreateFor(f_, pool.get(), o_);
          if (!t.ok()) {
            run->failure = "create failed: " + t.status().ToString();
          } else {
            tree = std::move(*t);
            r = true;
          }
          break;
        }
        case OpKind::kInsert: r = tree->Insert(op.key, op.value); break;
        case OpKind::kUpdate: r = tree->Update(op.key, op.value); break;
        case OpKind::kUpsert: r = tree->Upsert(op.key, op.value); break;
        case OpKind::kRemove: r = tree->Remove(op.key); break;
        case OpKind::kBulkLoad: {
          const auto entries = BulkLoadEntries(op);
          Status st = tree->BulkLoad(entries, static_cast<double>(op.value) / 100);
          if (st.ok()) r = true;
          else r = st;
          break;
        }
        case OpKind::kReopen: {
          // A clean shutdown and the next session's open, traced as one
          // operation: Close writes what instant restart needs, the new pool
          // object opens the same bytes and the tree recovers from them.
          // Pool::Close releases the memfd: keep a descriptor of the bytes.
          const int fd = dup(pool->memfd());
          if (fd < 0) {
            run->failure = "dup of the traced pool's memfd failed";
            break;
          }
          Status cs = tree->Close();
          tree.reset();
          if (!cs.ok()) {
            close(fd);
            run->failure = "close failed: " + cs.ToString();
            break;
          }
          auto reopened = PoolImpl::OpenAnonymous(fd, o_.pool_size, f_.name, po, /*read_only_view=*/true);
          close(fd);  // OpenAnonymous duplicated it
          if (!reopened.ok()) {
            run->failure = "reopening the closed pool failed: " + reopened.status().ToString();
            break;
          }
          pool = std::move(*reopened);  // tb now names the new pool's backend
          g_view.store(pool->base());
          g_view_size.store(pool->size());
          auto t = RecoverFor(f_, pool.get(), o_);
          if (!t.ok()) {
            run->failure = "recovery after a clean close failed: " + t.status().ToString();
          } else {
            tree = std::move(*t);
            r = true;
          }
          break;
        }
      }
      tb->EndOp(i);
      if (run->failure.empty() && !r.ok()) run->failure = OpString(op) + " failed: " + r.status().ToString();
      if (run->failure.empty() && *r != e.expected)
        run->failure = OpString(op) + " returned " + (*r ? "true" : "false") + " but the model expects " +
                       (e.expected ? "true" : "false");
      if (!run->failure.empty()) {
        run->failed_op = i;
        break;
      }
      ApplyEffect(&m, e);
    }
    tree.reset();  // a crash: no Close()
    pool.reset();
    g_view.store(nullptr);
  }

  // Opens image `file` copy-on-write, recovers and checks it.  With
  // `lines` (a lazy run, lazy.h): records which of these dirty lines the
  // check reads (recovery to the space check; not the continuation) into
  // *read, in the order of first access.
  std::string CheckImage(ImageFile& file, const Expect& e, bool continuation, uint64_t seed,
                         const std::vector<uint64_t>* lines = nullptr, std::vector<uint32_t>* read = nullptr) {
    PoolOptions po;
    po.backend = BackendKind::kDram;
    po.counting = false;
    po.use_env = false;
    po.private_mapping = true;
    ReadTracker& tracker = ReadTracker::Get();
    struct StopTracking {
      ReadTracker* t;
      ~StopTracking() {
        if (t) t->Stop();
      }
    } stop_tracking{lines ? &tracker : nullptr};
    ExploreOptions recover_options = o_;
    if (lines) {
      // The pool header is read with pread() before the mapping exists.
      tracker.Arm(*lines, kPoolHeaderSize);
      po.on_map = [&tracker](char* base, uint64_t size) { tracker.Protect(base, size); };
      recover_options.tree_options.recovery_threads = 1;  // reads are tracked on this thread only
    }
    auto finish_tracking = [&] {
      if (!lines) return;
      tracker.Stop();
      *read = tracker.order();
      sh_->lazy_faults.fetch_add(tracker.faults());
    };
    auto pool = PoolImpl::OpenAnonymous(file.fd, file.size, f_.name, po, false);
    if (!pool.ok()) {
      finish_tracking();
      return "the pool does not open: " + pool.status().ToString();
    }
    auto tree = RecoverFor(f_, pool->get(), recover_options);
    if (!tree.ok()) {
      const bool absent = e.absent_ok && (*pool)->root(0) == 0;
      finish_tracking();
      if (absent) return "";
      return "recovery failed: " + tree.status().ToString();
    }
    if (o_.inject_leak) (void)(*pool)->allocator().Allocate(kAllocGranule);
    int which = 0;
    std::string failure = CheckTree(pool->get(), tree->get(), e, &which, true);
    finish_tracking();
    // (No continuation after a partial default bulk load: its model is the
    // recovered prefix, which the scan already checked.)
    if (failure.empty() && continuation && o_.continuation_ops > 0 && which != 3) {
      sh_->continuations.fetch_add(1);
      Model m = *e.m0;
      if (which == 2) ApplyEffect(&m, e.effect);
      failure = RunContinuation(pool->get(), tree->get(), &m, e.focus_key, o_.continuation_ops, seed);
    }
    tree->reset();
    return failure;
  }

  // Traces recovery of the image in `img_` and checks every crash image of
  // it (bounded).  Returns "" or the failure.
  std::string CrashDuringRecovery(const Expect& e, uint64_t extent, uint64_t seed) {
    sh_->phase.store(kPhaseRecoveryCrash);
    rec_a_.Reset(extent);
    std::memcpy(rec_a_.map, img_.map, extent);
    TraceLog rlog;
    TracingBackend* tb = nullptr;
    PoolOptions po;
    po.backend = BackendKind::kCustom;
    po.backend_factory = TracingFactory(&rlog, &tb);
    po.counting = false;
    po.use_env = false;
    {
      auto pool = PoolImpl::OpenAnonymous(rec_a_.fd, rec_a_.size, f_.name, po, /*read_only_view=*/true);
      if (!pool.ok()) return "";  // reported by the plain check
      tb->BeginOp(0);
      auto tree = RecoverFor(f_, pool->get(), o_);
      tb->EndOp(0);
      if (!tree.ok()) return "";
      tree->reset();
    }
    rec_a_.dirty = std::max(rec_a_.dirty, rlog.high_water);
    bool writes = false;
    bool inside = false;
    for (const Event& ev : rlog.events) {
      if (ev.kind == EventKind::kOpBegin) inside = true;
      if (inside && (ev.kind == EventKind::kStore || ev.kind == EventKind::kNtStore)) writes = true;
    }
    if (!writes) {
      sh_->phase.store(kPhaseCheck);
      return "";
    }
    rec_b_.Reset(std::max(extent, rlog.high_water));
    std::memcpy(rec_b_.map, img_.map, extent);
    Shadow shadow(rec_b_.map, rec_b_.size, o_.mode);
    inside = false;
    uint64_t q = 0;
    std::string failure;
    auto point = [&](const std::string& where) -> bool {
      std::vector<Unit*> units = shadow.DirtyUnits();
      ImagePlan plan(units, rec_b_.map, o_.recovery_images, 16, seed ^ Mix(q));
      std::vector<uint32_t> choice;
      for (uint64_t j = 0; j < plan.planned(); j++) {
        plan.Apply(j, &choice);
        sh_->recovery_images.fetch_add(1);
        std::string f = CheckImage(rec_b_, e, false, seed);
        if (!f.empty()) {
          failure = "crash during recovery (" + where + ", recovery image " + std::to_string(q) + ":" +
                    std::to_string(j) + ", " + plan.Describe(choice) + "), then recovery again: " + f;
          return false;
        }
      }
      q++;
      return true;
    };
    for (const Event& ev : rlog.events) {
      switch (ev.kind) {
        case EventKind::kOpBegin: inside = true; break;
        case EventKind::kOpEnd:
          if (!point("end of recovery")) return failure;
          break;
        case EventKind::kStore:
        case EventKind::kNtStore:
          if (o_.mode == Mode::kEadr) {
            for (uint64_t off = 0; off < ev.len;) {
              uint64_t n = std::min<uint64_t>(ev.len - off, 8 - ((ev.off + off) & 7));
              shadow.Store(ev.off + off, &rlog.bytes[ev.data + off], n, ev.site, false);
              off += n;
              if (inside && !point("after a store at " + rlog.sites.Name(ev.site))) return failure;
            }
          } else {
            shadow.Store(ev.off, &rlog.bytes[ev.data], ev.len, ev.site, ev.kind == EventKind::kNtStore);
          }
          break;
        case EventKind::kFlush:
          if (!o_.drop_fence && IsDropped(rlog, ev.site)) break;
          shadow.Flush(ev.off, ev.len, ev.site);
          break;
        case EventKind::kFence:
          if (o_.drop_fence && IsDropped(rlog, ev.site)) break;
          if (inside && o_.mode != Mode::kEadr && !point("before the fence at " + rlog.sites.Name(ev.site)))
            return failure;
          shadow.Fence(ev.site);
          break;
      }
    }
    sh_->phase.store(kPhaseCheck);
    return "";
  }

  std::string Command(const ImageRef& r) const { return ReplayCommand(f_, o_, r); }

  // Lazy search at a point with this plan: with --lazy on at every point
  // with dirty lines; with auto only in a mutant's run, where the plain plan
  // would sample (a mutant is "redundant" only when every point where it
  // differs is proved; a whole exploration stays on the faster plain plan).
  // auto leaves the search again when it cannot complete within the bound.  Never in eADR (no dirty
  // lines: the images are prefixes of the store order).
  bool UseLazy(const ImagePlan& plan) const {
    if (o_.mode == Mode::kEadr || o_.lazy == LazyMode::kOff || plan.units().empty() || !ReadTracker::Supported())
      return false;
    const bool mutant = !o_.drop_site.empty() || !o_.split_site.empty();
    return o_.lazy == LazyMode::kOn || (mutant && !plan.exhaustive());
  }

  // Lazy runs of the current operation, by image hash: the dirty lines
  // (offsets) each check read, in order.  An image met again at a later
  // crash point is not checked again; its recorded reads, mapped onto this
  // point's dirty lines, continue the search.
  bool LazySeen(uint64_t h, const std::vector<uint64_t>& lines, std::vector<uint32_t>* read) const {
    auto it = lazy_seen_.find(h);
    if (it == lazy_seen_.end()) return false;
    for (uint64_t off : it->second) {
      auto l = std::lower_bound(lines.begin(), lines.end(), off);
      if (l != lines.end() && *l == off) read->push_back(static_cast<uint32_t>(l - lines.begin()));
    }
    return true;
  }
  void RememberLazy(uint64_t h, const std::vector<uint64_t>& lines, const std::vector<uint32_t>& read) {
    std::vector<uint64_t>& offs = lazy_seen_[h];
    offs.clear();
    for (uint32_t l : read) offs.push_back(lines[l]);
  }

  bool IsDropped(const TraceLog& log, uint32_t site) const {
    return !o_.drop_site.empty() && log.sites.Name(site) == o_.drop_site;
  }

  void Report(const ImageRef& r, const Scenario& sc, uint64_t op, const std::string& point,
              const std::string& image, const std::string& failure) {
    sh_->violations.fetch_add(1);
    json j;
    j["ticket"] = {{"scenario_index", r.scenario}, {"point", r.point}, {"image_index", r.image},
                   {"scenario", sc.name}, {"op", op < sc.ops.size() ? OpString(sc.ops[op]) : "?"},
                   {"point_desc", point}, {"image", image}, {"failure", failure}, {"command", Command(r)}};
    Emit(j);
    if (o_.replay) std::fprintf(stderr, "replay %s: FAILED: %s\n", ImageRefString(r).c_str(), failure.c_str());
    if (o_.stop_at_first_violation) sh_->stop.store(1);
  }

  void RunScenario(uint64_t s, const ImageRef& start) {
    const Scenario& sc = scenarios_[s];
    TraceRun run;
    sh_->scenario.store(s);
    sh_->point.store(0);
    sh_->image.store(0);
    sh_->heartbeat_ms.store(NowMs());
    Trace(sc, &run);
    if (!run.failure.empty()) {
      if (start.point == 0 && start.image == 0)
        Report(ImageRef{s, 0, 0}, sc, run.failed_op, "while running the workload (no crash)", "-", run.failure);
      return;
    }
    sh_->phase.store(kPhaseCheck);
    img_.Reset(run.log.high_water);
    Shadow shadow(img_.map, img_.size, o_.mode);
    const TraceLog& log = run.log;
    int64_t drop_id = -1;
    int64_t split_id = -1;
    for (uint32_t i = 0; i < log.sites.size(); i++) {
      if (!o_.drop_site.empty() && log.sites.Name(i) == o_.drop_site) drop_id = i;
      if (!o_.split_site.empty() && log.sites.Name(i) == o_.split_site) split_id = i;
    }
    // A mutant run replays the unmutated trace alongside, to check only the
    // crash points whose images differ from the correct program's.
    std::vector<char> base_img;
    std::unique_ptr<Shadow> base;
    if (!o_.drop_site.empty() || !o_.split_site.empty()) {
      base_img.assign(log.high_water + kLine, 0);
      base = std::make_unique<Shadow>(base_img.data(), base_img.size(), o_.mode);
    }
    // Coverage, per (site, kind) name.
    struct SiteCov {
      uint64_t reached = 0;
      bool covered = false;
      bool in_bulk_load = false;  // covered by a crash point of a bulk load
      uint64_t upper_nonzero = 0;  // store8: stores writing a nonzero upper half
    };
    std::map<std::pair<std::string, std::string>, SiteCov> cov;
    std::set<uint32_t> flushes_since_point;
    Model model;
    uint64_t op = 0;
    bool focus = false;
    uint64_t point = 0;
    uint64_t last_gen = UINT64_MAX;
    std::unordered_set<uint64_t> seen;
    lazy_seen_.clear();
    bool stop = false;
    bool started = false;  // before the first operation: the pool's own header set-up, not counted

    auto mark = [&](uint32_t site, const char* kind) {
      SiteCov& c = cov[{log.sites.Name(site), kind}];
      c.covered = true;
      c.in_bulk_load = c.in_bulk_load || sc.ops[op].kind == OpKind::kBulkLoad;
    };
    auto crash_point = [&](const std::string& where, bool at_end, uint32_t fence_site) {
      if (!at_end && shadow.generation() == last_gen) return;  // same images as the last point
      last_gen = at_end ? UINT64_MAX : shadow.generation();
      const uint64_t p = point++;
      for (uint32_t fs : flushes_since_point) mark(fs, "flush");
      flushes_since_point.clear();
      if (fence_site != UINT32_MAX) mark(fence_site, "fence");
      if (p < start.point) return;
      if (o_.replay && p != o_.replay->point) return;
      bool mutant_specific = false;
      if (base) {
        if (base->Signature() == shadow.Signature()) return;  // checked by the base run
        mutant_specific = true;
      }
      Expect e;
      e.m0 = &model;
      e.m0_ok = !at_end;
      e.absent_ok = sc.ops[op].kind == OpKind::kCreate && !at_end;
      e.effect = run.effects[op];
      e.focus_key = run.effects[op].key;
      const uint64_t seed = Mix(o_.seed ^ Mix(s * 1000003 + p));
      std::vector<Unit*> units;
      if (o_.mode != Mode::kEadr) units = shadow.DirtyUnits();
      ImagePlan plan(units, img_.map, o_.max_images, o_.samples, seed);
      const bool lazy = UseLazy(plan);
      sh_->points.fetch_add(1);
      if (lazy) sh_->lazy_points.fetch_add(1);
      if (!lazy && plan.exhaustive()) sh_->points_exhaustive.fetch_add(1);
      if (mutant_specific) {
        sh_->mutant_points.fetch_add(1);
        if (!lazy && plan.exhaustive()) sh_->mutant_points_exhaustive.fetch_add(1);
      }
      // The worker died inside this point's lazy search (its ticket is out,
      // and the search cannot resume without the runs before it).
      if (lazy && p == start.point && start.image > 0) return;
      const uint64_t first = p == start.point ? start.image : 0;
      // Checks the image patched into P as image `i` of this point; with
      // `lines`, a lazy run that reports what it read.  False: leave the point.
      auto check = [&](uint64_t i, const std::vector<uint32_t>& choice, const std::vector<uint64_t>* lines,
                       std::vector<uint32_t>* read) -> bool {
        sh_->point.store(p);
        sh_->image.store(i);
        sh_->heartbeat_ms.store(NowMs());
        const uint64_t h = plan.ImageHash(shadow.p_hash()) ^ (at_end ? 0x5bd1e995ull : 0);
        if (!o_.replay && lines && LazySeen(h, *lines, read)) {
          sh_->dedup.fetch_add(1);
          return true;
        }
        if (!o_.replay && !lines && !seen.insert(h).second) {
          sh_->dedup.fetch_add(1);
          return true;
        }
        const bool quiet = o_.replay && i != o_.replay->image;  // a lazy replay re-runs the search up to it
        const bool cont = !quiet && (i == first || (o_.continuation_every > 0 && i % o_.continuation_every == 0));
        std::string failure = CheckImage(img_, e, cont, seed ^ Mix(i), lines, read);
        if (lines && !o_.replay) RememberLazy(h, *lines, *read);
        sh_->images.fetch_add(1);
        const bool recovery_crash = i == 0 || (!lines && i + 1 == plan.planned()) ||
                                    (o_.recovery_crash_every > 0 && i % o_.recovery_crash_every == 0);
        if (!quiet && failure.empty() && o_.crash_during_recovery && recovery_crash)
          failure = CrashDuringRecovery(e, std::max(img_.dirty, run.log.high_water), seed ^ Mix(i + 7));
        if (quiet) return true;
        if (o_.replay)
          std::fprintf(stderr, "replay %s: scenario %s; in flight %s; %s; image %s: %s\n",
                       ImageRefString(ImageRef{s, p, i}).c_str(), sc.name.c_str(), OpString(sc.ops[op]).c_str(),
                       where.c_str(), plan.Describe(choice).c_str(), failure.empty() ? "OK" : "FAILED");
        if (!failure.empty()) {
          Report(ImageRef{s, p, i}, sc, op, where, plan.Describe(choice), failure);
          if (sh_->stop.load()) stop = true;
          return false;  // one ticket per crash point is enough
        }
        if (OutOfTime()) {
          stop = true;
          return false;
        }
        return !(o_.replay && i == o_.replay->image);
      };
      std::vector<uint32_t> choice;
      if (!lazy) {
        for (uint64_t i = first; i < plan.planned(); i++) {
          if (o_.replay && i != o_.replay->image) continue;
          plan.Apply(i, &choice);
          if (!check(i, choice, nullptr, nullptr)) return;
        }
        return;
      }
      // Lazy: branch only on the dirty lines the checks read (lazy.h).
      const LazyUnits lz = MakeLazyUnits(units, img_.map);
      LazyPlan search(lz.Alternatives(), lz.unit_lines);
      std::vector<uint32_t> alt, read;
      uint64_t i = 0;
      for (; i < o_.lazy_max_runs && search.Next(&alt); i++) {
        choice = lz.Choice(alt);
        plan.ApplyChoice(choice);
        read.clear();
        const bool go_on = check(i, choice, &lz.lines, &read);
        search.Done(read);
        if (!go_on) return;
        // auto: the images of the units the first run read already exceed
        // the bound, so the search cannot complete and the structured set is
        // the better sample: leave the lazy search.
        if (i == 0 && o_.lazy == LazyMode::kAuto && lz.ImagesOf(read) > o_.lazy_max_runs) break;
        // auto: likewise as soon as the queue shows the bound cannot hold.
        if (o_.lazy == LazyMode::kAuto && search.runs_needed_at_least() > o_.lazy_max_runs) break;
      }
      sh_->lazy_runs.fetch_add(search.runs());
      if (search.nondeterministic()) sh_->lazy_nondeterministic.fetch_add(1);
      if (search.complete()) {
        sh_->points_exhaustive.fetch_add(1);
        if (mutant_specific) sh_->mutant_points_exhaustive.fetch_add(1);
        return;
      }
      if (o_.lazy == LazyMode::kOn) return;
      // auto: the plan after all (its image 0, all old, was run 0).
      sh_->lazy_abandoned.fetch_add(1);
      if (plan.exhaustive()) {
        sh_->points_exhaustive.fetch_add(1);
        if (mutant_specific) sh_->mutant_points_exhaustive.fetch_add(1);
      }
      for (uint64_t j = 1; j < plan.planned(); j++) {
        plan.Apply(j, &choice);
        if (!check(i + j, choice, nullptr, nullptr)) return;
      }
    };

    for (const Event& ev : log.events) {
      if (stop) break;
      switch (ev.kind) {
        case EventKind::kOpBegin:
          op = ev.off;
          started = true;
          focus = op >= sc.check_from;
          seen.clear();
          lazy_seen_.clear();
          last_gen = UINT64_MAX;
          flushes_since_point.clear();
          break;
        case EventKind::kOpEnd:
          if (focus) shadow.OpEnd();
          if (focus) crash_point("end of " + OpString(sc.ops[op]), true, UINT32_MAX);
          ApplyEffect(&model, run.effects[op]);
          break;
        case EventKind::kStore:
        case EventKind::kNtStore: {
          // An aligned 8-byte store is a commit candidate: its site is
          // listed for the split-store mutants when a checked operation
          // made it.
          const bool store8 = ev.len == 8 && (ev.off & 7) == 0;
          if (store8 && focus) cov[{log.sites.Name(ev.site), "store8"}].covered = true;
          if (store8 && started) {
            SiteCov& c = cov[{log.sites.Name(ev.site), "store8"}];
            c.reached++;
            uint32_t upper;
            std::memcpy(&upper, &log.bytes[ev.data + 4], 4);
            c.upper_nonzero += upper != 0;
          }
          // The split-store mutant: the store reaches memory as two 4-byte
          // halves, in order (a torn commit).
          const uint64_t piece = store8 && split_id == static_cast<int64_t>(ev.site) ? 4 : 8;
          if (o_.mode == Mode::kEadr) {
            for (uint64_t off = 0; off < ev.len && !stop;) {
              uint64_t n = std::min<uint64_t>(ev.len - off, piece - ((ev.off + off) & (piece - 1)));
              shadow.Store(ev.off + off, &log.bytes[ev.data + off], n, ev.site, false);
              if (base) base->Store(ev.off + off, &log.bytes[ev.data + off], n, ev.site, false);
              off += n;
              if (focus) crash_point("after the store at " + log.sites.Name(ev.site), false, UINT32_MAX);
            }
          } else if (piece == 4) {
            shadow.Store(ev.off, &log.bytes[ev.data], 4, ev.site, ev.kind == EventKind::kNtStore);
            shadow.Store(ev.off + 4, &log.bytes[ev.data + 4], 4, ev.site, ev.kind == EventKind::kNtStore);
            base->Store(ev.off, &log.bytes[ev.data], ev.len, ev.site, ev.kind == EventKind::kNtStore);
          } else {
            shadow.Store(ev.off, &log.bytes[ev.data], ev.len, ev.site, ev.kind == EventKind::kNtStore);
            if (base) base->Store(ev.off, &log.bytes[ev.data], ev.len, ev.site, ev.kind == EventKind::kNtStore);
          }
          break;
        }
        case EventKind::kFlush:
          if (base) base->Flush(ev.off, ev.len, ev.site);
          // A dropped site still counts as reached (`--drop` checks it was).
          if (started) cov[{log.sites.Name(ev.site), "flush"}].reached++;
          if (!o_.drop_fence && drop_id == static_cast<int64_t>(ev.site)) break;
          if (focus) {
            flushes_since_point.insert(ev.site);
            if (o_.mode == Mode::kEadr) mark(ev.site, "flush");
          }
          shadow.Flush(ev.off, ev.len, ev.site);
          break;
        case EventKind::kFence:
          if (started) cov[{log.sites.Name(ev.site), "fence"}].reached++;
          if (o_.drop_fence && drop_id == static_cast<int64_t>(ev.site)) {
            if (base) base->Fence(ev.site);
            break;
          }
          if (focus) {
            if (o_.mode != Mode::kEadr) crash_point("before the fence at " + log.sites.Name(ev.site), false, ev.site);
            else mark(ev.site, "fence");
          }
          shadow.Fence(ev.site);
          if (base) base->Fence(ev.site);
          break;
      }
    }
    // Coverage and lints of this scenario, for the parent to sum.
    json sites = json::array();
    std::map<std::string, std::string> function_of;
    for (uint32_t i = 0; i < log.sites.size(); i++) function_of[log.sites.Name(i)] = log.sites.Function(i);
    for (const auto& [key, val] : cov)
      sites.push_back(
          {key.first, key.second, val.reached, val.covered, function_of[key.first], val.in_bulk_load, val.upper_nonzero});
    json lints = json::array();
    auto add = [&](const char* kind, const std::map<uint32_t, uint64_t>& m) {
      for (const auto& [site, n] : m) lints.push_back({kind, log.sites.Name(site), n});
    };
    add("redundant flush", shadow.lints().redundant_flushes);
    add("empty fence", shadow.lints().empty_fences);
    add("store after flush, before fence", shadow.lints().store_after_flush);
    add("store still pending at operation end", shadow.lints().pending_at_op_end);
    Emit(json{{"sites", sites}, {"lints", lints}});
  }

  const TreeFactory& f_;
  const ExploreOptions& o_;
  const std::vector<Scenario>& scenarios_;
  Shared* sh_;
  int results_fd_;
  double deadline_;
  ImageFile img_, rec_a_, rec_b_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> lazy_seen_;
};

void InstallFaultHandlers(Shared* sh) {
  g_shared = sh;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnFault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

std::string SignalName(int sig) {
  const char* d = strsignal(sig);
  return std::string(d ? d : "signal") + " (signal " + std::to_string(sig) + ")";
}

}  // namespace

namespace {

double CpuSeconds(int who) {
  rusage ru;
  getrusage(who, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace

Result<ExploreReport> Explore(const TreeFactory& f, const ExploreOptions& o) {
  const double t0 = Now();
  // CPU time of this process (scenario building, supervision) and of its
  // waited-for workers.
  const double cpu0 = CpuSeconds(RUSAGE_SELF) + CpuSeconds(RUSAGE_CHILDREN);
  PMTREE_ASSIGN_OR_RETURN(std::vector<Scenario> scenarios, BuildScenarios(f, o));
  if (o.replay && o.replay->scenario >= scenarios.size())
    return Status::InvalidArgument("replay: scenario " + std::to_string(o.replay->scenario) + " does not exist (" +
                                   std::to_string(scenarios.size()) + " scenarios)");
  const double deadline = o.budget_seconds > 0 ? t0 + o.budget_seconds : 0;
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Status::IoError("mmap of the explorer's shared state failed");
  Shared* sh = new (mem) Shared();
  int results = memfd_create("pmtree-crash-results", MFD_CLOEXEC);
  if (results < 0) {
    munmap(mem, sizeof(Shared));
    return Status::IoError("memfd_create for explorer results failed");
  }
  ExploreReport rep;
  rep.tree = std::string(f.name);
  rep.mode = o.mode;
  rep.workload = o.workload;
  rep.scenarios_total = scenarios.size();
  std::vector<json> parent_tickets;
  Status worker_status;

  auto ticket_for_death = [&](int status) {
    const ImageRef r{sh->scenario.load(), sh->point.load(), sh->image.load()};
    const uint32_t phase = sh->phase.load();
    std::string why;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      why = "no progress for " + std::to_string(static_cast<int>(o.hang_seconds)) + " s: killed (a hang)";
    } else if (WIFSIGNALED(status)) {
      why = "died of " + SignalName(WTERMSIG(status));
      if (sh->fault_addr.load() != 0) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), ", fault address 0x%llx, pc 0x%llx",
                      static_cast<unsigned long long>(sh->fault_addr.load()),
                      static_cast<unsigned long long>(sh->fault_pc.load()));
        why += buf;
      }
    } else {
      why = "exited with status " + std::to_string(WEXITSTATUS(status));
    }
    const Scenario& sc = scenarios[std::min<uint64_t>(r.scenario, scenarios.size() - 1)];
    std::string failure, point = "-";
    if (phase == kPhaseTrace) {
      if (sh->fault_in_view.load())
        failure = "instrumentation gap: a raw store to the read-only pool view bypassed the persistence layer (" +
                  why + ")";
      else
        failure = "the tree crashed while running the workload: " + why;
      point = "while running the workload (no crash)";
    } else if (phase == kPhaseRecoveryCrash) {
      failure = "crash during recovery, then recovery again: the worker " + why;
    } else {
      failure = "recovery or check of the image: the worker " + why;
    }
    json t;
    t["scenario_index"] = r.scenario;
    t["point"] = r.point;
    t["image_index"] = r.image;
    t["scenario"] = sc.name;
    t["op"] = phase == kPhaseTrace ? OpString(sc.ops[std::min<uint64_t>(sh->cur_op.load(), sc.ops.size() - 1)]) : "-";
    t["point_desc"] = point;
    t["image"] = "-";
    t["failure"] = failure;
    t["command"] = ReplayCommand(f, o, r);
    parent_tickets.push_back(t);
    sh->violations.fetch_add(1);
    return r;
  };

  if (!o.isolate) {
    Worker w(f, o, scenarios, sh, results, deadline);
    worker_status = w.Init();
    if (worker_status.ok()) w.Run(ImageRef{});
  } else {
    ImageRef from{};
    int restarts = 0;
    double last_progress = Now();
    while (true) {
      sh->phase.store(kPhaseIdle);
      sh->fault_addr.store(0);
      sh->fault_in_view.store(0);
      sh->heartbeat_ms.store(NowMs());
      std::fflush(stderr);
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid < 0) {
        worker_status = Status::IoError("fork of the explorer worker failed");
        break;
      }
      if (pid == 0) {
        InstallFaultHandlers(sh);
        Worker w(f, o, scenarios, sh, results, deadline);
        Status s = w.Init();
        if (!s.ok()) {
          std::fprintf(stderr, "pmtree crash worker: %s\n", s.ToString().c_str());
          _exit(3);
        }
        w.Run(from);
        _exit(0);
      }
      int status = 0;
      while (true) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        const int64_t silent = NowMs() - sh->heartbeat_ms.load();
        if (silent > static_cast<int64_t>(o.hang_seconds * 1000)) {
          kill(pid, SIGKILL);
          waitpid(pid, &status, 0);
          break;
        }
        if (o.progress && Now() - last_progress >= 2) {
          last_progress = Now();
          std::fprintf(stderr, "crash %s %s: scenario %llu/%zu, %llu crash points, %llu images, %.0f s, %llu violations\n",
                       std::string(f.name).c_str(), std::string(ModeName(o.mode)).c_str(),
                       static_cast<unsigned long long>(sh->scenario.load()), scenarios.size(),
                       static_cast<unsigned long long>(sh->points.load()),
                       static_cast<unsigned long long>(sh->images.load()), Now() - t0,
                       static_cast<unsigned long long>(sh->violations.load()));
        }
        usleep(2000);
      }
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) break;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
        worker_status = Status::IoError("the explorer worker could not start (see stderr)");
        break;
      }
      const uint32_t phase = sh->phase.load();
      ImageRef where = ticket_for_death(status);
      if (o.replay || o.stop_at_first_violation || ++restarts > 1000) break;
      from = phase == kPhaseTrace ? ImageRef{where.scenario + 1, 0, 0} : ImageRef{where.scenario, where.point, where.image + 1};
      if (from.scenario >= scenarios.size()) break;
    }
  }

  // Collect the worker's results.
  std::string text;
  {
    char buf[65536];
    lseek(results, 0, SEEK_SET);
    ssize_t n;
    while ((n = read(results, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
    close(results);
  }
  std::map<std::pair<std::string, std::string>, SiteReport> sites;
  std::map<std::pair<std::string, std::string>, uint64_t> lints;
  std::vector<json> tickets;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    json j = json::parse(text.substr(pos, nl - pos), nullptr, false);
    pos = nl + 1;
    if (j.is_discarded()) continue;
    if (j.contains("ticket")) tickets.push_back(j["ticket"]);
    if (j.contains("sites")) {
      for (const auto& s : j["sites"]) {
        auto& r = sites[{s[0].get<std::string>(), s[1].get<std::string>()}];
        r.name = s[0].get<std::string>();
        r.kind = s[1].get<std::string>();
        if (s.size() > 4 && r.function.empty()) r.function = s[4].get<std::string>();
        r.reached += s[2].get<uint64_t>();
        r.covered = r.covered || s[3].get<bool>();
        if (s.size() > 5) r.in_bulk_load = r.in_bulk_load || s[5].get<bool>();
        if (s.size() > 6) r.upper_nonzero += s[6].get<uint64_t>();
      }
      for (const auto& l : j["lints"]) lints[{l[0].get<std::string>(), l[1].get<std::string>()}] += l[2].get<uint64_t>();
    }
  }
  for (auto& t : parent_tickets) tickets.push_back(t);
  for (const auto& t : tickets) {
    if (rep.tickets.size() >= o.max_tickets) break;
    Ticket k;
    k.where = ImageRef{t["scenario_index"], t["point"], t["image_index"]};
    k.scenario = t["scenario"];
    k.op = t["op"];
    k.point = t["point_desc"];
    k.image = t["image"];
    k.failure = t["failure"];
    k.command = t["command"];
    rep.tickets.push_back(k);
  }
  for (auto& [key, s] : sites) {
    if (s.kind == "store8") {
      if (s.covered) rep.store_sites.push_back(s);
      continue;
    }
    rep.sites_total++;
    if (s.covered) rep.sites_covered++;
    rep.sites.push_back(s);
  }
  for (auto& [key, n] : lints) rep.lints.push_back(LintFinding{key.first, key.second, n});
  rep.scenarios = sh->scenarios_done.load();
  rep.crash_points = sh->points.load();
  rep.crash_points_exhaustive = sh->points_exhaustive.load();
  rep.lazy_points = sh->lazy_points.load();
  rep.lazy_runs = sh->lazy_runs.load();
  rep.lazy_nondeterministic = sh->lazy_nondeterministic.load();
  rep.lazy_abandoned = sh->lazy_abandoned.load();
  rep.lazy_faults = sh->lazy_faults.load();
  rep.mutant_points = sh->mutant_points.load();
  rep.mutant_points_exhaustive = sh->mutant_points_exhaustive.load();
  rep.images_checked = sh->images.load();
  rep.images_deduplicated = sh->dedup.load();
  rep.continuation_runs = sh->continuations.load();
  rep.recovery_crash_images = sh->recovery_images.load();
  rep.violations = sh->violations.load();
  rep.budget_exhausted = sh->budget_hit.load() != 0;
  rep.seconds = Now() - t0;
  rep.cpu_seconds = CpuSeconds(RUSAGE_SELF) + CpuSeconds(RUSAGE_CHILDREN) - cpu0;
  rep.images_per_cpu_s =
      rep.cpu_seconds > 0 ? static_cast<double>(rep.images_checked + rep.recovery_crash_images) / rep.cpu_seconds : 0;
  rep.images_per_s = rep.seconds > 0 ? static_cast<double>(rep.images_checked + rep.recovery_crash_images) / rep.seconds : 0;
  rep.exhaustive_fraction =
      rep.crash_points > 0 ? static_cast<double>(rep.crash_points_exhaustive) / static_cast<double>(rep.crash_points) : 1;
  sh->~Shared();
  munmap(mem, sizeof(Shared));
  if (!worker_status.ok()) return worker_status;
  return rep;
}

Result<std::vector<uint32_t>> ValidNodeSizes(const TreeFactory& f) {
  if (!f.persistent()) return Status::InvalidArgument(std::string(f.name) + " is not a persistent tree");
  std::vector<uint32_t> sizes;
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.counting = false;
  po.use_env = false;
  for (uint32_t n = 64; n <= 65536; n += 64) {
    PMTREE_ASSIGN_OR_RETURN(auto pool, PoolImpl::CreateAnonymous(4ull << 20, f.name, 0, po));
    TreeOptions to;
    to.node_size = n;
    auto t = f.create(pool.get(), to);
    if (t.ok()) sizes.push_back(n);
    else if (t.status().code() != Status::Code::kInvalidArgument)
      return t.status().Annotate("probing node size " + std::to_string(n));
  }
  if (sizes.empty()) return Status::InvalidArgument(std::string(f.name) + " accepts no node size in 64..65536");
  return sizes;
}

namespace {

// One mutant exploration: `mo` carries the mutation; stops at the first
// violation.  Caught, redundant (every crash point where its images differ
// from the correct program's enumerated exhaustively, no violation) or
// survived.
Status RunMutant(const TreeFactory& f, ExploreOptions mo, Mutant mu, const ExploreOptions& options,
                 MutationReport* m) {
  mo.stop_at_first_violation = true;
  mo.max_tickets = 1;
  PMTREE_ASSIGN_OR_RETURN(ExploreReport r, Explore(f, mo));
  if (r.violations > 0) {
    mu.outcome = "caught";
    if (!r.tickets.empty()) mu.evidence = r.tickets[0].failure;
    m->caught++;
  } else if (!r.budget_exhausted && r.mutant_points_exhaustive == r.mutant_points) {
    mu.outcome = "redundant";
    m->redundant++;
  } else {
    mu.outcome = "survived";
    m->survived++;
  }
  m->mutants++;
  if (options.progress)
    std::fprintf(stderr, "mutant: %s at %s: %s\n", mu.kind.c_str(), mu.site.c_str(), mu.outcome.c_str());
  m->list.push_back(std::move(mu));
  return Status::Ok();
}

}  // namespace

Result<MutationReport> Mutate(const TreeFactory& f, const ExploreOptions& options, ExploreReport* base_out) {
  ExploreOptions o = options;
  o.drop_site.clear();
  o.split_site.clear();
  o.inject_leak = false;
  PMTREE_ASSIGN_OR_RETURN(ExploreReport base, Explore(f, o));
  MutationReport m;
  // Dropped flushes and fences (the key-blob persist and the bulk load's
  // fences among them when the workload reaches them).
  for (const SiteReport& s : base.sites) {
    if (!s.covered) continue;
    ExploreOptions mo = o;
    mo.drop_site = s.name;
    mo.drop_fence = s.kind == "fence";
    PMTREE_RETURN_IF_ERROR(RunMutant(f, mo, Mutant{s.name, s.kind == "fence" ? "drop fence" : "drop flush", "", ""},
                                     options, &m));
  }
  // Torn commit stores: each aligned 8-byte store site, split in two.
  if (options.mutate_stores) {
    for (const SiteReport& s : base.store_sites) {
      ExploreOptions mo = o;
      mo.split_site = s.name;
      PMTREE_RETURN_IF_ERROR(RunMutant(f, mo, Mutant{s.name, "split store", "", ""}, options, &m));
    }
  }
  // A leaked block after recovery.
  {
    ExploreOptions mo = o;
    mo.inject_leak = true;
    PMTREE_RETURN_IF_ERROR(RunMutant(f, mo, Mutant{"(after recovery)", "leak a block", "", ""}, options, &m));
  }
  m.score = m.caught + m.survived == 0 ? 1.0 : static_cast<double>(m.caught) / static_cast<double>(m.caught + m.survived);
  if (base_out) *base_out = std::move(base);
  return m;
}

}  // namespace pmtree::crash
