// SPDX-License-Identifier: Apache-2.0
//
// CDDS B-Tree operations: lifecycle, insert/update (Algorithms 2-3) and
// delete (Algorithm 4).  Readers (Algorithm 1) and snapshots are in
// cdds_read.cc; garbage collection, recovery, Verify and Stats in cdds_gc.cc.  See cdds.h for the contract
// and docs/trees/cdds.md for the protocol.
//
// Invariants (cited at the barriers below as C1-C8):
//   C1  current_version (cv) is stored only after every write of the
//       operation that produced it is persistent (the fence in Commit).
//   C2  An operation at v = cv + 1 never changes what a version <= cv sees:
//       it adds entries with start v (invisible at <= cv), sets end versions
//       to v (still visible at <= cv) or copies live entries into new nodes
//       linked by entries with start v.  Dead entries are overwritten only
//       when they ended at or before the oldest retained version.
//   C3  Entries of a node are ordered by (key, start); every node at any
//       moment holds, besides that order, at most the transient debris of
//       one interrupted shift: exact duplicates and entries whose start is
//       kInvalidVersion or > cv.  Recovery (Alg. 6) removes exactly that.
//   C4  A copied entry is written start = kInvalidVersion first, start last;
//       the slot it overwrites holds a value already durable elsewhere (its
//       copy, persisted before when on another cache line; the same line
//       reaches memory in store order).
//   C5  num_entries grows only after the new last slot is persistent, and is
//       persistent before any slot below it is overwritten.
//   C6  Exactly one non-moved entry owns each node (but the root) and each key
//       blob; moved entries (end has kMovedBit) share them with their copy.
//   C7  The root pointer changes only to a persistent node: a new root whose
//       entries make every version visible (its old-root entry), or, in GC,
//       the only entry's child when that entry is visible at every retained
//       version.
//   C8  Readers announce their version before reading it (reader slots), so
//       a writer's oldest-retained version is never newer than a reader's.
//   C9  BulkLoad replaces only a root leaf with no entry at all (the tree is
//       empty at every version), by a subtree whose entries all start at v:
//       current_version = v is stored before the root pointer, in the same
//       line, so a crash shows the empty tree or the whole load.
// The node magic's invariants N1-N4 (which nodes carry it, when it is set
// and cleared) are stated in cdds_gc.cc.

#include "trees/cdds/cdds.h"
#include "trees/common/bulk_input.h"
#include "trees/common/partition_point.h"
#include "trees/common/upcast.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>
#include <utility>

#include "trees/cdds/cdds_internal.h"

