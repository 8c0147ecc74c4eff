// SPDX-License-Identifier: Apache-2.0

#include "bench/driver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/media.h"
#include "bench/peers.h"
#include "bench/ycsb.h"
#include "pmtree/registry.h"

namespace pmtree::bench {
namespace {

std::string Fmt(double v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Per-thread progress counter on its own cache line (the monitor reads it).
struct alignas(64) Progress {
  std::atomic<uint64_t> ops{0};
};

}  // namespace

Status BenchConfig::Validate() const {
  if (targets.empty()) return Status::InvalidArgument("no tree given; valid: " + TreeNames() + ", all, " + PeerNames());
  for (const auto& t : targets)
    if (std::string why = UnbuiltPeerReason(t); !why.empty()) return Status::InvalidArgument(why);
  for (const auto& t : targets)
    if (!FindTree(t) && !FindPeer(t))
      return Status::InvalidArgument("unknown tree '" + t + "'; valid: " + TreeNames() + ", all, peers (" +
                                     PeerNames() + ")");
  if (records > kMaxRecords)
    return Status::InvalidArgument("--records must be in 0.." + std::to_string(kMaxRecords) + ", got " +
                                   std::to_string(records));
  if (ops > kMaxOps)
    return Status::InvalidArgument("--ops must be in 1.." + std::to_string(kMaxOps) + ", got " + std::to_string(ops));
  if (!(duration_s >= 0 && duration_s <= kMaxDurationS))
    return Status::InvalidArgument("--duration must be in (0, " + Fmt(kMaxDurationS) + "] seconds, got " +
                                   Fmt(duration_s));
  if (kind == WorkloadKind::kOps && ops == 0 && duration_s <= 0)
    return Status::InvalidArgument("--ops must be at least 1 (or give --duration)");
  if (!media.empty()) {
    if (Status s = ValidateMedia(media); !s.ok()) return s;
    if (FindMedia(media)->write_latency_ns != write_latency_ns)
      return Status::InvalidArgument("media profile '" + media + "' adds " +
                                     std::to_string(FindMedia(media)->write_latency_ns) +
                                     " ns per flushed line, but --write-latency-ns is " +
                                     std::to_string(write_latency_ns) + "; give one of them");
  }
  if (write_latency_ns > kMaxWriteLatencyNs)
    return Status::InvalidArgument("--write-latency-ns must be in 0.." + std::to_string(kMaxWriteLatencyNs) +
                                   ", got " + std::to_string(write_latency_ns));
  if (recovery_threads > 1024)
    return Status::InvalidArgument("--recovery-threads must be in 0..1024, got " + std::to_string(recovery_threads));
  if (threads.empty()) return Status::InvalidArgument("--threads needs at least one value");
  for (uint32_t t : threads)
    if (t < 1 || t > 1024) return Status::InvalidArgument("--threads values must be in 1..1024, got " + std::to_string(t));
  if (Status s = workload.dist.Validate(); !s.ok()) return s;
  if (workload.scan_length < 1 || workload.scan_length > 1000000)
    return Status::InvalidArgument("--scan-length must be in 1..1000000");
  if (!(fill > 0 && fill <= 1)) return Status::InvalidArgument("--fill must be in (0, 1], got " + Fmt(fill));
  if (repeat < 1 || repeat > 1000) return Status::InvalidArgument("--repeat must be in 1..1000");
  if (!(latency_sample > 0 && latency_sample <= 1))
    return Status::InvalidArgument("--latency-sample must be in (0, 1], got " + Fmt(latency_sample));
  if (window_ms < 1) return Status::InvalidArgument("--window-ms must be at least 1");
  if (pool_size < kMinPoolSize || pool_size % 4096 != 0)
    return Status::InvalidArgument("--pool-size must be a multiple of 4096 and at least " +
                                   std::to_string(kMinPoolSize) + ", got " + std::to_string(pool_size));
  BackendKind bk;
  FlushInstruction fi;
  if (Status s = ParseBackend(backend, &bk, &fi); !s.ok())
    return Status::InvalidArgument("--backend '" + backend +
                                   "' is not valid; valid: hardware, hardware:clwb, hardware:clflushopt, "
                                   "hardware:clflush, eadr, msync, dram");
  if (value_size < kMinValueSize || value_size > kMaxValueSize)
    return Status::InvalidArgument("--value-size must be in " + std::to_string(kMinValueSize) + ".." +
                                   std::to_string(kMaxValueSize) + " bytes (8 = inline values), got " +
                                   std::to_string(value_size));
  if (value_size > 8) {
    // The records live in the pool beside the tree, which knows nothing of
    // them: its Verify() counts the pool bytes it reaches, and its recovery
    // rebuilds the allocator from what it reaches.
    if (verify)
      return Status::InvalidArgument("--verify needs --value-size 8: a tree's Verify() compares the pool bytes it "
                                     "reaches with the allocator's, and value records are outside the tree");
    if (skip_load)
      return Status::InvalidArgument("--skip-load needs --value-size 8: value records are not reachable by the "
                                     "tree's recovery");
    if (kind == WorkloadKind::kRecovery)
      return Status::InvalidArgument("--value-size > 8 applies to the ops workload only, not --workload recovery");
  }
  if (kind == WorkloadKind::kYcsb) {
    if (Status s = ValidateYcsb(); !s.ok()) return s;
  }
  if (skip_load && kind == WorkloadKind::kRecovery)
    return Status::InvalidArgument("--skip-load does not apply to the recovery workload");
  if (skip_load)
    for (const auto& t : targets)
      if (FindPeer(t)) return Status::InvalidArgument("--skip-load works for pool trees only, not peer " + t);
  if (workload.bytes_keys())
    for (const auto& t : targets)
      if (const TreeFactory* f = FindTree(t); f && !(f->capabilities & kCapBytesKeys))
        return Status::InvalidArgument(t + " does not offer byte-string keys; --key-size 8 or choose another tree");
  return Status::Ok();
}

Status BenchConfig::ValidateYcsb() const {
  if (ycsb.empty() || ycsb.find_first_not_of("abcdef") != std::string::npos)
    return Status::InvalidArgument("YCSB workloads must be letters a..f, got '" + ycsb + "'");
  for (const auto& t : targets) {
    const TreeFactory* f = FindTree(t);
    if (f && (!f->persistent() || !(f->capabilities & kCapBytesKeys)))
      return Status::InvalidArgument(t + " cannot be a KV-store engine (it needs a persistent tree with byte-string "
                                         "keys); YCSB targets: persistent trees with byte keys, peers");
  }
  if (skip_load || bulk_load)
    return Status::InvalidArgument("--skip-load and --bulk-load do not apply to YCSB workloads (the load phase is "
                                   "inserts, as in YCSB)");
  if (workload.key_min != 0 || value_size != 8)
    return Status::InvalidArgument("--key-size and --value-size do not apply to YCSB workloads (keys are "
                                   "\"user<number>\", records 10 fields x 100 B)");
  return Status::Ok();
}

std::string MediaLabel(const BenchConfig& c) {
  if (!c.media.empty()) return c.media;
  return c.write_latency_ns ? "+" + std::to_string(c.write_latency_ns) + "ns/line" : "dram";
}

std::string PoolPathFor(const BenchConfig& c, const std::string& target) {
  if (c.pool_path.empty())
    return "/dev/shm/pmtree-bench-" + std::to_string(getpid()) + "-" + target + (FindPeer(target) ? ".d" : ".pool");
  if (c.targets.size() == 1 && !FindPeer(target)) return c.pool_path;
  return c.pool_path + "." + target + (FindPeer(target) ? ".d" : "");
}

// ---- the timed region -------------------------------------------------------------

namespace {

// One worker's results, merged into the RunResult after the run.
struct PerThread {
  std::array<uint64_t, kOpTypes> done{}, succeeded{};
  std::array<NoAllocCost, kOpTypes> no_alloc{};
  std::vector<uint64_t> lat_ticks;
  uint64_t ops = 0;
  std::string error;
};

// A mutating operation's outcome: its result, or false with *err set.
bool Outcome(Result<bool> r, Status* err) {
  if (r.ok()) return *r;
  *err = r.status();
  return false;
}

// Executes `op`, operation `i` of its stream, on `target`: whether it
// succeeded (found, inserted, ...); an environmental failure goes to *err.
bool ExecuteOp(Target& target, const Op& op, std::string_view bkey, size_t i, uint32_t scan_length, Status* err) {
  uint64_t value;
  switch (op.type) {
    case OpType::kRead:
      return target.Lookup(op.key, bkey, &value);
    case OpType::kInsert:
      return Outcome(target.Insert(op.key, bkey, ValueFor(op.key)), err);
    case OpType::kUpdate:
      return Outcome(target.Update(op.key, bkey, ValueFor(op.key) + i), err);
    case OpType::kRemove:
      return Outcome(target.Remove(op.key, bkey), err);
    case OpType::kScan:
      return target.Scan(op.key, bkey, op.scan_len ? op.scan_len : scan_length) > 0;
    case OpType::kRmw:
      return Outcome(target.ReadModifyWrite(op.key, bkey, ValueFor(op.key) + i), err);
  }
  return false;
}

// The per-operation split of this thread's persistence counters: an
// operation that allocated nothing in the tree adds its cost to no_alloc.
// One read of the thread's counters per operation.
class SplitFreeCounter {
 public:
  SplitFreeCounter() : prev_(counters::ThisThread()), prev_records_(ValueRecordAllocations()) {}

