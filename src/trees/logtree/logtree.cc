// SPDX-License-Identifier: Apache-2.0
//
// LogTree: the LCB+Tree baseline of the NV-Tree paper.  See logtree.h for the
// contract and docs/trees/logtree.md for write orders, recovery rules and the
// invariants numbered below.

#include "trees/common/bulk_input.h"
#include "trees/common/partition_point.h"
#include "trees/common/upcast.h"
#include "trees/logtree/logtree.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

namespace pmtree {

using logtree::kLogMagic;
using logtree::kLogSlots;
using logtree::kMaxHeight;
using logtree::kMaxNodeSize;
using logtree::kMetaMagic;
using logtree::kNodeTag;
using logtree::LogHeader;
using logtree::LogRecordHeader;
using logtree::LogTreeMeta;
using logtree::NodeCapacity;
using logtree::NodeEntry;
using logtree::NodeHeader;
using logtree::StopPoint;

namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

bool ValidNodeSize(uint32_t n) { return n == 512 || n == 1024 || n == 2048 || n == 4096; }

Status CheckOptions(const TreeOptions& o) {
  if (!o.extra.empty())
    return Status::InvalidArgument("logtree: unknown option '" + o.extra.begin()->first +
                                   "' (logtree takes no extra options)");
  if (o.node_size != 0 && !ValidNodeSize(o.node_size))
    return Status::InvalidArgument("logtree: node_size " + std::to_string(o.node_size) +
                                   " is invalid; valid sizes: 512, 1024, 2048, 4096 (0 = 512)");
  return Status::Ok();
}

// A node image in DRAM: operations build the new content of a node here and
// then write only the words that differ (Txn::Apply).
struct alignas(64) RawNode {
  unsigned char raw[kMaxNodeSize];
};

}  // namespace

// ---------------------------------------------------------------------------
// NodeBuf: a DRAM copy of one node.

template <KeyPolicy KP>
struct LogTree<KP>::NodeBuf {
  RawNode n;
  NodeHeader& h() { return *reinterpret_cast<NodeHeader*>(n.raw); }
  const NodeHeader& h() const { return *reinterpret_cast<const NodeHeader*>(n.raw); }
  NodeEntry* e() { return reinterpret_cast<NodeEntry*>(n.raw + sizeof(NodeHeader)); }
  const NodeEntry* e() const { return reinterpret_cast<const NodeEntry*>(n.raw + sizeof(NodeHeader)); }

  void Load(const PoolImpl* pool, uint64_t off, uint32_t node_size) {
    std::memcpy(n.raw, pool->At<char>(off), node_size);
  }
  void Init(uint16_t level, uint64_t link) {
    h().level = level;
    h().count = 0;
    h().tag = kNodeTag;
    h().link = link;
  }
  void InsertAt(uint32_t pos, uint64_t key, uint64_t value) {
    NodeEntry* es = e();
    std::memmove(es + pos + 1, es + pos, (h().count - pos) * sizeof(NodeEntry));
    es[pos] = NodeEntry{key, value};
    h().count++;
  }
  void RemoveAt(uint32_t pos) {
    NodeEntry* es = e();
    std::memmove(es + pos, es + pos + 1, (h().count - pos - 1) * sizeof(NodeEntry));
    h().count--;
  }
  void Append(uint64_t key, uint64_t value) { e()[h().count++] = NodeEntry{key, value}; }
  // Child i of an inner node: 0 is `link`, i > 0 is entry i - 1's value.
  uint64_t Child(uint32_t i) const { return i == 0 ? h().link : e()[i - 1].value; }
};

// ---------------------------------------------------------------------------
// Txn: one operation's undo-log record sequence.
//
// Write order of every mutating operation (docs/trees/logtree.md, "Write
// orders"):
//   for each existing node (or the meta line) the operation changes, before
//   its first store to it:
//     W1  copy the original bytes into record slot i; persist the record
//     W2  store count = i + 1; persist it
//   W3  write the changed words of the node; flush their lines
//   new nodes: write them whole and flush them (no record: nothing reaches
//   them until a logged node links them, and undo unlinks them)
//   W4  fence (every flush of W3 and of new nodes complete)
//   W5  store count = 0; persist it -- the commit
// Only after W5 are replaced nodes freed and removed keys' blobs released.

template <KeyPolicy KP>
class LogTree<KP>::Txn {
 public:
  explicit Txn(LogTree* t) : t_(t), pool_(t->pool_) {}

  // W1 + W2 for [target, target + len), once per target per operation.
  // Returns the record's 1-based index in *index.
  Status Log(uint64_t target, uint32_t len, uint32_t* index = nullptr) {
    for (size_t i = 0; i < logged_.size(); i++) {
      if (logged_[i] == target) {
        if (index) *index = static_cast<uint32_t>(i + 1);
        return Status::Ok();
      }
    }
    if (std::find(allocated_.begin(), allocated_.end(), target) != allocated_.end()) {
      if (index) *index = 0;
      return Status::Ok();  // a node of this operation: undo makes it unreachable
    }
    if (logged_.size() >= t_->log_slots_)
      return Status::Internal("logtree: undo log at offset " + Hex(t_->log_off_) + " full (" +
                              std::to_string(t_->log_slots_) + " records)");
    uint32_t seq = static_cast<uint32_t>(logged_.size());
    char* slot = RecordSlot(seq);
    LogRecordHeader rh{};
    rh.target = target;
    rh.len = len;
    rh.seq = seq;
    pool_->Write(slot, &rh, sizeof(rh));
    pool_->Write(slot + sizeof(rh), pool_->At<char>(target), len);
    // Persist the record before counting it, so a crash never lets recovery
    // copy back a half-written original.
    pool_->Persist(slot, sizeof(rh) + len);
    pool_->Store64(&t_->log_header()->count, seq + 1);
    // Persist the count before the first store to the target, so a crash
    // during the change always finds the record that undoes it.
    pool_->Persist(&t_->log_header()->count, sizeof(uint64_t));
    logged_.push_back(target);
    t_->counts_.records_logged++;
    if (index) *index = seq + 1;
    if (t_->stop_point_ == StopPoint::kAfterLogRecord && seq + 1 == t_->stop_record_)
      return Stop("after undo record " + std::to_string(seq + 1) + " was persisted");
    return Status::Ok();
  }

