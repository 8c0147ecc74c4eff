// SPDX-License-Identifier: Apache-2.0
//
// Circ-Tree: see circtree.h and docs/trees/circtree.md.  Implemented from the
// paper; no public code exists.
//
// Invariants at rest (Verify checks them; recovery re-establishes them):
//  C1  The meta block has the magic, version and a valid node size; its root
//      is a node in the heap.
//  C2  Every node is 64-aligned in the heap, at the level its parent implies;
//      array == node + 64; count <= N - 1; lock word and merge mark 0.
//  C3  Logical positions [0, count) hold non-NULL pairs (identity word != 0);
//      their keys strictly increase (inner nodes: from position 1).
//  C4  Every physical slot outside [base, base + count) is all-zero (NULL).
//  C5  A node's keys are >= its low key and < its sibling's low key.
//  C6  The first node of each level has no low key, every other node has one;
//      the root has no sibling; no node is reached twice.
//  C7  The children of level L+1, in order, are the sibling chain of level L;
//      separator i of an inner node equals its child's low key; the unused
//      key of position 0 equals the child's low key, 0 when it has none.
//  C8  An inner node's low key equals its leftmost child's low key.
//  C9  Key slots are valid (byte keys: blob in the heap, length, hash).
//  C10 Pool bytes reached (meta, nodes, leaf key blobs, leaf low-key blobs)
//      plus reserved spare nodes equal the allocator's bytes in use.
//  C11 The key-0 record of the meta block is 0 or 1 (byte-key trees: 0).
//  C12 A root inner node has at least two children (merges collapse it).
//  C13 meta.leaves is at least 1 and at most the leaves on the leaf level's
//      sibling chain -- in every crash state, not only at rest: a leaf split
//      stores count + 1 only after the persist that links its new leaf
//      (Figure 5 step 4); a leaf merge persists count - 1 before its commit
//      M3, after which recovery (case 7c) unlinks X; and the word's stores
//      follow the order of leaf_count_ (count_mu_).  Two splits may persist
//      out of order (each flushes its store; its commit's fence makes it
//      durable): the line then holds a prefix of the stores, and every
//      stored value counted only leaves durably linked when it was stored,
//      while a merge makes its smaller value durable before it unlinks.  So
//      crash recovery, which walks the chain, refuses a leaf level that
//      reaches fewer leaves (a zeroed sibling pointer or page cut it) instead
//      of rebuilding the allocator without them, and then stores the exact
//      count.  The count is a lower bound: a merge that recovery undoes
//      (case 7a) leaves it one low until then.  No bulk load: BulkLoad is
//      the interface's default, ordinary inserts.
//
// Shift rules (what recovery relies on; docs/trees/circtree.md, "Write
// orders").  Every copy of a pair into a neighbouring slot writes both words
// with 8-byte stores, and lines are persisted in the order a shift writes
// them (LineWriter), so a crash image holds a prefix of the shift.
//  S1  Inserts write the non-identity word first: a copy or the new pair
//      becomes visible only when complete.  A left shift (Algorithm 1, lines
//      6-22) copies pairs one slot left in ascending order into the NULL slot
//      left of the base; a right shift (lines 24-40) copies one slot right in
//      descending order into the NULL slot right of the last pair.
//  S2  Deletes write the identity word first: the first store already hides
//      the removed pair behind a duplicate.  A delete in the left half shifts
//      the smaller pairs right and NULLs the old base; one in the right half
//      shifts the greater pairs left and NULLs the old last slot.
//  S3  Hence, of two adjacent pairs with equal identity (a transient
//      duplicate), the complete copy is: insert left shift -> the left one;
//      insert right shift -> the right one; delete in the left half (the pair
//      sits below count / 2) -> the left one; delete in the right half -> the
//      right one.  Recovery tells the cases apart by which NULL neighbour is
//      non-NULL (inserts) and by the duplicate's position (deletes).
//  S4  Base + count is one Store64, persisted last: the commit of every
//      insert and delete.

#include "trees/circtree/circtree.h"
#include "trees/common/fair_split.h"
#include "trees/common/partition_point.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <unordered_set>

namespace pmtree::circtree {

namespace {

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}


}  // namespace

Status CheckNodeSize(uint32_t node_size) {
  if (node_size == 0 || node_size == 512 || node_size == 1024 || node_size == 2048 || node_size == 4096)
    return Status::Ok();
  return Status::InvalidArgument("circtree: node size " + std::to_string(node_size) + " is invalid; valid sizes are " +
                                 std::string(kNodeSizeRule) + " (the KV array; default 512)");
}

// ---------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
CircTree<KP>::CircTree(PoolImpl* pool, uint64_t meta_off, bool linear, bool paper)
    : pool_(pool),
      keys_(pool),
      meta_off_(meta_off),
      meta_(pool->At<Meta>(meta_off)),
      linear_(linear),
      paper_(paper) {
  node_size_ = meta_->node_size;
  // Exact after Create and a clean close; crash recovery replaces it with
  // the leaves its walk reached (C13).
  leaf_count_ = meta_->leaves;
  slots_ = Slots(node_size_);
  mask_ = slots_ - 1;
  cap_ = Capacity(node_size_);
}

template <KeyPolicy KP>
CircTree<KP>::~CircTree() = default;

template <KeyPolicy KP>
uint32_t CircTree<KP>::capabilities() const {
  return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapInstantRestart | kCapAssumesLineOrder |
         (paper_ ? static_cast<uint32_t>(kCapTestOnly) : 0u);
}

