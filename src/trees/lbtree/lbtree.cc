// SPDX-License-Identifier: Apache-2.0
//
// LB+-Tree implementation (docs/trees/lbtree.md; layout in layout.h).
//
// Invariants (Verify() checks each; the code below cites them by number):
//   L1. The meta block has kMetaMagic, a valid node size, this key kind, this
//       variant (lbtree or lbtree-paper) and a head leaf inside the heap.
//   L2. Every leaf in the list is inside the heap, 256 B aligned, visited at
//       most once (the list is acyclic and ends in 0).
//   L3. Each header uses only bitmap, lock and alt bits; lock is clear when
//       no operation runs (the lock bit is never set by this code).
//   L4. Every valid slot's fingerprint equals Fingerprint(key); key slots of
//       byte-string keys name valid blobs.
//   L5. Keys are unique inside a leaf, and every key of a leaf is smaller than
//       every key of the next leaf in the list.
//   L6. DRAM inner nodes: 0 <= count <= capacity, keys ascending (equal only
//       never), children of a level-l node are level l-1 nodes (level-1
//       nodes' children are leaves), every version even when idle; with byte
//       keys every separator starts with the node's common bytes and its
//       head is its next 8 bytes (Inner, HEADS).
//   L7. An in-order walk of the inner nodes yields leaves in list order; each
//       such leaf's keys lie in the range its separators route to it; a list
//       leaf that no inner node references is empty (recovery drops empty
//       leaves from routing, see RebuildFromRecords).
//   L8. Recorded hint leaves are list leaves, in list order, excluding head.
//   L9. The pool bytes reached (meta, leaves, key blobs) equal the
//       allocator's bytes in use.
//   L10. The meta block's leaf count is at least 1 and at most the number of
//       leaves in the list (it is persisted only after the NAW that links a
//       leaf, and leaves are never freed); recovery refuses a list shorter
//       than it (a cut leaf list, issue 17).
//
// Concurrency (docs "Concurrency"): inner nodes use optimistic lock coupling
// (a version word per node, odd = write-locked; readers validate); each leaf
// has a DRAM version word (the paper's lock bit + a version, since there is
// no HTM to make a leaf read atomic).  A writer holds its leaf's lock from
// before the first PM store until after the last fence, so a reader whose
// validation succeeds saw only persisted leaf contents.  Lock order: leaf,
// then inner nodes; inner-node locks are only try-acquired (restart on
// failure) and never wait for a leaf, so there is no deadlock.

#include "trees/lbtree/lbtree.h"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trees/common/keys.h"
#include "trees/common/restart_image.h"
#include "trees/common/version_lock.h"
#include "trees/lbtree/layout.h"
#include "trees/lbtree/simd.h"

namespace pmtree::lbtree {
namespace {

// CPU time of the calling thread (ms): recovery reports its phases in CPU
// time too, which a loaded machine inflates far less than wall time.
inline double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Concurrent readers load header words and entries while a writer Store64s
// them; atomic loads keep that race defined (and TSan quiet).
inline uint64_t Load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

inline uint8_t GetFp(uint64_t w0, uint64_t w1, int s) {
  return s < 6 ? static_cast<uint8_t>(w0 >> (16 + 8 * s)) : static_cast<uint8_t>(w1 >> (8 * (s - 6)));
}
inline void SetFp(uint64_t* w0, uint64_t* w1, int s, uint8_t fp) {
  if (s < 6) {
    int sh = 16 + 8 * s;
    *w0 = (*w0 & ~(0xffull << sh)) | (static_cast<uint64_t>(fp) << sh);
  } else {
    int sh = 8 * (s - 6);
    *w1 = (*w1 & ~(0xffull << sh)) | (static_cast<uint64_t>(fp) << sh);
  }
}

Status CheckNodeSize(uint32_t node_size) {
  if (node_size == 256 || node_size == 512 || node_size == 768 || node_size == 1024) return Status::Ok();
  return Status::InvalidArgument("lbtree: node_size " + std::to_string(node_size) +
                                 " is not valid; valid sizes: 256, 512, 768, 1024 (0 = 256)");
}

// ---- DRAM separators ----------------------------------------------------------
// U64 keys: the separator is the key.  Byte keys: a pointer to an immutable
// std::string owned by the tree (separators outlive the key blobs they were
// copied from, which a delete may free).  Both are stored in one atomic word.
template <class KP>
struct Sep;
template <>
struct Sep<U64Keys> {
  static int Cmp(uint64_t key, uint64_t sep) { return key < sep ? -1 : (key > sep ? 1 : 0); }
  static int CmpSeps(uint64_t a, uint64_t b) { return Cmp(a, b); }
};
template <>
struct Sep<BytesKeys> {
  static const std::string* Ptr(uint64_t sep) { return reinterpret_cast<const std::string*>(sep); }
  static int Cmp(std::string_view key, uint64_t sep) {
    // A null separator can only be read by an optimistic reader of a node
    // being changed; its validation fails, so any answer will do.
    if (sep == 0) return -1;
    int c = key.compare(*Ptr(sep));
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  static int CmpSeps(uint64_t a, uint64_t b) { return Cmp(*Ptr(a), b); }
};

inline constexpr int kMaxInnerKeys = 63;  // 1 KiB nodes: 64 children
inline constexpr uint32_t kMaxSkip = 24;   // Inner::common's bytes

// Bytes [off, off + 8) of s as a big-endian word, zero past the end: two
// such words that differ order as the strings do (see Inner, HEADS).
inline uint64_t HeadOf(std::string_view s, size_t off) {
  uint64_t w = 0;
  if (s.size() > off) std::memcpy(&w, s.data() + off, std::min<size_t>(8, s.size() - off));
  return __builtin_bswap64(w);
}

// A DRAM inner node.  Every field a reader may load concurrently is atomic.
//
// HEADS (byte keys only; unused for u64 keys).  A separator is a pointer to
// a std::string, so a binary search that compared the strings paid two
// dependent cache misses per step.  The node also keeps `skip` (at most
// kMaxSkip): a count of leading bytes every one of its separators shares,
// those bytes in `common`, and for each separator heads[i] = HeadOf(sep,
// skip).  A descent compares the key's first skip bytes with common once,
// then compares heads; only equal heads (a key that equals a separator up
// to its 8 bytes past skip) dereference the separator.  Writers change
// them under the node's lock with its keys (RefreshHeads), so a reader's
// validation covers them as it covers the keys.
struct Inner {
  VersionLock version;  // odd while write-locked (version_lock.h V1-V3)
  std::atomic<uint32_t> count{0};    // number of keys; children = count + 1
  uint32_t level = 1;                // 1: children are leaf offsets
  std::atomic<uint32_t> skip{0};
  std::atomic<uint64_t> common[kMaxSkip / 8];
  std::atomic<uint64_t> keys[kMaxInnerKeys];
  std::atomic<uint64_t> child[kMaxInnerKeys + 1];
  std::atomic<uint64_t> heads[kMaxInnerKeys];
  Inner() {
    for (auto& w : common) w.store(0, std::memory_order_relaxed);
    for (auto& k : keys) k.store(0, std::memory_order_relaxed);
    for (auto& c : child) c.store(0, std::memory_order_relaxed);
    for (auto& h : heads) h.store(0, std::memory_order_relaxed);
  }
};
static_assert(offsetof(Inner, keys) <= 64, "an inner node's header, skip and common share its first line");

// n's common bytes (HEADS), kMaxSkip of them, into out.
inline void LoadCommon(const Inner* n, char* out) {
  for (uint32_t w = 0; w < kMaxSkip / 8; w++) {
    const uint64_t x = n->common[w].load(std::memory_order_acquire);
    std::memcpy(out + 8 * w, &x, 8);
  }
}

// Readers load count relaxed, hence the fenced validation.
inline bool Validate(const Inner* n, uint64_t v) { return n->version.ValidateFenced(v); }
inline bool TryLock(Inner* n, uint64_t v) { return n->version.TryLockAt(v); }
inline void Unlock(Inner* n) { n->version.unlock(); }

struct Counter {
  alignas(64) std::atomic<uint64_t> v{0};
  void Add(uint64_t d = 1) { v.fetch_add(d, std::memory_order_relaxed); }
  uint64_t Get() const { return v.load(std::memory_order_relaxed); }
};

template <class K>
class LbTree final : public BasicTree<K> {
 public:
  using KP = KeyPolicyFor<K>;
  using S = Sep<KP>;
  using Entry = typename BasicTree<K>::Entry;
  using InputEntry = typename BasicTree<K>::InputEntry;

