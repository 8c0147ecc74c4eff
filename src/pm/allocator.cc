// SPDX-License-Identifier: Apache-2.0
//
// Allocator and EpochManager (see pmtree/allocator.h for the crash semantics).
//
// Free space is a set of disjoint, coalesced extents kept twice: by offset
// (for coalescing on free) and by (size, offset) (for best fit).  Invariants:
//   A1. extents lie inside [heap_begin, heap_end), are 64-byte aligned and
//       multiples of 64 bytes;
//   A2. no two extents overlap or touch (touching ones are merged);
//   A3. by_offset_ and by_size_ hold the same extents; free_bytes_ is their sum.
// CheckConsistency() checks A1-A3.

#include "pmtree/allocator.h"
#include "pmtree/write_profile.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
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

EpochManager::EpochManager() : id_(next_manager_id.fetch_add(1)) {}

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
    std::lock_guard<std::mutex> g(mu_);
    limbo_.emplace_back(global_epoch_.load(std::memory_order_acquire), std::move(free_fn));
    reclaim = limbo_.size() % 64 == 0;
  }
  if (reclaim) Reclaim();
}

size_t EpochManager::Reclaim() {
  std::vector<std::function<void()>> ready;
  size_t pending;
  {
    std::lock_guard<std::mutex> g(mu_);
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
    auto keep = std::stable_partition(limbo_.begin(), limbo_.end(),
                                      [e](const auto& item) { return item.first + 2 > e; });
    for (auto it = keep; it != limbo_.end(); ++it) ready.push_back(std::move(it->second));
    limbo_.erase(keep, limbo_.end());
    pending = limbo_.size();
  }
  for (auto& fn : ready) fn();
  return pending;
}

void EpochManager::DrainAll() {
  std::vector<std::pair<uint64_t, std::function<void()>>> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    all.swap(limbo_);
  }
  for (auto& item : all) item.second();
}

// ---------------------------------------------------------------------------
// Allocator

Allocator::Allocator(uint64_t heap_begin, uint64_t heap_end)
    : heap_begin_((heap_begin + kAllocGranule - 1) & ~(kAllocGranule - 1)),
      heap_end_(heap_end & ~(kAllocGranule - 1)) {
  if (heap_end_ > heap_begin_) InsertFreeLocked(heap_begin_, heap_end_ - heap_begin_);
}

void Allocator::InsertFreeLocked(uint64_t offset, uint64_t size) {
  auto next = by_offset_.lower_bound(offset);
  // Merge with the extent that ends where this one starts (A2).
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      RemoveFreeLocked(prev);
    }
  }
  // Merge with the extent that starts where this one ends.
  if (next != by_offset_.end() && offset + size == next->first) {
    size += next->second;
    RemoveFreeLocked(next);
  }
  by_offset_.emplace(offset, size);
  by_size_.emplace(size, offset);
  free_bytes_ += size;
}

void Allocator::RemoveFreeLocked(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

Result<uint64_t> Allocator::Allocate(uint64_t size, uint64_t align, BlockOwner owner) {
  size = RoundUp(size == 0 ? 1 : size);
  if (align < kAllocGranule) align = kAllocGranule;
  if ((align & (align - 1)) != 0) return Status::InvalidArgument("allocation alignment must be a power of two");
  std::lock_guard<std::mutex> g(mu_);
  if (rebuilding_) return Status::Busy("allocator: allocation during recovery rebuild");
  for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end(); ++it) {
    const uint64_t ext_size = it->first, ext_off = it->second;
    const uint64_t start = (ext_off + align - 1) & ~(align - 1);
    if (start + size > ext_off + ext_size) continue;  // alignment padding does not fit
    RemoveFreeLocked(by_offset_.find(ext_off));
    if (start > ext_off) InsertFreeLocked(ext_off, start - ext_off);
    if (start + size < ext_off + ext_size) InsertFreeLocked(start + size, ext_off + ext_size - (start + size));
    if (owner == BlockOwner::kStore) store_bytes_ += size;
    counters::RecordAllocation();
    if (profile_ != nullptr) profile_->RecordAllocation(start, size);
    return start;
  }
  uint64_t largest = by_size_.empty() ? 0 : by_size_.rbegin()->first;
  return Status::OutOfSpace("pool heap full: " + std::to_string(size) + " bytes requested, " +
                            std::to_string(free_bytes_) + " free in " + std::to_string(by_size_.size()) +
                            " extents, largest " + std::to_string(largest));
}

