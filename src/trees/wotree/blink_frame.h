// SPDX-License-Identifier: Apache-2.0
//
// BlinkFrame: WO-tree's persistent tree frame (Ma et al., JCST 2021, §4.3;
// docs/trees/wotree.md), shared with the native sorted B+-tree baseline
// `sortedtree` (docs/trees/sortedtree.md), which differs only in its leaves.
//
// What the frame owns:
//  - the meta block, the root and root splits;
//  - inner nodes kept sorted in place: FAST-style right-to-left shifting with
//    the paper's *delayed flush* (a line is flushed when the shift leaves it,
//    §4.3.1), transient duplicates recognised by equal left and right
//    pointers, splits that link the new node through `next` before the old
//    node drops its upper half (§4.3.2, Algorithm 4);
//  - descent (lock-free through inner nodes, §4.3.5), moving right along
//    `next` when a key is at or above the sibling's low key (B-link);
//  - leaf locking (readers share, writers exclude; §4.3.5), the point
//    operations, scans, bulk load with a fill factor (bottom-up, one root store);
//  - the leaf count (meta.leaves, F9) that lets recovery refuse a cut leaf
//    chain instead of losing what lies behind the cut;
//  - recovery (Fig. 9): replay the leaf log, build the frame from the
//    consistent inner entries (transient duplicates dropped, interrupted
//    truncations finished), rebuild the allocator, then insert what the
//    frame lacks (nodes reachable only through `next`);
//  - Verify, Stats.
//
// The leaf format is a policy class `L` (WO-tree's bitmap + slot-array leaf in
// wotree.cc, the sorted leaf in sortedtree.cc) with this interface:
//
//   static constexpr const char* kName; static constexpr uint64_t kMagic;
//   static constexpr uint32_t kVariants;          // accepted Meta::variant bits
//   L(Pool*, Keys*, Meta*, uint32_t node_size, uint32_t variant);
//   int capacity() const;
//   void InitEmpty(uint64_t off, uint64_t next, uint64_t low, uint32_t flags);  // flushed, no fence
//   int Find(uint64_t off, Arg key) const;        // entry handle or -1
//   uint64_t* ValueWord(uint64_t off, int h);
//   uint64_t KeyOf(uint64_t off, int h) const;
//   int Count(uint64_t off) const;                // valid entries
//   using Record = {uint64_t key slot, uint64_t value};   // 16 bytes
//   size_t WriteLeaf(uint64_t off, uint64_t next, uint64_t low, uint32_t flags,
//                    std::span<const Record> sorted);  // whole leaf, not flushed; bytes to persist
//   void Insert(uint64_t off, Arg key, uint64_t slot, uint64_t value);  // room; durable on return
//   void Remove(uint64_t off, int h);             // durable on return
//   Status Split(uint64_t off, uint64_t new_off, Arg key, uint64_t slot, uint64_t value,
//                uint64_t* sep);                  // durable split + the insert; *sep = new low key
//   template <class F> void ForEach(uint64_t off, F f) const;  // valid (slot, value) in key order
//   Status ReplayLogs();                          // recovery R1
//   Status Repair(uint64_t off, uint64_t* repairs);  // recovery R4, idempotent
//   Status Check(uint64_t off) const;             // the leaf's own invariants (Verify)
//   void AddStats(TreeStats*) const;
//
// Invariants (cited at the barriers and checked by Verify):
//   F1 meta: magic, version, node size, key kind; root level = height - 1.
//   F2 each level is a chain from its leftmost node through `next`; a node's
//      next (when set) has kHasLowKey and a strictly greater low key; the
//      leftmost node of a level has no low key.
//   F3 every key a node holds is >= its low key and < its next's low key.
//   F4 an inner node at rest has no transient duplicate, records in strictly
//      ascending key order, record i's key equal to its child's low key, and
//      children one level down; its leftmost child has the node's low key.
//   F5 every node but a level's leftmost is some parent's child (at rest; a
//      crash may leave it reachable only through `next`, recovery R6).
//   F6 bytes reached (meta, nodes, key blobs) == allocator bytes in use.
//   F7 a node becomes reachable (next, a parent record, meta.root) only
//      after its whole content is persistent.
//   F8 a writer releases a node's lock only after its last fence, so a
//      reader never returns data a crash could still lose.
//   F9 meta.leaves is at least 1 and at most the leaves of level 0's chain,
//      at every crash instant: it is stored only after the links of the
//      leaves it counts are durable (a leaf split's count after the policy's
//      Split returned; concurrent splits may store their counts out of
//      order, which only lowers it), and leaves are never freed.  So a
//      recovery walk that reaches fewer leaves met a cut chain (issue 17).
//
// Thread safety: pmtree/tree.h.  Inner nodes: striped version locks
// (trees/common/version_lock.h) -- writers lock, readers validate and never
// write.  Leaves: striped reader/writer spin locks.  Root growth: a mutex.
// Nodes are never freed (a delete leaves an empty leaf, as the paper's
// deletion never merges), so a reader can always follow an offset it read.

