// SPDX-License-Identifier: Apache-2.0
//
// CddsTree: the CDDS B-Tree of Venkataraman's thesis (UIUC 2011, §4.2-4.4),
// a multi-version B+-tree made consistent and durable without a log.
//
// Every node entry carries a start and an end version ([start, end), end 0 =
// live); entries are ordered by key, then start version.  An operation works
// at version v' = current + 1: it only adds entries stamped v', ends entries
// at v', or copies live entries into new nodes (copy-on-write split and
// merge); it never changes what an older version sees.  When all of its
// writes are persistent, one 8-byte store of `current_version` commits it.
// Recovery is forward garbage collection: entries created after the last
// consistent version are dropped and end versions set after it are reverted.
//
// Design, version protocol, write orders, recovery rules, invariants and
// deviations from the thesis: docs/trees/cdds.md.  Persistent bytes: layout.h.
//
// THREAD SAFETY: every operation may be called from any number of threads.
// Writers (Insert/Update/Upsert/Remove, GC steps) serialise on one mutex, as
// in the thesis's multiple-reader single-writer scheme.  Readers (Lookup,
// Scan, LookupAt, ScanAt) take no lock that a writer waits for: they read at
// a version, validate each node through a striped seqlock (readers retry,
// writers never wait for readers) and run inside an epoch guard, so nodes
// and key blobs that GC frees stay readable until they leave.  Verify(),
// Stats(), BulkLoad() and Close() require that no other operation runs.
//
// DURABILITY: the contract of pmtree/tree.h.  A reader sees only entries
// visible at a committed version, and a version is committed only after
// every entry it shows is persistent.
//
// SNAPSHOTS (the extra the KV store's MVCC builds on):
//   uint64_t v = tree.GetSnapshot();   // pins the current consistent version
//   tree.LookupAt(v, key, &value);     // the state of that moment,
//   tree.ScanAt(v, start, end, out);   //   whatever writers and GC do since
//   tree.ReleaseSnapshot(v);           // lets GC reclaim what only v needed
// Snapshots live in DRAM: a crash or Close() releases them all.

#ifndef PMTREE_TREES_CDDS_CDDS_H_
#define PMTREE_TREES_CDDS_CDDS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"
#include "trees/cdds/layout.h"
#include "trees/common/keys.h"
#include "trees/common/version_lock.h"

namespace pmtree {

namespace cdds {

// Event counts since the tree was opened (DRAM only; Stats().extra).
struct CddsCounts {
  uint64_t version_bumps = 0;       // committed operations
  uint64_t free_slot_inserts = 0;   // entries placed in a free slot
  uint64_t dead_entry_reuses = 0;   // can_reuse_version hits (§4.4.2)
  uint64_t leaf_splits = 0;         // split_insert of a leaf (Alg. 3)
  uint64_t inner_splits = 0;        // split_insert of an inner node
  uint64_t root_splits = 0;         // a new root above a split root
  uint64_t merges = 0;              // underflow: two nodes into one (Alg. 4)
  uint64_t copies = 0;              // underflow: two nodes into two (copy_from_sibling)
  uint64_t underflow_skips = 0;     // rebalances skipped for lack of space
  uint64_t gc_steps = 0;            // incremental GC steps (Alg. 5 along one path)
  uint64_t gc_passes = 0;           // GC cursor wrapped: every leaf visited once
  uint64_t gc_entries_reclaimed = 0;
  uint64_t gc_nodes_freed = 0;
  uint64_t root_promotions = 0;
  uint64_t aborted_operations = 0;  // rolled back in process (out of space)
  // The last recovery (forward GC, Alg. 6).
  uint64_t recovery_entries_discarded = 0;
  uint64_t recovery_nodes_reverted = 0;  // nodes with an end set after cv (reverted to 0)
  uint64_t recovery_duplicates_removed = 0;
};
}  // namespace cdds

namespace cdds {
// Creates / recovers a cdds tree in `pool` (registry entry points; K is
// uint64_t or std::string_view).  Options: node_size 0 (= 512), 512, 1024,
// 2048 or 4096; extra "gc_every" (writer operations between two incremental
// GC steps, default 8; 0 = GC only through CollectGarbage()).
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);
}  // namespace cdds

template <KeyPolicy KP>
class CddsTree final : public BasicTree<typename KP::Arg>, public VersionedTree<typename KP::Arg> {
 public:
  using Arg = typename KP::Arg;
  using Base = BasicTree<Arg>;
  using Entry = typename Base::Entry;
  using InputEntry = typename Base::InputEntry;

  // Creation commits when root slot 0 names the meta block.
  static Result<std::unique_ptr<CddsTree>> Create(PoolImpl* pool, const TreeOptions& options);
  // After a clean shutdown: restarts without a walk.  After a crash: forward
  // GC (Alg. 6) from the root, then the allocator is rebuilt from what the
  // root reaches.  Idempotent; a crash during it is recovered by running it
  // again.
  static Result<std::unique_ptr<CddsTree>> Recover(PoolImpl* pool, const TreeOptions& options);

