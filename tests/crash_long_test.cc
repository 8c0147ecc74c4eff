// SPDX-License-Identifier: Apache-2.0
//
// The nightly crash exploration (label "long", not in the default run):
// every persistent tree, depth-3 small workload and a 2000-operation random
// workload, in ADR, strict and eADR modes, a few minutes per tree.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "crash/explorer.h"
#include "pmtree/registry.h"

namespace pmtree::crash {
namespace {

std::vector<const TreeFactory*> PersistentTrees() {
  std::vector<const TreeFactory*> v;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && !f.test_only()) v.push_back(&f);
  return v;
}

class CrashLongTest : public ::testing::TestWithParam<const TreeFactory*> {};

TEST_P(CrashLongTest, DeepAndRandomWorkloadsHaveNoViolationsInEveryMode) {
  const TreeFactory& f = *GetParam();
  const char* s = std::getenv("PMTREE_SEED");
  const uint64_t seed = s ? std::strtoull(s, nullptr, 10) : 7;
  std::printf("seed %llu (PMTREE_SEED replays)\n", (unsigned long long)seed);
  for (Workload w : {Workload::kSmall, Workload::kRandom}) {
    for (Mode mode : {Mode::kAdr, Mode::kStrict, Mode::kEadr}) {
      ExploreOptions o;
      o.mode = mode;
      o.workload = w;
      o.depth = 3;
      o.ops = 2000;
      o.seed = seed;
      o.budget_seconds = 60;
      o.max_tickets = 5;
      auto r = Explore(f, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      std::printf("%s %s %s: %llu crash points (%.1f%% exhaustive), %llu images, %.0f images/s, %llu violations\n",
                  r->tree.c_str(), std::string(WorkloadName(w)).c_str(), std::string(ModeName(mode)).c_str(),
                  (unsigned long long)r->crash_points, 100 * r->exhaustive_fraction,
                  (unsigned long long)r->images_checked, r->images_per_s, (unsigned long long)r->violations);
      for (const auto& t : r->tickets) std::printf("%s", t.ToString().c_str());
      EXPECT_EQ(r->violations, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, CrashLongTest, ::testing::ValuesIn(PersistentTrees()),
                         [](const ::testing::TestParamInfo<const TreeFactory*>& i) {
                           std::string n(i.param->name);
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CrashLongTest);

}  // namespace
}  // namespace pmtree::crash
