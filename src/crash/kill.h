// SPDX-License-Identifier: Apache-2.0
//
// The real-crash harness (CRASH_MODEL.md §6): a child process runs a random
// workload on a pool file and reports each operation to the parent before
// (intent) and after (acknowledgement) it runs; the parent SIGKILLs the child
// at a random moment, reopens the pool, recovers, verifies, and checks that
// the contents equal every acknowledged operation, plus possibly the one in
// flight.  Unlike the explorer this exercises the real open/recover code and
// the real backend end to end; it gives process-crash durability only (the
// page cache survives a SIGKILL), so it cannot find a missing flush.
//
// The parent alternates between closing the tree cleanly after its check and
// dropping it (a crash), so the child's open exercises both the clean-restart
// and the crash-recovery paths; a kill that lands while the child is still
// opening the pool is a crash during recovery.
//
// Forks: call with no other thread running.

#ifndef PMTREE_CRASH_KILL_H_
#define PMTREE_CRASH_KILL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pmtree/pool.h"
#include "pmtree/registry.h"
#include "pmtree/status.h"

namespace pmtree::crash {

struct KillOptions {
  uint64_t iterations = 200;
  uint64_t seed = 1;
  std::string dir = "/dev/shm";    // the pool file is created here and removed at the end
  uint64_t pool_size = 64ull << 20;
  TreeOptions tree_options;
  PoolOptions pool_options;        // the backend the child and parent use
  uint64_t key_domain = 4096;
  uint32_t max_delay_us = 30000;   // kill after a uniform delay in [0, max)
  // > 0: kill instead once the child has sent a uniform number in [0, max]
  // of its records (ready, then intent/acknowledgement per operation): a
  // bound by work, so tests check the same amount on any machine's speed.
  // 0 keeps the kill point in a real time window (max_delay_us).
  uint32_t max_records = 0;
  bool progress = false;
};

struct KillReport {
  uint64_t iterations = 0;
  uint64_t kills_during_open = 0;  // the child had not finished opening/recovering
  uint64_t acked_ops = 0;          // operations acknowledged by children, all checked
  // With max_records: acknowledgements the record counts guarantee (a kill
  // after r records follows at least (r - 1) / 2 of them); acked_ops >= this.
  uint64_t guaranteed_acks = 0;
  uint64_t in_flight_survived = 0; // unacknowledged operations found applied
  uint64_t final_keys = 0;
  double seconds = 0;
  std::vector<std::string> failures;  // each with its iteration and a command line
};

Result<KillReport> RunKillHarness(const TreeFactory& factory, const KillOptions& options);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_KILL_H_
