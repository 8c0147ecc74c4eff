// SPDX-License-Identifier: Apache-2.0
//
// The tracing backend of the crash explorer, and the trace it records.
//
// TracingBackend is a PersistBackend (pmtree/backend.h) installed through
// PoolOptions{backend = kCustom}.  The tree's view of the pool is mapped
// read-only, so every store the tree makes must arrive here; the backend
// applies it through its writable alias (the same memfd mapped twice) and
// appends it to a TraceLog together with every flush and fence and the
// source line (Site) that asked for it.  A raw store that bypasses the
// persistence layer faults on the read-only view; the explorer reports it as
// an instrumentation gap.
//
// The trace is a plain event list: the explorer replays it on a shadow model
// (shadow.h) to build crash images, and replays it again with one flush or
// fence site filtered out to build a mutant.  Recording therefore never has to
// copy the pool.
//
// Thread safety: every call takes one mutex, so background threads of a tree
// are recorded in a single total order (the explorer's workloads themselves
// are single-threaded).

#ifndef PMTREE_CRASH_TRACE_H_
#define PMTREE_CRASH_TRACE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pmtree/backend.h"
#include "pmtree/pool.h"

namespace pmtree::crash {

// Source sites, interned.  Names are "src/trees/x/x.cc:123:7" (the path from
// its "src/" or "tests/" component on), stable across processes and builds of
// the same source.
class SiteTable {
 public:
  uint32_t Intern(const Site& site);
  uint32_t InternName(const std::string& name);
  const std::string& Name(uint32_t id) const { return names_[id]; }
  // The function the site is in, qualified, without return type and
  // parameters ("pmtree::lbtree::LbTree<K>::LeafInsert"); "" for a site
  // interned by name only.  Tests match coverage by function, not by line.
  const std::string& Function(uint32_t id) const { return functions_[id]; }
  size_t size() const { return names_.size(); }
  // The shortened name of a site (what Name() returns for it).
  static std::string NameOf(const Site& site);
  // The shortened function name of a site (what Function() returns for it).
  static std::string FunctionOf(const Site& site);

 private:
  struct Key {
    const char* file;
    uint32_t line;
    uint32_t column;
    bool operator==(const Key& o) const { return file == o.file && line == o.line && column == o.column; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.file) ^ (size_t{k.line} << 16) ^ k.column;
    }
  };
  std::unordered_map<Key, uint32_t, KeyHash> by_site_;
  std::unordered_map<std::string, uint32_t> by_name_;
  std::vector<std::string> names_;
  std::vector<std::string> functions_;
};

enum class EventKind : uint8_t {
  kStore,    // plain (cached) store: off, len, data
  kNtStore,  // non-temporal store: off, len, data
  kFlush,    // flush of [off, off+len)
  kFence,
  kOpBegin,  // arg = operation index in the workload
  kOpEnd,    // arg = operation index in the workload
};

struct Event {
  EventKind kind;
  uint32_t site = 0;  // SiteTable id (stores, flushes, fences)
  uint64_t off = 0;   // pool offset (stores, flushes); operation index (op events)
  uint64_t len = 0;
  uint64_t data = 0;  // index of the stored bytes in TraceLog::bytes
};

struct TraceLog {
  std::vector<Event> events;
  std::vector<uint8_t> bytes;
  SiteTable sites;
  // Highest pool offset + 1 any store reached: images never differ beyond it.
  uint64_t high_water = 0;
};

class TracingBackend : public PersistBackend {
 public:
  // `log` must outlive the backend.
  TracingBackend(char* view, char* alias, uint64_t size, TraceLog* log);

  void Write(void* dst, const void* src, size_t n, const Site& site) override;
  void Store64(void* dst, uint64_t value, const Site& site) override;
  void Zero(void* dst, size_t n, const Site& site) override;
  void NtWrite(void* dst, const void* src, size_t n, const Site& site) override;
  void Flush(const void* p, size_t n, const Site& site) override;
  void Fence(const Site& site) override;
  std::string Describe() const override { return "tracing"; }

  // Operation boundaries, recorded in the same order as the stores.
  void BeginOp(uint64_t index);
  void EndOp(uint64_t index);

  const char* view() const { return view_; }
  uint64_t size() const { return size_; }

 private:
  uint64_t Offset(const void* p, size_t n) const;
  void RecordStore(EventKind kind, uint64_t off, const void* src, size_t n, const Site& site);
  // An operation boundary (kOpBegin / kOpEnd) of operation `index`.
  void RecordMarker(EventKind kind, uint64_t index);

  char* const view_;
  char* const alias_;
  const uint64_t size_;
  TraceLog* const log_;
  std::mutex mu_;
};

// A BackendFactory that installs a TracingBackend recording into `log` and
// stores a pointer to it in *out (for BeginOp/EndOp).
BackendFactory TracingFactory(TraceLog* log, TracingBackend** out);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_TRACE_H_
