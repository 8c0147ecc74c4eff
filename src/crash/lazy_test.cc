// SPDX-License-Identifier: Apache-2.0
//
// Tests of the lazy image search (lazy.h): the read tracker sees exactly the
// first accesses to dirty lines (reads, writes, unaligned and wide accesses,
// a dirty line that is never read on a page that is), the search visits each
// distinct observable execution once, and the explorer proves every crash
// point of the copy-on-write test array's small workload with it while the
// plain plan samples.

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "crash/access.h"
#include "crash/explorer.h"
#include "crash/lazy.h"
#include "crash/test_trees.h"
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

// Byte mode: only the varying bytes an access really reads are recorded, a
// write-only access records nothing, and a line stays tracked until all of
// its varying bytes were read.
TEST(ReadTrackerTest, ByteModeRecordsTheBytesEachAccessReads) {
  if (!ReadTracker::Supported() || !AccessDecoderAvailable()) GTEST_SKIP() << "needs x86-64 Linux and the decoder";
  Mapping m(3);
  ASSERT_NE(m.base(), nullptr);
  const std::vector<uint64_t> lines = {0x1000, 0x2000};
  const std::vector<uint64_t> varying = {~uint64_t{0}, 0xffull << 8};
  ReadTracker& t = ReadTracker::Get();
  t.Arm(lines, 0, ReadTracker::kPreciseFaultsPerPage, &varying);
  t.Protect(m.base(), m.size());
  volatile uint8_t* p = reinterpret_cast<volatile uint8_t*>(m.base());
  uint8_t b = p[0x1003];  // 1 byte
  uint32_t w;
  const char* src = m.base() + 0x1010;
  asm volatile("movl (%1), %0" : "=r"(w) : "r"(src) : "memory");  // 4 bytes
  char* dst = m.base() + 0x1020;
  asm volatile("movq %0, (%1)" : : "r"(uint64_t{5}), "r"(dst) : "memory");  // an 8-byte store: not a read
  src = m.base() + 0x1030;
  asm volatile("movdqu (%0), %%xmm0" : : "r"(src) : "xmm0", "memory");  // 16 bytes
  EXPECT_EQ(t.masks()[0], (uint64_t{1} << 3) | (uint64_t{0xf} << 16) | (uint64_t{0xffff} << 48));
  EXPECT_EQ(ReadOffsets(lines), (std::vector<uint64_t>{0x1000}));
  // Line 0x2000 varies in bytes 8..15 only: a read of byte 0 is not a read
  // of it, a read of bytes 12..15 is, and one of bytes 8..11 completes it.
  b = b + p[0x2000];
  EXPECT_EQ(t.masks()[1], 0u);
  src = m.base() + 0x200c;
  asm volatile("movl (%1), %0" : "=r"(w) : "r"(src) : "memory");
  EXPECT_EQ(t.masks()[1], uint64_t{0xf0} << 8);
  const uint64_t faults = t.faults();
  src = m.base() + 0x2008;
  asm volatile("movl (%1), %0" : "=r"(w) : "r"(src) : "memory");
  EXPECT_EQ(t.masks()[1], uint64_t{0xff} << 8);
  EXPECT_EQ(t.faults(), faults + 1);
  b = b + p[0x2000];  // the page holds no unread varying byte now: no fault
  EXPECT_EQ(t.faults(), faults + 1);
  EXPECT_EQ(ReadOffsets(lines), (std::vector<uint64_t>{0x1000, 0x2000}));
  EXPECT_EQ(t.undecoded(), 0u);
  t.Stop();
  (void)b;
  (void)w;
}

