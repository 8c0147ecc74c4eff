// SPDX-License-Identifier: Apache-2.0
//
// fptree: FPTree on pmtree.  Read docs/trees/fptree.md first; the layout is in
// layout.h.  Structure of this file: leaf helpers, point operations, split
// and leaf removal (with their micro-logs), scan, bulk load, recovery,
// Verify/Stats, factories.

#include "trees/fptree/fptree.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
#include "trees/fptree/layout.h"

namespace pmtree {
namespace fptree {
namespace {

std::string Hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status CheckOptions(const TreeOptions& o, uint32_t* node_size) {
  if (!o.extra.empty())
    return Status::InvalidArgument("fptree: unknown option '" + o.extra.begin()->first +
                                   "' (fptree has no extra options)");
  uint32_t n = o.node_size == 0 ? kFpDefaultNodeSize : o.node_size;
  if (n != 256 && n != 512 && n != 1024)
    return Status::InvalidArgument("fptree: invalid node size " + std::to_string(n) +
                                   " (valid: 256, 512, 1024)");
  *node_size = n;
  return Status::Ok();
}

template <class Keys>
class FpTree final : public BasicTree<typename Keys::Arg> {
 public:
  using Arg = typename Keys::Arg;
  using Owned = typename Keys::Owned;
  using Base = BasicTree<Arg>;
  using Entry = typename Base::Entry;
  using InputEntry = typename Base::InputEntry;
  using Index = DramInnerIndex<Keys>;

  FpTree(Pool* pool, uint64_t meta_off, uint32_t node_size)
      : pool_(pool),
        keys_(pool),
        meta_off_(meta_off),
        meta_(pool->At<FpMeta>(meta_off)),
        node_size_(node_size),
        cap_(FpCapacity(node_size)),
        full_(cap_ == 64 ? ~0ull : (1ull << cap_) - 1),
        index_(pool) {}

  // Creation: meta and one empty leaf, persisted, then root slot 0 (the
  // commit point of creation).
  static Result<std::unique_ptr<Base>> Create(Pool* pool, const TreeOptions& options) {
    uint32_t node_size;
    PMTREE_RETURN_IF_ERROR(CheckOptions(options, &node_size));
    if (pool->root(0) != 0) return Status::Busy("fptree: pool root slot 0 already holds a tree");
    PMTREE_ASSIGN_OR_RETURN(uint64_t meta_off, pool->allocator().Allocate(sizeof(FpMeta)));
    auto leaf_r = pool->allocator().Allocate(node_size);
    if (!leaf_r.ok()) {
      pool->allocator().Free(meta_off, sizeof(FpMeta));
      return leaf_r.status();
    }
    uint64_t leaf_off = *leaf_r;
    auto* leaf = pool->At<FpLeaf>(leaf_off);
    pool->Zero(leaf, 64);
    // Flush the empty leaf's header; the meta block's fence below orders it
    // before root slot 0 names the tree, so the head never points at garbage.
    pool->Flush(leaf, 64);
    auto* meta = pool->At<FpMeta>(meta_off);
    pool->Zero(meta, sizeof(FpMeta));
    FpMeta head{};
    head.magic = kFpMagic;
    head.head = leaf_off;
    head.node_size = node_size;
    head.key_kind = static_cast<uint32_t>(Keys::kKind);
    pool->Write(meta, &head, 64);
    // Persist the meta block (and its cleared logs) before root slot 0 names
    // it: SetRoot is the commit point of creation.
    pool->Persist(meta, sizeof(FpMeta));
    pool->SetRoot(0, meta_off);
    auto t = std::make_unique<FpTree>(pool, meta_off, node_size);
    t->index_.Build({{Owned{}, leaf_off}});
    return std::unique_ptr<Base>(std::move(t));
  }

