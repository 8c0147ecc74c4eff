// SPDX-License-Identifier: Apache-2.0
#include "pmtree/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "pmtree/counters.h"

namespace pmtree {
namespace {

TEST(AllocatorTest, AllocationsAreAlignedDisjointAndCounted) {
  Allocator a(4096, 1 << 20);
  auto x = a.Allocate(100);
  auto y = a.Allocate(256, 256);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(*x % 64, 0u);
  EXPECT_EQ(*y % 256, 0u);
  EXPECT_TRUE(*x + 128 <= *y || *y + 256 <= *x);
  EXPECT_EQ(a.bytes_in_use(), 128u + 256u);
  EXPECT_TRUE(a.CheckConsistency().ok());
}

TEST(AllocatorTest, EverySuccessfulAllocateIsCountedOnTheCallingThread) {
  Allocator a(4096, 4096 + 1024);
  PersistCounters before = counters::ThisThread();
  ASSERT_TRUE(a.Allocate(100).ok());
  ASSERT_TRUE(a.Allocate(64, 256).ok());
  EXPECT_EQ((counters::ThisThread() - before).allocations, 2u);
  // A failed allocation takes no space and is not counted.
  before = counters::ThisThread();
  EXPECT_FALSE(a.Allocate(4096).ok());
  EXPECT_EQ((counters::ThisThread() - before).allocations, 0u);
  // Free and Retire are not allocations; another thread's allocation counts
  // on that thread only.
  auto x = a.Allocate(64);
  ASSERT_TRUE(x.ok());
  before = counters::ThisThread();
  a.Free(*x, 64);
  std::thread t([&] { ASSERT_TRUE(a.Allocate(64).ok()); });
  t.join();
  EXPECT_EQ((counters::ThisThread() - before).allocations, 0u);
}

TEST(AllocatorTest, InjectedFailuresBehaveLikeAFullHeapUntilCleared) {
  Allocator a(4096, 1 << 20);
  a.FailAllocationsAfter(2);
  EXPECT_TRUE(a.Allocate(64).ok());
  EXPECT_FALSE(a.allocation_failed());
  EXPECT_TRUE(a.Allocate(64).ok());
  auto full = a.Allocate(64);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Status::Code::kOutOfSpace);
  EXPECT_TRUE(a.allocation_failed());
  // Sticky, as a full heap is: later allocations fail too; frees still work.
  EXPECT_FALSE(a.Allocate(64).ok());
  EXPECT_EQ(a.bytes_in_use(), 128u);
  a.ClearAllocationFailure();
  EXPECT_TRUE(a.Allocate(64).ok());
  EXPECT_TRUE(a.allocation_failed());  // what happened since FailAllocationsAfter
  a.FailAllocationsAfter(0);
  EXPECT_FALSE(a.allocation_failed());
  EXPECT_FALSE(a.Allocate(64).ok());
  a.ClearAllocationFailure();
  EXPECT_TRUE(a.CheckConsistency().ok());
}

TEST(AllocatorTest, FreeCoalescesBackToOneExtent) {
  Allocator a(4096, 1 << 20);
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (int i = 0; i < 100; i++) {
    uint64_t size = 64 * (1 + i % 7);
    blocks.push_back({*a.Allocate(size), size});
  }
  std::mt19937 rng(7);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (auto [off, size] : blocks) {
    a.Free(off, size);
    ASSERT_TRUE(a.CheckConsistency().ok());
  }
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(a.FreeExtents().size(), 1u);
  EXPECT_TRUE(a.CheckConsistency().ok());
}

// Best fit by default: a freed block is the smallest extent that fits, so
// the next allocation of any smaller size reuses it.  With size classes on
// (PoolOptions::allocator_size_classes) it waits for its own size.
TEST(AllocatorTest, SizeClassesAreOffByDefaultAndKeepAFreedBlockForItsOwnSize) {
  for (bool classes : {false, true}) {
    SCOPED_TRACE(classes ? "size classes" : "best fit");
    Allocator a(4096, 1 << 20);
    a.set_size_classes(classes);
    auto x = a.Allocate(128);
    auto guard = a.Allocate(64);  // keeps x's extent from joining the rest
    ASSERT_TRUE(x.ok() && guard.ok());
    a.Free(*x, 128);
    auto y = a.Allocate(64);
    ASSERT_TRUE(y.ok());
    EXPECT_EQ(*y == *x, !classes);
    EXPECT_EQ(*a.Allocate(128) == *x, classes);
    EXPECT_TRUE(a.CheckConsistency().ok());
  }
}

// SIZE CLASSES (allocator.cc): a freed small block is handed to the next
// allocation of its size at once (last freed first), and its bytes count as
// free while it waits.
TEST(AllocatorTest, AFreedSmallBlockIsReusedByTheNextAllocationOfItsSize) {
  Allocator a(4096, 1 << 20);
  a.set_size_classes(true);
  auto x = a.Allocate(192);
  auto y = a.Allocate(192);
  auto z = a.Allocate(1024);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  const uint64_t free_before = a.bytes_free();
  a.Free(*x, 192);
  a.Free(*y, 192);
  a.Free(*z, 1024);
  EXPECT_EQ(a.bytes_free(), free_before + 192 + 192 + 1024);
  EXPECT_EQ(*a.Allocate(192), *y);
  EXPECT_EQ(*a.Allocate(192), *x);
  EXPECT_EQ(*a.Allocate(1024), *z);
  EXPECT_EQ(a.bytes_free(), free_before);
  EXPECT_TRUE(a.CheckConsistency().ok());
}

// Cached blocks do not coalesce while they wait, so a heap freed in small
// blocks holds no extent for a large request; the allocation then returns
// them to the extents, which coalesce, and succeeds.
TEST(AllocatorTest, ALargeAllocationCoalescesTheCachedSmallBlocks) {
  Allocator a(4096, 4096 + 64 * 256);
  a.set_size_classes(true);
  std::vector<uint64_t> blocks;
  for (Result<uint64_t> b = a.Allocate(64); b.ok(); b = a.Allocate(64)) blocks.push_back(*b);
  ASSERT_EQ(blocks.size(), 256u);
  std::mt19937 rng(11);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (uint64_t off : blocks) a.Free(off, 64);
  EXPECT_EQ(a.bytes_in_use(), 0u);
  auto whole = a.Allocate(64 * 256);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, 4096u);
  a.Free(*whole, 64 * 256);
  EXPECT_EQ(a.FreeExtents().size(), 1u);
  EXPECT_TRUE(a.CheckConsistency().ok());
}

