// SPDX-License-Identifier: Apache-2.0
//
// A calibrated spin clock for media-latency emulation and cheap timing.
// The time-stamp counter's rate is measured against the steady clock once per
// process (about 10 ms); no CPU frequency is hard-coded anywhere.

#ifndef PMTREE_PM_LATENCY_H_
#define PMTREE_PM_LATENCY_H_

#include <cstdint>

namespace pmtree {

inline uint64_t ReadTsc() {
  uint32_t lo, hi;
  __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Time-stamp-counter ticks per nanosecond, measured on first call.
double TscTicksPerNs();

// Busy-waits for `ns` nanoseconds.
void SpinNs(uint64_t ns);

}  // namespace pmtree

#endif  // PMTREE_PM_LATENCY_H_
