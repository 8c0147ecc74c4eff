// SPDX-License-Identifier: Apache-2.0
//
// DramInnerIndex: the volatile inner nodes of the trees that keep only their
// leaves in persistent memory (FPTree's "selective persistence", used by
// fptree and wbtree as the LB+-Tree paper's comparison does, §4.1).
//
// What it is.  A B+-tree of DRAM nodes whose bottom level points at leaf
// offsets in the pool.  It is rebuilt from the persistent leaf list at
// recovery, so nothing here is ever flushed.
//
// Concurrency (our replacement for the papers' HTM transactions).  Nodes are
// immutable once published: a structure modification (leaf split, leaf
// removal) copies the nodes on the path it changes and publishes a new root
// with one atomic pointer store; replaced nodes are retired through the
// pool's epochs.  Readers therefore traverse a consistent snapshot without
// locks.  Optimistic validation: an operation remembers the root it
// traversed, takes the leaf's lock, and re-reads the root; if it changed, a
// structure modification completed in between and the operation retries.
// Every structure modification holds the modified leaf's lock from before it
// changes the leaf until after it publishes the root, so "root unchanged while
// I hold the leaf lock" proves the leaf still covers the key.
//
// Thread safety: Find*() from any thread inside an epoch guard; the mutating
// calls (Build, InsertSplit, RemoveLeaf) only with the caller's structure
// modification mutex held.  Owned keys (uint64_t or std::string) are copied
// into the nodes, so inner nodes never reference key blobs that a delete may
// release.
//
// LeafLocks: striped reader/writer spin locks (SharedSpinLock from
// version_lock.h) for leaves.  Locks cannot live in the pool (no
// compare-and-swap through the persistence API, and a lock word must never be
// a pending persistent store), so a leaf's lock is the stripe its offset
// hashes to; two leaves may share a stripe, which only costs some false
// contention.  Lock several stripes in ascending stripe order (LockOrdered)
// to stay deadlock-free.

#ifndef PMTREE_TREES_COMMON_DRAM_INNER_INDEX_H_
#define PMTREE_TREES_COMMON_DRAM_INNER_INDEX_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pm/pool_impl.h"
#include "trees/common/keys.h"
#include "trees/common/version_lock.h"

namespace pmtree {

// ---- leaf locks ---------------------------------------------------------------------

class LeafLocks {
 public:
  static constexpr size_t kStripes = 1024;

  size_t StripeOf(uint64_t leaf_off) const { return Mix64(leaf_off) & (kStripes - 1); }

  void LockShared(size_t s) { words_[s].lock.lock_shared(); }
  void UnlockShared(size_t s) { words_[s].lock.unlock_shared(); }
  void Lock(size_t s) { words_[s].lock.lock(); }
  void Unlock(size_t s) { words_[s].lock.unlock(); }

  // Locks the distinct stripes of `leaves` exclusively, in ascending stripe
  // order; returns them for UnlockAll.
  std::vector<size_t> LockOrdered(std::initializer_list<uint64_t> leaves) {
    std::vector<size_t> s;
    for (uint64_t l : leaves)
      if (l != 0) s.push_back(StripeOf(l));
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    for (size_t x : s) Lock(x);
    return s;
  }
  void UnlockAll(const std::vector<size_t>& s) {
    for (size_t x : s) Unlock(x);
  }

 private:
  struct alignas(64) Word {
    SharedSpinLock lock;  // version_lock.h: writer bit, then reader count
  };
  Word words_[kStripes];
};

// ---- inner index -----------------------------------------------------------------------

template <KeyPolicy KP>
class DramInnerIndex {
 public:
  using Arg = typename KP::Arg;
  using Owned = typename KP::Owned;
  static constexpr size_t kMaxKids = 64;

  struct Node {
    bool bottom = true;          // kids are leaf offsets, else Node* as integers
    std::vector<Owned> keys;     // separators: kids[i] holds keys in [keys[i-1], keys[i])
    std::vector<uint64_t> kids;  // keys.size() + 1 entries
  };