  LbTree(PoolImpl* pool, uint32_t node_size, int hint_target, bool paper_split)
      : pool_(pool),
        keys_(pool),
        node_size_(node_size),
        m_(static_cast<int>(node_size / kBlockSize)),
        inner_keys_(std::min<int>(kMaxInnerKeys, static_cast<int>(node_size / 16) - 1)),
        hint_target_(hint_target),
        paper_split_(paper_split),
        match_(SelectedMatchFn()) {
    ver_entries_ = pool_->size() / kBlockSize + 1;
    void* p = mmap(nullptr, ver_entries_ * sizeof(VersionLock), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ver_ = p == MAP_FAILED ? nullptr : static_cast<VersionLock*>(p);
  }
  ~LbTree() override {
    if (ver_ != nullptr) munmap(ver_, ver_entries_ * sizeof(VersionLock));
  }
  bool ok_to_use() const { return ver_ != nullptr; }

  std::string_view name() const override { return paper_split_ ? kPaperSplitName : kName; }
  uint32_t capabilities() const override {
    return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart |
           kCapParallelRecovery | kCapAssumesLineOrder | (paper_split_ ? static_cast<uint32_t>(kCapTestOnly) : 0u);
  }

  // ---- lifecycle -------------------------------------------------------------------
  Status InitNew(KeyKind kind);
  Status RecoverFrom(uint64_t meta_off, uint32_t threads);

  // ---- point operations ------------------------------------------------------------
  bool Lookup(K key, uint64_t* value) override { return Find(key, value, nullptr); }
  // The hint: word[0] = the leaf | (block * 16 + slot + 1) << 48 (0: none),
  // word[1] = the leaf version the lookup validated.  While the version
  // holds, nothing in the leaf has moved.
  bool LookupForUpdate(K key, uint64_t* value, typename BasicTree<K>::Hint* hint) override {
    return Find(key, value, hint);
  }
  void LookupManyForUpdate(std::span<const K> keys, uint64_t* values, bool* found,
                           typename BasicTree<K>::Hint* hints) override;
  Result<bool> UpdateHinted(K key, uint64_t value, const typename BasicTree<K>::Hint& hint) override {
    return Hinted(key, value, hint, true);
  }
  Result<bool> UpdateHintedUnfenced(K key, uint64_t value, const typename BasicTree<K>::Hint& hint) override {
    return Hinted(key, value, hint, false);
  }
  bool DefersUpdateFences() const override { return true; }
  size_t UpdateHintedRunUnfenced(std::span<const K> keys, const uint64_t* values,
                                 const typename BasicTree<K>::Hint* hints) override;
  Result<bool> Insert(K key, uint64_t value) override { return Put(key, value, true, false); }
  Result<bool> Update(K key, uint64_t value) override { return Put(key, value, false, true); }
  Result<bool> Upsert(K key, uint64_t value) override { return Put(key, value, true, true); }
  Result<bool> Remove(K key) override;
  size_t Scan(K start, const K* end, std::span<Entry> out) override;
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override;
  Status Verify() override;
  TreeStats Stats() override;
  Status Close() override;

 private:
  // ---- leaf addressing (layout.h) -----------------------------------------------
  char* LeafPtr(uint64_t off) const { return pool_->base() + off; }
  Block* Blk(uint64_t off, int b) const { return reinterpret_cast<Block*>(LeafPtr(off) + kBlockSize * b); }
  // The header of block b that is in effect under `alt`.
  BlockHeader* Hdr(uint64_t off, int b, bool alt) const {
    Block* blk = Blk(off, b);
    if (b == 0 || !alt) return &blk->header;
    return reinterpret_cast<BlockHeader*>(&blk->tail[0]);
  }
  static int HeaderLine(int b, bool alt) { return (b == 0 || !alt) ? 0 : 3; }
  char* LinePtr(uint64_t off, int b, int line) const { return LeafPtr(off) + kBlockSize * b + kLineSize * line; }
  VersionLock& LeafVer(uint64_t off) const { return ver_[off / kBlockSize]; }
  // Prefetches the lines of an inner node a descent can read: the header and
  // keys[0, inner_keys_), and child[0, inner_keys_] (a separate run of lines).
  // Byte keys: the heads instead of the keys (HEADS), which a descent
  // reads only on a tie.
  void PrefetchInner(const Inner* n) const {
    const char* base = reinterpret_cast<const char*>(n);
    auto run = [&](size_t begin, size_t end) {
      for (size_t off = begin & ~size_t{kLineSize - 1}; off < end; off += kLineSize) pmtree::Prefetch(base + off);
    };
    run(0, offsetof(Inner, keys));
    const size_t sep0 = KP::kInline ? offsetof(Inner, keys) : offsetof(Inner, heads);
    run(sep0, sep0 + sizeof(uint64_t) * inner_keys_);
    run(offsetof(Inner, child), offsetof(Inner, child) + sizeof(uint64_t) * (inner_keys_ + 1));
  }
  // Prefetches every line of a leaf (a read looks at headers and slots
  // across all of it).  A bad offset is harmless: prefetches never fault.
  void PrefetchLeaf(uint64_t off) const {
    for (uint32_t line = 0; line < node_size_; line += kLineSize) pmtree::Prefetch(LeafPtr(off) + line);
  }
  Meta* meta() const { return pool_->At<Meta>(meta_off_); }

  // A copy of a leaf's headers: consistent for a writer holding the lock; a
  // lock-free reader (ReadCandidates) validates the leaf version after it.
  struct Headers {
    bool alt;
    uint64_t w[2 * kMaxBlocks];  // w[2b] = word0, w[2b+1] = word1 of block b's active header
  };
  Headers ReadHeaders(uint64_t leaf) const {
    Headers h;
    h.alt = (Load(&Blk(leaf, 0)->header.word0) & kAltBit) != 0;
    for (int b = 0; b < m_; b++) {
      const BlockHeader* hd = Hdr(leaf, b, h.alt);
      h.w[2 * b] = Load(&hd->word0);
      h.w[2 * b + 1] = Load(&hd->word1);
    }
    return h;
  }

  // ---- inner nodes --------------------------------------------------------------
  Inner* NewInner(uint32_t level) {
    auto n = std::make_unique<Inner>();
    n->level = level;
    Inner* raw = n.get();
    std::lock_guard g(inner_mu_);
    inners_.push_back(std::move(n));
    return raw;
  }
  uint64_t MakeSep(typename KP::Arg key) {
    if constexpr (KP::kInline) {
      return key;
    } else {
      std::lock_guard g(inner_mu_);
      seps_.emplace_back(key);
      sep_bytes_ += seps_.back().size() + sizeof(std::string);
      return reinterpret_cast<uint64_t>(&seps_.back());
    }
  }
  uint64_t MakeSepFromSlot(uint64_t slot) {
    if constexpr (KP::kInline) {
      return slot;
    } else {
      return MakeSep(keys_.View(slot));
    }
  }
  // Index of the child of `n` that `key` routes to: the number of
  // separators <= key (separator = smallest key of its right subtree).
  // Byte keys compare the node's heads first (HEADS).  A reader racing a
  // writer may see skip, common and heads of different moments; it then
  // fails validation, and every index here stays in bounds meanwhile.
  int ChildIndex(const Inner* n, typename KP::Arg key) const {
    int cnt = static_cast<int>(std::min<uint32_t>(n->count.load(std::memory_order_relaxed), inner_keys_));
    int lo = 0, hi = cnt;
    if constexpr (KP::kInline) {
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (S::Cmp(key, n->keys[mid].load(std::memory_order_acquire)) >= 0)
          lo = mid + 1;
        else
          hi = mid;
      }
    } else {
      const uint32_t skip = std::min(n->skip.load(std::memory_order_acquire), kMaxSkip);
      if (skip > 0) {
        char common[kMaxSkip];
        LoadCommon(n, common);
        // (An empty key may have no data pointer: memcmp is not given it.)
        const size_t m = std::min<size_t>(key.size(), skip);
        const int c = m == 0 ? 0 : std::memcmp(key.data(), common, m);
        if (c < 0 || (c == 0 && key.size() < skip)) return 0;  // below every separator
        if (c > 0) return cnt;                                   // above every separator
      }
      const uint64_t kh = HeadOf(key, skip);
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        const uint64_t h = n->heads[mid].load(std::memory_order_acquire);
        const bool ge = kh != h ? kh > h : S::Cmp(key, n->keys[mid].load(std::memory_order_acquire)) >= 0;
        if (ge)
          lo = mid + 1;
        else
          hi = mid;
      }
    }
    return lo;
  }
  // Recomputes n's skip, common and heads from its keys (HEADS); the
  // caller holds n's lock or owns n.  Sorted keys share what the first and
  // the last share.
  void RefreshHeads(Inner* n) {
    if constexpr (!KP::kInline) {
      const int cnt = static_cast<int>(n->count.load(std::memory_order_relaxed));
      uint32_t skip = 0;
      char common[kMaxSkip] = {};
      if (cnt > 0) {
        const std::string& first = *S::Ptr(n->keys[0].load(std::memory_order_relaxed));
        const std::string& last = *S::Ptr(n->keys[cnt - 1].load(std::memory_order_relaxed));
        const size_t limit = std::min({first.size(), last.size(), size_t{kMaxSkip}});
        while (skip < limit && first[skip] == last[skip]) skip++;
        std::memcpy(common, first.data(), skip);
      }
      n->skip.store(skip, std::memory_order_release);
      for (uint32_t w = 0; w < kMaxSkip / 8; w++) {
        uint64_t x;
        std::memcpy(&x, common + 8 * w, 8);
        n->common[w].store(x, std::memory_order_release);
      }
      for (int i = 0; i < cnt; i++)
        n->heads[i].store(HeadOf(*S::Ptr(n->keys[i].load(std::memory_order_relaxed)), skip), std::memory_order_release);
    }
  }
  int ChildIndexSep(const Inner* n, uint64_t sep) const {
    if constexpr (KP::kInline) {
      return ChildIndex(n, sep);
    } else {
      return ChildIndex(n, *S::Ptr(sep));
    }
  }
  // Adds (sep -> child) to write-locked inner node n, which has room: shifts
  // the keys and children right of sep's position, then publishes the count.
  void InsertIntoInner(Inner* n, uint64_t sep, uint64_t child) {
    int count = static_cast<int>(n->count.load(std::memory_order_relaxed));
    int pos = ChildIndexSep(n, sep);
    for (int i = count; i > pos; i--) {
      n->keys[i].store(n->keys[i - 1].load(std::memory_order_relaxed), std::memory_order_release);
      n->child[i + 1].store(n->child[i].load(std::memory_order_relaxed), std::memory_order_release);
    }
    n->keys[pos].store(sep, std::memory_order_release);
    n->child[pos + 1].store(child, std::memory_order_release);
    n->count.store(count + 1, std::memory_order_relaxed);
    if constexpr (!KP::kInline) {
      // A new first or last separator may shorten what they all share.
      const uint32_t skip = n->skip.load(std::memory_order_relaxed);
      const std::string& s = *S::Ptr(sep);
      const std::string& other = *S::Ptr(n->keys[pos == 0 ? count : 0].load(std::memory_order_relaxed));
      if (count == 0 || s.size() < skip || other.size() < skip || std::memcmp(s.data(), other.data(), skip) != 0) {
        RefreshHeads(n);
        return;
      }
      for (int i = count; i > pos; i--)
        n->heads[i].store(n->heads[i - 1].load(std::memory_order_relaxed), std::memory_order_release);
      n->heads[pos].store(HeadOf(s, skip), std::memory_order_release);
    }
  }

  struct LeafRef {
    uint64_t leaf;
    uint64_t version;  // even; the leaf version when it was found
  };
  LeafRef FindLeaf(typename KP::Arg key);
  bool TryLockLeaf(uint64_t leaf, uint64_t v) { return LeafVer(leaf).TryLockAt(v); }
  // Finds the leaf of `key` and locks it, retrying while a writer holds it or
  // a split moved the key range meanwhile; returns the locked leaf.
  uint64_t LockLeafOf(typename KP::Arg key) {
    for (;;) {
      LeafRef ref = FindLeaf(key);
      if (TryLockLeaf(ref.leaf, ref.version)) return ref.leaf;
      restarts_.Add();
    }
  }
  void UnlockLeaf(uint64_t leaf) { LeafVer(leaf).unlock(); }
  // Waits for the leaf to be unlocked; returns the even version.
  uint64_t StableLeafVersion(uint64_t leaf) const { return LeafVer(leaf).ReadBegin(); }
  void InsertSeparator(uint64_t sep, uint64_t new_leaf);
  void SplitInner(Inner* node, Inner* parent);

  // ---- leaf operations (caller holds the leaf lock) ------------------------------
  struct SlotPos {
    int block = -1;
    int slot = -1;
  };
  SlotPos FindInLeaf(uint64_t leaf, const Headers& h, typename KP::Arg key, uint8_t fp) const;
  bool Find(K key, uint64_t* value, typename BasicTree<K>::Hint* hint);
  // A lock-free lookup's view of a leaf: the entries whose fingerprint
  // matches (Algorithm 1 lines 6-11), read without the lock.  Valid only if
  // the leaf version still holds after ReadCandidates returns.
  struct Candidates {
    int n = 0;
    uint64_t key[kSlotsPerBlock * kMaxBlocks];
    uint64_t value[kSlotsPerBlock * kMaxBlocks];
    int bit[kSlotsPerBlock * kMaxBlocks];  // block * 16 + slot
  };
  void ReadCandidates(uint64_t leaf, uint8_t fp, Candidates* c) const;
  // After validation: the candidate whose key is `key` fills *value and
  // *hint (LookupForUpdate's hint, see there); false when none is.
  bool MatchCandidates(const Candidates& c, const LeafRef& ref, typename KP::Arg key, uint64_t* value,
                       typename BasicTree<K>::Hint* hint) const;
  // LookupManyForUpdate for at most kLookupLanes keys (see there).
  static constexpr size_t kLookupLanes = 16;
  void LookupLanes(std::span<const K> keys, uint64_t* values, bool* found, typename BasicTree<K>::Hint* hints);
  // Persists a new value into the found slot (the leaf is locked).
  // Replaces the value word of an existing entry; `fence` false leaves the
  // fence to the caller (UpdateHintedUnfenced).
  void StoreValue(uint64_t leaf, int block, int slot, uint64_t value, bool fence = true) {
    WriteValueWord(&Blk(leaf, block)->entry[slot].value, value, fence);
    updates_.Add();
  }
  // StoreValue's write, uncounted (a run of updates counts once, after).
  void WriteValueWord(uint64_t* vp, uint64_t value, bool fence) {
    pool_->Store64(vp, value);
    if (fence) {
      // Persist the new value (one failure-atomic word) before the leaf is
      // unlocked and the call returns.
      pool_->Persist(vp, 8);
    } else {
      // Start the value word's write-back only: until the caller's fence a
      // crash keeps the old value or this one (either names a durable
      // record), and the caller acknowledges nothing and frees nothing the
      // old value named before that fence.  A later writer of this leaf
      // (a split copying the word) fences before it links anything.
      pool_->Flush(vp, 8);
    }
  }
  // The slot a LookupForUpdate hint names, or nullopt when it names none
  // this tree has (an empty or foreign hint).
  struct HintedSlot {
    uint64_t leaf;
    int block;
    int slot;
  };
  std::optional<HintedSlot> SlotOfHint(const typename BasicTree<K>::Hint& hint) const {
    const int bit = static_cast<int>(hint.word[0] >> 48) - 1;
    const int block = bit / 16, slot = bit % 16;
    if (bit < 0 || block >= m_ || slot >= kSlotsPerBlock) return std::nullopt;
    return HintedSlot{hint.word[0] & ((1ull << 48) - 1), block, slot};
  }
  // With the leaf locked: the slot is in use and holds `key`.
  bool SlotHolds(const HintedSlot& s, typename KP::Arg key) const {
    return (ReadHeaders(s.leaf).w[2 * s.block] & (1ull << s.slot)) &&
           keys_.Equal(Blk(s.leaf, s.block)->entry[s.slot].key, key);
  }
  Result<bool> Hinted(K key, uint64_t value, const typename BasicTree<K>::Hint& hint, bool fence);
  void LeafInsert(uint64_t leaf, uint64_t key_slot, uint64_t value, uint8_t fp);
  Status SplitAndInsert(uint64_t leaf, typename KP::Arg key, uint64_t key_slot, uint64_t value, uint8_t fp);
  bool LeafFull(const Headers& h) const {
    for (int b = 0; b < m_; b++)
      if ((h.w[2 * b] & kBitmapMask) != kBitmapMask) return false;
    return true;
  }

  // fence false: an update of an existing key leaves its fence to the
  // caller (StoreValue); only Hinted passes it.
  Result<bool> Put(K key, uint64_t value, bool insert, bool update, bool fence = true);

  // ---- recovery and bulk building -------------------------------------------------
  struct LeafRecord {
    uint64_t leaf;
    uint64_t min_slot;  // key slot of the smallest key (valid when nonempty)
    bool nonempty;
  };
  struct SegmentResult {
    std::vector<LeafRecord> leaves;
    std::vector<std::pair<uint64_t, uint64_t>> blobs;  // (offset, size) of key blobs
    uint64_t stale_locks = 0;
    bool reached_end = false;  // met `stop` (or the list end when stop == 0)
    Status status;
    // Every block the segment reaches (leaves and key blobs), by offset.
    std::vector<std::pair<uint64_t, uint64_t>> blocks;
  };
  void ScanSegment(uint64_t start, uint64_t stop, uint64_t max_steps, SegmentResult* out);
  // The per-segment part of recovery that needs no other segment, run by the
  // segment's own thread: resets the segment's leaf versions and sorts its
  // blocks by offset (the allocator then takes them in ascending order).
  void FinishSegment(SegmentResult* out);
  // Recovery's steps (RecoverFrom): where the segments start, the walk, the
  // allocator rebuilt from what the walk reached.
  std::vector<uint64_t> SegmentStarts();
  Status WalkSegments(std::vector<uint64_t>* starts, uint32_t threads, std::vector<SegmentResult>* res,
                      double* serial_cpu0);
  Status RebuildAllocator(std::vector<SegmentResult>* res);
  // Stores and persists the meta block's leaf count (L10).
  void PersistLeafCount(uint64_t leaves);
  // Level-1 nodes over `recs` (separators of records 1.. are their min keys;
  // empty leaves other than the very first record are not routed to, L7).
  struct Built {
    Inner* node;
    uint64_t low_sep;  // separator routing to this node (unused for the first)
    bool has_low;
  };
  void BuildLevel1(const std::vector<std::pair<uint64_t, uint64_t>>& routed, bool first_has_sep,
                   std::vector<Built>* out);
  Inner* BuildUpper(std::vector<Built> level);
  Status RebuildFromRoutes(std::vector<std::pair<uint64_t, uint64_t>> routed);
  void RecordHints(const std::vector<uint64_t>& leaves_in_order);
  void MaybeRecordHints();
  std::vector<uint64_t> CollectHintsFromDram();
  Status TryInstantRestart(bool* done);
  Status WriteRestartImage();

  // Verify helpers.
  Status VerifyHints(const std::vector<uint64_t>& list) const;
  Status VerifyInner(const Inner* n, bool has_lo, uint64_t lo, bool has_hi, uint64_t hi,
                     std::vector<std::tuple<uint64_t, bool, uint64_t, bool, uint64_t>>* leaves) const;

  uint64_t CountEntries(const Headers& h) const {
    uint64_t n = 0;
    for (int b = 0; b < m_; b++) n += std::popcount(h.w[2 * b] & kBitmapMask);
    return n;
  }

