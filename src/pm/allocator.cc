// SPDX-License-Identifier: Apache-2.0
//
// Allocator and EpochManager (see pmtree/allocator.h for the crash semantics).
//
// Free space is a set of disjoint, coalesced extents kept twice: by offset
// (for coalescing on free) and by (size, offset) (for best fit), plus a
// cache of freed small blocks (SIZE CLASSES below).  Invariants:
//   A1. extents lie inside [heap_begin, heap_end), are 64-byte aligned and
//       multiples of 64 bytes;
//   A2. no two extents overlap or touch (touching ones are merged);
//   A3. by_offset_ and by_size_ hold the same extents; free_bytes_ is their
//       sum plus the cached blocks' bytes.
// CheckConsistency() returns the cached blocks to the extents, then checks
// A1-A3.
//
// SIZE CLASSES (when set_size_classes(true); off by default).  A freed
// block of at most kCachedMax bytes goes onto the list of its size (LIFO),
// and an allocation of that size and the default alignment takes one from
// there: no tree walk, no node allocation.  Both
// trees hold one node per extent, so with many free fragments (a million
// records deleted) every free and allocation walked a level per doubling of
// them, missing the cache at most (12.5 % of a server's samples, plus 11 %
// in malloc/free of their nodes: docs/server_bench.md, "Replies after the
// pass").  Cached
// blocks are not coalesced; they return to the extents (and coalesce)
// whenever a caller looks at the extents (FreeExtents, CheckConsistency), an
// allocation finds no extent large enough, or the cache is full.

#include "pmtree/allocator.h"
#include "pmtree/write_profile.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pmtree/counters.h"

