// SPDX-License-Identifier: Apache-2.0
//
// FAST+FAIR: see fastfair.h and docs/trees/fastfair.md.  Reimplemented from
// the paper's description; the original code was read for its known flaws
// only.

#include "trees/common/bulk_input.h"
#include "trees/common/fair_split.h"
#include "trees/common/partition_point.h"
#include "trees/common/space_check.h"
#include "trees/common/upcast.h"
#include "trees/fastfair/fastfair.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <type_traits>
#include <unordered_set>

namespace pmtree::fastfair {

namespace {

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status NodeError(uint64_t off, int invariant, const std::string& what) {
  return Status::Corruption("fastfair node at offset " + Hex(off) + ": invariant " + std::to_string(invariant) +
                            " violated: " + what);
}

// Cache line containing address p.
inline uintptr_t LineOf(const void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kLine - 1); }

}  // namespace

Status CheckNodeSize(uint32_t node_size) {
  if (node_size == 0) return Status::Ok();
  if (node_size < kMinNodeSize || node_size > kMaxNodeSize || node_size % kLine != 0)
    return Status::InvalidArgument("fastfair: node size " + std::to_string(node_size) +
                                   " is invalid; valid sizes are multiples of 64 from 256 to 4096 (default 512)");
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Construction, locks
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
FastFairTree<KP>::FastFairTree(PoolImpl* pool, uint64_t meta_off, Flaws flaws)
    : pool_(pool),
      keys_(pool),
      meta_off_(meta_off),
      meta_(pool->At<Meta>(meta_off)),
      flaws_(flaws) {
  node_size_ = meta_->node_size;
  cap_ = Capacity(node_size_);
}

template <KeyPolicy KP>
FastFairTree<KP>::~FastFairTree() = default;

template <KeyPolicy KP>
uint32_t FastFairTree<KP>::capabilities() const {
  uint32_t c =
      kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder;
  if (flaws_.any()) c |= kCapTestOnly;
  return c;
}


// ---------------------------------------------------------------------------
// Searching inside a node
// ---------------------------------------------------------------------------
//
// Records [0, count) are non-decreasing by key even in a transient state
// (a duplicate is an equal neighbour), so a binary search for the last record
// whose key is <= the target lands on the valid copy: with the right-valid
// rule, the rightmost of two equal records is the valid one.

template <KeyPolicy KP>
template <class Cmp>
uint32_t FastFairTree<KP>::UpperBound(const Node* n, uint32_t count, Cmp&& cmp) const {
  return PartitionPoint(0, std::min(count, cap_), [&](uint32_t i) { return cmp(Ld(&n->records[i].key)) <= 0; });
}

// The design hooks of FairTraversal (trees/common/fair_traversal.h).
template <KeyPolicy KP>
uint64_t FastFairTree<KP>::ReadLeaf(const Node* n, std::vector<ScanItem>* items) const {
  items->clear();
  const uint32_t count = std::min<uint32_t>(static_cast<uint32_t>(Ld(&n->hdr.count)), cap_);
  for (uint32_t i = 0; i < count; i++) {
    const uint64_t k = Ld(&n->records[i].key);
    if (i + 1 < count && Ld(&n->records[i + 1].key) == k) continue;  // transient duplicate
    items->push_back({k, Ld(&n->records[i].value)});
  }
  return Ld(&n->hdr.sibling);
}

template <KeyPolicy KP>
template <class Cmp>
uint64_t FastFairTree<KP>::ChildOf(const Node* n, Cmp& cmp) const {
  uint32_t ub = UpperBound(n, static_cast<uint32_t>(Ld(&n->hdr.count)), cmp);
  return ub == 0 ? Ld(&n->hdr.leftmost) : Ld(&n->records[ub - 1].value);
}

template <KeyPolicy KP>
template <class Cmp>
bool FastFairTree<KP>::FindInLeaf(const Node* n, Cmp& cmp, uint64_t* value) const {
  uint32_t ub = UpperBound(n, static_cast<uint32_t>(Ld(&n->hdr.count)), cmp);
  if (ub == 0 || cmp(Ld(&n->records[ub - 1].key)) != 0) return false;
  *value = Ld(&n->records[ub - 1].value);
  return true;
}

// ---------------------------------------------------------------------------
// Point operations
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
bool FastFairTree<KP>::Lookup(K key, uint64_t* value) {
  if (!KP::CheckArg(key).ok()) return false;
  auto guard = pool_->epochs().Protect();
  return FindInLeaves([&](uint64_t slot) { return keys_.Compare(slot, key); }, value);
}

template <KeyPolicy KP>
typename FastFairTree<KP>::LockedLeaf FastFairTree<KP>::LockLeafOf(K key) {
  auto cmp = [&](uint64_t slot) { return keys_.Compare(slot, key); };
  LockedLeaf l;
  l.off = LockAt(DescendTo(0, cmp), cmp);
  l.n = N(l.off);
  l.count = static_cast<uint32_t>(Ld(&l.n->hdr.count));
  l.ub = UpperBound(l.n, l.count, cmp);
  l.found = l.ub > 0 && cmp(Ld(&l.n->records[l.ub - 1].key)) == 0;
  return l;
}

template <KeyPolicy KP>
Result<bool> FastFairTree<KP>::Put(K key, uint64_t value, PutMode mode) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  auto guard = pool_->epochs().Protect();
  const auto [off, n, count, ub, found] = LockLeafOf(key);
  if (found) {
    if (mode == PutMode::kInsert) {
      Unlock(off);
      return false;
    }
    // An 8-byte value is replaced by one failure-atomic store.
    pool_->Store64(&n->records[ub - 1].value, value);
    // Persist the new value before the call returns (durability on return)
    // and before the lock is released, so no reader returns it unpersisted.
    pool_->Persist(&n->records[ub - 1].value, sizeof(uint64_t));
    Unlock(off);
    return mode == PutMode::kUpdate;
  }
  if (mode == PutMode::kUpdate) {
    Unlock(off);
    return false;
  }
  return InsertNewKey(off, ub, count, key, value);
}

template <KeyPolicy KP>
Result<bool> FastFairTree<KP>::Remove(K key) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  auto guard = pool_->epochs().Protect();
  const auto [off, n, count, ub, found] = LockLeafOf(key);
  if (!found) {
    Unlock(off);
    return false;
  }
  const uint64_t slot = Ld(&n->records[ub - 1].key);
  FastRemove(off, ub - 1, flaws_.remove_flush);
  Unlock(off);
  // The removal is persistent: the key blob may go (readers inside an epoch
  // guard may still hold it, hence Retire inside Release).
  keys_.Release(slot);
  return true;
}

