// SPDX-License-Identifier: Apache-2.0
//
// The reproduction suites of BENCH.md §2.  Trees are named by registry name
// only; the mapping from a paper's baselines to ours:
//   LCB+Tree (NV-Tree paper) -> logtree, native "B+-tree" (WO-tree paper) -> sortedtree
//   FPTree -> fptree, wB+-Tree -> wbtree, FAST+FAIR -> fastfair,
//   volatile B+-tree -> volatile, Berkeley DB -> the bdb peer.
// Design-specific variants go through TreeOptions::extra:
//   nvtree   strategy=off|conservative|aggressive|balanced
//   circtree search=linear

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <tuple>

#include "bench/media.h"
#include "bench/peers.h"
#include "bench/suites.h"
#include "pm/pool_impl.h"
#include "pmtree/registry.h"

namespace pmtree::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Pred = std::function<bool(const Measurement&)>;
using Metric = std::function<double(const Measurement&)>;

double Tput(const Measurement& m) { return m.throughput_ops_s; }
double Geo(const Measurement& m) { return m.latency.geomean; }
double Flushes(const Measurement& m) { return m.counted ? m.flushes : kNaN; }
double Bytes(const Measurement& m) { return m.counted ? m.bytes : kNaN; }
double Lines(const Measurement& m) { return m.counted ? m.lines : kNaN; }
// Lines per insert over the inserts during which the tree allocated nothing
// (no split): the LB+-Tree paper's "line writes per insertion".
double SplitFreeInsertLines(const Measurement& m) {
  const NoAllocCost& c = m.no_alloc[static_cast<int>(OpType::kInsert)];
  return m.counted && c.ops ? static_cast<double>(c.sum.lines) / static_cast<double>(c.ops) : kNaN;
}
double SplitFreeInsertShare(const Measurement& m) {
  const int ins = static_cast<int>(OpType::kInsert);
  return m.counted && m.done[ins] ? static_cast<double>(m.no_alloc[ins].ops) / static_cast<double>(m.done[ins]) : kNaN;
}

double Get(SuiteContext& s, const std::string& exp, const std::string& tree, const Pred& pred, const Metric& metric) {
  const Measurement* m = s.Find(exp, [&](const Measurement& r) { return r.tree == tree && pred(r); });
  return m ? metric(*m) : kNaN;
}

Pred NodeSize(uint32_t ns) {
  return [ns](const Measurement& m) { return m.node_size == ns; };
}
Pred Variant(const std::string& v) {
  return [v](const Measurement& m) { return m.variant == v; };
}
Pred Both(Pred a, Pred b) {
  return [a, b](const Measurement& m) { return a(m) && b(m); };
}
Pred Any() {
  return [](const Measurement&) { return true; };
}

std::string Num(double v, int digits = 2) {
  if (!std::isfinite(v)) return "n/a";
  char b[48];
  snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string Mops(double v) { return std::isfinite(v) ? Num(v / 1e6, 3) + " Mops/s" : "n/a"; }

// A ratio claim "a is X times faster than b" (throughput a / b, or latency b / a).
void RatioClaim(SuiteContext& s, const std::string& exp, const std::string& paper, double lo, double hi, double a,
                double b, const std::vector<std::string>& needed, const std::string& what = "") {
  double r = a / b;
  if (!std::isfinite(r) || r <= 0) {
    s.Claim(exp, paper, "n/a", NotMeasured(needed, s));
    return;
  }
  s.Claim(exp, paper, Ratio(r) + (what.empty() ? "" : " (" + what + ")"), FactorVerdict(lo, hi, r));
}

void ReductionClaim(SuiteContext& s, const std::string& exp, const std::string& paper, double lo, double hi, double ours,
                    double other, const std::vector<std::string>& needed, const std::string& what) {
  double red = (1 - ours / other) * 100;
  if (!std::isfinite(red)) {
    s.Claim(exp, paper, "n/a", NotMeasured(needed, s));
    return;
  }
  s.Claim(exp, paper, Pct(red) + " fewer (" + what + ")", ReductionVerdict(lo, hi, red));
}

BenchConfig Config(SuiteContext& s, const std::vector<std::string>& trees, uint64_t records, uint64_t ops,
                   const char* mix) {
  BenchConfig c = s.Base();
  c.targets = trees;
  c.records = records;
  c.ops = ops;
  c.workload.mix = *ParseMix(mix);
  return c;
}

std::string Scale(uint64_t n) {
  if (n >= 1000000 && n % 1000000 == 0) return std::to_string(n / 1000000) + "M";
  if (n >= 1000 && n % 1000 == 0) return std::to_string(n / 1000) + "K";
  return std::to_string(n);
}

const std::vector<uint32_t> kNodeSizes = {512, 1024, 2048, 4096};

// `c` with `ns` of emulated latency per flushed line, named by the media
// profile that has that latency (media.h), if any.
BenchConfig WithLatency(BenchConfig c, uint32_t ns) {
  c.media.clear();
  c.write_latency_ns = ns;
  for (const MediaProfile& p : MediaProfiles())
    if (p.write_latency_ns == ns) c.media = p.name;
  return c;
}

// Runs `c` once per node size (rows keep node_size).
void RunNodeSizes(SuiteContext& s, const std::string& exp, BenchConfig c, const std::vector<uint32_t>& sizes) {
  for (uint32_t ns : sizes) {
    c.node_size = ns;
    s.Run(exp, c);
  }
}

// Mean of a window series over [from, to) fractions of its length.
double SeriesMean(const std::vector<double>& v, double from, double to) {
  size_t a = static_cast<size_t>(from * v.size()), b = static_cast<size_t>(to * v.size());
  if (b <= a || b > v.size()) return kNaN;
  double sum = 0;
  for (size_t i = a; i < b; i++) sum += v[i];
  return sum / static_cast<double>(b - a);
}

// Rebuild figures exposed by a tree through TreeStats::extra: a count
// ("rebuilds") and a time (a key with "rebuild" ending in _ns/_us/_ms/_s).
struct Rebuild {
  double count = kNaN, seconds = kNaN;
};
Rebuild RebuildOf(const Measurement* m) {
  Rebuild r;
  if (!m) return r;
  for (const auto& [k, v] : m->stats.extra) {
    if (k.find("rebuild") == std::string::npos) continue;
    auto ends = [&](const char* suf) {
      std::string s(suf);
      return k.size() >= s.size() && k.compare(k.size() - s.size(), s.size(), s) == 0;
    };
    if (ends("_ns")) r.seconds = v / 1e9;
    else if (ends("_us")) r.seconds = v / 1e6;
    else if (ends("_ms")) r.seconds = v / 1e3;
    else if (ends("_s")) r.seconds = v;
    else r.count = v;
  }
  return r;
}

// Persists objects of `size` bytes (write + flush + fence) in an anonymous
// pool until `total` bytes are flushed; one row per size, throughput in
// cache lines per second.
Measurement FlushThroughput(const BenchConfig& base, uint64_t size, uint64_t total) {
  Measurement m;
  m.tree = "pool";
  m.workload = "flush";
  m.variant = std::to_string(size);
  m.records = size;
  m.command = base.command;
  PoolOptions po;
  BackendKind bk;
  FlushInstruction fi;
  (void)ParseBackend(base.backend, &bk, &fi);
  po.backend = bk;
  po.flush = fi;
  po.write_latency_ns = base.write_latency_ns;
  // Counting off: its distinct-line set costs up to 256 compares per line of
  // a large range, which would dominate a pure flush benchmark.  Lines per
  // object are size / 64 by construction.
  po.counting = false;
  uint64_t pool_size = std::max<uint64_t>(kMinPoolSize * 4, size * 2 + (1 << 20));
  auto pool = PoolImpl::CreateAnonymous(pool_size, "flushbench", 0, po);
  if (!pool.ok()) {
    m.error = pool.status().ToString();
    return m;
  }
  m.backend = (*pool)->Describe();
  std::vector<char> src(size, 'x');
  char* dst = (*pool)->base() + kPoolHeaderSize;
  dst = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(dst) + 63) & ~uintptr_t{63});
  uint64_t reps = std::max<uint64_t>(1, total / size);
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < reps; i++) {
    src[i % size] = static_cast<char>(i);
    (*pool)->Write(dst, src.data(), size);
    // Persist the whole object: the flush cost under test.
    (*pool)->Persist(dst, size);
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.ops = reps;
  m.stats.extra = {{"lines_per_object", static_cast<double>((size + 63) / 64)}, {"object_bytes", static_cast<double>(size)}};
  double lines = static_cast<double>((size + 63) / 64) * reps;
  m.throughput_ops_s = lines / m.seconds;  // lines per second
  return m;
}

// The durable peers a tree is compared with (issue 19): the best of them per
// workload is "the best durable peer".
const std::vector<std::string> kDurablePeers = {"lmdb-writemap", "rocksdb"};

