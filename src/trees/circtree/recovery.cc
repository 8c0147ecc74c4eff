// SPDX-License-Identifier: Apache-2.0
//
// Circ-Tree recovery (§5.5), Verify(), Stats() and the registry entry points.
// The recovery case table, mapped to the functions below and to the tests
// that reach each case, is in docs/trees/circtree.md ("Recovery").
//
// Recovery runs when the crash flag is up (the pool was not closed
// cleanly).  After a clean shutdown the pool restores the allocator and the
// tree restarts instantly: nothing is read.
//
//   1. Walk every level along its sibling chain (nodes a parent does not know
//      yet are reached), bounds-checking each node.
//   2. Repair each node in place (RepairNode), bottom-up, with the same shift
//      rules S1-S4 as the operations (circtree.cc), so a crash during
//      recovery leaves a state this recovery handles again:
//        case 6   lock word set              -> cleared
//        case 1   a NULL neighbour of the occupied range is non-NULL: an
//                 insert was running (its side tells left from right shift)
//             1a  with a duplicate           -> shifted back (undone)
//             1b  without                    -> base + count committed
//        case 2   a duplicate inside the range: a delete was shifting
//             2a                             -> shift finished, NULL, commit
//             2b  a NULL at either end of the range -> commit
//        case 3b  pairs at or above the sibling's low key: a split stopped
//                 before its NULLs/commit    -> NULLed, count committed
//        stale    half-written words in NULL slots -> zeroed
//        case 7a  merge mark, count unchanged: copies not committed -> zeroed
//        case 7b  merge mark, count changed: committed -> fence redone
//   3. Merges that committed but did not finish (FinishMerges, bottom-up):
//        case 7c  a node whose sibling's fence equals its own -> emptied,
//                 unlinked
//        case 8   an IN naming a node the chain lost (IN one child long)
//                 -> entry removed; separators set to the children's fences
//        case 9   a root IN with one child -> the child becomes the root
//   4. Rebuild the allocator from what the tree reaches (no leak).
//   5. Inner levels against the level below (bottom-up):
//        case 4   the root has a sibling     -> new root installed
//        case 5   a node no parent names (IN one child short) -> inserted

#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <unordered_set>

#include "trees/circtree/circtree.h"
#include "trees/common/space_check.h"
#include "trees/common/upcast.h"

namespace pmtree::circtree {

namespace {

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status NodeError(uint64_t off, const char* invariant, const std::string& what) {
  return Status::Corruption("circtree node at offset " + Hex(off) + ": invariant " + invariant + " violated: " + what);
}

}  // namespace

template <KeyPolicy KP>
Status CircTree<KP>::RecoverFromPool(bool clean) {
  report_ = RecoveryReport{};
  report_.crashed = !clean;
  if (clean) return Status::Ok();  // instant restart
  std::vector<std::vector<uint64_t>> levels;
  PMTREE_RETURN_IF_ERROR(CollectLevels(&levels, /*repair=*/true));
  // C13: the meta block never counts more leaves than the durable chain
  // holds, so a walk that reaches fewer met a cut chain (a zeroed sibling
  // pointer or page).  Refuse it before FinishMerges (case 8 would drop the
  // parent entries naming the lost leaves) and before the allocator rebuild
  // would turn them into free space.  The per-node repairs above change no
  // sibling pointer.  The count is not touched, so the next open refuses
  // the pool again.
  const uint64_t walked = levels[0].size(), counted = meta_->leaves;
  if (counted == 0 || counted > walked)
    return Status::Corruption("circtree: the leaf level reaches " + std::to_string(walked) +
                              " leaves but the meta block counts " + std::to_string(counted) +
                              (counted == 0 ? " (never 0: a damaged meta block)"
                                            : ": leaves unreachable (a cut leaf list?)") +
                              " (invariant C13)");
  // Before the allocator rebuild: what these repairs detach is then free.
  PMTREE_RETURN_IF_ERROR(FinishMerges(&levels));
  // The leaf level is final now (LinkChildren below changes inner levels
  // only): store the exact count, which a merge recovery undid (case 7a)
  // left one low.
  leaf_count_ = levels[0].size();
  if (leaf_count_ != counted) {
    pool_->Store64(&meta_->leaves, leaf_count_);
    // Persist the exact count before recovery goes on, so a crash in the
    // rest of recovery keeps it (any later image holds it or the old,
    // smaller one: both lower bounds, C13).
    pool_->Persist(&meta_->leaves, sizeof(uint64_t));
  }
  PMTREE_RETURN_IF_ERROR(RebuildAllocator(levels));
  // Linking allocates (a new root, a split parent, a separator's key blob).
  // A key-value store above holds the rebuild until it has reported its own
  // blocks (HoldRebuild), and allocates nothing before: link once it has.
  // Readers meanwhile reach an unlinked node through its left sibling.
  return pool_->allocator().RunOnceRebuilt(
      [this, levels = std::move(levels)]() mutable { return LinkChildren(&levels); });
}

template <KeyPolicy KP>
Status CircTree<KP>::CheckNode(uint64_t off, uint32_t level) const {
  if (off % kLine != 0 || !pool_->InHeap(off, NodeBytes(node_size_)))
    return Status::Corruption("circtree: node offset " + Hex(off) + " is not a node in the heap (invariant C2)");
  const Node* x = N(off);
  if (x->hdr.level != level)
    return NodeError(off, "C2", "level " + std::to_string(x->hdr.level) + ", expected " + std::to_string(level));
  if (x->hdr.array != off + sizeof(NodeHeader)) return NodeError(off, "C2", "array pointer " + Hex(x->hdr.array));
  if ((x->hdr.base_count >> 32) > cap_)
    return NodeError(off, "C2", "count " + std::to_string(x->hdr.base_count >> 32) + " > capacity");
  if ((x->hdr.base_count & 0xffffffffu) >= slots_) return NodeError(off, "C2", "base outside the array");
  if constexpr (!KP::kInline) {
    for (uint32_t i = 0; i < slots_; i++)
      if (x->pairs[i].key != 0) PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(x->pairs[i].key));
    if ((x->hdr.flags & kHasLowKey) && x->hdr.low_key != 0) PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(x->hdr.low_key));
  }
  return Status::Ok();
}

