// SPDX-License-Identifier: Apache-2.0
//
// wbtree: wB+-Tree with slot+bitmap leaves on pmtree.  Read
// docs/trees/wbtree.md first; the layout is in layout.h.  Structure of this
// file: leaf helpers, point operations, split and leaf removal (with their
// logs), scan, bulk load, recovery, Verify/Stats, factories.  The DRAM inner
// index and the concurrency scheme are shared with fptree.

#include "trees/wbtree/wbtree.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trees/common/dram_inner_index.h"
#include "trees/common/keys.h"
#include "trees/wbtree/layout.h"

namespace pmtree {
namespace wbtree {
namespace {

std::string Hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status CheckExtra(const TreeOptions& o) {
  if (!o.extra.empty())
    return Status::InvalidArgument("wbtree: unknown option '" + o.extra.begin()->first +
                                   "' (wbtree has no extra options)");
  return Status::Ok();
}

Status CheckOptions(const TreeOptions& o, uint32_t* node_size) {
  PMTREE_RETURN_IF_ERROR(CheckExtra(o));
  uint32_t n = o.node_size == 0 ? kWbDefaultNodeSize : o.node_size;
  if (n != 256 && n != 512 && n != 1024)
    return Status::InvalidArgument("wbtree: invalid node size " + std::to_string(n) +
                                   " (valid: 256, 512, 1024)");
  *node_size = n;
  return Status::Ok();
}

template <class Keys>
class WbTree final : public BasicTree<typename Keys::Arg> {
 public:
  using Arg = typename Keys::Arg;
  using Owned = typename Keys::Owned;
  using Base = BasicTree<Arg>;
  using Entry = typename Base::Entry;
  using InputEntry = typename Base::InputEntry;
  using Index = DramInnerIndex<Keys>;

  WbTree(Pool* pool, uint64_t meta_off, uint32_t node_size)
      : pool_(pool),
        keys_(pool),
        meta_off_(meta_off),
        meta_(pool->At<WbMeta>(meta_off)),
        node_size_(node_size),
        hdr_(WbHeaderSize(node_size)),
        cap_(WbCapacity(node_size)),
        entry_bits_(((1ull << cap_) - 1) << 1),
        index_(pool) {}

  // Creation: meta and one empty leaf, persisted, then root slot 0 (the
  // commit point of creation).
  static Result<std::unique_ptr<Base>> Create(Pool* pool, const TreeOptions& options) {
    uint32_t node_size;
    PMTREE_RETURN_IF_ERROR(CheckOptions(options, &node_size));
    if (pool->root(0) != 0) return Status::Busy("wbtree: pool root slot 0 already holds a tree");
    PMTREE_ASSIGN_OR_RETURN(uint64_t meta_off, pool->allocator().Allocate(sizeof(WbMeta)));
    auto leaf_r = pool->allocator().Allocate(node_size);
    if (!leaf_r.ok()) {
      pool->allocator().Free(meta_off, sizeof(WbMeta));
      return leaf_r.status();
    }
    uint64_t leaf_off = *leaf_r;
    auto* leaf = pool->At<WbLeaf>(leaf_off);
    pool->Zero(leaf, WbHeaderSize(node_size));
    pool->Store64(&leaf->bitmap, kSlotValid);  // an empty, valid slot array
    // Flush the empty leaf's header; the meta block's fence below orders it
    // before root slot 0 names the tree.
    pool->Flush(leaf, WbHeaderSize(node_size));
    auto* meta = pool->At<WbMeta>(meta_off);
    pool->Zero(meta, sizeof(WbMeta));
    WbMeta head{};
    head.magic = kWbMagic;
    head.head = leaf_off;
    head.node_size = node_size;
    head.key_kind = static_cast<uint32_t>(Keys::kKind);
    pool->Write(meta, &head, 64);
    // Persist the meta block (and its cleared logs) before root slot 0 names
    // it: SetRoot is the commit point of creation.
    pool->Persist(meta, sizeof(WbMeta));
    pool->SetRoot(0, meta_off);
    auto t = std::make_unique<WbTree>(pool, meta_off, node_size);
    t->index_.Build({{Owned{}, leaf_off}});
    return std::unique_ptr<Base>(std::move(t));
  }