// For each tree, its throughput over the best durable peer's and over
// absl-btree's, per overview-ops workload (issue 19's goals: durable inserts
// >= 5x the best durable peer; lookups within 1.1x of absl-btree's time).
std::string PeerRatioTable(SuiteContext& s, const std::vector<std::string>& trees) {
  const std::vector<std::string> workloads = {"insert=1", "read=1", "update=1"};
  auto tput = [&](const std::string& t, const std::string& v) {
    const Measurement* m =
        s.Find("overview-ops", [&](const Measurement& r) { return r.tree == t && r.variant == v && r.error.empty(); });
    return m ? m->throughput_ops_s : kNaN;
  };
  std::string best_row = "| best durable peer |";
  std::vector<double> best(workloads.size(), kNaN);
  for (size_t w = 0; w < workloads.size(); w++) {
    std::string who;
    for (const auto& p : kDurablePeers) {
      double v = tput(p, workloads[w]);
      if (std::isfinite(v) && !(v <= best[w])) {
        best[w] = v;
        who = p;
      }
    }
    best_row += " " + (who.empty() ? std::string("n/a") : who + " " + Mops(best[w])) + " |";
  }
  best_row += " | | |";
  std::string absl_row = "| absl-btree | | | |";
  for (const auto& w : workloads) absl_row += " " + Mops(tput("absl-btree", w)) + " |";
  std::string out =
      "Each tree's throughput over the best durable peer's (the faster of " + kDurablePeers[0] + " and " +
      kDurablePeers[1] + " per workload; a peer not in this build is left out) and over absl-btree's (the volatile "
      "reference), from the rows above. Issue 19's goals: durable inserts >= 5x the best durable peer; lookups "
      "within 1.1x of absl-btree's time, i.e. read / absl >= 0.91x.\n\n"
      "| tree | insert / best durable | read / best durable | update / best durable | insert / absl | read / absl | "
      "update / absl |\n|---|---|---|---|---|---|---|\n" +
      best_row + "\n" + absl_row + "\n";
  for (const auto& t : trees) {
    out += "| " + t + " |";
    for (size_t w = 0; w < workloads.size(); w++) out += " " + Ratio(tput(t, workloads[w]) / best[w]) + " |";
    for (const auto& w : workloads) out += " " + Ratio(tput(t, w) / tput("absl-btree", w)) + " |";
    out += "\n";
  }
  return out;
}


bool HasCap(const std::string& tree, uint32_t cap) {
  const TreeFactory* f = FindTree(tree);
  return f && (f->capabilities & cap);
}

// Issue 19's goals (§2), checked on this run's overview rows: one row per
// goal with the measured value, the tree it is about and whether it is met.
// docs/bench.md ("Issue 19 goals") gives the causes of the gaps.
std::string GoalsTable(SuiteContext& s, const std::vector<std::string>& trees) {
  auto tput = [&](const std::string& exp, const std::string& t, const Pred& p) { return Get(s, exp, t, p, Tput); };
  auto best_of = [&](const std::vector<std::string>& among, const std::function<double(const std::string&)>& v,
                     bool lowest) {
    std::pair<std::string, double> b{"", kNaN};
    for (const auto& t : among) {
      double x = v(t);
      if (std::isfinite(x) && (!std::isfinite(b.second) || (lowest ? x < b.second : x > b.second))) b = {t, x};
    }
    return b;
  };
  std::vector<std::string> persistent, concurrent;
  for (const auto& t : trees)
    if (HasCap(t, kCapPersistent)) {
      persistent.push_back(t);
      if (HasCap(t, kCapConcurrent)) concurrent.push_back(t);
    }
  std::string out =
      "Issue 19's goals, checked on this run's rows (scale and media as above; docs/bench.md, \"Issue 19 goals\", "
      "gives the causes of the gaps). \"Best\" is the persistent tree with the best value.\n\n"
      "| goal | measured | met |\n|---|---|---|\n";
  auto row = [&](const std::string& goal, const std::string& measured, bool known, bool met) {
    out += "| " + goal + " | " + measured + " | " + (known ? (met ? "yes" : "**no**") : "not measured") + " |\n";
  };
  const Pred read = Variant("read=1"), insert = Variant("insert=1");
  // Lookups: time per lookup of the fastest persistent tree over absl-btree's.
  auto br = best_of(persistent, [&](const std::string& t) { return tput("overview-ops", t, read); }, false);
  const double absl_read = tput("overview-ops", "absl-btree", read);
  row("best tree's lookup <= 1.1x absl::btree_map's time", br.first + ": " + Ratio(absl_read / br.second),
      std::isfinite(absl_read / br.second), absl_read / br.second <= 1.1);
  // Inserts: the best inserter's insert time minus its lookup time, in persists.
  const double persist_s = 1 / Get(s, "overview-persist", "pool", Any(), Tput);
  auto bi = best_of(persistent, [&](const std::string& t) { return tput("overview-ops", t, insert); }, false);
  const double extra = (1 / bi.second - 1 / tput("overview-ops", bi.first, read)) / persist_s;
  row("best tree's insert <= its lookup + 1.2 persists",
      bi.first + ": lookup + " + Num(extra) + " persists (one persist of a line = " + Num(persist_s * 1e9, 0) + " ns)",
      std::isfinite(extra), extra <= 1.2);
  // Durable inserts against the best durable peer, one thread and all cores.
  for (const char* exp : {"overview-ops", "overview-cores"}) {
    const bool one = std::string(exp) == "overview-ops";
    const Pred p = one ? insert : Any();
    auto peer = best_of(kDurablePeers, [&](const std::string& t) { return tput(exp, t, p); }, false);
    auto tree = best_of(one ? persistent : concurrent, [&](const std::string& t) { return tput(exp, t, p); }, false);
    const double r = tree.second / peer.second;
    const Measurement* any = s.Find(exp, Any());
    const std::string threads = any ? std::to_string(any->threads) : "?";
    row(one ? "durable inserts >= 5x the best durable peer, 1 thread"
            : "durable inserts >= 10x the best durable peer, all cores (" + threads + " threads)",
        tree.first + " / " + peer.first + " = " + Ratio(r), std::isfinite(r), r >= (one ? 5 : 10));
  }
  // Recovery at the largest size measured.
  uint64_t size = 0;
  for (const auto& m : s.rows())
    if (m.experiment == "overview-recovery" && m.error.empty()) size = std::max(size, m.records);
  auto rec = [&](const std::string& t, const std::string& kind, uint32_t threads) {
    return Get(s, "overview-recovery", t, [&](const Measurement& m) {
      return m.records == size && m.recovery_kind == kind && (threads == 0 || m.recovery_threads == threads);
    }, [](const Measurement& m) { return m.recovery_ms; });
  };
  auto crash = best_of(persistent, [&](const std::string& t) {
    double a = rec(t, "crash", 1), b = rec(t, "crash", 2);
    return std::isfinite(b) && !(b >= a) ? b : a;
  }, true);
  row("recovery of 10M keys after a crash <= 100 ms (best tree)",
      crash.first + ": " + Num(crash.second, 1) + " ms at " + Scale(size) + " keys", std::isfinite(crash.second),
      crash.second <= 100);
  // A goal every tree of `among` must meet: each one's ratio, met when all are >= `goal`.
  auto every = [&](const std::string& goal_text, const std::vector<std::string>& among,
                   const std::function<double(const std::string&)>& ratio, double goal, const std::string& where) {
    std::string list;
    bool met = true;
    for (const auto& t : among) {
      const double r = ratio(t);
      if (!std::isfinite(r)) continue;
      list += (list.empty() ? "" : ", ") + t + " " + Ratio(r);
      met &= r >= goal;
    }
    row(goal_text, list.empty() ? "n/a" : list + where, !list.empty(), met);
  };
  every("parallel rebuild >= 1.7x with 2 threads (every tree with kCapParallelRecovery)", persistent,
        [&](const std::string& t) { return HasCap(t, kCapParallelRecovery) ? rec(t, "crash", 1) / rec(t, "crash", 2) : kNaN; },
        1.7, " at " + Scale(size) + " keys");
  auto clean = best_of(persistent, [&](const std::string& t) {
    return HasCap(t, kCapInstantRestart) ? rec(t, "clean", 0) : kNaN;
  }, false);
  row("clean restart <= 5 ms (every tree with instant restart; the slowest shown)",
      clean.first + ": " + Num(clean.second, 1) + " ms at " + Scale(size) + " keys", std::isfinite(clean.second),
      clean.second <= 5);
  every("read-mostly (read=0.9,insert=0.1) 2 threads >= 1.8x 1 thread, every concurrent tree", concurrent,
        [&](const std::string& t) {
          auto at = [&](uint32_t k) { return tput("overview-threads", t, [k](const Measurement& m) { return m.threads == k; }); };
          return at(2) / at(1);
        },
        1.8, "");
  return out;
}
}  // namespace

// ---- overview: every tree and the peers ------------------------------------------------

