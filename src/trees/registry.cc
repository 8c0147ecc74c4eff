// SPDX-License-Identifier: Apache-2.0
//
// The registry: the one table that names every tree.  A new tree adds one
// line to kTrees below (and its sources.cmake); the benchmark, the crash
// explorer, the CLI and the conformance suite then pick it up.

#include "pmtree/registry.h"

#include <unistd.h>

#include "trees/cdds/cdds.h"
#include "trees/circtree/circtree.h"
#include "trees/common/upcast.h"
#include "trees/fastfair/fastfair.h"
#include "trees/fptree/fptree.h"
#include "trees/lbtree/lbtree.h"
#include "trees/logtree/logtree.h"
#include "trees/nvtree/nvtree.h"
#include "trees/sortedtree/sortedtree.h"
#include "trees/volatile/volatile_tree.h"
#include "trees/wbtree/wbtree.h"
#include "trees/wotree/wotree.h"

namespace pmtree {
namespace {

const std::vector<TreeFactory>& Table() {
  static const std::vector<TreeFactory> kTrees = {
      {"volatile", "in-DRAM B+-tree, the speed-of-light baseline (no persistence)",
       kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill, 512, "128..16384, multiple of 64",
       &RegistryEntry<&volatile_tree::Create<uint64_t>>, &RegistryEntry<&volatile_tree::Recover<uint64_t>>,
       &RegistryEntry<&volatile_tree::Create<std::string_view>>, &RegistryEntry<&volatile_tree::Recover<std::string_view>>},
      {"fastfair",
       "FAST+FAIR (FAST'18): in-place FAST shifts, FAIR sibling-pointer splits, lock-free (seqlock-validated) reads",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder,
       512,
       "256..4096, multiple of 64", &RegistryEntry<&fastfair::Create<uint64_t, false>>, &RegistryEntry<&fastfair::Recover<uint64_t, false>>,
       &RegistryEntry<&fastfair::Create<std::string_view, false>>, &RegistryEntry<&fastfair::Recover<std::string_view, false>>},
      {"fastfair-orig", "FAST+FAIR with the original code's three known crash bugs (test-only, for the explorer)",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder |
           kCapTestOnly,
       512,
       "256..4096, multiple of 64", &RegistryEntry<&fastfair::Create<uint64_t, true>>, &RegistryEntry<&fastfair::Recover<uint64_t, true>>,
       &RegistryEntry<&fastfair::Create<std::string_view, true>>, &RegistryEntry<&fastfair::Recover<std::string_view, true>>},
      {"lbtree", "LB+-Tree: 256 B PM leaves, entry moving, logless split, DRAM inner nodes",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart |
           kCapParallelRecovery | kCapAssumesLineOrder,
       256, "256, 512, 768 or 1024", &RegistryEntry<&lbtree::Create<uint64_t>>, &RegistryEntry<&lbtree::Recover<uint64_t>>,
       &RegistryEntry<&lbtree::Create<std::string_view>>, &RegistryEntry<&lbtree::Recover<std::string_view>>},
      {"lbtree-paper", "TEST ONLY: lbtree with the paper's single-NAW split insert (loses keys on some crashes)",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart |
           kCapParallelRecovery | kCapAssumesLineOrder | kCapTestOnly,
       256, "256, 512, 768 or 1024", &RegistryEntry<&lbtree::CreatePaperSplit<uint64_t>>, &RegistryEntry<&lbtree::RecoverPaperSplit<uint64_t>>,
       &RegistryEntry<&lbtree::CreatePaperSplit<std::string_view>>, &RegistryEntry<&lbtree::RecoverPaperSplit<std::string_view>>},
      {"fptree", "FPTree: PM leaves with bitmap + fingerprints, DRAM inner nodes, micro-logged splits",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart, 256, "256, 512, 1024",
       &RegistryEntry<&fptree::Create<uint64_t>>, &RegistryEntry<&fptree::Recover<uint64_t>>, &RegistryEntry<&fptree::Create<std::string_view>>,
       &RegistryEntry<&fptree::Recover<std::string_view>>},
      {"wbtree", "wB+-Tree: PM leaves with bitmap + sorted slot array, DRAM inner nodes, logged splits",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart, 256, "256, 512, 1024",
       &RegistryEntry<&wbtree::Create<uint64_t>>, &RegistryEntry<&wbtree::Recover<uint64_t>>, &RegistryEntry<&wbtree::Create<std::string_view>>,
       &RegistryEntry<&wbtree::Recover<std::string_view>>},
      {"logtree", "LCB+Tree: sorted B+-tree in PM with undo logging of every modified node (NV-Tree's baseline)",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart, 512,
       "512, 1024, 2048, 4096", &RegistryEntry<&logtree::Create<uint64_t>>, &RegistryEntry<&logtree::Recover<uint64_t>>,
       &RegistryEntry<&logtree::Create<std::string_view>>, &RegistryEntry<&logtree::Recover<std::string_view>>},
      {"circtree", "Circ-Tree: circular sorted nodes, bidirectional shifting, one 8-byte base+count commit",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapInstantRestart | kCapAssumesLineOrder,
       circtree::kDefaultNodeSize, circtree::kNodeSizeRule, &RegistryEntry<&circtree::Create<uint64_t>>,
       &RegistryEntry<&circtree::Recover<uint64_t>>, &RegistryEntry<&circtree::Create<std::string_view>>, &RegistryEntry<&circtree::Recover<std::string_view>>},
      {"nvtree", "NV-Tree: unsorted append-only PM leaves, rebuildable DRAM inner array, adaptive node sizes",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapInstantRestart | kCapBulkLoadFill,
       nvtree::kDefaultNodeSize,
       nvtree::kNodeSizeRule, &RegistryEntry<&nvtree::Create<uint64_t>>, &RegistryEntry<&nvtree::Recover<uint64_t>>,
       &RegistryEntry<&nvtree::Create<std::string_view>>, &RegistryEntry<&nvtree::Recover<std::string_view>>},
      {"wotree",
       "WO-tree: bitmap + slot-array leaves with unsorted appends and a leaf split log, FAST inner nodes with "
       "delayed flush and next siblings, lock-free inner search",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder,
       1024,
       wotree::kNodeSizeRule, &RegistryEntry<&wotree::Create<uint64_t>>, &RegistryEntry<&wotree::Recover<uint64_t>>, &RegistryEntry<&wotree::Create<std::string_view>>,
       &RegistryEntry<&wotree::Recover<std::string_view>>},
      {"wotree-paper", "TEST ONLY: wotree splitting leaves in Algorithm 3's printed order (no log, no commit point)",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder |
           kCapTestOnly,
       1024, wotree::kNodeSizeRule, &RegistryEntry<&wotree::CreatePaper<uint64_t>>, &RegistryEntry<&wotree::Recover<uint64_t>>,
       &RegistryEntry<&wotree::CreatePaper<std::string_view>>, &RegistryEntry<&wotree::Recover<std::string_view>>},
      {"sortedtree",
       "native sorted B+-tree of the WO-tree paper: sorted PM nodes, each shifted record persisted, FAIR-order "
       "splits",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder,
       1024,
       wotree::kNodeSizeRule, &RegistryEntry<&sortedtree::Create<uint64_t>>, &RegistryEntry<&sortedtree::Recover<uint64_t>>, &RegistryEntry<&sortedtree::Create<std::string_view>>,
       &RegistryEntry<&sortedtree::Recover<std::string_view>>},
      {"cdds", "CDDS B-Tree: versioned entries [start,end), copy-on-write splits, forward-GC recovery, snapshots",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart | kCapAssumesLineOrder,
       cdds::kDefaultNodeSize, "512, 1024, 2048, 4096", &RegistryEntry<&cdds::Create<uint64_t>>, &RegistryEntry<&cdds::Recover<uint64_t>>,
       &RegistryEntry<&cdds::Create<std::string_view>>, &RegistryEntry<&cdds::Recover<std::string_view>>},
  };
  return kTrees;
}

}  // namespace

const std::vector<TreeFactory>& Registry() { return Table(); }

const TreeFactory* FindTree(std::string_view name) {
  for (const TreeFactory& f : Table())
    if (f.name == name) return &f;
  return nullptr;
}

Result<const TreeFactory*> RequireTree(std::string_view name) {
  if (const TreeFactory* f = FindTree(name)) return f;
  return Status::InvalidArgument("unknown tree '" + std::string(name) + "'; valid: " + TreeNames(true));
}

std::string TreeNames(bool include_test_only) {
  std::string s;
  for (const TreeFactory& f : Table()) {
    if (f.test_only() && !include_test_only) continue;
    if (!s.empty()) s += ", ";
    s += f.name;
  }
  return s;
}

Result<std::vector<const TreeFactory*>> ParseTreeList(std::string_view list) {
  std::vector<const TreeFactory*> out;
  if (list == "all") {
    for (const TreeFactory& f : Table())
      if (!f.test_only()) out.push_back(&f);
    return out;
  }
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view name = list.substr(pos, comma - pos);
    const TreeFactory* f = FindTree(name);
    if (f == nullptr)
      return Status::InvalidArgument("unknown tree '" + std::string(name) + "'; valid: all, " + TreeNames(true));
    out.push_back(f);
    pos = comma + 1;
  }
  return out;
}