void Allocator::Free(uint64_t offset, uint64_t size, BlockOwner owner) {
  size = RoundUp(size == 0 ? 1 : size);
  std::lock_guard<std::mutex> g(mu_);
  assert(offset >= heap_begin_ && offset + size <= heap_end_);
  if (rebuilding_) return;  // the rebuild decides what is free
  InsertFreeLocked(offset, size);
  if (owner == BlockOwner::kStore) {
    assert(store_bytes_ >= size);
    store_bytes_ -= size;
  }
}

void Allocator::Retire(uint64_t offset, uint64_t size, BlockOwner owner) {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> g(mu_);
    generation = generation_;
  }
  epochs_.Retire([this, offset, size, generation, owner] {
    {
      std::lock_guard<std::mutex> g(mu_);
      // A rebuild since Retire() already decided this block's fate.
      if (generation != generation_) return;
    }
    Free(offset, size, owner);
  });
}

void Allocator::BeginRebuild() {
  std::lock_guard<std::mutex> g(mu_);
  generation_++;
  rebuilding_ = true;
  by_offset_.clear();
  by_size_.clear();
  free_bytes_ = 0;
  store_bytes_ = 0;
  rebuild_end_pending_ = false;
  used_.clear();
}

Status Allocator::MarkUsed(uint64_t offset, uint64_t size, BlockOwner owner) {
  std::lock_guard<std::mutex> g(mu_);
  if (!rebuilding_) return Status::Internal("allocator: MarkUsed outside a rebuild");
  std::map<uint64_t, uint64_t>::iterator at;
  return MarkUsedLocked(offset, size, owner, used_.lower_bound(offset), &at);
}

Status Allocator::MarkUsedSorted(const std::vector<std::pair<uint64_t, uint64_t>>& blocks, BlockOwner owner) {
  std::lock_guard<std::mutex> g(mu_);
  if (!rebuilding_) return Status::Internal("allocator: MarkUsedSorted outside a rebuild");
  if (blocks.empty()) return Status::Ok();
  auto next = used_.lower_bound(blocks[0].first);
  for (size_t i = 0; i < blocks.size(); i++) {
    // (An offset equal to the previous one is a double use, reported below.)
    if (i > 0 && blocks[i].first < blocks[i - 1].first)
      return Status::InvalidArgument("allocator: MarkUsedSorted given offset " + std::to_string(blocks[i].first) +
                                     " after " + std::to_string(blocks[i - 1].first) + " (not ascending)");
    // Blocks marked before this batch may lie between two of its blocks.
    while (next != used_.end() && next->first < blocks[i].first) ++next;
    std::map<uint64_t, uint64_t>::iterator at;
    PMTREE_RETURN_IF_ERROR(MarkUsedLocked(blocks[i].first, blocks[i].second, owner, next, &at));
    next = std::next(at);
  }
  return Status::Ok();
}

Status Allocator::MarkUsedLocked(uint64_t offset, uint64_t size, BlockOwner owner,
                                 std::map<uint64_t, uint64_t>::iterator next, std::map<uint64_t, uint64_t>::iterator* at) {
  size = RoundUp(size == 0 ? 1 : size);
  if (offset % kAllocGranule != 0 || offset < heap_begin_ || offset > heap_end_ || size > heap_end_ - offset)
    return Status::Corruption("block at offset " + std::to_string(offset) + " of " + std::to_string(size) +
                              " bytes is not an aligned block inside the heap");
  if (next != used_.end() && next->first < offset + size)
    return Status::Corruption("block at offset " + std::to_string(offset) + " overlaps the block at offset " +
                              std::to_string(next->first) + " (double use)");
  if (next != used_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > offset)
      return Status::Corruption("block at offset " + std::to_string(offset) + " overlaps the block at offset " +
                                std::to_string(prev->first) + " (double use)");
  }
  *at = used_.emplace_hint(next, offset, size);
  if (owner == BlockOwner::kStore) store_bytes_ += size;
  return Status::Ok();
}