// An observed word (pm/observe.h) in byte mode: recorded as its class (the
// classifier and its arguments), not as bytes; the line stays tracked, so a
// later plain read of the same bytes is recorded as bytes.
TEST(ReadTrackerTest, AnObservedWordIsRecordedAsItsClassNotItsBytes) {
  if (!ReadTracker::Supported() || !AccessDecoderAvailable()) GTEST_SKIP() << "needs x86-64 Linux and the decoder";
  Mapping m(2);
  ASSERT_NE(m.base(), nullptr);
  const std::vector<uint64_t> lines = {0x1000};
  const std::vector<uint64_t> varying = {~uint64_t{0}};
  ReadTracker& t = ReadTracker::Get();
  t.Arm(lines, 0, ReadTracker::kPreciseFaultsPerPage, &varying);
  t.Protect(m.base(), m.size());
  EXPECT_EQ(ObserveWord(m.base() + 0x1008, &MaskedEquals, ~uint64_t{0}, 7), 0u);
  ASSERT_EQ(t.observed().size(), 1u);
  EXPECT_EQ(t.observed()[0].line, 0u);
  EXPECT_EQ(t.observed()[0].byte, 8u);
  EXPECT_EQ(t.observed()[0].classify, &MaskedEquals);
  EXPECT_EQ(t.observed()[0].a, ~uint64_t{0});
  EXPECT_EQ(t.observed()[0].b, 7u);
  EXPECT_EQ(t.masks()[0], 0u);
  EXPECT_EQ(ReadOffsets(lines), (std::vector<uint64_t>{0x1000}));
  uint64_t w;
  const char* src = m.base() + 0x1008;
  asm volatile("movq (%1), %0" : "=r"(w) : "r"(src) : "memory");
  EXPECT_EQ(t.masks()[0], uint64_t{0xff} << 8);
  EXPECT_EQ(t.observed().size(), 1u);
  t.Stop();
  (void)w;
}