namespace {

template <class T>
Result<std::unique_ptr<T>> CallCreate(const TreeFactory& f, Pool* pool, const TreeOptions& o) {
  if constexpr (std::is_same_v<T, Tree>) {
    return f.create(pool, o);
  } else {
    if (f.create_bytes == nullptr)
      return Status::NotSupported("tree '" + std::string(f.name) + "' has no byte-string keys");
    return f.create_bytes(pool, o);
  }
}

template <class T>
Result<std::unique_ptr<T>> CallRecover(const TreeFactory& f, Pool* pool, const TreeOptions& o) {
  if constexpr (std::is_same_v<T, Tree>) {
    return f.recover(pool, o);
  } else {
    if (f.recover_bytes == nullptr)
      return Status::NotSupported("tree '" + std::string(f.name) + "' has no byte-string keys");
    return f.recover_bytes(pool, o);
  }
}

template <class T>
Result<TreeHandle<T>> CreateImpl(const TreeFactory& f, const std::string& path, uint64_t pool_size,
                                 const TreeOptions& options_in, const PoolOptions& pool_options) {
  TreeOptions options = options_in;
  options.key_kind = KeyTraits<typename T::Key>::kKind;
  TreeHandle<T> h;
  if (!f.persistent()) {
    PMTREE_ASSIGN_OR_RETURN(h.tree, CallCreate<T>(f, nullptr, options));
    return h;
  }
  const uint64_t flags = static_cast<uint64_t>(options.key_kind);
  if (path.empty()) {
    PMTREE_ASSIGN_OR_RETURN(h.pool, Pool::CreateAnonymous(pool_size, f.name, flags, pool_options));
  } else {
    PMTREE_ASSIGN_OR_RETURN(h.pool, Pool::Create(path, pool_size, f.name, flags, pool_options));
  }
  auto tree = CallCreate<T>(f, h.pool.get(), options);
  if (!tree.ok()) {
    // Leave no half-made pool file behind, but never remove a file that
    // existed before this call.
    const bool created = h.pool->created_file();
    h.pool.reset();
    if (created) unlink(path.c_str());
    return tree.status();
  }
  h.tree = std::move(tree).value();
  return h;
}

// Checks a pool header's tree and key kind before Pool::Open maps or writes
// anything, so a refused open leaves every byte of the file unchanged.
Status AcceptLayout(const std::string& path, std::string_view layout, uint64_t flags, KeyKind want) {
  if (FindTree(layout) == nullptr)
    return Status::Incompatible(path + " holds tree '" + std::string(layout) +
                                "', which this build does not know; known: " + TreeNames(true));
  if (flags > static_cast<uint64_t>(KeyKind::kBytes))
    return Status::Corruption(path + ": layout_flags " + std::to_string(flags) + " name no key kind (0 or 1)");
  if (static_cast<KeyKind>(flags) != want)
    return Status::Incompatible(path + " holds " + (flags == 1 ? "byte-string" : "64-bit integer") +
                                " keys; open it with the matching key type");
  return Status::Ok();
}

// How errors name a pool: its path, or "the anonymous pool".
std::string PoolName(const Pool* pool) {
  return pool != nullptr && !pool->path().empty() ? pool->path() : "the anonymous pool";
}

// Recovers the tree in an opened pool; `context` prefixes recovery errors.
template <class T>
Result<TreeHandle<T>> RecoverImpl(std::unique_ptr<Pool> pool, const TreeFactory* expected,
                                  const TreeOptions& options_in, const std::string& context) {
  if (pool == nullptr) return Status::InvalidArgument("recovering a tree: no pool");
  if (expected != nullptr && pool->layout() != expected->name)
    return Status::Incompatible(context + " holds tree '" + std::string(pool->layout()) + "', not '" +
                                std::string(expected->name) + "'");
  const TreeFactory* f = FindTree(pool->layout());
  if (f == nullptr)
    return Status::Incompatible(context + " holds tree '" + std::string(pool->layout()) +
                                "', which this build does not know; known: " + TreeNames(true));
  TreeOptions options = options_in;
  options.key_kind = static_cast<KeyKind>(pool->layout_flags());
  if (options.key_kind != KeyTraits<typename T::Key>::kKind)
    return Status::Incompatible(context + " holds " +
                                (options.key_kind == KeyKind::kBytes ? "byte-string" : "64-bit integer") +
                                " keys; open it with the matching key type");
  TreeHandle<T> h;
  h.pool = std::move(pool);
  auto tree = CallRecover<T>(*f, h.pool.get(), options);
  // A pool refused as damaged stays as it was found, so it is refused again
  // (a detected loss stays detected: docs/pool_format.md).
  if (!tree.ok()) {
    if (tree.status().code() == Status::Code::kCorruption) h.pool->RestoreOpenState();
    return tree.status().Annotate(context);
  }
  if (options.verify_on_open) {
    if (Status s = (*tree)->Verify(); !s.ok()) {
      if (s.code() == Status::Code::kCorruption) h.pool->RestoreOpenState();
      return s.Annotate(context + " (verify on open)");
    }
  }
  h.tree = std::move(tree).value();
  return h;
}

template <class T>
Result<TreeHandle<T>> OpenImpl(const std::string& path, const TreeFactory* expected, const TreeOptions& options,
                               const PoolOptions& pool_options_in) {
  if (expected != nullptr && !expected->persistent())
    return Status::NotSupported("tree '" + std::string(expected->name) + "' is volatile: nothing to open");
  constexpr KeyKind kWant = KeyTraits<typename T::Key>::kKind;
  PoolOptions pool_options = pool_options_in;
  pool_options.accept = [&path, caller = pool_options_in.accept](std::string_view layout, uint64_t flags) {
    PMTREE_RETURN_IF_ERROR(AcceptLayout(path, layout, flags, kWant));
    return caller ? caller(layout, flags) : Status::Ok();
  };
  PMTREE_ASSIGN_OR_RETURN(auto pool,
                          Pool::Open(path, expected ? expected->name : std::string_view(), pool_options));
  return RecoverImpl<T>(std::move(pool), expected, options, path);
}

}  // namespace

