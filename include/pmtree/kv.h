// SPDX-License-Identifier: Apache-2.0
//
// kv::Store: a key-value store over any registered persistent tree.
//
// The store keeps byte-string keys in the tree (BytesTree) and values in
// records in the same pool; the tree maps a key to the offset of the key's
// newest record *version*.  A value is 0 B .. kMaxValueBytes; a record is
// either a plain value or a set of named fields (the YCSB / Redis-hash
// shape).  docs/kv.md gives the record format, the version and commit
// protocol and what a crash can and cannot lose.
//
//   auto store = kv::Store::Open("/dev/shm/my.kv", {.engine = "lbtree"});
//   if (!store.ok()) ...                       // wrong engine, foreign file, ...
//   kv::Store& db = **store;
//   PMTREE_RETURN_IF_ERROR(db.Put("k", "v"));
//   std::string v;
//   auto found = db.Get("k", &v);              // Result<bool>
//   const kv::Snapshot* s = db.GetSnapshot();  // a consistent read view
//   ... db.Get("k", &v, {.snapshot = s}) ...
//   db.ReleaseSnapshot(s);
//   auto txn = db.BeginTransaction();          // snapshot isolation
//   txn->Put("a", "1"); txn->Delete("b");
//   Status c = txn->Commit();                  // Busy on a write-write conflict
//   PMTREE_RETURN_IF_ERROR(db.Close());
//
// DURABILITY.  When Put, Delete, PutFields, UpdateFields, Write(batch) or
// Transaction::Commit returns OK, its effect is durable: a crash at any later
// instant recovers it.  A crash during such a call recovers to the state
// before or after the whole call (a batch or transaction is all or nothing;
// PutMany is this per put, not for the group).
// Nothing a read returns can be lost by a later crash.  Snapshots and open
// transactions are DRAM state and end with the process.  After a crash no
// record leaks and no reachable record is freed (docs/kv.md, "Recovery").
//
// VERSIONS.  Every write is stamped with a commit timestamp (NV-Store's
// timestamp MVCC); a snapshot is a timestamp and sees exactly the writes
// stamped at or before it.  Reads never block and never wait for writers;
// writers never wait for readers.  Old versions are reclaimed once no
// snapshot needs them.  On an engine with native versions (cdds: its
// BasicTree::versions() face) the same Snapshot handles are served from the
// tree's own versions: a snapshot pins a tree version, reads go through the
// tree's versioned lookup and scan, and a replaced record is freed once the
// tree's oldest retained version passes it (docs/kv.md, "Native versions").
//
// DEFERRED VISIBILITY (a server's mode; Store::DeferVisibility).  By default
// a write returns once it is durable *and* visible: a read on any thread
// after it returns sees it, which means waiting for every write that took an
// earlier commit timestamp (snapshots see timestamps in order).  With
// deferred visibility a write returns once durable and installed, possibly
// before visible_timestamp() reaches its timestamp; the caller learns that
// timestamp from TakeThreadTimestamp() and holds its acknowledgement until
// visible_timestamp() >= it (a listener is called whenever it advances).
// Visibility itself is unchanged: no read ever sees a write before every
// earlier one.
//
// THREAD SAFETY.  Every member of Store may be called from any number of
// threads at once, except Open/Close/Verify/Stats (quiescent only, as the
// tree's own Verify and Stats are).  A Transaction or Iterator
// object is used by one thread at a time.  Snapshots, iterators and
// transactions must be released/destroyed before Close().
//
// OUTCOMES vs ERRORS (as for trees): "absent" is a return value; a Status
// reports bad input (InvalidArgument), a full pool (OutOfSpace, nothing
// changed), a conflict (Busy, from Commit), or a broken file (Corruption).

#ifndef PMTREE_KV_H_
#define PMTREE_KV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pmtree/pool.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree::kv {