// Walks each level along the sibling chain from its first node (the root,
// then the leftmost child of each level's first node).  With `repair`, each
// node is repaired (RepairNode) as soon as it is checked: an interrupted
// shift in an inner node may have moved its leftmost child out of logical
// position 0, and the walk must read that position only once it is repaired.
template <KeyPolicy KP>
Status CircTree<KP>::CollectLevels(std::vector<std::vector<uint64_t>>* levels, bool repair) {
  levels->clear();
  uint64_t first = meta_->root;
  if (first % kLine != 0 || !pool_->InHeap(first, NodeBytes(node_size_)))
    return Status::Corruption("circtree meta: root " + Hex(first) + " outside the heap (invariant C1)");
  const uint32_t top = N(first)->hdr.level;
  if (top > 64) return NodeError(first, "C2", "root level " + std::to_string(top) + " is implausible");
  levels->resize(top + 1);
  std::unordered_set<uint64_t> seen;
  for (int64_t L = top; L >= 0; --L) {
    auto& chain = (*levels)[L];
    for (uint64_t off = first, prev = 0; off != 0; prev = off, off = N(off)->hdr.sibling) {
      PMTREE_RETURN_IF_ERROR(CheckNode(off, static_cast<uint32_t>(L)));
      if (!seen.insert(off).second) return NodeError(off, "C6", "node reached twice (cycle or shared node)");
      chain.push_back(off);
      const uint64_t sib = N(off)->hdr.sibling;
      // A sibling without a low key is one a merge made the first of its
      // level (low key 0) while this node is still linked.
      if (sib != 0 && (sib % kLine != 0 || !pool_->InHeap(sib, NodeBytes(node_size_)) ||
                       !((N(sib)->hdr.flags & kHasLowKey) || N(sib)->hdr.low_key == 0)))
        return NodeError(off, "C6", "sibling " + Hex(sib) + " is not a node with a low key");
      if (repair) RepairNode(off, prev);
    }
    if (L > 0) {
      // A first node a merge emptied (its pairs are in its sibling) has no
      // leftmost child: the level below starts at the next one's.
      uint64_t head = first;
      while (LoadSpan(N(head)).n == 0 && N(head)->hdr.sibling != 0) head = N(head)->hdr.sibling;
      const Node* f = N(head);
      const Span s = LoadSpan(f);
      // The leftmost child of an inner node is logical position 0; an inner
      // node is never empty, and recovery never NULLs its position 0.
      first = f->pairs[s.b].value;
      if (first == 0) return NodeError(levels->at(L)[0], "C3", "first inner node has no leftmost child");
    }
  }
  return Status::Ok();
}

