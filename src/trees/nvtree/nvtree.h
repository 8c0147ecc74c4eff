// SPDX-License-Identifier: Apache-2.0
//
// NvTree: NV-Tree (Yang et al., IEEE TC 2016 — the journal version with the
// workload-adaptive scheme), docs/trees/nvtree.md.
//
// What it is.  Leaves (LNs) are the only critical data: unsorted,
// append-only arrays of LN_elements (POSITIVE / NEGATIVE) committed by one
// 8-byte counter (nElement), chained in a singly linked list in the pool.
// Inner nodes are reconstructable: a pointer-less array of INs over PLNs
// (parents of leaves) in DRAM, located by node-id arithmetic (Algorithm 1) and
// rebuilt when a PLN fills (§4.5), from the PLNs in normal running and from
// the leaf list after a crash; a clean Close() saves the array in the pool so
// the next open restarts without reading a leaf (§4.6).  LN sizes adapt to the
// workload (§5, adaptive.h).
//
// Thread safety.  Every operation may run concurrently with every other
// (Verify, Stats and Close excepted, see tree.h).  Writers lock the leaf they
// append to (and, for a split/replace/merge, its left sibling and for a merge
// its right sibling, in list order); lookups and scans take no lock: they
// scan a leaf up to a DRAM copy of nElement that is published only after the
// counter is persistent, and they read PLNs under a sequence counter.  A
// rebuild excludes writers but not readers, who keep using the old array
// until the new one is swapped in; the old one is retired through the pool's
// epochs.
//
// Durability.  A mutating call returns after its elements and the counter
// (or the new leaves and the one pointer that links them) are persistent.
// Nothing a reader returns is unpersisted.  See tree.h's contract.

#ifndef PMTREE_TREES_NVTREE_NVTREE_H_
#define PMTREE_TREES_NVTREE_NVTREE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"
#include "trees/common/keys.h"
#include "trees/nvtree/adaptive.h"
#include "trees/nvtree/layout.h"

namespace pmtree::nvtree {

inline constexpr uint32_t kDefaultNodeSize = 1024;
inline constexpr uint32_t kMinNodeSize = 256;
inline constexpr uint32_t kMaxNodeSize = 16384;
// Bytes an operation that adds data leaves free, so removes always proceed.
inline constexpr uint64_t kGrowthReserve = 2 * kMaxLeafBytes;
inline constexpr const char* kNodeSizeRule = "256..16384, a multiple of 64 (default 1024)";

// Options understood by NV-Tree (TreeOptions::extra):
//   strategy         off | conservative | aggressive | balanced (default balanced)
//   media_read_ns    T_r per 64 B line for the §5.4 model (default: measured at creation)
//   media_write_ns   T_w per 64 B line, write + flush + fence (default: measured)
//   inner_node_size  IN/PLN size in bytes (default: node_size)
struct Options {
  uint32_t node_size = kDefaultNodeSize;
  uint32_t inner_node_size = kDefaultNodeSize;
  Strategy strategy = Strategy::kBalanced;
  bool strategy_given = false;
  double media_read_ns = -1;   // < 0: not given
  double media_write_ns = -1;
};
Status ParseOptions(const TreeOptions& in, Options* out);

// How the tree came to be (Stats extra "recovery").
enum class Origin { kCreated = 0, kInstantRestart = 1, kRebuiltFromLeaves = 2 };

struct LeafInfo;
struct Inner;
struct Pln;
class RebuildGate;
class SmoLockSet;
class PlnReservation;

template <KeyPolicy KP>
class NvTree final : public BasicTree<typename KP::Arg> {
 public:
  using K = typename KP::Arg;
  using Base = BasicTree<K>;
  using Entry = typename Base::Entry;

  // Creates an empty tree (one empty LN) on a fresh pool.
  static Result<std::unique_ptr<NvTree>> Create(PoolImpl* pool, const TreeOptions& options);
  // Opens the tree in `pool`: instant restart from the saved inner image after
  // a clean shutdown, rebuild-from-LN otherwise.  Idempotent; a crash during it
  // is recoverable.
  static Result<std::unique_ptr<NvTree>> Recover(PoolImpl* pool, const TreeOptions& options);

  ~NvTree() override;
  NvTree(const NvTree&) = delete;
  NvTree& operator=(const NvTree&) = delete;

  std::string_view name() const override { return "nvtree"; }
  uint32_t capabilities() const override;

  bool Lookup(K key, uint64_t* value) override;
  Result<bool> Insert(K key, uint64_t value) override;
  Result<bool> Update(K key, uint64_t value) override;
  Result<bool> Upsert(K key, uint64_t value) override;
  Result<bool> Remove(K key) override;
  size_t Scan(K start, const K* end, std::span<Entry> out) override;
  // Fills LNs of the default size to `fill` of their capacity, links them
  // with one atomic store to Meta::head and indexes them.  The tree must be
  // empty; no other operation may run.
  Status BulkLoad(std::span<const typename Base::InputEntry> sorted, double fill) override;

  Status Verify() override;
  TreeStats Stats() override;
  Status Close() override;

  // ---- design-specific ----------------------------------------------------------
  Strategy strategy() const { return strategy_; }
  Origin origin() const { return origin_; }
  uint64_t rebuilds() const { return rebuilds_.load(); }
  MediaCost media_cost() const { return cost_; }
  // Runs a rebuild-from-PLN now (tests; normally a full PLN triggers it).
  void ForceRebuild();
  // Node size of every LN in list order (tests of the adaptive scheme).
  std::vector<uint32_t> LeafSizes();