  void After(NoAllocCost* no_alloc) {
    const PersistCounters now = counters::ThisThread();
    const uint64_t records = ValueRecordAllocations();
    const PersistCounters d = now - prev_;
    // The target's own value records (--value-size) are not the tree's
    // allocations: an insert that stored a record but did not split
    // still counts as split-free.
    if (d.allocations == records - prev_records_) {
      no_alloc->ops++;
      no_alloc->sum += d;
    }
    prev_ = now;
    prev_records_ = records;
  }

 private:
  PersistCounters prev_;
  uint64_t prev_records_;
};

// The monitor thread's loop: every window_ms, the operations done so far
// (into *cumulative) and, with p.progress, a line on stderr every 5 s; until
// `finished` reaches the number of workers.
void MonitorRun(const RunParams& p, const std::vector<Progress>& progress, const std::atomic<size_t>& finished,
                uint64_t t_begin, uint64_t total_ops, std::vector<uint64_t>* cumulative) {
  const TickClock& clock = TickClock::Get();
  uint64_t next = t_begin + clock.FromNs(p.window_ms * 1e6);
  uint64_t last_print = t_begin;
  while (finished.load(std::memory_order_acquire) < progress.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<uint32_t>(p.window_ms, 20)));
    uint64_t now = TickClock::Now();
    if (now < next) continue;
    uint64_t sum = 0;
    for (auto& pr : progress) sum += pr.ops.load(std::memory_order_relaxed);
    cumulative->push_back(sum);
    next += clock.FromNs(p.window_ms * 1e6);
    if (p.progress && clock.ToNs(now - last_print) > 5e9) {
      last_print = now;
      double secs = clock.ToNs(now - t_begin) / 1e9;
      fprintf(stderr, "  [%s] %.0f s: %llu ops (%.1f%%), %.3f Mops/s\n", p.label.c_str(), secs,
              static_cast<unsigned long long>(sum), p.duration_s > 0 ? 100 * secs / p.duration_s : 100.0 * sum / total_ops,
              sum / secs / 1e6);
    }
  }
}

// Adds the workers' counts, samples and first error to *res, and turns the
// monitor's cumulative counts into ops/s per window.
void MergeRun(const std::vector<PerThread>& per, const std::vector<uint64_t>& cumulative, uint32_t window_ms,
              RunResult* res) {
  const TickClock& clock = TickClock::Get();
  for (auto& me : per) {
    res->ops += me.ops;
    for (int k = 0; k < kOpTypes; k++) {
      res->done[k] += me.done[k];
      res->succeeded[k] += me.succeeded[k];
      res->no_alloc[k].ops += me.no_alloc[k].ops;
      res->no_alloc[k].sum += me.no_alloc[k].sum;
    }
    for (uint64_t tk : me.lat_ticks) res->latency_ns.push_back(clock.ToNs(tk));
    if (res->error.empty() && !me.error.empty()) res->error = me.error;
  }
  uint64_t prev = 0;
  for (uint64_t c : cumulative) {
    res->series.push_back(static_cast<double>(c - prev) * 1000.0 / window_ms);
    prev = c;
  }
}

}  // namespace

