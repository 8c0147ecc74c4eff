// SPDX-License-Identifier: Apache-2.0
//
// WO-tree (Ma, Wu, Dong, Zhang, Li, Xie, "Write-Optimized B+ Tree Index
// Technology for Persistent Memory", JCST 36(5) 2021).  Read
// docs/trees/wotree.md first; layout in layout.h.  The tree frame -- inner
// nodes with FAST shifting and the delayed flush, `next` siblings, descent,
// recovery, Verify -- is blink_frame.h, shared with sortedtree.  This file is
// WO-tree's leaf (§4.2): bitmap + counter + sorted slot array, unsorted
// appends (Algorithm 1), the binary search through the slot array
// (Algorithm 2), the delete (§4.2.3), and the split (Algorithm 3) with the
// partial write-ahead log for leaves (§4.3.4, Fig. 8).
//
// Leaf invariants (W-rules, cited at the barriers; F-rules are the frame's):
//   W1 An entry's bitmap bit is set only after the entry is persistent.
//   W2 The bitmap is the truth about a leaf's entries; the slot array is
//      derived from it.  At rest slot[0] is the number of set bits and
//      slot[1..slot[0]] lists each valid entry once, in ascending key order.
//   W3 A leaf-log record names a complete, persistent new leaf: recovery can
//      always finish the old leaf's half of the split from it.
//   W4 While a log record is set nobody else changes the two leaves (the
//      old leaf's lock is held until the record is cleared).

#include "trees/wotree/wotree.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "trees/wotree/blink_frame.h"

namespace pmtree::wotree {

std::string Hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status CheckNodeSize(const char* name, uint32_t node_size) {
  if (node_size < kMinNodeSize || node_size > kMaxNodeSize || node_size % kLine != 0)
    return Status::InvalidArgument(std::string(name) + ": invalid node size " + std::to_string(node_size) +
                                   " (valid: 256..2048, a multiple of 64 = 4..32 cache lines)");
  return Status::Ok();
}

// The queue of leaf-log records: a record per concurrent split.
class LogSlots {
 public:
  int Acquire() {
    for (int spins = 0;; spins++) {
      uint32_t m = busy_.load(std::memory_order_relaxed);
      if (m != (1u << kLeafLogs) - 1) {
        const int i = __builtin_ctz(~m);
        if (busy_.compare_exchange_weak(m, m | (1u << i), std::memory_order_acquire)) return i;
      }
      CpuRelax(spins);
    }
  }
  void Release(int i) { busy_.fetch_and(~(1u << i), std::memory_order_release); }

 private:
  std::atomic<uint32_t> busy_{0};
};

namespace {

template <KeyPolicy KP>
class WoLeafOps {
 public:
  using Arg = typename KP::Arg;
  static constexpr const char* kName = "wotree";
  static constexpr const char* kPaperName = "wotree-paper";
  static constexpr uint64_t kMagic = kWoMagic;
  static constexpr uint32_t kVariants = kVariantPaperSplit;

  WoLeafOps(PoolImpl* pool, KP* keys, Meta* meta, uint32_t node_size, uint32_t variant)
      : pool_(pool),
        keys_(keys),
        meta_(meta),
        cap_(WoLeafCapacity(node_size)),
        hdr_(WoLeafHeader(cap_)),
        paper_((variant & kVariantPaperSplit) != 0) {}

  using Record = LeafEntry;
  int capacity() const { return cap_; }

  // A complete leaf holding `recs` (in key order, at most capacity) behind
  // the given prefix: entries 0..m-1, their bits set, the slot array in
  // order.  Written, not flushed; returns the bytes to persist.  The leaf
  // must be unreachable until the caller persists it (F7): a split's new
  // leaf, a bulk-loaded leaf.
  size_t WriteLeaf(uint64_t off, uint64_t next, uint64_t low, uint32_t flags, std::span<const LeafEntry> recs) {
    const int m = static_cast<int>(recs.size());
    uint8_t img[kMaxHeader] = {};
    NodePrefix p{next, low, 0, flags | kWritten};
    std::memcpy(img, &p, sizeof(p));
    uint64_t bm[2] = {m >= 64 ? ~0ull : (1ull << m) - 1, m > 64 ? (1ull << (m - 64)) - 1 : 0};
    std::memcpy(img + offsetof(WoLeaf, bitmap), bm, 16);
    img[offsetof(WoLeaf, slot)] = static_cast<uint8_t>(m);
    for (int j = 0; j < m; j++) img[offsetof(WoLeaf, slot) + 1 + j] = static_cast<uint8_t>(j);
    pool_->Write(Lf(off), img, hdr_);
    pool_->Write(Ent(off, 0), recs.data(), sizeof(LeafEntry) * m);
    return hdr_ + sizeof(LeafEntry) * m;
  }