  static Result<std::unique_ptr<Base>> Recover(Pool* pool, const TreeOptions& options) {
    PMTREE_RETURN_IF_ERROR(CheckExtra(options));
    uint64_t meta_off = pool->root(0);
    if (meta_off == 0) return Status::NotFound("wbtree: pool root slot 0 is empty (no tree in this pool)");
    if (meta_off % 64 != 0 || !pool->InHeap(meta_off, sizeof(WbMeta)))
      return Status::Corruption("wbtree: root slot 0 holds " + Hex(meta_off) + ", outside the heap");
    const auto* meta = pool->At<WbMeta>(meta_off);
    if (meta->magic != kWbMagic)
      return Status::Corruption("wbtree meta at offset " + Hex(meta_off) + ": bad magic (invariant 1)");
    if (meta->node_size != 256 && meta->node_size != 512 && meta->node_size != 1024)
      return Status::Corruption("wbtree meta at offset " + Hex(meta_off) + ": node size " +
                                std::to_string(meta->node_size) + " invalid (invariant 1)");
    if (meta->key_kind != static_cast<uint32_t>(Keys::kKind))
      return Status::Incompatible(std::string("wbtree: the pool holds a tree with ") +
                                  (meta->key_kind == 0 ? "u64" : "byte-string") + " keys");
    auto t = std::make_unique<WbTree>(pool, meta_off, meta->node_size);
    PMTREE_RETURN_IF_ERROR(t->RecoverImpl());
    return std::unique_ptr<Base>(std::move(t));
  }

  std::string_view name() const override { return "wbtree"; }
  uint32_t capabilities() const override {
    return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill;
  }

  // ---- point operations ---------------------------------------------------------------

  bool Lookup(Arg key, uint64_t* value) override {
    auto guard = pool_->epochs().Protect();
    for (;;) {
      auto r = index_.Find(key);
      size_t s = locks_.StripeOf(r.leaf);
      locks_.LockShared(s);
      if (index_.root() != r.root) {  // a split or removal completed: re-route
        locks_.UnlockShared(s);
        continue;
      }
      const WbLeaf* leaf = Leaf(r.leaf);
      int i = FindInLeaf(leaf, key);
      if (i >= 0) *value = Ent(leaf, i)->value;
      locks_.UnlockShared(s);
      return i >= 0;
    }
  }

  Result<bool> Insert(Arg key, uint64_t value) override { return Put(key, value, Mode::kInsert); }
  Result<bool> Update(Arg key, uint64_t value) override { return Put(key, value, Mode::kUpdate); }
  Result<bool> Upsert(Arg key, uint64_t value) override { return Put(key, value, Mode::kUpsert); }

  Result<bool> Remove(Arg key) override {
    PMTREE_RETURN_IF_ERROR(Keys::CheckArg(key));
    auto guard = pool_->epochs().Protect();
    bool emptied = false;
    uint64_t slot = 0;
    for (;;) {
      auto r = index_.Find(key);
      size_t s = locks_.StripeOf(r.leaf);
      locks_.Lock(s);
      if (index_.root() != r.root) {
        locks_.Unlock(s);
        continue;
      }
      WbLeaf* leaf = Leaf(r.leaf);
      int i = FindInLeaf(leaf, key);
      if (i < 0) {
        locks_.Unlock(s);
        return false;
      }
      slot = Ent(leaf, i)->key;
      uint64_t bm = leaf->bitmap & ~EntryBit(i) & ~kSlotValid;
      pool_->Store64(&leaf->bitmap, bm);
      // Persist the delete's one NVM atomic write: it clears the entry's bit
      // and the slot-valid bit together, so the slot array (which still lists
      // the entry) is never trusted again until an insert rewrites it.
      pool_->Persist(&leaf->bitmap, 8);
      emptied = (bm & entry_bits_) == 0;
      locks_.Unlock(s);
      break;
    }
    keys_.Release(slot);
    if (emptied) TryRemoveLeaf(key);
    return true;
  }

  // ---- scan ------------------------------------------------------------------------------

  // Leaf by leaf through the DRAM index, as fptree: each leaf read under its
  // shared lock and validated, the next leaf found by routing the previous
  // leaf's upper bound.  A leaf with a valid slot array is read in slot order.
  size_t Scan(Arg start, const Arg* end, std::span<Entry> out) override {
    auto guard = pool_->epochs().Protect();
    size_t n = 0;
    Owned cur = Owned(start);
    std::vector<int> order;
    while (n < out.size()) {
      std::optional<Owned> hi;
      for (;;) {
        auto r = index_.Find(Index::AsArg(cur));
        size_t s = locks_.StripeOf(r.leaf);
        locks_.LockShared(s);
        if (index_.root() != r.root) {
          locks_.UnlockShared(s);
          continue;
        }
        const WbLeaf* leaf = Leaf(r.leaf);
        SortedEntries(leaf, &order);
        for (int i : order) {
          if (n >= out.size()) break;
          const WbEntry* e = Ent(leaf, i);
          if (keys_.Compare(e->key, Index::AsArg(cur)) < 0) continue;
          if (end != nullptr && keys_.Compare(e->key, *end) > 0) break;
          out[n++] = Entry(keys_.Load(e->key), e->value);
        }
        if (r.hi != nullptr) hi = *r.hi;
        locks_.UnlockShared(s);
        break;
      }
      if (!hi) break;
      if (end != nullptr && Index::Cmp(*hi, *end) > 0) break;
      cur = std::move(*hi);
    }
    return n;
  }

