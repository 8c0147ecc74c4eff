// SPDX-License-Identifier: Apache-2.0
//
// Media profiles (`pmtree bench --media NAME`): named settings of the pool's
// write-latency emulation, one per medium the papers measured on, so that a
// suite runs "at its paper's media setting" by name instead of by a number.
//
// The pool emulates slower media in one way only: it spins a fixed extra
// latency after each flushed cache line (PoolOptions::write_latency_ns).
// A profile is therefore one such latency plus its provenance and what it
// does not capture; docs/bench.md ("Media profiles") tabulates them.
//
// Thread safety: the table is immutable.

#ifndef PMTREE_BENCH_MEDIA_H_
#define PMTREE_BENCH_MEDIA_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pmtree/status.h"

namespace pmtree::bench {

struct MediaProfile {
  const char* name;           // "dram", "pcm-300", "pcm-600", "optane"
  uint32_t write_latency_ns;  // extra latency per flushed 64 B line
  const char* source;         // which paper uses it and where the number comes from
  const char* not_captured;   // what the emulation leaves out ("" for dram)
};

// Every profile, dram first.
const std::vector<MediaProfile>& MediaProfiles();
// The profile called `name`, or nullptr.
const MediaProfile* FindMedia(std::string_view name);
// "dram, pcm-300, pcm-600, optane".
std::string MediaNames();
// InvalidArgument naming the valid profiles when `name` is unknown.
Status ValidateMedia(std::string_view name);

// Emulated media time of a run: `lines` flushed lines at the profile's
// latency (what the pool's spin adds, by count, independent of the clock).
inline double EmulatedMediaNs(const MediaProfile& p, double lines) {
  return lines * static_cast<double>(p.write_latency_ns);
}

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_MEDIA_H_