  // Logs the node at `off` (W1, W2), then writes the words of `buf` that
  // differ from it and flushes their lines (W3).
  Status Apply(uint64_t off, const NodeBuf& buf) {
    uint32_t index = 0;
    PMTREE_RETURN_IF_ERROR(Log(off, t_->node_size_, &index));
    const bool mid_stop = t_->stop_point_ == StopPoint::kMidNode && index == t_->stop_record_;
    char* dst = pool_->At<char>(off);
    const auto* old_words = reinterpret_cast<const uint64_t*>(dst);
    const auto* new_words = reinterpret_cast<const uint64_t*>(buf.n.raw);
    const size_t words = t_->node_size_ / 8;
    size_t budget = words;
    if (mid_stop) {
      size_t changed = 0;
      for (size_t i = 0; i < words; i++) changed += old_words[i] != new_words[i];
      budget = std::max<size_t>(1, changed / 2);
    }
    uint64_t dirty_lines = 0;  // bit l: line l of the node was written (<= 64 lines)
    size_t written = 0;
    for (size_t i = 0; i < words && written < budget;) {
      if (old_words[i] == new_words[i]) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < words && old_words[j] != new_words[j] && written + (j - i) < budget) j++;
      pool_->Write(dst + i * 8, new_words + i, (j - i) * 8);
      for (size_t l = i / 8; l <= (j - 1) / 8; l++) dirty_lines |= 1ull << l;
      written += j - i;
      i = j;
    }
    for (uint32_t l = 0; l < 64 && dirty_lines != 0;) {
      if (!(dirty_lines >> l & 1)) {
        l++;
        continue;
      }
      uint32_t m = l;
      while (m < 64 && (dirty_lines >> m & 1)) dirty_lines &= ~(1ull << m++);
      // Start the write-back of the changed lines; the fence before the
      // commit (W4) completes it, so a committed operation is never partial.
      pool_->Flush(dst + l * 64, (m - l) * 64);
      l = m;
    }
    if (mid_stop) {
      // Test hook only: make the half-written node durable, the worst state a
      // crash between W3's stores can leave.
      pool_->Fence();
      return Stop("half-way through the node of undo record " + std::to_string(index));
    }
    return Status::Ok();
  }

  // Writes a node allocated by this operation: header and live entries.
  void WriteNew(uint64_t off, const NodeBuf& buf) {
    size_t n = sizeof(NodeHeader) + static_cast<size_t>(buf.h().count) * sizeof(NodeEntry);
    char* dst = pool_->At<char>(off);
    pool_->Write(dst, buf.n.raw, n);
    // Start the write-back of the new node; W4 completes it before the
    // commit, so a committed link never names an unwritten node.
    pool_->Flush(dst, n);
  }

  // Points the meta block at a new root, under the log.
  Status SetRoot(uint64_t new_root) {
    PMTREE_RETURN_IF_ERROR(Log(t_->meta_off_, sizeof(LogTreeMeta)));
    auto* m = pool_->At<LogTreeMeta>(t_->meta_off_);
    pool_->Store64(&m->root, new_root);
    // Start the write-back of the root pointer; W4 completes it before the
    // commit.
    pool_->Flush(&m->root, sizeof(uint64_t));
    return Status::Ok();
  }

  Result<uint64_t> AllocNode() {
    PMTREE_ASSIGN_OR_RETURN(uint64_t off, pool_->allocator().Allocate(t_->node_size_));
    allocated_.push_back(off);
    return off;
  }
  Result<uint64_t> MakeSlot(Arg key) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t slot, t_->keys_.MakeSlot(key));
    if (!KP::kInline) made_slots_.push_back(slot);
    return slot;
  }
  // A bulk load's key: flushed only; W4's fence completes it before the
  // commit (keys.h, MakeSlotUnfenced).
  Result<uint64_t> MakeSlotUnfenced(Arg key) {
    PMTREE_ASSIGN_OR_RETURN(uint64_t slot, t_->keys_.MakeSlotUnfenced(key));
    if (!KP::kInline) made_slots_.push_back(slot);
    return slot;
  }
  // A separator's own copy of a leaf key (inner nodes never share key blobs
  // with leaves, so removing a leaf key never invalidates a separator).
  Result<uint64_t> CopySlot(uint64_t slot) {
    if constexpr (KP::kInline) {
      return slot;
    } else {
      auto owned = t_->keys_.Load(slot);
      return MakeSlot(Arg(owned));
    }
  }
  void FreeAfterCommit(uint64_t node_off) { free_nodes_.push_back(node_off); }
  void ReleaseAfterCommit(uint64_t slot) {
    if (!KP::kInline) release_slots_.push_back(slot);
  }

  // W4 + W5, then the deferred frees.
  Status Commit() {
    if (!logged_.empty()) {
      // Complete every node flush (W3, new nodes) before the commit store,
      // so a crash after the commit never finds a node half-persisted.
      pool_->Fence();
      if (t_->stop_point_ == StopPoint::kBeforeCommit) return Stop("before the commit store");
      pool_->Store64(&t_->log_header()->count, 0);
      // Persist the commit before returning: the durability contract, and
      // the point after which recovery keeps this operation.
      pool_->Persist(&t_->log_header()->count, sizeof(uint64_t));
    }
    // No reader runs (writers hold the lock exclusively), so replaced nodes
    // can be freed at once; key blobs go through the epochs (keys.h).
    for (uint64_t off : free_nodes_) pool_->allocator().Free(off, t_->node_size_);
    for (uint64_t slot : release_slots_) t_->keys_.Release(slot);
    Clear();
    return Status::Ok();
  }

  // Rolls the operation back in process (e.g. out of space half-way through
  // a split): the same undo as recovery, then the allocations are returned.
  void Abort() {
    Status s = t_->UndoLog(nullptr);
    assert(s.ok());
    (void)s;
    for (uint64_t off : allocated_) pool_->allocator().Free(off, t_->node_size_);
    for (uint64_t slot : made_slots_) t_->keys_.Release(slot);
    t_->counts_.aborted_operations++;
    Clear();
  }

 private:
  char* RecordSlot(uint32_t i) const {
    return pool_->At<char>(t_->log_off_) + sizeof(LogHeader) +
           static_cast<uint64_t>(i) * (sizeof(LogRecordHeader) + t_->node_size_);
  }
  Status Stop(const std::string& where) {
    t_->stopped_ = true;
    return Status::Internal("logtree: operation stopped by the test hook " + where);
  }
  void Clear() {
    logged_.clear();
    allocated_.clear();
    made_slots_.clear();
    free_nodes_.clear();
    release_slots_.clear();
  }

  LogTree* t_;
  PoolImpl* pool_;
  std::vector<uint64_t> logged_;     // targets of records 1..n, in order
  std::vector<uint64_t> allocated_;  // nodes allocated by this operation
  std::vector<uint64_t> made_slots_;
  std::vector<uint64_t> free_nodes_;
  std::vector<uint64_t> release_slots_;
};

