// SPDX-License-Identifier: Apache-2.0
//
// Key policies: the one mechanism by which every persistent tree stores,
// compares and fingerprints its keys.  A tree is a template over a policy and
// stores one 8-byte *key slot* per entry:
//
//   U64Keys    the slot is the key itself.
//   BytesKeys  the slot references a key blob in the pool and carries the
//              key's first two bytes, so most comparisons never leave the node
//              (Circ-Tree's and the LB+-Tree Memcached port's scheme):
//
//                 bits 63..48  prefix16: key[0] << 8 | key[1] (0-padded)
//                 bits 47..0   offset of the KeyBlob (64-byte aligned)
//
//              prefix16 is monotone in key order: prefix16(a) < prefix16(b)
//              implies a < b, so equal prefixes are the only case that reads
//              the blob.
//
// KeyBlob byte table (offset 64-aligned, allocated RoundUp(8 + len) bytes):
//
//   off  size  field  meaning
//   0    4     len    key length in bytes, 0..kMaxKeyBytes
//   4    4     hash   Hash32 of the key bytes (fingerprint source, checked by Verify)
//   8    len   bytes  the key
//
// Write order: MakeSlot() writes the blob and persists it (flush + fence)
// before returning the slot, so a slot that reaches persistent memory never
// names an uninitialised blob, whatever the tree's own commit protocol.
// Bulk loads use MakeSlotUnfenced() (flush only) and fence once before their
// commit: one fence per load instead of one per key.
// Release() retires the blob through the pool's epochs: the tree calls it
// after the removal of the entry is persistent, and concurrent readers inside
// an epoch guard may still read the old blob safely.
//
// Both policies satisfy the KeyPolicy concept below; a tree is a template
// over `class KP` constrained by it (`template <KeyPolicy KP>`).

#ifndef PMTREE_TREES_COMMON_KEYS_H_
#define PMTREE_TREES_COMMON_KEYS_H_

#include <concepts>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <string>
#include <string_view>

#include "pm/pool_impl.h"
#include "pm/prefetch.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree {

// A 64-bit mix (the finaliser of splitmix64): cheap and well spread.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Hash of a byte string, 8 bytes at a time.
inline uint64_t HashBytes(std::string_view s) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = Mix64(h ^ w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return Mix64(h ^ tail ^ 0x5bd1e995u);
}

class U64Keys {
 public:
  using Arg = uint64_t;
  using Owned = uint64_t;
  static constexpr KeyKind kKind = KeyKind::kU64;
  static constexpr bool kInline = true;

  explicit U64Keys(PoolImpl* /*pool*/) {}

  static Status CheckArg(Arg) { return Status::Ok(); }
  Result<uint64_t> MakeSlot(Arg key) { return key; }
  Result<uint64_t> MakeSlotUnfenced(Arg key) { return key; }
  static int Compare(uint64_t slot, Arg key) { return slot < key ? -1 : (slot > key ? 1 : 0); }
  static int CompareSlots(uint64_t a, uint64_t b) { return Compare(a, b); }
  static bool Equal(uint64_t slot, Arg key) { return slot == key; }
  static Owned Load(uint64_t slot) { return slot; }
  static uint64_t Hash(Arg key) { return Mix64(key); }
  static uint8_t Fingerprint(Arg key) { return static_cast<uint8_t>(Mix64(key) >> 56); }
  void Release(uint64_t /*slot*/) {}
  Status MarkUsed(uint64_t /*slot*/) { return Status::Ok(); }
  static uint64_t SlotBytes(uint64_t /*slot*/) { return 0; }
  static uint64_t BlobOffset(uint64_t /*slot*/) { return 0; }
  // Equal(slot, key) reads nothing beyond the slot: nothing to prefetch.
  static void Prefetch(uint64_t /*slot*/, Arg /*key*/) {}
  void FreeUnpublished(uint64_t /*slot*/) {}
  Status CheckSlot(uint64_t /*slot*/) const { return Status::Ok(); }
};

struct KeyBlob {
  uint32_t len;
  uint32_t hash;
  char bytes[];  // len bytes
};
static_assert(sizeof(KeyBlob) == 8);
static_assert(offsetof(KeyBlob, hash) == 4);

class BytesKeys {
 public:
  using Arg = std::string_view;
  using Owned = std::string;
  static constexpr KeyKind kKind = KeyKind::kBytes;
  static constexpr bool kInline = false;
  static constexpr uint64_t kOffsetMask = (1ull << 48) - 1;