  void InitEmpty(uint64_t off, uint64_t next, uint64_t low, uint32_t flags) {
    uint8_t img[kMaxHeader] = {};
    NodePrefix p{next, low, 0, flags | kWritten};
    std::memcpy(img, &p, sizeof(p));
    pool_->Write(Lf(off), img, hdr_);
    // Flush the empty leaf; the caller's fence orders it before the leaf is
    // reachable (F7).
    pool_->Flush(Lf(off), hdr_);
  }

  // Algorithm 2: binary search through the slot array.
  int Find(uint64_t off, Arg key) const {
    const WoLeaf* lf = Lf(off);
    int l = 1, r = std::min<int>(lf->slot[0], cap_);
    while (l <= r) {
      const int mid = (l + r) / 2;
      const int i = lf->slot[mid];
      const int c = keys_->Compare(Ent(off, i)->key, key);
      if (c == 0) return i;
      if (c < 0) {
        l = mid + 1;
      } else {
        r = mid - 1;
      }
    }
    return -1;
  }
  uint64_t* ValueWord(uint64_t off, int h) { return &Ent(off, h)->value; }
  uint64_t KeyOf(uint64_t off, int h) const { return Ent(off, h)->key; }
  int Count(uint64_t off) const { return Lf(off)->slot[0]; }

  // Algorithm 1 (caller holds the leaf lock; the leaf has a free entry).
  void Insert(uint64_t off, Arg key, uint64_t slot, uint64_t value) {
    WoLeaf* lf = Lf(off);
    const int p = FirstFree(lf);  // line 2: findposwithbitmap
    LeafEntry* e = Ent(off, p);
    pool_->Store64(&e->key, slot);  // line 3
    pool_->Store64(&e->value, value);
    // Line 4: persist the entry before its bitmap bit is set (W1), so a crash
    // never validates an unwritten entry.
    pool_->Persist(e, sizeof(LeafEntry));
    pool_->Store64(&lf->bitmap[p / 64], lf->bitmap[p / 64] | (1ull << (p % 64)));  // line 5
    const int cnt = lf->slot[0];  // line 6: SlotUpdate
    int pos = 1;
    while (pos <= cnt && keys_->Compare(Ent(off, lf->slot[pos])->key, key) < 0) pos++;
    uint8_t tail[256];
    tail[0] = static_cast<uint8_t>(p);
    std::memcpy(tail + 1, &lf->slot[pos], cnt + 1 - pos);
    pool_->Write(&lf->slot[pos], tail, cnt + 2 - pos);
    const uint8_t n = static_cast<uint8_t>(cnt + 1);
    pool_->Write(&lf->slot[0], &n, 1);
    PersistHeader(off, pos, cnt + 1);
  }

  // §4.2.3 (caller holds the leaf lock): clear the bit, drop the index from
  // the slot array, persist the bitmap, then the slot array.
  void Remove(uint64_t off, int h) {
    WoLeaf* lf = Lf(off);
    pool_->Store64(&lf->bitmap[h / 64], lf->bitmap[h / 64] & ~(1ull << (h % 64)));
    const int cnt = lf->slot[0];
    int j = 1;
    while (j <= cnt && lf->slot[j] != h) j++;
    if (cnt > j) {
      uint8_t tail[256];
      std::memcpy(tail, &lf->slot[j + 1], static_cast<size_t>(cnt - j));
      pool_->Write(&lf->slot[j], tail, static_cast<size_t>(cnt - j));
    }
    const uint8_t n = static_cast<uint8_t>(cnt - 1);
    pool_->Write(&lf->slot[0], &n, 1);
    PersistHeader(off, j, cnt - 1);
  }

