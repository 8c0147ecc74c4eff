// SPDX-License-Identifier: Apache-2.0
//
// Opening, creating, recovering and closing a store; Verify and Stats.
//
// Space after a crash (pmtree/allocator.h, "Owners").  The tree's recovery
// reports the blocks it reaches; the store brackets it with HoldRebuild so
// the allocator does not free the rest yet, then reports its own: the meta
// block, each key's head version with its field blocks, and the live commit
// logs with the versions they install (K7: never a prev pointer, since no
// snapshot survives a crash).  ReleaseRebuild frees everything else: versions
// allocated but never linked, old versions a crash left behind, logs of
// batches that never committed.  After a clean close the allocator state is
// restored instead and the store declares its byte count (SetStoreBytes).
//
// Then committed logs are redone (K3) and every key a crash may have left
// with an old version or a tombstone is normalised.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <utility>

#include "kv/store_impl.h"

namespace pmtree::kv {

namespace {

struct LogInfo {
  int slot;
  uint64_t off;
  uint64_t bytes;
  uint64_t ts;
  std::vector<std::pair<std::string, uint64_t>> entries;  // key, new version
};

Result<LogInfo> ReadLog(const PoolImpl& p, int slot, uint64_t off) {
  LogInfo li{slot, off, 0, 0, {}};
  if (!p.InHeap(off, sizeof(CommitLogHeader)))
    return Status::Corruption("kv: commit log slot " + std::to_string(slot) + " names offset " +
                              std::to_string(off) + " outside the heap");
  const auto* h = p.At<CommitLogHeader>(off);
  if (h->magic != kCommitMagic || !p.InHeap(off, h->bytes))
    return Status::Corruption("kv: commit log at offset " + std::to_string(off) + " has a bad magic or size (K3)");
  li.bytes = h->bytes;
  li.ts = h->ts;
  uint64_t pos = sizeof(CommitLogHeader);
  for (uint32_t i = 0; i < h->count; i++) {
    if (pos + sizeof(CommitEntry) > h->bytes) return Status::Corruption("kv: commit log entry past its block");
    const auto* e = reinterpret_cast<const CommitEntry*>(p.base() + off + pos);
    pos += sizeof(CommitEntry);
    if (e->key_len > kMaxKeyBytes || pos + e->key_len > h->bytes)
      return Status::Corruption("kv: commit log key past its block");
    li.entries.emplace_back(std::string(p.base() + off + pos, e->key_len), e->version);
    pos += Pad8(e->key_len);
  }
  return li;
}

// Calls fn(key, value) for every tree entry, in key order, in chunks.
template <class Fn>
Status ForEachEntry(BytesTree& tree, Fn&& fn) {
  std::vector<BytesTree::Entry> buf(256);
  std::string start;
  for (;;) {
    size_t n = tree.Scan(start, std::span<BytesTree::Entry>(buf));
    for (size_t i = 0; i < n; i++) PMTREE_RETURN_IF_ERROR(fn(buf[i].first, buf[i].second));
    if (n < buf.size()) return Status::Ok();
    start = buf[n - 1].first;
    start.push_back('\0');  // the next key after it
  }
}

}  // namespace

// Marks a version and those of its field blocks not yet in *marked.
static Status MarkVersion(Store::Impl& s, uint64_t off, std::unordered_set<uint64_t>* marked, uint64_t* max_ts) {
  PMTREE_ASSIGN_OR_RETURN(VersionView v, s.ReadVersion(off));
  *max_ts = std::max(*max_ts, v.ts);
  PMTREE_RETURN_IF_ERROR(s.alloc().MarkUsed(off, v.bytes, BlockOwner::kStore));
  for (uint64_t b : s.FieldBlocksOf(v)) {
    if (!marked->insert(b).second) continue;
    if (!s.pool().InHeap(b, sizeof(FieldBlockHeader)))
      return Status::Corruption("kv: field block offset " + std::to_string(b) + " outside the heap");
    PMTREE_RETURN_IF_ERROR(s.alloc().MarkUsed(b, s.FieldBlockBytes(b), BlockOwner::kStore));
  }
  return Status::Ok();
}

// What recovery found and will do.
struct RecoveryPlan {
  std::vector<LogInfo> logs;                                    // live commit logs
  std::map<std::string, uint64_t, std::less<>> log_version;     // key -> version a log installs
  // Keys to normalise -> the old head a redo replaces (0 = none to free).
  std::map<std::string, uint64_t, std::less<>> fix;
  uint64_t max_ts = 0;
};

static Status ReadLogs(Store::Impl& s, RecoveryPlan* plan) {
  for (int i = 0; i < kLogSlots; i++) {
    if (s.meta_->log_slot[i] == 0) continue;
    PMTREE_ASSIGN_OR_RETURN(LogInfo li, ReadLog(s.pool(), i, s.meta_->log_slot[i]));
    for (auto& [k, v] : li.entries) plan->log_version[k] = v;
    plan->max_ts = std::max(plan->max_ts, li.ts);
    plan->logs.push_back(std::move(li));
  }
  return Status::Ok();
}

// The store's half of the rebuild (allocator.h, "Owners"): reports every
// block the store reaches (K7) and plans the fixes.
static Status MarkReachable(Store::Impl& s, RecoveryPlan* plan) {
  Allocator& al = s.alloc();
  PMTREE_RETURN_IF_ERROR(al.MarkUsed(s.pool().OffsetOf(s.meta_), sizeof(KvMeta), BlockOwner::kStore));
  for (const LogInfo& li : plan->logs) PMTREE_RETURN_IF_ERROR(al.MarkUsed(li.off, li.bytes, BlockOwner::kStore));
  auto pending = plan->log_version;  // log keys not met in the tree yet
  PMTREE_RETURN_IF_ERROR(ForEachEntry(s.tree(), [&](const std::string& key, uint64_t head) -> Status {
    std::unordered_set<uint64_t> marked;
    PMTREE_RETURN_IF_ERROR(MarkVersion(s, head, &marked, &plan->max_ts));
    PMTREE_ASSIGN_OR_RETURN(VersionView hv, s.ReadVersion(head));
    auto lv = pending.find(key);
    if (lv != pending.end()) {
      // A committed batch not yet applied to this key: its version (whose
      // prev is this head) is reached through the log.
      if (lv->second != head) PMTREE_RETURN_IF_ERROR(MarkVersion(s, lv->second, &marked, &plan->max_ts));
      plan->fix[key] = lv->second != head ? head : 0;
      pending.erase(lv);
    } else if (hv.kind == VersionKind::kTombstone || hv.prev != 0) {
      plan->fix[key] = 0;
    }
    return Status::Ok();
  }));
  for (auto& [key, v] : pending) {  // keys a live log creates
    std::unordered_set<uint64_t> marked;
    PMTREE_RETURN_IF_ERROR(MarkVersion(s, v, &marked, &plan->max_ts));
    plan->fix[key] = 0;
  }
  return Status::Ok();
}

// Redo of committed logs (K3): idempotent upserts of the versions they name.
static Status RedoLogs(Store::Impl& s, const RecoveryPlan& plan) {
  for (const LogInfo& li : plan.logs) {
    for (const auto& [key, v] : li.entries) {
      uint64_t head = 0;
      if (s.tree().Lookup(key, &head) && head == v) continue;
      PMTREE_RETURN_IF_ERROR(s.tree().Upsert(key, v).status().Annotate("kv recovery: redo"));
    }
    s.pool().Store64(&s.meta_->log_slot[li.slot], 0);
    // Clear the slot durably before freeing the log and the versions it
    // replaced: a second crash must not redo from a reused block.
    s.pool().Persist(&s.meta_->log_slot[li.slot], 8);
    s.alloc().Free(li.off, li.bytes, BlockOwner::kStore);
  }
  return Status::Ok();
}

// Normalise (K7): no snapshot exists, so each head is all a key needs.
static Status Normalize(Store::Impl& s, const RecoveryPlan& plan) {
  for (const auto& [key, old_head] : plan.fix) {
    uint64_t head = 0;
    if (!s.tree().Lookup(key, &head)) continue;
    PMTREE_ASSIGN_OR_RETURN(VersionView hv, s.ReadVersion(head));
    if (hv.prev != 0) {
      auto* h = s.pool().At<VersionHeader>(head);
      s.pool().Store64(&h->prev, 0);
      // Durable before the old version is freed (K4).
      s.pool().Persist(&h->prev, 8);
    }
    std::unordered_set<uint64_t> keep;
    for (uint64_t b : s.FieldBlocksOf(hv)) keep.insert(b);
    if (old_head != 0) s.DropVersion(old_head, &keep, false);
    if (hv.kind == VersionKind::kTombstone) {
      PMTREE_RETURN_IF_ERROR(s.tree().Remove(key).status().Annotate("kv recovery: tombstone"));
      s.DropVersion(head, &keep, false);
    }
  }
  return Status::Ok();
}

static Status Recover(Store::Impl& s) {
  Allocator& al = s.alloc();
  const bool walk = al.rebuild_end_pending();  // the tree rebuilt the allocator: report ours too
  RecoveryPlan plan;
  Status st = al.rebuilding() && !walk ? Status::Internal("kv: the tree's recovery left the allocator rebuild unfinished")
                                       : ReadLogs(s, &plan);
  if (st.ok() && walk) st = MarkReachable(s, &plan);
  al.ReleaseRebuild();
  // The tree's checks that needed the final free space (fptree's and
  // wbtree's scan for lost leaves): it is final now.
  if (st.ok()) st = al.RunDeferredRebuildChecks();
  PMTREE_RETURN_IF_ERROR(st.Annotate("kv recovery"));
  if (!walk) {
    // Restored allocator state: declare the store's bytes; plan the logs.
    PMTREE_RETURN_IF_ERROR(al.SetStoreBytes(s.meta_->store_bytes).Annotate("kv recovery"));
    for (auto& [key, v] : plan.log_version) {
      uint64_t head = 0;
      plan.fix[key] = s.tree().Lookup(key, &head) && head != v ? head : 0;
    }
  }
  if (s.pool().clean_shutdown()) plan.max_ts = std::max(plan.max_ts, s.meta_->clock);
  s.recovered_ = walk;
  s.redone_commits_ = plan.logs.size();
  s.next_ts_.store(plan.max_ts);
  s.pub_.Reset(plan.max_ts);
  if (s.skip_redo_) return Status::Ok();  // the negative control's flaw
  PMTREE_RETURN_IF_ERROR(RedoLogs(s, plan));
  return Normalize(s, plan);
}

// The pool holds a store of this build's format (read-only checks).
static Result<KvMeta*> CheckStorePool(const PoolImpl& pool, const std::string& path, const TreeFactory* f) {
  if (static_cast<KeyKind>(pool.layout_flags()) != KeyKind::kBytes)
    return Status::Incompatible(path + " holds a " + std::string(f->name) +
                                " tree with 64-bit integer keys, not a key-value store");
  const uint64_t meta_off = pool.root(kKvRootSlot);
  if (meta_off == 0)
    return Status::Incompatible(path + " holds a " + std::string(f->name) +
                                " tree but no key-value store (root slot 7 is empty)");
  if (!pool.InHeap(meta_off, sizeof(KvMeta)))
    return Status::Corruption(path + ": kv meta offset " + std::to_string(meta_off) + " outside the heap");
  auto* meta = pool.At<KvMeta>(meta_off);
  if (meta->magic != kKvMagic) return Status::Corruption(path + ": kv meta has a bad magic");
  if (meta->format != kKvFormat || meta->log_slots != kLogSlots)
    return Status::Incompatible(path + ": kv format " + std::to_string(meta->format) + ", this build reads " +
                                std::to_string(kKvFormat));
  return meta;
}

namespace {

// The name a store is built under before it is renamed into place (creation
// and Clear).  The store owns it: a file there is what a crash left.
std::string BuildingName(const std::string& path) { return path.empty() ? std::string() : path + ".creating"; }

// A `.creating` leftover (possibly empty or half-written, which
// Pool::Create's overwrite rule would refuse as "not a pmtree pool") is
// removed before a build starts again.
Status RemoveLeftover(const std::string& tmp) {
  if (!tmp.empty() && unlink(tmp.c_str()) != 0 && errno != ENOENT)
    return Status::IoError("kv: removing the leftover " + tmp + ": " + std::strerror(errno));
  return Status::Ok();
}

// A rename is durable once its directory is: on a file system that can
// lose power (a DAX mount) that takes the directory's fsync; on tmpfs
// (/dev/shm) it is a no-op.
Status SyncDirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("kv: opening the directory " + dir + ": " + std::strerror(errno));
  const int r = fsync(fd);
  const int err = errno;
  close(fd);
  if (r != 0) return Status::IoError("kv: syncing the directory " + dir + ": " + std::strerror(err));
  return Status::Ok();
}

// An empty store in a new pool of pool_size bytes at `file` (empty: an
// anonymous pool): the tree, then the meta block root slot 7 names.  The
// handle is open; *meta points into its pool.
Result<TreeHandle<BytesTree>> BuildEmptyStore(const std::string& file, uint64_t pool_size, const Options& o,
                                              const TreeFactory* f, KvMeta** meta) {
  PoolOptions po = o.pool_options;
  po.overwrite = true;
  PMTREE_ASSIGN_OR_RETURN(TreeHandle<BytesTree> h, CreateBytesTree(*f, file, pool_size, o.tree_options, po));
  PoolImpl& pool = PoolImpl::Of(*h.pool);
  auto meta_off = pool.allocator().Allocate(sizeof(KvMeta), kAllocGranule, BlockOwner::kStore);
  if (!meta_off.ok()) return meta_off.status().Annotate("kv: allocating the meta block");
  *meta = pool.At<KvMeta>(*meta_off);
  KvMeta m{};
  m.magic = kKvMagic;
  m.format = kKvFormat;
  m.log_slots = kLogSlots;
  m.store_bytes = Allocator::RoundUp(sizeof(KvMeta));  // the store's only block so far (read after a clean close)
  m.node_size = o.tree_options.node_size;
  pool.Write(*meta, &m, sizeof(m));
  // The meta block is complete before root slot 7 names it (K1's rule for
  // the anchor); SetRoot persists the slot.
  pool.Persist(*meta, sizeof(m));
  pool.SetRoot(kKvRootSlot, *meta_off);
  return h;
}

}  // namespace

