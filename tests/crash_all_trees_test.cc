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

std::vector<const TreeFactory*> PersistentTrees() {
  std::vector<const TreeFactory*> v;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && !f.test_only()) v.push_back(&f);
  return v;
}

void Print(const ExploreReport& r) {
  std::printf("%s %s: %llu/%llu scenarios, %llu crash points (%.1f%% exhaustive), %llu images "
              "(+%llu dedup, +%llu in crashed recoveries, %llu continuations), %.0f images/s, %.1f s%s, "
              "%llu violations, sites %llu/%llu covered\n",
              r.tree.c_str(), std::string(ModeName(r.mode)).c_str(), (unsigned long long)r.scenarios,
              (unsigned long long)r.scenarios_total, (unsigned long long)r.crash_points, 100 * r.exhaustive_fraction,
              (unsigned long long)r.images_checked, (unsigned long long)r.images_deduplicated,
              (unsigned long long)r.recovery_crash_images, (unsigned long long)r.continuation_runs, r.images_per_s,
              r.seconds, r.budget_exhausted ? " (budget reached)" : "", (unsigned long long)r.violations,
              (unsigned long long)r.sites_covered, (unsigned long long)r.sites_total);
  for (const auto& s : r.sites)
    if (!s.covered) std::printf("  uncovered: %s@%s\n", s.name.c_str(), s.kind.c_str());
  for (const auto& t : r.tickets) std::printf("%s", t.ToString().c_str());
}

class CrashAllTreesTest : public ::testing::TestWithParam<const TreeFactory*> {};

TEST_P(CrashAllTreesTest, SmallWorkloadHasNoViolationsInAdrAndEadrModes) {
  const TreeFactory& f = *GetParam();
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
                         [](const ::testing::TestParamInfo<const TreeFactory*>& i) {
                           std::string n(i.param->name);
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

}  // namespace
}  // namespace pmtree::crash
