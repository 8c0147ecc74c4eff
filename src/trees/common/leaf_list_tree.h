// SPDX-License-Identifier: Apache-2.0
//
// LeafListTree: the code that the leaf-list designs (fptree, wbtree) share.
// Both keep a singly linked list of PM leaves anchored in a LeafListMeta
// (trees/common/leaf_list_layout.h), inner nodes in DRAM (DramInnerIndex,
// rebuilt from the leaves at recovery), striped leaf locks with root
// validation, a logged split and a logged unlink of emptied leaves.  What is
// the same in both lives here, written once:
//
//  - creation (meta block, first leaf, root slot 0) and the recovery entry
//    checks of the meta block;
//  - the point operations' routing, locking and validation (Lookup, Put,
//    Remove), the update of a value in place, the leaf-by-leaf scan;
//  - the bulk load's chain building and its one-store commit;
//  - the split-log queue, clearing a log, the logged leaf unlink
//    (UnlinkLeaf / TryRemoveLeaf) and its recovery replay, the leaf-list
//    walk, dropping empty leaves at recovery, the allocator and index
//    rebuild;
//  - Verify's invariants 1-4 and 6-9 and Stats.
//
// A design derives from LeafListTree<Derived, KP, Leaf, Entry> (CRTP) and
// supplies what differs: its leaf format (how a key is found, inserted and
// cleared, how a leaf is scanned in key order), its split and the split log's
// replay, its bulk-load leaf image and its invariant 5.  Hooks it must define
// (called through the derived type, no virtual dispatch; they may be private
// when the design befriends its base, as FpTree and WbTree do):
//
//   static constexpr LeafListTraits kTraits;     name, magic, default node size, bitmap layout
//   static int Capacity(uint32_t node_size);     entries per leaf
//   static uint32_t EntriesOffset(uint32_t node_size);  byte offset of entry 0
//   static void InitEmptyLeaf(Pool*, Leaf*, uint32_t node_size);  writes and flushes
//   using Probe; static Probe MakeProbe(Arg);    per-key search state
//   int FindInLeaf(const Leaf*, Arg, const Probe&) const;  entry index or -1
//   Status InsertIntoLeaf(uint64_t leaf, Arg, uint64_t value, const Probe&);
//   void ClearEntry(Leaf*, int i);               the delete's persisted bitmap write
//   Status SplitLeaf(uint64_t leaf, uint64_t* new_leaf, Owned* sep);
//   Status ReplaySplit(uint64_t leaf, uint64_t new_leaf);  recovery of a set split log
//   using ScanScratch;
//   void ScanLeaf(const Leaf*, Arg from, const Arg* end, std::span<Entry> out, size_t* n,
//                 ScanScratch*) const;           appends the leaf's keys >= from, in order
//   using LoadState;
//   void PutLoadedEntry(Leaf*, int j, uint64_t slot, uint64_t value, Arg key, LoadState*);
//   void SealLoadedLeaf(Leaf*, int m, uint64_t next, const LoadState&);  header + flush
// Optional (defaults here do nothing): CheckEntry, CheckLeaf (Verify's
// invariant 5), AddStats, and
//   static uint32_t MagicOffset(uint32_t node_size);  byte offset of the leaf magic's 8-byte word
//   static uint64_t MagicMask(uint32_t node_size);    the magic's bits in that word, 0 = no magic
//
// The leaf magic (docs/pool_format.md, "Detecting a loss after a crash"): a
// design with free bits in its leaf keeps LeafMagic() there (a whole free
// word in fptree, the free upper half of a word in wbtree, which may be the
// bitmap's: Verify's invariant 4 then ignores those bits) while the leaf is
// in the list.  A new leaf gets it with the line its creation persists
// anyway (a split's copy, the first leaf's header), or once a durable split
// log names it (wbtree's FinishSplit); it is cleared and made
// durable before an unlink is (UnlinkLeaf), so no leaf can be freed with
// it; a bulk load sets it after its commit.  A reachable leaf without it is
// valid (a crash between the clear and the unlink).  After a rebuild of the
// allocator, free space carrying the magic is a leaf that no list reaches:
// recovery reports Corruption instead of absorbing it (ScanForLostLeaves).
//
// Thread safety and durability: those of pmtree/tree.h; the scheme is the one
// described in trees/common/dram_inner_index.h.  Every PM store and flush goes
// through the Pool, and each flush or fence names the crash state it
// prevents, here for the shared steps and in the design for its own.

#ifndef PMTREE_TREES_COMMON_LEAF_LIST_TREE_H_
#define PMTREE_TREES_COMMON_LEAF_LIST_TREE_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pm/pool_impl.h"
#include "pm/prefetch.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"
#include "trees/common/bulk_input.h"
#include "trees/common/dram_inner_index.h"
#include "trees/common/keys.h"
#include "trees/common/leaf_list_layout.h"
#include "trees/common/restart_image.h"

