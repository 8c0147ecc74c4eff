// SPDX-License-Identifier: Apache-2.0
#include "pmtree/counters.h"

#include <gtest/gtest.h>

#include "pm/pool_impl.h"

namespace pmtree {
namespace {

std::unique_ptr<PoolImpl> MakePool(BackendKind kind, uint32_t latency_ns = 0) {
  PoolOptions o;
  o.backend = kind;
  o.write_latency_ns = latency_ns;
  o.use_env = false;
  auto p = PoolImpl::CreateAnonymous(kMinPoolSize, "test", 0, o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

TEST(CountersTest, PersistOfHundredBytesOverThreeLinesCountsThreeFlushesOneFenceThreeLines) {
  auto pool = MakePool(BackendKind::kHardware);
  char* p = pool->base() + 8192 + 40;  // 40..139 of a line-aligned area: lines 0, 1, 2
  counters::BeginOperation();
  PersistCounters before = counters::ThisThread();
  pool->Persist(p, 100);
  PersistCounters d = counters::ThisThread() - before;
  EXPECT_EQ(d.flushes, 3u);
  EXPECT_EQ(d.fences, 1u);
  EXPECT_EQ(d.lines, 3u);
  EXPECT_EQ(d.blocks256, 1u);
  EXPECT_EQ(d.bytes, 100u);
}

TEST(CountersTest, ReflushingALineInOneOperationCountsFlushesButNotNewLines) {
  auto pool = MakePool(BackendKind::kHardware);
  char* p = pool->base() + 8192;
  counters::BeginOperation();
  PersistCounters before = counters::ThisThread();
  pool->Persist(p, 8);
  pool->Persist(p + 8, 8);
  pool->Persist(p + 256, 8);  // another line, another 256 B block
  PersistCounters d = counters::ThisThread() - before;
  EXPECT_EQ(d.flushes, 3u);
  EXPECT_EQ(d.fences, 3u);
  EXPECT_EQ(d.lines, 2u);
  EXPECT_EQ(d.blocks256, 2u);
  counters::BeginOperation();  // a new operation counts the line again
  before = counters::ThisThread();
  pool->Persist(p, 8);
  EXPECT_EQ((counters::ThisThread() - before).lines, 1u);
}

// The per-operation set of distinct lines: exact up to its window of 256
// lines, every unseen line counted new past it; thousands of operations
// (generations) later a line of an old operation is new again.
TEST(CountersTest, DistinctLinesAreExactUpToTheWindowAndResetPerOperation) {
  auto pool = MakePool(BackendKind::kHardware);
  char* base = pool->base() + 8192;
  counters::BeginOperation();
  PersistCounters before = counters::ThisThread();
  for (int i = 0; i < 200; i++) pool->Flush(base + 64 * i, 8);
  for (int i = 0; i < 200; i++) pool->Flush(base + 64 * i, 8);  // all remembered
  EXPECT_EQ((counters::ThisThread() - before).lines, 200u);
  for (int i = 200; i < 300; i++) pool->Flush(base + 64 * i, 8);  // 56 fill the window, 44 beyond it
  EXPECT_EQ((counters::ThisThread() - before).lines, 300u);
  for (int i = 0; i < 256; i++) pool->Flush(base + 64 * i, 8);  // the window's lines: not new
  EXPECT_EQ((counters::ThisThread() - before).lines, 300u);
  for (int op = 0; op < 5000; op++) {
    counters::BeginOperation();
    pool->Flush(base + 64 * (op % 7), 8);
  }
  before = counters::ThisThread();
  pool->Flush(base + 64 * (4999 % 7), 8);  // flushed by the current (last) operation: not new
  pool->Flush(base + 64 * 3, 8);           // flushed only by earlier operations: new
  pool->Flush(base + 64 * 3, 8);
  EXPECT_EQ((counters::ThisThread() - before).lines, 1u);
  pool->Fence();
}

TEST(CountersTest, DramBackendIssuesNoFlushAndNoFence) {
  auto pool = MakePool(BackendKind::kDram);
  PersistCounters before = counters::ThisThread();
  pool->Persist(pool->base() + 8192, 4096);
  PersistCounters d = counters::ThisThread() - before;
  EXPECT_EQ(d.flushes, 0u);
  EXPECT_EQ(d.fences, 0u);
  EXPECT_EQ(d.lines, 0u);
}

TEST(CountersTest, EadrBackendFencesButDoesNotFlush) {
  auto pool = MakePool(BackendKind::kEadr);
  PersistCounters before = counters::ThisThread();
  pool->Persist(pool->base() + 8192, 200);
  PersistCounters d = counters::ThisThread() - before;
  EXPECT_EQ(d.flushes, 0u);
  EXPECT_EQ(d.fences, 1u);
}

TEST(CountersTest, EmulatedLatencyIsAppliedPerFlushedLine) {
  auto pool = MakePool(BackendKind::kHardware, 300);
  PersistCounters before = counters::ThisThread();
  pool->Persist(pool->base() + 8192 + 40, 100);  // three lines
  pool->Fence();                                 // a fence alone adds nothing
  PersistCounters d = counters::ThisThread() - before;
  EXPECT_EQ(d.delay_ns, 3u * 300u);
}

TEST(CountersTest, SnapshotSumsEveryThread) {
  auto pool = MakePool(BackendKind::kHardware);
  PersistCounters before = counters::Snapshot();
  std::thread t([&] { pool->Persist(pool->base() + 16384, 64); });
  t.join();
  pool->Persist(pool->base() + 16384 + 64, 64);
  PersistCounters d = counters::Snapshot() - before;
  EXPECT_EQ(d.flushes, 2u);
  EXPECT_EQ(d.fences, 2u);
}

TEST(CountersTest, NonTemporalStoresAreCounted) {
  auto pool = MakePool(BackendKind::kHardware);
  char buf[100] = {1, 2, 3};
  PersistCounters before = counters::ThisThread();
  pool->NtWrite(pool->base() + 8192 + 3, buf, sizeof(buf));
  pool->Fence();
  PersistCounters d = counters::ThisThread() - before;
  EXPECT_EQ(d.nt_stores, 1u);
  EXPECT_EQ(d.nt_bytes, 100u);
  EXPECT_EQ(std::memcmp(pool->base() + 8192 + 3, buf, sizeof(buf)), 0);
}

}  // namespace
}  // namespace pmtree
