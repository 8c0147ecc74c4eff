// SPDX-License-Identifier: Apache-2.0
//
// sortedtree: the native sorted B+-tree of the WO-tree paper (§2.3, the
// baseline of §5), on WO-tree's frame (src/trees/wotree/blink_frame.h).
// Read docs/trees/sortedtree.md; leaf layout in layout.h.
//
// Every node is kept sorted.  A leaf insert shifts the records above the new
// key one place right, right to left, and persists each shifted record before
// the next one moves -- the "N = (m+1)/2 cache line flushing operations" per
// insert the paper counts for the native tree; a delete shifts left the same
// way.  Inner nodes are the frame's (shared with WO-tree).  Splits are made
// crash-consistent the simplest way that needs no log (FAIR order): the new
// right leaf is persisted, then linked through `next`, then the old leaf
// drops its upper half by one count store; recovery finishes a split cut off
// between the link and the truncation.
//
// Leaf invariants (S-rules; F-rules are the frame's):
//   S1 At rest a leaf's records [0, count) hold strictly ascending keys.
//   S2 A shift leaves at most one transient duplicate (layout.h's rule), so
//      every intermediate state reads as the old or the new record set.
//   S3 A split's new leaf is persistent before `next` names it (F7), and the
//      link before the truncation, so no record is ever held only by an
//      unreachable leaf.

#include "trees/sortedtree/sortedtree.h"

#include <algorithm>
#include <string>
#include <vector>

#include "trees/sortedtree/layout.h"
#include "trees/wotree/blink_frame.h"

namespace pmtree::sortedtree {
namespace {

using wotree::kHasLowKey;
using wotree::kWritten;
using wotree::Meta;
using wotree::NodePrefix;

template <KeyPolicy KP>
class SortedLeafOps {
 public:
  using Arg = typename KP::Arg;
  static constexpr const char* kName = "sortedtree";
  static constexpr const char* kPaperName = "sortedtree";
  static constexpr uint64_t kMagic = kSortedMagic;
  static constexpr uint32_t kVariants = 0;

  SortedLeafOps(PoolImpl* pool, KP* keys, Meta* /*meta*/, uint32_t node_size, uint32_t /*variant*/)
      : pool_(pool), keys_(keys), cap_(SortedCapacity(node_size)) {}

  using Record = SortedRecord;
  int capacity() const { return cap_; }

  // A complete leaf holding `recs` (in key order, at most capacity) behind
  // the given prefix.  Written, not flushed; returns the bytes to persist
  // before the leaf becomes reachable (F7): a split's new leaf, a
  // bulk-loaded leaf.
  size_t WriteLeaf(uint64_t off, uint64_t next, uint64_t low, uint32_t flags, std::span<const SortedRecord> recs) {
    SortedLeaf hdr{};
    hdr.prefix = NodePrefix{next, low, 0, flags | kWritten};
    hdr.count = recs.size();
    pool_->Write(Lf(off), &hdr, 64);
    pool_->Write(Lf(off)->records, recs.data(), 16 * recs.size());
    return 64 + 16 * recs.size();
  }

  void InitEmpty(uint64_t off, uint64_t next, uint64_t low, uint32_t flags) {
    SortedLeaf hdr{};
    hdr.prefix = NodePrefix{next, low, 0, flags | kWritten};
    pool_->Write(Lf(off), &hdr, 64);
    // Flush the empty leaf; the caller's fence orders it before the leaf is
    // reachable (F7).
    pool_->Flush(Lf(off), 64);
  }