void Store::Impl::Configure(const std::string& path, const Options& o) {
  path_ = path;
  options_ = o;
  skip_redo_ = o.testing_skip_redo;
  skip_record_persist_ = o.testing_skip_record_persist;
  before_publish_ = o.testing_before_publish;
}

Result<std::unique_ptr<Store::Impl>> Store::Impl::OpenExisting(const std::string& path, const Options& o,
                                                               const TreeFactory* f) {
  {
    // Look first through a private (copy-on-write) mapping: opening for
    // real marks the pool dirty, and a refused open must change no byte.
    PoolOptions peek;
    peek.private_mapping = true;
    peek.use_env = false;
    peek.counting = false;
    PMTREE_ASSIGN_OR_RETURN(std::unique_ptr<PoolImpl> pool, PoolImpl::Open(path, f->name, peek));
    PMTREE_RETURN_IF_ERROR(CheckStorePool(*pool, path, f).status());
  }
  PMTREE_ASSIGN_OR_RETURN(std::unique_ptr<PoolImpl> pool, PoolImpl::Open(path, f->name, o.pool_options));
  PMTREE_ASSIGN_OR_RETURN(KvMeta * meta, CheckStorePool(*pool, path, f));
  // The store's file is ours (the pool lock is exclusive): a build that a
  // crash interrupted before its rename left its file beside it.
  if (!o.pool_options.private_mapping) PMTREE_RETURN_IF_ERROR(RemoveLeftover(BuildingName(path)));
  // Keep the store's blocks out of the tree's rebuild until we report them.
  pool->allocator().HoldRebuild();
  TreeOptions to = o.tree_options;
  to.key_kind = KeyKind::kBytes;
  TreeHandle<BytesTree> h;
  h.pool = std::move(pool);
  auto tree = f->recover_bytes(h.pool.get(), to);
  if (!tree.ok()) return tree.status().Annotate(path);
  h.tree = std::move(tree).value();
  auto impl = std::make_unique<Impl>(f, std::move(h), meta);
  impl->Configure(path, o);
  PMTREE_RETURN_IF_ERROR(Recover(*impl).Annotate(path));
  impl->InitVersions();
  return impl;
}

