// SPDX-License-Identifier: Apache-2.0
//
// The explorer's worker (worker.h): traces each scenario, replays the trace
// on the shadow model, builds the crash images of every crash point and
// checks each (recovery, Verify, model, space, continuation, crash during
// recovery).  Results go to the supervisor as JSON lines.  The class is
// worker_internal.h; its lazy search's orchestration, worker_lazy.cc.

#include "crash/worker.h"

#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "crash/lazy.h"
#include "crash/shadow.h"
#include "crash/signals.h"
#include "crash/trace.h"
#include "crash/worker_internal.h"

namespace pmtree::crash {
namespace {

using json = nlohmann::json;

// Fault bookkeeping for the worker's signal handler.
Shared* g_shared = nullptr;
std::atomic<const char*> g_view{nullptr};
std::atomic<uint64_t> g_view_size{0};

void OnFault(int sig, siginfo_t* si, void* ucv) {
  if (g_shared != nullptr) {
    const auto addr = reinterpret_cast<uint64_t>(si->si_addr);
    g_shared->fault_addr.store(addr);
#if defined(__x86_64__)
    auto* uc = static_cast<ucontext_t*>(ucv);
    g_shared->fault_pc.store(static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]));
#else
    (void)ucv;
#endif
    const char* v = g_view.load();
    if (v != nullptr && addr >= reinterpret_cast<uint64_t>(v) && addr < reinterpret_cast<uint64_t>(v) + g_view_size.load())
      g_shared->fault_in_view.store(1);
  }
  // Returning re-executes the faulting instruction with the default action:
  // the worker dies and the parent reports the position.
  signal(sig, SIG_DFL);
}

}  // namespace