void RunOverviewSuite(SuiteContext& s) {
  std::vector<std::string> trees;
  for (const auto& f : Registry())
    if (!f.test_only()) trees.emplace_back(f.name);
  std::vector<std::string> all = trees;
  for (const auto& p : Peers()) all.emplace_back(p.name);
  // Main-job budget (docs/bench.md, "The main job"): at --full, issue 19's
  // sizes (1M keys) for insert and read on the trees and the best-configured
  // peers (`lead`); update, the mix and the other peers stay at the scaled
  // size `small`, which is what lets the whole job fit in about 20 minutes.
  const uint64_t n = s.Size(100000, 1000000), small = s.Size(100000, 100000);
  std::vector<std::string> lead = trees, rest;
  for (const auto& p : Peers()) {
    const std::string name(p.name);
    const bool best = name == "absl-btree" ||
                      std::find(kDurablePeers.begin(), kDurablePeers.end(), name) != kDurablePeers.end();
    (best || n == small ? lead : rest).push_back(name);
  }

  s.Text("Every registered tree (" + std::to_string(trees.size()) + ") and the peers, default node sizes, " +
         Scale(n) + " records loaded by insert, then " + Scale(n) +
         " operations per workload, uniform keys unless stated, one thread" +
         (n == small ? std::string(".")
                     : "; update, the mix, and the peers other than " + kDurablePeers[0] + ", " + kDurablePeers[1] +
                           " and absl-btree at " + Scale(small) + " records and operations (the main job's budget)."));
  s.Experiment("overview-ops", "Throughput and cost per operation",
               "Workloads: insert=1, read=1, update=1, and the YCSB-like mix "
               "read=0.5,insert=0.3,update=0.1,remove=0.05,scan=0.05 under zipfian(0.99).");
  for (const char* mix : {"insert=1", "read=1", "update=1"}) {
    const bool big = std::string(mix) != "update=1";
    BenchConfig c = Config(s, big ? lead : all, big ? n : small, big ? n : small, mix);
    c.variant = mix;
    s.Run("overview-ops", c);
    if (big) {
      c = Config(s, rest, small, small, mix);
      c.variant = mix;
      s.Run("overview-ops", c);
    }
  }
  {
    BenchConfig c = Config(s, all, small, small, "read=0.5,insert=0.3,update=0.1,remove=0.05,scan=0.05");
    c.workload.dist.kind = DistKind::kZipfian;
    c.variant = "mixed-zipf";
    s.Run("overview-ops", c);
  }
  std::string table = "| tree | insert | read | update | mixed (zipf) | flushes/insert | lines/insert | p99 insert ns | PM MB | DRAM MB |\n"
                      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& t : all) {
    auto row = [&](const char* v) { return s.Find("overview-ops", [&](const Measurement& m) { return m.tree == t && m.variant == v; }); };
    const Measurement* ins = row("insert=1");
    auto tp = [&](const char* v) {
      const Measurement* m = row(v);
      return m ? Mops(m->throughput_ops_s) : std::string("failed");
    };
    table += "| " + t + " | " + tp("insert=1") + " | " + tp("read=1") + " | " + tp("update=1") + " | " + tp("mixed-zipf") +
             " | " + (ins && ins->counted ? Num(ins->flushes) : "-") + " | " + (ins && ins->counted ? Num(ins->lines) : "-") +
             " | " + (ins ? Num(ins->latency.p99, 0) : "-") + " | " + (ins ? Num(ins->stats.pm_bytes / 1048576.0, 1) : "-") +
             " | " + (ins ? Num(ins->stats.dram_bytes / 1048576.0, 1) : "-") + " |\n";
  }
  s.Text(table);
  s.Text(PeerRatioTable(s, trees));
  s.AddFigure({"throughput.png", "Throughput by workload", "overview-ops", "bars", "variant", "throughput_ops_s", "tree",
               "", "", "ops/s", true});
  s.AddFigure({"flushes.png", "Flush instructions per operation", "overview-ops", "bars", "variant", "per_op.flushes",
               "tree", "", "", "flushes / op", false});

  s.Experiment("overview-threads", "Scaling with threads",
               "read=0.9,insert=0.1 (issue 19's read-mostly scaling check), 1 and 2 threads (this machine has " +
                   std::to_string(std::thread::hardware_concurrency()) +
                   " cores); trees without kCapConcurrent run one thread only.");
  {
    BenchConfig c = Config(s, lead, n, n, "read=0.9,insert=0.1");
    c.threads = {1, 2};
    s.Run("overview-threads", c);
    c = Config(s, rest, small, small, "read=0.9,insert=0.1");
    c.threads = {1, 2};
    s.Run("overview-threads", c);
  }
  s.AddFigure({"threads.png", "Throughput vs threads (read=0.9,insert=0.1)", "overview-threads", "lines", "threads",
               "throughput_ops_s", "tree", "", "", "ops/s", false});
  const uint32_t cores = std::max(2u, std::thread::hardware_concurrency());
  s.Experiment("overview-cores", "Durable inserts on all cores",
               "insert=1 with " + std::to_string(cores) + " threads: every concurrent persistent tree and the durable "
               "peers (LMDB has one writer; RocksDB groups concurrent writers' syncs).");
  {
    std::vector<std::string> targets;
    for (const auto& t : trees)
      if (HasCap(t, kCapPersistent) && HasCap(t, kCapConcurrent)) targets.push_back(t);
    for (const auto& p : kDurablePeers)
      if (FindPeer(p)) targets.push_back(p);
    BenchConfig c = Config(s, targets, n, n, "insert=1");
    c.threads = {cores};
    s.Run("overview-cores", c);
  }
  s.Experiment("overview-persist", "One persist",
               "Write + flush + fence of one 64 B line in a pool on the run's backend, repeated: the unit of "
               "issue 19's insert goal.");
  if (!s.counting()) {
    Measurement m = FlushThroughput(s.Base(), 64, s.Size(16ull << 20, 64ull << 20));
    m.experiment = "overview-persist";
    s.Record(m);
  }
  std::vector<std::string> persistent;
  for (const auto& f : Registry())
    if (!f.test_only() && f.persistent()) persistent.emplace_back(f.name);
  s.Experiment("overview-recovery", "Recovery time by size",
               "Open + recover after a clean Close and after a simulated crash (tree destroyed without Close), "
               "with 1..cores rebuild threads where the tree has kCapParallelRecovery. At 10M keys (--full) the "
               "tree is bulk-loaded (100 % fill) to keep the main job's budget; smaller sizes load by insert.");
  for (uint64_t size : {s.Size(50000, 1000000), s.Size(200000, 10000000)}) {
    BenchConfig c = Config(s, persistent, size, 0, "read=1");
    c.kind = WorkloadKind::kRecovery;
    c.bulk_load = size >= 10000000;
    s.Run("overview-recovery", c);
  }
  s.AddFigure({"recovery.png", "Recovery time after a crash vs records", "overview-recovery", "lines", "records",
               "recovery_ms", "tree", "recovery_kind", "crash", "ms", true});
  s.Experiment("overview-goals", "Issue 19 goals", "Checks computed from the rows above.");
  s.Text(GoalsTable(s, trees));
}

// ---- NV-Tree ------------------------------------------------------------------------------

