// SPDX-License-Identifier: Apache-2.0
//
// Timing and statistics for the benchmark.
//
// TickClock reads a cycle counter (rdtsc, when the CPU has an invariant TSC)
// or std::chrono::steady_clock, and converts ticks to nanoseconds with a rate
// CALIBRATED against steady_clock at start-up: no CPU frequency is ever
// assumed.  Latency samples are stored as raw ticks in pre-sized vectors in the
// timed loop and converted afterwards.
//
// Thread safety: TickClock::Now() is safe from any thread; Calibrate() runs
// once (thread-safe static).

#ifndef PMTREE_BENCH_STATS_H_
#define PMTREE_BENCH_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pmtree::bench {

class TickClock {
 public:
  // The process-wide clock (calibrated on first use, ~20 ms).
  static const TickClock& Get();
  static uint64_t Now() {
#if defined(__x86_64__)
    if (use_tsc_) return __builtin_ia32_rdtsc();
#endif
    return SteadyNs();
  }
  double ns_per_tick() const { return ns_per_tick_; }
  double ToNs(uint64_t ticks) const { return static_cast<double>(ticks) * ns_per_tick_; }
  uint64_t FromNs(double ns) const { return static_cast<uint64_t>(ns / ns_per_tick_); }
  // "rdtsc (2.000 GHz, calibrated)" or "steady_clock".
  std::string Describe() const;

 private:
  TickClock();
  static uint64_t SteadyNs();
  static inline bool use_tsc_ = false;
  double ns_per_tick_ = 1;
};

// Latency summary in nanoseconds.
struct LatencySummary {
  uint64_t samples = 0;
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, max = 0, geomean = 0, mean = 0;
};
// Summarises samples given in nanoseconds (sorted in place).  Percentiles are
// nearest-rank; zero samples are treated as 1 ns in the geometric mean.
LatencySummary Summarize(std::vector<double>* ns);

// min / median / max of repetitions.
struct Spread {
  double min = 0, median = 0, max = 0;
};
Spread SpreadOf(std::vector<double> v);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_STATS_H_
