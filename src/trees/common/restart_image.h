// SPDX-License-Identifier: Apache-2.0
//
// Byte-string keys in a restart image (the array of 8-byte words a clean
// Close writes so the next open rebuilds a DRAM index without reading the
// leaves: lbtree, and the leaf-list trees fptree and wbtree).  A key is a
// 4-byte length, then its bytes, padded with zeros to whole words:
//
//   word  bytes   meaning
//   0     0..3    length L (little-endian, at most kMaxKeyBytes)
//   0..   4..     the L key bytes, then zero padding to a word boundary
//
// An image is trusted only after a clean shutdown and is still checked as
// it is read (ReadKeyWords refuses a length that overruns the image).

#ifndef PMTREE_TREES_COMMON_RESTART_IMAGE_H_
#define PMTREE_TREES_COMMON_RESTART_IMAGE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "pmtree/tree.h"

namespace pmtree {

// Appends `key` in the layout above.
inline void AppendKeyWords(std::string_view key, std::vector<uint64_t>* words) {
  const size_t at = words->size();
  words->resize(at + (4 + key.size() + 7) / 8, 0);
  const uint32_t len = static_cast<uint32_t>(key.size());
  char* p = reinterpret_cast<char*>(words->data() + at);
  std::memcpy(p, &len, 4);
  std::memcpy(p + 4, key.data(), key.size());
}

// The key at w[*i] of an image of n words, *i moved past it; nullopt when
// its length is over kMaxKeyBytes or it runs past the image.
inline std::optional<std::string_view> ReadKeyWords(const uint64_t* w, uint64_t n, uint64_t* i) {
  if (*i >= n) return std::nullopt;
  uint32_t len;
  std::memcpy(&len, &w[*i], 4);
  const uint64_t words = (4 + static_cast<uint64_t>(len) + 7) / 8;
  if (len > kMaxKeyBytes || *i + words > n) return std::nullopt;
  std::string_view key(reinterpret_cast<const char*>(&w[*i]) + 4, len);
  *i += words;
  return key;
}

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_RESTART_IMAGE_H_