void RunNvTreeSuite(SuiteContext& s) {
  const std::vector<std::string> base = {"nvtree", "logtree", "cdds"};
  auto trees = s.Available(base);
  // Main-job budget: the paper's 1M for inserts, update/delete/search and
  // rebuilds (10M); the mixes, hot zones and latency sweeps at `m`.
  const uint64_t n = s.Size(100000, 1000000), m = s.Size(100000, 200000);
  s.Text("Baselines: LCB+Tree is `logtree`, CDDS is `cdds`. " + Scale(n) + " keys (paper: 1M; 10M for rebuilds)" +
         (m == n ? std::string(".") : "; mixes, hot zones and latency sweeps at " + Scale(m) + " (the main job's budget)."));

  // E1: inserts by node size.
  s.Experiment("nv-insert", "Random inserts by node size",
               Scale(n) + " random 8 B inserts into an empty tree, nodes 512 B - 4 KB.");
  RunNodeSizes(s, "nv-insert", Config(s, trees, 0, n, "insert=1"), kNodeSizes);
  s.AddFigure({"insert.png", "Insert throughput by node size", "nv-insert", "bars", "node_size", "throughput_ops_s",
               "tree", "", "", "ops/s", false});
  s.AddFigure({"insert-flushes.png", "Flushes per insert by node size", "nv-insert", "bars", "node_size",
               "per_op.flushes", "tree", "", "", "flushes / insert", false});
  auto nv = [&](const std::string& exp, const Pred& p, const Metric& m) { return Get(s, exp, "nvtree", p, m); };
  RatioClaim(s, "nv-insert", "up to 7x faster inserts than LCB+Tree at 4 KB", 7, 7, nv("nv-insert", NodeSize(4096), Tput),
             Get(s, "nv-insert", "logtree", NodeSize(4096), Tput), {"nvtree", "logtree"}, "at 4 KB");
  RatioClaim(s, "nv-insert", "up to 12x faster inserts than CDDS at 4 KB", 12, 12, nv("nv-insert", NodeSize(4096), Tput),
             Get(s, "nv-insert", "cdds", NodeSize(4096), Tput), {"nvtree", "cdds"}, "at 4 KB");
  for (auto [other, lo, hi] : {std::tuple{"logtree", 80.0, 97.0}, std::tuple{"cdds", 76.0, 96.0}}) {
    double mn = kNaN, mx = kNaN;
    for (uint32_t ns : kNodeSizes) {
      double red = (1 - nv("nv-insert", NodeSize(ns), Flushes) / Get(s, "nv-insert", other, NodeSize(ns), Flushes)) * 100;
      if (!std::isfinite(red)) continue;
      mn = std::isfinite(mn) ? std::min(mn, red) : red;
      mx = std::isfinite(mx) ? std::max(mx, red) : red;
    }
    std::string paper = Num(lo, 0) + "-" + Num(hi, 0) + " % fewer line flushes than " + (std::string(other) == "logtree" ? "LCB+Tree" : "CDDS");
    if (!std::isfinite(mn))
      s.Claim("nv-insert", paper, "n/a", NotMeasured({"nvtree", other}, s));
    else
      s.Claim("nv-insert", paper, Pct(mn) + " - " + Pct(mx) + " fewer flush instructions over 512 B-4 KB",
              ReductionVerdict(lo, hi, mn) == "reproduced" && ReductionVerdict(lo, hi, mx) == "reproduced"
                  ? "reproduced"
                  : ReductionVerdict(lo, hi, (mn + mx) / 2));
  }

  // E2: update / delete / search after inserts.
  s.Experiment("nv-ops", "Update, delete and search after inserts",
               Scale(n) + " keys loaded by insert (default node sizes), then " + Scale(n) + " uniform operations of one kind.");
  for (const char* mix : {"update=1", "remove=1", "read=1"}) {
    BenchConfig c = Config(s, trees, n, n, mix);
    c.variant = mix;
    s.Run("nv-ops", c);
  }
  s.AddFigure({"ops.png", "Update / delete / search throughput", "nv-ops", "bars", "variant", "throughput_ops_s", "tree",
               "", "", "ops/s", false});
  RatioClaim(s, "nv-ops", "updates up to 5.6x faster than LCB+Tree", 5.6, 5.6, nv("nv-ops", Variant("update=1"), Tput),
             Get(s, "nv-ops", "logtree", Variant("update=1"), Tput), {"nvtree", "logtree"});
  RatioClaim(s, "nv-ops", "updates up to 8.5x faster than CDDS", 8.5, 8.5, nv("nv-ops", Variant("update=1"), Tput),
             Get(s, "nv-ops", "cdds", Variant("update=1"), Tput), {"nvtree", "cdds"});
  for (const char* other : {"logtree", "cdds"}) {
    double r = nv("nv-ops", Variant("read=1"), Tput) / Get(s, "nv-ops", other, Variant("read=1"), Tput);
    s.Claim("nv-ops", std::string("search comparable to ") + (std::string(other) == "logtree" ? "LCB+Tree" : "CDDS"),
            std::isfinite(r) ? Ratio(r) + " (tolerance +-25 %)" : "n/a",
            std::isfinite(r) ? ComparableVerdict(r, 0.25) : NotMeasured({"nvtree", other}, s));
  }

  // E3: insert/search mixes.
  s.Experiment("nv-mix", "Insert/search mixes", Scale(m) + " operations on a " + Scale(m) + "-key tree, inserts 90 % ... 10 %.");
  for (int ins : {90, 70, 50, 30, 10}) {
    std::string mix = "insert=" + Num(ins / 100.0, 1) + ",read=" + Num(1 - ins / 100.0, 1);
    BenchConfig c = Config(s, trees, m, m, mix.c_str());
    c.variant = std::to_string(ins) + "/" + std::to_string(100 - ins);
    s.Run("nv-mix", c);
  }
  s.AddFigure({"mix.png", "Throughput by insert/search mix", "nv-mix", "lines", "variant", "throughput_ops_s", "tree", "",
               "", "ops/s", false});
  RatioClaim(s, "nv-mix", "6.6x LCB+Tree at 90 % inserts", 6.6, 6.6, nv("nv-mix", Variant("90/10"), Tput),
             Get(s, "nv-mix", "logtree", Variant("90/10"), Tput), {"nvtree", "logtree"});
  RatioClaim(s, "nv-mix", "10x CDDS at 90 % inserts", 10, 10, nv("nv-mix", Variant("90/10"), Tput),
             Get(s, "nv-mix", "cdds", Variant("90/10"), Tput), {"nvtree", "cdds"});

  // E4: hot zones and adaptivity.
  const std::vector<std::string> strategies = {"off", "conservative", "aggressive", "balanced"};
  s.Experiment("nv-hotzone", "Updates and inserts in a hot zone, adaptive strategies",
               "1 KB nodes; " + Scale(m) + " keys; " + Scale(m) +
                   " updates (or inserts) within 0.5 / 1 / 5 % of the key space; NV-Tree with "
                   "`strategy=off|conservative|aggressive|balanced` (TreeOptions::extra).");
  if (s.Have("nvtree")) {
    for (const char* mix : {"update=1", "insert=1"})
      for (double zone : {0.005, 0.01, 0.05})
        for (const auto& st : strategies) {
          BenchConfig c = Config(s, {"nvtree"}, m, m, mix);
          c.node_size = 1024;
          c.workload.dist.kind = DistKind::kHotZone;
          c.workload.dist.hot_fraction = zone;
          c.extra = {{"strategy", st}};
          c.variant = std::string(mix) + " zone " + Num(zone * 100, 1) + "% " + st;
          s.Run("nv-hotzone", c);
        }
  }
  for (const char* mix : {"update=1", "insert=1"}) {
    double best = kNaN;
    std::string where;
    for (double zone : {0.005, 0.01, 0.05}) {
      std::string prefix = std::string(mix) + " zone " + Num(zone * 100, 1) + "% ";
      double none = nv("nv-hotzone", Variant(prefix + "off"), Tput);
      for (const auto& st : strategies) {
        if (st == "off") continue;
        double r = nv("nv-hotzone", Variant(prefix + st), Tput) / none;
        if (std::isfinite(r) && (!std::isfinite(best) || r > best)) {
          best = r;
          where = Num(zone * 100, 1) + " % zone, " + st;
        }
      }
    }
    bool upd = std::string(mix) == "update=1";
    std::string paper = upd ? "adaptivity improves update throughput up to 3.2x" : "adaptivity improves insert throughput up to 3x";
    if (!std::isfinite(best))
      s.Claim("nv-hotzone", paper, "n/a", s.Have("nvtree") ? "not measured: nvtree rejected the `strategy` option (see failed rows)" : NotMeasured({"nvtree"}, s));
    else
      s.Claim("nv-hotzone", paper, "up to " + Ratio(best) + " (" + where + ")", FactorVerdict(upd ? 3.2 : 3, upd ? 3.2 : 3, best));
  }
  s.Experiment("nv-shift", "Hot-zone shift", "Inserts into a 1 % hot zone that moves to another part of the key space "
               "halfway through the run; throughput per 20 ms window.");
  if (s.Have("nvtree"))
    for (const char* st : {"off", "balanced"}) {
      BenchConfig c = Config(s, {"nvtree"}, m, m, "insert=1");
      c.node_size = 1024;
      c.window_ms = 20;
      c.workload.dist.kind = DistKind::kHotZone;
      c.workload.dist.hot_fraction = 0.01;
      c.workload.dist.hot_shift_at = 0.5;
      c.extra = {{"strategy", st}};
      c.variant = st;
      s.Run("nv-shift", c);
    }
  s.AddFigure({"shift.png", "Throughput over time with a hot-zone shift at 50 %", "nv-shift", "series", "", "series_ops_s",
               "label", "", "", "ops/s", false});
  {
    const Measurement* m = s.Find("nv-shift", [](const Measurement& r) { return r.tree == "nvtree" && r.variant == "balanced"; });
    double before = m ? SeriesMean(m->series, 0.25, 0.5) : kNaN, after = m ? SeriesMean(m->series, 0.75, 1.0) : kNaN;
    double r = after / before;
    s.Claim("nv-shift", "throughput recovers after the hot-zone shift",
            std::isfinite(r) ? "last quarter / quarter before the shift = " + Ratio(r) : "n/a",
            std::isfinite(r) ? (r >= 0.8 ? "reproduced" : "not reproduced") : (m ? "not measured: run too short for windows" : NotMeasured({"nvtree"}, s)));
  }

  // E5: rebuilds.
  const uint64_t big = s.Size(1000000, 10000000);
  s.Experiment("nv-rebuild", "Rebuilds", "NV-Tree inserting " + Scale(n) + " and " + Scale(big) +
               " random keys (1 KB and 4 KB nodes), and " + Scale(n) + " sequential keys with and without adaptivity; "
               "rebuild count and time as the tree reports them in TreeStats::extra.");
  if (s.Have("nvtree")) {
    for (uint64_t size : {n, big})
      for (uint32_t ns : {1024u, 4096u}) {
        BenchConfig c = Config(s, {"nvtree"}, 0, size, "insert=1");
        c.node_size = ns;
        c.variant = "random " + Scale(size);
        s.Run("nv-rebuild", c);
      }
    for (const char* st : {"off", "balanced"}) {
      BenchConfig c = Config(s, {"nvtree"}, 0, n, "insert=1");
      c.workload.dist.kind = DistKind::kSequential;
      c.extra = {{"strategy", st}};
      c.variant = std::string("sequential ") + st;
      s.Run("nv-rebuild", c);
    }
  }
  {
    const Measurement* m = s.Find("nv-rebuild", [&](const Measurement& r) { return r.variant == "random " + Scale(big) && r.node_size == 1024; });
    Rebuild rb = RebuildOf(m);
    double frac = m ? rb.seconds / m->seconds * 100 : kNaN;
    s.Claim("nv-rebuild", "rebuild time ~1 % of the run time",
            std::isfinite(frac) ? Pct(frac) + " (" + Num(rb.count, 0) + " rebuilds, " + Scale(big) + " inserts, 1 KB)" : "n/a",
            std::isfinite(frac) ? FactorVerdict(1, 1, frac) : (m ? "not measured: nvtree reports no rebuild time in TreeStats::extra" : NotMeasured({"nvtree"}, s)));
    const Measurement* a = s.Find("nv-rebuild", Variant("sequential off"));
    const Measurement* b = s.Find("nv-rebuild", Variant("sequential balanced"));
    double r = RebuildOf(a).seconds / RebuildOf(b).seconds;
    s.Claim("nv-rebuild", "adaptivity cuts sequential-insert rebuild time sharply (44.5 s -> 1.4 s, 32x)",
            std::isfinite(r) ? Ratio(r) + " less rebuild time" : "n/a",
            std::isfinite(r) ? FactorVerdict(31.8, 31.8, r) : (a && b ? "not measured: no rebuild time reported" : "not measured: " + std::string(s.Have("nvtree") ? "nvtree rejected `strategy` or failed" : "nvtree not registered yet")));
  }

  // E6: emulated write latency.
  s.Experiment("nv-latency", "Emulated PM write latency", Scale(m) + " random inserts with 0 / 50 / 180 ns added per flushed line.");
  for (uint32_t lat : {0u, 50u, 180u}) {
    s.Run("nv-latency", WithLatency(Config(s, trees, 0, m, "insert=1"), lat));
  }
  s.AddFigure({"latency.png", "Insert throughput vs emulated write latency", "nv-latency", "lines", "write_latency_ns",
               "throughput_ops_s", "tree", "", "", "ops/s", false});
  {
    auto slow = [&](const std::string& t) {
      auto at = [&](uint32_t l) { return Get(s, "nv-latency", t, [l](const Measurement& m) { return m.write_latency_ns == l; }, Tput); };
      return at(0) / at(180);
    };
    double mine = slow("nvtree");
    std::string ours = "slowdown 0->180 ns: nvtree " + Ratio(mine);
    bool least = std::isfinite(mine), any_other = false;
    for (const char* o : {"logtree", "cdds"}) {
      double v = slow(o);
      ours += std::string(", ") + o + " " + Ratio(v);
      if (std::isfinite(v)) {
        any_other = true;
        least &= mine <= v;
      }
    }
    s.Claim("nv-latency", "NV-Tree slows least as write latency grows", ours,
            !std::isfinite(mine) || !any_other ? NotMeasured(base, s) : least ? "reproduced" : "not reproduced");
  }
}

