// SPDX-License-Identifier: Apache-2.0
//
// wbtree: wB+-Tree with slot+bitmap leaves on pmtree.  Read
// docs/trees/wbtree.md first; the layout is in layout.h.  What wbtree shares
// with fptree -- creation, routing and locking, update in place, the scan
// loop, bulk-load chain, the delete log and leaf unlink, the leaf-list walk,
// recovery of everything but the split log, Verify/Stats, the DRAM inner
// index and the concurrency scheme -- is trees/common/leaf_list_tree.h.  This
// file holds wB+-Tree's own parts: the slot+bitmap leaf (search, two-section
// insert, delete), the split with its redo log and its replay, the bulk-load
// leaf image, invariant 5, factories.

#include "trees/wbtree/wbtree.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "trees/common/keys.h"
#include "trees/common/leaf_list_tree.h"
#include "trees/common/upcast.h"
#include "trees/wbtree/layout.h"

namespace pmtree {
namespace wbtree {
namespace {

inline constexpr uint32_t kMaxHeaderSize = WbHeaderSize(1024);

template <KeyPolicy KP>
class WbTree final : public LeafListTree<WbTree<KP>, KP, WbLeaf, WbEntry> {
  using LL = LeafListTree<WbTree<KP>, KP, WbLeaf, WbEntry>;
  friend LL;

 public:
  using Arg = typename LL::Arg;
  using Owned = typename LL::Owned;
  using Entry = typename LL::Entry;

  // Bitmap bit 1+i validates entry i; bit 0 (kSlotValid) says the slot array is valid.
  static constexpr LeafListTraits kTraits{"wbtree", kWbMagic, kWbDefaultNodeSize, /*entry_bit_shift=*/1,
                                          /*flag_bits=*/kSlotValid, /*older_magic=*/kWbMagicV1};

  WbTree(PoolImpl* pool, uint64_t meta_off, uint32_t node_size)
      : LL(pool, meta_off, node_size), hdr_(WbHeaderSize(node_size)) {}

 private:
  using LL::cap_;
  using LL::Corrupt;
  using LL::Ent;
  using LL::entry_mask_;
  using LL::EntryBit;
  using LL::keys_;
  using LL::LeafAt;
  using LL::meta_;
  using LL::node_size_;
  using LL::pool_;

  static int Capacity(uint32_t node_size) { return WbCapacity(node_size); }
  static uint32_t EntriesOffset(uint32_t node_size) { return WbHeaderSize(node_size); }
  static uint32_t MagicOffset(uint32_t node_size) { return WbMagicWord(node_size); }
  static uint64_t MagicMask(uint32_t /*node_size*/) { return kWbMagicMask; }

  static void InitEmptyLeaf(PoolImpl* pool, WbLeaf* leaf, uint32_t node_size) {
    pool->Zero(leaf, WbHeaderSize(node_size));
    pool->Store64(&leaf->bitmap, kSlotValid);  // an empty, valid slot array
    // Flush the empty leaf's header; the meta block's fence (LeafListTree::
    // Create) orders it before root slot 0 names the tree.
    pool->Flush(leaf, WbHeaderSize(node_size));
  }

  // ---- leaf helpers ------------------------------------------------------------------------

  static uint64_t BitsUpTo(int m) { return ((1ull << m) - 1) << 1; }

  // A leaf header image: bitmap, next, slot array [m, 0, 1, ..., m-1].
  void MakeHeader(uint8_t* h, uint64_t bitmap, uint64_t next, int m) const {
    std::memset(h, 0, hdr_);
    std::memcpy(h, &bitmap, 8);
    std::memcpy(h + 8, &next, 8);
    h[16] = static_cast<uint8_t>(m);
    for (int j = 0; j < m; j++) h[17 + j] = static_cast<uint8_t>(j);
  }

  // Entry indices of `leaf` in ascending key order: the slot array when it
  // is valid, else the valid entries sorted.
  void SortedEntries(const WbLeaf* leaf, std::vector<int>* order) const {
    order->clear();
    uint64_t bm = leaf->bitmap;
    if (bm & kSlotValid) {
      int count = std::min<int>(leaf->slot[0], cap_);
      for (int j = 1; j <= count; j++) order->push_back(leaf->slot[j]);
      return;
    }
    for (uint64_t b = bm & entry_mask_; b != 0; b &= b - 1) order->push_back(__builtin_ctzll(b) - 1);
    std::sort(order->begin(), order->end(),
              [&](int a, int b) { return keys_.CompareSlots(Ent(leaf, a)->key, Ent(leaf, b)->key) < 0; });
  }

