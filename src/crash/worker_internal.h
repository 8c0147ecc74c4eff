// SPDX-License-Identifier: Apache-2.0
//
// The explorer's worker class and the structs of its replay, shared by its
// two files: worker.cc (tracing, replay on the shadow, image checks,
// crash during recovery) and worker_lazy.cc (the lazy search's
// orchestration).  Not a public header: the worker's entry points are
// worker.h.

#ifndef PMTREE_CRASH_WORKER_INTERNAL_H_
#define PMTREE_CRASH_WORKER_INTERNAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "crash/explorer.h"
#include "crash/explorer_internal.h"
#include "crash/lazy.h"
#include "crash/shadow.h"
#include "crash/trace.h"
#include "crash/worker.h"
#include "pm/pool_impl.h"
#include "pmtree/registry.h"
#include "pmtree/status.h"

namespace pmtree::crash::detail {

struct TraceRun {
  TraceLog log;
  std::vector<Effect> effects;  // per operation
  std::string failure;          // the workload itself failed
  uint64_t failed_op = 0;
};

// Coverage of one site, per (site, kind) name.
struct SiteCov {
  uint64_t reached = 0;
  bool covered = false;
  bool in_bulk_load = false;   // covered by a crash point of a bulk load
  uint64_t upper_nonzero = 0;  // store8: stores writing a nonzero upper half
};

// One scenario's trace replayed on the shadow model (Worker::RunScenario).
struct ScenarioReplay {
  ScenarioReplay(const Scenario& scenario, uint64_t index, const ImageRef& from, const TraceRun& traced, ImageFile& img,
              Mode mode)
      : sc(scenario), s(index), start(from), run(traced), log(traced.log), shadow(img.map, img.size, mode) {}
  const Scenario& sc;
  const uint64_t s;      // the scenario's index
  const ImageRef start;  // check from this image on (a restarted worker)
  const TraceRun& run;
  const TraceLog& log;
  Shadow shadow;
  int64_t drop_id = -1;  // the mutated sites' ids in `log`
  int64_t split_id = -1;
  // A mutant run replays the unmutated trace alongside, to check only the
  // crash points whose images differ from the correct program's.
  std::vector<char> base_img;
  std::unique_ptr<Shadow> base;
  std::map<std::pair<std::string, std::string>, SiteCov> cov;
  std::set<uint32_t> flushes_since_point;
  Model model;
  uint64_t op = 0;
  bool focus = false;
  uint64_t point = 0;
  uint64_t last_gen = UINT64_MAX;
  std::unordered_set<uint64_t> seen;
  // Per operation: the lines its stores touch, ascending (TrackContext::also).
  std::vector<std::vector<uint64_t>> op_lines;
  bool stop = false;
  bool started = false;  // before the first operation: the pool's own header set-up, not counted
};

// One crash point of a ScenarioReplay: what its images may recover to.
struct CrashPoint {
  uint64_t p = 0;
  std::string where;
  bool at_end = false;
  bool mutant_specific = false;
  // A mutant's point whose images are comparable with the correct
  // program's: per dirty unit, the contents only the mutant can leave
  // (ImageDiff::fresh); the lazy search checks just those images.
  bool restrict_to_fresh = false;
  std::vector<std::vector<uint32_t>> fresh;
  Expect e;
  uint64_t seed = 0;
  uint64_t first = 0;  // the first image to check
};

// The worker of one forked process (RunWorker, worker.h).  Each member
// function is described at its definition.
class Worker {
 public:
  Worker(const TreeFactory& f, const ExploreOptions& o, const std::vector<Scenario>& scenarios, Shared* sh,
         int results_fd, double deadline)
      : f_(f), o_(o), scenarios_(scenarios), sh_(sh), results_fd_(results_fd), deadline_(deadline) {}

  Status Init();
  void Run(const ImageRef& from);