  static Result<std::unique_ptr<Base>> Recover(Pool* pool, const TreeOptions& options) {
    if (!options.extra.empty())
      return Status::InvalidArgument("fptree: unknown option '" + options.extra.begin()->first +
                                     "' (fptree has no extra options)");
    uint64_t meta_off = pool->root(0);
    if (meta_off == 0) return Status::NotFound("fptree: pool root slot 0 is empty (no tree in this pool)");
    if (meta_off % 64 != 0 || !pool->InHeap(meta_off, sizeof(FpMeta)))
      return Status::Corruption("fptree: root slot 0 holds " + Hex(meta_off) + ", outside the heap");
    const auto* meta = pool->At<FpMeta>(meta_off);
    if (meta->magic != kFpMagic)
      return Status::Corruption("fptree meta at offset " + Hex(meta_off) + ": bad magic (invariant 1)");
    if (meta->node_size != 256 && meta->node_size != 512 && meta->node_size != 1024)
      return Status::Corruption("fptree meta at offset " + Hex(meta_off) + ": node size " +
                                std::to_string(meta->node_size) + " invalid (invariant 1)");
    if (meta->key_kind != static_cast<uint32_t>(Keys::kKind))
      return Status::Incompatible(std::string("fptree: the pool holds a tree with ") +
                                  (meta->key_kind == 0 ? "u64" : "byte-string") + " keys");
    auto t = std::make_unique<FpTree>(pool, meta_off, meta->node_size);
    PMTREE_RETURN_IF_ERROR(t->RecoverImpl());
    return std::unique_ptr<Base>(std::move(t));
  }

  std::string_view name() const override { return "fptree"; }
  uint32_t capabilities() const override {
    return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill;
  }

  // ---- point operations ---------------------------------------------------------------