  // ---- bulk load ---------------------------------------------------------------------------

  // Builds a fresh chain of leaves (entries packed from slot 0, identity slot
  // array, slot-valid bit set) filled to `fill`, persists it, and makes it the
  // tree with one persisted store of the head.
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override {
    if (!(fill > 0 && fill <= 1)) return Status::InvalidArgument("bulk load: fill must be in (0, 1]");
    for (size_t i = 0; i < sorted.size(); i++) {
      PMTREE_RETURN_IF_ERROR(Keys::CheckArg(sorted[i].first));
      if (i > 0 && !(sorted[i - 1].first < sorted[i].first))
        return Status::InvalidArgument("bulk load: input not strictly ascending at index " + std::to_string(i));
    }
    for (uint64_t off = meta_->head; off != 0; off = Leaf(off)->next)
      if (Leaf(off)->bitmap & entry_bits_) return Status::InvalidArgument("bulk load: tree not empty");
    if (sorted.empty()) return Status::Ok();
    const int per = std::clamp(static_cast<int>(fill * cap_ + 1e-9), 1, cap_);
    const size_t nleaves = (sorted.size() + per - 1) / per;
    std::vector<uint64_t> leaves;
    std::vector<uint64_t> slots;
    auto undo = [&](Status st) {
      for (uint64_t l : leaves) pool_->allocator().Free(l, node_size_);
      if constexpr (!Keys::kInline) {
        for (uint64_t k : slots) pool_->allocator().Free(k & BytesKeys::kOffsetMask, keys_.SlotBytes(k));
      }
      return st;
    };
    for (size_t i = 0; i < nleaves; i++) {
      auto r = pool_->allocator().Allocate(node_size_);
      if (!r.ok()) return undo(r.status());
      leaves.push_back(*r);
    }
    std::vector<std::pair<Owned, uint64_t>> mins;
    std::vector<uint8_t> hdr(hdr_);
    for (size_t li = 0; li < nleaves; li++) {
      WbLeaf* leaf = Leaf(leaves[li]);
      size_t b = li * per, e = std::min(sorted.size(), b + per);
      int m = static_cast<int>(e - b);
      for (size_t j = b; j < e; j++) {
        auto sr = keys_.MakeSlot(sorted[j].first);
        if (!sr.ok()) return undo(sr.status());
        slots.push_back(*sr);
        WbEntry en{*sr, sorted[j].second};
        pool_->Write(Ent(leaf, static_cast<int>(j - b)), &en, sizeof(en));
      }
      MakeHeader(&hdr, BitsUpTo(m) | kSlotValid, li + 1 < nleaves ? leaves[li + 1] : 0, m);
      pool_->Write(leaf, hdr.data(), hdr_);
      // Flush each loaded leaf now; the single fence below orders them all
      // before the head store that publishes the chain.
      pool_->Flush(leaf, hdr_ + 16 * m);
      mins.emplace_back(Owned(sorted[b].first), leaves[li]);
    }
    // Every loaded leaf reaches PM before the head names the chain.
    pool_->Fence();
    std::vector<uint64_t> old;
    for (uint64_t off = meta_->head; off != 0; off = Leaf(off)->next) old.push_back(off);
    pool_->Store64(&meta_->head, leaves[0]);
    // Persist the head: the commit point of the whole bulk load.
    pool_->Persist(&meta_->head, 8);
    for (uint64_t off : old) pool_->allocator().Retire(off, node_size_);
    index_.Build(std::move(mins));
    return Status::Ok();
  }

  // ---- introspection --------------------------------------------------------------------------

