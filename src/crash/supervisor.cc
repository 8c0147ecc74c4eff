// SPDX-License-Identifier: Apache-2.0
//
// Explore() (explorer.h): builds the scenarios, runs the worker (worker.h) in
// a forked process, restarts it past an image that killed it, turns each
// death into a ticket and sums the worker's results into the report.

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>

#include <nlohmann/json.hpp>

#include "crash/explorer.h"
#include "crash/explorer_internal.h"
#include "crash/worker.h"

namespace pmtree::crash {
namespace {

using json = nlohmann::json;

std::string SignalName(int sig) {
  const char* d = strsignal(sig);
  return std::string(d ? d : "signal") + " (signal " + std::to_string(sig) + ")";
}

}  // namespace

Result<ExploreReport> Explore(const TreeFactory& f, const ExploreOptions& o) {
  const double t0 = Now();
  // CPU time of this process (scenario building, supervision) and of its
  // waited-for workers.
  const double cpu0 = CpuSeconds();
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
    worker_status = RunWorker(f, o, scenarios, sh, results, deadline, ImageRef{});
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
        Status s = RunWorker(f, o, scenarios, sh, results, deadline, from);
        if (!s.ok()) {
          std::fprintf(stderr, "pmtree crash worker: %s\n", s.ToString().c_str());
          _exit(3);
        }
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
  rep.cpu_seconds = CpuSeconds() - cpu0;
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

}  // namespace pmtree::crash