// Per-node repairs, in the order that keeps them independent: an insert in
// flight (case 1), a delete shifting (case 2a), then the ends of the range
// (cases 2b, 3b), then stale words.  Each writes with the operations' rules,
// so running it again after a crash inside it finds the state it left.
template <KeyPolicy KP>
void CircTree<KP>::RepairNode(uint64_t off, uint64_t prev) {
  Node* x = N(off);
  const bool leaf = x->hdr.level == 0;
  report_.nodes++;
  if (x->hdr.lock != 0) {  // case 6
    pool_->Store64(&x->hdr.lock, 0);
    // Persist the cleared lock word so a later recovery need not repeat it.
    pool_->Persist(&x->hdr.lock, sizeof(uint64_t));
    report_.locks_cleared++;
  }
  if ((x->hdr.flags & kHasLowKey) && x->hdr.low_key == 0) {
    // A merge's fence store landed without the flag store after it (M3).
    pool_->Store64(reinterpret_cast<uint64_t*>(&x->hdr.level), x->hdr.level);
    // Persist the cleared flag (the fence already reads as "none").
    pool_->Persist(&x->hdr.level, sizeof(uint64_t));
  }
  if (x->hdr.merge != 0) RepairMergeMark(x, prev);
  if (!ResolveInsert(x, leaf)) FinishDelete(x, leaf);
  TrimEnds(x, leaf);
  ZeroStaleWords(x);
}

// Case 7a/7b: a merge into this node (R) was running; `prev` is the node
// before it in the chain, the merged node X (it is unlinked only after the
// mark is cleared).
//   7a  base + count still the marked value: the copies were not committed.
//       Zero every slot outside the range (the copies), clear the mark.
//   7b  committed, but the rest of M3's store group (fence, mark) was lost
//       (a later line-order store of the same persist): redo it from X.
template <KeyPolicy KP>
void CircTree<KP>::RepairMergeMark(Node* x, uint64_t prev) {
  if (x->hdr.base_count == (x->hdr.merge & ~kMergeMark)) {
    LineWriter w(pool_);
    const Span s = LoadSpan(x);
    for (uint32_t i = s.n; i < slots_; i++) {
      Pair* p = At(x, s, i);
      if (p->key != 0) w.Store(&p->key, 0);
      if (p->value != 0) w.Store(&p->value, 0);
    }
    w.Finish();
    report_.merges_undone++;
  } else {
    const uint64_t fence = prev != 0 ? FenceOf(N(prev)) : 0;
    pool_->Store64(&x->hdr.low_key, fence);
    if (fence == 0) pool_->Store64(reinterpret_cast<uint64_t*>(&x->hdr.level), x->hdr.level);
    report_.merges_finished++;
  }
  pool_->Store64(&x->hdr.merge, 0);
  // Persist the repaired header (mark cleared last, as M3 does).
  pool_->Persist(&x->hdr, sizeof(NodeHeader));
}

// Case 1.  An insert writes the NULL slot left of the base (left shift) or
// right of the last pair (right shift) first, and never runs on a full node,
// so these two slots are distinct and only one can be non-NULL.
//   1a  a duplicate exists: the insert was shifting.  Undo it (§5.5: "shifts
//       to the right from the logical leftmost KV pair until the duplicate
//       value is shifted back", or to the left for a right shift), keeping
//       the complete copy of S3, with delete-order stores (S2) so the copy
//       rule stays the same if recovery itself is interrupted.
//   1b  no duplicate: the shift and the new pair are complete; commit.
template <KeyPolicy KP>
bool CircTree<KP>::ResolveInsert(Node* x, bool leaf) {
  const Span s = LoadSpan(x);
  if (s.n >= cap_) return false;
  const int64_t n = s.n;
  auto id = [&](int64_t i) { return IdOf(At(x, s, i), leaf); };
  LineWriter w(pool_);
  if (id(-1) != 0) {  // left shift: positions -1 .. n-1 hold n + 1 pairs
    int64_t p = -2;
    for (int64_t i = -1; i + 1 < n; i++)
      if (id(i) == id(i + 1)) {
        p = i;
        break;
      }
    if (p == -2) {
      Commit(x, s.b + slots_ - 1, s.n + 1);
      report_.insert_committed++;
      return true;
    }
    // S3: the left copy of the duplicate is complete; shift right back.
    for (int64_t d = p + 1; d >= 0; --d) CopyPair(w, At(x, s, d), At(x, s, d - 1), leaf, true);
    NullPair(w, At(x, s, -1), leaf);
    w.Finish();
    report_.insert_undone++;
    return true;
  }
  if (id(n) != 0) {  // right shift: positions 0 .. n hold n + 1 pairs
    int64_t p = -1;
    for (int64_t i = 0; i < n; i++)
      if (id(i) == id(i + 1)) {
        p = i;
        break;
      }
    if (p == -1) {
      Commit(x, s.b, s.n + 1);
      report_.insert_committed++;
      return true;
    }
    // S3: the right copy of the duplicate is complete; shift left back.
    for (int64_t d = p; d < n; d++) CopyPair(w, At(x, s, d), At(x, s, d + 1), leaf, true);
    NullPair(w, At(x, s, n), leaf);
    w.Finish();
    report_.insert_undone++;
    return true;
  }
  return false;
}

