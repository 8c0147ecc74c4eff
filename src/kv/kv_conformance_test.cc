// SPDX-License-Identifier: Apache-2.0
//
// The store's conformance suite: every persistent tree of the registry as
// the engine, against a std::map model with a copy per live snapshot.
// Random puts (0 B - 1 MiB), gets, deletes, field puts/updates/reads,
// snapshots read and iterated against the model's past states, batches,
// transactions with and without a conflicting writer, Verify() along the
// way, then close/reopen and crash/recover round trips.
//
// Seeded; a failure prints the seed and PMTREE_SEED=<n> replays it.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_test_util.h"

namespace pmtree::kv {
namespace {

using Model = KvModel;

// Compares every key the store shows in [lo, hi) at `snap` with the model.
void ExpectRange(Store& s, const Model& m, const Snapshot* snap, const std::string& lo,
                 const std::optional<std::string>& hi) {
  IteratorOptions io;
  io.snapshot = snap;
  io.upper_bound = hi;
  auto it = s.NewIterator(io);
  auto mi = m.lower_bound(lo);
  for (it->Seek(lo); it->Valid(); it->Next(), ++mi) {
    ASSERT_TRUE(mi != m.end() && (!hi || mi->first < *hi)) << "store has extra key " << it->key();
    ASSERT_EQ(it->key(), mi->first);
    ModelValue got{it->is_fields(), std::string(it->value()), it->fields()};
    ASSERT_TRUE(got == mi->second) << "key " << mi->first;
  }
  ASSERT_TRUE(it->status().ok()) << it->status().ToString();
  ASSERT_TRUE(mi == m.end() || (hi && mi->first >= *hi)) << "store misses key " << mi->first;
}

void ExpectKey(Store& s, const Model& m, const std::string& key, const Snapshot* snap) {
  auto mi = m.find(key);
  ReadOptions ro{snap};
  // GetView answers as Get, with the bytes in place, and calls fn only for
  // a plain value.
  int calls = 0;
  std::string viewed;
  auto view = s.GetView(
      key,
      [&](std::string_view v) {
        calls++;
        viewed = v;
      },
      ro);
  // GetFieldsView answers as GetFields of all fields, in name order.
  int field_calls = 0;
  FieldMap field_viewed;
  std::vector<std::string> order;
  auto fields_view = s.GetFieldsView(
      key,
      [&](std::span<const FieldView> f) {
        field_calls++;
        for (const auto& [n, v] : f) {
          field_viewed.emplace(n, v);
          order.emplace_back(n);
        }
      },
      ro);
  ASSERT_TRUE(std::is_sorted(order.begin(), order.end())) << key;
  ASSERT_EQ(order.size(), field_viewed.size()) << key;  // no name twice
  if (mi == m.end() || !mi->second.is_fields) {
    std::string v;
    auto r = s.Get(key, &v, ro);
    if (mi != m.end() || r.ok()) {
      ASSERT_TRUE(r.ok()) << key << ": " << r.status().ToString();
      ASSERT_EQ(*r, mi != m.end()) << key;
      if (*r) {
        ASSERT_EQ(v, mi->second.value) << key;
      }
    }
    ASSERT_EQ(field_calls, 0) << key;
    if (mi != m.end()) {
      ASSERT_EQ(fields_view.status().code(), Status::Code::kInvalidArgument) << key;  // a plain value
    } else if (fields_view.ok()) {
      ASSERT_FALSE(*fields_view) << key;
    }
    ASSERT_EQ(view.ok(), r.ok()) << key;
    if (r.ok()) {
      ASSERT_EQ(*view, *r) << key;
      ASSERT_EQ(calls, *r ? 1 : 0) << key;
      if (*r) {
        ASSERT_EQ(viewed, v) << key;
      }
    }
  } else {
    FieldMap f;
    auto r = s.GetFields(key, {}, &f, ro);
    ASSERT_TRUE(r.ok() && *r) << key;
    ASSERT_EQ(f, mi->second.fields) << key;
    ASSERT_EQ(view.status().code(), Status::Code::kInvalidArgument) << key;  // a field record
    ASSERT_EQ(calls, 0) << key;
    ASSERT_TRUE(fields_view.ok() && *fields_view) << key;
    ASSERT_EQ(field_calls, 1) << key;
    ASSERT_EQ(field_viewed, mi->second.fields) << key;
  }
}

class KvConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    seed_ = TestSeed();
    rng_.seed(seed_);
  }
  std::string RandomKey() { return Key(static_cast<int>(rng_() % 150)); }
  std::string RandomValue() {
    uint64_t r = rng_() % 1000;
    uint64_t n = r < 700 ? rng_() % 200 : r < 997 ? rng_() % 8192 : (1u << 20) - rng_() % 64;
    return Bytes(n, rng_());
  }
  FieldMap RandomFields() {
    FieldMap f;
    for (int i = 0, n = 1 + rng_() % 5; i < n; i++) f["f" + std::to_string(rng_() % 10)] = Bytes(rng_() % 300, rng_());
    return f;
  }
  void Step(Store& s, Model& m);
  void Transact(Store& s, Model& m);

  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<std::pair<const Snapshot*, Model>> snaps_;
};

