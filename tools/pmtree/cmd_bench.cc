// SPDX-License-Identifier: Apache-2.0
//
// `pmtree bench`: a thin CLI11 front end over src/bench (docs/bench.md).

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/driver.h"
#include "bench/media.h"
#include "bench/output.h"
#include "bench/peers.h"
#include "bench/suites.h"
#include "bench/ycsb.h"
#include "commands.h"
#include "pmtree/registry.h"

namespace pmtree::cli {
namespace {

using namespace pmtree::bench;

struct BenchArgs {
  std::string trees = "all";
  std::string mix = "read=0.5,insert=0.5";
  std::string dist = "uniform";
  std::string key_size = "8";
  std::string threads = "1";
  std::string workload = "ops";
  std::vector<std::string> tree_options;
  std::vector<std::string> suites;
  std::string out_dir;
  std::string output;
  bool json = false, csv = false, no_progress = false, full = false, no_figures = false;
  double scale = 1.0;
  CLI::Option* ops_option = nullptr;
  CLI::Option* duration_option = nullptr;
  CLI::Option* latency_option = nullptr;
  BenchConfig c;
};

// The command line as typed, for reports and figure captions.
std::string CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    std::string arg = all.substr(start, end - start);
    if (!out.empty()) out += " ";
    out += arg.find_first_of(" \"'") == std::string::npos ? arg : "'" + arg + "'";
    start = end + 1;
  }
  return out;
}

Status ExpandTargets(const std::string& list, std::vector<std::string>* out) {
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (item == "peers") {
      for (const auto& p : Peers()) out->emplace_back(p.name);
    } else if (FindPeer(item)) {
      out->push_back(item);
    } else if (std::string why = UnbuiltPeerReason(item); !why.empty()) {
      return Status::InvalidArgument(why);
    } else {
      auto r = ParseTreeList(item);
      if (!r.ok())
        return Status::InvalidArgument(std::string(r.status().message()) + "; peers: " + PeerNames() + ", peers");
      for (const TreeFactory* f : *r) out->emplace_back(f->name);
    }
  }
  if (out->empty()) return Status::InvalidArgument("--tree is empty; valid: " + TreeNames() + ", all, " + PeerNames() + ", peers");
  return Status::Ok();
}

