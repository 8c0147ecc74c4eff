// SPDX-License-Identifier: Apache-2.0
//
// Publication without waiting (publication.h, K6 in store_impl.h): the ring
// on its own, then the store's deferred visibility -- a deferred write is
// durable and installed on return but visible only after every earlier
// write, an embedded (non-deferred) write is visible on return, and
// unpublished reads see only whole groups.  Writers are held at the
// Options::testing_before_publish hook, so nothing depends on timing.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_test_util.h"
#include "kv/publication.h"
#include "pm/pool_impl.h"

namespace pmtree::kv {
namespace {

TEST(PublicationTest, InOrderInstallsAdvanceTheVisibleTimestampOneByOne) {
  Publication p(7);
  EXPECT_EQ(p.visible(), 7u);
  for (uint64_t ts = 8; ts < 20; ts++) {
    bool advanced;
    EXPECT_EQ(p.Install(ts, &advanced), ts);
    EXPECT_TRUE(advanced);
    EXPECT_TRUE(p.Complete(ts));
  }
  EXPECT_FALSE(p.Complete(20));
}

TEST(PublicationTest, AnOutOfOrderInstallReturnsAtOnceAndTheGapsWriterPublishesBoth) {
  Publication p(10);
  bool advanced;
  // 12 before 11: marked and complete, not visible, and nobody waited.
  EXPECT_EQ(p.Install(12, &advanced), 10u);
  EXPECT_FALSE(advanced);
  EXPECT_TRUE(p.Complete(12));
  EXPECT_FALSE(p.Complete(11));
  EXPECT_EQ(p.Install(14, &advanced), 10u);
  EXPECT_FALSE(advanced);
  // 11 closes the first gap: visible runs over 11 and 12, stops at 13.
  EXPECT_EQ(p.Install(11, &advanced), 12u);
  EXPECT_TRUE(advanced);
  EXPECT_EQ(p.visible(), 12u);
  EXPECT_FALSE(p.Complete(13));
  EXPECT_EQ(p.Install(13, &advanced), 14u);
  EXPECT_EQ(p.visible(), 14u);
}

TEST(PublicationTest, ShuffledWindowsAcrossTheRingsWrapEndFullyVisible) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (PMTREE_SEED replays)");
  std::mt19937_64 rng(seed);
  Publication p(0);
  constexpr uint64_t kWindow = 97;
  const uint64_t total = 3 * Publication::kSlots + 5;
  for (uint64_t base = 1; base <= total; base += kWindow) {
    const uint64_t end = std::min(total, base + kWindow - 1);
    std::vector<uint64_t> ts(end - base + 1);
    std::iota(ts.begin(), ts.end(), base);
    std::shuffle(ts.begin(), ts.end(), rng);
    for (uint64_t t : ts) {
      bool advanced;
      const uint64_t v = p.Install(t, &advanced);
      // Never past a timestamp of this window that is not marked yet.
      for (uint64_t u = base; u <= v && u <= end; u++) ASSERT_TRUE(p.Complete(u)) << u;
    }
    ASSERT_EQ(p.visible(), end);
  }
  EXPECT_FALSE(p.Complete(total + 1));
  EXPECT_FALSE(p.Complete(total + 1 + Publication::kSlots));
}

TEST(PublicationTest, ConcurrentInstallersLeaveNoMarkBehindAndNeverShowAGap) {
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  constexpr uint64_t kTotal = kThreads * kPerThread;
  Publication p(0);
  std::atomic<uint64_t> next{0};
  std::vector<std::atomic<bool>> marked(kTotal + 1);
  std::atomic<bool> done{false};
  std::atomic<int> gaps{0};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      const uint64_t v = p.visible();
      if (v < last) gaps++;
      // K6: every timestamp up to the visible one was marked before it.
      for (uint64_t t = last + 1; t <= v; t++)
        if (!marked[t].load()) gaps++;
      last = std::max(last, v);
    }
  });
  std::vector<std::thread> writers;
  for (int i = 0; i < kThreads; i++)
    writers.emplace_back([&] {
      for (uint64_t n = 0; n < kPerThread; n++) {
        const uint64_t ts = next.fetch_add(1) + 1;
        marked[ts].store(true);
        bool advanced;
        p.Install(ts, &advanced);
      }
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(gaps.load(), 0);
  EXPECT_EQ(p.visible(), kTotal);  // P2: quiescent means fully visible
}

// Holds the first writer that reaches the publish hook until Release().
class Gate {
 public:
  void Hook(uint64_t ts) {
    std::unique_lock<std::mutex> l(mu_);
    arrivals_.push_back(ts);
    cv_.notify_all();
    if (arrivals_.size() == 1) cv_.wait(l, [&] { return released_; });
  }
  void WaitArrivals(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return arrivals_.size() >= n; });
  }
  uint64_t Arrival(size_t i) {
    std::lock_guard<std::mutex> l(mu_);
    return arrivals_.at(i);
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> arrivals_;
  bool released_ = false;
};

