// SPDX-License-Identifier: Apache-2.0
//
// The LB+-Tree suite (Liu et al., PVLDB 2020; BENCH.md §2).

#include <algorithm>
#include <cmath>
#include <thread>

#include "bench/suites/common.h"

namespace pmtree::bench {
namespace {

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

// Inserts after a bulk load at 70 % and 100 % fill and dense inserts, on each
// medium of `media` (the paper's first), with the claims against FPTree and wB+-Tree.
void InsertExperiments(SuiteContext& s, const std::vector<std::string>& trees,
                       const std::vector<std::string>& media, uint64_t n, uint64_t ins) {
  struct Case {
    const char* id;
    double fill;
    DistKind dist;
    double fp_lo, fp_hi, wb_lo, wb_hi;
  };
  const Case cases[] = {{"lb-bulk70", 0.7, DistKind::kUniform, 1.20, 1.24, 1.12, 1.21},
                        {"lb-bulk100", 1.0, DistKind::kUniform, 2.55, 2.92, 2.31, 2.45},
                        {"lb-dense", 1.0, DistKind::kSequential, 2.31, 2.69, 2.22, 2.33}};
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
}

// NVM line writes per insert (Theorem 3.5), from the lb-bulk70 rows.
void LineWritesClaim(SuiteContext& s) {
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

// The node-size sweep on `medium`.
void NodeSizeExperiment(SuiteContext& s, const std::string& medium, uint64_t sweep, uint64_t ins) {
  const std::vector<uint32_t> sizes = {256, 512, 1024};
  s.Experiment("lb-node-size", "LB+-Tree node size",
               "256 B - 1 KB, " + Scale(sweep) + " keys: inserts into 100 %-full and dense trees, searches and deletes; media " +
                   (medium.empty() ? std::string("as given") : medium) + ".");
  if (s.Have("lbtree")) {
    for (const char* v : {"full", "dense", "search", "delete"}) {
      BenchConfig c = SuiteContext::OnMedia(
          Config(s, {"lbtree"}, sweep, ins, v == std::string("search") ? "read=1" : v == std::string("delete") ? "remove=1" : "insert=1"),
          medium);
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
}

// Crash recovery with 1 and k rebuild threads.
void RecoveryExperiment(SuiteContext& s, uint64_t n) {
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

}  // namespace

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
  // The paper measured real 3D XPoint: the claims are judged on the optane
  // profile (media.h); the same experiments at DRAM speed follow, with ids
  // ending in "-dram", so the report shows what the medium changes.
  const std::vector<std::string> media = s.Media("optane");
  InsertExperiments(s, trees, media, n, ins);
  LineWritesClaim(s);
  NodeSizeExperiment(s, media.front(), sweep, ins);
  RecoveryExperiment(s, n);
}

}  // namespace pmtree::bench
