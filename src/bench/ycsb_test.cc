// SPDX-License-Identifier: Apache-2.0
//
// The YCSB workloads (ycsb.h): their definitions, the streams built from
// them, every workload on the KV store and on the peers, the store's content
// against a model after load + run, and the cost of a one-field update.

#include "bench/ycsb.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <set>

#include "bench/driver.h"
#include "bench/peers.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree::bench {
namespace {

constexpr int kRead = static_cast<int>(OpType::kRead);
constexpr int kInsert = static_cast<int>(OpType::kInsert);
constexpr int kUpdate = static_cast<int>(OpType::kUpdate);
constexpr int kScan = static_cast<int>(OpType::kScan);
constexpr int kRmw = static_cast<int>(OpType::kRmw);

// The ratios YCSB's workload files give (KV_ECOSYSTEM.md §4.3), per type.
std::array<double, kOpTypes> ExpectedRatios(char letter) {
  std::array<double, kOpTypes> r{};
  switch (letter) {
    case 'a': r[kRead] = 0.5, r[kUpdate] = 0.5; break;
    case 'b': r[kRead] = 0.95, r[kUpdate] = 0.05; break;
    case 'c': r[kRead] = 1; break;
    case 'd': r[kRead] = 0.95, r[kInsert] = 0.05; break;
    case 'e': r[kScan] = 0.95, r[kInsert] = 0.05; break;
    case 'f': r[kRead] = 0.5, r[kRmw] = 0.5; break;
  }
  return r;
}

TEST(YcsbTest, WorkloadListsParseAndBadOnesAreRejected) {
  std::string letters;
  ASSERT_TRUE(*ParseYcsbList("ycsb", &letters));
  EXPECT_EQ(letters, "abcdef");
  ASSERT_TRUE(*ParseYcsbList("ycsb-b,ycsb-D", &letters));
  EXPECT_EQ(letters, "bd");
  EXPECT_FALSE(*ParseYcsbList("ops", &letters));
  EXPECT_FALSE(*ParseYcsbList("recovery", &letters));
  EXPECT_FALSE(ParseYcsbList("ycsb-a,ops", &letters).ok());
  auto bad = ParseYcsbList("ycsb-g", &letters);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ycsb-a .. ycsb-f"), std::string::npos);
}

TEST(YcsbTest, RmwIsAnOperationOfTheMix) {
  auto m = ParseMix("read=0.5,rmw=0.5");
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->ratio[kRmw], 0.5);
  EXPECT_EQ(m->ToString(), "read=0.5,rmw=0.5");
  EXPECT_EQ(OpName(OpType::kRmw), "rmw");
}

TEST(YcsbTest, EveryWorkloadHasYcsbsMixDistributionAndKeys) {
  Workload base;
  base.seed = 7;
  for (const auto& y : YcsbWorkloads()) {
    SCOPED_TRACE(y.letter);
    Workload w = YcsbWorkloadFor(y.letter, base);
    EXPECT_EQ(w.mix.ratio, ExpectedRatios(y.letter));
    EXPECT_EQ(w.dist.kind, y.letter == 'd' ? DistKind::kLatest : DistKind::kZipfian);
    EXPECT_DOUBLE_EQ(w.dist.theta, 0.99);
    EXPECT_TRUE(w.ycsb_keys && w.bytes_keys());
    EXPECT_TRUE(w.scan_length_uniform);
    EXPECT_EQ(w.scan_length, 100u);
    EXPECT_EQ(w.seed, 7u);
  }
}