namespace pmtree {

using cdds::CddsMeta;
using cdds::EndVersion;
using cdds::Hex;
using cdds::kInvalidVersion;
using cdds::kMovedBit;
using cdds::kNodeTag;
using cdds::Live;
using cdds::NodeEntry;
using cdds::NodeHeader;
using cdds::VisibleAt;

namespace {

bool ValidNodeSize(uint32_t n) { return n == 512 || n == 1024 || n == 2048 || n == 4096; }

Status ParseOptions(const TreeOptions& o, uint32_t* gc_every) {
  for (const auto& [k, v] : o.extra) {
    if (k != "gc_every")
      return Status::InvalidArgument("cdds: unknown option '" + k + "'; valid: gc_every=<writer ops per GC step>");
    char* endp = nullptr;
    unsigned long n = std::strtoul(v.c_str(), &endp, 10);
    if (v.empty() || *endp != '\0' || n > 1000000)
      return Status::InvalidArgument("cdds: gc_every must be an integer 0..1000000, got '" + v + "'");
    *gc_every = static_cast<uint32_t>(n);
  }
  if (o.node_size != 0 && !ValidNodeSize(o.node_size))
    return Status::InvalidArgument("cdds: node_size " + std::to_string(o.node_size) +
                                   " is invalid; valid sizes: 512, 1024, 2048, 4096 (0 = 512)");
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------
// Lifecycle

template <KeyPolicy KP>
CddsTree<KP>::CddsTree(PoolImpl* pool, uint64_t meta_off, uint32_t gc_every)
    : pool_(pool), keys_(pool), meta_off_(meta_off), gc_every_(gc_every), readers_(new ReaderSlot[kReaderSlots]) {
  node_size_ = meta()->node_size;
  node_magic_ = NodeMagic(pool);
  bounds_relaxed_ = (meta()->flags & cdds::kFlagBoundsRelaxed) != 0;
  cap_ = cdds::NodeCapacity(node_size_);
  min_live_ = cdds::MinLive(cap_);
}

template <KeyPolicy KP>
CddsTree<KP>::~CddsTree() = default;

template <KeyPolicy KP>
uint32_t CddsTree<KP>::capabilities() const {
  return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder;
}

template <KeyPolicy KP>
Result<std::unique_ptr<CddsTree<KP>>> CddsTree<KP>::Create(PoolImpl* pool, const TreeOptions& options) {
  if (pool == nullptr) return Status::InvalidArgument("cdds: needs a pool");
  uint32_t gc_every = 8;
  PMTREE_RETURN_IF_ERROR(ParseOptions(options, &gc_every));
  if (pool->root(0) != 0) return Status::Busy("cdds: pool already holds a tree (root slot 0 is set)");
  const uint32_t node_size = options.node_size == 0 ? cdds::kDefaultNodeSize : options.node_size;
  Allocator& a = pool->allocator();
  PMTREE_ASSIGN_OR_RETURN(uint64_t meta_off, a.Allocate(sizeof(CddsMeta)));
  auto root_r = a.Allocate(node_size);
  if (!root_r.ok()) {
    a.Free(meta_off, sizeof(CddsMeta));
    return root_r.status();
  }
  NodeHeader leaf{};
  leaf.tag = kNodeTag;
  // The root leaf is reachable as soon as the tree exists (N2).
  leaf.magic = NodeMagic(pool);
  pool->Write(pool->At<char>(*root_r), &leaf, sizeof(leaf));
  // Start the write-back of the empty root leaf; the Persist of the meta
  // block below completes it before root slot 0 names the tree.
  pool->Flush(pool->At<char>(*root_r), sizeof(leaf));
  CddsMeta m{};
  m.magic = cdds::kMetaMagic;
  m.version = cdds::kLayoutVersion;
  m.node_size = node_size;
  m.key_kind = static_cast<uint32_t>(KP::kKind);
  m.root = *root_r;
  m.current_version = 1;  // 0 marks an idle reader slot
  // N1: the root leaf ends below the limit (persisted with the meta block).
  m.node_limit = (*root_r + node_size + cdds::kNodeLimitStep - 1) / cdds::kNodeLimitStep * cdds::kNodeLimitStep;
  pool->Write(pool->At<char>(meta_off), &m, sizeof(m));
  // Persist the root leaf and the meta block before root slot 0 names the
  // meta block, so a crash never exposes a half-made tree.
  pool->Persist(pool->At<char>(meta_off), sizeof(m));
  pool->SetRoot(0, meta_off);
  return std::unique_ptr<CddsTree>(new CddsTree(pool, meta_off, gc_every));
}

template <KeyPolicy KP>
Result<std::unique_ptr<CddsTree<KP>>> CddsTree<KP>::Recover(PoolImpl* pool, const TreeOptions& options) {
  if (pool == nullptr) return Status::InvalidArgument("cdds: needs a pool");
  uint32_t gc_every = 8;
  PMTREE_RETURN_IF_ERROR(ParseOptions(TreeOptions{0, options.key_kind, 1, options.extra}, &gc_every));
  const uint64_t meta_off = pool->root(0);
  if (meta_off == 0) return Status::NotFound("cdds: pool root slot 0 is empty (no tree was created)");
  if (meta_off % kAllocGranule != 0 || !pool->InHeap(meta_off, sizeof(CddsMeta)))
    return Status::Corruption("cdds: meta offset " + Hex(meta_off) + " outside the heap");
  const auto* m = pool->At<CddsMeta>(meta_off);
  if (m->magic != cdds::kMetaMagic) return Status::Corruption("cdds meta at offset " + Hex(meta_off) + ": bad magic");
  if (m->version == cdds::kLayoutVersionBeforeNodeMagic)
    return Status::Incompatible("cdds meta at offset " + Hex(meta_off) + ": layout version " +
                                std::to_string(m->version) + " (before the node magic); this build reads " +
                                std::to_string(cdds::kLayoutVersion) + " and cannot open it");
  if (m->version != cdds::kLayoutVersion)
    return Status::Incompatible("cdds meta at offset " + Hex(meta_off) + ": layout version " +
                                std::to_string(m->version) + ", this build reads " +
                                std::to_string(cdds::kLayoutVersion));
  if (m->key_kind != static_cast<uint32_t>(KP::kKind))
    return Status::Incompatible("cdds meta at offset " + Hex(meta_off) + ": pool holds " +
                                (m->key_kind == 0 ? "u64" : "byte-string") + " keys");
  if (!ValidNodeSize(m->node_size) || m->current_version == 0 || m->current_version >= cdds::kMovedBit)
    return Status::Corruption("cdds meta at offset " + Hex(meta_off) + ": node_size " +
                              std::to_string(m->node_size) + " or current_version invalid");
  std::unique_ptr<CddsTree> t(new CddsTree(pool, meta_off, gc_every));
  // After a clean shutdown no operation was in flight: instant restart (the
  // pool restored the allocator).  After a crash: forward GC (§4.3.2), then
  // the allocator is rebuilt from what the root reaches.
  if (!pool->clean_shutdown()) {
    PMTREE_RETURN_IF_ERROR(t->RecoverNodes());
    PMTREE_RETURN_IF_ERROR(t->RebuildAllocator());
  }
  return t;
}

template <KeyPolicy KP>
Status CddsTree<KP>::Close() {
  std::lock_guard lock(write_mu_);
  if (closed_) return Status::Ok();
  closed_ = true;
  // Every operation committed and persisted before it returned; snapshots
  // are DRAM state and end here.
  return pool_->Close();
}

template <KeyPolicy KP>
Status CddsTree<KP>::CheckUsable() const {
  if (closed_) return Status::Busy("cdds: tree is closed");
  return Status::Ok();
}

template <KeyPolicy KP>
cdds::CddsCounts CddsTree<KP>::counts() const {
  std::lock_guard lock(write_mu_);
  return counts_;
}

template <KeyPolicy KP>
uint64_t CddsTree<KP>::current_version() const {
  return PoolImpl::Load64(&meta()->current_version);
}

// ---------------------------------------------------------------------------
// Writer helpers

template <KeyPolicy KP>
void CddsTree<KP>::BeginOp(Op* op) {
  op->cv = current_version();
  op->v = op->cv + 1;
  op->before = ReclaimBefore();
  op->old_root = root();
}

template <KeyPolicy KP>
uint64_t CddsTree<KP>::ReclaimBefore() {
  return oldest_retained_version();
}

template <KeyPolicy KP>
Status CddsTree<KP>::Commit(Op* op) {
  // C1: complete every flush of the operation before the commit store.
  pool_->Fence();
  pool_->Store64(&meta()->current_version, op->v);
  // Persist the commit before acknowledging the operation (durability on
  // return).
  pool_->Persist(&meta()->current_version, sizeof(uint64_t));
  counts_.version_bumps++;
  // N2: the new nodes are reachable now that the commit is durable.
  MarkNewNodes(*op);
  FinishOp(op);
  return Status::Ok();
}

// The end of a point write: a failed change `s` is rolled back (Abort), a
// done one committed and followed by a step of garbage collection.
template <KeyPolicy KP>
Status CddsTree<KP>::CommitOrAbort(Op* op, Status s) {
  if (!s.ok()) {
    Abort(op);
    return s;
  }
  PMTREE_RETURN_IF_ERROR(Commit(op));
  MaybeGc();
  return Status::Ok();
}

template <KeyPolicy KP>
void CddsTree<KP>::FinishOp(Op* op) {
  FreeOwned(op->released);
  op->released.clear();
}

template <KeyPolicy KP>
void CddsTree<KP>::Abort(Op* op) {
  // In-process forward GC of this operation (Alg. 6 on the nodes it wrote).
  if (op->root_changed) {
    pool_->Store64(&meta()->root, op->old_root);
    // Persist the restored root before the nodes it replaced are retired.
    pool_->Persist(&meta()->root, sizeof(uint64_t));
  }
  for (uint64_t off : op->touched) (void)RecoverNode(off, op->cv);
  for (uint64_t off : op->new_nodes) pool_->allocator().Retire(off, node_size_);
  for (uint64_t slot : op->new_slots) keys_.Release(slot);
  counts_.aborted_operations++;
  FinishOp(op);
}

template <KeyPolicy KP>
void CddsTree<KP>::Touch(Op* op, uint64_t off) {
  if (std::find(op->touched.begin(), op->touched.end(), off) == op->touched.end()) op->touched.push_back(off);
}

template <KeyPolicy KP>
void CddsTree<KP>::FindPath(Arg key, Path* path) const {
  path->clear();
  uint64_t off = root();
  for (uint32_t depth = 0; depth < cdds::kMaxHeight; depth++) {
    const NodeHeader* h = node(off);
    const NodeEntry* es = entries(off);
    if (h->level == 0) {
      path->push_back(PathStep{off, 0});
      return;
    }
    uint32_t n = count(off);
    const uint32_t lo = PartitionPoint(0, n, [&](uint32_t i) { return keys_.Compare(es[i].key, key) < 0; });
    int idx = -1;
    for (uint32_t i = lo; i < n && idx < 0; i++)
      if (Live(es[i])) idx = static_cast<int>(i);
    for (uint32_t i = n; idx < 0 && i-- > 0;)
      if (Live(es[i])) idx = static_cast<int>(i);
    assert(idx >= 0 && "an inner node always has a live entry");
    path->push_back(PathStep{off, static_cast<uint32_t>(idx)});
    off = es[idx].value;
  }
}

template <KeyPolicy KP>
int CddsTree<KP>::FindLeafEntry(uint64_t leaf, Arg key) const {
  const NodeEntry* es = entries(leaf);
  uint32_t n = count(leaf);
  const uint32_t lo = PartitionPoint(0, n, [&](uint32_t i) { return keys_.Compare(es[i].key, key) < 0; });
  for (uint32_t i = lo; i < n && keys_.Compare(es[i].key, key) == 0; i++)
    if (Live(es[i])) return static_cast<int>(i);
  return -1;
}

template <KeyPolicy KP>
uint32_t CddsTree<KP>::InsertPos(uint64_t off, uint64_t key_slot) const {
  // After every entry with a smaller or equal key: a new entry has the
  // largest start version of its key (C3).
  const NodeEntry* es = entries(off);
  return PartitionPoint(0, count(off), [&](uint32_t i) { return keys_.CompareSlots(es[i].key, key_slot) <= 0; });
}

template <KeyPolicy KP>
bool CddsTree<KP>::Reclaimable(const NodeEntry& e, uint64_t before) const {
  return e.end != 0 && e.start != kInvalidVersion && EndVersion(e.end) <= before;
}

template <KeyPolicy KP>
uint32_t CddsTree<KP>::LiveCount(uint64_t off) const {
  uint32_t l = 0;
  const NodeEntry* es = entries(off);
  for (uint32_t i = 0, n = count(off); i < n; i++) l += Live(es[i]);
  return l;
}

template <KeyPolicy KP>
std::vector<NodeEntry> CddsTree<KP>::LiveEntries(uint64_t off, int skip) const {
  std::vector<NodeEntry> out;
  const NodeEntry* es = entries(off);
  for (uint32_t i = 0, n = count(off); i < n; i++)
    if (Live(es[i]) && static_cast<int>(i) != skip) out.push_back(es[i]);
  return out;
}

template <KeyPolicy KP>
void CddsTree<KP>::SetEnd(Op* op, uint64_t off, uint32_t idx, uint64_t end) {
  Touch(op, off);
  NodeEntry* e = entries(off) + idx;
  VersionLock& lk = locks_.For(off);
  lk.lock();
  // One atomic 8-byte store (Alg. 4 line 5); older versions still see the
  // entry (C2).
  pool_->Store64(&e->end, end);
  // Start the write-back; the commit fence completes it (C1).
  pool_->Flush(&e->end, sizeof(uint64_t));
  lk.unlock();
}

template <KeyPolicy KP>
void CddsTree<KP>::CopyEntry(NodeEntry* dst, const NodeEntry& src) {
  // C4: a torn copy reads as start = kInvalidVersion, which recovery drops.
  pool_->Store64(&dst->start, kInvalidVersion);
  pool_->Store64(&dst->key, src.key);
  pool_->Store64(&dst->value, src.value);
  pool_->Store64(&dst->end, src.end);
  pool_->Store64(&dst->start, src.start);
}

template <KeyPolicy KP>
void CddsTree<KP>::PersistEntryIfOtherLine(const NodeEntry* written, const NodeEntry* next) {
  if (cdds::LineOf(written) == cdds::LineOf(next)) return;  // one line reaches memory in store order (C4)
  // §4.4.2: the entry is durable in its new slot before the slot it came
  // from (on another line) is overwritten, so a crash never loses it.
  pool_->Persist(written, sizeof(NodeEntry));
}

// Places `e` in node `off`, keeping (key, start) order: in a free slot
// (Alg. 2 lines 14-17, with the shift of §4.4.1), or over the lowest dead
// entry no retained version sees (can_reuse_version, lines 6-10 and 21-28).
// False when neither exists.
template <KeyPolicy KP>
bool CddsTree<KP>::InsertEntry(Op* op, uint64_t off, const NodeEntry& e) {
  NodeHeader* h = node(off);
  NodeEntry* es = entries(off);
  const uint32_t n = count(off);
  const uint32_t pos = InsertPos(off, e.key);
  int reuse = -1;
  if (n == cap_) {
    for (uint32_t i = 0; i < n && reuse < 0; i++)
      if (Reclaimable(es[i], op->before)) reuse = static_cast<int>(i);
    if (reuse < 0) return false;
  }
  Touch(op, off);
  VersionLock& lk = locks_.For(off);
  lk.lock();
  uint32_t target = pos;
  if (reuse < 0) {
    if (pos < n) {
      CopyEntry(&es[n], es[n - 1]);
      // C5: the new last slot is durable before num_entries covers it ...
      pool_->Persist(&es[n], sizeof(NodeEntry));
      pool_->Store64(&h->num_entries, n + 1);
      // ... and num_entries is durable before a slot below it is overwritten.
      pool_->Persist(&h->num_entries, sizeof(uint64_t));
      for (uint32_t i = n - 1; i > pos; i--) {
        if (i != n - 1) PersistEntryIfOtherLine(&es[i + 1], &es[i]);
        CopyEntry(&es[i], es[i - 1]);
      }
      if (pos + 1 < n) PersistEntryIfOtherLine(&es[pos + 1], &es[pos]);
    }
    counts_.free_slot_inserts++;
  } else {
    const uint32_t r = static_cast<uint32_t>(reuse);
    ReleaseOwned(op, es[r], h->level);
    // N3: a dead inner owner entry's subtree loses its magic durably before
    // the shift's first store to the entry can drop the last reference.
    if (h->level > 0 && !cdds::Moved(es[r].end) && ClearSubtreeMagic(es[r].value)) pool_->Fence();
    if (pos <= r) {
      for (uint32_t i = r; i > pos; i--) {
        if (i != r) PersistEntryIfOtherLine(&es[i + 1], &es[i]);
        CopyEntry(&es[i], es[i - 1]);
      }
      if (pos < r) PersistEntryIfOtherLine(&es[pos + 1], &es[pos]);
    } else {
      for (uint32_t i = r; i + 1 < pos; i++) {
        if (i != r) PersistEntryIfOtherLine(&es[i - 1], &es[i]);
        CopyEntry(&es[i], es[i + 1]);
      }
      target = pos - 1;
      if (target > r) PersistEntryIfOtherLine(&es[target - 1], &es[target]);
    }
    counts_.dead_entry_reuses++;
  }
  // The new entry: start first, so a torn write reads as start = v > cv
  // (dropped by recovery) or as the slot's old, duplicated content.
  NodeEntry* d = &es[target];
  pool_->Store64(&d->start, e.start);
  pool_->Store64(&d->key, e.key);
  pool_->Store64(&d->value, e.value);
  pool_->Store64(&d->end, e.end);
  if (reuse < 0 && pos == n) {
    // Append: the entry is durable before num_entries covers it (C5).
    pool_->Persist(d, sizeof(NodeEntry));
    pool_->Store64(&h->num_entries, n + 1);
    // Start the write-back of num_entries; the commit fence completes it.
    pool_->Flush(&h->num_entries, sizeof(uint64_t));
  } else {
    // Every line the shift crossed is already persistent; start the
    // write-back of the last one, which holds the new entry.  The commit
    // fence completes it (C1).
    pool_->Flush(d, sizeof(NodeEntry));
  }
  lk.unlock();
  return true;
}

template <KeyPolicy KP>
void CddsTree<KP>::ReleaseOwned(Op* op, const NodeEntry& e, uint32_t level) {
  if (!cdds::Moved(e.end)) op->released.emplace_back(e, level);  // C6: the owner frees
}

template <KeyPolicy KP>
Result<uint64_t> CddsTree<KP>::NewNode(Op* op, uint16_t level, std::span<const NodeEntry> es) {
  PMTREE_ASSIGN_OR_RETURN(uint64_t off, pool_->allocator().Allocate(node_size_));
  op->new_nodes.push_back(off);
  NoteNode(off);
  NodeHeader h{};
  h.num_entries = es.size();
  h.level = level;
  h.tag = kNodeTag;
  pool_->Write(pool_->At<char>(off), &h, sizeof(h));
  pool_->Write(entries(off), es.data(), es.size() * sizeof(NodeEntry));
  // Start the write-back of the new node; the commit fence (or the fence
  // before a root-pointer store) completes it before anything durable can
  // reach it (only entries with start v link it).
  pool_->Flush(pool_->At<char>(off), sizeof(h) + es.size() * sizeof(NodeEntry));
  return off;
}

template <KeyPolicy KP>
Result<uint64_t> CddsTree<KP>::CopyKey(Op* op, uint64_t slot) {
  auto owned = keys_.Load(slot);
  PMTREE_ASSIGN_OR_RETURN(uint64_t s, keys_.MakeSlot(owned));
  if constexpr (!KP::kInline) op->new_slots.push_back(s);
  return s;
}

// ---------------------------------------------------------------------------
// Structure changes

// Ends entries `ends` (index, end value) of the node at path[depth] and adds
// `adds` (start v), in place when free or reclaimable slots suffice, else by
// split_insert (Alg. 3): copy-on-write into new nodes, then the same change
// one level up.
template <KeyPolicy KP>
Status CddsTree<KP>::ApplyChange(Op* op, const Path& path, size_t depth,
                                   std::span<const std::pair<uint32_t, uint64_t>> ends, std::vector<NodeEntry> adds,
                                   bool* replaced) {
  const uint64_t off = path[depth].node;
  const NodeEntry* es = entries(off);
  uint32_t room = cap_ - count(off);
  for (uint32_t i = 0, n = count(off); i < n; i++) room += Reclaimable(es[i], op->before);
  for (const auto& [idx, end] : ends) SetEnd(op, off, idx, end);
  if (adds.size() <= room) {
    *replaced = false;
    for (const NodeEntry& e : adds) {
      bool ok = InsertEntry(op, off, e);
      assert(ok && "room was counted");
      (void)ok;
    }
    return Status::Ok();
  }
  *replaced = true;
  std::vector<NodeEntry> live = LiveEntries(off);
  live.insert(live.end(), adds.begin(), adds.end());
  std::sort(live.begin(), live.end(),
            [&](const NodeEntry& a, const NodeEntry& b) { return keys_.CompareSlots(a.key, b.key) < 0; });
  const uint64_t olds[1] = {off};
  const uint32_t old_idx[1] = {depth == 0 ? 0 : path[depth - 1].idx};
  bool parent_replaced = false;
  return ReplaceNodes(op, path, depth, olds, old_idx, std::move(live), &parent_replaced);
}

// Copies `live` (sorted; the live entries of `olds`, adjacent nodes at
// path[depth]'s level, plus new ones) into one new node, or two when more
// than 4 m_l + 1 (Alg. 3 lines 4-20; Alg. 4's merge and copy), marks every
// live entry of `olds` moved at v (lines 21-22), and links the new nodes in
// the parent (or a new root).
template <KeyPolicy KP>
Status CddsTree<KP>::ReplaceNodes(Op* op, const Path& path, size_t depth, std::span<const uint64_t> olds,
                                    std::span<const uint32_t> old_idx, std::vector<NodeEntry> live,
                                    bool* parent_replaced) {
  const uint16_t level = node(olds[0])->level;
  for (NodeEntry& e : live) {
    e.start = op->v;
    e.end = 0;
  }
  const size_t parts = live.size() > 4 * min_live_ + 1 ? 2 : 1;
  const size_t cut = parts == 2 ? live.size() / 2 : live.size();
  std::span<const NodeEntry> all(live);
  uint64_t nn[2] = {0, 0};
  PMTREE_ASSIGN_OR_RETURN(nn[0], NewNode(op, level, all.subspan(0, cut)));
  if (parts == 2) {
    PMTREE_ASSIGN_OR_RETURN(nn[1], NewNode(op, level, all.subspan(cut)));
  }
  // Lines 21-22: the old nodes only get end versions; the copies own their
  // keys and children from v on (C6).
  for (uint64_t old : olds) {
    const NodeEntry* es = entries(old);
    for (uint32_t i = 0, n = count(old); i < n; i++)
      if (Live(es[i])) SetEnd(op, old, i, op->v | kMovedBit);
  }
  if (olds.size() == 2) {
    (parts == 1 ? counts_.merges : counts_.copies)++;
  } else {
    (level == 0 ? counts_.leaf_splits : counts_.inner_splits)++;
  }
  // Separators: the first part's largest key; the last part keeps the
  // separator of the rightmost old node (or, at the root, its largest key).
  std::vector<NodeEntry> seps;
  if (parts == 2) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t k, CopyKey(op, live[cut - 1].key));
    seps.push_back(NodeEntry{k, nn[0], op->v, 0});
  }
  // The last visible entry of a node also takes larger keys, so a part may
  // hold keys above the old separator: then its largest key is the new one.
  // (A merge of nodes left empty for lack of space may have no entries.)
  uint64_t last_key = depth > 0 ? entries(path[depth - 1].node)[old_idx.back()].key : live.back().key;
  if (!live.empty() && keys_.CompareSlots(live.back().key, last_key) > 0) last_key = live.back().key;
  PMTREE_ASSIGN_OR_RETURN(uint64_t lk, CopyKey(op, last_key));
  seps.push_back(NodeEntry{lk, nn[parts - 1], op->v, 0});
  if (depth == 0) {
    // Root split (§4.4.2): a new root links the new nodes and, for the
    // versions before v, the old root.
    PMTREE_ASSIGN_OR_RETURN(uint64_t ok, CopyKey(op, last_key));
    seps.insert(seps.end() - 1, NodeEntry{ok, olds[0], 0, op->v});
    PMTREE_ASSIGN_OR_RETURN(uint64_t r, NewNode(op, static_cast<uint16_t>(level + 1), seps));
    // C7: the new root and its children are durable before the root
    // pointer names them.
    pool_->Fence();
    op->root_changed = true;
    // No flush of its own: the root pointer shares the meta line with
    // current_version, whose persist in Commit writes both back.  A crash
    // before the commit finds the old-root entry live again and the new
    // entries gone (Alg. 6), and recovery promotes the old root.
    pool_->Store64(&meta()->root, r);
    counts_.root_splits++;
    *parent_replaced = true;
    return Status::Ok();
  }
  std::vector<std::pair<uint32_t, uint64_t>> ends;
  for (uint32_t idx : old_idx) ends.emplace_back(idx, op->v);
  return ApplyChange(op, path, depth - 1, ends, std::move(seps), parent_replaced);
}

// Alg. 4 lines 6-12: a non-root node left with m_l live entries or fewer
// takes a sibling's live entries: one new node (merge_with_sibling) or two
// (copy_from_sibling), then the parent is checked in turn.
template <KeyPolicy KP>
Status CddsTree<KP>::Rebalance(Op* op, const Path& path, size_t depth) {
  for (; depth > 0; depth--) {
    const uint64_t off = path[depth].node;
    if (LiveCount(off) > min_live_) return Status::Ok();
    const uint64_t parent = path[depth - 1].node;
    const uint32_t pidx = path[depth - 1].idx;
    const NodeEntry* pes = entries(parent);
    const uint32_t pn = count(parent);
    int sib = -1;
    for (uint32_t i = pidx + 1; i < pn && sib < 0; i++)
      if (Live(pes[i])) sib = static_cast<int>(i);
    for (uint32_t i = pidx; sib < 0 && i-- > 0;)
      if (Live(pes[i])) sib = static_cast<int>(i);
    if (sib < 0) return Status::Ok();  // an only child: the effective root
    uint32_t a = pidx, b = static_cast<uint32_t>(sib);
    if (b < a) std::swap(a, b);
    const uint64_t olds[2] = {pes[a].value, pes[b].value};
    const uint32_t idx[2] = {a, b};
    std::vector<NodeEntry> live = LiveEntries(olds[0]);
    std::vector<NodeEntry> right = LiveEntries(olds[1]);
    live.insert(live.end(), right.begin(), right.end());
    bool parent_replaced = false;
    PMTREE_RETURN_IF_ERROR(ReplaceNodes(op, path, depth, olds, idx, std::move(live), &parent_replaced));
    if (parent_replaced) return Status::Ok();
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Operations

template <KeyPolicy KP>
Result<bool> CddsTree<KP>::Mutate(Arg key, uint64_t value, bool allow_insert, bool allow_update) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  std::lock_guard lock(write_mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  Op op;
  BeginOp(&op);
  Path path;
  FindPath(key, &path);
  const uint64_t leaf = path.back().node;
  const int idx = FindLeafEntry(leaf, key);
  const bool existed = idx >= 0;
  if ((existed && !allow_update) || (!existed && !allow_insert)) return existed;
  std::vector<std::pair<uint32_t, uint64_t>> ends;
  NodeEntry e{0, value, op.v, 0};
  if (existed) {
    // Update as a versioned replace: the old entry ends at v and hands its
    // key blob to the new one (C6).
    e.key = entries(leaf)[idx].key;
    ends.emplace_back(static_cast<uint32_t>(idx), op.v | kMovedBit);
  } else {
    auto slot = keys_.MakeSlot(key);
    if (!slot.ok()) return slot.status();
    if constexpr (!KP::kInline) op.new_slots.push_back(*slot);
    e.key = *slot;
  }
  bool replaced = false;
  PMTREE_RETURN_IF_ERROR(CommitOrAbort(&op, ApplyChange(&op, path, path.size() - 1, ends, {e}, &replaced)));
  return existed;
}

template <KeyPolicy KP>
Result<bool> CddsTree<KP>::Insert(Arg key, uint64_t value) {
  PMTREE_ASSIGN_OR_RETURN(bool existed, Mutate(key, value, true, false));
  return !existed;
}

template <KeyPolicy KP>
Result<bool> CddsTree<KP>::Update(Arg key, uint64_t value) {
  return Mutate(key, value, false, true);
}

template <KeyPolicy KP>
Result<bool> CddsTree<KP>::Upsert(Arg key, uint64_t value) {
  PMTREE_ASSIGN_OR_RETURN(bool existed, Mutate(key, value, true, true));
  return !existed;
}

template <KeyPolicy KP>
Status CddsTree<KP>::RemoveKey(Arg key, bool* removed, bool rebalance) {
  Op op;
  BeginOp(&op);
  Path path;
  FindPath(key, &path);
  const uint64_t leaf = path.back().node;
  const int idx = FindLeafEntry(leaf, key);
  *removed = idx >= 0;
  if (!*removed) return Status::Ok();
  // Alg. 4 line 5: the entry keeps its key blob until GC reclaims it.
  SetEnd(&op, leaf, static_cast<uint32_t>(idx), op.v);
  return CommitOrAbort(&op, rebalance ? Rebalance(&op, path, path.size() - 1) : Status::Ok());
}

template <KeyPolicy KP>
Result<bool> CddsTree<KP>::Remove(Arg key) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  std::lock_guard lock(write_mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  bool removed = false;
  Status s = RemoveKey(key, &removed, true);
  if (s.IsOutOfSpace()) {
    // No room for the merge's new nodes: delete without rebalancing (the
    // node stays below m_l live entries until a later delete merges it).
    counts_.underflow_skips++;
    if (!bounds_relaxed_) {
      bounds_relaxed_ = true;
      CddsMeta* m = meta();
      const uint64_t word = m->key_kind | static_cast<uint64_t>(m->flags | cdds::kFlagBoundsRelaxed) << 32;
      pool_->Store64(&m->key_kind, word);
      // Persist the flag before the delete that breaks the §4.4.6 bound can
      // commit, so Verify after any later restart knows the bound is relaxed.
      pool_->Persist(&m->key_kind, sizeof(uint64_t));
    }
    s = RemoveKey(key, &removed, false);
  }
  PMTREE_RETURN_IF_ERROR(s);
  return removed;
}

// Bulk load (not in the thesis, which loads by inserts): leaves and inner
// nodes are written bottom-up as new nodes whose entries start at v, each
// holding an even share of at most fill * capacity entries (and at least
// 2 (m_l + 1), so every non-root node keeps more than m_l live entries);
// an inner entry's key is its child's largest key, as split_insert makes
// them.  Commit by C9.
template <KeyPolicy KP>
Status CddsTree<KP>::BulkLoad(std::span<const InputEntry> sorted, double fill) {
  PMTREE_RETURN_IF_ERROR(CheckBulkLoadInput(sorted, fill, &KP::CheckArg));
  std::lock_guard lock(write_mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  const uint64_t old_root = root();
  if (node(old_root)->level != 0 || count(old_root) != 0)
    return Status::InvalidArgument("bulk load: tree not empty");
  if (sorted.empty()) return Status::Ok();

  Op op;
  BeginOp(&op);
  const size_t per = std::clamp<size_t>(static_cast<size_t>(fill * cap_), std::min<size_t>(2 * (min_live_ + 1), cap_),
                                        cap_);
  // Writes one level of nodes over `items` (n of them) in groups of at most
  // `per`; make(i) is item i's entry.  Returns each node and its largest key.
  std::vector<NodeEntry> es;
  es.reserve(cap_);
  auto build_level = [&](uint16_t level, size_t n, auto&& make, std::vector<uint64_t>* nodes,
                         std::vector<uint64_t>* last_keys) -> Status {
    const size_t groups = (n + per - 1) / per;
    for (size_t g = 0, i = 0; g < groups; g++) {
      const size_t take = n / groups + (g < n % groups ? 1 : 0);
      es.clear();
      for (size_t k = 0; k < take; k++, i++) {
        PMTREE_ASSIGN_OR_RETURN(NodeEntry e, make(i));
        es.push_back(e);
      }
      PMTREE_ASSIGN_OR_RETURN(uint64_t off, NewNode(&op, level, es));
      nodes->push_back(off);
      last_keys->push_back(es.back().key);
    }
    return Status::Ok();
  };
  std::vector<uint64_t> nodes, last_keys;
  Status s = build_level(
      0, sorted.size(),
      [&](size_t i) -> Result<NodeEntry> {
        PMTREE_ASSIGN_OR_RETURN(uint64_t slot, keys_.MakeSlotUnfenced(sorted[i].first));  // the C1/C9 fence completes it
        if constexpr (!KP::kInline) op.new_slots.push_back(slot);
        return NodeEntry{slot, sorted[i].second, op.v, 0};
      },
      &nodes, &last_keys);
  for (uint16_t level = 1; s.ok() && nodes.size() > 1; level++) {
    if (level >= cdds::kMaxHeight) {
      s = Status::OutOfSpace("cdds: tree height limit reached");
      break;
    }
    std::vector<uint64_t> up_nodes, up_last;
    s = build_level(
        level, nodes.size(),
        [&](size_t i) -> Result<NodeEntry> {
          PMTREE_ASSIGN_OR_RETURN(uint64_t k, CopyKey(&op, last_keys[i]));
          return NodeEntry{k, nodes[i], op.v, 0};
        },
        &up_nodes, &up_last);
    nodes.swap(up_nodes);
    last_keys.swap(up_last);
  }
  if (!s.ok()) {
    Abort(&op);
    return s;
  }
  // N3: the old root leaf loses its magic (its flush completes under the
  // fence below) before the root pointer stops naming it.
  (void)ClearNodeMagic(old_root);
  // C1/C9: every new node and key blob is durable before the commit stores
  // below can reach memory (else the new root could name a torn subtree).
  pool_->Fence();
  pool_->Store64(&meta()->current_version, op.v);
  pool_->Store64(&meta()->root, nodes[0]);
  // One persist writes back both stores of the meta line, version first
  // (C9): a crash before it completes shows the empty old root, whose
  // unreachable new nodes the recovery's allocator rebuild frees.
  pool_->Persist(&meta()->root, sizeof(uint64_t));
  counts_.version_bumps++;
  // N2: the loaded nodes are reachable now that the commit is durable.
  MarkNewNodes(op);
  pool_->allocator().Retire(old_root, node_size_);
  FinishOp(&op);
  return Status::Ok();
}

template class CddsTree<U64Keys>;
template class CddsTree<BytesKeys>;

// ---------------------------------------------------------------------------
// Registry entry points

namespace cdds {

PMTREE_REGISTRY_ENTRY_POINTS(CddsTree);

}  // namespace cdds
}  // namespace pmtree
