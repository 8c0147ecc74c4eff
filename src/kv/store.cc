// SPDX-License-Identifier: Apache-2.0
//
// kv::Store: single-key writes, reads at a snapshot, snapshots and version GC.
// Invariants K1-K8 are stated in store_impl.h.
//
// A single-key write (Put, Delete, PutFields, UpdateFields) under the key's
// stripe lock (K5): look the head version up in the tree, write the new
// version's body, take a commit timestamp, seal (persist) the version with
// prev = the old head (K1, K2), install it with one tree update, publish the
// timestamp (K6), and trim the key's chain to what snapshots still need (K4).
// A delete installs a tombstone version; the tombstone and the tree entry go
// as soon as no snapshot can see the older value.
//
// On an engine with native versions (cdds) the tree keeps the old versions
// instead (N1-N3 in store_impl.h): no prev chains, no tombstones, snapshots
// pin tree versions, and a replaced record is retired once the tree's oldest
// retained version passes it.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "kv/store_impl.h"
#include "pm/prefetch.h"

namespace pmtree::kv {

Status CheckKey(std::string_view key) {
  if (key.size() > kMaxKeyBytes)
    return Status::InvalidArgument("kv: key of " + std::to_string(key.size()) + " bytes; the limit is " +
                                   std::to_string(kMaxKeyBytes));
  return Status::Ok();
}

Status CheckValue(uint64_t n, std::string_view what) {
  if (n > kMaxValueBytes)
    return Status::InvalidArgument("kv: " + std::string(what) + " of " + std::to_string(n) + " bytes; the limit is " +
                                   std::to_string(kMaxValueBytes) + " (64 MiB)");
  return Status::Ok();
}

Status CheckFields(const FieldMap& fields) {
  if (fields.size() > kMaxFields)
    return Status::InvalidArgument("kv: " + std::to_string(fields.size()) + " fields; the limit is " +
                                   std::to_string(kMaxFields));
  for (const auto& [name, value] : fields) {
    if (name.empty() || name.size() > kMaxFieldNameBytes)
      return Status::InvalidArgument("kv: field names have 1.." + std::to_string(kMaxFieldNameBytes) + " bytes");
    PMTREE_RETURN_IF_ERROR(CheckValue(value.size(), "field value"));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Impl basics

namespace {

// The acknowledgement timestamp of this thread (Store::TakeThreadTimestamp):
// the newest ts its writes took or its unpublished reads returned, for the
// store named by its id (a thread that switches stores starts again from
// 0; an id, not the address, which a later store may reuse).
thread_local uint64_t tls_store = 0;
thread_local uint64_t tls_ack_ts = 0;
std::atomic<uint64_t> next_store_id{1};

}  // namespace

Store::Impl::Impl(const TreeFactory* factory, TreeHandle<BytesTree> h, KvMeta* meta)
    : id_(next_store_id.fetch_add(1)), factory_(factory), h_(std::move(h)), meta_(meta), stripes_(new SpinLock[kStripes]) {
  vt_ = h_.tree->versions();
}

Store::Impl::~Impl() = default;

size_t Store::Impl::StripeOf(std::string_view key) const { return std::hash<std::string_view>{}(key) % kStripes; }
SpinLock& Store::Impl::LockFor(std::string_view key) { return stripes_[StripeOf(key)]; }

void Store::Impl::NoteThreadTs(uint64_t ts) {
  if (tls_store != id_) {
    tls_store = id_;
    tls_ack_ts = 0;
  }
  tls_ack_ts = std::max(tls_ack_ts, ts);
}

void Store::Impl::MarkInstalled(uint64_t ts) {
  if (before_publish_) before_publish_(ts);
  bool advanced;
  const uint64_t visible = pub_.Install(ts, &advanced);
  NoteThreadTs(ts);
  if (advanced && on_visible_) on_visible_(visible);
}

void Store::Impl::Publish(uint64_t ts) {
  // K6 through the ring: marking never waits for an earlier writer.  Only a
  // caller that wants its write visible on return (no deferral) waits, and
  // for the earlier writers only, which hold nothing it needs: a writer
  // takes its timestamp after all its locks and space.
  MarkInstalled(ts);
  if (defer_) return;
  while (pub_.visible() < ts) std::this_thread::yield();
}

void Store::Impl::DeferCollect(uint64_t ts, std::string_view key) {
  std::lock_guard<std::mutex> g(gc_mu_);
  deferred_gc_.emplace_back(ts, std::string(key));
  deferred_gc_count_.fetch_add(1, std::memory_order_relaxed);
}

void Store::Impl::CollectPublished(size_t max) {
  // Keys a snapshot's release may have missed (CollectKeys); the caller
  // holds no key lock here.
  if (recollect_.load(std::memory_order_acquire) && recollect_.exchange(false)) CollectPending();
  for (size_t n = 0; n < max && deferred_gc_count_.load(std::memory_order_relaxed) != 0; n++) {
    std::string key;
    {
      std::lock_guard<std::mutex> g(gc_mu_);
      if (deferred_gc_.empty() || deferred_gc_.front().first > pub_.visible()) return;
      key = std::move(deferred_gc_.front().second);
      deferred_gc_.pop_front();
      deferred_gc_count_.fetch_sub(1, std::memory_order_relaxed);
    }
    // The horizon is read under the key's lock, after its write is visible:
    // it can pass the head now (K4).
    std::lock_guard<SpinLock> lock(LockFor(key));
    Status s = CollectKey(key, Horizon());
    if (!s.ok()) SetFailed(s);
  }
}

Status Store::Impl::Failed() {
  std::lock_guard<std::mutex> g(failed_mu_);
  return failed_;
}

void Store::Impl::SetFailed(Status s) {
  std::lock_guard<std::mutex> g(failed_mu_);
  if (failed_.ok()) failed_ = s.Annotate("kv: a commit was not fully applied; reopen the store to finish it");
}

namespace {

// Pins the published tree version, which N2 keeps retained: a refusal is a
// broken invariant, not a condition to handle.
void PinPublished(VersionedTree<std::string_view>& vt, uint64_t version) {
  Status pinned = vt.PinVersion(version);
  if (pinned.ok()) return;
  std::fprintf(stderr, "kv: pinning the published version: %s (invariant N2)\n", pinned.ToString().c_str());
  std::abort();
}

}  // namespace

uint64_t Store::Impl::AcquireSnapshotTs(uint64_t* version) {
  std::lock_guard<std::mutex> g(snap_mu_);
  uint64_t ts = pub_.visible();
  *version = 0;
  if (vt_ != nullptr) {
    // N2: the pair is published under snap_mu_, and the published version
    // is pinned by its install until the next is published, so the tree's
    // GC has not passed it.
    *version = visible_version_.load(std::memory_order_acquire);
    PinPublished(*vt_, *version);
  }
  snapshots_.insert(ts);
  return ts;
}

void Store::Impl::ReleaseSnapshotTs(uint64_t ts, uint64_t version) {
  bool oldest;
  {
    std::lock_guard<std::mutex> g(snap_mu_);
    auto it = snapshots_.find(ts);
    if (it == snapshots_.end()) return;
    oldest = it == snapshots_.begin();
    snapshots_.erase(it);
  }
  if (vt_ != nullptr) {
    (void)vt_->ReleaseSnapshot(version);  // pinned by AcquireSnapshotTs
    RetireDue();
    if (oldest) {
      // Deletes no open snapshot predates cannot conflict any more.
      const uint64_t h = Horizon();
      std::lock_guard<std::mutex> g(gc_mu_);
      std::erase_if(deleted_at_, [&](const auto& d) { return d.second <= h; });
    }
    return;
  }
  // The horizon moved: versions kept for this snapshot may go now (K4).
  if (oldest) CollectPending();
}

// ---------------------------------------------------------------------------
// Native versions (N1-N3)

InstallScope::InstallScope(Store::Impl& s) : s_(s) {
  if (s_.vt_ == nullptr) return;
  lock_ = std::unique_lock<std::mutex>(s_.install_mu_);
  // N2: nothing installs between two publications, so the published version
  // is the tree's current one here, which the tree keeps.
  pinned_ = s_.visible_version_.load(std::memory_order_relaxed);
  PinPublished(*s_.vt_, pinned_);
}

InstallScope::~InstallScope() {
  if (pinned_ != 0) (void)s_.vt_->ReleaseSnapshot(pinned_);
}

void InstallScope::Publish(uint64_t ts) {
  if (s_.vt_ == nullptr) {
    s_.Publish(ts);
    return;
  }
  {
    // N2: installs are serialised, so this mark extends the prefix at once
    // and the pair moves together under snap_mu_.
    std::lock_guard<std::mutex> g(s_.snap_mu_);
    s_.MarkInstalled(ts);
    s_.visible_version_.store(s_.vt_->current_version(), std::memory_order_release);
  }
  if (pinned_ != 0) (void)s_.vt_->ReleaseSnapshot(pinned_);
  pinned_ = 0;
  s_.RetireDue();
}

void Store::Impl::InitVersions() {
  if (vt_ != nullptr) visible_version_.store(vt_->current_version(), std::memory_order_release);
}

void Store::Impl::Retire(uint64_t old, uint64_t successor) {
  Retiring r{old, vt_->current_version(), {}};
  if (successor != 0) {
    if (Result<VersionView> sv = ReadVersion(successor); sv.ok()) r.spare = FieldBlocksOf(*sv);
  }
  std::lock_guard<std::mutex> g(gc_mu_);
  retiring_.push_back(std::move(r));
}

void Store::Impl::RetireDue() {
  // N3: the horizon includes every pin and every reader inside the tree; a
  // reader that already left the tree with a record's offset is inside an
  // epoch guard, which the retirement waits for.
  const uint64_t horizon = vt_->oldest_retained_version();
  std::lock_guard<std::mutex> g(gc_mu_);
  while (!retiring_.empty() && retiring_.front().until <= horizon) {
    Retiring& r = retiring_.front();
    std::unordered_set<uint64_t> keep(r.spare.begin(), r.spare.end());
    DropVersion(r.version, &keep, true);
    retiring_.pop_front();
  }
}

Status Store::Impl::RemoveNative(std::string_view key, uint64_t head) {
  InstallScope scope(*this);
  const uint64_t ts = NextTs();
  Result<bool> removed = tree().Remove(key);
  if (removed.ok() && *removed) {
    Retire(head, 0);  // N1: the tree keeps the old entry for older snapshots
    NoteDelete(key, ts);
  }
  scope.Publish(ts);
  if (!removed.ok()) return removed.status();
  return *removed ? Status::Ok() : Status::Internal("kv: a locked key vanished from the tree");
}

void Store::Impl::NoteDelete(std::string_view key, uint64_t ts) {
  {
    std::lock_guard<std::mutex> g(snap_mu_);
    // A snapshot registered later reads at ts or after: no conflict.
    if (snapshots_.empty()) return;
  }
  std::lock_guard<std::mutex> g(gc_mu_);
  deleted_at_.insert_or_assign(std::string(key), ts);
}

bool Store::Impl::DeletedSince(std::string_view key, uint64_t snap_ts) {
  std::lock_guard<std::mutex> g(gc_mu_);
  auto it = deleted_at_.find(key);
  return it != deleted_at_.end() && it->second > snap_ts;
}

uint64_t Store::Impl::Horizon() {
  std::lock_guard<std::mutex> g(snap_mu_);
  return snapshots_.empty() ? pub_.visible() : *snapshots_.begin();
}

// ---------------------------------------------------------------------------
// Reads

namespace {

// Walks key's chain from its head to the newest version with ts <= at, or,
// with `unpublished`, the newest complete one (its writer installed every
// version it stamped; ReadOptions::unpublished).  *ts is the version's ts
// (0 when none); *fell_off is set when the chain ended before reaching one.
Result<std::optional<VersionView>> WalkChain(Store::Impl& s, std::string_view key, uint64_t at, bool unpublished,
                                             uint64_t* ts, bool* fell_off) {
  *fell_off = false;
  *ts = 0;
  uint64_t off = 0;
  if (!s.tree().Lookup(key, &off)) return std::optional<VersionView>();
  while (off != 0) {
    PMTREE_ASSIGN_OR_RETURN(VersionView v, s.ReadVersion(off));
    if (v.ts <= at || (unpublished && s.pub_.Complete(v.ts))) {
      *ts = v.ts;
      if (v.kind == VersionKind::kTombstone) return std::optional<VersionView>();
      return std::optional<VersionView>(v);
    }
    off = v.prev;
  }
  *fell_off = true;
  return std::optional<VersionView>();
}

}  // namespace

Result<std::optional<VersionView>> Store::Impl::VisibleAt(std::string_view key, const Snapshot& snap) {
  if (vt_ != nullptr) {
    uint64_t off = 0;
    PMTREE_ASSIGN_OR_RETURN(bool found, vt_->LookupAt(snap.tree_version(), key, &off));
    if (!found) return std::optional<VersionView>();
    return VisibleIn({std::string(), off}, snap);
  }
  bool fell_off;
  uint64_t ts;
  return WalkChain(*this, key, snap.timestamp(), false, &ts, &fell_off);
}

Result<std::optional<VersionView>> Store::Impl::VisibleIn(const BytesTree::Entry& e, const Snapshot& snap) {
  if (vt_ == nullptr) return VisibleAt(e.first, snap);
  // N1: the entry names the record itself.  A tombstone is in the tree only
  // between a recovery's redo and its normalisation.
  PMTREE_ASSIGN_OR_RETURN(VersionView v, ReadVersion(e.second));
  if (v.kind == VersionKind::kTombstone) return std::optional<VersionView>();
  return std::optional<VersionView>(v);
}

Result<size_t> Store::Impl::ScanFrom(const std::string& start, const Snapshot& snap,
                                     std::span<BytesTree::Entry> out) {
  if (vt_ != nullptr) return vt_->ScanAt(snap.tree_version(), start, nullptr, out);
  return tree().Scan(start, out);
}

Result<std::optional<VersionView>> Store::Impl::VisibleNow(std::string_view key, bool unpublished) {
  if (vt_ != nullptr) {
    // N2: a lookup at the tree's current version answers for the published
    // version when they are the same version (no install in flight).
    // Otherwise read at the published version, pinned for the read.
    const uint64_t published = visible_version_.load(std::memory_order_acquire);
    uint64_t off = 0;
    const bool found = tree().Lookup(key, &off);
    if (vt_->current_version() == published) {
      if (!found) return std::optional<VersionView>();
      return VisibleIn({std::string(), off}, Snapshot(0, published));
    }
    uint64_t version;
    const uint64_t ts = AcquireSnapshotTs(&version);
    auto v = VisibleAt(key, Snapshot(ts, version));
    ReleaseSnapshotTs(ts, version);  // the caller's epoch guard keeps the record
    return v;
  }
  // A plain read holds no registered snapshot, so GC may trim below a
  // version published after our timestamp was read (K4 uses the visible ts
  // of its own moment).  Falling off the chain then means "look again at a
  // newer timestamp"; when the visible ts did not move, the key was absent.
  // An unpublished read that returns a version newer than `at` (a value,
  // or a tombstone's absence) raises the thread's acknowledgement ts.
  uint64_t at = pub_.visible();
  for (;;) {
    bool fell_off;
    uint64_t ts;
    PMTREE_ASSIGN_OR_RETURN(auto v, WalkChain(*this, key, at, unpublished, &ts, &fell_off));
    if (ts > at) NoteThreadTs(ts);
    uint64_t now = pub_.visible();
    if (v.has_value() || !fell_off || now == at) return v;
    at = now;
  }
}

Result<std::optional<VersionView>> Store::Impl::Visible(std::string_view key, const ReadOptions& ro) {
  if (ro.snapshot != nullptr) return VisibleAt(key, *ro.snapshot);
  return VisibleNow(key, ro.unpublished);
}

// ---------------------------------------------------------------------------
// Writes

Status Store::Impl::WriteOne(std::string_view key, VersionKind kind, std::string_view value, const FieldMap* fields,
                             bool update_only, bool* found) {
  PMTREE_RETURN_IF_ERROR(Failed());
  std::lock_guard<SpinLock> lock(LockFor(key));  // K5
  uint64_t head = 0;
  std::optional<VersionView> hv;
  if (tree().Lookup(key, &head)) {
    PMTREE_ASSIGN_OR_RETURN(hv, ReadVersion(head));
  }
  const bool live = hv.has_value() && hv->kind != VersionKind::kTombstone;
  *found = live;
  if ((update_only || kind == VersionKind::kTombstone) && !live) return Status::Ok();
  if (update_only && kind == VersionKind::kFields && hv->kind != VersionKind::kFields)
    return Status::InvalidArgument("kv: UpdateFields on a key that holds a plain value");
  if (kind == VersionKind::kTombstone) {
    if (vt_ != nullptr) return RemoveNative(key, head);  // N1
    std::unique_lock<std::mutex> snaps(snap_mu_);
    // No snapshot can need the old value, and none can start meanwhile: the
    // key leaves the tree at once, without a tombstone (nothing to allocate,
    // so a delete works in a full pool).
    if (snapshots_.empty()) return RemoveKey(key, head);
  }

  uint64_t length = kind == VersionKind::kValue ? value.size() : 0;
  Result<uint64_t> off = kind == VersionKind::kValue    ? NewValueVersion(value)
                         : kind == VersionKind::kFields ? NewFieldVersion(update_only ? head : 0, *fields, &length)
                                                        : NewTombstone();
  if (!off.ok()) return off.status();
  InstallScope scope(*this);
  const uint64_t ts = NextTs();
  SealVersion(*off, kind, length, ts, ChainPrev(hv ? head : 0));
  Result<bool> r = hv ? tree().Update(key, *off) : tree().Insert(key, *off);
  if (!r.ok() || !*r) {
    // Never referenced: free it at once, sparing the blocks it shares (K8).
    std::unordered_set<uint64_t> keep;
    if (hv) {
      auto blocks = FieldBlocksOf(*hv);
      keep.insert(blocks.begin(), blocks.end());
    }
    DropVersion(*off, &keep, false);
    scope.Publish(ts);
    return r.ok() ? Status::Internal("kv: the tree disagreed with the locked lookup of a key") : r.status();
  }
  if (vt_ != nullptr) {
    if (hv) Retire(head, *off);  // N3
    scope.Publish(ts);
    return Status::Ok();
  }
  scope.Publish(ts);
  if (pub_.visible() < ts) {  // deferred: trimming below the head waits for it (K4)
    DeferCollect(ts, key);
    return Status::Ok();
  }
  const std::vector<uint64_t> head_now{*off};  // the key is still locked (K5)
  return CollectKeys({key}, Horizon(), &head_now);
}

Status Store::Impl::PutMany(const std::vector<std::string_view>& keys, size_t* applied,
                            const Store::PutCompute& compute, bool read_current) {
  // Group commit: WriteOne's steps for every key at once, under all their
  // stripe locks (K5), so the barriers that order one put's steps order
  // them all.  One timestamp for the group: its versions appear together.
  *applied = 0;
  PMTREE_RETURN_IF_ERROR(Failed());
  // One epoch guard for the group: the tree's lookups and updates inside
  // nest in it, so they skip the fence a first Enter costs (two per put).
  // It only delays reclamation of what is retired meanwhile (K4).
  auto guard = pool().epochs().Protect();
  std::vector<size_t> stripes;
  stripes.reserve(keys.size());
  for (std::string_view key : keys) stripes.push_back(StripeOf(key));
  StripeLocks locks(*this, std::move(stripes));
  struct Slot {
    uint64_t head;     // the old head, 0 = a new key
    uint64_t version;  // the new version
    uint64_t length;   // its value's bytes
  };
  std::vector<Slot> slots;
  slots.reserve(keys.size());
  // Every key's lookup at once: a design may overlap their descents.  The
  // keys are locked, so what is found stays each key's head until the
  // group installs its own.  hints[i]: where key i's head was found.
  std::vector<uint64_t> old_heads(keys.size(), 0);
  std::vector<BytesTree::Hint> hints(keys.size());
  const std::unique_ptr<bool[]> found(new bool[keys.size()]);
  tree().LookupManyForUpdate(keys, old_heads.data(), found.get(), hints.data());
  for (size_t i = 0; i < keys.size(); i++) {
    if (!found[i]) {
      old_heads[i] = 0;  // a new key
    } else {
      // Its header is read next (read_current) or when the chain is trimmed.
      pmtree::Prefetch(pool().base() + old_heads[i]);
    }
  }
  Status st;
  for (size_t i = 0; i < keys.size(); i++) {
    const uint64_t head = old_heads[i];
    // The head is the newest installed version: its writer held this key's
    // lock until it was in the tree, and this group's timestamp, taken
    // below, is later than its, so holding the group's acknowledgement for
    // that timestamp (deferred visibility) also covers what is read here.
    Store::Current current;
    if (read_current && head != 0) {
      Result<VersionView> hv = ReadVersion(head);
      if (!hv.ok()) {
        st = hv.status();
        break;
      }
      if (hv->kind == VersionKind::kValue) {
        current.kind = Store::Current::Kind::kValue;
        current.value = std::string_view(pool().base() + head + sizeof(VersionHeader), hv->length);
      } else if (hv->kind == VersionKind::kFields) {
        current.kind = Store::Current::Kind::kFields;
      }
    }
    std::string_view value;
    if (!compute(i, current, &value)) break;
    if (Status v = CheckValue(value.size(), "value"); !v.ok()) {
      st = v;
      break;
    }
    Result<uint64_t> off = NewValueVersion(value);
    if (!off.ok()) {
      st = off.status();  // a full pool: the puts before this one go ahead
      break;
    }
    slots.push_back({head, *off, value.size()});
  }
  if (slots.empty()) return st;
  InstallScope scope(*this);
  const uint64_t ts = NextTs();
  for (const Slot& sl : slots)
    SealVersion(sl.version, VersionKind::kValue, sl.length, ts, ChainPrev(sl.head), /*fence=*/false);
  // One fence for every record of the group: each is durable before any
  // tree entry names it (K1).
  pool().Fence();
  std::vector<uint64_t> versions;
  versions.reserve(slots.size());
  for (const Slot& sl : slots) versions.push_back(sl.version);
  size_t installed = 0;
  while (installed < slots.size()) {
    // A run of replaces goes to the tree at once (it may overlap their
    // flushes); it stops before any key it cannot update by its hint.
    size_t run = 0;
    while (installed + run < slots.size() && slots[installed + run].head != 0) run++;
    if (run > 0) {
      const size_t done = tree().UpdateHintedRunUnfenced(std::span(keys).subspan(installed, run),
                                                         versions.data() + installed, hints.data() + installed);
      installed += done;
      if (done > 0) continue;
    }
    // One key alone: a new key, or the replace a run stopped before.
    const Slot& sl = slots[installed];
    std::string_view key = keys[installed];
    Result<bool> r = sl.head ? tree().UpdateHintedUnfenced(key, sl.version, hints[installed]) : tree().Insert(key, sl.version);
    if (!r.ok() || !*r) {
      st = r.ok() ? Status::Internal("kv: the tree disagreed with the locked lookup of a key") : r.status();
      break;
    }
    installed++;
  }
  // One fence for every unfenced replace of the group (a design that fences
  // each update itself needs none): each tree entry is durable before the
  // group is published (acknowledged) and before any version it replaced is
  // trimmed or freed (K1, K4).  Until here a crash keeps each replaced key's
  // old head or its new one.
  if (tree().DefersUpdateFences()) pool().Fence();
  // Versions the tree never took are unreferenced (a value version shares
  // no field block): free them at once.
  for (size_t i = installed; i < slots.size(); i++) {
    std::unordered_set<uint64_t> none;
    DropVersion(slots[i].version, &none, false);
  }
  *applied = installed;
  if (vt_ != nullptr) {
    for (size_t i = 0; i < installed; i++)
      if (slots[i].head != 0) Retire(slots[i].head, slots[i].version);  // N3
    scope.Publish(ts);
    return st;
  }
  scope.Publish(ts);
  if (pub_.visible() < ts) {  // deferred (K4)
    for (size_t i = 0; i < installed; i++) DeferCollect(ts, keys[i]);
    return st;
  }
  const std::vector<std::string_view> done(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(installed));
  std::vector<uint64_t> heads;
  heads.reserve(installed);
  for (size_t i = 0; i < installed; i++) heads.push_back(slots[i].version);
  Status gc = CollectKeys(done, Horizon(), &heads);
  return st.ok() ? gc : st;
}

Status Store::Impl::RemoveKey(std::string_view key, uint64_t head) {
  std::vector<uint64_t> chain;
  for (uint64_t off = head; off != 0;) {
    PMTREE_ASSIGN_OR_RETURN(VersionView v, ReadVersion(off));
    chain.push_back(off);
    off = v.prev;
  }
  PMTREE_ASSIGN_OR_RETURN(bool removed, tree().Remove(key));
  if (!removed) return Status::Internal("kv: a locked key vanished from the tree");
  // The remove is durable when it returns; only then are the versions
  // retired (K4), through the epochs because readers may hold them.
  std::unordered_set<uint64_t> done;
  for (uint64_t off : chain) DropVersion(off, &done, true);
  std::lock_guard<std::mutex> g(gc_mu_);
  if (auto it = gc_pending_.find(key); it != gc_pending_.end()) gc_pending_.erase(it);
  return Status::Ok();
}

Status Store::Impl::CollectKeys(const std::vector<std::string_view>& keys, uint64_t horizon,
                                const std::vector<uint64_t>* heads) {
  // A key whose chain is cut: the versions below chain[keep_to] go.
  struct Cut {
    std::vector<VersionView> chain;
    size_t keep_to;
  };
  std::vector<Cut> cuts;
  std::vector<std::pair<std::string_view, bool>> pending;  // key -> still holds old versions
  Status first;
  for (size_t k = 0; k < keys.size(); k++) {
    const std::string_view key = keys[k];
    uint64_t head = heads ? (*heads)[k] : 0;
    std::vector<VersionView> chain;
    Status read;
    if (heads || tree().Lookup(key, &head)) {
      for (uint64_t off = head; off != 0;) {
        Result<VersionView> v = ReadVersion(off);
        if (!v.ok()) {
          read = v.status();
          break;
        }
        chain.push_back(*v);
        off = v->prev;
      }
    }
    if (!read.ok()) {
      if (first.ok()) first = read;
      continue;
    }
    // The newest version every snapshot can see: older ones are unneeded.
    size_t keep_to = chain.size();
    for (size_t i = 0; i < chain.size(); i++)
      if (chain[i].ts <= horizon) {
        keep_to = i;
        break;
      }
    if (keep_to < chain.size() && keep_to == 0 && chain[0].kind == VersionKind::kTombstone) {
      Status s = RemoveKey(key, head);  // deleted before every snapshot
      if (first.ok()) first = s;
      continue;
    }
    if (keep_to < chain.size() && keep_to + 1 < chain.size()) {
      auto* h = pool().At<VersionHeader>(chain[keep_to].off);
      pool().Store64(&h->prev, 0);
      // Flushed now, fenced below with the other keys' unlinks.
      pool().Flush(&h->prev, 8);
      pending.emplace_back(key, keep_to > 0);
      cuts.push_back({std::move(chain), keep_to});
    } else {
      pending.emplace_back(key, chain.size() > 1);
    }
  }
  if (!cuts.empty()) {
    // Every unlink is durable before what it unlinked is retired (K4), so a
    // crash never leaves a durable prev to freed space.
    pool().Fence();
    for (const Cut& c : cuts) {
      std::unordered_set<uint64_t> keep;
      for (size_t i = 0; i <= c.keep_to; i++)
        for (uint64_t b : FieldBlocksOf(c.chain[i])) keep.insert(b);
      for (size_t i = c.keep_to + 1; i < c.chain.size(); i++) DropVersion(c.chain[i].off, &keep, true);
    }
  }
  bool kept = false;
  {
    std::lock_guard<std::mutex> g(gc_mu_);
    for (auto [key, keeps_old] : pending) {
      kept = kept || keeps_old;
      if (keeps_old)
        gc_pending_.emplace(key);
      else if (auto it = gc_pending_.find(key); it != gc_pending_.end())
        gc_pending_.erase(it);
    }
  }
  // The oldest snapshot may have been released since `horizon` was read,
  // and its CollectPending may have copied gc_pending_ before the keys
  // above were in it: they would keep their old versions until some later
  // release.  The release erases the snapshot before it copies, so seeing
  // the horizon unmoved here (after the insert) means its copy has them.
  if (kept && Horizon() != horizon) recollect_.store(true, std::memory_order_release);
  return first;
}

void Store::Impl::CollectPending() {
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> g(gc_mu_);
    keys.assign(gc_pending_.begin(), gc_pending_.end());
  }
  for (const std::string& k : keys) {
    std::lock_guard<SpinLock> lock(LockFor(k));
    Status s = CollectKey(k, Horizon());
    if (!s.ok()) SetFailed(s);
  }
}

// ---------------------------------------------------------------------------
// Store: the public face

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

std::string_view Store::engine() const { return impl_->factory_->name; }
Pool& Store::pool() { return impl_->pool(); }

Status Store::Put(std::string_view key, std::string_view value) {
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  PMTREE_RETURN_IF_ERROR(CheckValue(value.size(), "value"));
  bool found;
  Status st = impl_->WriteOne(key, VersionKind::kValue, value, nullptr, false, &found);
  impl_->CollectPublished(kCollectPerWrite);
  return st;
}

namespace {

// A repeated key: PutMany and UpdateMany refuse it (one version per key and
// timestamp).
Status CheckDistinct(std::vector<std::string_view> keys) {
  std::sort(keys.begin(), keys.end());
  if (auto dup = std::adjacent_find(keys.begin(), keys.end()); dup != keys.end())
    return Status::InvalidArgument("kv: a group write names key '" + std::string(*dup) + "' twice");
  return Status::Ok();
}

}  // namespace

Status Store::PutMany(const std::vector<std::pair<std::string_view, std::string_view>>& puts, size_t* applied,
                      const PutAdmit& admit) {
  *applied = 0;
  std::vector<std::string_view> keys;
  keys.reserve(puts.size());
  for (const auto& [key, value] : puts) {
    PMTREE_RETURN_IF_ERROR(CheckKey(key));
    PMTREE_RETURN_IF_ERROR(CheckValue(value.size(), "value"));
    keys.push_back(key);
  }
  PMTREE_RETURN_IF_ERROR(CheckDistinct(keys));
  if (puts.empty()) return Status::Ok();
  auto compute = [&](size_t i, const Current& current, std::string_view* value) {
    if (admit) {
      std::optional<std::string_view> plain;
      if (current.kind == Current::Kind::kValue) plain = current.value;
      if (!admit(plain)) return false;
    }
    *value = puts[i].second;
    return true;
  };
  Status st = impl_->PutMany(keys, applied, compute, static_cast<bool>(admit));
  impl_->CollectPublished(kCollectPerWrite + *applied);
  return st;
}

Status Store::UpdateMany(const std::vector<std::string_view>& keys, size_t* applied, const PutCompute& compute) {
  *applied = 0;
  for (std::string_view key : keys) PMTREE_RETURN_IF_ERROR(CheckKey(key));
  PMTREE_RETURN_IF_ERROR(CheckDistinct(keys));
  if (keys.empty()) return Status::Ok();
  Status st = impl_->PutMany(keys, applied, compute, /*read_current=*/true);
  impl_->CollectPublished(kCollectPerWrite + *applied);
  return st;
}

Result<bool> Store::Get(std::string_view key, std::string* value, const ReadOptions& ro) {
  return GetView(key, [value](std::string_view bytes) { value->assign(bytes); }, ro);
}

Result<bool> Store::GetView(std::string_view key, const std::function<void(std::string_view)>& fn,
                            const ReadOptions& ro) {
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  auto guard = impl_->pool().epochs().Protect();  // K4: the viewed version stays allocated while fn runs
  PMTREE_ASSIGN_OR_RETURN(auto v, impl_->Visible(key, ro));
  if (!v) return false;
  PMTREE_ASSIGN_OR_RETURN(std::string_view bytes, impl_->ValueView(*v));
  fn(bytes);
  return true;
}

Result<bool> Store::Delete(std::string_view key) {
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  bool found;
  Status st = impl_->WriteOne(key, VersionKind::kTombstone, {}, nullptr, false, &found);
  impl_->CollectPublished(kCollectPerWrite);
  PMTREE_RETURN_IF_ERROR(st);
  return found;
}

Status Store::PutFields(std::string_view key, const FieldMap& fields) {
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  PMTREE_RETURN_IF_ERROR(CheckFields(fields));
  bool found;
  Status st = impl_->WriteOne(key, VersionKind::kFields, {}, &fields, false, &found);
  impl_->CollectPublished(kCollectPerWrite);
  return st;
}

Result<bool> Store::UpdateFields(std::string_view key, const FieldMap& fields) {
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  PMTREE_RETURN_IF_ERROR(CheckFields(fields));
  bool found;
  Status st = impl_->WriteOne(key, VersionKind::kFields, {}, &fields, true, &found);
  impl_->CollectPublished(kCollectPerWrite);
  PMTREE_RETURN_IF_ERROR(st);
  return found;
}

Result<bool> Store::GetFields(std::string_view key, const std::vector<std::string>& names, FieldMap* out,
                              const ReadOptions& ro) {
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  auto guard = impl_->pool().epochs().Protect();
  PMTREE_ASSIGN_OR_RETURN(auto v, impl_->Visible(key, ro));
  if (!v) return false;
  PMTREE_RETURN_IF_ERROR(impl_->ReadFields(*v, names, out));
  return true;
}

Result<bool> Store::GetFieldsView(std::string_view key, const std::function<void(std::span<const FieldView>)>& fn,
                                  const ReadOptions& ro) {
  PMTREE_RETURN_IF_ERROR(CheckKey(key));
  auto guard = impl_->pool().epochs().Protect();  // K4: the viewed blocks stay allocated while fn runs
  PMTREE_ASSIGN_OR_RETURN(auto v, impl_->Visible(key, ro));
  if (!v) return false;
  std::vector<FieldView> fields;
  PMTREE_RETURN_IF_ERROR(impl_->ViewFields(*v, &fields));
  fn(fields);
  return true;
}

const Snapshot* Store::GetSnapshot() {
  uint64_t version;
  const uint64_t ts = impl_->AcquireSnapshotTs(&version);
  return new Snapshot(ts, version);
}

void Store::ReleaseSnapshot(const Snapshot* snapshot) {
  if (snapshot == nullptr) return;
  impl_->ReleaseSnapshotTs(snapshot->timestamp(), snapshot->tree_version());
  delete snapshot;
}

Status Store::Write(const WriteBatch& batch) {
  Status st = impl_->CommitBatch(batch, nullptr);
  impl_->CollectPublished(kCollectPerWrite + batch.size());
  return st;
}

void Store::DeferVisibility(std::function<void(uint64_t visible)> listener) {
  impl_->defer_ = static_cast<bool>(listener);
  impl_->on_visible_ = std::move(listener);
}

uint64_t Store::visible_timestamp() const { return impl_->VisibleTs(); }

uint64_t Store::TakeThreadTimestamp() {
  if (tls_store != impl_->id_) return 0;
  return std::exchange(tls_ack_ts, 0);
}

void Store::RaiseThreadTimestamp(uint64_t ts) { impl_->NoteThreadTs(ts); }

void Store::AwaitThreadTimestamp() {
  if (tls_store != impl_->id_) return;
  const uint64_t ack = tls_ack_ts;
  while (impl_->VisibleTs() < ack) std::this_thread::yield();
}

void Store::AwaitPublished() {
  const uint64_t issued = impl_->next_ts_.load(std::memory_order_acquire);
  while (impl_->VisibleTs() < issued) std::this_thread::yield();
}

std::unique_ptr<Transaction> Store::BeginTransaction() {
  return std::unique_ptr<Transaction>(new Transaction(this, GetSnapshot()));
}

Status Store::Close() { return impl_->Close(); }
Status Store::Clear() { return impl_->Clear(); }
Status Store::Verify() { return impl_->Verify(); }
StoreStats Store::Stats() { return impl_->Stats(); }

}  // namespace pmtree::kv