// ---------------------------------------------------------------------------
// Lifecycle

template <KeyPolicy KP>
LogTree<KP>::LogTree(PoolImpl* pool, uint64_t meta_off) : pool_(pool), keys_(pool), meta_off_(meta_off) {
  const LogTreeMeta* m = meta();
  log_off_ = m->log;
  node_size_ = m->node_size;
  cap_ = NodeCapacity(node_size_);
  log_slots_ = m->log_slots;
  for (auto& b : bufs_) b = std::make_unique<NodeBuf>();
  scratch_entries_.reserve(cap_ + 1);
}

template <KeyPolicy KP>
LogTree<KP>::~LogTree() = default;

template <KeyPolicy KP>
uint64_t LogTree<KP>::log_bytes() const {
  return sizeof(LogHeader) + static_cast<uint64_t>(log_slots_) * (sizeof(LogRecordHeader) + node_size_);
}

template <KeyPolicy KP>
uint32_t LogTree<KP>::capabilities() const {
  return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart;
}

template <KeyPolicy KP>
Result<std::unique_ptr<LogTree<KP>>> LogTree<KP>::Create(PoolImpl* pool, const TreeOptions& options) {
  if (pool == nullptr) return Status::InvalidArgument("logtree: needs a pool");
  PMTREE_RETURN_IF_ERROR(CheckOptions(options));
  if (pool->root(0) != 0) return Status::Busy("logtree: pool already holds a tree (root slot 0 is set)");
  const uint32_t node_size = options.node_size == 0 ? logtree::kDefaultNodeSize : options.node_size;
  const uint64_t log_size =
      sizeof(LogHeader) + static_cast<uint64_t>(kLogSlots) * (sizeof(LogRecordHeader) + node_size);

  Allocator& a = pool->allocator();
  auto meta_r = a.Allocate(sizeof(LogTreeMeta));
  if (!meta_r.ok()) return meta_r.status();
  auto log_r = a.Allocate(log_size);
  if (!log_r.ok()) {
    a.Free(*meta_r, sizeof(LogTreeMeta));
    return log_r.status();
  }
  auto root_r = a.Allocate(node_size);
  if (!root_r.ok()) {
    a.Free(*meta_r, sizeof(LogTreeMeta));
    a.Free(*log_r, log_size);
    return root_r.status();
  }

  NodeHeader leaf{};
  leaf.level = 0;
  leaf.count = 0;
  leaf.tag = kNodeTag;
  leaf.link = 0;
  pool->Write(pool->At<char>(*root_r), &leaf, sizeof(leaf));
  // Start the write-back of the empty root leaf; the Persist of the meta
  // block below completes it before root slot 0 can name the tree.
  pool->Flush(pool->At<char>(*root_r), sizeof(leaf));

  LogHeader lh{};
  lh.count = 0;
  lh.magic = kLogMagic;
  lh.slots = kLogSlots;
  lh.slot_size = static_cast<uint32_t>(sizeof(LogRecordHeader) + node_size);
  pool->Write(pool->At<char>(*log_r), &lh, sizeof(lh));
  // Start the write-back of the empty log header (count 0, so recovery of
  // the new tree undoes nothing); completed by the Persist below.
  pool->Flush(pool->At<char>(*log_r), sizeof(lh));

  LogTreeMeta m{};
  m.magic = kMetaMagic;
  m.version = logtree::kLayoutVersion;
  m.node_size = node_size;
  m.key_kind = static_cast<uint32_t>(KP::kKind);
  m.log_slots = kLogSlots;
  m.root = *root_r;
  m.log = *log_r;
  pool->Write(pool->At<char>(*meta_r), &m, sizeof(m));
  // Persist the root leaf, the empty log and the meta block before root slot
  // 0 names the meta block, so a crash never exposes a half-made tree.
  pool->Persist(pool->At<char>(*meta_r), sizeof(m));
  pool->SetRoot(0, *meta_r);
  return std::unique_ptr<LogTree>(new LogTree(pool, *meta_r));
}

template <KeyPolicy KP>
Result<std::unique_ptr<LogTree<KP>>> LogTree<KP>::Recover(PoolImpl* pool, const TreeOptions& options) {
  if (pool == nullptr) return Status::InvalidArgument("logtree: needs a pool");
  if (!options.extra.empty()) PMTREE_RETURN_IF_ERROR(CheckOptions(options));
  const uint64_t meta_off = pool->root(0);
  if (meta_off == 0) return Status::NotFound("logtree: pool root slot 0 is empty (no tree was created)");
  // Invariant 1 (meta), checked before anything is followed.
  if (meta_off % kAllocGranule != 0 || !pool->InHeap(meta_off, sizeof(LogTreeMeta)))
    return Status::Corruption("logtree: meta offset " + Hex(meta_off) + " outside the heap (invariant 1)");
  const auto* m = pool->At<LogTreeMeta>(meta_off);
  if (m->magic != kMetaMagic)
    return Status::Corruption("logtree meta at offset " + Hex(meta_off) + ": bad magic (invariant 1)");
  if (m->version != logtree::kLayoutVersion)
    return Status::Incompatible("logtree meta at offset " + Hex(meta_off) + ": layout version " +
                                std::to_string(m->version) + ", this build reads " +
                                std::to_string(logtree::kLayoutVersion));
  if (m->key_kind != static_cast<uint32_t>(KP::kKind))
    return Status::Incompatible("logtree meta at offset " + Hex(meta_off) + ": pool holds " +
                                (m->key_kind == 0 ? "u64" : "byte-string") + " keys");
  if (!ValidNodeSize(m->node_size) || m->log_slots == 0 || m->log_slots > 4096)
    return Status::Corruption("logtree meta at offset " + Hex(meta_off) + ": node_size " +
                              std::to_string(m->node_size) + " / log_slots " + std::to_string(m->log_slots) +
                              " invalid (invariant 1)");
  const uint64_t log_size =
      sizeof(LogHeader) + static_cast<uint64_t>(m->log_slots) * (sizeof(LogRecordHeader) + m->node_size);
  if (m->log % kAllocGranule != 0 || !pool->InHeap(m->log, log_size))
    return Status::Corruption("logtree meta at offset " + Hex(meta_off) + ": log offset " + Hex(m->log) +
                              " outside the heap (invariant 1)");
  const auto* lh = pool->At<LogHeader>(m->log);
  if (lh->magic != kLogMagic || lh->slots != m->log_slots || lh->slot_size != sizeof(LogRecordHeader) + m->node_size)
    return Status::Corruption("logtree log at offset " + Hex(m->log) + ": bad header (invariant 2)");
  // A clean close leaves no operation in flight, so its log is empty (as
  // Verify checks between operations): records in the log of a cleanly
  // closed pool are damage.  Undoing them would copy damaged bytes into
  // nodes and rebuild the allocator from what those reach, absorbing
  // whatever they cut off.
  if (pool->clean_shutdown() && PoolImpl::Load64(&lh->count) != 0)
    return Status::Corruption("logtree log at offset " + Hex(m->log) + ": " + std::to_string(lh->count) +
                              " records after a clean close (invariant 2)");

  std::unique_ptr<LogTree> t(new LogTree(pool, meta_off));
  uint64_t undone_records = 0;
  // Recovery rule R1: an uncommitted record sequence is undone.
  PMTREE_RETURN_IF_ERROR(t->UndoLog(&undone_records));
  t->counts_.records_undone = undone_records;
  const bool undone = undone_records != 0;
  // Recovery rule R2: after a crash (or an undo) the allocator is rebuilt
  // from what the root reaches; after a clean shutdown the pool restored it.
  if (undone || !pool->clean_shutdown()) PMTREE_RETURN_IF_ERROR(t->RebuildAllocator());
  return t;
}

