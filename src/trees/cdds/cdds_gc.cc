// SPDX-License-Identifier: Apache-2.0
//
// CDDS B-Tree garbage collection (§4.3.1, §4.4.4, Algorithm 5), recovery by
// forward garbage collection (§4.3.2, §4.4.5, Algorithm 6), the allocator
// rebuild, Verify() and Stats().  Invariants C1-C8 are stated in cdds.cc.
//
// GC runs as incremental steps inside writers (every gc_every-th writer
// operation, after its commit, under the writer mutex) rather than on a
// background thread: a step visits one root-to-leaf path, so its cost is
// bounded by height x node size, no writer ever waits for a collector, and
// readers are never blocked (they validate through the seqlocks and are
// protected by epochs).  A step compacts each node on the path (the logical
// GC of Alg. 5: entries that ended at or before the oldest retained version
// are removed, survivors shifted left) and frees what those entries owned
// (the physical GC: the key blob, and for an inner entry the dead subtree,
// C6), then moves a key cursor to the next leaf.

#include <algorithm>
#include <cassert>
#include <string>
#include <unordered_set>
#include <utility>

#include "pm/observe.h"
#include "trees/cdds/cdds.h"
#include "trees/cdds/cdds_internal.h"

namespace pmtree {

using cdds::CddsMeta;
using cdds::EndVersion;
using cdds::Hex;
using cdds::kInvalidVersion;
using cdds::kNodeTag;
using cdds::Live;
using cdds::Moved;
using cdds::NodeEntry;
using cdds::NodeHeader;

template <KeyPolicy KP>
struct CddsTree<KP>::WalkStats {
  uint64_t nodes = 0, leaf_nodes = 0, inner_nodes = 0, garbage_nodes = 0;
  uint64_t live_entries = 0;  // leaf entries live at the current version
  uint64_t dead_entries = 0;  // ended entries still stored (all levels)
  uint64_t bytes = 0;         // meta + nodes + owned key blobs
  uint32_t height = 0;
};

// ---------------------------------------------------------------------------
// The node magic: detecting a subtree lost to damage after a crash
//
// After a crash the allocator is rebuilt from what recovery reaches, so a
// subtree cut off by damage (a zeroed child offset, an entry whose start
// version was damaged above cv and which forward GC therefore drops) would
// silently become free space.  Every node that is reachable carries the
// pool's node magic in NodeHeader::magic, and free space carrying it is
// refused.  The invariant is "a node durable with the magic is reachable
// from the root through owner entries (C6; live, dead or ended after cv) at
// every crash instant, after recovery's forward GC", kept by:
//
//   N1  CddsMeta::node_limit is persisted above a node before the node is
//       written (NoteNode in NewNode; Create), so the scan (N4) covers
//       every node that may carry the magic.
//   N2  A node gets the magic only once the commit that links it is
//       durable (MarkNewNodes after Commit's persist; BulkLoad after its
//       commit): before, the entries naming it have start v > cv, which
//       recovery drops (Alg. 6), freeing the node.  A reachable node without
//       the magic is valid (a crash between the commit and the magic).
//   N3  A node's magic is cleared, and the clear persisted, before any
//       store that can remove the last durable reference to it: GC
//       compaction reclaiming a dead owner entry clears the whole subtree
//       that entry owns (CompactNode, the subtree FreeSubtree frees); an
//       insert reusing a dead inner owner entry the same (InsertEntry, before
//       the shift overwrites it); a root promotion the old root (GC and
//       recovery, before the root pointer store); a bulk load the old root
//       leaf (under its commit fence).  Recovery's forward GC drops only
//       entries with start > cv (naming nodes of the uncommitted operation,
//       which have no magic by N2, or copies in progress whose source entry
//       still names the child: C4), exact duplicates, and the stale tail of
//       an interrupted compaction (entries whose subtrees were cleared before
//       the compaction began).  Abort frees only the operation's new nodes
//       (no magic by N2).
//   N4  After the allocator rebuild of a crash recovery, a free 64 B step
//       below node_limit whose magic word holds the node magic is a node no
//       root path reaches: Corruption.  Under a key-value store the scan is
//       deferred until the store has reported its records.

template <KeyPolicy KP>
uint64_t CddsTree<KP>::NodeMagic(const PoolImpl* pool) {
  const uint64_t m = pool->id() ^ 0x45444f4e53444443ull;  // "CDDSNODE"
  return m != 0 ? m : 1;
}

template <KeyPolicy KP>
void CddsTree<KP>::NoteNode(uint64_t off) {
  CddsMeta* m = meta();
  if (off + node_size_ <= PoolImpl::Load64(&m->node_limit)) return;
  const uint64_t step = cdds::kNodeLimitStep;
  pool_->Store64(&m->node_limit, (off + node_size_ + step - 1) / step * step);
  // N1: the raised limit is durable before the node can be durable with the
  // magic, so the recovery scan covers it.
  pool_->Persist(&m->node_limit, sizeof(uint64_t));
}

template <KeyPolicy KP>
void CddsTree<KP>::SetNodeMagic(uint64_t off) {
  pool_->Store64(&node(off)->magic, node_magic_);
  // Start the write-back; the caller's fence completes it.  A crash before
  // leaves a reachable node without the magic, which is valid (N2).
  pool_->Flush(&node(off)->magic, sizeof(uint64_t));
}

// Returns whether a store was made (the caller then fences).
template <KeyPolicy KP>
bool CddsTree<KP>::ClearNodeMagic(uint64_t off) {
  if (node(off)->magic == 0) return false;  // the writer reads its own stores
  pool_->Store64(&node(off)->magic, 0);
  // Start the clear's write-back: under the caller's fence it is durable
  // before the store that unlinks the node, so no crash leaves the node
  // unreachable with the magic (a false "node unreachable", N3).
  pool_->Flush(&node(off)->magic, sizeof(uint64_t));
  return true;
}

// Clears the magic of `off` and of every node it owns (C6): exactly what
// FreeSubtree frees.
template <KeyPolicy KP>
bool CddsTree<KP>::ClearSubtreeMagic(uint64_t off) {
  bool stored = ClearNodeMagic(off);
  const NodeEntry* es = entries(off);
  if (node(off)->level > 0)
    for (uint32_t i = 0, n = count(off); i < n; i++)
      if (!Moved(es[i].end)) stored |= ClearSubtreeMagic(es[i].value);
  return stored;
}

template <KeyPolicy KP>
void CddsTree<KP>::MarkNewNodes(const Op& op) {
  if (op.new_nodes.empty()) return;
  for (uint64_t off : op.new_nodes) SetNodeMagic(off);
  // Complete the magic's write-back before the operation returns (the
  // commit is durable, so the nodes are reachable: N2).
  pool_->Fence();
}

template <KeyPolicy KP>
Status CddsTree<KP>::ScanForLostNodes() const {
  const uint64_t stored = PoolImpl::Load64(&meta()->node_limit);
  const uint64_t limit = stored != 0 ? std::min<uint64_t>(stored, pool_->size()) : pool_->size();
  for (const auto& [begin, size] : pool_->allocator().FreeExtents()) {
    const uint64_t end = std::min(begin + size, limit);
    for (uint64_t off = begin; off + node_size_ <= end; off += kAllocGranule)
      if (PoolImpl::Load64Matches(&node(off)->magic, ~uint64_t{0}, node_magic_))  // an observed word (pm/observe.h)
        return Status::Corruption("cdds: node at offset " + Hex(off) +
                                  " unreachable (it carries this pool's node magic but no root path reaches it: a "
                                  "cut subtree?) (N4)");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Node rewriting (shared by GC compaction and recovery)

// Writes `keep` (the entries to retain, in order; keep[j] came from slot
// from[j] >= j) into slots 0.. of `off` and sets num_entries.  Moves go left
// only, each with the copy protocol of C4; the line holding the last moved
// slot is persisted before a slot on the next line is overwritten, so the
// entry a slot held is always durable elsewhere first.  A crash leaves C3's
// debris (duplicates, invalid starts), which recovery removes again.
template <KeyPolicy KP>
void CddsTree<KP>::RewriteEntries(uint64_t off, const std::vector<NodeEntry>& keep,
                                    const std::vector<uint32_t>& from, bool every_end) {
  NodeEntry* es = entries(off);
  const NodeEntry* dirty = nullptr;
  for (uint32_t j = 0; j < keep.size(); j++) {
    const bool move = from[j] != j;
    if (!move && !every_end && es[j].end == keep[j].end) continue;
    if (dirty != nullptr && cdds::LineOf(dirty) != cdds::LineOf(&es[j])) {
      // The moved entries of the previous line are durable before this
      // line's slots (whose entries moved there) are overwritten (C4).
      pool_->Persist(dirty, sizeof(NodeEntry));
    }
    if (move)
      CopyEntry(&es[j], keep[j]);
    else
      pool_->Store64(&es[j].end, keep[j].end);  // Alg. 6 line 10: one atomic store
    dirty = &es[j];
  }
  if (dirty != nullptr) {
    // The rewritten entries are durable before num_entries shrinks over the
    // stale tail (which still holds duplicates recovery recognises).
    pool_->Persist(dirty, sizeof(NodeEntry));
  }
  if (keep.size() != count(off)) {
    pool_->Store64(&node(off)->num_entries, keep.size());
    // Persist the new count, so the compaction is complete before anything
    // it removed is freed.
    pool_->Persist(&node(off)->num_entries, sizeof(uint64_t));
  }
}

// Algorithm 6 on one node: drops entries created after cv (and copies in
// progress, start = kInvalidVersion) and revives entries ended after cv.  An
// interrupted shift or compaction (C3) leaves the node as a sorted prefix of
// its new content followed by the rest of its old content; keeping only
// entries strictly above the last kept (key, start) drops the duplicates and
// the stale entries there (§4.4.5).  Such debris always shows as an exact
// duplicate or a start > cv, so clean nodes -- including dead ones whose
// moved entries may name freed key blobs (C6) -- are never compared by key.
//
// Each end word is read as an observed word (pm/observe.h), so the crash
// explorer learns only what Alg. 6 does with it: 0, "set after cv" (to be
// reverted), or its exact value; and once one end of the node is to be
// reverted, 0 and "set after cv" are one class, because the node is then
// rewritten with every end stored (both become 0).  A copy-on-write leaves
// its old node's ends set after cv on up to eight lines; read raw, every
// combination of their pending stores was a different run (docs/trees/
// cdds.md, "Observed ends").  The counter therefore counts nodes, which the
// classes tell exactly.
namespace {
// Versions below this fit a class (pm/observe.h classes are 32-bit); above
// it the ends are read raw.
constexpr uint64_t kObservedEndVersions = uint64_t{1} << 30;

uint32_t RecoveryEndClass(uint64_t end, uint64_t cv, uint64_t reverting) {
  if (end == 0) return 0;
  if (EndVersion(end) > cv) return reverting != 0 ? 0 : 1;
  return 2 + static_cast<uint32_t>(EndVersion(end) << 1 | (Moved(end) ? 1 : 0));
}

// The end Alg. 6 keeps for the word at `end` (0 for one set after cv);
// *revert: it was set after cv (told only while !reverting).
uint64_t RecoveredEnd(const uint64_t* end, uint64_t cv, bool reverting, bool* revert) {
  *revert = false;
  if (cv >= kObservedEndVersions) {
    const uint64_t e = *end;
    *revert = e != 0 && EndVersion(e) > cv;
    return *revert ? 0 : e;
  }
  const uint32_t c = ObserveWord(end, &RecoveryEndClass, cv, reverting ? 1 : 0);
  if (c < 2) {
    *revert = c == 1;
    return 0;
  }
  return uint64_t{(c - 2) >> 1} | ((c - 2) & 1 ? cdds::kMovedBit : 0);
}
}  // namespace

template <KeyPolicy KP>
Status CddsTree<KP>::RecoverNode(uint64_t off, uint64_t cv) {
  const NodeEntry* es = entries(off);
  const uint32_t n = count(off);
  bool debris = false;
  for (uint32_t i = 0; i < n && !debris; i++) {
    debris = es[i].start > cv;
    for (uint32_t j = 0; j < i && !debris; j++) debris = es[j].key == es[i].key && es[j].start == es[i].start;
  }
  std::vector<NodeEntry> keep;
  std::vector<uint32_t> from;
  bool change = false;
  bool reverting = false;
  for (uint32_t i = 0; i < n; i++) {
    NodeEntry e;
    e.start = es[i].start;
    e.key = es[i].key;
    e.value = es[i].value;
    if (e.start > cv) {
      counts_.recovery_entries_discarded++;
      change = true;
      continue;
    }
    // A committed entry's key blob was persisted before the entry (keys.h);
    // one that fails its check is damage, reported before any compare reads
    // through it.
    PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(e.key).Annotate("cdds node at offset " + Hex(off)));
    if (debris && !keep.empty()) {
      const int c = keys_.CompareSlots(keep.back().key, e.key);
      if (c > 0 || (c == 0 && keep.back().start >= e.start)) {
        counts_.recovery_duplicates_removed++;
        change = true;
        continue;
      }
    }
    bool revert;
    e.end = RecoveredEnd(&es[i].end, cv, reverting, &revert);
    if (revert) {
      if (!reverting) counts_.recovery_nodes_reverted++;  // once per node (the raw path tells every end)
      reverting = true;
      change = true;
    }
    keep.push_back(e);
    from.push_back(i);
  }
  if (!change) return Status::Ok();
  VersionLock& lk = locks_.For(off);
  lk.lock();
  RewriteEntries(off, keep, from, reverting);
  lk.unlock();
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Garbage collection

template <KeyPolicy KP>
void CddsTree<KP>::CompactNode(uint64_t off, uint64_t before, Released* released) {
  const NodeEntry* es = entries(off);
  const uint32_t n = count(off);
  const uint32_t level = node(off)->level;
  std::vector<NodeEntry> keep;
  std::vector<uint32_t> from;
  for (uint32_t i = 0; i < n; i++) {
    if (Reclaimable(es[i], before)) {
      if (!Moved(es[i].end)) released->emplace_back(es[i], level);  // C6: the owner frees
      continue;
    }
    keep.push_back(es[i]);
    from.push_back(i);
  }
  if (keep.size() == n) return;
  counts_.gc_entries_reclaimed += n - keep.size();
  bool cleared = false;
  if (level > 0)
    for (uint32_t i = 0; i < n; i++)
      if (Reclaimable(es[i], before) && !Moved(es[i].end)) cleared |= ClearSubtreeMagic(es[i].value);
  // N3: the dead subtrees lose their magic durably before the compaction's
  // first store can drop the entries that own them.
  if (cleared) pool_->Fence();
  VersionLock& lk = locks_.For(off);
  lk.lock();
  RewriteEntries(off, keep, from);
  lk.unlock();
}

template <KeyPolicy KP>
void CddsTree<KP>::FreeSubtree(uint64_t off) {
  // A node whose owner entry was reclaimed: dead since that entry ended, its
  // live entries having moved to copies (C6).  Frees what it owns.
  const NodeEntry* es = entries(off);
  const uint32_t level = node(off)->level;
  assert(node(off)->magic == 0 && "N3: a freed node's magic was cleared before its owner entry went");
  for (uint32_t i = 0, n = count(off); i < n; i++) {
    if (Moved(es[i].end)) continue;
    keys_.Release(es[i].key);
    if (level > 0) FreeSubtree(es[i].value);
  }
  pool_->allocator().Retire(off, node_size_);
  counts_.gc_nodes_freed++;
}

template <KeyPolicy KP>
void CddsTree<KP>::FreeOwned(Released& released) {
  // Retire (epochs): a reader that entered before the reclamation may still
  // read these blocks.
  for (const auto& [e, level] : released) {
    keys_.Release(e.key);
    if (level > 0) FreeSubtree(e.value);
  }
  released.clear();
}

// §4.4.4: a root left with one entry, live (so visible at every retained
// version), hands the root over to that entry's child (C7).
template <KeyPolicy KP>
void CddsTree<KP>::TryPromoteRoot(Released* released, uint64_t before) {
  for (;;) {
    const uint64_t r = root();
    if (node(r)->level == 0) return;
    CompactNode(r, before, released);
    const NodeEntry& e = entries(r)[0];
    if (count(r) != 1 || !Live(e)) return;
    // N3: the old root loses its magic durably before the root pointer
    // stops naming it.
    if (ClearNodeMagic(r)) pool_->Fence();
    pool_->Store64(&meta()->root, e.value);
    // Persist the new root pointer before the old root is retired.
    pool_->Persist(&meta()->root, sizeof(uint64_t));
    keys_.Release(e.key);
    pool_->allocator().Retire(r, node_size_);
    counts_.root_promotions++;
  }
}

template <KeyPolicy KP>
void CddsTree<KP>::MaybeGc() {
  if (gc_every_ == 0 || ++ops_since_gc_ < gc_every_) return;
  ops_since_gc_ = 0;
  GcStep();
}

// One step of the collector: the path to the leaf after the cursor.
// Returns true when the cursor wrapped (a pass is complete).
template <KeyPolicy KP>
bool CddsTree<KP>::GcStep() {
  const uint64_t before = ReclaimBefore();
  counts_.gc_steps++;
  Released released;
  TryPromoteRoot(&released, before);
  std::optional<typename KP::Owned> next;
  uint64_t off = root();
  for (uint32_t depth = 0; depth < cdds::kMaxHeight; depth++) {
    CompactNode(off, before, &released);
    if (node(off)->level == 0) break;
    const NodeEntry* es = entries(off);
    int idx = -1, last = -1;
    for (uint32_t i = 0, n = count(off); i < n; i++) {
      if (!Live(es[i])) continue;
      last = static_cast<int>(i);
      if (idx < 0 && (!gc_cursor_ || keys_.Compare(es[i].key, *gc_cursor_) > 0)) idx = static_cast<int>(i);
    }
    if (idx < 0) idx = last;
    if (idx < 0) break;
    if (idx != last) next = keys_.Load(es[idx].key);  // the deepest bound is the tightest
    off = es[idx].value;
  }
  gc_cursor_ = std::move(next);
  FreeOwned(released);
  pool_->epochs().Reclaim();
  if (!gc_cursor_) counts_.gc_passes++;
  return !gc_cursor_;
}

template <KeyPolicy KP>
Status CddsTree<KP>::CollectGarbage() {
  std::lock_guard lock(write_mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  gc_cursor_.reset();
  while (!GcStep()) {
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Recovery (§4.3.2, §4.4.5)

// Forward GC from the root over owner entries (C6): every node an owner
// reaches gets Alg. 6; then a root left with a single live entry (the undone
// root split) is promoted.  Writes only what Alg. 6 changes, so running it
// again (after a crash during recovery) finds less or nothing to do.
template <KeyPolicy KP>
Status CddsTree<KP>::RecoverNodes() {
  const uint64_t cv = current_version();
  std::vector<std::pair<uint64_t, int>> stack{{root(), -1}};
  std::unordered_set<uint64_t> seen;
  while (!stack.empty()) {
    const auto [off, level] = stack.back();
    stack.pop_back();
    if (off % kAllocGranule != 0 || !pool_->InHeap(off, node_size_))
      return Status::Corruption("cdds: node offset " + Hex(off) + " outside the heap");
    const NodeHeader* h = node(off);
    if (h->tag != kNodeTag || (level >= 0 && h->level != level) || h->level >= cdds::kMaxHeight ||
        h->num_entries > cap_)
      return Status::Corruption("cdds node at offset " + Hex(off) + ": bad tag, level or num_entries");
    if (!seen.insert(off).second)
      return Status::Corruption("cdds node at offset " + Hex(off) + ": owned by two entries (C6)");
    PMTREE_RETURN_IF_ERROR(RecoverNode(off, cv));
    if (h->level == 0) continue;
    const NodeEntry* es = entries(off);
    for (uint32_t i = 0, n = count(off); i < n; i++)
      if (!Moved(es[i].end)) stack.emplace_back(es[i].value, h->level - 1);
  }
  for (;;) {
    const uint64_t r = root();
    const NodeEntry& e = entries(r)[0];
    if (node(r)->level == 0 || count(r) != 1 || !Live(e)) break;
    // N3: the old root loses its magic durably before the root pointer
    // stops naming it (a crash in between finds it reachable without it).
    if (ClearNodeMagic(r)) pool_->Fence();
    pool_->Store64(&meta()->root, e.value);
    // Persist the promotion; the old root is unreachable and the allocator
    // rebuild below leaves it free.
    pool_->Persist(&meta()->root, sizeof(uint64_t));
    counts_.root_promotions++;
  }
  return Status::Ok();
}

template <KeyPolicy KP>
Status CddsTree<KP>::RebuildAllocator() {
  Allocator& a = pool_->allocator();
  a.BeginRebuild();
  WalkStats ws;
  Status s = Walk(&ws, true, false);
  a.EndRebuild();
  PMTREE_RETURN_IF_ERROR(s);
  // N4.  While a key-value store holds the rebuild, free space is final only
  // once the store has reported its records: the store runs the scan then.
  // Registered last, once this recovery can no longer fail.
  if (a.rebuild_end_pending()) {
    a.DeferRebuildCheck([this] { return ScanForLostNodes(); });
    return Status::Ok();
  }
  return ScanForLostNodes();
}

// ---------------------------------------------------------------------------
// The walk behind Verify, Stats and the allocator rebuild

template <KeyPolicy KP>
Status CddsTree<KP>::Walk(WalkStats* ws, bool rebuild, bool verify) {
  struct Item {
    uint64_t off;
    int level;          // expected level, -1 for the root
    bool retained;      // reached through entries some retained version sees
    bool live;          // reached through entries live at cv
    bool exempt;        // every ancestor has exactly one live entry (or root)
    const NodeEntry* lo;  // live-path key bounds (lo exclusive, hi inclusive)
    const NodeEntry* hi;
  };
  const uint64_t cv = current_version();
  const uint64_t oldest = oldest_retained_version();
  Allocator& a = pool_->allocator();
  ws->bytes = sizeof(cdds::CddsMeta);
  if (rebuild) PMTREE_RETURN_IF_ERROR(a.MarkUsed(meta_off_, sizeof(cdds::CddsMeta)));
  std::unordered_set<uint64_t> seen;
  std::vector<Item> stack{{root(), -1, true, true, true, nullptr, nullptr}};
  auto fail = [](uint64_t off, const std::string& what) {
    return Status::Corruption("cdds node at offset " + Hex(off) + ": " + what);
  };
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    if (it.off % kAllocGranule != 0 || !pool_->InHeap(it.off, node_size_)) return fail(it.off, "outside the heap");
    const NodeHeader* h = node(it.off);
    if (h->tag != kNodeTag || (it.level >= 0 && h->level != it.level) || h->level >= cdds::kMaxHeight ||
        h->num_entries > cap_)
      return fail(it.off, "bad tag, level or num_entries");
    if (!seen.insert(it.off).second) return fail(it.off, "owned by two entries (C6)");
    if (it.level < 0) ws->height = h->level + 1u;
    if (rebuild) PMTREE_RETURN_IF_ERROR(a.MarkUsed(it.off, node_size_));
    ws->nodes++;
    ws->bytes += node_size_;
    (h->level == 0 ? ws->leaf_nodes : ws->inner_nodes)++;
    if (!it.retained) ws->garbage_nodes++;
    const NodeEntry* es = entries(it.off);
    const uint32_t n = count(it.off);
    uint32_t live = 0;
    const NodeEntry* prev_live = it.lo;
    int last_live = -1;
    for (uint32_t i = 0; i < n; i++)
      if (Live(es[i])) last_live = static_cast<int>(i);
    bool prev_readable = false;  // es[i - 1].key may be read (checked)
    for (uint32_t i = 0; i < n; i++) {
      const NodeEntry& e = es[i];
      if (verify) {
        // Check a key slot before any comparison reads through it: an owned
        // key must be whole (C6); a moved entry's key is its new owner's, so
        // one that fails the check is only left out of the order checks.
        if (!Moved(e.end)) PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(e.key));
        const bool readable = !Moved(e.end) || keys_.CheckSlot(e.key).ok();
        const bool compare_prev = readable && prev_readable;
        prev_readable = readable;
        if (e.start == kInvalidVersion || e.start > cv) return fail(it.off, "entry " + std::to_string(i) + " starts after cv (C1)");
        if (e.end != 0 && (EndVersion(e.end) < e.start || EndVersion(e.end) > cv))
          return fail(it.off, "entry " + std::to_string(i) + " has end outside [start, cv]");
        if (it.retained && i > 0 && compare_prev) {
          int c = keys_.CompareSlots(es[i - 1].key, e.key);
          if (c > 0 || (c == 0 && es[i - 1].start >= e.start))
            return fail(it.off, "entries " + std::to_string(i - 1) + ", " + std::to_string(i) +
                                    " out of (key, start) order (C3)");
          if (c == 0 && h->level == 0 && (es[i - 1].end == 0 || EndVersion(es[i - 1].end) > e.start))
            return fail(it.off, "key visible twice at one version (entries " + std::to_string(i - 1) + ", " +
                                    std::to_string(i) + ")");
        }
        if (it.live && Live(e)) {
          if (prev_live != nullptr && keys_.CompareSlots(e.key, prev_live->key) <= 0)
            return fail(it.off, "live entry " + std::to_string(i) + " not above the separator on its left");
          if (it.hi != nullptr && static_cast<int>(i) != last_live && h->level > 0 &&
              keys_.CompareSlots(e.key, it.hi->key) > 0)
            return fail(it.off, "separator " + std::to_string(i) + " above the parent's separator");
          if (it.hi != nullptr && h->level == 0 && keys_.CompareSlots(e.key, it.hi->key) > 0)
            return fail(it.off, "live key of entry " + std::to_string(i) + " above the parent's separator");
        }
      }
      if (Live(e)) live++;
      if (e.end != 0) ws->dead_entries++;
      if (!Moved(e.end)) {
        // The owner accounts for the key blob (C6).
        ws->bytes += keys_.SlotBytes(e.key);
        if (rebuild) PMTREE_RETURN_IF_ERROR(keys_.MarkUsed(e.key));
      }
      if (h->level > 0 && !Moved(e.end)) {
        const bool child_retained = it.retained && (e.end == 0 || EndVersion(e.end) > oldest);
        const bool child_live = it.live && Live(e);
        const bool last = static_cast<int>(i) == last_live;
        stack.push_back(Item{e.value, h->level - 1, child_retained, child_live,
                             child_live && it.exempt && live == 1 && last,
                             child_live ? prev_live : nullptr, child_live ? (last ? it.hi : &e) : nullptr});
      }
      if (Live(e)) prev_live = &e;
    }
    if (it.live && h->level == 0) ws->live_entries += live;
    if (verify && it.live) {
      if (h->level > 0 && live == 0) return fail(it.off, "inner node on the current version has no live entry");
      if (!it.exempt && !bounds_relaxed_ && live <= min_live_)
        return fail(it.off, std::to_string(live) + " live entries, at most m_l = " + std::to_string(min_live_) +
                                " (§4.4.6 bound)");
    }
  }
  return Status::Ok();
}

template <KeyPolicy KP>
Status CddsTree<KP>::Verify() {
  std::lock_guard lock(write_mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  // No operation runs: retired blocks can be freed now, so bytes in use are
  // exactly the reachable ones.
  pool_->epochs().DrainAll();
  WalkStats ws;
  PMTREE_RETURN_IF_ERROR(Walk(&ws, false, true));
  const uint64_t in_use = pool_->allocator().bytes_in_use();
  if (ws.bytes != in_use)
    return Status::Corruption("cdds: " + std::to_string(ws.bytes) + " bytes reachable, allocator has " +
                              std::to_string(in_use) + " in use (leak or double use)");
  // N3 in process: no freed node kept its magic.
  return ScanForLostNodes();
}

template <KeyPolicy KP>
TreeStats CddsTree<KP>::Stats() {
  std::lock_guard lock(write_mu_);
  TreeStats s;
  if (!CheckUsable().ok()) return s;
  pool_->epochs().DrainAll();
  WalkStats ws;
  (void)Walk(&ws, false, false);
  s.height = ws.height;
  s.entries = ws.live_entries;
  s.leaf_nodes = ws.leaf_nodes;
  s.inner_nodes = ws.inner_nodes;
  s.leaf_fill = ws.leaf_nodes == 0 ? 0 : static_cast<double>(ws.live_entries) / (ws.leaf_nodes * cap_);
  s.pm_bytes = ws.bytes;
  s.dram_bytes = sizeof(*this) + kReaderSlots * sizeof(ReaderSlot) + snapshots_.size() * 48;
  const uint64_t cv = current_version();
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  s.extra = {
      {"node_size", node_size_},
      {"min_live_entries", min_live_},
      {"current_version", d(cv)},
      {"versions_retained", d(cv - oldest_retained_version() + 1)},
      {"live_entries", d(ws.live_entries)},
      {"dead_entries", d(ws.dead_entries)},
      {"garbage_nodes", d(ws.garbage_nodes)},
      {"version_bumps", d(counts_.version_bumps)},
      {"free_slot_inserts", d(counts_.free_slot_inserts)},
      {"dead_entry_reuses", d(counts_.dead_entry_reuses)},
      {"leaf_splits", d(counts_.leaf_splits)},
      {"inner_splits", d(counts_.inner_splits)},
      {"root_splits", d(counts_.root_splits)},
      {"merges", d(counts_.merges)},
      {"copies", d(counts_.copies)},
      {"underflow_skips", d(counts_.underflow_skips)},
      {"gc_steps", d(counts_.gc_steps)},
      {"gc_passes", d(counts_.gc_passes)},
      {"gc_entries_reclaimed", d(counts_.gc_entries_reclaimed)},
      {"gc_nodes_freed", d(counts_.gc_nodes_freed)},
      {"root_promotions", d(counts_.root_promotions)},
      {"aborted_operations", d(counts_.aborted_operations)},
      {"recovery_entries_discarded", d(counts_.recovery_entries_discarded)},
      {"recovery_nodes_reverted", d(counts_.recovery_nodes_reverted)},
      {"recovery_duplicates_removed", d(counts_.recovery_duplicates_removed)},
  };
  return s;
}

#define PMTREE_CDDS_INSTANTIATE(K)                                                            \
  template Status CddsTree<K>::RecoverNode(uint64_t, uint64_t);                               \
  template void CddsTree<K>::RewriteEntries(uint64_t, const std::vector<NodeEntry>&,          \
                                            const std::vector<uint32_t>&, bool);              \
  template void CddsTree<K>::CompactNode(uint64_t, uint64_t, Released*);                      \
  template void CddsTree<K>::FreeSubtree(uint64_t);                                           \
  template void CddsTree<K>::FreeOwned(Released&);                                            \
  template void CddsTree<K>::TryPromoteRoot(Released*, uint64_t);                             \
  template void CddsTree<K>::MaybeGc();                                                       \
  template bool CddsTree<K>::GcStep();                                                        \
  template Status CddsTree<K>::CollectGarbage();                                              \
  template Status CddsTree<K>::RecoverNodes();                                                \
  template Status CddsTree<K>::RebuildAllocator();                                            \
  template uint64_t CddsTree<K>::NodeMagic(const PoolImpl*);                                  \
  template void CddsTree<K>::NoteNode(uint64_t);                                              \
  template void CddsTree<K>::SetNodeMagic(uint64_t);                                          \
  template bool CddsTree<K>::ClearNodeMagic(uint64_t);                                        \
  template bool CddsTree<K>::ClearSubtreeMagic(uint64_t);                                     \
  template void CddsTree<K>::MarkNewNodes(const Op&);                                         \
  template Status CddsTree<K>::ScanForLostNodes() const;                                      \
  template Status CddsTree<K>::Walk(WalkStats*, bool, bool);                                  \
  template Status CddsTree<K>::Verify();                                                      \
  template TreeStats CddsTree<K>::Stats();

PMTREE_CDDS_INSTANTIATE(U64Keys)
PMTREE_CDDS_INSTANTIATE(BytesKeys)
#undef PMTREE_CDDS_INSTANTIATE

}  // namespace pmtree
