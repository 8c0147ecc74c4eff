// SPDX-License-Identifier: Apache-2.0
//
// The concurrency toolbox every tree shares: backoff, a spin lock, a
// reader/writer spin lock, a version lock (seqlock) with optimistic reads, and
// striped version locks keyed by a pool offset.
//
// Why DRAM only.  None of these words may live in the pool: the persistence
// API has no compare-and-swap, and a lock word must never be a pending
// persistent store (a crash image would hold a lock nobody owns).  Designs
// whose paper keeps a lock bit in the node (Circ-Tree, LB+-Tree) either keep
// the persisted bit as the paper does and clear it at recovery, or keep the
// lock here and say why in their design doc.
//
// Version lock protocol (invariants V1-V3, cited by the trees that use it):
//   V1  The version is even when unlocked and odd while a writer holds it.
//   V2  A writer increments it on Lock and again on Unlock, so every completed
//       write section advances it by exactly 2.
//   V3  A reader that saw the same even version before and after reading (with
//       acquire loads of the protected words in between) read a state that no
//       writer section overlapped.  Writers call Unlock only after their last
//       fence, so such a read never returns data a crash could still lose.
//
// Thread safety: every member of every class here may be called from any
// thread; none allocates.

#ifndef PMTREE_TREES_COMMON_VERSION_LOCK_H_
#define PMTREE_TREES_COMMON_VERSION_LOCK_H_

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace pmtree {

// Spins with `pause` for a while, then yields the CPU: on this project's
// 2-core machines a waiter that never yields can starve the lock holder.
inline void CpuRelax(int& spins) {
  if (++spins < 64) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
}

// A test-and-test-and-set lock.  Satisfies Lockable (std::lock_guard works).
class SpinLock {
 public:
  void lock() {
    int spins = 0;
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) CpuRelax(spins);
    }
  }
  bool try_lock() { return !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// Reader/writer spin lock: bit 0 is the writer, bits 1.. count readers.  A
// writer takes the bit first (new readers stop entering), then waits for the
// readers inside to leave, so writers do not starve.
class SharedSpinLock {
 public:
  void lock_shared() {
    int spins = 0;
    for (;;) {
      uint32_t v = w_.load(std::memory_order_relaxed);
      if (!(v & 1) && w_.compare_exchange_weak(v, v + 2, std::memory_order_acquire)) return;
      CpuRelax(spins);
    }
  }
  void unlock_shared() { w_.fetch_sub(2, std::memory_order_release); }

  void lock() {
    int spins = 0;
    for (;;) {
      uint32_t v = w_.load(std::memory_order_relaxed);
      if (!(v & 1) && w_.compare_exchange_weak(v, v | 1, std::memory_order_acquire)) {
        for (int s = 0; w_.load(std::memory_order_acquire) != 1;) CpuRelax(s);
        return;
      }
      CpuRelax(spins);
    }
  }
  void unlock() { w_.fetch_and(~1u, std::memory_order_release); }

 private:
  std::atomic<uint32_t> w_{0};
};

// A seqlock (invariants V1-V3 above).  Writers exclude each other; readers
// never block writers and retry when a writer overlapped them.
class VersionLock {
 public:
  void lock() {
    int spins = 0;
    for (;;) {
      uint64_t v = v_.load(std::memory_order_relaxed);
      if (!(v & 1) && v_.compare_exchange_weak(v, v + 1, std::memory_order_acquire)) return;
      CpuRelax(spins);
    }
  }
  bool try_lock() {
    uint64_t v = v_.load(std::memory_order_relaxed);
    return !(v & 1) && v_.compare_exchange_strong(v, v + 1, std::memory_order_acquire);
  }
  // V2: the second increment of a write section.  Call after the section's
  // last fence (V3).
  void unlock() { v_.fetch_add(1, std::memory_order_release); }

  bool IsLocked() const { return v_.load(std::memory_order_relaxed) & 1; }

  // Optimistic lock coupling (lbtree's inner nodes and leaves): a reader that
  // restarts instead of waiting takes Current(), gives up on an odd value,
  // and later either validates or upgrades with TryLockAt.
  uint64_t Current() const { return v_.load(std::memory_order_acquire); }
  // Locks only if the version is still `v` (even), i.e. no writer section
  // began since the caller read `v`.
  bool TryLockAt(uint64_t v) {
    return !(v & 1) && v_.compare_exchange_strong(v, v + 1, std::memory_order_acquire);
  }
  // Validate for readers that loaded some protected words relaxed: the
  // acquire fence orders every earlier load before the version re-read (the
  // classic seqlock read side).
  bool ValidateFenced(uint64_t v) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return v_.load(std::memory_order_relaxed) == v;
  }
  // Sets the version to 0.  Only for a lock no other thread can reach yet (a
  // node just allocated over bytes an earlier node used, or rebuilt at open).
  void Reset() { v_.store(0, std::memory_order_release); }

  // Waits until no writer holds the lock and returns the (even) version.
  uint64_t ReadBegin() const {
    int spins = 0;
    for (;;) {
      uint64_t v = v_.load(std::memory_order_acquire);
      if (!(v & 1)) return v;
      CpuRelax(spins);
    }
  }
  // True when no writer section began since ReadBegin returned `v`.  The
  // protected words must have been read with acquire loads: those keep this
  // load from moving before them, so no separate fence is needed.
  bool Validate(uint64_t v) const { return v_.load(std::memory_order_acquire) == v; }

  // Runs `read` until it completes without a writer overlapping it; returns
  // its result.  `read` must tolerate torn state (it is retried) and must not
  // have side effects outside its return value.
  template <class F>
  auto ReadStable(F&& read) const {
    for (;;) {
      uint64_t v = ReadBegin();
      auto r = read();
      if (Validate(v)) return r;
    }
  }

  // The optimistic read every tree writes with a seqlock, as one loop: runs
  // `read` until it completes without a writer overlapping it (V3) and
  // returns the value inside its std::optional.  Unlike ReadStable, `read`
  // may load the protected words relaxed (the version is re-read behind an
  // acquire fence, ValidateFenced), and it may return std::nullopt when it
  // saw a state no completed write section leaves (an empty node, a count
  // past the capacity): the read backs off and starts again without
  // validating.  The same rules as ReadStable: `read` must tolerate torn
  // state and must have no side effects outside its return value.
  template <class F>
  auto ReadOptimistic(F&& read) const {
    int spins = 0;
    for (;;) {
      uint64_t v = ReadBegin();
      auto r = read();
      if (!r.has_value()) {
        CpuRelax(spins);
        continue;
      }
      if (ValidateFenced(v)) return *std::move(r);
    }
  }

 private:
  std::atomic<uint64_t> v_{0};
};
// One word, so a table of them can be mapped zeroed (lbtree's leaf versions).
static_assert(sizeof(VersionLock) == sizeof(uint64_t));

