// SPDX-License-Identifier: Apache-2.0
//
// Store::Impl, shared by the files of src/kv (not a public header).
//
// INVARIANTS (cited as K1..K8 at the barriers that keep them; docs/kv.md)
//  K1. A version (header + body, and the field blocks it names) is persisted
//      before any persistent reference to it is stored: a tree entry, a prev
//      pointer of a newer version, or a commit log entry.
//  K2. A version's ts is written before it is persisted and never changes;
//      along a chain from the tree entry the ts strictly decrease.
//  K3. A commit log is persisted before its slot names it.  The slot store is
//      the commit point of a batch: every tree update of the batch comes
//      after it, and the slot is cleared (persisted) before the batch's key
//      locks are released, so no other write touches a key of a live log.
//  K4. Versions older than V are unlinked (V.prev = 0, persisted) only when
//      V.ts <= the GC horizon (the oldest snapshot, else the visible ts), and
//      are retired through the pool's epochs only after that store, so no
//      reader at a registered snapshot can need them and no reader in flight
//      can see freed memory.
//  K5. Writers of one key hold the key's stripe lock from their tree lookup to
//      the end of their GC; readers take no lock and read inside an epoch
//      guard.
//  K6. The visible ts (pub_) advances in ts order, to ts only after every
//      version stamped ts is in the tree: a snapshot at s sees every write
//      with ts <= s completely, and none after.  A writer marks its ts in
//      the publication ring (publication.h, P1-P3) and never waits for an
//      earlier writer there; without deferred visibility it then waits
//      until its ts is visible (read-your-writes for library callers), with
//      it (the server) it returns and its caller holds the acknowledgement
//      until visible_timestamp() reaches it.
//  K7. Recovery (no snapshot survives a crash) needs only each key's head
//      version and the versions of committed logs: it never follows prev.
//  K8. Field blocks are immutable and shared by versions of one key only;
//      a block is retired when the last version naming it is.
//
// NATIVE VERSIONS (an engine whose tree has versions(), i.e. cdds; docs/kv.md,
// "Native versions").  The tree keeps the old versions, not the records:
//  N1. Every record's prev is 0; the tree entry of a key at tree version v
//      names the record a snapshot at v reads.  A delete removes the tree
//      entry at once (no tombstone record outside a commit log).
//  N2. Installs run one at a time (install_mu_) from their timestamp to its
//      publication, so timestamps and tree versions advance together: the
//      published pair (visible ts, visible_version_) is what a snapshot pins.
//      A native write is therefore visible when it returns, deferred or not
//      (its ring mark always extends the prefix at once).
//      The published version stays pinned in the tree until the next one is
//      published, so the tree's GC keeps everything its readers need.
//  N3. A record the tree stopped showing at version e is retired (through the
//      epochs) only once the tree's oldest retained version is >= e, sparing
//      the field blocks its successor shares (K8).

#ifndef PMTREE_KV_STORE_IMPL_H_
#define PMTREE_KV_STORE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "kv/layout.h"
#include "kv/publication.h"
#include "pm/pool_impl.h"
#include "pmtree/kv.h"
#include "pmtree/registry.h"
#include "trees/common/version_lock.h"

namespace pmtree::kv {

// What one version is, read from the pool (validated).
struct VersionView {
  uint64_t off = 0;
  VersionKind kind = VersionKind::kTombstone;
  uint64_t ts = 0;
  uint64_t prev = 0;
  uint64_t length = 0;
  uint64_t bytes = 0;  // allocation size
};

// One key's pending write inside a commit (single op, batch or transaction).
struct PendingWrite {
  std::string key;
  uint64_t version = 0;  // the new version (body written, header not yet)
  uint64_t old_head = 0;
  VersionKind kind = VersionKind::kValue;
  uint64_t length = 0;
};

class Store::Impl {
 public:
  Impl(const TreeFactory* factory, TreeHandle<BytesTree> h, KvMeta* meta);
  ~Impl();

