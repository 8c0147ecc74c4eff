// SPDX-License-Identifier: Apache-2.0
//
// The crash explorer on kv::Store workloads (src/crash/kv_explore.h), on
// every engine the store supports (persistent registry trees with byte-string
// keys, not test-only), in ADR and eADR.  Bounded by work, never by time:
// every scenario (KvScenarioNames: a put of 1 KiB and of the large value, a
// replace, a field put, a one-field update, a batch, a transaction, a
// delete, a group commit (PutMany), GC after a snapshot is released (of a
// replaced value, of a tombstone, of a field table), two batches in a row, a
// recovery after a crash; each opened and closed traced), every crash point
// of every operation, up to 4096 images per point (+512 samples above that);
// each image recovered by kv::Store::Open and checked (Verify, contents ==
// the model before or after the operation in flight, or for the group commit
// any subset of its puts), continuation writes on
// sampled images, crash during recovery from the first and last image of
// sampled points (up to 64 images per point of the recovery); zero
// violations required.
//
// Negative controls, per engine: kv::Options::testing_skip_redo (recovery
// leaves committed batches half applied) and testing_skip_record_persist (a
// version is named before it is persisted) must both be caught in ADR; the
// second is no flaw in eADR (caches persist) and must not be reported there.
//
// Built twice: crash_kv_test (default run: a 16 KiB large value, seed 1) and
// crash_kv_long_test (label long; PMTREE_KV_CRASH_LONG: a 64 KiB value and
// seeds 1..3 for the samples).  PMTREE_SEED picks another seed.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "crash/kv_explore.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree::crash {
namespace {

// The long binary names its suite apart: ctest keys tests by name.
#ifdef PMTREE_KV_CRASH_LONG
constexpr uint64_t kValueBytes = 64 << 10;
constexpr uint64_t kSeeds = 3;
#define PMTREE_KV_SUITE KvCrashLongTest
#else
#define PMTREE_KV_SUITE KvCrashTest
constexpr uint64_t kValueBytes = 16 << 10;
constexpr uint64_t kSeeds = 1;
#endif

uint64_t Seed() { return testutil::Seed(1); }

std::vector<std::string> Engines() {
  std::vector<std::string> v;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && !f.test_only() && f.create_bytes != nullptr) v.emplace_back(f.name);
  return v;
}

KvExploreOptions Options(const std::string& engine, Mode mode) {
  KvExploreOptions o;
  o.engine = engine;
  o.mode = mode;
  o.value_bytes = kValueBytes;
  o.seed = Seed();
#ifndef PMTREE_KV_CRASH_LONG
  // The default run crashes recoveries from every 4th point in ADR (and
  // every operation's end), every 16th in eADR: about half the CPU time.
  if (mode != Mode::kEadr) o.recovery_crash_every = 4;
#endif
  return o;
}

std::string Tickets(const KvExploreReport& r) {
  std::string s;
  for (const Ticket& t : r.tickets) s += t.ToString() + "\n";
  return s;
}

#ifndef PMTREE_KV_CRASH_LONG
TEST(KvCrashEnginesTest, TheStoreEnginesAreExplored) {
  const std::vector<std::string> e = Engines();
  for (const char* name : {"lbtree", "fastfair", "fptree", "wbtree", "nvtree", "circtree", "wotree", "cdds"})
    EXPECT_NE(std::find(e.begin(), e.end(), name), e.end()) << name << " no longer holds a store";
}
#endif

class PMTREE_KV_SUITE : public ::testing::TestWithParam<std::tuple<std::string, Mode>> {};