template <KeyPolicy KP>
typename CircTree<KP>::Span CircTree<KP>::LoadSpan(const Node* x) const {
  const uint64_t w = Ld(&x->hdr.base_count);
  return Span{static_cast<uint32_t>(w) & mask_, std::min<uint32_t>(static_cast<uint32_t>(w >> 32), cap_)};
}

template <KeyPolicy KP>
void CircTree<KP>::Commit(Node* x, uint32_t b, uint32_t n) {
  pool_->Store64(&x->hdr.base_count, PackBaseCount(b & mask_, n));
  // S4: persist the commit before the call returns and before the lock is
  // released, so the operation is durable on return and no reader sees it
  // unpersisted.
  pool_->Persist(&x->hdr.base_count, sizeof(uint64_t));
}

template <KeyPolicy KP>
void CircTree<KP>::WritePair(LineWriter& w, Pair* dst, uint64_t key, uint64_t value, bool leaf, bool identity_first) {
  uint64_t* id = leaf ? &dst->key : &dst->value;
  uint64_t* other = leaf ? &dst->value : &dst->key;
  const uint64_t id_v = leaf ? key : value, other_v = leaf ? value : key;
  if (paper_) {
    // circtree-paper: Algorithm 1's order for every pair, value then key.
    w.Store(&dst->value, value);
    w.Store(&dst->key, key);
    return;
  }
  if (identity_first) {
    w.Store(id, id_v);
    w.Store(other, other_v);
  } else {
    w.Store(other, other_v);
    w.Store(id, id_v);
  }
}

// ---------------------------------------------------------------------------
// Search (§5.1)
// ---------------------------------------------------------------------------
//
// Binary: the pairs [from, n) occupy one contiguous physical range, or two
// when they wrap past slot N - 1.  Comparing the target with the key at
// physical slot 0 (the smallest key of the wrapped part) picks the one
// segment that can hold the answer, which is then searched without wrapping.
// Linear (Circ-Tree_ls): from the base location to the last pair, wrapping.
template <KeyPolicy KP>
template <class Cmp>
uint32_t CircTree<KP>::UpperBound(const Node* x, const Span& s, uint32_t from, Cmp&& cmp) const {
  if (from >= s.n) return std::max(from, s.n);
  if (linear_) {
    uint32_t p = from;
    while (p < s.n && cmp(Ld(&At(x, s, p)->key)) <= 0) p++;
    return p;
  }
  uint32_t lo = from, hi = s.n;
  const uint32_t wrap = slots_ - s.b;  // logical position of physical slot 0
  if (wrap > from && wrap < s.n) {
    if (cmp(Ld(&x->pairs[0].key)) <= 0)
      lo = wrap;
    else
      hi = wrap;
  }
  const Pair* seg = &x->pairs[Phys(s.b, lo)];  // [lo, hi) is contiguous from here
  return PartitionPoint(lo, hi, [&](uint32_t i) { return cmp(Ld(&seg[i - lo].key)) <= 0; });
}

// The design hooks of FairTraversal (trees/common/fair_traversal.h).
template <KeyPolicy KP>
uint64_t CircTree<KP>::ReadLeaf(const Node* x, std::vector<ScanItem>* items) const {
  items->clear();
  const Span s = LoadSpan(x);
  for (uint32_t i = 0; i < s.n; i++) {
    const Pair* p = At(x, s, i);
    items->push_back({Ld(&p->key), Ld(&p->value)});
  }
  return Ld(&x->hdr.sibling);
}

template <KeyPolicy KP>
template <class Cmp>
uint64_t CircTree<KP>::ChildOf(const Node* x, Cmp& cmp) const {
  const Span s = LoadSpan(x);
  const uint32_t ub = UpperBound(x, s, 1, cmp);
  return Ld(&At(x, s, static_cast<int64_t>(ub) - 1)->value);
}

template <KeyPolicy KP>
template <class Cmp>
bool CircTree<KP>::FindInLeaf(const Node* x, Cmp& cmp, uint64_t* value) const {
  const Span s = LoadSpan(x);
  const uint32_t ub = UpperBound(x, s, 0, cmp);
  if (ub == 0) return false;
  const Pair* p = At(x, s, static_cast<int64_t>(ub) - 1);
  if (cmp(Ld(&p->key)) != 0) return false;
  *value = Ld(&p->value);
  return true;
}

// ---------------------------------------------------------------------------
// Point operations
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
bool CircTree<KP>::Lookup(K key, uint64_t* value) {
  if (!KP::CheckArg(key).ok()) return false;
  if constexpr (KP::kInline) {
    if (key == 0) {
      const ZeroKey z = ReadZero();
      if (z.present && value != nullptr) *value = z.value;
      return z.present;
    }
  }
  auto guard = pool_->epochs().Protect();
  return FindInLeaves([&](uint64_t slot) { return SafeCompare(slot, key); }, value);
}

// Key 0 of a 64-bit tree lives in the meta block (layout.h): present flag
// and value, each changed by one Store64.
template <KeyPolicy KP>
Result<bool> CircTree<KP>::PutZero(uint64_t value, PutMode mode) {
  std::lock_guard<VersionLock> g(zero_lock_);
  const bool present = Ld(&meta_->zero_present) == 1;
  if (present ? mode == PutMode::kInsert : mode == PutMode::kUpdate) return false;
  pool_->Store64(&meta_->zero_value, value);
  // Persist the value before the call returns; when key 0 is new, also before
  // the present flag, so a crash never shows key 0 with a stale value.
  pool_->Persist(&meta_->zero_value, sizeof(uint64_t));
  if (present) return mode == PutMode::kUpdate;
  pool_->Store64(&meta_->zero_present, 1);
  // Persist the flag: the insert of key 0 is durable on return.
  pool_->Persist(&meta_->zero_present, sizeof(uint64_t));
  return true;
}