  // Invariants (numbered; docs/trees/wbtree.md lists them with their reasons):
  //  1. The meta block has the magic, a valid node size and this key kind.
  //  2. Every log is clear when no operation runs.
  //  3. The leaf list from `head` visits 64 B aligned leaves inside the heap,
  //     without a cycle; head is never 0.
  //  4. No bitmap bit above entry capacity is set.
  //  5. When the slot-valid bit is set, slot[0] equals the number of valid
  //     entries and slot[1..slot[0]] lists each valid entry once, in strictly
  //     ascending key order.
  //  6. Every valid key slot is well formed (byte keys: blob in heap, hash).
  //  7. Valid keys ascend strictly along the list: unique inside a leaf, and
  //     every key of a leaf is below every key of the next leaf.
  //  8. The DRAM index is well shaped, lists exactly the leaves of the list
  //     in the same order, and every key of a leaf lies in its index range.
  //  9. Pool bytes reached (meta, leaves, key blobs) == allocator bytes in use.
  Status Verify() override {
    // No operation runs (the interface's precondition): free what earlier
    // operations retired, so invariant 9 compares with what is really in use.
    pool_->epochs().DrainAll();
    auto guard = pool_->epochs().Protect();
    if (meta_->magic != kWbMagic || meta_->node_size != node_size_ ||
        meta_->key_kind != static_cast<uint32_t>(Keys::kKind))
      return Corrupt("meta", meta_off_, 1, "magic, node size or key kind wrong");
    if (meta_->delete_log.leaf != 0 || meta_->delete_log.other != 0)
      return Corrupt("delete log", meta_off_ + offsetof(WbMeta, delete_log), 2, "log not clear");
    for (int i = 0; i < kSplitLogs; i++)
      if (meta_->split_log[i].leaf != 0 || meta_->split_log[i].other != 0)
        return Corrupt("split log", meta_off_ + offsetof(WbMeta, split_log) + 64 * i, 2, "log not clear");
    std::vector<uint64_t> list;
    PMTREE_RETURN_IF_ERROR(CollectLeaves(&list));
    uint64_t bytes = sizeof(WbMeta) + list.size() * node_size_;
    bool have_prev = false;
    uint64_t prev_max = 0;
    std::vector<uint64_t> sorted;
    for (uint64_t off : list) {
      const WbLeaf* leaf = Leaf(off);
      const uint64_t bm = leaf->bitmap;
      if (bm & ~(entry_bits_ | kSlotValid)) return Corrupt("leaf", off, 4, "bitmap bit beyond capacity");
      sorted.clear();
      for (uint64_t b = bm & entry_bits_; b != 0; b &= b - 1) {
        uint64_t k = Ent(leaf, __builtin_ctzll(b) - 1)->key;
        Status st = keys_.CheckSlot(k);
        if (!st.ok()) return Corrupt("leaf", off, 6, std::string(st.message()));
        bytes += keys_.SlotBytes(k);
        sorted.push_back(k);
      }
      if (bm & kSlotValid) {
        int count = leaf->slot[0];
        if (count != __builtin_popcountll(bm & entry_bits_))
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
      }
      std::sort(sorted.begin(), sorted.end(), [this](uint64_t a, uint64_t b) { return keys_.CompareSlots(a, b) < 0; });
      for (size_t j = 1; j < sorted.size(); j++)
        if (keys_.CompareSlots(sorted[j - 1], sorted[j]) == 0) return Corrupt("leaf", off, 7, "duplicate key");
      if (!sorted.empty()) {
        if (have_prev && keys_.CompareSlots(prev_max, sorted.front()) >= 0)
          return Corrupt("leaf", off, 7, "keys not above the previous leaf's");
        prev_max = sorted.back();
        have_prev = true;
      }
    }
    std::string why;
    if (!index_.CheckShape(&why)) return Corrupt("dram index", 0, 8, why);
    size_t pos = 0;
    Status bad;
    index_.ForEachLeaf([&](uint64_t leaf_off, const Owned* lo, const Owned* hi) {
      if (!bad.ok()) return;
      if (pos >= list.size() || list[pos] != leaf_off) {
        bad = Corrupt("dram index", leaf_off, 8, "leaf order differs from the leaf list");
        return;
      }
      pos++;
      const WbLeaf* leaf = Leaf(leaf_off);
      for (uint64_t b = leaf->bitmap & entry_bits_; b != 0; b &= b - 1) {
        uint64_t k = Ent(leaf, __builtin_ctzll(b) - 1)->key;
        if ((lo && keys_.Compare(k, Index::AsArg(*lo)) < 0) || (hi && keys_.Compare(k, Index::AsArg(*hi)) >= 0)) {
          bad = Corrupt("leaf", leaf_off, 8, "key outside the leaf's index range");
          return;
        }
      }
    });
    PMTREE_RETURN_IF_ERROR(bad);
    if (pos != list.size()) return Corrupt("dram index", 0, 8, "index misses leaves of the list");
    if (bytes != pool_->allocator().bytes_in_use())
      return Corrupt("pool", 0, 9,
                     "bytes reached " + std::to_string(bytes) + " != allocator bytes in use " +
                         std::to_string(pool_->allocator().bytes_in_use()));
    return Status::Ok();
  }