namespace pmtree {

// ---------------------------------------------------------------------------
// EpochManager
//
// Every thread gets a process-wide index (recycled when it exits) that selects
// its slot in every manager.  A slot holds the global epoch the thread saw
// when it entered its outermost guard, or 0 when idle.  The global epoch may
// advance from e to e+1 only when every active slot shows e; a callback
// retired in epoch r therefore runs once the global epoch reaches r+2, when no
// guard that was active at Retire() time can still be held.

namespace {

std::mutex& IndexMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<int>& FreeIndices() {
  static std::vector<int> v;
  return v;
}
int next_index = 0;

struct ThreadIndex {
  int value;
  ThreadIndex() {
    std::lock_guard<std::mutex> g(IndexMutex());
    if (!FreeIndices().empty()) {
      value = FreeIndices().back();
      FreeIndices().pop_back();
    } else {
      value = next_index++;
    }
  }
  ~ThreadIndex() {
    std::lock_guard<std::mutex> g(IndexMutex());
    FreeIndices().push_back(value);
  }
};

int MyThreadIndex() {
  thread_local ThreadIndex index;
  return index.value;
}

std::atomic<uint64_t> next_manager_id{1};

}  // namespace

struct EpochManager::Limbo {
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::function<void()>>> items;  // (epoch retired, callback)
};

EpochManager::EpochManager() : id_(next_manager_id.fetch_add(1)), limbo_(std::make_unique<Limbo>()) {}

EpochManager::~EpochManager() { DrainAll(); }

EpochManager::Slot* EpochManager::MySlot() {
  int i = MyThreadIndex();
  if (i >= kMaxThreads) {
    std::fprintf(stderr, "pmtree: more than %d concurrent threads use one pool\n", kMaxThreads);
    std::abort();
  }
  return &slots_[i];
}

void EpochManager::Enter() {
  Slot* s = MySlot();
  uint32_t d = s->depth.load(std::memory_order_relaxed);
  s->depth.store(d + 1, std::memory_order_relaxed);
  if (d == 0) {
    s->epoch.store(global_epoch_.load(std::memory_order_acquire), std::memory_order_relaxed);
    // The slot must be visible before this thread reads shared memory, or a
    // reclaimer could miss it and free what we are about to read.
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

void EpochManager::Exit() {
  Slot* s = MySlot();
  uint32_t d = s->depth.load(std::memory_order_relaxed);
  assert(d > 0);
  s->depth.store(d - 1, std::memory_order_relaxed);
  if (d == 1) s->epoch.store(0, std::memory_order_release);
}

void EpochManager::Retire(std::function<void()> free_fn) {
  bool reclaim;
  {
    std::lock_guard<std::mutex> g(limbo_->mu);
    limbo_->items.emplace_back(global_epoch_.load(std::memory_order_acquire), std::move(free_fn));
    reclaim = limbo_->items.size() % 64 == 0;
  }
  if (reclaim) Reclaim();
}

size_t EpochManager::Reclaim() {
  std::vector<std::function<void()>> ready;
  size_t pending;
  {
    std::lock_guard<std::mutex> g(limbo_->mu);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint64_t e = global_epoch_.load(std::memory_order_acquire);
    bool can_advance = true;
    for (const Slot& s : slots_) {
      uint64_t se = s.epoch.load(std::memory_order_acquire);
      if (se != 0 && se != e) {
        can_advance = false;
        break;
      }
    }
    if (can_advance) global_epoch_.store(++e, std::memory_order_release);
    auto keep = std::stable_partition(limbo_->items.begin(), limbo_->items.end(),
                                      [e](const auto& item) { return item.first + 2 > e; });
    for (auto it = keep; it != limbo_->items.end(); ++it) ready.push_back(std::move(it->second));
    limbo_->items.erase(keep, limbo_->items.end());
    pending = limbo_->items.size();
  }
  for (auto& fn : ready) fn();
  return pending;
}

void EpochManager::DrainAll() {
  std::vector<std::pair<uint64_t, std::function<void()>>> all;
  {
    std::lock_guard<std::mutex> g(limbo_->mu);
    all.swap(limbo_->items);
  }
  for (auto& item : all) item.second();
}

// ---------------------------------------------------------------------------
// Allocator

// Guarded by mu.  The *Locked functions below are its methods.
struct Allocator::Impl {
  using Map = std::map<uint64_t, uint64_t>;
  void InsertFreeLocked(uint64_t offset, uint64_t size);  // coalescing
  void RemoveFreeLocked(Map::iterator it);
  // MarkUsed with mu held; `next` is used.lower_bound(offset).  The block
  // goes in just before `next`, which therefore still follows it.
  Status MarkUsedLocked(uint64_t heap_begin, uint64_t heap_end, uint64_t offset, uint64_t size, BlockOwner owner,
                        Map::iterator next);
  // MarkUsed of a block at or above marked_end: only the last block of
  // `tail` can overlap it (a block of the same batch before it).
  Status AppendLocked(uint64_t heap_begin, uint64_t heap_end, uint64_t offset, uint64_t size, BlockOwner owner);
  // The block [offset, offset + size) overlaps one in `tail`: that block's offset.
  std::optional<uint64_t> TailOverlap(uint64_t offset, uint64_t size) const;
  void CountUsed(uint64_t offset, uint64_t size, BlockOwner owner);
  void FinishRebuildLocked(uint64_t heap_begin, uint64_t heap_end);
  // SIZE CLASSES: a cached block of `size` bytes, or 0; caching a freed one
  // (false: not cacheable, or the cache is full).
  uint64_t TakeCachedLocked(uint64_t size);
  // Carves `size` bytes at `align` out of the smallest extent that holds
  // them; nothing when none does.
  std::optional<uint64_t> BestFitLocked(uint64_t size, uint64_t align);
  bool CacheLocked(uint64_t offset, uint64_t size);
  // Every cached block back into the extents.
  void DrainCacheLocked();
  void ClearCacheLocked();

  mutable std::mutex mu;
  Map by_offset;                                 // free extents: offset -> size
  std::set<std::pair<uint64_t, uint64_t>> by_size;  // (size, offset), best fit
  uint64_t free_bytes = 0;
  bool rebuilding = false;
  bool rebuild_held = false;         // HoldRebuild() is in force
  bool rebuild_end_pending = false;  // EndRebuild() came while held
  uint64_t store_bytes = 0;          // bytes in use by BlockOwner::kStore
  uint64_t generation = 0;           // bumped by rebuild/load: stale retires are dropped
  // FailAllocationsAfter: allocations left before the injected failures
  // (UINT64_MAX: none injected), and whether one was returned.
  uint64_t allocations_left = UINT64_MAX;
  bool injected_failure = false;
  // During a rebuild, the blocks marked in use: `tail` for every block that
  // lay at or above all blocks marked before it (a walk in ascending offset
  // order, a sorted batch: MarkUsedSorted's common case), appended in order
  // with no tree node per block; `used` for the others.  The two are
  // disjoint; `marked_end` is the largest end of a block in either.
  Map used;
  std::vector<std::pair<uint64_t, uint64_t>> tail;
  uint64_t marked_end = 0;
  std::vector<std::function<Status()>> deferred_checks;  // DeferRebuildCheck
  // SIZE CLASSES: cached[c] holds free blocks of (c + 1) * kAllocGranule
  // bytes; their bytes are counted in free_bytes.
  static constexpr uint64_t kCachedMax = 1024;
  static constexpr size_t kCachedBlocksMax = size_t{1} << 20;  // 8 MiB of offsets at most
  std::vector<uint64_t> cached[kCachedMax / kAllocGranule];
  size_t cached_blocks = 0;
  bool size_classes = false;
};

uint64_t Allocator::Impl::TakeCachedLocked(uint64_t size) {
  if (size > kCachedMax) return 0;
  std::vector<uint64_t>& list = cached[size / kAllocGranule - 1];
  if (list.empty()) return 0;
  const uint64_t off = list.back();
  list.pop_back();
  cached_blocks--;
  free_bytes -= size;
  return off;
}

std::optional<uint64_t> Allocator::Impl::BestFitLocked(uint64_t size, uint64_t align) {
  for (auto it = by_size.lower_bound({size, 0}); it != by_size.end(); ++it) {
    const uint64_t ext_size = it->first, ext_off = it->second;
    const uint64_t start = (ext_off + align - 1) & ~(align - 1);
    if (start + size > ext_off + ext_size) continue;  // alignment padding does not fit
    RemoveFreeLocked(by_offset.find(ext_off));
    if (start > ext_off) InsertFreeLocked(ext_off, start - ext_off);
    if (start + size < ext_off + ext_size) InsertFreeLocked(start + size, ext_off + ext_size - (start + size));
    return start;
  }
  return std::nullopt;
}

bool Allocator::Impl::CacheLocked(uint64_t offset, uint64_t size) {
  if (!size_classes || size > kCachedMax || cached_blocks == kCachedBlocksMax) return false;
  cached[size / kAllocGranule - 1].push_back(offset);
  cached_blocks++;
  free_bytes += size;
  return true;
}

void Allocator::Impl::DrainCacheLocked() {
  if (cached_blocks == 0) return;
  for (size_t c = 0; c < std::size(cached); c++) {
    const uint64_t size = (c + 1) * kAllocGranule;
    for (uint64_t off : cached[c]) {
      free_bytes -= size;  // InsertFreeLocked counts it again
      InsertFreeLocked(off, size);
    }
    std::vector<uint64_t>().swap(cached[c]);
  }
  cached_blocks = 0;
}

void Allocator::Impl::ClearCacheLocked() {
  for (auto& list : cached) std::vector<uint64_t>().swap(list);
  cached_blocks = 0;
}

Allocator::Allocator(uint64_t heap_begin, uint64_t heap_end)
    : heap_begin_((heap_begin + kAllocGranule - 1) & ~(kAllocGranule - 1)),
      heap_end_(heap_end & ~(kAllocGranule - 1)),
      impl_(std::make_unique<Impl>()) {
  if (heap_end_ > heap_begin_) impl_->InsertFreeLocked(heap_begin_, heap_end_ - heap_begin_);
}

Allocator::~Allocator() = default;

void Allocator::set_size_classes(bool on) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->size_classes = on;
  if (!on) impl_->DrainCacheLocked();
}

bool Allocator::rebuilding() const { return impl_->rebuilding; }

void Allocator::Impl::InsertFreeLocked(uint64_t offset, uint64_t size) {
  auto next = by_offset.lower_bound(offset);
  // Merge with the extent that ends where this one starts (A2).
  if (next != by_offset.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      RemoveFreeLocked(prev);
    }
  }
  // Merge with the extent that starts where this one ends.
  if (next != by_offset.end() && offset + size == next->first) {
    size += next->second;
    RemoveFreeLocked(next);
  }
  by_offset.emplace(offset, size);
  by_size.emplace(size, offset);
  free_bytes += size;
}

void Allocator::Impl::RemoveFreeLocked(Map::iterator it) {
  by_size.erase({it->second, it->first});
  free_bytes -= it->second;
  by_offset.erase(it);
}

Result<uint64_t> Allocator::Allocate(uint64_t size, uint64_t align, BlockOwner owner) {
  size = RoundUp(size == 0 ? 1 : size);
  if (align < kAllocGranule) align = kAllocGranule;
  if ((align & (align - 1)) != 0) return Status::InvalidArgument("allocation alignment must be a power of two");
  std::lock_guard<std::mutex> g(impl_->mu);
  if (impl_->rebuilding) return Status::Busy("allocator: allocation during recovery rebuild");
  if (impl_->allocations_left != UINT64_MAX) {
    if (impl_->allocations_left == 0) {
      impl_->injected_failure = true;
      return Status::OutOfSpace("pool heap full: " + std::to_string(size) +
                                " bytes requested (failure injected by FailAllocationsAfter)");
    }
    impl_->allocations_left--;
  }
  auto allocated = [&](uint64_t start) {
    if (owner == BlockOwner::kStore) impl_->store_bytes += size;
    counters::RecordAllocation();
    if (profile_ != nullptr) profile_->RecordAllocation(start, size);
    return start;
  };
  if (align == kAllocGranule)
    if (const uint64_t off = impl_->TakeCachedLocked(size); off != 0) return allocated(off);
  std::optional<uint64_t> start = impl_->BestFitLocked(size, align);
  if (!start && impl_->cached_blocks != 0) {
    // No extent fits: coalesce the cached blocks and look again.
    impl_->DrainCacheLocked();
    start = impl_->BestFitLocked(size, align);
  }
  if (start) return allocated(*start);
  uint64_t largest = impl_->by_size.empty() ? 0 : impl_->by_size.rbegin()->first;
  return Status::OutOfSpace("pool heap full: " + std::to_string(size) + " bytes requested, " +
                            std::to_string(impl_->free_bytes) + " free in " + std::to_string(impl_->by_size.size()) +
                            " extents, largest " + std::to_string(largest));
}

void Allocator::FailAllocationsAfter(uint64_t n) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->allocations_left = n == UINT64_MAX ? n - 1 : n;
  impl_->injected_failure = false;
}

