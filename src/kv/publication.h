// SPDX-License-Identifier: Apache-2.0
//
// Publication: the store's visible timestamp (K6, store_impl.h), advanced
// without any writer waiting for another.
//
// A committing writer takes a timestamp, installs its versions in the tree,
// then calls Install(ts).  Install marks ts in a ring of slots and advances
// the visible timestamp over the contiguous prefix of marked timestamps;
// whichever writer finds the next slot marked advances it, so a writer whose
// predecessor was descheduled returns at once and the predecessor, when it
// marks its own slot, carries the visible timestamp past both.
//
// INVARIANTS
//  P1. visible() only grows, one timestamp at a time (a CAS from v to v+1),
//      and only when slot (v+1) % kSlots holds v+1: every timestamp <= visible()
//      was marked.
//  P2. Nothing stays marked above a gap-free prefix once every Install has
//      returned: an Install stores its slot, then reads visible and the next
//      slot; an advancer CASes visible, then reads the next slot; all
//      sequentially consistent, so of two writers marking neighbours one
//      sees the other's mark (the store-then-load pattern of Dekker's
//      algorithm).  Hence a quiescent store has visible() == the last ts.
//  P3. A slot is reused only for a timestamp kSlots later, and Install waits
//      (yield) until that earlier timestamp is visible: only when more than
//      kSlots commits are in flight at once, i.e. never with fewer threads.
//      So a slot holding ts means ts is marked (P1 relies on it), and
//      Complete(ts) is exact.
//
// Thread safety: Install, visible and Complete from any thread; Reset only
// while no writer runs.

#ifndef PMTREE_KV_PUBLICATION_H_
#define PMTREE_KV_PUBLICATION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

namespace pmtree::kv {

class Publication {
 public:
  static constexpr uint64_t kSlots = 4096;

  explicit Publication(uint64_t visible = 0) : slots_(new std::atomic<uint64_t>[kSlots]) { Reset(visible); }

  // Every timestamp <= visible is marked and none after it is; quiescent.
  void Reset(uint64_t visible) {
    for (uint64_t i = 0; i < kSlots; i++) slots_[i].store(0, std::memory_order_relaxed);
    visible_.store(visible, std::memory_order_seq_cst);
  }

  // The newest timestamp whose every predecessor is marked (K6).
  uint64_t visible() const { return visible_.load(std::memory_order_seq_cst); }

  // Marks ts (once, ts > visible()) and advances the visible timestamp as far
  // as the marks reach.  Returns the visible timestamp this call left;
  // *advanced says whether this call moved it (a caller then tells waiters).
  uint64_t Install(uint64_t ts, bool* advanced) {
    // P3: the slot's previous timestamp must be visible before it is reused.
    while (ts - visible_.load(std::memory_order_seq_cst) > kSlots) std::this_thread::yield();
    slots_[ts % kSlots].store(ts, std::memory_order_seq_cst);
    return Advance(advanced);
  }

  // Whether ts was marked (its writer installed every version it stamped),
  // visible or not.
  bool Complete(uint64_t ts) const {
    if (ts <= visible()) return true;
    if (slots_[ts % kSlots].load(std::memory_order_seq_cst) == ts) return true;
    return ts <= visible();  // P3: the slot moved on only after ts became visible
  }

 private:
  uint64_t Advance(bool* advanced) {
    *advanced = false;
    uint64_t v = visible_.load(std::memory_order_seq_cst);
    while (slots_[(v + 1) % kSlots].load(std::memory_order_seq_cst) == v + 1) {
      // On failure v is reloaded: another thread advanced; go on from there.
      if (visible_.compare_exchange_weak(v, v + 1, std::memory_order_seq_cst)) {
        v++;
        *advanced = true;
      }
    }
    return v;
  }

  std::atomic<uint64_t> visible_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> slots_;
};

}  // namespace pmtree::kv

#endif  // PMTREE_KV_PUBLICATION_H_
