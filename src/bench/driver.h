// SPDX-License-Identifier: Apache-2.0
//
// The benchmark driver: load, run and measure trees (by registry name) and
// peers (peers.h) over pre-built operation streams.
//
// One measurement = (target, workload, threads, repetition):
//   1. open the target (a fresh pool under /dev/shm, or --skip-load: reopen a
//      saved one), load N records by insert or bulk load;
//   2. build the key/operation streams of every thread (workload.h) — all
//      random draws happen here;
//   3. snapshot the persistence counters, release the threads through a start
//      barrier, run the timed loop (RunStreams), snapshot again: per-op
//      counters cover the run phase only;
//   4. collect stats (footprint, height, fill) and close.
// Per-operation persistence cost comes in two views: over every completed
// operation (per_op), and per operation type over the operations during which
// the tree allocated no PM (no split, no new log or key blob; value records
// of --value-size excluded): the LB+-Tree paper's "line writes per insert in
// a stable tree".
// Latency: every k-th operation of each thread (k = 1/--latency-sample) is
// timed individually with TickClock (calibrated rdtsc); percentiles, max and
// the geometric mean come from those samples.  Throughput: completed ops /
// wall time of the run phase (barrier release to last thread done), plus a
// series per window sampled by a monitor thread.
//
// Thread safety: one driver call at a time per process (the persistence
// counters are process-wide).

#ifndef PMTREE_BENCH_DRIVER_H_
#define PMTREE_BENCH_DRIVER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "bench/target.h"
#include "bench/workload.h"
#include "pmtree/counters.h"
#include "pmtree/pool.h"

namespace pmtree::bench {

// kYcsb: the YCSB core workloads (ycsb.h) on record-mode targets: the KV
// store over each tree, and the peers storing the same records.
enum class WorkloadKind { kOps, kRecovery, kYcsb };

// Ranges BenchConfig::Validate enforces on the sizes of a run: beyond them
// the pre-built key and operation streams alone outgrow any machine we run on.
inline constexpr uint64_t kMaxRecords = 4'000'000'000ull;
inline constexpr uint64_t kMaxOps = 4'000'000'000ull;
inline constexpr double kMaxDurationS = 7 * 24 * 3600.0;

struct BenchConfig {
  // Registry names and peer names ("lbtree", "lmdb"); resolved by Validate().
  std::vector<std::string> targets;
  WorkloadKind kind = WorkloadKind::kOps;
  // kYcsb: the workloads to run, letters 'a'..'f' in order (ParseYcsbList).
  // Each replaces `workload`'s mix, distribution and keys (YcsbWorkloadFor).
  std::string ycsb;
  uint64_t records = 100000;
  uint64_t ops = 100000;        // total over all threads (the cap in time-based runs)
  double duration_s = 0;        // > 0: stop after this many seconds
  std::vector<uint32_t> threads = {1};
  Workload workload;
  bool bulk_load = false;
  double fill = 1.0;
  bool skip_load = false;
  bool keep_pool = false;
  // The bench never overwrites or removes a file it did not create: an
  // existing pool path is refused unless reuse_pool is set and it holds a
  // pmtree pool of the same tree (or a peer directory the bench made).
  bool reuse_pool = false;
  std::string pool_path;        // empty: /dev/shm/pmtree-bench-<pid>-<target>.pool
  uint64_t pool_size = kDefaultPoolSize;
  std::string backend = "hardware";
  uint32_t write_latency_ns = 0;
  // A media profile's name (media.h) when the medium was chosen by name;
  // write_latency_ns then equals the profile's (Validate checks).  Empty:
  // the row's media label is derived from write_latency_ns (MediaLabel).
  std::string media;
  uint32_t node_size = 0;
  // Bytes per value: 8 = the tree's inline value; larger values are records
  // in the pool referenced by the tree value (TreeTargetConfig::value_size).
  uint32_t value_size = 8;
  std::map<std::string, std::string> extra;  // TreeOptions::extra (--tree-option k=v)
  uint32_t repeat = 1;
  double latency_sample = 0.1;  // fraction of ops timed individually
  uint32_t window_ms = 100;     // throughput series window
  uint32_t recovery_threads = 0;  // recovery workload: max rebuild threads (0 = cores)
  bool progress = true;         // progress lines on stderr during long runs
  bool verify = false;          // Verify() after the run (not timed)
  std::string variant;          // free label carried into every row (suites)
  std::string experiment;       // suites: experiment id carried into every row
  std::string command;          // the command line, carried into every row
  // Non-empty: profile the writes of every persistent tree's pool (load and
  // run) into "<write_profile>.<tree>-t<threads>-r<rep>.profile.json"
  // (pmtree/write_profile.h; docs/bench.md, "Write profiles").
  std::string write_profile;
  uint64_t profile_window_ops = 0;  // operations per profile window; 0 = (records + ops) / 200