// The pool root slot that names the store's meta block (trees use slot 0).
inline constexpr int kStoreRootSlot = 7;

// Largest value (and largest single field value); larger is InvalidArgument.
inline constexpr uint64_t kMaxValueBytes = 64ull << 20;
// Field records: at most this many fields, names of 1..kMaxFieldNameBytes.
inline constexpr uint32_t kMaxFields = 1024;
inline constexpr uint32_t kMaxFieldNameBytes = 255;

struct Options {
  // Registry name of the tree that indexes the keys ("lbtree", "fastfair",
  // ...): any persistent tree with byte-string keys.  Opening a pool of
  // another tree fails with Incompatible naming both.
  std::string engine = "lbtree";
  // Size of a new pool file (ignored when the file exists).
  uint64_t pool_size = kDefaultPoolSize;
  // Create the file when it does not exist (else NotFound).
  bool create_if_missing = true;
  // Fail with Busy when the file exists.
  bool error_if_exists = false;
  TreeOptions tree_options;  // node size, design extras (key_kind is set by the store)
  PoolOptions pool_options;  // backend, counting, latency emulation
  // TEST ONLY: recovery skips the redo of committed batches, the deliberate
  // flaw the crash tests' negative control must catch.  Never set it.
  bool testing_skip_redo = false;
  // TEST ONLY: a new version's header and body are not flushed before the
  // tree (or a commit log) names it, breaking K1 (docs/kv.md): the second
  // deliberate flaw the crash explorer's negative control must catch in ADR
  // (in eADR caches persist, so it is no flaw there).  Never set it.
  bool testing_skip_record_persist = false;
  // TEST ONLY: called by every committing writer with its timestamp after
  // its versions are in the tree and before it marks them installed (K6),
  // so a test can hold a writer there and see what waits for it.
  std::function<void(uint64_t ts)> testing_before_publish;
  // TEST ONLY: Store::Clear stops as a crash would at step 1 (the new store
  // is built beside the file, not yet renamed over it) or 2 (renamed, not
  // yet adopted), returning Internal; the test then drops the store without
  // Close and reopens the file.  0 (always, outside tests): no stop.
  int testing_clear_crash_at = 0;
};

// A consistent read view (a commit timestamp).  Obtained from and released to
// the store that made it.
class Snapshot {
 public:
  uint64_t timestamp() const { return ts_; }
  // The engine's native version this snapshot reads (0 on an engine that
  // keeps versions in the records).
  uint64_t tree_version() const { return version_; }

 private:
  friend class Store;
  Snapshot(uint64_t ts, uint64_t version) : ts_(ts), version_(version) {}
  uint64_t ts_;
  uint64_t version_;
};

struct ReadOptions {
  // Read at this snapshot; null reads the newest committed state.
  const Snapshot* snapshot = nullptr;
  // Without a snapshot: read the newest *complete* write of the key (its
  // writer installed all it stamped; a batch is seen whole or not at all),
  // even one not yet visible under deferred visibility.  For a caller that
  // serialises the writers of the key itself (a read-modify-write under its
  // own lock must see the write that released the lock).  Reading a write
  // newer than visible_timestamp() raises TakeThreadTimestamp(): hold the
  // answer until it is visible.  Same as a plain read without deferral.
  bool unpublished = false;
};

// Field name -> value.
using FieldMap = std::map<std::string, std::string, std::less<>>;
// A field's name and value where they lie in the pool (Store::GetFieldsView).
using FieldView = std::pair<std::string_view, std::string_view>;

// An atomic group of writes without reads: all or nothing, one commit.
class WriteBatch {
 public:
  void Put(std::string_view key, std::string_view value) { ops_.push_back({std::string(key), std::string(value), {}}); }
  // Replaces key's record with a field record of these fields (as PutFields).
  void PutFields(std::string_view key, FieldMap fields) {
    ops_.push_back({std::string(key), std::nullopt, std::move(fields)});
  }
  void Delete(std::string_view key) { ops_.push_back({std::string(key), std::nullopt, {}}); }
  void Clear() { ops_.clear(); }
  size_t size() const { return ops_.size(); }