RunResult RunStreams(Target& target, const std::vector<Stream>& streams, const RunParams& p) {
  const size_t nthreads = streams.size();
  const TickClock& clock = TickClock::Get();
  const uint32_t every = std::max<uint32_t>(1, p.sample_every);

  // Per-operation split of the counters (allocating or not): only where the
  // pool counts.
  const bool split_counters = target.counted();
  std::vector<PerThread> per(nthreads);
  std::vector<Progress> progress(nthreads);
  uint64_t total_ops = 0;
  for (size_t t = 0; t < nthreads; t++) {
    // Sized up front: the loop never allocates for samples.
    per[t].lat_ticks.reserve(streams[t].ops.size() / every + 1);
    total_ops += streams[t].ops.size();
  }

  uint64_t deadline_ticks = 0;
  uint64_t (*const deadline_now)() = p.deadline_clock ? p.deadline_clock : &TickClock::Now;
  std::barrier start(static_cast<ptrdiff_t>(nthreads + 1), []() noexcept {});

  auto worker = [&](size_t t) {
    const Stream& s = streams[t];
    PerThread& me = per[t];
    const bool timed_run = p.duration_s > 0;
    start.arrive_and_wait();
    const uint64_t deadline = deadline_ticks;
    std::optional<SplitFreeCounter> split;
    if (split_counters) split.emplace();
    size_t i = 0;
    for (; i < s.ops.size(); i++) {
      if (timed_run && (i & 63) == 0 && deadline_now() >= deadline) break;
      const Op& op = s.ops[i];
      const std::string_view bkey = op.bytes_len ? s.BytesKey(op) : std::string_view();
      counters::BeginOperation();
      const bool sample = i % every == 0;
      const uint64_t t0 = sample ? TickClock::Now() : 0;
      Status err;
      const bool ok = ExecuteOp(target, op, bkey, i, p.scan_length, &err);
      if (sample) me.lat_ticks.push_back(TickClock::Now() - t0);
      if (!err.ok()) {
        me.error = std::string(OpName(op.type)) + " failed: " + err.ToString();
        break;
      }
      const int ty = static_cast<int>(op.type);
      me.done[ty]++;
      me.succeeded[ty] += ok;
      if (split) split->After(&me.no_alloc[ty]);
      progress[t].ops.store(i + 1, std::memory_order_relaxed);
    }
    me.ops = i;
    progress[t].ops.store(i, std::memory_order_relaxed);
  };

  std::vector<std::thread> threads;
  threads.reserve(nthreads);
  for (size_t t = 0; t < nthreads; t++) threads.emplace_back(worker, t);

  RunResult res;
  PersistCounters before = counters::Snapshot();
  const uint64_t t_begin = TickClock::Now();
  deadline_ticks = p.duration_s > 0 ? deadline_now() + clock.FromNs(p.duration_s * 1e9) : UINT64_MAX;
  start.arrive_and_wait();  // release the workers

  // Monitor: the throughput series and progress lines, until every worker is done.
  std::vector<uint64_t> cumulative;
  std::atomic<size_t> finished{0};
  std::thread monitor(MonitorRun, std::cref(p), std::cref(progress), std::cref(finished), t_begin, total_ops,
                      &cumulative);
  for (auto& th : threads) {
    th.join();
    finished.fetch_add(1, std::memory_order_release);
  }
  const uint64_t t_end = TickClock::Now();
  monitor.join();
  res.counters = counters::Snapshot() - before;
  res.seconds = clock.ToNs(t_end - t_begin) / 1e9;
  MergeRun(per, cumulative, p.window_ms, &res);
  return res;
}

