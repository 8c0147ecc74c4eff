// SPDX-License-Identifier: Apache-2.0
//
// The on-media pool header (docs/pool_format.md is the same table in prose).
//
// The first 4 KiB of every pool:
//
//   off   size  field            meaning
//   ---   ----  -----            -------
//   0     8     magic            "PMTREEPL"; written last at creation
//   8     4     format_version   kPoolFormatVersion
//   12    4     header_size      4096; the heap starts here
//   16    8     pool_size        bytes; must equal the file size
//   24    8     layout_flags     opaque to the pool (tree layer: key kind)
//   32    32    layout           tree registry name, NUL-padded (<= 31 chars)
//   64    16    uuid             random at creation
//   80    8     create_time      seconds since the Unix epoch
//   88    8     checksum         FNV-1a 64 of bytes 0..87 (immutable part)
//   96    32    reserved         zero
//   --- mutable state, second cache line ---
//   128   8     shutdown_state   kCleanShutdown after a clean Close, else 0
//   136   8     alloc_state      offset of the saved allocator state (valid
//                                only when shutdown_state is clean), or 0
//   144   8     open_count       incremented by every successful open
//   152   40    reserved         zero
//   --- root slots, third cache line ---
//   192   64    root[8]          offsets of the tree's anchors (0 = none)
//   256   3840  reserved         zero
//
// Saved allocator state (a heap block, 64-byte aligned):
//
//   off   size   field     meaning
//   0     8      count     number of free extents n
//   8     8      checksum  FNV-1a 64 of the 16*n extent bytes
//   16    16*n   extents   (offset, size) pairs, ascending, disjoint

#ifndef PMTREE_PM_POOL_FORMAT_H_
#define PMTREE_PM_POOL_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "pmtree/pool.h"

namespace pmtree {

inline constexpr char kPoolMagic[8] = {'P', 'M', 'T', 'R', 'E', 'E', 'P', 'L'};
inline constexpr uint32_t kPoolFormatVersion = 1;
inline constexpr uint64_t kCleanShutdown = 0x4e41454c43ull;  // "CLEAN"

struct PoolHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_size;
  uint64_t pool_size;
  uint64_t layout_flags;
  char layout[32];
  uint8_t uuid[16];
  uint64_t create_time;
  uint64_t checksum;
  uint8_t reserved0[32];
  uint64_t shutdown_state;
  uint64_t alloc_state;
  uint64_t open_count;
  uint8_t reserved1[40];
  uint64_t root[kRootSlots];
  uint8_t reserved2[kPoolHeaderSize - 256];
};
static_assert(sizeof(PoolHeader) == kPoolHeaderSize);
static_assert(offsetof(PoolHeader, format_version) == 8);
static_assert(offsetof(PoolHeader, pool_size) == 16);
static_assert(offsetof(PoolHeader, layout) == 32);
static_assert(offsetof(PoolHeader, uuid) == 64);
static_assert(offsetof(PoolHeader, checksum) == 88);
static_assert(offsetof(PoolHeader, shutdown_state) == 128);
static_assert(offsetof(PoolHeader, open_count) == 144);
static_assert(offsetof(PoolHeader, root) == 192);
static_assert(kLayoutNameMax < sizeof(PoolHeader::layout));

inline constexpr size_t kChecksummedBytes = offsetof(PoolHeader, checksum);

struct SavedAllocState {
  uint64_t count;
  uint64_t checksum;
  uint64_t extents[];  // 2 * count words
};
static_assert(sizeof(SavedAllocState) == 16);

inline uint64_t Fnv1a64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace pmtree

#endif  // PMTREE_PM_POOL_FORMAT_H_