// Case 2a.  A duplicate inside the range with both neighbours NULL: a delete
// was shifting.  Its first store removed the pair, so finish it in the same
// direction with the same stores (S2): a duplicate below count / 2 comes
// from a left-half delete (complete copy on the left), any other from a
// right-half delete (complete copy on the right).
template <KeyPolicy KP>
bool CircTree<KP>::FinishDelete(Node* x, bool leaf) {
  const Span s = LoadSpan(x);
  const int64_t n = s.n;
  int64_t p = -1;
  for (int64_t i = 0; i + 1 < n; i++) {
    const uint64_t a = IdOf(At(x, s, i), leaf);
    if (a != 0 && a == IdOf(At(x, s, i + 1), leaf)) {
      p = i;
      break;
    }
  }
  if (p < 0) return false;
  LineWriter w(pool_);
  if (p < n / 2) {
    for (int64_t d = p + 1; d >= 1; --d) CopyPair(w, At(x, s, d), At(x, s, d - 1), leaf, true);
    NullPair(w, At(x, s, 0), leaf);
    w.Finish();
    Commit(x, s.b + 1, s.n - 1);
  } else {
    for (int64_t d = p; d + 1 < n; d++) CopyPair(w, At(x, s, d), At(x, s, d + 1), leaf, true);
    NullPair(w, At(x, s, n - 1), leaf);
    w.Finish();
    Commit(x, s.b, s.n - 1);
  }
  report_.delete_finished++;
  return true;
}

// Cases 2b and 3b.  A NULL at logical position 0 is a left-end delete whose
// commit was lost; NULLs at the top are a right-end delete's or a split's
// cleared copies; non-NULL pairs at or above the sibling's low key are copies
// a split had not cleared yet (they live in the sibling).  NULL the copies,
// greatest first, then commit the range that remains.
template <KeyPolicy KP>
void CircTree<KP>::TrimEnds(Node* x, bool leaf) {
  const Span s = LoadSpan(x);
  const uint64_t sib = x->hdr.sibling;
  const uint64_t high = sib != 0 ? FenceOf(N(sib)) : 0;
  // Case 7c: the sibling's fence equals this node's own (a merge committed
  // into the sibling, M3): every pair is a copy, an inner node's first too.
  const bool merged = sib != 0 && CompareFences(high, FenceOf(x)) == 0;
  const uint32_t lead = (s.n > 0 && IdOf(At(x, s, 0), leaf) == 0) ? 1 : 0;
  uint32_t top = s.n;
  uint32_t copies = 0;
  LineWriter w(pool_);
  while (top > lead) {
    const Pair* p = At(x, s, static_cast<int64_t>(top) - 1);
    const bool null = IdOf(p, leaf) == 0;
    const bool copy = !null && sib != 0 &&
                      (merged || ((leaf || top - 1 >= 1) && CompareFences(Ld(&p->key), high) >= 0));
    if (!null && !copy) break;
    if (copy) {
      NullPair(w, At(x, s, static_cast<int64_t>(top) - 1), leaf);
      copies++;
    }
    top--;
  }
  w.Finish();
  if (lead == 0 && top == s.n) return;
  Commit(x, s.b + lead, top - lead);
  if (copies > 0 || s.n - top > 1)
    report_.split_cleared++;
  else
    report_.delete_committed++;
}

// Words left in NULL slots by a store that landed without its pair's
// identity word (S1: an insert's first word).  Harmless, but C4 wants NULL
// slots all-zero so Verify can tell a stray pair from an empty slot.
template <KeyPolicy KP>
void CircTree<KP>::ZeroStaleWords(Node* x) {
  const Span s = LoadSpan(x);
  LineWriter w(pool_);
  for (uint32_t i = s.n; i < slots_; i++) {
    Pair* p = At(x, s, i);
    if (p->key == 0 && p->value == 0) continue;
    if (p->key != 0) w.Store(&p->key, 0);
    if (p->value != 0) w.Store(&p->value, 0);
    report_.stale_words_zeroed++;
  }
  w.Finish();
}