void Allocator::ClearAllocationFailure() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->allocations_left = UINT64_MAX;
}

bool Allocator::allocation_failed() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->injected_failure;
}

void Allocator::Free(uint64_t offset, uint64_t size, BlockOwner owner) {
  size = RoundUp(size == 0 ? 1 : size);
  std::lock_guard<std::mutex> g(impl_->mu);
  assert(offset >= heap_begin_ && offset + size <= heap_end_);
  if (impl_->rebuilding) return;  // the rebuild decides what is free
  if (!impl_->CacheLocked(offset, size)) impl_->InsertFreeLocked(offset, size);
  if (owner == BlockOwner::kStore) {
    assert(impl_->store_bytes >= size);
    impl_->store_bytes -= size;
  }
}

void Allocator::Retire(uint64_t offset, uint64_t size, BlockOwner owner) {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    generation = impl_->generation;
  }
  epochs_.Retire([this, offset, size, generation, owner] {
    {
      std::lock_guard<std::mutex> g(impl_->mu);
      // A rebuild since Retire() already decided this block's fate.
      if (generation != impl_->generation) return;
    }
    Free(offset, size, owner);
  });
}

void Allocator::BeginRebuild() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->generation++;
  impl_->rebuilding = true;
  impl_->by_offset.clear();
  impl_->by_size.clear();
  impl_->ClearCacheLocked();
  impl_->free_bytes = 0;
  impl_->store_bytes = 0;
  impl_->rebuild_end_pending = false;
  impl_->used.clear();
  impl_->tail.clear();
  impl_->marked_end = 0;
  impl_->deferred_checks.clear();
}