  struct Op {
    std::string key;
    std::optional<std::string> value;  // a plain value
    std::optional<FieldMap> fields;    // a field record; neither = delete
    bool is_delete() const { return !value && !fields; }
  };
  const std::vector<Op>& ops() const { return ops_; }

 private:
  std::vector<Op> ops_;
};

// Forward iteration over keys in ascending byte order at one snapshot.
// Keys deleted or not yet written at the snapshot are skipped.
class Iterator {
 public:
  virtual ~Iterator() = default;
  // Positions at the first key >= target.
  virtual void Seek(std::string_view target) = 0;
  void SeekToFirst() { Seek(std::string_view()); }
  virtual bool Valid() const = 0;
  virtual void Next() = 0;
  virtual std::string_view key() const = 0;
  // The plain value; empty for a field record (see is_fields()).
  virtual std::string_view value() const = 0;
  virtual bool is_fields() const = 0;
  virtual const FieldMap& fields() const = 0;
  // Not OK when iteration stopped on an error (Corruption).
  virtual Status status() const = 0;
};

struct IteratorOptions {
  // Iterate at this snapshot; null takes one for the iterator's lifetime.
  const Snapshot* snapshot = nullptr;
  // Stop before this key (exclusive); unset = to the end.
  std::optional<std::string> upper_bound;
};

class Store;

// A snapshot-isolation transaction (Store::BeginTransaction).  Reads see the
// transaction's snapshot plus its own writes; writes are buffered in DRAM
// until Commit.  Commit is atomic and durable; it fails with Busy (and the
// transaction is aborted) when another transaction or write committed a key
// this one writes after this one's snapshot (first committer wins).
// Destroying an uncommitted transaction aborts it.
class Transaction {
 public:
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // As Store::Get: InvalidArgument when the key holds a field record.
  Result<bool> Get(std::string_view key, std::string* value);
  // As Store::GetFields: all fields (names empty) or the named ones;
  // InvalidArgument when the key holds a plain value.
  Result<bool> GetFields(std::string_view key, const std::vector<std::string>& names, FieldMap* out);
  Status Put(std::string_view key, std::string_view value);
  // Replaces key's record with a field record (as Store::PutFields).
  Status PutFields(std::string_view key, const FieldMap& fields);
  Status Delete(std::string_view key);
  Status Commit();
  void Abort();
  uint64_t snapshot_timestamp() const { return snapshot_ ? snapshot_->timestamp() : 0; }

 private:
  friend class Store;
  Transaction(Store* store, const Snapshot* snapshot) : store_(store), snapshot_(snapshot) {}
  Store* store_;
  const Snapshot* snapshot_;  // null once committed or aborted
  std::map<std::string, WriteBatch::Op, std::less<>> writes_;  // own writes, last wins (Op::key unused)
};

struct StoreStats {
  uint64_t keys = 0;              // tree entries (live keys and not yet collected tombstones)
  uint64_t record_bytes = 0;      // pool bytes of records, field blocks and commit logs
  uint64_t tree_bytes = 0;        // pool bytes the tree uses
  uint64_t versions_kept = 0;     // keys whose chains still hold old versions for snapshots
                                  // (native versions: replaced records not yet freed)
  uint64_t active_snapshots = 0;
  uint64_t commit_timestamp = 0;  // newest commit timestamp
  uint64_t commits = 0;           // transactions and batches committed since open
  uint64_t conflicts = 0;         // commits refused by first-committer-wins
  uint64_t redone_commits = 0;    // committed logs the last open redid (a crash hit their apply)
  bool recovered = false;         // the last open walked the records (the pool was not closed cleanly)
};

