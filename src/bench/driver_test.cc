// SPDX-License-Identifier: Apache-2.0

#include "bench/driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/output.h"
#include "bench/peers.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree::bench {
namespace {

// An in-DRAM target over std::map that records how many random draws
// happened while it executed operations.
class MapTarget final : public Target {
 public:
  std::string label() const override { return "map"; }
  bool concurrent() const override { return true; }
  std::string backend() const override { return "none"; }
  bool counted() const override { return false; }
  bool Lookup(uint64_t key, std::string_view, uint64_t* value) override {
    Touch();
    std::lock_guard g(mu_);
    auto it = m_.find(key);
    if (it == m_.end()) return false;
    *value = it->second;
    return true;
  }
  Result<bool> Insert(uint64_t key, std::string_view, uint64_t value) override {
    Touch();
    std::lock_guard g(mu_);
    return m_.emplace(key, value).second;
  }
  Result<bool> Update(uint64_t key, std::string_view, uint64_t value) override {
    Touch();
    std::lock_guard g(mu_);
    auto it = m_.find(key);
    if (it == m_.end()) return false;
    it->second = value;
    return true;
  }
  Result<bool> Remove(uint64_t key, std::string_view) override {
    Touch();
    std::lock_guard g(mu_);
    return m_.erase(key) > 0;
  }
  size_t Scan(uint64_t key, std::string_view, uint32_t n) override {
    Touch();
    std::lock_guard g(mu_);
    size_t got = 0;
    for (auto it = m_.lower_bound(key); it != m_.end() && got < n; ++it) got++;
    return got;
  }
  Status Load(const std::vector<uint64_t>& sorted, bool, double) override {
    for (uint64_t k : sorted) m_.emplace(k, ValueFor(k));
    return Status::Ok();
  }
  TargetStats Stats() override {
    TargetStats t;
    t.entries = m_.size();
    return t;
  }
  Status Finish() override { return Status::Ok(); }

  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> draws_seen_first{UINT64_MAX};
  std::atomic<uint64_t> draws_seen_last{0};