void KvConformanceTest::Transact(Store& s, Model& m) {
  auto t = s.BeginTransaction();
  std::map<std::string, std::optional<std::string>> writes;
  for (int i = 0, n = 1 + rng_() % 4; i < n; i++) {
    std::string k = RandomKey();
    auto mi = m.find(k);
    if (auto w = writes.find(k); w != writes.end()) {
      std::string v;
      auto r = t->Get(k, &v);
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(*r, w->second.has_value());  // its own write
      if (*r) {
        ASSERT_EQ(v, *w->second);
      }
    } else if (mi == m.end() || !mi->second.is_fields) {
      std::string v;
      auto r = t->Get(k, &v);
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(*r, mi != m.end());
    }
    if (rng_() % 4 == 0) {
      ASSERT_TRUE(t->Delete(k).ok());
      writes[k] = std::nullopt;
    } else {
      std::string v = Bytes(rng_() % 500, rng_());
      ASSERT_TRUE(t->Put(k, v).ok());
      writes[k] = v;
    }
  }
  const bool conflict = rng_() % 2 == 0;
  if (conflict) {
    const std::string& k = writes.begin()->first;
    ASSERT_TRUE(s.Put(k, "interloper").ok());
    m[k] = ModelValue{false, "interloper", {}};
  }
  Status c = t->Commit();
  if (conflict) {
    ASSERT_EQ(c.code(), Status::Code::kBusy) << c.ToString();
    return;
  }
  ASSERT_TRUE(c.ok()) << c.ToString();
  for (auto& [k, v] : writes) {
    if (v)
      m[k] = ModelValue{false, *v, {}};
    else
      m.erase(k);
  }
}

void KvConformanceTest::Step(Store& s, Model& m) {
  const int op = rng_() % 100;
  if (op < 28) {
    std::string k = RandomKey(), v = RandomValue();
    ASSERT_TRUE(s.Put(k, v).ok());
    m[k] = ModelValue{false, v, {}};
  } else if (op < 42) {
    ASSERT_NO_FATAL_FAILURE(ExpectKey(s, m, RandomKey(), nullptr));
  } else if (op < 52) {
    std::string k = RandomKey();
    auto r = s.Delete(k);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, m.erase(k) == 1) << k;
  } else if (op < 60) {
    std::string k = RandomKey();
    FieldMap f = RandomFields();
    ASSERT_TRUE(s.PutFields(k, f).ok());
    m[k] = ModelValue{true, {}, f};
  } else if (op < 68) {
    std::string k = RandomKey();
    FieldMap f = RandomFields();
    auto r = s.UpdateFields(k, f);
    auto mi = m.find(k);
    if (mi != m.end() && !mi->second.is_fields) {
      ASSERT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    } else {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(*r, mi != m.end());
      if (mi != m.end())
        for (auto& [n, v] : f) mi->second.fields[n] = v;
    }
  } else if (op < 72) {
    if (snaps_.size() < 4) snaps_.emplace_back(s.GetSnapshot(), m);
  } else if (op < 76) {
    if (!snaps_.empty()) {
      size_t i = rng_() % snaps_.size();
      s.ReleaseSnapshot(snaps_[i].first);
      snaps_.erase(snaps_.begin() + i);
    }
  } else if (op < 84) {
    if (!snaps_.empty()) {
      auto& [snap, past] = snaps_[rng_() % snaps_.size()];
      ASSERT_NO_FATAL_FAILURE(ExpectKey(s, past, RandomKey(), snap));
    }
  } else if (op < 87) {
    std::string lo = RandomKey();
    std::optional<std::string> hi;
    if (rng_() % 2) hi = RandomKey();
    if (!snaps_.empty() && rng_() % 2) {
      auto& [snap, past] = snaps_[rng_() % snaps_.size()];
      ASSERT_NO_FATAL_FAILURE(ExpectRange(s, past, snap, lo, hi));
    } else {
      ASSERT_NO_FATAL_FAILURE(ExpectRange(s, m, nullptr, lo, hi));
    }
  } else if (op < 93) {
    WriteBatch b;
    Model next = m;
    for (int i = 0, n = 1 + rng_() % 8; i < n; i++) {
      std::string k = RandomKey();
      if (rng_() % 3 == 0) {
        b.Delete(k);
        next.erase(k);
      } else {
        std::string v = Bytes(rng_() % 1000, rng_());
        b.Put(k, v);
        next[k] = ModelValue{false, v, {}};
      }
    }
    ASSERT_TRUE(s.Write(b).ok());
    m = std::move(next);
  } else {
    Transact(s, m);
  }
}