Status Allocator::MarkUsed(uint64_t offset, uint64_t size, BlockOwner owner) {
  std::lock_guard<std::mutex> g(impl_->mu);
  if (!impl_->rebuilding) return Status::Internal("allocator: MarkUsed outside a rebuild");
  // Above every block marked so far (a walk in ascending offset order):
  // nothing can overlap it, append it.
  if (offset >= impl_->marked_end) return impl_->AppendLocked(heap_begin_, heap_end_, offset, size, owner);
  return impl_->MarkUsedLocked(heap_begin_, heap_end_, offset, size, owner, impl_->used.lower_bound(offset));
}

Status Allocator::MarkUsedSorted(const std::vector<std::pair<uint64_t, uint64_t>>& blocks, BlockOwner owner) {
  std::lock_guard<std::mutex> g(impl_->mu);
  if (!impl_->rebuilding) return Status::Internal("allocator: MarkUsedSorted outside a rebuild");
  if (blocks.empty()) return Status::Ok();
  for (size_t i = 1; i < blocks.size(); i++) {
    // (An offset equal to the previous one is a double use, reported below.)
    if (blocks[i].first < blocks[i - 1].first)
      return Status::InvalidArgument("allocator: MarkUsedSorted given offset " + std::to_string(blocks[i].first) +
                                     " after " + std::to_string(blocks[i - 1].first) + " (not ascending)");
  }
  if (blocks[0].first >= impl_->marked_end) {
    // Above everything marked so far: only each block's predecessor in the
    // batch can overlap it, so the batch is appended to `tail`.
    impl_->tail.reserve(impl_->tail.size() + blocks.size());
    for (const auto& [offset, size] : blocks)
      PMTREE_RETURN_IF_ERROR(impl_->AppendLocked(heap_begin_, heap_end_, offset, size, owner));
    return Status::Ok();
  }
  auto next = impl_->used.lower_bound(blocks[0].first);
  for (size_t i = 0; i < blocks.size(); i++) {
    // Blocks marked before this batch may lie between two of its blocks.
    while (next != impl_->used.end() && next->first < blocks[i].first) ++next;
    // The block goes in just before `next`, which still follows it: no
    // std::next of the inserted block, which from the largest block climbs
    // the whole right spine (log n per block, most of a 10M-key recovery's
    // allocator rebuild).
    PMTREE_RETURN_IF_ERROR(
        impl_->MarkUsedLocked(heap_begin_, heap_end_, blocks[i].first, blocks[i].second, owner, next));
  }
  return Status::Ok();
}

