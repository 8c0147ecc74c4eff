// SPDX-License-Identifier: Apache-2.0
//
// The long crash explorations of wotree and sortedtree (CTest label "long",
// not in the default run; `ctest -L long -R wotree_long`): the small
// workload at depth 3 (2 in eADR at 16 lines) and seeded random workloads of 1000 operations at 4
// and 16 cache lines in ADR and eADR modes with zero violations, every
// reached flush/fence site covered, the mutation score of the issue
// (>= 95 % of non-redundant mutants caught) and 200 real SIGKILLs lossless.
// PMTREE_SEED replays the random parts.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "crash/explorer.h"
#include "crash/kill.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree {
namespace {

uint64_t Seed() { return testutil::Seed(1); }

class WoLongTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WoLongTest, FullExplorationHasNoViolationsAndCoversEverySite) {
  const TreeFactory& f = *FindTree(GetParam());
  for (uint32_t size : {256u, 1024u}) {
    for (crash::Mode mode : {crash::Mode::kAdr, crash::Mode::kEadr}) {
      for (crash::Workload w : {crash::Workload::kSmall, crash::Workload::kRandom}) {
        crash::ExploreOptions o;
        o.mode = mode;
        o.workload = w;
        // eADR at 16 lines has a crash point after every store: depth 2
        // keeps it to minutes; everything else runs every 3-op sequence.
        o.depth = (mode == crash::Mode::kEadr && size == 1024) ? 2 : 3;
        o.ops = 1000;
        o.seed = Seed();
        o.tree_options.node_size = size;
        auto r = crash::Explore(f, o);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        std::printf("%s %u B %s %s: %llu crash points (%.1f%% exhaustive), %llu images, sites %llu/%llu, %llu "
                    "violations, %.1f s\n",
                    f.name.data(), size, std::string(crash::ModeName(mode)).c_str(),
                    std::string(crash::WorkloadName(w)).c_str(), (unsigned long long)r->crash_points,
                    100 * r->exhaustive_fraction, (unsigned long long)r->images_checked,
                    (unsigned long long)r->sites_covered, (unsigned long long)r->sites_total,
                    (unsigned long long)r->violations, r->seconds);
        for (const auto& t : r->tickets) ADD_FAILURE() << t.ToString();
        EXPECT_EQ(r->violations, 0u);
        if (w == crash::Workload::kSmall) {
          EXPECT_EQ(r->sites_covered, r->sites_total);
        }
      }
    }
  }
}

TEST_P(WoLongTest, MutationScoreIsAtLeastNinetyFivePercent) {
  crash::ExploreOptions o;
  o.tree_options.node_size = 256;
  // A mutant whose loss recovery repairs is "redundant" only when every
  // crash point it changes is enumerated: raise the exhaustive bound so the
  // points a dropped barrier leaves with many dirty lines are not sampled.
  o.max_images = 65536;
  auto r = crash::Mutate(*FindTree(GetParam()), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& m : r->list)
    if (m.outcome != "caught") std::printf("  %s %s: %s\n", m.kind.c_str(), m.site.c_str(), m.outcome.c_str());
  std::printf("%s: %llu mutants, %llu caught, %llu redundant, %llu survived, score %.1f%%\n", GetParam().c_str(),
              (unsigned long long)r->mutants, (unsigned long long)r->caught, (unsigned long long)r->redundant,
              (unsigned long long)r->survived, 100 * r->score);
  EXPECT_GE(r->score, 0.95);
}

TEST_P(WoLongTest, TwoHundredRealKillsLoseNothingAcknowledged) {
  crash::KillOptions o;
  o.seed = Seed();
  auto r = crash::RunKillHarness(*FindTree(GetParam()), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& f : r->failures) ADD_FAILURE() << f;
  EXPECT_EQ(r->iterations, 200u);
}

INSTANTIATE_TEST_SUITE_P(WoTreeAndItsBaseline, WoLongTest, ::testing::Values("wotree", "sortedtree"));

}  // namespace
}  // namespace pmtree
