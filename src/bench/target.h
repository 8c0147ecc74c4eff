// SPDX-License-Identifier: Apache-2.0
//
// Target: what the benchmark's timed loop drives — a registered tree (through
// the registry, never by its concrete type) or a peer store (LMDB, Berkeley
// DB; peers.h).  One small interface so trees and peers run the same streams
// through the same loop and are measured by the same code.
//
// Keys arrive in both forms: the 64-bit key and, for byte-string workloads,
// its byte-string form (workload.h); a target uses the one it was opened for.
//
// Values: every operation names a 64-bit value v.  With a value size of 8
// (the default) v is what the store holds.  With a value size N > 8 the store
// holds N bytes, ValueBytes(v, N): a peer stores them natively; a tree target
// stores them as a record in its pool (allocated, written and persisted
// before the tree references it) and the tree value is the record's offset.
// Lookup then copies the N bytes out and returns their first 8 (= v).
//
// Thread safety: operations may be called from several threads at once when
// concurrent() is true; otherwise the driver runs one thread.  Load, Stats and
// Finish are called with no operation running.

#ifndef PMTREE_BENCH_TARGET_H_
#define PMTREE_BENCH_TARGET_H_

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pm/pool_impl.h"
#include "pmtree/registry.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree::bench {

struct TargetStats {
  uint64_t pm_bytes = 0;    // bytes on the persistent medium (pool bytes reached / files)
  uint64_t dram_bytes = 0;  // DRAM held outside the medium
  uint32_t height = 0;
  uint64_t entries = 0;
  uint64_t leaf_nodes = 0;
  uint64_t inner_nodes = 0;
  double leaf_fill = 0;
  std::vector<std::pair<std::string, double>> extra;
};

class Target {
 public:
  virtual ~Target() = default;
  // Row label: the registry name, or the peer's name ("lmdb-nosync").
  virtual std::string label() const = 0;
  virtual bool concurrent() const = 0;
  // "hardware(clwb)" / "dram" / "hardware(clwb)+300ns" for trees, the
  // store's sync rule for peers.
  virtual std::string backend() const = 0;
  // Longer description (the pool's own Describe()), for the JSON "pool" field.
  virtual std::string describe() const { return backend(); }
  // Whether the persistence counters see this target's flushes (false for peers).
  virtual bool counted() const = 0;

  virtual bool Lookup(uint64_t key, std::string_view bkey, uint64_t* value) = 0;
  // The whole stored value (N bytes; 8 for inline values), for tests.
  virtual bool LookupBytes(uint64_t key, std::string_view bkey, std::string* out) {
    uint64_t v;
    if (!Lookup(key, bkey, &v)) return false;
    out->assign(reinterpret_cast<const char*>(&v), 8);
    return true;
  }
  virtual Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) = 0;
  virtual Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) = 0;
  virtual Result<bool> Remove(uint64_t key, std::string_view bkey) = 0;
  // Reads up to n entries from key on; returns how many.
  virtual size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) = 0;
  // YCSB's read-modify-write: read the whole value, then update it to
  // `value`.  Two operations, as a YCSB client issues them (not atomic).
  virtual Result<bool> ReadModifyWrite(uint64_t key, std::string_view bkey, uint64_t value) {
    uint64_t old;
    if (!Lookup(key, bkey, &old)) return false;
    return Update(key, bkey, value);
  }

  // Loads `sorted` keys (value = ValueFor(key)): bulk (ascending, with the
  // fill factor) or by single inserts in a seed-independent shuffled order.
  virtual Status Load(const std::vector<uint64_t>& sorted, bool bulk, double fill) = 0;
  virtual Status Verify() { return Status::Ok(); }
  virtual TargetStats Stats() = 0;
  // Clean shutdown (trees: Tree::Close), then removes the files unless kept.
  virtual Status Finish() = 0;
  // Simulated crash: destroys the tree without Close() and keeps the pool
  // file, so reopening it runs crash recovery.  Trees only.
  virtual void Abandon() {}
  // The pool a tree target lives in (nullptr for peers and volatile trees);
  // for tests that check the pool's space accounting.
  virtual PoolImpl* pool() { return nullptr; }
};

inline uint64_t ValueFor(uint64_t key) { return key ^ 0x5bd1e9955bd1e995ull; }

// The order single-insert loads of peers and KV stores use: fn(i, r) for
// i = 0..n-1 visits every rank r once in a fixed, seed-independent order (a
// multiplicative permutation), or ascending when `sorted`.  Stops at the
// first error fn returns.
template <class Fn>
Status ForEachLoadRank(size_t n, bool sorted, Fn fn) {
  uint64_t step = 1;
  if (!sorted && n > 1) {
    step = static_cast<uint64_t>(static_cast<double>(n) * 0.6180339887) | 1;
    while (std::gcd(step, static_cast<uint64_t>(n)) != 1) step++;
  }
  uint64_t r = 0;
  for (size_t i = 0; i < n; i++) {
    if (Status s = fn(i, r); !s.ok()) return s;
    r = (r + step) % n;
  }
  return Status::Ok();
}

// "hardware(clwb)", "eadr", "hardware(clwb)+300ns": a pool's backend as the
// row's backend column shows it.
std::string PoolBackendLabel(const Pool& pool);

// Valid value sizes (--value-size): 8 (inline) up to 1 MiB.
inline constexpr uint32_t kMinValueSize = 8;
inline constexpr uint32_t kMaxValueSize = 1u << 20;

// The N bytes stored for value v: v itself (little-endian) then a pattern
// derived from v, so a reader can check every byte.
void FillValueBytes(uint64_t v, uint32_t n, char* out);
std::string ValueBytes(uint64_t v, uint32_t n);

// Value records this thread has allocated in pools so far (tree targets with
// a value size > 8).  The driver subtracts them from the allocator's count to
// find the operations during which the tree itself allocated nothing.
uint64_t ValueRecordAllocations();

// How to open a registered tree as a target.
struct TreeTargetConfig {
  std::string pool_path;  // empty: anonymous pool
  uint64_t pool_size = kDefaultPoolSize;
  PoolOptions pool_options;
  TreeOptions tree_options;
  uint32_t key_min = 0, key_max = 0;  // byte-string keys when key_min != 0
  uint32_t value_size = 8;            // > 8: values are records in the pool
  bool open_existing = false;         // --skip-load: recover the tree in pool_path
  bool keep_pool = false;             // leave the pool file after Finish
};
Result<std::unique_ptr<Target>> OpenTreeTarget(const TreeFactory& f, const TreeTargetConfig& c);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_TARGET_H_