  TreeStats Stats() override {
    auto guard = pool_->epochs().Protect();
    TreeStats st;
    std::vector<uint64_t> list;
    (void)CollectLeaves(&list);
    st.leaf_nodes = list.size();
    st.pm_bytes = sizeof(WbMeta) + list.size() * node_size_;
    uint64_t invalid_slot_arrays = 0;
    for (uint64_t off : list) {
      const WbLeaf* leaf = Leaf(off);
      if (!(leaf->bitmap & kSlotValid)) invalid_slot_arrays++;
      for (uint64_t b = leaf->bitmap & entry_bits_; b != 0; b &= b - 1) {
        st.entries++;
        st.pm_bytes += keys_.SlotBytes(Ent(leaf, __builtin_ctzll(b) - 1)->key);
      }
    }
    uint32_t levels;
    index_.Measure(&levels, &st.inner_nodes, &st.dram_bytes);
    st.dram_bytes += sizeof(LeafLocks);
    // A lone leaf is a one-level tree even though the index has a node over it.
    st.height = st.entries == 0 ? 0 : (list.size() == 1 ? 1 : levels + 1);
    st.leaf_fill = list.empty() ? 0 : static_cast<double>(st.entries) / (list.size() * cap_);
    st.extra.emplace_back("leaf_capacity", cap_);
    st.extra.emplace_back("splits", static_cast<double>(splits_.load()));
    st.extra.emplace_back("leaf_removals", static_cast<double>(removals_.load()));
    st.extra.emplace_back("leaves_with_invalid_slot_array", static_cast<double>(invalid_slot_arrays));
    return st;
  }

  // Nothing volatile needs saving: recovery rebuilds the DRAM index from the
  // leaves, and the pool saves the allocator state.
  Status Close() override { return pool_->Close(); }

 private:
  enum class Mode { kInsert, kUpdate, kUpsert };

  WbLeaf* Leaf(uint64_t off) const { return pool_->At<WbLeaf>(off); }
  WbEntry* Ent(const WbLeaf* leaf, int i) const {
    return reinterpret_cast<WbEntry*>(reinterpret_cast<char*>(const_cast<WbLeaf*>(leaf)) + hdr_ + 16 * i);
  }
  static uint64_t EntryBit(int i) { return 1ull << (i + 1); }
  static uint64_t BitsUpTo(int m) { return ((1ull << m) - 1) << 1; }

  Status Corrupt(const char* what, uint64_t off, int inv, const std::string& msg) const {
    return Status::Corruption(std::string("wbtree ") + what + " at offset " + Hex(off) + ": invariant " +
                              std::to_string(inv) + " violated: " + msg);
  }

  // A leaf header image: bitmap, next, slot array [m, 0, 1, ..., m-1].
  void MakeHeader(std::vector<uint8_t>* h, uint64_t bitmap, uint64_t next, int m) const {
    std::fill(h->begin(), h->end(), 0);
    std::memcpy(h->data(), &bitmap, 8);
    std::memcpy(h->data() + 8, &next, 8);
    (*h)[16] = static_cast<uint8_t>(m);
    for (int j = 0; j < m; j++) (*h)[17 + j] = static_cast<uint8_t>(j);
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
    for (uint64_t b = bm & entry_bits_; b != 0; b &= b - 1) order->push_back(__builtin_ctzll(b) - 1);
    std::sort(order->begin(), order->end(),
              [&](int a, int b) { return keys_.CompareSlots(Ent(leaf, a)->key, Ent(leaf, b)->key) < 0; });
  }

  // The entry index holding `key`, or -1: a binary search through the slot
  // array (wB+-Tree's search) when it is valid, else a scan of the bitmap.
  int FindInLeaf(const WbLeaf* leaf, Arg key) const {
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
    for (uint64_t b = bm & entry_bits_; b != 0; b &= b - 1) {
      int i = __builtin_ctzll(b) - 1;
      if (keys_.Equal(Ent(leaf, i)->key, key)) return i;
    }
    return -1;
  }