  PoolImpl* pool_;
  KP keys_;
  const uint32_t node_size_;
  const int m_;
  const int inner_keys_;
  const int hint_target_;
  // Test-only: insert a key that stays in the old leaf before the split's
  // NAW, as Algorithm 3 line 26 does (deviation 2 in the docs: loses a key
  // on some crashes).  The explorer's negative control.
  const bool paper_split_;
  const MatchFn match_;
  uint64_t meta_off_ = 0;
  uint64_t head_ = 0;

  VersionLock* ver_ = nullptr;  // per 256 B of the pool: leaf version (mapped zeroed)
  uint64_t ver_entries_ = 0;

  std::atomic<Inner*> root_{nullptr};
  std::mutex inner_mu_;  // guards inners_ and seps_ (ownership only)
  std::vector<std::unique_ptr<Inner>> inners_;
  std::deque<std::string> seps_;
  uint64_t sep_bytes_ = 0;

  std::mutex hint_mu_;
  std::atomic<uint64_t> leaf_count_{1};
  uint64_t hint_leaf_count_ = 0;  // leaf_count_ when hints were last recorded (hint_mu_)

  bool closed_ = false;

  // Statistics (Stats().extra).
  Counter inserts_line0_, inserts_moving_, entries_moved_, splits_, split_new_side_, split_old_side_;
  Counter deletes_, updates_, restarts_, hint_records_;
  double recovery_ms_ = 0;
  // Crash recovery by phase (ms): leaf walk, allocator, routing, inner nodes.
  double recovery_walk_ms_ = 0, recovery_alloc_ms_ = 0, recovery_route_ms_ = 0, recovery_inner_ms_ = 0;
  // CPU time (ms) of the busiest walk thread and of the serial part after the
  // walk: their sum is the recovery time of an otherwise idle machine.
  double recovery_walk_cpu_ms_ = 0, recovery_serial_cpu_ms_ = 0;
  uint64_t recovery_threads_used_ = 0, recovery_segments_ = 0, recovery_leaves_ = 0, stale_locks_cleared_ = 0;
  bool instant_restart_ = false, recovery_fallback_ = false;
  bool force_alloc_rebuild_ = false;  // a clean pool whose restart image is unusable
  uint64_t unused_image_bytes_ = 0;   // that image's block, as Close recorded its size
};

// ================================================================================
// Descent
// ================================================================================

template <class K>
typename LbTree<K>::LeafRef LbTree<K>::FindLeaf(typename KP::Arg key) {
  int spins = 0;
  for (;;) {
    Inner* node = root_.load(std::memory_order_acquire);
    uint64_t v = node->version.Current();
    if ((v & 1) || root_.load(std::memory_order_acquire) != node) {
      restarts_.Add();
      CpuRelax(spins);
      continue;
    }
    for (;;) {
      int i = ChildIndex(node, key);
      uint64_t c = node->child[i].load(std::memory_order_acquire);
      if (!Validate(node, v)) break;
      if (node->level == 1) {
        // Start the leaf's misses now, under the leaf version's (the side
        // table is a separate miss): the caller reads the leaf next.
        PrefetchLeaf(c);
        uint64_t lv = LeafVer(c).Current();
        if (lv & 1) break;
        // The parent unchanged after the leaf version was read means no split
        // of this leaf completed in between (a split updates the parent
        // before it unlocks the leaf).
        if (!Validate(node, v)) break;
        return {c, lv};
      }
      Inner* next = reinterpret_cast<Inner*>(c);
      // Fetch the child node's used lines at once (as prefetching B+-trees
      // do): its binary search and its child pointer touch several lines,
      // each otherwise a miss in turn.
      PrefetchInner(next);
      uint64_t nv = next->version.Current();
      if ((nv & 1) || !Validate(node, v)) break;
      node = next;
      v = nv;
    }
    restarts_.Add();
    CpuRelax(spins);
  }
}

template <class K>
void LbTree<K>::SplitInner(Inner* node, Inner* parent) {
  // Caller holds the locks of node and (if any) parent.
  int n = static_cast<int>(node->count.load(std::memory_order_relaxed));
  int mid = n / 2;
  uint64_t midkey = node->keys[mid].load(std::memory_order_relaxed);
  Inner* right = NewInner(node->level);
  int rn = n - mid - 1;
  for (int i = 0; i < rn; i++)
    right->keys[i].store(node->keys[mid + 1 + i].load(std::memory_order_relaxed), std::memory_order_release);
  for (int i = 0; i <= rn; i++)
    right->child[i].store(node->child[mid + 1 + i].load(std::memory_order_relaxed), std::memory_order_release);
  right->count.store(rn, std::memory_order_relaxed);
  node->count.store(mid, std::memory_order_relaxed);
  RefreshHeads(right);
  RefreshHeads(node);  // its keys may now share more
  if (parent != nullptr) {
    InsertIntoInner(parent, midkey, reinterpret_cast<uint64_t>(right));
  } else {
    Inner* nr = NewInner(node->level + 1);
    nr->keys[0].store(midkey, std::memory_order_release);
    nr->child[0].store(reinterpret_cast<uint64_t>(node), std::memory_order_release);
    nr->child[1].store(reinterpret_cast<uint64_t>(right), std::memory_order_release);
    nr->count.store(1, std::memory_order_relaxed);
    RefreshHeads(nr);
    root_.store(nr, std::memory_order_release);
  }
}

// Adds (sep -> new_leaf) to the level-1 node that routes sep, splitting full
// inner nodes top-down on the way (so the level-1 node has room).  Called by
// a leaf split while it still holds the old leaf's lock.
template <class K>
void LbTree<K>::InsertSeparator(uint64_t sep, uint64_t new_leaf) {
  int spins = 0;
  for (;;) {
    Inner* node = root_.load(std::memory_order_acquire);
    uint64_t v = node->version.Current();
    if ((v & 1) || root_.load(std::memory_order_acquire) != node) {
      CpuRelax(spins);
      continue;
    }
    Inner* parent = nullptr;
    uint64_t pv = 0;
    for (;;) {
      if (static_cast<int>(node->count.load(std::memory_order_relaxed)) >= inner_keys_) {
        // Full: split it now (eager top-down split), then start over.
        if (parent != nullptr) {
          if (!TryLock(parent, pv)) break;
          if (!TryLock(node, v)) {
            Unlock(parent);
            break;
          }
          SplitInner(node, parent);
          Unlock(node);
          Unlock(parent);
        } else {
          if (!TryLock(node, v)) break;
          if (root_.load(std::memory_order_acquire) != node) {
            Unlock(node);
            break;
          }
          SplitInner(node, nullptr);
          Unlock(node);
        }
        break;
      }
      if (node->level == 1) {
        if (!TryLock(node, v)) break;
        InsertIntoInner(node, sep, new_leaf);
        Unlock(node);
        return;
      }
      int i = ChildIndexSep(node, sep);
      Inner* next = reinterpret_cast<Inner*>(node->child[i].load(std::memory_order_acquire));
      if (!Validate(node, v)) break;
      uint64_t nv = next->version.Current();
      if ((nv & 1) || !Validate(node, v)) break;
      parent = node;
      pv = v;
      node = next;
      v = nv;
    }
    CpuRelax(spins);
  }
}

// ================================================================================
// Leaf operations
// ================================================================================

template <class K>
typename LbTree<K>::SlotPos LbTree<K>::FindInLeaf(uint64_t leaf, const Headers& h, typename KP::Arg key,
                                                 uint8_t fp) const {
  uint64_t match = match_(h.w, m_, fp);
  while (match != 0) {
    int bit = std::countr_zero(match);
    match &= match - 1;
    int b = bit / 16, s = bit % 16;
    uint64_t slot = Load(&Blk(leaf, b)->entry[s].key);
    if (keys_.Equal(slot, key)) return {b, s};
  }
  return {};
}

// Algorithm 2 (LBTreeLeafInsert), per block: the leaf has a free slot.
template <class K>
void LbTree<K>::LeafInsert(uint64_t leaf, uint64_t key_slot, uint64_t value, uint8_t fp) {
  Headers h = ReadHeaders(leaf);
  // Prefer a free slot in some block's header line (one line write); else the
  // first block with a free slot (§3.4 "the first non-full block").
  int blk = -1, slot = -1;
  for (int b = 0; b < m_ && blk < 0; b++) {
    uint64_t free = ~h.w[2 * b] & kBitmapMask & SlotsOfLine(HeaderLine(b, h.alt));
    if (free != 0) {
      blk = b;
      slot = std::countr_zero(free);
    }
  }
  for (int b = 0; b < m_ && blk < 0; b++) {
    uint64_t free = ~h.w[2 * b] & kBitmapMask;
    if (free != 0) {
      blk = b;
      slot = std::countr_zero(free);
    }
  }
  BlockHeader* hd = Hdr(leaf, blk, h.alt);
  int hline = HeaderLine(blk, h.alt);
  uint64_t w0 = h.w[2 * blk], w1 = h.w[2 * blk + 1];
  const uint64_t old_w1 = w1;
  Block* B = Blk(leaf, blk);
  int line = LineOfSlot(slot);

  // The new entry goes to a slot the durable bitmap marks free: unused space.
  pool_->Store64(&B->entry[slot].key, key_slot);
  pool_->Store64(&B->entry[slot].value, value);
  SetFp(&w0, &w1, slot, fp);
  w0 |= 1ull << slot;

  if (line == hline) {
    // Case 1 (Algorithm 2 lines 15-20): entry and header share one line, so
    // one NAW section writes one line.
    if (w1 != old_w1) pool_->Store64(&hd->word1, w1);
    pool_->Store64(&hd->word0, w0);
    // Persist the header line: the entry stores precede the header stores in
    // this line, so a crash exposes the new bit only with the new entry; and
    // the insert must be durable before the leaf is unlocked.
    pool_->Persist(LinePtr(leaf, blk, hline), kLineSize);
    inserts_line0_.Add();
    return;
  }
  // Case 2 (lines 21-35): entry moving.  Move header-line entries into the
  // free slots of the line being written anyway, so later inserts find room
  // in the header line.  Every target slot is free in the durable bitmap.
  uint64_t to_set = ~w0 & kBitmapMask & SlotsOfLine(line);
  uint64_t from_set = w0 & kBitmapMask & SlotsOfLine(hline);
  uint64_t moved = 0;
  while (to_set != 0 && from_set != 0) {
    int to = std::countr_zero(to_set), from = std::countr_zero(from_set);
    to_set &= to_set - 1;
    from_set &= from_set - 1;
    pool_->Store64(&B->entry[to].key, B->entry[from].key);
    pool_->Store64(&B->entry[to].value, B->entry[from].value);
    SetFp(&w0, &w1, to, GetFp(w0, w1, from));
    w0 = (w0 | (1ull << to)) & ~(1ull << from);
    moved++;
  }
  // Persist the entry line before the header NAW, so a crash after the NAW
  // never exposes bits for slots whose entries are still unwritten.
  pool_->Persist(LinePtr(leaf, blk, line), kLineSize);
  // word1 only changes fingerprints of slots free in the durable bitmap, so
  // it may reach PM before word0 (same line: word0 never before it).
  if (w1 != old_w1) pool_->Store64(&hd->word1, w1);
  pool_->Store64(&hd->word0, w0);
  // Persist the header (the NAW): the insert must be durable before return
  // and before readers can see it.
  pool_->Persist(LinePtr(leaf, blk, hline), kLineSize);
  inserts_moving_.Add();
  entries_moved_.Add(moved);
}

// Algorithm 3 (LBTreeLeafSplit) generalised to m blocks (§3.4).  The leaf is
// full.  The top half moves to a new leaf, which is linked through the unused
// sibling pointer; the inactive headers of blocks 1..m-1 get the bitmaps
// without the moved slots; one NAW of block 0's word0 then flips alt and
// clears the moved bits.  Deviation: when the new key belongs to the old leaf
// it is inserted by a second NAW section after the split commits (the
// paper's single section would write it into a slot the durable header still
// marks valid; docs "Deviations").
template <class K>
Status LbTree<K>::SplitAndInsert(uint64_t leaf, typename KP::Arg key, uint64_t key_slot, uint64_t value,
                                 uint8_t fp) {
  auto alloc = pool_->allocator().Allocate(node_size_, kBlockSize);
  if (!alloc.ok()) return alloc.status();
  const uint64_t nl = alloc.value();
  Headers h = ReadHeaders(leaf);

  struct Item {
    int b, s;
    uint64_t key, value;
    uint8_t fp;
  };
  std::vector<Item> items;
  items.reserve(kSlotsPerBlock * m_);
  for (int b = 0; b < m_; b++)
    for (int s = 0; s < kSlotsPerBlock; s++)
      items.push_back({b, s, Blk(leaf, b)->entry[s].key, Blk(leaf, b)->entry[s].value,
                       GetFp(h.w[2 * b], h.w[2 * b + 1], s)});
  std::sort(items.begin(), items.end(),
            [&](const Item& a, const Item& c) { return keys_.CompareSlots(a.key, c.key) < 0; });
  const int half = kSlotsPerBlock * m_ / 2;  // 7 m entries move
  const uint64_t sep_slot = items[half].key;
  const bool to_new = keys_.Compare(sep_slot, key) < 0;  // key > smallest moved key

  // Build the new leaf in DRAM: 7 entries per block in slots 7..13 (lines 2
  // and 3), so its header lines start empty (§3.3); alt = 0.
  alignas(64) Block img[kMaxBlocks];
  std::memset(img, 0, sizeof(img));
  uint64_t new_w[2 * kMaxBlocks] = {};
  for (int j = 0; j < half; j++) {
    const Item& it = items[half + j];
    int b = j / 7, s = 7 + j % 7;
    img[b].entry[s] = {it.key, it.value};
    SetFp(&new_w[2 * b], &new_w[2 * b + 1], s, it.fp);
    new_w[2 * b] |= 1ull << s;
  }
  if (to_new) {
    img[0].entry[6] = {key_slot, value};
    SetFp(&new_w[0], &new_w[1], 6, fp);
    new_w[0] |= 1ull << 6;
  }
  for (int b = 0; b < m_; b++) img[b].header = {new_w[2 * b], new_w[2 * b + 1]};
  img[0].tail[0] = Load(&Blk(leaf, 0)->tail[h.alt ? 1 : 0]);  // the old effective sibling
  img[0].tail[1] = 0;
  // The new leaf is unlinked: plain writes, persisted below before the NAW.
  pool_->Write(LeafPtr(nl), img, node_size_);

  // The old leaf's headers after the split.
  uint64_t cleared[kMaxBlocks] = {};
  for (int j = half; j < 2 * half; j++) cleared[items[j].b] |= 1ull << items[j].s;
  const bool new_alt = !h.alt;
  pool_->Store64(&Blk(leaf, 0)->tail[new_alt ? 1 : 0], nl);  // unused sibling pointer
  for (int b = 1; b < m_; b++) {
    BlockHeader* inactive = Hdr(leaf, b, new_alt);  // unused until the flip
    pool_->Store64(&inactive->word0, h.w[2 * b] & ~cleared[b]);
    pool_->Store64(&inactive->word1, h.w[2 * b + 1]);
  }
  uint64_t w0 = (h.w[0] & ~cleared[0] & ~kLockBit) ^ kAltBit;
  bool inserted_early = false;
  if (paper_split_ && !to_new) {
    // Algorithm 3 line 26 as published: insert into a slot that is free in
    // the post-split header image -- but still valid in the durable one.
    int blk = 0;
    while (blk < m_ && ((h.w[2 * blk] & ~cleared[blk]) & kBitmapMask) == kBitmapMask) blk++;
    uint64_t pw0 = blk == 0 ? w0 : h.w[2 * blk] & ~cleared[blk], pw1 = h.w[2 * blk + 1];
    int slot = std::countr_zero(~pw0 & kBitmapMask);
    pool_->Store64(&Blk(leaf, blk)->entry[slot].key, key_slot);
    pool_->Store64(&Blk(leaf, blk)->entry[slot].value, value);
    SetFp(&pw0, &pw1, slot, fp);
    pw0 |= 1ull << slot;
    BlockHeader* hd = blk == 0 ? &Blk(leaf, 0)->header : Hdr(leaf, blk, new_alt);
    pool_->Store64(&hd->word1, pw1);
    if (blk == 0) {
      w0 = pw0;
    } else {
      pool_->Store64(&hd->word0, pw0);
    }
    // Flush the early-inserted entry's line; the fence before the split's NAW
    // orders it, so a crash after the flip never shows the slot without its entry.
    pool_->Flush(LinePtr(leaf, blk, LineOfSlot(slot)), kLineSize);
    inserted_early = true;
  }
  // Persist the new leaf, the new sibling pointer and the alternative headers
  // before the NAW that makes them live: a crash after the flip must find
  // all of them complete.
  pool_->Flush(LeafPtr(nl), node_size_);
  pool_->Flush(LinePtr(leaf, 0, 3), kLineSize);
  for (int b = 1; b < m_; b++) pool_->Flush(LinePtr(leaf, b, HeaderLine(b, new_alt)), kLineSize);
  pool_->Fence();
  pool_->Store64(&Blk(leaf, 0)->header.word0, w0);
  // Persist the NAW: the split (and a new key placed in the new leaf) is
  // durable before the inner nodes route to the new leaf.
  pool_->Persist(LinePtr(leaf, 0, 0), kLineSize);

  splits_.Add();
  // The leaf count only now that the NAW linking the new leaf is durable, so
  // it never exceeds the leaves a crash leaves in the list (L10).  Concurrent
  // splits may persist their counts out of order: a count that lags only
  // weakens recovery's check, and Close and recovery write the exact one.
  PersistLeafCount(leaf_count_.fetch_add(1, std::memory_order_relaxed) + 1);
  // The new leaf's version word may hold anything from an earlier use of the
  // bytes; make it even (nobody can reach the leaf through DRAM yet).
  LeafVer(nl).Reset();
  if (to_new) {
    split_new_side_.Add();
  } else {
    split_old_side_.Add();
    if (!inserted_early) LeafInsert(leaf, key_slot, value, fp);
  }
  InsertSeparator(MakeSepFromSlot(sep_slot), nl);
  return Status::Ok();
}

template <class K>
Result<bool> LbTree<K>::Put(K key, uint64_t value, bool insert, bool update, bool fence) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  auto guard = pool_->epochs().Protect();
  const uint8_t fp = KP::Fingerprint(key);
  const uint64_t leaf = LockLeafOf(key);
  Headers h = ReadHeaders(leaf);
  SlotPos pos = FindInLeaf(leaf, h, key, fp);
  if (pos.block >= 0) {
    if (!update) {
      UnlockLeaf(leaf);
      return false;
    }
    StoreValue(leaf, pos.block, pos.slot, value, fence);
    UnlockLeaf(leaf);
    return !insert;  // Update: true; Upsert: false (the key was not new)
  }
  if (!insert) {
    UnlockLeaf(leaf);
    return false;
  }
  uint64_t key_slot;
  if constexpr (KP::kInline) {
    key_slot = key;
  } else {
    auto made = keys_.MakeSlot(key);  // persists the blob before any slot names it
    if (!made.ok()) {
      UnlockLeaf(leaf);
      return made.status();
    }
    key_slot = made.value();
  }
  if (LeafFull(h)) {
    Status s = SplitAndInsert(leaf, key, key_slot, value, fp);
    UnlockLeaf(leaf);
    if (!s.ok()) {
      if constexpr (!KP::kInline) keys_.Release(key_slot);
      return s;
    }
    MaybeRecordHints();
    return true;
  }
  LeafInsert(leaf, key_slot, value, fp);
  UnlockLeaf(leaf);
  return true;
}

// The leaf version unchanged (TryLockLeaf at the hint's version) means no
// writer has held the leaf since the lookup validated it: the update skips
// the descent, the fingerprint and the search.  Under the lock the slot is
// checked anyway (valid in the bitmap and holding this key), so a hint of
// another key cannot write the wrong slot.  Anything else -- no hint, a
// leaf changed meanwhile (another key of the same leaf updated first, in a
// group), a slot that fails the check -- takes Put's path.  UpdateHinted
// and UpdateHintedUnfenced both come here; on either path the second leaves
// the value word's fence to its caller (StoreValue).
template <class K>
Result<bool> LbTree<K>::Hinted(K key, uint64_t value, const typename BasicTree<K>::Hint& hint, bool fence) {
  auto search = [&] { return Put(key, value, false, true, fence); };
  const std::optional<HintedSlot> at = SlotOfHint(hint);
  if (!at || !KP::CheckArg(key).ok()) return search();
  auto guard = pool_->epochs().Protect();
  if (!TryLockLeaf(at->leaf, hint.word[1])) return search();
  if (!SlotHolds(*at, key)) {
    UnlockLeaf(at->leaf);
    return search();
  }
  StoreValue(at->leaf, at->block, at->slot, value, fence);
  UnlockLeaf(at->leaf);
  return true;
}

// A RUN OF HINTED UPDATES.  Hinted's steps for many keys, reordered: every
// leaf is locked and every slot checked first, then every value word is
// stored and its write-back started, then the leaves are unlocked.  On this
// CPU a locked instruction (an unlock, a lock, a shared counter) waits for
// the write-backs started before it, as a fence would, so one key at a time
// paid a whole write-back per key; here the first unlock waits once for
// them all.  The crash states are those of the keys' UpdateHintedUnfenced
// one after another: each word is one failure-atomic store naming a durable
// record, and nothing is fenced until the caller's fence.  A key whose hint
// fails (its leaf changed since the lookup, or the slot no longer holds it)
// ends the run before it, and the caller updates it alone.  Two keys of one
// leaf share its lock (the second's hint names the version the first
// locked at).
template <class K>
size_t LbTree<K>::UpdateHintedRunUnfenced(std::span<const K> keys, const uint64_t* values,
                                          const typename BasicTree<K>::Hint* hints) {
  constexpr size_t kMaxRun = 64;
  const size_t limit = std::min(keys.size(), kMaxRun);
  auto guard = pool_->epochs().Protect();
  struct Locked {
    uint64_t leaf;
    uint64_t version;  // the version it was locked at
  };
  Locked locked[kMaxRun];
  size_t nlocked = 0;
  uint64_t* words[kMaxRun];
  size_t n = 0;
  for (; n < limit; n++) {
    const std::optional<HintedSlot> at = SlotOfHint(hints[n]);
    if (!at || !KP::CheckArg(keys[n]).ok()) break;
    size_t j = 0;
    while (j < nlocked && locked[j].leaf != at->leaf) j++;
    if (j < nlocked) {
      if (locked[j].version != hints[n].word[1]) break;  // the leaf changed before this run locked it
    } else {
      if (!TryLockLeaf(at->leaf, hints[n].word[1])) break;
      locked[nlocked++] = {at->leaf, hints[n].word[1]};
    }
    if (!SlotHolds(*at, keys[n])) break;
    words[n] = &Blk(at->leaf, at->block)->entry[at->slot].value;
  }
  // Each word's write-back started, none fenced (WriteValueWord's unfenced
  // case): the caller's fence makes the run durable.
  for (size_t i = 0; i < n; i++) WriteValueWord(words[i], values[i], /*fence=*/false);
  updates_.Add(n);
  for (size_t j = 0; j < nlocked; j++) UnlockLeaf(locked[j].leaf);
  return n;
}

template <class K>
void LbTree<K>::ReadCandidates(uint64_t leaf, uint8_t fp, Candidates* c) const {
  const Headers h = ReadHeaders(leaf);
  uint64_t match = match_(h.w, m_, fp);
  c->n = 0;
  while (match != 0) {
    int bit = std::countr_zero(match);
    match &= match - 1;
    const ::pmtree::lbtree::Entry& e = Blk(leaf, bit / 16)->entry[bit % 16];
    c->key[c->n] = Load(&e.key);
    c->value[c->n] = Load(&e.value);
    c->bit[c->n] = bit;
    c->n++;
  }
}

template <class K>
bool LbTree<K>::MatchCandidates(const Candidates& c, const LeafRef& ref, typename KP::Arg key, uint64_t* value,
                                typename BasicTree<K>::Hint* hint) const {
  // The snapshot was consistent and persisted; comparing byte keys reads
  // blobs that the caller's epoch guard keeps alive.
  for (int i = 0; i < c.n; i++) {
    if (keys_.Equal(c.key[i], key)) {
      *value = c.value[i];
      if (hint != nullptr) *hint = {{ref.leaf | (static_cast<uint64_t>(c.bit[i] + 1) << 48), ref.version}};
      return true;
    }
  }
  return false;
}

template <class K>
bool LbTree<K>::Find(K key, uint64_t* value, typename BasicTree<K>::Hint* hint) {
  if (hint != nullptr) *hint = {};
  if (!KP::CheckArg(key).ok()) return false;
  auto guard = pool_->epochs().Protect();
  const uint8_t fp = KP::Fingerprint(key);
  Candidates c;
  for (;;) {
    LeafRef ref = FindLeaf(key);
    // Snapshot the candidates, then validate the leaf version: the HTM
    // transaction's atomicity, done optimistically.
    ReadCandidates(ref.leaf, fp, &c);
    if (!LeafVer(ref.leaf).ValidateFenced(ref.version)) {
      restarts_.Add();
      continue;
    }
    return MatchCandidates(c, ref, key, value, hint);
  }
}

template <class K>
void LbTree<K>::LookupManyForUpdate(std::span<const K> keys, uint64_t* values, bool* found,
                                    typename BasicTree<K>::Hint* hints) {
  auto guard = pool_->epochs().Protect();  // Find's inside nest in it
  for (size_t base = 0; base < keys.size(); base += kLookupLanes) {
    const size_t n = std::min(kLookupLanes, keys.size() - base);
    LookupLanes(keys.subspan(base, n), values + base, found + base, hints + base);
  }
}

// GROUP DESCENT.  The keys' lookups go down the tree together, one level
// per pass: in a pass every lane reads the node it prefetched in the pass
// before, picks the child and prefetches it, so a group's cache misses on
// each level overlap instead of following one another (the descents of a
// pipelined group are independent; one lookup alone has no such overlap).
// Each lane keeps FindLeaf's validation order exactly: a node's version is
// read before its child pointer is used, and its parent's version is
// validated after the child's version is read.  A lane whose validation
// fails (a writer got in) leaves the group and runs Find on its own, which
// retries; so the results are Find's.  The caller holds an epoch guard.
template <class K>
void LbTree<K>::LookupLanes(std::span<const K> keys, uint64_t* values, bool* found,
                            typename BasicTree<K>::Hint* hints) {
  struct Lane {
    Inner* node = nullptr;    // the inner node the next pass reads
    uint64_t v = 0;           // its version, once read
    Inner* parent = nullptr;  // the node that named it (nullptr: node is the root)
    uint64_t pv = 0;
    uint64_t leaf = 0;        // != 0: the descent reached this leaf
    bool alone = false;       // the group gave up this key: Find looks it up
  };
  const size_t n = keys.size();
  Lane lane[kLookupLanes];
  auto give_up = [&](Lane& l) {
    l.alone = true;
    restarts_.Add();
  };
  Inner* root = root_.load(std::memory_order_acquire);
  const uint64_t rv = root->version.Current();
  const bool root_ok = (rv & 1) == 0 && root_.load(std::memory_order_acquire) == root;
  for (size_t i = 0; i < n; i++) {
    lane[i].node = root;
    lane[i].v = rv;
    lane[i].alone = !root_ok || !KP::CheckArg(keys[i]).ok();
  }
  for (bool descending = true; descending;) {
    descending = false;
    for (size_t i = 0; i < n; i++) {
      Lane& l = lane[i];
      if (l.alone || l.leaf != 0) continue;
      if (l.parent != nullptr) {  // the node was named by its parent
        l.v = l.node->version.Current();
        if ((l.v & 1) || !Validate(l.parent, l.pv)) {
          give_up(l);
          continue;
        }
      }
      const uint64_t c = l.node->child[ChildIndex(l.node, keys[i])].load(std::memory_order_acquire);
      if (!Validate(l.node, l.v)) {
        give_up(l);
        continue;
      }
      l.parent = l.node;
      l.pv = l.v;
      if (l.node->level == 1) {
        PrefetchLeaf(c);
        pmtree::Prefetch(&LeafVer(c));
        l.leaf = c;
      } else {
        l.node = reinterpret_cast<Inner*>(c);
        PrefetchInner(l.node);
        descending = true;
      }
    }
  }
  // The leaves (prefetched by the last pass): FindLeaf's last checks, then
  // Find's snapshot and validation, then the byte keys' blobs prefetched
  // for the comparisons after.
  Candidates cand[kLookupLanes];
  LeafRef ref[kLookupLanes];
  for (size_t i = 0; i < n; i++) {
    Lane& l = lane[i];
    if (l.alone) continue;
    ref[i] = {l.leaf, LeafVer(l.leaf).Current()};
    if ((ref[i].version & 1) || !Validate(l.parent, l.pv)) {
      give_up(l);
      continue;
    }
    ReadCandidates(l.leaf, KP::Fingerprint(keys[i]), &cand[i]);
    if (!LeafVer(l.leaf).ValidateFenced(ref[i].version)) {
      give_up(l);
      continue;
    }
    for (int j = 0; j < cand[i].n; j++) keys_.Prefetch(cand[i].key[j], keys[i]);
  }
  for (size_t i = 0; i < n; i++) {
    if (lane[i].alone) {
      found[i] = Find(keys[i], &values[i], &hints[i]);
      continue;
    }
    hints[i] = {};
    found[i] = MatchCandidates(cand[i], ref[i], keys[i], &values[i], &hints[i]);
  }
}

template <class K>
Result<bool> LbTree<K>::Remove(K key) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));  // an over-long key: pmtree/tree.h
  auto guard = pool_->epochs().Protect();
  const uint8_t fp = KP::Fingerprint(key);
  const uint64_t leaf = LockLeafOf(key);
  Headers h = ReadHeaders(leaf);
  SlotPos pos = FindInLeaf(leaf, h, key, fp);
  if (pos.block < 0) {
    UnlockLeaf(leaf);
    return false;
  }
  const uint64_t slot = Blk(leaf, pos.block)->entry[pos.slot].key;
  BlockHeader* hd = Hdr(leaf, pos.block, h.alt);
  pool_->Store64(&hd->word0, h.w[2 * pos.block] & ~(1ull << pos.slot));
  // The delete is this one NAW (§3.1): persist it before returning and
  // before readers may see the slot gone.
  pool_->Persist(&hd->word0, 8);
  deletes_.Add();
  UnlockLeaf(leaf);
  if constexpr (!KP::kInline) keys_.Release(slot);  // after the removal is durable
  return true;
}

