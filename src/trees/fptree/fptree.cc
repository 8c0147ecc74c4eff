// SPDX-License-Identifier: Apache-2.0
//
// fptree: FPTree on pmtree.  Read docs/trees/fptree.md first; the layout is in
// layout.h.  What fptree shares with wbtree -- creation, routing and locking,
// update in place, the scan loop, bulk-load chain, the delete log and leaf
// unlink, the leaf-list walk, recovery of everything but the split log,
// Verify/Stats -- is trees/common/leaf_list_tree.h.  This file holds FPTree's
// own parts: the fingerprinted leaf (search, two-step insert, delete), the
// split with its micro-log and its replay, the bulk-load leaf image,
// invariant 5, factories.

#include "trees/fptree/fptree.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "trees/common/keys.h"
#include "trees/common/leaf_list_tree.h"
#include "trees/common/upcast.h"
#include "trees/fptree/layout.h"

namespace pmtree {
namespace fptree {
namespace {

template <KeyPolicy KP>
class FpTree final : public LeafListTree<FpTree<KP>, KP, FpLeaf, FpEntry> {
  using LL = LeafListTree<FpTree<KP>, KP, FpLeaf, FpEntry>;
  friend LL;

 public:
  using Arg = typename LL::Arg;
  using Owned = typename LL::Owned;
  using Entry = typename LL::Entry;
  using Index = typename LL::Index;

  // Bitmap bit i validates entries[i]; the bitmap has no other bits.
  static constexpr LeafListTraits kTraits{"fptree", kFpMagic, kFpDefaultNodeSize, /*entry_bit_shift=*/0,
                                          /*flag_bits=*/0, /*older_magic=*/kFpMagicV1};

  FpTree(PoolImpl* pool, uint64_t meta_off, uint32_t node_size) : LL(pool, meta_off, node_size) {}

 private:
  using LL::cap_;
  using LL::Corrupt;
  using LL::entry_mask_;
  using LL::keys_;
  using LL::LeafAt;
  using LL::meta_;
  using LL::node_size_;
  using LL::pool_;

  static int Capacity(uint32_t node_size) { return FpCapacity(node_size); }
  static uint32_t EntriesOffset(uint32_t /*node_size*/) { return offsetof(FpLeaf, entries); }
  static uint32_t MagicOffset(uint32_t node_size) { return FpMagicOffset(node_size); }
  static uint64_t MagicMask(uint32_t /*node_size*/) { return ~0ull; }  // a whole free word

  static void InitEmptyLeaf(PoolImpl* pool, FpLeaf* leaf, uint32_t /*node_size*/) {
    pool->Zero(leaf, 64);
    // Flush the empty leaf's header; the meta block's fence (LeafListTree::
    // Create) orders it before root slot 0 names the tree, so the head never
    // points at garbage.
    pool->Flush(leaf, 64);
  }

  // ---- leaf helpers ------------------------------------------------------------------------

  // A search probes the leaf with the key's fingerprint.
  using Probe = uint8_t;
  static Probe MakeProbe(Arg key) { return KP::Fingerprint(key); }

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
    return m & leaf->bitmap & entry_mask_;
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
    FpLeaf* leaf = LeafAt(leaf_off);
    PMTREE_ASSIGN_OR_RETURN(uint64_t slot, keys_.MakeSlot(key));
    uint64_t bm = leaf->bitmap;
    int i = __builtin_ctzll(~bm & entry_mask_);
    FpEntry en{slot, value};
    pool_->Write(&leaf->entries[i], &en, sizeof(en));
    pool_->Write(&leaf->fingerprints[i], &fp, 1);
    // Flush the entry and its fingerprint (the fence below makes them durable
    // before the bitmap bit), so a crash never validates an unwritten slot.
    pool_->Flush(&leaf->entries[i], sizeof(en));
    // Flush the fingerprint too, so the bitmap bit is never durable while the
    // fingerprint it validates is not, without relying on both sharing the
    // header line.
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

  // The delete (caller holds the leaf lock): clear entry i's bitmap bit.
  void ClearEntry(FpLeaf* leaf, int i) {
    pool_->Store64(&leaf->bitmap, leaf->bitmap & ~(1ull << i));
    // Persist the cleared bit: the delete's one NVM atomic write; the entry
    // is gone for good when we return.
    pool_->Persist(&leaf->bitmap, 8);
  }