namespace {

// A block a rebuild is told about: rounds *size up to the granule; an
// unaligned block or one outside the heap is damage.
Status CheckMarkedBlock(uint64_t heap_begin, uint64_t heap_end, uint64_t offset, uint64_t* size) {
  *size = Allocator::RoundUp(*size == 0 ? 1 : *size);
  if (offset % kAllocGranule != 0 || offset < heap_begin || offset > heap_end || *size > heap_end - offset)
    return Status::Corruption("block at offset " + std::to_string(offset) + " of " + std::to_string(*size) +
                              " bytes is not an aligned block inside the heap");
  return Status::Ok();
}

Status DoubleUse(uint64_t offset, uint64_t other) {
  return Status::Corruption("block at offset " + std::to_string(offset) + " overlaps the block at offset " +
                            std::to_string(other) + " (double use)");
}

}  // namespace

Status Allocator::Impl::MarkUsedLocked(uint64_t heap_begin, uint64_t heap_end, uint64_t offset, uint64_t size,
                                       BlockOwner owner, Map::iterator next) {
  PMTREE_RETURN_IF_ERROR(CheckMarkedBlock(heap_begin, heap_end, offset, &size));
  if (next != used.end() && next->first < offset + size) return DoubleUse(offset, next->first);
  if (next != used.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > offset) return DoubleUse(offset, prev->first);
  }
  if (auto other = TailOverlap(offset, size)) return DoubleUse(offset, *other);
  used.emplace_hint(next, offset, size);
  CountUsed(offset, size, owner);
  return Status::Ok();
}

