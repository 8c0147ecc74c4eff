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
// Thread safety: operations may be called from several threads at once when
// concurrent() is true; otherwise the driver runs one thread.  Load, Stats and
// Finish are called with no operation running.

#ifndef PMTREE_BENCH_TARGET_H_
#define PMTREE_BENCH_TARGET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pmtree/pool.h"
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
  virtual Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) = 0;
  virtual Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) = 0;
  virtual Result<bool> Remove(uint64_t key, std::string_view bkey) = 0;
  // Reads up to n entries from key on; returns how many.
  virtual size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) = 0;

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
};

inline uint64_t ValueFor(uint64_t key) { return key ^ 0x5bd1e9955bd1e995ull; }

// How to open a registered tree as a target.
struct TreeTargetConfig {
  std::string pool_path;  // empty: anonymous pool
  uint64_t pool_size = kDefaultPoolSize;
  PoolOptions pool_options;
  TreeOptions tree_options;
  uint32_t key_min = 0, key_max = 0;  // byte-string keys when key_min != 0
  bool open_existing = false;         // --skip-load: recover the tree in pool_path
  bool keep_pool = false;             // leave the pool file after Finish
};
Result<std::unique_ptr<Target>> OpenTreeTarget(const TreeFactory& f, const TreeTargetConfig& c);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_TARGET_H_
