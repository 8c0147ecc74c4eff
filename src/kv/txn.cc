// SPDX-License-Identifier: Apache-2.0
//
// Atomic multi-key commits: WriteBatch and snapshot-isolation transactions.
//
// Commit protocol (docs/kv.md, "Commit"; invariants in store_impl.h):
//   1. lock the stripes of every key, in ascending stripe order (K5);
//   2. read each head; a transaction aborts with Busy when a head is newer
//      than its snapshot (first committer wins);
//   3. write each new version's body, and the commit log block;
//   4. take a commit slot and a timestamp; seal the versions with prev = the
//      old head, persist them and the log (K1, K3);
//   5. store the log's offset in the slot and persist it: the commit point;
//   6. install every version with one tree update each;
//   7. clear the slot durably (K3), publish the timestamp (K6), trim the
//      chains (K4), unlock, free the log.
// A crash before 5 leaves only unreached blocks (freed by recovery); after 5
// recovery redoes 6 from the log, so the batch is all or nothing.
// On an engine with native versions (N1-N3, store_impl.h) step 6 removes the
// entry of a deleted key instead of installing its tombstone, 7 retires the
// old heads once the tree's versions no longer show them, and the whole of
// 4-7 runs inside one InstallScope, so no snapshot sees part of the batch.

#include <algorithm>

#include "kv/store_impl.h"