// Version locks for nodes that live in the pool: a node's lock is the stripe
// its offset hashes to.  Two nodes may share a stripe, which only costs false
// contention; a thread that needs two nodes at once must take their stripes
// in ascending stripe order and skip a repeated stripe (LockPair does both).
template <size_t kStripes = 4096>
class StripedVersionLocks {
  static_assert((kStripes & (kStripes - 1)) == 0, "stripe count must be a power of two");

 public:
  StripedVersionLocks() : locks_(new Slot[kStripes]) {}

  size_t StripeOf(uint64_t off) const { return Mix(off) & (kStripes - 1); }
  // DRAM the stripes occupy (one cache line each), for Stats().dram_bytes.
  static constexpr size_t DramBytes() { return kStripes * sizeof(Slot); }
  VersionLock& For(uint64_t off) { return locks_[StripeOf(off)].lock; }
  const VersionLock& For(uint64_t off) const { return locks_[StripeOf(off)].lock; }

  // Locks the stripes of a and b (either may be 0 = none) without deadlock.
  void LockPair(uint64_t a, uint64_t b) {
    size_t sa = a ? StripeOf(a) : kStripes, sb = b ? StripeOf(b) : kStripes;
    if (sa > sb) std::swap(sa, sb);
    if (sa < kStripes) locks_[sa].lock.lock();
    if (sb < kStripes && sb != sa) locks_[sb].lock.lock();
  }
  void UnlockPair(uint64_t a, uint64_t b) {
    size_t sa = a ? StripeOf(a) : kStripes, sb = b ? StripeOf(b) : kStripes;
    if (sa < kStripes) locks_[sa].lock.unlock();
    if (sb < kStripes && sb != sa) locks_[sb].lock.unlock();
  }

 private:
  // splitmix64's finaliser: offsets are multiples of the node size, so the
  // low bits alone would use a fraction of the stripes.
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  struct alignas(64) Slot {
    VersionLock lock;
  };
  std::unique_ptr<Slot[]> locks_;
};

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_VERSION_LOCK_H_
