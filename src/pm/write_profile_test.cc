// SPDX-License-Identifier: Apache-2.0
// WriteProfile: exact per-line, per-page, per-block and per-window counts for
// known write patterns, and identical profiles from identical runs.
#include "pmtree/write_profile.h"

#include <gtest/gtest.h>

#include <sstream>
#include <thread>
#include <vector>

#include "pm/pool_impl.h"

namespace pmtree {
namespace {

std::unique_ptr<PoolImpl> MakePool(std::shared_ptr<WriteProfile> profile, BackendKind kind = BackendKind::kHardware) {
  PoolOptions o;
  o.backend = kind;
  o.write_profile = std::move(profile);
  auto p = PoolImpl::CreateAnonymous(kMinPoolSize, "test", 0, o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

constexpr uint64_t kArea = 64 * 1024;  // a line- and page-aligned offset inside the heap

// The lines at and after kArea (creating the pool wrote its header page).
std::vector<WriteProfile::LineCount> AreaLines(const WriteProfile& prof) {
  std::vector<WriteProfile::LineCount> out;
  for (const auto& l : prof.Lines())
    if (l.line >= kArea / 64) out.push_back(l);
  return out;
}

TEST(WriteProfileTest, StoresAndFlushesCountPerLineTheyOverlap) {
  auto prof = std::make_shared<WriteProfile>();
  auto pool = MakePool(prof);
  char* p = pool->base() + kArea;
  const char data[100] = {};
  pool->Write(p + 40, data, 100);  // lines 0, 1, 2 of the area: one store each
  pool->Store64(p + 64, 7);        // line 1 again
  pool->Persist(p + 40, 100);      // flush lines 0, 1, 2
  pool->Flush(p + 4096, 1);        // line 0 of the next page
  std::vector<WriteProfile::LineCount> lines = AreaLines(*prof);
  const uint64_t first = kArea / 64;
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].line, first);
  EXPECT_EQ(lines[0].stores, 1u);
  EXPECT_EQ(lines[0].flushes, 1u);
  EXPECT_EQ(lines[1].line, first + 1);
  EXPECT_EQ(lines[1].stores, 2u);
  EXPECT_EQ(lines[1].flushes, 1u);
  EXPECT_EQ(lines[2].stores, 1u);
  EXPECT_EQ(lines[3].line, first + 64);
  EXPECT_EQ(lines[3].stores, 0u);
  EXPECT_EQ(lines[3].flushes, 1u);
  std::vector<WriteProfile::PageCount> pages = prof->Pages();
  ASSERT_EQ(pages.size(), 3u);  // the header page, and the area's two
  EXPECT_EQ(pages[0].page, 0u);
  pages.erase(pages.begin());
  EXPECT_EQ(pages[0].page, kArea / 4096);
  EXPECT_EQ(pages[0].stores, 4u);
  EXPECT_EQ(pages[0].flushes, 3u);
  EXPECT_EQ(pages[1].stores, 0u);
  EXPECT_EQ(pages[1].flushes, 1u);
}

TEST(WriteProfileTest, CreatingAPoolWritesItsHeaderPageOnly) {
  auto prof = std::make_shared<WriteProfile>();
  auto pool = MakePool(prof);
  ASSERT_FALSE(prof->Pages().empty());
  for (const auto& page : prof->Pages()) EXPECT_EQ(page.page, 0u);
  const uint64_t stores = prof->total_stores(), flushes = prof->total_flushes();
  pool->SetRoot(1, kArea);  // one 8-byte store and one line flushed, in the header
  EXPECT_EQ(prof->total_stores(), stores + 1);
  EXPECT_EQ(prof->total_flushes(), flushes + 1);
}

TEST(WriteProfileTest, AnEadrPoolIsProfiledLikeAHardwareOne) {
  // The profile records what the tree asked for, not what the backend executes.
  auto prof = std::make_shared<WriteProfile>();
  auto pool = MakePool(prof, BackendKind::kEadr);
  const uint64_t before = prof->total_flushes();
  pool->Persist(pool->base() + kArea, 128);
  EXPECT_EQ(prof->total_flushes(), before + 2);
}

TEST(WriteProfileTest, WindowsFollowTheOperationClockAndMarkAllocations) {
  auto prof = std::make_shared<WriteProfile>(/*window_ops=*/2);
  auto pool = MakePool(prof);
  const WriteProfile::Window header = prof->Series()[0];  // creating the pool
  char* p = pool->base() + kArea;
  // Window 0 (ops 0, 1): one allocation of 256 B, 3 lines flushed.
  auto a = pool->allocator().Allocate(256);
  ASSERT_TRUE(a.ok());
  pool->Persist(p, 192);
  prof->Tick();
  prof->Tick();
  // Window 1 (ops 2, 3): nothing.  Window 2 (op 4): 1 store, 1 line.
  prof->Tick();
  prof->Tick();
  pool->Store64(p, 1);
  pool->Persist(p, 8);
  std::vector<WriteProfile::Window> s = prof->Series();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].allocations, 1u);
  EXPECT_EQ(s[0].allocated_bytes, 256u);
  EXPECT_EQ(s[0].flushed_lines, header.flushed_lines + 3);
  EXPECT_EQ(s[0].stores, header.stores);
  EXPECT_EQ(s[1].flushed_lines + s[1].stores + s[1].allocations, 0u);
  EXPECT_EQ(s[2].stores, 1u);
  EXPECT_EQ(s[2].flushed_lines, 1u);
}