  ~CddsTree() override;

  std::string_view name() const override { return "cdds"; }
  uint32_t capabilities() const override;
  VersionedTree<Arg>* versions() override { return this; }

  bool Lookup(Arg key, uint64_t* value) override;
  Result<bool> Insert(Arg key, uint64_t value) override;
  Result<bool> Update(Arg key, uint64_t value) override;
  Result<bool> Upsert(Arg key, uint64_t value) override;
  Result<bool> Remove(Arg key) override;
  size_t Scan(Arg start, const Arg* end, std::span<Entry> out) override;
  using Base::Scan;
  // Into a tree whose root leaf holds no entry; one version, all or nothing.
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override;
  using Base::ScanRange;

  Status Verify() override;
  TreeStats Stats() override;
  Status Close() override;

  // ---- versions and snapshots ------------------------------------------------
  // The most recent consistent version (the commit word).
  uint64_t current_version() const override;
  // Pins the current consistent version and returns it.  Until released, GC
  // keeps every entry and node that version sees, and LookupAt/ScanAt at it
  // return exactly the tree's contents at the moment of the call.  Snapshots
  // nest: each GetSnapshot needs one ReleaseSnapshot.  Thread-safe; never
  // waits for a writer.
  uint64_t GetSnapshot();
  // Pins an older committed version (VersionedTree::PinVersion): Busy when
  // it is below a horizon GC has used (reclaim_floor_).
  Status PinVersion(uint64_t version) override;
  // Unpins one GetSnapshot of `version`.  InvalidArgument when it is not pinned.
  Status ReleaseSnapshot(uint64_t version) override;
  // Lookup / ordered range scan (Scan's rules) at `version`, which must be
  // pinned by GetSnapshot (or be current_version(), read at once): a version
  // that GC may already have trimmed is InvalidArgument.
  Result<bool> LookupAt(uint64_t version, Arg key, uint64_t* value) override;
  Result<size_t> ScanAt(uint64_t version, Arg start, const Arg* end, std::span<Entry> out) override;
  // The oldest version any snapshot or running reader still needs (at most
  // current_version()): entries that ended at or before it are garbage.
  uint64_t oldest_retained_version() override;

  // ---- garbage collection ---------------------------------------------------
  // Runs incremental GC steps until the cursor has visited every leaf once
  // (a full pass of Algorithm 5 plus physical reclamation).  Writers do the
  // same in bounded steps (gc_every).
  Status CollectGarbage();

  // ---- design-specific ------------------------------------------------------
  uint32_t node_size() const { return node_size_; }
  uint32_t capacity() const { return cap_; }
  uint32_t min_live() const { return min_live_; }
  cdds::CddsCounts counts() const;

 private:
  struct Op;
  struct PathStep {
    uint64_t node;
    uint32_t idx;  // entry taken
  };
  using Path = std::vector<PathStep>;
  struct NodeCopy;
  struct WalkStats;

  CddsTree(PoolImpl* pool, uint64_t meta_off, uint32_t gc_every);

  cdds::CddsMeta* meta() const { return pool_->At<cdds::CddsMeta>(meta_off_); }
  uint64_t root() const { return PoolImpl::Load64(&meta()->root); }
  cdds::NodeHeader* node(uint64_t off) const { return pool_->At<cdds::NodeHeader>(off); }
  cdds::NodeEntry* entries(uint64_t off) const {
    return pool_->At<cdds::NodeEntry>(off + sizeof(cdds::NodeHeader));
  }
  uint32_t count(uint64_t off) const { return static_cast<uint32_t>(node(off)->num_entries); }

  // Readers.
  class ReaderPin;
  void ReadNode(uint64_t off, NodeCopy* out) const;
  bool LookupAtVersion(uint64_t v, Arg key, uint64_t* value) const;
  size_t ScanAtVersion(uint64_t v, Arg start, const Arg* end, std::span<Entry> out) const;
  bool ScanNode(uint64_t off, uint64_t v, Arg start, const Arg* end, std::span<Entry> out, size_t* n,
                uint32_t depth) const;
  bool IsRetained(uint64_t version);