// Recovery rule R1.  Crash window: between an operation's first W2 and its
// W5.  The log then holds count > 0 valid records (W1 precedes W2), each the
// original of a target the operation may have half-changed.  Copying every
// original back restores the state before the operation; new nodes it wrote
// are unreachable again.  A crash during the undo leaves count unchanged, so
// the undo is simply repeated (it is idempotent).
template <KeyPolicy KP>
Status LogTree<KP>::UndoLog(uint64_t* undone_records) {
  if (undone_records) *undone_records = 0;
  LogHeader* lh = log_header();
  const uint64_t count = PoolImpl::Load64(&lh->count);
  if (count == 0) return Status::Ok();
  if (count > log_slots_)
    return Status::Corruption("logtree log at offset " + Hex(log_off_) + ": count " + std::to_string(count) +
                              " exceeds " + std::to_string(log_slots_) + " slots (invariant 2)");
  const uint64_t slot_size = sizeof(LogRecordHeader) + node_size_;
  char* first = pool_->At<char>(log_off_) + sizeof(LogHeader);
  // Validate every record before copying any back.
  for (uint64_t i = 0; i < count; i++) {
    const auto* rh = reinterpret_cast<const LogRecordHeader*>(first + i * slot_size);
    if (rh->seq != i || rh->len == 0 || rh->len % 8 != 0 || rh->len > node_size_ || rh->target % 8 != 0 ||
        !pool_->InHeap(rh->target, rh->len) ||
        (rh->target < log_off_ + log_bytes() && rh->target + rh->len > log_off_))
      return Status::Corruption("logtree undo record " + std::to_string(i) + " at offset " +
                                Hex(pool_->OffsetOf(rh)) + ": target " + Hex(rh->target) + " len " +
                                std::to_string(rh->len) + " invalid (invariant 2)");
  }
  for (uint64_t i = count; i-- > 0;) {
    const auto* rh = reinterpret_cast<const LogRecordHeader*>(first + i * slot_size);
    char* target = pool_->At<char>(rh->target);
    pool_->Write(target, first + i * slot_size + sizeof(LogRecordHeader), rh->len);
    // Flush the restored original; the fence below completes every copy
    // before the log is emptied.
    pool_->Flush(target, rh->len);
  }
  // Complete the copies before emptying the log, so a crash now repeats the
  // undo instead of keeping a half-restored node.
  pool_->Fence();
  pool_->Store64(&lh->count, 0);
  // Persist the empty log, so the restored state is the durable one before
  // any new operation writes records.
  pool_->Persist(&lh->count, sizeof(uint64_t));
  if (undone_records) *undone_records = count;
  return Status::Ok();
}

template <KeyPolicy KP>
Status LogTree<KP>::RebuildAllocator() {
  Allocator& a = pool_->allocator();
  a.BeginRebuild();
  Status s = a.MarkUsed(meta_off_, sizeof(LogTreeMeta));
  if (s.ok()) s = a.MarkUsed(log_off_, log_bytes());
  const uint64_t r = root();
  if (s.ok()) {
    if (r % kAllocGranule != 0 || !pool_->InHeap(r, node_size_)) {
      s = Status::Corruption("logtree meta at offset " + Hex(meta_off_) + ": root " + Hex(r) +
                             " outside the heap (invariant 1)");
    } else {
      const uint32_t level = node(r)->level;
      if (level + 1u > kMaxHeight)
        s = Status::Corruption("logtree root at offset " + Hex(r) + ": level " + std::to_string(level) +
                               " too high (invariant 5)");
      else
        s = WalkForRebuild(r, level, 0);
    }
  }
  a.EndRebuild();
  return s;
}

template <KeyPolicy KP>
Status LogTree<KP>::WalkForRebuild(uint64_t off, uint32_t level, uint32_t depth) {
  if (off % kAllocGranule != 0 || !pool_->InHeap(off, node_size_))
    return Status::Corruption("logtree node offset " + Hex(off) + " outside the heap (invariant 3)");
  const NodeHeader* h = node(off);
  if (h->tag != kNodeTag || h->level != level || h->count > cap_ || depth >= kMaxHeight)
    return Status::Corruption("logtree node at offset " + Hex(off) + ": bad tag, level or count (invariants 3-5)");
  // MarkUsed fails on overlap, so a node reached twice (a cycle) is caught.
  PMTREE_RETURN_IF_ERROR(pool_->allocator().MarkUsed(off, node_size_));
  const NodeEntry* es = entries(off);
  for (uint32_t i = 0; i < h->count; i++) PMTREE_RETURN_IF_ERROR(keys_.MarkUsed(es[i].key));
  if (level == 0) return Status::Ok();
  for (uint32_t i = 0; i <= h->count; i++) PMTREE_RETURN_IF_ERROR(WalkForRebuild(Child(off, i), level - 1, depth + 1));
  return Status::Ok();
}

