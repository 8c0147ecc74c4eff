// SPDX-License-Identifier: Apache-2.0
//
// The overview suite: every registered tree and the peers side by side, with
// issue 19's goals checked on the rows (BENCH.md §2).

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>
#include <utility>

#include "bench/peers.h"
#include "bench/suites/common.h"
#include "pmtree/registry.h"

namespace pmtree::bench {
namespace {

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

using TreeValue = std::function<double(const std::string&)>;

// The tree of `among` with the highest (or `lowest`) finite value, and that
// value; {"", NaN} when none has one.
std::pair<std::string, double> BestOf(const std::vector<std::string>& among, const TreeValue& v, bool lowest) {
  std::pair<std::string, double> b{"", kNaN};
  for (const auto& t : among) {
    double x = v(t);
    if (std::isfinite(x) && (!std::isfinite(b.second) || (lowest ? x < b.second : x > b.second))) b = {t, x};
  }
  return b;
}

// One row of the goals table.
void GoalRow(std::string* out, const std::string& goal, const std::string& measured, bool known, bool met) {
  *out += "| " + goal + " | " + measured + " | " + (known ? (met ? "yes" : "**no**") : "not measured") + " |\n";
}

// A goal every tree of `among` must meet: each one's ratio, met when all are >= `goal`.
void EveryGoalRow(std::string* out, const std::string& goal_text, const std::vector<std::string>& among,
                  const TreeValue& ratio, double goal, const std::string& where) {
  std::string list;
  bool met = true;
  for (const auto& t : among) {
    const double r = ratio(t);
    if (!std::isfinite(r)) continue;
    list += (list.empty() ? "" : ", ") + t + " " + Ratio(r);
    met &= r >= goal;
  }
  GoalRow(out, goal_text, list.empty() ? "n/a" : list + where, !list.empty(), met);
}

// The lookup, insert and durable-insert goals.
void ThroughputGoals(SuiteContext& s, const std::vector<std::string>& persistent,
                     const std::vector<std::string>& concurrent, std::string* out) {
  auto tput = [&](const std::string& exp, const std::string& t, const Pred& p) { return Get(s, exp, t, p, Tput); };
  const Pred read = Variant("read=1"), insert = Variant("insert=1");
  // Lookups: time per lookup of the fastest persistent tree over absl-btree's.
  auto br = BestOf(persistent, [&](const std::string& t) { return tput("overview-ops", t, read); }, false);
  const double absl_read = tput("overview-ops", "absl-btree", read);
  GoalRow(out, "best tree's lookup <= 1.1x absl::btree_map's time", br.first + ": " + Ratio(absl_read / br.second),
          std::isfinite(absl_read / br.second), absl_read / br.second <= 1.1);
  // Inserts: the best inserter's insert time minus its lookup time, in persists.
  const double persist_s = 1 / Get(s, "overview-persist", "pool", Any(), Tput);
  auto bi = BestOf(persistent, [&](const std::string& t) { return tput("overview-ops", t, insert); }, false);
  const double extra = (1 / bi.second - 1 / tput("overview-ops", bi.first, read)) / persist_s;
  GoalRow(out, "best tree's insert <= its lookup + 1.2 persists",
          bi.first + ": lookup + " + Num(extra) + " persists (one persist of a line = " + Num(persist_s * 1e9, 0) + " ns)",
          std::isfinite(extra), extra <= 1.2);
  // Durable inserts against the best durable peer, one thread and all cores.
  for (const char* exp : {"overview-ops", "overview-cores"}) {
    const bool one = std::string(exp) == "overview-ops";
    const Pred p = one ? insert : Any();
    auto peer = BestOf(kDurablePeers, [&](const std::string& t) { return tput(exp, t, p); }, false);
    auto tree = BestOf(one ? persistent : concurrent, [&](const std::string& t) { return tput(exp, t, p); }, false);
    const double r = tree.second / peer.second;
    const Measurement* any = s.Find(exp, Any());
    const std::string threads = any ? std::to_string(any->threads) : "?";
    GoalRow(out, one ? "durable inserts >= 5x the best durable peer, 1 thread"
                     : "durable inserts >= 10x the best durable peer, all cores (" + threads + " threads)",
            tree.first + " / " + peer.first + " = " + Ratio(r), std::isfinite(r), r >= (one ? 5 : 10));
  }
}

// The recovery goals, at the largest size measured.
void RecoveryGoals(SuiteContext& s, const std::vector<std::string>& persistent, std::string* out) {
  uint64_t size = 0;
  for (const auto& m : s.rows())
    if (m.experiment == "overview-recovery" && m.error.empty()) size = std::max(size, m.records);
  auto rec = [&](const std::string& t, const std::string& kind, uint32_t threads) {
    return Get(s, "overview-recovery", t, [&](const Measurement& m) {
      return m.records == size && m.recovery_kind == kind && (threads == 0 || m.recovery_threads == threads);
    }, [](const Measurement& m) { return m.recovery_ms; });
  };
  auto crash = BestOf(persistent, [&](const std::string& t) {
    double a = rec(t, "crash", 1), b = rec(t, "crash", 2);
    return std::isfinite(b) && !(b >= a) ? b : a;
  }, true);
  GoalRow(out, "recovery of 10M keys after a crash <= 100 ms (best tree)",
          crash.first + ": " + Num(crash.second, 1) + " ms at " + Scale(size) + " keys", std::isfinite(crash.second),
          crash.second <= 100);
  EveryGoalRow(out, "parallel rebuild >= 1.7x with 2 threads (every tree with kCapParallelRecovery)", persistent,
               [&](const std::string& t) { return HasCap(t, kCapParallelRecovery) ? rec(t, "crash", 1) / rec(t, "crash", 2) : kNaN; },
               1.7, " at " + Scale(size) + " keys");
  auto clean = BestOf(persistent, [&](const std::string& t) {
    return HasCap(t, kCapInstantRestart) ? rec(t, "clean", 0) : kNaN;
  }, false);
  GoalRow(out, "clean restart <= 5 ms (every tree with instant restart; the slowest shown)",
          clean.first + ": " + Num(clean.second, 1) + " ms at " + Scale(size) + " keys", std::isfinite(clean.second),
          clean.second <= 5);
}

// Issue 19's goals (§2), checked on this run's overview rows: one row per
// goal with the measured value, the tree it is about and whether it is met.
// docs/bench.md ("Issue 19 goals") gives the causes of the gaps.
std::string GoalsTable(SuiteContext& s, const std::vector<std::string>& trees) {
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
  ThroughputGoals(s, persistent, concurrent, &out);
  RecoveryGoals(s, persistent, &out);
  EveryGoalRow(&out, "read-mostly (read=0.9,insert=0.1) 2 threads >= 1.8x 1 thread, every concurrent tree", concurrent,
               [&](const std::string& t) {
                 auto at = [&](uint32_t k) {
                   return Get(s, "overview-threads", t, [k](const Measurement& m) { return m.threads == k; }, Tput);
                 };
                 return at(2) / at(1);
               },
               1.8, "");
  return out;
}

// The overview's targets and sizes.
struct Lineup {
  std::vector<std::string> trees;       // every registered tree that is not test-only
  std::vector<std::string> all;         // trees and peers
  std::vector<std::string> lead, rest;  // run at `n` / at `small` (the main job's budget)
  uint64_t n = 0, small = 0;
};

// Main-job budget (docs/bench.md, "The main job"): at --full, issue 19's
// sizes (1M keys) for insert and read on the trees and the best-configured
// peers (`lead`); update, the mix and the other peers stay at the scaled
// size `small`, which is what lets the whole job fit in about 20 minutes.
Lineup MakeLineup(SuiteContext& s) {
  Lineup l;
  for (const auto& f : Registry())
    if (!f.test_only()) l.trees.emplace_back(f.name);
  l.all = l.trees;
  for (const auto& p : Peers()) l.all.emplace_back(p.name);
  l.n = s.Size(100000, 1000000);
  l.small = s.Size(100000, 100000);
  l.lead = l.trees;
  for (const auto& p : Peers()) {
    const std::string name(p.name);
    const bool best = name == "absl-btree" ||
                      std::find(kDurablePeers.begin(), kDurablePeers.end(), name) != kDurablePeers.end();
    (best || l.n == l.small ? l.lead : l.rest).push_back(name);
  }
  return l;
}

// One row per target of `all`: throughput per workload and the insert costs.
std::string OpsTable(SuiteContext& s, const std::vector<std::string>& all) {
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
  return table;
}

// Throughput and cost per operation: insert, read, update and a YCSB-like mix.
void OpsExperiment(SuiteContext& s, const Lineup& l) {
  const auto& [trees, all, lead, rest, n, small] = l;
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
  s.Text(OpsTable(s, all));
  s.Text(PeerRatioTable(s, trees));
  s.AddFigure({"throughput.png", "Throughput by workload", "overview-ops", "bars", "variant", "throughput_ops_s", "tree",
               "", "", "ops/s", true});
  s.AddFigure({"flushes.png", "Flush instructions per operation", "overview-ops", "bars", "variant", "per_op.flushes",
               "tree", "", "", "flushes / op", false});
}

// Read-mostly scaling with 1 and 2 threads, and durable inserts on all cores.
void ThreadsExperiments(SuiteContext& s, const Lineup& l) {
  const auto& [trees, all, lead, rest, n, small] = l;
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
}

// One persist (the unit of the insert goal) and recovery time by size.
void PersistAndRecoveryExperiments(SuiteContext& s) {
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
}

}  // namespace

void RunOverviewSuite(SuiteContext& s) {
  const Lineup l = MakeLineup(s);
  const auto& [trees, all, lead, rest, n, small] = l;
  s.Text("Every registered tree (" + std::to_string(trees.size()) + ") and the peers, default node sizes, " +
         Scale(n) + " records loaded by insert, then " + Scale(n) +
         " operations per workload, uniform keys unless stated, one thread" +
         (n == small ? std::string(".")
                     : "; update, the mix, and the peers other than " + kDurablePeers[0] + ", " + kDurablePeers[1] +
                           " and absl-btree at " + Scale(small) + " records and operations (the main job's budget)."));
  OpsExperiment(s, l);
  ThreadsExperiments(s, l);
  PersistAndRecoveryExperiments(s);
  s.Experiment("overview-goals", "Issue 19 goals", "Checks computed from the rows above.");
  s.Text(GoalsTable(s, trees));
}

}  // namespace pmtree::bench