 private:
  // worker.cc: tracing, replay, image checks.
  bool OutOfTime();
  void Emit(const nlohmann::json& j);
  void Trace(const Scenario& sc, TraceRun* run);
  Result<bool> RunTreeOp(const Op& op, PoolImpl* pool, Tree* tree, const Model& m, Effect* e, TraceRun* run);
  bool Reopen(const PoolOptions& po, std::unique_ptr<PoolImpl>* pool, std::unique_ptr<Tree>* tree, TraceRun* run);
  std::string CheckImage(ImageFile& file, const Expect& e, bool continuation, uint64_t seed,
                         const TrackContext* track = nullptr, LazyReads* read = nullptr);
  bool TraceRecovery(uint64_t extent, TraceLog* rlog, bool* writes);
  std::string CrashDuringRecovery(const Expect& e, uint64_t extent, uint64_t seed);
  std::string Command(const ImageRef& r) const { return ReplayCommand(f_, o_, r); }
  bool IsDropped(const TraceLog& log, uint32_t site) const;
  void Report(const ImageRef& r, const Scenario& sc, uint64_t op, const std::string& point,
              const std::string& image, const std::string& failure);
  void RunScenario(uint64_t s, const ImageRef& start);
  void Mark(ScenarioReplay& sr, uint32_t site, const char* kind);
  void ReplayStore(ScenarioReplay& sr, const Event& ev);
  void ReplayFlush(ScenarioReplay& sr, const Event& ev);
  void ReplayFence(ScenarioReplay& sr, const Event& ev);
  void AtCrashPoint(ScenarioReplay& sr, const std::string& where, bool at_end, uint32_t fence_site);
  bool CheckAt(ScenarioReplay& sr, const CrashPoint& cp, const ImagePlan& plan, uint64_t i,
               const std::vector<uint32_t>& choice, const std::shared_ptr<const TrackContext>& track,
               LazyReads* read);
  void EmitCoverage(ScenarioReplay& sr);

  // worker_lazy.cc: the lazy search (lazy.h).

  // Lazy runs of the current operation, by image hash: the lines each check
  // read, in order, with the bytes read.  An image met again is not checked
  // again; its recorded reads, mapped onto this search's dirty lines,
  // continue the search.  Only where they say everything: every line dirty
  // now was tracked then (a line that was neither dirty nor one of the
  // operation's `also` lines then may have been read unrecorded;
  // docs/crash_model.md section 11), at byte level with the same varying
  // bytes.  Equal hashes are equal images, so the check read the same.
  struct SeenRun {
    std::shared_ptr<const TrackContext> track;
    std::vector<std::pair<uint64_t, uint64_t>> reads;  // (line offset, bytes read)
  };

  enum class LazyOutcome { kComplete, kLeft, kStop };
  bool UseLazy(const ImagePlan& plan) const;
  bool LazySeen(uint64_t h, const TrackContext& now, LazyReads* read) const;
  void RememberLazy(uint64_t h, const std::shared_ptr<const TrackContext>& track, const LazyReads& read);
  void LazySearch(ScenarioReplay& sr, const CrashPoint& cp, ImagePlan& plan, const std::vector<Unit*>& units);
  LazyOutcome RunLazy(ScenarioReplay& sr, const CrashPoint& cp, ImagePlan& plan, const std::vector<Unit*>& units,
                      const LazyUnits& lz, uint64_t* i);
  LazyOutcome RunByteLazy(ScenarioReplay& sr, const CrashPoint& cp, ImagePlan& plan, const std::vector<Unit*>& units,
                          const LazyUnits& lz, uint64_t* i);

  const TreeFactory& f_;
  const ExploreOptions& o_;
  const std::vector<Scenario>& scenarios_;
  Shared* sh_;
  int results_fd_;
  double deadline_;
  ImageFile img_, rec_a_, rec_b_;
  std::unordered_map<uint64_t, SeenRun> lazy_seen_;
  uint32_t fault_cap_ = ReadTracker::kCheapFaultsPerPage;  // of the lazy runs
  bool capped_ = false;  // a lazy run of the current search hit fault_cap_
};

}  // namespace pmtree::crash::detail

#endif  // PMTREE_CRASH_WORKER_INTERNAL_H_
