// SPDX-License-Identifier: Apache-2.0
//
// LogTree: the log-based consistent B+-tree (LCB+Tree) that the NV-Tree paper
// (Yang et al., IEEE TC 2016, §2.2 and §6) measures against.  A textbook
// sorted B+-tree whose every node -- inner nodes and leaves -- lives in the
// pool, made crash-consistent by undo logging: before an operation modifies a
// node, it copies the node's original content into the undo log and persists
// it; it then applies and persists the change; when every node the operation
// touches is done, one 8-byte store empties the log and commits.  Recovery
// copies the originals of an uncommitted operation back.
//
// Design, write orders, recovery rules and invariants: docs/trees/logtree.md.
// Persistent bytes: layout.h.
//
// THREAD SAFETY: every operation may be called from any number of threads.
// A tree-level reader/writer lock admits many Lookup/Scan calls at once or one
// mutating call; writers would serialise on the single undo log anyway, as in
// the paper's single-log baseline.  Verify(), Stats(), BulkLoad() and Close()
// take the lock exclusively.
//
// DURABILITY: the contract of pmtree/tree.h.  A mutating call has returned
// only after its commit (the log's count word set to 0) is persistent; readers
// hold the shared lock, so they never see a node an uncommitted writer is
// changing.

#ifndef PMTREE_TREES_LOGTREE_LOGTREE_H_
#define PMTREE_TREES_LOGTREE_LOGTREE_H_

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"
#include "trees/common/keys.h"
#include "trees/common/version_lock.h"
#include "trees/logtree/layout.h"

namespace pmtree {

namespace logtree {
// Where the test hook stops an operation (LogTree::SetStopPoint).  Stopping
// leaves the pool exactly as a crash at that instant would, and the tree
// refuses further calls: destroy it without Close() and recover.
enum class StopPoint : uint8_t {
  kNone,
  // The k-th undo record of the operation is persistent and counted; its node
  // has not been touched.
  kAfterLogRecord,
  // The k-th undo record is persistent and counted; about half of the words
  // that change in its node have been written and flushed, the rest not.
  kMidNode,
  // Every node of the operation is written and persistent; the log still holds
  // the operation's records (the commit store has not happened).
  kBeforeCommit,
};

// Structure-modification counts since the tree was opened (DRAM only).
struct LogTreeCounts {
  uint64_t leaf_splits = 0;
  uint64_t inner_splits = 0;
  uint64_t root_splits = 0;
  uint64_t leaf_merges = 0;
  uint64_t inner_merges = 0;
  uint64_t root_collapses = 0;
  uint64_t records_logged = 0;      // undo records written by operations
  uint64_t records_undone = 0;      // undo records applied by the last recovery
  uint64_t aborted_operations = 0;  // operations rolled back in process (e.g. out of space)
};
}  // namespace logtree

namespace logtree {
// Creates / recovers a logtree in `pool` (registry entry points; K is
// uint64_t or std::string_view).  Options: node_size 0 (= 512), 512, 1024,
// 2048 or 4096; no `extra` keys.
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);
}  // namespace logtree

// The tree over a key policy (U64Keys or BytesKeys, trees/common/keys.h).
template <KeyPolicy KP>
class LogTree final : public BasicTree<typename KP::Arg> {
 public:
  using Arg = typename KP::Arg;
  using Base = BasicTree<Arg>;
  using Entry = typename Base::Entry;
  using InputEntry = typename Base::InputEntry;
  static constexpr KeyKind kKeyKind = KP::kKind;

  // Creation commits when root slot 0 names the meta block; a crash before
  // leaves a pool with root slot 0 still zero (and its blocks unreachable).
  static Result<std::unique_ptr<LogTree>> Create(PoolImpl* pool, const TreeOptions& options);
  // After a clean shutdown: restarts without a walk (the log is empty and the
  // pool restored the allocator).  After a crash: undoes the operation in
  // flight, if any, then rebuilds the allocator from what the root reaches.
  // Idempotent; a crash during it is recovered by running it again.
  static Result<std::unique_ptr<LogTree>> Recover(PoolImpl* pool, const TreeOptions& options);

  ~LogTree() override;

  std::string_view name() const override { return "logtree"; }
  uint32_t capabilities() const override;