template <KeyPolicy KP>
Status LogTree<KP>::Close() {
  std::unique_lock lock(mu_);
  if (stopped_) return Status::Busy("logtree: stopped by the test hook; destroy it without Close and recover");
  if (closed_) return Status::Ok();
  closed_ = true;
  // The log is empty between operations, so nothing needs persisting beyond
  // what Pool::Close saves (the allocator state, the clean flag).
  return pool_->Close();
}

template <KeyPolicy KP>
Status LogTree<KP>::CheckUsable() const {
  if (closed_) return Status::Busy("logtree: tree is closed");
  if (stopped_) return Status::Busy("logtree: stopped by the test hook; destroy it without Close and recover");
  return Status::Ok();
}

template <KeyPolicy KP>
void LogTree<KP>::SetStopPoint(StopPoint point, uint32_t record) {
  std::unique_lock lock(mu_);
  stop_point_ = point;
  stop_record_ = record;
}

template <KeyPolicy KP>
logtree::LogTreeCounts LogTree<KP>::counts() const {
  std::shared_lock lock(mu_);
  return counts_;
}

// ---------------------------------------------------------------------------
// Search

template <KeyPolicy KP>
uint32_t LogTree<KP>::LowerBound(uint64_t off, Arg key) const {
  const NodeEntry* es = entries(off);
  return PartitionPoint(0, node(off)->count, [&](uint32_t i) { return keys_.Compare(es[i].key, key) < 0; });
}

template <KeyPolicy KP>
uint32_t LogTree<KP>::UpperBound(uint64_t off, Arg key) const {
  const NodeEntry* es = entries(off);
  return PartitionPoint(0, node(off)->count, [&](uint32_t i) { return keys_.Compare(es[i].key, key) <= 0; });
}

template <KeyPolicy KP>
uint64_t LogTree<KP>::Child(uint64_t off, uint32_t i) const {
  return i == 0 ? node(off)->link : entries(off)[i - 1].value;
}

template <KeyPolicy KP>
uint64_t LogTree<KP>::FindLeaf(Arg key, std::vector<PathStep>* path) const {
  uint64_t off = root();
  while (node(off)->level > 0) {
    uint32_t j = UpperBound(off, key);
    if (path) path->push_back(PathStep{off, j});
    off = Child(off, j);
  }
  return off;
}

template <KeyPolicy KP>
bool LogTree<KP>::Lookup(Arg key, uint64_t* value) {
  std::shared_lock lock(mu_);
  if (!CheckUsable().ok()) return false;
  uint64_t leaf = FindLeaf(key, nullptr);
  uint32_t pos = LowerBound(leaf, key);
  if (pos >= node(leaf)->count) return false;
  const NodeEntry& e = entries(leaf)[pos];
  if (!keys_.Equal(e.key, key)) return false;
  if (value) *value = e.value;
  return true;
}

template <KeyPolicy KP>
size_t LogTree<KP>::Scan(Arg start, const Arg* end, std::span<Entry> out) {
  std::shared_lock lock(mu_);
  if (out.empty() || !CheckUsable().ok()) return 0;
  size_t n = 0;
  uint64_t leaf = FindLeaf(start, nullptr);
  uint32_t pos = LowerBound(leaf, start);
  while (leaf != 0) {
    const NodeHeader* h = node(leaf);
    const NodeEntry* es = entries(leaf);
    for (uint32_t i = pos; i < h->count; i++) {
      if (end != nullptr && keys_.Compare(es[i].key, *end) > 0) return n;
      out[n++] = Entry(keys_.Load(es[i].key), es[i].value);
      if (n == out.size()) return n;
    }
    leaf = h->link;  // the leaf list, in key order (invariant 8)
    pos = 0;
  }
  return n;
}

// ---------------------------------------------------------------------------
// Insert, update, upsert

template <KeyPolicy KP>
Status LogTree<KP>::Finish(Txn& txn, Status s) {
  if (s.ok()) return txn.Commit();
  if (!stopped_) txn.Abort();  // a stopped operation is left as a crash would leave it
  return s;
}

template <KeyPolicy KP>
Result<bool> LogTree<KP>::Insert(Arg key, uint64_t value) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  std::unique_lock lock(mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  bool existed = false;
  PMTREE_RETURN_IF_ERROR(InsertLocked(key, value, &existed, true, false));
  return !existed;
}

template <KeyPolicy KP>
Result<bool> LogTree<KP>::Update(Arg key, uint64_t value) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  std::unique_lock lock(mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  bool existed = false;
  PMTREE_RETURN_IF_ERROR(InsertLocked(key, value, &existed, false, true));
  return existed;
}

template <KeyPolicy KP>
Result<bool> LogTree<KP>::Upsert(Arg key, uint64_t value) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  std::unique_lock lock(mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  bool existed = false;
  PMTREE_RETURN_IF_ERROR(InsertLocked(key, value, &existed, true, true));
  return !existed;
}

