// SPDX-License-Identifier: Apache-2.0
//
// Fingerprint matching for LB+-Tree leaves (paper §3.1, Algorithm 1 line 6:
// "SimdSearch(hash(k), leaf.fgprt)").
//
// Input: the two header words of each of `blocks` blocks (words[2b] = word0,
// words[2b+1] = word1, layout.h), already loaded by the caller with atomic
// 8-byte loads.  Output: bit 16 b + i set iff slot i of block b is valid
// (bitmap) and its fingerprint equals `fp`.
//
// Three implementations that must agree bit for bit (simd_test in
// lbtree_test.cc checks them against each other): a scalar loop, SSE2 (one
// 128-bit compare per block, the paper's _mm_cmpeq_epi8) and AVX2 (two blocks
// per 256-bit compare).  MatchFingerprints() is the one picked once at run
// time with __builtin_cpu_supports; the build never assumes AVX2.
//
// Thread safety: pure functions.

#ifndef PMTREE_TREES_LBTREE_SIMD_H_
#define PMTREE_TREES_LBTREE_SIMD_H_

#include <cstdint>
#include <string_view>

namespace pmtree::lbtree {

using MatchFn = uint64_t (*)(const uint64_t* words, int blocks, uint8_t fp);

uint64_t MatchFingerprintsScalar(const uint64_t* words, int blocks, uint8_t fp);
uint64_t MatchFingerprintsSse2(const uint64_t* words, int blocks, uint8_t fp);
uint64_t MatchFingerprintsAvx2(const uint64_t* words, int blocks, uint8_t fp);

// True when this CPU (and build target) can run the variant.
bool CpuHasSse2();
bool CpuHasAvx2();

// The fastest variant this CPU supports, chosen on first use.
MatchFn SelectedMatchFn();
std::string_view SelectedMatchName();  // "avx2", "sse2" or "scalar"

inline uint64_t MatchFingerprints(const uint64_t* words, int blocks, uint8_t fp) {
  return SelectedMatchFn()(words, blocks, fp);
}

}  // namespace pmtree::lbtree

#endif  // PMTREE_TREES_LBTREE_SIMD_H_
