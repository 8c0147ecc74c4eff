// SPDX-License-Identifier: Apache-2.0
//
// Threads on one store, for every engine (and, in CI, under ThreadSanitizer:
// the name says Concurrent).  Two threads move money between accounts in
// snapshot-isolation transactions, retrying on conflicts; a reader checks at
// every snapshot, by point reads and by iteration, that the total is
// unchanged (a torn or partial commit would change it); a fourth thread does
// single-key puts, field updates and deletes on its own keys and reads them
// back.  Work-bounded; at the end the totals, the commit count and Verify().

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_test_util.h"

namespace pmtree::kv {
namespace {

constexpr int kAccounts = 16;
constexpr int kStart = 1000;

std::string Account(int i) { return "acct" + std::to_string(100 + i); }

// Takes 50 snapshots while writers run; at each, every key must hold the
// same value (one writer's whole batch or group).  Returns the failures.
int MixedSnapshots(Store& s, const std::vector<std::string>& keys) {
  int errors = 0;
  for (int round = 0; round < 50; round++) {
    const Snapshot* snap = s.GetSnapshot();
    std::string first, v;
    for (size_t i = 0; i < keys.size(); i++) {
      auto r = s.Get(keys[i], &v, {snap});
      if (!r.ok()) errors++;
      const std::string got = r.ok() && *r ? v : std::string("absent");
      if (i == 0) first = got;
      else if (got != first) errors++;
    }
    s.ReleaseSnapshot(snap);
  }
  return errors;
}

class KvConcurrentTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KvConcurrentTest, TransfersKeepTheTotalAtEverySnapshotWhileOthersWrite) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (PMTREE_SEED replays)");
  auto s = OpenAnonymous(GetParam(), 128ull << 20);
  ASSERT_NE(s, nullptr);
  WriteBatch init;
  for (int i = 0; i < kAccounts; i++) init.Put(Account(i), std::to_string(kStart));
  ASSERT_TRUE(s->Write(init).ok());