  // wB+-Tree's insert into a slot+bitmap leaf with a free entry (caller holds
  // the leaf lock): two NVM-atomic-write sections.
  Status InsertIntoLeaf(uint64_t leaf_off, Arg key, uint64_t value) {
    WbLeaf* leaf = Leaf(leaf_off);
    PMTREE_ASSIGN_OR_RETURN(uint64_t slot, keys_.MakeSlot(key));
    std::vector<int> order;
    SortedEntries(leaf, &order);
    const uint64_t bm = leaf->bitmap;
    const int i = __builtin_ctzll(~bm & entry_bits_) - 1;
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

  Result<bool> Put(Arg key, uint64_t value, Mode mode) {
    PMTREE_RETURN_IF_ERROR(Keys::CheckArg(key));
    auto guard = pool_->epochs().Protect();
    for (;;) {
      auto r = index_.Find(key);
      size_t s = locks_.StripeOf(r.leaf);
      locks_.Lock(s);
      if (index_.root() != r.root) {
        locks_.Unlock(s);
        continue;
      }
      WbLeaf* leaf = Leaf(r.leaf);
      int i = FindInLeaf(leaf, key);
      if (i >= 0) {
        if (mode == Mode::kInsert) {
          locks_.Unlock(s);
          return false;
        }
        pool_->Store64(&Ent(leaf, i)->value, value);
        // Persist the new value (one failure-atomic 8-byte word) before the
        // lock is released, so no reader sees an unpersisted value.
        pool_->Persist(&Ent(leaf, i)->value, 8);
        locks_.Unlock(s);
        return mode == Mode::kUpdate;
      }
      if (mode == Mode::kUpdate) {
        locks_.Unlock(s);
        return false;
      }
      if ((leaf->bitmap & entry_bits_) != entry_bits_) {
        Status st = InsertIntoLeaf(r.leaf, key, value);
        locks_.Unlock(s);
        if (!st.ok()) return st;
        return true;
      }
      // Full leaf: split under the leaf lock, insert into the proper half while
      // the new leaf is still private, then publish the split in the index.
      uint64_t new_leaf = 0;
      Owned sep;
      Status st = SplitLeaf(r.leaf, &new_leaf, &sep);
      if (!st.ok()) {
        locks_.Unlock(s);
        return st;
      }
      uint64_t target = Index::Cmp(sep, key) <= 0 ? new_leaf : r.leaf;
      Status ins = InsertIntoLeaf(target, key, value);
      {
        std::lock_guard<std::mutex> smo(smo_mu_);
        index_.InsertSplit(sep, new_leaf);
      }
      locks_.Unlock(s);
      splits_.fetch_add(1, std::memory_order_relaxed);
      if (!ins.ok()) return ins;
      return true;
    }
  }

  // ---- split (redo log) ---------------------------------------------------------------------

  int AcquireSplitLog() {
    for (int spins = 0;; spins++) {
      uint32_t m = split_logs_busy_.load(std::memory_order_relaxed);
      if (m != (1u << kSplitLogs) - 1) {
        int i = __builtin_ctz(~m);
        if (split_logs_busy_.compare_exchange_weak(m, m | (1u << i), std::memory_order_acquire)) return i;
      } else if (spins > 64) {
        sched_yield();
      }
    }
  }
  void ReleaseSplitLog(int i) { split_logs_busy_.fetch_and(~(1u << i), std::memory_order_release); }

  void ClearLog(WbLog* log) {
    pool_->Store64(&log->leaf, 0);
    pool_->Store64(&log->other, 0);
    // Persist the cleared log so recovery does not replay a finished
    // operation over later changes to these leaves.
    pool_->Persist(log, 16);
  }

  // Splits the full leaf `leaf_off` (caller holds its lock): the upper half
  // moves to *new_leaf, linked after it; *sep is the new leaf's first key.
  Status SplitLeaf(uint64_t leaf_off, uint64_t* new_leaf, Owned* sep) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t nl, pool_->allocator().Allocate(node_size_));
    WbLeaf* leaf = Leaf(leaf_off);
    WbLeaf* nleaf = Leaf(nl);
    std::vector<int> order;
    SortedEntries(leaf, &order);
    const size_t keep = order.size() / 2;
    const int m = static_cast<int>(order.size() - keep);
    for (int j = 0; j < m; j++) pool_->Write(Ent(nleaf, j), Ent(leaf, order[keep + j]), sizeof(WbEntry));
    std::vector<uint8_t> hdr(hdr_);
    MakeHeader(&hdr, BitsUpTo(m) | kSlotValid, leaf->next, m);
    pool_->Write(nleaf, hdr.data(), hdr_);
    // Persist the complete new leaf (upper half packed, valid slot array, the
    // old leaf's sibling) before the log names it: recovery redoes the split
    // from it.
    pool_->Persist(nleaf, hdr_ + 16 * m);
    int li = AcquireSplitLog();
    WbLog* log = &meta_->split_log[li];
    pool_->Store64(&log->leaf, leaf_off);
    pool_->Store64(&log->other, nl);
    // Persist the redo log before the old leaf changes, so a crash in the
    // middle of the three leaf updates below is finished by recovery.
    pool_->Persist(log, 16);
    FinishSplit(leaf_off, nl);
    ClearLog(log);
    ReleaseSplitLog(li);
    *new_leaf = nl;
    *sep = keys_.Load(Ent(nleaf, 0)->key);
    return Status::Ok();
  }

