// SPDX-License-Identifier: Apache-2.0
//
// Circ-Tree (Wang, Brihadiswarn, Jiang, Chattopadhyay, "Circ-Tree: A B+-Tree
// Variant with Circular Design for Persistent Memory", IEEE Transactions on
// Computers), implemented from the paper.  Design, write orders, the
// recovery case table and every deviation: docs/trees/circtree.md.
// Persistent layout: layout.h.
//
// What it is.  A B+-tree whose sorted nodes live in persistent memory and
// are circular buffers: a node has no fixed base, so an insert or delete
// shifts pairs toward whichever end of the occupied range is nearer
// (bidirectional shifting) and commits with one 8-byte store of the node's
// base location and count.  Splits copy the upper half to a new right
// sibling, link it, clear the copies with NULLs and commit the count
// (Figure 5).  A node left under N / 2 pairs by a delete merges into its
// right sibling under the same parent (§5.3), cascading up and collapsing a
// root left with one child.  Recovery after a crash repairs interrupted
// shifts from the NULL boundaries and transient duplicates, finishes
// interrupted splits and merges, links children the parents lack and drops
// the ones they name too many (§5.5).
//
// Durability (pmtree/tree.h contract): every mutating call is durable when it
// returns; a crash at any instant recovers to the state before or after it.
// Lookups and scans return only persisted data (readers validate a per-node
// DRAM version lock that writers release after their last fence).
//
// Thread safety: all point operations and Scan may run concurrently.  Writers
// lock one node at a time; readers never write and retry when a writer
// overlapped them.  Verify(), Stats(), BulkLoad() and Close() need exclusive
// use.
//
// Options (TreeOptions::extra): `search=binary` (default: binary search over
// the one contiguous segment that can hold the key, §5.1) or `search=linear`
// (the paper's Circ-Tree_ls: linear search from the base location).

#ifndef PMTREE_TREES_CIRCTREE_CIRCTREE_H_
#define PMTREE_TREES_CIRCTREE_CIRCTREE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/tree.h"
#include "trees/circtree/layout.h"
#include "trees/common/fair_traversal.h"
#include "trees/common/keys.h"
#include "trees/common/spare_nodes.h"
#include "trees/common/version_lock.h"

namespace pmtree::circtree {

inline constexpr std::string_view kNodeSizeRule = "512, 1024, 2048 or 4096";

// Points inside a split where a test may stop the operation, to leave the
// intermediate state a crash would leave there.
enum class StopPoint {
  kSplitSiblingPersisted,  // step 3 done: new sibling persisted, not linked
  kSplitLinked,            // step 4a: sibling pointer persisted, copies not cleared
  kSplitCleared,           // step 4b: copies cleared, count not committed
  kSplitCommitted,         // step 5a: count committed, parent not updated
  kMergeCommitted,         // merge M3: right sibling committed, left node not emptied
  kMergeUnlinked,          // merge M5: left node unlinked, parent still names it
};

// What recovery repaired (tests, Stats() and reports).  Names follow the
// recovery case table of docs/trees/circtree.md.
struct RecoveryReport {
  bool crashed = false;          // the crash flag was up: repairs ran
  uint64_t nodes = 0;            // nodes reached
  uint64_t locks_cleared = 0;    // case 6: non-zero lock words zeroed
  uint64_t insert_undone = 0;    // case 1a: incomplete insert with duplicates, shifted back
  uint64_t insert_committed = 0; // case 1b: shifts done, base + count committed
  uint64_t delete_finished = 0;  // case 2a: incomplete delete with a duplicate, shift finished
  uint64_t delete_committed = 0; // case 2b: NULL written, base + count committed
  uint64_t split_cleared = 0;    // case 3b: copies left in the split node cleared
  uint64_t stale_words_zeroed = 0;     // half-written words in NULL slots zeroed
  uint64_t root_splits_completed = 0;  // case 4: root with a sibling
  uint64_t children_linked = 0;        // case 5: IN one child short, child inserted
  uint64_t merges_undone = 0;          // case 7a: uncommitted merge copies zeroed
  uint64_t merges_finished = 0;        // case 7b: committed merge, fence completed
  uint64_t merged_unlinked = 0;        // case 7c: emptied merged node unlinked
  uint64_t children_unlinked = 0;      // case 8: IN one child long, entry removed
  uint64_t separators_fixed = 0;       // case 8: separator above a lowered fence
  uint64_t roots_collapsed = 0;        // case 9: root with one child replaced by it
};

template <KeyPolicy KP>
class CircTree final : public BasicTree<typename KP::Arg>, FairTraversal<CircTree<KP>, Node> {
 public:
  using Base = BasicTree<typename KP::Arg>;
  using K = typename KP::Arg;
  using Entry = typename Base::Entry;

