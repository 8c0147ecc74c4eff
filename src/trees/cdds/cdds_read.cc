// SPDX-License-Identifier: Apache-2.0
//
// CDDS B-Tree readers: version references (§4.3.1: reader slots and pinned
// snapshots), Lookup (Algorithm 1), ordered range scans, and the snapshot
// API.  Invariants C1-C8 are stated in cdds.cc.

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include "trees/cdds/cdds.h"
#include "trees/cdds/cdds_internal.h"
#include "trees/common/partition_point.h"

namespace pmtree {

using cdds::NodeEntry;
using cdds::NodeHeader;
using cdds::VisibleAt;

namespace {

// A reader slot being claimed, before its version is announced.
constexpr uint64_t kClaiming = ~0ull;

}  // namespace

// ---------------------------------------------------------------------------
// Version references (§4.3.1)

// Announces a reader's version in a reader slot (C8) and holds an epoch
// guard, so nodes and blobs GC retires stay readable until the reader leaves.
template <KeyPolicy KP>
class CddsTree<KP>::ReaderPin {
 public:
  // Pins the current version (version == 0) or `version`.
  ReaderPin(const CddsTree* t, uint64_t version) : t_(t), guard_(t->pool_->epochs().Protect()) {
    thread_local uint32_t hint = 0;
    for (int spins = 0;; CpuRelax(spins)) {
      for (int i = 0; i < kReaderSlots; i++) {
        auto& s = t_->readers_[(hint + i) % kReaderSlots].version;
        uint64_t idle = 0;
        if (s.load(std::memory_order_relaxed) == 0 && s.compare_exchange_strong(idle, kClaiming)) {
          slot_ = &s;
          hint = (hint + i) % kReaderSlots;
          break;
        }
      }
      if (slot_ != nullptr) break;
    }
    if (version != 0) {
      v_ = version;
      slot_->store(version, std::memory_order_seq_cst);
      return;
    }
    // C8: announce, then check that the version is still current; a writer
    // that computed its oldest version before the announcement saw this same
    // current version, and one that computes it later sees the announcement.
    for (;;) {
      v_ = t_->current_version();
      slot_->store(v_, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (t_->current_version() == v_) break;
    }
  }
  ~ReaderPin() { slot_->store(0, std::memory_order_release); }
  ReaderPin(const ReaderPin&) = delete;
  ReaderPin& operator=(const ReaderPin&) = delete;
  uint64_t version() const { return v_; }

 private:
  const CddsTree* t_;
  EpochManager::Guard guard_;
  std::atomic<uint64_t>* slot_ = nullptr;
  uint64_t v_ = 0;
};

template <KeyPolicy KP>
uint64_t CddsTree<KP>::GetSnapshot() {
  std::lock_guard lock(snap_mu_);
  // Writers read snapshots_ under snap_mu_ when they compute the oldest
  // version, so a snapshot registered here is either seen by a writer or
  // taken at the version that writer already treats as current.
  uint64_t v = current_version();
  snapshots_[v]++;
  return v;
}

template <KeyPolicy KP>
Status CddsTree<KP>::PinVersion(uint64_t version) {
  std::lock_guard lock(snap_mu_);
  if (version > current_version())
    return Status::InvalidArgument("cdds: version " + std::to_string(version) + " is newer than the current " +
                                   std::to_string(current_version()));
  // Every horizon computed so far is <= reclaim_floor_ (oldest_retained_
  // version), and every later one sees this pin: at or above the floor,
  // nothing `version` sees was reclaimed.
  if (version < reclaim_floor_)
    return Status::Busy("cdds: version " + std::to_string(version) + " may be trimmed by GC (floor " +
                        std::to_string(reclaim_floor_) + ")");
  snapshots_[version]++;
  return Status::Ok();
}

template <KeyPolicy KP>
Status CddsTree<KP>::ReleaseSnapshot(uint64_t version) {
  std::lock_guard lock(snap_mu_);
  auto it = snapshots_.find(version);
  if (it == snapshots_.end())
    return Status::InvalidArgument("cdds: version " + std::to_string(version) + " is not a pinned snapshot");
  if (--it->second == 0) snapshots_.erase(it);
  return Status::Ok();
}

template <KeyPolicy KP>
bool CddsTree<KP>::IsRetained(uint64_t version) {
  if (version == current_version()) return true;
  std::lock_guard lock(snap_mu_);
  return snapshots_.count(version) != 0;
}

template <KeyPolicy KP>
uint64_t CddsTree<KP>::oldest_retained_version() {
  uint64_t oldest = current_version();
  {
    std::lock_guard lock(snap_mu_);
    if (!snapshots_.empty()) oldest = std::min(oldest, snapshots_.begin()->first);
    // An upper bound of the horizon returned (reader slots only lower it).
    reclaim_floor_ = std::max(reclaim_floor_, oldest);
  }
  // C8: pairs with the reader's fence between announcing and re-reading.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int i = 0; i < kReaderSlots; i++) {
    uint64_t v = readers_[i].version.load(std::memory_order_seq_cst);
    // kClaiming: the reader will announce a version that is current at or
    // after this point; the recheck in ReaderPin covers it.
    if (v != 0 && v != kClaiming) oldest = std::min(oldest, v);
  }
  return oldest;
}

// ---------------------------------------------------------------------------
// Readers (Algorithm 1)

template <KeyPolicy KP>
void CddsTree<KP>::ReadNode(uint64_t off, NodeCopy* out) const {
  const NodeHeader* h = node(off);
  const NodeEntry* es = entries(off);
  // A seqlock read: a writer shifting entries in this node makes us retry;
  // we never make it wait.
  locks_.For(off).ReadStable([&] {
    uint64_t n = PoolImpl::Load64(&h->num_entries);
    out->n = static_cast<uint32_t>(std::min<uint64_t>(n, cap_));
    out->level = h->level;
    for (uint32_t i = 0; i < out->n; i++) out->e[i] = cdds::LoadEntry(es + i);
    return 0;
  });
}

namespace {

// First entry of c whose key is >= key (binary search, lines 11-17).
template <KeyPolicy KP, class C, class A>
uint32_t LowerBoundIn(const KP& keys, const C& c, A key) {
  return PartitionPoint(0, c.n, [&](uint32_t i) { return keys.Compare(c.e[i].key, key) < 0; });
}

// The child an inner node copy routes `key` to at version v: the first entry
// at or after the lower bound visible at v (lines 18-22), else the last
// visible entry (which takes every larger key).  -1 when none is visible.
template <class C>
int RouteIn(const C& c, uint32_t lb, uint64_t v) {
  for (uint32_t i = lb; i < c.n; i++)
    if (VisibleAt(c.e[i], v)) return static_cast<int>(i);
  for (uint32_t i = c.n; i-- > 0;)
    if (VisibleAt(c.e[i], v)) return static_cast<int>(i);
  return -1;
}

}  // namespace

template <KeyPolicy KP>
bool CddsTree<KP>::LookupAtVersion(uint64_t v, Arg key, uint64_t* value) const {
  thread_local NodeCopy copy;
  NodeCopy* c = &copy;
  uint64_t off = root();
  for (uint32_t depth = 0; depth < cdds::kMaxHeight; depth++) {
    ReadNode(off, c);
    uint32_t lb = LowerBoundIn(keys_, *c, key);
    if (c->level == 0) {
      for (uint32_t i = lb; i < c->n && keys_.Compare(c->e[i].key, key) == 0; i++) {
        if (VisibleAt(c->e[i], v)) {
          if (value) *value = c->e[i].value;
          return true;
        }
      }
      return false;
    }
    int i = RouteIn(*c, lb, v);
    if (i < 0) return false;
    off = c->e[i].value;
  }
  return false;
}

template <KeyPolicy KP>
bool CddsTree<KP>::ScanNode(uint64_t off, uint64_t v, Arg start, const Arg* end, std::span<Entry> out, size_t* n,
                              uint32_t depth) const {
  if (depth >= cdds::kMaxHeight) return false;
  auto c = std::make_unique<NodeCopy>();
  ReadNode(off, c.get());
  if (c->level == 0) {
    for (uint32_t i = LowerBoundIn(keys_, *c, start); i < c->n; i++) {
      if (!VisibleAt(c->e[i], v)) continue;
      if (end != nullptr && keys_.Compare(c->e[i].key, *end) > 0) return false;
      out[(*n)++] = Entry(keys_.Load(c->e[i].key), c->e[i].value);
      if (*n == out.size()) return false;
    }
    return true;
  }
  int last = RouteIn(*c, c->n, v);
  for (uint32_t i = LowerBoundIn(keys_, *c, start); i < c->n; i++) {
    if (!VisibleAt(c->e[i], v)) continue;
    if (!ScanNode(c->e[i].value, v, start, end, out, n, depth + 1)) return false;
    if (static_cast<int>(i) == last) return true;
    // The next child holds keys above this separator.
    if (end != nullptr && keys_.Compare(c->e[i].key, *end) >= 0) return false;
  }
  // Every entry at or above the lower bound was invisible: the last visible
  // entry takes the keys above all separators.
  if (last >= 0 && static_cast<uint32_t>(last) < LowerBoundIn(keys_, *c, start))
    return ScanNode(c->e[last].value, v, start, end, out, n, depth + 1);
  return true;
}

template <KeyPolicy KP>
size_t CddsTree<KP>::ScanAtVersion(uint64_t v, Arg start, const Arg* end, std::span<Entry> out) const {
  size_t n = 0;
  if (out.empty()) return 0;
  ScanNode(root(), v, start, end, out, &n, 0);
  return n;
}

template <KeyPolicy KP>
bool CddsTree<KP>::Lookup(Arg key, uint64_t* value) {
  if (closed_ || !KP::CheckArg(key).ok()) return false;
  ReaderPin pin(this, 0);
  return LookupAtVersion(pin.version(), key, value);
}

template <KeyPolicy KP>
size_t CddsTree<KP>::Scan(Arg start, const Arg* end, std::span<Entry> out) {
  if (closed_) return 0;
  ReaderPin pin(this, 0);
  return ScanAtVersion(pin.version(), start, end, out);
}

template <KeyPolicy KP>
Result<bool> CddsTree<KP>::LookupAt(uint64_t version, Arg key, uint64_t* value) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  ReaderPin pin(this, version);
  if (!IsRetained(version))
    return Status::InvalidArgument("cdds: version " + std::to_string(version) +
                                   " is neither current nor a pinned snapshot");
  return LookupAtVersion(version, key, value);
}