TEST_P(PMTREE_KV_SUITE, EveryScenarioRecoversBeforeOrAfterTheOperationInFlight) {
  const auto& [engine, mode] = GetParam();
  for (uint64_t k = 0; k < kSeeds; k++) {
    KvExploreOptions o = Options(engine, mode);
    o.seed += k;
    auto r = ExploreKv(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::printf("%s %s seed %llu: %llu scenarios, %llu operations, %llu crash points (%llu exhaustive), %llu images "
                "(+%llu deduplicated, +%llu in %llu crashed recoveries), %llu continuations, %llu violations, %.1f CPU s\n",
                engine.c_str(), std::string(ModeName(mode)).c_str(), (unsigned long long)o.seed,
                (unsigned long long)r->scenarios, (unsigned long long)r->operations,
                (unsigned long long)r->crash_points, (unsigned long long)r->crash_points_exhaustive,
                (unsigned long long)r->images_checked, (unsigned long long)r->images_deduplicated,
                (unsigned long long)r->recovery_crash_images, (unsigned long long)r->recoveries_crashed,
                (unsigned long long)r->continuation_runs, (unsigned long long)r->violations, r->cpu_seconds);
    EXPECT_EQ(r->violations, 0u) << Tickets(*r);
    // All the work ran: every scenario, each operation with its crash
    // points (at least its end), and images at each of them.
    EXPECT_EQ(r->scenarios, KvScenarioNames().size());
    EXPECT_GE(r->crash_points, r->operations);
    EXPECT_GE(r->images_checked, r->crash_points / 2);  // the rest are duplicates of checked images
    EXPECT_GT(r->continuation_runs, 0u);
    EXPECT_GT(r->recoveries_crashed, 0u);  // every open writes (the pool's dirty flag at least)
    EXPECT_GT(r->recovery_crash_images, r->recoveries_crashed);
  }
}

#ifdef PMTREE_KV_CRASH_LONG
// Each flush and fence site of the store dropped in turn (lbtree, ADR): every
// dropped flush must be caught; fences are reported (a dropped fence whose
// flushed lines the next fence of the operation commits before anything
// depends on them survives).
TEST(KvCrashLongMutationTest, EveryDroppedStoreFlushIsCaught) {
  KvExploreReport base;
  auto m = MutateKv(Options("lbtree", Mode::kAdr), &base);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(base.violations, 0u) << Tickets(base);
  ASSERT_GT(m->mutants, 0u);
  for (const Mutant& mu : m->list) {
    std::printf("%s at %s: %s %s\n", mu.kind.c_str(), mu.site.c_str(), mu.outcome.c_str(), mu.evidence.c_str());
    if (mu.kind == "drop flush") {
      EXPECT_EQ(mu.outcome, "caught") << mu.site;
    }
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(AllEngines, PMTREE_KV_SUITE,
                         ::testing::Combine(::testing::ValuesIn(Engines()), ::testing::Values(Mode::kAdr, Mode::kEadr)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(ModeName(std::get<1>(info.param)));
                         });

#ifndef PMTREE_KV_CRASH_LONG
class KvCrashNegativeControlTest : public ::testing::TestWithParam<std::string> {};

// A flaw must be reported, and its first ticket must replay to a violation.
void ExpectCaught(KvExploreOptions o, const char* flaw) {
  o.stop_at_first_violation = true;
  auto r = ExploreKv(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->violations, 0u) << o.engine << ": " << flaw << " went unnoticed";
  ASSERT_FALSE(r->tickets.empty());
  std::printf("%s, %s: caught: %s\n", o.engine.c_str(), flaw, r->tickets[0].ToString().c_str());
  o.replay = r->tickets[0].where;
  auto again = ExploreKv(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->images_checked, 1u);
  EXPECT_EQ(again->violations, 1u) << "the ticket does not replay: " << r->tickets[0].command;
}

TEST_P(KvCrashNegativeControlTest, RecoveryWithoutRedoIsCaught) {
  KvExploreOptions o = Options(GetParam(), Mode::kAdr);
  o.testing_skip_redo = true;
  o.scenario = "batch";
  ASSERT_NO_FATAL_FAILURE(ExpectCaught(o, "recovery without the redo of committed batches"));
}

TEST_P(KvCrashNegativeControlTest, VersionNamedBeforeItIsPersistedIsCaughtInAdrOnly) {
  KvExploreOptions o = Options(GetParam(), Mode::kAdr);
  o.testing_skip_record_persist = true;
  o.scenario = "put-1k";
  ASSERT_NO_FATAL_FAILURE(ExpectCaught(o, "a version named before it is persisted"));
  // In eADR every store is durable once made: the missing flush loses nothing.
  o.mode = Mode::kEadr;
  auto r = ExploreKv(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->violations, 0u) << Tickets(*r);
  EXPECT_GT(r->images_checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllEngines, KvCrashNegativeControlTest, ::testing::ValuesIn(Engines()),
                         [](const auto& info) { return info.param; });

// A check that kills the process (as a wild pointer in recovery would) is a
// violation of that scenario, and the exploration goes on with the next.
TEST(KvCrashIsolationTest, AWorkerThatDiesIsAViolationNotTheEnd) {
  KvExploreOptions o = Options("lbtree", Mode::kAdr);
  o.scenario = "put-";
  o.testing_abort_in_check = true;
  auto r = ExploreKv(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<std::string> names = KvScenarioNames();
  const auto n = static_cast<uint64_t>(
      std::count_if(names.begin(), names.end(), [](const std::string& x) { return x.find("put-") != x.npos; }));
  ASSERT_GE(n, 2u);
  EXPECT_EQ(r->scenarios, n);  // every matching scenario ran, each worker died at its first image
  EXPECT_EQ(r->violations, n) << Tickets(*r);
  ASSERT_EQ(r->tickets.size(), n);
  for (const Ticket& t : r->tickets) EXPECT_NE(t.failure.find("the worker died"), std::string::npos) << t.ToString();
}

TEST(KvCrashOptionsTest, BadInputIsAnError) {
  KvExploreOptions o;
  o.engine = "volatile";
  EXPECT_EQ(ExploreKv(o).status().code(), Status::Code::kInvalidArgument);
  o.engine = "no-such-tree";
  EXPECT_EQ(ExploreKv(o).status().code(), Status::Code::kInvalidArgument);
  o.engine = "lbtree";
  o.scenario = "no-such-scenario";
  EXPECT_EQ(ExploreKv(o).status().code(), Status::Code::kInvalidArgument);
  o.scenario = "";
  o.value_bytes = 0;
  EXPECT_EQ(ExploreKv(o).status().code(), Status::Code::kInvalidArgument);
  o.value_bytes = 1024;
  o.replay = ImageRef{1000, 0, 0};
  EXPECT_EQ(ExploreKv(o).status().code(), Status::Code::kInvalidArgument);
}
#endif

}  // namespace
}  // namespace pmtree::crash
