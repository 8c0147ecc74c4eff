// SPDX-License-Identifier: Apache-2.0
//
// The crash stage every persistent tree goes through: a bounded exploration
// of the small workload (every sequence of up to two operations from each
// interesting pre-state) in per-line-prefix ADR mode and in eADR mode, with
// zero violations required; and the negative control on the faithful
// FAST+FAIR variant, whose known flaws must be found.  Each tree has a time
// budget per mode, so the stage stays a few minutes on 2 cores; the stats are
// printed.  The longer nightly exploration is crash_long_test (label "long").

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "crash/explorer.h"
#include "pmtree/registry.h"

namespace pmtree::crash {
namespace {

uint64_t Seed() {
  const char* s = std::getenv("PMTREE_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 1;
}

double BudgetPerMode() {
  const char* s = std::getenv("PMTREE_CRASH_BUDGET");
  return s ? std::strtod(s, nullptr) : 10.0;
}

// Registry names (not pointers, so test names are stable).
std::vector<std::string> PersistentTrees() {
  std::vector<std::string> v;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && !f.test_only()) v.emplace_back(f.name);
  return v;
}

void Print(const ExploreReport& r) {
  std::printf("%s %s: %llu/%llu scenarios, %llu crash points (%.1f%% exhaustive), %llu images "
              "(+%llu dedup, +%llu in crashed recoveries, %llu continuations), %.0f images/s (%.0f per CPU s), %.1f s%s, "
              "%llu violations, sites %llu/%llu covered\n",
              r.tree.c_str(), std::string(ModeName(r.mode)).c_str(), (unsigned long long)r.scenarios,
              (unsigned long long)r.scenarios_total, (unsigned long long)r.crash_points, 100 * r.exhaustive_fraction,
              (unsigned long long)r.images_checked, (unsigned long long)r.images_deduplicated,
              (unsigned long long)r.recovery_crash_images, (unsigned long long)r.continuation_runs, r.images_per_s,
              r.images_per_cpu_s,
              r.seconds, r.budget_exhausted ? " (budget reached)" : "", (unsigned long long)r.violations,
              (unsigned long long)r.sites_covered, (unsigned long long)r.sites_total);
  for (const auto& s : r.sites)
    if (!s.covered) std::printf("  uncovered: %s@%s\n", s.name.c_str(), s.kind.c_str());
  for (const auto& t : r.tickets) std::printf("%s", t.ToString().c_str());
}

class CrashAllTreesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CrashAllTreesTest, SmallWorkloadHasNoViolationsInAdrAndEadrModes) {
  const TreeFactory& f = *FindTree(GetParam());
  std::printf("seed %llu (PMTREE_SEED replays), budget %.0f s per mode (PMTREE_CRASH_BUDGET)\n",
              (unsigned long long)Seed(), BudgetPerMode());
  for (Mode mode : {Mode::kAdr, Mode::kEadr}) {
    ExploreOptions o;
    o.mode = mode;
    o.depth = 2;
    o.seed = Seed();
    o.budget_seconds = BudgetPerMode();
    o.max_tickets = 5;
    auto r = Explore(f, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Print(*r);
    EXPECT_EQ(r->violations, 0u) << f.name << " in " << ModeName(mode) << " mode";
    EXPECT_GT(r->images_checked, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, CrashAllTreesTest, ::testing::ValuesIn(PersistentTrees()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CrashAllTreesTest);

// The negative control on a real tree: the faithful FAST+FAIR variant keeps
// the original code's crash bugs, switched on one at a time (tree option
// "flaws"), and the explorer must find each during the operation it breaks.
TEST(CrashNegativeControlTest, EachFastFairOrigFlawIsFound) {
  const TreeFactory* f = FindTree("fastfair-orig");
  if (f == nullptr) GTEST_SKIP() << "fastfair-orig is not registered in this build";
  const struct {
    const char* flaw;
    const char* op;  // the operation in flight when the first violation shows
  } kFlaws[] = {{"remove-flush", "remove"}, {"root-split", "insert"}, {"header-flush", "create"}};
  for (const auto& fl : kFlaws) {
    ExploreOptions o;
    o.depth = 2;
    o.seed = Seed();
    o.budget_seconds = BudgetPerMode();
    o.stop_at_first_violation = true;
    o.tree_options.extra["flaws"] = fl.flaw;
    auto r = Explore(*f, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Print(*r);
    ASSERT_GT(r->violations, 0u) << "flaw " << fl.flaw << " was not found";
    ASSERT_FALSE(r->tickets.empty());
    EXPECT_EQ(r->tickets[0].op.rfind(fl.op, 0), 0u) << "flaw " << fl.flaw << ": " << r->tickets[0].ToString();
    EXPECT_NE(r->tickets[0].command.find("--tree-option flaws=" + std::string(fl.flaw)), std::string::npos);
  }
}

// Issue 4 asks for exhaustive small workloads that reach, for LB+-Tree,
// splits of 256 B and of multi-256 B leaves, entry moving, delete and crashes
// during recovery.  The small workload at depth 2 (what the crash stage runs)
// must cover every flush and fence site of the leaf-writing paths, at 256 B
// and at 512 B (alternative headers).  Sites are matched by function, not by
// line, and counted: a path that stops being reached makes its sites
// invisible (a tracer sees only executed sites), so the count catches that
// too.  The sites the explorer's operations cannot reach are listed with the
// reason (docs/trees/lbtree.md, "Crash explorer coverage"); Close and
// instant restart are reached with the "reopen" letter (depth 1, 256 B).
TEST(LbTreeCrashCoverageTest, SmallWorkloadCoversEveryLeafWritePathAt256And512Bytes) {
  const TreeFactory* f = FindTree("lbtree");
  if (f == nullptr) GTEST_SKIP() << "lbtree is not registered in this build";
  // Covered (site, flush|fence) pairs expected per function.
  struct Path {
    const char* function;  // suffix of SiteReport::function
    size_t sites_256, sites_multi;
  };
  const Path kPaths[] = {
      {"::InitNew", 3, 3},         // create: head leaf flush, meta persist
      {"::LeafInsert", 6, 6},      // header-line insert (1 persist), entry moving (2 persists)
      {"::SplitAndInsert", 5, 6},  // new leaf, line 3, (alternative headers,) fence, the NAW's persist
      {"::Put", 2, 2},             // update/upsert of a present key: the value word
      {"::Remove", 2, 2},          // delete: the bitmap word
      {"::RecordHints", 4, 4},     // hint array and its switch, after the leaf count doubles
  };
  // Not reachable by insert/update/upsert/remove sequences: bulk load (no
  // such operation in the explorer) and the stale-lock clear of recovery
  // (this code never sets the PM lock bit; deviation 1).  Close and the
  // instant restart it enables need the "reopen" letter, checked below.
  const char* kUnreachable[] = {"::BulkLoad", "::WriteRestartImage", "::Close", "::TryInstantRestart",
                                "::ScanSegment"};
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (uint32_t node_size : {256u, 512u}) {
    SCOPED_TRACE("node size " + std::to_string(node_size) + ", PMTREE_SEED=" + std::to_string(Seed()));
    ExploreOptions o;
    o.depth = 2;
    o.seed = Seed();
    o.max_tickets = 5;
    o.tree_options.node_size = node_size;
    auto r = Explore(*f, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Print(*r);
    EXPECT_EQ(r->violations, 0u);
    EXPECT_FALSE(r->budget_exhausted);
    EXPECT_GT(r->recovery_crash_images, 0u) << "no crash during recovery was explored";
    std::map<std::string, size_t> covered;
    for (const SiteReport& s : r->sites) {
      if (s.name.find("src/trees/lbtree/") != 0) continue;
      bool unreachable = false;
      for (const char* u : kUnreachable) unreachable = unreachable || ends_with(s.function, u);
      EXPECT_TRUE(s.covered || unreachable) << s.name << "@" << s.kind << " (" << s.function << ") is not covered";
      for (const Path& p : kPaths)
        if (s.covered && ends_with(s.function, p.function)) covered[p.function]++;
    }
    for (const Path& p : kPaths)
      EXPECT_EQ(covered[p.function], node_size == 256 ? p.sites_256 : p.sites_multi)
          << "covered flush/fence sites in " << p.function;
  }
  // Close and reopen (clean shutdown, instant restart), one operation after
  // each pre-state: the restart image and its pointer (2 persists), and the
  // restart consuming the image (1 persist).
  SCOPED_TRACE("reopen, node size 256, PMTREE_SEED=" + std::to_string(Seed()));
  ExploreOptions o;
  o.depth = 1;
  o.reopen = true;
  o.seed = Seed();
  o.max_tickets = 5;
  o.tree_options.node_size = 256;
  auto r = Explore(*f, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Print(*r);
  EXPECT_EQ(r->violations, 0u);
  std::map<std::string, size_t> covered;
  for (const SiteReport& s : r->sites) {
    if (s.name.find("src/trees/lbtree/") != 0) continue;
    EXPECT_TRUE(s.covered || ends_with(s.function, "::BulkLoad") || ends_with(s.function, "::ScanSegment"))
        << s.name << "@" << s.kind << " (" << s.function << ") is not covered";
    for (const char* fn : {"::WriteRestartImage", "::TryInstantRestart"})
      if (s.covered && ends_with(s.function, fn)) covered[fn]++;
  }
  EXPECT_EQ(covered["::WriteRestartImage"], 4u);
  EXPECT_EQ(covered["::TryInstantRestart"], 2u);
}

}  // namespace
}  // namespace pmtree::crash