std::unique_ptr<Store> OpenWithGate(Gate* gate) {
  Options o = SmallOptions("lbtree");
  o.testing_before_publish = [gate](uint64_t ts) { gate->Hook(ts); };
  auto s = Store::Open("", o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(KvDeferredTest, ADeferredWriteBecomesVisibleOnlyAfterEveryEarlierOne) {
  Gate gate;
  auto s = OpenWithGate(&gate);
  ASSERT_NE(s, nullptr);
  std::atomic<uint64_t> told{0};
  s->DeferVisibility([&](uint64_t v) { told.store(std::max(told.load(), v)); });
  const uint64_t before = s->visible_timestamp();
  std::thread first([&] { EXPECT_TRUE(s->Put("a", "1").ok()); });
  gate.WaitArrivals(1);  // "a" holds the earlier timestamp, installed, unmarked

  ASSERT_TRUE(s->Put("b", "2").ok());  // returns although "a" is held
  const uint64_t ts_b = s->TakeThreadTimestamp();
  EXPECT_EQ(ts_b, gate.Arrival(1));
  EXPECT_GT(ts_b, gate.Arrival(0));
  EXPECT_EQ(s->visible_timestamp(), before);
  std::string v;
  // A plain read does not see "b" yet (K6: "a" is earlier and not visible).
  auto r = s->Get("b", &v);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  // An unpublished read does, and tells the thread to hold its answer.
  r = s->Get("b", &v, {.unpublished = true});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(v, "2");
  EXPECT_EQ(s->TakeThreadTimestamp(), ts_b);
  EXPECT_EQ(s->TakeThreadTimestamp(), 0u);  // taken
  // "a" is not complete: an unpublished read does not return it.
  r = s->Get("a", &v, {.unpublished = true});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(told.load(), 0u);

  gate.Release();
  first.join();
  // "a"'s writer carried the visible timestamp over both, and said so.
  EXPECT_EQ(s->visible_timestamp(), ts_b);
  EXPECT_EQ(told.load(), ts_b);
  r = s->Get("b", &v);
  ASSERT_TRUE(r.ok() && *r);
  r = s->Get("a", &v);
  ASSERT_TRUE(r.ok() && *r);
  s->DeferVisibility(nullptr);
  EXPECT_TRUE(s->Close().ok());
}

TEST(KvDeferredTest, AnEmbeddedWriteIsVisibleWhenItReturns) {
  Gate gate;
  auto s = OpenWithGate(&gate);
  ASSERT_NE(s, nullptr);
  std::thread first([&] { EXPECT_TRUE(s->Put("a", "1").ok()); });
  gate.WaitArrivals(1);
  std::atomic<bool> returned{false};
  std::thread second([&] {
    EXPECT_TRUE(s->Put("b", "2").ok());
    returned = true;
    // Read-your-writes: whatever the other writer does, "b" is visible now.
    std::string v;
    auto r = s->Get("b", &v);
    EXPECT_TRUE(r.ok() && *r);
    EXPECT_GE(s->visible_timestamp(), s->TakeThreadTimestamp());
  });
  gate.WaitArrivals(2);
  for (int i = 0; i < 1000 && !returned.load(); i++) std::this_thread::yield();
  EXPECT_FALSE(returned.load());  // it waits for "a", an earlier timestamp
  gate.Release();
  first.join();
  second.join();
  EXPECT_TRUE(s->Close().ok());
}

TEST(KvDeferredTest, OldVersionsWaitingForAnEarlierWriterAreTrimmedOnceVisible) {
  Gate gate;
  auto s = OpenWithGate(&gate);
  ASSERT_NE(s, nullptr);
  s->DeferVisibility([](uint64_t) {});
  const std::string value(200, 'v');
  std::thread first([&] { EXPECT_TRUE(s->Put("a", value).ok()); });
  gate.WaitArrivals(1);
  ASSERT_TRUE(s->Put("k", value).ok());
  const uint64_t base = s->Stats().record_bytes;
  ASSERT_TRUE(s->Put("k", value).ok());
  const uint64_t version = s->Stats().record_bytes - base;  // kept: plain reads still need the old one
  ASSERT_GT(version, 0u);
  for (int i = 0; i < 28; i++) ASSERT_TRUE(s->Put("k", value).ok());
  EXPECT_EQ(s->Stats().record_bytes, base + 29 * version);  // nothing trimmed below an unpublished head (K4)
  gate.Release();
  first.join();
  // Later writes trim what became visible, a few keys each.
  for (int i = 0; i < 10; i++) ASSERT_TRUE(s->Put("z" + std::to_string(i), "1").ok());
  std::string v;
  auto r = s->Get("k", &v);
  ASSERT_TRUE(r.ok() && *r);
  PoolImpl::Of(s->pool()).epochs().DrainAll();  // quiescent: what was retired is freed now
  const uint64_t after = s->Stats().record_bytes;
  // "k" keeps one version (the 29 kept ones would be 29 * version), plus
  // the ten small "z"s, each smaller than a version of "k".
  EXPECT_LT(after, base + 10 * version);
  EXPECT_EQ(s->Stats().versions_kept, 0u);
  s->DeferVisibility(nullptr);
  EXPECT_TRUE(s->Verify().ok());
  EXPECT_TRUE(s->Close().ok());
}

// Writers commit batches of kGroup keys (one value each, a round number)
// deferred, from several threads, so publication runs out of order.  Reader
// 0 reads a group's first key (the first a batch installs), then its last,
// both unpublished: a raw head read could see a batch's first key before its
// last is installed, a complete read never does, so the last key's round is
// never older than the first's.  Reader 1 reads plainly, last key first:
// the visible timestamp only grows, so the first key is never older.
TEST(KvDeferredConcurrentTest, UnpublishedReadsSeeOnlyWholeGroupsWhileWritersPublishOutOfOrder) {
  auto s = OpenAnonymous("lbtree", 256ull << 20);
  ASSERT_NE(s, nullptr);
  std::atomic<uint64_t> told{0};
  s->DeferVisibility([&](uint64_t v) {
    uint64_t t = told.load();
    while (t < v && !told.compare_exchange_weak(t, v)) {
    }
  });
  constexpr int kWriters = 3;
  constexpr int kGroup = 16;
  constexpr int kRounds = 400;
  auto key = [](int w, int k) { return "g" + std::to_string(w) + "-" + std::to_string(10 + k); };
  std::atomic<int> writers_done{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; w++)
    threads.emplace_back([&, w] {
      for (int round = 1; round <= kRounds; round++) {
        WriteBatch b;
        for (int k = 0; k < kGroup; k++) b.Put(key(w, k), std::to_string(round));
        if (!s->Write(b).ok()) errors++;
        // Every few rounds a single put and a group commit too.
        if (round % 8 == 0 && !s->Put(key(w, kGroup), std::to_string(round)).ok()) errors++;
      }
      writers_done++;
    });
  for (int r = 0; r < 2; r++)
    threads.emplace_back([&, r] {
      std::string v;
      while (writers_done.load() < kWriters) {
        for (int w = 0; w < kWriters; w++) {
          if (r == 1) {
            auto last = s->Get(key(w, kGroup - 1), &v);
            const int z = last.ok() && *last ? std::stoi(v) : 0;
            auto first = s->Get(key(w, 0), &v);
            const int a = first.ok() && *first ? std::stoi(v) : 0;
            if (a < z || !first.ok() || !last.ok()) errors++;
            continue;
          }
          auto first = s->Get(key(w, 0), &v, {.unpublished = true});
          const int a = first.ok() && *first ? std::stoi(v) : 0;
          auto last = s->Get(key(w, kGroup - 1), &v, {.unpublished = true});
          const int z = last.ok() && *last ? std::stoi(v) : 0;
          if (z < a) errors++;
          if (!first.ok() || !last.ok()) errors++;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  // Quiescent: everything is visible (P2; plain reads below) and the
  // listener was told the last advance.
  EXPECT_EQ(told.load(), s->visible_timestamp());
  std::string v;
  for (int w = 0; w < kWriters; w++)
    for (int k = 0; k < kGroup; k++) {
      auto r = s->Get(key(w, k), &v);
      ASSERT_TRUE(r.ok() && *r);
      EXPECT_EQ(v, std::to_string(kRounds));
    }
  s->DeferVisibility(nullptr);
  EXPECT_TRUE(s->Close().ok());
}

}  // namespace
}  // namespace pmtree::kv
