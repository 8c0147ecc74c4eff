// SPDX-License-Identifier: Apache-2.0
//
// FairTraversal: the B-link traversal of the designs built on FAIR's rule
// (fastfair, circtree).  A node's keys end below its right sibling's low key,
// so a key at or above that low key lives to the right even before the
// parent names the sibling (FAST+FAIR's FAIR; Circ-Tree §5.4).  On that rule
// stand the steps both designs wrote alike: move right, descend to a level
// under optimistic reads, lock the node that holds a key, look a key up, and
// finish a root split left unfinished (fair_split.h has the end of a split).
//
// Why a CRTP base and not free functions like fair_split.h: every step calls
// several members of the tree (node access, the striped version locks, the
// meta block's root, the root mutex, InstallRoot) besides one design hook, so
// free functions would take five or six lambdas each; as a base the steps
// read as the members they replaced.  The base has no data: neither tree's
// class, node layout nor write order changes.
//
// Derived (which befriends this base) supplies:
//   Node* N(uint64_t off) const;  static uint64_t Ld(const uint64_t*);
//   static uint32_t Ld32(const uint32_t*);  meta_ (its `root` word names the
//   root node);  locks_ (StripedVersionLocks);  Lock(off) / Unlock(off);
//   root_mu_;  Status InstallRoot(uint64_t old_root, uint64_t low, uint64_t sib);
//   template <class Cmp> uint64_t ChildOf(const Node* x, Cmp& cmp) const:
//     the child of inner node x that routes cmp's target;
//   template <class Cmp> bool FindInLeaf(const Node* x, Cmp& cmp, uint64_t* value) const:
//     whether leaf x holds cmp's target, and its value;
//   uint64_t ReadLeaf(const Node* x, std::vector<ScanItem>* items) const:
//     leaf x's records in key order into *items (cleared first); returns
//     x's sibling;
//   void InsertInPlace(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value):
//     the design's in-place insert into a locked node with room, and
//     Status SplitInsert(off, pos, slot, value): its split (which unlocks).
//   Also keys_ (the key policy) and cap_ (records per node).
// The first three hooks run inside an optimistic read of x's stripe (version_lock.h
// V3): they may see torn state and are retried, so they must not write.
// cmp(slot) is <0, 0, >0 as the slot's key is <, ==, > the target.

#ifndef PMTREE_TREES_COMMON_FAIR_TRAVERSAL_H_
#define PMTREE_TREES_COMMON_FAIR_TRAVERSAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmtree/status.h"

namespace pmtree {

// Verify's check that the parents of one level name, in order, exactly the
// sibling chain of the level below (`below`, reached through the siblings;
// `children`, the parents' child pointers in order, `level` the parents'
// level).  A node of `below` past the end of `children` gets `unnamed` (the
// design names its crash window); a mismatch gets the child-order message.
// error(off, what) makes the design's Status for node `off`.
template <class Error>
Status CheckChildOrder(const std::vector<uint64_t>& below, const std::vector<uint64_t>& children, size_t level,
                       std::string_view unnamed, Error&& error) {
  for (size_t i = 0; i < std::max(below.size(), children.size()); i++) {
    if (i >= children.size()) return error(below[i], std::string(unnamed));
    if (i >= below.size() || below[i] != children[i])
      return error(children[i],
                   "child order of level " + std::to_string(level) + " differs from the sibling chain below");
  }
  return Status::Ok();
}

template <class Derived, class Node>
class FairTraversal {
 protected:
  struct ScanItem {  // a leaf record copied out under an optimistic read
    uint64_t key;
    uint64_t value;
  };

  // True when cmp's target belongs to x's right sibling (FAIR's rule above);
  // *sibling is then that sibling.
  template <class Cmp>
  bool MoveRight(const Node* x, Cmp&& cmp, uint64_t* sibling) const {
    const Derived& t = D();
    const uint64_t sib = t.Ld(&x->hdr.sibling);
    if (sib == 0) return false;
    if (cmp(t.Ld(&t.N(sib)->hdr.low_key)) > 0) return false;
    *sibling = sib;
    return true;
  }

  // The node at `level` (or the first below it) whose range may hold cmp's
  // target, reached from the root without locks.
  template <class Cmp>
  uint64_t DescendTo(uint32_t level, Cmp&& cmp) {
    Derived& t = D();
    uint64_t off = t.Ld(&t.meta_->root);
    for (;;) {
      const Node* x = t.N(off);
      if (t.Ld32(&x->hdr.level) <= level) return off;
      off = t.locks_.For(off).ReadStable([&] {
        uint64_t sib;
        if (MoveRight(x, cmp, &sib)) return sib;
        return t.ChildOf(x, cmp);
      });
    }
  }