// ---- Circ-Tree --------------------------------------------------------------------------------

void RunCircTreeSuite(SuiteContext& s) {
  // Main-job budget: node-size sweeps at 300K keys with --full (paper: 1M),
  // the latency sweep at the scaled 100K, recovery at 100K by node size and
  // at the paper's 1M keys with 4 KB nodes.
  const uint64_t n = s.Size(100000, 300000), small = s.Size(100000, 100000);
  auto trees = s.Available({"circtree", "nvtree", "fastfair", "volatile"});
  bool fp = s.Have("fptree");
  s.Text("Geometric-mean latency of sampled operations (every operation timed here). Circ-Tree with plain linear "
         "search is `circtree` with `search=linear`; FPTree runs at 512 B only, as in the paper.");
  auto run_sizes = [&](const std::string& exp, const char* mix, uint64_t records) {
    BenchConfig c = Config(s, trees, records, n, mix);
    c.latency_sample = 1.0;
    RunNodeSizes(s, exp, c, kNodeSizes);
    if (s.Have("circtree")) {
      BenchConfig l = Config(s, {"circtree"}, records, n, mix);
      l.latency_sample = 1.0;
      l.extra = {{"search", "linear"}};
      l.variant = "linear";
      RunNodeSizes(s, exp, l, kNodeSizes);
    }
    if (fp) {
      BenchConfig f = Config(s, {"fptree"}, records, n, mix);
      f.latency_sample = 1.0;
      f.node_size = 512;
      s.Run(exp, f);
    }
  };
  s.Experiment("circ-insert", "Random inserts by node size", Scale(n) + " random inserts into an empty tree.");
  run_sizes("circ-insert", "insert=1", 0);
  s.AddFigure({"insert-geomean.png", "Insert latency (geometric mean) by node size", "circ-insert", "lines", "node_size",
               "latency_ns.geomean", "label", "", "", "ns", true});
  s.AddFigure({"insert-flushes.png", "Flushes per insert by node size", "circ-insert", "bars", "node_size",
               "per_op.flushes", "label", "", "", "flushes / insert", false});
  s.AddFigure({"insert-bytes.png", "Flushed bytes per insert by node size", "circ-insert", "bars", "node_size",
               "per_op.bytes", "label", "", "", "bytes / insert", true});
  s.Experiment("circ-search", "Searches by node size", Scale(n) + " uniform searches in a " + Scale(n) + "-key tree.");
  run_sizes("circ-search", "read=1", n);
  s.AddFigure({"search-geomean.png", "Search latency (geometric mean) by node size", "circ-search", "lines", "node_size",
               "latency_ns.geomean", "label", "", "", "ns", true});

  auto plain = [](uint32_t ns) { return Both(NodeSize(ns), Variant("")); };
  const double ff_gap[] = {1.7, 2.7, 4.8, 8.6};
  for (size_t i = 0; i < kNodeSizes.size(); i++) {
    uint32_t ns = kNodeSizes[i];
    RatioClaim(s, "circ-insert", "FAST+FAIR / Circ-Tree insert latency " + Num(ff_gap[i], 1) + "x at " + std::to_string(ns) + " B",
               ff_gap[i], ff_gap[i], Get(s, "circ-insert", "fastfair", plain(ns), Geo),
               Get(s, "circ-insert", "circtree", plain(ns), Geo), {"circtree", "fastfair"}, "geomean latency");
  }
  RatioClaim(s, "circ-insert", "NV-Tree / Circ-Tree insert latency 1.6x at 4 KB", 1.6, 1.6,
             Get(s, "circ-insert", "nvtree", plain(4096), Geo), Get(s, "circ-insert", "circtree", plain(4096), Geo),
             {"circtree", "nvtree"}, "geomean latency");
  for (auto [other, fl, by] : {std::tuple{"fastfair", 13.3, 37.8}, std::tuple{"nvtree", 1.6, 1.7}}) {
    RatioClaim(s, "circ-insert", std::string(other == std::string("fastfair") ? "FAST+FAIR" : "NV-Tree") + " issues " +
               Num(fl, 1) + "x the clflushopt of Circ-Tree", fl, fl, Get(s, "circ-insert", other, plain(4096), Flushes),
               Get(s, "circ-insert", "circtree", plain(4096), Flushes), {"circtree", other}, "flushes per insert at 4 KB");
    RatioClaim(s, "circ-insert", std::string(other == std::string("fastfair") ? "FAST+FAIR" : "NV-Tree") + " flushes " +
               Num(by, 1) + "x the bytes of Circ-Tree", by, by, Get(s, "circ-insert", other, plain(4096), Bytes),
               Get(s, "circ-insert", "circtree", plain(4096), Bytes), {"circtree", other}, "flushed bytes per insert at 4 KB");
  }

  s.Experiment("circ-latency", "Emulated write latency", "2 KB nodes; " + Scale(small) + " inserts with 0 / 200 / 300 / 600 ns per flushed line.");
  const uint32_t lats[] = {0, 200, 300, 600};
  const double gaps[] = {2.5, 3.9, 4.8, 5.5};
  for (uint32_t lat : lats) {
    BenchConfig c = WithLatency(Config(s, s.Available({"circtree", "fastfair"}), 0, small, "insert=1"), lat);
    c.node_size = 2048;
    c.latency_sample = 1.0;
    s.Run("circ-latency", c);
  }
  s.AddFigure({"latency.png", "Insert latency (geomean) vs emulated write latency, 2 KB", "circ-latency", "lines",
               "write_latency_ns", "latency_ns.geomean", "tree", "", "", "ns", false});
  for (int i = 0; i < 4; i++) {
    Pred at = [l = lats[i]](const Measurement& m) { return m.write_latency_ns == l; };
    RatioClaim(s, "circ-latency", "gap vs FAST+FAIR " + Num(gaps[i], 1) + "x at " + std::to_string(lats[i]) + " ns", gaps[i], gaps[i],
               Get(s, "circ-latency", "fastfair", at, Geo), Get(s, "circ-latency", "circtree", at, Geo),
               {"circtree", "fastfair"}, "geomean insert latency");
  }

  const uint64_t rn = s.Size(1000000, 1000000);
  s.Experiment("circ-recovery", "Recovery time", "Circ-Tree with " + Scale(small) + " and " + Scale(rn) +
               " keys by node size; open + recover after a clean shutdown and after a crash.");
  if (s.Have("circtree"))
    for (uint64_t size : {small, rn}) {
      BenchConfig c = Config(s, {"circtree"}, size, 0, "read=1");
      c.kind = WorkloadKind::kRecovery;
      RunNodeSizes(s, "circ-recovery", c, size == small ? kNodeSizes : std::vector<uint32_t>{4096});
    }
  s.AddFigure({"recovery.png", "Circ-Tree recovery after a crash by node size", "circ-recovery", "bars", "node_size",
               "recovery_ms", "records", "recovery_kind", "crash", "ms", true});
  {
    const Measurement* m = s.Find("circ-recovery", [&](const Measurement& r) {
      return r.records == rn && r.node_size == 4096 && r.recovery_kind == "crash";
    });
    std::string ours = m ? Num(m->recovery_ms, 1) + " ms for " + Scale(rn) + " keys at 4 KB (after a crash)" : "n/a";
    std::string verdict = !m ? NotMeasured({"circtree"}, s)
                         : rn != 1000000 ? "not comparable: different key count"
                         : (m->recovery_ms <= 31 ? "reproduced (same order of magnitude)" : "not reproduced (" + Ratio(m->recovery_ms / 3.1) + " slower)");
    s.Claim("circ-recovery", "3.1 ms to recover 1M keys at 4 KB (352.7 ms for 100M)", ours, verdict);
  }
}