// FAST insert (paper §4.1, "FAST: failure-atomic shift").  Write order, for
// a node holding n records and the new record going to position pos:
//   1. pos == n: write record n (value, then key), persist it, then count =
//      n + 1, persist.  Before the count the record is invisible.
//   2. pos < n: copy record n-1 into slot n (value, then key) and persist it;
//      count = n + 1 and persist: records n-1 and n are now equal, so n-1 is
//      the invalid transient duplicate.  Then shift records pos..n-2 one to
//      the right, highest first, each value before its key, persisting each
//      line before the shift moves to the line below; finally write the new
//      value, then the new key, into slot pos.
// Transient states (what a reader or recovery may see): exactly one pair of
// equal adjacent keys; under the right-valid rule the left one is ignored.
// Writing the value before the key keeps a copy invalid until its key lands:
// (K[i+1], V[i]) equals its right neighbour's key; (K[i], V[i]) duplicates
// record i.  For the new record, (K[pos], value) still equals record pos+1's
// key, and (key, value) is the committed record.
template <KeyPolicy KP>
void FastFairTree<KP>::FastInsert(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value) {
  Node* n = N(off);
  Record* rec = n->records;
  const uint32_t count = static_cast<uint32_t>(Ld(&n->hdr.count));
  const uint64_t sc = Ld(&n->hdr.switch_counter);
  // Paper: an even switch counter tells readers that inserts shift right.
  if (sc & 1) pool_->Store64(&n->hdr.switch_counter, sc + 1);
  if (pos == count) {
    pool_->Store64(&rec[count].value, value);
    pool_->Store64(&rec[count].key, slot);
    // Persist the new record before the count that makes it visible, so a
    // crash never exposes a slot holding stale bytes.
    pool_->Persist(&rec[count], sizeof(Record));
    pool_->Store64(&n->hdr.count, count + 1);
    // Persist the count (and switch counter) before returning: the insert is
    // durable on return.
    pool_->Persist(&n->hdr.count, sizeof(uint64_t));
    return;
  }
  pool_->Store64(&rec[count].value, Ld(&rec[count - 1].value));
  pool_->Store64(&rec[count].key, Ld(&rec[count - 1].key));
  // Persist the copy in slot `count` before the count covers it, so a crash
  // never makes stale bytes the (always valid) last record.
  pool_->Persist(&rec[count], sizeof(Record));
  pool_->Store64(&n->hdr.count, count + 1);
  // Persist count = n+1 before record n-1 changes: under the old count record
  // n-1 is the last record and therefore always valid, so changing it first
  // could expose a wrong value.
  pool_->Persist(&n->hdr.count, sizeof(uint64_t));

  uintptr_t line = 0;  // the line the shift is writing, 0 before the first store
  auto store = [&](uint64_t* word, uint64_t v) {
    if (line != 0 && LineOf(word) != line) {
      // FAST: persist a line before the shift moves on to the line below, so
      // a crash never holds a shifted lower line whose source records above
      // were not yet copied durably (a record would be lost).
      pool_->Persist(reinterpret_cast<const void*>(line), kLine);
    }
    line = LineOf(word);
    pool_->Store64(word, v);
  };
  for (int64_t i = static_cast<int64_t>(count) - 2; i >= static_cast<int64_t>(pos); --i) {
    store(&rec[i + 1].value, Ld(&rec[i].value));
    store(&rec[i + 1].key, Ld(&rec[i].key));
  }
  store(&rec[pos].value, value);
  store(&rec[pos].key, slot);
  // Persist the last line the shift touched before returning (durability on
  // return; readers wait for the unlock that follows).
  pool_->Persist(reinterpret_cast<const void*>(line), kLine);
}

// FAST delete: shift records pos+1..n-1 one to the left, lowest first, each
// key before its value, persisting each line before the shift moves to the
// line above; then count = n - 1.  The first store (key of record pos :=
// key of pos+1) is the commit point of the removal: from then on record pos
// duplicates record pos+1 and is ignored.  Transient state: one pair of equal
// adjacent keys, the left one ignored; after the last copy records n-2 and
// n-1 are equal until the count drops.
//
// `original_flush` re-enables flaw (1): flush a line right after writing its
// first record (the original's condition), so the rest of the line is still
// unflushed when the next line is written and persisted.
template <KeyPolicy KP>
void FastFairTree<KP>::FastRemove(uint64_t off, uint32_t pos, bool original_flush) {
  Node* n = N(off);
  Record* rec = n->records;
  const uint32_t count = static_cast<uint32_t>(Ld(&n->hdr.count));
  const uint64_t sc = Ld(&n->hdr.switch_counter);
  // Paper: an odd switch counter tells readers that deletes shift left.
  if ((sc & 1) == 0) pool_->Store64(&n->hdr.switch_counter, sc + 1);
  if (original_flush) {
    for (uint32_t i = pos; i + 1 < count; i++) {
      pool_->Store64(&rec[i].key, Ld(&rec[i + 1].key));
      pool_->Store64(&rec[i].value, Ld(&rec[i + 1].value));
      if (LineOf(&rec[i]) == reinterpret_cast<uintptr_t>(&rec[i])) {
        // Flaw (1), kept on purpose in fastfair-orig: the original flushes
        // the line when its first record is written, too early.
        pool_->Persist(&rec[i], kLine);
      }
    }
  } else {
    uintptr_t line = 0;
    for (uint32_t i = pos; i + 1 < count; i++) {
      if (line != 0 && LineOf(&rec[i]) != line) {
        // FAST: persist a line as the left shift leaves it, before writing
        // the next line up, so a crash never holds a shifted upper line over
        // a lower line still missing the record copied out of it.
        pool_->Persist(reinterpret_cast<const void*>(line), kLine);
      }
      line = LineOf(&rec[i]);
      pool_->Store64(&rec[i].key, Ld(&rec[i + 1].key));
      pool_->Store64(&rec[i].value, Ld(&rec[i + 1].value));
    }
    if (line != 0) {
      // Persist the last shifted line before the count drops: otherwise the
      // count could cut off record n-1 before its copy at n-2 is durable.
      pool_->Persist(reinterpret_cast<const void*>(line), kLine);
    }
  }
  pool_->Store64(&n->hdr.count, count - 1);
  // Persist the new count before returning (durability on return).
  pool_->Persist(&n->hdr.count, sizeof(uint64_t));
}

// ---------------------------------------------------------------------------
// FAIR split
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
Status FastFairTree<KP>::EnsureSpares(size_t want) {
  return spares_.Ensure(pool_->allocator(), want, node_size_, kLine);
}

template <KeyPolicy KP>
Result<uint64_t> FastFairTree<KP>::TakeSpare() {
  return spares_.Take(pool_->allocator(), node_size_, kLine);
}

// Writes a new node image (not yet reachable) and persists it.
namespace {
struct NodeImage {
  explicit NodeImage(uint32_t node_size) : buf(node_size / 8, 0) {}
  Node* node() { return reinterpret_cast<Node*>(buf.data()); }
  std::vector<uint64_t> buf;
};
}  // namespace