// Insert (allow_insert) and/or update in place (allow_update).  *existed
// reports whether the key was present.  Splits run bottom-up along the path,
// each split node logged before it changes, all under one record sequence.
template <KeyPolicy KP>
Status LogTree<KP>::InsertLocked(Arg key, uint64_t value, bool* existed, bool allow_insert, bool allow_update) {
  std::vector<PathStep> path;
  const uint64_t leaf = FindLeaf(key, &path);
  const uint32_t pos = LowerBound(leaf, key);
  *existed = pos < node(leaf)->count && keys_.Equal(entries(leaf)[pos].key, key);
  if (*existed && !allow_update) return Status::Ok();
  if (!*existed && !allow_insert) return Status::Ok();

  // Rewriting a value with itself changes no byte: nothing to log or persist.
  if (*existed && entries(leaf)[pos].value == value) return Status::Ok();

  Txn txn(this);
  NodeBuf& cur = *bufs_[0];
  cur.Load(pool_, leaf, node_size_);
  if (*existed) {
    // Update in place: one logged node, one changed word.
    cur.e()[pos].value = value;
    return Finish(txn, txn.Apply(leaf, cur));
  }

  auto slot_r = txn.MakeSlot(key);
  if (!slot_r.ok()) return Finish(txn, slot_r.status());
  uint64_t ins_key = *slot_r, ins_value = value, cur_off = leaf;
  uint32_t ins_pos = pos;
  NodeBuf& right = *bufs_[1];
  std::vector<NodeEntry>& all = scratch_entries_;
  while (true) {
    if (cur.h().count < cap_) {
      cur.InsertAt(ins_pos, ins_key, ins_value);
      return Finish(txn, txn.Apply(cur_off, cur));
    }
    // Split: the left half stays in cur_off, the right half moves to a new node.
    auto new_r = txn.AllocNode();
    if (!new_r.ok()) return Finish(txn, new_r.status());
    const uint64_t new_off = *new_r;
    const uint32_t n = cur.h().count;
    all.assign(cur.e(), cur.e() + n);
    all.insert(all.begin() + ins_pos, NodeEntry{ins_key, ins_value});
    const uint32_t total = n + 1;
    uint64_t sep;
    const bool is_leaf = cur.h().level == 0;
    if (is_leaf) {
      const uint32_t left_n = (total + 1) / 2;
      right.Init(0, cur.h().link);
      for (uint32_t i = left_n; i < total; i++) right.Append(all[i].key, all[i].value);
      cur.h().count = 0;
      for (uint32_t i = 0; i < left_n; i++) cur.Append(all[i].key, all[i].value);
      cur.h().link = new_off;  // the leaf list: left -> right -> old successor
      auto sep_r = txn.CopySlot(all[left_n].key);
      if (!sep_r.ok()) return Finish(txn, sep_r.status());
      sep = *sep_r;
      counts_.leaf_splits++;
    } else {
      // The middle separator moves up; its right child becomes child 0 of
      // the new node.
      const uint32_t mid = total / 2;
      right.Init(cur.h().level, all[mid].value);
      for (uint32_t i = mid + 1; i < total; i++) right.Append(all[i].key, all[i].value);
      cur.h().count = 0;
      for (uint32_t i = 0; i < mid; i++) cur.Append(all[i].key, all[i].value);
      sep = all[mid].key;
      counts_.inner_splits++;
    }
    txn.WriteNew(new_off, right);
    Status s = txn.Apply(cur_off, cur);
    if (!s.ok()) return Finish(txn, s);

    if (path.empty()) {
      // Root split: a new root above the two halves, named by the meta
      // block under the log.
      if (cur.h().level + 2u > kMaxHeight)
        return Finish(txn, Status::OutOfSpace("logtree: tree height limit " + std::to_string(kMaxHeight) +
                                              " reached"));
      auto root_r = txn.AllocNode();
      if (!root_r.ok()) return Finish(txn, root_r.status());
      NodeBuf& nr = *bufs_[2];
      nr.Init(static_cast<uint16_t>(cur.h().level + 1), cur_off);
      nr.Append(sep, new_off);
      txn.WriteNew(*root_r, nr);
      counts_.root_splits++;
      return Finish(txn, txn.SetRoot(*root_r));
    }
    const PathStep up = path.back();
    path.pop_back();
    cur.Load(pool_, up.node, node_size_);
    cur_off = up.node;
    ins_pos = up.child;  // the new node becomes child up.child + 1
    ins_key = sep;
    ins_value = new_off;
  }
}

// ---------------------------------------------------------------------------
// Remove

template <KeyPolicy KP>
Result<bool> LogTree<KP>::Remove(Arg key) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  std::unique_lock lock(mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  bool removed = false;
  PMTREE_RETURN_IF_ERROR(RemoveLocked(key, &removed));
  return removed;
}

// Removes the entry, then walks up while the node underflows (fewer than
// cap/4 entries): it merges into its left sibling when both fit in one node,
// else absorbs its right sibling when both fit, else stays underfull (no
// borrowing: "merge when it fits", docs/trees/logtree.md).  An inner root
// left with no separator is replaced by its only child.
template <KeyPolicy KP>
Status LogTree<KP>::RemoveLocked(Arg key, bool* removed) {
  std::vector<PathStep> path;
  const uint64_t leaf = FindLeaf(key, &path);
  const uint32_t pos = LowerBound(leaf, key);
  *removed = pos < node(leaf)->count && keys_.Equal(entries(leaf)[pos].key, key);
  if (!*removed) return Status::Ok();

  Txn txn(this);
  NodeBuf* cur = bufs_[0].get();
  NodeBuf* par = bufs_[1].get();
  NodeBuf* sib = bufs_[2].get();
  cur->Load(pool_, leaf, node_size_);
  txn.ReleaseAfterCommit(cur->e()[pos].key);
  cur->RemoveAt(pos);
  uint64_t cur_off = leaf;
  Status s;
  // `cur` holds changes not yet applied; each branch below applies it or
  // frees its node.
  while (!path.empty() && cur->h().count < underflow_threshold()) {
    const PathStep up = path.back();
    par->Load(pool_, up.node, node_size_);
    const bool is_leaf = cur->h().level == 0;
    const uint32_t extra = is_leaf ? 0 : 1;  // an inner merge pulls the separator down
    bool merged = false;
    if (up.child > 0) {
      const uint64_t left_off = par->Child(up.child - 1);
      sib->Load(pool_, left_off, node_size_);
      if (sib->h().count + cur->h().count + extra <= cap_) {
        const uint64_t sep = par->e()[up.child - 1].key;
        if (is_leaf) {
          txn.ReleaseAfterCommit(sep);
          sib->h().link = cur->h().link;
        } else {
          sib->Append(sep, cur->h().link);
        }
        for (uint32_t i = 0; i < cur->h().count; i++) sib->Append(cur->e()[i].key, cur->e()[i].value);
        s = txn.Apply(left_off, *sib);
        if (!s.ok()) return Finish(txn, s);
        txn.FreeAfterCommit(cur_off);
        par->RemoveAt(up.child - 1);
        merged = true;
      }
    }
    if (!merged && up.child < par->h().count) {
      const uint64_t right_off = par->Child(up.child + 1);
      sib->Load(pool_, right_off, node_size_);
      if (cur->h().count + sib->h().count + extra <= cap_) {
        const uint64_t sep = par->e()[up.child].key;
        if (is_leaf) {
          txn.ReleaseAfterCommit(sep);
          cur->h().link = sib->h().link;
        } else {
          cur->Append(sep, sib->h().link);
        }
        for (uint32_t i = 0; i < sib->h().count; i++) cur->Append(sib->e()[i].key, sib->e()[i].value);
        s = txn.Apply(cur_off, *cur);
        if (!s.ok()) return Finish(txn, s);
        txn.FreeAfterCommit(right_off);
        par->RemoveAt(up.child);
        merged = true;
      }
    }
    if (!merged) break;
    if (is_leaf)
      counts_.leaf_merges++;
    else
      counts_.inner_merges++;
    path.pop_back();
    std::swap(cur, par);
    cur_off = up.node;
  }
  if (path.empty() && cur->h().level > 0 && cur->h().count == 0) {
    // Root collapse: the only child becomes the root.
    s = txn.SetRoot(cur->h().link);
    if (!s.ok()) return Finish(txn, s);
    txn.FreeAfterCommit(cur_off);
    counts_.root_collapses++;
    return Finish(txn, Status::Ok());
  }
  return Finish(txn, txn.Apply(cur_off, *cur));
}

