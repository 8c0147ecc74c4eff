// SPDX-License-Identifier: Apache-2.0
//
// The built-in persistence backends (see pmtree/backend.h) and the wrappers
// that count and emulate media latency.  Pool::InstallBackend composes them:
//     profiling( counting( latency( hardware | eadr | msync | dram | custom ) ) )

#ifndef PMTREE_PM_BACKENDS_H_
#define PMTREE_PM_BACKENDS_H_

#include <cstddef>
#include <memory>

#include "pmtree/backend.h"
#include "pmtree/pool.h"

namespace pmtree {

using MapFlushFn = void (*)(const void*, size_t);
using MapDrainFn = void (*)();

std::unique_ptr<PersistBackend> MakeHardwareBackend(FlushInstruction instruction);
std::unique_ptr<PersistBackend> MakeEadrBackend();
// `flush`/`drain` are libpmem2's functions for the mapping (msync on a
// page-granular mapping).
std::unique_ptr<PersistBackend> MakeMsyncBackend(MapFlushFn flush, MapDrainFn drain);
std::unique_ptr<PersistBackend> MakeDramBackend();
std::unique_ptr<PersistBackend> WrapLatency(std::unique_ptr<PersistBackend> inner, uint32_t ns_per_line);
std::unique_ptr<PersistBackend> WrapCounting(std::unique_ptr<PersistBackend> inner);
// Records every store and flush request into `profile` (not owned).
std::unique_ptr<PersistBackend> WrapProfiling(std::unique_ptr<PersistBackend> inner, WriteProfile* profile);

}  // namespace pmtree

#endif  // PMTREE_PM_BACKENDS_H_
