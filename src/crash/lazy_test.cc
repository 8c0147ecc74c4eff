// SPDX-License-Identifier: Apache-2.0
//
// Tests of the lazy image search (lazy.h): the read tracker sees exactly the
// first accesses to dirty lines (reads, writes, unaligned and wide accesses,
// a dirty line that is never read on a page that is), the search visits each
// distinct observable execution once, and the explorer proves every crash
// point of FAST+FAIR's depth-1 workload with it while the plain plan samples.

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "crash/explorer.h"
#include "crash/lazy.h"
#include "pmtree/registry.h"

namespace pmtree::crash {
namespace {

class Mapping {
 public:
  explicit Mapping(uint64_t pages) : size_(pages * 4096) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~Mapping() {
    if (base_) munmap(base_, size_);
  }
  char* base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  uint64_t size_;
  char* base_;
};

// One 8-byte load (possibly unaligned) the compiler cannot drop.
uint64_t Read8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  asm volatile("" : "+r"(v));
  return v;
}

std::vector<uint64_t> ReadOffsets(const std::vector<uint64_t>& lines) {
  std::vector<uint64_t> out;
  for (uint32_t i : ReadTracker::Get().order()) out.push_back(lines[i]);
  return out;
}

TEST(ReadTrackerTest, RecordsFirstAccessesToDirtyLinesInOrder) {
  if (!ReadTracker::Supported()) GTEST_SKIP() << "read tracking needs x86-64 Linux";
  Mapping m(4);
  ASSERT_NE(m.base(), nullptr);
  const std::vector<uint64_t> lines = {0x1000, 0x1040, 0x10c0, 0x2000, 0x3fc0};
  ReadTracker& t = ReadTracker::Get();
  t.Arm(lines, 0);
  t.Protect(m.base(), m.size());
  volatile uint64_t sink = 0;
  sink = sink + Read8(m.base() + 0x1080);  // a clean line on a protected page: nothing recorded
  EXPECT_TRUE(t.order().empty());
  sink = sink + Read8(m.base() + 0x1048);  // line 0x1040
  m.base()[0x2010] = 7;                    // a write counts: line 0x2000
  sink = sink + Read8(m.base() + 0x1048);  // again: recorded once
  sink = sink + Read8(m.base() + 0x1000);
  EXPECT_EQ(ReadOffsets(lines), (std::vector<uint64_t>{0x1040, 0x2000, 0x1000}));
  // The page of 0x10c0 still holds an unread dirty line: it stays protected,
  // and a later access still records it.
  sink = sink + Read8(m.base() + 0x10c8);
  EXPECT_EQ(ReadOffsets(lines).back(), 0x10c0u);
  EXPECT_EQ(m.base()[0x2010], 7);
  t.Stop();
  // After Stop every page is accessible and nothing more is recorded.
  sink = sink + Read8(m.base() + 0x3fc0);
  EXPECT_EQ(t.order().size(), 4u);
  EXPECT_GT(t.faults(), 0u);
  (void)sink;
}

TEST(ReadTrackerTest, AnAccessAcrossLinesOrPagesRecordsEveryLineItTouches) {
  if (!ReadTracker::Supported()) GTEST_SKIP() << "read tracking needs x86-64 Linux";
  Mapping m(3);
  ASSERT_NE(m.base(), nullptr);
  const std::vector<uint64_t> lines = {0x1000, 0x1040, 0x1fc0, 0x2000, 0x2040, 0x2080, 0x20c0};
  ReadTracker& t = ReadTracker::Get();
  t.Arm(lines, 0);
  t.Protect(m.base(), m.size());
  volatile uint64_t sink = Read8(m.base() + 0x103c);  // unaligned: lines 0x1000 and 0x1040
  const std::vector<uint64_t> first = ReadOffsets(lines);
  std::set<uint64_t> got(first.begin(), first.end());
  EXPECT_TRUE(got.count(0x1000) && got.count(0x1040));
  // A 256-byte copy starting on one page and running into the next.
  char buf[256];
  const char* src = m.base() + 0x1fc0;
  asm volatile("" : "+r"(src));  // an opaque source: the copy must really read it
  std::memcpy(buf, src, sizeof(buf));
  asm volatile("" : : "r"(buf) : "memory");
  const std::vector<uint64_t> all = ReadOffsets(lines);
  got = std::set<uint64_t>(all.begin(), all.end());
  for (uint64_t l : {0x1fc0, 0x2000, 0x2040, 0x2080}) EXPECT_TRUE(got.count(l)) << std::hex << l;
  t.Stop();
  (void)sink;
}

TEST(ReadTrackerTest, LinesBelowThePrereadBoundAreReadFirst) {
  if (!ReadTracker::Supported()) GTEST_SKIP() << "read tracking needs x86-64 Linux";
  Mapping m(2);
  ASSERT_NE(m.base(), nullptr);
  const std::vector<uint64_t> lines = {0x40, 0x80, 0x1000};
  ReadTracker& t = ReadTracker::Get();
  t.Arm(lines, 4096);
  EXPECT_EQ(ReadOffsets(lines), (std::vector<uint64_t>{0x40, 0x80}));
  t.Protect(m.base(), m.size());
  volatile uint64_t sink = Read8(m.base() + 0x40);  // page 0 is not protected: all its lines are read
  sink = sink + Read8(m.base() + 0x1000);
  EXPECT_EQ(ReadOffsets(lines), (std::vector<uint64_t>{0x40, 0x80, 0x1000}));
  t.Stop();
  (void)sink;
}

// A "check" over three one-piece units A, B, C (one per line): it reads A,
// then B when A persisted, else C.  Its observable executions are
// (A=0, C=0), (A=0, C=1), (A=1, B=0), (A=1, B=1): four, out of eight images.
std::vector<uint32_t> Program(const std::vector<uint32_t>& choice) {
  return choice[0] == 1 ? std::vector<uint32_t>{0, 1} : std::vector<uint32_t>{0, 2};
}

TEST(LazyPlanTest, VisitsEachObservableExecutionOnce) {
  LazyPlan plan({1, 1, 1}, {{0}, {1}, {2}});
  std::set<std::vector<uint32_t>> executions;
  std::vector<uint32_t> choice;
  while (plan.Next(&choice)) {
    const std::vector<uint32_t> read = Program(choice);
    std::vector<uint32_t> seen;
    for (uint32_t u : read) seen.push_back(u * 10 + choice[u]);
    EXPECT_TRUE(executions.insert(seen).second) << "an execution was visited twice";
    plan.Done(read);
  }
  EXPECT_EQ(plan.runs(), 4u);
  EXPECT_EQ(executions.size(), 4u);
  EXPECT_TRUE(plan.complete());
  EXPECT_FALSE(plan.nondeterministic());
}

TEST(LazyPlanTest, UnitsWithSeveralPiecesBranchOverEveryPrefixAndTheFirstRunIsAllOld) {
  // Two units in one line (strict mode): 3 x 2 images, all read.
  LazyPlan plan({2, 1}, {{0, 1}});
  std::vector<uint32_t> choice;
  std::set<std::vector<uint32_t>> images;
  ASSERT_TRUE(plan.Next(&choice));
  EXPECT_EQ(choice, (std::vector<uint32_t>{0, 0}));
  do {
    images.insert(choice);
    plan.Done({0});
  } while (plan.Next(&choice));
  EXPECT_EQ(images.size(), 6u);
  EXPECT_TRUE(plan.complete());
}

TEST(LazyPlanTest, ARunThatDoesNotReadItsPrefixFirstIsNondeterministic) {
  LazyPlan plan({1, 1}, {{0}, {1}});
  std::vector<uint32_t> choice;
  ASSERT_TRUE(plan.Next(&choice));
  plan.Done({0, 1});
  ASSERT_TRUE(plan.Next(&choice));  // A fixed, then B...
  plan.Done({1, 0});                // ...but this run read B before A
  while (plan.Next(&choice)) plan.Done({0, 1});
  EXPECT_TRUE(plan.nondeterministic());
  EXPECT_FALSE(plan.complete());
}

// The explorer with the lazy search proves every crash point of the depth-1
// small workload of FAST+FAIR (whose splits leave whole fresh nodes dirty)
// with fewer images than the plain plan, which samples some points.
TEST(LazyExploreTest, ProvesEveryPointThePlainPlanSamples) {
  if (!ReadTracker::Supported()) GTEST_SKIP() << "read tracking needs x86-64 Linux";
  const TreeFactory* f = FindTree("fastfair");
  ASSERT_NE(f, nullptr);
  ExploreOptions o;
  o.depth = 1;
  o.lazy = LazyMode::kOff;
  auto plain = Explore(*f, o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  o.lazy = LazyMode::kOn;
  auto lazy = Explore(*f, o);
  ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
  EXPECT_EQ(plain->violations, 0u);
  EXPECT_EQ(lazy->violations, 0u);
  EXPECT_EQ(lazy->scenarios, lazy->scenarios_total);
  EXPECT_EQ(lazy->crash_points, plain->crash_points);
  EXPECT_LT(plain->crash_points_exhaustive, plain->crash_points) << "the plain plan no longer samples: pick a "
                                                                    "workload where it does";
  EXPECT_EQ(lazy->crash_points_exhaustive, lazy->crash_points);
  EXPECT_EQ(lazy->lazy_nondeterministic, 0u);
  EXPECT_GT(lazy->lazy_runs, 0u);
  EXPECT_LT(lazy->images_checked, plain->images_checked);
}

// A dropped fence before FAST+FAIR's split commit must still be caught by
// the lazy search (it reads the torn node through the new pointer).
TEST(LazyExploreTest, LazySearchStillCatchesADroppedPersist) {
  if (!ReadTracker::Supported()) GTEST_SKIP() << "read tracking needs x86-64 Linux";
  const TreeFactory* f = FindTree("fastfair-orig");
  ASSERT_NE(f, nullptr);
  ExploreOptions o;
  o.depth = 2;
  o.lazy = LazyMode::kOn;
  o.stop_at_first_violation = true;
  auto r = Explore(*f, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->violations, 0u);
}

}  // namespace
}  // namespace pmtree::crash