Status Allocator::Impl::AppendLocked(uint64_t heap_begin, uint64_t heap_end, uint64_t offset, uint64_t size,
                                     BlockOwner owner) {
  PMTREE_RETURN_IF_ERROR(CheckMarkedBlock(heap_begin, heap_end, offset, &size));
  // Below marked_end only within a sorted batch: tail's blocks are ascending
  // and disjoint, so the last one holds marked_end.
  if (offset < marked_end) return DoubleUse(offset, tail.back().first);
  tail.emplace_back(offset, size);
  CountUsed(offset, size, owner);
  return Status::Ok();
}

std::optional<uint64_t> Allocator::Impl::TailOverlap(uint64_t offset, uint64_t size) const {
  auto it = std::lower_bound(tail.begin(), tail.end(), std::make_pair(offset, uint64_t{0}));
  if (it != tail.end() && it->first < offset + size) return it->first;
  if (it != tail.begin() && std::prev(it)->first + std::prev(it)->second > offset) return std::prev(it)->first;
  return std::nullopt;
}

void Allocator::Impl::CountUsed(uint64_t offset, uint64_t size, BlockOwner owner) {
  if (owner == BlockOwner::kStore) store_bytes += size;
  marked_end = std::max(marked_end, offset + size);
}

void Allocator::EndRebuild() {
  std::lock_guard<std::mutex> g(impl_->mu);
  if (!impl_->rebuilding) return;
  // The store above still has to report its blocks (HoldRebuild).
  if (impl_->rebuild_held) {
    impl_->rebuild_end_pending = true;
    return;
  }
  impl_->FinishRebuildLocked(heap_begin_, heap_end_);
}

void Allocator::HoldRebuild() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->rebuild_held = true;
}

bool Allocator::rebuild_end_pending() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->rebuild_end_pending;
}

void Allocator::ReleaseRebuild() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->rebuild_held = false;
  if (impl_->rebuild_end_pending) impl_->FinishRebuildLocked(heap_begin_, heap_end_);
}

void Allocator::DeferRebuildCheck(std::function<Status()> check) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->deferred_checks.push_back(std::move(check));
}

Status Allocator::RunOnceRebuilt(std::function<Status()> work) {
  if (!rebuild_end_pending()) return work();
  DeferRebuildCheck(std::move(work));
  return Status::Ok();
}

Status Allocator::RunDeferredRebuildChecks() {
  std::vector<std::function<Status()>> checks;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    checks.swap(impl_->deferred_checks);
  }
  // Outside the lock: a check reads FreeExtents().
  for (auto& check : checks) PMTREE_RETURN_IF_ERROR(check());
  return Status::Ok();
}