template <KeyPolicy KP>
Result<size_t> CddsTree<KP>::ScanAt(uint64_t version, Arg start, const Arg* end, std::span<Entry> out) {
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  ReaderPin pin(this, version);
  if (!IsRetained(version))
    return Status::InvalidArgument("cdds: version " + std::to_string(version) +
                                   " is neither current nor a pinned snapshot");
  return ScanAtVersion(version, start, end, out);
}


#define PMTREE_CDDS_INSTANTIATE(K)                                                                       \
  template uint64_t CddsTree<K>::GetSnapshot();                                                          \
  template Status CddsTree<K>::PinVersion(uint64_t);                                                     \
  template Status CddsTree<K>::ReleaseSnapshot(uint64_t);                                                \
  template bool CddsTree<K>::IsRetained(uint64_t);                                                       \
  template uint64_t CddsTree<K>::oldest_retained_version();                                              \
  template void CddsTree<K>::ReadNode(uint64_t, NodeCopy*) const;                                        \
  template bool CddsTree<K>::LookupAtVersion(uint64_t, Arg, uint64_t*) const;                            \
  template bool CddsTree<K>::ScanNode(uint64_t, uint64_t, Arg, const Arg*, std::span<Entry>, size_t*,     \
                                      uint32_t) const;                                                   \
  template size_t CddsTree<K>::ScanAtVersion(uint64_t, Arg, const Arg*, std::span<Entry>) const;         \
  template bool CddsTree<K>::Lookup(Arg, uint64_t*);                                                     \
  template size_t CddsTree<K>::Scan(Arg, const Arg*, std::span<Entry>);                                  \
  template Result<bool> CddsTree<K>::LookupAt(uint64_t, Arg, uint64_t*);                                 \
  template Result<size_t> CddsTree<K>::ScanAt(uint64_t, Arg, const Arg*, std::span<Entry>);

PMTREE_CDDS_INSTANTIATE(U64Keys)
PMTREE_CDDS_INSTANTIATE(BytesKeys)
#undef PMTREE_CDDS_INSTANTIATE

}  // namespace pmtree