// ---- measurements -------------------------------------------------------------------

namespace {

struct Opened {
  std::unique_ptr<Target> target;
  Status status;
};

// Decides whether a new pool for tree `name` may be made at `path`: yes when
// nothing is there; with --reuse-pool also when a pmtree pool of the same
// tree is there (a pool an earlier run kept), which Pool::Create then
// replaces.  Anything else is refused: the bench never overwrites or deletes
// a file it did not create.  Sets *replace when an old pool is replaced.
Status CheckNewPoolPath(const BenchConfig& c, const std::string& path, const std::string& name, bool* replace) {
  *replace = false;
  struct stat st;
  const std::string sidecar = path + ".bench.json";  // written by --keep-pool runs
  if (c.keep_pool && !c.reuse_pool && lstat(sidecar.c_str(), &st) == 0)
    return Status::Busy(sidecar + " already exists; the bench never overwrites a file it did not create: remove "
                                  "it, choose another --pool, or pass --reuse-pool");
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IoError(path + ": " + std::strerror(errno));
  }
  if (!c.reuse_pool)
    return Status::Busy(path + " already exists; the bench never overwrites a file it did not create: remove it, "
                               "choose another --pool, or pass --reuse-pool to replace a pool an earlier run kept");
  PoolOptions peek;
  peek.private_mapping = true;  // read-only: the check changes nothing
  peek.use_env = false;
  peek.counting = false;
  peek.backend = BackendKind::kDram;
  auto p = PoolImpl::Open(path, name, peek);
  if (!p.ok())
    return Status::Busy("--reuse-pool: " + path + " is not a pool of tree '" + name + "' (" +
                        std::string(p.status().message()) + "); refusing to replace it");
  *replace = true;
  return Status::Ok();
}

