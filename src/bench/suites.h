// SPDX-License-Identifier: Apache-2.0
//
// Reproduction suites (BENCH.md §2): each runs one paper's key experiments
// through the ordinary driver, with trees chosen BY REGISTRY NAME, and writes
// a markdown report with a "paper says / we measure" table for every claim.
//
// A suite never fails because a tree is missing: it runs what exists, marks
// every claim that needs a missing tree as "not measured", and lists what is
// missing.  When a tree lands in the registry, the suite runs it with no code
// change.  Design-specific variants (NV-Tree's adaptive strategies, Circ-Tree's
// linear search) are requested through TreeOptions::extra; a tree that rejects
// the option yields a row with the error, reported as such.
//
// Output folder (default results/<UTC timestamp>/):
//   report.md           index: environment, scale, failure model, every suite
//   <suite>.md          the suite's report, claims table, figures
//   <suite>.jsonl       every measurement (driver JSON rows)
//   figures.json        what to draw (read by python/pmtree_figures)
//   <figure>.png        drawn by python/pmtree_figures from the JSONL only
//
// Thread safety: one suite run per process.

#ifndef PMTREE_BENCH_SUITES_H_
#define PMTREE_BENCH_SUITES_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "bench/output.h"

namespace pmtree::bench {

// Largest --scale: the default sizes times this reach the papers' sizes and
// beyond; more only exhausts memory.
inline constexpr double kMaxSuiteScale = 1000;

struct SuiteOptions {
  std::vector<std::string> suites;  // "nvtree", ..., or "all"
  bool full = false;                // the papers' sizes
  double scale = 1.0;               // multiplies the default (scaled) sizes
  std::string out_dir;              // empty: results/<timestamp>
  bool figures = true;              // run python/pmtree_figures at the end
  BenchConfig base;                 // backend, seed, pool path, progress, ...
  std::string command;              // the command line, recorded in the report
};

// "overview, nvtree, circtree, wotree, cdds, lbtree" (and "all").
std::string SuiteNames();
Status ValidateSuites(const std::vector<std::string>& names);

// Runs the suites; *out_dir receives the report folder.  Fails only when the
// folder cannot be written or options are invalid.
Status RunSuites(const SuiteOptions& o, std::string* out_dir);

// ---- used by the suite definitions (suites/*.cc) and tests ---------------------

// A figure for python/pmtree_figures: rows of `experiment` (optionally only
// those whose `filter` field equals `filter_value`), x and y as JSON paths
// ("node_size", "latency_ns.geomean"), one line/bar group per `group` value.
struct FigureSpec {
  std::string file;        // PNG name, without folder
  std::string title;
  std::string experiment;
  std::string kind = "bars";  // "bars", "lines", "series"
  std::string x, y, group = "label";
  std::string filter, filter_value;
  std::string ylabel;
  bool logy = false;
};

// Verdict of a claim given as a factor range [lo, hi] (lo == hi: one value)
// against our factor: "reproduced" within 10 % of the range, "close:
// smaller/larger factor" within 25 %, "same direction, smaller/larger factor"
// when only the side of 1 agrees, else "not reproduced".
std::string FactorVerdict(double lo, double hi, double ours);
// "comparable" claims: |ours - 1| <= tolerance.
std::string ComparableVerdict(double ours, double tolerance);
// Percent-reduction claims (80..97 % fewer): within 10 points of the range.
std::string ReductionVerdict(double lo_pct, double hi_pct, double ours_pct);

// Progress over one RunSuites call.  A unit is one target of one Run call
// (all its thread counts, repetitions and recovery kinds); a counting pass
// over the suite definitions, which measures nothing, finds the total first,
// so each progress line can say "done/total".
struct SuiteProgress {
  bool counting = false;  // the counting pass: Run counts units and returns no rows
  size_t done = 0, total = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

// The pool size of a suite run: enough for its records and operations (the
// user's --pool-size stays the upper bound), so that reserving it is cheap.
uint64_t SuitePoolSize(const BenchConfig& c);

class SuiteContext {
 public:
  // `progress` may be null (no progress lines, no counting pass).
  SuiteContext(const SuiteOptions& o, std::string name, std::string dir, HumanTable* table,
               SuiteProgress* progress = nullptr);
  ~SuiteContext();