  // Binary search over the sorted records (S1).
  int Find(uint64_t off, Arg key) const {
    const SortedLeaf* lf = Lf(off);
    int lo = 0, hi = static_cast<int>(std::min<uint64_t>(lf->count, cap_)) - 1;
    while (lo <= hi) {
      const int mid = (lo + hi) / 2;
      const int c = keys_->Compare(lf->records[mid].key, key);
      if (c == 0) return mid;
      if (c < 0) {
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return -1;
  }
  uint64_t* ValueWord(uint64_t off, int h) { return &Lf(off)->records[h].value; }
  uint64_t KeyOf(uint64_t off, int h) const { return Lf(off)->records[h].key; }
  int Count(uint64_t off) const { return static_cast<int>(Lf(off)->count); }

  // Sorted insert (caller holds the leaf lock; the leaf has room).
  void Insert(uint64_t off, Arg key, uint64_t slot, uint64_t value) {
    SortedLeaf* lf = Lf(off);
    const uint64_t cnt = lf->count;
    uint64_t pos = 0;
    while (pos < cnt && keys_->Compare(lf->records[pos].key, key) < 0) pos++;
    SortedRecord* end = &lf->records[cnt];
    if (pos == cnt) {
      pool_->Store64(&end->key, slot);
      pool_->Store64(&end->value, value);
      // Persist the appended record before the count admits it.
      pool_->Persist(end, 16);
      pool_->Store64(&lf->count, cnt + 1);
      // Persist the count before the unlock (F8): the insert's commit point.
      pool_->Persist(&lf->count, 8);
      return;
    }
    pool_->Store64(&end->value, lf->records[cnt - 1].value);
    pool_->Store64(&end->key, lf->records[cnt - 1].key);
    // Persist the copy of the last record before the count admits it (as a
    // duplicate of its left neighbour's key, S2).
    pool_->Persist(end, 16);
    pool_->Store64(&lf->count, cnt + 1);
    // Persist the count before a record inside the old count changes, or a
    // crash could keep the old last record only beyond the count.
    pool_->Persist(&lf->count, 8);
    for (uint64_t j = cnt - 1; j-- > pos;) {
      SortedRecord* r = &lf->records[j + 1];
      pool_->Store64(&r->value, lf->records[j].value);
      pool_->Store64(&r->key, lf->records[j].key);
      // The native tree's per-shift flush: persist each shifted record
      // before the next one overwrites its source (S2).
      pool_->Persist(r, 16);
    }
    SortedRecord* r = &lf->records[pos];
    pool_->Store64(&r->value, value);  // still a duplicate of records[pos + 1]'s key
    pool_->Store64(&r->key, slot);     // now valid: the commit point
    // Persist the new record before the unlock (F8).
    pool_->Persist(r, 16);
  }

  // Sorted delete: a left shift, key before value, each record persisted.
  void Remove(uint64_t off, int h) {
    SortedLeaf* lf = Lf(off);
    const uint64_t cnt = lf->count;
    for (uint64_t j = h; j + 1 < cnt; j++) {
      SortedRecord* r = &lf->records[j];
      pool_->Store64(&r->key, lf->records[j + 1].key);  // r now duplicates j + 1: invalid
      pool_->Store64(&r->value, lf->records[j + 1].value);
      // Persist each shifted record before the next one moves (S2).
      pool_->Persist(r, 16);
    }
    pool_->Store64(&lf->count, cnt - 1);
    // Persist the shorter count before the unlock (F8); the record it drops
    // is a duplicate (or the removed last record).
    pool_->Persist(&lf->count, 8);
  }

  // FAIR-order split (S3); caller holds the full leaf's lock.
  Status Split(uint64_t off, uint64_t nl, Arg key, uint64_t slot, uint64_t value, uint64_t* sep) {
    SortedLeaf* lf = Lf(off);
    const uint64_t cnt = lf->count;
    const uint64_t mid = cnt / 2;
    PMTREE_ASSIGN_OR_RETURN(uint64_t sep_slot, MakeSeparator(lf->records[mid].key));
    std::vector<SortedRecord> upper(lf->records + mid, lf->records + cnt);
    const bool right = keys_->Compare(sep_slot, key) <= 0;
    if (right) {
      auto it = upper.begin();
      while (it != upper.end() && keys_->Compare(it->key, key) < 0) ++it;
      upper.insert(it, SortedRecord{slot, value});
    }
    const size_t bytes = WriteLeaf(nl, lf->prefix.next, sep_slot, kHasLowKey, upper);
    // Persist the complete new leaf before `next` names it (S3, F7).
    pool_->Persist(Lf(nl), bytes);
    pool_->Store64(&lf->prefix.next, nl);
    // Persist the link before the truncation (S3): until then the old leaf's
    // upper records are read right of it (F3), never lost.
    pool_->Persist(&lf->prefix.next, 8);
    pool_->Store64(&lf->count, mid);
    // Persist the truncation before the unlock (F8); recovery redoes it.
    pool_->Persist(&lf->count, 8);
    if (!right) Insert(off, key, slot, value);
    *sep = sep_slot;
    return Status::Ok();
  }

  template <class F>
  void ForEach(uint64_t off, F f) const {
    const SortedLeaf* lf = Lf(off);
    const uint64_t cnt = std::min<uint64_t>(lf->count, cap_);
    for (uint64_t i = 0; i < cnt; i++) {
      if (i + 1 < cnt && lf->records[i].key == lf->records[i + 1].key) continue;  // S2 duplicate
      f(lf->records[i].key, lf->records[i].value);
    }
  }

  Status ReplayLogs(uint64_t* /*replayed*/) { return Status::Ok(); }

  // Recovery: drop a transient duplicate (S2) by the delete's left shift,
  // then finish a split cut off before its truncation (records at or above
  // the next leaf's low key).  Both idempotent.
  Status Repair(uint64_t off, uint64_t* repaired) {
    PMTREE_RETURN_IF_ERROR(CheckReadable(off));
    SortedLeaf* lf = Lf(off);
    for (uint64_t i = 0; i + 1 < lf->count;) {
      if (lf->records[i].key == lf->records[i + 1].key) {
        Remove(off, static_cast<int>(i));
        (*repaired)++;
      } else {
        i++;
      }
    }
    if (lf->prefix.next == 0) return Status::Ok();
    const uint64_t high = Lf(lf->prefix.next)->prefix.low_key;
    uint64_t t = 0;
    while (t < lf->count && keys_->CompareSlots(lf->records[t].key, high) < 0) t++;
    if (t < lf->count) {
      pool_->Store64(&lf->count, t);
      // Persist the finished truncation before the frame's allocator rebuild
      // and separator inserts rely on the leaf.
      pool_->Persist(&lf->count, 8);
      (*repaired)++;
    }
    return Status::Ok();
  }

  Status Check(uint64_t off) const {
    PMTREE_RETURN_IF_ERROR(CheckReadable(off));
    const SortedLeaf* lf = Lf(off);
    for (uint64_t i = 1; i < lf->count; i++)
      if (keys_->CompareSlots(lf->records[i - 1].key, lf->records[i].key) >= 0)
        return Status::Corruption("sortedtree leaf at offset " + wotree::Hex(off) +
                                  ": invariant S1 violated: records not in strictly ascending key order");
    return Status::Ok();
  }

  void AddStats(TreeStats* /*st*/) const {}

 private:
  // What recovery and Verify() dereference before comparing: the count, every
  // record's key slot, and the next leaf with its low key (a damaged byte-key
  // slot or next offset names any address).
  Status CheckReadable(uint64_t off) const {
    const SortedLeaf* lf = Lf(off);
    const std::string where = "sortedtree leaf at offset " + wotree::Hex(off);
    if (lf->count > static_cast<uint64_t>(cap_))
      return Status::Corruption(where + ": invariant S1 violated: count beyond capacity");
    for (uint64_t i = 0; i < lf->count; i++) PMTREE_RETURN_IF_ERROR(keys_->CheckSlot(lf->records[i].key).Annotate(where));
    const uint64_t next = lf->prefix.next;
    if (next == 0) return Status::Ok();
    if (next % kAllocGranule != 0 || !pool_->InHeap(next, sizeof(SortedLeaf)))
      return Status::Corruption(where + ": next leaf offset " + wotree::Hex(next) + " outside the heap");
    return keys_->CheckSlot(Lf(next)->prefix.low_key).Annotate(where + ": next leaf's low key");
  }

  SortedLeaf* Lf(uint64_t off) const { return pool_->At<SortedLeaf>(off); }

  Result<uint64_t> MakeSeparator(uint64_t slot) {
    if constexpr (KP::kInline) {
      return slot;
    } else {
      // The separator owns a blob: the record it copies may be deleted.
      return keys_->MakeSlot(keys_->View(slot));
    }
  }

  PoolImpl* const pool_;
  KP* const keys_;
  const int cap_;
};

template <class K>
using KeysFor = std::conditional_t<std::is_same_v<K, uint64_t>, U64Keys, BytesKeys>;
template <class K>
using SortedTree = wotree::BlinkFrame<KeysFor<K>, SortedLeafOps<KeysFor<K>>>;

}  // namespace

template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options) {
  return SortedTree<K>::Create(pool, options, 0);
}
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options) {
  return SortedTree<K>::Recover(pool, options);
}

template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Create<std::string_view>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Recover<std::string_view>(PoolImpl*, const TreeOptions&);

}  // namespace pmtree::sortedtree