  bool Lookup(Arg key, uint64_t* value) override {
    auto guard = pool_->epochs().Protect();
    const uint8_t fp = Keys::Fingerprint(key);
    for (;;) {
      auto r = index_.Find(key);
      size_t s = locks_.StripeOf(r.leaf);
      locks_.LockShared(s);
      if (index_.root() != r.root) {  // a split or removal completed: re-route
        locks_.UnlockShared(s);
        continue;
      }
      const FpLeaf* leaf = Leaf(r.leaf);
      int i = FindInLeaf(leaf, key, fp);
      if (i >= 0) *value = leaf->entries[i].value;
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
    const uint8_t fp = Keys::Fingerprint(key);
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
      FpLeaf* leaf = Leaf(r.leaf);
      int i = FindInLeaf(leaf, key, fp);
      if (i < 0) {
        locks_.Unlock(s);
        return false;
      }
      slot = leaf->entries[i].key;
      uint64_t bm = leaf->bitmap & ~(1ull << i);
      pool_->Store64(&leaf->bitmap, bm);
      // Persist the cleared bit: the delete's one NVM atomic write; the entry
      // is gone for good when we return.
      pool_->Persist(&leaf->bitmap, 8);
      emptied = bm == 0;
      locks_.Unlock(s);
      break;
    }
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
    std::vector<std::pair<uint64_t, uint64_t>> got;  // (key slot, value)
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
        got.clear();
        const FpLeaf* leaf = Leaf(r.leaf);
        for (uint64_t bm = leaf->bitmap; bm != 0; bm &= bm - 1) {
          int i = __builtin_ctzll(bm);
          uint64_t k = leaf->entries[i].key;
          if (keys_.Compare(k, Index::AsArg(cur)) < 0) continue;
          if (end != nullptr && keys_.Compare(k, *end) > 0) continue;
          got.emplace_back(k, leaf->entries[i].value);
        }
        std::sort(got.begin(), got.end(),
                  [this](const auto& a, const auto& b) { return keys_.CompareSlots(a.first, b.first) < 0; });
        // Copy keys while the lock keeps their blobs' entries valid.
        for (size_t j = 0; j < got.size() && n < out.size(); j++) out[n++] = Entry(keys_.Load(got[j].first), got[j].second);
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

  // Builds a fresh chain of leaves filled to `fill`, persists it, and makes it
  // the tree with one persisted store of the head (a crash before that store
  // leaves the empty tree; the unlinked chain is reclaimed by recovery).
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override {
    if (!(fill > 0 && fill <= 1)) return Status::InvalidArgument("bulk load: fill must be in (0, 1]");
    for (size_t i = 0; i < sorted.size(); i++) {
      PMTREE_RETURN_IF_ERROR(Keys::CheckArg(sorted[i].first));
      if (i > 0 && !(sorted[i - 1].first < sorted[i].first))
        return Status::InvalidArgument("bulk load: input not strictly ascending at index " + std::to_string(i));
    }
    for (uint64_t off = meta_->head; off != 0; off = Leaf(off)->next)
      if (Leaf(off)->bitmap != 0) return Status::InvalidArgument("bulk load: tree not empty");
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
    for (size_t li = 0; li < nleaves; li++) {
      FpLeaf* leaf = Leaf(leaves[li]);
      size_t b = li * per, e = std::min(sorted.size(), b + per);
      uint8_t fps[kMaxFingerprints] = {};
      for (size_t j = b; j < e; j++) {
        auto sr = keys_.MakeSlot(sorted[j].first);
        if (!sr.ok()) return undo(sr.status());
        slots.push_back(*sr);
        FpEntry en{*sr, sorted[j].second};
        pool_->Write(&leaf->entries[j - b], &en, sizeof(en));
        fps[j - b] = Keys::Fingerprint(sorted[j].first);
      }
      uint64_t hdr[2] = {(e - b) == 64 ? ~0ull : (1ull << (e - b)) - 1, li + 1 < nleaves ? leaves[li + 1] : 0};
      pool_->Write(leaf, hdr, sizeof(hdr));
      pool_->Write(leaf->fingerprints, fps, sizeof(fps));
      // Flush each loaded leaf now; the single fence below orders them all
      // before the head store that publishes the chain.
      pool_->Flush(leaf, 64 + 16 * (e - b));
      mins.emplace_back(Owned(sorted[b].first), leaves[li]);
    }
    // Every loaded leaf reaches PM before the head names the chain, so a crash
    // never exposes a partly written leaf.
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

  // Invariants (numbered; docs/trees/fptree.md lists them with their reasons):
  //  1. The meta block has the magic, a valid node size and this key kind.
  //  2. Every micro-log is clear when no operation runs.
  //  3. The leaf list from `head` visits 64 B aligned leaves inside the heap,
  //     without a cycle; head is never 0.
  //  4. No bitmap bit at or above the leaf capacity is set.
  //  5. fingerprints[i] == Fingerprint(key of slot i) for every valid slot.
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
    if (meta_->magic != kFpMagic || meta_->node_size != node_size_ ||
        meta_->key_kind != static_cast<uint32_t>(Keys::kKind))
      return Corrupt("meta", meta_off_, 1, "magic, node size or key kind wrong");
    if (meta_->delete_log.leaf != 0 || meta_->delete_log.other != 0)
      return Corrupt("delete log", meta_off_ + offsetof(FpMeta, delete_log), 2, "log not clear");
    for (int i = 0; i < kSplitLogs; i++)
      if (meta_->split_log[i].leaf != 0 || meta_->split_log[i].other != 0)
        return Corrupt("split log", meta_off_ + offsetof(FpMeta, split_log) + 64 * i, 2, "log not clear");
    std::vector<uint64_t> list;
    PMTREE_RETURN_IF_ERROR(CollectLeaves(&list));
    uint64_t bytes = sizeof(FpMeta) + list.size() * node_size_;
    bool have_prev = false;
    uint64_t prev_max = 0;
    std::vector<uint64_t> sorted;
    for (uint64_t off : list) {
      const FpLeaf* leaf = Leaf(off);
      if (leaf->bitmap & ~full_) return Corrupt("leaf", off, 4, "bitmap bit beyond capacity");
      sorted.clear();
      for (uint64_t bm = leaf->bitmap; bm != 0; bm &= bm - 1) {
        int i = __builtin_ctzll(bm);
        uint64_t k = leaf->entries[i].key;
        Status st = keys_.CheckSlot(k);
        if (!st.ok()) return Corrupt("leaf", off, 6, std::string(st.message()));
        Owned key = keys_.Load(k);
        if (leaf->fingerprints[i] != Keys::Fingerprint(Index::AsArg(key)))
          return Corrupt("leaf", off, 5, "fingerprint of slot " + std::to_string(i) + " wrong");
        bytes += keys_.SlotBytes(k);
        sorted.push_back(k);
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
      const FpLeaf* leaf = Leaf(leaf_off);
      for (uint64_t bm = leaf->bitmap; bm != 0; bm &= bm - 1) {
        uint64_t k = leaf->entries[__builtin_ctzll(bm)].key;
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
    st.pm_bytes = sizeof(FpMeta) + list.size() * node_size_;
    for (uint64_t off : list) {
      const FpLeaf* leaf = Leaf(off);
      for (uint64_t bm = leaf->bitmap & full_; bm != 0; bm &= bm - 1) {
        st.entries++;
        st.pm_bytes += keys_.SlotBytes(leaf->entries[__builtin_ctzll(bm)].key);
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
    return st;
  }

  // Nothing volatile needs saving: recovery rebuilds the DRAM index from the
  // leaves, and the pool saves the allocator state.
  Status Close() override { return pool_->Close(); }

 private:
  enum class Mode { kInsert, kUpdate, kUpsert };

  FpLeaf* Leaf(uint64_t off) const { return pool_->At<FpLeaf>(off); }

  Status Corrupt(const char* what, uint64_t off, int inv, const std::string& msg) const {
    return Status::Corruption(std::string("fptree ") + what + " at offset " + Hex(off) + ": invariant " +
                              std::to_string(inv) + " violated: " + msg);
  }

  // Candidate slots whose fingerprint matches, masked by the bitmap; SSE2
  // compares 16 fingerprints per instruction (FPTree's SIMD filter).
  uint64_t MatchFingerprints(const FpLeaf* leaf, uint8_t fp) const {
    uint64_t m = 0;
#if defined(__SSE2__)
    const __m128i needle = _mm_set1_epi8(static_cast<char>(fp));
    for (int b = 0; b < cap_; b += 16) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(leaf->fingerprints + b));
      m |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, needle)))) << b;
    }
#else
    for (int i = 0; i < cap_; i++)
      if (leaf->fingerprints[i] == fp) m |= 1ull << i;
#endif
    return m & leaf->bitmap & full_;
  }