  bool Lookup(Arg key, uint64_t* value) override;
  Result<bool> Insert(Arg key, uint64_t value) override;
  Result<bool> Update(Arg key, uint64_t value) override;
  Result<bool> Upsert(Arg key, uint64_t value) override;
  Result<bool> Remove(Arg key) override;
  size_t Scan(Arg start, const Arg* end, std::span<Entry> out) override;
  using Base::Scan;
  using Base::ScanRange;
  // Builds the tree bottom-up into new nodes filled to `fill` and switches the
  // root to it in one logged operation.  The tree must be empty.
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override;

  Status Verify() override;
  TreeStats Stats() override;
  Status Close() override;

  // ---- design-specific -------------------------------------------------------
  uint32_t node_size() const { return node_size_; }
  uint32_t capacity() const { return cap_; }
  // A node underflows (and tries to merge) when it has fewer entries than this.
  uint32_t underflow_threshold() const { return cap_ / 4; }
  logtree::LogTreeCounts counts() const;

  // Test hook: the next mutating call stops at `point` of its `record`-th undo
  // record (1-based; ignored for kBeforeCommit) and returns Internal.
  void SetStopPoint(logtree::StopPoint point, uint32_t record = 1);

 private:
  class Txn;
  struct NodeBuf;
  struct PathStep {
    uint64_t node;
    uint32_t child;  // index of the child taken, 0..count
  };

  LogTree(PoolImpl* pool, uint64_t meta_off);

  const logtree::LogTreeMeta* meta() const { return pool_->At<logtree::LogTreeMeta>(meta_off_); }
  logtree::LogHeader* log_header() const { return pool_->At<logtree::LogHeader>(log_off_); }
  uint64_t log_bytes() const;
  uint64_t root() const { return PoolImpl::Load64(&meta()->root); }
  const logtree::NodeHeader* node(uint64_t off) const { return pool_->At<logtree::NodeHeader>(off); }
  const logtree::NodeEntry* entries(uint64_t off) const {
    return pool_->At<logtree::NodeEntry>(off + sizeof(logtree::NodeHeader));
  }

  // Key search inside one node.
  uint32_t LowerBound(uint64_t off, Arg key) const;  // first entry with key >= arg
  uint32_t UpperBound(uint64_t off, Arg key) const;  // first entry with key > arg
  uint64_t Child(uint64_t off, uint32_t i) const;
  uint64_t FindLeaf(Arg key, std::vector<PathStep>* path) const;

  Status CheckUsable() const;
  Status Finish(Txn& txn, Status s);
  Status InsertLocked(Arg key, uint64_t value, bool* inserted, bool allow_insert, bool allow_update);
  Status RemoveLocked(Arg key, bool* removed);
  Status UndoLog(uint64_t* undone_records);
  Status RebuildAllocator();
  Status WalkForRebuild(uint64_t off, uint32_t level, uint32_t depth);

  PoolImpl* pool_;
  KP keys_;
  uint64_t meta_off_;
  uint64_t log_off_ = 0;
  uint32_t node_size_ = logtree::kDefaultNodeSize;
  uint32_t cap_ = logtree::NodeCapacity(logtree::kDefaultNodeSize);
  uint32_t log_slots_ = logtree::kLogSlots;

  // Tree-wide reader-writer lock (the logging B+-tree serialises writers).
  // A spinning lock that favours a waiting writer, not std::shared_mutex:
  // with glibc's reader-preferring rwlock a read-mostly mix on 2 threads fell
  // to 0.12x one thread's throughput (issue 19) as writers starved and slept.
  mutable SharedSpinLock mu_;
  bool closed_ = false;
  bool stopped_ = false;  // the test hook fired; the tree refuses calls
  logtree::StopPoint stop_point_ = logtree::StopPoint::kNone;
  uint32_t stop_record_ = 1;
  logtree::LogTreeCounts counts_;
  // Writers' scratch space (used under the exclusive lock only).
  std::unique_ptr<NodeBuf> bufs_[3];
  std::vector<logtree::NodeEntry> scratch_entries_;
};

extern template class LogTree<U64Keys>;
extern template class LogTree<BytesKeys>;

}  // namespace pmtree

#endif  // PMTREE_TREES_LOGTREE_LOGTREE_H_
