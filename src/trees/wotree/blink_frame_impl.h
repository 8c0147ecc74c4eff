// SPDX-License-Identifier: Apache-2.0
//
// BlinkFrame's out-of-line members: the write paths (Put, separator insert,
// FAST inner insert with the delayed flush, inner and root splits), recovery
// (Fig. 9, rules R1-R6) and Verify/Stats.  Included by blink_frame.h only;
// invariants F1-F8 are stated there.

#ifndef PMTREE_TREES_WOTREE_BLINK_FRAME_IMPL_H_
#define PMTREE_TREES_WOTREE_BLINK_FRAME_IMPL_H_

namespace pmtree::wotree {

template <KeyPolicy KP, class L>
Result<bool> BlinkFrame<KP, L>::Put(Arg key, uint64_t value, Mode mode) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  auto guard = pool_->epochs().Protect();
  const uint64_t leaf = LockLeaf(key, /*exclusive=*/true);
  SharedSpinLock& lk = llocks_.For(leaf);
  const int h = leaf_.Find(leaf, key);
  if (h >= 0) {
    if (mode == Mode::kInsert) {
      lk.unlock();
      return false;
    }
    uint64_t* word = leaf_.ValueWord(leaf, h);
    pool_->Store64(word, value);
    // Persist the new value (one failure-atomic word) before the unlock, so
    // no reader returns a value a crash could still lose (F8).
    pool_->Persist(word, 8);
    lk.unlock();
    return mode == Mode::kUpdate;
  }
  if (mode == Mode::kUpdate) {
    lk.unlock();
    return false;
  }
  auto slot = keys_.MakeSlot(key);
  if (!slot.ok()) {
    lk.unlock();
    return slot.status();
  }
  if (leaf_.Count(leaf) < leaf_.capacity()) {
    leaf_.Insert(leaf, key, *slot, value);
    lk.unlock();
    return true;
  }
  // Reserve every node the split's cascade can need (the new leaf, one per
  // inner level and a new root) before the leaf changes: an OutOfSpace after
  // the leaf split would return a failure for an insert that took place and
  // leave the new leaf without a parent (F5).
  NodeReserve reserve(pool_->allocator(), node_size_);
  Status st = reserve.Fill(Level(P(PoolImpl::Load64(&meta_->root))) + 2);
  uint64_t nl = 0, sep = 0;
  if (st.ok()) {
    nl = *reserve.Take();
    st = leaf_.Split(leaf, nl, key, *slot, value, &sep);
  }
  lk.unlock();
  if (!st.ok()) {
    // Split fails only before its first store to a reachable node.
    if (nl != 0) pool_->allocator().Free(nl, node_size_);
    keys_.Release(*slot);
    return st;
  }
  leaf_splits_.fetch_add(1, std::memory_order_relaxed);
  // Split returned: the new leaf's link is durable (sortedtree: `next`
  // persisted; wotree: the old leaf's half persisted, and before that the
  // log record recovery R1 replays), so the count may include it (F9).  Each
  // split takes its own value from leaf_count_; a concurrent split's larger
  // value may land first, so the stored count can lag, never lead.  Only
  // flushed here: the separator insert's first fence makes it durable (one
  // flush per split, no fence); until then a crash keeps the old count.
  StoreLeafCount(leaf_count_.fetch_add(1, std::memory_order_relaxed) + 1, /*fence=*/false);
  // The insert is durable; the new leaf is reachable through `next` already
  // (B-link).  The separator insert takes its nodes from the reserve; only a
  // tree grown by another thread since Fill can still run out here, and then
  // the leaf stays reachable through `next` (recovery R6 indexes it).
  st = InsertSeparator(1, sep, nl, &reserve);
  if (!st.ok()) {
    // Complete the count's flush: a separator insert that failed may have
    // issued no fence, and no store of an operation stays pending at its end.
    pool_->Fence();
    return st;
  }
  return true;
}

