// SPDX-License-Identifier: Apache-2.0

#include "bench/stats.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cpuid.h>
#include <thread>

namespace pmtree::bench {
namespace {

// CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every
// P-/C-state, so it can serve as a clock once calibrated.
bool HasInvariantTsc() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000007) return false;
  __get_cpuid(0x80000007, &a, &b, &c, &d);
  return (d >> 8) & 1;
#else
  return false;
#endif
}

}  // namespace

uint64_t TickClock::SteadyNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

TickClock::TickClock() {
  use_tsc_ = HasInvariantTsc();
  if (!use_tsc_) return;
  // Two spans measured against steady_clock; the longer gives the rate.
  uint64_t ns0 = SteadyNs();
  uint64_t t0 = __builtin_ia32_rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint64_t ns1 = SteadyNs();
  uint64_t t1 = __builtin_ia32_rdtsc();
  if (t1 <= t0 || ns1 <= ns0) {
    use_tsc_ = false;
    return;
  }
  ns_per_tick_ = static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0);
}

const TickClock& TickClock::Get() {
  static const TickClock clock;
  return clock;
}

std::string TickClock::Describe() const {
  if (!use_tsc_) return "steady_clock";
  char buf[80];
  snprintf(buf, sizeof buf, "rdtsc (%.3f GHz, calibrated against steady_clock)", 1.0 / ns_per_tick_);
  return buf;
}

LatencySummary Summarize(std::vector<double>* ns) {
  LatencySummary s;
  s.samples = ns->size();
  if (ns->empty()) return s;
  std::sort(ns->begin(), ns->end());
  auto pct = [&](double p) {
    // Nearest rank: the smallest sample with at least p of the samples <= it.
    auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(ns->size())));
    if (rank == 0) rank = 1;
    return (*ns)[std::min(rank, ns->size()) - 1];
  };
  s.p50 = pct(0.50);
  s.p90 = pct(0.90);
  s.p99 = pct(0.99);
  s.p999 = pct(0.999);
  s.p9999 = pct(0.9999);
  s.max = ns->back();
  double log_sum = 0, sum = 0;
  for (double v : *ns) {
    log_sum += std::log(std::max(v, 1.0));
    sum += v;
  }
  s.geomean = std::exp(log_sum / static_cast<double>(ns->size()));
  s.mean = sum / static_cast<double>(ns->size());
  return s;
}

Spread SpreadOf(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return s;
}

}  // namespace pmtree::bench