TEST(AllocatorTest, OutOfSpaceIsAStatusAndFreeingMakesRoomAgain) {
  Allocator a(4096, 4096 + 64 * 10);
  std::vector<uint64_t> got;
  for (;;) {
    auto r = a.Allocate(64);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().IsOutOfSpace());
      break;
    }
    got.push_back(*r);
  }
  EXPECT_EQ(got.size(), 10u);
  a.Free(got[3], 64);
  EXPECT_TRUE(a.Allocate(64).ok());
}

TEST(AllocatorTest, RebuildFreesWhatRecoveryDoesNotReach) {
  Allocator a(4096, 1 << 20);
  uint64_t linked = *a.Allocate(512);
  uint64_t orphan = *a.Allocate(512);  // allocated, never linked: a crash window
  (void)orphan;
  a.BeginRebuild();
  ASSERT_TRUE(a.MarkUsed(linked, 512).ok());
  a.EndRebuild();
  EXPECT_EQ(a.bytes_in_use(), 512u);
  EXPECT_TRUE(a.CheckConsistency().ok());
}

TEST(AllocatorTest, MarkUsedRejectsOverlapAsDoubleUse) {
  Allocator a(4096, 1 << 20);
  a.BeginRebuild();
  ASSERT_TRUE(a.MarkUsed(8192, 256).ok());
  Status s = a.MarkUsed(8192 + 128, 64);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("double use"), std::string_view::npos);
  EXPECT_EQ(a.MarkUsed(1 << 21, 64).code(), Status::Code::kCorruption);  // outside the heap
  a.EndRebuild();
}