  // A search needs nothing but the key.
  struct Probe {};
  static Probe MakeProbe(Arg /*key*/) { return {}; }

  // The entry index holding `key`, or -1: a binary search through the slot
  // array (wB+-Tree's search) when it is valid, else a scan of the bitmap.
  int FindInLeaf(const WbLeaf* leaf, Arg key, const Probe& /*probe*/) const {
    uint64_t bm = leaf->bitmap;
    if (bm & kSlotValid) {
      int lo = 1, hi = std::min<int>(leaf->slot[0], cap_);
      while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int i = leaf->slot[mid];
        int c = keys_.Compare(Ent(leaf, i)->key, key);
        if (c == 0) return i;
        if (c < 0) {
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
      return -1;
    }
    for (uint64_t b = bm & entry_mask_; b != 0; b &= b - 1) {
      int i = __builtin_ctzll(b) - 1;
      if (keys_.Equal(Ent(leaf, i)->key, key)) return i;
    }
    return -1;
  }

  // wB+-Tree's insert into a slot+bitmap leaf with a free entry (caller holds
  // the leaf lock): two NVM-atomic-write sections.
  Status InsertIntoLeaf(uint64_t leaf_off, Arg key, uint64_t value, const Probe& /*probe*/) {
    WbLeaf* leaf = LeafAt(leaf_off);
    PMTREE_ASSIGN_OR_RETURN(uint64_t slot, keys_.MakeSlot(key));
    std::vector<int> order;
    SortedEntries(leaf, &order);
    const uint64_t bm = leaf->bitmap;
    const int i = __builtin_ctzll(~bm & entry_mask_) - 1;
    WbEntry* e = Ent(leaf, i);
    WbEntry en{slot, value};
    pool_->Write(e, &en, sizeof(en));
    // Section 1: flush the entry (written to a free, invalid slot).  It must
    // be durable before the commit below; the next fence (invalidation or
    // slot array) orders it, so it needs no fence of its own.
    pool_->Flush(e, sizeof(en));
    if (bm & kSlotValid) {
      pool_->Store64(&leaf->bitmap, bm & ~kSlotValid);
      // Persist the cleared slot-valid bit before the slot array is rewritten,
      // so a crash mid-rewrite leaves a slot array nobody trusts.
      pool_->Persist(&leaf->bitmap, 8);
    }
    // Section 2: the new slot array, in the (now invalid) slot bytes.
    auto pos = std::lower_bound(order.begin(), order.end(), 0, [&](int a, int) {
      return keys_.Compare(Ent(leaf, a)->key, key) < 0;
    });
    order.insert(pos, i);
    uint8_t sa[64];
    sa[0] = static_cast<uint8_t>(order.size());
    for (size_t j = 0; j < order.size(); j++) sa[j + 1] = static_cast<uint8_t>(order[j]);
    pool_->Write(&leaf->slot[0], sa, order.size() + 1);
    // Persist the slot array before the bitmap declares it valid.
    pool_->Persist(&leaf->slot[0], order.size() + 1);
    pool_->Store64(&leaf->bitmap, (bm & ~kSlotValid) | EntryBit(i) | kSlotValid);
    // Persist the bitmap: one 8-byte write validates the entry and the slot
    // array together; the commit point of the insert.
    pool_->Persist(&leaf->bitmap, 8);
    return Status::Ok();
  }

  // The delete (caller holds the leaf lock): entry i's bit and the
  // slot-valid bit cleared together.
  void ClearEntry(WbLeaf* leaf, int i) {
    pool_->Store64(&leaf->bitmap, leaf->bitmap & ~EntryBit(i) & ~kSlotValid);
    // Persist the delete's one NVM atomic write: it clears the entry's bit
    // and the slot-valid bit together, so the slot array (which still lists
    // the entry) is never trusted again until an insert rewrites it.
    pool_->Persist(&leaf->bitmap, 8);
  }

  // The leaf's keys >= from (and <= *end), in key order: in slot order when
  // the slot array is valid.
  using ScanScratch = std::vector<int>;
  void ScanLeaf(const WbLeaf* leaf, Arg from, const Arg* end, std::span<Entry> out, size_t* n,
                ScanScratch* order) const {
    SortedEntries(leaf, order);
    for (int i : *order) {
      if (*n >= out.size()) break;
      const WbEntry* e = Ent(leaf, i);
      if (keys_.Compare(e->key, from) < 0) continue;
      if (end != nullptr && keys_.Compare(e->key, *end) > 0) break;
      out[(*n)++] = Entry(keys_.Load(e->key), e->value);
    }
  }

  // ---- split (redo log) ---------------------------------------------------------------------

  // Splits the full leaf `leaf_off` (caller holds its lock): the upper half
  // moves to *new_leaf, linked after it; *sep is the new leaf's first key.
  Status SplitLeaf(uint64_t leaf_off, uint64_t* new_leaf, Owned* sep) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t nl, pool_->allocator().Allocate(node_size_));
    this->NoteLeaf(nl);  // the leaf limit covers the new leaf before it can carry the magic
    WbLeaf* leaf = LeafAt(leaf_off);
    WbLeaf* nleaf = LeafAt(nl);
    std::vector<int> order;
    SortedEntries(leaf, &order);
    const size_t keep = order.size() / 2;
    const int m = static_cast<int>(order.size() - keep);
    for (int j = 0; j < m; j++) pool_->Write(Ent(nleaf, j), Ent(leaf, order[keep + j]), sizeof(WbEntry));
    uint8_t hdr[kMaxHeaderSize];
    // Without the leaf magic: the new leaf is free space until the log
    // names it (FinishSplit gives it the magic).
    MakeHeader(hdr, BitsUpTo(m) | kSlotValid, leaf->next, m);
    pool_->Write(nleaf, hdr, hdr_);
    // Persist the complete new leaf (upper half packed, valid slot array, the
    // old leaf's sibling) before the log names it: recovery redoes the split
    // from it.
    pool_->Persist(nleaf, hdr_ + 16 * m);
    int li = this->AcquireSplitLog();
    WbLog* log = &meta_->split_log[li];
    pool_->Store64(&log->leaf, leaf_off);
    pool_->Store64(&log->other, nl);
    // Persist the redo log before the old leaf changes, so a crash in the
    // middle of the three leaf updates below is finished by recovery.
    pool_->Persist(log, 16);
    FinishSplit(leaf_off, nl);
    this->ClearLog(log);
    this->ReleaseSplitLog(li);
    *new_leaf = nl;
    *sep = keys_.Load(Ent(nleaf, 0)->key);
    return Status::Ok();
  }