#ifndef PMTREE_TREES_WOTREE_BLINK_FRAME_H_
#define PMTREE_TREES_WOTREE_BLINK_FRAME_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/tree.h"
#include "trees/common/bulk_input.h"
#include "trees/common/keys.h"
#include "trees/common/node_reserve.h"
#include "trees/common/version_lock.h"
#include "trees/wotree/layout.h"

namespace pmtree::wotree {

std::string Hex(uint64_t v);

// Valid node sizes: multiples of 64 from 256 to 2048 (4..32 lines).
Status CheckNodeSize(const char* name, uint32_t node_size);

// Striped reader/writer locks for leaves (the paper's leaf read locks).
class LeafLockTable {
 public:
  static constexpr size_t kStripes = 1024;
  LeafLockTable() : locks_(new Slot[kStripes]) {}
  SharedSpinLock& For(uint64_t off) { return locks_[Mix64(off) & (kStripes - 1)].lock; }

 private:
  struct alignas(64) Slot {
    SharedSpinLock lock;
  };
  std::unique_ptr<Slot[]> locks_;
};

// What the last recovery did (tests, Stats()).
struct RecoveryReport {
  bool crashed = false;              // repairs ran (no clean shutdown)
  uint64_t leaf_logs_replayed = 0;   // R1
  uint64_t duplicates_removed = 0;   // R3
  uint64_t truncations = 0;          // R3
  uint64_t leaves_repaired = 0;      // R4
  uint64_t separators_inserted = 0;  // R6
};

template <KeyPolicy KP, class L>
class BlinkFrame final : public BasicTree<typename KP::Arg> {
 public:
  using Arg = typename KP::Arg;
  using Base = BasicTree<Arg>;
  using Entry = typename Base::Entry;

  static Result<std::unique_ptr<Base>> Create(PoolImpl* pool, const TreeOptions& options, uint32_t variant) {
    PMTREE_RETURN_IF_ERROR(CheckExtra(options));
    const uint32_t node_size = options.node_size == 0 ? kDefaultNodeSize : options.node_size;
    PMTREE_RETURN_IF_ERROR(CheckNodeSize(L::kName, node_size));
    if (pool->root(0) != 0) return Status::Busy(std::string(L::kName) + ": pool root slot 0 already holds a tree");
    PMTREE_ASSIGN_OR_RETURN(uint64_t meta_off, pool->allocator().Allocate(sizeof(Meta)));
    auto leaf_r = pool->allocator().Allocate(node_size);
    if (!leaf_r.ok()) {
      pool->allocator().Free(meta_off, sizeof(Meta));
      return leaf_r.status();
    }
    auto* meta = pool->At<Meta>(meta_off);
    pool->Zero(meta, sizeof(Meta));
    Meta head{};
    head.magic = L::kMagic;
    head.version = kFormatVersion;
    head.node_size = node_size;
    head.root = *leaf_r;
    head.key_kind = static_cast<uint32_t>(KP::kKind);
    head.variant = variant;
    head.leaves = 1;  // the empty root leaf (F9)
    pool->Write(meta, &head, 64);
    std::unique_ptr<BlinkFrame> t(new BlinkFrame(pool, meta_off));
    t->leaf_.InitEmpty(*leaf_r, 0, 0, 0);
    // Persist the meta block (cleared logs included) and the empty root leaf
    // flushed by InitEmpty before root slot 0 names them: SetRoot is the
    // commit point of creation (F7).
    pool->Persist(meta, sizeof(Meta));
    pool->SetRoot(0, meta_off);
    return std::unique_ptr<Base>(std::move(t));
  }