// ---------------------------------------------------------------------------
// Bulk load

template <KeyPolicy KP>
Status LogTree<KP>::BulkLoad(std::span<const InputEntry> sorted, double fill) {
  PMTREE_RETURN_IF_ERROR(CheckBulkLoadInput(sorted, fill, &KP::CheckArg));
  std::unique_lock lock(mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  const uint64_t old_root = root();
  if (node(old_root)->level != 0 || node(old_root)->count != 0)
    return Status::InvalidArgument("bulk load: tree not empty");
  if (sorted.empty()) return Status::Ok();

  // Node counts per level: each level's nodes hold as even a share as
  // possible of at most `per` entries (leaves) or children (inner nodes).
  auto groups = [](size_t items, size_t per) {
    size_t nodes = (items + per - 1) / per;
    return nodes == 0 ? size_t{1} : nodes;
  };
  const size_t leaf_per = std::clamp<size_t>(static_cast<size_t>(fill * cap_), 1, cap_);
  const size_t inner_per = std::clamp<size_t>(static_cast<size_t>(fill * (cap_ + 1)), 3, cap_ + 1);

  Txn txn(this);
  NodeBuf& buf = *bufs_[0];
  const size_t nleaves = groups(sorted.size(), leaf_per);
  std::vector<uint64_t> level_nodes(nleaves);
  std::vector<uint64_t> first_slot(nleaves);  // first key slot of each node's subtree
  for (size_t i = 0; i < nleaves; i++) {
    auto r = txn.AllocNode();
    if (!r.ok()) return Finish(txn, r.status());
    level_nodes[i] = *r;
  }
  size_t next = 0;
  for (size_t i = 0; i < nleaves; i++) {
    const size_t take = sorted.size() / nleaves + (i < sorted.size() % nleaves ? 1 : 0);
    buf.Init(0, i + 1 < nleaves ? level_nodes[i + 1] : 0);
    for (size_t k = 0; k < take; k++, next++) {
      auto slot = txn.MakeSlotUnfenced(sorted[next].first);
      if (!slot.ok()) return Finish(txn, slot.status());
      buf.Append(*slot, sorted[next].second);
    }
    first_slot[i] = buf.e()[0].key;
    txn.WriteNew(level_nodes[i], buf);
  }
  uint16_t level = 0;
  while (level_nodes.size() > 1) {
    if (++level + 1u > kMaxHeight) return Finish(txn, Status::OutOfSpace("logtree: tree height limit reached"));
    const size_t k = level_nodes.size();
    const size_t nn = groups(k, inner_per);
    std::vector<uint64_t> up_nodes(nn), up_first(nn);
    size_t c = 0;
    for (size_t i = 0; i < nn; i++) {
      const size_t take = k / nn + (i < k % nn ? 1 : 0);
      auto r = txn.AllocNode();
      if (!r.ok()) return Finish(txn, r.status());
      buf.Init(level, level_nodes[c]);
      up_first[i] = first_slot[c];
      for (size_t j = 1; j < take; j++) {
        auto sep = txn.CopySlot(first_slot[c + j]);
        if (!sep.ok()) return Finish(txn, sep.status());
        buf.Append(*sep, level_nodes[c + j]);
      }
      c += take;
      up_nodes[i] = *r;
      txn.WriteNew(*r, buf);
    }
    level_nodes.swap(up_nodes);
    first_slot.swap(up_first);
  }
  // One logged change makes the whole new tree reachable; the old, empty
  // root leaf is freed after the commit.
  Status s = txn.SetRoot(level_nodes[0]);
  if (s.ok()) txn.FreeAfterCommit(old_root);
  return Finish(txn, s);
}

// ---------------------------------------------------------------------------
// Verify and Stats
//
// Invariants (docs/trees/logtree.md, "Invariants"):
//  1. Root slot 0 names a 64-byte-aligned meta block in the heap with the
//     right magic, version, key kind and a valid node size; its log and root
//     offsets lie in the heap.
//  2. The log header has its magic and the slot geometry of the meta block;
//     between operations its count is 0 (no record sequence in flight).
//  3. Every node reached is 64-byte aligned, in the heap, tagged kNodeTag, and
//     reached exactly once.
//  4. count <= capacity; an inner root has at least one separator.
//  5. A child's level is its parent's level - 1 (all leaves at one depth);
//     the root's level + 1 <= kMaxHeight.
//  6. KP within a node are strictly ascending.
//  7. Every key in the subtree of child i of an inner node lies in
//     [separator i-1, separator i) (unbounded at the ends).
//  8. The leaves, in key order, are chained by `link`; the last link is 0.
//  9. Every key slot is valid for the key policy (blob in heap, hash).
// 10. The pool bytes reached (meta, log, nodes, key blobs) equal the
//     allocator's bytes in use.

namespace {
struct VerifyState {
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> leaves;
  uint64_t bytes = 0;
  uint64_t entries = 0;
  uint64_t inner = 0;
};
}  // namespace

template <KeyPolicy KP>
Status LogTree<KP>::Verify() {
  std::unique_lock lock(mu_);
  PMTREE_RETURN_IF_ERROR(CheckUsable());
  const LogTreeMeta* m = meta();
  if (m->magic != kMetaMagic || m->version != logtree::kLayoutVersion ||
      m->key_kind != static_cast<uint32_t>(KP::kKind) || m->node_size != node_size_ || m->log != log_off_)
    return Status::Corruption("logtree meta at offset " + Hex(meta_off_) + ": invariant 1 violated");
  const LogHeader* lh = log_header();
  if (lh->magic != kLogMagic || lh->slots != log_slots_ || lh->slot_size != sizeof(LogRecordHeader) + node_size_)
    return Status::Corruption("logtree log at offset " + Hex(log_off_) + ": invariant 2 violated: bad header");
  if (PoolImpl::Load64(&lh->count) != 0)
    return Status::Corruption("logtree log at offset " + Hex(log_off_) + ": invariant 2 violated: count " +
                              std::to_string(lh->count) + " between operations");

  VerifyState st;
  st.bytes = sizeof(LogTreeMeta) + log_bytes();
  const uint64_t r = root();
  if (r % kAllocGranule != 0 || !pool_->InHeap(r, node_size_))
    return Status::Corruption("logtree meta at offset " + Hex(meta_off_) + ": invariant 1 violated: root " +
                              Hex(r) + " outside the heap");
  const uint32_t root_level = node(r)->level;
  if (root_level + 1u > kMaxHeight)
    return Status::Corruption("logtree root at offset " + Hex(r) + ": invariant 5 violated: level " +
                              std::to_string(root_level));
  if (root_level > 0 && node(r)->count == 0)
    return Status::Corruption("logtree root at offset " + Hex(r) + ": invariant 4 violated: inner root without separator");

  // Iterative walk with explicit bounds (slot 0 + has flag = unbounded).
  struct Item {
    uint64_t off;
    uint32_t level;
    bool has_lo, has_hi;
    uint64_t lo, hi;
  };
  std::vector<Item> stack{{r, root_level, false, false, 0, 0}};
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    const std::string where = "logtree node at offset " + Hex(it.off) + ": ";
    if (it.off % kAllocGranule != 0 || !pool_->InHeap(it.off, node_size_))
      return Status::Corruption(where + "invariant 3 violated: outside the heap");
    if (!st.seen.insert(it.off).second) return Status::Corruption(where + "invariant 3 violated: reached twice");
    const NodeHeader* h = node(it.off);
    if (h->tag != kNodeTag) return Status::Corruption(where + "invariant 3 violated: bad tag");
    if (h->count > cap_)
      return Status::Corruption(where + "invariant 4 violated: count " + std::to_string(h->count) + " > capacity");
    if (h->level != it.level)
      return Status::Corruption(where + "invariant 5 violated: level " + std::to_string(h->level) + ", expected " +
                                std::to_string(it.level));
    st.bytes += node_size_;
    const NodeEntry* es = entries(it.off);
    for (uint32_t i = 0; i < h->count; i++) {
      Status ks = keys_.CheckSlot(es[i].key);
      if (!ks.ok()) return Status::Corruption(where + "invariant 9 violated: " + std::string(ks.message()));
      st.bytes += keys_.SlotBytes(es[i].key);
      if (i > 0 && keys_.CompareSlots(es[i - 1].key, es[i].key) >= 0)
        return Status::Corruption(where + "invariant 6 violated: keys " + std::to_string(i - 1) + " and " +
                                  std::to_string(i) + " not ascending");
      if ((it.has_lo && keys_.CompareSlots(es[i].key, it.lo) < 0) ||
          (it.has_hi && keys_.CompareSlots(es[i].key, it.hi) >= 0))
        return Status::Corruption(where + "invariant 7 violated: key " + std::to_string(i) +
                                  " outside its parent's separators");
    }
    if (h->level == 0) {
      st.leaves.push_back(it.off);
      st.entries += h->count;
      continue;
    }
    st.inner++;
    // Push children right to left so leaves are visited in key order.
    for (uint32_t i = h->count + 1; i-- > 0;) {
      Item c{Child(it.off, i), it.level - 1, it.has_lo, it.has_hi, it.lo, it.hi};
      if (i > 0) {
        c.has_lo = true;
        c.lo = es[i - 1].key;
      }
      if (i < h->count) {
        c.has_hi = true;
        c.hi = es[i].key;
      }
      stack.push_back(c);
    }
  }
  for (size_t i = 0; i < st.leaves.size(); i++) {
    const uint64_t want = i + 1 < st.leaves.size() ? st.leaves[i + 1] : 0;
    if (node(st.leaves[i])->link != want)
      return Status::Corruption("logtree leaf at offset " + Hex(st.leaves[i]) + ": invariant 8 violated: link " +
                                Hex(node(st.leaves[i])->link) + ", expected " + Hex(want));
  }
  // Removed keys' blobs wait in the epochs; no operation runs, so settle them.
  pool_->epochs().DrainAll();
  const uint64_t in_use = pool_->allocator().bytes_in_use();
  if (st.bytes != in_use)
    return Status::Corruption("logtree: invariant 10 violated: " + std::to_string(st.bytes) +
                              " bytes reachable, allocator has " + std::to_string(in_use) + " in use");
  return Status::Ok();
}