  explicit BytesKeys(PoolImpl* pool) : pool_(pool) {}

  static Status CheckArg(Arg key) {
    if (key.size() > kMaxKeyBytes)
      return Status::InvalidArgument("key of " + std::to_string(key.size()) + " bytes exceeds the limit of " +
                                     std::to_string(kMaxKeyBytes));
    return Status::Ok();
  }

  static uint64_t Prefix16(Arg key) {
    uint64_t p = 0;
    if (!key.empty()) p |= static_cast<uint64_t>(static_cast<unsigned char>(key[0])) << 8;
    if (key.size() > 1) p |= static_cast<unsigned char>(key[1]);
    return p;
  }
  static uint64_t BlobBytes(uint64_t len) { return Allocator::RoundUp(sizeof(KeyBlob) + len); }

  Result<uint64_t> MakeSlot(Arg key) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t off, WriteBlob(key));
    // Persist the blob before any slot naming it can be stored, so a crash
    // never leaves a durable slot pointing at an unwritten blob.
    pool_->Persist(pool_->At<KeyBlob>(off), sizeof(KeyBlob) + key.size());
    return (Prefix16(key) << 48) | off;
  }
  // MakeSlot for a bulk load, which writes many blobs and then fences once
  // before the commit that names them: only starts the blob's write-back.
  // The caller must fence after this call and before any slot it returns can
  // become durable.  A load of n keys then costs one fence, not n.
  Result<uint64_t> MakeSlotUnfenced(Arg key) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t off, WriteBlob(key));
    // Start the blob's write-back; the caller's fence before its commit
    // completes it, so a crash never leaves a durable slot naming an
    // unwritten blob.
    pool_->Flush(pool_->At<KeyBlob>(off), sizeof(KeyBlob) + key.size());
    return (Prefix16(key) << 48) | off;
  }

  std::string_view View(uint64_t slot) const {
    const auto* blob = pool_->At<KeyBlob>(BlobOffset(slot));
    return std::string_view(blob->bytes, blob->len);
  }
  int Compare(uint64_t slot, Arg key) const {
    uint64_t a = slot >> 48, b = Prefix16(key);
    if (a != b) return a < b ? -1 : 1;
    int c = View(slot).compare(key);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  int CompareSlots(uint64_t x, uint64_t y) const {
    if ((x >> 48) != (y >> 48)) return (x >> 48) < (y >> 48) ? -1 : 1;
    if (x == y) return 0;
    int c = View(x).compare(View(y));
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  bool Equal(uint64_t slot, Arg key) const { return (slot >> 48) == Prefix16(key) && View(slot) == key; }
  // Starts the miss on the blob that Equal(slot, key) would read (its
  // first line), so that a group of lookups overlaps those misses.
  void Prefetch(uint64_t slot, Arg key) const {
    if ((slot >> 48) == Prefix16(key)) pmtree::Prefetch(pool_->At<KeyBlob>(BlobOffset(slot)));
  }
  Owned Load(uint64_t slot) const { return Owned(View(slot)); }
  static uint64_t Hash(Arg key) { return HashBytes(key); }
  static uint8_t Fingerprint(Arg key) { return static_cast<uint8_t>(HashBytes(key) >> 56); }

  void Release(uint64_t slot) {
    uint64_t off = BlobOffset(slot);
    pool_->allocator().Retire(off, BlobBytes(pool_->At<KeyBlob>(off)->len));
  }
  Status MarkUsed(uint64_t slot) {
    PMTREE_RETURN_IF_ERROR(CheckSlot(slot));
    uint64_t off = BlobOffset(slot);
    return pool_->allocator().MarkUsed(off, BlobBytes(pool_->At<KeyBlob>(off)->len));
  }
  uint64_t SlotBytes(uint64_t slot) const { return BlobBytes(pool_->At<KeyBlob>(BlobOffset(slot))->len); }
  static uint64_t BlobOffset(uint64_t slot) { return slot & kOffsetMask; }
  // Frees the blob at once: only for a slot no reader can have seen (never
  // published, or every reader gone); otherwise Release.
  void FreeUnpublished(uint64_t slot) { pool_->allocator().Free(BlobOffset(slot), SlotBytes(slot)); }

  Status CheckSlot(uint64_t slot) const {
    uint64_t off = BlobOffset(slot);
    if (off % kAllocGranule != 0 || !pool_->InHeap(off, sizeof(KeyBlob)))
      return Status::Corruption("key slot " + std::to_string(slot) + ": blob offset outside the heap");
    const auto* blob = pool_->At<KeyBlob>(off);
    if (blob->len > kMaxKeyBytes || !pool_->InHeap(off, sizeof(KeyBlob) + blob->len))
      return Status::Corruption("key blob at offset " + std::to_string(off) + ": length " +
                                std::to_string(blob->len) + " out of range");
    std::string_view k(blob->bytes, blob->len);
    if (blob->hash != static_cast<uint32_t>(HashBytes(k)))
      return Status::Corruption("key blob at offset " + std::to_string(off) + ": hash mismatch");
    if ((slot >> 48) != Prefix16(k))
      return Status::Corruption("key slot at blob " + std::to_string(off) + ": prefix16 disagrees with the blob");
    return Status::Ok();
  }

 private:
  // Allocates and writes the blob of `key`, not yet flushed: its offset.
  Result<uint64_t> WriteBlob(Arg key) {
    PMTREE_RETURN_IF_ERROR(CheckArg(key));
    PMTREE_ASSIGN_OR_RETURN(uint64_t off, pool_->allocator().Allocate(BlobBytes(key.size())));
    auto* blob = pool_->At<KeyBlob>(off);
    KeyBlob head{static_cast<uint32_t>(key.size()), static_cast<uint32_t>(HashBytes(key))};
    pool_->Write(blob, &head, sizeof(head));
    pool_->Write(blob->bytes, key.data(), key.size());
    return off;
  }

  PoolImpl* pool_;
};

// What a tree needs of its key policy.  `slot` is the 8-byte key slot a tree
// stores per entry; const members only read the pool.
template <class KP>
concept KeyPolicy = std::constructible_from<KP, PoolImpl*> &&
                    requires(KP kp, const KP ckp, typename KP::Arg key, uint64_t slot) {
  typename KP::Owned;                                   // an owned copy of a key
  { KP::kKind } -> std::convertible_to<KeyKind>;        // what the pool header records
  { KP::kInline } -> std::convertible_to<bool>;         // the slot is the key (no blob)
  { KP::CheckArg(key) } -> std::same_as<Status>;        // InvalidArgument for over-long keys
  { kp.MakeSlot(key) } -> std::same_as<Result<uint64_t>>;  // writes and persists the blob
  { kp.MakeSlotUnfenced(key) } -> std::same_as<Result<uint64_t>>;  // writes and flushes it (bulk loads)
  { ckp.Compare(slot, key) } -> std::same_as<int>;      // <0, 0, >0 as slot's key is <, ==, > key
  { ckp.CompareSlots(slot, slot) } -> std::same_as<int>;
  { ckp.Equal(slot, key) } -> std::same_as<bool>;
  { ckp.Load(slot) } -> std::same_as<typename KP::Owned>;  // a copy of the key
  { KP::Fingerprint(key) } -> std::same_as<uint8_t>;    // one-byte hash (FPTree / LB+-Tree)
  { KP::Hash(key) } -> std::same_as<uint64_t>;
  { kp.Release(slot) } -> std::same_as<void>;           // retire the blob (epochs)
  { kp.FreeUnpublished(slot) } -> std::same_as<void>;   // free a blob no reader saw
  { kp.MarkUsed(slot) } -> std::same_as<Status>;        // recovery: report the blob
  { ckp.SlotBytes(slot) } -> std::same_as<uint64_t>;    // pool bytes the slot owns (0 inline)
  { KP::BlobOffset(slot) } -> std::same_as<uint64_t>;   // offset of the blob (0 inline)
  { ckp.Prefetch(slot, key) } -> std::same_as<void>;    // start Equal's miss (none inline)
  { ckp.CheckSlot(slot) } -> std::same_as<Status>;      // Verify(): blob in heap, length, hash
};
static_assert(KeyPolicy<U64Keys>);
static_assert(KeyPolicy<BytesKeys>);

// The policy of a tree's key type: uint64_t -> U64Keys, std::string_view ->
// BytesKeys (the two key types of pmtree/tree.h).
template <class K>
  requires std::same_as<K, uint64_t> || std::same_as<K, std::string_view>
using KeyPolicyFor = std::conditional_t<std::is_same_v<K, uint64_t>, U64Keys, BytesKeys>;

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_KEYS_H_