Status Allocator::SetStoreBytes(uint64_t bytes) {
  std::lock_guard<std::mutex> g(impl_->mu);
  if (impl_->rebuilding) return Status::Internal("allocator: SetStoreBytes during a rebuild");
  if (bytes % kAllocGranule != 0 || bytes > (heap_end_ - heap_begin_) - impl_->free_bytes)
    return Status::Corruption("allocator: the store claims " + std::to_string(bytes) + " bytes but only " +
                              std::to_string((heap_end_ - heap_begin_) - impl_->free_bytes) + " are in use");
  impl_->store_bytes = bytes;
  return Status::Ok();
}

void Allocator::Impl::FinishRebuildLocked(uint64_t heap_begin, uint64_t heap_end) {
  rebuild_end_pending = false;
  // The gaps between the blocks of `used` and `tail`, merged in offset order.
  uint64_t cursor = heap_begin;
  auto gap_before = [&](uint64_t off, uint64_t size) {
    if (off > cursor) InsertFreeLocked(cursor, off - cursor);
    cursor = off + size;
  };
  auto u = used.begin();
  for (const auto& [off, size] : tail) {
    for (; u != used.end() && u->first < off; ++u) gap_before(u->first, u->second);
    gap_before(off, size);
  }
  for (; u != used.end(); ++u) gap_before(u->first, u->second);
  if (heap_end > cursor) InsertFreeLocked(cursor, heap_end - cursor);
  used.clear();
  std::vector<std::pair<uint64_t, uint64_t>>().swap(tail);
  marked_end = 0;
  rebuilding = false;
}

std::vector<std::pair<uint64_t, uint64_t>> Allocator::FreeExtents() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->DrainCacheLocked();
  return {impl_->by_offset.begin(), impl_->by_offset.end()};
}

Status Allocator::LoadFreeExtents(const std::vector<std::pair<uint64_t, uint64_t>>& extents) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->generation++;
  impl_->by_offset.clear();
  impl_->by_size.clear();
  impl_->ClearCacheLocked();
  impl_->free_bytes = 0;
  impl_->store_bytes = 0;  // the store declares its share with SetStoreBytes
  uint64_t prev_end = 0;
  for (const auto& [off, size] : extents) {
    if (off % kAllocGranule || size % kAllocGranule || size == 0 || off < heap_begin_ || off < prev_end ||
        off > heap_end_ || size > heap_end_ - off)
      return Status::Corruption("saved allocator state: bad extent at offset " + std::to_string(off));
    impl_->InsertFreeLocked(off, size);
    prev_end = off + size;
  }
  return Status::Ok();
}

uint64_t Allocator::bytes_in_use(BlockOwner owner) const {
  std::lock_guard<std::mutex> g(impl_->mu);
  if (owner == BlockOwner::kStore) return impl_->store_bytes;
  return (heap_end_ - heap_begin_) - impl_->free_bytes - impl_->store_bytes;
}

uint64_t Allocator::bytes_free() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->free_bytes;
}

Status Allocator::CheckConsistency() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->DrainCacheLocked();  // a cached block that overlaps an extent or another shows up below
  uint64_t sum = 0, prev_end = 0;
  bool first = true;
  for (const auto& [off, size] : impl_->by_offset) {
    if (off % kAllocGranule || size % kAllocGranule || off < heap_begin_ || off + size > heap_end_)
      return Status::Corruption("allocator: extent at " + std::to_string(off) + " violates A1");
    if (!first && off <= prev_end)
      return Status::Corruption("allocator: extent at " + std::to_string(off) + " violates A2");
    if (!impl_->by_size.count({size, off}))
      return Status::Corruption("allocator: extent at " + std::to_string(off) + " violates A3");
    sum += size;
    prev_end = off + size;
    first = false;
  }
  if (sum != impl_->free_bytes || impl_->by_size.size() != impl_->by_offset.size())
    return Status::Corruption("allocator: free byte count violates A3");
  return Status::Ok();
}

}  // namespace pmtree