TEST(YcsbTest, StreamsFollowTheMixAndScanLengthsAreUniformOneToHundred) {
  const auto keys = SortedLoadKeys(1000);
  for (const auto& y : YcsbWorkloads()) {
    SCOPED_TRACE(y.letter);
    const uint64_t n = 20000;
    auto streams = BuildStreams(YcsbWorkloadFor(y.letter, Workload{}), keys, 1, n);
    ASSERT_TRUE(streams.ok());
    const Stream& s = (*streams)[0];
    std::array<uint64_t, kOpTypes> count{};
    uint32_t min_scan = UINT32_MAX, max_scan = 0;
    for (const Op& op : s.ops) {
      count[static_cast<int>(op.type)]++;
      ASSERT_EQ(s.BytesKey(op), "user" + std::to_string(op.key));
      if (op.type == OpType::kScan) {
        min_scan = std::min(min_scan, op.scan_len);
        max_scan = std::max(max_scan, op.scan_len);
      } else {
        EXPECT_EQ(op.scan_len, 0u);
      }
    }
    const auto expect = ExpectedRatios(y.letter);
    for (int k = 0; k < kOpTypes; k++) {
      // Seeded draws: the share is within 1.5 % of the ratio (> 6 standard
      // deviations for n = 20000), and absent types never occur.
      if (expect[k] == 0) {
        EXPECT_EQ(count[k], 0u) << OpName(static_cast<OpType>(k));
      }
      EXPECT_NEAR(static_cast<double>(count[k]) / n, expect[k], 0.015) << OpName(static_cast<OpType>(k));
    }
    if (y.letter == 'e') {
      EXPECT_EQ(min_scan, 1u);
      EXPECT_EQ(max_scan, 100u);
    }
  }
}

TEST(YcsbTest, RecordsEncodeAndDecodeAndAnUpdateChangesOneField) {
  kv::FieldMap rec;
  FillYcsbRecord(42, &rec);
  ASSERT_EQ(rec.size(), kYcsbFields);
  for (uint32_t i = 0; i < kYcsbFields; i++) EXPECT_EQ(rec.at("field" + std::to_string(i)).size(), kYcsbFieldBytes);
  std::string enc;
  EncodeRecord(rec, &enc);
  EXPECT_EQ(enc.size(), YcsbRecordBytes());
  kv::FieldMap back;
  ASSERT_TRUE(DecodeRecord(enc, &back));
  EXPECT_EQ(back, rec);
  EXPECT_FALSE(DecodeRecord(std::string_view(enc).substr(0, enc.size() - 1), &back));
  EXPECT_FALSE(DecodeRecord(std::string_view(enc).substr(0, 3), &back));
  // Updates spread over every field.
  std::set<uint32_t> fields;
  for (uint64_t v = 0; v < 200; v++) fields.insert(YcsbUpdateField(v));
  EXPECT_EQ(fields.size(), kYcsbFields);
  // Records of different values differ in every field.
  kv::FieldMap other;
  FillYcsbRecord(43, &other);
  for (uint32_t i = 0; i < kYcsbFields; i++) EXPECT_NE(other.at(YcsbFieldName(i)), rec.at(YcsbFieldName(i)));
}

// The first persistent tree with byte-string keys: a KV-store engine.
const TreeFactory* KvEngine(std::string_view preferred = "lbtree") {
  if (const TreeFactory* f = FindTree(preferred); f && f->persistent() && (f->capabilities & kCapBytesKeys)) return f;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && (f.capabilities & kCapBytesKeys)) return &f;
  return nullptr;
}

TEST(YcsbTest, EveryWorkloadRunsOnTheKvStoreAndOnAPeerWithTheWorkloadsOpCounts) {
  const TreeFactory* engine = KvEngine();
  if (!engine) GTEST_SKIP() << "no persistent tree with byte-string keys registered";
  BenchConfig c;
  c.kind = WorkloadKind::kYcsb;
  c.ycsb = "abcdef";
  c.targets = {std::string(engine->name), "lmdb-nosync"};
  c.records = 300;
  c.ops = 400;
  c.pool_size = 64ull << 20;
  c.progress = false;
  c.verify = true;
  c.pool_path = testutil::TempPoolPath("ycsb");
  std::vector<Measurement> rows;
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
  ASSERT_EQ(rows.size(), 12u);
  for (size_t i = 0; i < rows.size(); i++) {
    const Measurement& m = rows[i];
    const char letter = "abcdef"[i / 2];
    SCOPED_TRACE(m.tree + " " + m.workload);
    EXPECT_EQ(m.error, "");
    EXPECT_EQ(m.workload, std::string("ycsb-") + letter);
    EXPECT_EQ(m.tree, i % 2 ? "lmdb-nosync" : std::string(engine->name));
    EXPECT_EQ(m.counted, i % 2 == 0);  // the store counts its pool's flushes; the peer has none
    EXPECT_EQ(m.ops, 400u);
    uint64_t sum = 0;
    const auto expect = ExpectedRatios(letter);
    for (int k = 0; k < kOpTypes; k++) {
      sum += m.done[k];
      if (expect[k] == 0) {
        EXPECT_EQ(m.done[k], 0u) << OpName(static_cast<OpType>(k));
      }
      // Every key a read, update, rmw or scan names exists (one thread: the
      // latest inserts are written before they are read), and inserts are new.
      EXPECT_EQ(m.succeeded[k], m.done[k]) << OpName(static_cast<OpType>(k));
    }
    EXPECT_EQ(sum, m.ops);
    if (letter != 'c') {
      EXPECT_GT(m.done[kUpdate] + m.done[kInsert] + m.done[kRmw], 0u);
    }
    // Writes cost flushes on the store; a read-only run costs none.
    if (m.counted && letter == 'c') {
      EXPECT_EQ(m.flushes, 0);
    } else if (m.counted) {
      EXPECT_GT(m.flushes, 0);
    }
    EXPECT_GE(m.stats.entries, c.records);
  }
  // Nothing left behind.
  EXPECT_NE(access(PoolPathFor(c, std::string(engine->name)).c_str(), F_OK), 0);
  EXPECT_NE(access(PoolPathFor(c, "lmdb-nosync").c_str(), F_OK), 0);
}