template <KeyPolicy KP>
Status CircTree<KP>::RebuildAllocator(const std::vector<std::vector<uint64_t>>& levels) {
  auto& a = pool_->allocator();
  a.BeginRebuild();
  Status s = a.MarkUsed(meta_off_, sizeof(Meta));
  for (size_t L = 0; L < levels.size() && s.ok(); L++) {
    for (uint64_t off : levels[L]) {
      s = a.MarkUsed(off, NodeBytes(node_size_));
      if (!s.ok()) break;
      if constexpr (!KP::kInline) {
        if (L != 0) continue;  // inner key slots share the blobs of leaf low keys
        const Node* x = N(off);
        if (x->hdr.flags & kHasLowKey) s = keys_.MarkUsed(x->hdr.low_key);
        const Span sp = LoadSpan(x);
        for (uint32_t i = 0; i < sp.n && s.ok(); i++) s = keys_.MarkUsed(At(x, sp, i)->key);
        if (!s.ok()) break;
      }
    }
  }
  a.EndRebuild();
  return s;
}

// Cases 7c, 8 and 9 (§5.5: "the number of pointers stored in an IN can be
// one ... more than the actual children ... If one child is found to be
// present in the IN, Circ-Tree deletes it"), bottom-up, before the
// allocator is rebuilt (what they detach is then free):
//   7c  a node whose sibling's fence equals its own: a merge committed into
//       the sibling (M3).  Finish emptying it (M4) and take it out of the
//       chain (M5), or out of its parent when it is the first of its level.
//   8   an inner node naming a node its level's chain no longer holds (IN
//       one child long, a crash between M5 and M6): remove the entry with
//       the delete of §5.3; then any entry whose key is not its child's
//       fence (a crash inside M6) gets the fence.
//   9   a root inner node with one child and no sibling (a crash between M6
//       and M7): the child becomes the root.
template <KeyPolicy KP>
Status CircTree<KP>::FinishMerges(std::vector<std::vector<uint64_t>>* levels) {
  for (size_t L = 0; L + 1 < levels->size(); L++) {
    uint64_t prev = 0;
    for (uint64_t off : (*levels)[L]) {
      Node* x = N(off);
      const uint64_t sib = x->hdr.sibling;
      if (sib == 0 || CompareFences(FenceOf(N(sib)), FenceOf(x)) != 0) {
        prev = off;
        continue;
      }
      TrimEnds(x, L == 0);
      if (prev != 0) {
        pool_->Store64(&N(prev)->hdr.sibling, sib);
        // Persist the unlink (M5) before the parent entry is removed.
        pool_->Persist(&N(prev)->hdr.sibling, sizeof(uint64_t));
      } else {
        for (uint64_t p : (*levels)[L + 1]) {
          const Span s = LoadSpan(N(p));
          if (s.n > 0 && At(N(p), s, 0)->value == off) RemoveAt(p, 0);
        }
      }
      report_.merged_unlinked++;
    }
    PMTREE_RETURN_IF_ERROR(CollectLevels(levels));
    const std::unordered_set<uint64_t> chain((*levels)[L].begin(), (*levels)[L].end());
    for (uint64_t p : (*levels)[L + 1]) {
      Node* x = N(p);
      for (uint32_t i = 0; i < LoadSpan(x).n;) {
        if (chain.count(At(x, LoadSpan(x), i)->value) || LoadSpan(x).n == 1) {
          i++;
          continue;
        }
        RemoveAt(p, i);
        report_.children_unlinked++;
      }
      const Span s = LoadSpan(x);
      for (uint32_t i = 0; i < s.n; i++) {
        Pair* e = At(x, s, i);
        const uint64_t fence = FenceOf(N(e->value));
        if (e->key == fence) continue;
        pool_->Store64(&e->key, fence);
        // Persist the separator (M6's last store).
        pool_->Persist(&e->key, sizeof(uint64_t));
        report_.separators_fixed++;
      }
    }
  }
  for (;;) {
    const uint64_t root = meta_->root;
    const Node* x = N(root);
    const Span s = LoadSpan(x);
    if (x->hdr.level == 0 || x->hdr.sibling != 0 || s.n != 1) break;
    const uint64_t child = At(x, s, 0)->value;
    if (N(child)->hdr.sibling != 0) break;
    CollapseRoot(child);
    report_.roots_collapsed++;
  }
  return CollectLevels(levels);
}

