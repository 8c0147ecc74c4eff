// SPDX-License-Identifier: Apache-2.0
//
// Allocator: space in a pool's heap, with no leak across crashes.
//
// Crash semantics (docs/pool_format.md, "Allocation").  The allocator's state
// lives in DRAM and is *reconstructable data* (NV-Tree's insight): allocating
// or freeing writes nothing to persistent memory.  After a crash, the tree's
// recovery walks everything it can reach and reports each block with
// MarkUsed(); EndRebuild() makes the rest of the heap free.  So a node that was
// allocated but not yet linked when the process died is simply not reached and
// is free again: nothing leaks, and nothing is freed twice.  A clean Close()
// saves the free list in the pool so the next Open restores it without a walk
// (instant restart); a tree that walks anyway may call BeginRebuild() again.
//
// Rules for trees:
//  1. Initialise and persist a new block before the store that links it.
//  2. Free/Retire a block only after the store that unlinks it is persisted.
//  3. Free() only what no concurrent operation can still read; otherwise
//     Retire(), which defers the free until every operation that was running
//     has finished (epoch-based reclamation, EpochManager below).
//  4. Recovery reports every reachable block with the size it was allocated
//     with.  MarkUsed() of overlapping blocks fails with Corruption (double
//     use); Verify() compares the bytes it reaches with bytes_in_use().
//
// Owners.  A pool's heap may also hold blocks of the layer above the tree
// (the key-value store's records, src/kv): those are allocated with
// BlockOwner::kStore.  bytes_in_use() counts the tree's blocks only, so a
// tree's Verify() (bytes it reaches == bytes in use) holds with a store
// above it; bytes_in_use(kStore) counts the store's.  A tree's recovery does
// not know the store's blocks, so the store brackets it with HoldRebuild()
// / ReleaseRebuild(): while held, the tree's EndRebuild() only records that
// the tree is done, the store then reports its own reachable blocks with
// MarkUsed(..., kStore), and ReleaseRebuild() makes the complement free.
// A rebuild therefore frees exactly what neither the tree nor the store
// reaches (rule 4 for both layers).
//
// Sizes are rounded up to 64 B (one cache line); alignment is a power of two
// of at least 64.  Allocation is thread-safe (one mutex: trees allocate on
// splits and per variable-length key, not per lookup).

#ifndef PMTREE_ALLOCATOR_H_
#define PMTREE_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "pmtree/status.h"

namespace pmtree {

class WriteProfile;

inline constexpr uint64_t kAllocGranule = 64;

// Who a block belongs to (see "Owners" above).
enum class BlockOwner : uint8_t { kTree = 0, kStore = 1 };

// Epoch-based reclamation for memory that lock-free readers may still hold.
// An operation that may read retired memory runs inside an EpochGuard; a
// retired callback runs once every guard that was active at Retire() time has
// been released.  Guards are cheap (two uncontended atomic stores) and nest.
class EpochManager {
 public:
  EpochManager();
  ~EpochManager();  // runs every pending callback
  EpochManager(const EpochManager&) = delete;
  EpochManager& operator=(const EpochManager&) = delete;

  class Guard {
   public:
    explicit Guard(EpochManager& m) : m_(&m) { m_->Enter(); }
    ~Guard() {
      if (m_) m_->Exit();
    }
    Guard(Guard&& o) noexcept : m_(o.m_) { o.m_ = nullptr; }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    EpochManager* m_;
  };

  Guard Protect() { return Guard(*this); }
  void Retire(std::function<void()> free_fn);
  // Runs every callback whose epoch has passed; returns how many are pending.
  size_t Reclaim();
  // Runs every pending callback now.  Only when no guard is held anywhere.
  void DrainAll();

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> epoch{0};  // 0 = idle, else the global epoch seen at entry
    std::atomic<uint32_t> depth{0};  // guard nesting (owner thread only)
  };
  static constexpr int kMaxThreads = 256;
  Slot* MySlot();
  void Enter();
  void Exit();

  struct Limbo;  // retired callbacks and their mutex (allocator.cc)

  const uint64_t id_;  // for diagnostics
  std::atomic<uint64_t> global_epoch_{1};  // never 0: 0 marks an idle slot
  Slot slots_[kMaxThreads];
  std::unique_ptr<Limbo> limbo_;
};

class Allocator {
 public:
  // Manages [heap_begin, heap_end) of a pool.  A new allocator has the whole
  // heap free.
  Allocator(uint64_t heap_begin, uint64_t heap_end);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns the offset of at least `size` bytes aligned to `align`.
  // Contents are unspecified.  OutOfSpace when no free extent fits.
  Result<uint64_t> Allocate(uint64_t size, uint64_t align = kAllocGranule, BlockOwner owner = BlockOwner::kTree);
  // Returns the block to the free space at once (rule 3).
  void Free(uint64_t offset, uint64_t size, BlockOwner owner = BlockOwner::kTree);
  // Frees the block once no operation that might read it is still running.
  void Retire(uint64_t offset, uint64_t size, BlockOwner owner = BlockOwner::kTree);