  // Locks `off`, then moves right (lock, unlock) while cmp's target belongs to
  // a sibling; returns the locked node that holds the target's range.
  template <class Cmp>
  uint64_t LockAt(uint64_t off, Cmp&& cmp) {
    Derived& t = D();
    t.Lock(off);
    uint64_t sib;
    while (MoveRight(t.N(off), cmp, &sib)) {
      t.Unlock(off);
      off = sib;
      t.Lock(off);
    }
    return off;
  }

  // Lookup without locks: descend to the leaf level, then read the leaf
  // (moving right) under optimistic reads.
  template <class Cmp>
  bool FindInLeaves(Cmp&& cmp, uint64_t* value) {
    Derived& t = D();
    uint64_t off = DescendTo(0, cmp);
    for (;;) {
      const Node* x = t.N(off);
      struct R {
        uint64_t next = 0;
        bool found = false;
        uint64_t value = 0;
      };
      R r = t.locks_.For(off).ReadStable([&] {
        R out;
        if (MoveRight(x, cmp, &out.next)) return out;
        out.found = t.FindInLeaf(x, cmp, &out.value);
        return out;
      });
      if (r.next != 0) {
        off = r.next;
        continue;
      }
      if (r.found && value != nullptr) *value = r.value;
      return r.found;
    }
  }

  // Scan's leaf walk, from the leaf cmp (start's comparison) leads to: each
  // leaf is read under an optimistic read (ReadLeaf), and its records in
  // [start, *end] (no upper bound when end is null) are appended to out from
  // out[got] on.  A split in progress leaves copies in the old node that the
  // sibling also holds: each key is returned once, in ascending order.
  // Returns the new count.
  template <class Cmp, class Arg, class Entry>
  size_t ScanLeaves(Cmp&& cmp, Arg start, const Arg* end, std::span<Entry> out, size_t got) {
    Derived& t = D();
    uint64_t off = DescendTo(0, cmp);
    bool have_last = false;
    uint64_t last = 0;
    std::vector<ScanItem> items;
    items.reserve(t.cap_);
    while (off != 0 && got < out.size()) {
      const Node* x = t.N(off);
      const uint64_t next = t.locks_.For(off).ReadStable([&] { return t.ReadLeaf(x, &items); });
      for (const ScanItem& r : items) {
        if (t.keys_.Compare(r.key, start) < 0) continue;
        if (have_last && t.keys_.CompareSlots(r.key, last) <= 0) continue;
        if (end != nullptr && t.keys_.Compare(r.key, *end) > 0) return got;
        out[got++] = Entry(t.keys_.Load(r.key), r.value);
        have_last = true;
        last = r.key;
        if (got == out.size()) return got;
      }
      off = next;
    }
    return got;
  }

  // The end of an insert of a new key at position pos of the locked leaf
  // `off`, which holds `count` records: the key's slot is made, then the
  // record goes in place, or in by a split.  Unlocks `off`.  A failed split
  // changed nothing and its slot is released, except when a test hook
  // stopped it (kInternal: the state is left exactly as it is).
  template <class Arg>
  Result<bool> InsertNewKey(uint64_t off, uint32_t pos, uint32_t count, Arg key, uint64_t value) {
    Derived& t = D();
    auto slot = t.keys_.MakeSlot(key);
    if (!slot.ok()) {
      t.Unlock(off);
      return slot.status();
    }
    if (count < t.cap_) {
      t.InsertInPlace(off, pos, *slot, value);
      t.Unlock(off);
      return true;
    }
    Status s = t.SplitInsert(off, pos, *slot, value);
    if (!s.ok()) {
      if (s.code() != Status::Code::kInternal) t.keys_.Release(*slot);
      return s;
    }
    return true;
  }

  // Completes a root split left unfinished (a root with a sibling): by a
  // crash between the split's commit and the root switch, or by running out
  // of space there.  Locks the current root, then takes the root mutex.
  Status CompleteRootSplit() {
    Derived& t = D();
    uint64_t root;
    for (;;) {
      root = t.Ld(&t.meta_->root);
      t.Lock(root);
      if (t.Ld(&t.meta_->root) == root) break;
      t.Unlock(root);
    }
    std::lock_guard<std::mutex> g(t.root_mu_);
    const uint64_t sib = t.Ld(&t.N(root)->hdr.sibling);
    Status s;
    if (sib != 0) s = t.InstallRoot(root, t.Ld(&t.N(sib)->hdr.low_key), sib);
    t.Unlock(root);
    return s;
  }

 private:
  Derived& D() { return static_cast<Derived&>(*this); }
  const Derived& D() const { return static_cast<const Derived&>(*this); }
};

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_FAIR_TRAVERSAL_H_