void Allocator::EndRebuild() {
  std::lock_guard<std::mutex> g(mu_);
  if (!rebuilding_) return;
  // The store above still has to report its blocks (HoldRebuild).
  if (rebuild_held_) {
    rebuild_end_pending_ = true;
    return;
  }
  FinishRebuildLocked();
}

void Allocator::HoldRebuild() {
  std::lock_guard<std::mutex> g(mu_);
  rebuild_held_ = true;
}

bool Allocator::rebuild_end_pending() const {
  std::lock_guard<std::mutex> g(mu_);
  return rebuild_end_pending_;
}

void Allocator::ReleaseRebuild() {
  std::lock_guard<std::mutex> g(mu_);
  rebuild_held_ = false;
  if (rebuild_end_pending_) FinishRebuildLocked();
}

Status Allocator::SetStoreBytes(uint64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  if (rebuilding_) return Status::Internal("allocator: SetStoreBytes during a rebuild");
  if (bytes % kAllocGranule != 0 || bytes > (heap_end_ - heap_begin_) - free_bytes_)
    return Status::Corruption("allocator: the store claims " + std::to_string(bytes) + " bytes but only " +
                              std::to_string((heap_end_ - heap_begin_) - free_bytes_) + " are in use");
  store_bytes_ = bytes;
  return Status::Ok();
}

void Allocator::FinishRebuildLocked() {
  rebuild_end_pending_ = false;
  uint64_t cursor = heap_begin_;
  for (const auto& [off, size] : used_) {
    if (off > cursor) InsertFreeLocked(cursor, off - cursor);
    cursor = off + size;
  }
  if (heap_end_ > cursor) InsertFreeLocked(cursor, heap_end_ - cursor);
  used_.clear();
  rebuilding_ = false;
}

std::vector<std::pair<uint64_t, uint64_t>> Allocator::FreeExtents() const {
  std::lock_guard<std::mutex> g(mu_);
  return {by_offset_.begin(), by_offset_.end()};
}

Status Allocator::LoadFreeExtents(const std::vector<std::pair<uint64_t, uint64_t>>& extents) {
  std::lock_guard<std::mutex> g(mu_);
  generation_++;
  by_offset_.clear();
  by_size_.clear();
  free_bytes_ = 0;
  store_bytes_ = 0;  // the store declares its share with SetStoreBytes
  uint64_t prev_end = 0;
  for (const auto& [off, size] : extents) {
    if (off % kAllocGranule || size % kAllocGranule || size == 0 || off < heap_begin_ || off < prev_end ||
        off > heap_end_ || size > heap_end_ - off)
      return Status::Corruption("saved allocator state: bad extent at offset " + std::to_string(off));
    InsertFreeLocked(off, size);
    prev_end = off + size;
  }
  return Status::Ok();
}

uint64_t Allocator::bytes_in_use(BlockOwner owner) const {
  std::lock_guard<std::mutex> g(mu_);
  if (owner == BlockOwner::kStore) return store_bytes_;
  return (heap_end_ - heap_begin_) - free_bytes_ - store_bytes_;
}

uint64_t Allocator::bytes_free() const {
  std::lock_guard<std::mutex> g(mu_);
  return free_bytes_;
}

Status Allocator::CheckConsistency() const {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t sum = 0, prev_end = 0;
  bool first = true;
  for (const auto& [off, size] : by_offset_) {
    if (off % kAllocGranule || size % kAllocGranule || off < heap_begin_ || off + size > heap_end_)
      return Status::Corruption("allocator: extent at " + std::to_string(off) + " violates A1");
    if (!first && off <= prev_end)
      return Status::Corruption("allocator: extent at " + std::to_string(off) + " violates A2");
    if (!by_size_.count({size, off}))
      return Status::Corruption("allocator: extent at " + std::to_string(off) + " violates A3");
    sum += size;
    prev_end = off + size;
    first = false;
  }
  if (sum != free_bytes_ || by_size_.size() != by_offset_.size())
    return Status::Corruption("allocator: free byte count violates A3");
  return Status::Ok();
}

}  // namespace pmtree
