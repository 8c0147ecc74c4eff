// SPDX-License-Identifier: Apache-2.0
//
// WriteProfile: where and when a pool is written (CDDS thesis, chapter 6).
//
// A profile attached to a pool (PoolOptions::write_profile) counts, per 64 B
// line of the pool:
//   stores   write calls that touched the line (Write, Store64, Zero,
//            NtWrite: one per call per line it overlaps, so a 48-byte
//            memcpy into one line is one store, as one line write-back)
//   flushes  flush requests that covered the line (what the tree asked for,
//            whatever the backend executes: an eadr pool is profiled like a
//            hardware one)
// and over a logical clock of operations (Tick(), called once per tree
// operation by whoever drives the tree, e.g. the benchmark's targets): the
// flushed lines, stores and allocations in each window of `window_ops`
// operations.  Allocation events (offset, size, operation index) are kept
// too, so writes can be grouped per allocated block (per node).
//
// Everything is a count, never a time: two single-threaded runs with the same
// seed give identical profiles.  Counting is off unless a profile is
// attached; its cost when on is measured in docs/bench.md ("Write profiles").
//
// Thread safety: the Record* and Tick calls may come from any number of
// threads (relaxed atomic counters; per-page line tables are created on first
// touch with one compare-and-swap).  The accessors and WriteJson read a
// quiescent profile.

#ifndef PMTREE_WRITE_PROFILE_H_
#define PMTREE_WRITE_PROFILE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <vector>

namespace pmtree {

class WriteProfile {
 public:
  static constexpr uint64_t kLineBytes = 64;
  static constexpr uint64_t kPageBytes = 4096;
  static constexpr uint64_t kLinesPerPage = kPageBytes / kLineBytes;

  // Windows kept; operations past kMaxWindows * window_ops count in the last.
  static constexpr uint64_t kMaxWindows = 1 << 16;

  // window_ops: operations per time-series window (>= 1).
  explicit WriteProfile(uint64_t window_ops = 100);
  ~WriteProfile();
  WriteProfile(const WriteProfile&) = delete;
  WriteProfile& operator=(const WriteProfile&) = delete;

  // Called by the pool when it maps `pool_bytes` bytes at `base` (the
  // address its tree writes through).  A profile serves one pool at a time;
  // attaching again (a reopen of the same pool) keeps the counts.
  void Attach(const char* base, uint64_t pool_bytes);

  // ---- recording (the pool's profiling backend and allocator) ----------------
  void RecordStore(const void* p, uint64_t n) { RecordLines(p, n, /*flush=*/false); }
  void RecordFlush(const void* p, uint64_t n) { RecordLines(p, n, /*flush=*/true); }
  void RecordAllocation(uint64_t offset, uint64_t size);
  // One operation done: advances the logical clock.
  void Tick() { ops_.fetch_add(1, std::memory_order_relaxed); }

  // ---- results (quiescent) ----------------------------------------------------
  struct LineCount {
    uint64_t line;  // pool offset / 64
    uint32_t stores, flushes;
  };
  struct PageCount {
    uint64_t page;  // pool offset / 4096
    uint64_t stores, flushes;
  };
  struct BlockCount {  // one allocated block (a node, a record) and the writes inside it
    uint64_t offset, size, alloc_op;
    uint64_t stores, flushes;
  };
  struct Window {  // operations [index * window_ops, (index+1) * window_ops)
    uint64_t stores = 0, flushed_lines = 0, allocations = 0, allocated_bytes = 0;
  };
  uint64_t window_ops() const { return window_ops_; }
  uint64_t ops() const { return ops_.load(std::memory_order_relaxed); }
  // Touched lines / pages in address order.
  std::vector<LineCount> Lines() const;
  std::vector<PageCount> Pages() const;
  // Every allocation still covering its bytes (a later allocation of the
  // same offset replaces an earlier one), with the writes to its lines since
  // the profile began.
  std::vector<BlockCount> Blocks() const;
  std::vector<Window> Series() const;
  uint64_t total_stores() const;
  uint64_t total_flushes() const;

  // One JSON object: {"window_ops", "ops", "pages": [[page, stores, flushes]...],
  // "blocks": [[offset, size, alloc_op, stores, flushes]...],
  // "series": [[stores, flushed_lines, allocations, allocated_bytes]...],
  // "totals": {...}}.  Lines are summarised per page (a full line table of a
  // large run would be megabytes); `with_lines` adds "lines": [[line, stores, flushes]...].
  void WriteJson(std::ostream& out, bool with_lines = false) const;

 private:
  struct PageLines;
  struct Alloc {
    uint64_t offset, size, op;
  };
  enum Field { kStores, kFlushedLines, kAllocations, kAllocatedBytes, kFields };
  PageLines* PageFor(uint64_t page);
  void RecordLines(const void* p, uint64_t n, bool flush);
  void AddWindow(Field field, uint64_t amount);
  template <class F>
  void ForEachLine(const void* p, uint64_t n, F&& f);

  const uint64_t window_ops_;
  const char* base_ = nullptr;
  uint64_t pages_ = 0;
  std::unique_ptr<std::atomic<PageLines*>[]> table_;
  std::atomic<uint64_t> ops_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> series_;  // kMaxWindows x kFields
  mutable std::mutex mu_;  // guards allocs_
  std::vector<Alloc> allocs_;
};

}  // namespace pmtree

#endif  // PMTREE_WRITE_PROFILE_H_