Result<std::unique_ptr<Store::Impl>> Store::Impl::CreateNew(const std::string& path, const Options& o,
                                                            const TreeFactory* f) {
  // Built under a temporary name and renamed into place once complete, so a
  // crash during creation never leaves a half-made store at `path`.
  const std::string tmp = BuildingName(path);
  PMTREE_RETURN_IF_ERROR(RemoveLeftover(tmp));
  KvMeta* meta = nullptr;
  PMTREE_ASSIGN_OR_RETURN(TreeHandle<BytesTree> h, BuildEmptyStore(tmp, o.pool_size, o, f, &meta));
  if (path.empty()) {
    auto impl = std::make_unique<Impl>(f, std::move(h), meta);
    impl->Configure(path, o);
    impl->InitVersions();
    return impl;
  }
  PMTREE_RETURN_IF_ERROR(h.tree->Close().Annotate(tmp));
  h.tree.reset();
  h.pool.reset();
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    Status s = Status::IoError("kv: renaming " + tmp + " to " + path + " failed (errno " + std::to_string(errno) +
                               ")");
    unlink(tmp.c_str());
    return s;
  }
  // Durable before anyone is told the store exists: a power loss must not
  // take the name back from a store that has been written to.
  PMTREE_RETURN_IF_ERROR(SyncDirectoryOf(path));
  return OpenExisting(path, o, f);
}