// ---- WO-tree -----------------------------------------------------------------------------------

void RunWoTreeSuite(SuiteContext& s) {
  const std::vector<std::string> all = {"wotree", "sortedtree", "wbtree", "fastfair", "logtree"};
  auto trees = s.Available(all);
  const uint64_t ins = s.Size(100000, 300000), loaded = s.Size(200000, 1000000), del = s.Size(60000, 300000);
  const std::vector<uint32_t> lines = {256, 512, 1024, 2048};
  s.Text("The paper's native sorted B+-tree is `sortedtree`; `logtree` (sorted nodes with undo logging, LCB+Tree) is an "
         "extra row, not a claim's baseline. Node sizes 4 / 8 / 16 / 32 cache lines = 256 B - 2 KB. Claims are at "
         "16 lines (1 KB).");
  s.Experiment("wo-insert", "Inserts by node size", Scale(ins) + " random inserts into an empty tree (paper: 300K).");
  RunNodeSizes(s, "wo-insert", Config(s, trees, 0, ins, "insert=1"), lines);
  s.AddFigure({"insert-flushes.png", "Flushes per insert by node size", "wo-insert", "bars", "node_size", "per_op.flushes",
               "tree", "", "", "flushes / insert", false});
  for (uint32_t ns : {300u, 600u}) {  // Fig. 10(b): 300 ns to 600 ns of extra write latency
    const std::string exp = "wo-insert-" + std::to_string(ns) + "ns";
    s.Experiment(exp, "Inserts at " + std::to_string(ns) + " ns write latency",
                 "1 KB nodes, " + Scale(ins) + " inserts, " + std::to_string(ns) + " ns per flushed line.");
    BenchConfig c = WithLatency(Config(s, trees, 0, ins, "insert=1"), ns);
    c.node_size = 1024;
    s.Run(exp, c);
    s.AddFigure({"insert-" + std::to_string(ns) + "ns.png",
                 "Insert throughput at " + std::to_string(ns) + " ns, 1 KB nodes", exp, "bars", "tree",
                 "throughput_ops_s", "tree", "", "", "ops/s", false});
  }
  s.Experiment("wo-delete", "Deletes", Scale(loaded) + " keys loaded by insert, then " + Scale(del) + " deletes; 1 KB nodes.");
  {
    BenchConfig c = Config(s, trees, loaded, del, "remove=1");
    c.node_size = 1024;
    s.Run("wo-delete", c);
  }
  s.Experiment("wo-search", "Searches", Scale(ins) + " searches in a " + Scale(ins) + "-key tree; 1 KB nodes.");
  {
    BenchConfig c = Config(s, trees, ins, ins, "read=1");
    c.node_size = 1024;
    s.Run("wo-search", c);
  }
  s.AddFigure({"search.png", "Search throughput, 1 KB nodes", "wo-search", "bars", "tree", "throughput_ops_s", "tree", "",
               "", "ops/s", false});

  auto wo = [&](const std::string& exp, const Metric& m) { return Get(s, exp, "wotree", NodeSize(1024), m); };
  auto other = [&](const std::string& exp, const char* t, const Metric& m) { return Get(s, exp, t, NodeSize(1024), m); };
  const std::tuple<const char*, const char*, double, double> vs[] = {
      {"sortedtree", "B+-tree", 84.7, 71.0}, {"wbtree", "wB+-Tree", 22.2, 22.5}, {"fastfair", "FAST+FAIR", 30.8, 43.3}};
  for (auto [t, label, fl, tm] : vs) {
    ReductionClaim(s, "wo-insert", "insert flushes -" + Num(fl, 1) + " % vs " + label, fl, fl, wo("wo-insert", Flushes),
                   other("wo-insert", t, Flushes), {"wotree", t}, "flushes per insert, 1 KB");
    // Time per insert = 1 / throughput.
    ReductionClaim(s, "wo-insert-300ns", "insert time -" + Num(tm, 1) + " % vs " + label + " at 300 ns", tm, tm,
                   1 / wo("wo-insert-300ns", Tput), 1 / other("wo-insert-300ns", t, Tput), {"wotree", t}, "time per insert");
  }
  ReductionClaim(s, "wo-delete", "delete flushes -99.2 % vs B+-tree", 99.2, 99.2, wo("wo-delete", Flushes),
                 other("wo-delete", "sortedtree", Flushes), {"wotree", "sortedtree"}, "flushes per delete");
  ReductionClaim(s, "wo-delete", "delete flushes -61.4 % vs FAST+FAIR", 61.4, 61.4, wo("wo-delete", Flushes),
                 other("wo-delete", "fastfair", Flushes), {"wotree", "fastfair"}, "flushes per delete");
  double r = wo("wo-search", Tput) / other("wo-search", "sortedtree", Tput);
  s.Claim("wo-search", "search within ~3 % of the B+-tree",
          std::isfinite(r) ? Ratio(r) + " of sortedtree's throughput (tolerance +-5 %)" : "n/a",
          std::isfinite(r) ? ComparableVerdict(r, 0.05) : NotMeasured({"wotree", "sortedtree"}, s));
}

// ---- CDDS --------------------------------------------------------------------------------------

// Thesis chapter 6 (Figures 6.1-6.4): where and when each persistent tree
// writes, from the pool's write profile (pmtree/write_profile.h).
double PageSpread(const Measurement& m) {
  return m.profile.page_median ? static_cast<double>(m.profile.page_max) / static_cast<double>(m.profile.page_median)
                               : kNaN;
}
double Blocks(const Measurement& m) { return m.profile.path.empty() ? kNaN : static_cast<double>(m.profile.blocks); }