  // The logged part of a split, redone verbatim by recovery (idempotent):
  // the old leaf keeps its entries below the new leaf's first key, gets a
  // fresh slot array, and links the new leaf.
  void FinishSplit(uint64_t leaf_off, uint64_t nl) {
    WbLeaf* leaf = Leaf(leaf_off);
    const uint64_t first = Ent(Leaf(nl), Leaf(nl)->slot[1])->key;
    uint64_t keep_bits = 0;
    std::vector<int> lower;
    for (uint64_t b = leaf->bitmap & entry_bits_; b != 0; b &= b - 1) {
      int i = __builtin_ctzll(b) - 1;
      if (keys_.CompareSlots(Ent(leaf, i)->key, first) < 0) {
        keep_bits |= EntryBit(i);
        lower.push_back(i);
      }
    }
    std::sort(lower.begin(), lower.end(),
              [&](int a, int b) { return keys_.CompareSlots(Ent(leaf, a)->key, Ent(leaf, b)->key) < 0; });
    // While the log is set, recovery redoes this whole function from the
    // complete new leaf, so these header stores need no order among
    // themselves: the lower half's slot array, the bitmap that drops the
    // moved entries (slot array valid), the link.
    uint8_t sa[64];
    sa[0] = static_cast<uint8_t>(lower.size());
    for (size_t j = 0; j < lower.size(); j++) sa[j + 1] = static_cast<uint8_t>(lower[j]);
    pool_->Write(&leaf->slot[0], sa, lower.size() + 1);
    pool_->Store64(&leaf->bitmap, keep_bits | kSlotValid);
    pool_->Store64(&leaf->next, nl);
    // Persist the old leaf's new header before the log is cleared, so the
    // split is complete and the new leaf reachable once the log is gone.
    pool_->Persist(leaf, 17 + lower.size());
  }

  // ---- leaf removal (delete log) ------------------------------------------------------------

  // Unlinks `leaf` (empty) from the list after `prev` (0: it is the head).
  // Caller holds smo_mu_ (or is recovery) and the locks of both leaves.
  void UnlinkLeaf(uint64_t prev, uint64_t leaf) {
    WbLog* log = &meta_->delete_log;
    pool_->Store64(&log->leaf, leaf);
    pool_->Store64(&log->other, prev);
    // Persist the delete log before the unlink, so recovery can finish an
    // interrupted unlink.
    pool_->Persist(log, 16);
    uint64_t next = Leaf(leaf)->next;
    uint64_t* link = prev != 0 ? &Leaf(prev)->next : &meta_->head;
    pool_->Store64(link, next);
    // Persist the unlink before the log is cleared.
    pool_->Persist(link, 8);
    ClearLog(log);
  }

