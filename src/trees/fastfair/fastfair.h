// SPDX-License-Identifier: Apache-2.0
//
// FAST+FAIR (Hwang, Kim, Won, Nam, "Endurable Transient Inconsistency in
// Byte-Addressable Persistent B+-Tree", USENIX FAST 2018), reimplemented from
// its published description.  Design, write orders, recovery rules and every
// deviation from the paper: docs/trees/fastfair.md.  Persistent layout:
// layout.h.
//
// What it is.  A B+-tree whose sorted nodes live in persistent memory and are
// changed in place without logging:
//   FAST  inserts and deletes shift records one 8-byte word at a time in an
//         order that leaves at most one *transient duplicate* record; readers
//         and recovery recognise and ignore it.  Each cache line is persisted
//         as the shift leaves it.
//   FAIR  a split persists the new right sibling, links it through the
//         sibling pointer, truncates the old node, then inserts the separator
//         into the parent; every intermediate state is a valid B-link tree.
//
// Durability (pmtree/tree.h contract): every mutating call is durable when it
// returns; a crash at any instant recovers to the state before or after the
// call.  Lookups and scans return only persisted data (readers validate a
// per-node seqlock that writers release after their last fence).
//
// Thread safety: all point operations and Scan may run concurrently.  Writers
// lock one node at a time (DRAM striped seqlocks, never stored in the pool);
// readers never write shared memory and retry when a writer touched the node
// they read.  Verify(), Stats(), BulkLoad() and Close() need exclusive use.
//
// Variants.  `fastfair` is the corrected tree.  `fastfair-orig` (test-only)
// runs the same code with the three known flaws of the original code switched
// back on (Flaws below) so the crash explorer can show it finds them.

#ifndef PMTREE_TREES_FASTFAIR_FASTFAIR_H_
#define PMTREE_TREES_FASTFAIR_FASTFAIR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/tree.h"
#include "trees/common/fair_traversal.h"
#include "trees/common/keys.h"
#include "trees/common/spare_nodes.h"
#include "trees/common/version_lock.h"
#include "trees/fastfair/layout.h"

namespace pmtree::fastfair {

// The original code's known crash bugs, each re-enabled by `fastfair-orig`.
struct Flaws {
  // (1) remove_key's left shift flushes a line right after writing its
  //     *first* record instead of after its last, so the rest of the line is
  //     never flushed before the shift moves on.
  bool remove_flush = false;
  // (2) the root split is not atomic and nothing completes it: recovery
  //     leaves a root with a sibling (and its orphaned splits) as they are.
  bool root_split = false;
  // (3) creation does not flush the tree header (meta block) nor the first
  //     root leaf before the pool's root slot names them.
  bool header_flush = false;

  static Flaws All() { return Flaws{true, true, true}; }
  bool any() const { return remove_flush || root_split || header_flush; }
  // Persistent form (Meta::variant): bit 0 remove_flush, 1 root_split,
  // 2 header_flush; 0 is the corrected tree.
  uint32_t Bits() const { return (remove_flush ? 1u : 0u) | (root_split ? 2u : 0u) | (header_flush ? 4u : 0u); }
  static Flaws FromBits(uint32_t b) { return Flaws{(b & 1) != 0, (b & 2) != 0, (b & 4) != 0}; }
  // Parses the `flaws` option of fastfair-orig: "all" or a comma list of
  // remove-flush, root-split, header-flush.
  static Status Parse(std::string_view text, Flaws* out);
};

// Points inside a structure modification where a test may stop the
// operation, to leave the intermediate state a crash would leave there.
enum class StopPoint {
  kSplitSiblingPersisted,  // new sibling persisted, not yet linked
  kSplitLinked,            // sibling pointer persisted, old node not truncated
  kSplitTruncated,         // old node truncated, separator not in the parent
  kRootSplitBeforeSwap,    // new root persisted, meta.root not yet switched
};

// What recovery repaired (for tests, Stats() and reports).
struct RecoveryReport {
  bool crashed = false;             // the pool was not closed cleanly: repairs ran
  uint64_t nodes = 0;               // nodes reached
  uint64_t locks_cleared = 0;       // non-zero lock words zeroed
  uint64_t duplicates_removed = 0;  // transient FAST duplicates compacted
  uint64_t truncations = 0;         // split interrupted before truncation, finished
  uint64_t root_splits_completed = 0;
  uint64_t orphans_linked = 0;      // split interrupted before the parent insert, finished
};

template <KeyPolicy KP>
class FastFairTree final : public BasicTree<typename KP::Arg>, FairTraversal<FastFairTree<KP>, Node> {
 public:
  using Base = BasicTree<typename KP::Arg>;
  using K = typename KP::Arg;
  using Entry = typename Base::Entry;
  using InputEntry = typename Base::InputEntry;

