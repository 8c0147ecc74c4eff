// SPDX-License-Identifier: Apache-2.0
//
// NV-Tree's workload-adaptive node sizing (paper §5): the decision of
// Algorithm 3 (which way and how far to change the size of the two new LNs of
// a split) bounded by the analytical model of §5.4 (Equations 1-4).  Pure
// functions over the profiling counters of Tables 2-3, so they are tested
// without a tree.  Thread safety: stateless.

#ifndef PMTREE_TREES_NVTREE_ADAPTIVE_H_
#define PMTREE_TREES_NVTREE_ADAPTIVE_H_

#include <cstdint>
#include <string_view>

namespace pmtree::nvtree {

enum class Strategy : uint32_t { kOff = 0, kConservative = 1, kAggressive = 2, kBalanced = 3 };

std::string_view StrategyName(Strategy s);
// "off" | "conservative" | "aggressive" | "balanced"; false for anything else.
bool ParseStrategy(std::string_view text, Strategy* out);

// Media costs of §5.4, per 64 B line: T_r(size) = lines(size) * read,
// T_w(size) = lines(size) * write (write includes the flush and fence).
struct MediaCost {
  double read_ns_per_line = 1;
  double write_ns_per_line = 100;
  double Tr(uint32_t bytes) const { return Lines(bytes) * read_ns_per_line; }
  double Tw(uint32_t bytes) const { return Lines(bytes) * write_ns_per_line; }
  static double Lines(uint32_t bytes) { return static_cast<double>((bytes + 63) / 64); }
};

// Profiling counters (Table 2) as seen by one split of LN[id].
struct Profile {
  uint64_t ln_reads = 0;     // nReads_LN[id]
  uint64_t ln_writes = 0;    // nWrites_LN[id]
  uint64_t total_reads = 0;  // nReads
  uint64_t total_writes = 0; // nWrites
  uint64_t n_ln = 1;         // N_LN
};

inline constexpr uint32_t kCacheLine = 64;
inline constexpr uint32_t kMinLeafBytes = 256;
inline constexpr uint32_t kMaxLeafBytes = 65536;
inline constexpr uint32_t kElementBytes = 24;

// Equations (1) and (2): enlarging oldSize -> newSize pays off.
bool EnlargePaysOff(uint32_t old_size, uint32_t new_size, const Profile& p, const MediaCost& c);
// Equations (3) and (4): shrinking oldSize -> newSize pays off.
bool ShrinkPaysOff(uint32_t old_size, uint32_t new_size, const Profile& p, const MediaCost& c);

// What GetNewSize decided, for the statistics.
enum class SizeChange { kNone, kUpLine, kUpDouble, kDown, kRejectedByModel };

// Algorithm 3 (GetNewSize) followed by the §5.4 limit: the size of each of the
// two new LNs when LN[id] of `size` bytes splits.  Aggressive keeps the size
// when doubling is rejected by the model; balanced then tries one cache line
// (§6.4.2); conservative only ever moves one line.  The result is a multiple
// of 64 in [kMinLeafBytes, max_size] (max_size <= kMaxLeafBytes; the tree
// passes kGrowthFactor times its configured node size).
uint32_t GetNewSize(uint32_t size, Strategy s, const Profile& p, const MediaCost& c, SizeChange* change,
                    uint32_t max_size = kMaxLeafBytes);

// An LN grows to at most this many times the configured node size: with no
// reads on a leaf the §5.4 model never limits growth (Negative_up = 0).
inline constexpr uint32_t kGrowthFactor = 8;

}  // namespace pmtree::nvtree

#endif  // PMTREE_TREES_NVTREE_ADAPTIVE_H_
