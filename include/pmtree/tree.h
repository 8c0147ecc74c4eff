// SPDX-License-Identifier: Apache-2.0
//
// The tree interface: what the benchmark, the crash explorer, the conformance
// tests and (later) the KV store see of every B+-tree in pmtree.
//
// A tree maps keys to 8-byte values.  Keys are unsigned 64-bit integers
// (`Tree`) or byte strings of 0..kMaxKeyBytes bytes (`BytesTree`, stored in
// the pool through the shared mechanism of src/trees/common/keys.h).  Values
// are 8 bytes: an inline payload or a reference to a record.
//
// DURABILITY CONTRACT (every persistent tree; the volatile baseline has none)
//  1. When a mutating call (Insert, Update, Upsert, Remove, BulkLoad) returns,
//     its effect is durable.
//  2. A crash at any instant during a call recovers to the state before the
//     call or the state after it, never anything else.
//  3. Nothing a Lookup or Scan returns can be lost by a later crash: no tree
//     returns data that is not yet persistent.
//  4. Recovery (Registry `recover`) is one entry point for a clean shutdown
//     and a crash; it is idempotent and a crash during it is itself
//     recoverable.  Space allocated by an interrupted operation is reclaimed
//     (pmtree/allocator.h).
//  5. A failure (e.g. OutOfSpace) leaves the tree consistent and usable:
//     lookups, scans and removes still work.
// The crash explorer (src/crash, docs/crash_model.md) checks 1-5.
//
// CONCURRENCY: unless capabilities() lacks kCapConcurrent, every operation may be
// called from any number of threads at once.  Verify(), Stats(), BulkLoad()
// and Close() require that no other operation runs.
//
// OUTCOMES vs ERRORS: "absent" and "already present" are return values
// (false); a Status is returned only for environmental failures and invalid
// arguments (the codes: pmtree/status.h and pmtree/registry.h).  Lookup and
// Scan cannot fail: they return what is present.
//
// A SIMULATED CRASH: destroying a tree (and its Pool) without Close() leaves
// the pool as a process crash at that instant would; recovery (OpenTree,
// RecoverTree in pmtree/registry.h) then runs crash recovery.

#ifndef PMTREE_TREE_H_
#define PMTREE_TREE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pmtree/status.h"

namespace pmtree {

class Pool;

// Longest byte-string key accepted.  A longer key can never be present:
// Insert, Upsert, Update, Remove and BulkLoad return InvalidArgument for it
// (nothing changes), Lookup returns false.
inline constexpr uint32_t kMaxKeyBytes = 4096;

enum class KeyKind : uint8_t { kU64 = 0, kBytes = 1 };

// Capability flags of a tree (registry and Tree::capabilities()).
enum Capability : uint32_t {
  kCapPersistent = 1u << 0,       // lives in a pool and recovers
  kCapConcurrent = 1u << 1,       // safe for concurrent readers and writers
  kCapBytesKeys = 1u << 2,        // offers BytesTree
  kCapBulkLoadFill = 1u << 3,     // BulkLoad honours the fill factor
  kCapInstantRestart = 1u << 4,   // no structure walk after a clean shutdown
  kCapParallelRecovery = 1u << 5, // recovery uses TreeOptions::recovery_threads
  // A deliberately flawed variant for the explorer.  It recovers only pools
  // it created itself: a pool of any other tree, even one whose header was
  // relabelled with the variant's name, is refused (conformance suite).
  kCapTestOnly = 1u << 6,
  // Correctness relies on a cache line reaching memory in store order (the
  // per-line-prefix model of docs/crash_model.md, which the LB+-Tree paper
  // assumes).  Crash results in strict per-8-byte-word mode are reported for
  // such a tree, not required to be zero.
  kCapAssumesLineOrder = 1u << 7,
};

struct TreeOptions {
  // Node size in bytes; 0 selects the design's default.  Each design
  // documents its valid sizes and rejects others with InvalidArgument.
  uint32_t node_size = 0;
  // Not an input: CreateTree/CreateBytesTree set it from the key type, and
  // OpenTree/RecoverTree from the pool (which records it), overwriting what
  // the caller put here.  A design's create/recover reads it.
  KeyKind key_kind = KeyKind::kU64;
  // Threads a design may use to rebuild volatile structures at recovery.
  uint32_t recovery_threads = 1;
  // Design-specific options ("strategy=balanced"); a tree rejects keys it
  // does not know with InvalidArgument listing the ones it does.
  std::map<std::string, std::string> extra;
  // OpenTree/OpenBytesTree only (the paranoid open): run Verify() after
  // recovery and fail the open with its Corruption status.  Without it,
  // recovery after a clean close trusts what the close saved (the allocator
  // state; for kCapInstantRestart trees the restart image, without walking
  // the structure), and Lookup/Scan follow the pool's offsets unchecked: a
  // damaged pool can crash them.  Open a pool of unknown origin or on
  // suspect media with this set (docs/pool_format.md, "What a damaged pool
  // gets").  Costs one full walk.
  bool verify_on_open = false;
};

struct TreeStats {
  uint32_t height = 0;         // levels including the leaf level (0 = empty)
  uint64_t entries = 0;        // live key/value pairs
  uint64_t leaf_nodes = 0;
  uint64_t inner_nodes = 0;
  double leaf_fill = 0;        // live entries / leaf slots
  uint64_t pm_bytes = 0;       // pool bytes the tree reaches (nodes, logs, key blobs)
  uint64_t dram_bytes = 0;     // DRAM held by the tree (inner nodes, caches)
  // Design-specific figures (rebuilds, splits, log size, ...).
  std::vector<std::pair<std::string, double>> extra;
};

template <class K>
struct KeyTraits;
template <>
struct KeyTraits<uint64_t> {
  using Owned = uint64_t;
  static constexpr KeyKind kKind = KeyKind::kU64;
};
template <>
struct KeyTraits<std::string_view> {
  using Owned = std::string;
  static constexpr KeyKind kKind = KeyKind::kBytes;
};

// Native versions: the face of a multi-version tree (cdds) that reads an
// earlier committed state.  BasicTree::versions() returns it, or null for a
// tree that keeps one version.  The KV store serves its snapshots from it
// (docs/kv.md, "Native versions").  Thread-safe like the tree.
template <class K>
class VersionedTree {
 public:
  using Entry = std::pair<typename KeyTraits<K>::Owned, uint64_t>;
  virtual ~VersionedTree() = default;