  // Creates a tree on a fresh pool (root slot 0 empty).  node_size 0 means
  // 512; valid sizes are multiples of 64 from 256 to 4096.
  static Result<std::unique_ptr<FastFairTree>> Create(PoolImpl* pool, const TreeOptions& options, Flaws flaws);
  // Recovers the tree in `pool` (after a clean shutdown or a crash).  The
  // flaws are those recorded at creation; `orig` says which registry entry
  // opens it (fastfair-orig trees have at least one flaw, fastfair none).
  static Result<std::unique_ptr<FastFairTree>> Recover(PoolImpl* pool, const TreeOptions& options, bool orig);

  ~FastFairTree() override;

  std::string_view name() const override { return flaws_.any() ? "fastfair-orig" : "fastfair"; }
  uint32_t capabilities() const override;

  bool Lookup(K key, uint64_t* value) override;
  Result<bool> Insert(K key, uint64_t value) override { return Put(key, value, PutMode::kInsert); }
  Result<bool> Update(K key, uint64_t value) override { return Put(key, value, PutMode::kUpdate); }
  Result<bool> Upsert(K key, uint64_t value) override { return Put(key, value, PutMode::kUpsert); }
  Result<bool> Remove(K key) override;
  size_t Scan(K start, const K* end, std::span<Entry> out) override;
  using Base::Scan;
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override;
  Status Verify() override;
  TreeStats Stats() override;
  Status Close() override;

  uint32_t node_size() const { return node_size_; }
  uint32_t capacity() const { return cap_; }
  const RecoveryReport& recovery_report() const { return report_; }
  uint64_t meta_offset() const { return meta_off_; }

  // Test hook: when it returns true at a StopPoint, the operation stops there
  // (releasing its DRAM locks, writing nothing more) and returns
  // Status::Internal.  Destroying the tree afterwards without Close() then
  // leaves exactly the state a crash at that point leaves.
  void SetStopHookForTest(std::function<bool(StopPoint)> hook) { stop_hook_ = std::move(hook); }

 private:
  enum class PutMode { kInsert, kUpdate, kUpsert };
  static constexpr uint32_t kStripes = 1u << 12;

  FastFairTree(PoolImpl* pool, uint64_t meta_off, Flaws flaws);