  // The logged part of a split, redone verbatim by recovery (idempotent):
  // the new leaf gets the leaf magic, the old leaf keeps its entries below
  // the new leaf's first key (and its magic), gets a fresh slot array, and
  // links the new leaf.
  void FinishSplit(uint64_t leaf_off, uint64_t nl) {
    WbLeaf* leaf = LeafAt(leaf_off);
    const uint64_t first = Ent(LeafAt(nl), LeafAt(nl)->slot[1])->key;
    uint64_t keep_bits = 0;
    std::vector<int> lower;
    for (uint64_t b = leaf->bitmap & entry_mask_; b != 0; b &= b - 1) {
      int i = __builtin_ctzll(b) - 1;
      if (keys_.CompareSlots(Ent(leaf, i)->key, first) < 0) {
        keep_bits |= EntryBit(i);
        lower.push_back(i);
      }
    }
    std::sort(lower.begin(), lower.end(),
              [&](int a, int b) { return keys_.CompareSlots(Ent(leaf, a)->key, Ent(leaf, b)->key) < 0; });
    // The new leaf's magic is flushed (by SetLeafMagic) only now that the
    // log naming it is durable: a crash from here on replays the split, which
    // links the new leaf, so it is never free space with the magic.  The
    // fence below makes it durable.
    this->SetLeafMagic(nl);
    // While the log is set, recovery redoes this whole function from the
    // complete new leaf, so these header stores need no order among
    // themselves: the lower half's slot array, the bitmap that drops the
    // moved entries (slot array valid, the magic's bits kept), the link.
    uint8_t sa[64];
    sa[0] = static_cast<uint8_t>(lower.size());
    for (size_t j = 0; j < lower.size(); j++) sa[j + 1] = static_cast<uint8_t>(lower[j]);
    pool_->Write(&leaf->slot[0], sa, lower.size() + 1);
    pool_->Store64(&leaf->bitmap, keep_bits | kSlotValid | this->BitmapMagicBits(leaf));
    pool_->Store64(&leaf->next, nl);
    // Persist the old leaf's new header (and the new leaf's magic flushed
    // above) before the log is cleared, so the split is complete and the new
    // leaf reachable once the log is gone.
    pool_->Persist(leaf, 17 + lower.size());
  }