  const std::string& name() const { return name_; }
  // The report folder (empty when the suite writes no files).
  const std::string& dir() const { return dir_; }
  bool full() const { return o_.full; }
  // n scaled by --scale (default sizes) or `full` with --full.
  uint64_t Size(uint64_t scaled, uint64_t full) const;
  // Whether `tree` is registered (or is a peer); remembers missing ones.
  bool Have(const std::string& tree);
  // The subset of `trees` that exists (missing ones remembered).
  std::vector<std::string> Available(const std::vector<std::string>& trees);
  const std::vector<std::string>& missing() const { return missing_; }
  // A config carrying the user's backend, seed, pool path, progress...
  BenchConfig Base() const;
  // The counting pass (SuiteProgress): nothing is measured, so work done
  // outside Run (e.g. the flush benchmark) must be skipped.
  bool counting() const { return progress_ && progress_->counting; }
  // The media an experiment runs on: its paper's profile and DRAM speed
  // (one entry when the paper's is "dram"), or only "" (= the user's
  // setting, Base() as is) when the user chose --media or --write-latency-ns.
  std::vector<std::string> Media(const std::string& paper) const;
  // `c` on the media profile `name`; "" leaves it unchanged.
  static BenchConfig OnMedia(BenchConfig c, const std::string& name);

  // Runs `c` (rows tagged with `experiment`), records rows, returns them.
  std::vector<Measurement> Run(const std::string& experiment, BenchConfig c);
  // Records a row measured outside RunBench (e.g. the pool flush benchmark).
  void Record(const Measurement& m);
  // First successful row matching `pred` among the rows of `experiment`.
  const Measurement* Find(const std::string& experiment, const std::function<bool(const Measurement&)>& pred) const;

  void Text(const std::string& markdown);  // appended to the report body
  void Experiment(const std::string& id, const std::string& title, const std::string& setup);
  void AddFigure(const FigureSpec& f);
  // One claim row; `ours` is our number in words, `verdict` from the helpers
  // above or "not measured: ...".
  void Claim(const std::string& experiment, const std::string& paper, const std::string& ours, const std::string& verdict);

  const std::vector<Measurement>& rows() const { return rows_; }
  const std::vector<std::array<std::string, 4>>& claims() const { return claims_; }
  const std::vector<FigureSpec>& figures() const { return figures_; }
  std::string Report(const std::string& figures_note) const;

 private:
  void ProgressLine(const std::string& experiment, const BenchConfig& c);
  std::string MediaOfRows() const;

  const SuiteOptions& o_;
  std::string name_, dir_;
  HumanTable* table_;
  SuiteProgress* progress_;
  FILE* jsonl_ = nullptr;
  std::vector<Measurement> rows_;
  std::vector<std::string> missing_;
  std::string body_;
  std::vector<std::array<std::string, 4>> claims_;
  std::vector<FigureSpec> figures_;
  double seconds_ = 0;
};

// The suite definitions (suites/<paper>.cc).
void RunOverviewSuite(SuiteContext& s);
void RunNvTreeSuite(SuiteContext& s);
void RunCircTreeSuite(SuiteContext& s);
void RunWoTreeSuite(SuiteContext& s);
void RunCddsSuite(SuiteContext& s);
void RunLbTreeSuite(SuiteContext& s);

// Helpers for suite definitions.
std::string Ratio(double r);           // "3.21x"
std::string Pct(double p);             // "84.7 %"
std::string NotMeasured(const std::vector<std::string>& needed, SuiteContext& s);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_SUITES_H_