template <class K>
size_t LbTree<K>::Scan(K start, const K* end, std::span<Entry> out) {
  if (out.empty()) return 0;
  auto guard = pool_->epochs().Protect();
  size_t n = 0;
  bool have_last = false;
  uint64_t last_slot = 0;  // key slot of the last emitted entry (alive: epoch)
  uint64_t leaf = FindLeaf(start).leaf;
  struct Item {
    uint64_t key, value;
  };
  std::vector<Item> items;
  items.reserve(kSlotsPerBlock * m_);
  while (leaf != 0) {
    uint64_t next;
    for (;;) {
      uint64_t v = StableLeafVersion(leaf);
      items.clear();
      uint64_t w0 = Load(&Blk(leaf, 0)->header.word0);
      bool alt = (w0 & kAltBit) != 0;
      for (int b = 0; b < m_; b++) {
        uint64_t bits = Load(&Hdr(leaf, b, alt)->word0) & kBitmapMask;
        while (bits != 0) {
          int s = std::countr_zero(bits);
          bits &= bits - 1;
          const ::pmtree::lbtree::Entry& e = Blk(leaf, b)->entry[s];
          items.push_back({Load(&e.key), Load(&e.value)});
        }
      }
      next = Load(&Blk(leaf, 0)->tail[alt ? 1 : 0]);
      if (LeafVer(leaf).ValidateFenced(v)) break;
      restarts_.Add();
    }
    std::sort(items.begin(), items.end(),
              [&](const Item& a, const Item& b) { return keys_.CompareSlots(a.key, b.key) < 0; });
    for (const Item& it : items) {
      if (have_last ? keys_.CompareSlots(it.key, last_slot) <= 0 : keys_.Compare(it.key, start) < 0) continue;
      if (end != nullptr && keys_.Compare(it.key, *end) > 0) return n;
      out[n++] = {keys_.Load(it.key), it.value};
      have_last = true;
      last_slot = it.key;
      if (n == out.size()) return n;
    }
    leaf = next;
  }
  return n;
}