Result<TreeHandle<Tree>> CreateTree(const TreeFactory& f, const std::string& path, uint64_t pool_size,
                                    const TreeOptions& options, const PoolOptions& pool_options) {
  return CreateImpl<Tree>(f, path, pool_size, options, pool_options);
}
Result<TreeHandle<BytesTree>> CreateBytesTree(const TreeFactory& f, const std::string& path, uint64_t pool_size,
                                              const TreeOptions& options, const PoolOptions& pool_options) {
  return CreateImpl<BytesTree>(f, path, pool_size, options, pool_options);
}
Result<TreeHandle<Tree>> CreateTree(const TreeFactory& f, const std::string& path, const TreeOptions& options,
                                    const PoolOptions& pool_options) {
  return CreateImpl<Tree>(f, path, kDefaultPoolSize, options, pool_options);
}
Result<TreeHandle<BytesTree>> CreateBytesTree(const TreeFactory& f, const std::string& path,
                                              const TreeOptions& options, const PoolOptions& pool_options) {
  return CreateImpl<BytesTree>(f, path, kDefaultPoolSize, options, pool_options);
}
Result<TreeHandle<Tree>> OpenTree(const std::string& path, const TreeFactory* expected, const TreeOptions& options,
                                  const PoolOptions& pool_options) {
  return OpenImpl<Tree>(path, expected, options, pool_options);
}
Result<TreeHandle<BytesTree>> OpenBytesTree(const std::string& path, const TreeFactory* expected,
                                            const TreeOptions& options, const PoolOptions& pool_options) {
  return OpenImpl<BytesTree>(path, expected, options, pool_options);
}
Result<TreeHandle<Tree>> RecoverTree(std::unique_ptr<Pool> pool, const TreeFactory* expected,
                                     const TreeOptions& options) {
  const std::string context = PoolName(pool.get());
  return RecoverImpl<Tree>(std::move(pool), expected, options, context);
}
Result<TreeHandle<BytesTree>> RecoverBytesTree(std::unique_ptr<Pool> pool, const TreeFactory* expected,
                                               const TreeOptions& options) {
  const std::string context = PoolName(pool.get());
  return RecoverImpl<BytesTree>(std::move(pool), expected, options, context);
}

}  // namespace pmtree