Opened OpenTarget(const BenchConfig& c, const std::string& name, bool open_existing, uint32_t recovery_threads) {
  Opened o;
  if (const PeerInfo* peer = FindPeer(name)) {
    PeerConfig pc;
    pc.dir = PoolPathFor(c, name);
    pc.map_size = c.pool_size;
    pc.keep = c.keep_pool;
    pc.reuse = c.reuse_pool;
    pc.key_min = c.workload.key_min;
    pc.key_max = c.workload.key_max;
    pc.value_size = c.value_size;
    pc.ycsb = c.kind == WorkloadKind::kYcsb;
    auto r = peer->open(pc);
    if (r.ok()) o.target = std::move(*r); else o.status = r.status();
    return o;
  }
  const TreeFactory* f = FindTree(name);
  TreeTargetConfig tc;
  tc.pool_path = PoolPathFor(c, name);
  tc.pool_size = c.pool_size;
  BackendKind bk;
  FlushInstruction fi;
  (void)ParseBackend(c.backend, &bk, &fi);  // validated
  tc.pool_options.backend = bk;
  tc.pool_options.flush = fi;
  tc.pool_options.write_latency_ns = c.write_latency_ns;
  if (!c.write_profile.empty() && f->persistent()) {
    const uint64_t window = c.profile_window_ops ? c.profile_window_ops : std::max<uint64_t>(1, (c.records + c.ops) / 200);
    tc.pool_options.write_profile = std::make_shared<WriteProfile>(window);
  }
  if (!open_existing && f->persistent()) {
    o.status = CheckNewPoolPath(c, tc.pool_path, name, &tc.pool_options.overwrite);
    if (!o.status.ok()) return o;
  }
  if (c.kind == WorkloadKind::kYcsb) {
    // The KV store with this tree as its engine.
    KvTargetConfig kc;
    kc.engine = name;
    kc.pool_path = tc.pool_path;
    kc.pool_size = c.pool_size;
    kc.pool_options = tc.pool_options;
    kc.pool_options.use_env = true;
    kc.replace = tc.pool_options.overwrite;
    kc.pool_options.overwrite = false;
    kc.tree_options.node_size = c.node_size;
    kc.tree_options.extra = c.extra;
    kc.keep_pool = c.keep_pool;
    auto r = OpenKvTarget(kc);
    if (r.ok()) o.target = std::move(*r); else o.status = r.status();
    return o;
  }
  // A tool: PMTREE_BACKEND / PMTREE_WRITE_LATENCY_NS apply (README, Durability).
  tc.pool_options.use_env = true;
  tc.tree_options.node_size = c.node_size;
  tc.tree_options.extra = c.extra;
  tc.tree_options.recovery_threads = recovery_threads;
  tc.key_min = c.workload.key_min;
  tc.key_max = c.workload.key_max;
  tc.value_size = c.value_size;
  tc.open_existing = open_existing;
  tc.keep_pool = c.keep_pool || open_existing;  // never delete a pool we did not create
  auto r = OpenTreeTarget(*f, tc);
  if (r.ok()) o.target = std::move(*r); else o.status = r.status();
  return o;
}