  // Writers.
  Status CheckUsable() const;
  // Returns whether the key was present before (whether or not it changed).
  Result<bool> Mutate(Arg key, uint64_t value, bool allow_insert, bool allow_update);
  Status RemoveKey(Arg key, bool* removed, bool rebalance);
  void BeginOp(Op* op);
  Status Commit(Op* op);
  void Abort(Op* op);
  Status CommitOrAbort(Op* op, Status s);
  void FinishOp(Op* op);
  void FindPath(Arg key, Path* path) const;
  int FindLeafEntry(uint64_t leaf, Arg key) const;
  uint32_t InsertPos(uint64_t off, uint64_t key_slot) const;
  bool Reclaimable(const cdds::NodeEntry& e, uint64_t before) const;
  void Touch(Op* op, uint64_t off);
  void SetEnd(Op* op, uint64_t off, uint32_t idx, uint64_t end);
  void CopyEntry(cdds::NodeEntry* dst, const cdds::NodeEntry& src);
  void PersistEntryIfOtherLine(const cdds::NodeEntry* written, const cdds::NodeEntry* next);
  bool InsertEntry(Op* op, uint64_t off, const cdds::NodeEntry& e);
  void ReleaseOwned(Op* op, const cdds::NodeEntry& e, uint32_t level);
  Result<uint64_t> NewNode(Op* op, uint16_t level, std::span<const cdds::NodeEntry> es);
  Result<uint64_t> CopyKey(Op* op, uint64_t slot);
  Status ApplyChange(Op* op, const Path& path, size_t depth, std::span<const std::pair<uint32_t, uint64_t>> ends,
                     std::vector<cdds::NodeEntry> adds, bool* replaced);
  Status ReplaceNodes(Op* op, const Path& path, size_t depth, std::span<const uint64_t> olds,
                      std::span<const uint32_t> old_idx, std::vector<cdds::NodeEntry> live, bool* parent_replaced);
  Status Rebalance(Op* op, const Path& path, size_t depth);
  uint32_t LiveCount(uint64_t off) const;
  std::vector<cdds::NodeEntry> LiveEntries(uint64_t off, int skip = -1) const;

  // GC (§4.4.4) and recovery (§4.4.5).
  using Released = std::vector<std::pair<cdds::NodeEntry, uint32_t>>;  // owner entries and their level
  uint64_t ReclaimBefore();
  void MaybeGc();
  bool GcStep();
  void CompactNode(uint64_t off, uint64_t before, Released* released);
  // `every_end`: store every kept entry's end, even one equal to its slot's
  // (recovery: the slot's end was read only as its class, see RecoverNode).
  void RewriteEntries(uint64_t off, const std::vector<cdds::NodeEntry>& keep, const std::vector<uint32_t>& from,
                      bool every_end = false);
  void FreeOwned(Released& released);
  void FreeSubtree(uint64_t off);
  void TryPromoteRoot(Released* released, uint64_t before);
  Status RecoverNodes();
  Status RecoverNode(uint64_t off, uint64_t cv);
  Status RebuildAllocator();

  // The node magic (invariants N1-N4 in cdds_gc.cc; docs/pool_format.md,
  // "Detecting a loss after a crash").
  static uint64_t NodeMagic(const PoolImpl* pool);
  void NoteNode(uint64_t off);
  void SetNodeMagic(uint64_t off);
  bool ClearNodeMagic(uint64_t off);
  bool ClearSubtreeMagic(uint64_t off);
  void MarkNewNodes(const Op& op);
  Status ScanForLostNodes() const;
  Status Walk(WalkStats* ws, bool rebuild, bool verify);

  PoolImpl* pool_;
  KP keys_;
  uint64_t meta_off_;
  uint32_t node_size_ = cdds::kDefaultNodeSize;
  uint32_t cap_ = cdds::NodeCapacity(cdds::kDefaultNodeSize);
  uint32_t min_live_ = cdds::MinLive(cdds::NodeCapacity(cdds::kDefaultNodeSize));
  uint32_t gc_every_ = 8;
  uint64_t node_magic_ = 0;  // NodeMagic(pool_)

  mutable std::mutex write_mu_;
  mutable StripedVersionLocks<> locks_;
  bool closed_ = false;
  bool bounds_relaxed_ = false;   // an underflow was left for lack of space
  uint32_t ops_since_gc_ = 0;
  std::optional<typename KP::Owned> gc_cursor_;  // exclusive lower bound of the next GC step
  cdds::CddsCounts counts_;

  // Version references (§4.3.1): pinned snapshots and running readers.
  mutable std::mutex snap_mu_;
  std::map<uint64_t, uint32_t> snapshots_;  // version -> pins
  // The largest min(current version, oldest pin) any horizon computation
  // has seen (under snap_mu_): every GC horizon so far is at most this, so
  // PinVersion of a version at or above it pins something GC kept.
  uint64_t reclaim_floor_ = 0;
  static constexpr int kReaderSlots = 128;
  struct alignas(64) ReaderSlot {
    std::atomic<uint64_t> version{0};  // 0 = idle
  };
  std::unique_ptr<ReaderSlot[]> readers_;
};

extern template class CddsTree<U64Keys>;
extern template class CddsTree<BytesKeys>;

}  // namespace pmtree

#endif  // PMTREE_TREES_CDDS_CDDS_H_
