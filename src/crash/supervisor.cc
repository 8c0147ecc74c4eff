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

// The page the supervisor shares with its workers and the memfd they write
// their results to; both released on destruction.
class SharedState {
 public:
  SharedState() = default;
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;
  ~SharedState() {
    if (results_ >= 0) close(results_);
    if (sh_ != nullptr) {
      sh_->~Shared();
      munmap(sh_, sizeof(Shared));
    }
  }

  Status Open() {
    void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return Status::IoError("mmap of the explorer's shared state failed");
    sh_ = new (mem) Shared();
    results_ = memfd_create("pmtree-crash-results", MFD_CLOEXEC);
    if (results_ < 0) return Status::IoError("memfd_create for explorer results failed");
    return Status::Ok();
  }

  Shared* shared() const { return sh_; }
  int results() const { return results_; }

  // Everything the workers wrote; closes the memfd.
  std::string TakeResults() {
    std::string text;
    char buf[65536];
    lseek(results_, 0, SEEK_SET);
    ssize_t n;
    while ((n = read(results_, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
    close(results_);
    results_ = -1;
    return text;
  }

 private:
  Shared* sh_ = nullptr;
  int results_ = -1;
};

// Runs the worker over the scenarios: in this process (isolate = false), or
// forked, restarted after the image that killed or hung it.
class Supervisor {
 public:
  Supervisor(const TreeFactory& f, const ExploreOptions& o, const std::vector<Scenario>& scenarios, Shared* sh,
             int results, double t0)
      : f_(f), o_(o), scenarios_(scenarios), sh_(sh), results_(results), t0_(t0),
        deadline_(o.budget_seconds > 0 ? t0 + o.budget_seconds : 0) {}

  // An error: the worker could not start (or fork).
  Status Run() {
    if (!o_.isolate) return RunWorker(f_, o_, scenarios_, sh_, results_, deadline_, ImageRef{});
    ImageRef from{};
    int restarts = 0;
    last_progress_ = Now();
    while (true) {
      sh_->phase.store(kPhaseIdle);
      sh_->fault_addr.store(0);
      sh_->fault_in_view.store(0);
      sh_->heartbeat_ms.store(NowMs());
      std::fflush(stderr);
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid < 0) return Status::IoError("fork of the explorer worker failed");
      if (pid == 0) {
        InstallFaultHandlers(sh_);
        Status s = RunWorker(f_, o_, scenarios_, sh_, results_, deadline_, from);
        if (!s.ok()) {
          std::fprintf(stderr, "pmtree crash worker: %s\n", s.ToString().c_str());
          _exit(3);
        }
        _exit(0);
      }
      const int status = Wait(pid);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
      if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        return Status::IoError("the explorer worker could not start (see stderr)");
      const uint32_t phase = sh_->phase.load();
      ImageRef where = TicketForDeath(status);
      if (o_.replay || o_.stop_at_first_violation || ++restarts > 1000) return Status::Ok();
      from = phase == kPhaseTrace ? ImageRef{where.scenario + 1, 0, 0}
                                  : ImageRef{where.scenario, where.point, where.image + 1};
      if (from.scenario >= scenarios_.size()) return Status::Ok();
    }
  }

  // The tickets of workers that died (as the worker writes them).
  const std::vector<json>& tickets() const { return tickets_; }

 private:
  // Waits for worker `pid`, killing it when its heartbeat is older than
  // hang_seconds; progress lines every 2 s.  Returns its wait status.
  int Wait(pid_t pid) {
    int status = 0;
    while (true) {
      pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) return status;
      const int64_t silent = NowMs() - sh_->heartbeat_ms.load();
      if (silent > static_cast<int64_t>(o_.hang_seconds * 1000)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return status;
      }
      if (o_.progress && Now() - last_progress_ >= 2) {
        last_progress_ = Now();
        std::fprintf(stderr, "crash %s %s: scenario %llu/%zu, %llu crash points, %llu images, %.0f s, %llu violations\n",
                     std::string(f_.name).c_str(), std::string(ModeName(o_.mode)).c_str(),
                     static_cast<unsigned long long>(sh_->scenario.load()), scenarios_.size(),
                     static_cast<unsigned long long>(sh_->points.load()),
                     static_cast<unsigned long long>(sh_->images.load()), Now() - t0_,
                     static_cast<unsigned long long>(sh_->violations.load()));
      }
      usleep(2000);
    }
  }

  // Why a worker with wait status `status` died.
  std::string Why(int status) const {
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      return "no progress for " + std::to_string(static_cast<int>(o_.hang_seconds)) + " s: killed (a hang)";
    if (!WIFSIGNALED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    std::string why = "died of " + SignalName(WTERMSIG(status));
    if (sh_->fault_addr.load() != 0) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), ", fault address 0x%llx, pc 0x%llx",
                    static_cast<unsigned long long>(sh_->fault_addr.load()),
                    static_cast<unsigned long long>(sh_->fault_pc.load()));
      why += buf;
    }
    return why;
  }

  // A ticket for the image the worker was at when it died; returns that image.
  ImageRef TicketForDeath(int status) {
    const ImageRef r{sh_->scenario.load(), sh_->point.load(), sh_->image.load()};
    const uint32_t phase = sh_->phase.load();
    const std::string why = Why(status);
    const Scenario& sc = scenarios_[std::min<uint64_t>(r.scenario, scenarios_.size() - 1)];
    std::string failure, point = "-";
    if (phase == kPhaseTrace) {
      if (sh_->fault_in_view.load())
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
    t["op"] = phase == kPhaseTrace ? OpString(sc.ops[std::min<uint64_t>(sh_->cur_op.load(), sc.ops.size() - 1)]) : "-";
    t["point_desc"] = point;
    t["image"] = "-";
    t["failure"] = failure;
    t["command"] = ReplayCommand(f_, o_, r);
    tickets_.push_back(t);
    sh_->violations.fetch_add(1);
    return r;
  }

  const TreeFactory& f_;
  const ExploreOptions& o_;
  const std::vector<Scenario>& scenarios_;
  Shared* sh_;
  int results_;
  double t0_;
  double deadline_;
  double last_progress_ = 0;
  std::vector<json> tickets_;
};