 private:
  void Touch() {
    calls.fetch_add(1);
    uint64_t d = GeneratorDraws();
    uint64_t cur = draws_seen_first.load();
    while (d < cur && !draws_seen_first.compare_exchange_weak(cur, d)) {
    }
    cur = draws_seen_last.load();
    while (d > cur && !draws_seen_last.compare_exchange_weak(cur, d)) {
    }
  }
  std::mutex mu_;
  std::map<uint64_t, uint64_t> m_;
};

TEST(TimedLoopTest, StreamsAreGeneratedBeforeTheTimedRegion) {
  MapTarget target;
  auto keys = SortedLoadKeys(5000);
  ASSERT_TRUE(target.Load(keys, false, 1).ok());
  Workload w;
  w.mix = *ParseMix("read=0.4,insert=0.2,update=0.2,remove=0.1,scan=0.1");
  w.dist.kind = DistKind::kZipfian;
  auto streams = BuildStreams(w, keys, 2, 5000);
  ASSERT_TRUE(streams.ok());
  const uint64_t draws_before = GeneratorDraws();
  RunParams p;
  p.sample_every = 1;
  RunResult r = RunStreams(target, *streams, p);
  // Not one random draw between the first and the last operation, nor in the
  // whole timed call.
  EXPECT_EQ(GeneratorDraws(), draws_before);
  EXPECT_EQ(target.draws_seen_first.load(), draws_before);
  EXPECT_EQ(target.draws_seen_last.load(), draws_before);
  EXPECT_EQ(target.calls.load(), 10000u);
  EXPECT_EQ(r.ops, 10000u);
  EXPECT_EQ(r.latency_ns.size(), 10000u);
  uint64_t done = 0;
  for (auto d : r.done) done += d;
  EXPECT_EQ(done, 10000u);
  EXPECT_GT(r.succeeded[0], 0u);
  EXPECT_TRUE(r.error.empty());
}

// Loads 100 keys into `target` and builds one stream of 1000 operations of
// the default workload over them.
void LoadHundredKeys(MapTarget& target, std::vector<Stream>* streams) {
  auto keys = SortedLoadKeys(100);
  ASSERT_TRUE(target.Load(keys, false, 1).ok());
  auto built = BuildStreams(Workload{}, keys, 1, 1000);
  ASSERT_TRUE(built.ok());
  *streams = std::move(*built);
}

TEST(TimedLoopTest, SamplesEveryKthOperation) {
  MapTarget target;
  std::vector<Stream> streams;
  ASSERT_NO_FATAL_FAILURE(LoadHundredKeys(target, &streams));
  RunParams p;
  p.sample_every = 10;
  RunResult r = RunStreams(target, streams, p);
  EXPECT_EQ(r.latency_ns.size(), 100u);
  EXPECT_GT(r.seconds, 0);
}

// A deadline clock that advances by a fixed step per read: the run stops
// after a known number of reads whatever the machine's speed.
std::atomic<uint64_t> fake_ticks{0};
std::atomic<uint64_t> fake_step{0};
uint64_t FakeNow() { return fake_ticks.fetch_add(fake_step.load()) + fake_step.load(); }

TEST(TimedLoopTest, TimeBasedRunStopsAtTheDeadline) {
  MapTarget target;
  std::vector<Stream> streams;
  ASSERT_NO_FATAL_FAILURE(LoadHundredKeys(target, &streams));
  RunParams p;
  p.duration_s = 0.05;
  p.deadline_clock = &FakeNow;
  // Read 1 (the start) = s, deadline = s + F with s = F/2 + 1; the loop reads
  // the clock before ops 0, 64, 128...: 2s < s + F, then 3s >= s + F, so it
  // stops before op 64.
  const uint64_t f = TickClock::Get().FromNs(0.05 * 1e9);
  fake_ticks = 0;
  fake_step = f / 2 + 1;
  RunResult r = RunStreams(target, streams, p);
  EXPECT_EQ(r.ops, 64u);
  EXPECT_EQ(target.calls.load(), 64u);
  EXPECT_TRUE(r.error.empty());
}

TEST(TimedLoopTest, RunWithoutDeadlineReadsNoDeadlineClock) {
  MapTarget target;
  std::vector<Stream> streams;
  ASSERT_NO_FATAL_FAILURE(LoadHundredKeys(target, &streams));
  RunParams p;
  p.deadline_clock = &FakeNow;
  fake_ticks = 0;
  fake_step = 1;
  RunResult r = RunStreams(target, streams, p);
  EXPECT_EQ(r.ops, 1000u);
  EXPECT_EQ(fake_ticks.load(), 0u);
}

std::string ShmDir(const char* what) {
  return "/dev/shm/pmtree-bench-test-" + std::to_string(getpid()) + "-" + what;
}

void ExerciseTarget(Target& t) {
  auto keys = SortedLoadKeys(1000);
  ASSERT_TRUE(t.Load(keys, false, 1).ok());
  uint64_t v;
  ASSERT_TRUE(t.Lookup(keys[10], {}, &v));
  EXPECT_EQ(v, ValueFor(keys[10]));
  EXPECT_FALSE(t.Lookup(keys[10] + 1, {}, &v));
  EXPECT_FALSE(*t.Insert(keys[10], {}, 1));
  EXPECT_TRUE(*t.Insert(keys[10] + 1, {}, 7));
  EXPECT_TRUE(*t.Update(keys[10] + 1, {}, 8));
  EXPECT_FALSE(*t.Update(keys[10] + 3, {}, 8));
  ASSERT_TRUE(t.Lookup(keys[10] + 1, {}, &v));
  EXPECT_EQ(v, 8u);
  EXPECT_EQ(t.Scan(keys[0], {}, 20), 20u);
  EXPECT_EQ(t.Scan(keys[995], {}, 20), 5u);
  EXPECT_TRUE(*t.Remove(keys[10] + 1, {}));
  EXPECT_FALSE(*t.Remove(keys[10] + 1, {}));
  EXPECT_EQ(t.Stats().entries, 1000u);
  EXPECT_GT(t.Stats().pm_bytes + t.Stats().dram_bytes, 0u);  // volatile peers report DRAM only
  EXPECT_TRUE(t.Finish().ok());
}

TEST(PeerTest, EveryPeerAnswersLikeAnOrderedMap) {
  for (const PeerInfo& p : Peers()) {
    SCOPED_TRACE(std::string(p.name));
    PeerConfig c;
    c.dir = ShmDir(std::string(p.name).c_str());
    c.map_size = 64 << 20;
    auto t = p.open(c);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->label(), p.name);
    ExerciseTarget(**t);
    t->reset();
    EXPECT_NE(access(c.dir.c_str(), F_OK), 0) << "peer directory left behind";
  }
}