  // The newest committed version; it never decreases.
  virtual uint64_t current_version() const = 0;
  // Pins `version` (at most current_version()) so that LookupAt/ScanAt at it
  // keep returning that moment's contents, whatever writers and the tree's
  // GC do, until ReleaseSnapshot(version).  Pins nest.  Busy when the tree's
  // GC may already have trimmed that version (pin a newer one);
  // InvalidArgument when it is newer than current_version().
  virtual Status PinVersion(uint64_t version) = 0;
  virtual Status ReleaseSnapshot(uint64_t version) = 0;
  // Lookup / Scan (their rules) at a pinned or the current version.
  virtual Result<bool> LookupAt(uint64_t version, K key, uint64_t* value) = 0;
  virtual Result<size_t> ScanAt(uint64_t version, K start, const K* end, std::span<Entry> out) = 0;
  // The oldest version a pin or a running reader still needs: a value the
  // tree stopped showing at version e is read by nobody once this is >= e.
  virtual uint64_t oldest_retained_version() = 0;
};

template <class K>
class BasicTree {
 public:
  using Key = K;                                        // passed by value
  using OwnedKey = typename KeyTraits<K>::Owned;        // returned by Scan
  using Entry = std::pair<OwnedKey, uint64_t>;
  using InputEntry = std::pair<K, uint64_t>;

  virtual ~BasicTree() = default;

  // Registry name ("fastfair", "lbtree", ...).
  virtual std::string_view name() const = 0;
  virtual uint32_t capabilities() const = 0;
  // This tree's native versions, or null (VersionedTree).
  virtual VersionedTree<K>* versions() { return nullptr; }

  // ---- point operations --------------------------------------------------------
  // True and *value set when `key` is present; never fails.
  virtual bool Lookup(K key, uint64_t* value) = 0;
  // Adds key -> value; false (nothing changed) when key is present.
  virtual Result<bool> Insert(K key, uint64_t value) = 0;
  // Replaces the value of key; false (nothing changed) when key is absent.
  virtual Result<bool> Update(K key, uint64_t value) = 0;
  // Insert or replace; true when the key was new.
  virtual Result<bool> Upsert(K key, uint64_t value) = 0;
  // Removes key; false when it was absent.
  virtual Result<bool> Remove(K key) = 0;