  // Where a key routes.  Pointers stay valid while the caller's epoch guard
  // is held (nodes are retired, not freed, when replaced).
  struct Route {
    const Node* root = nullptr;
    uint64_t leaf = 0;
    uint64_t prev = 0;            // the leaf before `leaf` in key order (FindWithPrev)
    const Owned* lo = nullptr;    // inclusive lower bound of the leaf's range, null = -inf
    const Owned* hi = nullptr;    // exclusive upper bound, null = +inf
  };

  explicit DramInnerIndex(PoolImpl* pool) : pool_(pool) {}
  ~DramInnerIndex() { FreeTree(root_.load(std::memory_order_relaxed)); }
  DramInnerIndex(const DramInnerIndex&) = delete;
  DramInnerIndex& operator=(const DramInnerIndex&) = delete;

  static int Cmp(const Owned& a, Arg b) {
    if constexpr (KP::kInline) {
      return a < b ? -1 : (a > b ? 1 : 0);
    } else {
      int c = std::string_view(a).compare(b);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
  }
  static Arg AsArg(const Owned& o) {
    if constexpr (KP::kInline) {
      return o;
    } else {
      return std::string_view(o);
    }
  }

  const Node* root() const { return root_.load(std::memory_order_acquire); }

  Route Find(Arg key) const { return FindIn(root(), key, false); }
  Route FindWithPrev(Arg key) const { return FindIn(root(), key, true); }
  // Route of the left-most leaf.
  Route FindFirst() const {
    Route r;
    r.root = root();
    const Node* n = r.root;
    for (;;) {
      if (!n->keys.empty()) r.hi = &n->keys[0];  // the deepest bound is the tightest
      if (n->bottom) break;
      n = Child(n, 0);
    }
    r.leaf = n->kids[0];
    return r;
  }

  // Builds the index over `leaves` (min key of each leaf, leaf offset) in key
  // order; the first key is ignored.  Replaces (and frees) any previous index;
  // only when no operation runs.
  void Build(std::vector<std::pair<Owned, uint64_t>> leaves) {
    FreeTree(root_.load(std::memory_order_relaxed));
    std::vector<std::pair<Owned, uint64_t>> level = std::move(leaves);
    bool bottom = true;
    // Fill nodes to 3/4 so that the first splits after a rebuild are not immediate.
    const size_t per = kMaxKids * 3 / 4;
    for (;;) {
      std::vector<std::pair<Owned, uint64_t>> up;
      for (size_t i = 0; i < level.size();) {
        size_t n = std::min(per, level.size() - i);
        if (level.size() - i - n > 0 && level.size() - i - n < 2) n = level.size() - i;  // no 1-kid tail
        auto* node = new Node;
        node->bottom = bottom;
        for (size_t j = 0; j < n; j++) {
          if (j > 0) node->keys.push_back(level[i + j].first);
          node->kids.push_back(level[i + j].second);
        }
        up.emplace_back(level[i].first, reinterpret_cast<uint64_t>(node));
        i += n;
      }
      if (up.size() == 1) {
        root_.store(reinterpret_cast<Node*>(up[0].second), std::memory_order_release);
        return;
      }
      level = std::move(up);
      bottom = false;
    }
  }

  // The leaf routing `sep` was split: keys >= sep now live in `new_leaf`.
  // Caller holds the structure-modification mutex.
  void InsertSplit(const Owned& sep, uint64_t new_leaf) {
    std::vector<std::pair<const Node*, size_t>> path;
    Descend(root(), AsArg(sep), &path);
    Owned up_key = sep;
    uint64_t up_kid = new_leaf;
    bool carry = true;
    Node* replaced = nullptr;  // copy of the child below, replacing path[i+1]
    std::vector<const Node*> old;
    for (size_t i = path.size(); i-- > 0;) {
      const Node* n = path[i].first;
      size_t idx = path[i].second;
      auto* c = new Node(*n);
      old.push_back(n);
      if (replaced) c->kids[idx] = reinterpret_cast<uint64_t>(replaced);
      replaced = c;
      if (!carry) continue;
      c->keys.insert(c->keys.begin() + idx, up_key);
      c->kids.insert(c->kids.begin() + idx + 1, up_kid);
      carry = false;
      if (c->kids.size() > kMaxKids) {
        size_t half = c->kids.size() / 2;
        auto* r = new Node;
        r->bottom = c->bottom;
        up_key = c->keys[half - 1];
        r->keys.assign(c->keys.begin() + half, c->keys.end());
        r->kids.assign(c->kids.begin() + half, c->kids.end());
        c->keys.resize(half - 1);
        c->kids.resize(half);
        up_kid = reinterpret_cast<uint64_t>(r);
        carry = true;
      }
    }
    Node* new_root = replaced;
    if (carry) {
      new_root = new Node;
      new_root->bottom = false;
      new_root->keys.push_back(up_key);
      new_root->kids = {reinterpret_cast<uint64_t>(replaced), up_kid};
    }
    Publish(new_root, old);
  }

  // Removes `leaf`, routed by `key` (any key of its range), from the index.
  // Its range joins a neighbour's.  Caller holds the structure-modification
  // mutex and guarantees the index holds more than one leaf.  False (nothing
  // changed) when `key` does not route to `leaf`.
  bool RemoveLeaf(Arg key, uint64_t leaf) {
    std::vector<std::pair<const Node*, size_t>> path;
    Descend(root(), key, &path);
    if (path.back().first->kids[path.back().second] != leaf) return false;
    std::vector<const Node*> old;
    Node* replaced = nullptr;
    bool remove = true;  // remove kid idx of the current level
    for (size_t i = path.size(); i-- > 0;) {
      const Node* n = path[i].first;
      size_t idx = path[i].second;
      old.push_back(n);
      if (remove && n->kids.size() == 1) {
        replaced = nullptr;  // the node empties: remove it from its parent too
        continue;
      }
      auto* c = new Node(*n);
      if (remove) {
        c->kids.erase(c->kids.begin() + idx);
        c->keys.erase(c->keys.begin() + (idx > 0 ? idx - 1 : 0));
        remove = false;
      } else {
        c->kids[idx] = reinterpret_cast<uint64_t>(replaced);
      }
      replaced = c;
    }
    // Collapse a root left with a single inner child.  The first root is our
    // fresh copy (delete it); deeper ones are published nodes (retire them).
    Node* new_root = replaced;
    bool fresh = true;
    while (!new_root->bottom && new_root->kids.size() == 1) {
      Node* child = reinterpret_cast<Node*>(new_root->kids[0]);
      if (fresh) {
        delete new_root;
      } else {
        old.push_back(new_root);
      }
      fresh = false;
      new_root = child;
    }
    Publish(new_root, old);
    return true;
  }

  // Calls fn(leaf, lo, hi) for every leaf in key order (Verify, Stats).
  void ForEachLeaf(const std::function<void(uint64_t, const Owned*, const Owned*)>& fn) const {
    Walk(root(), nullptr, nullptr, fn);
  }
  // Every leaf in key order with the lower bound that routes to it (Owned{}
  // for the first): what Build needs to make an equivalent index (the leaf-
  // list trees' restart image).  Only when no structure modification runs.
  void Routes(std::vector<std::pair<Owned, uint64_t>>* out) const { CollectRoutes(root(), Owned{}, out); }

  // Levels of inner nodes, inner node count, approximate DRAM bytes.
  void Measure(uint32_t* levels, uint64_t* nodes, uint64_t* bytes) const {
    *levels = 0;
    for (const Node* n = root();; n = Child(n, 0)) {
      ++*levels;
      if (n->bottom) break;
    }
    *nodes = 0;
    *bytes = 0;
    MeasureRec(root(), nodes, bytes);
  }
  // Invariants of the index itself: separators strictly ascending inside
  // every node and within the node's own bounds; kids == keys + 1.
  bool CheckShape(std::string* why) const { return CheckRec(root(), nullptr, nullptr, why); }

 private:
  static const Node* Child(const Node* n, size_t i) { return reinterpret_cast<const Node*>(n->kids[i]); }
  // Number of separators <= key: the kid holding key.
  static size_t Slot(const Node* n, Arg key) {
    size_t lo = 0, hi = n->keys.size();
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (Cmp(n->keys[mid], key) <= 0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
  static uint64_t RightmostLeaf(const Node* n) {
    while (!n->bottom) n = Child(n, n->kids.size() - 1);
    return n->kids.back();
  }
  static Route FindIn(const Node* root, Arg key, bool want_prev) {
    Route r;
    r.root = root;
    const Node* n = root;
    const Node* prev_subtree = nullptr;
    bool prev_is_leaf = false;
    uint64_t prev_leaf = 0;
    for (;;) {
      size_t i = Slot(n, key);
      if (i > 0) {
        r.lo = &n->keys[i - 1];
        if (n->bottom) {
          prev_leaf = n->kids[i - 1];
          prev_is_leaf = true;
        } else {
          prev_subtree = Child(n, i - 1);
          prev_is_leaf = false;
        }
      }
      if (i < n->keys.size()) r.hi = &n->keys[i];
      if (n->bottom) {
        r.leaf = n->kids[i];
        break;
      }
      n = Child(n, i);
    }
    if (want_prev) r.prev = prev_is_leaf ? prev_leaf : (prev_subtree ? RightmostLeaf(prev_subtree) : 0);
    return r;
  }
  static void Descend(const Node* n, Arg key, std::vector<std::pair<const Node*, size_t>>* path) {
    for (;;) {
      size_t i = Slot(n, key);
      path->emplace_back(n, i);
      if (n->bottom) return;
      n = Child(n, i);
    }
  }
  void Publish(Node* new_root, const std::vector<const Node*>& old) {
    root_.store(new_root, std::memory_order_release);
    std::vector<const Node*> dead = old;
    pool_->epochs().Retire([dead] {
      for (const Node* n : dead) delete n;
    });
  }
  static void FreeTree(const Node* n) {
    if (n == nullptr) return;
    if (!n->bottom)
      for (uint64_t k : n->kids) FreeTree(reinterpret_cast<const Node*>(k));
    delete n;
  }
  static void Walk(const Node* n, const Owned* lo, const Owned* hi,
                   const std::function<void(uint64_t, const Owned*, const Owned*)>& fn) {
    for (size_t i = 0; i < n->kids.size(); i++) {
      const Owned* l = i > 0 ? &n->keys[i - 1] : lo;
      const Owned* h = i < n->keys.size() ? &n->keys[i] : hi;
      if (n->bottom) {
        fn(n->kids[i], l, h);
      } else {
        Walk(Child(n, i), l, h, fn);
      }
    }
  }
  static void CollectRoutes(const Node* n, const Owned& lo, std::vector<std::pair<Owned, uint64_t>>* out) {
    for (size_t i = 0; i < n->kids.size(); i++) {
      const Owned& k = i == 0 ? lo : n->keys[i - 1];
      if (n->bottom) {
        out->emplace_back(k, n->kids[i]);
      } else {
        CollectRoutes(Child(n, i), k, out);
      }
    }
  }
  static void MeasureRec(const Node* n, uint64_t* nodes, uint64_t* bytes) {
    ++*nodes;
    *bytes += sizeof(Node) + n->kids.capacity() * 8 + n->keys.capacity() * sizeof(Owned);
    if constexpr (!KP::kInline) {
      for (const auto& k : n->keys) *bytes += k.capacity() > 15 ? k.capacity() : 0;
    }
    if (!n->bottom)
      for (uint64_t k : n->kids) MeasureRec(reinterpret_cast<const Node*>(k), nodes, bytes);
  }
  static bool CheckRec(const Node* n, const Owned* lo, const Owned* hi, std::string* why) {
    if (n->kids.empty() || n->kids.size() != n->keys.size() + 1) {
      *why = "inner node with " + std::to_string(n->kids.size()) + " kids and " + std::to_string(n->keys.size()) +
             " separators";
      return false;
    }
    for (size_t i = 0; i < n->keys.size(); i++) {
      Arg k = AsArg(n->keys[i]);
      if ((i > 0 && Cmp(n->keys[i - 1], k) >= 0) || (lo && Cmp(*lo, k) > 0) || (hi && Cmp(*hi, k) <= 0)) {
        *why = "inner node separators not strictly ascending within the node's bounds";
        return false;
      }
    }
    if (!n->bottom)
      for (size_t i = 0; i < n->kids.size(); i++) {
        if (!CheckRec(Child(n, i), i > 0 ? &n->keys[i - 1] : lo, i < n->keys.size() ? &n->keys[i] : hi, why))
          return false;
      }
    return true;
  }

  PoolImpl* pool_;
  std::atomic<Node*> root_{nullptr};
};

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_DRAM_INNER_INDEX_H_
