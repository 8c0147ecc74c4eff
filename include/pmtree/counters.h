// SPDX-License-Identifier: Apache-2.0
//
// Persistence counters: exact accounting of what the trees ask of the
// persistence layer.  Every pool opened with counting on (the default) adds
// its flushes and fences to per-thread counters; Snapshot() sums all threads
// of the process.  The cost is a few thread-local increments per flush, small
// beside the flush itself, so counting stays on in benchmarks.
//
// Metrics:
//   flushes    flush instructions issued (one per cache line of a Flush range)
//   fences     Fence() calls
//   lines      distinct 64 B lines flushed within the current operation
//   blocks256  distinct 256 B blocks (the 3D XPoint media unit, LB+-Tree's
//              metric) containing a flushed line, within the current operation
//   bytes      bytes named by Flush ranges (Circ-Tree's "flushed bytes")
//   nt_stores  non-temporal store calls, nt_bytes their bytes
//   delay_ns   media latency injected by emulation (--write-latency-ns)
//   allocations  successful Allocator::Allocate calls (any pool, any backend):
//              lets a caller tell the operations that took new PM space (a
//              split, a log block, a key blob) from those that did not
//
// Only what really executes is counted: the `dram` backend counts no flush
// and no fence, `eadr` counts fences but no flushes.
//
// "Operation" is the span between two BeginOperation() calls on one thread
// (the benchmark and the explorer call it before each operation).  A line
// flushed twice in one operation counts once in `lines` and twice in
// `flushes`.  The per-operation set holds the last 256 distinct lines; a
// single operation that flushes more distinct lines counts every further one
// as new (exact up to 256 lines per operation).

#ifndef PMTREE_COUNTERS_H_
#define PMTREE_COUNTERS_H_

#include <cstdint>
#include <string>

namespace pmtree {

struct PersistCounters {
  uint64_t flushes = 0;
  uint64_t fences = 0;
  uint64_t lines = 0;
  uint64_t blocks256 = 0;
  uint64_t bytes = 0;
  uint64_t nt_stores = 0;
  uint64_t nt_bytes = 0;
  uint64_t delay_ns = 0;
  uint64_t allocations = 0;

  PersistCounters& operator+=(const PersistCounters& o);
  PersistCounters operator-(const PersistCounters& o) const;
  std::string ToString() const;
};

namespace counters {

// Sum over every thread that ever counted, in this process.
PersistCounters Snapshot();
// This thread's counters only.
PersistCounters ThisThread();
// Starts a new operation on this thread (resets the distinct-line sets).
void BeginOperation();

// Used by the counting backend.
void RecordFlushRange(const void* p, uint64_t n);
void RecordFence();
void RecordNt(uint64_t n);
void RecordDelay(uint64_t ns);
// Used by the allocator, once per successful Allocate.
void RecordAllocation();

}  // namespace counters
}  // namespace pmtree

#endif  // PMTREE_COUNTERS_H_
