// SPDX-License-Identifier: Apache-2.0
//
// The explorer's worker (worker_internal.h): the lazy search's
// orchestration.  At a crash point where the worker searches lazily, the
// search branches only on the dirty lines the checks read (lazy.h); each
// run is a check of worker.cc (Worker::CheckAt).  Here: when to search
// lazily, the runs at a mutant's point, the capped, uncapped and
// byte-level repeats, and the memory of the images already checked.

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "crash/access.h"
#include "crash/lazy.h"
#include "crash/worker_internal.h"

namespace pmtree::crash::detail {

// Lazy search at a point with this plan: with --lazy on at every point
// with dirty lines; with auto only in a mutant's run, where the plain plan
// would sample (a mutant is "redundant" only when every point where it
// differs is proved; a whole exploration stays on the faster plain plan).
// auto leaves the search again when it cannot complete within the bound.  Never in eADR (no dirty
// lines: the images are prefixes of the store order).
bool Worker::UseLazy(const ImagePlan& plan) const {
  if (o_.mode == Mode::kEadr || o_.lazy == LazyMode::kOff || plan.units().empty() || !ReadTracker::Supported())
    return false;
  const bool mutant = !o_.drop_site.empty() || !o_.split_site.empty();
  return o_.lazy == LazyMode::kOn || (mutant && !plan.exhaustive());
}

// The reuse rule at SeenRun (worker_internal.h): true when image `h` was
// checked in a run whose reads say everything about `now`; *read: those
// reads on `now`'s lines.
bool Worker::LazySeen(uint64_t h, const TrackContext& now, LazyReads* read) const {
  auto it = lazy_seen_.find(h);
  if (it == lazy_seen_.end()) return false;
  const TrackContext& then = *it->second.track;
  if (&then != &now) {
    if (then.bytes != now.bytes) return false;
    for (size_t l = 0; l < now.lines.size(); l++) {
      if (!then.Tracks(now.lines[l])) return false;
      if (!now.bytes) continue;
      auto t = std::lower_bound(then.lines.begin(), then.lines.end(), now.lines[l]);
      if (t == then.lines.end() || *t != now.lines[l]) return false;
      if (then.Varying(static_cast<size_t>(t - then.lines.begin())) != now.Varying(l)) return false;
    }
  }
  read->order.clear();
  read->offsets.clear();
  if (now.bytes) read->masks.assign(now.lines.size(), 0);
  for (const auto& [off, mask] : it->second.reads) {
    read->offsets.push_back(off);
    auto l = std::lower_bound(now.lines.begin(), now.lines.end(), off);
    if (l == now.lines.end() || *l != off) continue;  // clean now: the same bytes as then
    const auto i = static_cast<uint32_t>(l - now.lines.begin());
    read->order.push_back(i);
    if (now.bytes) read->masks[i] = mask;
  }
  return true;
}

void Worker::RememberLazy(uint64_t h, const std::shared_ptr<const TrackContext>& track, const LazyReads& read) {
  if (!read.observed.empty()) {  // observed words' classes are not kept: checked again if met again
    lazy_seen_.erase(h);
    return;
  }
  SeenRun& r = lazy_seen_[h];
  r.track = track;
  r.reads.clear();
  for (uint64_t off : read.offsets) {
    uint64_t mask = ~uint64_t{0};
    if (track->bytes) {
      const auto l = std::lower_bound(track->lines.begin(), track->lines.end(), off) - track->lines.begin();
      mask = read.masks[static_cast<size_t>(l)];
    }
    r.reads.emplace_back(off, mask);
  }
}

// Lazy: branch only on the dirty lines the checks read (lazy.h).  At a
// mutant's point comparable with the correct program's, only the images
// the mutant alone can leave are searched: one search per unit with fresh
// contents, that unit at each of them and every other unit free (an image
// both programs can leave is the correct program's, as at a `subset`
// point).  The point is proved when every search completes.
void Worker::LazySearch(ScenarioReplay& sr, const CrashPoint& cp, ImagePlan& plan, const std::vector<Unit*>& units) {
  const LazyUnits all = MakeLazyUnits(units, img_.map);
  uint64_t i = 0;  // image index over every run of this point (tickets, replay)
  bool proved = true;
  if (cp.restrict_to_fresh) {
    for (size_t u = 0; u < cp.fresh.size() && proved; u++) {
      if (cp.fresh[u].empty()) continue;
      LazyUnits lz = all;
      lz.alts[u] = cp.fresh[u];
      const LazyOutcome r = RunLazy(sr, cp, plan, units, lz, &i);
      if (r == LazyOutcome::kStop) return;
      proved = r == LazyOutcome::kComplete;
    }
  } else {
    const LazyOutcome r = RunLazy(sr, cp, plan, units, all, &i);
    if (r == LazyOutcome::kStop) return;
    proved = r == LazyOutcome::kComplete;
  }
  if (proved) {
    sh_->points_exhaustive.fetch_add(1);
    if (cp.mutant_specific) sh_->mutant_points_exhaustive.fetch_add(1);
    return;
  }
  if (o_.lazy == LazyMode::kOn) return;
  // auto: the plan after all (its image 0, all old, was run 0 of an
  // unrestricted search).
  sh_->lazy_abandoned.fetch_add(1);
  if (plan.exhaustive()) {
    sh_->points_exhaustive.fetch_add(1);
    if (cp.mutant_specific) sh_->mutant_points_exhaustive.fetch_add(1);
  }
  std::vector<uint32_t> choice;
  for (uint64_t j = cp.restrict_to_fresh ? 0 : 1; j < plan.planned(); j++) {
    plan.Apply(j, &choice);
    if (!CheckAt(sr, cp, plan, i + j, choice, nullptr, nullptr)) return;
  }
}

// One lazy search over `lz` (the point's dirty `units`), image indexes
// from *i on.  First with the read tracker's cheap per-page fault cap;
// when that search cannot complete and the cap recorded lines nobody may
// have read, once more without the cap; when that cannot complete either
// (auto), once more at byte level (lazy.h).  kStop: a violation or the
// end of a replay.
Worker::LazyOutcome Worker::RunLazy(ScenarioReplay& sr, const CrashPoint& cp, ImagePlan& plan,
                                    const std::vector<Unit*>& units, const LazyUnits& lz, uint64_t* i) {
  auto track = std::make_shared<TrackContext>();
  track->Track(lz.lines, sr.op_lines[sr.op]);
  for (uint32_t cap : {ReadTracker::kCheapFaultsPerPage, ReadTracker::kPreciseFaultsPerPage}) {
    fault_cap_ = cap;
    capped_ = false;
    LazyPlan search(lz.Alternatives(), lz.unit_lines);
    std::vector<uint32_t> alt, choice;
    LazyReads read;
    bool stop = false;
    for (uint64_t runs = 0; runs < o_.lazy_max_runs && search.Next(&alt); runs++) {
      choice = lz.Choice(alt);
      plan.ApplyChoice(choice);
      const bool go_on = CheckAt(sr, cp, plan, (*i)++, choice, track, &read);
      const std::vector<uint32_t>& read_lines = read.order;
      search.Done(read_lines);
      if (!go_on) {
        stop = true;
        break;
      }
      // auto: the images of the units the first run read already exceed
      // the bound, so the search cannot complete and the structured set is
      // the better sample: leave the lazy search.
      if (runs == 0 && o_.lazy == LazyMode::kAuto && lz.ImagesOf(read_lines) > o_.lazy_max_runs) break;
      // auto: likewise as soon as the queue shows the bound cannot hold.
      if (o_.lazy == LazyMode::kAuto && search.runs_needed_at_least() > o_.lazy_max_runs) break;
    }
    fault_cap_ = ReadTracker::kCheapFaultsPerPage;
    sh_->lazy_runs.fetch_add(search.runs());
    if (search.nondeterministic()) sh_->lazy_nondeterministic.fetch_add(1);
    if (stop) return LazyOutcome::kStop;
    if (search.complete()) return LazyOutcome::kComplete;
    if (o_.lazy != LazyMode::kAuto) return LazyOutcome::kLeft;
    if (!capped_ || cap == ReadTracker::kPreciseFaultsPerPage) break;
    // The cap's over-approximated reads are remembered by image: forget
    // them, or the precise search would reuse them.
    lazy_seen_.clear();
    sh_->lazy_precise.fetch_add(1);
  }
  return RunByteLazy(sr, cp, plan, units, lz, i);
}

// The byte-level repeat of a lazy search the line-level one could not
// complete (ByteLazyPlan, lazy.h), bounded by lazy_byte_max_runs; skipped
// without the instruction decoder (access.h), whose absence would make it
// the uncapped line-level search again.
Worker::LazyOutcome Worker::RunByteLazy(ScenarioReplay& sr, const CrashPoint& cp, ImagePlan& plan,
                                        const std::vector<Unit*>& units, const LazyUnits& lz, uint64_t* i) {
  if (o_.lazy_byte_max_runs == 0 || !AccessDecoderAvailable()) return LazyOutcome::kLeft;
  plan.Revert();  // P, for the units' contents
  const ByteUnits bytes = MakeByteUnits(units, img_.map, lz);
  auto track = std::make_shared<TrackContext>();
  track->lines = lz.lines;
  track->bytes = true;
  track->varying = bytes.varying;
  // Line-level reads over-approximate: not reused at byte level.
  lazy_seen_.clear();
  sh_->lazy_bytes.fetch_add(1);
  ByteLazyPlan search(&bytes, lz.unit_lines);
  std::vector<uint32_t> alt, choice;
  LazyReads read;
  bool stop = false;
  for (uint64_t runs = 0; runs < o_.lazy_byte_max_runs && search.Next(&alt); runs++) {
    choice = lz.Choice(alt);
    plan.ApplyChoice(choice);
    const bool go_on = CheckAt(sr, cp, plan, (*i)++, choice, track, &read);
    search.Done(read.order, read.masks, read.observed);
    if (!go_on) {
      stop = true;
      break;
    }
    // As at line level: leave as soon as the bound cannot hold.  The first
    // run's classes multiplied say so only without observed words: a
    // classifier's arguments may come from earlier reads (cdds's recovery
    // merges an end's classes once its node is rewritten), so later runs
    // can split a unit into fewer classes than the first one did.
    if (runs == 0 && read.observed.empty() && search.last_classes() > o_.lazy_byte_max_runs) break;
    if (search.runs_needed_at_least() > o_.lazy_byte_max_runs) break;
  }
  sh_->lazy_runs.fetch_add(search.runs());
  sh_->lazy_byte_runs.fetch_add(search.runs());
  if (search.nondeterministic()) sh_->lazy_nondeterministic.fetch_add(1);
  if (stop) return LazyOutcome::kStop;
  if (search.complete()) {
    sh_->lazy_bytes_complete.fetch_add(1);
    return LazyOutcome::kComplete;
  }
  return LazyOutcome::kLeft;
}

}  // namespace pmtree::crash::detail
