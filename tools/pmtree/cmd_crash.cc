// SPDX-License-Identifier: Apache-2.0
//
// `pmtree crash`: the crash-state explorer, mutation testing and the
// real-crash kill harness on one registered tree (docs/crash_model.md).
//
//   pmtree crash --tree NAME [--workload small|random] [--ops N] [--seed S]
//                [--mode adr|strict|eadr] [--budget-seconds T] [--mutate]
//                [--kill N] [--json] [--replay S:P:I] ...
//
// Exit status: 0 no violation, 1 violations found (or mutation score below
// the target), 2 usage or environment errors.  Progress goes to stderr.

#include <array>
#include <cstdio>
#include <map>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "crash/explorer.h"
#include "crash/kill.h"
#include "crash/kv_explore.h"
#include "pmtree/registry.h"

namespace pmtree::cli {
namespace {

struct CrashArgs {
  std::string tree;
  std::string workload = "small";
  std::string keys = "u64";
  uint64_t ops = 1000;
  uint64_t seed = 1;
  std::string mode = "adr";
  double budget_seconds = 0;
  bool mutate = false;
  uint64_t kill = 0;
  bool json = false;
  uint32_t depth = 3;
  bool reopen = false;
  uint32_t node_size = 0;
  std::vector<std::string> tree_options;
  uint64_t max_images = 4096;
  uint64_t samples = 512;
  std::string lazy = "auto";
  uint64_t lazy_max_runs = 16384;
  uint64_t lazy_byte_max_runs = 1024;
  bool no_observed_words = false;
  uint64_t pool_size = 4ull << 20;
  std::string drop;
  std::string split_store;
  bool inject_leak = false;
  bool no_store_mutants = false;
  bool no_bulk_load = false;
  bool no_out_of_space = false;
  bool check_all_ops = false;
  bool reclaim_each_op = false;
  uint32_t continuation_every = 8;
  uint32_t recovery_crash_every = 0;
  std::string replay;
  bool no_continuation = false;
  bool no_recovery_crash = false;
  bool quiet = false;
  std::string dir = "/dev/shm";
  size_t max_tickets = 20;
  bool kv = false;                 // explore kv::Store scenarios with --tree as the engine
  std::string kv_scenario;
  uint64_t value_bytes = 16384;
  uint64_t recovery_images = 64;
  std::vector<std::string> kv_flaws;
};

nlohmann::json TicketJson(const crash::Ticket& t) {
  return {{"image", crash::ImageRefString(t.where)}, {"scenario", t.scenario}, {"in_flight", t.op},
          {"crash_point", t.point},                    {"choice", t.image},      {"failure", t.failure},
          {"command", t.command}};
}

nlohmann::json MutantsJson(const crash::MutationReport& mut) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& m : mut.list) {
    nlohmann::json e = {{"site", m.site}, {"kind", m.kind}, {"outcome", m.outcome}, {"evidence", m.evidence}};
    e["lazy_runs"] = m.lazy_runs;
    if (m.by_lint) e["without_lint"] = m.without_lint;
    list.push_back(std::move(e));
  }
  return list;
}

void PrintMutants(const crash::MutationReport& mut) {
  for (const auto& m : mut.list)
    std::printf("  mutant: %s at %s: %s%s%s\n", m.kind.c_str(), m.site.c_str(), m.outcome.c_str(),
                m.evidence.empty() ? "" : " — ", m.evidence.c_str());
}