  // ---- open / close (recovery.cc) ----
  bool skip_redo_ = false;  // Options::testing_skip_redo
  bool skip_record_persist_ = false;  // Options::testing_skip_record_persist
  static Result<std::unique_ptr<Impl>> OpenExisting(const std::string& path, const Options& o,
                                                    const TreeFactory* f);
  static Result<std::unique_ptr<Impl>> CreateNew(const std::string& path, const Options& o, const TreeFactory* f);
  // Keeps the path and options an open used (Clear builds from them) and
  // takes the test hooks.
  void Configure(const std::string& path, const Options& o);
  Status Close();
  // Store::Clear (quiescent): a new empty store replaces the file and this
  // one's tree, pool and GC state; timestamps go on.
  Status Clear();
  // Clear's file half: the empty store built at path_.creating, closed,
  // renamed over path_ (the commit point) and opened.  A failure before the
  // rename removes the new file and changes nothing; after it the store is
  // failed (SetFailed).
  Result<TreeHandle<BytesTree>> ReplaceFile(const Options& o, KvMeta** meta);
  Status Verify();
  StoreStats Stats();

  // ---- records (records.cc) ----
  Result<VersionView> ReadVersion(uint64_t off) const;
  Result<uint64_t> NewValueVersion(std::string_view value);
  Result<uint64_t> NewTombstone();
  // A field table over `blocks` (sorted by name); new blocks for `fields`
  // replace the same-named ones of `base` (0 = none).
  Result<uint64_t> NewFieldVersion(uint64_t base, const FieldMap& fields, uint64_t* count);
  // Stamps header (ts, prev) into a version whose body is written, and
  // persists the version (K1, K2).
  // With fence = false the caller's next fence completes the persist.
  void SealVersion(uint64_t off, VersionKind kind, uint64_t length, uint64_t ts, uint64_t prev, bool fence = true);
  // Frees (or retires) a version and its field blocks not in *done, adding
  // those to *done: dropping several versions of one key that share blocks
  // releases each block once (K8).
  void DropVersion(uint64_t off, std::unordered_set<uint64_t>* done, bool retire);
  std::vector<uint64_t> FieldBlocksOf(const VersionView& v) const;
  // Starts loading the first two lines of each block (header, name and the
  // start of the value).  For callers about to read every block: the blocks
  // lie apart in the pool, and their misses then overlap instead of coming
  // one after another (a 10-field record read was 10 misses in a row).
  void PrefetchFieldBlocks(const std::vector<uint64_t>& blocks) const;
  uint64_t FieldBlockBytes(uint64_t block) const;
  Status ReadValue(const VersionView& v, std::string* out) const;
  // A plain value's bytes in the pool (valid inside the caller's epoch guard).
  Result<std::string_view> ValueView(const VersionView& v) const;
  // Every field of a field record, name and value in the pool, in table
  // (name) order; InvalidArgument for a plain value.
  Status ViewFields(const VersionView& v, std::vector<FieldView>* out) const;
  Status ReadFields(const VersionView& v, const std::vector<std::string>& names, FieldMap* out) const;

  // ---- reads and writes (store.cc) ----
  // The version of key a snapshot sees (nullopt: absent), inside the
  // caller's epoch guard.
  Result<std::optional<VersionView>> VisibleAt(std::string_view key, const Snapshot& snap);
  // The version a scan entry (key, tree value) names at the snapshot the scan
  // read at (ScanAt: native, else Scan: the head, walked to the snapshot).
  Result<std::optional<VersionView>> VisibleIn(const BytesTree::Entry& e, const Snapshot& snap);
  // The tree's entries from `start` on at the snapshot (Scan or ScanAt).
  Result<size_t> ScanFrom(const std::string& start, const Snapshot& snap, std::span<BytesTree::Entry> out);
  // The version visible to a plain read (newest published, or with
  // `unpublished` the newest complete), retrying if GC races (see store.cc).
  Result<std::optional<VersionView>> VisibleNow(std::string_view key, bool unpublished);
  Result<std::optional<VersionView>> Visible(std::string_view key, const ReadOptions& ro);
  Status WriteOne(std::string_view key, VersionKind kind, std::string_view value, const FieldMap* fields,
                  bool update_only, bool* found);
  // Store::PutMany and Store::UpdateMany for checked, distinct keys
  // (store.cc): key i's value comes from compute, shown its current head
  // when read_current (else always as absent, without reading the head).
  Status PutMany(const std::vector<std::string_view>& keys, size_t* applied, const Store::PutCompute& compute,
                 bool read_current);
  // Removes key from the tree and retires its whole chain.  Key lock held.
  Status RemoveKey(std::string_view key, uint64_t head);
  // Trims key's chain to what the GC horizon needs; removes a collectable
  // tombstone.  Key lock held.
  Status CollectKey(std::string_view key, uint64_t horizon) { return CollectKeys({key}, horizon); }
  // CollectKey for several locked keys, whose unlinks share one fence.
  // heads, when given, are the keys' heads (just installed): no lookup.
  Status CollectKeys(const std::vector<std::string_view>& keys, uint64_t horizon,
                     const std::vector<uint64_t>* heads = nullptr);
  uint64_t Horizon();
  void CollectPending();