  // Algorithm 3 with the partial leaf WAL (caller holds the full leaf's lock;
  // `nl` is allocated and unreachable).  Half of the entries, taken in key
  // order through the slot array, move to the new leaf; the pending insert
  // goes into the half that holds its key.
  Status Split(uint64_t off, uint64_t nl, Arg key, uint64_t slot, uint64_t value, uint64_t* sep) {
    WoLeaf* lf = Lf(off);
    const int cnt = lf->slot[0];
    const int h = cnt / 2;
    PMTREE_ASSIGN_OR_RETURN(uint64_t sep_slot, MakeSeparator(Ent(off, lf->slot[h + 1])->key));
    std::vector<LeafEntry> upper;
    for (int j = h + 1; j <= cnt; j++) upper.push_back(*Ent(off, lf->slot[j]));
    const bool right = keys_->Compare(sep_slot, key) <= 0;
    if (right) {
      auto it = upper.begin();
      while (it != upper.end() && keys_->Compare(it->key, key) < 0) ++it;
      upper.insert(it, LeafEntry{slot, value});
    }
    const int m = static_cast<int>(upper.size());
    WriteLeaf(nl, lf->prefix.next, sep_slot, kHasLowKey, upper);
    if (paper_) {
      // wotree-paper (test-only): Algorithm 3 as printed.  The old leaf's
      // next, bitmap and slot array are written before the new leaf is
      // flushed, then "cflush(newnode); mfence; cflush(node); mfence" -- no
      // fence keeps the old leaf's stores behind the new leaf's.
      FinishSplit(off, nl, /*persist=*/false);
      pool_->Flush(Lf(nl), hdr_ + sizeof(LeafEntry) * m);
      // Algorithm 3 line 9: the new node's fence.
      pool_->Fence();
      pool_->Flush(lf, offsetof(WoLeaf, slot) + 1 + cap_);
      // Algorithm 3 line 10: the old node's fence.
      pool_->Fence();
    } else {
      // Persist the complete new leaf before the log names it (W3, F7).
      pool_->Persist(Lf(nl), hdr_ + sizeof(LeafEntry) * m);
      const int li = logs_.Acquire();
      LeafListLog* log = &meta_->leaf_log[li];
      pool_->Store64(&log->leaf, off);
      pool_->Store64(&log->other, nl);
      // Persist the log record (Fig. 8: log first, then the leaf) before the
      // old leaf changes: its next, bitmap and slot array are then written
      // with one delayed flush, and recovery redoes them if a crash tears them.
      pool_->Persist(log, 16);
      FinishSplit(off, nl, /*persist=*/true);
      ClearLog(log);
      logs_.Release(li);
    }
    if (!right) Insert(off, key, slot, value);
    *sep = sep_slot;
    return Status::Ok();
  }

  template <class F>
  void ForEach(uint64_t off, F f) const {
    const WoLeaf* lf = Lf(off);
    const int cnt = std::min<int>(lf->slot[0], cap_);
    for (int j = 1; j <= cnt; j++) {
      const LeafEntry* e = Ent(off, lf->slot[j]);
      f(e->key, e->value);
    }
  }

  // Recovery R1: redo the old leaf's half of every logged split (W3), then
  // clear the record.  A record with one word set is a torn record write:
  // the old leaf was not touched yet.
  Status ReplayLogs(uint64_t* replayed) {
    for (int i = 0; i < kLeafLogs; i++) {
      LeafListLog* log = &meta_->leaf_log[i];
      const uint64_t cur = log->leaf, nl = log->other;
      if (cur != 0 && nl != 0) {
        for (uint64_t o : {cur, nl})
          if (o % 64 != 0 || !pool_->InHeap(o, hdr_))
            return Status::Corruption(std::string(kName) + " leaf log " + std::to_string(i) + ": leaf offset " +
                                      Hex(o) + " outside the heap");
        FinishSplit(cur, nl, /*persist=*/true);
        (*replayed)++;
      }
      if (cur != 0 || nl != 0) ClearLog(log);
    }
    return Status::Ok();
  }