// FAIR split (paper §4.2, "FAIR: failure-atomic in-place rebalance"), write
// order:
//   1. the new right sibling S gets the upper half (plus the new record when
//      it belongs there), its low key and the old node's sibling pointer; S is
//      persisted whole.                          (StopPoint kSplitSiblingPersisted)
//   2. node.sibling = S, persisted.              (kSplitLinked)
//      S's keys now appear twice; readers follow the sibling for keys >=
//      S.low_key, so the copies left in the node are shadowed.
//   3. node.count = m, persisted (truncation).   (kSplitTruncated)
//   4. the new record goes into the node by FAST when it belongs left.
//   5. the separator (S.low_key, S) goes into the parent, or a new root is
//      installed (InstallRoot).
// Every state between the steps is a valid B-link tree; recovery finishes 3
// and 5 (Repair).
template <KeyPolicy KP>
Status FastFairTree<KP>::SplitInsert(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value) {
  Node* n = N(off);
  const uint32_t level = n->hdr.level;
  const bool leaf = level == 0;
  // Reserve every node this split can need (a sibling at this level and at
  // each level above, plus a new root) before changing anything, so running
  // out of space changes nothing.  A split of an inner node is the next step
  // of a cascade whose leaf split already reserved these nodes: it asks only
  // for what remains above it.  Asking for the whole height again could fail
  // half-way up a cascade that already changed a node, leaving an orphan
  // sibling (invariant 7) behind an insert that returned Ok.
  const uint32_t root_level = N(Ld(&meta_->root))->hdr.level;
  Status es = EnsureSpares(root_level >= level ? root_level - level + 2 : 2);
  if (!es.ok()) {
    Unlock(off);
    return es;
  }
  const uint32_t count = static_cast<uint32_t>(Ld(&n->hdr.count));
  const uint32_t m = count / 2;
  std::vector<Record> right;
  uint64_t right_leftmost = 0;
  uint64_t low = 0;
  bool goes_right;
  if (leaf) {
    goes_right = pos >= m;
    for (uint32_t i = m; i < count; i++) right.push_back({Ld(&n->records[i].key), Ld(&n->records[i].value)});
    if (goes_right) right.insert(right.begin() + (pos - m), Record{slot, value});
    // The leaf's low key is its own copy of the key (for byte keys a separate
    // blob), so removing that entry later never frees the fence.
    auto low_r = keys_.MakeSlot(keys_.Load(right[0].key));
    if (!low_r.ok()) {
      Unlock(off);
      return low_r.status();
    }
    low = *low_r;
  } else {
    goes_right = pos > m;
    right_leftmost = Ld(&n->records[m].value);
    low = Ld(&n->records[m].key);
    for (uint32_t i = m + 1; i < count; i++) right.push_back({Ld(&n->records[i].key), Ld(&n->records[i].value)});
    if (goes_right) right.insert(right.begin() + (pos - m - 1), Record{slot, value});
  }
  auto sib_r = TakeSpare();
  if (!sib_r.ok()) {
    if (leaf) keys_.Release(low);
    Unlock(off);
    return sib_r.status();
  }
  const uint64_t sib = *sib_r;

  NodeImage img(node_size_);
  Node* s = img.node();
  s->hdr.sibling = Ld(&n->hdr.sibling);
  s->hdr.leftmost = right_leftmost;
  s->hdr.low_key = low;
  s->hdr.level = level;
  s->hdr.flags = kHasLowKey;
  s->hdr.count = right.size();
  std::memcpy(s->records, right.data(), right.size() * sizeof(Record));
  const size_t bytes = sizeof(NodeHeader) + right.size() * sizeof(Record);
  pool_->Write(N(sib), s, bytes);
  // FAIR step 1: persist the whole new sibling before the pointer that links
  // it, so a crash never exposes a half-written node.
  pool_->Persist(N(sib), bytes);
  if (Stop(StopPoint::kSplitSiblingPersisted)) {
    Unlock(off);
    return Stopped();
  }
  pool_->Store64(&n->hdr.sibling, sib);
  if (Stop(StopPoint::kSplitLinked)) {
    // Tests only: make the link durable alone, the state a crash between
    // steps 2 and 3 leaves.
    pool_->Persist(&n->hdr.sibling, sizeof(uint64_t));
    Unlock(off);
    return Stopped();
  }
  // FAIR step 3.  The sibling pointer and the count share the header line,
  // and stores to one line reach PM in program order (the same property
  // FAST relies on), so a durable truncation implies a durable link: one
  // persist orders step 2 before step 3.
  pool_->Store64(&n->hdr.count, m);
  // Persist link and truncation before the new record or the separator
  // depend on them; the new record may already be in S, so this is also what
  // makes the insert durable.
  pool_->Persist(&n->hdr.count, sizeof(uint64_t));
  if (Stop(StopPoint::kSplitTruncated)) {
    Unlock(off);
    return Stopped();
  }
  if (level == 0) {
    // The leaf count, only now that the link of the new leaf is durable (the
    // persist above), so no crash state counts a leaf the chain does not
    // hold (invariant 11).  No fence of its own: the parent insert's (or the
    // new root's) fence below makes it durable, and a count that lags --
    // that one unfenced, or concurrent splits storing out of order -- only
    // weakens recovery's check.
    StoreLeafCount(leaf_count_.fetch_add(1, std::memory_order_relaxed) + 1, /*fence=*/false);
  }
  if (!goes_right) FastInsert(off, pos, slot, value);
  splits_.fetch_add(1, std::memory_order_relaxed);
  return PublishSplit(
      Ld(&meta_->root) == off, root_mu_, [&] { return InstallRoot(off, low, sib); }, [&] { Unlock(off); },
      [&] { return InsertSeparator(level + 1, low, sib); });
}

