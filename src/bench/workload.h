// SPDX-License-Identifier: Apache-2.0
//
// Workload description and the streams built from it.
//
// A workload is an operation mix (read/insert/update/remove/scan ratios), a
// key distribution with its own parameter, a key size and a scan length.
// Everything random is drawn here, BEFORE the timed region: BuildStreams()
// turns a workload into one vector of operations per thread, and the timed
// loop (driver.h) only walks those vectors.  GeneratorDraws() counts every
// random draw so a test can prove that no draw happens inside the timed loop.
//
// Keys.  The N loaded records have the keys LoadKey(0..N-1): distinct, even,
// below 2^63, independent of the seed (so a saved pool can be reused with any
// seed by --skip-load).  Reads, updates, removes and scans pick one of those
// keys (by its rank in sorted order, so "a contiguous x % of the key space"
// is a contiguous rank range); inserts draw fresh odd keys (never a loaded
// key), or for the sequential distribution keys above 2^63 that grow
// monotonically (every insert lands in the right-most leaf).
//
// Thread safety: the functions are pure; streams are read-only once built.

#ifndef PMTREE_BENCH_WORKLOAD_H_
#define PMTREE_BENCH_WORKLOAD_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pmtree/status.h"

namespace pmtree::bench {

// kRmw: read the whole value, then update it (YCSB workload F's
// read-modify-write; Target::ReadModifyWrite).
enum class OpType : uint8_t { kRead = 0, kInsert, kUpdate, kRemove, kScan, kRmw };
inline constexpr int kOpTypes = 6;
std::string_view OpName(OpType t);

// Ratios of each operation type; they sum to 1.
struct Mix {
  std::array<double, kOpTypes> ratio{1, 0, 0, 0, 0};
  std::string ToString() const;  // "read=0.5,insert=0.5"
};
// Parses "read=0.5,insert=0.3,update=0.1,remove=0.05,scan=0.05" (and rmw=).  Names not
// listed are 0.  InvalidArgument (naming the valid operations) for an unknown
// name, a value outside [0,1], a repeated name, or a sum that is not 1.
Result<Mix> ParseMix(std::string_view text);

enum class DistKind : uint8_t { kUniform, kZipfian, kSelfSimilar, kLatest, kSequential, kHotZone };
std::string_view DistName(DistKind k);
// "uniform, zipfian, selfsimilar, latest, sequential, hotzone".
std::string DistNames();
Result<DistKind> ParseDist(std::string_view name);

struct Distribution {
  DistKind kind = DistKind::kUniform;
  double theta = 0.99;         // zipfian and latest: skew, 0 < theta <= 10
  double h = 0.2;              // selfsimilar: fraction h of keys gets 1-h of the accesses, 0 < h < 0.5
  double hot_fraction = 0.05;  // hotzone: the zone's share of the key space, 0 < x <= 1
  double hot_shift_at = 0;     // hotzone: fraction of each thread's stream after which
                               // the zone moves to another part of the key space (0 = never)
  Status Validate() const;
  std::string ToString() const;  // "zipfian(theta=0.99)"
};

struct Workload {
  Mix mix;
  Distribution dist;
  uint32_t scan_length = 100;
  // Each scan reads a length drawn uniformly from 1..scan_length (YCSB's
  // scanlengthdistribution=uniform) instead of exactly scan_length.
  bool scan_length_uniform = false;
  // Byte-string keys of key_min..key_max bytes (8 <= min <= max <= 4096), or
  // 0 for 64-bit integer keys.
  uint32_t key_min = 0;
  uint32_t key_max = 0;
  uint64_t seed = 1;
  // YCSB-style keys instead: "user" + the decimal 64-bit key (AppendYcsbKey).
  bool ycsb_keys = false;
  bool bytes_keys() const { return key_min != 0 || ycsb_keys; }
};

// Parses "--key-size" text: "8" (64-bit integer keys, the default), "N" for
// N-byte strings (9 <= N <= 4096), "MIN-MAX" for strings of variable length
// (8 <= MIN < MAX <= 4096).
Status ParseKeySize(std::string_view text, uint32_t* key_min, uint32_t* key_max);

// The key of loaded record i (seed-independent, even, < 2^63).
uint64_t LoadKey(uint64_t i);
// LoadKey(0..n-1) in ascending order.
std::vector<uint64_t> SortedLoadKeys(uint64_t n);

// The byte-string form of a 64-bit key: its 8 big-endian bytes (so byte
// order = integer order) followed by filler up to a length in [min, max]
// chosen from the key.
void AppendBytesKey(uint64_t key, uint32_t key_min, uint32_t key_max, std::string* out);

// YCSB's key of record number `key`: "user" followed by its decimal digits
// (YCSB hashes the record number; LoadKey already did).  Byte order is not
// integer order, as in YCSB; scans start at a key and read on in byte order.
void AppendYcsbKey(uint64_t key, std::string* out);

// One pre-built operation.
struct Op {
  uint64_t key;
  OpType type;
  uint32_t bytes_off = 0;  // bytes keys: [bytes_off, bytes_off+bytes_len) in Stream::arena
  uint32_t bytes_len = 0;
  uint32_t scan_len = 0;   // scans with Workload::scan_length_uniform: this scan's length
};

struct Stream {
  std::vector<Op> ops;
  std::string arena;  // byte-string keys, when the workload has them
  std::string_view BytesKey(const Op& op) const { return std::string_view(arena).substr(op.bytes_off, op.bytes_len); }
};

// Builds `threads` streams of `ops_per_thread` operations each over the
// sorted loaded keys.  Deterministic in (workload, threads, ops, keys).
Result<std::vector<Stream>> BuildStreams(const Workload& w, const std::vector<uint64_t>& sorted_keys,
                                         uint32_t threads, uint64_t ops_per_thread);

// Number of random draws made by any generator in this process (test hook:
// proves the timed loop draws nothing).
uint64_t GeneratorDraws();

// ---- generators (exposed for tests) ---------------------------------------------

// A seeded 64-bit PRNG (xoshiro256**-style state, splitmix64 seeding).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double NextDouble();              // [0, 1)
  uint64_t Below(uint64_t n);       // [0, n)
 private:
  uint64_t s_[4];
};

// Zipfian ranks in [0, n) with skew theta > 0: rank 0 is the most popular,
// P(rank i) = (1/(i+1)^theta) / zeta(n, theta).  Exact for every rank: the
// rejection-inversion method of Hoermann and Derflinger ("Rejection-inversion
// to generate variates from monotone discrete distributions", ACM TOMACS
// 1996), O(1) set-up and expected O(1) per draw.  (Gray et al.'s closed-form
// inversion, the usual choice since YCSB, is exact only for ranks 0 and 1 and
// over-weights the next ranks by up to ~20 % at theta 0.99; a test checks ours.)
class Zipfian {
 public:
  Zipfian(uint64_t n, double theta);
  uint64_t Next(Rng& rng) const;
  uint64_t n() const { return n_; }
  // Theoretical probability of rank i (tests; computes zeta(n), O(n)).
  double Probability(uint64_t i) const;
  static double Zeta(uint64_t n, double theta);

 private:
  double H(double x) const;          // the density hat: x^-theta
  double HIntegral(double x) const;  // its antiderivative
  double HIntegralInverse(double x) const;
  uint64_t n_;
  double theta_, h_integral_x1_, h_integral_n_, s_;
};

// Self-similar ranks in [0, n): a fraction h of the ranks gets 1-h of the
// accesses, recursively (Gray et al.).
uint64_t SelfSimilar(Rng& rng, uint64_t n, double h);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_WORKLOAD_H_
