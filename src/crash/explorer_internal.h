// SPDX-License-Identifier: Apache-2.0
//
// Internals shared by the explorer's files (scenarios.cc, worker.cc,
// supervisor.cc, mutation.cc), the kill harness and the key-value explorer:
// the key shapes, crash image files, clocks and the seed mixer.  The
// reference model is model.h, its checks check.h.

#ifndef PMTREE_CRASH_EXPLORER_INTERNAL_H_
#define PMTREE_CRASH_EXPLORER_INTERNAL_H_

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "crash/check.h"
#include "crash/explorer.h"
#include "crash/model.h"
#include "pm/pool_impl.h"
#include "pmtree/registry.h"
#include "pmtree/tree.h"

namespace pmtree::crash {

// Seconds on the monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds (user + system) of this process and of its waited-for
// children.
inline double CpuSeconds() {
  double t = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage ru;
    getrusage(who, &ru);
    t += static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  return t;
}

// A 64-bit mixer (splitmix64's finaliser): the seed of each crash point and
// image from the run's seed.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The command line that replays image `r` of an exploration of `f` with `o`.
std::string ReplayCommand(const TreeFactory& f, const ExploreOptions& o, const ImageRef& r);

// The tree of `f` on `pool` with the key shape of `o` (key_shapes.cc): the
// tree itself for KeyShape::kU64, else a Tree facade over its BytesTree.
Status CheckKeyShape(const TreeFactory& f, KeyShape shape);
uint64_t PoolLayoutFlags(KeyShape shape);
Result<std::unique_ptr<Tree>> CreateFor(const TreeFactory& f, Pool* pool, const ExploreOptions& o);
Result<std::unique_ptr<Tree>> RecoverFor(const TreeFactory& f, Pool* pool, const ExploreOptions& o);

// A memfd of the pool's size mapped shared: crash images are built in it.
struct ImageFile {
  int fd = -1;
  char* map = nullptr;
  uint64_t size = 0;
  uint64_t dirty = 0;  // bytes [0, dirty) may be nonzero

  Status Open(uint64_t n) {
    size = n;
    fd = memfd_create("pmtree-crash-image", MFD_CLOEXEC);
    if (fd < 0) return Status::IoError("memfd_create for crash images failed");
    if (ftruncate(fd, static_cast<off_t>(n)) != 0) return Status::IoError("sizing the crash image failed");
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Status::IoError("mapping the crash image failed");
    map = static_cast<char*>(p);
    return Status::Ok();
  }
  void Reset(uint64_t extent) {
    std::memset(map, 0, std::min(size, dirty));
    dirty = std::min(size, extent);
  }
  ~ImageFile() {
    if (map) munmap(map, size);
    if (fd >= 0) close(fd);
  }
};

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_EXPLORER_INTERNAL_H_