// Cases 4 and 5 (§5.5: "the number of pointers stored in an IN can be one
// less than the actual children ... Circ-Tree traverses its corresponding
// children in the next-level node linked list and compares their addresses
// to the pointers recorded in the IN"), bottom-up.
template <KeyPolicy KP>
Status CircTree<KP>::LinkChildren(std::vector<std::vector<uint64_t>>* levels) {
  if (N(meta_->root)->hdr.sibling != 0) {
    PMTREE_RETURN_IF_ERROR(CompleteRootSplit());
    report_.root_splits_completed++;
    PMTREE_RETURN_IF_ERROR(CollectLevels(levels));
  }
  for (size_t L = 0; L + 1 < levels->size(); L++) {
    std::unordered_set<uint64_t> children;
    for (uint64_t p : (*levels)[L + 1]) {
      const Node* x = N(p);
      const Span s = LoadSpan(x);
      for (uint32_t i = 0; i < s.n; i++) children.insert(At(x, s, i)->value);
    }
    for (uint64_t off : (*levels)[L]) {
      if (children.count(off)) continue;
      const Node* x = N(off);
      if (!(x->hdr.flags & kHasLowKey)) return NodeError(off, "C6", "unlinked node without a low key");
      PMTREE_RETURN_IF_ERROR(InsertSeparator(static_cast<uint32_t>(L + 1), x->hdr.low_key, off));
      report_.children_linked++;
    }
    // Linking may have split nodes of level L + 1 and above.
    PMTREE_RETURN_IF_ERROR(CollectLevels(levels));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Verify, Stats
// ---------------------------------------------------------------------------

// C2-C5 of one node; idx is its position in its level's chain.
template <KeyPolicy KP>
Status CircTree<KP>::CheckNodeInvariants(uint64_t off, size_t idx) const {
  const Node* x = N(off);
  const bool leaf = x->hdr.level == 0;
  const Span s = LoadSpan(x);
  if (x->hdr.lock != 0) return NodeError(off, "C2", "lock word set at rest");
  if (x->hdr.merge != 0) return NodeError(off, "C2", "merge mark set at rest");
  const bool has_low = x->hdr.flags & kHasLowKey;
  if (has_low != (idx != 0))
    return NodeError(off, "C6", idx == 0 ? "first node of its level has a low key" : "missing low key");
  for (uint32_t i = 0; i < s.n; i++)
    if (IdOf(At(x, s, i), leaf) == 0) return NodeError(off, "C3", "NULL pair at logical position " + std::to_string(i));
  const uint32_t from = leaf ? 0 : 1;
  for (uint32_t i = from + 1; i < s.n; i++)
    if (keys_.CompareSlots(At(x, s, i - 1)->key, At(x, s, i)->key) >= 0)
      return NodeError(off, "C3", "keys not strictly increasing at logical position " + std::to_string(i));
  for (uint32_t i = s.n; i < slots_; i++) {
    const Pair* p = At(x, s, i);
    if (p->key != 0 || p->value != 0)
      return NodeError(off, "C4", "slot " + std::to_string(Phys(s.b, i)) + " outside the range is not NULL");
  }
  if (has_low && s.n > from && keys_.CompareSlots(x->hdr.low_key, At(x, s, from)->key) > 0)
    return NodeError(off, "C5", "first key below the low key");
  if (x->hdr.sibling != 0) {
    const uint64_t high = N(x->hdr.sibling)->hdr.low_key;
    if (s.n > from && keys_.CompareSlots(At(x, s, s.n - 1)->key, high) >= 0)
      return NodeError(off, "C5", "last key not below the sibling's low key (split not cleared)");
    if (has_low && keys_.CompareSlots(x->hdr.low_key, high) >= 0)
      return NodeError(off, "C5", "low key not below the sibling's low key");
  }
  if (!leaf && s.n == 0) return NodeError(off, "C3", "inner node without children");
  return Status::Ok();
}

template <KeyPolicy KP>
Status CircTree<KP>::Verify() {
  // Verify runs alone: blocks retired by earlier removals can be freed now,
  // so bytes in use count only what the tree still holds (C10).
  pool_->epochs().DrainAll();
  if (meta_->magic != kMetaMagic || meta_->version != kFormatVersion || meta_->node_size != node_size_)
    return Status::Corruption("circtree meta block at offset " + Hex(meta_off_) + ": invariant C1 violated");
  if (meta_->zero_present > 1 || (!KP::kInline && meta_->zero_present != 0))
    return Status::Corruption("circtree meta block: invariant C11 violated: key-0 flag " +
                              std::to_string(meta_->zero_present));
  std::vector<std::vector<uint64_t>> levels;
  PMTREE_RETURN_IF_ERROR(CollectLevels(&levels));  // C1, C2, C6 (twice), C9
  if (meta_->leaves == 0 || meta_->leaves > levels[0].size())
    return Status::Corruption("circtree meta block at offset " + Hex(meta_off_) +
                              ": invariant C13 violated: leaf count " + std::to_string(meta_->leaves) + " but " +
                              std::to_string(levels[0].size()) + " leaves on the leaf level's chain");
  uint64_t bytes = Allocator::RoundUp(sizeof(Meta));
  const size_t top = levels.size() - 1;
  if (levels[top].size() != 1) return NodeError(levels[top][0], "C6", "the root has a sibling");
  if (top > 0 && LoadSpan(N(levels[top][0])).n < 2)
    return NodeError(levels[top][0], "C12", "inner root with one child (root collapse not done)");
  for (size_t L = 0; L < levels.size(); L++) {
    std::vector<uint64_t> expect_children;
    for (size_t idx = 0; idx < levels[L].size(); idx++) {
      const uint64_t off = levels[L][idx];
      PMTREE_RETURN_IF_ERROR(CheckNodeInvariants(off, idx));
      const Node* x = N(off);
      const Span s = LoadSpan(x);
      bytes += Allocator::RoundUp(NodeBytes(node_size_));
      if (L == 0) {
        if constexpr (!KP::kInline) {
          if (x->hdr.flags & kHasLowKey) bytes += keys_.SlotBytes(x->hdr.low_key);
          for (uint32_t i = 0; i < s.n; i++) bytes += keys_.SlotBytes(At(x, s, i)->key);
        }
        continue;
      }
      for (uint32_t i = 0; i < s.n; i++) {
        const Pair* p = At(x, s, i);
        // A child is compared with the chain below only after it: check it
        // is a node of that level before reading through it.
        PMTREE_RETURN_IF_ERROR(CheckNode(p->value, static_cast<uint32_t>(L - 1)));
        expect_children.push_back(p->value);
        if (i > 0 && p->key != N(p->value)->hdr.low_key)
          return NodeError(off, "C7", "separator " + std::to_string(i) + " differs from its child's low key");
        if (i == 0 && p->key != FenceOf(N(p->value)))
          return NodeError(off, "C7", "first entry's key differs from its child's low key (or 0)");
      }
      if ((x->hdr.flags & kHasLowKey) && x->hdr.low_key != N(At(x, s, 0)->value)->hdr.low_key)
        return NodeError(off, "C8", "low key differs from the leftmost child's low key");
    }
    if (L > 0) {
      PMTREE_RETURN_IF_ERROR(
          CheckChildOrder(levels[L - 1], expect_children, L, "no parent names this node (IN one child short)",
                          [&](uint64_t off, const std::string& what) { return NodeError(off, "C7", what); }));
    }
  }
  return CheckSpaceAccounted("circtree: invariant C10", bytes, spares_.HeldBytes(NodeBytes(node_size_)),
                             pool_->allocator().bytes_in_use());
}

template <KeyPolicy KP>
TreeStats CircTree<KP>::Stats() {
  TreeStats st;
  std::vector<std::vector<uint64_t>> levels;
  if (!CollectLevels(&levels).ok()) return st;
  st.height = static_cast<uint32_t>(levels.size());
  st.pm_bytes = Allocator::RoundUp(sizeof(Meta));
  if (meta_->zero_present == 1) st.entries++;
  for (size_t L = 0; L < levels.size(); L++) {
    for (uint64_t off : levels[L]) {
      const Node* x = N(off);
      const Span s = LoadSpan(x);
      st.pm_bytes += Allocator::RoundUp(NodeBytes(node_size_));
      if (L != 0) {
        st.inner_nodes++;
        continue;
      }
      st.leaf_nodes++;
      st.entries += s.n;
      if constexpr (!KP::kInline) {
        if (x->hdr.flags & kHasLowKey) st.pm_bytes += keys_.SlotBytes(x->hdr.low_key);
        for (uint32_t i = 0; i < s.n; i++) st.pm_bytes += keys_.SlotBytes(At(x, s, i)->key);
      }
    }
  }
  // Spare nodes reserved for splits are allocated and held by the tree.
  st.pm_bytes += spares_.HeldBytes(NodeBytes(node_size_));
  st.leaf_fill = st.leaf_nodes ? static_cast<double>(st.entries) / (st.leaf_nodes * cap_) : 0;
  st.dram_bytes = 4096 * 64;  // the striped version locks
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  st.extra = {
      {"node_size", node_size_},
      {"capacity", cap_},
      {"linear_search", linear_ ? 1 : 0},
      {"left_shifts", d(left_shifts_.load())},
      {"right_shifts", d(right_shifts_.load())},
      {"pairs_shifted", d(pairs_shifted_.load())},
      {"wraps", d(wraps_.load())},
      {"deletes_left", d(deletes_left_.load())},
      {"deletes_right", d(deletes_right_.load())},
      {"splits", d(splits_.load())},
      {"root_splits", d(root_splits_.load())},
      {"recovery_insert_undone", d(report_.insert_undone)},
      {"recovery_insert_committed", d(report_.insert_committed)},
      {"recovery_delete_finished", d(report_.delete_finished)},
      {"recovery_delete_committed", d(report_.delete_committed)},
      {"recovery_split_cleared", d(report_.split_cleared)},
      {"recovery_root_splits_completed", d(report_.root_splits_completed)},
      {"recovery_children_linked", d(report_.children_linked)},
      {"recovery_locks_cleared", d(report_.locks_cleared)},
      {"merges", d(merges_.load())},
      {"root_collapses", d(root_collapses_.load())},
      {"recovery_merges_undone", d(report_.merges_undone)},
      {"recovery_merges_finished", d(report_.merges_finished)},
      {"recovery_merged_unlinked", d(report_.merged_unlinked)},
      {"recovery_children_unlinked", d(report_.children_unlinked)},
      {"recovery_separators_fixed", d(report_.separators_fixed)},
      {"recovery_roots_collapsed", d(report_.roots_collapsed)},
  };
  return st;
}

// ---------------------------------------------------------------------------
// Registry entry points and instantiation
// ---------------------------------------------------------------------------

template <class K, bool Paper>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options) {
  return UpcastTree<BasicTree<K>>(CircTree<KeyPolicyFor<K>>::Create(pool, options, Paper));
}

template <class K, bool Paper>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options) {
  return UpcastTree<BasicTree<K>>(CircTree<KeyPolicyFor<K>>::Recover(pool, options, Paper));
}