template <KeyPolicy KP>
TreeStats LogTree<KP>::Stats() {
  std::shared_lock lock(mu_);
  TreeStats s;
  if (!CheckUsable().ok()) return s;
  const uint64_t r = root();
  s.height = node(r)->level + 1u;
  s.pm_bytes = sizeof(LogTreeMeta) + log_bytes();
  std::vector<uint64_t> stack{r};
  while (!stack.empty()) {
    const uint64_t off = stack.back();
    stack.pop_back();
    const NodeHeader* h = node(off);
    s.pm_bytes += node_size_;
    const NodeEntry* es = entries(off);
    for (uint32_t i = 0; i < h->count; i++) s.pm_bytes += keys_.SlotBytes(es[i].key);
    if (h->level == 0) {
      s.leaf_nodes++;
      s.entries += h->count;
    } else {
      s.inner_nodes++;
      for (uint32_t i = 0; i <= h->count; i++) stack.push_back(Child(off, i));
    }
  }
  s.leaf_fill = s.leaf_nodes == 0 ? 0 : static_cast<double>(s.entries) / (s.leaf_nodes * cap_);
  s.dram_bytes = sizeof(*this) + 3 * sizeof(NodeBuf) + scratch_entries_.capacity() * sizeof(NodeEntry);
  s.extra = {
      {"node_size", node_size_},
      {"node_capacity", cap_},
      {"log_bytes", static_cast<double>(log_bytes())},
      {"leaf_splits", static_cast<double>(counts_.leaf_splits)},
      {"inner_splits", static_cast<double>(counts_.inner_splits)},
      {"root_splits", static_cast<double>(counts_.root_splits)},
      {"leaf_merges", static_cast<double>(counts_.leaf_merges)},
      {"inner_merges", static_cast<double>(counts_.inner_merges)},
      {"root_collapses", static_cast<double>(counts_.root_collapses)},
      {"records_logged", static_cast<double>(counts_.records_logged)},
      {"records_undone_at_recovery", static_cast<double>(counts_.records_undone)},
  };
  return s;
}

template class LogTree<U64Keys>;
template class LogTree<BytesKeys>;

// ---------------------------------------------------------------------------
// Registry entry points

namespace logtree {

PMTREE_REGISTRY_ENTRY_POINTS(LogTree);

}  // namespace logtree
}  // namespace pmtree
