// SPDX-License-Identifier: Apache-2.0
//
// Every persistent byte of the key-value store (docs/kv.md has the same
// tables with the protocol around them).  All structures live in the tree's
// pool, are allocated with BlockOwner::kStore and are referenced by pool
// offsets (0 = none).
//
//   root slot 7 -> KvMeta                 (the store's anchor; trees use slot 0)
//   tree: key -> newest Version of the key
//   Version.prev -> the next older Version (kept only while a snapshot needs it)
//   Version(kFields) -> FieldBlock per field (blocks are shared between
//                       versions of one key: a field update copies only the
//                       changed field and the table)
//   KvMeta.log_slot[i] -> CommitLog of a transaction being applied

#ifndef PMTREE_KV_LAYOUT_H_
#define PMTREE_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "pmtree/kv.h"

namespace pmtree::kv {

inline constexpr int kKvRootSlot = kStoreRootSlot;
inline constexpr int kLogSlots = 16;

// KvMeta (256 B), named by root slot 7.
//   off size field          meaning
//   0   8    magic          kKvMagic
//   8   4    format         kKvFormat
//   12  4    log_slots      kLogSlots
//   16  8    clock          newest commit timestamp, valid when the pool closed cleanly
//   24  8    store_bytes    bytes of BlockOwner::kStore, valid when the pool closed cleanly
//   32  4    node_size      TreeOptions::node_size the store was created with
//                           (0: the engine's default, or a store made before
//                           this field); Store::Clear's new tree gets it
//   36  28   reserved       zero
//   64  128  log_slot[16]   offset of a committed CommitLog being applied, else 0
//   192 64   reserved       zero
struct KvMeta {
  uint64_t magic;
  uint32_t format;
  uint32_t log_slots;
  uint64_t clock;
  uint64_t store_bytes;
  uint32_t node_size;
  uint32_t reserved0[7];
  uint64_t log_slot[kLogSlots];
  uint64_t reserved1[8];
};
static_assert(sizeof(KvMeta) == 256);
static_assert(offsetof(KvMeta, clock) == 16);
static_assert(offsetof(KvMeta, node_size) == 32);
static_assert(offsetof(KvMeta, log_slot) == 64);
inline constexpr uint64_t kKvMagic = 0x315653564B544D50ull;  // "PMTKVSV1"
inline constexpr uint32_t kKvFormat = 1;

enum class VersionKind : uint8_t { kValue = 1, kFields = 2, kTombstone = 3 };

// Version header (32 B), the start of every record version.
//   off size field    meaning
//   0   4    magic    kVersionMagic
//   4   1    kind     VersionKind
//   5   3    reserved zero
//   8   8    ts       commit timestamp (NV-Store): visible to snapshots >= ts
//   16  8    prev     the next older version, 0 = none; set to 0 by GC (8-byte store)
//   24  8    length   kValue: value bytes; kFields: field count; kTombstone: 0
//   32  ...  body     kValue: the value bytes; kFields: uint64_t field_block[length],
//                     sorted by field name
struct VersionHeader {
  uint32_t magic;
  uint8_t kind;
  uint8_t reserved[3];
  uint64_t ts;
  uint64_t prev;
  uint64_t length;
};
static_assert(sizeof(VersionHeader) == 32);
static_assert(offsetof(VersionHeader, ts) == 8);
static_assert(offsetof(VersionHeader, prev) == 16);
inline constexpr uint32_t kVersionMagic = 0x3152564Bu;  // "KVR1"

// FieldBlock: one named field's value, immutable once written.
//   off size      field      meaning
//   0   4         name_len   1..kMaxFieldNameBytes
//   4   4         reserved   zero
//   8   8         value_len  0..kMaxValueBytes
//   16  name_len  name
//   ..  value_len value
struct FieldBlockHeader {
  uint32_t name_len;
  uint32_t reserved;
  uint64_t value_len;
};
static_assert(sizeof(FieldBlockHeader) == 16);

// CommitLog: the redo record of a transaction or batch (docs/kv.md, "Commit").
//   off size field    meaning
//   0   4    magic    kCommitMagic
//   4   4    count    entries
//   8   8    ts       the commit timestamp of every version it installs
//   16  8    bytes    size of the whole log block
//   24  8    reserved zero
//   32  ...  entries  count x CommitEntry, each followed by its key, padded to 8
// CommitEntry (16 B):
//   0   8    version  the new Version of the key (its prev = the version it replaces)
//   8   4    key_len
//   12  4    reserved zero
struct CommitLogHeader {
  uint32_t magic;
  uint32_t count;
  uint64_t ts;
  uint64_t bytes;
  uint64_t reserved;
};
static_assert(sizeof(CommitLogHeader) == 32);
struct CommitEntry {
  uint64_t version;
  uint32_t key_len;
  uint32_t reserved;
};
static_assert(sizeof(CommitEntry) == 16);
inline constexpr uint32_t kCommitMagic = 0x314C434Bu;  // "KCL1"

inline constexpr uint64_t Pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

}  // namespace pmtree::kv

#endif  // PMTREE_KV_LAYOUT_H_