class Store {
 public:
  // Opens the store in `path`, creating it when missing (options).  An empty
  // path makes a store in anonymous memory (tests).  Errors: InvalidArgument
  // (unknown or volatile engine, no byte-string keys), Incompatible (the pool
  // holds another tree, or a tree without a store), NotFound, Busy, and the
  // pool's own errors for a foreign or corrupt file.
  static Result<std::unique_ptr<Store>> Open(const std::string& path, const Options& options);

  // Clean shutdown (no snapshot, iterator or transaction may remain).
  // Destroying a store without Close() is a simulated crash.
  Status Close();
  // Removes every key at once, durably, in time independent of their number
  // (a server's FLUSHALL): a new empty store (same engine, pool size and
  // node size) is built beside the file as `path.creating` and renamed over
  // it, then the old pool is unmapped.  The rename is the commit point: a
  // crash before it keeps every key (the leftover is removed by the next
  // open), after it none.  An anonymous store gets a new anonymous pool.
  // Timestamps go on from where they were (acknowledgement timestamps stay
  // meaningful).  QUIESCENT, like Close: no other call may run, and none may
  // be holding a view.  Busy when a snapshot, iterator or transaction is
  // open; OutOfSpace or IoError when the new file cannot be made: nothing
  // changed then.  An error after the rename (the store could not open its
  // new file) fails every later write with it: reopen the store.
  Status Clear();
  ~Store();

  // ---- plain values --------------------------------------------------------
  // Inserts or replaces key -> value.  The record is persisted before the
  // tree references it; a replace is one tree update.
  Status Put(std::string_view key, std::string_view value);
  // True and *value set when the key has a plain value at the read point.
  // InvalidArgument when it holds a field record.
  Result<bool> Get(std::string_view key, std::string* value, const ReadOptions& ro = {});
  // As Get, but calls fn with the value's bytes where they lie in the pool
  // instead of copying them (fn is not called when the key is absent).  The
  // view is valid only during the call: the read's epoch guard keeps the
  // record allocated until fn returns.  fn must not call the store.
  Result<bool> GetView(std::string_view key, const std::function<void(std::string_view)>& fn,
                       const ReadOptions& ro = {});
  // Removes key; false when absent.
  Result<bool> Delete(std::string_view key);
  // Group commit: puts of distinct keys made durable together, each exactly
  // as by Put, but the new records share one fence before the tree updates
  // and the old versions' unlinks share one after them (a server commits a
  // pipeline's independent writes this way).  NOT atomic as a group: on
  // return the first *applied puts are durable and visible and the rest were
  // not made (the status says why, e.g. OutOfSpace); a crash during the call
  // may keep any subset.  The applied puts share one commit timestamp, so a
  // snapshot sees all of them or none.  InvalidArgument, with nothing
  // written, for a repeated key or a key or value beyond the limits.
  // `admit`, when given,
  // sees each key's current plain value (nullopt: absent or a field record)
  // under the key's lock, in order; the group stops before the first put it
  // refuses (OK status, fewer applied), so a caller can check a key's type
  // without reading it first.
  using PutAdmit = std::function<bool(std::optional<std::string_view> current)>;
  Status PutMany(const std::vector<std::pair<std::string_view, std::string_view>>& puts, size_t* applied,
                 const PutAdmit& admit = nullptr);
  // What a key holds when UpdateMany shows it: nothing (absent, or deleted),
  // a plain value (`value`, valid only during the call that shows it), or a
  // field record.
  struct Current {
    enum class Kind { kAbsent, kValue, kFields };
    Kind kind = Kind::kAbsent;
    std::string_view value;
  };
  // Sets *value to key i's new plain value, given what it holds now (under
  // its lock), or returns false to stop the group before key i.  *value must
  // stay valid until the callback is called again or UpdateMany returns.
  using PutCompute = std::function<bool(size_t i, const Current& current, std::string_view* value)>;
  // Group commit of read-modify-writes (a server's pipelined INCRs): PutMany
  // whose values are computed from the keys' current values, each under its
  // key's lock, in order, so no other writer comes between the read and the
  // write.  Same durability, timestamp and stopping rules as PutMany; a value
  // beyond kMaxValueBytes stops the group with InvalidArgument (the earlier
  // keys applied).  Under deferred visibility, the timestamp the caller takes
  // (TakeThreadTimestamp) covers the values read as well as the writes.
  Status UpdateMany(const std::vector<std::string_view>& keys, size_t* applied, const PutCompute& compute);

