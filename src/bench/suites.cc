// SPDX-License-Identifier: Apache-2.0
//
// Suite framework: running, recording, verdicts, reports and the call to the
// figure package.  The experiments themselves are in suites/<paper>.cc.

#include "bench/suites.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bench/media.h"
#include "bench/peers.h"
#include "pmtree/registry.h"

#ifndef PMTREE_SOURCE_DIR
#define PMTREE_SOURCE_DIR ""
#endif

namespace pmtree::bench {
namespace {

namespace fs = std::filesystem;

struct SuiteDef {
  const char* name;
  const char* title;
  void (*run)(SuiteContext&);
};

const std::vector<SuiteDef>& Suites() {
  static const std::vector<SuiteDef> suites = {
      {"overview", "Every tree and the peers side by side", &RunOverviewSuite},
      {"nvtree", "NV-Tree (Yang et al., IEEE TC 2016)", &RunNvTreeSuite},
      {"circtree", "Circ-Tree (Wang et al., IEEE TC)", &RunCircTreeSuite},
      {"wotree", "WO-tree (Ma et al., JCST 2021)", &RunWoTreeSuite},
      {"cdds", "CDDS B-Tree (Venkataraman, UIUC 2011)", &RunCddsSuite},
      {"lbtree", "LB+-Tree (Liu et al., PVLDB 2020)", &RunLbTreeSuite},
  };
  return suites;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// The interpreter that has matplotlib: $PMTREE_PYTHON, else /usr/bin/python3
// (Debian's python3-matplotlib is importable only by the system interpreter).
std::string Python() {
  const char* env = getenv("PMTREE_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

// Draws the figures; returns a note for the report.
std::string DrawFigures(const std::string& dir) {
  std::string src = PMTREE_SOURCE_DIR;
  std::string pkg = src + "/python";
  if (src.empty() || !fs::exists(pkg + "/pmtree_figures/__init__.py"))
    return "Figures not drawn: the figure package python/pmtree_figures was not found (source tree " + src +
           "). Draw them later with `PYTHONPATH=<source>/python /usr/bin/python3 -m pmtree_figures " + dir + "`.";
  std::string py = Python();
  std::string check = "'" + py + "' -c 'import matplotlib' >/dev/null 2>&1";
  if (std::system(check.c_str()) != 0) {
    std::string msg = "Figures not drawn: matplotlib is not importable by " + py +
                      " (install python3-matplotlib, or point PMTREE_PYTHON at an interpreter that has it).";
    fprintf(stderr, "%s\n", msg.c_str());
    return msg;
  }
  std::string cmd = "PYTHONPATH='" + pkg + "' '" + py + "' -m pmtree_figures '" + dir + "' >&2";
  int rc = std::system(cmd.c_str());
  if (rc != 0) return "The figure package failed (exit " + std::to_string(rc) + "); command: `" + cmd + "`.";
  return "";
}

nlohmann::json FigureJson(const FigureSpec& f, const std::string& suite, const std::string& command) {
  return {{"file", f.file},   {"title", f.title}, {"suite", suite},   {"experiment", f.experiment},
          {"kind", f.kind},   {"x", f.x},         {"y", f.y},         {"group", f.group},
          {"filter", f.filter}, {"filter_value", f.filter_value}, {"ylabel", f.ylabel}, {"logy", f.logy},
          {"data", suite + ".jsonl"}, {"command", command}};
}

}  // namespace

std::string SuiteNames() {
  std::string s;
  for (const auto& d : Suites()) s += std::string(d.name) + ", ";
  return s + "all";
}

Status ValidateSuites(const std::vector<std::string>& names) {
  if (names.empty()) return Status::InvalidArgument("--suite needs a name; valid: " + SuiteNames());
  for (const auto& n : names) {
    if (n == "all") continue;
    bool found = false;
    for (const auto& d : Suites()) found |= n == d.name;
    if (!found) return Status::InvalidArgument("unknown suite '" + n + "'; valid: " + SuiteNames());
  }
  return Status::Ok();
}

std::string FactorVerdict(double lo, double hi, double ours) {
  if (!std::isfinite(ours) || ours <= 0) return "not measured";
  if (ours >= lo * 0.9 && ours <= hi * 1.1) return "reproduced";
  if (ours >= lo * 0.75 && ours <= hi * 1.25)
    return ours < lo ? "close: smaller factor (within 25 %)" : "close: larger factor (within 25 %)";
  bool paper_above = lo > 1, ours_above = ours > 1;
  if (paper_above == ours_above) return ours < lo ? "same direction, smaller factor" : "same direction, larger factor";
  return "not reproduced (opposite direction)";
}

std::string ComparableVerdict(double ours, double tolerance) {
  if (!std::isfinite(ours) || ours <= 0) return "not measured";
  return std::fabs(ours - 1) <= tolerance ? "reproduced" : "not reproduced (differs by " + Pct(std::fabs(ours - 1) * 100) + ")";
}

std::string ReductionVerdict(double lo_pct, double hi_pct, double ours_pct) {
  if (!std::isfinite(ours_pct)) return "not measured";
  if (ours_pct >= lo_pct - 10 && ours_pct <= hi_pct + 10) return "reproduced";
  if (ours_pct > 0) return ours_pct < lo_pct ? "same direction, smaller reduction" : "same direction, larger reduction";
  return "not reproduced (no reduction)";
}

std::string Ratio(double r) {
  if (!std::isfinite(r) || r <= 0) return "n/a";
  return Fixed(r, 2) + "x";
}

std::string Pct(double p) {
  if (!std::isfinite(p)) return "n/a";
  return Fixed(p, 1) + " %";
}

std::string NotMeasured(const std::vector<std::string>& needed, SuiteContext& s) {
  std::string miss;
  for (const auto& t : needed)
    if (!s.Have(t)) miss += (miss.empty() ? "" : ", ") + t;
  if (miss.empty()) return "not measured (the run failed; see the rows' errors)";
  return "not measured: " + miss + " not registered yet";
}

// ---- SuiteContext --------------------------------------------------------------------

SuiteContext::SuiteContext(const SuiteOptions& o, std::string name, std::string dir, HumanTable* table,
                           SuiteProgress* progress)
    : o_(o), name_(std::move(name)), dir_(std::move(dir)), table_(table), progress_(progress) {
  if (!dir_.empty()) jsonl_ = fopen((dir_ + "/" + name_ + ".jsonl").c_str(), "w");
}

SuiteContext::~SuiteContext() {
  if (jsonl_) fclose(jsonl_);
}

uint64_t SuiteContext::Size(uint64_t scaled, uint64_t full) const {
  if (o_.full) return full;
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(static_cast<double>(scaled) * o_.scale)));
}

bool SuiteContext::Have(const std::string& tree) {
  if (FindTree(tree) || FindPeer(tree)) return true;
  if (std::find(missing_.begin(), missing_.end(), tree) == missing_.end()) missing_.push_back(tree);
  return false;
}

std::vector<std::string> SuiteContext::Available(const std::vector<std::string>& trees) {
  std::vector<std::string> out;
  for (const auto& t : trees)
    if (Have(t)) out.push_back(t);
  return out;
}

BenchConfig SuiteContext::Base() const {
  // The user's medium and persistence options carry over (backend, write
  // latency, pool path and size, seed, progress, verify); the workload is the
  // suite's own.
  BenchConfig c = o_.base;
  Workload w;
  w.seed = o_.base.workload.seed;
  c.workload = w;
  c.node_size = 0;
  c.extra.clear();
  c.bulk_load = false;
  c.fill = 1.0;
  c.latency_sample = BenchConfig().latency_sample;
  c.window_ms = BenchConfig().window_ms;
  c.targets.clear();
  c.threads = {1};
  c.repeat = 1;
  c.skip_load = false;
  c.keep_pool = false;
  c.duration_s = 0;
  c.kind = WorkloadKind::kOps;
  c.command = o_.command;
  return c;
}

uint64_t SuitePoolSize(const BenchConfig& c) {
  // Pools are reserved whole (PoolOptions::reserve_space): on tmpfs the
  // default 4 GiB costs about a second of page zeroing per run, which at the
  // suites' hundreds of runs was most of the main job's time.  Trees use well
  // under 512 B of pool per key (the largest, logtree's log, about 100 B).
  const uint64_t keys = c.records + c.ops;
  const uint64_t bytes = (256ull << 20) + keys * (512 + 2ull * c.value_size);
  return (bytes + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1};
}

std::vector<std::string> SuiteContext::Media(const std::string& paper) const {
  if (!o_.base.media.empty() || o_.base.write_latency_ns != 0) return {""};
  if (paper == "dram") return {"dram"};
  return {paper, "dram"};
}

BenchConfig SuiteContext::OnMedia(BenchConfig c, const std::string& name) {
  if (const MediaProfile* p = FindMedia(name)) {
    c.media = p->name;
    c.write_latency_ns = p->write_latency_ns;
  }
  return c;
}

void SuiteContext::Record(const Measurement& m) {
  rows_.push_back(m);
  if (table_) table_->Add(m);
  if (jsonl_) {
    fprintf(jsonl_, "%s\n", ToJson(m).dump().c_str());
    fflush(jsonl_);
  }
}

std::vector<Measurement> SuiteContext::Run(const std::string& experiment, BenchConfig c) {
  std::vector<Measurement> out;
  if (c.targets.empty()) return out;
  if (counting()) {
    progress_->total += c.targets.size();
    return out;
  }
  c.experiment = experiment;
  c.pool_size = std::min(c.pool_size, SuitePoolSize(c));
  // One target at a time (RunBench runs its targets in order anyway), so
  // that each gets its progress line.
  const std::vector<std::string> targets = c.targets;
  for (const std::string& t : targets) {
    c.targets = {t};
    if (progress_) ProgressLine(experiment, c);
    auto t0 = std::chrono::steady_clock::now();
    Status s = RunBench(c, [&](const Measurement& m) {
      out.push_back(m);
      Record(m);
    });
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      Measurement m;
      m.experiment = experiment;
      m.tree = t;
      m.error = s.ToString();
      out.push_back(m);
      rows_.push_back(m);
      fprintf(stderr, "%s/%s: %s\n", name_.c_str(), experiment.c_str(), m.error.c_str());
    }
  }
  return out;
}

void SuiteContext::ProgressLine(const std::string& experiment, const BenchConfig& c) {
  progress_->done++;
  if (!o_.base.progress) return;
  const auto elapsed = static_cast<long>(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - progress_->start).count());
  std::string what = c.targets.front();
  if (!c.variant.empty()) what += " " + c.variant;
  if (c.node_size) what += ", node " + std::to_string(c.node_size) + " B";
  what += ", media " + MediaLabel(c) + ", " + std::to_string(c.records) + " records";
  if (c.kind == WorkloadKind::kOps) what += ", " + std::to_string(c.ops) + " ops";
  fprintf(stderr, "[main job %zu/%zu, %ldm%02lds] suite %s, experiment %s: %s\n", progress_->done,
          progress_->total, elapsed / 60, elapsed % 60, name_.c_str(), experiment.c_str(), what.c_str());
}