 private:
  enum class OpKind { kInsert, kUpdate, kUpsert, kRemove };
  enum class SmoOutcome { kDone, kRetry, kNeedRebuild };
  struct Found;
  struct SmoState;
  struct Neighbor {
    bool has = false;
    uint64_t sep = 0;
    uint64_t ln = 0;
    LeafInfo* info = nullptr;
  };

  NvTree(PoolImpl* pool, const Options& opt);

  Result<bool> Mutate(OpKind kind, K key, uint64_t value);
  Result<SmoOutcome> Smo(const Found& f, OpKind kind, K key, uint64_t value, bool* outcome);
  // Smo's steps: choose split/replace/merge, write the new LN(s), update the
  // PLN after the commit, retire the old LN(s).
  bool ChooseSmo(const Neighbor& right, size_t valid, OpKind kind, SmoLockSet* locks, SmoState* s);
  Status WriteSmoLeaves(const Found& f, OpKind kind, SmoState* s);
  void PublishSmo(Inner* in, const Found& f, const SmoState& s, PlnReservation* reservation);
  void RetireSmo(const Found& f, const SmoState& s, SmoLockSet* locks);
  void RebuildFromPln();
  Result<uint64_t> NewSlot(K key);
  uint32_t AdaptiveSize(LeafInfo* info, uint32_t need, uint32_t old_bytes);
  void ReclaimRetired(EpochManager::Guard guard);
  Status RebuildFromLeaves();
  // Sets the DRAM leaf count to n_leaves_ + delta and stores it in
  // Meta::leaves, flushed but not fenced (the caller's next fence makes it
  // durable), under leaves_mu_ (invariant 11).
  void StoreLeafCount(int64_t delta);
  Status LoadImage(uint64_t off);
  Status SaveImage();

  Found Find(Inner* in, K key) const;
  Found FindAfter(Inner* in, uint64_t sep) const;
  template <class Pred>
  Found FindImpl(Inner* in, Pred ge) const;
  bool ReadEntry(Inner* in, uint64_t pln, int64_t pos, uint64_t* sep, uint64_t* ln, LeafInfo** info) const;
  // In one consistent snapshot of PLN `pln`: the entries left and right of the
  // one naming `ln` (left may come from the previous PLN, right never does).
  // False when `ln` is no longer in the PLN.
  bool Neighbors(Inner* in, uint64_t pln, uint64_t ln, Neighbor* left, Neighbor* right) const;

  LeafHeader* Leaf(uint64_t off) const { return pool_->At<LeafHeader>(off); }
  // Latest element of `key` among the first n of `h`: -1 when none.
  int64_t FindLatest(LeafHeader* h, uint64_t n, K key) const;
  // Live (not cancelled) KV-pairs among the first n elements, sorted by key.
  void CollectLive(LeafHeader* h, uint64_t n, std::vector<std::pair<uint64_t, uint64_t>>* live) const;
  Result<uint64_t> WriteNewLeaf(uint32_t bytes, const std::pair<uint64_t, uint64_t>* kv, size_t count,
                                uint64_t next);
  void ReleaseDroppedSlots(const std::vector<LeafHeader*>& old_leaves,
                           const std::vector<std::pair<uint64_t, uint64_t>>& kept);

  int CompareSepKey(uint64_t sep, K key) const;
  int CompareSeps(uint64_t a, uint64_t b) const;
  uint64_t SepFromSlot(Inner* in, uint64_t slot) const;
  uint64_t CopySep(Inner* dst, uint64_t sep) const;
  static constexpr uint64_t kSepInf = KP::kInline ? ~0ull : 0;

  PoolImpl* pool_;
  mutable KP keys_;
  Meta* meta_ = nullptr;
  uint32_t node_size_;
  uint32_t inner_node_size_;
  Strategy strategy_;
  MediaCost cost_;
  Origin origin_ = Origin::kCreated;
  bool closed_ = false;

  std::atomic<Inner*> inner_{nullptr};
  std::unique_ptr<RebuildGate> gate_;
  std::unique_ptr<LeafInfo> head_info_;  // lock for Meta::head (the list's left end)

  // Profiling (Table 2) and statistics.
  std::atomic<uint64_t> n_reads_{0};
  std::atomic<uint64_t> n_writes_{0};
  // LNs in the list: Algorithm 3's N_LN and the value Meta::leaves mirrors.
  // Changed only under leaves_mu_ (StoreLeafCount), read relaxed.
  std::atomic<uint64_t> n_leaves_{0};
  std::mutex leaves_mu_;
  std::atomic<uint64_t> rebuilds_{0};
  std::atomic<uint64_t> rebuild_ns_{0};
  std::atomic<uint64_t> splits_{0};
  std::atomic<uint64_t> replaces_{0};
  std::atomic<uint64_t> merges_{0};
  std::atomic<uint64_t> size_up_{0};
  std::atomic<uint64_t> size_down_{0};
  std::atomic<uint64_t> size_rejected_{0};
  std::atomic<uint64_t> pln_enlarged_{0};
  std::atomic<uint64_t> recovery_ns_{0};
};

extern template class NvTree<U64Keys>;
extern template class NvTree<BytesKeys>;

// Registry entry points (K is uint64_t or std::string_view).
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

}  // namespace pmtree::nvtree

#endif  // PMTREE_TREES_NVTREE_NVTREE_H_