Result<TreeHandle<BytesTree>> Store::Impl::ReplaceFile(const Options& o, KvMeta** meta) {
  const std::string tmp = BuildingName(path_);
  PMTREE_RETURN_IF_ERROR(RemoveLeftover(tmp));
  Status made = [&]() -> Status {
    PMTREE_ASSIGN_OR_RETURN(TreeHandle<BytesTree> h, BuildEmptyStore(tmp, pool().size(), o, factory_, meta));
    return h.tree->Close();  // closed cleanly: the open below restores it without a walk
  }();
  if (made.ok() && o.testing_clear_crash_at == 1) return Status::Internal("kv: clear stopped (test) before its rename");
  // THE COMMIT POINT.  The rename replaces the store's file whole: a crash
  // before it finds every key at path_ (and the leftover at tmp, removed by
  // the next open), a crash after it the empty store.
  if (made.ok() && rename(tmp.c_str(), path_.c_str()) != 0)
    made = Status::IoError("renaming " + tmp + " over " + path_ + ": " + std::strerror(errno));
  if (!made.ok()) {
    unlink(tmp.c_str());  // nothing changed: the store is still the old file
    return made.Annotate("kv: clear");
  }
  Status committed = SyncDirectoryOf(path_);
  if (committed.ok() && o.testing_clear_crash_at == 2)
    committed = Status::Internal("kv: clear stopped (test) after its rename");
  Result<std::unique_ptr<Impl>> opened = committed.ok() ? OpenExisting(path_, o, factory_) : committed;
  if (!opened.ok()) {
    // The file is the empty store now; this one's pool is not the file.
    SetFailed(opened.status().Annotate("kv: clear: after the rename"));
    return Failed();
  }
  *meta = (*opened)->meta_;
  return std::move((*opened)->h_);
}