  // Creates a tree on a fresh pool (root slot 0 empty).  `paper` makes the
  // test-only variant circtree-paper (PaperVariant below).
  static Result<std::unique_ptr<CircTree>> Create(PoolImpl* pool, const TreeOptions& options, bool paper = false);
  // Recovers the tree in `pool`: instant restart after a clean shutdown,
  // the §5.5 repairs after a crash.  `paper` must match the creating variant.
  static Result<std::unique_ptr<CircTree>> Recover(PoolImpl* pool, const TreeOptions& options, bool paper = false);

  ~CircTree() override;

  std::string_view name() const override { return paper_ ? "circtree-paper" : "circtree"; }
  uint32_t capabilities() const override;

  bool Lookup(K key, uint64_t* value) override;
  Result<bool> Insert(K key, uint64_t value) override { return Put(key, value, PutMode::kInsert); }
  Result<bool> Update(K key, uint64_t value) override { return Put(key, value, PutMode::kUpdate); }
  Result<bool> Upsert(K key, uint64_t value) override { return Put(key, value, PutMode::kUpsert); }
  Result<bool> Remove(K key) override;
  size_t Scan(K start, const K* end, std::span<Entry> out) override;
  using Base::Scan;
  Status Verify() override;
  TreeStats Stats() override;
  Status Close() override;

  uint32_t node_size() const { return node_size_; }
  uint32_t capacity() const { return cap_; }
  bool linear_search() const { return linear_; }
  const RecoveryReport& recovery_report() const { return report_; }
  uint64_t meta_offset() const { return meta_off_; }
  uint64_t root_offset() const { return meta_->root; }

  // Test hook: when it returns true at a StopPoint, the split stops there
  // (releasing its DRAM lock, writing nothing more) and the call returns
  // Status::Internal.  Destroying the tree afterwards without Close() leaves
  // exactly the state a crash at that point leaves.
  void SetStopHookForTest(std::function<bool(StopPoint)> hook) { stop_hook_ = std::move(hook); }

 private:
  enum class PutMode { kInsert, kUpdate, kUpsert };
  struct Span {  // a node's committed base location and count
    uint32_t b;
    uint32_t n;
  };
  class LineWriter;

  CircTree(PoolImpl* pool, uint64_t meta_off, bool linear, bool paper);