// Root split, write order: the new root (level + 1, leftmost = old root,
// record (low, sib)) is persisted whole, then meta.root is switched by one
// 8-byte store and persisted.  Crash before the switch: the old root has a
// sibling and the new root is unreachable (its space is reclaimed); recovery
// completes the split (CompleteRootSplit).  Called with the old root's lock
// and root_mu_ held.
template <KeyPolicy KP>
Status FastFairTree<KP>::InstallRoot(uint64_t old_root, uint64_t low, uint64_t sib) {
  auto r = TakeSpare();
  if (!r.ok()) return r.status();
  NodeImage img(node_size_);
  Node* nr = img.node();
  nr->hdr.leftmost = old_root;
  nr->hdr.level = N(old_root)->hdr.level + 1;
  nr->hdr.count = 1;
  nr->records[0] = Record{low, sib};
  const size_t bytes = sizeof(NodeHeader) + sizeof(Record);
  pool_->Write(N(*r), nr, bytes);
  // Persist the new root before meta.root names it, so a crash never makes
  // a half-written node the root.
  pool_->Persist(N(*r), bytes);
  if (Stop(StopPoint::kRootSplitBeforeSwap)) return Stopped();
  pool_->Store64(&meta_->root, *r);
  // Persist the switch before the split returns (durability on return).
  pool_->Persist(&meta_->root, sizeof(uint64_t));
  root_splits_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

template <KeyPolicy KP>
Status FastFairTree<KP>::InsertSeparator(uint32_t level, uint64_t slot, uint64_t child) {
  auto cmp = [&](uint64_t s) { return keys_.CompareSlots(s, slot); };
  for (;;) {
    if (N(Ld(&meta_->root))->hdr.level >= level) break;
    // The level above does not exist yet: a root split at level - 1 is in
    // progress (or was interrupted).
    if (flaws_.root_split) return Status::Ok();  // the original drops the separator
    PMTREE_RETURN_IF_ERROR(CompleteRootSplit());
  }
  uint64_t off = LockAt(DescendTo(level, cmp), cmp);
  Node* n = N(off);
  const uint32_t count = static_cast<uint32_t>(Ld(&n->hdr.count));
  const uint32_t ub = UpperBound(n, count, cmp);
  if (ub > 0 && Ld(&n->records[ub - 1].key) == slot) {  // already linked
    Unlock(off);
    return Status::Ok();
  }
  if (count < cap_) {
    FastInsert(off, ub, slot, child);
    Unlock(off);
    return Status::Ok();
  }
  return SplitInsert(off, ub, slot, child);
}

// ---------------------------------------------------------------------------
// Scan
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
size_t FastFairTree<KP>::Scan(K start, const K* end, std::span<Entry> out) {
  // Bounds are compared, never stored: any length is a valid bound
  // (contract in pmtree/tree.h), so no CheckArg here.
  if (out.empty()) return 0;
  auto guard = pool_->epochs().Protect();
  return ScanLeaves([&](uint64_t slot) { return keys_.Compare(slot, start); }, start, end, out, 0);
}

// ---------------------------------------------------------------------------
// Bulk load
// ---------------------------------------------------------------------------

// Builds the whole tree bottom-up in unreachable nodes (leaves filled to
// `fill`, inner nodes too), persists them, and commits by switching
// meta.root with one 8-byte store.  A crash before the switch leaves the empty
// tree (the new nodes are unreachable and reclaimed by recovery).
template <KeyPolicy KP>
Status FastFairTree<KP>::BulkLoad(std::span<const InputEntry> sorted, double fill) {
  PMTREE_RETURN_IF_ERROR(CheckBulkLoadInput(sorted, fill, &KP::CheckArg));
  const uint64_t old_root = Ld(&meta_->root);
  const Node* r0 = N(old_root);
  if (r0->hdr.level != 0 || r0->hdr.count != 0 || r0->hdr.sibling != 0)
    return Status::InvalidArgument("bulk load: tree not empty");
  if (sorted.empty()) return Status::Ok();

  std::vector<uint64_t> nodes;  // allocated so far, freed on failure
  std::vector<uint64_t> slots;  // key slots made so far, released on failure
  auto fail = [&](Status s) {
    for (uint64_t off : nodes) pool_->allocator().Free(off, node_size_);
    for (uint64_t sl : slots) keys_.Release(sl);
    return s;
  };
  struct Child {
    uint64_t off;
    uint64_t low;
    bool has_low;
  };
  const uint32_t per_leaf = std::clamp<uint32_t>(static_cast<uint32_t>(std::floor(fill * cap_)), 1, cap_);
  const size_t n_leaves = (sorted.size() + per_leaf - 1) / per_leaf;
  std::vector<Child> level_nodes;
  for (size_t j = 0; j < n_leaves; j++) {
    auto a = pool_->allocator().Allocate(node_size_, kLine);
    if (!a.ok()) return fail(a.status());
    nodes.push_back(*a);
    level_nodes.push_back({*a, 0, false});
  }
  NodeImage img(node_size_);
  for (size_t j = 0; j < n_leaves; j++) {
    std::fill(img.buf.begin(), img.buf.end(), 0);
    Node* b = img.node();
    const size_t lo = j * per_leaf, hi = std::min(sorted.size(), lo + per_leaf);
    for (size_t i = lo; i < hi; i++) {
      auto sl = keys_.MakeSlotUnfenced(sorted[i].first);  // the fence before the root switch completes it
      if (!sl.ok()) return fail(sl.status());
      slots.push_back(*sl);
      b->records[i - lo] = Record{*sl, sorted[i].second};
    }
    if (j > 0) {
      auto low = keys_.MakeSlotUnfenced(sorted[lo].first);  // the leaf's own fence copy
      if (!low.ok()) return fail(low.status());
      slots.push_back(*low);
      b->hdr.low_key = *low;
      b->hdr.flags = kHasLowKey;
      level_nodes[j].low = *low;
      level_nodes[j].has_low = true;
    }
    b->hdr.sibling = j + 1 < n_leaves ? level_nodes[j + 1].off : 0;
    b->hdr.count = hi - lo;
    const size_t bytes = sizeof(NodeHeader) + (hi - lo) * sizeof(Record);
    pool_->Write(N(level_nodes[j].off), b, bytes);
    // Flush now; the one fence before the root switch orders every new node
    // before the switch.
    pool_->Flush(N(level_nodes[j].off), bytes);
  }
  uint32_t level = 0;
  const uint32_t per_inner = std::clamp<uint32_t>(static_cast<uint32_t>(std::floor(fill * (cap_ + 1))), 2, cap_ + 1);
  while (level_nodes.size() > 1) {
    level++;
    size_t groups = (level_nodes.size() + per_inner - 1) / per_inner;
    std::vector<size_t> sizes(groups, per_inner);
    sizes.back() = level_nodes.size() - (groups - 1) * per_inner;
    if (groups > 1 && sizes.back() < 2) {  // never an inner node with a single child
      sizes.back()++;
      sizes[groups - 2]--;
    }
    std::vector<Child> parents;
    for (size_t g = 0; g < groups; g++) {
      auto a = pool_->allocator().Allocate(node_size_, kLine);
      if (!a.ok()) return fail(a.status());
      nodes.push_back(*a);
      parents.push_back({*a, 0, false});
    }
    size_t at = 0;
    for (size_t g = 0; g < groups; g++) {
      std::fill(img.buf.begin(), img.buf.end(), 0);
      Node* b = img.node();
      const Child& first = level_nodes[at];
      b->hdr.leftmost = first.off;
      b->hdr.level = level;
      if (first.has_low) {
        b->hdr.low_key = first.low;
        b->hdr.flags = kHasLowKey;
        parents[g].low = first.low;
        parents[g].has_low = true;
      }
      for (size_t i = 1; i < sizes[g]; i++) b->records[i - 1] = Record{level_nodes[at + i].low, level_nodes[at + i].off};
      b->hdr.count = sizes[g] - 1;
      b->hdr.sibling = g + 1 < groups ? parents[g + 1].off : 0;
      const size_t bytes = sizeof(NodeHeader) + (sizes[g] - 1) * sizeof(Record);
      pool_->Write(N(parents[g].off), b, bytes);
      // Flushed now, ordered before the root switch by the fence below.
      pool_->Flush(N(parents[g].off), bytes);
      at += sizes[g];
    }
    level_nodes = std::move(parents);
  }
  // Every new node must be durable before meta.root names the new root, so a
  // crash never exposes a partly written tree.
  pool_->Fence();
  pool_->Store64(&meta_->root, level_nodes[0].off);
  // Persist the switch: the load is durable on return.
  pool_->Persist(&meta_->root, sizeof(uint64_t));
  // The old empty root leaf is unreachable now and no operation runs
  // concurrently with BulkLoad.
  pool_->allocator().Free(old_root, node_size_);
  leaf_count_.store(n_leaves);
  StoreLeafCount(n_leaves, /*fence=*/true);  // after the switch that links the leaves (invariant 11)
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Creation and recovery
// ---------------------------------------------------------------------------

template <KeyPolicy KP>
Result<std::unique_ptr<FastFairTree<KP>>> FastFairTree<KP>::Create(PoolImpl* pool, const TreeOptions& options,
                                                                  Flaws flaws) {
  if (pool == nullptr) return Status::InvalidArgument("fastfair: a persistent tree needs a pool");
  PMTREE_RETURN_IF_ERROR(CheckNodeSize(options.node_size));
  if (options.key_kind != KP::kKind)
    return Status::InvalidArgument("fastfair: key kind of the options does not match the tree's key type");
  if (pool->root(0) != 0) return Status::Busy("fastfair: pool root slot 0 is already in use");
  const uint32_t node_size = options.node_size == 0 ? kDefaultNodeSize : options.node_size;
  // The meta block and the first leaf are allocated as one extent (meta
  // first), so one persist covers both header lines.  They are two blocks
  // for everything else: recovery marks them separately, and bulk load frees
  // the leaf alone.
  PMTREE_ASSIGN_OR_RETURN(uint64_t meta_off, pool->allocator().Allocate(sizeof(Meta) + node_size, kLine));
  const uint64_t leaf = meta_off + sizeof(Meta);
  NodeHeader h{};
  pool->Write(pool->At<void>(leaf), &h, sizeof(h));
  Meta m{};
  m.magic = kMetaMagic;
  m.version = kFormatVersion;
  m.node_size = node_size;
  m.root = leaf;
  m.key_kind = static_cast<uint32_t>(KP::kKind);
  m.variant = flaws.Bits();
  m.leaves = 1;  // the first leaf (invariant 11)
  pool->Write(pool->At<void>(meta_off), &m, sizeof(m));
  static_assert(sizeof(Meta) + sizeof(NodeHeader) == 2 * kLine);
  if (!flaws.header_flush) {
    // Persist the tree header and the first leaf before root slot 0 names
    // them: flaw (3) of the original is exactly this missing flush (a crash
    // then leaves a root slot pointing at garbage).
    pool->Persist(pool->At<void>(meta_off), sizeof(Meta) + sizeof(NodeHeader));
  }
  // Commit point of creation (SetRoot persists the slot).
  pool->SetRoot(0, meta_off);
  return std::unique_ptr<FastFairTree>(new FastFairTree(pool, meta_off, flaws));
}

template <KeyPolicy KP>
Result<std::unique_ptr<FastFairTree<KP>>> FastFairTree<KP>::Recover(PoolImpl* pool, const TreeOptions& /*options*/,
                                                                   bool orig) {
  if (pool == nullptr) return Status::InvalidArgument("fastfair: a persistent tree needs a pool");
  const uint64_t meta_off = pool->root(0);
  if (meta_off == 0) return Status::NotFound("fastfair: pool root slot 0 is empty (no tree was committed)");
  if (meta_off % kLine != 0 || !pool->InHeap(meta_off, sizeof(Meta)))
    return Status::Corruption("fastfair: root slot 0 holds " + Hex(meta_off) + ", not a meta block in the heap");
  const Meta* m = pool->At<Meta>(meta_off);
  const std::string where = "fastfair meta block at offset " + Hex(meta_off) + ": ";
  if (m->magic != kMetaMagic) return Status::Corruption(where + "invariant 1 violated: bad magic");
  if (m->version != kFormatVersion)
    return Status::Incompatible(where + "format version " + std::to_string(m->version) + ", this build reads " +
                                std::to_string(kFormatVersion) +
                                (m->version == 1 ? " (version 1 predates the leaf count)" : ""));
  if (m->node_size == 0 || !CheckNodeSize(m->node_size).ok())
    return Status::Corruption(where + "invariant 1 violated: node size " + std::to_string(m->node_size));
  if (m->key_kind != static_cast<uint32_t>(KP::kKind))
    return Status::Incompatible(where + "the tree holds keys of another kind");
  if (m->variant > 7) return Status::Corruption(where + "invariant 1 violated: variant " + std::to_string(m->variant));
  const Flaws flaws = Flaws::FromBits(m->variant);
  if (flaws.any() != orig)
    return Status::Incompatible(where + "the tree was made by another variant (fastfair vs fastfair-orig)");
  if (m->root % kLine != 0 || !pool->InHeap(m->root, m->node_size))
    return Status::Corruption(where + "invariant 1 violated: root " + Hex(m->root) + " outside the heap");
  std::unique_ptr<FastFairTree> t(new FastFairTree(pool, meta_off, flaws));
  PMTREE_RETURN_IF_ERROR(t->RecoverFromPool(pool->clean_shutdown()));
  return t;
}

template <KeyPolicy KP>
Status FastFairTree<KP>::CheckNode(uint64_t off, uint32_t level) const {
  if (off % kLine != 0 || !pool_->InHeap(off, node_size_))
    return Status::Corruption("fastfair: node offset " + Hex(off) + " is not a node in the heap (invariant 2)");
  const Node* n = N(off);
  if (n->hdr.level != level)
    return NodeError(off, 2, "level " + std::to_string(n->hdr.level) + ", expected " + std::to_string(level));
  if (n->hdr.count > cap_) return NodeError(off, 2, "count " + std::to_string(n->hdr.count) + " > capacity");
  if ((level == 0) != (n->hdr.leftmost == 0))
    return NodeError(off, 5, level == 0 ? "leaf with a leftmost child" : "inner node without a leftmost child");
  return Status::Ok();
}

// Walks each level along the sibling chain from its first node (the root,
// then the leftmost child of each level's first node), bounds-checking every
// node before reading it.  Reaches nodes that a parent does not know yet.
template <KeyPolicy KP>
Status FastFairTree<KP>::CollectLevels(std::vector<std::vector<uint64_t>>* levels) const {
  levels->clear();
  uint64_t first = meta_->root;
  if (first % kLine != 0 || !pool_->InHeap(first, node_size_))
    return Status::Corruption("fastfair meta: root " + Hex(first) + " outside the heap (invariant 1)");
  const uint32_t top = N(first)->hdr.level;
  if (top > 64) return NodeError(first, 2, "root level " + std::to_string(top) + " is implausible");
  levels->resize(top + 1);
  std::unordered_set<uint64_t> seen;
  for (int64_t L = top; L >= 0; --L) {
    auto& chain = (*levels)[L];
    for (uint64_t off = first; off != 0; off = N(off)->hdr.sibling) {
      PMTREE_RETURN_IF_ERROR(CheckNode(off, static_cast<uint32_t>(L)));
      if (!seen.insert(off).second) return NodeError(off, 6, "node reached twice (cycle or shared node)");
      chain.push_back(off);
      const Node* n = N(off);
      if constexpr (!KP::kInline) {
        for (uint32_t i = 0; i < n->hdr.count; i++) PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(n->records[i].key));
        if (n->hdr.flags & kHasLowKey) PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(n->hdr.low_key));
      }
      if (n->hdr.sibling != 0 && (n->hdr.sibling % kLine != 0 || !pool_->InHeap(n->hdr.sibling, node_size_) ||
                                  !(N(n->hdr.sibling)->hdr.flags & kHasLowKey)))
        return NodeError(off, 6, "sibling " + Hex(n->hdr.sibling) + " is not a node with a low key");
    }
    if (L > 0) first = N(first)->hdr.leftmost;
  }
  return Status::Ok();
}

