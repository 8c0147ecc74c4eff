// SPDX-License-Identifier: Apache-2.0
//
// The tree registry: one explicit table (src/trees/registry.cc) mapping a
// registry name to its capabilities and its create/recover functions.  The
// benchmark, the explorer, the CLI and the conformance suite know trees only
// through this table: adding a line here is all it takes for a new tree to be
// benchmarked, crash-tested and run through every conformance test.
//
// Pool and tree.  A persistent tree lives in a Pool whose layout name is the
// registry name; the pool's layout_flags record the key kind.  OpenTree /
// CreateTree below bundle the two; the Pool must outlive the tree.
//
// A minimal program (examples/quickstart.cc is the full version):
//
//   auto f = pmtree::RequireTree("lbtree");                    // Result<const TreeFactory*>
//   auto h = pmtree::CreateTree(**f, "/dev/shm/my.pool");      // Result<TreeHandle<Tree>>
//   auto inserted = h->tree->Insert(42, 7);                    // Result<bool>: durable on return
//   ... h->tree->Close();                                      // clean shutdown
//   auto again = pmtree::OpenTree("/dev/shm/my.pool", *f, {}); // recovers, after a crash too
//
// ERRORS of the functions below (Status codes, pmtree/status.h):
//   InvalidArgument  an unknown tree name, a bad node size, tree option or
//                    pool size, a flush instruction this CPU lacks
//   NotFound         OpenTree: the file does not exist
//   Busy             the pool file is open in another process; CreateTree:
//                    the file exists (set PoolOptions::overwrite)
//   Incompatible     the pool is valid but not what was asked for: another
//                    format version, another tree than `expected`, a tree this
//                    build does not know, or the other key type (a pool of
//                    byte-string keys opened with OpenTree)
//   NotSupported     the tree cannot do what was asked whatever the pool:
//                    byte-string keys on a tree without kCapBytesKeys, opening
//                    a volatile tree, the msync backend on an anonymous pool
//   Corruption       the file is not a pool, or recovery found broken structure
//   IoError          the OS refused (open, ftruncate, mmap)
//   OutOfSpace       the pool is too small for the tree's metadata
//
// A SIMULATED CRASH: destroying a handle without calling tree->Close() first
// leaves the pool exactly as a process crash at that instant would (nothing
// is written on the way out); the next OpenTree runs crash recovery.
// examples/crash_recovery.cc kills a process for real.

#ifndef PMTREE_REGISTRY_H_
#define PMTREE_REGISTRY_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pmtree/pool.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree {

struct TreeFactory {
  std::string_view name;     // registry name, lower case, the design's folder
  std::string_view summary;  // one line for --help and reports
  uint32_t capabilities;     // Capability flags
  uint32_t default_node_size;
  std::string_view node_sizes;  // human rule, e.g. "256..1024, multiple of 256"

  // Create on a fresh pool (root slots zero), or recover from a pool that
  // holds this tree (after a clean shutdown or a crash).  `pool` is null for
  // a volatile tree.  Recover ignores node_size and key_kind (the pool knows).
  Result<std::unique_ptr<Tree>> (*create)(Pool* pool, const TreeOptions& options);
  Result<std::unique_ptr<Tree>> (*recover)(Pool* pool, const TreeOptions& options);
  // Byte-string keys; null when the tree lacks kCapBytesKeys.
  Result<std::unique_ptr<BytesTree>> (*create_bytes)(Pool* pool, const TreeOptions& options);
  Result<std::unique_ptr<BytesTree>> (*recover_bytes)(Pool* pool, const TreeOptions& options);

  bool persistent() const { return capabilities & kCapPersistent; }
  bool test_only() const { return capabilities & kCapTestOnly; }
};

// Every registered tree, in table order.
const std::vector<TreeFactory>& Registry();
// The entry named `name`, or InvalidArgument naming the valid names.
Result<const TreeFactory*> RequireTree(std::string_view name);
// The entry named `name`, or null (for callers that test membership).
const TreeFactory* FindTree(std::string_view name);
// "volatile, fastfair, ..." (test-only variants excluded unless asked for).
std::string TreeNames(bool include_test_only = false);
// Splits "a,b" / "all" into factories; InvalidArgument naming the valid names
// for an unknown one.  "all" excludes test-only variants.
Result<std::vector<const TreeFactory*>> ParseTreeList(std::string_view list);

// A tree together with the pool it lives in (pool null for volatile trees).
// Destroy `tree` before `pool`; Close() the tree for a clean shutdown.
template <class T>
struct TreeHandle {
  std::unique_ptr<Pool> pool;
  std::unique_ptr<T> tree;
};

// Creates `path` as a pool of `pool_size` bytes holding a new tree.  An
// empty path makes an anonymous pool (memfd): it lives as long as the
// handle's pool and OpenTree cannot reopen it; use a file (e.g. under
// /dev/shm) for a tree you reopen, or RecoverTree below for its bytes.
// `options.key_kind` is ignored: the function chosen sets it.
Result<TreeHandle<Tree>> CreateTree(const TreeFactory& f, const std::string& path, uint64_t pool_size,
                                    const TreeOptions& options, const PoolOptions& pool_options = {});
Result<TreeHandle<BytesTree>> CreateBytesTree(const TreeFactory& f, const std::string& path, uint64_t pool_size,
                                              const TreeOptions& options, const PoolOptions& pool_options = {});
// The same with a pool of kDefaultPoolSize bytes (sparse: a file under
// /dev/shm or on a file system with holes costs only what the tree uses).
Result<TreeHandle<Tree>> CreateTree(const TreeFactory& f, const std::string& path, const TreeOptions& options = {},
                                    const PoolOptions& pool_options = {});
Result<TreeHandle<BytesTree>> CreateBytesTree(const TreeFactory& f, const std::string& path,
                                              const TreeOptions& options = {}, const PoolOptions& pool_options = {});
// Opens and recovers the tree in an existing pool file (after a clean
// shutdown or a crash).  `expected` may be null (any tree); the pool's layout
// picks the factory, and the pool's key kind must match the function.
Result<TreeHandle<Tree>> OpenTree(const std::string& path, const TreeFactory* expected,
                                  const TreeOptions& options, const PoolOptions& pool_options = {});
Result<TreeHandle<BytesTree>> OpenBytesTree(const std::string& path, const TreeFactory* expected,
                                            const TreeOptions& options, const PoolOptions& pool_options = {});
// Recovers the tree in a pool the caller already opened, e.g. the bytes of an
// anonymous pool reopened with Pool::OpenAnonymous(dup(old->memfd()), ...).
// Takes ownership of `pool`; errors as OpenTree.
Result<TreeHandle<Tree>> RecoverTree(std::unique_ptr<Pool> pool, const TreeFactory* expected,
                                     const TreeOptions& options = {});
Result<TreeHandle<BytesTree>> RecoverBytesTree(std::unique_ptr<Pool> pool, const TreeFactory* expected,
                                               const TreeOptions& options = {});

}  // namespace pmtree

#endif  // PMTREE_REGISTRY_H_
