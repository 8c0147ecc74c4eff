// SPDX-License-Identifier: Apache-2.0

#include "trees/nvtree/adaptive.h"

#include <algorithm>
#include <limits>

namespace pmtree::nvtree {

std::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kOff: return "off";
    case Strategy::kConservative: return "conservative";
    case Strategy::kAggressive: return "aggressive";
    case Strategy::kBalanced: return "balanced";
  }
  return "?";
}

bool ParseStrategy(std::string_view text, Strategy* out) {
  for (Strategy s : {Strategy::kOff, Strategy::kConservative, Strategy::kAggressive, Strategy::kBalanced}) {
    if (text == StrategyName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

namespace {

// R_r/w[i] = nReads_LN[i] / nWrites_LN[i]; a node never written counts as
// infinitely read-intensive (and never written-and-never-read as neither).
double ReadWriteRatio(const Profile& p) {
  if (p.ln_writes == 0) return p.ln_reads == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  return static_cast<double>(p.ln_reads) / static_cast<double>(p.ln_writes);
}

}  // namespace

bool EnlargePaysOff(uint32_t old_size, uint32_t new_size, const Profile& p, const MediaCost& c) {
  // (1) the split we save: read the old node, flush two half-size nodes.
  double positive = c.Tr(old_size) + 2 * c.Tw(old_size / 2);
  // (2) every search between growing past oldSize and the next split scans
  // the extra part: (newSize-oldSize)/Size_element appends, R_r/w searches each.
  double ratio = ReadWriteRatio(p);
  if (ratio == std::numeric_limits<double>::infinity()) return false;
  double negative = (static_cast<double>(new_size - old_size) / kElementBytes) * ratio * c.Tr(old_size) * 2;
  return positive > negative;
}

bool ShrinkPaysOff(uint32_t old_size, uint32_t new_size, const Profile& p, const MediaCost& c) {
  double ratio = ReadWriteRatio(p);
  // (3) the in-node scanning saved; (4) the earlier split paid.
  double positive = ratio == std::numeric_limits<double>::infinity()
                        ? std::numeric_limits<double>::infinity()
                        : (static_cast<double>(old_size - new_size) / kElementBytes) * ratio * c.Tr(new_size) * 2;
  double negative = c.Tr(new_size) + 2 * c.Tw(new_size / 2);
  return positive > negative;
}

uint32_t GetNewSize(uint32_t size, Strategy s, const Profile& p, const MediaCost& c, SizeChange* change,
                    uint32_t max_size) {
  max_size = std::min(max_size, kMaxLeafBytes);
  *change = SizeChange::kNone;
  if (s == Strategy::kOff) return size;
  const double n_ln = static_cast<double>(p.n_ln == 0 ? 1 : p.n_ln);
  const double avg_writes = static_cast<double>(p.total_writes) / n_ln;
  const double avg_reads = static_cast<double>(p.total_reads) / n_ln;
  const bool hot_write = static_cast<double>(p.ln_writes) > avg_writes;
  const bool hot_read = static_cast<double>(p.ln_reads) > avg_reads;
  // Cold = not hot.  With strict "<" a workload without any reads (the
  // paper's update-only experiment) would make no node cold-read and the
  // conservative strategy would never act (docs, D8).
  const bool cold_write = !hot_write;
  const bool cold_read = !hot_read;

  int up_or_down = 0;  // Algorithm 3, lines 2-18
  if (ReadWriteRatio(p) < 1) {
    if ((s == Strategy::kConservative && hot_write && cold_read) || s == Strategy::kAggressive ||
        s == Strategy::kBalanced)
      up_or_down = 1;
  } else if (p.ln_writes != 0 || p.ln_reads != 0) {
    if ((s == Strategy::kConservative && cold_write && hot_read) || (s == Strategy::kBalanced && hot_read))
      up_or_down = -1;
  }
  if (up_or_down == 0) return size;

  if (up_or_down == -1) {  // lines 22-23
    if (size < kMinLeafBytes + kCacheLine) return size;
    uint32_t smaller = size - kCacheLine;
    if (!ShrinkPaysOff(size, smaller, p, c)) {
      *change = SizeChange::kRejectedByModel;
      return size;
    }
    *change = SizeChange::kDown;
    return smaller;
  }
  // lines 24-30: double for aggressive and for hot-write nodes under balanced.
  bool doubling = s == Strategy::kAggressive || (s == Strategy::kBalanced && hot_write);
  if (doubling) {
    uint32_t doubled = size * 2;
    if (doubled <= max_size && EnlargePaysOff(size, doubled, p, c)) {
      *change = SizeChange::kUpDouble;
      return doubled;
    }
    // §6.4.2: aggressive stays put when the model rejects doubling; balanced
    // still grows by one cache line when that is within the limit.
    if (s == Strategy::kAggressive) {
      *change = SizeChange::kRejectedByModel;
      return size;
    }
  }
  uint32_t bigger = size + kCacheLine;
  if (bigger > max_size || !EnlargePaysOff(size, bigger, p, c)) {
    *change = SizeChange::kRejectedByModel;
    return size;
  }
  *change = SizeChange::kUpLine;
  return bigger;
}

}  // namespace pmtree::nvtree
