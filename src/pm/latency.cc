// SPDX-License-Identifier: Apache-2.0
#include "pm/latency.h"

#include <chrono>
#include <thread>

namespace pmtree {

double TscTicksPerNs() {
  static const double ticks_per_ns = [] {
    using Clock = std::chrono::steady_clock;
    // Two samples of ~5 ms; keep the larger window to damp scheduling noise.
    double best = 0;
    for (int i = 0; i < 2; i++) {
      auto t0 = Clock::now();
      uint64_t c0 = ReadTsc();
      while (Clock::now() - t0 < std::chrono::milliseconds(5)) {
      }
      uint64_t c1 = ReadTsc();
      auto t1 = Clock::now();
      double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
      double r = static_cast<double>(c1 - c0) / ns;
      if (r > best) best = r;
    }
    return best > 0 ? best : 1.0;
  }();
  return ticks_per_ns;
}

void SpinNs(uint64_t ns) {
  if (ns == 0) return;
  const uint64_t end = ReadTsc() + static_cast<uint64_t>(static_cast<double>(ns) * TscTicksPerNs());
  while (ReadTsc() < end) __builtin_ia32_pause();
}

}  // namespace pmtree