const Measurement* SuiteContext::Find(const std::string& experiment,
                                      const std::function<bool(const Measurement&)>& pred) const {
  for (const auto& m : rows_)
    if (m.experiment == experiment && m.error.empty() && !m.summary && pred(m)) return &m;
  return nullptr;
}

void SuiteContext::Text(const std::string& markdown) { body_ += markdown + "\n\n"; }

void SuiteContext::Experiment(const std::string& id, const std::string& title, const std::string& setup) {
  body_ += "### " + title + "\n\nExperiment `" + id + "`. " + setup + "\n\n";
}

void SuiteContext::AddFigure(const FigureSpec& f) {
  FigureSpec g = f;
  g.file = name_ + "-" + f.file;
  figures_.push_back(g);
  body_ += "![" + g.title + "](" + g.file + ")\n\n";
}

void SuiteContext::Claim(const std::string& experiment, const std::string& paper, const std::string& ours,
                         const std::string& verdict) {
  claims_.push_back({experiment, paper, ours, verdict});
}

std::string SuiteContext::MediaOfRows() const {
  std::vector<std::string> seen;
  for (const auto& m : rows_)
    if (!m.media.empty() && std::find(seen.begin(), seen.end(), m.media) == seen.end()) seen.push_back(m.media);
  std::string out;
  for (const auto& x : seen) out += (out.empty() ? "`" : ", `") + x + "`";
  return out.empty() ? "none" : out + " (docs/bench.md, \"Media profiles\")";
}