TEST_P(KvConformanceTest, RandomOperationsMatchTheModelThroughReopenAndCrash) {
  SCOPED_TRACE("seed " + std::to_string(seed_) + " (PMTREE_SEED replays)");
  TempPaths paths;
  const std::string path = paths.Make("store");
  Options o = SmallOptions(GetParam(), 512ull << 20);
  Model m;
  auto opened = Store::Open(path, o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> s = std::move(opened).value();
  for (int i = 0; i < 4000; i++) {
    ASSERT_NO_FATAL_FAILURE(Step(*s, m)) << "op " << i;
    if (i % 300 == 299) {
      for (auto& [snap, past] : snaps_) ExpectRange(*s, past, snap, "", std::nullopt);
      Status v = s->Verify();
      ASSERT_TRUE(v.ok()) << "op " << i << ": " << v.ToString();
    }
  }
  for (auto& [snap, past] : snaps_) s->ReleaseSnapshot(snap);
  snaps_.clear();
  ASSERT_NO_FATAL_FAILURE(ExpectRange(*s, m, nullptr, "", std::nullopt));
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();
  const uint64_t bytes = s->Stats().record_bytes;

  // Close and reopen: same contents, same record bytes.
  ASSERT_TRUE(s->Close().ok());
  s.reset();
  opened = Store::Open(path, o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  s = std::move(opened).value();
  ASSERT_NO_FATAL_FAILURE(ExpectRange(*s, m, nullptr, "", std::nullopt));
  EXPECT_EQ(s->Stats().record_bytes, bytes);
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();

  // More work with a snapshot open, then a crash (no Close): the recovery
  // walk must keep every record and free every old version.
  const Snapshot* snap = s->GetSnapshot();
  for (int i = 0; i < 200; i++) ASSERT_NO_FATAL_FAILURE(Step(*s, m));
  for (auto& [sn, past] : snaps_) s->ReleaseSnapshot(sn);
  snaps_.clear();
  s.reset();
  delete snap;  // the crash ended it (snapshots are DRAM state)
  opened = Store::Open(path, o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  s = std::move(opened).value();
  ASSERT_NO_FATAL_FAILURE(ExpectRange(*s, m, nullptr, "", std::nullopt));
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();
  EXPECT_EQ(s->Stats().versions_kept, 0u);
  ASSERT_TRUE(s->Close().ok());
}

TEST_P(KvConformanceTest, AFullPoolIsOutOfSpaceAndTheStoreStaysUsable) {
  auto s = OpenAnonymous(GetParam(), 2ull << 20);
  ASSERT_NE(s, nullptr);
  Model m;
  Status last;
  int i = 0;
  for (; i < 10000; i++) {
    std::string v = Bytes(4000, i);
    last = i % 3 ? s->Put(Key(i), v) : s->PutFields(Key(i), {{"a", v}});
    if (!last.ok()) break;
    m[Key(i)] = i % 3 ? ModelValue{false, v, {}} : ModelValue{true, {}, {{"a", v}}};
  }
  ASSERT_EQ(last.code(), Status::Code::kOutOfSpace) << last.ToString();
  WriteBatch b;
  b.Put("batch-1", Bytes(100000, 1));
  b.Put("batch-2", Bytes(100000, 2));
  EXPECT_EQ(s->Write(b).code(), Status::Code::kOutOfSpace);  // nothing of it applied
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectRange(*s, m, nullptr, "", std::nullopt));
  for (int j = 0; j < i; j += 2) {
    ASSERT_TRUE(*s->Delete(Key(j)));
    m.erase(Key(j));
  }
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();  // also frees what was retired
  ASSERT_TRUE(s->Put("again", Bytes(4000, 1)).ok());
  m["again"] = ModelValue{false, Bytes(4000, 1), {}};
  ASSERT_NO_FATAL_FAILURE(ExpectRange(*s, m, nullptr, "", std::nullopt));
  ASSERT_TRUE(s->Verify().ok());
}

INSTANTIATE_TEST_SUITE_P(AllEngines, KvConformanceTest, ::testing::ValuesIn(PersistentEngines()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pmtree::kv