TEST(PeerTest, PeersStoreByteStringKeys) {
  PeerConfig c;
  c.dir = ShmDir("lmdb-bytes");
  c.map_size = 64 << 20;
  c.key_min = 16;
  c.key_max = 16;
  auto t = FindPeer("lmdb")->open(c);
  ASSERT_TRUE(t.ok());
  auto keys = SortedLoadKeys(100);
  ASSERT_TRUE((*t)->Load(keys, true, 1).ok());
  std::string k;
  AppendBytesKey(keys[5], 16, 16, &k);
  uint64_t v;
  EXPECT_TRUE((*t)->Lookup(keys[5], k, &v));
  EXPECT_EQ(v, ValueFor(keys[5]));
  EXPECT_TRUE((*t)->Finish().ok());
}

TEST(OutputTest, JsonRowCarriesEveryRequiredField) {
  Measurement m;
  m.tree = "x";
  m.counted = true;
  m.flushes = 2;
  nlohmann::json j = ToJson(m);
  for (const char* f : {"tree", "threads", "records", "ops", "throughput_ops_s", "latency_ns", "per_op", "backend"})
    EXPECT_TRUE(j.contains(f)) << f;
  for (const char* f : {"p50", "p90", "p99", "p999", "p9999", "max", "geomean"}) EXPECT_TRUE(j["latency_ns"].contains(f)) << f;
  for (const char* f : {"flushes", "fences", "lines", "blocks256", "bytes"}) EXPECT_TRUE(j["per_op"].contains(f)) << f;
  EXPECT_EQ(j["per_op"]["flushes"], 2.0);
  m.mix = "read=0.5,insert=0.5";  // a quoted field with commas
  auto fields = [](const std::string& line) {
    int n = 1;
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) n++;
    }
    return n;
  };
  EXPECT_EQ(fields(ToCsv(m)), fields(CsvHeader()));
}

// ---- over the registry -------------------------------------------------------------

TEST(BenchConfigTest, UnknownTreeIsRejectedListingValidNames) {
  BenchConfig c;
  c.targets = {"nosuchtree"};
  Status s = c.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("volatile"), std::string_view::npos);
  EXPECT_NE(s.message().find("lmdb"), std::string_view::npos);
}

TEST(BenchConfigTest, BadOptionsAreRejectedNamingTheOption) {
  BenchConfig base;
  base.targets = {"volatile"};
  ASSERT_TRUE(base.Validate().ok()) << base.Validate().ToString();
  auto expect_bad = [&](auto mutate, const char* option) {
    BenchConfig c = base;
    mutate(c);
    Status s = c.Validate();
    EXPECT_FALSE(s.ok()) << option;
    EXPECT_NE(s.message().find(option), std::string_view::npos) << s.ToString();
  };
  expect_bad([](BenchConfig& c) { c.backend = "optane"; }, "--backend");
  expect_bad([](BenchConfig& c) { c.fill = 1.5; }, "--fill");
  expect_bad([](BenchConfig& c) { c.threads = {0}; }, "--threads");
  expect_bad([](BenchConfig& c) { c.latency_sample = 0; }, "--latency-sample");
  expect_bad([](BenchConfig& c) { c.ops = 0; }, "--ops");
  expect_bad([](BenchConfig& c) { c.repeat = 0; }, "--repeat");
  expect_bad([](BenchConfig& c) {
    c.workload.dist.kind = DistKind::kZipfian;
    c.workload.dist.theta = -1;
  }, "--theta");
}

