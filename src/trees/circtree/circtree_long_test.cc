// SPDX-License-Identifier: Apache-2.0
//
// Circ-Tree's long crash explorations (CTest label "long"; `ctest -L long`):
// the full explorer matrix of issue 11 -- small (depth 3 at 512 B, 2 at
// 4 KB) and random workloads at 512 B and 4 KB, ADR and eADR, zero violations, every flush/fence site
// covered -- the mutation score, and the real-kill harness.  Bounded by work
// (scenarios, operations, iterations), never by time.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "crash/explorer.h"
#include "crash/kill.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree::circtree {
namespace {

uint64_t Seed() { return testutil::Seed(1); }

struct Cell {
  uint32_t node_size;
  crash::Mode mode;
  crash::Workload workload;
};

class CircTreeExplorerMatrix : public ::testing::TestWithParam<Cell> {};

TEST_P(CircTreeExplorerMatrix, HasNoViolationsAndCoversEverySite) {
  const Cell c = GetParam();
  crash::ExploreOptions o;
  o.mode = c.mode;
  o.workload = c.workload;
  o.seed = Seed();
  o.ops = 1000;
  o.tree_options.node_size = c.node_size;
  if (c.node_size == 4096) {
    o.pool_size = 16ull << 20;
    o.depth = 2;  // 4 KB leaves make every scenario long; depth 3 runs for hours
  }
  auto r = crash::Explore(*FindTree("circtree"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& t : r->tickets) ADD_FAILURE() << t.ToString();
  EXPECT_EQ(r->violations, 0u);
  // Every flush/fence site is reached by the small workload (none is
  // unreachable; docs/trees/circtree.md).  eADR has no flushes to cover and
  // random workloads may miss the rare recovery-only sites.
  if (c.mode == crash::Mode::kAdr && c.workload == crash::Workload::kSmall) {
    for (const auto& s : r->sites)
      EXPECT_TRUE(s.covered) << s.kind << " site " << s.name << " (" << s.function << ") not covered";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Circ, CircTreeExplorerMatrix,
    ::testing::Values(Cell{512, crash::Mode::kAdr, crash::Workload::kSmall},
                      Cell{512, crash::Mode::kEadr, crash::Workload::kSmall},
                      Cell{512, crash::Mode::kAdr, crash::Workload::kRandom},
                      Cell{512, crash::Mode::kEadr, crash::Workload::kRandom},
                      Cell{4096, crash::Mode::kAdr, crash::Workload::kSmall},
                      Cell{4096, crash::Mode::kEadr, crash::Workload::kSmall},
                      Cell{4096, crash::Mode::kAdr, crash::Workload::kRandom},
                      Cell{4096, crash::Mode::kEadr, crash::Workload::kRandom}),
    [](const ::testing::TestParamInfo<Cell>& i) {
      return std::to_string(i.param.node_size) + "_" + (i.param.mode == crash::Mode::kAdr ? "adr" : "eadr") + "_" +
             (i.param.workload == crash::Workload::kSmall ? "small" : "random");
    });

// CRASH_MODEL.md §5: every mutant -- each covered flush or fence dropped,
// each aligned 8-byte store split, a leaked block -- on the command,
// `pmtree crash --tree circtree --mutate --depth 2 --node-size 512`.  Score
// >= 95 % (issue 11) and no survivor (docs/trees/circtree.md, "Mutation
// score").  The persists of meta.root after a root split and a root collapse
// (InstallRoot, CollapseRoot) are redundant in this workload -- recovery
// cases 4 and 9 redo them while the old root is intact -- and caught once
// retired blocks are reused (--reclaim-each-op,
// CircTreeCrashTest.CollapsePersistIsCaughtOnceTheOldRootIsReused).
TEST(CircTreeMutation, ScoreIsAtLeastNinetyFivePercentWithNoSurvivor) {
  crash::ExploreOptions o;
  o.depth = 2;
  o.tree_options.node_size = 512;
  o.progress = true;  // one line per mutant on stderr: the run is long
  auto r = crash::Mutate(*FindTree("circtree"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& m : r->list)
    if (m.outcome != "caught") std::printf("  %s %s: %s\n", m.kind.c_str(), m.site.c_str(), m.outcome.c_str());
  std::printf("circtree depth 2: %llu mutants, %llu caught, %llu redundant, %llu survived, score %.1f%%\n",
              (unsigned long long)r->mutants, (unsigned long long)r->caught, (unsigned long long)r->redundant,
              (unsigned long long)r->survived, 100 * r->score);
  for (const auto& m : r->list) EXPECT_NE(m.outcome, "survived") << m.kind << " at " << m.site;
  EXPECT_GE(r->score, 0.95);
  EXPECT_GE(r->caught, 20u);
}

// CRASH_MODEL.md §6: 200 SIGKILLs of a child running a workload on a pool
// file; every acknowledged operation survives.
TEST(CircTreeKill, TwoHundredKillsLoseNothing) {
  crash::KillOptions o;
  o.iterations = 200;
  o.seed = Seed();
  o.tree_options.node_size = 512;
  auto r = crash::RunKillHarness(*FindTree("circtree"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& f : r->failures) ADD_FAILURE() << f;
  EXPECT_EQ(r->iterations, 200u);
  EXPECT_GT(r->acked_ops, 0u);
}

}  // namespace
}  // namespace pmtree::circtree