// ================================================================================
// Creation, bulk load, recovery
// ================================================================================

template <class K>
Status LbTree<K>::InitNew(KeyKind kind) {
  if (pool_->root(0) != 0) return Status::Busy("lbtree: create needs a fresh pool (root slot 0 is in use)");
  PMTREE_ASSIGN_OR_RETURN(uint64_t moff, pool_->allocator().Allocate(sizeof(Meta)));
  auto loff = pool_->allocator().Allocate(node_size_, kBlockSize);
  if (!loff.ok()) {
    pool_->allocator().Free(moff, sizeof(Meta));
    return loff.status();
  }
  head_ = loff.value();
  pool_->Zero(LeafPtr(head_), node_size_);
  Meta m{};
  m.magic = kMetaMagic;
  m.node_size = node_size_;
  m.key_kind = static_cast<uint32_t>(kind);
  m.head = head_;
  m.variant = paper_split_ ? kVariantPaperSplit : kVariantLbTree;
  m.leaves = 1;  // the head (L10)
  pool_->Write(pool_->At<Meta>(moff), &m, sizeof(m));
  // Persist the empty head leaf and the meta block before the root slot
  // names them: a crash after SetRoot must find both complete.
  pool_->Flush(LeafPtr(head_), node_size_);
  pool_->Persist(pool_->At<Meta>(moff), sizeof(Meta));
  pool_->SetRoot(0, moff);  // the commit point of creation
  meta_off_ = moff;
  Inner* root = NewInner(1);
  root->child[0].store(head_, std::memory_order_relaxed);
  root_.store(root, std::memory_order_release);
  LeafVer(head_).Reset();
  return Status::Ok();
}

template <class K>
void LbTree<K>::BuildLevel1(const std::vector<std::pair<uint64_t, uint64_t>>& routed, bool first_has_sep,
                            std::vector<Built>* out) {
  // routed[i] = (separator routing to leaf i, leaf); routed[0].first is
  // meaningful only when first_has_sep.
  const size_t fan = static_cast<size_t>(inner_keys_) + 1;
  for (size_t i = 0; i < routed.size(); i += fan) {
    size_t e = std::min(routed.size(), i + fan);
    Inner* n = NewInner(1);
    for (size_t j = i; j < e; j++) {
      n->child[j - i].store(routed[j].second, std::memory_order_relaxed);
      if (j > i) n->keys[j - i - 1].store(routed[j].first, std::memory_order_relaxed);
    }
    n->count.store(static_cast<uint32_t>(e - i - 1), std::memory_order_relaxed);
    RefreshHeads(n);
    out->push_back({n, routed[i].first, i > 0 || first_has_sep});
  }
}

template <class K>
Inner* LbTree<K>::BuildUpper(std::vector<Built> level) {
  const size_t fan = static_cast<size_t>(inner_keys_) + 1;
  while (level.size() > 1) {
    std::vector<Built> up;
    for (size_t i = 0; i < level.size(); i += fan) {
      size_t e = std::min(level.size(), i + fan);
      Inner* n = NewInner(level[i].node->level + 1);
      for (size_t j = i; j < e; j++) {
        n->child[j - i].store(reinterpret_cast<uint64_t>(level[j].node), std::memory_order_relaxed);
        if (j > i) n->keys[j - i - 1].store(level[j].low_sep, std::memory_order_relaxed);
      }
      n->count.store(static_cast<uint32_t>(e - i - 1), std::memory_order_relaxed);
      RefreshHeads(n);
      up.push_back({n, level[i].low_sep, level[i].has_low});
    }
    level = std::move(up);
  }
  return level[0].node;
}

// Replaces the inner nodes by ones built over `routed` (list order; entry 0
// is the head and its separator is ignored).  Single-threaded callers only.
template <class K>
Status LbTree<K>::RebuildFromRoutes(std::vector<std::pair<uint64_t, uint64_t>> routed) {
  std::vector<Built> level1;
  BuildLevel1(routed, false, &level1);
  Inner* root = BuildUpper(std::move(level1));
  root_.store(root, std::memory_order_release);
  for (auto& r : routed) LeafVer(r.second).Reset();
  return Status::Ok();
}

template <class K>
Status LbTree<K>::BulkLoad(std::span<const InputEntry> sorted, double fill) {
  if (!(fill > 0 && fill <= 1)) return Status::InvalidArgument("lbtree bulk load: fill must be in (0, 1]");
  {
    Headers h = ReadHeaders(head_);
    if (CountEntries(h) != 0 || Load(&Blk(head_, 0)->tail[h.alt ? 1 : 0]) != 0 ||
        leaf_count_.load() != 1)
      return Status::InvalidArgument("lbtree bulk load: tree not empty");
  }
  for (size_t i = 0; i < sorted.size(); i++) {
    PMTREE_RETURN_IF_ERROR(KP::CheckArg(sorted[i].first));
    if (i > 0 && !(sorted[i - 1].first < sorted[i].first))
      return Status::InvalidArgument("lbtree bulk load: input not strictly ascending at index " + std::to_string(i));
  }
  if (sorted.empty()) return Status::Ok();
  const int cap = kSlotsPerBlock * m_;
  const int per = std::clamp(static_cast<int>(std::lround(cap * fill)), 1, cap);
  const size_t nleaves = (sorted.size() + per - 1) / per;

  // Allocate every leaf and key blob first; on failure free them all (none is
  // reachable yet) and leave the tree empty.
  std::vector<uint64_t> leaves(nleaves);
  leaves[0] = head_;
  std::vector<uint64_t> slots(sorted.size());
  auto undo = [&](size_t nl, size_t ns) {
    for (size_t i = 1; i < nl; i++) pool_->allocator().Free(leaves[i], node_size_);
    for (size_t i = 0; i < ns; i++) keys_.FreeUnpublished(slots[i]);
  };
  for (size_t i = 1; i < nleaves; i++) {
    auto r = pool_->allocator().Allocate(node_size_, kBlockSize);
    if (!r.ok()) {
      undo(i, 0);
      return r.status();
    }
    leaves[i] = r.value();
  }
  for (size_t i = 0; i < sorted.size(); i++) {
    if constexpr (KP::kInline) {
      slots[i] = sorted[i].first;
    } else {
      auto r = keys_.MakeSlotUnfenced(sorted[i].first);  // the fence before the head's NAW completes it
      if (!r.ok()) {
        undo(nleaves, i);
        return r.status();
      }
      slots[i] = r.value();
    }
  }
  // Fill leaves: `per` entries spread over the blocks, packed at the end of
  // each block as a split packs its new leaf (header lines stay free).
  const Headers head_h = ReadHeaders(head_);
  const bool head_new_alt = !head_h.alt;
  uint64_t head_w0 = 0, head_w1 = 0;
  for (size_t li = 0; li < nleaves; li++) {
    size_t first = li * per, cnt = std::min<size_t>(per, sorted.size() - first);
    alignas(64) Block img[kMaxBlocks];
    std::memset(img, 0, sizeof(img));
    uint64_t w[2 * kMaxBlocks] = {};
    size_t idx = first;
    for (int b = 0; b < m_; b++) {
      size_t in_block = cnt / m_ + (static_cast<size_t>(b) < cnt % m_ ? 1 : 0);
      for (size_t j = 0; j < in_block; j++, idx++) {
        int s = kSlotsPerBlock - static_cast<int>(in_block) + static_cast<int>(j);
        img[b].entry[s] = {slots[idx], sorted[idx].second};
        SetFp(&w[2 * b], &w[2 * b + 1], s, KP::Fingerprint(sorted[idx].first));
        w[2 * b] |= 1ull << s;
      }
    }
    uint64_t next = li + 1 < nleaves ? leaves[li + 1] : 0;
    if (li > 0) {
      for (int b = 0; b < m_; b++) img[b].header = {w[2 * b], w[2 * b + 1]};
      img[0].tail[0] = next;
      pool_->Write(LeafPtr(leaves[li]), img, node_size_);
      // Flush each bulk-loaded leaf; the fence before the head's NAW orders them all,
      // so a crash never leaves the chain naming a partly written leaf.
      pool_->Flush(LeafPtr(leaves[li]), node_size_);
      continue;
    }
    // The head is empty, so its slots, its unused sibling pointer and its
    // inactive headers are unused space; one NAW below commits them all.
    for (int b = 0; b < m_; b++)
      for (int s = 0; s < kSlotsPerBlock; s++)
        if (w[2 * b] >> s & 1) {
          pool_->Store64(&Blk(head_, b)->entry[s].key, img[b].entry[s].key);
          pool_->Store64(&Blk(head_, b)->entry[s].value, img[b].entry[s].value);
        }
    pool_->Store64(&Blk(head_, 0)->tail[head_new_alt ? 1 : 0], next);
    for (int b = 1; b < m_; b++) {
      BlockHeader* hd = Hdr(head_, b, head_new_alt);
      pool_->Store64(&hd->word0, w[2 * b]);
      pool_->Store64(&hd->word1, w[2 * b + 1]);
    }
    // Flush the head's slots, sibling pointer and inactive headers (not its
    // line 0, which the NAW below writes): they must be durable before it.
    for (int b = 0; b < m_; b++)
      for (int line = 0; line < 4; line++)
        if (b != 0 || line != 0) pool_->Flush(LinePtr(head_, b, line), kLineSize);
    head_w0 = w[0];
    head_w1 = w[1];
  }
  // Persist every new leaf and the head's new contents before the NAW that
  // links them: a crash before it leaves the tree empty, after it complete.
  pool_->Fence();
  pool_->Store64(&Blk(head_, 0)->header.word1, head_w1);
  pool_->Store64(&Blk(head_, 0)->header.word0, head_w0 | (head_new_alt ? kAltBit : 0));
  // Persist the NAW: the bulk load is durable when it returns.
  pool_->Persist(LinePtr(head_, 0, 0), kLineSize);
  leaf_count_.store(nleaves);
  PersistLeafCount(nleaves);  // after the NAW that links the loaded leaves (L10)

  std::vector<std::pair<uint64_t, uint64_t>> routed(nleaves);
  for (size_t li = 0; li < nleaves; li++) routed[li] = {li == 0 ? 0 : MakeSepFromSlot(slots[li * per]), leaves[li]};
  PMTREE_RETURN_IF_ERROR(RebuildFromRoutes(std::move(routed)));
  std::vector<uint64_t> all(leaves.begin(), leaves.end());
  RecordHints(all);
  return Status::Ok();
}