TEST(AllocatorTest, MarkUsedSortedLeavesTheSameFreeSpaceAsOneMarkUsedPerBlock) {
  const uint64_t begin = 4096, end = 1 << 20;
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (uint64_t off = begin + 1024; off + 512 <= end; off += 3 * 1024) blocks.push_back({off, 512 + off % 7});
  Allocator one(begin, end), batch(begin, end);
  one.BeginRebuild();
  batch.BeginRebuild();
  // A block marked before the batch, between two of the batch's blocks.
  ASSERT_TRUE(one.MarkUsed(begin + 2048 + 512, 256).ok());
  ASSERT_TRUE(batch.MarkUsed(begin + 2048 + 512, 256).ok());
  for (const auto& [off, size] : blocks) ASSERT_TRUE(one.MarkUsed(off, size).ok());
  ASSERT_TRUE(batch.MarkUsedSorted(blocks).ok());
  one.EndRebuild();
  batch.EndRebuild();
  EXPECT_EQ(batch.FreeExtents(), one.FreeExtents());
  EXPECT_EQ(batch.bytes_in_use(), one.bytes_in_use());
  EXPECT_TRUE(batch.CheckConsistency().ok());
}

TEST(AllocatorTest, MarkUsedSortedRejectsDisorderAndDoubleUse) {
  Allocator a(4096, 1 << 20);
  a.BeginRebuild();
  EXPECT_EQ(a.MarkUsedSorted({{16384, 256}, {8192, 256}}).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(a.MarkUsedSorted({{32768, 256}, {32768, 256}}).code(), Status::Code::kCorruption);
  ASSERT_TRUE(a.MarkUsed(65536, 256).ok());
  Status s = a.MarkUsedSorted({{65536 - 256, 512}});  // overlaps the block marked before
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("double use"), std::string_view::npos);
  a.EndRebuild();
  EXPECT_EQ(a.MarkUsedSorted({{8192, 256}}).code(), Status::Code::kInternal);  // outside a rebuild
}

// A sorted batch above every block marked so far is appended without a
// tree node per block; blocks marked after it, in any order and between its
// blocks, are checked against it and leave the same free space as one
// MarkUsed per block.
TEST(AllocatorTest, MarkUsedSortedAboveEverythingMarkedKeepsTheChecksAndTheFreeSpace) {
  const uint64_t begin = 4096, end = 1 << 20;
  std::vector<std::pair<uint64_t, uint64_t>> first, second;
  for (uint64_t off = begin + 64 * 1024; off + 512 <= end; off += 2 * 1024) first.push_back({off, 512 + off % 5});
  for (uint64_t off = begin + 64 * 1024 + 1024; off + 2048 <= end; off += 8 * 1024) second.push_back({off, 256});
  Allocator one(begin, end), batch(begin, end);
  one.BeginRebuild();
  batch.BeginRebuild();
  ASSERT_TRUE(one.MarkUsed(begin, 64).ok());
  ASSERT_TRUE(batch.MarkUsed(begin, 64).ok());
  for (const auto& [off, size] : first) ASSERT_TRUE(one.MarkUsed(off, size).ok());
  ASSERT_TRUE(batch.MarkUsedSorted(first).ok());  // above the block at `begin`: appended
  // Overlaps with the appended blocks are double uses, by MarkUsed or by a
  // later batch that does not start above them.
  Status s = batch.MarkUsed(first[3].first + 64, 64);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("overlaps the block at offset " + std::to_string(first[3].first)), std::string::npos)
      << s.message();
  EXPECT_EQ(batch.MarkUsed(first[3].first - 64, 128).code(), Status::Code::kCorruption);
  s = batch.MarkUsedSorted({{first[5].first + 512, 1024}});  // into the next block
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("double use"), std::string::npos) << s.message();
  // Blocks below and between the appended ones.
  ASSERT_TRUE(one.MarkUsed(begin + 4096, 128).ok());
  ASSERT_TRUE(batch.MarkUsed(begin + 4096, 128).ok());
  for (const auto& [off, size] : second) ASSERT_TRUE(one.MarkUsed(off, size).ok());
  ASSERT_TRUE(batch.MarkUsedSorted(second).ok());
  one.EndRebuild();
  batch.EndRebuild();
  EXPECT_EQ(batch.FreeExtents(), one.FreeExtents());
  EXPECT_EQ(batch.bytes_in_use(), one.bytes_in_use());
  EXPECT_TRUE(batch.CheckConsistency().ok());
}