Status Store::Impl::Clear() {
  if (closed_) return Status::Busy("kv: clear of a closed store");
  PMTREE_RETURN_IF_ERROR(Failed());
  {
    std::lock_guard<std::mutex> g(snap_mu_);
    if (!snapshots_.empty())
      return Status::Busy("kv: clear with " + std::to_string(snapshots_.size()) +
                          " snapshot(s), iterator(s) or transaction(s) open");
  }
  Options o = options_;
  if (meta_->node_size != 0) o.tree_options.node_size = meta_->node_size;
  KvMeta* meta = nullptr;
  TreeHandle<BytesTree> fresh;
  if (path_.empty()) {
    PMTREE_ASSIGN_OR_RETURN(fresh, BuildEmptyStore("", pool().size(), o, factory_, &meta));
  } else {
    PMTREE_ASSIGN_OR_RETURN(fresh, ReplaceFile(o, &meta));
  }
  // Nothing runs and no view is held (QUIESCENT): the old tree and pool are
  // dropped without Close, as a crash would (their file is gone, or about to
  // be, with the last reference), and the GC's queues with them.
  TreeHandle<BytesTree> old = std::exchange(h_, std::move(fresh));
  meta_ = meta;
  vt_ = h_.tree->versions();
  {
    std::lock_guard<std::mutex> g(gc_mu_);
    deferred_gc_.clear();
    deferred_gc_count_.store(0, std::memory_order_relaxed);
    gc_pending_.clear();
    retiring_.clear();
    deleted_at_.clear();
    recollect_.store(false);
  }
  // Timestamps go on (next_ts_ and the ring are kept): the new records are
  // stamped after every write the old pool held, so the acknowledgement
  // timestamps callers still hold stay satisfied and ordered.
  InitVersions();
  old.tree.reset();
  old.pool.reset();
  return Status::Ok();
}