  // Recovery rules (docs/trees/wbtree.md, "Recovery"); R1 is this
  // function, the others are LeafListTree::RecoverImpl's shared steps:
  //  R1 split log with both leaves named: the new leaf is complete (it was
  //     persisted before the log); redo FinishSplit on the old leaf.
  //  R2 split log with one word set (a torn log write): nothing happened; clear.
  //  R3 delete log set: redo the unlink if the predecessor (or head) still
  //     names the leaf; clear.
  //  R4 empty leaves (but the last one) leave the list through R3's protocol.
  //  R5 a leaf whose slot-valid bit is clear (crash inside an insert's
  //     section 2, or after a delete) is left so: its bitmap alone defines its
  //     entries, and the next insert rewrites the slot array.
  //  R6 the allocator is rebuilt from the reachable blocks and the DRAM index
  //     from the leaves' minimum keys.
  Status ReplaySplit(uint64_t cur, uint64_t nl) {
    const WbLeaf* n = LeafAt(nl);
    if (!(n->bitmap & kSlotValid) || n->slot[0] == 0 || n->slot[1] >= cap_)
      return Corrupt("split log", nl, 2, "new leaf of a logged split is incomplete");
    FinishSplit(cur, nl);  // R1
    return Status::Ok();
  }

  // ---- bulk load: the leaf image ------------------------------------------------------------

  // Entries packed from slot 0, identity slot array, slot-valid bit set.
  struct LoadState {};

  void PutLoadedEntry(WbLeaf* leaf, int j, uint64_t slot, uint64_t value, Arg /*key*/, LoadState* /*st*/) {
    WbEntry en{slot, value};
    pool_->Write(Ent(leaf, j), &en, sizeof(en));
  }

  void SealLoadedLeaf(WbLeaf* leaf, int m, uint64_t next, const LoadState& /*st*/) {
    uint8_t hdr[kMaxHeaderSize];
    MakeHeader(hdr, BitsUpTo(m) | kSlotValid, next, m);
    pool_->Write(leaf, hdr, hdr_);
    // Flush each loaded leaf now; the bulk load's single fence orders them
    // all before the head store that publishes the chain.
    pool_->Flush(leaf, hdr_ + 16 * m);
  }

  // ---- Verify: invariant 5 --------------------------------------------------------------------

  //  5. When the slot-valid bit is set, slot[0] equals the number of valid
  //     entries and slot[1..slot[0]] lists each valid entry once, in strictly
  //     ascending key order.
  Status CheckLeaf(uint64_t off, const WbLeaf* leaf) const {
    const uint64_t bm = leaf->bitmap;
    if (!(bm & kSlotValid)) return Status::Ok();
    int count = leaf->slot[0];
    if (count != __builtin_popcountll(bm & entry_mask_))
      return Corrupt("leaf", off, 5, "slot count " + std::to_string(count) + " != valid entries");
    uint64_t seen = 0;
    for (int j = 1; j <= count; j++) {
      int i = leaf->slot[j];
      if (i >= cap_ || !(bm & EntryBit(i)) || (seen & EntryBit(i)))
        return Corrupt("leaf", off, 5, "slot array names entry " + std::to_string(i) + " wrongly");
      seen |= EntryBit(i);
      if (j > 1 && keys_.CompareSlots(Ent(leaf, leaf->slot[j - 1])->key, Ent(leaf, i)->key) >= 0)
        return Corrupt("leaf", off, 5, "slot array not in ascending key order");
    }
    return Status::Ok();
  }

  void AddStats(const std::vector<uint64_t>& list, TreeStats* st) const {
    uint64_t invalid_slot_arrays = 0;
    for (uint64_t off : list)
      if (!(LeafAt(off)->bitmap & kSlotValid)) invalid_slot_arrays++;
    st->extra.emplace_back("leaves_with_invalid_slot_array", static_cast<double>(invalid_slot_arrays));
  }

  const uint32_t hdr_;  // leaf header size: entries start here
};

}  // namespace

PMTREE_REGISTRY_ENTRY_POINTS(WbTree);

}  // namespace wbtree
}  // namespace pmtree