template <KeyPolicy KP>
Result<bool> CircTree<KP>::RemoveZero() {
  std::lock_guard<VersionLock> g(zero_lock_);
  if (Ld(&meta_->zero_present) != 1) return false;
  pool_->Store64(&meta_->zero_present, 0);
  // Persist the cleared flag: the removal is durable on return.
  pool_->Persist(&meta_->zero_present, sizeof(uint64_t));
  return true;
}

template <KeyPolicy KP>
Result<bool> CircTree<KP>::Put(K key, uint64_t value, PutMode mode) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  if constexpr (KP::kInline) {
    if (key == 0) return PutZero(value, mode);
  }
  auto guard = pool_->epochs().Protect();
  auto cmp = [&](uint64_t slot) { return SafeCompare(slot, key); };
  const uint64_t off = LockAt(DescendTo(0, cmp), cmp);
  Node* x = N(off);
  const Span s = LoadSpan(x);
  const uint32_t ub = UpperBound(x, s, 0, cmp);
  if (ub > 0 && cmp(Ld(&At(x, s, static_cast<int64_t>(ub) - 1)->key)) == 0) {
    if (mode == PutMode::kInsert) {
      Unlock(off);
      return false;
    }
    uint64_t* v = &At(x, s, static_cast<int64_t>(ub) - 1)->value;
    // An 8-byte value is replaced by one failure-atomic store.
    pool_->Store64(v, value);
    // Persist it before the call returns and before the unlock (no reader
    // returns an unpersisted value).
    pool_->Persist(v, sizeof(uint64_t));
    Unlock(off);
    return mode == PutMode::kUpdate;
  }
  if (mode == PutMode::kUpdate) {
    Unlock(off);
    return false;
  }
  if (paper_ && value == 0) {
    Unlock(off);
    return Status::InvalidArgument("circtree-paper: the value 0 is the paper's NULL");
  }
  return InsertNewKey(off, ub, s.n, key, value);
}

template <KeyPolicy KP>
Result<bool> CircTree<KP>::Remove(K key) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  if constexpr (KP::kInline) {
    if (key == 0) return RemoveZero();
  }
  auto guard = pool_->epochs().Protect();
  auto cmp = [&](uint64_t slot) { return SafeCompare(slot, key); };
  const uint64_t off = LockAt(DescendTo(0, cmp), cmp);
  Node* x = N(off);
  const Span s = LoadSpan(x);
  const uint32_t ub = UpperBound(x, s, 0, cmp);
  if (ub == 0 || cmp(Ld(&At(x, s, static_cast<int64_t>(ub) - 1)->key)) != 0) {
    Unlock(off);
    return false;
  }
  const uint64_t slot = Ld(&At(x, s, static_cast<int64_t>(ub) - 1)->key);
  RemoveAt(off, ub - 1);
  Unlock(off);
  // The removal is persistent: the key blob may go (readers inside an epoch
  // guard may still hold it, hence Retire inside Release).
  keys_.Release(slot);
  // §5.3: a leaf under N / 2 pairs merges into its right sibling.
  if (s.n - 1 < slots_ / 2 && Ld32(&N(Ld(&meta_->root))->hdr.level) > 0) MergeAfterRemove(cmp);
  return true;
}

// Algorithm 1 (§5.2).  The new pair belongs at logical position pos; the
// pairs below it number pos, those above n - pos.  Line 5: shift left when
// the new key is below the middle key (pos <= n / 2), else right.
//   left:  for j = 0 .. pos-1: slot j-1 := slot j (S1); slot pos-1 := new;
//          persist the last line; commit (b - 1, n + 1).
//   right: for j = n-1 .. pos: slot j+1 := slot j (S1); slot pos := new;
//          persist the last line; commit (b, n + 1).
// Flushes: one per line the shift and the new pair touch, plus the header.
template <KeyPolicy KP>
void CircTree<KP>::InsertAt(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value) {
  Node* x = N(off);
  const bool leaf = x->hdr.level == 0;
  const Span s = LoadSpan(x);
  LineWriter w(pool_);
  if (pos <= s.n / 2) {
    for (int64_t j = 0; j < pos; j++) CopyPair(w, At(x, s, j - 1), At(x, s, j), leaf, false);
    WritePair(w, At(x, s, static_cast<int64_t>(pos) - 1), slot, value, leaf, false);
    w.Finish();
    if (s.b == 0) wraps_.fetch_add(1, std::memory_order_relaxed);
    Commit(x, s.b + slots_ - 1, s.n + 1);
    left_shifts_.fetch_add(1, std::memory_order_relaxed);
    pairs_shifted_.fetch_add(pos, std::memory_order_relaxed);
    return;
  }
  for (int64_t j = static_cast<int64_t>(s.n) - 1; j >= pos; --j) CopyPair(w, At(x, s, j + 1), At(x, s, j), leaf, false);
  WritePair(w, At(x, s, pos), slot, value, leaf, false);
  w.Finish();
  if (s.b + s.n == slots_) wraps_.fetch_add(1, std::memory_order_relaxed);
  Commit(x, s.b, s.n + 1);
  right_shifts_.fetch_add(1, std::memory_order_relaxed);
  pairs_shifted_.fetch_add(s.n - pos, std::memory_order_relaxed);
}