namespace pmtree::kv {

StripeLocks::StripeLocks(Store::Impl& s, std::vector<size_t> stripes) : s_(s), stripes_(std::move(stripes)) {
  std::sort(stripes_.begin(), stripes_.end());
  stripes_.erase(std::unique(stripes_.begin(), stripes_.end()), stripes_.end());
  for (size_t i : stripes_) s_.stripes_[i].lock();
}

StripeLocks::~StripeLocks() {
  for (size_t i : stripes_) s_.stripes_[i].unlock();
}

int Store::Impl::AcquireSlot() {
  std::unique_lock<std::mutex> g(slot_mu_);
  constexpr uint32_t kAll = (1u << kLogSlots) - 1;
  slot_cv_.wait(g, [&] { return slots_busy_ != kAll; });
  int slot = __builtin_ctz(~slots_busy_);
  slots_busy_ |= 1u << slot;
  return slot;
}

void Store::Impl::ReleaseSlot(int slot) {
  {
    std::lock_guard<std::mutex> g(slot_mu_);
    slots_busy_ &= ~(1u << slot);
  }
  slot_cv_.notify_one();
}

Status Store::Impl::CommitBatch(const WriteBatch& batch, const Snapshot* snap) {
  PMTREE_RETURN_IF_ERROR(Failed());
  BatchWrites writes;  // last write of a key wins
  for (const WriteBatch::Op& op : batch.ops()) {
    PMTREE_RETURN_IF_ERROR(CheckKey(op.key));
    if (op.value) PMTREE_RETURN_IF_ERROR(CheckValue(op.value->size(), "value in a batch"));
    if (op.fields) PMTREE_RETURN_IF_ERROR(CheckFields(*op.fields));
    writes[op.key] = &op;
  }
  std::vector<size_t> stripes;
  for (const auto& [key, v] : writes) stripes.push_back(StripeOf(key));
  StripeLocks locks(*this, std::move(stripes));

  uint64_t log_bytes = sizeof(CommitLogHeader);
  PMTREE_ASSIGN_OR_RETURN(std::vector<PendingWrite> pw, PlanBatch(writes, snap, &log_bytes));
  if (pw.empty()) return Status::Ok();
  // Versions not yet sealed have no header to read: free them by size (a
  // field version's table, then the fresh blocks it names).
  auto undo = [&] {
    for (const PendingWrite& w : pw) {
      if (w.version == 0) continue;
      const bool fields = w.kind == VersionKind::kFields;
      const auto* blocks = reinterpret_cast<const uint64_t*>(pool().base() + w.version + sizeof(VersionHeader));
      for (uint64_t i = 0; fields && i < w.length; i++)
        alloc().Free(blocks[i], FieldBlockBytes(blocks[i]), BlockOwner::kStore);
      alloc().Free(w.version, sizeof(VersionHeader) + (fields ? 8 * w.length : w.length), BlockOwner::kStore);
    }
  };
  for (PendingWrite& w : pw) {
    const WriteBatch::Op& op = *writes.find(w.key)->second;
    auto off = w.kind == VersionKind::kValue    ? NewValueVersion(*op.value)
               : w.kind == VersionKind::kFields ? NewFieldVersion(0, *op.fields, &w.length)
                                                : NewTombstone();
    if (!off.ok()) {
      undo();
      return off.status();
    }
    w.version = *off;
  }
  auto log = alloc().Allocate(log_bytes, kAllocGranule, BlockOwner::kStore);
  if (!log.ok()) {
    undo();
    return log.status().Annotate("kv: commit log");
  }
  return InstallBatch(pw, *log, log_bytes);
}

Result<std::vector<PendingWrite>> Store::Impl::PlanBatch(const BatchWrites& writes, const Snapshot* snap,
                                                         uint64_t* log_bytes) {
  // Heads and conflicts first, so a refused commit allocates nothing.
  std::vector<PendingWrite> pw;
  for (const auto& [key, op] : writes) {
    uint64_t head = 0;
    std::optional<VersionView> hv;
    if (tree().Lookup(key, &head)) {
      PMTREE_ASSIGN_OR_RETURN(hv, ReadVersion(head));
    }
    // Native versions keep no tombstone: a delete after the snapshot is
    // found in deleted_at_ instead.
    if (snap != nullptr && vt_ != nullptr && DeletedSince(key, snap->timestamp())) {
      conflicts_.fetch_add(1);
      return Status::Busy("kv: write-write conflict on key '" + std::string(key) +
                          "': deleted after this transaction's snapshot at ts " + std::to_string(snap->timestamp()) +
                          " (first committer wins)");
    }
    if (snap != nullptr && hv && hv->ts > snap->timestamp()) {
      conflicts_.fetch_add(1);
      return Status::Busy("kv: write-write conflict on key '" + std::string(key) + "': committed at ts " +
                          std::to_string(hv->ts) + ", after this transaction's snapshot at ts " +
                          std::to_string(snap->timestamp()) + " (first committer wins)");
    }
    const bool live = hv && hv->kind != VersionKind::kTombstone;
    if (op->is_delete() && !live) continue;  // deleting an absent key changes nothing
    PendingWrite w;
    w.key = std::string(key);
    w.old_head = hv ? head : 0;
    w.kind = op->value ? VersionKind::kValue : op->fields ? VersionKind::kFields : VersionKind::kTombstone;
    w.length = op->value ? op->value->size() : 0;  // a field version's: its field count, once made
    pw.push_back(std::move(w));
    *log_bytes += sizeof(CommitEntry) + Pad8(key.size());
  }
  return pw;
}

Status Store::Impl::InstallBatch(const std::vector<PendingWrite>& pw, uint64_t log, uint64_t log_bytes) {
  const int slot = AcquireSlot();
  InstallScope scope(*this);
  const uint64_t ts = NextTs();
  char* lp = pool().base() + log;
  const CommitLogHeader lh{kCommitMagic, static_cast<uint32_t>(pw.size()), ts, log_bytes, 0};
  pool().Write(lp, &lh, sizeof(lh));
  uint64_t pos = sizeof(lh);
  for (const PendingWrite& w : pw) {
    SealVersion(w.version, w.kind, w.length, ts, ChainPrev(w.old_head), /*fence=*/false);
    const CommitEntry e{w.version, static_cast<uint32_t>(w.key.size()), 0};
    pool().Write(lp + pos, &e, sizeof(e));
    pool().Write(lp + pos + sizeof(e), w.key.data(), w.key.size());
    pos += sizeof(e) + Pad8(w.key.size());
  }
  // One fence for the versions and the log: all durable before the slot
  // names the log (K1, K3).
  pool().Persist(lp, log_bytes);
  pool().Store64(&meta_->log_slot[slot], log);
  // The commit point: once durable, recovery redoes the batch.
  pool().Persist(&meta_->log_slot[slot], 8);

  Status applied;
  const bool native = vt_ != nullptr;
  for (size_t i = 0; i < pw.size(); i++) {
    const PendingWrite& w = pw[i];
    // N1: a native delete removes the entry; no tombstone enters the tree.
    Result<bool> r = native && w.kind == VersionKind::kTombstone ? tree().Remove(w.key)
                     : w.old_head                                  ? tree().Update(w.key, w.version)
                                                                   : tree().Insert(w.key, w.version);
    if (!r.ok() || !*r) {
      applied = r.ok() ? Status::Internal("kv: the tree disagreed with a locked lookup") : r.status();
      break;
    }
  }
  if (!applied.ok()) {
    // Committed but not installed: the log stays for recovery to finish,
    // and its slot stays taken so no later commit overwrites it.
    SetFailed(applied);
    scope.Publish(ts);
    return Failed();
  }
  pool().Store64(&meta_->log_slot[slot], 0);
  // Clear the slot durably while the keys are still locked (K3).
  pool().Persist(&meta_->log_slot[slot], 8);
  if (native) {
    for (const PendingWrite& w : pw) {
      const bool del = w.kind == VersionKind::kTombstone;
      if (w.old_head != 0) Retire(w.old_head, del ? 0 : w.version);  // N3
      if (!del) continue;
      NoteDelete(w.key, ts);
      // Named only by the log, whose slot is clear: never in the tree.
      std::unordered_set<uint64_t> none;
      DropVersion(w.version, &none, false);
    }
    scope.Publish(ts);
    alloc().Free(log, log_bytes, BlockOwner::kStore);
    ReleaseSlot(slot);
    commits_.fetch_add(1);
    return Status::Ok();
  }
  scope.Publish(ts);
  Status gc;
  if (pub_.visible() < ts) {  // deferred: trimming below the heads waits for them (K4)
    for (const PendingWrite& w : pw) DeferCollect(ts, w.key);
  } else {
    std::vector<std::string_view> keys;
    keys.reserve(pw.size());
    for (const PendingWrite& w : pw) keys.emplace_back(w.key);
    gc = CollectKeys(keys, Horizon());
  }
  alloc().Free(log, log_bytes, BlockOwner::kStore);
  ReleaseSlot(slot);
  commits_.fetch_add(1);
  return gc;
}

// ---------------------------------------------------------------------------
// Transaction

Transaction::~Transaction() { Abort(); }

Result<bool> Transaction::Get(std::string_view key, std::string* value) {
  if (snapshot_ == nullptr) return Status::Busy("kv: the transaction has finished");
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  if (auto it = writes_.find(key); it != writes_.end()) {
    const WriteBatch::Op& op = it->second;
    if (op.fields)
      return Status::InvalidArgument("kv: the key holds a field record, not a plain value (use GetFields)");
    if (!op.value) return false;
    *value = *op.value;
    return true;
  }
  Store::Impl& s = *store_->impl_;
  auto guard = s.pool().epochs().Protect();
  PMTREE_ASSIGN_OR_RETURN(auto v, s.VisibleAt(key, *snapshot_));
  if (!v) return false;
  PMTREE_RETURN_IF_ERROR(s.ReadValue(*v, value));
  return true;
}

Result<bool> Transaction::GetFields(std::string_view key, const std::vector<std::string>& names, FieldMap* out) {
  if (snapshot_ == nullptr) return Status::Busy("kv: the transaction has finished");
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  if (auto it = writes_.find(key); it != writes_.end()) {
    const WriteBatch::Op& op = it->second;
    if (op.value) return Status::InvalidArgument("kv: the key holds a plain value, not a field record (use Get)");
    if (!op.fields) return false;
    out->clear();
    for (const auto& [name, v] : *op.fields)
      if (names.empty() || std::find(names.begin(), names.end(), name) != names.end()) out->emplace(name, v);
    return true;
  }
  Store::Impl& s = *store_->impl_;
  auto guard = s.pool().epochs().Protect();
  PMTREE_ASSIGN_OR_RETURN(auto v, s.VisibleAt(key, *snapshot_));
  if (!v) return false;
  PMTREE_RETURN_IF_ERROR(s.ReadFields(*v, names, out));
  return true;
}

Status Transaction::Put(std::string_view key, std::string_view value) {
  if (snapshot_ == nullptr) return Status::Busy("kv: the transaction has finished");
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  PMTREE_RETURN_IF_ERROR(CheckValue(value.size(), "value"));
  writes_[std::string(key)] = {{}, std::string(value), std::nullopt};
  return Status::Ok();
}

Status Transaction::PutFields(std::string_view key, const FieldMap& fields) {
  if (snapshot_ == nullptr) return Status::Busy("kv: the transaction has finished");
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  PMTREE_RETURN_IF_ERROR(CheckFields(fields));
  writes_[std::string(key)] = {{}, std::nullopt, fields};
  return Status::Ok();
}

Status Transaction::Delete(std::string_view key) {
  if (snapshot_ == nullptr) return Status::Busy("kv: the transaction has finished");
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  writes_[std::string(key)] = {};
  return Status::Ok();
}

Status Transaction::Commit() {
  if (snapshot_ == nullptr) return Status::Busy("kv: the transaction has finished");
  WriteBatch batch;
  for (auto& [k, op] : writes_) {
    if (op.value)
      batch.Put(k, *op.value);
    else if (op.fields)
      batch.PutFields(k, std::move(*op.fields));
    else
      batch.Delete(k);
  }
  Status s = store_->impl_->CommitBatch(batch, snapshot_);
  Abort();  // releases the snapshot either way
  store_->impl_->CollectPublished(kCollectPerWrite);
  return s;
}

void Transaction::Abort() {
  if (snapshot_ == nullptr) return;
  store_->ReleaseSnapshot(snapshot_);
  snapshot_ = nullptr;
  writes_.clear();
}

}  // namespace pmtree::kv