TEST(EndToEndTest, VolatileRunPrintsJsonLinesWithEveryRequiredField) {
  BenchConfig c;
  c.targets = {"volatile"};
  c.records = 2000;
  c.ops = 2000;
  c.threads = {1, 2};
  c.repeat = 2;
  c.progress = false;
  c.verify = true;
  c.workload.mix = *ParseMix("read=0.5,insert=0.3,update=0.1,remove=0.05,scan=0.05");
  std::vector<std::string> lines;
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { lines.push_back(ToJson(m).dump()); }).ok());
  ASSERT_GE(lines.size(), 2u);
  for (const std::string& line : lines) {
    nlohmann::json j = nlohmann::json::parse(line);  // throws on invalid JSON
    SCOPED_TRACE(line);
    if (j.contains("error") && j["error"].get<std::string>().find("not concurrent") != std::string::npos) continue;
    EXPECT_FALSE(j.contains("error"));
    for (const char* f : {"tree", "threads", "records", "ops", "throughput_ops_s", "latency_ns", "per_op", "backend"})
      EXPECT_TRUE(j.contains(f)) << f;
    for (const char* f : {"p50", "p90", "p99", "p999", "p9999", "max", "geomean"})
      EXPECT_TRUE(j["latency_ns"].contains(f)) << f;
    for (const char* f : {"flushes", "fences", "lines", "blocks256", "bytes"}) EXPECT_TRUE(j["per_op"].contains(f)) << f;
    EXPECT_EQ(j["tree"], "volatile");
    EXPECT_EQ(j["records"], 2000);
    if (j["rep"] != "summary") {
      EXPECT_GT(j["ops"].get<uint64_t>(), 0u);
    }
    EXPECT_GT(j["throughput_ops_s"].get<double>(), 0);
  }
}

TEST(EndToEndTest, PeersRunInTheSameBenchAsTrees) {
  BenchConfig c;
  c.targets = {"volatile", "lmdb", "bdb-nosync"};
  c.records = 500;
  c.ops = 500;
  c.progress = false;
  c.workload.mix = *ParseMix("insert=1");
  std::vector<Measurement> rows;
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& m : rows) {
    EXPECT_TRUE(m.error.empty()) << m.tree << ": " << m.error;
    EXPECT_EQ(m.done[1], 500u);
    EXPECT_EQ(m.succeeded[1], 500u) << m.tree;
  }
}

}  // namespace
}  // namespace pmtree::bench