  static Result<std::unique_ptr<Base>> Recover(PoolImpl* pool, const TreeOptions& options) {
    PMTREE_RETURN_IF_ERROR(CheckExtra(options));
    const std::string name = L::kName;
    const uint64_t meta_off = pool->root(0);
    if (meta_off == 0) return Status::NotFound(name + ": pool root slot 0 is empty (no tree in this pool)");
    if (meta_off % 64 != 0 || !pool->InHeap(meta_off, sizeof(Meta)))
      return Status::Corruption(name + ": root slot 0 holds " + Hex(meta_off) + ", outside the heap");
    const Meta* m = pool->At<Meta>(meta_off);
    if (m->magic != L::kMagic)
      return Status::Corruption(name + " meta at offset " + Hex(meta_off) + ": bad magic (F1)");
    if (m->version != kFormatVersion)
      return Status::Incompatible(name + " meta at offset " + Hex(meta_off) + ": format version " +
                                  std::to_string(m->version) + ", this build reads " + std::to_string(kFormatVersion) +
                                  (m->version == 1 ? " (version 1 predates the leaf count)" : ""));
    if (!CheckNodeSize(L::kName, m->node_size).ok() || (m->variant & ~L::kVariants) != 0)
      return Status::Corruption(name + " meta at offset " + Hex(meta_off) + ": node size or variant invalid (F1)");
    // A variant recovers only the pools it created: the pool's layout name
    // must be the one the meta's variant implies (a relabelled pool is
    // refused, as every test-only variant's is).
    if (const std::string_view want = m->variant ? L::kPaperName : L::kName;
        !pool->layout().empty() && pool->layout() != want)
      return Status::Incompatible(name + ": the pool is labelled '" + std::string(pool->layout()) +
                                  "' but its tree was created as '" + std::string(want) + "'");
    if (m->key_kind != static_cast<uint32_t>(KP::kKind))
      return Status::Incompatible(name + ": the pool holds a tree with " +
                                  (m->key_kind == 0 ? "u64" : "byte-string") + " keys");
    std::unique_ptr<BlinkFrame> t(new BlinkFrame(pool, meta_off));
    PMTREE_RETURN_IF_ERROR(t->RecoverImpl());
    return std::unique_ptr<Base>(std::move(t));
  }

  std::string_view name() const override { return meta_->variant ? L::kPaperName : L::kName; }
  uint32_t capabilities() const override {
    // kCapAssumesLineOrder: a FAST shift writes a record's two words in an
    // order that only the per-line-prefix model preserves (as FAST+FAIR).
    return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart |
           kCapAssumesLineOrder | (meta_->variant ? static_cast<uint32_t>(kCapTestOnly) : 0u);
  }

  // ---- point operations ------------------------------------------------------------------

  // A key found in its leaf is there (F3); only a miss asks whether the key
  // moved right, which saves reading the sibling's low key on every hit.
  bool Lookup(Arg key, uint64_t* value) override {
    auto guard = pool_->epochs().Protect();
    uint64_t leaf = DescendTo(0, key);
    for (;;) {
      llocks_.For(leaf).lock_shared();
      const int h = leaf_.Find(leaf, key);
      uint64_t nx = 0;
      if (h >= 0) *value = PoolImpl::Load64(leaf_.ValueWord(leaf, h));
      const bool right = h < 0 && BelongsRight(leaf, key, &nx);
      llocks_.For(leaf).unlock_shared();
      if (!right) return h >= 0;
      leaf = nx;
    }
  }

  Result<bool> Insert(Arg key, uint64_t value) override { return Put(key, value, Mode::kInsert); }
  Result<bool> Update(Arg key, uint64_t value) override { return Put(key, value, Mode::kUpdate); }
  Result<bool> Upsert(Arg key, uint64_t value) override { return Put(key, value, Mode::kUpsert); }

  Result<bool> Remove(Arg key) override {
    PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
    auto guard = pool_->epochs().Protect();
    const uint64_t leaf = LockLeaf(key, /*exclusive=*/true);
    const int h = leaf_.Find(leaf, key);
    if (h < 0) {
      llocks_.For(leaf).unlock();
      return false;
    }
    const uint64_t slot = leaf_.KeyOf(leaf, h);
    leaf_.Remove(leaf, h);  // durable on return (F8: before the unlock)
    llocks_.For(leaf).unlock();
    keys_.Release(slot);
    return true;
  }