// §5.3.  The greatest pair, or a pair above the middle, is removed by
// shifting the greater pairs left and NULLing the old last slot; any other
// by shifting the smaller pairs right and NULLing the old base (S2).  An end
// pair needs no shift, only its NULL.  Commit: (b, n-1) or (b+1, n-1).
template <KeyPolicy KP>
void CircTree<KP>::RemoveAt(uint64_t off, uint32_t pos) {
  LineWriter w(pool_);
  RemoveAt(off, pos, w);
}

template <KeyPolicy KP>
void CircTree<KP>::RemoveAt(uint64_t off, uint32_t pos, LineWriter& w) {
  Node* x = N(off);
  const bool leaf = x->hdr.level == 0;
  const Span s = LoadSpan(x);
  if (pos + 1 == s.n || pos > s.n / 2) {
    for (int64_t d = pos; d + 1 < s.n; d++) CopyPair(w, At(x, s, d), At(x, s, d + 1), leaf, true);
    NullPair(w, At(x, s, static_cast<int64_t>(s.n) - 1), leaf);
    w.Finish();
    Commit(x, s.b, s.n - 1);
    deletes_right_.fetch_add(1, std::memory_order_relaxed);
    pairs_shifted_.fetch_add(s.n - 1 - pos, std::memory_order_relaxed);
    return;
  }
  for (int64_t d = pos; d >= 1; --d) CopyPair(w, At(x, s, d), At(x, s, d - 1), leaf, true);
  NullPair(w, At(x, s, 0), leaf);
  w.Finish();
  Commit(x, s.b + 1, s.n - 1);
  deletes_left_.fetch_add(1, std::memory_order_relaxed);
  pairs_shifted_.fetch_add(pos, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Split (§5.2, Figure 5)
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
Status CircTree<KP>::EnsureSpares(size_t want) {
  return spares_.Ensure(pool_->allocator(), want, NodeBytes(node_size_), kLine);
}

template <KeyPolicy KP>
Result<uint64_t> CircTree<KP>::TakeSpare() {
  return spares_.Take(pool_->allocator(), NodeBytes(node_size_), kLine);
}

template <KeyPolicy KP>
void CircTree<KP>::WriteNewNode(uint64_t off, uint32_t level, uint64_t sibling, uint64_t low, bool has_low,
                               const std::vector<Pair>& pairs) {
  std::vector<uint64_t> img(NodeBytes(node_size_) / 8, 0);
  Node* x = reinterpret_cast<Node*>(img.data());
  x->hdr.array = off + sizeof(NodeHeader);
  x->hdr.base_count = PackBaseCount(0, static_cast<uint32_t>(pairs.size()));
  x->hdr.sibling = sibling;
  x->hdr.low_key = has_low ? low : 0;
  x->hdr.level = level;
  x->hdr.flags = has_low ? kHasLowKey : 0;
  // An empty node (a new root's first level) copies nothing: memcpy's source
  // must not be null even for 0 bytes.
  if (!pairs.empty()) std::memcpy(x->pairs, pairs.data(), pairs.size() * sizeof(Pair));
  pool_->Write(N(off), img.data(), NodeBytes(node_size_));
  // Figure 5 step 3 ("any newly-allocated node is shredded with zeros"):
  // persist the whole node, NULL slots included, before anything links it,
  // so a crash never exposes a half-written node or stale non-NULL slots.
  pool_->Persist(N(off), NodeBytes(node_size_));
}

template <KeyPolicy KP>
void CircTree<KP>::AddLeaves(int64_t delta, bool fence) {
  std::lock_guard<std::mutex> g(count_mu_);
  leaf_count_ = static_cast<uint64_t>(static_cast<int64_t>(leaf_count_) + delta);
  pool_->Store64(&meta_->leaves, leaf_count_);
  // C13: flush the count.  A split calls this only after its link's persist,
  // so the count never exceeds the durable chain; its later fence (the
  // NULLs' or the commit's) completes the flush.
  pool_->Flush(&meta_->leaves, sizeof(uint64_t));
  // A merge's count must be durable before its commit M3 can be: fence here
  // when no M1 persist comes before M3.
  if (fence) pool_->Fence();
}

// Figure 5, write order:
//   1-2. split point m of the n + 1 pairs (the new one included); a spare
//        node is taken.
//   3.   the new right sibling S gets pairs [m, n+1) from base 0, its low key
//        and the old node's sibling pointer; S is persisted whole.
//                                               (StopPoint kSplitSiblingPersisted)
//   4.   node.sibling = S, persisted.          (kSplitLinked)
//        The copies are then NULLed, greatest first, line by line.
//                                               (kSplitCleared)
//   5.   node.base_count = (b, kept), persisted (kSplitCommitted); the new
//        pair goes into the node by Algorithm 1 when it belongs left; the
//        separator (S.low_key, S) goes into the parent, or a new root is
//        installed.
// Between the steps the tree is a valid B-link tree: lookups follow the
// sibling for keys >= S.low_key.  Recovery finishes 4 and 5 (cases 3-5).
template <KeyPolicy KP>
Status CircTree<KP>::SplitInsert(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value) {
  Node* x = N(off);
  const uint32_t level = x->hdr.level;
  const bool leaf = level == 0;
  // A leaf split reserves every node its cascade can need (one per level
  // plus a new root) before changing anything, so running out of space
  // changes nothing.  The inner splits of the cascade take from that
  // reserve: reserving again there (one spare short after the leaf's) could
  // fail after the leaf was linked and drop the separator (invariant C7,
  // seen by the mixed-size byte-key full-pool conformance test).
  if (leaf) {
    Status es = EnsureSpares(N(Ld(&meta_->root))->hdr.level + 2);
    if (!es.ok()) {
      Unlock(off);
      return es;
    }
  }
  const Span s = LoadSpan(x);
  std::vector<Pair> all;
  all.reserve(s.n + 1);
  for (uint32_t i = 0; i < s.n; i++) {
    const Pair* p = At(x, s, i);
    all.push_back({Ld(&p->key), Ld(&p->value)});
  }
  all.insert(all.begin() + pos, Pair{slot, value});
  const uint32_t m = (s.n + 1) / 2;
  const bool goes_left = pos < m;
  const uint32_t keep = goes_left ? m - 1 : m;  // old pairs that stay
  std::vector<Pair> right(all.begin() + m, all.end());
  uint64_t low = right[0].key;
  if (leaf) {
    // The leaf's low key is its own copy of the key (for byte keys a separate
    // blob), so removing that entry later never frees the fence.
    auto low_r = keys_.MakeSlot(keys_.Load(right[0].key));
    if (!low_r.ok()) {
      Unlock(off);
      return low_r.status();
    }
    low = *low_r;
  }
  auto sib_r = TakeSpare();
  if (!sib_r.ok()) {
    if (leaf) keys_.Release(low);
    Unlock(off);
    return sib_r.status();
  }
  const uint64_t sib = *sib_r;
  WriteNewNode(sib, level, Ld(&x->hdr.sibling), low, true, right);
  if (Stop(StopPoint::kSplitSiblingPersisted)) {
    Unlock(off);
    return Stopped();
  }
  pool_->Store64(&x->hdr.sibling, sib);
  // Figure 5 step 4: persist the link before the copies are NULLed, so a
  // crash never holds a node whose upper half is gone while the sibling that
  // holds it is unreachable.
  pool_->Persist(&x->hdr.sibling, sizeof(uint64_t));
  if (Stop(StopPoint::kSplitLinked)) {
    Unlock(off);
    return Stopped();
  }
  // C13: count the new leaf only now that its link is durable; the first
  // persist below (the NULLs' or the commit's) fences the count's flush.
  if (leaf) AddLeaves(+1, /*fence=*/false);
  LineWriter w(pool_);
  for (int64_t i = static_cast<int64_t>(s.n) - 1; i >= keep; --i) NullPair(w, At(x, s, i), leaf);
  w.Finish();
  if (Stop(StopPoint::kSplitCleared)) {
    Unlock(off);
    return Stopped();
  }
  Commit(x, s.b, keep);  // Figure 5 step 5
  if (Stop(StopPoint::kSplitCommitted)) {
    Unlock(off);
    return Stopped();
  }
  if (goes_left) InsertAt(off, pos, slot, value);
  splits_.fetch_add(1, std::memory_order_relaxed);
  return PublishSplit(
      Ld(&meta_->root) == off, root_mu_, [&] { return InstallRoot(off, low, sib); }, [&] { Unlock(off); },
      [&] { return InsertSeparator(level + 1, low, sib); });
}

// Root split: the new root (level + 1; pairs (unused, old root), (low, sib))
// is persisted whole, then meta.root is switched by one 8-byte store.
template <KeyPolicy KP>
Status CircTree<KP>::InstallRoot(uint64_t old_root, uint64_t low, uint64_t sib) {
  auto r = TakeSpare();
  if (!r.ok()) return r.status();
  WriteNewNode(*r, N(old_root)->hdr.level + 1, 0, 0, false, {Pair{0, old_root}, Pair{low, sib}});
  pool_->Store64(&meta_->root, *r);
  // Persist the switch before the split returns (durability on return).
  pool_->Persist(&meta_->root, sizeof(uint64_t));
  root_splits_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

template <KeyPolicy KP>
void CircTree<KP>::CollapseRoot(uint64_t child) {
  std::lock_guard<std::mutex> g(root_mu_);
  pool_->Store64(&meta_->root, child);
  // The collapse is durable before the merge returns (and before the old
  // root, now retired, can be reused).
  pool_->Persist(&meta_->root, sizeof(uint64_t));
  root_collapses_.fetch_add(1, std::memory_order_relaxed);
}

template <KeyPolicy KP>
Status CircTree<KP>::InsertSeparator(uint32_t level, uint64_t slot, uint64_t child) {
  auto cmp = [&](uint64_t s) { return SafeCompareSlots(s, slot); };
  while (N(Ld(&meta_->root))->hdr.level < level) {
    // The level above does not exist yet: a root split at level - 1 is in
    // progress (or was interrupted).
    PMTREE_RETURN_IF_ERROR(CompleteRootSplit());
  }
  const uint64_t off = LockAt(DescendTo(level, cmp), cmp);
  Node* x = N(off);
  const Span s = LoadSpan(x);
  const uint32_t ub = UpperBound(x, s, 1, cmp);
  if (ub > 1 && Ld(&At(x, s, static_cast<int64_t>(ub) - 1)->value) == child) {  // already linked
    Unlock(off);
    return Status::Ok();
  }
  if (s.n < cap_) {
    InsertAt(off, ub, slot, child);
    Unlock(off);
    return Status::Ok();
  }
  return SplitInsert(off, ub, slot, child);
}

// ---------------------------------------------------------------------------
// Merge (§5.3)
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
std::vector<uint64_t> CircTree<KP>::LockStripes(std::initializer_list<uint64_t> offs) {
  std::vector<uint64_t> held;
  for (uint64_t o : offs)
    if (o != 0) held.push_back(o);
  auto by_stripe = [&](uint64_t a, uint64_t b) { return locks_.StripeOf(a) < locks_.StripeOf(b); };
  auto same_stripe = [&](uint64_t a, uint64_t b) { return locks_.StripeOf(a) == locks_.StripeOf(b); };
  std::sort(held.begin(), held.end(), by_stripe);
  held.erase(std::unique(held.begin(), held.end(), same_stripe), held.end());
  for (uint64_t o : held) Lock(o);
  return held;
}

template <KeyPolicy KP>
template <class Cmp>
void CircTree<KP>::MergeAfterRemove(Cmp&& cmp) {
  // Merges run one at a time: a merge is the only operation holding more
  // than one stripe, so it cannot deadlock with writers (they hold one stripe
  // and wait for none while holding it).
  std::lock_guard<std::mutex> g(merge_mu_);
  for (uint32_t level = 0;; level++)
    if (MergeAt(level, cmp) != MergeResult::kParentUnderfull) return;
}

// Merge write order (docs/trees/circtree.md, "Merge"), X the underfull node
// at `level` on the key's path, R its right sibling under the same parent P,
// L the node whose sibling is X (none when X is the first of its level):
//   M0  leaf merges: meta.leaves = count - 1, flushed (C13); fenced by M1's
//       persist, or by its own fence when X is empty (no M1)
//   M1  R.merge = R.base_count | kMergeMark, persisted   (only when X has pairs)
//   M2  X's pairs are copied into R's free slots left of its base, in
//       ascending order with insert stores (S1), persisted line by line
//   M3  one store group in R's header line, persisted once: base_count
//       (b - n_X, n_R + n_X); low_key = X's fence (0 when X has none, then the
//       flag cleared); merge = 0.                         (StopPoint kMergeCommitted)
//   M4  X's pairs NULLed greatest first (delete stores, S2); X commits (b, 0)
//   M5  L.sibling = R                                     (kMergeUnlinked)
//   M6  the entry naming R gets X's fence as its key, then P removes X's
//       entry (§5.3 delete); M5 and M6 are one line-ordered store sequence
//       (LineWriter), so the unlink persists before the separator and both
//       before the first store of P's delete
//   M7  root collapse: a root left with one child R (no sibling) is replaced
//       by R: meta.root = R, persisted
// Then the locks go and X (and a collapsed root) is retired: readers inside
// an epoch guard may still hold it, and they find it empty with R's fence
// equal to its own, so the move-right rule takes them to R.
template <KeyPolicy KP>
template <class Cmp>
typename CircTree<KP>::MergeResult CircTree<KP>::MergeAt(uint32_t level, Cmp&& cmp) {
  const uint32_t half = slots_ / 2;  // §5.3: underutilized below N / 2 pairs
  for (int attempt = 0; attempt < 3; attempt++) {
    if (Ld32(&N(Ld(&meta_->root))->hdr.level) <= level) return MergeResult::kNone;
    MergeNodes m;
    if (!FindMergeNodes(level, cmp, &m)) return MergeResult::kNone;
    const uint64_t p = m.p, x = m.x, r = m.r, l = m.l;
    const std::vector<uint64_t> held = LockStripes({p, x, r, l});
    Node* pn = N(p);
    Node* xn = N(x);
    const Span ps = LoadSpan(pn), xs = LoadSpan(xn), rs = LoadSpan(N(r));
    uint32_t i = 0;
    while (i < ps.n && At(pn, ps, i)->value != x) i++;
    const uint64_t xfence = FenceOf(xn);
    const bool valid = Ld32(&N(Ld(&meta_->root))->hdr.level) > level && i + 1 < ps.n &&
                       At(pn, ps, i + 1)->value == r && xn->hdr.sibling == r && xs.n < half &&
                       xs.n + rs.n <= cap_ && (l != 0 ? N(l)->hdr.sibling == x : (xfence == 0 && i == 0));
    if (!valid) {
      UnlockStripes(held);
      continue;
    }
    return MergeLocked(level, m, i, held);
  }
  return MergeResult::kNone;
}

// P is the parent on the key's path at level + 1, X its child there, R the
// next child and L the node whose sibling is X (0 when X has no fence).  A
// snapshot read without locks; MergeAt validates it again under them.
template <KeyPolicy KP>
template <class Cmp>
bool CircTree<KP>::FindMergeNodes(uint32_t level, Cmp&& cmp, MergeNodes* m) {
  const uint32_t half = slots_ / 2;
  struct PathView {
    uint64_t next = 0, x = 0, r = 0, left_child = 0;
    uint32_t i = 0;
  };
  uint64_t p = DescendTo(level + 1, cmp);
  PathView v;
  for (;;) {
    v = locks_.For(p).ReadStable([&] {
      PathView o;
      const Node* pn = N(p);
      if (MoveRight(pn, cmp, &o.next)) return o;
      const Span s = LoadSpan(pn);
      if (s.n == 0) return o;
      const uint32_t ub = UpperBound(pn, s, 1, cmp);
      o.i = ub - 1;
      o.x = Ld(&At(pn, s, o.i)->value);
      o.r = ub < s.n ? Ld(&At(pn, s, ub)->value) : 0;
      o.left_child = o.i >= 1 ? Ld(&At(pn, s, static_cast<int64_t>(o.i) - 1)->value) : 0;
      return o;
    });
    if (v.next == 0) break;
    p = v.next;
  }
  const uint64_t x = v.x, r = v.r;
  if (x == 0 || r == 0) return false;  // X is its parent's last child
  struct NodeView {
    uint32_t n;
    uint64_t sibling, fence;
  };
  auto view = [&](uint64_t off) {
    return locks_.For(off).ReadStable(
        [&] { return NodeView{LoadSpan(N(off)).n, Ld(&N(off)->hdr.sibling), FenceOf(N(off))}; });
  };
  const NodeView xv = view(x), rv = view(r);
  if (xv.n >= half || xv.sibling != r || xv.n + rv.n > cap_) return false;
  uint64_t l = 0;
  if (xv.fence != 0) {
    // L is P's previous child or, for P's first child, the last node left
    // of X's fence; a split not yet in the parent may sit between.
    l = v.left_child;
    if (l == 0) l = DescendTo(level, [&](uint64_t slot) { return CompareFences(slot, xv.fence) < 0 ? -1 : 1; });
    for (int steps = 0; l != 0 && steps < 64; steps++) {
      const uint64_t sib = view(l).sibling;
      if (sib == x) break;
      l = sib;
    }
    if (l == 0) return false;
  }
  *m = {p, x, r, l};
  return true;
}

template <KeyPolicy KP>
typename CircTree<KP>::MergeResult CircTree<KP>::MergeLocked(uint32_t level, const MergeNodes& m, uint32_t i,
                                                           const std::vector<uint64_t>& held) {
  const uint32_t half = slots_ / 2;
  const uint64_t p = m.p, x = m.x, r = m.r, l = m.l;
  Node* pn = N(p);
  Node* xn = N(x);
  Node* rn = N(r);
  const Span ps = LoadSpan(pn), xs = LoadSpan(xn), rs = LoadSpan(rn);
  const uint64_t xfence = FenceOf(xn);
  const bool leaf = level == 0;
  const uint64_t rfence = FenceOf(rn);
  LineWriter w(pool_);
  // M0 (C13): X leaves the count before it can leave the chain.  Once M3 is
  // durable recovery unlinks X (case 7c), so the smaller count must be
  // durable before M3's first store: M1's persist fences its flush; without
  // M1 (X empty) it is fenced here.
  if (leaf) AddLeaves(-1, /*fence=*/xs.n == 0);
  if (xs.n > 0) {
    pool_->Store64(&rn->hdr.merge, rn->hdr.base_count | kMergeMark);
    // M1: the mark is durable before any copy, so recovery never reads the
    // copies as an insert's left shift (case 1).
    pool_->Persist(&rn->hdr.merge, sizeof(uint64_t));
    for (int64_t j = 0; j < xs.n; j++)
      CopyPair(w, At(rn, rs, j - static_cast<int64_t>(xs.n)), At(xn, xs, j), leaf, false);
    w.Finish();
    pool_->Store64(&rn->hdr.base_count, PackBaseCount((rs.b + slots_ - xs.n) & mask_, rs.n + xs.n));
  }
  pool_->Store64(&rn->hdr.low_key, xfence);
  if (xfence == 0) pool_->Store64(reinterpret_cast<uint64_t*>(&rn->hdr.level), level);  // flags cleared
  if (xs.n > 0) pool_->Store64(&rn->hdr.merge, 0);
  // M3: base + count, fence and mark persist together (one header line,
  // stores kept in order within a line): the commit of the merge.
  pool_->Persist(&rn->hdr, sizeof(NodeHeader));
  if (Stop(StopPoint::kMergeCommitted)) {
    UnlockStripes(held);
    return MergeResult::kStopped;
  }
  if (xs.n > 0) {
    for (int64_t j = static_cast<int64_t>(xs.n) - 1; j >= 0; --j) NullPair(w, At(xn, xs, j), leaf);
    w.Finish();
    Commit(xn, xs.b, 0);  // M4
  }
  // M5: X leaves the sibling chain before its parent entry goes, so a
  // crash leaves the paper's "IN one child long", never a parent naming a
  // node the chain still needs.
  if (l != 0) w.Store(&N(l)->hdr.sibling, r);
  if (Stop(StopPoint::kMergeUnlinked)) {
    w.Finish();
    UnlockStripes(held);
    return MergeResult::kStopped;
  }
  // M6: R's separator becomes its new fence (X's), then X's entry goes.
  if (Ld(&At(pn, ps, i + 1)->key) != xfence) w.Store(&At(pn, ps, i + 1)->key, xfence);
  RemoveAt(p, i, w);
  const Span ps2 = LoadSpan(pn);
  bool collapsed = false;
  if (Ld(&meta_->root) == p && ps2.n == 1 && rn->hdr.sibling == 0) {
    CollapseRoot(r);  // M7
    collapsed = true;
  }
  const bool parent_underfull = !collapsed && Ld(&meta_->root) != p && ps2.n < half;
  UnlockStripes(held);
  merges_.fetch_add(1, std::memory_order_relaxed);
  pool_->allocator().Retire(x, NodeBytes(node_size_));
  if (collapsed) pool_->allocator().Retire(p, NodeBytes(node_size_));
  // A leaf's fence is its own key copy; R's old one is named nowhere now.
  if (leaf) keys_.Release(rfence);
  return parent_underfull ? MergeResult::kParentUnderfull : MergeResult::kMerged;
}

// ---------------------------------------------------------------------------
// Scan
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
size_t CircTree<KP>::Scan(K start, const K* end, std::span<Entry> out) {
  // Bounds are compared, never stored: any length is a valid bound
  // (contract in pmtree/tree.h), so no CheckArg here.
  if (out.empty()) return 0;
  size_t got = 0;
  if constexpr (KP::kInline) {
    if (start == 0) {
      const ZeroKey z = ReadZero();
      if (z.present) {
        out[got++] = Entry(0, z.value);
        if (got == out.size()) return got;
      }
    }
  }
  auto guard = pool_->epochs().Protect();
  return ScanLeaves([&](uint64_t slot) { return SafeCompare(slot, start); }, start, end, out, got);
}

// ---------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------

namespace {
Status ParseSearch(const TreeOptions& options, bool* linear) {
  *linear = false;
  for (const auto& [key, value] : options.extra) {
    if (key != "search")
      return Status::InvalidArgument("circtree: unknown option '" + key + "'; valid: search=binary|linear");
    if (value == "linear") {
      *linear = true;
    } else if (value != "binary") {
      return Status::InvalidArgument("circtree: search=" + value + " is invalid; valid: binary, linear");
    }
  }
  return Status::Ok();
}
}  // namespace

template <KeyPolicy KP>
Result<std::unique_ptr<CircTree<KP>>> CircTree<KP>::Create(PoolImpl* pool, const TreeOptions& options, bool paper) {
  if (pool == nullptr) return Status::InvalidArgument("circtree: a persistent tree needs a pool");
  PMTREE_RETURN_IF_ERROR(CheckNodeSize(options.node_size));
  bool linear;
  PMTREE_RETURN_IF_ERROR(ParseSearch(options, &linear));
  if (options.key_kind != KP::kKind)
    return Status::InvalidArgument("circtree: key kind of the options does not match the tree's key type");
  if (pool->root(0) != 0) return Status::Busy("circtree: pool root slot 0 is already in use");
  const uint32_t node_size = options.node_size == 0 ? kDefaultNodeSize : options.node_size;
  PMTREE_ASSIGN_OR_RETURN(uint64_t meta_off, pool->allocator().Allocate(sizeof(Meta), kLine));
  auto leaf = pool->allocator().Allocate(NodeBytes(node_size), kLine);
  if (!leaf.ok()) {
    pool->allocator().Free(meta_off, sizeof(Meta));
    return leaf.status();
  }
  Meta m{};
  m.magic = kMetaMagic;
  m.version = kFormatVersion;
  m.node_size = node_size;
  m.root = *leaf;
  m.key_kind = static_cast<uint32_t>(KP::kKind);
  m.variant = paper ? 1 : 0;
  m.leaves = 1;  // the first leaf (C13); persisted with the header below
  pool->Write(pool->At<void>(meta_off), &m, sizeof(m));
  // Flush the tree header now; the fence of the first leaf's persist below
  // orders it before root slot 0 names it, so a crash never leaves a root
  // slot pointing at an unwritten header.
  pool->Flush(pool->At<void>(meta_off), sizeof(Meta));
  std::unique_ptr<CircTree> t(new CircTree(pool, meta_off, linear, paper));
  t->WriteNewNode(*leaf, 0, 0, 0, false, {});  // persisted (flush + fence) inside
  // Commit point of creation (SetRoot persists the slot).
  pool->SetRoot(0, meta_off);
  return t;
}

template <KeyPolicy KP>
Result<std::unique_ptr<CircTree<KP>>> CircTree<KP>::Recover(PoolImpl* pool, const TreeOptions& options, bool paper) {
  if (pool == nullptr) return Status::InvalidArgument("circtree: a persistent tree needs a pool");
  bool linear;
  PMTREE_RETURN_IF_ERROR(ParseSearch(options, &linear));
  const uint64_t meta_off = pool->root(0);
  if (meta_off == 0) return Status::NotFound("circtree: pool root slot 0 is empty (no tree was committed)");
  if (meta_off % kLine != 0 || !pool->InHeap(meta_off, sizeof(Meta)))
    return Status::Corruption("circtree: root slot 0 holds " + Hex(meta_off) + ", not a meta block in the heap");
  const Meta* m = pool->At<Meta>(meta_off);
  const std::string where = "circtree meta block at offset " + Hex(meta_off) + ": ";
  if (m->magic != kMetaMagic) return Status::Corruption(where + "invariant C1 violated: bad magic");
  if (m->version == 1)
    return Status::Incompatible(where + "format version 1, the format before the leaf count (meta.leaves, "
                                "invariant C13); this build reads " + std::to_string(kFormatVersion) +
                                " only: re-create the pool");
  if (m->version != kFormatVersion)
    return Status::Incompatible(where + "format version " + std::to_string(m->version) + ", this build reads " +
                                std::to_string(kFormatVersion));
  if (m->node_size == 0 || !CheckNodeSize(m->node_size).ok())
    return Status::Corruption(where + "invariant C1 violated: node size " + std::to_string(m->node_size));
  if (m->key_kind != static_cast<uint32_t>(KP::kKind))
    return Status::Incompatible(where + "the tree holds keys of another kind");
  if (m->root % kLine != 0 || !pool->InHeap(m->root, NodeBytes(m->node_size)))
    return Status::Corruption(where + "invariant C1 violated: root " + Hex(m->root) + " outside the heap");
  if (m->variant != (paper ? 1u : 0u))
    return Status::Incompatible(where + "the tree was made by another variant (circtree vs circtree-paper)");
  std::unique_ptr<CircTree> t(new CircTree(pool, meta_off, linear, paper));
  PMTREE_RETURN_IF_ERROR(t->RecoverFromPool(pool->clean_shutdown()));
  return t;
}

template <KeyPolicy KP>
Status CircTree<KP>::Close() {
  if (closed_) return Status::Busy("circtree: already closed");
  // Reserved nodes are unreachable; return them so the saved allocator
  // state (instant restart) holds no leak.
  spares_.FreeAll(pool_->allocator(), NodeBytes(node_size_));
  closed_ = true;
  // Pool::Close lowers the crash flag (the pool's clean-shutdown flag) last.
  return pool_->Close();
}

// Members defined in recovery.cc are instantiated there.
template class CircTree<U64Keys>;
template class CircTree<BytesKeys>;

}  // namespace pmtree::circtree