  constexpr int kTransfers = 600;
  std::atomic<int> errors{0};
  std::atomic<uint64_t> retries{0};
  auto transfer = [&](uint64_t tseed) {
    std::mt19937_64 rng(tseed);
    for (int done = 0; done < kTransfers;) {
      auto t = s->BeginTransaction();
      int a = rng() % kAccounts, b = rng() % kAccounts;
      if (a == b) continue;
      std::string va, vb;
      if (!*t->Get(Account(a), &va) || !*t->Get(Account(b), &vb)) {
        errors++;
        return;
      }
      const int x = rng() % 50;
      (void)t->Put(Account(a), std::to_string(std::stoi(va) - x));
      (void)t->Put(Account(b), std::to_string(std::stoi(vb) + x));
      Status c = t->Commit();
      if (c.ok()) {
        done++;
      } else if (c.code() == Status::Code::kBusy) {
        retries++;
      } else {
        errors++;
        return;
      }
    }
  };
  auto audit = [&] {
    for (int round = 0; round < 200; round++) {
      const Snapshot* snap = s->GetSnapshot();
      long sum = 0;
      for (int i = 0; i < kAccounts; i++) {
        std::string v;
        auto r = s->Get(Account(i), &v, {snap});
        if (!r.ok() || !*r) errors++;
        else sum += std::stol(v);
      }
      long iter_sum = 0;
      int n = 0;
      IteratorOptions io;
      io.snapshot = snap;
      io.upper_bound = "acct~";
      auto it = s->NewIterator(io);
      for (it->Seek("acct"); it->Valid(); it->Next(), n++) iter_sum += std::stol(std::string(it->value()));
      it.reset();
      s->ReleaseSnapshot(snap);
      if (sum != long{kAccounts} * kStart || iter_sum != sum || n != kAccounts) errors++;
    }
  };
  auto other = [&](uint64_t tseed) {
    std::mt19937_64 rng(tseed);
    for (int i = 0; i < 1000; i++) {
      std::string k = "other" + std::to_string(rng() % 20);
      std::string v = Bytes(rng() % 3000, rng());
      switch (rng() % 3) {
        case 0: {
          std::string got;
          if (!s->Put(k, v).ok() || !*s->Get(k, &got) || got != v) errors++;
          break;
        }
        case 1: {
          FieldMap f{{"a", v.substr(0, 100)}, {"b", "x"}};
          FieldMap got;
          if (!s->PutFields(k, f).ok() || !s->UpdateFields(k, {{"b", "y"}}).ok() || !*s->GetFields(k, {"b"}, &got) ||
              got["b"] != "y")
            errors++;
          break;
        }
        default:
          if (!s->Delete(k).ok()) errors++;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(transfer, seed);
  threads.emplace_back(transfer, seed + 1);
  threads.emplace_back(audit);
  threads.emplace_back(other, seed + 2);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);

  long sum = 0;
  for (int i = 0; i < kAccounts; i++) {
    std::string v;
    ASSERT_TRUE(*s->Get(Account(i), &v));
    sum += std::stol(v);
  }
  EXPECT_EQ(sum, long{kAccounts} * kStart);
  EXPECT_EQ(s->Stats().commits, 1u + 2 * kTransfers);
  EXPECT_EQ(s->Stats().conflicts, retries.load());
  EXPECT_EQ(s->Stats().versions_kept, 0u);
  Status v = s->Verify();
  EXPECT_TRUE(v.ok()) << v.ToString();
}

// Batches wider than 64 stripes (each holds every stripe it writes until it
// is installed) racing each other and a reader: every snapshot sees all keys
// of one batch, never a mix.  Also what the TSan run needs to show that the
// stripe locks are not pthread mutexes (its deadlock detector tracks 64).
TEST_P(KvConcurrentTest, WideBatchesConcurrentWithAReaderAreAllOrNothing) {
  auto s = OpenAnonymous(GetParam(), 128ull << 20);
  ASSERT_NE(s, nullptr);
  constexpr int kKeys = 200, kBatches = 25;
  auto key = [](int i) { return "wide" + std::to_string(1000 + i); };
  std::atomic<int> errors{0};
  auto writer = [&](int id) {
    for (int b = 0; b < kBatches; b++) {
      WriteBatch batch;
      const std::string tag = std::to_string(id) + "." + std::to_string(b);
      for (int i = 0; i < kKeys; i++) batch.Put(key(i), tag);
      if (!s->Write(batch).ok()) errors++;
    }
  };
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; i++) keys.push_back(key(i));
  auto reader = [&] { errors += MixedSnapshots(*s, keys); };
  std::vector<std::thread> threads;
  threads.emplace_back(writer, 1);
  threads.emplace_back(writer, 2);
  threads.emplace_back(reader);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(s->Stats().commits, 2u * kBatches);
  Status v = s->Verify();
  EXPECT_TRUE(v.ok()) << v.ToString();
}

// PutMany groups racing each other and wide batches on the same keys (all
// under stripe locks taken in one order: no deadlock), with a reader: a
// group's puts share one timestamp, so every snapshot sees one writer's
// whole group or batch, never a mix.
TEST_P(KvConcurrentTest, PutManyGroupsRacingBatchesAreSeenWholeAtEverySnapshot) {
  auto s = OpenAnonymous(GetParam(), 128ull << 20);
  ASSERT_NE(s, nullptr);
  constexpr int kKeys = 100, kRounds = 25;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; i++) keys.push_back("group" + std::to_string(1000 + i));
  std::atomic<int> errors{0};
  auto grouper = [&](int id) {
    for (int r = 0; r < kRounds; r++) {
      const std::string tag = "g" + std::to_string(id) + "." + std::to_string(r);
      std::vector<std::pair<std::string_view, std::string_view>> puts;
      for (const std::string& k : keys) puts.emplace_back(k, tag);
      size_t applied = 0;
      if (!s->PutMany(puts, &applied).ok() || applied != keys.size()) errors++;
    }
  };
  auto batcher = [&] {
    for (int r = 0; r < kRounds; r++) {
      WriteBatch batch;
      for (const std::string& k : keys) batch.Put(k, "b" + std::to_string(r));
      if (!s->Write(batch).ok()) errors++;
    }
  };
  auto reader = [&] { errors += MixedSnapshots(*s, keys); };
  std::vector<std::thread> threads;
  threads.emplace_back(grouper, 1);
  threads.emplace_back(grouper, 2);
  threads.emplace_back(batcher);
  threads.emplace_back(reader);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(s->Stats().keys, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(s->Stats().versions_kept, 0u);
  Status v = s->Verify();
  EXPECT_TRUE(v.ok()) << v.ToString();
}

INSTANTIATE_TEST_SUITE_P(AllEngines, KvConcurrentTest, ::testing::ValuesIn(PersistentEngines()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pmtree::kv