// Byte mode: a varying byte the run stores to before reading it is not a
// read of the image, whatever the run reads there later; a store after a
// read changes nothing recorded; a store over part of an observed word makes
// the word's load a read of its remaining bytes; a conditional store (lock
// cmpxchg) overwrites nothing.  A line whose varying bytes are all
// overwritten is never read, and its page stops faulting.
TEST(ReadTrackerTest, ByteModeDoesNotRecordBytesTheRunOverwroteBeforeReadingThem) {
  if (!ReadTracker::Supported() || !AccessDecoderAvailable()) GTEST_SKIP() << "needs x86-64 Linux and the decoder";
  Mapping m(3);
  ASSERT_NE(m.base(), nullptr);
  const std::vector<uint64_t> lines = {0x1000, 0x1040, 0x2000};
  const std::vector<uint64_t> varying = {~uint64_t{0}, ~uint64_t{0}, 0x1ull};
  ReadTracker& t = ReadTracker::Get();
  t.Arm(lines, 0, ReadTracker::kPreciseFaultsPerPage, &varying);
  t.Protect(m.base(), m.size());
  uint64_t w;
  char* at = m.base() + 0x1000;
  asm volatile("movq %0, (%1)" : : "r"(uint64_t{5}), "r"(at) : "memory");  // bytes 0..7 overwritten
  asm volatile("movq (%1), %0" : "=r"(w) : "r"(at) : "memory");
  EXPECT_EQ(w, 5u);
  EXPECT_EQ(t.masks()[0], 0u);
  at = m.base() + 0x1008;
  asm volatile("movq (%1), %0" : "=r"(w) : "r"(at) : "memory");  // read first: recorded
  asm volatile("movq %0, (%1)" : : "r"(uint64_t{6}), "r"(at) : "memory");
  asm volatile("movq (%1), %0" : "=r"(w) : "r"(at) : "memory");
  EXPECT_EQ(t.masks()[0], uint64_t{0xff} << 8);
  at = m.base() + 0x1010;
  asm volatile("movl %0, (%1)" : : "r"(7u), "r"(at) : "memory");  // half of the word at 0x1010
  EXPECT_EQ(ObserveWord(at, &MaskedEquals, ~uint64_t{0}, 7), 1u);
  EXPECT_TRUE(t.observed().empty());
  EXPECT_EQ(t.masks()[0], (uint64_t{0xff} << 8) | (uint64_t{0xf0} << 16));
  at = m.base() + 0x1018;
  uint64_t expected = 0;
  asm volatile("lock cmpxchgq %2, (%1)" : "+a"(expected) : "r"(at), "r"(uint64_t{9}) : "memory");
  EXPECT_EQ(t.masks()[0], (uint64_t{0xff} << 8) | (uint64_t{0xf0} << 16) | (uint64_t{0xff} << 24));
  // Line 0x1040 overwritten whole (four 16-byte stores), then read: never read.
  at = m.base() + 0x1040;
  for (int k = 0; k < 4; k++) asm volatile("pxor %%xmm0, %%xmm0\n\tmovdqu %%xmm0, (%0)" : : "r"(at + 16 * k) : "xmm0", "memory");
  asm volatile("movq (%1), %0" : "=r"(w) : "r"(at + 8) : "memory");
  EXPECT_EQ(w, 0u);
  EXPECT_EQ(t.masks()[1], 0u);
  // Line 0x2000 varies in byte 0 only: overwritten, its page is open again.
  at = m.base() + 0x2000;
  asm volatile("movb %0, (%1)" : : "r"(uint8_t{1}), "r"(at) : "memory");
  const uint64_t faults = t.faults();
  asm volatile("movq (%1), %0" : "=r"(w) : "r"(at) : "memory");
  EXPECT_EQ(t.faults(), faults);
  EXPECT_EQ(ReadOffsets(lines), (std::vector<uint64_t>{0x1000}));
  t.Stop();
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

// A byte-level "check" over two 64-byte units, A (line 0) and B (line 1):
// it reads byte 0 of A; when that is 1 it also reads byte 5 of A and byte 8
// of B.  A's alternatives: zeros, byte 0 = 1, bytes 0 = 1 and 5 = 7, byte
// 5 = 7; B's: zeros, byte 8 = 1, byte 9 = 1.  Of the 12 images the check
// observes 5 executions: A[0] = 0 (A's first and last alternatives, any B),
// and A[0] = 1 with each of A[5] in {0, 7} and B[8] in {0, 1}.
struct ByteProgram {
  ByteUnits units;
  ByteProgram() {
    units.line = {0, 1};
    units.start = {0, 0};
    units.size = {64, 64};
    std::vector<uint8_t> a(4 * 64, 0), b(3 * 64, 0);
    a[1 * 64 + 0] = 1;
    a[2 * 64 + 0] = 1;
    a[2 * 64 + 5] = 7;
    a[3 * 64 + 5] = 7;
    b[1 * 64 + 8] = 1;
    b[2 * 64 + 9] = 1;
    units.contents = {a, b};
    units.varying = {(uint64_t{1} << 0) | (uint64_t{1} << 5), (uint64_t{1} << 8) | (uint64_t{1} << 9)};
  }
  uint8_t Byte(uint32_t unit, uint32_t alt, uint32_t i) const { return units.contents[unit][alt * 64 + i]; }
  // The lines read in order, the bytes read per line, and the values seen.
  void Run(const std::vector<uint32_t>& alt, std::vector<uint32_t>* order, std::vector<uint64_t>* masks,
           std::vector<int>* seen) const {
    order->assign({0});
    masks->assign({uint64_t{1}, 0});
    seen->assign({Byte(0, alt[0], 0)});
    if (Byte(0, alt[0], 0) != 1) return;
    (*masks)[0] |= uint64_t{1} << 5;
    order->push_back(1);
    (*masks)[1] = uint64_t{1} << 8;
    seen->push_back(Byte(0, alt[0], 5));
    seen->push_back(Byte(1, alt[1], 8));
  }
};

TEST(ByteLazyPlanTest, BranchesOverByteClassesAndSplitsAClassWhenALaterRunReadsMore) {
  ByteProgram prog;
  ByteLazyPlan plan(&prog.units, {{0}, {1}});
  std::set<std::vector<int>> executions;
  std::vector<std::vector<uint32_t>> runs;
  std::vector<uint32_t> alt, order;
  std::vector<uint64_t> masks;
  std::vector<int> seen;
  while (plan.Next(&alt)) {
    prog.Run(alt, &order, &masks, &seen);
    EXPECT_TRUE(executions.insert(seen).second) << "an execution was visited twice";
    runs.push_back(alt);
    plan.Done(order, masks);
  }
  EXPECT_TRUE(plan.complete());
  EXPECT_FALSE(plan.nondeterministic());
  // One run per observable execution: line-level choices would take 8 (A's
  // two alternatives with A[0] = 0 apart, and B's three under A[0] = 1).
  EXPECT_EQ(plan.runs(), 5u);
  EXPECT_EQ(executions.size(), 5u);
  // Every image agrees, on every byte its own check reads, with some run:
  // the search is exhaustive.
  for (uint32_t a = 0; a < 4; a++)
    for (uint32_t b = 0; b < 3; b++) {
      prog.Run({a, b}, &order, &masks, &seen);
      bool covered = false;
      for (const auto& r : runs) {
        std::vector<uint32_t> o2;
        std::vector<uint64_t> m2;
        std::vector<int> s2;
        prog.Run(r, &o2, &m2, &s2);
        covered = covered || s2 == seen;
      }
      EXPECT_TRUE(covered) << "image (" << a << ", " << b << ") is checked by no run";
    }
}

// One unit whose three alternatives differ only in the word at byte 8 (0,
// 5 and the "magic" 7).  A check that only asks "is it the magic" (an
// observed word) has two executions, and the search takes two runs; read
// as bytes, the word gives three classes and three runs.
TEST(ByteLazyPlanTest, AnObservedWordSplitsTheAlternativesByItsClassOnly) {
  ByteUnits units;
  units.line = {0};
  units.start = {0};
  units.size = {64};
  std::vector<uint8_t> c(3 * 64, 0);
  c[1 * 64 + 8] = 5;
  c[2 * 64 + 8] = 7;
  units.contents = {c};
  units.varying = {uint64_t{1} << 8};
  const std::vector<ObservedWord> magic = {ObservedWord{0, 8, &MaskedEquals, ~uint64_t{0}, 7}};
  auto runs = [&](bool observed) {
    ByteLazyPlan plan(&units, {{0}});
    std::vector<uint32_t> alt;
    std::set<uint32_t> ran;
    while (plan.Next(&alt)) {
      ran.insert(alt[0]);
      if (observed) plan.Done({0}, {0}, magic);
      else plan.Done({0}, {uint64_t{0xff} << 8});
    }
    EXPECT_TRUE(plan.complete());
    EXPECT_TRUE(ran.count(2)) << "the magic's image was not run";
    return plan.runs();
  };
  EXPECT_EQ(runs(true), 2u);
  EXPECT_EQ(runs(false), 3u);
}

TEST(ByteLazyPlanTest, ARunThatDoesNotReadItsPrefixFirstIsNondeterministic) {
  ByteProgram prog;
  ByteLazyPlan plan(&prog.units, {{0}, {1}});
  std::vector<uint32_t> alt;
  ASSERT_TRUE(plan.Next(&alt));
  plan.Done({0}, {uint64_t{1}, 0});      // A[0] read: A's classes {0, 3} and {1, 2}
  ASSERT_TRUE(plan.Next(&alt));          // A in {1, 2}: must read A first...
  plan.Done({1}, {0, uint64_t{1} << 8});  // ...but read only B
  while (plan.Next(&alt)) plan.Done({0}, {uint64_t{1}, 0});
  EXPECT_TRUE(plan.nondeterministic());
  EXPECT_FALSE(plan.complete());
}

// The explorer with the lazy search proves every crash point of the test
// array's small workload, where the plain plan samples the points that
// leave a whole new array dirty (recovery never reaches it before the
// commit: one run), with fewer images.  Not a real tree's workload: a
// whole exploration with --lazy on runs a search of up to lazy_max_runs at
// every point, which FAST+FAIR's depth-1 workload alone does not finish in
// minutes (docs/crash_model.md section 1, "Cost").
TEST(LazyExploreTest, ProvesEveryPointThePlainPlanSamples) {
  if (!ReadTracker::Supported()) GTEST_SKIP() << "read tracking needs x86-64 Linux";
  ExploreOptions o;
  o.depth = 2;
  o.pool_size = 1 << 20;
  o.budget_seconds = 0;
  o.bulk_load = false;  // the array's bulk load is one insert after another
  o.lazy = LazyMode::kOff;
  auto plain = Explore(testing::CowArrayFactory(), o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  o.lazy = LazyMode::kOn;
  auto lazy = Explore(testing::CowArrayFactory(), o);
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