namespace pmtree {

inline std::string HexOffset(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// The constants a leaf-list design declares as `static constexpr
// LeafListTraits kTraits`.
struct LeafListTraits {
  const char* name;            // registry name, prefix of every message ("fptree")
  uint64_t magic;              // LeafListMeta::magic
  uint32_t default_node_size;  // for TreeOptions::node_size 0
  int entry_bit_shift;         // the bitmap bit of entry i is i + entry_bit_shift
  uint64_t flag_bits;          // bitmap bits that are not entry bits
  uint64_t older_magic = 0;    // the meta magic of the previous format version (0 = none)
};

template <class Derived, KeyPolicy KP, class LeafT, class EntryT>
class LeafListTree : public BasicTree<typename KP::Arg> {
 public:
  using Arg = typename KP::Arg;
  using Owned = typename KP::Owned;
  using Base = BasicTree<Arg>;
  using Entry = typename Base::Entry;
  using InputEntry = typename Base::InputEntry;
  using Index = DramInnerIndex<KP>;
  using Meta = LeafListMeta;

  // Creation: meta and one empty leaf, persisted, then root slot 0 (the
  // commit point of creation).
  static Result<std::unique_ptr<Base>> Create(PoolImpl* pool, const TreeOptions& options) {
    uint32_t node_size;
    PMTREE_RETURN_IF_ERROR(CheckOptions(options, &node_size));
    if (pool->root(0) != 0)
      return Status::Busy(std::string(Derived::kTraits.name) + ": pool root slot 0 already holds a tree");
    PMTREE_ASSIGN_OR_RETURN(uint64_t meta_off, pool->allocator().Allocate(sizeof(Meta)));
    auto leaf_r = pool->allocator().Allocate(node_size);
    if (!leaf_r.ok()) {
      pool->allocator().Free(meta_off, sizeof(Meta));
      return leaf_r.status();
    }
    uint64_t leaf_off = *leaf_r;
    Derived::InitEmptyLeaf(pool, pool->At<LeafT>(leaf_off), node_size);
    if (const uint64_t mask = Derived::MagicMask(node_size); mask != 0) {
      char* word = pool->At<char>(leaf_off) + Derived::MagicOffset(node_size);
      pool->Store64(word, (PoolImpl::Load64(word) & ~mask) | LeafMagic(pool, mask));
      // Flushed with the empty leaf; the meta block's fence below orders both
      // before root slot 0.
      pool->Flush(word, 8);
    }
    auto* meta = pool->At<Meta>(meta_off);
    pool->Zero(meta, sizeof(Meta));
    Meta head{};
    head.magic = Derived::kTraits.magic;
    head.head = leaf_off;
    if (Derived::MagicMask(node_size) != 0) head.leaf_limit = LeafLimitFor(leaf_off + node_size);
    head.node_size = node_size;
    head.key_kind = static_cast<uint32_t>(KP::kKind);
    pool->Write(meta, &head, 64);
    // Persist the meta block (and its cleared logs) -- and the empty leaf
    // flushed before it -- before root slot 0 names it: SetRoot is the commit
    // point of creation, so the head never points at garbage.
    pool->Persist(meta, sizeof(Meta));
    pool->SetRoot(0, meta_off);
    auto t = std::make_unique<Derived>(pool, meta_off, node_size);
    static_cast<LeafListTree*>(t.get())->index_.Build({{Owned{}, leaf_off}});
    return std::unique_ptr<Base>(std::move(t));
  }

  static Result<std::unique_ptr<Base>> Recover(PoolImpl* pool, const TreeOptions& options) {
    const std::string name = Derived::kTraits.name;
    PMTREE_RETURN_IF_ERROR(CheckExtra(options));
    uint64_t meta_off = pool->root(0);
    if (meta_off == 0) return Status::NotFound(name + ": pool root slot 0 is empty (no tree in this pool)");
    if (meta_off % 64 != 0 || !pool->InHeap(meta_off, sizeof(Meta)))
      return Status::Corruption(name + ": root slot 0 holds " + HexOffset(meta_off) + ", outside the heap");
    const auto* meta = pool->At<Meta>(meta_off);
    if (Derived::kTraits.older_magic != 0 && meta->magic == Derived::kTraits.older_magic)
      return Status::Incompatible(name + ": the pool was made by an older format of " + name +
                                  " (before the leaf magic); this build cannot open it");
    if (meta->magic != Derived::kTraits.magic)
      return Status::Corruption(name + " meta at offset " + HexOffset(meta_off) + ": bad magic (invariant 1)");
    if (!ValidNodeSize(meta->node_size))
      return Status::Corruption(name + " meta at offset " + HexOffset(meta_off) + ": node size " +
                                std::to_string(meta->node_size) + " invalid (invariant 1)");
    if (meta->key_kind != static_cast<uint32_t>(KP::kKind))
      return Status::Incompatible(name + ": the pool holds a tree with " +
                                  (meta->key_kind == 0 ? "u64" : "byte-string") + " keys");
    auto t = std::make_unique<Derived>(pool, meta_off, meta->node_size);
    PMTREE_RETURN_IF_ERROR(static_cast<LeafListTree*>(t.get())->RecoverImpl());
    return std::unique_ptr<Base>(std::move(t));
  }

  std::string_view name() const override { return Derived::kTraits.name; }
  uint32_t capabilities() const override {
    return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart;
  }

  // ---- point operations ---------------------------------------------------------------

  bool Lookup(Arg key, uint64_t* value) override {
    auto guard = pool_->epochs().Protect();
    const Located at = Locate(key, Derived::MakeProbe(key), /*exclusive=*/false);
    if (at.i >= 0) *value = Ent(at.leaf, at.i)->value;
    locks_.UnlockShared(at.stripe);
    return at.i >= 0;
  }

  Result<bool> Insert(Arg key, uint64_t value) override { return Put(key, value, Mode::kInsert); }
  Result<bool> Update(Arg key, uint64_t value) override { return Put(key, value, Mode::kUpdate); }
  Result<bool> Upsert(Arg key, uint64_t value) override { return Put(key, value, Mode::kUpsert); }

  Result<bool> Remove(Arg key) override {
    PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
    auto guard = pool_->epochs().Protect();
    const Located at = Locate(key, Derived::MakeProbe(key), /*exclusive=*/true);
    if (at.i < 0) {
      locks_.Unlock(at.stripe);
      return false;
    }
    uint64_t slot = Ent(at.leaf, at.i)->key;
    D().ClearEntry(at.leaf, at.i);  // the design's one persisted bitmap write
    const bool emptied = EntryMask(at.leaf) == 0;
    locks_.Unlock(at.stripe);
    keys_.Release(slot);
    if (emptied) TryRemoveLeaf(key);
    return true;
  }

  // ---- scan ------------------------------------------------------------------------------

  // Leaf by leaf through the DRAM index: each leaf is read under its shared
  // lock and validated against the root, and the next leaf is found by
  // routing the previous leaf's upper bound, so splits and removals between
  // two leaves can neither repeat nor skip a key that stayed present.
  size_t Scan(Arg start, const Arg* end, std::span<Entry> out) override {
    auto guard = pool_->epochs().Protect();
    size_t n = 0;
    Owned cur = Owned(start);
    typename Derived::ScanScratch scratch;
    while (n < out.size()) {
      std::optional<Owned> hi;
      size_t s;
      auto r = RouteAndLock(Index::AsArg(cur), /*exclusive=*/false, &s);
      // Keys are copied out while the lock keeps their blobs' entries valid.
      D().ScanLeaf(LeafAt(r.leaf), Index::AsArg(cur), end, out, &n, &scratch);
      if (r.hi != nullptr) hi = *r.hi;
      locks_.UnlockShared(s);
      if (!hi) break;
      if (end != nullptr && Index::Cmp(*hi, *end) > 0) break;
      cur = std::move(*hi);
    }
    return n;
  }

  // ---- bulk load ---------------------------------------------------------------------------

  // Builds a fresh chain of leaves filled to `fill` (each leaf's image is the
  // design's), persists it, and makes it the tree with one persisted store of
  // the head (a crash before that store leaves the empty tree; the unlinked
  // chain is reclaimed by recovery).
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override {
    PMTREE_RETURN_IF_ERROR(CheckBulkLoadInput(sorted, fill, &KP::CheckArg));
    for (uint64_t off = meta_->head; off != 0; off = LeafAt(off)->next)
      if (EntryMask(LeafAt(off)) != 0) return Status::InvalidArgument("bulk load: tree not empty");
    if (sorted.empty()) return Status::Ok();
    const int per = std::clamp(static_cast<int>(fill * cap_ + 1e-9), 1, cap_);
    const size_t nleaves = (sorted.size() + per - 1) / per;
    std::vector<uint64_t> leaves;
    std::vector<uint64_t> slots;
    auto undo = [&](Status st) {
      for (uint64_t l : leaves) pool_->allocator().Free(l, node_size_);
      for (uint64_t k : slots) keys_.FreeUnpublished(k);
      return st;
    };
    for (size_t i = 0; i < nleaves; i++) {
      auto r = pool_->allocator().Allocate(node_size_);
      if (!r.ok()) return undo(r.status());
      leaves.push_back(*r);
    }
    NoteLeaf(*std::max_element(leaves.begin(), leaves.end()));
    std::vector<std::pair<Owned, uint64_t>> mins;
    for (size_t li = 0; li < nleaves; li++) {
      LeafT* leaf = LeafAt(leaves[li]);
      size_t b = li * per, e = std::min(sorted.size(), b + per);
      typename Derived::LoadState state{};
      for (size_t j = b; j < e; j++) {
        auto sr = keys_.MakeSlotUnfenced(sorted[j].first);  // the fence before the head completes it
        if (!sr.ok()) return undo(sr.status());
        slots.push_back(*sr);
        D().PutLoadedEntry(leaf, static_cast<int>(j - b), *sr, sorted[j].second, sorted[j].first, &state);
      }
      // Writes the leaf's header and flushes the leaf; the single fence below
      // orders every loaded leaf before the head store.
      D().SealLoadedLeaf(leaf, static_cast<int>(e - b), li + 1 < nleaves ? leaves[li + 1] : 0, state);
      mins.emplace_back(Owned(sorted[b].first), leaves[li]);
    }
    std::vector<uint64_t> old;
    for (uint64_t off = meta_->head; off != 0; off = LeafAt(off)->next) old.push_back(off);
    // The old (empty) leaves drop their magic while still reachable, so none
    // is unreachable with it once the head moves on.
    for (uint64_t off : old) ClearLeafMagic(off);
    // Every loaded leaf (and every cleared magic) reaches PM before the head
    // names the chain, so a crash never exposes a partly written leaf.
    pool_->Fence();
    pool_->Store64(&meta_->head, leaves[0]);
    // Persist the head: the commit point of the whole bulk load.
    pool_->Persist(&meta_->head, 8);
    // The loaded leaves get their magic only now: before the commit they are
    // free space after a crash, which must not carry it.  One flush per leaf
    // and one fence per load; a crash before it leaves reachable leaves
    // without magic, which is valid.
    if (magic_mask_ != 0) {
      for (uint64_t l : leaves) SetLeafMagic(l);
      pool_->Fence();
    }
    for (uint64_t off : old) pool_->allocator().Retire(off, node_size_);
    index_.Build(std::move(mins));
    return Status::Ok();
  }

  // ---- introspection --------------------------------------------------------------------------

  // Invariants (numbered; docs/trees/fptree.md and docs/trees/wbtree.md list
  // them with their reasons; 5 is the design's own, checked by its
  // CheckEntry / CheckLeaf):
  //  1. The meta block has the magic, a valid node size and this key kind.
  //  2. Every log is clear when no operation runs.
  //  3. The leaf list from `head` visits 64 B aligned leaves inside the heap,
  //     without a cycle; head is never 0.
  //  4. No bitmap bit beyond the entry capacity (and the design's flag bits)
  //     is set.
  //  6. Every valid key slot is well formed (byte keys: blob in heap, hash).
  //  7. Valid keys ascend strictly along the list: unique inside a leaf, and
  //     every key of a leaf is below every key of the next leaf.
  //  8. The DRAM index is well shaped, lists exactly the leaves of the list
  //     in the same order, and every key of a leaf lies in its index range.
  //  9. Pool bytes reached (meta, leaves, key blobs) == allocator bytes in use.
  Status Verify() override {
    // No operation runs (the interface's precondition), so blocks retired by
    // earlier deletes and splits can be freed now; invariant 9 compares with
    // what is really in use.
    pool_->epochs().DrainAll();
    auto guard = pool_->epochs().Protect();
    if (meta_->magic != Derived::kTraits.magic || meta_->node_size != node_size_ ||
        meta_->key_kind != static_cast<uint32_t>(KP::kKind))
      return Corrupt("meta", meta_off_, 1, "magic, node size or key kind wrong");
    if (meta_->delete_log.leaf != 0 || meta_->delete_log.other != 0)
      return Corrupt("delete log", meta_off_ + offsetof(Meta, delete_log), 2, "log not clear");
    for (int i = 0; i < kLeafListSplitLogs; i++)
      if (meta_->split_log[i].leaf != 0 || meta_->split_log[i].other != 0)
        return Corrupt("split log", meta_off_ + offsetof(Meta, split_log) + 64 * i, 2, "log not clear");
    std::vector<uint64_t> list;
    PMTREE_RETURN_IF_ERROR(CollectLeaves(&list));
    uint64_t bytes = sizeof(Meta) + list.size() * node_size_;
    bool have_prev = false;
    uint64_t prev_max = 0;
    std::vector<uint64_t> sorted;
    for (uint64_t off : list) {
      const LeafT* leaf = LeafAt(off);
      if (StrayBits(leaf) != 0) return Corrupt("leaf", off, 4, "bitmap bit beyond capacity");
      sorted.clear();
      for (uint64_t b = EntryMask(leaf); b != 0; b &= b - 1) {
        const int i = EntryOfBit(b);
        uint64_t k = Ent(leaf, i)->key;
        Status st = keys_.CheckSlot(k);
        if (!st.ok()) return Corrupt("leaf", off, 6, std::string(st.message()));
        PMTREE_RETURN_IF_ERROR(D().CheckEntry(off, leaf, i, k));
        bytes += keys_.SlotBytes(k);
        sorted.push_back(k);
      }
      PMTREE_RETURN_IF_ERROR(D().CheckLeaf(off, leaf));
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
      const LeafT* leaf = LeafAt(leaf_off);
      for (uint64_t b = EntryMask(leaf); b != 0; b &= b - 1) {
        uint64_t k = Ent(leaf, EntryOfBit(b))->key;
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
    st.pm_bytes = sizeof(Meta) + list.size() * node_size_;
    for (uint64_t off : list) {
      const LeafT* leaf = LeafAt(off);
      for (uint64_t b = EntryMask(leaf); b != 0; b &= b - 1) {
        st.entries++;
        st.pm_bytes += keys_.SlotBytes(Ent(leaf, EntryOfBit(b))->key);
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
    st.extra.emplace_back("instant_restart", instant_restart_ ? 1 : 0);
    D().AddStats(list, &st);
    return st;
  }

  // Saves the DRAM index's routes as the restart image, so the next open
  // skips reading every leaf (instant restart); the pool saves the allocator
  // state.  A second Close does nothing.
  Status Close() override {
    if (closed_) return Status::Ok();
    closed_ = true;
    PMTREE_RETURN_IF_ERROR(WriteRestartImage());
    return pool_->Close();
  }

 protected:
  LeafListTree(PoolImpl* pool, uint64_t meta_off, uint32_t node_size)
      : pool_(pool),
        keys_(pool),
        meta_off_(meta_off),
        meta_(pool->At<Meta>(meta_off)),
        node_size_(node_size),
        cap_(Derived::Capacity(node_size)),
        entries_off_(Derived::EntriesOffset(node_size)),
        entry_mask_((cap_ == 64 ? ~0ull : (1ull << cap_) - 1) << Derived::kTraits.entry_bit_shift),
        magic_off_(Derived::MagicOffset(node_size)),
        magic_mask_(Derived::MagicMask(node_size)),
        leaf_magic_(LeafMagic(pool, magic_mask_)),
        index_(pool) {}

  // The leaf magic of `pool` in the bits of `mask`: its id mixed with a
  // constant, never 0.
  static uint64_t LeafMagic(const Pool* pool, uint64_t mask) {
    const uint64_t m = (pool->id() ^ 0x4d4c46454c4c4c50ull) & mask;  // "PLLLEFLM"
    return m != 0 ? m : mask & -mask;
  }
  // Default: no leaf magic (the design's leaf has no free bits for it).
  static uint32_t MagicOffset(uint32_t /*node_size*/) { return 0; }
  static uint64_t MagicMask(uint32_t /*node_size*/) { return 0; }

  // Default hooks (a design hides them with its own).
  Status CheckEntry(uint64_t /*off*/, const LeafT* /*leaf*/, int /*i*/, uint64_t /*slot*/) const {
    return Status::Ok();
  }
  Status CheckLeaf(uint64_t /*off*/, const LeafT* /*leaf*/) const { return Status::Ok(); }
  void AddStats(const std::vector<uint64_t>& /*list*/, TreeStats* /*st*/) const {}

  // ---- leaf access ------------------------------------------------------------------------

  LeafT* LeafAt(uint64_t off) const { return pool_->At<LeafT>(off); }
  EntryT* Ent(const LeafT* leaf, int i) const {
    return reinterpret_cast<EntryT*>(reinterpret_cast<char*>(const_cast<LeafT*>(leaf)) + entries_off_ +
                                     sizeof(EntryT) * i);
  }
  static uint64_t EntryBit(int i) { return 1ull << (i + Derived::kTraits.entry_bit_shift); }
  // The entry index of the lowest set bit of a (non-zero) entry mask.
  static int EntryOfBit(uint64_t bits) { return __builtin_ctzll(bits) - Derived::kTraits.entry_bit_shift; }
  // Bits of the leaf's valid entries.
  uint64_t EntryMask(const LeafT* leaf) const { return leaf->bitmap & entry_mask_; }
  // Set bitmap bits that are neither entry bits nor the design's flags nor
  // the leaf magic's (invariant 4).
  uint64_t StrayBits(const LeafT* leaf) const {
    const uint64_t magic_bits = magic_off_ == kLeafListBitmapOffset ? magic_mask_ : 0;
    return leaf->bitmap & ~(entry_mask_ | Derived::kTraits.flag_bits | magic_bits);
  }
  // The leaf magic's bits of the bitmap word (0 when the magic lives elsewhere).
  uint64_t BitmapMagicBits(const LeafT* leaf) const {
    return magic_off_ == kLeafListBitmapOffset ? leaf->bitmap & magic_mask_ : 0;
  }

  // Writes the leaf magic into `leaf` and flushes its word (the caller's
  // next fence makes it durable): only once the leaf is reachable, or named
  // by a durable log whose replay makes it so.
  void SetLeafMagic(uint64_t leaf) {
    char* word = reinterpret_cast<char*>(LeafAt(leaf)) + magic_off_;
    pool_->Store64(word, (PoolImpl::Load64(word) & ~magic_mask_) | leaf_magic_);
    // Start the magic's write-back (the caller's fence completes it).  A
    // crash before it is durable leaves a reachable leaf without the magic,
    // which is valid; only a later loss of this leaf would go unseen.
    pool_->Flush(word, 8);
  }

  Status Corrupt(const char* what, uint64_t off, int inv, const std::string& msg) const {
    return Status::Corruption(std::string(Derived::kTraits.name) + " " + what + " at offset " + HexOffset(off) +
                              ": invariant " + std::to_string(inv) + " violated: " + msg);
  }

  // ---- logs -------------------------------------------------------------------------------

  int AcquireSplitLog() {
    for (int spins = 0;; spins++) {
      uint32_t m = split_logs_busy_.load(std::memory_order_relaxed);
      if (m != (1u << kLeafListSplitLogs) - 1) {
        int i = __builtin_ctz(~m);
        if (split_logs_busy_.compare_exchange_weak(m, m | (1u << i), std::memory_order_acquire)) return i;
      } else if (spins > 64) {
        sched_yield();
      }
    }
  }
  void ReleaseSplitLog(int i) { split_logs_busy_.fetch_and(~(1u << i), std::memory_order_release); }

  void ClearLog(LeafListLog* log) {
    pool_->Store64(&log->leaf, 0);
    pool_->Store64(&log->other, 0);
    // Persist the cleared log so recovery does not replay a finished
    // operation over later changes to these leaves.
    pool_->Persist(log, 16);
  }

  Status CheckLeafOff(uint64_t off, const char* what) const {
    if (off % 64 != 0 || !pool_->InHeap(off, node_size_))
      return Status::Corruption(std::string(Derived::kTraits.name) + " " + what + ": leaf offset " + HexOffset(off) +
                                " outside the heap");
    return Status::Ok();
  }

  // The leaf limit above the end of a leaf: the next 1 MiB boundary.
  static uint64_t LeafLimitFor(uint64_t leaf_end) { return (leaf_end + kLeafLimitStep) & ~(kLeafLimitStep - 1); }

  // Raises and persists meta_->leaf_limit when the leaf allocated at `leaf`
  // ends above it, before the caller writes the leaf (and its magic): the
  // scan for lost leaves covers every leaf that may carry the magic.  One
  // flush and fence per 1 MiB of heap that leaves reach.
  void NoteLeaf(uint64_t leaf) {
    if (magic_mask_ == 0 || leaf + node_size_ <= PoolImpl::Load64(&meta_->leaf_limit)) return;
    std::lock_guard<std::mutex> g(limit_mu_);
    if (leaf + node_size_ <= meta_->leaf_limit) return;
    pool_->Store64(&meta_->leaf_limit, LeafLimitFor(leaf + node_size_));
    // Persist the raised limit before the leaf can be durable with the magic.
    pool_->Persist(&meta_->leaf_limit, 8);
  }

  PoolImpl* const pool_;
  KP keys_;
  const uint64_t meta_off_;
  Meta* const meta_;
  const uint32_t node_size_;
  const int cap_;
  const uint32_t entries_off_;
  const uint64_t entry_mask_;  // every entry bit of a full leaf
  const uint32_t magic_off_;   // byte offset of the leaf magic's word in a leaf
  const uint64_t magic_mask_;  // the magic's bits in that word (0 = no leaf magic)
  const uint64_t leaf_magic_;  // LeafMagic(pool_, magic_mask_)

 private:
  enum class Mode { kInsert, kUpdate, kUpsert };

  Derived& D() { return static_cast<Derived&>(*this); }
  const Derived& D() const { return static_cast<const Derived&>(*this); }

  static bool ValidNodeSize(uint32_t n) { return n == 256 || n == 512 || n == 1024; }

  static Status CheckExtra(const TreeOptions& o) {
    if (!o.extra.empty())
      return Status::InvalidArgument(std::string(Derived::kTraits.name) + ": unknown option '" + o.extra.begin()->first +
                                     "' (" + Derived::kTraits.name + " has no extra options)");
    return Status::Ok();
  }

  static Status CheckOptions(const TreeOptions& o, uint32_t* node_size) {
    PMTREE_RETURN_IF_ERROR(CheckExtra(o));
    uint32_t n = o.node_size == 0 ? Derived::kTraits.default_node_size : o.node_size;
    if (!ValidNodeSize(n))
      return Status::InvalidArgument(std::string(Derived::kTraits.name) + ": invalid node size " + std::to_string(n) +
                                     " (valid: 256, 512, 1024)");
    *node_size = n;
    return Status::Ok();
  }

  // Routes `key` to its leaf and locks the leaf's stripe (shared or
  // exclusive) in *stripe; retries while a split or removal completed in
  // between (the root changed), so the returned leaf is the key's leaf for
  // as long as the lock is held.
  typename Index::Route RouteAndLock(Arg key, bool exclusive, size_t* stripe) {
    for (;;) {
      auto r = index_.Find(key);
      size_t s = locks_.StripeOf(r.leaf);
      if (exclusive) {
        locks_.Lock(s);
      } else {
        locks_.LockShared(s);
      }
      if (index_.root() == r.root) {
        *stripe = s;
        return r;
      }
      if (exclusive) {
        locks_.Unlock(s);
      } else {
        locks_.UnlockShared(s);
      }
    }
  }

  // A key's leaf, locked, and the key's entry in it (i = -1: absent).
  struct Located {
    typename Index::Route route;
    size_t stripe;
    LeafT* leaf;
    int i;
  };
  template <class Probe>
  Located Locate(Arg key, const Probe& probe, bool exclusive) {
    Located at;
    at.route = RouteAndLock(key, exclusive, &at.stripe);
    at.leaf = LeafAt(at.route.leaf);
    at.i = D().FindInLeaf(at.leaf, key, probe);
    return at;
  }

  Result<bool> Put(Arg key, uint64_t value, Mode mode) {
    PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
    auto guard = pool_->epochs().Protect();
    const auto probe = Derived::MakeProbe(key);
    const Located at = Locate(key, probe, /*exclusive=*/true);
    const size_t s = at.stripe;
    LeafT* leaf = at.leaf;
    const int i = at.i;
    if (i >= 0) {
      if (mode == Mode::kInsert) {
        locks_.Unlock(s);
        return false;
      }
      uint64_t* word = &Ent(leaf, i)->value;
      pool_->Store64(word, value);
      // Persist the new value (one failure-atomic 8-byte word) before the
      // lock is released, so no reader sees an unpersisted value.
      pool_->Persist(word, 8);
      locks_.Unlock(s);
      return mode == Mode::kUpdate;
    }
    if (mode == Mode::kUpdate) {
      locks_.Unlock(s);
      return false;
    }
    if (EntryMask(leaf) != entry_mask_) {
      Status st = D().InsertIntoLeaf(at.route.leaf, key, value, probe);
      locks_.Unlock(s);
      if (!st.ok()) return st;
      return true;
    }
    // Full leaf: split under the leaf lock, insert into the proper half while
    // the new leaf is still private, then publish the split in the index.
    uint64_t new_leaf = 0;
    Owned sep;
    Status st = D().SplitLeaf(at.route.leaf, &new_leaf, &sep);
    if (!st.ok()) {
      locks_.Unlock(s);
      return st;
    }
    uint64_t target = Index::Cmp(sep, key) <= 0 ? new_leaf : at.route.leaf;
    Status ins = D().InsertIntoLeaf(target, key, value, probe);
    {
      std::lock_guard<std::mutex> smo(smo_mu_);
      index_.InsertSplit(sep, new_leaf);
    }
    locks_.Unlock(s);
    splits_.fetch_add(1, std::memory_order_relaxed);
    if (!ins.ok()) return ins;
    return true;
  }

  // ---- leaf removal (the delete log) ------------------------------------------------------

  // Clears the leaf magic of `leaf` and flushes it (the caller's next fence
  // makes it durable, before any unlink of the leaf).
  void ClearLeafMagic(uint64_t leaf) {
    if (magic_mask_ == 0) return;
    char* word = reinterpret_cast<char*>(LeafAt(leaf)) + magic_off_;
    const uint64_t w = PoolImpl::Load64(word);
    if ((w & magic_mask_) == 0) return;
    pool_->Store64(word, w & ~magic_mask_);
    // Start the clear's write-back: under the caller's fence it is durable
    // before the unlink, so no crash leaves an unreachable leaf that still
    // carries the magic (a false "leaf unreachable" at recovery).
    pool_->Flush(word, 8);
  }

  // After a rebuild of the allocator: free space below the leaf limit (at
  // the allocator's 64 B granule, a whole leaf's size inside one free
  // extent) whose leaf-magic bits hold this pool's leaf magic is a leaf
  // that no list reaches -- a cut list.  One 8-byte read per 64 B of free
  // space below the limit (a limit of 0, damage, scans the whole heap).
  Status ScanForLostLeaves() const {
    if (magic_mask_ == 0) return Status::Ok();
    const uint64_t limit = meta_->leaf_limit != 0 ? meta_->leaf_limit : pool_->size();
    for (const auto& [begin, size] : pool_->allocator().FreeExtents()) {
      const uint64_t end = std::min(begin + size, limit);
      for (uint64_t off = begin; off + node_size_ <= end; off += 64) {
        // Only "holds the magic or not" of the word (an observed word, pm/observe.h).
        if (PoolImpl::Load64Matches(pool_->At<char>(off) + magic_off_, magic_mask_, leaf_magic_))
          return Status::Corruption(std::string(Derived::kTraits.name) + ": leaf at offset " + HexOffset(off) +
                                    " unreachable (it carries this pool's leaf magic but no list reaches it: a cut "
                                    "leaf list?)");
      }
    }
    return Status::Ok();
  }

  // Unlinks `leaf` (empty) from the list after `prev` (0: it is the head).
  // Caller holds smo_mu_ (or is recovery) and the locks of both leaves.
  void UnlinkLeaf(uint64_t prev, uint64_t leaf) {
    LeafListLog* log = &meta_->delete_log;
    ClearLeafMagic(leaf);
    pool_->Store64(&log->leaf, leaf);
    pool_->Store64(&log->other, prev);
    // Persist the delete log (the leaf and its predecessor) and the cleared
    // leaf magic before the unlink, so recovery can finish an interrupted
    // unlink and never finds the unlinked leaf with its magic.
    pool_->Persist(log, 16);
    uint64_t next = LeafAt(leaf)->next;
    uint64_t* link = prev != 0 ? &LeafAt(prev)->next : &meta_->head;
    pool_->Store64(link, next);
    // Persist the unlink before the log is cleared, so a crash after the
    // clear never finds the leaf still linked with no log to finish it.
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
      const LeafT* l = LeafAt(leaf);
      bool linked = prev != 0 ? LeafAt(prev)->next == leaf : meta_->head == leaf;
      if (r2.leaf == leaf && r2.prev == prev && EntryMask(l) == 0 && linked && !(prev == 0 && l->next == 0)) {
        UnlinkLeaf(prev, leaf);
        index_.RemoveLeaf(key, leaf);
        pool_->allocator().Retire(leaf, node_size_);
        removals_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    locks_.UnlockAll(held);
  }

  // ---- recovery ------------------------------------------------------------------------------

  Status CollectLeaves(std::vector<uint64_t>* list) const {
    const uint64_t limit = pool_->size() / node_size_ + 1;
    if (meta_->head == 0) return Corrupt("meta", meta_off_, 3, "head is 0");
    for (uint64_t off = meta_->head; off != 0; off = LeafAt(off)->next) {
      PMTREE_RETURN_IF_ERROR(CheckLeafOff(off, "leaf list (invariant 3)"));
      if (list->size() >= limit) return Corrupt("leaf list", off, 3, "cycle");
      list->push_back(off);
    }
    return Status::Ok();
  }

  // ---- instant restart ---------------------------------------------------------------------

  // A route's bound in the restart image: a u64 key in one word, a byte
  // string as trees/common/restart_image.h lays it out.
  void EncodeKey(const Owned& k, std::vector<uint64_t>* words) const {
    if constexpr (KP::kInline) {
      words->push_back(k);
    } else {
      AppendKeyWords(k, words);
    }
  }

  // Reads one bound at w[*i] (n words in all); false when it does not fit.
  bool DecodeKey(const uint64_t* w, uint64_t n, uint64_t* i, Owned* k) const {
    if constexpr (KP::kInline) {
      if (*i >= n) return false;
      *k = w[(*i)++];
    } else {
      std::optional<std::string_view> key = ReadKeyWords(w, n, i);
      if (!key) return false;
      k->assign(*key);
    }
    return true;
  }

  Status WriteRestartImage() {
    std::vector<std::pair<Owned, uint64_t>> routes;
    index_.Routes(&routes);
    std::vector<uint64_t> words{kLeafListRestartMagic, routes.size(), 0};
    for (const auto& [k, leaf] : routes) {
      words.push_back(leaf);
      EncodeKey(k, &words);
    }
    words[2] = words.size() * 8;
    auto r = pool_->allocator().Allocate(words[2]);
    uint64_t off = 0;
    if (r.ok()) {
      off = *r;
      pool_->Write(pool_->At<void>(off), words.data(), words[2]);
      // Persist the image before the meta names it.
      pool_->Persist(pool_->At<void>(off), words[2]);
    }
    // No room for an image: 0, and the next open walks the leaves.
    pool_->Store64(&meta_->restart_bytes, r.ok() ? words[2] : 0);
    pool_->Store64(&meta_->restart, off);
    // Persist both words (one line) before Pool::Close writes the clean-
    // shutdown flag, which must never be durable with a stale image offset.
    pool_->Persist(&meta_->restart, 16);
    return Status::Ok();
  }

  // After a clean close: the index from the restart image, if the image is
  // whole and names exactly the leaves of the list (followed through `next`
  // only, one word per leaf: a cut list disagrees and is left to the walk,
  // whose saved-bytes check reports it).  *image_bytes: the bytes of an image
  // that was present but not used (the walk's byte count must add them).
  Status TryInstantRestart(bool* done, uint64_t* image_bytes) {
    *done = false;
    *image_bytes = 0;
    const uint64_t off = meta_->restart, bytes = meta_->restart_bytes;
    if (off == 0) return Status::Ok();
    auto forget = [&] {
      pool_->Store64(&meta_->restart, 0);
      pool_->Store64(&meta_->restart_bytes, 0);
      // Persist: the image is consumed (or untrusted) and never read again.
      pool_->Persist(&meta_->restart, 16);
    };
    // A crash after the image was written: the walk reclaims its block.
    if (!pool_->clean_shutdown()) {
      forget();
      return Status::Ok();
    }
    *image_bytes = Allocator::RoundUp(bytes);
    std::vector<std::pair<Owned, uint64_t>> routes;
    bool ok = off % 8 == 0 && bytes >= 24 && bytes % 8 == 0 && pool_->InHeap(off, bytes);
    if (ok) {
      const uint64_t* w = pool_->At<uint64_t>(off);
      const uint64_t n = bytes / 8;
      ok = w[0] == kLeafListRestartMagic && w[2] == bytes && w[1] >= 1 && w[1] <= pool_->size() / node_size_;
      uint64_t i = 3;
      for (uint64_t li = 0; ok && li < w[1]; li++) {
        Owned k{};
        ok = i < n && CheckLeafOff(w[i], "restart image").ok();
        if (!ok) break;
        const uint64_t leaf = w[i++];
        ok = DecodeKey(w, n, &i, &k);
        routes.emplace_back(std::move(k), leaf);
      }
      ok = ok && i == n;
    }
    // The list, through `next` only, must be the image's leaves in order:
    // each leaf's next is checked against the image's following leaf, which
    // is known in advance, so the reads do not wait for one another as a
    // pointer-chasing walk would.
    ok = ok && meta_->head == routes[0].second;
    constexpr size_t kAhead = 16;
    for (size_t li = 0; ok && li < routes.size(); li++) {
      if (li + kAhead < routes.size()) pmtree::Prefetch(LeafAt(routes[li + kAhead].second));
      ok = LeafAt(routes[li].second)->next == (li + 1 < routes.size() ? routes[li + 1].second : 0);
    }
    forget();
    if (!ok) return Status::Ok();
    index_.Build(std::move(routes));
    pool_->allocator().Free(off, bytes);
    *image_bytes = 0;
    instant_restart_ = true;
    *done = true;
    return Status::Ok();
  }

  // The shared recovery steps, in order (the designs' docs number them as
  // their own rules; fptree R1-R6, wbtree R1-R6):
  //  - split logs: a log naming both leaves is replayed by the design
  //    (Derived::ReplaySplit); a log with one word set is a torn log write,
  //    nothing happened; either way the log is cleared.
  //  - delete log set: redo the unlink if the predecessor (or head) still
  //    names the leaf; clear.
  //  - empty leaves (but the last one) leave the list through the delete
  //    log's protocol.
  //  - the allocator is rebuilt from the reachable blocks and the DRAM index
  //    from the leaves' minimum keys.
  // Each step is idempotent, so a crash during recovery is recovered again.
  Status RecoverImpl() {
    // R0 (instant restart): after a clean close, the restart image.
    bool restarted = false;
    uint64_t image_bytes = 0;
    PMTREE_RETURN_IF_ERROR(TryInstantRestart(&restarted, &image_bytes));
    if (restarted) return Status::Ok();
    for (int i = 0; i < kLeafListSplitLogs; i++) {
      LeafListLog* log = &meta_->split_log[i];
      uint64_t cur = log->leaf, nl = log->other;
      if (cur != 0 && nl != 0) {
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(cur, "split log"));
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(nl, "split log"));
        PMTREE_RETURN_IF_ERROR(D().ReplaySplit(cur, nl));
      }
      if (cur != 0 || nl != 0) ClearLog(log);
    }
    {
      LeafListLog* log = &meta_->delete_log;
      uint64_t leaf = log->leaf, prev = log->other;
      if (leaf != 0) {
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(leaf, "delete log"));
        if (prev != 0) PMTREE_RETURN_IF_ERROR(CheckLeafOff(prev, "delete log"));
        uint64_t* link = prev != 0 ? &LeafAt(prev)->next : &meta_->head;
        if (*link == leaf) {
          // The log may be durable without the leaf magic's clear (both were
          // flushed before one fence): clear it again, durably, before the
          // redone unlink can be.
          ClearLeafMagic(leaf);
          pool_->Fence();
          pool_->Store64(link, LeafAt(leaf)->next);
          // Persist the redone unlink before the log is cleared, so a crash
          // after the clear never finds the leaf linked with no log.
          pool_->Persist(link, 8);
        }
      }
      if (leaf != 0 || prev != 0) ClearLog(log);
    }
    std::vector<uint64_t> list;
    PMTREE_RETURN_IF_ERROR(CollectLeaves(&list));
    // Drop empty leaves, keeping at least one.
    std::vector<uint64_t> kept;
    uint64_t dropped_bytes = 0;
    for (size_t i = 0; i < list.size(); i++) {
      const LeafT* leaf = LeafAt(list[i]);
      if (StrayBits(leaf) != 0) return Corrupt("leaf", list[i], 4, "bitmap bit beyond capacity");
      bool last_standing = kept.empty() && i + 1 == list.size();
      if (EntryMask(leaf) == 0 && !last_standing) {
        UnlinkLeaf(kept.empty() ? 0 : kept.back(), list[i]);
        dropped_bytes += Allocator::RoundUp(node_size_);
        continue;
      }
      kept.push_back(list[i]);
    }
    // Rebuild the allocator from the reachable blocks and the index from the
    // leaves' minimum keys.
    Allocator& a = pool_->allocator();
    a.BeginRebuild();
    PMTREE_RETURN_IF_ERROR(a.MarkUsed(meta_off_, sizeof(Meta)));
    std::vector<std::pair<Owned, uint64_t>> mins;
    for (uint64_t off : kept) {
      PMTREE_RETURN_IF_ERROR(a.MarkUsed(off, node_size_));
      const LeafT* leaf = LeafAt(off);
      std::optional<uint64_t> min;
      for (uint64_t b = EntryMask(leaf); b != 0; b &= b - 1) {
        uint64_t k = Ent(leaf, EntryOfBit(b))->key;
        Status st = keys_.MarkUsed(k);
        if (!st.ok()) return st.Annotate(std::string(Derived::kTraits.name) + " leaf at offset " + HexOffset(off));
        if (!min || keys_.CompareSlots(k, *min) < 0) min = k;
      }
      mins.emplace_back(min ? keys_.Load(*min) : Owned{}, off);
    }
    a.EndRebuild();
    // The leaf magic: free space must not hold a leaf.  While a key-value
    // store holds the rebuild, what is free is known only once the store has
    // marked its records: the store runs the scan then (DeferRebuildCheck).
    if (!a.rebuild_end_pending()) PMTREE_RETURN_IF_ERROR(ScanForLostLeaves());
    // After a clean close the saved allocator state says how many bytes the
    // tree held; a walk that reaches fewer lost blocks to damage (a cut leaf
    // list): report it rather than turn the lost leaves into free space.
    // Not when a key-value store holds the rebuild (allocator.h, "Owners"):
    // bytes_in_use() is final only once the store has reported its records,
    // and the saved figure counts those records too.
    if (const uint64_t saved = pool_->saved_bytes_in_use();
        saved != 0 && !a.rebuild_end_pending() && a.bytes_in_use() + dropped_bytes + image_bytes != saved)
      return Status::Corruption(std::string(Derived::kTraits.name) + ": recovery reaches " +
                                std::to_string(a.bytes_in_use() + dropped_bytes + image_bytes) +
                                " bytes but the clean close left " +
                                std::to_string(saved) + " in use: blocks unreachable (a cut leaf list?)");
    index_.Build(std::move(mins));
    // Deferred last, once this recovery can no longer fail: the check refers
    // to this tree, which the store then keeps.
    if (a.rebuild_end_pending() && magic_mask_ != 0) a.DeferRebuildCheck([this] { return ScanForLostLeaves(); });
    return Status::Ok();
  }

  static constexpr uint64_t kLeafLimitStep = 1 << 20;

  Index index_;
  LeafLocks locks_;
  std::mutex smo_mu_;    // serialises index changes and leaf removals
  std::mutex limit_mu_;  // serialises raising meta_->leaf_limit
  std::atomic<uint32_t> split_logs_busy_{0};
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> removals_{0};
  bool closed_ = false;
  bool instant_restart_ = false;  // this open used the restart image
};

}  // namespace pmtree

#endif  // PMTREE_TREES_COMMON_LEAF_LIST_TREE_H_