int RunKill(const CrashArgs& a, const TreeFactory& f, const TreeOptions& to) {
  crash::KillOptions ko;
  ko.iterations = a.kill;
  ko.seed = a.seed;
  ko.dir = a.dir;
  ko.tree_options = to;
  ko.progress = !a.quiet;
  auto r = crash::RunKillHarness(f, ko);
  if (!r.ok()) {
    std::fprintf(stderr, "pmtree crash: %s\n", r.status().ToString().c_str());
    return 2;
  }
  if (a.json) {
    nlohmann::json j = {{"tree", std::string(f.name)},
                        {"kill_iterations", r->iterations},
                        {"kills_during_open", r->kills_during_open},
                        {"acked_ops", r->acked_ops},
                        {"in_flight_survived", r->in_flight_survived},
                        {"final_keys", r->final_keys},
                        {"seconds", r->seconds},
                        {"violations", r->failures.size()},
                        {"failures", r->failures}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("kill harness on %s: %llu iterations (%llu killed while opening), %llu acknowledged operations "
                "checked, %llu in-flight operations found applied, %.1f s\n",
                std::string(f.name).c_str(), (unsigned long long)r->iterations,
                (unsigned long long)r->kills_during_open, (unsigned long long)r->acked_ops,
                (unsigned long long)r->in_flight_survived, r->seconds);
    for (const auto& s : r->failures) std::printf("FAILURE %s\n", s.c_str());
    std::printf("%s\n", r->failures.empty() ? "OK: every acknowledged operation survived" : "VIOLATIONS FOUND");
  }
  return r->failures.empty() ? 0 : 1;
}

// A --drop that names no flush/fence site the run reached explored the
// unmutated tree: that is a usage error, not "0 violations".
bool DropSiteReached(const std::vector<crash::SiteReport>& sites, const std::string& site, bool fence) {
  for (const auto& s : sites)
    if (s.name == site && s.kind == (fence ? "fence" : "flush") && s.reached > 0) return true;
  return false;
}

// `pmtree crash --kv`: the store's scenarios over engine --tree (kv_explore.h).
int RunKv(const CrashArgs& a, const TreeOptions& to) {
  crash::KvExploreOptions o;
  o.engine = a.tree;
  o.tree_options = to;
  o.seed = a.seed;
  o.max_images = a.max_images;
  o.samples = a.samples;
  o.pool_size = a.pool_size;
  o.dir = a.dir;
  o.value_bytes = a.value_bytes;
  o.scenario = a.kv_scenario;
  o.max_tickets = a.max_tickets;
  o.progress = !a.quiet;
  o.continuation_every = a.no_continuation ? 0 : a.continuation_every;
  o.recovery_crash_every = a.recovery_crash_every;
  o.recovery_crash = !a.no_recovery_crash;
  o.recovery_images = a.recovery_images;
  for (const std::string& flaw : a.kv_flaws) {
    o.testing_skip_redo |= flaw == "skip-redo";
    o.testing_skip_record_persist |= flaw == "skip-record-persist";
  }
  Status s = crash::ParseMode(a.mode, &o.mode);
  if (s.ok() && !a.replay.empty()) {
    crash::ImageRef r;
    s = crash::ParseImageRef(a.replay, &r);
    o.replay = r;
  }
  if (s.ok() && !a.drop.empty()) {
    const size_t at = a.drop.rfind('@');
    const std::string kind = at == std::string::npos ? "" : a.drop.substr(at + 1);
    if (kind != "flush" && kind != "fence") s = Status::InvalidArgument("--drop wants SITE@flush or SITE@fence");
    o.drop_site = a.drop.substr(0, at);
    o.drop_fence = kind == "fence";
  }
  crash::MutationReport mut;
  Result<crash::KvExploreReport> r = s;
  if (s.ok() && a.mutate) {
    crash::KvExploreReport base;
    auto m = crash::MutateKv(o, &base);
    r = m.ok() ? Result<crash::KvExploreReport>(std::move(base)) : Result<crash::KvExploreReport>(m.status());
    if (m.ok()) mut = std::move(*m);
  } else if (s.ok()) {
    r = crash::ExploreKv(o);
    // A --drop that names no store site the run reached explored the
    // unmutated store: a usage error, not "0 violations".
    if (r.ok() && !o.drop_site.empty() && !DropSiteReached(r->store_sites, o.drop_site, o.drop_fence))
      r = Status::InvalidArgument("--drop " + a.drop + ": no such src/kv site was reached; run with --mutate to list them");
  }
  if (!r.ok()) {
    std::fprintf(stderr, "pmtree crash: %s\n", r.status().ToString().c_str());
    return 2;
  }
  if (a.json) {
    nlohmann::json j = {{"engine", r->engine},
                        {"mode", std::string(crash::ModeName(r->mode))},
                        {"scenarios", r->scenarios},
                        {"operations", r->operations},
                        {"crash_points", r->crash_points},
                        {"crash_points_exhaustive", r->crash_points_exhaustive},
                        {"images_checked", r->images_checked},
                        {"images_deduplicated", r->images_deduplicated},
                        {"continuation_runs", r->continuation_runs},
                        {"recoveries_crashed", r->recoveries_crashed},
                        {"recovery_crash_images", r->recovery_crash_images},
                        {"seconds", r->seconds},
                        {"cpu_seconds", r->cpu_seconds},
                        {"violations", r->violations},
                        {"tickets", nlohmann::json::array()}};
    for (const auto& t : r->tickets) j["tickets"].push_back(TicketJson(t));
    if (a.mutate) {
      j["mutants"] = mut.mutants;
      j["mutants_caught"] = mut.caught;
      j["mutants_caught_by_lint"] = mut.caught_by_lint;
    j["mutation_score"] = mut.score;
    j["mutation_score_violations_only"] = mut.score_violations_only;
      j["mutant_list"] = MutantsJson(mut);
    }
    std::cout << j.dump(2) << "\n";
  } else {
    PrintMutants(mut);
    if (a.mutate)
      std::printf("store mutants: %llu, caught %llu, survived %llu\n", (unsigned long long)mut.mutants,
                  (unsigned long long)mut.caught, (unsigned long long)mut.survived);
    for (const auto& t : r->tickets) std::printf("%s\n", t.ToString().c_str());
    std::printf("kv store on %s, mode %s: %llu scenarios, %llu operations, %llu crash points (%llu exhaustive), "
                "%llu images checked (+%llu deduplicated, +%llu in %llu crashed recoveries), %.1f s (%.1f CPU s)\n"
                "%s: %llu violations\n",
                r->engine.c_str(), std::string(crash::ModeName(r->mode)).c_str(), (unsigned long long)r->scenarios,
                (unsigned long long)r->operations, (unsigned long long)r->crash_points,
                (unsigned long long)r->crash_points_exhaustive, (unsigned long long)r->images_checked,
                (unsigned long long)r->images_deduplicated, (unsigned long long)r->recovery_crash_images,
                (unsigned long long)r->recoveries_crashed, r->seconds, r->cpu_seconds,
                r->violations == 0 ? "OK" : "VIOLATIONS FOUND", (unsigned long long)r->violations);
  }
  return r->violations == 0 ? 0 : 1;
}

// Every numeric option's range; the message is the one line the user sees.
std::string RangeError(const CrashArgs& a) {
  auto out = [](const char* opt, const std::string& range) { return std::string(opt) + " must be in " + range; };
  if (a.ops < 1 || a.ops > 1'000'000) return out("--ops", "1..1000000");
  if (a.max_images < 1 || a.max_images > (1u << 24)) return out("--max-images", "1..16777216");
  if (a.samples > 1'000'000) return out("--samples", "0..1000000");
  if (a.lazy_max_runs < 1 || a.lazy_max_runs > (1u << 24)) return out("--lazy-max-runs", "1..16777216");
  if (a.lazy_byte_max_runs > (1u << 24)) return out("--lazy-byte-max-runs", "0..16777216");
  if (a.pool_size < kMinPoolSize || a.pool_size > (4ull << 30) || a.pool_size % 4096 != 0)
    return out("--pool-size", std::to_string(kMinPoolSize) + "..4294967296 bytes, a multiple of 4096");
  if (!(a.budget_seconds >= 0 && a.budget_seconds <= 604800)) return out("--budget-seconds", "0..604800");
  if (a.kill > 1'000'000) return out("--kill", "0..1000000");
  if (a.node_size > 65536) return out("--node-size", "0..65536");
  if (a.max_tickets > 100'000) return out("--max-tickets", "0..100000");
  return "";
}

// Parses --tree-option KEY=VALUE into `to`; "" or the error.
std::string ParseTreeOptions(const CrashArgs& a, TreeOptions* to) {
  to->node_size = a.node_size;
  for (const std::string& kv : a.tree_options) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return "--tree-option wants KEY=VALUE, got '" + kv + "'";
    to->extra[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return "";
}

// The explorer's options from the command line; "" or the error.
std::string ExploreOptionsOf(const CrashArgs& a, const TreeOptions& to, crash::ExploreOptions* out) {
  crash::ExploreOptions& o = *out;
  Status s = crash::ParseMode(a.mode, &o.mode);
  if (s.ok()) s = crash::ParseWorkload(a.workload, &o.workload);
  if (s.ok()) s = crash::ParseKeyShape(a.keys, &o.keys);
  if (s.ok()) s = crash::ParseLazyMode(a.lazy, &o.lazy);
  if (!s.ok()) return s.ToString();
  o.ops = a.ops;
  o.seed = a.seed;
  o.depth = a.depth;
  o.reopen = a.reopen;
  o.budget_seconds = a.budget_seconds;
  o.max_images = a.max_images;
  o.samples = a.samples;
  o.lazy_max_runs = a.lazy_max_runs;
  o.lazy_byte_max_runs = a.lazy_byte_max_runs;
  o.observed_words = !a.no_observed_words;
  o.pool_size = a.pool_size;
  o.tree_options = to;
  o.max_tickets = a.max_tickets;
  o.progress = !a.quiet;
  if (a.no_continuation) o.continuation_ops = 0;
  o.crash_during_recovery = !a.no_recovery_crash;
  if (!a.drop.empty()) {
    size_t at = a.drop.rfind('@');
    std::string kind = at == std::string::npos ? "" : a.drop.substr(at + 1);
    if (kind != "flush" && kind != "fence") return "--drop wants SITE@flush or SITE@fence, got '" + a.drop + "'";
    o.drop_site = a.drop.substr(0, at);
    o.drop_fence = kind == "fence";
  }
  o.split_site = a.split_store;
  o.inject_leak = a.inject_leak;
  o.mutate_stores = !a.no_store_mutants;
  o.bulk_load = !a.no_bulk_load;
  o.out_of_space = !a.no_out_of_space;
  o.check_all_ops = a.check_all_ops;
  o.reclaim_each_op = a.reclaim_each_op;
  o.continuation_every = a.continuation_every;
  o.recovery_crash_every = a.recovery_crash_every;
  if (!a.replay.empty()) {
    crash::ImageRef r;
    s = crash::ParseImageRef(a.replay, &r);
    if (!s.ok()) return s.ToString();
    o.replay = r;
  }
  return "";
}

// Explores (or mutates, --mutate) `f`; "" or the error.
std::string ExploreOrMutate(const CrashArgs& a, const TreeFactory& f, const crash::ExploreOptions& o,
                            crash::ExploreReport* rep, crash::MutationReport* mut) {
  if (a.mutate) {
    auto m = crash::Mutate(f, o, rep);
    if (!m.ok()) return m.status().ToString();
    *mut = std::move(*m);
    return "";
  }
  auto r = crash::Explore(f, o);
  if (!r.ok()) return r.status().ToString();
  *rep = std::move(*r);
  if (!o.drop_site.empty() && !DropSiteReached(rep->sites, o.drop_site, o.drop_fence))
    return "--drop " + a.drop + ": no such " + (o.drop_fence ? "fence" : "flush") +
           " site was reached by this workload, so nothing was dropped; run without --drop to list the sites";
  return "";
}

void PrintJson(const CrashArgs& a, const crash::ExploreReport& rep, const crash::MutationReport& mut,
               const std::vector<std::string>& uncovered) {
  nlohmann::json j;
  j["tree"] = rep.tree;
  j["mode"] = std::string(crash::ModeName(rep.mode));
  j["workload"] = std::string(crash::WorkloadName(rep.workload));
  j["keys"] = a.keys;
  j["seed"] = a.seed;
  j["scenarios"] = rep.scenarios;
  j["scenarios_total"] = rep.scenarios_total;
  j["crash_points"] = rep.crash_points;
  j["crash_points_exhaustive"] = rep.crash_points_exhaustive;
  j["lazy"] = a.lazy;
  j["lazy_points"] = rep.lazy_points;
  j["lazy_runs"] = rep.lazy_runs;
  j["lazy_nondeterministic"] = rep.lazy_nondeterministic;
  j["lazy_abandoned"] = rep.lazy_abandoned;
  j["lazy_faults"] = rep.lazy_faults;
  j["lazy_precise"] = rep.lazy_precise;
  j["lazy_bytes"] = rep.lazy_bytes;
  j["lazy_bytes_complete"] = rep.lazy_bytes_complete;
  j["lazy_byte_runs"] = rep.lazy_byte_runs;
  j["lazy_undecoded"] = rep.lazy_undecoded;
  j["images_checked"] = rep.images_checked;
  j["images_deduplicated"] = rep.images_deduplicated;
  j["recovery_crash_images"] = rep.recovery_crash_images;
  j["continuation_runs"] = rep.continuation_runs;
  j["seconds"] = rep.seconds;
  j["images_per_s"] = rep.images_per_s;
  j["cpu_seconds"] = rep.cpu_seconds;
  j["images_per_cpu_s"] = rep.images_per_cpu_s;
  j["violations"] = rep.violations;
  j["budget_exhausted"] = rep.budget_exhausted;
  j["sites_covered"] = rep.sites_covered;
  j["sites_total"] = rep.sites_total;
  j["uncovered_sites"] = uncovered;
  j["sites"] = nlohmann::json::array();
  for (const auto& site : rep.sites)
    j["sites"].push_back({{"site", site.name}, {"function", site.function}, {"kind", site.kind},
                          {"reached", site.reached}, {"covered", site.covered}});
  j["exhaustive_fraction"] = rep.exhaustive_fraction;
  j["tickets"] = nlohmann::json::array();
  for (const auto& t : rep.tickets) j["tickets"].push_back(TicketJson(t));
  j["lints"] = nlohmann::json::array();
  for (const auto& l : rep.lints) j["lints"].push_back({{"kind", l.kind}, {"site", l.site}, {"count", l.count}});
  if (a.mutate) {
    j["mutants"] = mut.mutants;
    j["mutants_caught"] = mut.caught;
    j["mutants_redundant"] = mut.redundant;
    j["mutants_survived"] = mut.survived;
    j["mutants_caught_by_lint"] = mut.caught_by_lint;
    j["mutation_score"] = mut.score;
    j["mutation_score_violations_only"] = mut.score_violations_only;
    j["mutant_list"] = MutantsJson(mut);
  }
  std::cout << j.dump(2) << "\n";
}

void PrintText(const CrashArgs& a, const crash::ExploreReport& rep, const crash::MutationReport& mut,
               const std::vector<std::string>& uncovered) {
  crash::PrintReport(rep, stdout);
  if (a.replay.empty()) {  // a replay checks one image: coverage and lints mean nothing there
    std::printf("flush/fence sites covered: %llu/%llu\n", (unsigned long long)rep.sites_covered,
                (unsigned long long)rep.sites_total);
    for (const auto& u : uncovered) std::printf("  uncovered: %s\n", u.c_str());
    for (const auto& l : rep.lints)
      std::printf("  lint: %s at %s (%llu)\n", l.kind.c_str(), l.site.c_str(), (unsigned long long)l.count);
  }
  if (a.mutate) {
    PrintMutants(mut);
    std::map<std::string, std::array<uint64_t, 3>> by_kind;  // caught, redundant, survived
    for (const auto& m : mut.list) by_kind[m.kind][m.outcome == "caught" ? 0 : m.outcome == "redundant" ? 1 : 2]++;
    for (const auto& [kind, n] : by_kind)
      std::printf("  %s: caught %llu, redundant %llu, survived %llu\n", kind.c_str(), (unsigned long long)n[0],
                  (unsigned long long)n[1], (unsigned long long)n[2]);
    std::printf("mutants: %llu, caught %llu (%llu by the pending-store lint), redundant %llu, survived %llu, "
                "score %.1f%% (%.1f%% by violations alone)\n",
                (unsigned long long)mut.mutants, (unsigned long long)mut.caught, (unsigned long long)mut.caught_by_lint,
                (unsigned long long)mut.redundant, (unsigned long long)mut.survived, 100 * mut.score,
                100 * mut.score_violations_only);
  }
  std::printf("%s: %llu violations\n", rep.violations == 0 ? "OK" : "VIOLATIONS FOUND",
              (unsigned long long)rep.violations);
}

// Prints "pmtree crash: <error>" and returns the usage exit status.
int Fail(const std::string& error) {
  std::fprintf(stderr, "pmtree crash: %s\n", error.c_str());
  return 2;
}

int Run(const CrashArgs& a) {
  if (std::string e = RangeError(a); !e.empty()) return Fail(e);
  const TreeFactory* f = FindTree(a.tree);
  if (f == nullptr) return Fail("unknown tree '" + a.tree + "'; valid: " + TreeNames(true));
  if (!f->persistent()) return Fail("'" + a.tree + "' is not persistent; nothing to crash");
  TreeOptions to;
  if (std::string e = ParseTreeOptions(a, &to); !e.empty()) return Fail(e);
  if (a.kill > 0) return RunKill(a, *f, to);
  if (a.kv) return RunKv(a, to);
  crash::ExploreOptions o;
  if (std::string e = ExploreOptionsOf(a, to, &o); !e.empty()) return Fail(e);
  crash::ExploreReport rep;
  crash::MutationReport mut;
  if (std::string e = ExploreOrMutate(a, *f, o, &rep, &mut); !e.empty()) return Fail(e);
  std::vector<std::string> uncovered;
  for (const auto& site : rep.sites)
    if (!site.covered) uncovered.push_back(site.name + "@" + site.kind + " (" + site.function + ")");
  if (a.json) PrintJson(a, rep, mut, uncovered);
  else PrintText(a, rep, mut, uncovered);
  return rep.violations == 0 ? 0 : 1;
}

}  // namespace

void AddCrashCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<CrashArgs>();
  CLI::App* sub = app.add_subcommand(
      "crash", "Explore the crash states of a tree (simulated persistence model), mutate its flush/fence sites, "
               "or SIGKILL it for real (docs/crash_model.md)");
  sub->add_option("--tree", a->tree, "registered tree (test-only variants included)")->required();
  sub->add_option("--workload", a->workload, "small: every short sequence from interesting pre-states; "
                                             "random: --ops seeded random operations")
      ->check(CLI::IsMember({"small", "random"}));
  sub->add_option("--keys", a->keys, "u64 (default), or byte-string keys: short (3 B), long (128 B), "
                                     "prefix (44 B, a 40-byte prefix shared by all)")
      ->check(CLI::IsMember({"u64", "short", "long", "prefix"}));
  sub->add_option("--ops", a->ops, "operations of the random workload");
  sub->add_option("--seed", a->seed, "seed of random workloads, samples and the kill harness");
  sub->add_option("--mode", a->mode, "adr: per-line prefix (default); strict: per 8-byte word; eadr: caches persist")
      ->check(CLI::IsMember({"adr", "strict", "eadr"}));
  sub->add_option("--budget-seconds", a->budget_seconds, "stop after this long (0: no limit; per mutant with --mutate)");
  sub->add_flag("--mutate", a->mutate, "drop each covered flush/fence site in turn and report the mutation score");
  sub->add_option("--kill", a->kill, "run the real-crash harness for N SIGKILL iterations instead");
  sub->add_flag("--json", a->json, "one JSON object on stdout");
  sub->add_option("--depth", a->depth, "small workload: operations per sequence (1..3)")->check(CLI::Range(1, 3));
  sub->add_flag("--reopen", a->reopen, "small workload: add 'close and reopen' (clean shutdown, instant restart) to the alphabet");
  sub->add_option("--node-size", a->node_size, "tree node size in bytes (0: the tree's default)");
  sub->add_option("--tree-option", a->tree_options, "design-specific option KEY=VALUE (repeatable)");
  sub->add_option("--max-images", a->max_images, "exhaustive bound per crash point");
  sub->add_option("--samples", a->samples, "random images per crash point above the bound");
  sub->add_option("--lazy", a->lazy,
                  "auto (default): in mutant runs, where the plain plan would sample, branch only on the dirty "
                  "lines recovery and the checks read (back to the plan when that cannot finish within "
                  "--lazy-max-runs); on: at every crash point, never back; off: the plain plan only")
      ->capture_default_str();
  sub->add_option("--lazy-max-runs", a->lazy_max_runs, "bound on the lazy search's runs per crash point")
      ->capture_default_str();
  sub->add_option("--lazy-byte-max-runs", a->lazy_byte_max_runs,
                  "auto: bound on the runs of the byte-level repeat of a search the line-level one could not "
                  "complete (0: no such repeat)")
      ->capture_default_str();
  sub->add_flag("--no-observed-words", a->no_observed_words,
                "byte level: record an observed word's load (a recovery scan's magic compare, pm/observe.h) as the "
                "bytes it reads, not as its class");
  sub->add_option("--pool-size", a->pool_size, "bytes of the explorer's anonymous pool");
  sub->add_option("--drop", a->drop, "explore a mutant: drop SITE@flush or SITE@fence");
  sub->add_option("--split-store", a->split_store, "explore a mutant: 8-byte stores at SITE reach memory as two 4-byte halves");
  sub->add_flag("--inject-leak", a->inject_leak, "explore a mutant: leak one block after every recovery");
  sub->add_flag("--check-all-ops", a->check_all_ops, "small workload: check every operation, not only the last");
  sub->add_flag("--reclaim-each-op", a->reclaim_each_op,
                "free retired blocks when each traced operation returns, so the next one can reuse them");
  sub->add_option("--continuation-every", a->continuation_every,
                  "run the continuation workload on the first and every N-th image of a crash point");
  sub->add_option("--recovery-crash-every", a->recovery_crash_every,
                  "crash during recovery from the first, the last and every N-th image of a point (0: first and last)");
  sub->add_flag("--no-bulk-load", a->no_bulk_load, "small workload: no bulk-load scenarios");
  sub->add_flag("--no-out-of-space", a->no_out_of_space,
                "small workload: no operations on a full pool (each letter that allocates, failing at its 1st, 2nd, 3rd and last allocation)");
  sub->add_flag("--no-store-mutants", a->no_store_mutants, "--mutate: skip the split-store mutants");
  sub->add_option("--replay", a->replay, "check only image SCENARIO:POINT:IMAGE (from a ticket) and describe it");
  sub->add_flag("--no-continuation", a->no_continuation, "skip the continuation workload after recovery");
  sub->add_flag("--no-recovery-crash", a->no_recovery_crash, "skip crashes during recovery");
  sub->add_option("--max-tickets", a->max_tickets, "tickets to print");
  sub->add_option("--dir", a->dir, "kill harness: directory of the pool file");
  sub->add_flag("--quiet", a->quiet, "no progress lines on stderr");
  sub->add_flag("--kv", a->kv, "explore kv::Store scenarios (puts, replace, fields, batch, transaction, delete, GC) "
                               "with --tree as the engine (docs/kv.md)");
  sub->add_option("--kv-scenario", a->kv_scenario, "--kv: only scenarios whose name contains this");
  sub->add_option("--value-bytes", a->value_bytes, "--kv: size of the large put's value")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--recovery-images", a->recovery_images, "--kv: exhaustive bound per crash point inside a recovery");
  sub->add_option("--kv-flaw", a->kv_flaws, "--kv negative control: skip-redo or skip-record-persist (repeatable)")
      ->check(CLI::IsMember({"skip-redo", "skip-record-persist"}));
  sub->callback([a, exit_code] { *exit_code = Run(*a); });
}

}  // namespace pmtree::cli