  // Checks every option; InvalidArgument naming the option and valid values.
  Status Validate() const;
  Status ValidateYcsb() const;  // the kYcsb part of Validate
};

// Persistence cost summed over the operations of one type during which the
// tree allocated no PM (counters' `allocations` unchanged apart from the
// driver's own value records).
// The wear figures of one row's write profile (writes = store calls per line).
struct ProfileSummary {
  std::string path;  // the profile file
  uint64_t pages = 0, page_max = 0, page_median = 0;     // writes per touched 4 KiB page
  uint64_t blocks = 0, block_max = 0, block_median = 0;  // writes per allocated block (node)
  uint64_t stores = 0, flushed_lines = 0;
  // Mean writes per time window with / without an allocation in it: the
  // thesis's "a split_insert causes a burst of writes" (Figure 6.4).
  double alloc_window_writes = 0, quiet_window_writes = 0;
};

struct NoAllocCost {
  uint64_t ops = 0;
  PersistCounters sum;
};

// One row of output.
struct Measurement {
  std::string tree, variant, workload, backend, dist, mix, command;
  std::string media;       // MediaLabel of the config: "dram", "optane", "+180ns/line"...
  std::string pool;        // the pool's (or peer's) own description
  std::string experiment;  // suites: the experiment id
  uint32_t threads = 1, rep = 0, node_size = 0, write_latency_ns = 0, scan_length = 0;
  uint32_t key_min = 0, key_max = 0;
  uint32_t value_size = 8;
  uint64_t records = 0, ops = 0;
  double seconds = 0, throughput_ops_s = 0, load_s = 0;
  std::array<uint64_t, kOpTypes> done{}, succeeded{};
  LatencySummary latency;
  bool counted = false;  // per_op figures are meaningful
  double flushes = 0, fences = 0, lines = 0, blocks256 = 0, bytes = 0, nt_stores = 0;
  std::array<NoAllocCost, kOpTypes> no_alloc{};  // when counted
  TargetStats stats;
  uint32_t window_ms = 0;
  std::vector<double> series;  // ops/s per window
  // Recovery workload.
  std::string recovery_kind;   // "clean" or "crash"
  double recovery_ms = 0;
  uint32_t recovery_threads = 0;
  ProfileSummary profile;  // --write-profile (path empty otherwise)
  // Repetition summary row (rep == UINT32_MAX): throughput over the repetitions.
  bool summary = false;
  Spread throughput_spread, p99_spread;
  std::string error;           // a failed measurement keeps its row, with the reason
  bool expected_fail = false;
};

// Receives each measurement as soon as it is complete.
using Sink = std::function<void(const Measurement&)>;

// Runs every (target, threads, repetition) of `c`; rows go to `sink` (plus a
// summary row per (target, threads) when repeat > 1).  Fails only on bad
// options; a target that fails yields a row with `error` set.
Status RunBench(const BenchConfig& c, const Sink& sink);

// ---- the timed region (exposed for tests) ---------------------------------------

struct RunParams {
  double duration_s = 0;       // 0: run every stream to its end
  uint32_t sample_every = 10;  // time every k-th op
  uint32_t scan_length = 100;
  uint32_t window_ms = 100;
  bool progress = false;
  std::string label;
  // The clock the duration_s deadline is read on, in TickClock ticks;
  // nullptr = TickClock::Now.  Tests inject a clock that advances per read so
  // the deadline path runs the same on any machine.
  uint64_t (*deadline_clock)() = nullptr;
};

struct RunResult {
  double seconds = 0;
  uint64_t ops = 0;
  std::array<uint64_t, kOpTypes> done{}, succeeded{};
  std::vector<double> latency_ns;  // samples
  std::vector<double> series;      // ops/s per window
  PersistCounters counters;        // run phase, all threads
  std::array<NoAllocCost, kOpTypes> no_alloc{};  // counted targets only
  std::string error;               // first operation error, if any
};

// Runs one thread per stream over `target`.  Takes only pre-built streams:
// no random draw (GeneratorDraws()) and no allocation for latency samples
// happen between the barrier release and the end.
RunResult RunStreams(Target& target, const std::vector<Stream>& streams, const RunParams& p);

// The medium a row ran on: the profile's name, "dram" without added latency,
// else "+<N>ns/line".
std::string MediaLabel(const BenchConfig& c);

// Pool path / peer directory for a target (see BenchConfig::pool_path).
std::string PoolPathFor(const BenchConfig& c, const std::string& target);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_DRIVER_H_