  // ---- field records ---------------------------------------------------------
  // Replaces key's record with these fields (a new field record).
  Status PutFields(std::string_view key, const FieldMap& fields);
  // Sets the given fields of key's field record, copy-on-write: only the new
  // fields' values and the small field table are written.  False when the key
  // is absent; InvalidArgument when it holds a plain value.
  Result<bool> UpdateFields(std::string_view key, const FieldMap& fields);
  // Reads all fields (names empty) or only the named ones into *out.
  Result<bool> GetFields(std::string_view key, const std::vector<std::string>& names, FieldMap* out,
                         const ReadOptions& ro = {});
  // As GetFields of all fields, but calls fn once with every field's name
  // and value in the pool, in name order, instead of copying them (fn is not
  // called when the key is absent).  The views are valid only during the
  // call (the read's epoch guard); fn must not call the store.
  Result<bool> GetFieldsView(std::string_view key, const std::function<void(std::span<const FieldView>)>& fn,
                             const ReadOptions& ro = {});

  // ---- snapshots, iteration, atomic groups ---------------------------------------
  const Snapshot* GetSnapshot();
  void ReleaseSnapshot(const Snapshot* snapshot);
  std::unique_ptr<Iterator> NewIterator(const IteratorOptions& options = {});
  Status Write(const WriteBatch& batch);
  std::unique_ptr<Transaction> BeginTransaction();

  // ---- deferred visibility (see DEFERRED VISIBILITY) ---------------------------
  // Turns deferral on (a non-empty listener) or off (empty).  The listener is
  // called by the writer that advanced the visible timestamp, with the new
  // value, from inside that write (keep it short; it must not call the
  // store).  Only while no write runs.  On an engine with native versions
  // (cdds) writes are serialised and visible on return either way.
  void DeferVisibility(std::function<void(uint64_t visible)> listener);
  // Every write stamped at or before it is visible (K6).
  uint64_t visible_timestamp() const;
  // This thread's acknowledgement timestamp for this store, reset to 0: the
  // newest timestamp its writes took or its unpublished reads returned since
  // the last call.  A reply that depends on them waits until
  // visible_timestamp() >= it.
  uint64_t TakeThreadTimestamp();
  // Raises this thread's acknowledgement timestamp to at least ts (a server
  // carrying a connection's still-held writes into its next commands).
  void RaiseThreadTimestamp(uint64_t ts);
  // Waits (yielding) until this thread's acknowledgement timestamp, not
  // taken, is visible: for a command about to iterate at the visible
  // timestamp that must see the writes issued before it on its connection.
  // Returns at once when nothing of this thread's is pending.
  void AwaitThreadTimestamp();
  // Waits (yielding) until every write that had taken a timestamp when it was
  // called is visible: for a reader that needs a snapshot with its own
  // earlier deferred writes in it (a transaction, an iteration under a lock).
  void AwaitPublished();

  // ---- introspection ----------------------------------------------------------------
  // Tree Verify() plus every record reachable and well formed, and the
  // store's bytes in use == the bytes its records reach.  Quiescent only.
  Status Verify();
  // Quiescent only (it asks the tree for its entry count).
  StoreStats Stats();
  std::string_view engine() const;
  Pool& pool();

  class Impl;

 private:
  friend class Transaction;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pmtree::kv

#endif  // PMTREE_KV_H_