TEST(YcsbTest, TwoThreadsRunUpdatesAndScansOnTheStoreAndAPeerAndTheStoreVerifies) {
  const TreeFactory* engine = KvEngine();
  if (!engine) GTEST_SKIP() << "no persistent tree with byte-string keys registered";
  BenchConfig c;
  c.kind = WorkloadKind::kYcsb;
  c.ycsb = "ae";
  c.targets = {std::string(engine->name), "bdb-nosync"};
  c.records = 300;
  c.ops = 600;
  c.threads = {2};
  c.pool_size = 64ull << 20;
  c.progress = false;
  c.verify = true;  // the store's Verify(): tree, records, no leaked bytes
  c.pool_path = testutil::TempPoolPath("ycsb-mt");
  std::vector<Measurement> rows;
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
  ASSERT_EQ(rows.size(), 4u);
  for (const Measurement& m : rows) {
    SCOPED_TRACE(m.tree + " " + m.workload);
    EXPECT_EQ(m.error, "");
    EXPECT_EQ(m.threads, 2u);
    EXPECT_EQ(m.ops, 600u);
    uint64_t sum = 0;
    for (int k = 0; k < kOpTypes; k++) {
      sum += m.done[k];
      // Loaded keys are never removed: every read, update and scan finds its key.
      if (k != kInsert) {
        EXPECT_EQ(m.succeeded[k], m.done[k]) << OpName(static_cast<OpType>(k));
      }
    }
    EXPECT_EQ(sum, 600u);
  }
}

// Applies a single-threaded stream to a model of the records, as the
// driver's loop gives values to operations (driver.cc: insert ValueFor(key),
// update and rmw ValueFor(key) + the op's index).
void ApplyToModel(const Stream& s, std::map<uint64_t, kv::FieldMap>* model) {
  for (size_t i = 0; i < s.ops.size(); i++) {
    const Op& op = s.ops[i];
    if (op.type == OpType::kInsert) {
      FillYcsbRecord(ValueFor(op.key), &(*model)[op.key]);
    } else if (op.type == OpType::kUpdate || op.type == OpType::kRmw) {
      auto it = model->find(op.key);
      ASSERT_NE(it, model->end());
      const uint64_t v = ValueFor(op.key) + i;
      const uint32_t f = YcsbUpdateField(v);
      FillYcsbField(v, f, &it->second[YcsbFieldName(f)]);
    }
  }
}

struct Opened {
  std::string name;
  std::unique_ptr<Target> target;
};

std::vector<Opened> RecordTargets(const std::string& stem) {
  std::vector<Opened> out;
  if (const TreeFactory* engine = KvEngine()) {
    KvTargetConfig kc;
    kc.engine = std::string(engine->name);
    kc.pool_path = stem + "-kv.pool";
    kc.pool_size = 64ull << 20;
    auto t = OpenKvTarget(kc);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (t.ok()) out.push_back({"kv/" + kc.engine, std::move(*t)});
  }
  for (const char* peer : {"lmdb-nosync", "bdb-nosync", "rocksdb-nosync"}) {
    if (!FindPeer(peer)) continue;  // rocksdb: only when the build found it
    PeerConfig pc;
    pc.dir = stem + "-" + peer + ".d";
    pc.map_size = 64ull << 20;
    pc.ycsb = true;
    auto t = FindPeer(peer)->open(pc);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (t.ok()) out.push_back({peer, std::move(*t)});
  }
  return out;
}