  // Recovery R4 (W2): a slot array that disagrees with the bitmap (a crash
  // between Algorithm 1's bitmap and slot flushes, or inside a delete) is
  // rebuilt from the bitmap.
  Status Repair(uint64_t off, uint64_t* repaired) {
    PMTREE_RETURN_IF_ERROR(CheckBits(off));
    if (SlotArrayMatches(off)) return Status::Ok();
    std::vector<int> order = ValidSorted(off, nullptr);
    WriteSlotArray(off, order);
    // Persist the rebuilt slot array (idempotent: a crash here rebuilds it again).
    pool_->Persist(&Lf(off)->slot[0], order.size() + 1);
    (*repaired)++;
    return Status::Ok();
  }

  Status Check(uint64_t off) const {
    PMTREE_RETURN_IF_ERROR(CheckBits(off));
    if (!SlotArrayMatches(off))
      return Status::Corruption(std::string(kName) + " leaf at offset " + Hex(off) +
                                ": invariant W2 violated: slot array disagrees with the bitmap");
    return Status::Ok();
  }

  void AddStats(TreeStats* /*st*/) const {}

 private:
  static constexpr uint32_t kMaxHeader = WoLeafHeader(WoLeafCapacity(kMaxNodeSize));

  WoLeaf* Lf(uint64_t off) const { return pool_->At<WoLeaf>(off); }
  LeafEntry* Ent(uint64_t off, int i) const { return pool_->At<LeafEntry>(off + hdr_ + sizeof(LeafEntry) * i); }
  static bool Bit(const WoLeaf* lf, int i) { return (lf->bitmap[i / 64] >> (i % 64)) & 1; }

  int FirstFree(const WoLeaf* lf) const {
    for (int i = 0; i < cap_; i++)
      if (!Bit(lf, i)) return i;
    return -1;
  }

  Result<uint64_t> MakeSeparator(uint64_t slot) {
    if constexpr (KP::kInline) {
      return slot;
    } else {
      // The separator gets a blob of its own: the entry it copies may be
      // deleted while the separator lives on as a low key.
      return keys_->MakeSlot(keys_->View(slot));
    }
  }

  // Lines 7-8 of Algorithm 1 (and the delete's two persists): the bitmap's
  // line, then the slot-array bytes from index `from` to `count` beyond it.
  void PersistHeader(uint64_t off, int from, int count) {
    WoLeaf* lf = Lf(off);
    pool_->Flush(lf->bitmap, 16);
    // Line 7: persist the bitmap (with slot[0] and the slot bytes of line 0):
    // the operation's commit point; the slot array is rebuilt from the bitmap
    // if a crash cuts the rest off (W2, R4).
    pool_->Fence();
    const char* line1 = reinterpret_cast<const char*>(lf) + kLine;
    const char* a = reinterpret_cast<const char*>(&lf->slot[from]);
    const char* b = reinterpret_cast<const char*>(&lf->slot[count]) + 1;
    if (a < line1) a = line1;
    if (a >= b) return;
    pool_->Flush(a, b - a);
    // Line 8: persist the rest of the slot array before the unlock (F8), so
    // a reader never orders entries by a slot array a crash could revert.
    pool_->Fence();
  }

  // The old leaf's half of a split, redone verbatim by recovery (W3/W4):
  // `next` first (Algorithm 3 line 5), then the bitmap keeps the entries
  // below the new leaf's low key, then a slot array for them.
  void FinishSplit(uint64_t off, uint64_t nl, bool persist) {
    WoLeaf* lf = Lf(off);
    uint64_t bm[2] = {0, 0};
    std::vector<int> keep = ValidSorted(off, &Lf(nl)->prefix.low_key);
    for (int i : keep) bm[i / 64] |= 1ull << (i % 64);
    pool_->Store64(&lf->prefix.next, nl);
    pool_->Store64(&lf->bitmap[0], bm[0]);
    pool_->Store64(&lf->bitmap[1], bm[1]);
    WriteSlotArray(off, keep);
    if (!persist) return;
    // The delayed flush of Algorithm 3: one flush of the old leaf's changed
    // header after all its writes, then the fence that makes the split
    // complete before its log record is cleared.
    pool_->Persist(lf, offsetof(WoLeaf, slot) + 1 + keep.size());
  }

