// SPDX-License-Identifier: Apache-2.0

#include "trees/lbtree/simd.h"

#include "trees/lbtree/layout.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PMTREE_LBTREE_X86 1
#else
#define PMTREE_LBTREE_X86 0
#endif

namespace pmtree::lbtree {

uint64_t MatchFingerprintsScalar(const uint64_t* words, int blocks, uint8_t fp) {
  uint64_t out = 0;
  for (int b = 0; b < blocks; b++) {
    uint64_t w0 = words[2 * b], w1 = words[2 * b + 1];
    uint64_t bits = 0;
    for (int i = 0; i < kSlotsPerBlock; i++) {
      // Fingerprint i is byte 2 + i of the 16-byte header.
      uint8_t f = i < 6 ? static_cast<uint8_t>(w0 >> (16 + 8 * i)) : static_cast<uint8_t>(w1 >> (8 * (i - 6)));
      if (f == fp) bits |= 1ull << i;
    }
    out |= (bits & w0 & kBitmapMask) << (16 * b);
  }
  return out;
}

#if PMTREE_LBTREE_X86

uint64_t MatchFingerprintsSse2(const uint64_t* words, int blocks, uint8_t fp) {
  const __m128i key = _mm_set1_epi8(static_cast<char>(fp));
  uint64_t out = 0;
  for (int b = 0; b < blocks; b++) {
    __m128i h = _mm_set_epi64x(static_cast<long long>(words[2 * b + 1]), static_cast<long long>(words[2 * b]));
    uint64_t eq = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(h, key)));
    // Bytes 2..15 are the fingerprints of slots 0..13.
    out |= ((eq >> 2) & words[2 * b] & kBitmapMask) << (16 * b);
  }
  return out;
}

__attribute__((target("avx2"))) uint64_t MatchFingerprintsAvx2(const uint64_t* words, int blocks, uint8_t fp) {
  const __m256i key = _mm256_set1_epi8(static_cast<char>(fp));
  uint64_t out = 0;
  int b = 0;
  for (; b + 1 < blocks; b += 2) {
    __m256i h = _mm256_set_epi64x(static_cast<long long>(words[2 * b + 3]), static_cast<long long>(words[2 * b + 2]),
                                  static_cast<long long>(words[2 * b + 1]), static_cast<long long>(words[2 * b]));
    uint64_t eq = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(h, key)));
    uint64_t lo = ((eq >> 2) & words[2 * b] & kBitmapMask);
    uint64_t hi = ((eq >> 18) & words[2 * b + 2] & kBitmapMask);
    out |= (lo | hi << 16) << (16 * b);
  }
  if (b < blocks) {
    __m128i h = _mm_set_epi64x(static_cast<long long>(words[2 * b + 1]), static_cast<long long>(words[2 * b]));
    uint64_t eq = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(h, _mm256_castsi256_si128(key))));
    out |= ((eq >> 2) & words[2 * b] & kBitmapMask) << (16 * b);
  }
  return out;
}

bool CpuHasSse2() { return __builtin_cpu_supports("sse2"); }
bool CpuHasAvx2() { return __builtin_cpu_supports("avx2"); }

#else  // not x86: the scalar twin stands in for both

uint64_t MatchFingerprintsSse2(const uint64_t* words, int blocks, uint8_t fp) {
  return MatchFingerprintsScalar(words, blocks, fp);
}
uint64_t MatchFingerprintsAvx2(const uint64_t* words, int blocks, uint8_t fp) {
  return MatchFingerprintsScalar(words, blocks, fp);
}
bool CpuHasSse2() { return false; }
bool CpuHasAvx2() { return false; }

#endif

namespace {
struct Choice {
  MatchFn fn;
  std::string_view name;
};
Choice Choose() {
  if (CpuHasAvx2()) return {MatchFingerprintsAvx2, "avx2"};
  if (CpuHasSse2()) return {MatchFingerprintsSse2, "sse2"};
  return {MatchFingerprintsScalar, "scalar"};
}
const Choice& Chosen() {
  static const Choice c = Choose();
  return c;
}
}  // namespace

MatchFn SelectedMatchFn() { return Chosen().fn; }
std::string_view SelectedMatchName() { return Chosen().name; }

}  // namespace pmtree::lbtree