  Node* N(uint64_t off) const { return pool_->At<Node>(off); }
  static uint64_t Ld(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  static uint32_t Ld32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  Span LoadSpan(const Node* x) const;
  uint32_t Phys(uint32_t b, int64_t i) const { return static_cast<uint32_t>((b + i) & mask_); }
  Pair* At(Node* x, const Span& s, int64_t i) const { return &x->pairs[Phys(s.b, i)]; }
  const Pair* At(const Node* x, const Span& s, int64_t i) const { return &x->pairs[Phys(s.b, i)]; }
  // The identity word (layout.h): the key slot in a leaf, the child in an
  // inner node; the value everywhere in circtree-paper (the paper's NULLs
  // and duplicates are values).
  uint64_t IdOf(const Pair* p, bool leaf) const { return leaf && !paper_ ? Ld(&p->key) : Ld(&p->value); }
  void Commit(Node* x, uint32_t b, uint32_t n);

  bool Stop(StopPoint p) { return stop_hook_ && stop_hook_(p); }
  Status Stopped() { return Status::Internal("circtree: operation stopped by the test hook"); }

  // Key comparisons of the lock-free paths.  A reader may combine a stale
  // base + count with newer pairs and meet a NULL slot (0) where it expects a
  // key; its version check then fails and it retries, but a byte-key slot 0
  // must not be dereferenced meanwhile.  (A u64 slot 0 compares as key 0.)
  int SafeCompare(uint64_t slot, K key) const {
    if constexpr (!KP::kInline) {
      if (slot == 0) return -1;
    }
    return keys_.Compare(slot, key);
  }
  int SafeCompareSlots(uint64_t a, uint64_t b) const {
    if constexpr (!KP::kInline) {
      if (a == 0) return -1;
    }
    return keys_.CompareSlots(a, b);
  }

  // Search (§5.1).  First logical position p in [from, n) whose key is
  // greater than the target (n when none), cmp(slot) being <0, 0, >0 as the
  // slot's key is <, ==, > the target.
  template <class Cmp>
  uint32_t UpperBound(const Node* x, const Span& s, uint32_t from, Cmp&& cmp) const;
  // The B-link steps of §5.4's move-right rule come from FairTraversal
  // (trees/common/fair_traversal.h) over the three hooks below.
  friend class FairTraversal<CircTree, Node>;
  using Fair = FairTraversal<CircTree, Node>;
  using Fair::CompleteRootSplit, Fair::DescendTo, Fair::FindInLeaves, Fair::InsertNewKey, Fair::LockAt, Fair::MoveRight,
      Fair::ScanLeaves;
  template <class Cmp>
  uint64_t ChildOf(const Node* x, Cmp& cmp) const;
  template <class Cmp>
  bool FindInLeaf(const Node* x, Cmp& cmp, uint64_t* value) const;
  using typename Fair::ScanItem;
  uint64_t ReadLeaf(const Node* x, std::vector<ScanItem>* items) const;
  void Lock(uint64_t off) { locks_.For(off).lock(); }
  void Unlock(uint64_t off) { locks_.For(off).unlock(); }

  Result<bool> Put(K key, uint64_t value, PutMode mode);
  // Key 0 of a 64-bit tree (in the meta block), read under zero_lock_.
  struct ZeroKey {
    bool present;
    uint64_t value;
  };
  ZeroKey ReadZero() const {
    return zero_lock_.ReadStable([&] { return ZeroKey{Ld(&meta_->zero_present) == 1, Ld(&meta_->zero_value)}; });
  }
  Result<bool> PutZero(uint64_t value, PutMode mode);
  Result<bool> RemoveZero();
  // Algorithm 1: inserts (slot, value) at logical position pos of the locked
  // node with room, shifting toward the nearer end.
  void InsertAt(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value);
  void InsertInPlace(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value) { InsertAt(off, pos, slot, value); }
  // §5.3: removes logical position pos of the locked node.  With `w`, its
  // stores continue the caller's line-ordered stores (a merge's unlink and
  // separator, persisted before the parent's first shift store).
  void RemoveAt(uint64_t off, uint32_t pos);
  void RemoveAt(uint64_t off, uint32_t pos, LineWriter& w);
  // Writes one pair.  identity_first: the identity word before the other
  // word (deletes: the first store already hides the removed pair); else the
  // other word first (inserts: the pair appears only when complete).
  void WritePair(LineWriter& w, Pair* dst, uint64_t key, uint64_t value, bool leaf, bool identity_first);
  void CopyPair(LineWriter& w, Pair* dst, const Pair* src, bool leaf, bool identity_first) {
    WritePair(w, dst, Ld(&src->key), Ld(&src->value), leaf, identity_first);
  }
  void NullPair(LineWriter& w, Pair* dst, bool leaf) { WritePair(w, dst, 0, 0, leaf, true); }

  // A node's fence (low key); 0 when it has none (the first node of its
  // level, or a merge made it so: layout.h).  0 compares below every key.
  uint64_t FenceOf(const Node* x) const {
    return (Ld32(&x->hdr.flags) & kHasLowKey) ? Ld(&x->hdr.low_key) : 0;
  }
  int CompareFences(uint64_t a, uint64_t b) const {
    if (a == 0 || b == 0) return a == b ? 0 : (a == 0 ? -1 : 1);
    return keys_.CompareSlots(a, b);
  }

  // §5.3 merges, after a delete left a node under N / 2 pairs: the node X
  // named by the key's path at `level` is merged into its right sibling R
  // under the same parent when R has room (docs/trees/circtree.md, "Merge").
  // Cascades up while the parent becomes underfull; collapses a root left
  // with one child.
  template <class Cmp>
  void MergeAfterRemove(Cmp&& cmp);
  enum class MergeResult { kNone, kMerged, kParentUnderfull, kStopped };
  template <class Cmp>
  MergeResult MergeAt(uint32_t level, Cmp&& cmp);
  // MergeAt's steps: the nodes of a merge found without locks (false: no
  // merge is due), and M1-M7 once they are locked and validated (`i` is X's
  // entry in P); the latter releases `held`.
  struct MergeNodes {
    uint64_t p = 0, x = 0, r = 0, l = 0;
  };
  template <class Cmp>
  bool FindMergeNodes(uint32_t level, Cmp&& cmp, MergeNodes* m);
  MergeResult MergeLocked(uint32_t level, const MergeNodes& m, uint32_t i, const std::vector<uint64_t>& held);
  // Stripes of a merge's node set, locked in ascending order (no stripe twice).
  std::vector<uint64_t> LockStripes(std::initializer_list<uint64_t> offs);
  void UnlockStripes(const std::vector<uint64_t>& held) {
    for (uint64_t o : held) Unlock(o);
  }

  // Figure 5 split of the full locked node `off` plus insertion of (slot,
  // value) at logical position pos; unlocks `off`.
  Status SplitInsert(uint64_t off, uint32_t pos, uint64_t slot, uint64_t value);
  Status InsertSeparator(uint32_t level, uint64_t slot, uint64_t child);
  Status InstallRoot(uint64_t old_root, uint64_t low, uint64_t sib);
  // Root collapse (merge step M7, recovery case 9): meta.root = child.
  void CollapseRoot(uint64_t child);
  Status EnsureSpares(size_t n);
  Result<uint64_t> TakeSpare();
  // The meta block's leaf count (invariant C13): adds `delta` (+1 a leaf
  // split, -1 a leaf merge) to leaf_count_ and stores the result in
  // meta.leaves, flushed; with `fence`, fenced too (callers without a later
  // fence before the store the count must precede).
  void AddLeaves(int64_t delta, bool fence);
  // Writes a fresh zeroed node image at `off` holding `pairs` from base 0.
  void WriteNewNode(uint64_t off, uint32_t level, uint64_t sibling, uint64_t low, bool has_low,
                    const std::vector<Pair>& pairs);

  // Recovery (§5.5; docs/trees/circtree.md, "Recovery").
  Status RecoverFromPool(bool clean);
  Status CheckNode(uint64_t off, uint32_t level) const;
  Status CollectLevels(std::vector<std::vector<uint64_t>>* levels, bool repair = false);
  void RepairNode(uint64_t off, uint64_t prev);
  void RepairMergeMark(Node* x, uint64_t prev);
  Status FinishMerges(std::vector<std::vector<uint64_t>>* levels);
  bool ResolveInsert(Node* x, bool leaf);
  bool FinishDelete(Node* x, bool leaf);
  void TrimEnds(Node* x, bool leaf);
  void ZeroStaleWords(Node* x);
  Status RebuildAllocator(const std::vector<std::vector<uint64_t>>& levels);
  Status LinkChildren(std::vector<std::vector<uint64_t>>* levels);
  Status CheckNodeInvariants(uint64_t off, size_t idx) const;

  PoolImpl* pool_;
  KP keys_;
  const uint64_t meta_off_;
  Meta* meta_;
  uint32_t node_size_;
  uint32_t slots_;
  uint32_t mask_;
  uint32_t cap_;
  bool linear_;
  bool paper_;
  StripedVersionLocks<4096> locks_;
  VersionLock zero_lock_;  // key 0 of a 64-bit tree (meta block)
  std::mutex root_mu_;
  std::mutex merge_mu_;  // one merge at a time (it holds several stripes)
  SpareNodes spares_;  // allocated, unlinked nodes reserved for splits
  // Leaves of the leaf level as the splits and merges that reached their
  // count step have made it; meta.leaves is stored from it under count_mu_,
  // so the word's stores follow the counter's order (invariant C13).
  std::mutex count_mu_;
  uint64_t leaf_count_ = 0;  // guarded by count_mu_
  // Design counters (Stats().extra; the crash explorer derives pre-states
  // from their first change).
  std::atomic<uint64_t> left_shifts_{0}, right_shifts_{0}, pairs_shifted_{0}, wraps_{0};
  std::atomic<uint64_t> deletes_left_{0}, deletes_right_{0};
  std::atomic<uint64_t> splits_{0}, root_splits_{0};
  std::atomic<uint64_t> merges_{0}, root_collapses_{0};
  RecoveryReport report_;
  std::function<bool(StopPoint)> stop_hook_;
  bool closed_ = false;
};

// Stores of one shift, persisted line by line in the order they are made.
template <KeyPolicy KP>
class CircTree<KP>::LineWriter {
 public:
  explicit LineWriter(PoolImpl* pool) : pool_(pool) {}
  void Store(uint64_t* word, uint64_t v) {
    const uintptr_t l = reinterpret_cast<uintptr_t>(word) & ~(kLine - 1);
    if (line_ != 0 && l != line_) {
      // Algorithm 1, lines 11-13 and 29-31: persist a line before the shift
      // moves into the next one, so a crash never holds a later line's copies
      // without the earlier line's (S1-S3 then describe every crash image).
      pool_->Persist(reinterpret_cast<const void*>(line_), kLine);
    }
    line_ = l;
    pool_->Store64(word, v);
  }
  void Finish() {
    if (line_ != 0) {
      // Flush_KV: persist the last line written before the base + count
      // commit, so the commit never covers a pair or a NULL that could still
      // be lost.
      pool_->Persist(reinterpret_cast<const void*>(line_), kLine);
    }
    line_ = 0;
  }

 private:
  PoolImpl* pool_;
  uintptr_t line_ = 0;
};

// Registry entry points.  K is uint64_t or std::string_view.
//
// Paper = true gives circtree-paper, a test-only variant that is not in the
// registry (its leaves cannot hold the value 0, the paper's NULL, so the
// conformance suite does not apply); circtree_test hands it to the crash
// explorer directly.  It follows the paper literally where our tree departs
// from it: the identity word of a leaf pair is its value (§5.5: "duplicate
// non-NULL values"), and every pair is written value first, then key
// (Algorithm 1, lines 9-10, 18-19, 27-28, 36-37), deletes and NULLs included.
// docs/trees/circtree.md, "Paper flaws", explains what the explorer finds.
template <class K, bool Paper = false>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K, bool Paper = false>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

// InvalidArgument unless node_size is 0 (default) or 512, 1024, 2048, 4096.
Status CheckNodeSize(uint32_t node_size);

}  // namespace pmtree::circtree

#endif  // PMTREE_TREES_CIRCTREE_CIRCTREE_H_