  void ClearLog(LeafListLog* log) {
    pool_->Store64(&log->leaf, 0);
    pool_->Store64(&log->other, 0);
    // Persist the cleared record before the leaf is unlocked, so recovery
    // never redoes a finished split over later changes (W4).
    pool_->Persist(log, 16);
  }

  // Valid entry indices (below *high when given) in ascending key order.
  std::vector<int> ValidSorted(uint64_t off, const uint64_t* high) const {
    const WoLeaf* lf = Lf(off);
    std::vector<int> v;
    for (int i = 0; i < cap_; i++)
      if (Bit(lf, i) && (high == nullptr || keys_->CompareSlots(Ent(off, i)->key, *high) < 0)) v.push_back(i);
    std::sort(v.begin(), v.end(),
              [&](int a, int b) { return keys_->CompareSlots(Ent(off, a)->key, Ent(off, b)->key) < 0; });
    return v;
  }

  void WriteSlotArray(uint64_t off, const std::vector<int>& order) {
    uint8_t sa[256];
    sa[0] = static_cast<uint8_t>(order.size());
    for (size_t j = 0; j < order.size(); j++) sa[j + 1] = static_cast<uint8_t>(order[j]);
    pool_->Write(&Lf(off)->slot[0], sa, order.size() + 1);
  }

  Status CheckBits(uint64_t off) const {
    const WoLeaf* lf = Lf(off);
    const uint64_t mask1 = cap_ > 64 ? (1ull << (cap_ - 64)) - 1 : 0;
    const uint64_t mask0 = cap_ >= 64 ? ~0ull : (1ull << cap_) - 1;
    if ((lf->bitmap[0] & ~mask0) != 0 || (lf->bitmap[1] & ~mask1) != 0)
      return Status::Corruption(std::string(kName) + " leaf at offset " + Hex(off) +
                                ": invariant W2 violated: bitmap bit beyond capacity");
    // Every valid entry's key must be readable before recovery or Verify()
    // compares through it (a damaged byte-key slot names any address).
    for (int i = 0; i < cap_; i++)
      if (Bit(lf, i))
        PMTREE_RETURN_IF_ERROR(keys_->CheckSlot(Ent(off, i)->key).Annotate(std::string(kName) + " leaf at offset " + Hex(off)));
    return Status::Ok();
  }

  bool SlotArrayMatches(uint64_t off) const {
    const WoLeaf* lf = Lf(off);
    const int cnt = lf->slot[0];
    const int bits = __builtin_popcountll(lf->bitmap[0]) + __builtin_popcountll(lf->bitmap[1]);
    if (cnt != bits || cnt > cap_) return false;
    uint64_t seen[2] = {0, 0};
    for (int j = 1; j <= cnt; j++) {
      const int i = lf->slot[j];
      if (i >= cap_ || !Bit(lf, i) || ((seen[i / 64] >> (i % 64)) & 1)) return false;
      seen[i / 64] |= 1ull << (i % 64);
      if (j > 1 && keys_->CompareSlots(Ent(off, lf->slot[j - 1])->key, Ent(off, i)->key) >= 0) return false;
    }
    return true;
  }

  PoolImpl* const pool_;
  KP* const keys_;
  Meta* const meta_;
  const int cap_;
  const uint32_t hdr_;
  const bool paper_;
  LogSlots logs_;
};

template <class K>
using WoTree = BlinkFrame<std::conditional_t<std::is_same_v<K, uint64_t>, U64Keys, BytesKeys>,
                          WoLeafOps<std::conditional_t<std::is_same_v<K, uint64_t>, U64Keys, BytesKeys>>>;

}  // namespace

template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options) {
  return WoTree<K>::Create(pool, options, 0);
}
template <class K>
Result<std::unique_ptr<BasicTree<K>>> CreatePaper(PoolImpl* pool, const TreeOptions& options) {
  return WoTree<K>::Create(pool, options, kVariantPaperSplit);
}
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options) {
  return WoTree<K>::Recover(pool, options);
}

template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Create<std::string_view>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> CreatePaper<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> CreatePaper<std::string_view>(PoolImpl*,
                                                                                          const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Recover<std::string_view>(PoolImpl*, const TreeOptions&);

}  // namespace pmtree::wotree