TEST(WriteProfileTest, BlocksSumTheWritesInsideEachAllocation) {
  auto prof = std::make_shared<WriteProfile>();
  auto pool = MakePool(prof);
  auto a = pool->allocator().Allocate(128);
  auto b = pool->allocator().Allocate(64);
  ASSERT_TRUE(a.ok() && b.ok());
  prof->Tick();
  pool->Persist(pool->At<char>(*a), 128);  // 2 lines flushed in a
  pool->Store64(pool->At<char>(*b), 5);    // 1 store in b
  pool->Store64(pool->At<char>(*b) + 8, 5);
  std::vector<WriteProfile::BlockCount> blocks = prof->Blocks();
  ASSERT_EQ(blocks.size(), 2u);
  for (const auto& blk : blocks) {
    if (blk.offset == *a) {
      EXPECT_EQ(blk.size, 128u);
      EXPECT_EQ(blk.flushes, 2u);
      EXPECT_EQ(blk.stores, 0u);
    } else {
      EXPECT_EQ(blk.offset, *b);
      EXPECT_EQ(blk.stores, 2u);
      EXPECT_EQ(blk.flushes, 0u);
    }
    EXPECT_EQ(blk.alloc_op, 0u);
  }
  // A reallocation of a's bytes replaces a in the block list.
  pool->allocator().Free(*a, 128);
  auto c = pool->allocator().Allocate(64);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(*c, *a);  // best fit: the freed 128 B extent
  blocks = prof->Blocks();
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].offset, *a);
  EXPECT_EQ(blocks[0].size, 64u);
  EXPECT_EQ(blocks[0].alloc_op, 1u);
  EXPECT_EQ(blocks[0].flushes, 1u);  // writes since the profile began: a's first line
}

std::string ProfileOfARun(uint64_t seed) {
  auto prof = std::make_shared<WriteProfile>(10);
  auto pool = MakePool(prof);
  uint64_t x = seed;
  for (int i = 0; i < 500; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    auto a = pool->allocator().Allocate(64 + (x >> 58) * 64);
    if (!a.ok()) return "allocation failed: " + a.status().ToString();
    pool->Persist(pool->At<char>(*a), 64);
    if (x & 1) pool->allocator().Free(*a, 64 + (x >> 58) * 64);
    prof->Tick();
  }
  std::ostringstream out;
  prof->WriteJson(out, /*with_lines=*/true);
  return out.str();
}

TEST(WriteProfileTest, TheSameRunGivesTheSameProfile) {
  const std::string a = ProfileOfARun(42), b = ProfileOfARun(42), c = ProfileOfARun(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a.find("\"ops\":500"), std::string::npos);
}

TEST(WriteProfileTest, ConcurrentWritersLoseNoCount) {
  auto prof = std::make_shared<WriteProfile>();
  auto pool = MakePool(prof);
  const uint64_t before = prof->total_flushes();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; i++) {
        pool->Flush(pool->base() + kArea + (i % 128) * 64, 64);  // 128 lines over two pages
        prof->Tick();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(prof->total_flushes(), before + 4000);
  EXPECT_EQ(prof->ops(), 4000u);
  const auto lines = AreaLines(*prof);
  EXPECT_EQ(lines.size(), 128u);
  // 1,000 flushes per thread over 128 lines: lines 0..103 get 8 each, 104..127 get 7.
  for (const auto& l : lines) EXPECT_EQ(l.flushes, l.line - kArea / 64 < 104 ? 32u : 28u) << l.line;
}

TEST(WriteProfileTest, APoolWithoutAProfileRecordsNothingAndDescribesItself) {
  auto prof = std::make_shared<WriteProfile>();
  auto pool = MakePool(prof);
  EXPECT_NE(pool->Describe().find("profiled"), std::string::npos);
  PoolOptions o;
  auto plain = PoolImpl::CreateAnonymous(kMinPoolSize, "test", 0, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->Describe().find("profiled"), std::string::npos);
}

}  // namespace
}  // namespace pmtree