  size_t Scan(Arg start, const Arg* end, std::span<Entry> out) override {
    auto guard = pool_->epochs().Protect();
    size_t n = 0;
    if (out.empty()) return 0;
    uint64_t leaf = LockLeaf(start, /*exclusive=*/false);
    for (;;) {
      bool done = false;
      leaf_.ForEach(leaf, [&](uint64_t slot, uint64_t value) {
        if (done || n >= out.size() || keys_.Compare(slot, start) < 0) return;
        if (end != nullptr && keys_.Compare(slot, *end) > 0) {
          done = true;
          return;
        }
        out[n++] = Entry(keys_.Load(slot), value);
      });
      // Read next under the lock: entries moved out by a later split went to
      // a leaf between this one and `next`, and were returned here already.
      const uint64_t next = PoolImpl::Load64(&P(leaf)->next);
      llocks_.For(leaf).unlock_shared();
      if (done || n >= out.size() || next == 0) return n;
      llocks_.For(next).lock_shared();
      leaf = next;
    }
  }
  using Base::Scan;

  // Into an empty tree (the root is a leaf with no entry and no sibling):
  // leaves of an even share of at most fill x capacity entries, linked
  // through `next`, each but the first with a separator blob of its own as
  // low key; inner levels whose records name each child by its low key
  // (F4), bottom-up.  Every node is flushed, one fence, then meta.root names
  // the top node (F7): a crash shows the empty tree (recovery R5 frees the
  // unreachable new nodes) or the whole load.
  Status BulkLoad(std::span<const typename Base::InputEntry> sorted, double fill) override;

  // ---- introspection -----------------------------------------------------------------------

  Status Verify() override;
  TreeStats Stats() override;
  Status Close() override {
    // The exact leaf count (F9) before the clean flag: the next clean open
    // takes it as it is, and a crashed open checks its walk against it.
    if (!closed_) StoreLeafCount(leaf_count_.load(), /*fence=*/true);
    closed_ = true;
    return pool_->Close();
  }

  const RecoveryReport& recovery_report() const { return report_; }
  L& leaf_ops() { return leaf_; }

 private:
  enum class Mode { kInsert, kUpdate, kUpsert };
  struct Route {
    uint64_t node;
    bool right;  // node is the sibling, not a child
  };

  BlinkFrame(PoolImpl* pool, uint64_t meta_off)
      : pool_(pool),
        keys_(pool),
        meta_off_(meta_off),
        meta_(pool->At<Meta>(meta_off)),
        node_size_(meta_->node_size),
        inner_cap_(InnerCapacity(node_size_)),
        leaf_(pool, &keys_, meta_, node_size_, meta_->variant) {}

  static Status CheckExtra(const TreeOptions& o) {
    if (!o.extra.empty())
      return Status::InvalidArgument(std::string(L::kName) + ": unknown option '" + o.extra.begin()->first +
                                     "' (" + L::kName + " has no extra options)");
    return Status::Ok();
  }

  NodePrefix* P(uint64_t off) const { return pool_->At<NodePrefix>(off); }
  InnerNode* I(uint64_t off) const { return pool_->At<InnerNode>(off); }
  static uint32_t Level(const NodePrefix* p) { return __atomic_load_n(&p->level, __ATOMIC_ACQUIRE); }
  InnerRecord* Rec(uint64_t off, uint64_t i) const { return &I(off)->records[i]; }

  // The key argument a slot stands for (a view of an immutable blob).
  Arg ArgOf(uint64_t slot) const {
    if constexpr (KP::kInline) {
      return slot;
    } else {
      return keys_.View(slot);
    }
  }

  // True when `key` belongs to a node right of `off` (B-link move right):
  // off has a next whose low key is <= key.  Low keys never change (F2).
  bool BelongsRight(uint64_t off, Arg key, uint64_t* next) const {
    const uint64_t nx = PoolImpl::Load64(&P(off)->next);
    if (nx == 0 || keys_.Compare(P(nx)->low_key, key) > 0) return false;
    *next = nx;
    return true;
  }