  int FindInLeaf(const FpLeaf* leaf, Arg key, uint8_t fp) const {
    for (uint64_t m = MatchFingerprints(leaf, fp); m != 0; m &= m - 1) {
      int i = __builtin_ctzll(m);
      if (keys_.Equal(leaf->entries[i].key, key)) return i;
    }
    return -1;
  }

  // Writes key/value into a free slot of `leaf_off` (caller holds its lock
  // and guarantees a free slot): FPTree's two-step insert.
  Status InsertIntoLeaf(uint64_t leaf_off, Arg key, uint64_t value, uint8_t fp) {
    FpLeaf* leaf = Leaf(leaf_off);
    PMTREE_ASSIGN_OR_RETURN(uint64_t slot, keys_.MakeSlot(key));
    uint64_t bm = leaf->bitmap;
    int i = __builtin_ctzll(~bm & full_);
    FpEntry en{slot, value};
    pool_->Write(&leaf->entries[i], &en, sizeof(en));
    pool_->Write(&leaf->fingerprints[i], &fp, 1);
    pool_->Flush(&leaf->entries[i], sizeof(en));
    pool_->Flush(&leaf->fingerprints[i], 1);
    // Persist entry and fingerprint before the bitmap bit that validates them,
    // so a crash never exposes a slot with an unwritten key, value or
    // fingerprint.
    pool_->Fence();
    pool_->Store64(&leaf->bitmap, bm | (1ull << i));
    // Persist the bitmap: the commit point of the insert, durable on return.
    pool_->Persist(&leaf->bitmap, 8);
    return Status::Ok();
  }