// Picks up to hint_target_ evenly spaced leaves of `leaves_in_order` (head
// excluded) and commits them with the hint array's A/B switch.
template <class K>
void LbTree<K>::RecordHints(const std::vector<uint64_t>& leaves_in_order) {
  std::lock_guard g(hint_mu_);
  std::vector<uint64_t> pick;
  size_t n = leaves_in_order.size();
  int want = std::min<int>(hint_target_, kMaxHints);
  if (n > 1 && want > 0) {
    size_t segs = std::min<size_t>(static_cast<size_t>(want) + 1, n);
    for (size_t i = 1; i < segs; i++) {
      uint64_t leaf = leaves_in_order[i * n / segs];
      if (leaf != head_ && (pick.empty() || pick.back() != leaf)) pick.push_back(leaf);
    }
  }
  Meta* mt = meta();
  uint64_t sel = Load(&mt->hint_sel) & 1;
  HintArray& target = mt->hints[sel ^ 1];
  HintArray img{};
  img.count = pick.size();
  for (size_t i = 0; i < pick.size(); i++) img.leaf[i] = pick[i];
  pool_->Write(&target, &img, sizeof(img));
  // Persist the inactive hint array before the switch names it, so a crash
  // never selects a half-written array.
  pool_->Persist(&target, sizeof(img));
  pool_->Store64(&mt->hint_sel, sel ^ 1);
  // Persist the switch: recovery after a crash uses the new hints (either
  // array is correct; this only keeps the segments balanced).
  pool_->Persist(&mt->hint_sel, 8);
  hint_leaf_count_ = leaf_count_.load(std::memory_order_relaxed);
  hint_records_.Add();
}

// Leftmost leaves of the nodes of the highest inner level that has enough
// nodes, read optimistically.  Returns empty if a node changed meanwhile.
template <class K>
std::vector<uint64_t> LbTree<K>::CollectHintsFromDram() {
  const size_t want = static_cast<size_t>(hint_target_) + 1;
  std::vector<uint64_t> frontier{reinterpret_cast<uint64_t>(root_.load(std::memory_order_acquire))};
  uint32_t level = reinterpret_cast<Inner*>(frontier[0])->level;
  for (;;) {
    if (level == 0 || frontier.size() >= want) break;
    std::vector<uint64_t> next;
    for (uint64_t p : frontier) {
      Inner* n = reinterpret_cast<Inner*>(p);
      uint64_t v = n->version.Current();
      if (v & 1) return {};
      int cnt = static_cast<int>(std::min<uint32_t>(n->count.load(std::memory_order_relaxed), inner_keys_));
      for (int i = 0; i <= cnt; i++) next.push_back(n->child[i].load(std::memory_order_acquire));
      if (!Validate(n, v)) return {};
    }
    frontier = std::move(next);
    level--;
  }
  std::vector<uint64_t> leaves;
  for (uint64_t p : frontier) {
    uint64_t c = p;
    for (uint32_t l = level; l > 0; l--) {
      Inner* n = reinterpret_cast<Inner*>(c);
      uint64_t v = n->version.Current();
      if (v & 1) return {};
      c = n->child[0].load(std::memory_order_acquire);
      if (!Validate(n, v)) return {};
    }
    if (leaves.empty() || leaves.back() != c) leaves.push_back(c);
  }
  return leaves;
}

template <class K>
void LbTree<K>::MaybeRecordHints() {
  uint64_t lc = leaf_count_.load(std::memory_order_relaxed);
  {
    std::unique_lock g(hint_mu_, std::try_to_lock);
    if (!g.owns_lock()) return;
    if (lc < 2 * hint_leaf_count_ || lc < 8) return;
  }
  std::vector<uint64_t> leaves = CollectHintsFromDram();
  if (!leaves.empty()) RecordHints(leaves);
}

template <class K>
void LbTree<K>::ScanSegment(uint64_t start, uint64_t stop, uint64_t max_steps, SegmentResult* out) {
  uint64_t leaf = start;
  uint64_t steps = 0;
  while (leaf != 0) {
    if (stop != 0 && leaf == stop) {
      out->reached_end = true;
      return;
    }
    // L2: bounds and alignment before any read.
    if (leaf % kBlockSize != 0 || !pool_->InHeap(leaf, node_size_)) {
      out->status = Status::Corruption("lbtree leaf at offset " + std::to_string(leaf) +
                                       ": outside the heap or not 256-byte aligned (invariant L2)");
      return;
    }
    if (++steps > max_steps) {
      out->status = Status::Corruption("lbtree leaf list from offset " + std::to_string(start) +
                                       ": longer than the heap allows, a cycle (invariant L2)");
      return;
    }
    Block* b0 = Blk(leaf, 0);
    uint64_t w0 = Load(&b0->header.word0);
    if (w0 & kLockBit) {
      // Recovery rule (paper §3.1 "Crash Recovery"): a lock bit that reached
      // PM before a crash is stale; clear it.
      w0 &= ~kLockBit;
      pool_->Store64(&b0->header.word0, w0);
      // Persist the cleared bit so a later crash does not resurrect it.
      pool_->Persist(&b0->header.word0, 8);
      out->stale_locks++;
    }
    bool alt = (w0 & kAltBit) != 0;
    LeafRecord rec{leaf, 0, false};
    for (int b = 0; b < m_; b++) {
      uint64_t bits = Load(&Hdr(leaf, b, alt)->word0) & kBitmapMask;
      while (bits != 0) {
        int s = std::countr_zero(bits);
        bits &= bits - 1;
        uint64_t slot = Blk(leaf, b)->entry[s].key;
        if constexpr (!KP::kInline) {
          Status cs = keys_.CheckSlot(slot);
          if (!cs.ok()) {
            out->status = cs.Annotate("lbtree leaf at offset " + std::to_string(leaf));
            return;
          }
          out->blobs.push_back({KP::BlobOffset(slot), keys_.SlotBytes(slot)});
        }
        if (!rec.nonempty || keys_.CompareSlots(slot, rec.min_slot) < 0) rec.min_slot = slot;
        rec.nonempty = true;
      }
    }
    out->leaves.push_back(rec);
    leaf = b0->tail[alt ? 1 : 0];
    // The walk chases one pointer per leaf: start loading the next leaf's
    // lines now, so their misses overlap (a prefetch of a bad offset is
    // harmless; L2 is checked above before any read).
    if (leaf != 0 && leaf != stop && pool_->InHeap(leaf, node_size_))
      PrefetchLeaf(leaf);
  }
  out->reached_end = stop == 0;
}

template <class K>
void LbTree<K>::FinishSegment(SegmentResult* out) {
  if (!out->status.ok() || !out->reached_end) return;
  out->blocks.reserve(out->leaves.size() + out->blobs.size());
  for (const LeafRecord& rec : out->leaves) {
    LeafVer(rec.leaf).Reset();
    out->blocks.push_back({rec.leaf, node_size_});
  }
  out->blocks.insert(out->blocks.end(), out->blobs.begin(), out->blobs.end());
  std::sort(out->blocks.begin(), out->blocks.end());
}