Measurement BaseRow(const BenchConfig& c, const std::string& name, uint32_t threads, uint32_t rep) {
  Measurement m;
  m.tree = name;
  m.variant = c.variant;
  m.experiment = c.experiment;
  m.workload = c.kind == WorkloadKind::kRecovery ? "recovery"
               : c.kind == WorkloadKind::kYcsb   ? "ycsb-" + c.ycsb
                                                 : "ops";
  m.dist = c.workload.dist.ToString();
  m.mix = c.workload.mix.ToString();
  m.command = c.command;
  m.threads = threads;
  m.rep = rep;
  m.node_size = c.node_size;
  m.write_latency_ns = c.write_latency_ns;
  m.media = MediaLabel(c);
  m.scan_length = c.workload.scan_length;
  m.key_min = c.workload.key_min;
  m.key_max = c.workload.key_max;
  m.value_size = c.kind == WorkloadKind::kYcsb ? kYcsbFields * kYcsbFieldBytes : c.value_size;
  m.records = c.records;
  m.window_ms = c.window_ms;
  m.backend = c.backend;
  return m;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

uint64_t Median(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Writes the profile file and fills the row's wear figures.
Status SaveProfile(const WriteProfile& prof, const std::string& path, ProfileSummary* out) {
  std::ofstream f(path);
  if (!f) return Status::IoError("--write-profile: cannot write " + path);
  prof.WriteJson(f);
  f.close();
  if (!f) return Status::IoError("--write-profile: error writing " + path);
  out->path = path;
  std::vector<uint64_t> w;
  for (const auto& p : prof.Pages()) {
    w.push_back(p.stores);
    out->stores += p.stores;
    out->flushed_lines += p.flushes;
  }
  out->pages = w.size();
  out->page_max = w.empty() ? 0 : *std::max_element(w.begin(), w.end());
  out->page_median = Median(std::move(w));
  w.clear();
  for (const auto& b : prof.Blocks()) w.push_back(b.stores);
  out->blocks = w.size();
  out->block_max = w.empty() ? 0 : *std::max_element(w.begin(), w.end());
  out->block_median = Median(std::move(w));
  uint64_t busy = 0, busy_writes = 0, quiet = 0, quiet_writes = 0;
  for (const auto& win : prof.Series()) {
    if (win.allocations) {
      busy++;
      busy_writes += win.stores;
    } else {
      quiet++;
      quiet_writes += win.stores;
    }
  }
  out->alloc_window_writes = busy ? static_cast<double>(busy_writes) / static_cast<double>(busy) : 0;
  out->quiet_window_writes = quiet ? static_cast<double>(quiet_writes) / static_cast<double>(quiet) : 0;
  return Status::Ok();
}

// The load phase: loads c.records keys into `t` (or, with --skip-load, takes
// the saved pool's records from its sidecar) and returns the sorted keys in
// *keys.  On failure: false with m->error set.
bool LoadPhase(const BenchConfig& c, const std::string& name, Target& t, Measurement* m, std::vector<uint64_t>* keys) {
  const std::string sidecar = PoolPathFor(c, name) + ".bench.json";
  if (c.skip_load) {
    // The sidecar written with --keep-pool says how many records were
    // loaded (the tree's entry count also reflects the run's inserts and
    // removes) and with which key size.
    uint64_t n = t.Stats().entries;
    std::ifstream in(sidecar);
    if (in) {
      nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("records")) n = j["records"].get<uint64_t>();
      if (!j.is_discarded() && j.value("key_min", 0u) != c.workload.key_min) {
        t.Finish().ok();
        m->error = "--skip-load: the saved pool was loaded with another --key-size";
        return false;
      }
    } else if (c.progress) {
      fprintf(stderr, "note: %s: no %s; assuming the %llu entries present are the loaded records\n", name.c_str(),
              sidecar.c_str(), static_cast<unsigned long long>(n));
    }
    m->records = n;
    *keys = SortedLoadKeys(n);
  } else {
    *keys = SortedLoadKeys(c.records);
    auto t0 = std::chrono::steady_clock::now();
    if (c.progress && c.records >= 1000000)
      fprintf(stderr, "  [%s] loading %llu records (%s)...\n", name.c_str(), static_cast<unsigned long long>(c.records),
              c.bulk_load ? "bulk" : "insert");
    if (Status s = t.Load(*keys, c.bulk_load, c.fill); !s.ok()) {
      m->error = "load: " + s.ToString();
      return false;
    }
    m->load_s = Seconds(t0);
    if (c.keep_pool && FindTree(name) && FindTree(name)->persistent()) {
      std::ofstream out(sidecar);
      out << nlohmann::json{{"records", c.records}, {"key_min", c.workload.key_min}, {"key_max", c.workload.key_max}}.dump()
          << "\n";
    }
  }
  return true;
}

// The row's figures from the run: throughput, counts, latency, series and
// persistence costs per operation.
void FillFromRun(RunResult& r, Measurement* m) {
  m->ops = r.ops;
  m->seconds = r.seconds;
  m->throughput_ops_s = r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0;
  m->done = r.done;
  m->succeeded = r.succeeded;
  m->latency = Summarize(&r.latency_ns);
  m->series = std::move(r.series);
  if (r.ops > 0) {
    double n = static_cast<double>(r.ops);
    m->flushes = r.counters.flushes / n;
    m->fences = r.counters.fences / n;
    m->lines = r.counters.lines / n;
    m->blocks256 = r.counters.blocks256 / n;
    m->bytes = r.counters.bytes / n;
    m->nt_stores = r.counters.nt_stores / n;
  }
  if (m->counted) m->no_alloc = r.no_alloc;
}

Measurement RunOne(const BenchConfig& c, const std::string& name, uint32_t threads, uint32_t rep) {
  Measurement m = BaseRow(c, name, threads, rep);
  Opened o = OpenTarget(c, name, c.skip_load, 1);
  if (!o.status.ok()) {
    m.error = o.status.ToString();
    return m;
  }
  Target& t = *o.target;
  m.backend = t.backend();
  m.pool = t.describe();
  m.counted = t.counted();
  if (threads > 1 && !t.concurrent()) {
    t.Finish().ok();
    m.error = name + " is not concurrent (no kCapConcurrent); run it with --threads 1";
    m.expected_fail = true;
    return m;
  }
  std::vector<uint64_t> keys;
  if (!LoadPhase(c, name, t, &m, &keys)) return m;

  // Streams: built here, outside the timed region.
  uint64_t total = c.ops;
  if (c.duration_s > 0 && total == 0) total = 10'000'000;
  uint64_t per_thread = std::max<uint64_t>(1, total / threads);
  Workload w = c.workload;
  w.seed = c.workload.seed + 1000003ull * rep;
  auto streams = BuildStreams(w, keys, threads, per_thread);
  if (!streams.ok()) {
    m.error = streams.status().ToString();
    return m;
  }
  keys.clear();
  keys.shrink_to_fit();

  RunParams p;
  p.duration_s = c.duration_s;
  p.sample_every = static_cast<uint32_t>(std::lround(1.0 / c.latency_sample));
  p.scan_length = c.workload.scan_length;
  p.window_ms = c.window_ms;
  p.progress = c.progress;
  p.label = name;
  RunResult r = RunStreams(t, *streams, p);
  if (c.duration_s > 0 && r.ops == per_thread * threads && c.progress)
    fprintf(stderr, "note: %s: the stream of %llu ops ended before --duration; raise --ops\n", name.c_str(),
            static_cast<unsigned long long>(r.ops));

  FillFromRun(r, &m);
  if (const WriteProfile* prof = t.pool() ? t.pool()->write_profile() : nullptr) {
    const std::string path =
        c.write_profile + "." + name + "-t" + std::to_string(threads) + "-r" + std::to_string(rep) + ".profile.json";
    if (Status s = SaveProfile(*prof, path, &m.profile); !s.ok() && m.error.empty()) m.error = s.ToString();
  }
  if (c.verify)
    if (Status s = t.Verify(); !s.ok()) m.error = "verify after run: " + s.ToString();
  m.stats = t.Stats();
  if (m.error.empty() && !r.error.empty()) m.error = r.error;
  if (Status s = t.Finish(); !s.ok() && m.error.empty()) m.error = "close: " + s.ToString();
  return m;
}

// Recovery: build N keys, close cleanly and time open+recover; then crash
// (destroy without Close) and time open+recover with 1..k rebuild threads.
void RunRecovery(const BenchConfig& c, const std::string& name, uint32_t rep, const Sink& sink) {
  const TreeFactory* f = FindTree(name);
  Measurement base = BaseRow(c, name, 1, rep);
  if (!f || !f->persistent()) {
    base.error = name + " has no recovery (not a persistent tree)";
    base.expected_fail = true;
    sink(base);
    return;
  }
  BenchConfig kc = c;
  kc.keep_pool = true;
  const std::string path = PoolPathFor(c, name);
  Opened o = OpenTarget(kc, name, false, 1);
  if (!o.status.ok()) {
    base.error = o.status.ToString();
    sink(base);
    return;
  }
  base.backend = o.target->backend();
  base.pool = o.target->describe();
  std::vector<uint64_t> keys = SortedLoadKeys(c.records);
  auto t0 = std::chrono::steady_clock::now();
  if (Status s = o.target->Load(keys, c.bulk_load, c.fill); !s.ok()) {
    base.error = "load: " + s.ToString();
    sink(base);
    o.target.reset();
    unlink(path.c_str());
    return;
  }
  base.load_s = Seconds(t0);
  if (Status s = o.target->Finish(); !s.ok()) base.error = "close: " + s.ToString();
  o.target.reset();

  auto reopen = [&](const std::string& kind, uint32_t k) {
    Measurement m = base;
    m.recovery_kind = kind;
    m.recovery_threads = k;
    auto start = std::chrono::steady_clock::now();
    Opened r = OpenTarget(kc, name, true, k);
    m.recovery_ms = Seconds(start) * 1e3;
    if (!r.status.ok()) {
      m.error = "recover: " + r.status.ToString();
      sink(m);
      return false;
    }
    m.stats = r.target->Stats();
    if (m.stats.entries != c.records)
      m.error = "recovered " + std::to_string(m.stats.entries) + " entries, expected " + std::to_string(c.records);
    sink(m);
    r.target->Abandon();  // leave a crash image for the next reopen
    return true;
  };
  // The first reopen sees the clean shutdown; every later one a crash.
  bool ok = reopen("clean", 1);
  uint32_t kmax = c.recovery_threads ? c.recovery_threads : std::max(1u, std::thread::hardware_concurrency());
  if (!(f->capabilities & kCapParallelRecovery)) kmax = 1;
  for (uint32_t k = 1; ok && k <= kmax; k *= 2) ok = reopen("crash", k);
  if (ok && kmax > 1 && (kmax & (kmax - 1))) reopen("crash", kmax);
  if (!c.keep_pool) unlink(path.c_str());
}

void EmitSummary(const std::vector<Measurement>& reps, const Sink& sink) {
  std::vector<double> tput, p99;
  for (const auto& m : reps) {
    if (!m.error.empty()) continue;
    tput.push_back(m.throughput_ops_s);
    p99.push_back(m.latency.p99);
  }
  if (tput.empty()) return;
  Measurement s = reps.front();
  s.summary = true;
  s.rep = UINT32_MAX;
  s.throughput_spread = SpreadOf(tput);
  s.p99_spread = SpreadOf(p99);
  s.throughput_ops_s = s.throughput_spread.median;
  s.series.clear();
  sink(s);
}

void RunTargets(const BenchConfig& c, const Sink& sink) {
  for (const auto& name : c.targets) {
    if (c.kind == WorkloadKind::kRecovery) {
      for (uint32_t rep = 0; rep < c.repeat; rep++) RunRecovery(c, name, rep, sink);
      continue;
    }
    for (uint32_t threads : c.threads) {
      std::vector<Measurement> reps;
      for (uint32_t rep = 0; rep < c.repeat; rep++) {
        reps.push_back(RunOne(c, name, threads, rep));
        sink(reps.back());
        if (reps.back().expected_fail) break;
      }
      if (c.repeat > 1) EmitSummary(reps, sink);
    }
  }
}

}  // namespace

Status RunBench(const BenchConfig& c, const Sink& sink) {
  if (Status s = c.Validate(); !s.ok()) return s;
  if (c.kind == WorkloadKind::kYcsb) {
    // One workload at a time over every target, each on a fresh load.
    for (char letter : c.ycsb) {
      BenchConfig one = c;
      one.ycsb = std::string(1, letter);
      one.workload = YcsbWorkloadFor(letter, c.workload);
      one.kind = WorkloadKind::kYcsb;
      RunTargets(one, sink);
    }
    return Status::Ok();
  }
  RunTargets(c, sink);
  return Status::Ok();
}

}  // namespace pmtree::bench