namespace detail {

Status Worker::Init() {
  PMTREE_RETURN_IF_ERROR(img_.Open(o_.pool_size));
  PMTREE_RETURN_IF_ERROR(rec_a_.Open(o_.pool_size));
  PMTREE_RETURN_IF_ERROR(rec_b_.Open(o_.pool_size));
  return Status::Ok();
}

// Runs scenarios from `from` on.
void Worker::Run(const ImageRef& from) {
  for (uint64_t s = from.scenario; s < scenarios_.size(); s++) {
    if (o_.replay && s != o_.replay->scenario) continue;
    if (OutOfTime()) return;
    ImageRef start = s == from.scenario ? from : ImageRef{s, 0, 0};
    RunScenario(s, start);
    sh_->scenarios_done.store(s + 1);
    if (sh_->stop.load()) return;
  }
}

bool Worker::OutOfTime() {
  if (deadline_ > 0 && Now() > deadline_) {
    sh_->budget_hit.store(1);
    return true;
  }
  return false;
}

void Worker::Emit(const json& j) {
  std::string line = j.dump() + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t w = write(results_fd_, p, left);
    if (w <= 0) return;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

void Worker::Trace(const Scenario& sc, TraceRun* run) {
  sh_->phase.store(kPhaseTrace);
  TracingBackend* tb = nullptr;
  PoolOptions po;
  po.backend = BackendKind::kCustom;
  po.backend_factory = TracingFactory(&run->log, &tb);
  po.counting = false;
  po.use_env = false;
  auto created = PoolImpl::CreateAnonymous(o_.pool_size, f_.name, PoolLayoutFlags(o_.keys), po, /*read_only_view=*/true);
  if (!created.ok()) {
    run->failure = "cannot create the traced pool: " + created.status().ToString();
    return;
  }
  std::unique_ptr<PoolImpl> pool = std::move(*created);
  g_view.store(pool->base());
  g_view_size.store(pool->size());
  Model m;
  std::unique_ptr<Tree> tree;
  for (size_t i = 0; i < sc.ops.size(); i++) {
    const Op& op = sc.ops[i];
    sh_->cur_op.store(i);
    Effect e = EffectOf(m, op);
    e.bulk_prefix_ok = op.kind == OpKind::kBulkLoad && !(f_.capabilities & kCapBulkLoadFill);
    run->effects.push_back(e);
    tb->BeginOp(i);
    Result<bool> r = false;
    switch (op.kind) {
      case OpKind::kCreate: {
        auto t = CreateFor(f_, pool.get(), o_);
        if (!t.ok()) {
          run->failure = "create failed: " + t.status().ToString();
        } else {
          tree = std::move(*t);
          r = true;
        }
        break;
      }
      case OpKind::kInsert:
      case OpKind::kUpdate:
      case OpKind::kUpsert:
      case OpKind::kRemove:
      case OpKind::kBulkLoad:
        r = RunTreeOp(op, pool.get(), tree.get(), m, &e, run);
        break;
      case OpKind::kReopen:
        if (Reopen(po, &pool, &tree, run)) r = true;
        break;
    }
    tb->EndOp(i);
    if (o_.reclaim_each_op && pool) pool->epochs().DrainAll();
    if (run->failure.empty() && !r.ok()) run->failure = OpString(op) + " failed: " + r.status().ToString();
    if (run->failure.empty() && *r != e.expected)
      run->failure = OpString(op) + " returned " + (*r ? "true" : "false") + " but the model expects " +
                     (e.expected ? "true" : "false");
    if (!run->failure.empty()) {
      run->failed_op = i;
      break;
    }
    ApplyEffect(&m, e);
  }
  tree.reset();  // a crash: no Close()
  pool.reset();
  g_view.store(nullptr);
}

// Runs a tree operation of the trace; one with Op::fail_alloc on a pool
// full from that allocation.  When it then fails with OutOfSpace its effect
// (*e, run->effects) becomes none.  Either way, after an injected failure
// the live tree must be consistent and hold M0 + *e (contract item 5; a
// crash image would hide it: recovery could repair what the failure left,
// e.g. a separator a split never added).
Result<bool> Worker::RunTreeOp(const Op& op, PoolImpl* pool, Tree* tree, const Model& m, Effect* e, TraceRun* run) {
  if (op.fail_alloc == 0) return RunOp(*tree, op);
  pool->allocator().FailAllocationsAfter(op.fail_alloc - 1);
  Result<bool> r = RunOp(*tree, op);
  const bool injected = pool->allocator().allocation_failed();
  pool->allocator().ClearAllocationFailure();
  if (!injected) return r;
  if (!r.ok() && r.status().code() == Status::Code::kOutOfSpace) {
    *e = Effect{};
    e->key = op.key;
    run->effects.back() = *e;
    r = e->expected;
  }
  if (!r.ok()) return r;
  Expect live;
  live.m0 = &m;
  live.m0_ok = false;
  live.effect = *e;
  live.focus_key = op.key;
  int which = 0;
  const std::string bad =
      CheckTree(pool, tree, live, &which, /*reachable_check=*/false, "of the live tree");
  if (!bad.empty()) run->failure = OpString(op) + ": " + bad;
  return r;
}

// A clean shutdown and the next session's open, traced as one operation:
// Close writes what instant restart needs, the new pool object opens the
// same bytes and the tree recovers from them.  The new pool's backend
// reports to the same trace (`po`'s factory).  False: run->failure says why.
bool Worker::Reopen(const PoolOptions& po, std::unique_ptr<PoolImpl>* pool, std::unique_ptr<Tree>* tree,
                    TraceRun* run) {
  // Pool::Close releases the memfd: keep a descriptor of the bytes.
  const int fd = dup((*pool)->memfd());
  if (fd < 0) {
    run->failure = "dup of the traced pool's memfd failed";
    return false;
  }
  Status cs = (*tree)->Close();
  tree->reset();
  if (!cs.ok()) {
    close(fd);
    run->failure = "close failed: " + cs.ToString();
    return false;
  }
  auto reopened = PoolImpl::OpenAnonymous(fd, o_.pool_size, f_.name, po, /*read_only_view=*/true);
  close(fd);  // OpenAnonymous duplicated it
  if (!reopened.ok()) {
    run->failure = "reopening the closed pool failed: " + reopened.status().ToString();
    return false;
  }
  *pool = std::move(*reopened);
  g_view.store((*pool)->base());
  g_view_size.store((*pool)->size());
  auto t = RecoverFor(f_, pool->get(), o_);
  if (!t.ok()) {
    run->failure = "recovery after a clean close failed: " + t.status().ToString();
    return false;
  }
  *tree = std::move(*t);
  return true;
}

// Opens image `file` copy-on-write, recovers and checks it.  With
// `track` (a lazy run, lazy.h): records which of its dirty lines (at byte
// level: which of their varying bytes) the check reads (recovery to the
// space check; not the continuation) into *read.
std::string Worker::CheckImage(ImageFile& file, const Expect& e, bool continuation, uint64_t seed,
                               const TrackContext* track, LazyReads* read) {
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.counting = false;
  po.use_env = false;
  po.private_mapping = true;
  ReadTracker& tracker = ReadTracker::Get();
  struct StopTracking {
    ReadTracker* t;
    ~StopTracking() {
      if (t) t->Stop();
    }
  } stop_tracking{track ? &tracker : nullptr};
  ExploreOptions recover_options = o_;
  if (track) {
    // The pool header is read with pread() before the mapping exists.
    tracker.Arm(track->armed(), kPoolHeaderSize, track->bytes ? ReadTracker::kPreciseFaultsPerPage : fault_cap_,
                track->bytes ? &track->varying : nullptr, o_.observed_words);
    po.on_map = [&tracker](char* base, uint64_t size) { tracker.Protect(base, size); };
    recover_options.tree_options.recovery_threads = 1;  // reads are tracked on this thread only
  }
  auto finish_tracking = [&] {
    if (!track) return;
    tracker.Stop();
    read->order.clear();
    read->offsets.clear();
    for (uint32_t a : tracker.order()) {
      read->offsets.push_back(track->armed()[a]);
      if (const int64_t l = track->SearchIndex(a); l >= 0) read->order.push_back(static_cast<uint32_t>(l));
    }
    if (track->bytes) {  // armed() is lines at byte level
      read->masks = tracker.masks();
      read->observed = tracker.observed();
    }
    sh_->lazy_faults.fetch_add(tracker.faults());
    sh_->lazy_undecoded.fetch_add(tracker.undecoded());
    capped_ = capped_ || tracker.capped_pages() > 0;
  };
  auto pool = PoolImpl::OpenAnonymous(file.fd, file.size, f_.name, po, false);
  if (!pool.ok()) {
    finish_tracking();
    return "the pool does not open: " + pool.status().ToString();
  }
  auto tree = RecoverFor(f_, pool->get(), recover_options);
  if (!tree.ok()) {
    const bool absent = e.absent_ok && (*pool)->root(0) == 0;
    finish_tracking();
    if (absent) return "";
    return "recovery failed: " + tree.status().ToString();
  }
  if (o_.inject_leak) (void)(*pool)->allocator().Allocate(kAllocGranule);
  int which = 0;
  std::string failure = CheckTree(pool->get(), tree->get(), e, &which, true);
  finish_tracking();
  // (No continuation after a partial default bulk load: its model is the
  // recovered prefix, which the scan already checked.)
  if (failure.empty() && continuation && o_.continuation_ops > 0 && which != 3) {
    sh_->continuations.fetch_add(1);
    Model m = *e.m0;
    if (which == 2) ApplyEffect(&m, e.effect);
    failure = RunContinuation(pool->get(), tree->get(), &m, e.focus_key, o_.continuation_ops, seed);
  }
  tree->reset();
  return failure;
}

// Recovers a copy (rec_a_) of the image in `img_` on a tracing backend,
// into *rlog; *writes: recovery stored to the pool.  False: the copy does
// not open or recover.
bool Worker::TraceRecovery(uint64_t extent, TraceLog* rlog, bool* writes) {
  rec_a_.Reset(extent);
  std::memcpy(rec_a_.map, img_.map, extent);
  TracingBackend* tb = nullptr;
  PoolOptions po;
  po.backend = BackendKind::kCustom;
  po.backend_factory = TracingFactory(rlog, &tb);
  po.counting = false;
  po.use_env = false;
  {
    auto pool = PoolImpl::OpenAnonymous(rec_a_.fd, rec_a_.size, f_.name, po, /*read_only_view=*/true);
    if (!pool.ok()) return false;
    tb->BeginOp(0);
    auto tree = RecoverFor(f_, pool->get(), o_);
    tb->EndOp(0);
    if (!tree.ok()) return false;
    tree->reset();
  }
  rec_a_.dirty = std::max(rec_a_.dirty, rlog->high_water);
  bool inside = false;
  for (const Event& ev : rlog->events) {
    if (ev.kind == EventKind::kOpBegin) inside = true;
    if (inside && (ev.kind == EventKind::kStore || ev.kind == EventKind::kNtStore)) *writes = true;
  }
  return true;
}

// Traces recovery of the image in `img_` and checks every crash image of
// it (bounded).  Returns "" or the failure.
std::string Worker::CrashDuringRecovery(const Expect& e, uint64_t extent, uint64_t seed) {
  sh_->phase.store(kPhaseRecoveryCrash);
  TraceLog rlog;
  bool writes = false;
  if (!TraceRecovery(extent, &rlog, &writes)) return "";  // reported by the plain check
  if (!writes) {
    sh_->phase.store(kPhaseCheck);
    return "";
  }
  rec_b_.Reset(std::max(extent, rlog.high_water));
  std::memcpy(rec_b_.map, img_.map, extent);
  Shadow shadow(rec_b_.map, rec_b_.size, o_.mode);
  bool inside = false;
  uint64_t q = 0;
  std::string failure;
  auto point = [&](const std::string& where) -> bool {
    std::vector<Unit*> units = shadow.DirtyUnits();
    ImagePlan plan(units, rec_b_.map, o_.recovery_images, 16, seed ^ Mix(q));
    std::vector<uint32_t> choice;
    for (uint64_t j = 0; j < plan.planned(); j++) {
      plan.Apply(j, &choice);
      sh_->recovery_images.fetch_add(1);
      std::string f = CheckImage(rec_b_, e, false, seed);
      if (!f.empty()) {
        failure = "crash during recovery (" + where + ", recovery image " + std::to_string(q) + ":" +
                  std::to_string(j) + ", " + plan.Describe(choice) + "), then recovery again: " + f;
        return false;
      }
    }
    q++;
    return true;
  };
  for (const Event& ev : rlog.events) {
    switch (ev.kind) {
      case EventKind::kOpBegin: inside = true; break;
      case EventKind::kOpEnd:
        if (!point("end of recovery")) return failure;
        break;
      case EventKind::kStore:
      case EventKind::kNtStore:
        if (o_.mode == Mode::kEadr) {
          for (uint64_t off = 0; off < ev.len;) {
            uint64_t n = std::min<uint64_t>(ev.len - off, 8 - ((ev.off + off) & 7));
            shadow.Store(ev.off + off, &rlog.bytes[ev.data + off], n, ev.site, false);
            off += n;
            if (inside && !point("after a store at " + rlog.sites.Name(ev.site))) return failure;
          }
        } else {
          shadow.Store(ev.off, &rlog.bytes[ev.data], ev.len, ev.site, ev.kind == EventKind::kNtStore);
        }
        break;
      case EventKind::kFlush:
        if (!o_.drop_fence && IsDropped(rlog, ev.site)) break;
        shadow.Flush(ev.off, ev.len, ev.site);
        break;
      case EventKind::kFence:
        if (o_.drop_fence && IsDropped(rlog, ev.site)) break;
        if (inside && o_.mode != Mode::kEadr && !point("before the fence at " + rlog.sites.Name(ev.site)))
          return failure;
        shadow.Fence(ev.site);
        break;
    }
  }
  sh_->phase.store(kPhaseCheck);
  return "";
}

bool Worker::IsDropped(const TraceLog& log, uint32_t site) const {
  return !o_.drop_site.empty() && log.sites.Name(site) == o_.drop_site;
}

void Worker::Report(const ImageRef& r, const Scenario& sc, uint64_t op, const std::string& point,
                    const std::string& image, const std::string& failure) {
  sh_->violations.fetch_add(1);
  json j;
  j["ticket"] = {{"scenario_index", r.scenario}, {"point", r.point}, {"image_index", r.image},
                 {"scenario", sc.name}, {"op", op < sc.ops.size() ? OpString(sc.ops[op]) : "?"},
                 {"point_desc", point}, {"image", image}, {"failure", failure}, {"command", Command(r)}};
  Emit(j);
  if (o_.replay) std::fprintf(stderr, "replay %s: FAILED: %s\n", ImageRefString(r).c_str(), failure.c_str());
  if (o_.stop_at_first_violation) sh_->stop.store(1);
}

void Worker::RunScenario(uint64_t s, const ImageRef& start) {
  const Scenario& sc = scenarios_[s];
  TraceRun run;
  sh_->scenario.store(s);
  sh_->point.store(0);
  sh_->image.store(0);
  sh_->heartbeat_ms.store(NowMs());
  Trace(sc, &run);
  if (!run.failure.empty()) {
    if (start.point == 0 && start.image == 0)
      Report(ImageRef{s, 0, 0}, sc, run.failed_op, "while running the workload (no crash)", "-", run.failure);
    return;
  }
  sh_->phase.store(kPhaseCheck);
  img_.Reset(run.log.high_water);
  ScenarioReplay sr(sc, s, start, run, img_, o_.mode);
  const TraceLog& log = run.log;
  for (uint32_t i = 0; i < log.sites.size(); i++) {
    if (!o_.drop_site.empty() && log.sites.Name(i) == o_.drop_site) sr.drop_id = i;
    if (!o_.split_site.empty() && log.sites.Name(i) == o_.split_site) sr.split_id = i;
  }
  if (!o_.drop_site.empty() || !o_.split_site.empty()) {
    sr.base_img.assign(log.high_water + kLine, 0);
    sr.base = std::make_unique<Shadow>(sr.base_img.data(), sr.base_img.size(), o_.mode);
  }
  lazy_seen_.clear();
  sr.op_lines.assign(sc.ops.size(), {});
  for (uint64_t op = 0; const Event& ev : log.events) {
    if (ev.kind == EventKind::kOpBegin) op = ev.off;
    if ((ev.kind == EventKind::kStore || ev.kind == EventKind::kNtStore) && ev.len > 0 && op < sc.ops.size())
      for (uint64_t line = ev.off & ~(kLine - 1); line < ev.off + ev.len; line += kLine)
        sr.op_lines[op].push_back(line);
  }
  for (auto& lines : sr.op_lines) {
    std::sort(lines.begin(), lines.end());
    lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
  }
  for (const Event& ev : log.events) {
    if (sr.stop) break;
    switch (ev.kind) {
      case EventKind::kOpBegin:
        sr.op = ev.off;
        sr.started = true;
        sr.focus = sr.op >= sc.check_from;
        sr.seen.clear();
        lazy_seen_.clear();
        sr.last_gen = UINT64_MAX;
        sr.flushes_since_point.clear();
        break;
      case EventKind::kOpEnd:
        // The pending-store lint asks that an operation's writes be durable
        // when it is acknowledged; one failed on a full pool took no effect
        // (its writes went to blocks it freed again), so it is not counted.
        if (sr.focus && sc.ops[sr.op].fail_alloc == 0) sr.shadow.OpEnd();
        if (sr.focus) AtCrashPoint(sr, "end of " + OpString(sc.ops[sr.op]), true, UINT32_MAX);
        ApplyEffect(&sr.model, run.effects[sr.op]);
        break;
      case EventKind::kStore:
      case EventKind::kNtStore: ReplayStore(sr, ev); break;
      case EventKind::kFlush: ReplayFlush(sr, ev); break;
      case EventKind::kFence: ReplayFence(sr, ev); break;
    }
  }
  EmitCoverage(sr);
}

void Worker::Mark(ScenarioReplay& sr, uint32_t site, const char* kind) {
  SiteCov& c = sr.cov[{sr.log.sites.Name(site), kind}];
  c.covered = true;
  c.in_bulk_load = c.in_bulk_load || sr.sc.ops[sr.op].kind == OpKind::kBulkLoad;
}

void Worker::ReplayStore(ScenarioReplay& sr, const Event& ev) {
  const TraceLog& log = sr.log;
  // An aligned 8-byte store is a commit candidate: its site is listed for
  // the split-store mutants when a checked operation made it.
  const bool store8 = ev.len == 8 && (ev.off & 7) == 0;
  if (store8 && sr.focus) sr.cov[{log.sites.Name(ev.site), "store8"}].covered = true;
  if (store8 && sr.started) {
    SiteCov& c = sr.cov[{log.sites.Name(ev.site), "store8"}];
    c.reached++;
    uint32_t upper;
    std::memcpy(&upper, &log.bytes[ev.data + 4], 4);
    c.upper_nonzero += upper != 0;
  }
  // The split-store mutant: the store reaches memory as two 4-byte
  // halves, in order (a torn commit).
  const uint64_t piece = store8 && sr.split_id == static_cast<int64_t>(ev.site) ? 4 : 8;
  const bool nt = ev.kind == EventKind::kNtStore;
  if (o_.mode == Mode::kEadr) {
    for (uint64_t off = 0; off < ev.len && !sr.stop;) {
      uint64_t n = std::min<uint64_t>(ev.len - off, piece - ((ev.off + off) & (piece - 1)));
      sr.shadow.Store(ev.off + off, &log.bytes[ev.data + off], n, ev.site, false);
      if (sr.base) sr.base->Store(ev.off + off, &log.bytes[ev.data + off], n, ev.site, false);
      off += n;
      if (sr.focus) AtCrashPoint(sr, "after the store at " + log.sites.Name(ev.site), false, UINT32_MAX);
    }
  } else if (piece == 4) {
    sr.shadow.Store(ev.off, &log.bytes[ev.data], 4, ev.site, nt);
    sr.shadow.Store(ev.off + 4, &log.bytes[ev.data + 4], 4, ev.site, nt);
    sr.base->Store(ev.off, &log.bytes[ev.data], ev.len, ev.site, nt);
  } else {
    sr.shadow.Store(ev.off, &log.bytes[ev.data], ev.len, ev.site, nt);
    if (sr.base) sr.base->Store(ev.off, &log.bytes[ev.data], ev.len, ev.site, nt);
  }
}

void Worker::ReplayFlush(ScenarioReplay& sr, const Event& ev) {
  if (sr.base) sr.base->Flush(ev.off, ev.len, ev.site);
  // A dropped site still counts as reached (`--drop` checks it was).
  if (sr.started) sr.cov[{sr.log.sites.Name(ev.site), "flush"}].reached++;
  if (!o_.drop_fence && sr.drop_id == static_cast<int64_t>(ev.site)) return;
  if (sr.focus) {
    sr.flushes_since_point.insert(ev.site);
    if (o_.mode == Mode::kEadr) Mark(sr, ev.site, "flush");
  }
  sr.shadow.Flush(ev.off, ev.len, ev.site);
}

void Worker::ReplayFence(ScenarioReplay& sr, const Event& ev) {
  if (sr.started) sr.cov[{sr.log.sites.Name(ev.site), "fence"}].reached++;
  if (o_.drop_fence && sr.drop_id == static_cast<int64_t>(ev.site)) {
    if (sr.base) sr.base->Fence(ev.site);
    return;
  }
  if (sr.focus) {
    if (o_.mode != Mode::kEadr) AtCrashPoint(sr, "before the fence at " + sr.log.sites.Name(ev.site), false, ev.site);
    else Mark(sr, ev.site, "fence");
  }
  sr.shadow.Fence(ev.site);
  if (sr.base) sr.base->Fence(ev.site);
}

// A crash point (before a fence, at an operation's end, after a store in
// eADR): marks the sites it depends on, then checks its images, lazily
// or by the plan.
void Worker::AtCrashPoint(ScenarioReplay& sr, const std::string& where, bool at_end, uint32_t fence_site) {
  if (!at_end && sr.shadow.generation() == sr.last_gen) return;  // same images as the last point
  sr.last_gen = at_end ? UINT64_MAX : sr.shadow.generation();
  CrashPoint cp{sr.point++, where, at_end};
  for (uint32_t fs : sr.flushes_since_point) Mark(sr, fs, "flush");
  sr.flushes_since_point.clear();
  if (fence_site != UINT32_MAX) Mark(sr, fence_site, "fence");
  if (cp.p < sr.start.point) return;
  if (o_.replay && cp.p != o_.replay->point) return;
  if (sr.base) {
    if (sr.base->Signature() == sr.shadow.Signature()) return;  // checked by the base run
    // Every image of the mutant is one the correct program has at this
    // point (a half that rewrites the bytes already there): checked by the
    // base run too (shadow.h, ImageDiff).
    ImageDiff d = DiffImages(*sr.base, sr.shadow);
    if (d.subset) return;
    cp.mutant_specific = true;
    if (d.comparable) {
      cp.restrict_to_fresh = true;
      cp.fresh = std::move(d.fresh);
    }
  }
  cp.e.m0 = &sr.model;
  cp.e.m0_ok = !at_end;
  cp.e.absent_ok = sr.sc.ops[sr.op].kind == OpKind::kCreate && !at_end;
  cp.e.effect = sr.run.effects[sr.op];
  cp.e.focus_key = sr.run.effects[sr.op].key;
  cp.seed = Mix(o_.seed ^ Mix(sr.s * 1000003 + cp.p));
  std::vector<Unit*> units;
  if (o_.mode != Mode::kEadr) units = sr.shadow.DirtyUnits();
  ImagePlan plan(units, img_.map, o_.max_images, o_.samples, cp.seed);
  const bool lazy = UseLazy(plan);
  sh_->points.fetch_add(1);
  if (lazy) sh_->lazy_points.fetch_add(1);
  if (!lazy && plan.exhaustive()) sh_->points_exhaustive.fetch_add(1);
  if (cp.mutant_specific) {
    sh_->mutant_points.fetch_add(1);
    if (!lazy && plan.exhaustive()) sh_->mutant_points_exhaustive.fetch_add(1);
  }
  // The worker died inside this point's lazy search (its ticket is out,
  // and the search cannot resume without the runs before it).
  if (lazy && cp.p == sr.start.point && sr.start.image > 0) return;
  cp.first = cp.p == sr.start.point ? sr.start.image : 0;
  if (lazy) {
    LazySearch(sr, cp, plan, units);
    return;
  }
  std::vector<uint32_t> choice;
  for (uint64_t i = cp.first; i < plan.planned(); i++) {
    if (o_.replay && i != o_.replay->image) continue;
    plan.Apply(i, &choice);
    if (!CheckAt(sr, cp, plan, i, choice, nullptr, nullptr)) return;
  }
}

// Checks the image patched into P as image `i` of crash point `cp`; with
// `lines`, a lazy run that reports what it read.  False: leave the point.
bool Worker::CheckAt(ScenarioReplay& sr, const CrashPoint& cp, const ImagePlan& plan, uint64_t i,
                     const std::vector<uint32_t>& choice, const std::shared_ptr<const TrackContext>& track,
                     LazyReads* read) {
  sh_->point.store(cp.p);
  sh_->image.store(i);
  sh_->heartbeat_ms.store(NowMs());
  if (read) read->order.clear();
  const uint64_t h = plan.ImageHash(sr.shadow.p_hash()) ^ (cp.at_end ? 0x5bd1e995ull : 0);
  if (!o_.replay && track && LazySeen(h, *track, read)) {
    sh_->dedup.fetch_add(1);
    return true;
  }
  if (!o_.replay && !track && !sr.seen.insert(h).second) {
    sh_->dedup.fetch_add(1);
    return true;
  }
  const bool quiet = o_.replay && i != o_.replay->image;  // a lazy replay re-runs the search up to it
  const bool cont = !quiet && (i == cp.first || (o_.continuation_every > 0 && i % o_.continuation_every == 0));
  std::string failure = CheckImage(img_, cp.e, cont, cp.seed ^ Mix(i), track.get(), read);
  if (track && !o_.replay) RememberLazy(h, track, *read);
  sh_->images.fetch_add(1);
  const bool recovery_crash = i == 0 || (!track && i + 1 == plan.planned()) ||
                              (o_.recovery_crash_every > 0 && i % o_.recovery_crash_every == 0);
  if (!quiet && failure.empty() && o_.crash_during_recovery && recovery_crash)
    failure = CrashDuringRecovery(cp.e, std::max(img_.dirty, sr.run.log.high_water), cp.seed ^ Mix(i + 7));
  if (quiet) return true;
  if (o_.replay)
    std::fprintf(stderr, "replay %s: scenario %s; in flight %s; %s; image %s: %s\n",
                 ImageRefString(ImageRef{sr.s, cp.p, i}).c_str(), sr.sc.name.c_str(),
                 OpString(sr.sc.ops[sr.op]).c_str(), cp.where.c_str(), plan.Describe(choice).c_str(),
                 failure.empty() ? "OK" : "FAILED");
  if (!failure.empty()) {
    Report(ImageRef{sr.s, cp.p, i}, sr.sc, sr.op, cp.where, plan.Describe(choice), failure);
    if (sh_->stop.load()) sr.stop = true;
    return false;  // one ticket per crash point is enough
  }
  if (OutOfTime()) {
    sr.stop = true;
    return false;
  }
  return !(o_.replay && i == o_.replay->image);
}

// Coverage and lints of the scenario, for the parent to sum.
void Worker::EmitCoverage(ScenarioReplay& sr) {
  const TraceLog& log = sr.log;
  json sites = json::array();
  std::map<std::string, std::string> function_of;
  for (uint32_t i = 0; i < log.sites.size(); i++) function_of[log.sites.Name(i)] = log.sites.Function(i);
  for (const auto& [key, val] : sr.cov)
    sites.push_back(
        {key.first, key.second, val.reached, val.covered, function_of[key.first], val.in_bulk_load, val.upper_nonzero});
  json lints = json::array();
  auto add = [&](const char* kind, const std::map<uint32_t, uint64_t>& m) {
    for (const auto& [site, n] : m) lints.push_back({kind, log.sites.Name(site), n});
  };
  add("redundant flush", sr.shadow.lints().redundant_flushes);
  add("empty fence", sr.shadow.lints().empty_fences);
  add("store after flush, before fence", sr.shadow.lints().store_after_flush);
  add("store still pending at operation end", sr.shadow.lints().pending_at_op_end);
  Emit(json{{"sites", sites}, {"lints", lints}});
}

}  // namespace detail

void InstallFaultHandlers(Shared* sh) {
  g_shared = sh;
  InstallSigInfoHandler(SIGSEGV, OnFault);
  InstallSigInfoHandler(SIGBUS, OnFault);
}

Status RunWorker(const TreeFactory& f, const ExploreOptions& o, const std::vector<Scenario>& scenarios, Shared* sh,
                 int results_fd, double deadline, const ImageRef& from) {
  detail::Worker w(f, o, scenarios, sh, results_fd, deadline);
  PMTREE_RETURN_IF_ERROR(w.Init());
  w.Run(from);
  return Status::Ok();
}

}  // namespace pmtree::crash