  // Best effort: a leaf emptied by a delete leaves the list and the index.
  // Gives up (the empty leaf stays, which every invariant allows) when a
  // concurrent operation changed the neighbourhood.
  void TryRemoveLeaf(Arg key) {
    auto r = index_.FindWithPrev(key);
    uint64_t leaf = r.leaf, prev = r.prev;
    auto held = locks_.LockOrdered({prev, leaf});
    {
      std::lock_guard<std::mutex> smo(smo_mu_);
      auto r2 = index_.FindWithPrev(key);
      const WbLeaf* l = Leaf(leaf);
      bool linked = prev != 0 ? Leaf(prev)->next == leaf : meta_->head == leaf;
      if (r2.leaf == leaf && r2.prev == prev && (l->bitmap & entry_bits_) == 0 && linked &&
          !(prev == 0 && l->next == 0)) {
        UnlinkLeaf(prev, leaf);
        index_.RemoveLeaf(key, leaf);
        pool_->allocator().Retire(leaf, node_size_);
        removals_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    locks_.UnlockAll(held);
  }

  // ---- recovery ------------------------------------------------------------------------------

  Status CheckLeafOff(uint64_t off, const char* what) const {
    if (off % 64 != 0 || !pool_->InHeap(off, node_size_))
      return Status::Corruption(std::string("wbtree ") + what + ": leaf offset " + Hex(off) + " outside the heap");
    return Status::Ok();
  }

  Status CollectLeaves(std::vector<uint64_t>* list) const {
    const uint64_t limit = pool_->size() / node_size_ + 1;
    if (meta_->head == 0) return Corrupt("meta", meta_off_, 3, "head is 0");
    for (uint64_t off = meta_->head; off != 0; off = Leaf(off)->next) {
      PMTREE_RETURN_IF_ERROR(CheckLeafOff(off, "leaf list (invariant 3)"));
      if (list->size() >= limit) return Corrupt("leaf list", off, 3, "cycle");
      list->push_back(off);
    }
    return Status::Ok();
  }

  // Recovery rules (docs/trees/wbtree.md, "Recovery"):
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
  // Each step is idempotent, so a crash during recovery is recovered again.
  Status RecoverImpl() {
    for (int i = 0; i < kSplitLogs; i++) {
      WbLog* log = &meta_->split_log[i];
      uint64_t cur = log->leaf, nl = log->other;
      if (cur != 0 && nl != 0) {
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(cur, "split log"));
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(nl, "split log"));
        const WbLeaf* n = Leaf(nl);
        if (!(n->bitmap & kSlotValid) || n->slot[0] == 0 || n->slot[1] >= cap_)
          return Corrupt("split log", nl, 2, "new leaf of a logged split is incomplete");
        FinishSplit(cur, nl);  // R1
      }
      if (cur != 0 || nl != 0) ClearLog(log);  // R2
    }
    {
      WbLog* log = &meta_->delete_log;
      uint64_t leaf = log->leaf, prev = log->other;
      if (leaf != 0) {
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(leaf, "delete log"));
        if (prev != 0) PMTREE_RETURN_IF_ERROR(CheckLeafOff(prev, "delete log"));
        uint64_t* link = prev != 0 ? &Leaf(prev)->next : &meta_->head;
        if (*link == leaf) {
          pool_->Store64(link, Leaf(leaf)->next);
          // R3: persist the redone unlink before the log is cleared.
          pool_->Persist(link, 8);
        }
      }
      if (leaf != 0 || prev != 0) ClearLog(log);
    }
    std::vector<uint64_t> list;
    PMTREE_RETURN_IF_ERROR(CollectLeaves(&list));
    // R4: drop empty leaves, keeping at least one.
    std::vector<uint64_t> kept;
    for (size_t i = 0; i < list.size(); i++) {
      WbLeaf* leaf = Leaf(list[i]);
      if (leaf->bitmap & ~(entry_bits_ | kSlotValid)) return Corrupt("leaf", list[i], 4, "bitmap bit beyond capacity");
      bool last_standing = kept.empty() && i + 1 == list.size();
      if ((leaf->bitmap & entry_bits_) == 0 && !last_standing) {
        UnlinkLeaf(kept.empty() ? 0 : kept.back(), list[i]);
        continue;
      }
      kept.push_back(list[i]);
    }
    // R6.
    Allocator& a = pool_->allocator();
    a.BeginRebuild();
    PMTREE_RETURN_IF_ERROR(a.MarkUsed(meta_off_, sizeof(WbMeta)));
    std::vector<std::pair<Owned, uint64_t>> mins;
    for (uint64_t off : kept) {
      PMTREE_RETURN_IF_ERROR(a.MarkUsed(off, node_size_));
      const WbLeaf* leaf = Leaf(off);
      std::optional<uint64_t> min;
      for (uint64_t b = leaf->bitmap & entry_bits_; b != 0; b &= b - 1) {
        uint64_t k = Ent(leaf, __builtin_ctzll(b) - 1)->key;
        Status st = keys_.MarkUsed(k);
        if (!st.ok()) return st.Annotate("wbtree leaf at offset " + Hex(off));
        if (!min || keys_.CompareSlots(k, *min) < 0) min = k;
      }
      mins.emplace_back(min ? keys_.Load(*min) : Owned{}, off);
    }
    a.EndRebuild();
    index_.Build(std::move(mins));
    return Status::Ok();
  }

  Pool* const pool_;
  Keys keys_;
  const uint64_t meta_off_;
  WbMeta* const meta_;
  const uint32_t node_size_;
  const uint32_t hdr_;
  const int cap_;
  const uint64_t entry_bits_;
  Index index_;
  LeafLocks locks_;
  std::mutex smo_mu_;  // serialises index changes and leaf removals
  std::atomic<uint32_t> split_logs_busy_{0};
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> removals_{0};
};

}  // namespace
}  // namespace wbtree

Result<std::unique_ptr<Tree>> CreateWbTree(Pool* pool, const TreeOptions& options) {
  return wbtree::WbTree<U64Keys>::Create(pool, options);
}
Result<std::unique_ptr<Tree>> RecoverWbTree(Pool* pool, const TreeOptions& options) {
  return wbtree::WbTree<U64Keys>::Recover(pool, options);
}
Result<std::unique_ptr<BytesTree>> CreateWbTreeBytes(Pool* pool, const TreeOptions& options) {
  return wbtree::WbTree<BytesKeys>::Create(pool, options);
}
Result<std::unique_ptr<BytesTree>> RecoverWbTreeBytes(Pool* pool, const TreeOptions& options) {
  return wbtree::WbTree<BytesKeys>::Recover(pool, options);
}

}  // namespace pmtree