TEST(YcsbTest, ContentAfterLoadAndRunMatchesTheModelOnTheStoreAndThePeers) {
  const auto keys = SortedLoadKeys(200);
  const std::string stem = "/dev/shm/pmtree-ycsb-model-" + std::to_string(getpid());
  for (char letter : std::string("adf")) {
    SCOPED_TRACE(letter);
    auto streams = BuildStreams(YcsbWorkloadFor(letter, Workload{}), keys, 1, 600);
    ASSERT_TRUE(streams.ok());
    std::map<uint64_t, kv::FieldMap> model;
    for (uint64_t k : keys) FillYcsbRecord(ValueFor(k), &model[k]);
    ApplyToModel((*streams)[0], &model);
    for (Opened& o : RecordTargets(stem)) {
      SCOPED_TRACE(o.name);
      Target& t = *o.target;
      ASSERT_TRUE(t.Load(keys, false, 1).ok());
      RunParams p;
      RunResult r = RunStreams(t, *streams, p);
      EXPECT_EQ(r.error, "");
      EXPECT_EQ(r.ops, 600u);
      EXPECT_TRUE(t.Verify().ok());
      EXPECT_EQ(t.Stats().entries, model.size());
      size_t changed = 0;
      for (const auto& [key, fields] : model) {
        std::string bkey, got, want;
        AppendYcsbKey(key, &bkey);
        ASSERT_TRUE(t.LookupBytes(key, bkey, &got)) << bkey;
        EncodeRecord(fields, &want);
        ASSERT_TRUE(got == want) << bkey << ": the stored record differs from the model's";
        kv::FieldMap loaded;
        FillYcsbRecord(ValueFor(key), &loaded);
        changed += fields != loaded;
      }
      // The run did change records (the check above is not vacuous).
      if (letter != 'd') {
        EXPECT_GT(changed, 0u);
      }
      EXPECT_TRUE(t.Finish().ok());
    }
  }
}

TEST(YcsbTest, OneFieldUpdateOnTheStoreWritesFarFewerLinesThanPuttingTheWholeRecord) {
  const TreeFactory* engine = KvEngine("lbtree");
  if (!engine) GTEST_SKIP() << "no persistent tree with byte-string keys registered";
  KvTargetConfig kc;
  kc.engine = std::string(engine->name);  // anonymous pool, counting on
  kc.pool_size = 64ull << 20;
  auto t = OpenKvTarget(kc);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto keys = SortedLoadKeys(500);
  ASSERT_TRUE((*t)->Load(keys, false, 1).ok());
  PersistCounters update_sum, put_sum;
  const int n = 100;
  for (int i = 0; i < n; i++) {
    const uint64_t key = keys[(i * 37) % keys.size()];
    std::string bkey;
    AppendYcsbKey(key, &bkey);
    counters::BeginOperation();
    PersistCounters before = counters::ThisThread();
    ASSERT_TRUE(*(*t)->Update(key, bkey, 1000 + i));  // UpdateFields of one 100 B field
    PersistCounters mid = counters::ThisThread();
    counters::BeginOperation();
    ASSERT_TRUE(*(*t)->Insert(key, bkey, 1000 + i));  // PutFields of all 10 fields (a replace)
    PersistCounters after = counters::ThisThread();
    update_sum += mid - before;
    put_sum += after - mid;
  }
  const double update_lines = static_cast<double>(update_sum.lines) / n;
  const double put_lines = static_cast<double>(put_sum.lines) / n;
  // The whole record is 10 x 100 B = 1000 B, at least 16 lines; one field is
  // 100 B (2 lines) plus the new version's field table (32 + 8 x 10 B).
  EXPECT_GE(put_lines, 16);
  EXPECT_LE(update_lines, 8);
  EXPECT_LT(3 * update_lines, put_lines) << "update " << update_lines << " lines, put " << put_lines;
  EXPECT_GT(update_lines, 0);
  EXPECT_TRUE((*t)->Verify().ok());
  EXPECT_TRUE((*t)->Finish().ok());
}

}  // namespace
}  // namespace pmtree::bench