  // ---- commit (txn.cc) ----
  Status CommitBatch(const WriteBatch& batch, const Snapshot* conflict_snapshot);
  using BatchWrites = std::map<std::string_view, const WriteBatch::Op*>;
  // Reads the heads (keys locked) and checks first-committer-wins.
  Result<std::vector<PendingWrite>> PlanBatch(const BatchWrites& writes, const Snapshot* snap, uint64_t* log_bytes);
  // Steps 4-7 of the commit protocol (txn.cc) for versions whose bodies are written.
  Status InstallBatch(const std::vector<PendingWrite>& pw, uint64_t log, uint64_t log_bytes);

  // ---- snapshots ----
  // The published timestamp, registered; *version: the tree version pinned
  // for it (native), else 0.
  uint64_t AcquireSnapshotTs(uint64_t* version);
  void ReleaseSnapshotTs(uint64_t ts, uint64_t version);

  // ---- native versions (N1-N3) ----
  VersionedTree<std::string_view>* vt_ = nullptr;  // the engine's versions, or null
  std::mutex install_mu_;                          // N2
  std::atomic<uint64_t> visible_version_{0};       // the tree version of the visible ts (N2)
  struct Retiring {
    uint64_t version;              // the record the tree no longer shows
    uint64_t until;                // from this tree version on (N3)
    std::vector<uint64_t> spare;   // field blocks its successor still names (K8)
  };
  std::deque<Retiring> retiring_;  // by `until` (gc_mu_)
  // Keys deleted while snapshots were open -> the delete's timestamp, for
  // first-committer-wins (a deleted key has no head to compare); pruned
  // when no snapshot predates it (gc_mu_).
  std::map<std::string, uint64_t, std::less<>> deleted_at_;
  // The prev a new version over `head` gets: the head on the record path,
  // 0 on native versions (N1: the tree keeps the old versions).
  uint64_t ChainPrev(uint64_t head) const { return vt_ == nullptr ? head : 0; }
  // Sets the published tree version after open (native).
  void InitVersions();
  // N3: the record `old` left the tree at the current version; `successor`
  // (0 = none) is the record that replaced it.  Install scope held.
  void Retire(uint64_t old, uint64_t successor);
  // Retires what no retained tree version needs any more.
  void RetireDue();
  // A native delete of a key whose head is `head` (key locked).
  Status RemoveNative(std::string_view key, uint64_t head);
  // Notes a delete at ts for first-committer-wins (native).
  void NoteDelete(std::string_view key, uint64_t ts);
  // Whether a transaction at `snap` conflicts with a delete of key (native).
  bool DeletedSince(std::string_view key, uint64_t snap_ts);

  // ---- locks ----
  SpinLock& LockFor(std::string_view key);
  size_t StripeOf(std::string_view key) const;
  static constexpr size_t kStripes = 1024;

  // Ts issue and publication (K6).
  uint64_t NextTs() { return next_ts_.fetch_add(1, std::memory_order_acq_rel) + 1; }
  // Marks ts installed (record path): returns at once when visibility is
  // deferred, else once ts is visible.
  void Publish(uint64_t ts);
  // Marks ts in the ring and tells the listener when the visible ts moved.
  void MarkInstalled(uint64_t ts);
  uint64_t VisibleTs() const { return pub_.visible(); }
  // Raises this thread's acknowledgement timestamp (Store::TakeThreadTimestamp).
  void NoteThreadTs(uint64_t ts);
  // Deferred visibility: a key whose chain trim waits for ts to be visible
  // (a trim below an unpublished head would break plain reads, K4).
  void DeferCollect(uint64_t ts, std::string_view key);
  // Trims up to `max` deferred keys whose ts is visible now; called after a
  // write released its locks.
  void CollectPublished(size_t max);

