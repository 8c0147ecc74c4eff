// SPDX-License-Identifier: Apache-2.0
//
// The explorer's worker and what it shares with its supervisor
// (supervisor.cc).  The worker runs in a forked process: it traces each
// scenario, replays the trace on the shadow model, builds every crash image
// the mode allows and checks it.  It reports through two channels:
//
//   - Shared (a MAP_SHARED page): where it is (scenario, point, image,
//     phase), a heartbeat, the counters of the report, and the fault address
//     of a SIGSEGV/SIGBUS, so the supervisor can name the image that killed
//     it and restart after it;
//   - results_fd: one JSON line per ticket ({"ticket": ...}) and per scenario
//     ({"sites": [...], "lints": [...]}), summed by the supervisor.

#ifndef PMTREE_CRASH_WORKER_H_
#define PMTREE_CRASH_WORKER_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "crash/explorer.h"
#include "crash/explorer_internal.h"
#include "pmtree/registry.h"
#include "pmtree/status.h"

namespace pmtree::crash {

// State shared between the supervising parent and its worker (MAP_SHARED).
struct Shared {
  std::atomic<uint64_t> scenario{0}, point{0}, image{0};
  std::atomic<uint32_t> phase{0};  // kPhase*
  std::atomic<uint64_t> cur_op{0};
  std::atomic<int64_t> heartbeat_ms{0};
  std::atomic<uint64_t> images{0}, points{0}, points_exhaustive{0}, dedup{0}, continuations{0},
      recovery_images{0}, scenarios_done{0}, violations{0}, mutant_points{0}, mutant_points_exhaustive{0},
      lazy_points{0}, lazy_runs{0}, lazy_nondeterministic{0}, lazy_abandoned{0}, lazy_faults{0}, lazy_precise{0},
      lazy_bytes{0}, lazy_bytes_complete{0}, lazy_byte_runs{0}, lazy_undecoded{0};
  std::atomic<uint64_t> fault_addr{0}, fault_pc{0};
  std::atomic<int> fault_in_view{0};
  std::atomic<int> budget_hit{0};
  std::atomic<int> stop{0};
};
enum : uint32_t { kPhaseIdle = 0, kPhaseTrace = 1, kPhaseCheck = 2, kPhaseRecoveryCrash = 3 };

// Milliseconds on the monotonic clock (the heartbeat).
inline int64_t NowMs() { return static_cast<int64_t>(Now() * 1000); }

// In the forked worker: a SIGSEGV or SIGBUS records its address (and
// whether it hit the traced pool's read-only view) in `sh`, then kills the
// worker as before.
void InstallFaultHandlers(Shared* sh);

// Runs the scenarios from image `from` on (deadline: 0 or the Now() to stop
// at), reporting through `sh` and `results_fd`.  An error: the worker could
// not start (its image files).
Status RunWorker(const TreeFactory& f, const ExploreOptions& o, const std::vector<Scenario>& scenarios, Shared* sh,
                 int results_fd, double deadline, const ImageRef& from);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_WORKER_H_