void RunWearExperiment(SuiteContext& s) {
  std::vector<std::string> trees;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && !f.test_only()) trees.push_back(std::string(f.name));
  const uint64_t big = s.Size(100000, 100000);
  s.Experiment("cdds-wear", "Writes per node, per page and over time (thesis Figures 6.1-6.4)",
               "1K and " + Scale(big) + " uniformly random 8-byte-key inserts into an empty tree, every persistent "
               "registered tree, with `--write-profile`: each store call counts once per 64 B line it touches "
               "(the thesis counted store instructions on B-tree nodes with Cafegrind); blocks are the pool "
               "allocations (nodes), pages the pool's 4 KiB pages.  Logical time: windows of operations.");
  for (uint64_t ops : {uint64_t{1000}, big}) {
    BenchConfig c = Config(s, trees, 0, ops, "insert=1");
    c.workload.dist.kind = DistKind::kUniform;
    c.variant = Scale(ops);
    c.write_profile = (s.dir().empty() ? std::string("pmtree-wear") : s.dir() + "/profile") + "-" + c.variant;
    c.profile_window_ops = std::max<uint64_t>(1, ops / 100);
    s.Run("cdds-wear", c);
  }
  std::string table = "| tree | blocks (1K) | page writes max / median (1K) | page writes max / median (" + Scale(big) +
                      ") | hottest page / median (" + Scale(big) +
                      ") | writes per window with / without an allocation (1K) |\n|---|---|---|---|---|---|\n";
  for (const std::string& t : trees) {
    const Measurement* a = s.Find("cdds-wear", [&](const Measurement& m) { return m.tree == t && m.variant == "1K"; });
    const Measurement* b =
        s.Find("cdds-wear", [&](const Measurement& m) { return m.tree == t && m.variant == Scale(big); });
    if (!a || a->profile.path.empty()) continue;
    table += "| " + t + " | " + std::to_string(a->profile.blocks) + " | " + std::to_string(a->profile.page_max) +
             " / " + std::to_string(a->profile.page_median) + " | " +
             (b && !b->profile.path.empty()
                  ? std::to_string(b->profile.page_max) + " / " + std::to_string(b->profile.page_median) + " | " +
                        Num(PageSpread(*b), 1) + "x"
                  : std::string("n/a | n/a")) +
             " | " + Num(a->profile.alloc_window_writes, 0) + " / " + Num(a->profile.quiet_window_writes, 0) + " |\n";
  }
  s.Text(table);
  // Figures 6.1/6.2 (writes per node) and 6.4 (writes over time with
  // allocations) for every persistent tree, cdds first.
  std::vector<std::string> order = trees;
  std::stable_partition(order.begin(), order.end(), [](const std::string& t) { return t == "cdds"; });
  for (const std::string& t : order) {
    s.AddFigure({"wear-heatmap-" + t + ".png", t + ": writes per block, 1K inserts (thesis Figures 6.1/6.2)",
                 "cdds-wear", "heatmap", "", "", "tree", "label", t + "/1K"});
    s.AddFigure({"wear-timeline-" + t + ".png", t + ": writes and allocations over time, 1K inserts (Figure 6.4)",
                 "cdds-wear", "timeline", "", "", "tree", "label", t + "/1K"});
  }
  s.AddFigure({"wear-cdf.png", "Writes per page, " + Scale(big) + " inserts (thesis Figure 6.3)", "cdds-wear", "cdf",
               "", "", "tree", "variant", Scale(big)});
  // The thesis compared CDDS with the in-place STX B-Tree; our in-place trees
  // are sortedtree (sorted nodes, in-place shifts) and fastfair.
  for (const char* inplace : {"sortedtree", "fastfair"}) {
    const std::string big_v = Scale(big);
    const double cdds = Get(s, "cdds-wear", "cdds", Variant(big_v), PageSpread);
    const double other = Get(s, "cdds-wear", inplace, Variant(big_v), PageSpread);
    const std::string paper = "CDDS spreads writes evenly; the in-place STX B-Tree has hot pages (16,817 writes beside "
                              "36; 100K inserts) — vs " + std::string(inplace);
    if (!std::isfinite(cdds) || !std::isfinite(other)) {
      s.Claim("cdds-wear", paper, "n/a", NotMeasured({"cdds", inplace}, s));
      continue;
    }
    s.Claim("cdds-wear", paper,
            "hottest page / median page: cdds " + Num(cdds, 1) + "x, " + inplace + " " + Num(other, 1) + "x",
            cdds < other ? "reproduced (cdds's writes are more even)" : "not reproduced (cdds's writes are not more even)");
    const double nodes = Get(s, "cdds-wear", "cdds", Variant("1K"), Blocks) /
                         Get(s, "cdds-wear", inplace, Variant("1K"), Blocks);
    s.Claim("cdds-wear", "CDDS creates about twice the nodes of the STX B-Tree (93 vs 47, 1K inserts) — vs " +
                             std::string(inplace),
            std::isfinite(nodes) ? Num(nodes, 2) + "x the blocks" : "n/a",
            std::isfinite(nodes) ? FactorVerdict(93.0 / 47, 93.0 / 47, nodes) : NotMeasured({"cdds", inplace}, s));
  }
  {
    const Measurement* m = s.Find("cdds-wear", [](const Measurement& r) { return r.tree == "cdds" && r.variant == "1K"; });
    const std::string paper = "a split_insert (new nodes) causes a burst of writes (Figure 6.4)";
    if (!m || m->profile.path.empty()) {
      s.Claim("cdds-wear", paper, "n/a", NotMeasured({"cdds"}, s));
    } else {
      const double r = m->profile.quiet_window_writes > 0
                           ? m->profile.alloc_window_writes / m->profile.quiet_window_writes
                           : kNaN;
      s.Claim("cdds-wear", paper,
              "windows with an allocation: " + Num(m->profile.alloc_window_writes, 0) + " writes, without: " +
                  Num(m->profile.quiet_window_writes, 0) + " (" + Num(r, 2) + "x)",
              std::isfinite(r) && r > 1.1 ? "reproduced" : "not reproduced");
    }
  }
}

void RunCddsSuite(SuiteContext& s) {
  // Main-job budget: 200K puts/gets/deletes of 2 KB values with --full
  // (the thesis: 1M); 1M would take about 8 minutes here on its own.
  const uint64_t n = s.Size(100000, 200000);
  s.Text("25-byte keys (byte-string keys through each tree's BytesTree) and 2 KB values (`--value-size 2048`): a "
         "tree stores each value as a record in its pool, written and persisted before the tree references it, "
         "and maps the key to the record; Berkeley DB and LMDB store the 2 KB natively. "
         "\"Volatile CDDS\" is `cdds` on the `dram` backend (no flush, no fence); the plain B+-tree is `volatile` "
         "(its records are on the heap).");
  std::vector<std::string> durable = s.Available({"cdds", "bdb", "bdb-nosync", "lmdb"});
  s.Experiment("cdds-ops", "Puts, gets and deletes", Scale(n) + " puts into an empty store; " + Scale(n) +
               " gets and deletes on a " + Scale(n) + "-key store.");
  for (auto [mix, records] : {std::pair{"insert=1", uint64_t{0}}, std::pair{"read=1", n}, std::pair{"remove=1", n}}) {
    BenchConfig c = Config(s, durable, records, n, mix);
    c.workload.key_min = c.workload.key_max = 25;
    c.value_size = 2048;
    c.variant = mix;
    s.Run("cdds-ops", c);
    std::vector<std::string> vol = s.Available({"cdds", "volatile"});
    BenchConfig v = Config(s, vol, records, n, mix);
    v.workload.key_min = v.workload.key_max = 25;
    v.value_size = 2048;
    v.backend = "dram";
    v.variant = std::string(mix) + " dram";
    s.Run("cdds-ops", v);
  }
  s.AddFigure({"ops.png", "Put / get / delete throughput, 25 B keys, 2 KB values", "cdds-ops", "bars", "variant", "throughput_ops_s",
               "tree", "", "", "ops/s", true});
  const std::tuple<const char*, const char*, double> claims[] = {
      {"insert=1", "put", 1.74}, {"read=1", "get", 2.38}, {"remove=1", "delete", 6.03}};
  for (auto [mix, word, f] : claims)
    RatioClaim(s, "cdds-ops", std::string("CDDS ") + word + " +" + Num((f - 1) * 100, 0) + " % vs durable Berkeley DB", f, f,
               Get(s, "cdds-ops", "cdds", Variant(mix), Tput), Get(s, "cdds-ops", "bdb", Variant(mix), Tput), {"cdds", "bdb"});
  ReductionClaim(s, "cdds-ops", "volatile CDDS puts 21-25 % slower than a plain B+-tree", 21, 25,
                 Get(s, "cdds-ops", "cdds", Variant("insert=1 dram"), Tput),
                 Get(s, "cdds-ops", "volatile", Variant("insert=1 dram"), Tput), {"cdds", "volatile"},
                 "throughput, cdds on dram vs volatile");

  s.Experiment("cdds-flush", "Flush throughput by object size",
               "Write + flush + fence of objects from 64 B to 64 MB in an anonymous pool on the run's backend (counting "
               "off; the time includes writing the object); "
               "cache lines flushed per second.");
  const uint64_t total = s.Size(64ull << 20, 256ull << 20);
  for (uint64_t size = 64; size <= (64ull << 20) && !s.counting(); size *= 16) {
    Measurement m = FlushThroughput(s.Base(), size, std::max(total, size));
    m.experiment = "cdds-flush";
    s.Record(m);
  }
  s.AddFigure({"flush.png", "Cache lines flushed per second by object size", "cdds-flush", "lines", "records",
               "throughput_ops_s", "tree", "", "", "lines/s", false});
  {
    double small = Get(s, "cdds-flush", "pool", Variant("64"), Tput);
    double lo = kNaN, hi = kNaN;
    for (uint64_t size = 1024; size <= (64ull << 20); size *= 16) {
      double v = Get(s, "cdds-flush", "pool", Variant(std::to_string(size)), Tput);
      if (!std::isfinite(v)) continue;
      lo = std::isfinite(lo) ? std::min(lo, v) : v;
      hi = std::isfinite(hi) ? std::max(hi, v) : v;
    }
    s.Claim("cdds-flush", "~12M lines/s for 64 B objects, 16-20M for larger ones (their hardware)",
            Num(small / 1e6, 1) + "M lines/s at 64 B, " + Num(lo / 1e6, 1) + "-" + Num(hi / 1e6, 1) + "M for 1 KB-64 MB",
            FactorVerdict(16.0 / 12, 20.0 / 12, lo / small) + " (ratio larger / 64 B objects)");
  }
  RunWearExperiment(s);
}

// ---- LB+-Tree ---------------------------------------------------------------------------------