// Recovery after a crash (docs/trees/fastfair.md, "Recovery"):
//   1. walk every level (sibling chains, so nodes whose parent insert was
//      interrupted are reached) and rebuild the allocator from reachability;
//   2. repair (Repair): stale lock words, transient FAST duplicates, splits
//      interrupted before truncation, an interrupted root split, separators
//      missing in parents.
// Each repair is itself crash-consistent, so a crash during recovery is
// recovered by running recovery again.
//
// After a clean shutdown nothing needs repair, but the allocator is still
// rebuilt from the walk (cheap: one pass over the nodes), so a free list
// saved by the pool that disagrees with the tree can never leak space.
template <KeyPolicy KP>
Status FastFairTree<KP>::RecoverFromPool(bool clean) {
  report_ = RecoveryReport{};
  report_.crashed = !clean;
  // Instant restart: a clean close left every operation finished, no lock
  // word set and the allocator state saved by the pool; nothing is read.
  // (Damage since then is Verify()'s to find: its bytes-reached check
  // compares with the saved state, which this path keeps.)
  // The leaf count a clean Close stored is exact (invariant 11).
  if (clean) {
    leaf_count_.store(std::min<uint64_t>(meta_->leaves, pool_->size() / node_size_));
    return Status::Ok();
  }
  std::vector<std::vector<uint64_t>> levels;
  PMTREE_RETURN_IF_ERROR(CollectLevels(&levels));
  // Invariant 11: nodes are never freed and the meta block never counts more
  // leaves than the chain durably has, so a walk that reaches fewer met a
  // cut leaf chain (a zeroed sibling pointer or page): report it before the
  // allocator rebuild would turn the lost leaves into free space.  Needs no
  // allocator state, so it holds under a key-value store too.
  const uint64_t walked = levels[0].size(), counted = meta_->leaves;
  if (counted == 0 || counted > walked)
    return Status::Corruption("fastfair: the leaf chain reaches " + std::to_string(walked) +
                              " leaves but the meta block counts " + std::to_string(counted) +
                              (counted == 0 ? " (never 0: a damaged meta block)"
                                            : ": leaves unreachable (a cut leaf chain?)") +
                              " (invariant 11)");
  PMTREE_RETURN_IF_ERROR(RebuildAllocator(levels));
  auto repair = [this, counted, levels = std::move(levels)]() mutable -> Status {
    PMTREE_RETURN_IF_ERROR(Repair(&levels));
    // The exact count (a split's count may have lagged; repairs split no leaf).
    leaf_count_.store(levels[0].size());
    if (levels[0].size() != counted) StoreLeafCount(levels[0].size(), /*fence=*/true);
    return Status::Ok();
  };
  // Repairs allocate (R4's new root, a parent split by a linked child).  A
  // key-value store above holds the rebuild until it has reported its own
  // blocks (HoldRebuild), and allocates nothing before: repair once it has.
  // Readers meanwhile move right through the sibling chain (FAIR).
  return pool_->allocator().RunOnceRebuilt(std::move(repair));
}