std::string SuiteContext::Report(const std::string& figures_note) const {
  std::string r;
  const SuiteDef* def = nullptr;
  for (const auto& d : Suites())
    if (name_ == d.name) def = &d;
  r += "# Suite `" + name_ + "`: " + (def ? def->title : "") + "\n\n";
  r += "Command: `" + o_.command + "`  \nScale: " +
       (o_.full ? std::string("the main job's (--full): the papers' sizes where the claims are, smaller sweeps "
                                 "(docs/bench.md, \"The main job\")") : "scaled to this machine (x" + Fixed(o_.scale, 2) + "; --full for the papers' sizes)") +
       "  \nMedia of the rows: " + MediaOfRows() + "  \nTime: " + Fixed(seconds_, 1) + " s  \nData: [`" + name_ + ".jsonl`](" + name_ +
       ".jsonl) (one JSON object per measurement; docs/bench.md lists the fields)\n\n";
  if (!missing_.empty()) {
    r += "**Trees not registered yet** (their rows and claims are missing, nothing else): ";
    for (size_t i = 0; i < missing_.size(); i++) r += (i ? ", " : "") + std::string("`") + missing_[i] + "`";
    r += ". They will run with no code change once they are in the registry.\n\n";
  }
  r += "## Paper says / we measure\n\nAbsolute numbers differ from the papers' hardware; the comparison is between "
       "ratios measured in the same run. A claim we cannot reproduce is shown with our number.\n\n";
  if (claims_.empty()) {
    r += "(no claims in this suite)\n\n";
  } else {
    r += "| experiment | paper says | we measure | verdict |\n|---|---|---|---|\n";
    for (const auto& c : claims_) r += "| `" + c[0] + "` | " + c[1] + " | " + c[2] + " | " + c[3] + " |\n";
    r += "\n";
  }
  size_t errors = 0;
  std::string err_rows;
  for (const auto& m : rows_)
    if (!m.error.empty() && !m.expected_fail) {
      errors++;
      if (errors <= 30)
        err_rows += "| `" + m.experiment + "` | " + m.tree + (m.variant.empty() ? "" : " / " + m.variant) + " | " +
                    m.error + " |\n";
    }
  r += "## Experiments\n\n" + body_;
  if (!figures_note.empty()) r += "_" + figures_note + "_\n\n";
  if (errors) {
    r += "## Rows that failed\n\n" + std::to_string(errors) +
         " measurement(s) failed (an option the tree rejects, an unsupported node size, a tree error):\n\n"
         "| experiment | tree | error |\n|---|---|---|\n" + err_rows + "\n";
  }
  return r;
}