Status Store::Impl::Close() {
  if (closed_) return Status::Ok();
  {
    std::lock_guard<std::mutex> g(snap_mu_);
    if (!snapshots_.empty())
      return Status::Busy("kv: close with " + std::to_string(snapshots_.size()) +
                          " snapshot(s) or transaction(s) still open");
  }
  CollectPublished(SIZE_MAX);  // quiescent: every ts is visible
  CollectPending();
  if (vt_ != nullptr) {
    RetireDue();  // no snapshot: the tree retains only its current version
    std::lock_guard<std::mutex> g(gc_mu_);
    deleted_at_.clear();
  }
  pool().epochs().DrainAll();  // nothing runs: retired versions are free now
  pool().Store64(&meta_->clock, VisibleTs());
  pool().Store64(&meta_->store_bytes, alloc().bytes_in_use(BlockOwner::kStore));
  // Durable before the pool's clean flag, which vouches for them.
  pool().Persist(&meta_->clock, 16);
  closed_ = true;
  return tree().Close();
}

Status Store::Impl::Verify() {
  PMTREE_RETURN_IF_ERROR(tree().Verify());
  pool().epochs().DrainAll();
  uint64_t reached = Allocator::RoundUp(sizeof(KvMeta));
  for (int i = 0; i < kLogSlots; i++) {
    if (meta_->log_slot[i] == 0) continue;
    PMTREE_ASSIGN_OR_RETURN(LogInfo li, ReadLog(pool(), i, meta_->log_slot[i]));
    reached += Allocator::RoundUp(li.bytes);
  }
  PMTREE_RETURN_IF_ERROR(ForEachEntry(tree(), [&](const std::string& key, uint64_t head) -> Status {
    std::unordered_set<uint64_t> blocks;
    uint64_t last_ts = std::numeric_limits<uint64_t>::max();
    for (uint64_t off = head; off != 0;) {
      PMTREE_ASSIGN_OR_RETURN(VersionView v, ReadVersion(off));
      if (v.ts >= last_ts)
        return Status::Corruption("kv: key '" + key + "': version at " + std::to_string(off) +
                                  " is not older than the one before it (K2)");
      if (v.ts > VisibleTs())
        return Status::Corruption("kv: key '" + key + "': version ts beyond the clock (K6)");
      last_ts = v.ts;
      reached += Allocator::RoundUp(v.bytes);
      for (uint64_t b : FieldBlocksOf(v)) {
        if (!pool().InHeap(b, sizeof(FieldBlockHeader)))
          return Status::Corruption("kv: key '" + key + "': field block outside the heap");
        const auto* fh = pool().At<FieldBlockHeader>(b);
        if (fh->name_len == 0 || fh->name_len > kMaxFieldNameBytes || fh->value_len > kMaxValueBytes ||
            !pool().InHeap(b, FieldBlockBytes(b)))
          return Status::Corruption("kv: key '" + key + "': malformed field block at " + std::to_string(b));
        if (blocks.insert(b).second) reached += Allocator::RoundUp(FieldBlockBytes(b));
      }
      off = v.prev;
    }
    return Status::Ok();
  }));
  {
    // N3: records the tree still shows to retained versions.
    std::lock_guard<std::mutex> g(gc_mu_);
    for (const Retiring& r : retiring_) {
      PMTREE_ASSIGN_OR_RETURN(VersionView v, ReadVersion(r.version));
      reached += Allocator::RoundUp(v.bytes);
      for (uint64_t b : FieldBlocksOf(v))
        if (std::find(r.spare.begin(), r.spare.end(), b) == r.spare.end()) reached += Allocator::RoundUp(FieldBlockBytes(b));
    }
  }
  const uint64_t in_use = alloc().bytes_in_use(BlockOwner::kStore);
  if (reached != in_use)
    return Status::Corruption("kv: record bytes reached " + std::to_string(reached) + " != store bytes in use " +
                              std::to_string(in_use) + " (leak or double use)");
  return Status::Ok();
}