  Node* N(uint64_t off) const { return pool_->At<Node>(off); }
  static uint64_t Ld(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  static uint32_t Ld32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

  // DRAM seqlocks, one stripe per hash of the node offset (the shared
  // StripedVersionLocks, invariants V1-V3 of trees/common/version_lock.h).  A
  // writer unlocks only after its last fence, so a reader that sees the same
  // even version before and after reading a node read only persisted data
  // (durability contract 3).  Readers load node words with acquire loads
  // (Ld), which keeps the validating load after them.
  void Lock(uint64_t off) { locks_.For(off).lock(); }
  void Unlock(uint64_t off) { locks_.For(off).unlock(); }

  bool Stop(StopPoint p) { return stop_hook_ && stop_hook_(p); }
  Status Stopped() { return Status::Internal("fastfair: operation stopped by the test hook"); }

  // Number of records in [0, count) whose key slot is <= the target, where
  // cmp(slot) is <0, 0, >0 as slot's key is <, ==, > the target.
  template <class Cmp>
  uint32_t UpperBound(const Node* n, uint32_t count, Cmp&& cmp) const;
  // The B-link steps of FAIR's rule come from FairTraversal
  // (trees/common/fair_traversal.h) over the three hooks below.
  friend class FairTraversal<FastFairTree, Node>;
  using Fair = FairTraversal<FastFairTree, Node>;
  using Fair::CompleteRootSplit, Fair::DescendTo, Fair::FindInLeaves, Fair::InsertNewKey, Fair::LockAt, Fair::MoveRight,
      Fair::ScanLeaves;
  template <class Cmp>
  uint64_t ChildOf(const Node* n, Cmp& cmp) const;
  template <class Cmp>
  bool FindInLeaf(const Node* n, Cmp& cmp, uint64_t* value) const;
  using typename Fair::ScanItem;
  uint64_t ReadLeaf(const Node* n, std::vector<ScanItem>* items) const;

  // The leaf that holds `key`, locked: its record count, the key's upper
  // bound in it, and whether the record before that bound is the key.
  struct LockedLeaf {
    uint64_t off;
    Node* n;
    uint32_t count;
    uint32_t ub;
    bool found;
  };
  LockedLeaf LockLeafOf(K key);
  Result<bool> Put(K key, uint64_t value, PutMode mode);
  // FAST insert of (slot, value) at position pos of the locked node with room.
  void FastInsert(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value);
  void InsertInPlace(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value) { FastInsert(off, pos, slot, value); }
  // FAST delete of record pos of the locked node.
  void FastRemove(uint64_t off, uint32_t pos, bool original_flush);
  // FAIR split of the full locked node `off` plus insertion of (slot, value)
  // at position pos; unlocks `off`.
  Status SplitInsert(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value);
  // Inserts separator `slot` -> child into level `level`.
  Status InsertSeparator(uint32_t level, uint64_t slot, uint64_t child);
  // Root split: persists a new root over old_root and its sibling, then
  // switches meta.root.  Needs old_root's lock and root_mu_.
  Status InstallRoot(uint64_t old_root, uint64_t low, uint64_t sib);
  Status EnsureSpares(size_t n);
  Result<uint64_t> TakeSpare();

  // Recovery (docs/trees/fastfair.md, "Recovery").
  Status RecoverFromPool(bool clean);
  Status RebuildAllocator(const std::vector<std::vector<uint64_t>>& levels);
  Status Repair(std::vector<std::vector<uint64_t>>* levels);
  // Validates what recovery and Verify() follow: node offset, level.
  Status CheckNode(uint64_t off, uint32_t level) const;
  // Walks every level (leftmost chain), bounds-checked; levels[0] = leaves.
  Status CollectLevels(std::vector<std::vector<uint64_t>>* levels) const;
  // The meta block's leaf count (invariant 11): stores `leaves` and flushes
  // it; `fence` also orders it (else a later fence of the caller does).
  void StoreLeafCount(uint64_t leaves, bool fence);

  PoolImpl* pool_;
  KP keys_;
  const uint64_t meta_off_;
  Meta* meta_;
  uint32_t node_size_ = kDefaultNodeSize;
  uint32_t cap_ = Capacity(kDefaultNodeSize);
  Flaws flaws_;
  StripedVersionLocks<kStripes> locks_;
  std::mutex root_mu_;
  SpareNodes spares_;  // allocated, unlinked nodes reserved for splits
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> root_splits_{0};
  std::atomic<uint64_t> leaf_count_{1};  // leaves in the chain (invariant 11)
  RecoveryReport report_;
  std::function<bool(StopPoint)> stop_hook_;
  bool closed_ = false;
};

// Registry entry points.  K is uint64_t or std::string_view; Orig selects
// fastfair-orig.  TreeOptions::extra: fastfair accepts no key; fastfair-orig
// accepts `flaws` (Flaws::Parse; default "all"), so the explorer can be shown
// each flaw on its own.
template <class K, bool Orig>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K, bool Orig>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

// InvalidArgument unless node_size is 0 or a multiple of 64 in [256, 4096].
Status CheckNodeSize(uint32_t node_size);

}  // namespace pmtree::fastfair

#endif  // PMTREE_TREES_FASTFAIR_FASTFAIR_H_
