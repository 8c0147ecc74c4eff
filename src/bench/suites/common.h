// SPDX-License-Identifier: Apache-2.0
//
// What every reproduction suite (src/bench/suites/<paper>.cc) shares: reading
// a metric of a recorded row, the predicates that pick rows, number formats,
// the ratio and reduction claims, and the configurations the suites run.
//
// Trees are named by registry name only; the mapping from a paper's
// baselines to ours:
//   LCB+Tree (NV-Tree paper) -> logtree, native "B+-tree" (WO-tree paper) -> sortedtree
//   FPTree -> fptree, wB+-Tree -> wbtree, FAST+FAIR -> fastfair,
//   volatile B+-tree -> volatile, Berkeley DB -> the bdb peer.
// Design-specific variants go through TreeOptions::extra:
//   nvtree   strategy=off|conservative|aggressive|balanced
//   circtree search=linear
//
// Internal to src/bench: included by the suite definitions only.

#ifndef PMTREE_BENCH_SUITES_COMMON_H_
#define PMTREE_BENCH_SUITES_COMMON_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench/suites.h"

namespace pmtree::bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Pred = std::function<bool(const Measurement&)>;
using Metric = std::function<double(const Measurement&)>;

// Metrics of one row; the persistence counts are NaN where the pool did not count.
inline double Tput(const Measurement& m) { return m.throughput_ops_s; }
inline double Geo(const Measurement& m) { return m.latency.geomean; }
inline double Flushes(const Measurement& m) { return m.counted ? m.flushes : kNaN; }
inline double Bytes(const Measurement& m) { return m.counted ? m.bytes : kNaN; }
inline double Lines(const Measurement& m) { return m.counted ? m.lines : kNaN; }

// `metric` of the first successful row of `exp` on `tree` matching `pred`; NaN when none.
double Get(SuiteContext& s, const std::string& exp, const std::string& tree, const Pred& pred, const Metric& metric);

Pred NodeSize(uint32_t ns);
Pred Variant(const std::string& v);
Pred Both(Pred a, Pred b);
Pred Any();

// `v` with `digits` decimals, "n/a" when not finite.
std::string Num(double v, int digits = 2);
// Operations per second as "1.234 Mops/s".
std::string Mops(double v);
// A record count as "100K", "10M" or the plain number.
std::string Scale(uint64_t n);

// A ratio claim "a is X times faster than b" (throughput a / b, or latency b / a).
void RatioClaim(SuiteContext& s, const std::string& exp, const std::string& paper, double lo, double hi, double a,
                double b, const std::vector<std::string>& needed, const std::string& what = "");
// A reduction claim "ours is lo..hi % below other", in percent.
void ReductionClaim(SuiteContext& s, const std::string& exp, const std::string& paper, double lo, double hi, double ours,
                    double other, const std::vector<std::string>& needed, const std::string& what);

// The user's base config with these targets, sizes and operation mix.
BenchConfig Config(SuiteContext& s, const std::vector<std::string>& trees, uint64_t records, uint64_t ops,
                   const char* mix);

// The node sizes of the NV-Tree and Circ-Tree sweeps.
inline const std::vector<uint32_t> kNodeSizes = {512, 1024, 2048, 4096};

// `c` with `ns` of emulated latency per flushed line, named by the media
// profile that has that latency (media.h), if any.
BenchConfig WithLatency(BenchConfig c, uint32_t ns);

// Runs `c` once per node size (rows keep node_size).
void RunNodeSizes(SuiteContext& s, const std::string& exp, BenchConfig c, const std::vector<uint32_t>& sizes);

// Persists objects of `size` bytes (write + flush + fence) in an anonymous
// pool until `total` bytes are flushed; one row per size, throughput in
// cache lines per second.
Measurement FlushThroughput(const BenchConfig& base, uint64_t size, uint64_t total);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_SUITES_COMMON_H_