template <KeyPolicy KP>
void FastFairTree<KP>::StoreLeafCount(uint64_t leaves, bool fence) {
  pool_->Store64(&meta_->leaves, leaves);
  // Flush the count; every caller stores it only after the leaves it counts
  // are durably linked, so no crash state has it above the chain.
  pool_->Flush(&meta_->leaves, sizeof(uint64_t));
  // Fence when the caller has no later fence (bulk load, recovery, Close).
  if (fence) pool_->Fence();
}

template <KeyPolicy KP>
Status FastFairTree<KP>::RebuildAllocator(const std::vector<std::vector<uint64_t>>& levels) {
  auto& a = pool_->allocator();
  a.BeginRebuild();
  Status s = a.MarkUsed(meta_off_, sizeof(Meta));
  for (size_t L = 0; L < levels.size() && s.ok(); L++) {
    for (uint64_t off : levels[L]) {
      report_.nodes++;
      s = a.MarkUsed(off, node_size_);
      if (!s.ok()) break;
      if constexpr (!KP::kInline) {
        if (L != 0) continue;  // inner key slots share the blobs of leaf low keys
        const Node* n = N(off);
        if (n->hdr.flags & kHasLowKey) s = keys_.MarkUsed(n->hdr.low_key);
        const bool has_high = n->hdr.sibling != 0;
        const uint64_t high = has_high ? N(n->hdr.sibling)->hdr.low_key : 0;
        for (uint32_t i = 0; i < n->hdr.count && s.ok(); i++) {
          const uint64_t k = n->records[i].key;
          // A transient duplicate shares its blob with its right neighbour.
          if (i + 1 < n->hdr.count && n->records[i + 1].key == k) continue;
          // Records at or above the sibling's low key were copied into the
          // sibling by a split interrupted before truncation; it owns them.
          if (has_high && keys_.CompareSlots(k, high) >= 0) continue;
          s = keys_.MarkUsed(k);
        }
        if (!s.ok()) break;
      }
    }
  }
  a.EndRebuild();
  return s;
}

