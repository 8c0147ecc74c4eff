// SPDX-License-Identifier: Apache-2.0
//
// PersistBackend: the persistence mechanism behind a Pool.
//
// Every store a tree makes to pool memory and every flush and fence it asks
// for arrives here.  Implementations (src/pm/backends.cc): hardware flush
// instructions, eADR (fence only), msync, DRAM (nothing), and wrappers that
// count and that emulate media latency; the crash explorer adds a tracer
// (src/crash/).  Trees never see which one they run on.
//
// `dst` and `p` are addresses in the tree's view of the pool.  A backend whose
// view is read-only writes through its own alias of the same bytes.

#ifndef PMTREE_BACKEND_H_
#define PMTREE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>

namespace pmtree {

// The source line in tree code that asked for a write, flush or fence.  The
// crash explorer uses it to name crash points, to report coverage per site and
// to mutate (drop) one flush/fence site at a time; other backends ignore it.
using Site = std::source_location;

class PersistBackend {
 public:
  virtual ~PersistBackend() = default;
  virtual void Write(void* dst, const void* src, size_t n, const Site& site) = 0;
  virtual void Store64(void* dst, uint64_t value, const Site& site) = 0;
  virtual void Zero(void* dst, size_t n, const Site& site) = 0;
  virtual void NtWrite(void* dst, const void* src, size_t n, const Site& site) = 0;
  virtual void Flush(const void* p, size_t n, const Site& site) = 0;
  virtual void Fence(const Site& site) = 0;
  // One line for reports: "hardware(clwb)", "hardware(clwb), counted", ...
  virtual std::string Describe() const = 0;
  // Whether Flush / Fence execute an instruction (or system call).  The
  // counting layer counts only what really executes: `dram` counts nothing,
  // `eadr` counts fences only.
  virtual bool ExecutesFlushes() const { return true; }
  virtual bool ExecutesFences() const { return true; }
};

}  // namespace pmtree

#endif  // PMTREE_BACKEND_H_