template <class K>
Status LbTree<K>::RecoverFrom(uint64_t meta_off, uint32_t threads) {
  auto t0 = std::chrono::steady_clock::now();
  meta_off_ = meta_off;
  head_ = meta()->head;
  if (head_ % kBlockSize != 0 || !pool_->InHeap(head_, node_size_))
    return Status::Corruption("lbtree meta at offset " + std::to_string(meta_off) +
                              ": head leaf offset outside the heap (invariant L1)");
  bool done = false;
  PMTREE_RETURN_IF_ERROR(TryInstantRestart(&done));
  if (done) {
    recovery_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Status::Ok();
  }

  std::vector<uint64_t> starts = SegmentStarts();
  std::vector<SegmentResult> res;
  double serial_cpu0 = 0;
  PMTREE_RETURN_IF_ERROR(WalkSegments(&starts, threads, &res, &serial_cpu0));
  auto lap = [t = std::chrono::steady_clock::now()]() mutable {
    auto now = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(now - t).count();
    t = now;
    return ms;
  };
  recovery_walk_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // L10: leaves are never freed and the meta block never counts more leaves
  // than the list durably has, so a walk that reaches fewer met a cut leaf
  // list (a zeroed sibling pointer or page): report it before the allocator
  // rebuild would turn the lost leaves into free space.  Checked after a
  // crash and after a clean close alike, and under a key-value store too
  // (it needs no allocator state).
  uint64_t walked = 0;
  for (const auto& r : res) walked += r.leaves.size();
  const uint64_t counted = Load(&meta()->leaves);
  if (counted == 0 || counted > walked)
    return Status::Corruption("lbtree: the leaf list reaches " + std::to_string(walked) +
                              " leaves but the meta block counts " + std::to_string(counted) +
                              (counted == 0 ? " (never 0: a damaged meta block)" : ": leaves unreachable (a cut leaf list?)") +
                              " (invariant L10)");
  if (!pool_->clean_shutdown() || force_alloc_rebuild_) PMTREE_RETURN_IF_ERROR(RebuildAllocator(&res));
  recovery_alloc_ms_ = lap();

  // Routing: head first, then every nonempty leaf with its min key (L7).
  std::vector<std::pair<uint64_t, uint64_t>> routed;
  std::vector<uint64_t> all;
  uint64_t count = 0;
  for (auto& r : res) {
    for (auto& rec : r.leaves) {
      all.push_back(rec.leaf);
      count++;
      if (routed.empty()) {
        routed.push_back({0, rec.leaf});
      } else if (rec.nonempty) {
        routed.push_back({MakeSepFromSlot(rec.min_slot), rec.leaf});
      }
    }
    stale_locks_cleared_ += r.stale_locks;
  }
  leaf_count_.store(count);
  if (count != counted) PersistLeafCount(count);  // the exact count (split counts may lag)
  recovery_route_ms_ = lap();
  PMTREE_RETURN_IF_ERROR(RebuildFromRoutes(std::move(routed)));
  recovery_inner_ms_ = lap();
  recovery_threads_used_ = res.size();
  recovery_segments_ = starts.size();
  recovery_leaves_ = count;
  RecordHints(all);
  recovery_serial_cpu_ms_ = ThreadCpuMs() - serial_cpu0;
  recovery_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

// Segments: head, then the recorded hints (L8), validated cheaply here and
// by the walk itself (each segment must reach the next start).
template <class K>
std::vector<uint64_t> LbTree<K>::SegmentStarts() {
  const HintArray& ha = meta()->hints[Load(&meta()->hint_sel) & 1];
  std::vector<uint64_t> starts{head_};
  uint64_t hc = std::min<uint64_t>(ha.count, kMaxHints);
  for (uint64_t i = 0; i < hc; i++) {
    uint64_t h = ha.leaf[i];
    if (h % kBlockSize != 0 || !pool_->InHeap(h, node_size_) ||
        std::find(starts.begin(), starts.end(), h) != starts.end()) {
      starts.resize(1);  // unusable hints: one sequential walk
      break;
    }
    starts.push_back(h);
  }
  return starts;
}

// Walks the leaf list from `starts` with up to `threads` threads, one result
// per thread (a single walk from the head when a segment went wrong: then
// *starts is cut to the head).  *serial_cpu0 is this thread's CPU time once
// the parallel part ended.
template <class K>
Status LbTree<K>::WalkSegments(std::vector<uint64_t>* starts_io, uint32_t threads, std::vector<SegmentResult>* res_out,
                               double* serial_cpu0) {
  std::vector<uint64_t>& starts = *starts_io;
  std::vector<SegmentResult>& res = *res_out;
  const uint64_t max_steps = pool_->size() / node_size_ + 1;
  uint32_t nthreads = std::max<uint32_t>(1, std::min<uint32_t>(threads, static_cast<uint32_t>(starts.size())));
  // Thread t walks segments [t*S/T, (t+1)*S/T): contiguous leaf ranges.
  res.assign(nthreads, SegmentResult{});
  std::vector<double> walk_cpu(nthreads);
  auto walk = [&](uint32_t t) {
    const double c0 = ThreadCpuMs();
    size_t s0 = t * starts.size() / nthreads, s1 = (t + 1) * starts.size() / nthreads;
    uint64_t stop = s1 < starts.size() ? starts[s1] : 0;
    ScanSegment(starts[s0], stop, max_steps, &res[t]);
    FinishSegment(&res[t]);
    walk_cpu[t] = ThreadCpuMs() - c0;
  };
  std::vector<std::thread> pool_threads;
  for (uint32_t t = 1; t < nthreads; t++) pool_threads.emplace_back(walk, t);
  walk(0);
  for (auto& th : pool_threads) th.join();
  *serial_cpu0 = ThreadCpuMs();
  recovery_walk_cpu_ms_ = *std::max_element(walk_cpu.begin(), walk_cpu.end());
  bool ok = true;
  for (auto& r : res) {
    if (!r.status.ok() || !r.reached_end) ok = false;
  }
  if (!ok && starts.size() > 1) {
    // A hint was not where the list said (cannot happen unless the meta block
    // is damaged): fall back to one walk from the head.
    recovery_fallback_ = true;
    res.assign(1, SegmentResult{});
    ScanSegment(head_, 0, max_steps, &res[0]);
    FinishSegment(&res[0]);
    starts.resize(1);
  }
  for (auto& r : res) {
    if (!r.status.ok()) return r.status;
    if (!r.reached_end) return Status::Corruption("lbtree: leaf list walk did not terminate (invariant L2)");
  }
  return Status::Ok();
}

template <class K>
void LbTree<K>::PersistLeafCount(uint64_t leaves) {
  pool_->Store64(&meta()->leaves, leaves);
  // Persist the count before the operation returns; every caller stores it
  // only after the leaves it counts are durably linked, so no crash state
  // has the count above the list (L10).
  pool_->Persist(&meta()->leaves, 8);
}

// Allocator (rule 4 of allocator.h): after a crash, everything reachable is
// in use and the rest of the heap is free again.  The allocator's rebuild is
// serial, so it gets all blocks at once in ascending offset order (each
// segment sorted its blocks in parallel; merged here): each goes in next to
// the previous one.  In list order the offsets are random.
template <class K>
Status LbTree<K>::RebuildAllocator(std::vector<SegmentResult>* res_io) {
  std::vector<SegmentResult>& res = *res_io;
  Allocator& al = pool_->allocator();
  std::vector<std::pair<uint64_t, uint64_t>> blocks = std::move(res[0].blocks);
  for (size_t t = 1; t < res.size(); t++) {
    size_t mid = blocks.size();
    blocks.insert(blocks.end(), res[t].blocks.begin(), res[t].blocks.end());
    std::inplace_merge(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(mid), blocks.end());
    std::vector<std::pair<uint64_t, uint64_t>>().swap(res[t].blocks);
  }
  al.BeginRebuild();
  Status s = al.MarkUsed(meta_off_, sizeof(Meta));
  if (s.ok()) s = al.MarkUsedSorted(blocks);
  if (!s.ok()) return s.Annotate("lbtree recovery");
  al.EndRebuild();
  // After a clean close whose image was unusable, the walk must reach what
  // the close left in use but the image; fewer bytes mean leaves became
  // unreachable (a cut leaf list): report it rather than turn them into
  // free space.  Leaves are never freed, so nothing else differs.  Not
  // when a key-value store holds the rebuild (allocator.h, "Owners").  (A
  // pool without the image's size is refused in TryInstantRestart.)
  const uint64_t saved = pool_->saved_bytes_in_use();
  if (force_alloc_rebuild_ && saved != 0 && !al.rebuild_end_pending() &&
      al.bytes_in_use() + unused_image_bytes_ != saved)
    return Status::Corruption("lbtree: recovery reaches " + std::to_string(al.bytes_in_use() + unused_image_bytes_) +
                              " bytes but the clean close left " + std::to_string(saved) +
                              " in use: blocks unreachable (a cut leaf list?)");
  return Status::Ok();
}

// ---- instant restart ----------------------------------------------------------------

template <class K>
Status LbTree<K>::WriteRestartImage() {
  // In-order walk of the inner nodes: (separator, leaf) per routed leaf.
  std::vector<std::pair<uint64_t, uint64_t>> routed;
  struct Frame {
    Inner* n;
    bool has_low;
    uint64_t low;
  };
  std::vector<Frame> stack{{root_.load(), false, 0}};
  // Iterative DFS keeping left-to-right order: push children in reverse.
  while (!stack.empty()) {
    Frame f = stack.back();
    stack.pop_back();
    int cnt = static_cast<int>(f.n->count.load());
    if (f.n->level == 1) {
      for (int i = 0; i <= cnt; i++) {
        bool has = i > 0 || f.has_low;
        uint64_t sep = i > 0 ? f.n->keys[i - 1].load() : f.low;
        routed.push_back({has ? sep : 0, f.n->child[i].load()});
      }
      continue;
    }
    for (int i = cnt; i >= 0; i--) {
      bool has = i > 0 || f.has_low;
      stack.push_back({reinterpret_cast<Inner*>(f.n->child[i].load()), has, i > 0 ? f.n->keys[i - 1].load() : f.low});
    }
  }
  std::vector<uint64_t> words{kRestartMagic, routed.size(), 0};
  for (size_t i = 0; i < routed.size(); i++) {
    words.push_back(routed[i].second);
    if (i == 0) continue;
    if constexpr (KP::kInline) {
      words.push_back(routed[i].first);
    } else {
      AppendKeyWords(*S::Ptr(routed[i].first), &words);
    }
  }
  words[2] = words.size() * 8;
  auto r = pool_->allocator().Allocate(words.size() * 8);
  Meta* mt = meta();
  // The exact leaf count (L10): no split runs now, and one that ran
  // concurrently may have persisted a lagging count.
  pool_->Store64(&mt->leaves, leaf_count_.load());
  if (!r.ok()) {
    // No room for the image: the next open walks the leaves instead.
    pool_->Store64(&mt->restart, 0);
    pool_->Store64(&mt->restart_bytes, 0);
    // Persist so a stale image offset is never trusted (restart,
    // restart_bytes and leaves share the meta block's first line).
    pool_->Persist(&mt->restart, 32);
    return Status::Ok();
  }
  void* img = pool_->At<void>(r.value());
  pool_->Write(img, words.data(), words.size() * 8);
  // Persist the image before the meta block names it.
  pool_->Persist(img, words.size() * 8);
  pool_->Store64(&mt->restart, r.value());
  pool_->Store64(&mt->restart_bytes, words.size() * 8);
  // Persist the image offset and size and the leaf count (one line): the
  // clean-shutdown flag Pool::Close writes next must never be durable
  // without them.
  pool_->Persist(&mt->restart, 32);
  return Status::Ok();
}

template <class K>
Status LbTree<K>::TryInstantRestart(bool* done) {
  *done = false;
  Meta* mt = meta();
  uint64_t off = mt->restart;
  if (off == 0) return Status::Ok();
  auto forget = [&] {
    pool_->Store64(&mt->restart, 0);
    pool_->Store64(&mt->restart_bytes, 0);
    // Persist: the image is consumed (or untrusted) and is never read again.
    pool_->Persist(&mt->restart, 24);
  };
  // An image that fails a check is not used; its block is reclaimed by
  // rebuilding the allocator from the walk, which must then reach what the
  // clean close left in use but the image (RecoverFrom).
  // A Close of this build writes restart_bytes (never 0: the image has a
  // header) with restart, so 0 here is damage or a pool closed before the
  // word was kept; either way the walk's bytes could not be checked and a cut
  // list would be absorbed, so the pool is refused as it is.
  auto Untrusted = [&] {
    if (mt->restart_bytes == 0)
      return Status::Corruption("lbtree: the restart image at offset " + std::to_string(off) +
                                " is unusable and the meta block does not record its size (restart_bytes 0), "
                                "so lost leaves cannot be ruled out");
    force_alloc_rebuild_ = true;
    unused_image_bytes_ = Allocator::RoundUp(mt->restart_bytes);
    forget();
    return Status::Ok();
  };
  if (!pool_->clean_shutdown()) {
    // A crash after Close wrote the image, or a crash of a later session: the
    // walk below rebuilds everything and reclaims the image's space.
    forget();
    return Status::Ok();
  }
  if (off % 8 != 0 || !pool_->InHeap(off, sizeof(RestartImage))) return Untrusted();
  const auto* hdr = pool_->At<RestartImage>(off);
  if (hdr->magic != kRestartMagic || hdr->bytes < sizeof(RestartImage) || !pool_->InHeap(off, hdr->bytes) ||
      (mt->restart_bytes != 0 && hdr->bytes != mt->restart_bytes) || hdr->leaves == 0 || hdr->leaves > pool_->size() / node_size_)
    return Untrusted();
  const uint64_t* w = reinterpret_cast<const uint64_t*>(hdr + 1);
  const uint64_t nw = (hdr->bytes - sizeof(RestartImage)) / 8;
  uint64_t i = 0;
  std::vector<std::pair<uint64_t, uint64_t>> routed;
  for (uint64_t li = 0; li < hdr->leaves; li++) {
    if (i >= nw) return Untrusted();
    uint64_t leaf = w[i++];
    if (leaf % kBlockSize != 0 || !pool_->InHeap(leaf, node_size_)) return Untrusted();
    uint64_t sep = 0;
    if (li > 0) {
      if constexpr (KP::kInline) {
        if (i >= nw) return Untrusted();
        sep = w[i++];
      } else {
        std::optional<std::string_view> key = ReadKeyWords(w, nw, &i);
        if (!key) return Untrusted();
        sep = MakeSep(*key);
      }
    }
    routed.push_back({sep, leaf});
  }
  if (routed[0].second != head_) return Untrusted();
  const uint64_t img_bytes = hdr->bytes;
  // The image routes only nonempty leaves; the meta block's count (exact at
  // Close, L10) also counts the empty ones, so later splits persist counts
  // the next crash recovery can hold the list to.
  leaf_count_.store(std::max<uint64_t>(routed.size(), std::min(Load(&mt->leaves), pool_->size() / node_size_)));
  std::vector<uint64_t> all;
  for (auto& r : routed) all.push_back(r.second);
  PMTREE_RETURN_IF_ERROR(RebuildFromRoutes(std::move(routed)));
  forget();
  pool_->allocator().Free(off, img_bytes);
  // Leaves that are unreferenced (empty ones dropped at an earlier recovery)
  // are not counted; the next crash recovery counts them again.
  instant_restart_ = true;
  recovery_leaves_ = 0;
  *done = true;
  return Status::Ok();
}

template <class K>
Status LbTree<K>::Close() {
  if (closed_) return Status::Ok();
  closed_ = true;
  PMTREE_RETURN_IF_ERROR(WriteRestartImage());
  return pool_->Close();
}

// ================================================================================
// Verify and Stats
// ================================================================================

template <class K>
Status LbTree<K>::VerifyInner(const Inner* n, bool has_lo, uint64_t lo, bool has_hi, uint64_t hi,
                              std::vector<std::tuple<uint64_t, bool, uint64_t, bool, uint64_t>>* leaves) const {
  auto where = [&] { return "lbtree inner node at " + std::to_string(reinterpret_cast<uintptr_t>(n)); };
  uint64_t v = n->version.Current();
  if (v & 1) return Status::Corruption(where() + ": locked while idle (invariant L6)");
  int cnt = static_cast<int>(n->count.load());
  if (cnt < 0 || cnt > inner_keys_) return Status::Corruption(where() + ": count out of range (invariant L6)");
  for (int i = 0; i < cnt; i++) {
    uint64_t k = n->keys[i].load();
    if (i > 0 && S::CmpSeps(n->keys[i - 1].load(), k) >= 0)
      return Status::Corruption(where() + ": separators not ascending (invariant L6)");
    if ((has_lo && S::CmpSeps(k, lo) < 0) || (has_hi && S::CmpSeps(k, hi) >= 0))
      return Status::Corruption(where() + ": separator outside the parent's range (invariant L6)");
    if constexpr (!KP::kInline) {
      const uint32_t skip = n->skip.load();
      char common[kMaxSkip];
      LoadCommon(n, common);
      const std::string& sep = *S::Ptr(k);
      if (skip > kMaxSkip || sep.size() < skip || std::memcmp(sep.data(), common, skip) != 0 ||
          n->heads[i].load() != HeadOf(sep, skip))
        return Status::Corruption(where() + ": a separator's head disagrees with the separator (invariant L6)");
    }
  }
  for (int i = 0; i <= cnt; i++) {
    bool clo = i > 0 || has_lo, chi = i < cnt || has_hi;
    uint64_t l = i > 0 ? n->keys[i - 1].load() : lo, h = i < cnt ? n->keys[i].load() : hi;
    uint64_t c = n->child[i].load();
    if (n->level == 1) {
      leaves->push_back({c, clo, l, chi, h});
    } else {
      const Inner* ch = reinterpret_cast<const Inner*>(c);
      if (ch == nullptr || ch->level + 1 != n->level)
        return Status::Corruption(where() + ": child level mismatch (invariant L6)");
      PMTREE_RETURN_IF_ERROR(VerifyInner(ch, clo, l, chi, h, leaves));
    }
  }
  return Status::Ok();
}

// L8: the recorded hints are list leaves other than the head, in list order.
template <class K>
Status LbTree<K>::VerifyHints(const std::vector<uint64_t>& list) const {
  const HintArray& ha = meta()->hints[meta()->hint_sel & 1];
  if (ha.count > kMaxHints) return Status::Corruption("lbtree meta: hint count out of range (invariant L8)");
  size_t pos = 1;
  for (uint64_t i = 0; i < ha.count; i++) {
    while (pos < list.size() && list[pos] != ha.leaf[i]) pos++;
    if (pos == list.size())
      return Status::Corruption("lbtree meta: hint leaf " + std::to_string(ha.leaf[i]) +
                                " not in the leaf list or out of order (invariant L8)");
    pos++;
  }
  return Status::Ok();
}

template <class K>
Status LbTree<K>::Verify() {
  // No operation runs during Verify (tree.h), so no guard is held: blobs
  // retired by deletes can be freed now, and L9 compares settled numbers.
  pool_->epochs().DrainAll();
  // L1
  uint64_t moff = pool_->root(0);
  if (moff != meta_off_ || !pool_->InHeap(moff, sizeof(Meta)))
    return Status::Corruption("lbtree: root slot 0 does not name the meta block (invariant L1)");
  const Meta* mt = meta();
  if (mt->magic != kMetaMagic || mt->node_size != node_size_ || mt->key_kind != static_cast<uint32_t>(KP::kKind) ||
      mt->head != head_ || mt->variant != (paper_split_ ? kVariantPaperSplit : kVariantLbTree))
    return Status::Corruption("lbtree meta at offset " + std::to_string(moff) +
                              ": bad magic/node size/key kind/head/variant (invariant L1)");
  uint64_t reached = Allocator::RoundUp(sizeof(Meta));
  // Walk the list: L2-L5.
  std::vector<uint64_t> list;
  uint64_t leaf = head_;
  const uint64_t max_steps = pool_->size() / node_size_ + 1;
  bool have_prev = false;
  uint64_t prev_max = 0;
  while (leaf != 0) {
    std::string where = "lbtree leaf at offset " + std::to_string(leaf);
    if (leaf % kBlockSize != 0 || !pool_->InHeap(leaf, node_size_))
      return Status::Corruption(where + ": outside the heap or misaligned (invariant L2)");
    if (list.size() >= max_steps) return Status::Corruption(where + ": leaf list has a cycle (invariant L2)");
    list.push_back(leaf);
    reached += node_size_;
    if (LeafVer(leaf).IsLocked()) return Status::Corruption(where + ": DRAM lock held while idle (invariant L3)");
    Headers h = ReadHeaders(leaf);
    if (h.w[0] & kLockBit) return Status::Corruption(where + ": lock bit set (invariant L3)");
    std::vector<uint64_t> ks;
    for (int b = 0; b < m_; b++) {
      if (b > 0 && (h.w[2 * b] & (kLockBit | kAltBit)))
        return Status::Corruption(where + ": block " + std::to_string(b) + " header has lock/alt bits (invariant L3)");
      uint64_t bits = h.w[2 * b] & kBitmapMask;
      while (bits != 0) {
        int s = std::countr_zero(bits);
        bits &= bits - 1;
        uint64_t slot = Blk(leaf, b)->entry[s].key;
        if constexpr (!KP::kInline) {
          Status cs = keys_.CheckSlot(slot);
          if (!cs.ok()) return cs.Annotate(where + " (invariant L4)");
          reached += keys_.SlotBytes(slot);
          if (GetFp(h.w[2 * b], h.w[2 * b + 1], s) != KP::Fingerprint(keys_.View(slot)))
            return Status::Corruption(where + ": fingerprint of block " + std::to_string(b) + " slot " +
                                      std::to_string(s) + " is stale (invariant L4)");
        } else {
          if (GetFp(h.w[2 * b], h.w[2 * b + 1], s) != KP::Fingerprint(slot))
            return Status::Corruption(where + ": fingerprint of block " + std::to_string(b) + " slot " +
                                      std::to_string(s) + " is stale (invariant L4)");
        }
        ks.push_back(slot);
      }
    }
    std::sort(ks.begin(), ks.end(), [&](uint64_t a, uint64_t b) { return keys_.CompareSlots(a, b) < 0; });
    for (size_t i = 1; i < ks.size(); i++)
      if (keys_.CompareSlots(ks[i - 1], ks[i]) == 0) return Status::Corruption(where + ": duplicate key (invariant L5)");
    if (!ks.empty()) {
      if (have_prev && keys_.CompareSlots(prev_max, ks.front()) >= 0)
        return Status::Corruption(where + ": keys not above the previous leaf's (invariant L5)");
      have_prev = true;
      prev_max = ks.back();
    }
    leaf = Blk(leaf, 0)->tail[h.alt ? 1 : 0];
  }
  if (mt->leaves == 0 || mt->leaves > list.size())
    return Status::Corruption("lbtree meta at offset " + std::to_string(moff) + ": leaf count " +
                              std::to_string(mt->leaves) + " but " + std::to_string(list.size()) +
                              " leaves in the list (invariant L10)");
  // L6, L7.
  std::vector<std::tuple<uint64_t, bool, uint64_t, bool, uint64_t>> routed;
  PMTREE_RETURN_IF_ERROR(VerifyInner(root_.load(), false, 0, false, 0, &routed));
  size_t li = 0;
  for (auto& [rl, has_lo, lo, has_hi, hi] : routed) {
    while (li < list.size() && list[li] != rl) {
      Headers h = ReadHeaders(list[li]);
      if (CountEntries(h) != 0)
        return Status::Corruption("lbtree leaf at offset " + std::to_string(list[li]) +
                                  ": not routed by any inner node but not empty (invariant L7)");
      li++;
    }
    if (li == list.size())
      return Status::Corruption("lbtree: inner nodes route to leaf " + std::to_string(rl) +
                                " out of list order or not in the list (invariant L7)");
    Headers h = ReadHeaders(rl);
    for (int b = 0; b < m_; b++) {
      uint64_t bits = h.w[2 * b] & kBitmapMask;
      while (bits != 0) {
        int s = std::countr_zero(bits);
        bits &= bits - 1;
        uint64_t slot = Blk(rl, b)->entry[s].key;
        typename KP::Owned kk = keys_.Load(slot);
        if ((has_lo && S::Cmp(kk, lo) < 0) || (has_hi && S::Cmp(kk, hi) >= 0))
          return Status::Corruption("lbtree leaf at offset " + std::to_string(rl) +
                                    ": key outside the range its separators route to it (invariant L7)");
      }
    }
    li++;
  }
  for (; li < list.size(); li++)
    if (CountEntries(ReadHeaders(list[li])) != 0)
      return Status::Corruption("lbtree leaf at offset " + std::to_string(list[li]) +
                                ": not routed by any inner node but not empty (invariant L7)");
  PMTREE_RETURN_IF_ERROR(VerifyHints(list));
  // L9
  uint64_t in_use = pool_->allocator().bytes_in_use();
  if (reached != in_use)
    return Status::Corruption("lbtree: pool bytes reached " + std::to_string(reached) + " != allocator bytes in use " +
                              std::to_string(in_use) + " (invariant L9)");
  return Status::Ok();
}

template <class K>
TreeStats LbTree<K>::Stats() {
  TreeStats st;
  uint64_t leaves = 0, entries = 0, pm = Allocator::RoundUp(sizeof(Meta));
  for (uint64_t leaf = head_; leaf != 0;) {
    Headers h = ReadHeaders(leaf);
    leaves++;
    pm += node_size_;
    for (int b = 0; b < m_; b++) {
      uint64_t bits = h.w[2 * b] & kBitmapMask;
      entries += std::popcount(bits);
      if constexpr (!KP::kInline) {
        while (bits != 0) {
          int s = std::countr_zero(bits);
          bits &= bits - 1;
          pm += keys_.SlotBytes(Blk(leaf, b)->entry[s].key);
        }
      }
    }
    leaf = Blk(leaf, 0)->tail[h.alt ? 1 : 0];
  }
  uint64_t inner = 0;
  uint32_t height = 1;
  {
    std::lock_guard g(inner_mu_);
    inner = inners_.size();
  }
  height += root_.load()->level;
  st.height = height;
  st.entries = entries;
  st.leaf_nodes = leaves;
  // Inner nodes still owned but unreachable (replaced by a rebuild) are
  // counted in DRAM bytes, not in inner_nodes.
  uint64_t reachable = 0;
  std::vector<const Inner*> stack{root_.load()};
  while (!stack.empty()) {
    const Inner* n = stack.back();
    stack.pop_back();
    reachable++;
    if (n->level > 1)
      for (uint32_t i = 0; i <= n->count.load(); i++) stack.push_back(reinterpret_cast<const Inner*>(n->child[i].load()));
  }
  st.inner_nodes = reachable;
  st.leaf_fill = leaves ? static_cast<double>(entries) / static_cast<double>(leaves * kSlotsPerBlock * m_) : 0;
  st.pm_bytes = pm;
  st.dram_bytes = inner * sizeof(Inner) + sep_bytes_ + leaves * sizeof(uint64_t);
  auto add = [&](const char* k, double v) { st.extra.emplace_back(k, v); };
  add("node_size", node_size_);
  add("inner_fanout", inner_keys_ + 1);
  add("simd_avx2", SelectedMatchName() == "avx2" ? 1 : 0);
  add("inserts_header_line", static_cast<double>(inserts_line0_.Get()));
  add("inserts_entry_moving", static_cast<double>(inserts_moving_.Get()));
  add("entries_moved", static_cast<double>(entries_moved_.Get()));
  add("splits", static_cast<double>(splits_.Get()));
  add("splits_key_to_new_leaf", static_cast<double>(split_new_side_.Get()));
  add("splits_key_to_old_leaf", static_cast<double>(split_old_side_.Get()));
  add("deletes", static_cast<double>(deletes_.Get()));
  add("updates", static_cast<double>(updates_.Get()));
  add("optimistic_restarts", static_cast<double>(restarts_.Get()));
  add("hint_records", static_cast<double>(hint_records_.Get()));
  add("recovery_ms", recovery_ms_);
  add("recovery_threads", static_cast<double>(recovery_threads_used_));
  add("recovery_walk_ms", recovery_walk_ms_);
  add("recovery_alloc_ms", recovery_alloc_ms_);
  add("recovery_route_ms", recovery_route_ms_);
  add("recovery_inner_ms", recovery_inner_ms_);
  add("recovery_walk_cpu_ms", recovery_walk_cpu_ms_);
  add("recovery_serial_cpu_ms", recovery_serial_cpu_ms_);
  add("recovery_segments", static_cast<double>(recovery_segments_));
  add("recovery_leaves_scanned", static_cast<double>(recovery_leaves_));
  add("recovery_fallback", recovery_fallback_ ? 1 : 0);
  add("stale_locks_cleared", static_cast<double>(stale_locks_cleared_));
  add("instant_restart", instant_restart_ ? 1 : 0);
  return st;
}

Status ParseOptions(const TreeOptions& options, uint32_t* node_size, int* segments) {
  *node_size = options.node_size == 0 ? kDefaultNodeSize : options.node_size;
  PMTREE_RETURN_IF_ERROR(CheckNodeSize(*node_size));
  *segments = kMaxHints;
  for (const auto& [k, v] : options.extra) {
    if (k == "segments") {
      char* endp = nullptr;
      long n = std::strtol(v.c_str(), &endp, 10);
      if (v.empty() || *endp != '\0' || n < 0 || n > kMaxHints)
        return Status::InvalidArgument("lbtree: segments=" + v + " is not valid; use 0.." + std::to_string(kMaxHints));
      *segments = static_cast<int>(n);
    } else {
      return Status::InvalidArgument("lbtree: unknown option '" + k + "'; valid options: segments=0.." +
                                     std::to_string(kMaxHints));
    }
  }
  return Status::Ok();
}


template <class K>
Result<std::unique_ptr<BasicTree<K>>> CreateVariant(PoolImpl* pool, const TreeOptions& options, bool paper_split) {
  if (pool == nullptr) return Status::InvalidArgument("lbtree: needs a pool");
  uint32_t node_size;
  int segments;
  PMTREE_RETURN_IF_ERROR(ParseOptions(options, &node_size, &segments));
  if (options.key_kind != KeyTraits<K>::kKind)
    return Status::InvalidArgument("lbtree: options.key_kind does not match the tree's key type");
  auto t = std::make_unique<LbTree<K>>(pool, node_size, segments, paper_split);
  if (!t->ok_to_use()) return Status::OutOfSpace("lbtree: cannot map the DRAM leaf-version table");
  PMTREE_RETURN_IF_ERROR(t->InitNew(KeyTraits<K>::kKind));
  return std::unique_ptr<BasicTree<K>>(std::move(t));
}

template <class K>
Result<std::unique_ptr<BasicTree<K>>> RecoverVariant(PoolImpl* pool, const TreeOptions& options, bool paper_split) {
  if (pool == nullptr) return Status::InvalidArgument("lbtree: needs a pool");
  uint32_t ignored;
  int segments;
  PMTREE_RETURN_IF_ERROR(ParseOptions(options, &ignored, &segments));
  uint64_t moff = pool->root(0);
  if (moff == 0) return Status::NotFound("lbtree: root slot 0 is empty: the pool holds no tree");
  if (moff % kAllocGranule != 0 || !pool->InHeap(moff, sizeof(Meta)))
    return Status::Corruption("lbtree: root slot 0 offset " + std::to_string(moff) + " is outside the heap (invariant L1)");
  const Meta* mt = pool->At<Meta>(moff);
  if (mt->magic == kMetaMagicV1)
    return Status::Incompatible("lbtree: the pool was made by an older format of lbtree (LBTREE01, before the "
                                "leaf count); this build cannot open it");
  if (mt->magic != kMetaMagic)
    return Status::Corruption("lbtree meta at offset " + std::to_string(moff) + ": bad magic (invariant L1)");
  if (!CheckNodeSize(mt->node_size).ok())
    return Status::Corruption("lbtree meta at offset " + std::to_string(moff) + ": node size " +
                              std::to_string(mt->node_size) + " invalid (invariant L1)");
  if (mt->key_kind != static_cast<uint32_t>(KeyTraits<K>::kKind))
    return Status::Incompatible("lbtree: the pool holds a tree with the other key kind");
  if (mt->variant > kVariantPaperSplit)
    return Status::Corruption("lbtree meta at offset " + std::to_string(moff) + ": variant " +
                              std::to_string(mt->variant) + " invalid (invariant L1)");
  if ((mt->variant == kVariantPaperSplit) != paper_split)
    return Status::Incompatible("lbtree: the tree was made by another variant (lbtree vs lbtree-paper)");
  auto t = std::make_unique<LbTree<K>>(pool, mt->node_size, segments, paper_split);
  if (!t->ok_to_use()) return Status::OutOfSpace("lbtree: cannot map the DRAM leaf-version table");
  PMTREE_RETURN_IF_ERROR(t->RecoverFrom(moff, std::max<uint32_t>(1, options.recovery_threads)));
  return std::unique_ptr<BasicTree<K>>(std::move(t));
}

}  // namespace

template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options) {
  return CreateVariant<K>(pool, options, false);
}
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options) {
  return RecoverVariant<K>(pool, options, false);
}
template <class K>
Result<std::unique_ptr<BasicTree<K>>> CreatePaperSplit(PoolImpl* pool, const TreeOptions& options) {
  return CreateVariant<K>(pool, options, true);
}
template <class K>
Result<std::unique_ptr<BasicTree<K>>> RecoverPaperSplit(PoolImpl* pool, const TreeOptions& options) {
  return RecoverVariant<K>(pool, options, true);
}

template Result<std::unique_ptr<BasicTree<uint64_t>>> CreatePaperSplit<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> CreatePaperSplit<std::string_view>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> RecoverPaperSplit<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> RecoverPaperSplit<std::string_view>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Create<std::string_view>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t>(PoolImpl*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Recover<std::string_view>(PoolImpl*, const TreeOptions&);

}  // namespace pmtree::lbtree