  Result<bool> Put(Arg key, uint64_t value, Mode mode) {
    PMTREE_RETURN_IF_ERROR(Keys::CheckArg(key));
    auto guard = pool_->epochs().Protect();
    const uint8_t fp = Keys::Fingerprint(key);
    for (;;) {
      auto r = index_.Find(key);
      size_t s = locks_.StripeOf(r.leaf);
      locks_.Lock(s);
      if (index_.root() != r.root) {
        locks_.Unlock(s);
        continue;
      }
      FpLeaf* leaf = Leaf(r.leaf);
      int i = FindInLeaf(leaf, key, fp);
      if (i >= 0) {
        if (mode == Mode::kInsert) {
          locks_.Unlock(s);
          return false;
        }
        pool_->Store64(&leaf->entries[i].value, value);
        // Persist the new value (one failure-atomic 8-byte word) before the
        // lock is released, so no reader sees an unpersisted value.
        pool_->Persist(&leaf->entries[i].value, 8);
        locks_.Unlock(s);
        return mode == Mode::kUpdate;
      }
      if (mode == Mode::kUpdate) {
        locks_.Unlock(s);
        return false;
      }
      if ((leaf->bitmap & full_) != full_) {
        Status st = InsertIntoLeaf(r.leaf, key, value, fp);
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
      Status ins = InsertIntoLeaf(target, key, value, fp);
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

  // ---- split (FPTree's split micro-log) -------------------------------------------------

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

  void ClearLog(FpMicroLog* log) {
    pool_->Store64(&log->leaf, 0);
    pool_->Store64(&log->other, 0);
    // Persist the cleared log so recovery does not replay a finished
    // operation over later changes to these leaves.
    pool_->Persist(log, 16);
  }

  // Splits the full leaf `leaf_off` (caller holds its lock): keys >= *sep move
  // to *new_leaf, which is linked after it.  Durable on return.
  Status SplitLeaf(uint64_t leaf_off, uint64_t* new_leaf, Owned* sep) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t nl, pool_->allocator().Allocate(node_size_));
    int li = AcquireSplitLog();
    FpMicroLog* log = &meta_->split_log[li];
    pool_->Store64(&log->leaf, leaf_off);
    pool_->Store64(&log->other, nl);
    // Flush the split log (PCurrentLeaf, PNewLeaf).  The fence that persists
    // the new leaf's copy (SplitFromLog) orders it before the old leaf's
    // first change, which is all recovery needs to finish the split.
    pool_->Flush(log, 16);
    *sep = SplitFromLog(leaf_off, nl);
    ClearLog(log);
    ReleaseSplitLog(li);
    *new_leaf = nl;
    return Status::Ok();
  }

  // The split proper, also run by recovery when the old leaf is still full.
  Owned SplitFromLog(uint64_t leaf_off, uint64_t nl) {
    FpLeaf* leaf = Leaf(leaf_off);
    FpLeaf* nleaf = Leaf(nl);
    std::vector<std::pair<uint64_t, int>> ks;  // (key slot, position)
    for (uint64_t bm = leaf->bitmap & full_; bm != 0; bm &= bm - 1) {
      int i = __builtin_ctzll(bm);
      ks.emplace_back(leaf->entries[i].key, i);
    }
    std::sort(ks.begin(), ks.end(), [this](const auto& a, const auto& b) { return keys_.CompareSlots(a.first, b.first) < 0; });
    const size_t keep = ks.size() / 2;
    uint64_t upper = 0;
    for (size_t j = keep; j < ks.size(); j++) upper |= 1ull << ks[j].second;
    pool_->Write(nleaf, leaf, node_size_);
    pool_->Store64(&nleaf->bitmap, upper);
    // Persist the whole new leaf (copy of the old one, upper-half bitmap, the
    // old leaf's sibling) -- and the split log flushed before it -- before the
    // old leaf drops the moved entries, so they are never durable in neither
    // leaf and a crash from here on is finished by recovery.
    pool_->Persist(nleaf, node_size_);
    pool_->Store64(&leaf->bitmap, leaf->bitmap & ~upper);
    // Persist the halved bitmap before linking: recovery tells "redo the whole
    // split" from "redo the link" by whether this bitmap is still full.
    pool_->Persist(&leaf->bitmap, 8);
    pool_->Store64(&leaf->next, nl);
    // Persist the link before the log is cleared, so the new leaf is never
    // unreachable once the log is gone.
    pool_->Persist(&leaf->next, 8);
    return keys_.Load(ks[keep].first);
  }

  // ---- leaf removal (FPTree's delete micro-log) -------------------------------------------

  // Unlinks `leaf` (empty) from the list after `prev` (0: it is the head).
  // Caller holds smo_mu_ (or is recovery) and the locks of both leaves.
  void UnlinkLeaf(uint64_t prev, uint64_t leaf) {
    FpMicroLog* log = &meta_->delete_log;
    pool_->Store64(&log->leaf, leaf);
    pool_->Store64(&log->other, prev);
    // Persist the delete log (PCurrentLeaf, PPrevLeaf) before the unlink, so
    // recovery can finish an interrupted unlink.
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
      const FpLeaf* l = Leaf(leaf);
      bool linked = prev != 0 ? Leaf(prev)->next == leaf : meta_->head == leaf;
      if (r2.leaf == leaf && r2.prev == prev && (l->bitmap & full_) == 0 && linked &&
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
      return Status::Corruption(std::string("fptree ") + what + ": leaf offset " + Hex(off) + " outside the heap");
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

  // Recovery rules (docs/trees/fptree.md, "Recovery"):
  //  R1 split log set, new leaf named, old leaf still full: the crash hit
  //     before the old leaf's bitmap changed; redo the split from the copy.
  //  R2 split log set, old leaf no longer full: redo the link old->next = new.
  //  R3 split log with PCurrentLeaf 0 or PNewLeaf 0: nothing happened; clear.
  //  R4 delete log set: redo the unlink if the predecessor (or head) still
  //     names the leaf; clear.
  //  R5 empty leaves (but the last one) leave the list through R4's protocol.
  //  R6 the allocator is rebuilt from the reachable blocks and the DRAM index
  //     from the leaves' minimum keys.
  // Each step is idempotent, so a crash during recovery is recovered again.
  Status RecoverImpl() {
    for (int i = 0; i < kSplitLogs; i++) {
      FpMicroLog* log = &meta_->split_log[i];
      uint64_t cur = log->leaf, nl = log->other;
      if (cur != 0 && nl != 0) {
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(cur, "split log"));
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(nl, "split log"));
        FpLeaf* leaf = Leaf(cur);
        if ((leaf->bitmap & full_) == full_) {
          (void)SplitFromLog(cur, nl);  // R1
        } else if (leaf->next != nl) {
          pool_->Store64(&leaf->next, nl);
          // R2: persist the redone link before the log is cleared.
          pool_->Persist(&leaf->next, 8);
        }
      }
      if (cur != 0 || nl != 0) ClearLog(log);  // R3
    }
    {
      FpMicroLog* log = &meta_->delete_log;
      uint64_t leaf = log->leaf, prev = log->other;
      if (leaf != 0) {
        PMTREE_RETURN_IF_ERROR(CheckLeafOff(leaf, "delete log"));
        if (prev != 0) PMTREE_RETURN_IF_ERROR(CheckLeafOff(prev, "delete log"));
        uint64_t* link = prev != 0 ? &Leaf(prev)->next : &meta_->head;
        if (*link == leaf) {
          pool_->Store64(link, Leaf(leaf)->next);
          // R4: persist the redone unlink before the log is cleared.
          pool_->Persist(link, 8);
        }
      }
      if (leaf != 0 || prev != 0) ClearLog(log);
    }
    std::vector<uint64_t> list;
    PMTREE_RETURN_IF_ERROR(CollectLeaves(&list));
    // R5: drop empty leaves, keeping at least one.
    std::vector<uint64_t> kept;
    for (size_t i = 0; i < list.size(); i++) {
      FpLeaf* leaf = Leaf(list[i]);
      if (leaf->bitmap & ~full_) return Corrupt("leaf", list[i], 4, "bitmap bit beyond capacity");
      bool last_standing = kept.empty() && i + 1 == list.size();
      if ((leaf->bitmap & full_) == 0 && !last_standing) {
        UnlinkLeaf(kept.empty() ? 0 : kept.back(), list[i]);
        continue;
      }
      kept.push_back(list[i]);
    }
    // R6.
    Allocator& a = pool_->allocator();
    a.BeginRebuild();
    PMTREE_RETURN_IF_ERROR(a.MarkUsed(meta_off_, sizeof(FpMeta)));
    std::vector<std::pair<Owned, uint64_t>> mins;
    for (uint64_t off : kept) {
      PMTREE_RETURN_IF_ERROR(a.MarkUsed(off, node_size_));
      const FpLeaf* leaf = Leaf(off);
      std::optional<uint64_t> min;
      for (uint64_t bm = leaf->bitmap & full_; bm != 0; bm &= bm - 1) {
        uint64_t k = leaf->entries[__builtin_ctzll(bm)].key;
        Status st = keys_.MarkUsed(k);
        if (!st.ok()) return st.Annotate("fptree leaf at offset " + Hex(off));
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
  FpMeta* const meta_;
  const uint32_t node_size_;
  const int cap_;
  const uint64_t full_;
  Index index_;
  LeafLocks locks_;
  std::mutex smo_mu_;  // serialises index changes and leaf removals
  std::atomic<uint32_t> split_logs_busy_{0};
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> removals_{0};
};

}  // namespace
}  // namespace fptree

Result<std::unique_ptr<Tree>> CreateFpTree(Pool* pool, const TreeOptions& options) {
  return fptree::FpTree<U64Keys>::Create(pool, options);
}
Result<std::unique_ptr<Tree>> RecoverFpTree(Pool* pool, const TreeOptions& options) {
  return fptree::FpTree<U64Keys>::Recover(pool, options);
}
Result<std::unique_ptr<BytesTree>> CreateFpTreeBytes(Pool* pool, const TreeOptions& options) {
  return fptree::FpTree<BytesKeys>::Create(pool, options);
}
Result<std::unique_ptr<BytesTree>> RecoverFpTreeBytes(Pool* pool, const TreeOptions& options) {
  return fptree::FpTree<BytesKeys>::Recover(pool, options);
}

}  // namespace pmtree
