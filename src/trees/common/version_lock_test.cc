// SPDX-License-Identifier: Apache-2.0
#include "trees/common/version_lock.h"

#include <gtest/gtest.h>

#include <mutex>
#include <optional>
#include <shared_mutex>
#include <set>
#include <thread>
#include <vector>

namespace pmtree {
namespace {

TEST(VersionLockTest, EachWriteSectionAdvancesTheVersionByTwo) {
  VersionLock l;
  uint64_t v0 = l.ReadBegin();
  EXPECT_EQ(v0 % 2, 0u);
  l.lock();
  EXPECT_TRUE(l.IsLocked());
  EXPECT_FALSE(l.Validate(v0));
  EXPECT_FALSE(l.try_lock());
  l.unlock();
  EXPECT_FALSE(l.IsLocked());
  EXPECT_EQ(l.ReadBegin(), v0 + 2);
  EXPECT_FALSE(l.Validate(v0));
  EXPECT_TRUE(l.Validate(v0 + 2));
}

TEST(VersionLockTest, TryLockAtSucceedsOnlyWhileTheVersionIsUnchanged) {
  VersionLock l;
  uint64_t v = l.Current();
  l.lock();
  EXPECT_EQ(l.Current(), v + 1);
  EXPECT_FALSE(l.TryLockAt(v));      // a writer holds it
  EXPECT_FALSE(l.TryLockAt(v + 1));  // odd: not a version a reader may hold
  l.unlock();
  EXPECT_FALSE(l.TryLockAt(v));  // a write section completed since v
  EXPECT_FALSE(l.ValidateFenced(v));
  uint64_t v2 = l.Current();
  EXPECT_TRUE(l.ValidateFenced(v2));
  EXPECT_TRUE(l.TryLockAt(v2));
  EXPECT_TRUE(l.IsLocked());
  l.unlock();
  l.Reset();
  EXPECT_EQ(l.Current(), 0u);
}

// Two words written together under the lock: an optimistic reader that
// validates must never see them differ.  Bounded by work (iterations), not time.
TEST(VersionLockTest, ConcurrentReadersNeverSeeATornPair) {
  VersionLock l;
  std::atomic<uint64_t> a{0}, b{0};
  constexpr uint64_t kWrites = 20000;
  std::thread writer([&] {
    for (uint64_t i = 1; i <= kWrites; i++) {
      std::lock_guard<VersionLock> g(l);
      a.store(i, std::memory_order_relaxed);
      b.store(i, std::memory_order_relaxed);
    }
  });
  uint64_t torn = 0, last = 0;
  while (last < kWrites) {
    auto [x, y] = l.ReadStable([&] {
      return std::pair(a.load(std::memory_order_acquire), b.load(std::memory_order_acquire));
    });
    torn += x != y;
    EXPECT_GE(x, last);
    last = x;
  }
  writer.join();
  EXPECT_EQ(torn, 0u);
}

TEST(VersionLockTest, ReadOptimisticRetriesAReadThatSawAnUnfinishedState) {
  VersionLock l;
  int calls = 0;
  int r = l.ReadOptimistic([&]() -> std::optional<int> {
    if (++calls < 3) return std::nullopt;
    return 7;
  });
  EXPECT_EQ(r, 7);
  EXPECT_EQ(calls, 3);
}

// As ConcurrentReadersNeverSeeATornPair, with relaxed loads, and a writer
// that leaves a state readers must reject (count 0) inside its section: a
// returned read is never torn and never the unfinished state.
TEST(VersionLockTest, ReadOptimisticNeverReturnsATornOrUnfinishedRead) {
  VersionLock l;
  std::atomic<uint64_t> count{1}, a{1}, b{1};
  constexpr uint64_t kWrites = 20000;
  std::thread writer([&] {
    for (uint64_t i = 2; i <= kWrites; i++) {
      std::lock_guard<VersionLock> g(l);
      count.store(0, std::memory_order_relaxed);
      a.store(i, std::memory_order_relaxed);
      b.store(i, std::memory_order_relaxed);
      count.store(1, std::memory_order_relaxed);
    }
  });
  uint64_t bad = 0, last = 0;
  while (last < kWrites) {
    auto [x, y] = l.ReadOptimistic([&]() -> std::optional<std::pair<uint64_t, uint64_t>> {
      if (count.load(std::memory_order_relaxed) == 0) return std::nullopt;
      return std::pair(a.load(std::memory_order_relaxed), b.load(std::memory_order_relaxed));
    });
    bad += x != y || x == 0;
    EXPECT_GE(x, last);
    last = x;
  }
  writer.join();
  EXPECT_EQ(bad, 0u);
}

TEST(SpinLockTest, ConcurrentIncrementsUnderTheLockAreNotLost) {
  SpinLock s;
  SharedSpinLock rw;
  uint64_t n = 0, m = 0;
  auto work = [&] {
    for (int i = 0; i < 50000; i++) {
      { std::lock_guard<SpinLock> g(s); n++; }
      { std::lock_guard<SharedSpinLock> g(rw); m++; }
      { std::shared_lock<SharedSpinLock> g(rw); EXPECT_LE(m, 100000u); }
    }
  };
  std::thread t(work);
  work();
  t.join();
  EXPECT_EQ(n, 100000u);
  EXPECT_EQ(m, 100000u);
}

TEST(StripedVersionLocksTest, ConcurrentPairLocksOfSharedStripesDoNotDeadlock) {
  StripedVersionLocks<4> locks;  // few stripes: pairs collide often
  uint64_t counter = 0;
  auto work = [&](uint64_t seed) {
    for (uint64_t i = 0; i < 20000; i++) {
      uint64_t a = 64 * ((seed + i) % 7 + 1), b = 64 * ((seed * 3 + i) % 5 + 1);
      locks.LockPair(a, b);
      // Every holder of (64, b) holds 64's stripe, which guards `counter`.
      locks.UnlockPair(a, b);
      locks.LockPair(64, b);
      counter++;
      locks.UnlockPair(64, b);
    }
  };
  std::thread t(work, 1);
  work(2);
  t.join();
  EXPECT_EQ(counter, 40000u);
}

}  // namespace
}  // namespace pmtree