StoreStats Store::Impl::Stats() {
  StoreStats st;
  st.keys = tree().Stats().entries;
  st.record_bytes = alloc().bytes_in_use(BlockOwner::kStore);
  st.tree_bytes = alloc().bytes_in_use();
  {
    std::lock_guard<std::mutex> g(gc_mu_);
    st.versions_kept = gc_pending_.size() + retiring_.size();
  }
  {
    std::lock_guard<std::mutex> g(snap_mu_);
    st.active_snapshots = snapshots_.size();
  }
  st.commit_timestamp = VisibleTs();
  st.commits = commits_.load();
  st.conflicts = conflicts_.load();
  st.redone_commits = redone_commits_;
  st.recovered = recovered_;
  return st;
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& path, const Options& options) {
  const TreeFactory* f = FindTree(options.engine);
  if (f == nullptr)
    return Status::InvalidArgument("kv: unknown engine '" + options.engine + "'; valid: " + TreeNames());
  if (!f->persistent())
    return Status::InvalidArgument("kv: engine '" + options.engine +
                                   "' keeps nothing in a pool; a store needs a persistent tree");
  if (f->create_bytes == nullptr || f->recover_bytes == nullptr)
    return Status::InvalidArgument("kv: engine '" + options.engine + "' has no byte-string keys");
  std::unique_ptr<Impl> impl;
  struct stat st;
  if (path.empty()) {
    PMTREE_ASSIGN_OR_RETURN(impl, Impl::CreateNew(path, options, f));
  } else if (stat(path.c_str(), &st) == 0) {
    if (options.error_if_exists) return Status::Busy("kv: " + path + " exists (error_if_exists)");
    PMTREE_ASSIGN_OR_RETURN(impl, Impl::OpenExisting(path, options, f));
  } else {
    if (!options.create_if_missing) return Status::NotFound("kv: " + path + ": no such store");
    PMTREE_ASSIGN_OR_RETURN(impl, Impl::CreateNew(path, options, f));
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

}  // namespace pmtree::kv
