// SPDX-License-Identifier: Apache-2.0
//
// Internals of the explorer shared by explorer.cc and kill.cc: the reference
// model and the checks of a recovered tree against it.

#ifndef PMTREE_CRASH_EXPLORER_INTERNAL_H_
#define PMTREE_CRASH_EXPLORER_INTERNAL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "crash/explorer.h"
#include "pm/pool_impl.h"
#include "pmtree/registry.h"
#include "pmtree/tree.h"

namespace pmtree::crash {

using Model = std::map<uint64_t, uint64_t>;

// What an operation does to the model.
struct Effect {
  bool expected = false;     // the result the operation must return
  bool changes = false;      // M1 differs from M0
  uint64_t key = 0;
  bool present_after = false;
  uint64_t value_after = 0;
  // A bulk load: M1 is exactly this (M0 is empty); key/value_after name
  // one loaded entry (the lookup checked first).
  std::shared_ptr<const Model> bulk;
  // The tree has no bulk load of its own (no kCapBulkLoadFill): the
  // interface's default inserts one by one, so a crash may leave a prefix.
  bool bulk_prefix_ok = false;
};
// The entries of a kBulkLoad operation (explorer.h), ascending.
std::vector<Tree::InputEntry> BulkLoadEntries(const Op& op);
Effect EffectOf(const Model& m, const Op& op);
void ApplyEffect(Model* m, const Effect& e);

// The states a crash image may recover to.
struct Expect {
  const Model* m0 = nullptr;
  bool m0_ok = true;       // false at the end of an operation: only M1
  bool absent_ok = false;  // a crash inside Create: "no tree yet" is fine
  Effect effect;           // M1 = M0 + effect
  uint64_t focus_key = 0;  // key of the in-flight operation
};

// Compares a full scan with M0 / M1.  Returns 1 (M0), 2 (M1), 3 (a strict
// prefix of a bulk load with bulk_prefix_ok) or 0 with *why.
int MatchContents(const std::vector<Tree::Entry>& got, const Expect& e, std::string* why);

// Checks an open tree: Verify (which counts the allocator's bytes against
// what the tree reaches and holds in reserve), scan, lookups, allocator
// consistency, and with `reachable_check` (right after recovery, when no
// reservation is held) bytes in use == Stats().pm_bytes: fewer is double
// use, more a leak; both are violations.  Returns "" or the failure;
// *which = MatchContents' answer.
std::string CheckTree(PoolImpl* pool, Tree* tree, const Expect& e, int* which, bool reachable_check = true);

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

// Runs `n` deterministic operations around `center` on a recovered tree and
// checks every result and the final state against `model` (updated).
std::string RunContinuation(PoolImpl* pool, Tree* tree, Model* model, uint64_t center, uint32_t n, uint64_t seed);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_EXPLORER_INTERNAL_H_