template <KeyPolicy KP>
Status FastFairTree<KP>::Repair(std::vector<std::vector<uint64_t>>* levels) {
  // R1 (the paper keeps a lock in the header; a crash may leave it set).  Our
  // locks are in DRAM and the word is always written 0; a non-zero word is
  // cleared all the same.
  for (const auto& chain : *levels)
    for (uint64_t off : chain) {
      Node* n = N(off);
      if (n->hdr.lock != 0) {
        pool_->Store64(&n->hdr.lock, 0);
        // Persist the cleared lock word so later recoveries need not repeat it.
        pool_->Persist(&n->hdr.lock, sizeof(uint64_t));
        report_.locks_cleared++;
      }
    }
  // R2 (FAST lazy recovery): a crash during a shift leaves one transient
  // duplicate per node.  Readers skip it, but a later insert between the two
  // copies would make the left one valid again, so compact it away with the
  // crash-consistent left shift.
  for (const auto& chain : *levels)
    for (uint64_t off : chain) {
      Node* n = N(off);
      for (uint32_t i = 0; i + 1 < n->hdr.count;) {
        if (n->records[i].key == n->records[i + 1].key) {
          FastRemove(off, i, false);
          report_.duplicates_removed++;
        } else {
          i++;
        }
      }
    }
  // R3 (FAIR, crash between steps 2 and 3): a node whose records reach its
  // sibling's low key still holds the copies the sibling owns; truncate.
  for (const auto& chain : *levels)
    for (uint64_t off : chain) {
      Node* n = N(off);
      if (n->hdr.sibling == 0) continue;
      const uint64_t high = N(n->hdr.sibling)->hdr.low_key;
      uint32_t keep = 0;
      while (keep < n->hdr.count && keys_.CompareSlots(n->records[keep].key, high) < 0) keep++;
      if (keep < n->hdr.count) {
        pool_->Store64(&n->hdr.count, keep);
        // Persist the truncation (recovery's writes are durable before it returns).
        pool_->Persist(&n->hdr.count, sizeof(uint64_t));
        report_.truncations++;
      }
    }
  // R4 (root split interrupted between truncation and the meta.root switch):
  // the root has a sibling.  Flaw (2) of fastfair-orig: left as it is.
  if (!flaws_.root_split && N(meta_->root)->hdr.sibling != 0) {
    PMTREE_RETURN_IF_ERROR(CompleteRootSplit());
    report_.root_splits_completed++;
  }
  // R5 (FAIR, crash between step 3 and the parent insert): a node that no
  // parent record names is linked by inserting its separator.
  PMTREE_RETURN_IF_ERROR(CollectLevels(levels));
  for (size_t L = 0; L + 1 < levels->size(); L++) {
    std::unordered_set<uint64_t> children;
    for (uint64_t p : (*levels)[L + 1]) {
      const Node* n = N(p);
      children.insert(n->hdr.leftmost);
      for (uint32_t i = 0; i < n->hdr.count; i++) children.insert(n->records[i].value);
    }
    for (uint64_t off : (*levels)[L]) {
      if (children.count(off)) continue;
      const Node* n = N(off);
      if (!(n->hdr.flags & kHasLowKey)) return NodeError(off, 6, "unlinked node without a low key");
      PMTREE_RETURN_IF_ERROR(InsertSeparator(static_cast<uint32_t>(L + 1), n->hdr.low_key, off));
      report_.orphans_linked++;
    }
    // Linking may have split nodes of level L + 1 and above.
    PMTREE_RETURN_IF_ERROR(CollectLevels(levels));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Verify, Stats, Close
// ---------------------------------------------------------------------------
//
// Invariants (checked by Verify; recovery establishes them after a crash):
//  1. The meta block has the magic, version and a valid node size; its root
//     is a node in the heap.
//  2. Every node is 64-aligned in the heap, at the level its parent implies,
//     count <= capacity, lock word 0.
//  3. Keys within a node strictly increase (no transient duplicate at rest).
//  4. A node's keys are >= its low key and < its sibling's low key.
//  5. Leaves have no leftmost child; inner nodes have one.
//  6. The first node of each level has no low key, every other node has one;
//     the root has no sibling; no node is reached twice.
//  7. The children of level L+1, in order, are exactly the sibling chain of
//     level L (no orphan: every split reached its parent); each inner record's
//     key slot equals its child's low key.
//  8. An inner node's low key equals its leftmost child's low key.
//  9. Key slots are valid (byte keys: blob in the heap, length, hash).
// 10. Pool bytes reached (meta, nodes, leaf key blobs, leaf low-key blobs)
//     plus reserved spare nodes equal the allocator's bytes in use.
// 11. The meta block's leaf count is at least 1 and at most the number of
//     leaves in the chain (recovery refuses a chain shorter than it).
template <KeyPolicy KP>
Status FastFairTree<KP>::Verify() {
  // Verify runs alone: blocks retired by earlier removals can be freed now,
  // so bytes in use count only what the tree still holds (invariant 10).
  pool_->epochs().DrainAll();
  if (meta_->magic != kMetaMagic || meta_->version != kFormatVersion || meta_->node_size != node_size_)
    return Status::Corruption("fastfair meta block at offset " + Hex(meta_off_) + ": invariant 1 violated");
  std::vector<std::vector<uint64_t>> levels;
  PMTREE_RETURN_IF_ERROR(CollectLevels(&levels));  // 1, 2, 5, 6 (reached twice), 9
  if (meta_->leaves == 0 || meta_->leaves > levels[0].size())
    return Status::Corruption("fastfair meta block at offset " + Hex(meta_off_) + ": leaf count " +
                              std::to_string(meta_->leaves) + " but " + std::to_string(levels[0].size()) +
                              " leaves in the chain (invariant 11)");
  uint64_t bytes = Allocator::RoundUp(sizeof(Meta));
  const size_t top = levels.size() - 1;
  if (levels[top].size() != 1)
    return NodeError(levels[top][0], 6, "the root has a sibling (interrupted root split)");
  for (size_t L = 0; L < levels.size(); L++) {
    std::vector<uint64_t> expect_children;
    for (size_t idx = 0; idx < levels[L].size(); idx++) {
      const uint64_t off = levels[L][idx];
      const Node* n = N(off);
      const uint32_t c = static_cast<uint32_t>(n->hdr.count);
      bytes += node_size_;
      if (n->hdr.lock != 0) return NodeError(off, 2, "lock word set at rest");
      const bool has_low = n->hdr.flags & kHasLowKey;
      if (has_low != (idx != 0))
        return NodeError(off, 6, idx == 0 ? "first node of its level has a low key" : "missing low key");
      for (uint32_t i = 1; i < c; i++)
        if (keys_.CompareSlots(n->records[i - 1].key, n->records[i].key) >= 0)
          return NodeError(off, 3, "keys not strictly increasing at record " + std::to_string(i));
      if (has_low && c > 0 && keys_.CompareSlots(n->hdr.low_key, n->records[0].key) > 0)
        return NodeError(off, 4, "first key below the low key");
      if (n->hdr.sibling != 0) {
        const uint64_t high = N(n->hdr.sibling)->hdr.low_key;
        if (c > 0 && keys_.CompareSlots(n->records[c - 1].key, high) >= 0)
          return NodeError(off, 4, "last key not below the sibling's low key (split not truncated)");
        if (has_low && keys_.CompareSlots(n->hdr.low_key, high) >= 0)
          return NodeError(off, 4, "low key not below the sibling's low key");
      }
      if (L == 0) {
        if constexpr (!KP::kInline) {
          if (has_low) bytes += keys_.SlotBytes(n->hdr.low_key);
          for (uint32_t i = 0; i < c; i++) bytes += keys_.SlotBytes(n->records[i].key);
        }
      } else {
        expect_children.push_back(n->hdr.leftmost);
        for (uint32_t i = 0; i < c; i++) expect_children.push_back(n->records[i].value);
      }
    }
    if (L > 0) {
      PMTREE_RETURN_IF_ERROR(CheckChildOrder(
          levels[L - 1], expect_children, L, "no parent record names this node (split not linked in its parent)",
          [&](uint64_t off, const std::string& what) { return NodeError(off, 7, what); }));
      for (uint64_t off : levels[L]) {
        const Node* n = N(off);
        for (uint32_t i = 0; i < n->hdr.count; i++)
          if (n->records[i].key != N(n->records[i].value)->hdr.low_key)
            return NodeError(off, 7, "separator " + std::to_string(i) + " differs from its child's low key");
        if ((n->hdr.flags & kHasLowKey) && n->hdr.low_key != N(n->hdr.leftmost)->hdr.low_key)
          return NodeError(off, 8, "low key differs from the leftmost child's low key");
      }
    }
  }
  return CheckSpaceAccounted("fastfair: invariant 10", bytes, spares_.HeldBytes(node_size_),
                             pool_->allocator().bytes_in_use());
}

template <KeyPolicy KP>
TreeStats FastFairTree<KP>::Stats() {
  TreeStats st;
  std::vector<std::vector<uint64_t>> levels;
  if (!CollectLevels(&levels).ok()) return st;
  st.height = static_cast<uint32_t>(levels.size());
  st.pm_bytes = Allocator::RoundUp(sizeof(Meta));
  for (size_t L = 0; L < levels.size(); L++) {
    for (uint64_t off : levels[L]) {
      const Node* n = N(off);
      st.pm_bytes += node_size_;
      if (L == 0) {
        st.leaf_nodes++;
        st.entries += n->hdr.count;
        if constexpr (!KP::kInline) {
          if (n->hdr.flags & kHasLowKey) st.pm_bytes += keys_.SlotBytes(n->hdr.low_key);
          for (uint32_t i = 0; i < n->hdr.count; i++) st.pm_bytes += keys_.SlotBytes(n->records[i].key);
        }
      } else {
        st.inner_nodes++;
      }
    }
  }
  // Spare nodes reserved for splits are allocated and held by the tree, so
  // they count as its PM bytes (the allocator sees them in use).
  st.pm_bytes += spares_.HeldBytes(node_size_);
  st.leaf_fill = st.leaf_nodes ? static_cast<double>(st.entries) / (st.leaf_nodes * cap_) : 0;
  st.dram_bytes = locks_.DramBytes();
  st.extra = {
      {"node_size", node_size_},
      {"capacity", cap_},
      {"splits", static_cast<double>(splits_.load())},
      {"root_splits", static_cast<double>(root_splits_.load())},
      {"recovery_duplicates_removed", static_cast<double>(report_.duplicates_removed)},
      {"recovery_truncations", static_cast<double>(report_.truncations)},
      {"recovery_root_splits_completed", static_cast<double>(report_.root_splits_completed)},
      {"recovery_orphans_linked", static_cast<double>(report_.orphans_linked)},
  };
  return st;
}

template <KeyPolicy KP>
Status FastFairTree<KP>::Close() {
  if (closed_) return Status::Busy("fastfair: already closed");
  // Reserved nodes are unreachable; return them so the saved allocator
  // state holds no leak.
  spares_.FreeAll(pool_->allocator(), node_size_);
  closed_ = true;
  // The exact leaf count (invariant 11) before the clean flag: the next
  // clean open takes it as it is.
  StoreLeafCount(leaf_count_.load(), /*fence=*/true);
  return pool_->Close();
}

// ---------------------------------------------------------------------------
// Registry entry points
// ---------------------------------------------------------------------------

Status Flaws::Parse(std::string_view text, Flaws* out) {
  *out = Flaws{};
  if (text == "all") {
    *out = All();
    return Status::Ok();
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view f = text.substr(pos, comma - pos);
    if (f == "remove-flush") {
      out->remove_flush = true;
    } else if (f == "root-split") {
      out->root_split = true;
    } else if (f == "header-flush") {
      out->header_flush = true;
    } else {
      return Status::InvalidArgument("fastfair-orig: unknown flaw '" + std::string(f) +
                                     "'; valid: all, or a comma list of remove-flush, root-split, header-flush");
    }
    pos = comma + 1;
  }
  return Status::Ok();
}

template <class K, bool Orig>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options) {
  Flaws flaws;
  if (Orig) flaws = Flaws::All();
  for (const auto& [key, value] : options.extra) {
    if (Orig && key == "flaws") {
      PMTREE_RETURN_IF_ERROR(Flaws::Parse(value, &flaws));
      continue;
    }
    return Status::InvalidArgument(Orig ? "fastfair-orig: unknown option '" + key + "'; valid: flaws"
                                        : "fastfair: unknown option '" + key + "'; fastfair accepts no extra options");
  }
  return UpcastTree<BasicTree<K>>(FastFairTree<KeyPolicyFor<K>>::Create(pool, options, flaws));
}

template <class K, bool Orig>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options) {
  return UpcastTree<BasicTree<K>>(FastFairTree<KeyPolicyFor<K>>::Recover(pool, options, Orig));
}

template class FastFairTree<U64Keys>;
template class FastFairTree<BytesKeys>;
template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t, false>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t, true>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Create<std::string_view, false>(PoolImpl*,
                                                                                             const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Create<std::string_view, true>(PoolImpl*,
                                                                                            const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t, false>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t, true>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Recover<std::string_view, false>(PoolImpl*,
                                                                                              const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Recover<std::string_view, true>(PoolImpl*,
                                                                                             const TreeOptions&);

}  // namespace pmtree::fastfair