// Within an appended batch, a block that overlaps its predecessor, and a
// block outside the heap, are refused like any other.
TEST(AllocatorTest, AnAppendedBatchRefusesOverlapAndBlocksOutsideTheHeap) {
  Allocator a(4096, 1 << 20);
  a.BeginRebuild();
  Status s = a.MarkUsedSorted({{8192, 256}, {8192 + 192, 64}});
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("overlaps the block at offset 8192"), std::string::npos) << s.message();
  a.EndRebuild();
  a.BeginRebuild();
  EXPECT_EQ(a.MarkUsedSorted({{8192, 256}, {1 << 21, 64}}).code(), Status::Code::kCorruption);
  EXPECT_EQ(a.MarkUsedSorted({{8192 + 512 + 1, 64}}).code(), Status::Code::kCorruption);  // not aligned
  a.EndRebuild();
}

TEST(AllocatorTest, StoreBlocksAreCountedApartFromTheTrees) {
  Allocator a(4096, 1 << 20);
  uint64_t node = *a.Allocate(256);
  uint64_t rec = *a.Allocate(1000, kAllocGranule, BlockOwner::kStore);
  EXPECT_EQ(a.bytes_in_use(), 256u);
  EXPECT_EQ(a.bytes_in_use(BlockOwner::kStore), 1024u);
  a.Free(rec, 1000, BlockOwner::kStore);
  EXPECT_EQ(a.bytes_in_use(BlockOwner::kStore), 0u);
  a.Free(node, 256);
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

// A check deferred by a tree's recovery runs once, after the store's
// release, and sees the final free space; the first failure is returned and
// the next rebuild drops what was never run.
TEST(AllocatorTest, DeferredRebuildChecksRunOnceOnTheFinalFreeSpace) {
  Allocator a(4096, 1 << 20);
  const uint64_t node = *a.Allocate(256);
  const uint64_t rec = *a.Allocate(512, kAllocGranule, BlockOwner::kStore);
  a.HoldRebuild();
  a.BeginRebuild();
  ASSERT_TRUE(a.MarkUsed(node, 256).ok());
  a.EndRebuild();
  int runs = 0;
  uint64_t free_seen = 0;
  a.DeferRebuildCheck([&] {
    runs++;
    free_seen = a.bytes_free();
    return Status::Ok();
  });
  a.DeferRebuildCheck([] { return Status::Corruption("lost leaf"); });
  ASSERT_TRUE(a.MarkUsed(rec, 512, BlockOwner::kStore).ok());
  a.ReleaseRebuild();
  EXPECT_EQ(a.RunDeferredRebuildChecks().code(), Status::Code::kCorruption);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(free_seen, a.heap_bytes() - 768u);  // the store's record was not free
  EXPECT_TRUE(a.RunDeferredRebuildChecks().ok());  // run once
  a.DeferRebuildCheck([] { return Status::Corruption("stale"); });
  a.BeginRebuild();  // a new recovery forgets it
  a.EndRebuild();
  EXPECT_TRUE(a.RunDeferredRebuildChecks().ok());
}

TEST(AllocatorTest, HeldRebuildKeepsWhatTheStoreReportsAfterTheTreeEnds) {
  Allocator a(4096, 1 << 20);
  uint64_t node = *a.Allocate(256);
  uint64_t rec = *a.Allocate(512, kAllocGranule, BlockOwner::kStore);
  uint64_t orphan = *a.Allocate(512, kAllocGranule, BlockOwner::kStore);
  (void)orphan;
  a.HoldRebuild();
  a.BeginRebuild();
  ASSERT_TRUE(a.MarkUsed(node, 256).ok());
  a.EndRebuild();  // the tree is done, the store has not reported yet
  EXPECT_TRUE(a.rebuilding());
  EXPECT_TRUE(a.rebuild_end_pending());
  ASSERT_TRUE(a.MarkUsed(rec, 512, BlockOwner::kStore).ok());
  EXPECT_EQ(a.MarkUsed(node, 64, BlockOwner::kStore).code(), Status::Code::kCorruption);
  a.ReleaseRebuild();
  EXPECT_FALSE(a.rebuilding());
  EXPECT_EQ(a.bytes_in_use(), 256u);
  EXPECT_EQ(a.bytes_in_use(BlockOwner::kStore), 512u);
  EXPECT_TRUE(a.CheckConsistency().ok());
  // Without a pending end, release changes nothing.
  a.HoldRebuild();
  a.ReleaseRebuild();
  EXPECT_EQ(a.bytes_free(), a.heap_bytes() - 768u);
}

TEST(AllocatorTest, SetStoreBytesClaimsPartOfARestoredState) {
  Allocator a(4096, 1 << 20);
  (void)*a.Allocate(256);
  (void)*a.Allocate(512, kAllocGranule, BlockOwner::kStore);
  auto saved = a.FreeExtents();
  Allocator b(4096, 1 << 20);
  ASSERT_TRUE(b.LoadFreeExtents(saved).ok());
  EXPECT_EQ(b.bytes_in_use(), 768u);
  ASSERT_TRUE(b.SetStoreBytes(512).ok());
  EXPECT_EQ(b.bytes_in_use(), 256u);
  EXPECT_EQ(b.SetStoreBytes(4096).code(), Status::Code::kCorruption);
}

TEST(AllocatorTest, AllocationDuringRebuildIsRefused) {
  Allocator a(4096, 1 << 20);
  a.BeginRebuild();
  EXPECT_FALSE(a.Allocate(64).ok());
  a.EndRebuild();
  EXPECT_TRUE(a.Allocate(64).ok());
}

TEST(AllocatorTest, RetiredBlocksAreFreedOnlyAfterActiveGuardsEnd) {
  Allocator a(4096, 1 << 20);
  uint64_t b = *a.Allocate(64);
  std::atomic<bool> inside{false}, release{false};
  std::thread reader([&] {
    auto g = a.epochs().Protect();
    inside = true;
    while (!release) std::this_thread::yield();
  });
  while (!inside) std::this_thread::yield();
  a.Retire(b, 64);
  for (int i = 0; i < 10; i++) a.epochs().Reclaim();
  EXPECT_EQ(a.bytes_in_use(), 64u) << "freed while a reader could still hold it";
  release = true;
  reader.join();
  for (int i = 0; i < 3; i++) a.epochs().Reclaim();
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

TEST(AllocatorTest, RetireBeforeRebuildDoesNotFreeARebuiltBlock) {
  Allocator a(4096, 1 << 20);
  uint64_t b = *a.Allocate(64);
  a.Retire(b, 64);
  a.BeginRebuild();
  ASSERT_TRUE(a.MarkUsed(b, 64).ok());  // recovery found it reachable again
  a.EndRebuild();
  a.epochs().DrainAll();
  EXPECT_EQ(a.bytes_in_use(), 64u);
}

TEST(AllocatorTest, SavedExtentsRoundTrip) {
  Allocator a(4096, 1 << 20);
  for (int i = 0; i < 20; i++) (void)a.Allocate(64 * (i + 1));
  a.Free(4096 + 64, 64);
  auto ext = a.FreeExtents();
  Allocator b(4096, 1 << 20);
  ASSERT_TRUE(b.LoadFreeExtents(ext).ok());
  EXPECT_EQ(a.bytes_in_use(), b.bytes_in_use());
  EXPECT_TRUE(b.CheckConsistency().ok());
  EXPECT_FALSE(b.LoadFreeExtents({{4096, 128}, {4096 + 64, 64}}).ok());  // overlapping
}

TEST(AllocatorTest, ConcurrentAllocateAndFreeKeepTheInvariants) {
  Allocator a(4096, 64 << 20);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; t++) {
    ts.emplace_back([&a, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<uint64_t, uint64_t>> mine;
      for (int i = 0; i < 2000; i++) {
        if (mine.empty() || rng() % 3) {
          uint64_t size = 64 * (1 + rng() % 16);
          auto r = a.Allocate(size);
          if (r.ok()) mine.push_back({*r, size});
        } else {
          a.Free(mine.back().first, mine.back().second);
          mine.pop_back();
        }
      }
      for (auto [o, s] : mine) a.Free(o, s);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_TRUE(a.CheckConsistency().ok());
}

}  // namespace
}  // namespace pmtree
