// SPDX-License-Identifier: Apache-2.0
//
// The nightly crash exploration (label "long", not in the default run):
// every persistent tree, in ADR, strict and eADR modes, the whole depth-3
// small workload (every pre-state x every sequence of up to three letters,
// bulk loads) and a 2000-operation random workload, every crash point, up to
// 4096 images per point (+512 samples): bounded by work, no time budget
// (tens of minutes per tree on 2 cores; each asserts that all of its
// scenarios ran).  Zero violations are required in ADR and eADR; in strict
// per-word mode too, except for trees with kCapAssumesLineOrder, whose
// results are printed.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "crash/explorer.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree::crash {
namespace {

// Registry names (not pointers, so test names are stable).
std::vector<std::string> PersistentTrees() {
  std::vector<std::string> v;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && !f.test_only()) v.emplace_back(f.name);
  return v;
}

class CrashLongTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CrashLongTest, DeepAndRandomWorkloadsHaveNoViolationsInEveryMode) {
  const TreeFactory& f = *FindTree(GetParam());
  const uint64_t seed = testutil::Seed(7);
  for (Workload w : {Workload::kSmall, Workload::kRandom}) {
    for (Mode mode : {Mode::kAdr, Mode::kStrict, Mode::kEadr}) {
      ExploreOptions o;
      o.mode = mode;
      o.workload = w;
      o.depth = 3;
      o.ops = 2000;
      o.seed = seed;
      o.budget_seconds = 0;
      o.max_tickets = 5;
      auto r = Explore(f, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->scenarios, r->scenarios_total);
      PrintReport(*r, stdout);
      std::printf("%llu violations\n", (unsigned long long)r->violations);
      if (mode == Mode::kStrict && (f.capabilities & kCapAssumesLineOrder)) {
        // The design assumes in-order write-back within a line (see its doc):
        // strict mode is reported, not required.
        std::printf("%s relies on per-line store order: strict-mode violations are reported only\n",
                    r->tree.c_str());
        continue;
      }
      EXPECT_EQ(r->violations, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, CrashLongTest, ::testing::ValuesIn(PersistentTrees()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CrashLongTest);

}  // namespace
}  // namespace pmtree::crash
