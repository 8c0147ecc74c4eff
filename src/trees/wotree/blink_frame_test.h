// SPDX-License-Identifier: Apache-2.0
//
// Test helpers shared by the two designs over BlinkFrame (wotree_test.cc and
// sortedtree_test.cc): a node-size option, the persists of one operation,
// and the default run's crash exploration over a table of cases.

#ifndef PMTREE_TREES_WOTREE_BLINK_FRAME_TEST_H_
#define PMTREE_TREES_WOTREE_BLINK_FRAME_TEST_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>

#include "crash/explorer.h"
#include "pmtree/counters.h"
#include "pmtree/registry.h"

namespace pmtree::blink_frame_test {

inline TreeOptions NodeSize(uint32_t n) {
  TreeOptions o;
  o.node_size = n;
  return o;
}

// The flushes and fences `op` issues (with a counting pool).
template <class F>
PersistCounters Measure(F&& op) {
  counters::BeginOperation();
  const PersistCounters before = counters::Snapshot();
  op();
  return counters::Snapshot() - before;
}

struct CrashCase {
  uint32_t size;  // node size in bytes
  crash::Mode mode;
  crash::Workload workload;
  uint32_t depth;  // operations per sequence (small workload)
};

// Explores each case (random workloads: `ops` operations from `seed`) and
// expects no violation; check(case, report) adds a design's own expectations.
template <class Check>
void ExpectNoCrashViolations(const TreeFactory& tree, std::initializer_list<CrashCase> cases, uint64_t seed,
                             uint64_t ops, Check&& check) {
  for (const CrashCase& c : cases) {
    crash::ExploreOptions o;
    o.mode = c.mode;
    o.workload = c.workload;
    o.depth = c.depth;
    o.ops = ops;
    o.seed = seed;
    o.tree_options.node_size = c.size;
    o.max_tickets = 5;
    auto r = crash::Explore(tree, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    crash::PrintReport(*r, stdout);
    for (const auto& site : r->sites)
      if (!site.covered) std::printf("  uncovered: %s@%s\n", site.name.c_str(), site.kind.c_str());
    for (const auto& tk : r->tickets) ADD_FAILURE() << tk.ToString();
    EXPECT_EQ(r->violations, 0u);
    check(c, *r);
  }
}

}  // namespace pmtree::blink_frame_test

#endif  // PMTREE_TREES_WOTREE_BLINK_FRAME_TEST_H_