// Members defined in this file; circtree.cc instantiates the class itself.
#define PMTREE_CIRCTREE_RECOVERY_MEMBERS(KP)                                                            \
  template Status CircTree<KP>::RecoverFromPool(bool);                                                  \
  template Status CircTree<KP>::CheckNode(uint64_t, uint32_t) const;                                    \
  template Status CircTree<KP>::CollectLevels(std::vector<std::vector<uint64_t>>*, bool);               \
  template void CircTree<KP>::RepairNode(uint64_t, uint64_t);                                           \
  template void CircTree<KP>::RepairMergeMark(Node*, uint64_t);                                         \
  template Status CircTree<KP>::FinishMerges(std::vector<std::vector<uint64_t>>*);                      \
  template bool CircTree<KP>::ResolveInsert(Node*, bool);                                               \
  template bool CircTree<KP>::FinishDelete(Node*, bool);                                                \
  template void CircTree<KP>::TrimEnds(Node*, bool);                                                    \
  template void CircTree<KP>::ZeroStaleWords(Node*);                                                    \
  template Status CircTree<KP>::RebuildAllocator(const std::vector<std::vector<uint64_t>>&);            \
  template Status CircTree<KP>::LinkChildren(std::vector<std::vector<uint64_t>>*);                      \
  template Status CircTree<KP>::CheckNodeInvariants(uint64_t, size_t) const;                            \
  template Status CircTree<KP>::Verify();                                                               \
  template TreeStats CircTree<KP>::Stats();
PMTREE_CIRCTREE_RECOVERY_MEMBERS(U64Keys)
PMTREE_CIRCTREE_RECOVERY_MEMBERS(BytesKeys)
#undef PMTREE_CIRCTREE_RECOVERY_MEMBERS

template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t, false>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t, true>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Create<std::string_view, false>(PoolImpl*,
                                                                                            const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t, false>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t, true>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Recover<std::string_view, false>(PoolImpl*,
                                                                                             const TreeOptions&);

}  // namespace pmtree::circtree