template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::InsertSeparator(uint32_t level, uint64_t sep, uint64_t child, NodeReserve* reserve) {
  for (;;) {
    const Arg k = ArgOf(sep);
    uint64_t n = DescendTo(level, k);
    if (n == 0) {
      PMTREE_ASSIGN_OR_RETURN(bool grown, GrowRoot(level, sep, child, reserve));
      if (grown) return Status::Ok();
      continue;
    }
    VersionLock* lk = &ilocks_.For(n);
    lk->lock();
    uint64_t nx;
    while (BelongsRight(n, k, &nx)) {
      lk->unlock();
      n = nx;
      lk = &ilocks_.For(n);
      lk->lock();
    }
    if (I(n)->count < inner_cap_) {
      FastInsert(n, sep, child);
      lk->unlock();
      return Status::Ok();
    }
    uint64_t up = 0;
    auto nn = SplitInner(n, sep, child, &up, reserve);
    lk->unlock();
    if (!nn.ok()) return nn.status();
    inner_splits_.fetch_add(1, std::memory_order_relaxed);
    level++;
    sep = up;
    child = *nn;
  }
}

// A new root over the old one and `child` (a root split); false when another
// thread grew the tree first (the caller descends again).
template <KeyPolicy KP, class L>
Result<bool> BlinkFrame<KP, L>::GrowRoot(uint32_t level, uint64_t sep, uint64_t child, NodeReserve* reserve) {
  std::lock_guard<std::mutex> g(root_mu_);
  const uint64_t old = PoolImpl::Load64(&meta_->root);
  if (Level(P(old)) >= level) return false;
  PMTREE_ASSIGN_OR_RETURN(uint64_t nr, reserve->Take());
  struct {
    InnerNode hdr;
    InnerRecord more[3];
  } img{};
  img.hdr.prefix.level = level;
  img.hdr.prefix.flags = kWritten;
  img.hdr.count = 1;
  img.hdr.leftmost = old;
  img.hdr.records[0] = InnerRecord{sep, child};
  pool_->Write(I(nr), &img, 128);
  // Persist the new root before meta.root names it (F7).
  pool_->Persist(I(nr), 128);
  pool_->Store64(&meta_->root, nr);
  // Persist meta.root: the commit point of the new level.  Before it the old
  // root's sibling is reachable through `next` (recovery R6 grows the root).
  pool_->Persist(&meta_->root, 8);
  root_splits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Tracks the record line a shift is writing, for the delayed flush of
// §4.3.1: a line is persisted when the shift moves to another line, never
// after each record.
class ShiftLines {
 public:
  explicit ShiftLines(PoolImpl* pool) : pool_(pool) {}
  void Enter(const void* rec) {
    const uintptr_t line = reinterpret_cast<uintptr_t>(rec) & ~uintptr_t{63};
    if (line == cur_) {
      dirty_ = true;
      return;
    }
    if (dirty_) {
      pool_->Flush(reinterpret_cast<const void*>(cur_), 64);
      // The delayed flush: persist the line the shift is leaving before it
      // overwrites a record in the next line, whose only other copy is in
      // the line just left.
      pool_->Fence();
    }
    cur_ = line;
    dirty_ = true;
  }
  // Marks the current line clean (it was persisted by the caller).
  void Clean(const void* rec) {
    cur_ = reinterpret_cast<uintptr_t>(rec) & ~uintptr_t{63};
    dirty_ = false;
  }
  void Finish() {
    if (!dirty_) return;
    pool_->Flush(reinterpret_cast<const void*>(cur_), 64);
    // Persist the last line the shift wrote before the caller unlocks (F8).
    pool_->Fence();
    dirty_ = false;
  }

 private:
  PoolImpl* pool_;
  uintptr_t cur_ = 0;
  bool dirty_ = false;
};

// FAST insert of (sep, child) into the locked inner node `off`, which has
// room and no transient duplicate.  Every intermediate state holds the old
// records plus at most one duplicate record (child equal to its left
// neighbour's), which readers and recovery ignore.
template <KeyPolicy KP, class L>
void BlinkFrame<KP, L>::FastInsert(uint64_t off, uint64_t sep, uint64_t child) {
  InnerNode* n = I(off);
  const uint64_t cnt = n->count;
  const Arg k = ArgOf(sep);
  uint64_t pos = 0;
  while (pos < cnt && keys_.Compare(n->records[pos].key, k) < 0) pos++;
  InnerRecord* end = &n->records[cnt];
  if (pos == cnt) {
    pool_->Store64(&end->key, sep);
    pool_->Store64(&end->child, child);
    // Persist the appended record before the count makes it valid.
    pool_->Persist(end, 16);
    pool_->Store64(&n->count, cnt + 1);
    // Persist the count before the unlock (F8).
    pool_->Persist(&n->count, 8);
    return;
  }
  // The last record one place right, beyond the count: a copy (child, then
  // key) that the count then admits as a duplicate of its left neighbour.
  pool_->Store64(&end->child, n->records[cnt - 1].child);
  pool_->Store64(&end->key, n->records[cnt - 1].key);
  // Persist the copy before the count admits it, so the count never covers
  // a record that is not there.
  pool_->Persist(end, 16);
  pool_->Store64(&n->count, cnt + 1);
  // Persist the count before any record inside the old count changes:
  // otherwise a crash could keep the overwritten last record only beyond it.
  pool_->Persist(&n->count, 8);
  ShiftLines lines(pool_);
  lines.Clean(end);
  // Right to left: record j moves to j + 1, child before key, so the record
  // being overwritten always reads as a duplicate of its left neighbour.
  for (uint64_t j = cnt - 1; j-- > pos;) {
    InnerRecord* r = &n->records[j + 1];
    lines.Enter(r);
    pool_->Store64(&r->child, n->records[j].child);
    pool_->Store64(&r->key, n->records[j].key);
  }
  // The new record: first a duplicate of its left neighbour's child (the
  // right copy of the old record at pos becomes the valid one), then the key,
  // then the child that makes it valid.
  InnerRecord* r = &n->records[pos];
  lines.Enter(r);
  pool_->Store64(&r->child, LeftChild(off, static_cast<int64_t>(pos)));
  pool_->Store64(&r->key, sep);
  pool_->Store64(&r->child, child);
  lines.Finish();
}

// Removes record i of inner node `off` by a left shift, key before child, so
// the record being overwritten stays a duplicate until its child changes.
// Used by recovery (R3) to drop a transient duplicate.
template <KeyPolicy KP, class L>
void BlinkFrame<KP, L>::RemoveRecord(uint64_t off, uint64_t i) {
  InnerNode* n = I(off);
  const uint64_t cnt = n->count;
  ShiftLines lines(pool_);
  for (uint64_t j = i; j + 1 < cnt; j++) {
    InnerRecord* r = &n->records[j];
    lines.Enter(r);
    pool_->Store64(&r->key, n->records[j + 1].key);
    pool_->Store64(&r->child, n->records[j + 1].child);
  }
  lines.Finish();
  pool_->Store64(&n->count, cnt - 1);
  // Persist the shorter count; the record it drops is a duplicate of its
  // left neighbour, so the order against the shift does not matter.
  pool_->Persist(&n->count, 8);
}

// Algorithm 4 in FAIR order: the new right node (upper half, with the
// separator when it belongs there) is persisted, then linked through `next`,
// then the old node drops its upper half by one count store.  Caller holds
// the node's lock; the node is full.
template <KeyPolicy KP, class L>
Result<uint64_t> BlinkFrame<KP, L>::SplitInner(uint64_t off, uint64_t sep, uint64_t child, uint64_t* up,
                                                 NodeReserve* reserve) {
  PMTREE_ASSIGN_OR_RETURN(uint64_t nn, reserve->Take());
  InnerNode* n = I(off);
  const uint64_t cnt = n->count;
  const uint64_t mid = cnt / 2;
  *up = n->records[mid].key;
  std::vector<InnerRecord> upper(n->records + mid + 1, n->records + cnt);
  const bool right = keys_.CompareSlots(sep, *up) > 0;
  if (right) {
    auto it = upper.begin();
    while (it != upper.end() && keys_.CompareSlots(it->key, sep) < 0) ++it;
    upper.insert(it, InnerRecord{sep, child});
  }
  InnerNode hdr{};
  hdr.prefix = NodePrefix{n->prefix.next, *up, n->prefix.level, kHasLowKey | kWritten};
  hdr.count = upper.size();
  hdr.leftmost = n->records[mid].child;
  InnerNode* nw = I(nn);
  pool_->Write(nw, &hdr, 64);
  pool_->Write(nw->records, upper.data(), 16 * upper.size());
  // Persist the complete new node before `next` names it (F7).
  pool_->Persist(nw, 64 + 16 * upper.size());
  pool_->Store64(&n->prefix.next, nn);
  // Persist the link before the old node drops its upper half (§4.3.2): no
  // record is ever held only by an unreachable node.  Until the truncation
  // readers move right for keys >= the new node's low key (F3).
  pool_->Persist(&n->prefix.next, 8);
  pool_->Store64(&n->count, mid);
  // Persist the truncation before the unlock (F8); recovery R3 redoes it.
  pool_->Persist(&n->count, 8);
  if (!right) FastInsert(off, sep, child);
  return nn;
}

// ---- bulk load --------------------------------------------------------------------------------

template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::BulkLoad(std::span<const typename Base::InputEntry> sorted, double fill) {
  PMTREE_RETURN_IF_ERROR(CheckBulkLoadInput(sorted, fill, &KP::CheckArg));
  const uint64_t old_root = PoolImpl::Load64(&meta_->root);
  const NodePrefix* old_prefix = P(old_root);
  if (old_prefix->level != 0 || old_prefix->next != 0 || leaf_.Count(old_root) != 0)
    return Status::InvalidArgument("bulk load: tree not empty");
  if (sorted.empty()) return Status::Ok();

  std::vector<uint64_t> made_nodes, made_slots;
  auto fail = [&](Status s) {
    for (uint64_t off : made_nodes) pool_->allocator().Free(off, node_size_);
    for (uint64_t slot : made_slots) keys_.Release(slot);
    return s;
  };
  auto make_slot = [&](Arg key) -> Result<uint64_t> {
    // Flushed only: the fence before the root store completes it (F7).
    PMTREE_ASSIGN_OR_RETURN(uint64_t slot, keys_.MakeSlotUnfenced(key));
    if constexpr (!KP::kInline) made_slots.push_back(slot);
    return slot;
  };
  // n items in groups of at most `per`, as even as possible.
  auto groups = [](size_t n, size_t per) { return (n + per - 1) / per; };
  auto share = [](size_t n, size_t g, size_t i) { return n / g + (i < n % g ? 1 : 0); };
  auto allocate = [&](size_t count, std::vector<uint64_t>* out) -> Status {
    for (size_t i = 0; i < count; i++) {
      PMTREE_ASSIGN_OR_RETURN(uint64_t off, pool_->allocator().Allocate(node_size_));
      made_nodes.push_back(off);
      out->push_back(off);
    }
    return Status::Ok();
  };

  const size_t cap = static_cast<size_t>(leaf_.capacity());
  const size_t leaf_per = std::clamp<size_t>(static_cast<size_t>(fill * cap), 1, cap);
  const size_t nleaves = groups(sorted.size(), leaf_per);
  std::vector<uint64_t> nodes, lows(nleaves, 0);  // lows[i]: node i's low key slot (0 for the first)
  if (Status st = allocate(nleaves, &nodes); !st.ok()) return fail(st);
  std::vector<typename L::Record> recs;
  for (size_t i = 0, next = 0; i < nleaves; i++) {
    const size_t take = share(sorted.size(), nleaves, i);
    recs.clear();
    for (size_t k = 0; k < take; k++, next++) {
      auto slot = make_slot(sorted[next].first);
      if (!slot.ok()) return fail(slot.status());
      recs.push_back({*slot, sorted[next].second});
    }
    if (i > 0) {
      // The separator gets a blob of its own, as a split's does.
      auto low = make_slot(sorted[next - take].first);
      if (!low.ok()) return fail(low.status());
      lows[i] = *low;
    }
    const size_t bytes =
        leaf_.WriteLeaf(nodes[i], i + 1 < nleaves ? nodes[i + 1] : 0, lows[i], i > 0 ? kHasLowKey : 0, recs);
    // Start the leaf's write-back; the fence before the root store completes it (F7).
    pool_->Flush(pool_->At<char>(nodes[i]), bytes);
  }
  const size_t inner_per = std::clamp<size_t>(static_cast<size_t>(fill * (inner_cap_ + 1)), 3, inner_cap_ + 1);
  std::vector<InnerRecord> irecs;
  for (uint32_t level = 1; nodes.size() > 1; level++) {
    const size_t k = nodes.size(), nn = groups(k, inner_per);
    std::vector<uint64_t> up, up_lows(nn, 0);
    if (Status st = allocate(nn, &up); !st.ok()) return fail(st);
    for (size_t i = 0, c = 0; i < nn; i++) {
      const size_t take = share(k, nn, i);
      InnerNode hdr{};
      hdr.prefix = NodePrefix{i + 1 < nn ? up[i + 1] : 0, lows[c], level, (c > 0 ? kHasLowKey : 0u) | kWritten};
      hdr.count = take - 1;
      hdr.leftmost = nodes[c];
      irecs.clear();
      for (size_t j = 1; j < take; j++) irecs.push_back(InnerRecord{lows[c + j], nodes[c + j]});
      pool_->Write(I(up[i]), &hdr, 64);
      pool_->Write(I(up[i])->records, irecs.data(), 16 * irecs.size());
      // Start the node's write-back; the fence before the root store completes it (F7).
      pool_->Flush(I(up[i]), 64 + 16 * irecs.size());
      up_lows[i] = lows[c];
      c += take;
    }
    nodes.swap(up);
    lows.swap(up_lows);
  }
  // F7: every new node and separator blob is persistent before meta.root
  // names the top node (else a crash could expose a torn subtree).
  pool_->Fence();
  pool_->Store64(&meta_->root, nodes[0]);
  // Persist meta.root: the bulk load's commit point.  Before it a crash finds
  // the empty old root leaf; recovery R5 frees the unreachable new nodes.
  pool_->Persist(&meta_->root, 8);
  pool_->allocator().Retire(old_root, node_size_);
  // The exact count, stored after the commit that links the loaded leaves
  // (F9): before it a crash finds the old single leaf and the count 1.
  leaf_count_.store(nleaves);
  StoreLeafCount(nleaves, /*fence=*/true);
  return Status::Ok();
}

template <KeyPolicy KP, class L>
void BlinkFrame<KP, L>::StoreLeafCount(uint64_t leaves, bool fence) {
  pool_->Store64(&meta_->leaves, leaves);
  // Flush the count; every caller stores it only after the links of the
  // leaves it counts are durable, so no crash state has it above the chain
  // (F9).
  pool_->Flush(&meta_->leaves, sizeof(uint64_t));
  // Fence when the caller has no later fence (bulk load, recovery, Close).
  if (fence) pool_->Fence();
}

// ---- recovery (Fig. 9) ------------------------------------------------------------------------
//
//  R1 leaf log: each set record's split is redone by the leaf policy.
//  R2 after a clean shutdown nothing else runs (instant restart: the pool
//     restored the allocator, every operation had finished).
//  R3 inner nodes, the frame "built from consistent entries": a transient
//     duplicate (interrupted shift) is removed; records at or above the next
//     node's low key (a split interrupted before its truncation) are cut off.
//  R4 leaves: the policy's repair (WO-tree: slot array rebuilt from the
//     bitmap when they disagree).
//  R5 the allocator is rebuilt from what the levels reach.
//  R6 nodes reachable only through `next` (a split interrupted before its
//     parent insert, or a root split before meta.root) are inserted into the
//     level above through the ordinary separator insert, bottom-up.
//  The leaf check (F9), after the walk and before any repair of R3-R6: the
//     chain must reach at least meta.leaves leaves, else it was cut (a zeroed
//     `next` or page) and the pool is refused with Corruption rather than
//     R5 turning the leaves behind the cut into free space (issue 17).  It
//     needs no allocator state, so it holds under the key-value store and
//     after a clean close whose restart image was unusable.  After the
//     repairs the count is stored exact.
// Every rule is idempotent or an ordinary crash-safe operation, so a crash
// during recovery is recovered the same way.
template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::RecoverImpl() {
  report_.crashed = !pool_->clean_shutdown();
  PMTREE_RETURN_IF_ERROR(leaf_.ReplayLogs(&report_.leaf_logs_replayed));  // R1
  if (!report_.crashed) {                                                   // R2
    // A clean Close stored the exact count (F9).
    leaf_count_.store(std::min<uint64_t>(meta_->leaves, pool_->size() / node_size_));
    return Status::Ok();
  }
  std::vector<std::vector<uint64_t>> levels;
  PMTREE_RETURN_IF_ERROR(CollectLevels(&levels));
  const uint64_t walked = levels[0].size(), counted = meta_->leaves;
  if (counted == 0 || counted > walked)
    return Corrupt("meta", meta_off_, "F9",
                   "the leaf chain reaches " + std::to_string(walked) + " leaves but the meta block counts " +
                       std::to_string(counted) +
                       (counted == 0 ? " (never 0: a damaged meta block)" : ": leaves unreachable (a cut leaf chain?)"));
  for (size_t l = 1; l < levels.size(); l++) {  // R3
    for (uint64_t off : levels[l]) {
      InnerNode* n = I(off);
      for (uint64_t i = 0; i < n->count;) {
        if (n->records[i].child == LeftChild(off, static_cast<int64_t>(i))) {
          RemoveRecord(off, i);
          report_.duplicates_removed++;
        } else {
          i++;
        }
      }
      if (n->prefix.next == 0) continue;
      const uint64_t high = P(n->prefix.next)->low_key;
      uint64_t t = 0;
      while (t < n->count && keys_.CompareSlots(n->records[t].key, high) < 0) t++;
      if (t < n->count) {
        pool_->Store64(&n->count, t);
        // Persist the finished truncation before R6 inserts into the node.
        pool_->Persist(&n->count, 8);
        report_.truncations++;
      }
    }
  }
  for (uint64_t off : levels[0]) PMTREE_RETURN_IF_ERROR(leaf_.Repair(off, &report_.leaves_repaired));  // R4
  PMTREE_RETURN_IF_ERROR(RebuildAllocator(levels));  // R5
  auto link = [this, walked, counted, levels = std::move(levels)]() mutable -> Status {
    for (size_t l = 0; l < levels.size(); l++) {  // R6
      std::set<uint64_t> indexed;
      if (l + 1 < levels.size()) {
        for (uint64_t p : levels[l + 1]) {
          indexed.insert(I(p)->leftmost);
          for (uint64_t i = 0; i < I(p)->count; i++) indexed.insert(I(p)->records[i].child);
        }
      }
      bool changed = false;
      for (size_t i = 1; i < levels[l].size(); i++) {
        if (indexed.count(levels[l][i])) continue;
        NodeReserve none(pool_->allocator(), node_size_);  // recovery allocates as it goes
        PMTREE_RETURN_IF_ERROR(
            InsertSeparator(static_cast<uint32_t>(l + 1), P(levels[l][i])->low_key, levels[l][i], &none));
        report_.separators_inserted++;
        changed = true;
      }
      if (changed) PMTREE_RETURN_IF_ERROR(CollectLevels(&levels));
    }
    // The exact count (a split's count may have lagged; R6 splits no leaf).
    leaf_count_.store(walked);
    if (walked != counted) StoreLeafCount(walked, /*fence=*/true);
    return Status::Ok();
  };
  // R6 allocates (a new root, a split parent).  A key-value store above
  // holds the rebuild until it has reported its own blocks (HoldRebuild),
  // and allocates nothing before: link once it has.  Readers meanwhile
  // reach an unindexed node through its left sibling (B-link move-right).
  return pool_->allocator().RunOnceRebuilt(std::move(link));
}

template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::CheckNode(uint64_t off, uint32_t level) const {
  if (off % 64 != 0 || !pool_->InHeap(off, node_size_)) return Corrupt("node", off, "F2", "offset outside the heap");
  const NodePrefix* p = P(off);
  if (p->level != level)
    return Corrupt("node", off, "F2", "level " + std::to_string(p->level) + ", expected " + std::to_string(level));
  if ((p->flags & ~(kHasLowKey | kWritten)) != 0) return Corrupt("node", off, "F2", "unknown flags");
  if (!(p->flags & kWritten)) return Corrupt("node", off, "F7", "reachable node was never written");
  if (level > 0 && I(off)->count > inner_cap_) return Corrupt("inner node", off, "F4", "count beyond capacity");
  return Status::Ok();
}

// levels[l] = the nodes of level l, leftmost first (levels.back() holds the root).
template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::CollectLevels(std::vector<std::vector<uint64_t>>* levels) const {
  levels->clear();
  const uint64_t root = meta_->root;
  if (root % 64 != 0 || !pool_->InHeap(root, node_size_)) return Corrupt("meta", meta_off_, "F1", "root outside the heap");
  const uint32_t top = P(root)->level;
  if (top > 64) return Corrupt("meta", meta_off_, "F1", "root level " + std::to_string(top));
  levels->resize(top + 1);
  const uint64_t limit = pool_->size() / node_size_ + 1;
  uint64_t head = root;
  for (int64_t l = top; l >= 0; l--) {
    auto& v = (*levels)[l];
    for (uint64_t off = head; off != 0; off = P(off)->next) {
      PMTREE_RETURN_IF_ERROR(CheckNode(off, static_cast<uint32_t>(l)));
      if (v.size() >= limit) return Corrupt("level", off, "F2", "cycle");
      v.push_back(off);
    }
    if (l > 0) head = I(head)->leftmost;
  }
  return Status::Ok();
}

template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::RebuildAllocator(const std::vector<std::vector<uint64_t>>& levels) {
  Allocator& a = pool_->allocator();
  a.BeginRebuild();
  Status st = a.MarkUsed(meta_off_, sizeof(Meta));
  for (size_t l = 0; l < levels.size() && st.ok(); l++) {
    for (uint64_t off : levels[l]) {
      if (st.ok()) st = a.MarkUsed(off, node_size_);
      if (l != 0) continue;
      // Separator blobs belong to the leaves whose low keys they are; inner
      // records and inner low keys share them.
      if (st.ok() && (P(off)->flags & kHasLowKey)) st = keys_.MarkUsed(P(off)->low_key);
      leaf_.ForEach(off, [&](uint64_t slot, uint64_t) {
        if (st.ok()) st = keys_.MarkUsed(slot);
      });
      if (!st.ok()) st = st.Annotate(std::string(L::kName) + " leaf at offset " + Hex(off));
    }
  }
  a.EndRebuild();
  return st;
}

// ---- Verify / Stats -------------------------------------------------------------------------

template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::CheckInner(uint64_t off, uint64_t* /*bytes*/) const {
  const InnerNode* n = I(off);
  const uint32_t level = n->prefix.level;
  auto check_child = [&](uint64_t c, uint64_t key, bool has_low) -> Status {
    PMTREE_RETURN_IF_ERROR(CheckNode(c, level - 1));
    const NodePrefix* cp = P(c);
    if (((cp->flags & kHasLowKey) != 0) != has_low || (has_low && cp->low_key != key))
      return Corrupt("inner node", off, "F4", "child " + Hex(c) + "'s low key differs from its record's key");
    return Status::Ok();
  };
  PMTREE_RETURN_IF_ERROR(check_child(n->leftmost, n->prefix.low_key, (n->prefix.flags & kHasLowKey) != 0));
  for (uint64_t i = 0; i < n->count; i++) {
    if (n->records[i].child == LeftChild(off, static_cast<int64_t>(i)))
      return Corrupt("inner node", off, "F4", "transient duplicate at record " + std::to_string(i));
    if (i > 0 && keys_.CompareSlots(n->records[i - 1].key, n->records[i].key) >= 0)
      return Corrupt("inner node", off, "F4", "records not in ascending key order");
    PMTREE_RETURN_IF_ERROR(check_child(n->records[i].child, n->records[i].key, true));
  }
  return Status::Ok();
}

template <KeyPolicy KP, class L>
Status BlinkFrame<KP, L>::Verify() {
  // No operation runs (Verify's precondition): blobs retired by removes can
  // be freed now, so the allocator counts only what the tree holds.
  pool_->epochs().DrainAll();
  if (meta_->magic != L::kMagic || meta_->version != kFormatVersion || meta_->node_size != node_size_ ||
      meta_->key_kind != static_cast<uint32_t>(KP::kKind))
    return Corrupt("meta", meta_off_, "F1", "magic, version, node size or key kind wrong");
  for (int i = 0; i < kLeafLogs; i++)
    if (meta_->leaf_log[i].leaf != 0 || meta_->leaf_log[i].other != 0)
      return Corrupt("leaf log", meta_off_ + 64 + 64 * i, "F1", "log record not clear");
  std::vector<std::vector<uint64_t>> levels;
  PMTREE_RETURN_IF_ERROR(CollectLevels(&levels));
  if (meta_->leaves == 0 || meta_->leaves > levels[0].size())
    return Corrupt("meta", meta_off_, "F9",
                   "leaf count " + std::to_string(meta_->leaves) + " but " + std::to_string(levels[0].size()) +
                       " leaves in the chain");
  uint64_t bytes = sizeof(Meta);
  for (size_t l = 0; l < levels.size(); l++) {
    std::set<uint64_t> indexed;
    if (l + 1 < levels.size()) {
      for (uint64_t p : levels[l + 1]) {
        indexed.insert(I(p)->leftmost);
        for (uint64_t i = 0; i < I(p)->count; i++) indexed.insert(I(p)->records[i].child);
      }
    }
    for (size_t i = 0; i < levels[l].size(); i++) {
      const uint64_t off = levels[l][i];
      const NodePrefix* p = P(off);
      bytes += node_size_;
      const bool has_low = (p->flags & kHasLowKey) != 0;
      if (has_low != (i > 0)) return Corrupt("node", off, "F2", "low key flag wrong for the position in its level");
      if (has_low) {
        Status st = keys_.CheckSlot(p->low_key);
        if (!st.ok()) return Corrupt("node", off, "F2", std::string(st.message()));
      }
      if (p->next != 0 && has_low && keys_.CompareSlots(p->low_key, P(p->next)->low_key) >= 0)
        return Corrupt("node", off, "F2", "next's low key not above this node's");
      if (i > 0 && l + 1 < levels.size() && !indexed.count(off))
        return Corrupt("node", off, "F5", "not a child of any node of the level above");
      auto in_range = [&](uint64_t slot) {
        return (!has_low || keys_.CompareSlots(slot, p->low_key) >= 0) &&
               (p->next == 0 || keys_.CompareSlots(slot, P(p->next)->low_key) < 0);
      };
      if (l > 0) {
        PMTREE_RETURN_IF_ERROR(CheckInner(off, &bytes));
        for (uint64_t r = 0; r < I(off)->count; r++)
          if (!in_range(I(off)->records[r].key)) return Corrupt("inner node", off, "F3", "record key outside the node's range");
        continue;
      }
      PMTREE_RETURN_IF_ERROR(leaf_.Check(off));
      if (has_low) bytes += keys_.SlotBytes(p->low_key);
      Status bad = Status::Ok();
      leaf_.ForEach(off, [&](uint64_t slot, uint64_t) {
        if (!bad.ok()) return;
        Status st = keys_.CheckSlot(slot);
        if (!st.ok()) bad = Corrupt("leaf", off, "F3", std::string(st.message()));
        else if (!in_range(slot)) bad = Corrupt("leaf", off, "F3", "key outside the leaf's range");
        bytes += keys_.SlotBytes(slot);
      });
      PMTREE_RETURN_IF_ERROR(bad);
    }
  }
  if (bytes != pool_->allocator().bytes_in_use())
    return Corrupt("pool", 0, "F6",
                   "bytes reached " + std::to_string(bytes) + " != allocator bytes in use " +
                       std::to_string(pool_->allocator().bytes_in_use()));
  return Status::Ok();
}

template <KeyPolicy KP, class L>
TreeStats BlinkFrame<KP, L>::Stats() {
  auto guard = pool_->epochs().Protect();
  TreeStats st;
  std::vector<std::vector<uint64_t>> levels;
  if (!CollectLevels(&levels).ok()) return st;
  st.pm_bytes = sizeof(Meta);
  for (size_t l = 0; l < levels.size(); l++) {
    st.pm_bytes += levels[l].size() * node_size_;
    if (l > 0) {
      st.inner_nodes += levels[l].size();
      continue;
    }
    st.leaf_nodes = levels[0].size();
    for (uint64_t off : levels[0]) {
      if (P(off)->flags & kHasLowKey) st.pm_bytes += keys_.SlotBytes(P(off)->low_key);
      leaf_.ForEach(off, [&](uint64_t slot, uint64_t) {
        st.entries++;
        st.pm_bytes += keys_.SlotBytes(slot);
      });
    }
  }
  st.height = (st.entries == 0 && levels.size() == 1) ? 0 : static_cast<uint32_t>(levels.size());
  st.leaf_fill = st.leaf_nodes == 0 ? 0 : static_cast<double>(st.entries) / (st.leaf_nodes * leaf_.capacity());
  st.dram_bytes = sizeof(*this) + LeafLockTable::kStripes * 64 + 4096 * 64;
  st.extra.emplace_back("leaf_capacity", leaf_.capacity());
  st.extra.emplace_back("inner_capacity", inner_cap_);
  st.extra.emplace_back("leaf_splits", static_cast<double>(leaf_splits_.load()));
  st.extra.emplace_back("inner_splits", static_cast<double>(inner_splits_.load()));
  st.extra.emplace_back("root_splits", static_cast<double>(root_splits_.load()));
  // What the last recovery repaired (0 after a clean restart, which repairs nothing).
  st.extra.emplace_back("recovered_after_crash", report_.crashed ? 1 : 0);
  st.extra.emplace_back("leaf_logs_replayed", static_cast<double>(report_.leaf_logs_replayed));
  st.extra.emplace_back("duplicates_removed", static_cast<double>(report_.duplicates_removed));
  st.extra.emplace_back("truncations_finished", static_cast<double>(report_.truncations));
  st.extra.emplace_back("leaves_repaired", static_cast<double>(report_.leaves_repaired));
  st.extra.emplace_back("separators_inserted", static_cast<double>(report_.separators_inserted));
  leaf_.AddStats(&st);
  return st;
}

}  // namespace pmtree::wotree

#endif  // PMTREE_TREES_WOTREE_BLINK_FRAME_IMPL_H_