// ---- RunSuites ------------------------------------------------------------------------

Status RunSuites(const SuiteOptions& o, std::string* out_dir) {
  if (Status s = ValidateSuites(o.suites); !s.ok()) return s;
  if (!(o.scale > 0 && o.scale <= kMaxSuiteScale))
    return Status::InvalidArgument("--scale must be in (0, " + Fixed(kMaxSuiteScale, 0) + "], got " +
                                   Fixed(o.scale, 3));
  std::vector<const SuiteDef*> todo;
  for (const auto& d : Suites())
    for (const auto& n : o.suites)
      if (n == "all" || n == d.name) {
        todo.push_back(&d);
        break;
      }
  std::string dir = o.out_dir.empty() ? "results/" + Timestamp() : o.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create report folder " + dir + ": " + ec.message());
  *out_dir = dir;

  BenchConfig probe = o.base;
  if (probe.targets.empty()) probe.targets = {"volatile"};
  Environment env = DetectEnvironment(probe);
  fprintf(stderr, "%s\n", FormatEnvironment(env).c_str());
  HumanTable table(stderr);
  auto t0 = std::chrono::steady_clock::now();

  // The counting pass: the same definitions, measuring nothing.
  SuiteProgress progress;
  progress.counting = true;
  for (const SuiteDef* d : todo) {
    SuiteContext dry(o, d->name, "", nullptr, &progress);
    d->run(dry);
  }
  progress.counting = false;
  progress.start = std::chrono::steady_clock::now();

  std::vector<std::unique_ptr<SuiteContext>> done;
  nlohmann::json figures = nlohmann::json::array();
  for (const SuiteDef* d : todo) {
    fprintf(stderr, "\n== suite %s: %s ==\n", d->name, d->title);
    auto ctx = std::make_unique<SuiteContext>(o, d->name, dir, &table, &progress);
    d->run(*ctx);
    for (const auto& f : ctx->figures()) figures.push_back(FigureJson(f, d->name, o.command));
    done.push_back(std::move(ctx));
  }
  {
    std::ofstream f(dir + "/figures.json");
    f << figures.dump(2) << "\n";
  }
  std::string note = o.figures ? DrawFigures(dir) : "Figures not drawn (--no-figures).";

  std::string index = "# pmtree benchmark report\n\nCommand: `" + o.command + "`  \nFinished in " +
                      Fixed(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0) +
                      " s.\n\n## Environment\n\n```\n" + FormatEnvironment(env) + "```\n\n";
  index += "## Scale\n\n" +
           (o.full ? std::string("The main job's sizes (--full): the papers' sizes (up to 10M keys) where the claims "
                                "are, smaller sweeps; each suite's report says which experiment ran at which size "
                                "(docs/bench.md, \"The main job\").")
                   : "Scaled to this machine: the papers use 1M-100M keys; the default here is 100K-200K records "
                     "per experiment (x" + Fixed(o.scale, 2) + "), so every run of `--suite all` finishes in minutes. "
                     "Ratios between trees measured in the same run are what we compare with the papers.") +
           "\n\n";
  index += "## Failure model\n\n"
           "Trees: the durability contract of include/pmtree/tree.h — every mutating operation is durable when it "
           "returns (flush + fence through the pool's backend). The pool lives on `" + env.pool_kind +
           "`. On /dev/shm the flush instructions execute but the medium is DRAM: data survives a process crash, "
           "not a power loss; on a DAX mount of real persistent memory the same code gives power-loss durability.\n\n"
           "Peers (same medium, a directory beside the pools, one durable write per operation unless marked "
           "relaxed):\n\n| peer | what it does | what a crash can lose |\n|---|---|---|\n";
  for (const auto& p : Peers())
    index += "| `" + std::string(p.name) + "` | " + std::string(p.summary) + " | " + std::string(p.failure_model) + " |\n";
  index += "\n## Suites\n\n| suite | claims | trees not registered yet | report |\n|---|---|---|---|\n";
  for (const auto& ctx : done) {
    std::ofstream f(dir + "/" + ctx->name() + ".md");
    f << ctx->Report(note);
    std::string miss;
    for (const auto& m : ctx->missing()) miss += (miss.empty() ? "" : ", ") + m;
    size_t reproduced = 0, measured = 0;
    for (const auto& c : ctx->claims()) {
      if (c[3].rfind("not measured", 0) != 0) measured++;
      if (c[3].rfind("reproduced", 0) == 0) reproduced++;
    }
    std::string claims = std::to_string(ctx->claims().size()) + " claims: " + std::to_string(measured) + " measured, " +
                         std::to_string(reproduced) + " reproduced";
    index += "| " + ctx->name() + " | " + claims + " | " + (miss.empty() ? "none" : miss) + " | [" + ctx->name() + ".md](" +
             ctx->name() + ".md) |\n";
  }
  if (!note.empty()) index += "\n_" + note + "_\n";
  std::ofstream(dir + "/report.md") << index;
  return Status::Ok();
}

}  // namespace pmtree::bench