  // Recovery (rule 4).  BeginRebuild forgets all state; MarkUsed records one
  // reachable block; EndRebuild makes the complement free.
  void BeginRebuild();
  Status MarkUsed(uint64_t offset, uint64_t size, BlockOwner owner = BlockOwner::kTree);
  // MarkUsed for many blocks (offset, size) given in ascending offset order
  // (InvalidArgument otherwise): one lock, and each block goes in next to the
  // previous one instead of searching the used index, so a recovery that
  // reports a million blocks spends tens of ms here, not hundreds.
  Status MarkUsedSorted(const std::vector<std::pair<uint64_t, uint64_t>>& blocks, BlockOwner owner = BlockOwner::kTree);
  void EndRebuild();
  bool rebuilding() const;

  // The store's bracket around a tree's recovery (see "Owners").  While held,
  // EndRebuild() defers making the complement free; rebuild_end_pending()
  // then says the tree has reported everything it reaches.  ReleaseRebuild()
  // finishes a deferred EndRebuild (or does nothing when none is pending).
  void HoldRebuild();
  bool rebuild_end_pending() const;
  void ReleaseRebuild();
  // A check a tree's recovery can make only once the free space is final
  // (fptree's and wbtree's scan for lost leaves, docs/pool_format.md), or a
  // repair that allocates (completing a root split, linking a child into a
  // parent that splits: circtree, fastfair, wotree, sortedtree; Allocate
  // returns Busy while the rebuild is held): while the rebuild is held, the
  // tree defers it here; the store runs the deferred work after
  // ReleaseRebuild (the first failure is returned) and it is dropped, run or
  // not, by the next BeginRebuild.  Nothing before it may need the repair
  // done: readers of those trees move right through sibling links.
  void DeferRebuildCheck(std::function<Status()> check);
  // `work` now, or deferred as above while the rebuild is held: for a
  // recovery repair that allocates.
  Status RunOnceRebuilt(std::function<Status()> work);
  Status RunDeferredRebuildChecks();
  // After a restore from saved extents (clean shutdown) the allocator cannot
  // tell owners apart: the store declares how many of the bytes in use are
  // its own (it saved that figure at its clean close).
  Status SetStoreBytes(uint64_t bytes);

  // Serialised free list for a clean shutdown (see Pool::Close).
  std::vector<std::pair<uint64_t, uint64_t>> FreeExtents() const;
  Status LoadFreeExtents(const std::vector<std::pair<uint64_t, uint64_t>>& extents);

  // Bytes in use by the tree (BlockOwner::kTree); bytes_in_use(kStore) gives
  // the store's.
  uint64_t bytes_in_use() const { return bytes_in_use(BlockOwner::kTree); }
  uint64_t bytes_in_use(BlockOwner owner) const;
  uint64_t bytes_free() const;
  uint64_t heap_bytes() const { return heap_end_ - heap_begin_; }
  uint64_t heap_begin() const { return heap_begin_; }
  uint64_t heap_end() const { return heap_end_; }
  // Checks that the free extents are disjoint, coalesced and inside the heap.
  Status CheckConsistency() const;

  EpochManager& epochs() { return epochs_; }

  // Fault injection for the crash explorer (an operation on a full pool):
  // after `n` more successful Allocate calls every Allocate fails with
  // OutOfSpace, as if the heap were full, until ClearAllocationFailure().
  // allocation_failed() says whether an injected failure was returned since
  // the last FailAllocationsAfter().
  void FailAllocationsAfter(uint64_t n);
  void ClearAllocationFailure();
  bool allocation_failed() const;

  // Reports every allocation to `profile` (null: none).  Set by the pool
  // before the allocator is used.
  void set_write_profile(WriteProfile* profile) { profile_ = profile; }
  // Size classes on or off (PoolOptions::allocator_size_classes; off at
  // construction).  Turning them off returns the cached blocks to the
  // extents.
  void set_size_classes(bool on);

  static uint64_t RoundUp(uint64_t size) { return (size + kAllocGranule - 1) & ~(kAllocGranule - 1); }

 private:
  // The free extents (by offset and by size), the rebuild's used-block index
  // and their mutex: allocator.cc.
  struct Impl;

  const uint64_t heap_begin_;
  const uint64_t heap_end_;
  std::unique_ptr<Impl> impl_;
  EpochManager epochs_;
  WriteProfile* profile_ = nullptr;
};

}  // namespace pmtree

#endif  // PMTREE_ALLOCATOR_H_