  // The leaf's keys >= from (and <= *end), in key order: the valid entries
  // sorted (FPTree leaves are unsorted).
  using ScanScratch = std::vector<std::pair<uint64_t, uint64_t>>;  // (key slot, value)
  void ScanLeaf(const FpLeaf* leaf, Arg from, const Arg* end, std::span<Entry> out, size_t* n,
                ScanScratch* got) const {
    got->clear();
    for (uint64_t bm = leaf->bitmap; bm != 0; bm &= bm - 1) {
      int i = __builtin_ctzll(bm);
      uint64_t k = leaf->entries[i].key;
      if (keys_.Compare(k, from) < 0) continue;
      if (end != nullptr && keys_.Compare(k, *end) > 0) continue;
      got->emplace_back(k, leaf->entries[i].value);
    }
    std::sort(got->begin(), got->end(),
              [this](const auto& a, const auto& b) { return keys_.CompareSlots(a.first, b.first) < 0; });
    for (size_t j = 0; j < got->size() && *n < out.size(); j++)
      out[(*n)++] = Entry(keys_.Load((*got)[j].first), (*got)[j].second);
  }

  // ---- split (FPTree's split micro-log) -------------------------------------------------

  // Splits the full leaf `leaf_off` (caller holds its lock): keys >= *sep move
  // to *new_leaf, which is linked after it.  Durable on return.
  Status SplitLeaf(uint64_t leaf_off, uint64_t* new_leaf, Owned* sep) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t nl, pool_->allocator().Allocate(node_size_));
    this->NoteLeaf(nl);
    int li = this->AcquireSplitLog();
    FpMicroLog* log = &meta_->split_log[li];
    pool_->Store64(&log->leaf, leaf_off);
    pool_->Store64(&log->other, nl);
    // Persist the split log (PCurrentLeaf, PNewLeaf) before the new leaf's
    // copy: the copy carries the leaf magic, and a new leaf durable with its
    // magic but with no durable log naming it would be free space with the
    // magic after a crash -- a lost leaf to recovery's scan.
    pool_->Persist(log, 16);
    *sep = SplitFromLog(leaf_off, nl);
    this->ClearLog(log);
    this->ReleaseSplitLog(li);
    *new_leaf = nl;
    return Status::Ok();
  }

  // The split proper, also run by recovery when the old leaf is still full.
  Owned SplitFromLog(uint64_t leaf_off, uint64_t nl) {
    FpLeaf* leaf = LeafAt(leaf_off);
    FpLeaf* nleaf = LeafAt(nl);
    std::vector<std::pair<uint64_t, int>> ks;  // (key slot, position)
    for (uint64_t bm = leaf->bitmap & entry_mask_; bm != 0; bm &= bm - 1) {
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

  // Recovery rules (docs/trees/fptree.md, "Recovery"); R1 and R2 are this
  // function, the others are LeafListTree::RecoverImpl's shared steps:
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
  Status ReplaySplit(uint64_t cur, uint64_t nl) {
    FpLeaf* leaf = LeafAt(cur);
    if ((leaf->bitmap & entry_mask_) == entry_mask_) {
      (void)SplitFromLog(cur, nl);  // R1
    } else if (leaf->next != nl) {
      pool_->Store64(&leaf->next, nl);
      // R2: persist the redone link before the log is cleared, so the new
      // leaf never becomes unreachable.
      pool_->Persist(&leaf->next, 8);
    }
    return Status::Ok();
  }

  // ---- bulk load: the leaf image ------------------------------------------------------------

  struct LoadState {
    uint8_t fps[kMaxFingerprints] = {};
  };

  void PutLoadedEntry(FpLeaf* leaf, int j, uint64_t slot, uint64_t value, Arg key, LoadState* st) {
    FpEntry en{slot, value};
    pool_->Write(&leaf->entries[j], &en, sizeof(en));
    st->fps[j] = KP::Fingerprint(key);
  }

  void SealLoadedLeaf(FpLeaf* leaf, int m, uint64_t next, const LoadState& st) {
    uint64_t hdr[2] = {m == 64 ? ~0ull : (1ull << m) - 1, next};
    pool_->Write(leaf, hdr, sizeof(hdr));
    pool_->Write(leaf->fingerprints, st.fps, sizeof(st.fps));
    // Flush each loaded leaf now; the bulk load's single fence orders them
    // all before the head store that publishes the chain.
    pool_->Flush(leaf, 64 + 16 * m);
  }

  // ---- Verify: invariant 5 --------------------------------------------------------------------

  //  5. fingerprints[i] == Fingerprint(key of slot i) for every valid slot.
  Status CheckEntry(uint64_t off, const FpLeaf* leaf, int i, uint64_t k) const {
    Owned key = keys_.Load(k);
    if (leaf->fingerprints[i] != KP::Fingerprint(Index::AsArg(key)))
      return Corrupt("leaf", off, 5, "fingerprint of slot " + std::to_string(i) + " wrong");
    return Status::Ok();
  }
};

}  // namespace

PMTREE_REGISTRY_ENTRY_POINTS(FpTree);

}  // namespace fptree
}  // namespace pmtree