// Sums the workers' JSON lines (`text`) and the supervisor's own tickets
// into `rep`: tickets (at most max_tickets), sites and lints.
void SumResults(const std::string& text, const std::vector<json>& parent_tickets, const ExploreOptions& o,
                ExploreReport* rep) {
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
    if (rep->tickets.size() >= o.max_tickets) break;
    Ticket k;
    k.where = ImageRef{t["scenario_index"], t["point"], t["image_index"]};
    k.scenario = t["scenario"];
    k.op = t["op"];
    k.point = t["point_desc"];
    k.image = t["image"];
    k.failure = t["failure"];
    k.command = t["command"];
    rep->tickets.push_back(k);
  }
  for (auto& [key, s] : sites) {
    if (s.kind == "store8") {
      if (s.covered) rep->store_sites.push_back(s);
      continue;
    }
    rep->sites_total++;
    if (s.covered) rep->sites_covered++;
    rep->sites.push_back(s);
  }
  for (auto& [key, n] : lints) rep->lints.push_back(LintFinding{key.first, key.second, n});
}

// The counters the workers kept in `sh`.
void CopyCounters(const Shared& sh, ExploreReport* rep) {
  rep->scenarios = sh.scenarios_done.load();
  rep->crash_points = sh.points.load();
  rep->crash_points_exhaustive = sh.points_exhaustive.load();
  rep->lazy_points = sh.lazy_points.load();
  rep->lazy_runs = sh.lazy_runs.load();
  rep->lazy_nondeterministic = sh.lazy_nondeterministic.load();
  rep->lazy_abandoned = sh.lazy_abandoned.load();
  rep->lazy_faults = sh.lazy_faults.load();
  rep->lazy_precise = sh.lazy_precise.load();
  rep->lazy_bytes = sh.lazy_bytes.load();
  rep->lazy_bytes_complete = sh.lazy_bytes_complete.load();
  rep->lazy_byte_runs = sh.lazy_byte_runs.load();
  rep->lazy_undecoded = sh.lazy_undecoded.load();
  rep->mutant_points = sh.mutant_points.load();
  rep->mutant_points_exhaustive = sh.mutant_points_exhaustive.load();
  rep->images_checked = sh.images.load();
  rep->images_deduplicated = sh.dedup.load();
  rep->continuation_runs = sh.continuations.load();
  rep->recovery_crash_images = sh.recovery_images.load();
  rep->violations = sh.violations.load();
  rep->budget_exhausted = sh.budget_hit.load() != 0;
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
  SharedState state;
  PMTREE_RETURN_IF_ERROR(state.Open());
  ExploreReport rep;
  rep.tree = std::string(f.name);
  rep.mode = o.mode;
  rep.workload = o.workload;
  rep.scenarios_total = scenarios.size();
  Supervisor supervisor(f, o, scenarios, state.shared(), state.results(), t0);
  const Status worker_status = supervisor.Run();
  SumResults(state.TakeResults(), supervisor.tickets(), o, &rep);
  CopyCounters(*state.shared(), &rep);
  rep.seconds = Now() - t0;
  rep.cpu_seconds = CpuSeconds() - cpu0;
  const auto images = static_cast<double>(rep.images_checked + rep.recovery_crash_images);
  rep.images_per_cpu_s = rep.cpu_seconds > 0 ? images / rep.cpu_seconds : 0;
  rep.images_per_s = rep.seconds > 0 ? images / rep.seconds : 0;
  rep.exhaustive_fraction =
      rep.crash_points > 0 ? static_cast<double>(rep.crash_points_exhaustive) / static_cast<double>(rep.crash_points) : 1;
  if (!worker_status.ok()) return worker_status;
  return rep;
}

}  // namespace pmtree::crash