  // The child of inner node `off` for `key`: a binary search over the
  // records' keys (non-decreasing even during a shift), then, as the paper
  // says, a record whose pointer equals its left neighbour's is a transient
  // duplicate and the search steps back over it.  *last: the key is at or
  // above the last record (or the node has none), the only case in which it
  // can belong to the right sibling -- records below the node's upper bound
  // bound the key, and records at or above it (a split's upper half before
  // the truncation) still route correctly (F3).
  uint64_t FindChild(uint64_t off, Arg key, bool* last) const {
    const InnerNode* n = I(off);
    const uint64_t cnt = std::min<uint64_t>(PoolImpl::Load64(&n->count), inner_cap_);
    uint64_t lo = 0, hi = cnt;
    while (lo < hi) {
      const uint64_t mid = (lo + hi) / 2;
      if (keys_.Compare(PoolImpl::Load64(&n->records[mid].key), key) <= 0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    *last = lo == cnt;
    int64_t i = static_cast<int64_t>(lo) - 1;
    while (i >= 0 && PoolImpl::Load64(&n->records[i].child) == LeftChild(off, i)) i--;
    return i < 0 ? PoolImpl::Load64(&n->leftmost) : PoolImpl::Load64(&n->records[i].child);
  }
  uint64_t LeftChild(uint64_t off, int64_t i) const {
    return i == 0 ? PoolImpl::Load64(&I(off)->leftmost) : PoolImpl::Load64(&I(off)->records[i - 1].child);
  }

  // Descends from the root to the node at `level` whose range should hold
  // `key` (the caller moves right under its lock); 0 when the tree is lower.
  // Inner nodes are read without locks, validated by their version (§4.3.5).
  uint64_t DescendTo(uint32_t level, Arg key) {
    uint64_t n = PoolImpl::Load64(&meta_->root);
    uint32_t lvl = Level(P(n));
    if (lvl < level) return 0;
    while (lvl > level) {
      const VersionLock& lk = ilocks_.For(n);
      const Route r = lk.ReadStable([&] {
        bool last;
        const uint64_t child = FindChild(n, key, &last);
        uint64_t nx;
        if (last && BelongsRight(n, key, &nx)) return Route{nx, true};
        return Route{child, false};
      });
      n = r.node;
      if (!r.right) lvl--;
    }
    return n;
  }

  // The leaf for `key`, its lock held (shared or exclusive).
  uint64_t LockLeaf(Arg key, bool exclusive) {
    uint64_t leaf = DescendTo(0, key);
    for (;;) {
      SharedSpinLock& lk = llocks_.For(leaf);
      exclusive ? lk.lock() : lk.lock_shared();
      uint64_t nx;
      if (!BelongsRight(leaf, key, &nx)) return leaf;
      exclusive ? lk.unlock() : lk.unlock_shared();
      leaf = nx;
    }
  }

  Result<bool> Put(Arg key, uint64_t value, Mode mode);
  Status InsertSeparator(uint32_t level, uint64_t sep, uint64_t child, NodeReserve* reserve);
  Result<bool> GrowRoot(uint32_t level, uint64_t sep, uint64_t child, NodeReserve* reserve);
  void FastInsert(uint64_t off, uint64_t sep, uint64_t child);
  Result<uint64_t> SplitInner(uint64_t off, uint64_t sep, uint64_t child, uint64_t* up, NodeReserve* reserve);
  void RemoveRecord(uint64_t off, uint64_t i);

  Status RecoverImpl();
  Status CollectLevels(std::vector<std::vector<uint64_t>>* levels) const;
  Status CheckNode(uint64_t off, uint32_t level) const;
  Status RebuildAllocator(const std::vector<std::vector<uint64_t>>& levels);
  Status CheckInner(uint64_t off, uint64_t* bytes) const;
  void StoreLeafCount(uint64_t leaves, bool fence);
  Status Corrupt(const char* what, uint64_t off, const char* inv, const std::string& msg) const {
    return Status::Corruption(std::string(L::kName) + " " + what + " at offset " + Hex(off) + ": invariant " + inv +
                              " violated: " + msg);
  }

  PoolImpl* const pool_;
  KP keys_;
  const uint64_t meta_off_;
  Meta* const meta_;
  const uint32_t node_size_;
  const uint32_t inner_cap_;
  L leaf_;
  StripedVersionLocks<> ilocks_;
  LeafLockTable llocks_;
  std::mutex root_mu_;
  // The leaves of the chain once every split in flight has stored its
  // count: the value the next count store writes (F9).  Exact at rest.
  std::atomic<uint64_t> leaf_count_{1};
  std::atomic<uint64_t> leaf_splits_{0};
  std::atomic<uint64_t> inner_splits_{0};
  std::atomic<uint64_t> root_splits_{0};
  RecoveryReport report_;
  bool closed_ = false;
};

}  // namespace pmtree::wotree

#include "trees/wotree/blink_frame_impl.h"

#endif  // PMTREE_TREES_WOTREE_BLINK_FRAME_H_
