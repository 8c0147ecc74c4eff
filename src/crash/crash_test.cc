// SPDX-License-Identifier: Apache-2.0
//
// Tests of the crash explorer itself, on the test-local CowArray structure
// (test_trees.h): the correct structure passes, every deliberate flaw is
// caught, tickets replay, and the shadow model enumerates exactly the images
// the persistence model allows.

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "crash/explorer.h"
#include "crash/kill.h"
#include "crash/lazy.h"
#include "crash/shadow.h"
#include "crash/test_trees.h"
#include "crash/trace.h"
#include "testutil.h"

namespace pmtree::crash {
namespace {

template <class T>
struct SiteHolder {
  static Site Here(std::vector<int>, T) { return Site::current(); }
};

// Coverage tests match sites by function (SiteReport::function), so the name
// must be the qualified function without return type, parameters or template
// arguments, whatever the compiler puts around it.
TEST(SiteTableTest, FunctionNameIsQualifiedWithoutReturnTypeOrParameters) {
  const std::string f = SiteTable::FunctionOf(SiteHolder<std::pair<int, long>>::Here({}, {}));
  EXPECT_NE(f.find("SiteHolder<"), std::string::npos) << f;
  EXPECT_TRUE(f.size() >= 6 && f.compare(f.size() - 6, 6, "::Here") == 0) << f;
  EXPECT_EQ(f.find('('), std::string::npos) << f;
  EXPECT_EQ(f.find(' '), std::string::npos) << f;
  TraceLog log;
  const uint32_t id = log.sites.Intern(SiteHolder<int>::Here({}, 0));
  EXPECT_TRUE(log.sites.Function(id).ends_with("::Here"));
  EXPECT_EQ(log.sites.Function(log.sites.InternName("by-name-only")), "");
}

using testing::CowArrayFactory;
using testing::CowArrayMode;
using testing::SetCowArrayMode;

uint64_t Seed() { return testutil::Seed(42); }

ExploreOptions Small(Mode mode) {
  ExploreOptions o;
  o.mode = mode;
  o.depth = 2;
  o.seed = Seed();
  o.pool_size = 1 << 20;
  // No time budget: the work is the whole scenario set, and the tests check
  // that all of it ran (scenarios == scenarios_total).
  o.budget_seconds = 0;
  // The copy-on-write array has no bulk load of its own (the interface's
  // default inserts one by one, quadratic here): the trees' gate explores
  // bulk loads.
  o.bulk_load = false;
  return o;
}

class ModeGuard {
 public:
  explicit ModeGuard(CowArrayMode m) { SetCowArrayMode(m); }
  ~ModeGuard() { SetCowArrayMode(CowArrayMode::kCorrect); }
};

// ---- shadow model ---------------------------------------------------------------------

TEST(ShadowTest, PerLinePrefixGivesOneImagePerPrefixOfEachLine) {
  std::vector<char> img(4096, 0);
  Shadow s(img.data(), img.size(), Mode::kAdr);
  uint64_t v = 1;
  s.Store(128, reinterpret_cast<uint8_t*>(&v), 8, 0, false);
  s.Store(136, reinterpret_cast<uint8_t*>(&v), 8, 0, false);
  s.Store(256, reinterpret_cast<uint8_t*>(&v), 8, 0, false);
  auto units = s.DirtyUnits();
  ASSERT_EQ(units.size(), 2u);
  ImagePlan plan(units, img.data(), 4096, 0, 1);
  EXPECT_TRUE(plan.exhaustive());
  EXPECT_EQ(plan.total(), 3u * 2u);  // line 128: 0,1,2 stores; line 256: 0,1
}

TEST(ShadowTest, StrictModeLetsEachWordTakeItsOwnPrefix) {
  std::vector<char> img(4096, 0);
  Shadow s(img.data(), img.size(), Mode::kStrict);
  uint64_t v[2] = {1, 2};
  s.Store(128, reinterpret_cast<uint8_t*>(v), 16, 0, false);
  ImagePlan plan(s.DirtyUnits(), img.data(), 4096, 0, 1);
  EXPECT_EQ(plan.total(), 4u);  // two words, each old or new
}

TEST(ShadowTest, FenceCommitsOnlyWhatWasFlushedBeforeIt) {
  std::vector<char> img(4096, 0);
  Shadow s(img.data(), img.size(), Mode::kAdr);
  uint64_t a = 7, b = 9;
  s.Store(64, reinterpret_cast<uint8_t*>(&a), 8, 0, false);
  s.Flush(64, 8, 1);
  // A store after the clwb and before the fence is not covered by it.
  s.Store(72, reinterpret_cast<uint8_t*>(&b), 8, 2, false);
  s.Fence(3);
  uint64_t got;
  std::memcpy(&got, img.data() + 64, 8);
  EXPECT_EQ(got, 7u);
  std::memcpy(&got, img.data() + 72, 8);
  EXPECT_EQ(got, 0u);
  auto units = s.DirtyUnits();
  ASSERT_EQ(units.size(), 1u);
  EXPECT_EQ(units[0]->pending.size(), 1u);
  EXPECT_EQ(s.lints().store_after_flush.count(2), 1u);
}

TEST(ShadowTest, RedundantFlushAndEmptyFenceAreCounted) {
  std::vector<char> img(4096, 0);
  Shadow s(img.data(), img.size(), Mode::kAdr);
  s.Flush(64, 8, 5);
  s.Fence(6);
  EXPECT_EQ(s.lints().redundant_flushes[5], 1u);
  EXPECT_EQ(s.lints().empty_fences[6], 1u);
}

TEST(ShadowTest, ImagesAreAppliedInPlaceAndReverted) {
  std::vector<char> img(4096, 0);
  Shadow s(img.data(), img.size(), Mode::kAdr);
  uint64_t v = 0xabcdef;
  s.Store(512, reinterpret_cast<uint8_t*>(&v), 8, 0, false);
  {
    ImagePlan plan(s.DirtyUnits(), img.data(), 4096, 0, 1);
    std::vector<uint32_t> choice;
    plan.Apply(1, &choice);
    uint64_t got;
    std::memcpy(&got, img.data() + 512, 8);
    EXPECT_EQ(got, v);
  }
  uint64_t after;
  std::memcpy(&after, img.data() + 512, 8);
  EXPECT_EQ(after, 0u);
}

// A mutant run compares its shadow state with the correct program's
// (docs/crash_model.md section 5).  A split 8-byte store has different
// pieces, but when its upper half rewrites the bytes already there, every
// image it allows is one the whole store allows: not a differing point.
TEST(ShadowTest, ATornStoreWhoseUpperHalfRewritesEqualBytesAddsNoImage) {
  std::vector<char> base_img(4096, 0), mut_img(4096, 0);
  Shadow base(base_img.data(), base_img.size(), Mode::kAdr);
  Shadow mut(mut_img.data(), mut_img.size(), Mode::kAdr);
  const uint64_t v = 42;  // upper half zero, over zeros
  base.Store(128, reinterpret_cast<const uint8_t*>(&v), 8, 0, false);
  mut.Store(128, reinterpret_cast<const uint8_t*>(&v), 4, 0, false);
  mut.Store(132, reinterpret_cast<const uint8_t*>(&v) + 4, 4, 0, false);
  EXPECT_NE(base.Signature(), mut.Signature());  // the pieces differ ...
  ImageDiff d = DiffImages(base, mut);
  EXPECT_TRUE(d.comparable);
  EXPECT_TRUE(d.subset);  // ... the images do not
  // Likewise a store whose lower half is unchanged: its torn state is the old
  // content, which the correct program allows too.
  const uint64_t w = 42 | (uint64_t{7} << 32);
  base.Store(192, reinterpret_cast<const uint8_t*>(&w), 8, 0, false);
  mut.Store(192, reinterpret_cast<const uint8_t*>(&w), 4, 0, false);
  mut.Store(196, reinterpret_cast<const uint8_t*>(&w) + 4, 4, 0, false);
  base.Flush(128, 128, 1);
  mut.Flush(128, 128, 1);
  base.Fence(2);
  mut.Fence(2);
  const uint64_t w2 = 43 | (uint64_t{7} << 32);  // low half changes, high half equal
  base.Store(192, reinterpret_cast<const uint8_t*>(&w2), 8, 0, false);
  mut.Store(192, reinterpret_cast<const uint8_t*>(&w2), 4, 0, false);
  mut.Store(196, reinterpret_cast<const uint8_t*>(&w2) + 4, 4, 0, false);
  EXPECT_TRUE(DiffImages(base, mut).subset);
}

// Negative control: a torn store whose halves both change leaves a word no
// prefix of the correct program gives (~0 over 5 leaves 0x00000000ffffffff):
// a differing point, with exactly that choice fresh.
TEST(ShadowTest, ATornStoreThatChangesBothHalvesAddsItsTornImage) {
  std::vector<char> base_img(4096, 0), mut_img(4096, 0);
  const uint64_t old = 5, v = ~uint64_t{0};
  std::memcpy(base_img.data() + 256, &old, 8);
  std::memcpy(mut_img.data() + 256, &old, 8);
  Shadow base(base_img.data(), base_img.size(), Mode::kAdr);
  Shadow mut(mut_img.data(), mut_img.size(), Mode::kAdr);
  base.Store(256, reinterpret_cast<const uint8_t*>(&v), 8, 0, false);
  mut.Store(256, reinterpret_cast<const uint8_t*>(&v), 4, 0, false);
  mut.Store(260, reinterpret_cast<const uint8_t*>(&v) + 4, 4, 0, false);
  ImageDiff d = DiffImages(base, mut);
  EXPECT_TRUE(d.comparable);
  EXPECT_FALSE(d.subset);
  ASSERT_EQ(d.fresh.size(), 1u);
  EXPECT_EQ(d.fresh[0], std::vector<uint32_t>{1});  // the low half alone
  // In strict mode (units of one word) the same holds per word.
  std::vector<char> bs(4096, 0), ms(4096, 0);
  Shadow sb(bs.data(), bs.size(), Mode::kStrict), sm(ms.data(), ms.size(), Mode::kStrict);
  sb.Store(256, reinterpret_cast<const uint8_t*>(&v), 8, 0, false);
  sm.Store(256, reinterpret_cast<const uint8_t*>(&v), 4, 0, false);
  sm.Store(260, reinterpret_cast<const uint8_t*>(&v) + 4, 4, 0, false);
  EXPECT_FALSE(DiffImages(sb, sm).subset);
}

// The comparison needs P to agree outside the dirty units: a mutant whose
// durable image differs elsewhere (a dropped persist that a later fence
// would have committed) has images all its own.
TEST(ShadowTest, ImagesAreNotComparedWhenTheDurableImagesDiffer) {
  std::vector<char> base_img(4096, 0), mut_img(4096, 0);
  Shadow base(base_img.data(), base_img.size(), Mode::kAdr);
  Shadow mut(mut_img.data(), mut_img.size(), Mode::kAdr);
  const uint64_t v = 9;
  base.Store(64, reinterpret_cast<const uint8_t*>(&v), 8, 0, false);
  mut.Store(64, reinterpret_cast<const uint8_t*>(&v), 8, 0, false);
  base.Flush(64, 8, 1);  // the mutant drops this flush
  base.Fence(2);
  mut.Fence(2);
  // Line 64: the base holds 9 durably; the mutant may still show 0, which
  // no image of the base has.
  ImageDiff d = DiffImages(base, mut);
  EXPECT_TRUE(d.comparable);
  EXPECT_FALSE(d.subset);
  ASSERT_EQ(d.fresh.size(), 1u);
  EXPECT_EQ(d.fresh[0], std::vector<uint32_t>{0});
  // Once the base changes a line the mutant leaves clean, with bytes the
  // mutant's P does not hold, nothing compares.
  const uint64_t u = 11;
  base.Store(1024, reinterpret_cast<const uint8_t*>(&u), 8, 0, false);
  base.Flush(1024, 8, 1);
  base.Fence(2);
  EXPECT_FALSE(DiffImages(base, mut).comparable);
  EXPECT_FALSE(DiffImages(base, mut).subset);
}

TEST(ShadowTest, AboveTheBoundThePlanIsStructuredPlusSamples) {
  std::vector<char> img(1 << 16, 0);
  Shadow s(img.data(), img.size(), Mode::kAdr);
  uint64_t v = 1;
  for (uint64_t line = 0; line < 20; line++)
    for (int w = 0; w < 3; w++) s.Store(line * 64 + 8 * w, reinterpret_cast<uint8_t*>(&v), 8, 0, false);
  ImagePlan plan(s.DirtyUnits(), img.data(), 4096, 100, 7);
  EXPECT_FALSE(plan.exhaustive());
  // all-old, all-new, 20 lines x 3 prefixes x 2, 190 pairs x 2, 100 samples.
  EXPECT_EQ(plan.planned(), 2u + 120u + 380u + 100u);
}

// ---- the explorer on the test structure ------------------------------------------------

TEST(ExplorerTest, CorrectStructureHasNoViolationsInEveryMode) {
  for (Mode mode : {Mode::kAdr, Mode::kStrict, Mode::kEadr}) {
    auto r = Explore(CowArrayFactory(), Small(mode));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    PrintReport(*r, stdout);
    EXPECT_EQ(r->violations, 0u);
    EXPECT_GT(r->images_checked, 100u);
    EXPECT_EQ(r->scenarios, r->scenarios_total);
    // Only the crash points with a whole large array dirty are sampled.
    EXPECT_GT(r->exhaustive_fraction, 0.75);
  }
}

TEST(ExplorerTest, DroppedPersistIsCaughtWithAReplayableTicket) {
  ModeGuard g(CowArrayMode::kDropArrayPersist);
  auto r = Explore(CowArrayFactory(), Small(Mode::kAdr));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  PrintReport(*r, stdout);
  ASSERT_GT(r->violations, 0u);
  ASSERT_FALSE(r->tickets.empty());
  const Ticket& t = r->tickets[0];
  EXPECT_NE(t.command.find("--replay " + ImageRefString(t.where)), std::string::npos);
  // Replaying the ticket's image reproduces exactly one violation.
  ExploreOptions o = Small(Mode::kAdr);
  o.replay = t.where;
  auto again = Explore(CowArrayFactory(), o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->violations, 1u);
  EXPECT_EQ(again->images_checked, 1u);
}

// Operations on a full pool (ExploreOptions::out_of_space): a failure must
// leave the state before the call, nothing leaked, in every crash image and
// on the live tree.  Each flaw is caught only by those scenarios.
TEST(ExplorerTest, FailuresOnAFullPoolThatChangeOrLeakAreCaught) {
  for (CowArrayMode m : {CowArrayMode::kFailAfterCommit, CowArrayMode::kLeakOnFailure}) {
    ModeGuard g(m);
    ExploreOptions o = Small(Mode::kAdr);
    o.depth = 1;
    o.out_of_space = false;
    auto without = Explore(CowArrayFactory(), o);
    ASSERT_TRUE(without.ok()) << without.status().ToString();
    EXPECT_EQ(without->violations, 0u) << "mode " << static_cast<int>(m);
    o.out_of_space = true;
    auto r = Explore(CowArrayFactory(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    PrintReport(*r, stdout);
    EXPECT_EQ(r->scenarios, r->scenarios_total);
    EXPECT_GT(r->scenarios, without->scenarios);
    ASSERT_GT(r->violations, 0u) << "mode " << static_cast<int>(m);
    ASSERT_FALSE(r->tickets.empty());
    EXPECT_NE(r->tickets[0].scenario.find("on a pool full from allocation"), std::string::npos)
        << r->tickets[0].scenario;
  }
}

TEST(ExplorerTest, DroppedPersistIsHarmlessUnderEadr) {
  ModeGuard g(CowArrayMode::kDropArrayPersist);
  auto r = Explore(CowArrayFactory(), Small(Mode::kEadr));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->violations, 0u);
}

TEST(ExplorerTest, RandomWorkloadOnCorrectStructurePasses) {
  ExploreOptions o = Small(Mode::kAdr);
  o.workload = Workload::kRandom;
  o.ops = 200;
  auto r = Explore(CowArrayFactory(), o);
  ASSERT_TRUE(r.ok());
  PrintReport(*r, stdout);
  EXPECT_EQ(r->violations, 0u);
  EXPECT_GT(r->crash_points, 200u);
}

TEST(ExplorerTest, RawStoreIsReportedAsInstrumentationGap) {
  ModeGuard g(CowArrayMode::kRawStore);
  ExploreOptions o = Small(Mode::kAdr);
  o.depth = 1;
  auto r = Explore(CowArrayFactory(), o);
  ASSERT_TRUE(r.ok());
  ASSERT_GT(r->violations, 0u);
  EXPECT_NE(r->tickets[0].failure.find("instrumentation gap"), std::string::npos) << r->tickets[0].failure;
}

TEST(ExplorerTest, CrashInRecoveryIsAViolationNotTheEndOfTheExplorer) {
  ModeGuard g(CowArrayMode::kCrashInRecovery);
  ExploreOptions o = Small(Mode::kAdr);
  o.depth = 1;
  o.max_tickets = 100;
  auto r = Explore(CowArrayFactory(), o);
  ASSERT_TRUE(r.ok());
  ASSERT_GT(r->violations, 0u);
  bool segv = false;
  for (const auto& t : r->tickets) segv = segv || t.failure.find("signal 11") != std::string::npos;
  EXPECT_TRUE(segv);
  // The explorer went on after the crashes.
  EXPECT_EQ(r->scenarios, r->scenarios_total);
}

// Mutates the copy-on-write array in `mode` over a short random workload
// (arrays stay small, so every crash point is exhaustive) and prints each
// mutant.
Result<MutationReport> MutateCowArray(CowArrayMode mode, bool prove_lint = true) {
  ModeGuard g(mode);
  ExploreOptions o = Small(Mode::kAdr);
  o.workload = Workload::kRandom;
  o.ops = 12;
  o.mutate_prove_lint = prove_lint;
  auto m = Mutate(CowArrayFactory(), o);
  if (m.ok())
    for (const auto& mu : m->list)
      std::printf("mutant %s@%s: %s %s\n", mu.site.c_str(), mu.kind.c_str(), mu.outcome.c_str(), mu.evidence.c_str());
  return m;
}

TEST(ExplorerTest, MutationTestingCatchesEveryNeededPersist) {
  auto m = MutateCowArray(CowArrayMode::kExtraPersist);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::map<std::string, std::map<std::string, int>> by_kind;  // kind -> outcome -> count
  for (const auto& mu : m->list) by_kind[mu.kind][mu.outcome]++;
  EXPECT_GE(by_kind["drop flush"]["caught"] + by_kind["drop fence"]["caught"], 6);
  // The deliberately redundant persist and the commit persist it duplicates:
  // flush and fence of each.
  EXPECT_EQ(by_kind["drop flush"]["redundant"] + by_kind["drop fence"]["redundant"], 4);
  // The 8-byte stores (the array offset, the pool's root slot) hold offsets
  // below 4 GiB: a torn store changes only its low half, which is atomic.
  EXPECT_EQ(by_kind["split store"]["redundant"], 2);
  EXPECT_EQ(by_kind["leak a block"]["caught"], 1);
  EXPECT_EQ(m->redundant, 6u);
  EXPECT_EQ(m->survived, 0u);
  EXPECT_EQ(m->score, 1.0);
}

// A persist of a word nothing reads: dropping it changes no recovered
// contents, so no violation can catch it and every crash point is
// exhaustive ("redundant" by violations alone), but each update then ends
// with that store pending, which the pending-store lint reports.
// Counts the mutants the lint caught, each expected caught, with
// `without_lint` as its outcome without the lint and the lint's evidence
// naming the test tree's store site.
int CheckLintCaught(const MutationReport& m, const std::string& without_lint) {
  int by_lint = 0;
  for (const auto& mu : m.list) {
    if (!mu.by_lint) continue;
    by_lint++;
    EXPECT_EQ(mu.outcome, "caught");
    EXPECT_EQ(mu.without_lint, without_lint);
    EXPECT_NE(mu.evidence.find("still pending at the end of"), std::string::npos) << mu.evidence;
    EXPECT_NE(mu.evidence.find("test_trees.cc"), std::string::npos) << mu.evidence;
    if (without_lint == "not explored") {
      EXPECT_EQ(mu.lazy_runs, 0u);
    }
  }
  return by_lint;
}

TEST(ExplorerTest, MutationTestingCatchesAPersistOnlyThePendingStoreLintNeeds) {
  auto m = MutateCowArray(CowArrayMode::kUnreadWord);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The count word's flush and its fence.
  EXPECT_EQ(CheckLintCaught(*m, "redundant"), 2);
  EXPECT_EQ(m->caught_by_lint, 2u);
  EXPECT_EQ(m->survived, 0u);
  EXPECT_EQ(m->score, 1.0);
  EXPECT_EQ(m->score_violations_only, 1.0);  // the two count as redundant without the lint
}

// Without mutate_prove_lint a mutant the quick pass's lint catches is not
// explored again: caught all the same, its proof without the lint not run.
TEST(ExplorerTest, AMutantTheQuickPassLintCatchesIsNotExploredAgain) {
  auto m = MutateCowArray(CowArrayMode::kUnreadWord, /*prove_lint=*/false);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(CheckLintCaught(*m, "not explored"), 2);
  EXPECT_EQ(m->score, 1.0);
  EXPECT_LT(m->score_violations_only, 1.0);  // not proved: counted as survived
}

// With a lazy search, each mutant is first explored with the plain plan: a
// mutant that pass catches by a violation costs no lazy run; only the
// others are searched lazily for their proof.  Same outcomes as above.
TEST(ExplorerTest, MutationCatchesWithThePlainPlanBeforeSearchingLazily) {
  ModeGuard g(CowArrayMode::kExtraPersist);
  ExploreOptions o = Small(Mode::kAdr);
  o.workload = Workload::kRandom;
  o.ops = 12;
  o.lazy = LazyMode::kOn;
  auto m = Mutate(CowArrayFactory(), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  uint64_t caught = 0, searched = 0;
  for (const auto& mu : m->list) {
    if (mu.outcome == "caught" && !mu.by_lint) {
      caught++;
      EXPECT_EQ(mu.lazy_runs, 0u) << mu.kind << " at " << mu.site;
    }
    // A redundant mutant changes some crash points (those of a mutant that
    // changes none are all checked by the base run: no run at all).
    if (mu.outcome == "redundant" && mu.lazy_runs > 0) searched++;
  }
  EXPECT_GE(caught, 7u);
  EXPECT_GT(searched, 0u);
  EXPECT_EQ(m->redundant, 6u);
  EXPECT_EQ(m->survived, 0u);
}

// A negative control for the lazy search's memory of checked images
// (docs/crash_model.md section 11).  kCommitBeforeEntries can make its
// commit durable before the new array's entries.  The image "no entry
// persisted, old commit" at the commit's fence is the one the point before
// (header persisted, meta clean) checked; there the meta line was clean.
// Reusing that run's reads without the meta line's would prove the commit's
// point with one run; the search must know the line was read.
TEST(ExplorerTest, TheLazySearchDoesNotReuseReadsRecordedBeforeALineWasDirty) {
  if (!ReadTracker::Supported()) GTEST_SKIP() << "read tracking needs x86-64 Linux";
  ModeGuard g(CowArrayMode::kCommitBeforeEntries);
  ExploreOptions o = Small(Mode::kAdr);
  o.depth = 1;
  auto plain = Explore(CowArrayFactory(), o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_GT(plain->violations, 0u);
  o.lazy = LazyMode::kOn;
  auto lazy = Explore(CowArrayFactory(), o);
  ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
  PrintReport(*lazy, stdout);
  EXPECT_EQ(lazy->scenarios, lazy->scenarios_total);
  EXPECT_GT(lazy->lazy_runs, 0u);
  EXPECT_GT(lazy->violations, 0u);
}

TEST(KillHarnessTest, EveryAcknowledgedOperationSurvivesSigkill) {
  KillOptions o;
  o.iterations = 30;
  o.seed = Seed();
  o.pool_size = 8 << 20;
  o.key_domain = 64;  // the copy-on-write array is quadratic: keep it small
  // Killed after a number of the child's records, not after a delay: the
  // same work on any machine.
  o.max_records = 40;
  auto r = RunKillHarness(CowArrayFactory(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& f : r->failures) std::printf("%s\n", f.c_str());
  EXPECT_TRUE(r->failures.empty());
  EXPECT_EQ(r->iterations, 30u);
  EXPECT_GE(r->acked_ops, r->guaranteed_acks);
  EXPECT_GT(r->guaranteed_acks, 30u);
  std::printf("%llu acknowledged ops checked (%llu guaranteed by the kill points), %llu kills during open\n",
              (unsigned long long)r->acked_ops, (unsigned long long)r->guaranteed_acks,
              (unsigned long long)r->kills_during_open);
}

}  // namespace
}  // namespace pmtree::crash