void RunLbTreeSuite(SuiteContext& s) {
  // Main-job budget: the claims at 10M bulk-loaded keys and 1M inserts
  // (--full); the node-size sweep on 1M keys.
  const uint64_t n = s.Size(200000, 10000000), ins = s.Size(100000, 1000000), sweep = s.Size(200000, 1000000);
  auto trees = s.Available({"lbtree", "fptree", "wbtree"});
  s.Text("Bulk-loaded trees of " + Scale(n) + " keys (paper: up to 2 billion), then " + Scale(ins) +
         " inserts. The paper's two factors per case are set beside ours in the order of BENCH.md: vs FPTree / vs wB+-Tree. "
         "The paper measured real 3D XPoint: the claims are judged on the `optane` media profile (docs/bench.md, "
         "\"Media profiles\", says what it does not capture), and the insert experiments run again at DRAM speed "
         "(ids ending in `-dram`).");
  struct Case {
    const char* id;
    double fill;
    DistKind dist;
    double fp_lo, fp_hi, wb_lo, wb_hi;
  };
  const Case cases[] = {{"lb-bulk70", 0.7, DistKind::kUniform, 1.20, 1.24, 1.12, 1.21},
                        {"lb-bulk100", 1.0, DistKind::kUniform, 2.55, 2.92, 2.31, 2.45},
                        {"lb-dense", 1.0, DistKind::kSequential, 2.31, 2.69, 2.22, 2.33}};
  // The paper measured real 3D XPoint: the claims are judged on the optane
  // profile (media.h); the same experiments at DRAM speed follow, with ids
  // ending in "-dram", so the report shows what the medium changes.
  const std::vector<std::string> media = s.Media("optane");
  for (const std::string& medium : media) {
    const bool paper = medium == media.front();
    for (const Case& k : cases) {
      const std::string id = paper ? std::string(k.id) : std::string(k.id) + "-" + medium;
      s.Experiment(id, std::string("Inserts after bulk load at ") + Num(k.fill * 100, 0) + " %" +
                           (k.dist == DistKind::kSequential ? ", dense (right-most leaf)" : ", random") +
                           (paper ? "" : ", at DRAM speed"),
                   "Default node sizes; media " + (medium.empty() ? std::string("as given") : medium) + ".");
      BenchConfig c = SuiteContext::OnMedia(Config(s, trees, n, ins, "insert=1"), medium);
      c.bulk_load = true;
      c.fill = k.fill;
      c.workload.dist.kind = k.dist;
      s.Run(id, c);
      const std::string at = paper ? "" : " (ours at DRAM speed; the paper's on 3D XPoint)";
      RatioClaim(s, id, "LB+-Tree " + Num(k.fp_lo) + "-" + Num(k.fp_hi) + "x FPTree" + at, k.fp_lo, k.fp_hi,
                 Get(s, id, "lbtree", Any(), Tput), Get(s, id, "fptree", Any(), Tput), {"lbtree", "fptree"});
      RatioClaim(s, id, "LB+-Tree " + Num(k.wb_lo) + "-" + Num(k.wb_hi) + "x wB+-Tree" + at, k.wb_lo, k.wb_hi,
                 Get(s, id, "lbtree", Any(), Tput), Get(s, id, "wbtree", Any(), Tput), {"lbtree", "wbtree"});
    }
  }
  s.AddFigure({"inserts.png", "Insert throughput after bulk load", "lb-bulk70", "bars", "tree", "throughput_ops_s", "tree",
               "", "", "ops/s", false});
  s.AddFigure({"inserts-full.png", "Insert throughput, 100 % full tree", "lb-bulk100", "bars", "tree", "throughput_ops_s",
               "tree", "", "", "ops/s", false});
  s.AddFigure({"inserts-dense.png", "Dense inserts", "lb-dense", "bars", "tree", "throughput_ops_s", "tree", "", "",
               "ops/s", false});
  {
    // The paper's bound (Theorem 3.5) is for inserts into the leaves of a
    // stable tree, i.e. inserts that do not split; the verdict uses those.
    // The count over every insert (splits included) stays beside it.
    double lb = Get(s, "lb-bulk70", "lbtree", Any(), SplitFreeInsertLines);
    std::string split_free, all;
    double worst = kNaN;
    for (const char* t : {"lbtree", "fptree", "wbtree"}) {
      double v = Get(s, "lb-bulk70", t, Any(), SplitFreeInsertLines);
      double share = Get(s, "lb-bulk70", t, Any(), SplitFreeInsertShare);
      split_free += std::string(split_free.empty() ? "" : ", ") + t + " " + Num(v) +
                    (std::isfinite(share) ? " (" + Num(share * 100, 1) + " % of inserts)" : "");
      all += std::string(all.empty() ? "" : ", ") + t + " " + Num(Get(s, "lb-bulk70", t, Any(), Lines));
      if (std::string(t) != "lbtree" && std::isfinite(v)) worst = std::isfinite(worst) ? std::min(worst, v) : v;
    }
    auto verdict = [&](double tol) { return lb <= 1.31 * tol && (!std::isfinite(worst) || worst / lb >= 1.35 / tol); };
    std::string v = !std::isfinite(lb)   ? NotMeasured({"lbtree"}, s)
                    : verdict(1.10)      ? "reproduced"
                    : verdict(1.25)      ? "close (within 25 %)"
                    : lb <= 1.31 * 1.10  ? "partly: LB+-Tree within its bound, the others not >= 1.35x higher"
                                         : "not reproduced";
    s.Claim("lb-bulk70", "<= 1.31 NVM line writes per insert for LB+-Tree vs >= 1.77 for the traditional layout "
            "(inserts into leaves of a stable tree: no split)",
            "lines per split-free insert: " + split_free + "; all inserts, splits included: " + all, v);
  }

  const std::vector<uint32_t> sizes = {256, 512, 1024};
  s.Experiment("lb-node-size", "LB+-Tree node size",
               "256 B - 1 KB, " + Scale(sweep) + " keys: inserts into 100 %-full and dense trees, searches and deletes; media " +
                   (media.front().empty() ? std::string("as given") : media.front()) + ".");
  if (s.Have("lbtree")) {
    for (const char* v : {"full", "dense", "search", "delete"}) {
      BenchConfig c = SuiteContext::OnMedia(
          Config(s, {"lbtree"}, sweep, ins, v == std::string("search") ? "read=1" : v == std::string("delete") ? "remove=1" : "insert=1"),
          media.front());
      c.bulk_load = true;
      c.fill = 1.0;
      if (v == std::string("dense")) c.workload.dist.kind = DistKind::kSequential;
      c.variant = v;
      RunNodeSizes(s, "lb-node-size", c, sizes);
    }
  }
  s.AddFigure({"node-size.png", "LB+-Tree throughput by node size", "lb-node-size", "bars", "node_size", "throughput_ops_s",
               "variant", "", "", "ops/s", false});
  {
    auto best = [&](const char* v) {
      double b = kNaN;
      uint32_t at = 0;
      for (uint32_t ns : sizes) {
        double t = Get(s, "lb-node-size", "lbtree", Both(NodeSize(ns), Variant(v)), Tput);
        if (std::isfinite(t) && (!std::isfinite(b) || t > b)) {
          b = t;
          at = ns;
        }
      }
      return at;
    };
    uint32_t f = best("full"), d = best("dense");
    s.Claim("lb-node-size", "256 B nodes are best for full and dense trees",
            f ? "best: " + std::to_string(f) + " B (full), " + std::to_string(d) + " B (dense)" : "n/a",
            !f ? NotMeasured({"lbtree"}, s) : (f == 256 && d == 256 ? "reproduced" : "not reproduced"));
    for (const char* v : {"search", "delete"}) {
      double mn = kNaN, mx = kNaN;
      for (uint32_t ns : sizes) {
        double t = Get(s, "lb-node-size", "lbtree", Both(NodeSize(ns), Variant(v)), Tput);
        if (!std::isfinite(t)) continue;
        mn = std::isfinite(mn) ? std::min(mn, t) : t;
        mx = std::isfinite(mx) ? std::max(mx, t) : t;
      }
      s.Claim("lb-node-size", std::string("similar ") + v + " throughput across node sizes",
              std::isfinite(mn) ? "max / min = " + Ratio(mx / mn) + " (tolerance +-20 %)" : "n/a",
              std::isfinite(mn) ? ComparableVerdict(mx / mn, 0.2) : NotMeasured({"lbtree"}, s));
    }
  }

  s.Experiment("lb-recovery", "Recovery with 1..k rebuild threads", Scale(n) + " keys; crash recovery with 1 and " +
               std::to_string(std::max(2u, std::thread::hardware_concurrency())) + " threads.");
  if (s.Have("lbtree")) {
    BenchConfig c = Config(s, {"lbtree"}, n, 0, "read=1");
    c.kind = WorkloadKind::kRecovery;
    c.recovery_threads = std::max(2u, std::thread::hardware_concurrency());
    s.Run("lb-recovery", c);
  }
  s.AddFigure({"recovery.png", "LB+-Tree crash recovery vs rebuild threads", "lb-recovery", "bars", "recovery_threads",
               "recovery_ms", "recovery_kind", "", "", "ms", false});
  {
    auto at = [&](uint32_t k) {
      return Get(s, "lb-recovery", "lbtree", [k](const Measurement& m) { return m.recovery_kind == "crash" && m.recovery_threads == k; },
                 [](const Measurement& m) { return m.recovery_ms; });
    };
    uint32_t k = std::max(2u, std::thread::hardware_concurrency());
    double r = at(1) / at(k);
    s.Claim("lb-recovery", "parallel rebuild scales with threads",
            std::isfinite(r) ? "1 thread / " + std::to_string(k) + " threads = " + Ratio(r) : "n/a",
            std::isfinite(r) ? (r >= 1.3 ? "reproduced" : "not reproduced") :
            s.Have("lbtree") ? "not measured: lbtree has no kCapParallelRecovery or recovery failed" : NotMeasured({"lbtree"}, s));
  }
}

}  // namespace pmtree::bench