  // ---- a lookup, then an update of the same key ------------------------------------
  // Where a lookup found its key, for a caller that updates that key next
  // (the KV store's group commit looks every key up, makes the new records
  // durable, then updates them).  Opaque; a design may leave it empty.
  struct Hint {
    uint64_t word[2] = {0, 0};
  };
  // Lookup that also fills *hint.
  virtual bool LookupForUpdate(K key, uint64_t* value, Hint* hint) {
    *hint = Hint{};
    return Lookup(key, value);
  }
  // LookupForUpdate of every key at once: found[i] = LookupForUpdate(keys[i],
  // &values[i], &hints[i]) (values[i] means nothing where found[i] is
  // false).  The same results as those calls in turn; a design may overlap
  // the keys' descents so that their cache misses overlap too (the KV
  // store's group commit looks up a whole pipelined group).
  virtual void LookupManyForUpdate(std::span<const K> keys, uint64_t* values, bool* found, Hint* hints) {
    for (size_t i = 0; i < keys.size(); i++) found[i] = LookupForUpdate(keys[i], &values[i], &hints[i]);
  }
  // Update(key, value), with the hint of a LookupForUpdate of the same key:
  // the same result in every case (a hint made stale by other writes
  // included); a design may skip its descent while the hint holds.
  virtual Result<bool> UpdateHinted(K key, uint64_t value, const Hint& hint) {
    (void)hint;
    return Update(key, value);
  }
  // UpdateHinted, for a caller that updates many keys and then fences once
  // (the KV store's group commit): a design whose update of an existing key
  // is one failure-atomic word may flush that word and leave its fence to
  // the caller. The update is durable once the caller's next Pool fence has
  // returned; until then a crash keeps either the old value or the new one,
  // so the caller must fence before it acknowledges the update or frees
  // what the old value named. The default is UpdateHinted (fenced).
  virtual Result<bool> UpdateHintedUnfenced(K key, uint64_t value, const Hint& hint) {
    return UpdateHinted(key, value, hint);
  }
  // UpdateHintedUnfenced of keys[0], keys[1], ... in order (distinct keys,
  // with values[i] and the hints of their LookupForUpdate), for as long as
  // each is present where its hint says: returns n, the count updated
  // exactly as UpdateHintedUnfenced would (each returning true), and stops
  // before keys[n], which the caller updates through UpdateHintedUnfenced
  // (its hint is stale, or it needs more than its value word).  A design
  // may lock the keys' leaves first and then write and flush all the words,
  // so that their write-backs overlap (a locked instruction after a flush
  // waits for it as a fence would).  The default updates none (returns 0).
  virtual size_t UpdateHintedRunUnfenced(std::span<const K> keys, const uint64_t* values, const Hint* hints) {
    (void)keys;
    (void)values;
    (void)hints;
    return 0;
  }
  // True when UpdateHintedUnfenced may leave a fence to its caller (a caller
  // of a design that never does needs no fence of its own for them).
  virtual bool DefersUpdateFences() const { return false; }

  // ---- range scan ----------------------------------------------------------------
  // Fills `out` with the entries whose key is >= start (and <= *end when end
  // is not null) in ascending key order, at most out.size() of them; returns
  // how many.  Under concurrent writers each returned entry was present at
  // some instant during the call, and no key is returned twice.
  // Bounds are compared, never stored: a byte-string bound longer than
  // kMaxKeyBytes is valid and orders like any other string (no stored key
  // equals it; Scan returns the entries after it).  Lookup of such a key
  // returns false; Insert, Update, Upsert and Remove return InvalidArgument.
  // tests/conformance_test.cc holds every tree to this.
  virtual size_t Scan(K start, const K* end, std::span<Entry> out) = 0;
  size_t Scan(K start, std::span<Entry> out) { return Scan(start, nullptr, out); }
  size_t ScanRange(K start, K end, std::span<Entry> out) { return Scan(start, &end, out); }

  // ---- bulk load -------------------------------------------------------------------
  // Loads strictly ascending `sorted` entries into an empty tree, filling
  // leaves to `fill` (0 < fill <= 1) when the design honours it
  // (kCapBulkLoadFill), else by ordinary inserts.
  virtual Status BulkLoad(std::span<const InputEntry> sorted, double fill) {
    if (fill <= 0 || fill > 1) return Status::InvalidArgument("bulk load: fill must be in (0, 1]");
    for (size_t i = 0; i < sorted.size(); i++) {
      if (i > 0 && !(sorted[i - 1].first < sorted[i].first))
        return Status::InvalidArgument("bulk load: input not strictly ascending at index " + std::to_string(i));
      auto r = Insert(sorted[i].first, sorted[i].second);
      if (!r.ok()) return r.status();
      if (!*r) return Status::InvalidArgument("bulk load: tree not empty (key present)");
    }
    return Status::Ok();
  }

  // ---- introspection ------------------------------------------------------------------
  // Walks the whole structure and checks every invariant of the design; the
  // Status names the invariant and the offset that failed.  Persistent trees
  // also check that the pool bytes they reach equal the allocator's bytes in
  // use (no leak, no double use).
  virtual Status Verify() = 0;
  virtual TreeStats Stats() = 0;

  // ---- lifecycle ----------------------------------------------------------------------
  // Clean shutdown: persists what an instant restart needs and closes the
  // pool (Pool::Close).  The object may only be destroyed afterwards.
  // Destroying a tree without Close() is a simulated crash.
  virtual Status Close() = 0;
};

using Tree = BasicTree<uint64_t>;
using BytesTree = BasicTree<std::string_view>;

}  // namespace pmtree

#endif  // PMTREE_TREE_H_
