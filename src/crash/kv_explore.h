// SPDX-License-Identifier: Apache-2.0
//
// The crash explorer on key-value store workloads (docs/kv.md, "Crash
// exploration"; docs/crash_model.md section 12).
//
// ExploreKv() runs kv::Store scenarios over one engine (a registered tree
// with byte-string keys) the way Explore() runs tree scenarios:
//
//   1. a pre-state is built untraced in a pool file and closed cleanly: plain
//      values (one over several lines), a field record;
//   2. the store is opened again with the tracing backend (trace.h) and the
//      scenario's operations run; the open itself is operation 0;
//   3. the trace is replayed on the shadow model (shadow.h); at every crash
//      point of every operation (before each fence and at each operation's
//      end in ADR and strict; after every store piece in eADR) the images
//      ImagePlan enumerates (exhaustive up to max_images, else the structured
//      set plus samples) are built in a memfd;
//   4. each image is recovered by kv::Store::Open on a copy-on-write mapping
//      and checked: Verify() (the tree's invariants, every record reachable
//      and well formed, record bytes == the store's bytes in use: no leak, no
//      dangling record), then the whole contents (plain values and fields)
//      must equal the model before or after the operation in flight, only
//      after it at its end (a batch or transaction is all or nothing);
//   5. on the first image of each point (each operation's end in eADR) and
//      every continuation_every-th image of a scenario, a few more writes on
//      the recovered store, then Verify and the model again;
//   6. crash during recovery: from the first and the last image of a point
//      (each operation's end and every recovery_crash_every-th point; by
//      default every point in ADR and strict) the store's own recovery is
//      traced, and each crash image of it (up to recovery_images per point,
//      else the structured set + 16 samples) is recovered again and checked
//      against the same states.
//
// Every failure is a Ticket whose command replays that image.
//
// Each scenario runs in a forked worker process (isolate): a check that
// crashes the process (a wild pointer in recovery) or stays silent for
// hang_seconds becomes a violation at the image it was checking, and the
// exploration goes on with the next scenario.  Threading: Explore's rule
// (call it while no other thread runs, or set isolate = false).

#ifndef PMTREE_CRASH_KV_EXPLORE_H_
#define PMTREE_CRASH_KV_EXPLORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "crash/explorer.h"
#include "crash/shadow.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree::crash {

struct KvExploreOptions {
  std::string engine = "lbtree";
  Mode mode = Mode::kAdr;
  uint64_t seed = 1;               // samples above the bound
  uint64_t max_images = 4096;      // exhaustive bound per crash point
  uint64_t samples = 512;          // random images added above it
  uint64_t value_bytes = 16384;    // the large put's value (1..1 MiB)
  uint64_t pool_size = 4ull << 20;
  std::string dir = "/dev/shm";    // directory of the scenario's pool file (removed after)
  TreeOptions tree_options;
  // Only scenarios whose name contains this ("" = all; KvScenarioNames()).
  std::string scenario;
  uint32_t continuation_every = 8;  // 0: no continuation writes
  // Crash during recovery from each operation's end and every n-th crash
  // point; 0: every point in ADR and strict, every 16th in eADR.
  uint32_t recovery_crash_every = 0;
  bool recovery_crash = true;          // false: never crash during recovery
  uint64_t recovery_images = 64;       // exhaustive bound per crash point inside recovery
  // Negative controls (kv::Options' test-only flaws): recovery without the
  // redo of committed logs; versions named before they are persisted.
  bool testing_skip_redo = false;
  bool testing_skip_record_persist = false;
  // Mutation: every flush (or fence, with drop_fence) issued at this site is
  // dropped from the traces, the scenario's and its recoveries'.
  std::string drop_site;
  bool drop_fence = false;
  std::optional<ImageRef> replay;   // check only this image
  size_t max_tickets = 20;
  bool stop_at_first_violation = false;
  bool progress = false;            // progress lines on stderr
  bool isolate = true;              // each scenario in a forked worker
  double hang_seconds = 20;         // a worker silent this long is killed: a violation
  // TEST ONLY: the check of every scenario's first image aborts the process
  // (the worker's death must become a ticket).  Never set it.
  bool testing_abort_in_check = false;
};

struct KvExploreReport {
  std::string engine;
  Mode mode = Mode::kAdr;
  uint64_t scenarios = 0;
  uint64_t operations = 0;          // checked operations (the traced opens included)
  uint64_t crash_points = 0;
  uint64_t crash_points_exhaustive = 0;
  uint64_t images_checked = 0;
  uint64_t images_deduplicated = 0;
  uint64_t continuation_runs = 0;
  uint64_t recoveries_crashed = 0;      // traced recoveries that wrote (and were crashed)
  uint64_t recovery_crash_images = 0;   // images checked inside those recoveries
  uint64_t violations = 0;
  double seconds = 0;
  double cpu_seconds = 0;           // of this process and its workers (user + system)
  std::vector<Ticket> tickets;
  // Flush and fence sites of the store (src/kv/) the traced sessions
  // reached (kind "flush" or "fence"; reached = executions): the mutants.
  std::vector<SiteReport> store_sites;
};

// The scenario names, in the order ExploreKv runs them.
std::vector<std::string> KvScenarioNames();

// InvalidArgument for an unknown or unsuitable engine, a scenario filter
// that matches nothing or out-of-range sizes; IoError when the pool file or
// the image memfd cannot be made.  Violations are in the report, not errors.
Result<KvExploreReport> ExploreKv(const KvExploreOptions& options);

// Mutation testing of the store's barriers: one exploration (`options`, with
// stop_at_first_violation) per flush or fence site of src/kv/ that the base
// run reached, with that site dropped.  A mutant is "caught" when the
// explorer reports a violation, else "survived" (the barrier is redundant in
// these scenarios, or the images that would show it were sampled).
// MutationReport::redundant stays 0; score = caught / mutants.  When the
// base run has violations, no mutant runs (see *base).
Result<MutationReport> MutateKv(const KvExploreOptions& options, KvExploreReport* base = nullptr);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_KV_EXPLORE_H_