  PoolImpl& pool() { return PoolImpl::Of(*h_.pool); }
  const PoolImpl& pool() const { return PoolImpl::Of(*h_.pool); }
  BytesTree& tree() { return *h_.tree; }
  Allocator& alloc() { return pool().allocator(); }

  std::string path_;  // the store's file ("": anonymous)
  Options options_;   // as opened
  const uint64_t id_;  // unique in the process (the thread's acknowledgement ts is per store)
  const TreeFactory* factory_;
  TreeHandle<BytesTree> h_;
  KvMeta* meta_;
  std::atomic<uint64_t> next_ts_{0};  // last ts issued
  Publication pub_;                    // the visible ts: every ts <= it is installed (K6)
  // Store::DeferVisibility: set while no writer runs.
  bool defer_ = false;
  std::function<void(uint64_t)> on_visible_;
  std::function<void(uint64_t)> before_publish_;  // Options::testing_before_publish
  std::deque<std::pair<uint64_t, std::string>> deferred_gc_;  // (ts, key) by ts, roughly (gc_mu_)
  std::atomic<size_t> deferred_gc_count_{0};  // its size, read without gc_mu_ (0: nothing to do)
  // Spin locks, not std::mutex: a batch or transaction holds one per stripe
  // it writes (up to kStripes at once, K5), which is beyond what
  // ThreadSanitizer's deadlock detector can track for pthread mutexes (64);
  // a stripe is held only across one key's version install.
  std::unique_ptr<SpinLock[]> stripes_;

  std::mutex snap_mu_;
  std::multiset<uint64_t> snapshots_;
  std::mutex gc_mu_;
  std::set<std::string, std::less<>> gc_pending_;  // keys whose chains still hold old versions
  // A writer added keys to gc_pending_ after the horizon it used had moved
  // (CollectKeys): the next CollectPublished collects the pending keys.
  std::atomic<bool> recollect_{false};

  // Commit log slots (K3): which of meta_->log_slot are taken.
  std::mutex slot_mu_;
  std::condition_variable slot_cv_;
  uint32_t slots_busy_ = 0;
  int AcquireSlot();
  void ReleaseSlot(int slot);

  Status failed_;  // set when a commit could not be applied after its commit point
  std::mutex failed_mu_;
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> conflicts_{0};
  bool closed_ = false;
  uint64_t redone_commits_ = 0;
  bool recovered_ = false;

  Status Failed();
  void SetFailed(Status s);
};

// Deferred trims a write does after its own (Store::Impl::CollectPublished):
// more than the one each deferred write adds, so the queue drains.
inline constexpr size_t kCollectPerWrite = 4;

// Keys are bounded by the tree.
Status CheckKey(std::string_view key);
// Values are at most kMaxValueBytes (`what` names the value in the error).
Status CheckValue(uint64_t n, std::string_view what);
// A field record's limits: kMaxFields, names of 1..kMaxFieldNameBytes, values.
Status CheckFields(const FieldMap& fields);

// Brackets a commit from taking its timestamp to publishing it (K6).  On a
// native engine it holds install_mu_ and pins the published tree version
// until the new one is published (N2); elsewhere Publish waits for the
// earlier timestamps.
class InstallScope {
 public:
  explicit InstallScope(Store::Impl& s);
  ~InstallScope();
  InstallScope(const InstallScope&) = delete;
  InstallScope& operator=(const InstallScope&) = delete;
  // Publishes ts (once): with the tree version now current, on a native engine.
  void Publish(uint64_t ts);

 private:
  Store::Impl& s_;
  std::unique_lock<std::mutex> lock_;
  uint64_t pinned_ = 0;  // native: the version pinned, 0 = none
};

// Holds a set of a store's key stripes (K5), taken in ascending order so two
// holders never deadlock.
class StripeLocks {
 public:
  StripeLocks(Store::Impl& s, std::vector<size_t> stripes);
  ~StripeLocks();
  StripeLocks(const StripeLocks&) = delete;
  StripeLocks& operator=(const StripeLocks&) = delete;

 private:
  Store::Impl& s_;
  std::vector<size_t> stripes_;
};

}  // namespace pmtree::kv

#endif  // PMTREE_KV_STORE_IMPL_H_