namespace pmtree::bench {
namespace {

const TreeFactory* FirstPersistentTree() {
  for (const auto& f : Registry())
    if (f.persistent() && !f.test_only()) return &f;
  return nullptr;
}

// ---- value sizes and the split-free cost ------------------------------------------

// A persistent concurrent tree for the tests below (fastfair when present).
const TreeFactory* ConcurrentPersistentTree() {
  if (const TreeFactory* f = FindTree("fastfair"); f && f->persistent()) return f;
  for (const auto& f : Registry())
    if (f.persistent() && !f.test_only() && (f.capabilities & kCapConcurrent)) return &f;
  return nullptr;
}

// A tree target in an anonymous pool on the counting hardware backend.
std::unique_ptr<Target> AnonTreeTarget(const TreeFactory& f, uint32_t value_size, uint64_t pool_size = 64 << 20) {
  TreeTargetConfig tc;
  tc.pool_size = pool_size;
  tc.pool_options.backend = BackendKind::kHardware;
  tc.pool_options.use_env = false;
  tc.value_size = value_size;
  auto t = OpenTreeTarget(f, tc);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

// Runs every pending epoch callback (no guard is held in these tests).
void Reclaim(PoolImpl* pool) {
  for (int i = 0; i < 4; i++) pool->epochs().Reclaim();
}

TEST(ValueSizeTest, InsertFlushesIncludeTheRecordsFourLinesAndOneFence) {
  const TreeFactory* f = ConcurrentPersistentTree();
  if (!f) GTEST_SKIP() << "no persistent concurrent tree registered";
  auto inline8 = AnonTreeTarget(*f, 8);
  auto rec256 = AnonTreeTarget(*f, 256);
  ASSERT_TRUE(inline8 && rec256);
  auto keys = SortedLoadKeys(2000);
  ASSERT_TRUE(inline8->Load(keys, false, 1).ok());
  ASSERT_TRUE(rec256->Load(keys, false, 1).ok());
  // The same inserts into the same tree shapes: the record adds exactly one
  // flush per line (256 B = 4 lines), one fence and one allocation.
  for (uint64_t i = 0; i < 300; i++) {
    const uint64_t key = keys[(i * 37) % keys.size()] + 1;  // odd: never loaded
    SCOPED_TRACE(key);
    auto measure = [&](Target& t) {
      counters::BeginOperation();
      PersistCounters before = counters::ThisThread();
      EXPECT_TRUE(*t.Insert(key, {}, ValueFor(key)));
      return counters::ThisThread() - before;
    };
    PersistCounters a = measure(*inline8), b = measure(*rec256);
    EXPECT_EQ(b.flushes, a.flushes + 4);
    EXPECT_EQ(b.lines, a.lines + 4);
    EXPECT_EQ(b.fences, a.fences + 1);
    EXPECT_EQ(b.bytes, a.bytes + 256);
    EXPECT_EQ(b.allocations, a.allocations + 1);
  }
  EXPECT_TRUE(inline8->Finish().ok());
  EXPECT_TRUE(rec256->Finish().ok());
}

TEST(ValueSizeTest, LookupsReturnTheRecordBytesWrittenForTreesAndPeers) {
  std::vector<std::unique_ptr<Target>> targets;
  if (const TreeFactory* f = ConcurrentPersistentTree()) targets.push_back(AnonTreeTarget(*f, 256));
  targets.push_back(AnonTreeTarget(*FindTree("volatile"), 256));
  for (const char* peer : {"lmdb", "bdb-nosync", "rocksdb"}) {
    if (!FindPeer(peer)) continue;  // rocksdb: only when the build found it
    PeerConfig c;
    c.dir = ShmDir((std::string("values-") + peer).c_str());
    c.map_size = 64 << 20;
    c.value_size = 256;
    auto t = FindPeer(peer)->open(c);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    targets.push_back(std::move(*t));
  }
  auto keys = SortedLoadKeys(500);
  for (auto& t : targets) {
    ASSERT_TRUE(t);
    SCOPED_TRACE(t->label());
    ASSERT_TRUE(t->Load(keys, false, 1).ok());
    std::string got;
    ASSERT_TRUE(t->LookupBytes(keys[7], {}, &got));
    EXPECT_EQ(got, ValueBytes(ValueFor(keys[7]), 256));
    uint64_t v;
    ASSERT_TRUE(t->Lookup(keys[7], {}, &v));
    EXPECT_EQ(v, ValueFor(keys[7])) << "Lookup returns the record's first 8 bytes";
    EXPECT_TRUE(*t->Update(keys[7], {}, 99));
    ASSERT_TRUE(t->LookupBytes(keys[7], {}, &got));
    EXPECT_EQ(got, ValueBytes(99, 256));
    EXPECT_TRUE(*t->Insert(keys[7] + 1, {}, 1234));
    ASSERT_TRUE(t->LookupBytes(keys[7] + 1, {}, &got));
    EXPECT_EQ(got, ValueBytes(1234, 256));
    EXPECT_FALSE(*t->Insert(keys[7] + 1, {}, 5)) << "present: nothing changes";
    ASSERT_TRUE(t->LookupBytes(keys[7] + 1, {}, &got));
    EXPECT_EQ(got, ValueBytes(1234, 256));
    EXPECT_TRUE(*t->Remove(keys[7], {}));
    EXPECT_FALSE(t->LookupBytes(keys[7], {}, &got));
    EXPECT_FALSE(*t->Update(keys[7], {}, 1));
    EXPECT_EQ(t->Scan(keys[0], {}, 10), 10u);
    EXPECT_TRUE(t->Finish().ok());
  }
}

TEST(ValueSizeTest, UpdatesAndRemovesDoNotLeakPoolSpace) {
  const TreeFactory* f = ConcurrentPersistentTree();
  if (!f) GTEST_SKIP() << "no persistent concurrent tree registered";
  // Twin targets under the same operations: the tree's own space is the same
  // in both, so the difference in the pool's bytes in use is the records.
  auto inline8 = AnonTreeTarget(*f, 8);
  auto rec = AnonTreeTarget(*f, 200);  // 200 B -> 256 B allocations
  ASSERT_TRUE(inline8 && rec);
  auto keys = SortedLoadKeys(3000);
  auto diff = [&] {
    Reclaim(inline8->pool());
    Reclaim(rec->pool());
    return static_cast<int64_t>(rec->pool()->allocator().bytes_in_use()) -
           static_cast<int64_t>(inline8->pool()->allocator().bytes_in_use());
  };
  for (Target* t : {inline8.get(), rec.get()}) ASSERT_TRUE(t->Load(keys, false, 1).ok());
  EXPECT_EQ(diff(), 3000 * 256);
  for (Target* t : {inline8.get(), rec.get()})
    for (uint64_t k : keys) ASSERT_TRUE(*t->Update(k, {}, k + 1));
  EXPECT_EQ(diff(), 3000 * 256) << "every update retires the record it replaced";
  for (Target* t : {inline8.get(), rec.get()})
    for (size_t i = 0; i < keys.size(); i++) ASSERT_TRUE(*t->Remove(keys[(i * 7) % keys.size()], {}));
  EXPECT_EQ(diff(), 0) << "removing every key frees every record";
  EXPECT_EQ(rec->Stats().entries, 0u);
  EXPECT_TRUE(inline8->Finish().ok());
  EXPECT_TRUE(rec->Finish().ok());
}

TEST(ValueSizeTest, RecordThatDoesNotFitIsACleanOutOfSpaceAndTheTreeStaysUsable) {
  const TreeFactory* f = ConcurrentPersistentTree();
  if (!f) GTEST_SKIP() << "no persistent concurrent tree registered";
  auto t = AnonTreeTarget(*f, kMaxValueSize, 8 << 20);
  ASSERT_TRUE(t);
  auto keys = SortedLoadKeys(4);
  ASSERT_TRUE(t->Load(keys, false, 1).ok());
  Result<bool> r = Status::Ok();
  uint64_t k = keys.back() + 1;
  for (int i = 0; i < 16 && r.ok(); i++, k += 2) r = t->Insert(k, {}, k);
  ASSERT_FALSE(r.ok()) << "an 8 MiB pool cannot hold 20 records of 1 MiB";
  EXPECT_EQ(r.status().code(), Status::Code::kOutOfSpace);
  EXPECT_NE(r.status().message().find("--value-size"), std::string_view::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("--pool-size"), std::string_view::npos) << r.status().ToString();
  std::string got;
  EXPECT_TRUE(t->LookupBytes(keys[2], {}, &got));
  EXPECT_EQ(got, ValueBytes(ValueFor(keys[2]), kMaxValueSize));
  EXPECT_TRUE(*t->Remove(keys[2], {}));
  EXPECT_TRUE(t->Finish().ok());
}

TEST(ValueSizeTest, ValueSizeOutsideItsRangeOrWithVerifyIsRejected) {
  BenchConfig base;
  base.targets = {"volatile"};
  for (uint32_t bad : {0u, 7u, kMaxValueSize + 1}) {
    BenchConfig c = base;
    c.value_size = bad;
    Status s = c.Validate();
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--value-size"), std::string_view::npos) << s.ToString();
  }
  BenchConfig c = base;
  c.value_size = kMaxValueSize;
  EXPECT_TRUE(c.Validate().ok());
  c.verify = true;
  EXPECT_NE(c.Validate().message().find("--verify"), std::string_view::npos);
  c.verify = false;
  c.kind = WorkloadKind::kRecovery;
  EXPECT_FALSE(c.Validate().ok());
}

TEST(NoAllocCostTest, SplitFreeInsertsAreAggregatedApartAndRecordsDoNotCountAsTreeAllocations) {
  const TreeFactory* f = ConcurrentPersistentTree();
  if (!f) GTEST_SKIP() << "no persistent concurrent tree registered";
  auto keys = SortedLoadKeys(2000);
  Workload w;
  w.mix = *ParseMix("insert=0.8,read=0.2");
  auto streams = BuildStreams(w, keys, 1, 3000);
  ASSERT_TRUE(streams.ok());
  RunParams p;
  RunResult r8, r256;
  for (auto [size, out] : {std::pair{8u, &r8}, std::pair{256u, &r256}}) {
    auto t = AnonTreeTarget(*f, size);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->Load(keys, false, 1).ok());
    *out = RunStreams(*t, *streams, p);
    ASSERT_TRUE(out->error.empty()) << out->error;
    EXPECT_TRUE(t->Finish().ok());
  }
  const int ins = static_cast<int>(OpType::kInsert), rd = static_cast<int>(OpType::kRead);
  const NoAllocCost& a = r8.no_alloc[ins];
  // 2400 inserts into 2000 keys split some leaves, not most.
  EXPECT_GT(a.ops, r8.done[ins] / 2);
  EXPECT_LT(a.ops, r8.done[ins]);
  EXPECT_EQ(r8.no_alloc[rd].ops, r8.done[rd]) << "a read allocates nothing";
  EXPECT_LE(a.sum.lines, r8.counters.lines);
  EXPECT_EQ(a.sum.allocations, 0u);
  // With 256-byte records every insert allocates one record, yet the same
  // inserts count as split-free, each with the record's 4 lines more.
  const NoAllocCost& b = r256.no_alloc[ins];
  EXPECT_EQ(b.ops, a.ops);
  EXPECT_EQ(b.sum.lines, a.sum.lines + 4 * a.ops);
  EXPECT_EQ(b.sum.allocations, b.ops);
  // A target the counters do not see reports nothing.
  MapTarget map;
  ASSERT_TRUE(map.Load(keys, false, 1).ok());
  RunResult rm = RunStreams(map, *streams, p);
  EXPECT_EQ(rm.no_alloc[ins].ops, 0u);
}

TEST(EndToEndTest, TwoThreadsWithValueRecordsKeepEveryEntryAndReportPerOpNoAlloc) {
  const TreeFactory* f = ConcurrentPersistentTree();
  if (!f) GTEST_SKIP() << "no persistent concurrent tree registered";
  for (uint32_t vs : {8u, 100u}) {
    BenchConfig c;
    c.targets = {std::string(f->name), "volatile"};
    c.records = 3000;
    c.ops = 6000;
    c.threads = {2};
    c.value_size = vs;
    c.progress = false;
    c.pool_size = 64 << 20;
    c.pool_path = testutil::TempPoolPath("2t");
    c.workload.mix = *ParseMix("read=0.4,insert=0.3,update=0.15,remove=0.1,scan=0.05");
    std::vector<Measurement> rows;
    ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
    ASSERT_EQ(rows.size(), 2u);
    for (const Measurement& m : rows) {
      SCOPED_TRACE(m.tree + " value_size " + std::to_string(vs));
      EXPECT_TRUE(m.error.empty()) << m.error;
      EXPECT_EQ(m.ops, 6000u);
      EXPECT_EQ(m.value_size, vs);
      const int ins = static_cast<int>(OpType::kInsert), rm = static_cast<int>(OpType::kRemove);
      EXPECT_EQ(m.stats.entries, 3000 + m.succeeded[ins] - m.succeeded[rm]);
      nlohmann::json j = ToJson(m);
      EXPECT_EQ(j["value_size"], vs);
      if (m.counted) {
        ASSERT_TRUE(j.contains("per_op_no_alloc"));
        EXPECT_GT(j["per_op_no_alloc"]["insert"]["share"].get<double>(), 0);
        EXPECT_GT(j["per_op_no_alloc"]["insert"]["lines"].get<double>(), 0);
      }
    }
  }
}

TEST(RecoveryWorkloadTest, TimesCleanAndCrashRecoveryOfAPersistentTree) {
  const TreeFactory* f = FirstPersistentTree();
  if (!f) GTEST_SKIP() << "no persistent tree registered";
  BenchConfig c;
  c.targets = {std::string(f->name)};
  c.kind = WorkloadKind::kRecovery;
  c.records = 3000;
  c.progress = false;
  c.pool_path = testutil::TempPoolPath("recovery");
  std::vector<Measurement> rows;
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0].recovery_kind, "clean");
  EXPECT_EQ(rows[1].recovery_kind, "crash");
  for (const auto& m : rows) {
    EXPECT_TRUE(m.error.empty()) << m.error;
    EXPECT_GT(m.recovery_ms, 0);
    EXPECT_EQ(m.stats.entries, 3000u);
  }
  EXPECT_NE(access(c.pool_path.c_str(), F_OK), 0) << "pool left behind";
}

TEST(SkipLoadTest, SavedPoolIsReusedWithTheLoadedRecordCount) {
  const TreeFactory* f = FirstPersistentTree();
  if (!f) GTEST_SKIP() << "no persistent tree registered";
  BenchConfig c;
  c.targets = {std::string(f->name)};
  c.records = 2000;
  c.ops = 1000;
  c.progress = false;
  c.keep_pool = true;
  c.pool_path = testutil::TempPoolPath("skip");
  c.workload.mix = *ParseMix("insert=1");
  std::vector<Measurement> rows;
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
  ASSERT_TRUE(rows[0].error.empty()) << rows[0].error;
  c.skip_load = true;
  c.keep_pool = false;
  c.workload.mix = *ParseMix("read=1");
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[1].error.empty()) << rows[1].error;
  EXPECT_EQ(rows[1].records, 2000u);
  EXPECT_EQ(rows[1].succeeded[0], 1000u);  // every read hits a loaded key
  EXPECT_EQ(rows[1].stats.entries, 3000u);
  unlink(c.pool_path.c_str());
  unlink((c.pool_path + ".bench.json").c_str());
}

}  // namespace
}  // namespace pmtree::bench