Status Finish(BenchArgs& a) {
  BenchConfig& c = a.c;
  auto mix = ParseMix(a.mix);
  if (!mix.ok()) return mix.status();
  c.workload.mix = *mix;
  auto dist = ParseDist(a.dist);
  if (!dist.ok()) return Status::InvalidArgument("--dist: " + std::string(dist.status().message()));
  c.workload.dist.kind = *dist;
  if (Status s = ParseKeySize(a.key_size, &c.workload.key_min, &c.workload.key_max); !s.ok()) return s;
  c.threads.clear();
  std::stringstream ts(a.threads);
  std::string t;
  while (std::getline(ts, t, ',')) {
    try {
      size_t pos;
      unsigned long v = std::stoul(t, &pos);
      if (pos != t.size()) throw std::invalid_argument(t);
      c.threads.push_back(static_cast<uint32_t>(v));
    } catch (const std::exception&) {
      return Status::InvalidArgument("--threads takes a number or a list like 1,2,4; got '" + a.threads + "'");
    }
  }
  auto ycsb = ParseYcsbList(a.workload, &c.ycsb);
  if (!ycsb.ok()) return ycsb.status();
  if (*ycsb)
    c.kind = WorkloadKind::kYcsb;
  else if (a.workload == "recovery")
    c.kind = WorkloadKind::kRecovery;
  else if (a.workload != "ops")
    return Status::InvalidArgument("--workload '" + a.workload +
                                   "' is not valid; valid: ops, recovery, ycsb-a .. ycsb-f (a list), ycsb (all six)");
  if (c.kind == WorkloadKind::kYcsb && a.trees == "all") {
    // The default target list for YCSB: every tree that can be the store's
    // engine, and the peers.
    a.trees.clear();
    for (const TreeFactory& f : Registry())
      if (f.persistent() && (f.capabilities & kCapBytesKeys)) a.trees += (a.trees.empty() ? "" : ",") + std::string(f.name);
    a.trees += ",peers";
  }
  if (Status s = ExpandTargets(a.trees, &c.targets); !s.ok()) return s;
  for (const auto& kv : a.tree_options) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("--tree-option takes key=value (e.g. strategy=balanced), got '" + kv + "'");
    c.extra[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (a.duration_option->count() > 0 && !(c.duration_s > 0))
    return Status::InvalidArgument("--duration must be in (0, " + std::to_string(static_cast<int>(kMaxDurationS)) +
                                   "] seconds");
  if (!c.media.empty()) {
    if (Status s = ValidateMedia(c.media); !s.ok()) return s;
    if (a.latency_option->count() > 0)
      return Status::InvalidArgument("give --media or --write-latency-ns, not both (--media " + c.media + " adds " +
                                     std::to_string(FindMedia(c.media)->write_latency_ns) + " ns per flushed line)");
    c.write_latency_ns = FindMedia(c.media)->write_latency_ns;
  }
  if (a.ops_option->count() > 0 && c.ops == 0) return Status::InvalidArgument("--ops must be at least 1");
  if (!a.suites.empty() && !(a.scale > 0 && a.scale <= kMaxSuiteScale))
    return Status::InvalidArgument("--scale must be in (0, " + std::to_string(static_cast<int>(kMaxSuiteScale)) + "]");
  // A time-based run without an explicit --ops gets the long default stream.
  if (c.duration_s > 0 && a.ops_option->count() == 0) c.ops = 0;
  c.progress = !a.no_progress;
  c.command = CommandLine();
  if (a.suites.empty()) return c.Validate();
  return ValidateSuites(a.suites);
}

int RunSuitesCommand(BenchArgs& a) {
  SuiteOptions o;
  o.suites = a.suites;
  o.full = a.full;
  o.scale = a.scale;
  o.out_dir = a.out_dir;
  o.figures = !a.no_figures;
  o.base = a.c;
  o.command = a.c.command;
  std::string dir;
  if (Status s = RunSuites(o, &dir); !s.ok()) {
    fprintf(stderr, "pmtree bench: %s\n", s.ToString().c_str());
    return 2;
  }
  fprintf(stderr, "\nReport: %s/report.md\n", dir.c_str());
  printf("%s/report.md\n", dir.c_str());
  return 0;
}

int RunBenchCommand(BenchArgs& a) {
  const BenchConfig& c = a.c;
  Environment env = DetectEnvironment(c);
  fprintf(stderr, "%s\n", FormatEnvironment(env).c_str());
  FILE* out = stdout;
  std::unique_ptr<FILE, int (*)(FILE*)> file(nullptr, &fclose);
  if (!a.output.empty()) {
    file.reset(fopen(a.output.c_str(), "w"));
    if (!file) {
      fprintf(stderr, "pmtree bench: cannot write %s\n", a.output.c_str());
      return 2;
    }
    out = file.get();
  }
  if (a.csv) fprintf(out, "%s\n", CsvHeader().c_str());
  HumanTable table(stderr);
  int failures = 0;
  Status s = RunBench(c, [&](const Measurement& m) {
    table.Add(m);
    if (!m.error.empty() && !m.expected_fail) failures++;
    if (a.json) fprintf(out, "%s\n", ToJson(m).dump().c_str());
    if (a.csv) fprintf(out, "%s\n", ToCsv(m).c_str());
    fflush(out);
  });
  if (!s.ok()) {
    fprintf(stderr, "pmtree bench: %s\n", s.ToString().c_str());
    return 2;
  }
  return failures ? 1 : 0;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  BenchConfig& c = a->c;
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Benchmark trees (by registry name) and peers (lmdb, bdb, ...): load, run an operation mix, report "
      "throughput, latency percentiles and persistence cost per operation; or run the papers' reproduction "
      "suites (--suite).  See docs/bench.md.");
  cmd->add_option("--tree", a->trees,
                  "Trees and peers: a,b,...; registered trees: " + TreeNames() + "; 'all' = all of them; peers: " +
                      PeerNames() + "; 'peers' = all peers")
      ->capture_default_str();
  cmd->add_option("--records", c.records, "Records loaded before the run")->capture_default_str();
  a->ops_option = cmd->add_option("--ops", c.ops, "Operations in the run, over all threads (cap of a --duration run, default 10M there)")
                      ->capture_default_str();
  a->duration_option =
      cmd->add_option("--duration", c.duration_s, "Run for this many seconds instead of --ops operations");
  cmd->add_option("--threads", a->threads, "Threads, or a list to sweep: 1,2,4")->capture_default_str();
  cmd->add_option("--mix", a->mix, "Operation mix: read=,insert=,update=,remove=,scan= ratios summing to 1")
      ->capture_default_str();
  cmd->add_option("--dist", a->dist, "Key distribution: " + DistNames())->capture_default_str();
  cmd->add_option("--theta", c.workload.dist.theta, "zipfian/latest skew, 0 < theta <= 10")->capture_default_str();
  cmd->add_option("--self-similar-h", c.workload.dist.h, "selfsimilar: fraction h of keys gets 1-h of accesses")
      ->capture_default_str();
  cmd->add_option("--hot-fraction", c.workload.dist.hot_fraction, "hotzone: share of the key space that is hot")
      ->capture_default_str();
  cmd->add_option("--hot-shift-at", c.workload.dist.hot_shift_at,
                  "hotzone: move the zone after this fraction of the run (0 = never)")
      ->capture_default_str();
  cmd->add_option("--scan-length", c.workload.scan_length, "Entries per scan")->capture_default_str();
  cmd->add_option("--key-size", a->key_size, "8 (integer keys), N (N-byte strings), MIN-MAX (variable length)")
      ->capture_default_str();
  cmd->add_option("--value-size", c.value_size,
                  "Bytes per value, 8..1048576: 8 = inline; larger = a record in the pool that the tree references "
                  "(peers store the bytes)")
      ->capture_default_str();
  cmd->add_flag("--bulk-load", c.bulk_load, "Load by BulkLoad (sorted) instead of single inserts");
  cmd->add_option("--fill", c.fill, "Bulk-load fill factor (implies --bulk-load)")
      ->each([&c](const std::string&) { c.bulk_load = true; });
  cmd->add_flag("--skip-load", c.skip_load, "Reuse the tree saved in --pool (see --keep-pool) instead of loading");
  cmd->add_flag("--keep-pool", c.keep_pool, "Keep the pool file(s) after the run");
  cmd->add_option("--pool", c.pool_path,
                  "Pool path (default /dev/shm/pmtree-bench-<pid>-<tree>.pool); an existing path is refused");
  cmd->add_flag("--reuse-pool", c.reuse_pool,
                "Replace an existing --pool if it is a pmtree pool of the same tree (or a peer directory an earlier "
                "bench run made); anything else is still refused");
  cmd->add_option("--pool-size", c.pool_size, "Pool size in bytes (accepts K/M/G)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--backend", c.backend, "hardware[:clwb|clflushopt|clflush], eadr, msync, dram")->capture_default_str();
  a->latency_option =
      cmd->add_option("--write-latency-ns", c.write_latency_ns, "Emulated extra latency per flushed line")
          ->capture_default_str();
  cmd->add_option("--media", c.media,
                  "Media profile, i.e. a named --write-latency-ns: " + MediaNames() +
                      " (docs/bench.md, Media profiles). Suites: every experiment on this medium instead of each "
                      "paper's own and DRAM");
  cmd->add_option("--node-size", c.node_size, "Node size in bytes (0 = each tree's default)")->capture_default_str();
  cmd->add_option("--tree-option", a->tree_options, "Design-specific option key=value (repeatable)");
  cmd->add_option("--seed", c.workload.seed, "Seed of the key/op streams")->capture_default_str();
  cmd->add_option("--repeat", c.repeat, "Repetitions (adds a min/median/max summary row)")->capture_default_str();
  cmd->add_option("--latency-sample", c.latency_sample, "Fraction of operations timed individually")
      ->capture_default_str();
  cmd->add_option("--window-ms", c.window_ms, "Throughput series window")->capture_default_str();
  cmd->add_option("--workload", a->workload,
                  "ops; recovery (time open+recover after close and after a crash); ycsb-a .. ycsb-f or a list of "
                  "them, ycsb = all six: YCSB core workloads on the KV store over each --tree and on the peers, "
                  "records of 10 x 100 B fields (docs/bench.md)")
      ->capture_default_str();
  cmd->add_option("--recovery-threads", c.recovery_threads, "recovery: max rebuild threads (0 = cores)");
  cmd->add_option("--write-profile", c.write_profile,
                  "Profile each tree's writes per line/page and over time into PREFIX.<tree>-t<threads>-r<rep>.profile.json")
      ->option_text("PREFIX");
  cmd->add_option("--profile-window", c.profile_window_ops,
                  "Operations per --write-profile time window (0 = (records + ops) / 200)")
      ->capture_default_str();
  cmd->add_flag("--verify", c.verify, "Verify() every tree after its run (not timed)");
  cmd->add_flag("--json", a->json, "JSON lines on stdout, one object per measurement");
  cmd->add_flag("--csv", a->csv, "CSV on stdout");
  cmd->add_option("--output", a->output, "Write the JSON/CSV to this file instead of stdout");
  cmd->add_flag("--no-progress", a->no_progress, "No progress lines on stderr");
  cmd->add_option("--suite", a->suites, "Reproduction suites: " + SuiteNames())->delimiter(',');
  cmd->add_flag("--full", a->full, "Suites at the papers' sizes (slow)");
  cmd->add_option("--scale", a->scale, "Multiply the suites' default sizes")->capture_default_str();
  cmd->add_option("--out", a->out_dir, "Suite report folder (default results/<UTC timestamp>)");
  cmd->add_flag("--no-figures", a->no_figures, "Do not draw the suite figures");

  cmd->callback([a, exit_code]() {
    if (Status s = Finish(*a); !s.ok()) {
      fprintf(stderr, "pmtree bench: %s\n", std::string(s.message()).c_str());
      *exit_code = 2;
      return;
    }
    *exit_code = a->suites.empty() ? RunBenchCommand(*a) : RunSuitesCommand(*a);
  });
}

}  // namespace pmtree::cli
