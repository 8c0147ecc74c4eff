// SPDX-License-Identifier: Apache-2.0
//
// The registry: the one table that names every tree.  A new tree adds one
// line to kTrees below (and its sources.cmake); the benchmark, the crash
// explorer, the CLI and the conformance suite then pick it up.

#include "pmtree/registry.h"

#include <unistd.h>

#include "trees/cdds/cdds.h"
#include "trees/fastfair/fastfair.h"
#include "trees/fptree/fptree.h"
#include "trees/lbtree/lbtree.h"
#include "trees/logtree/logtree.h"
#include "trees/nvtree/nvtree.h"
#include "trees/volatile/volatile_tree.h"
#include "trees/wbtree/wbtree.h"

namespace pmtree {
namespace {

const std::vector<TreeFactory>& Table() {
  static const std::vector<TreeFactory> kTrees = {
      {"volatile", "in-DRAM B+-tree, the speed-of-light baseline (no persistence)",
       kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill, 512, "128..16384, multiple of 64",
       &volatile_tree::Create<uint64_t>, &volatile_tree::Recover<uint64_t>,
       &volatile_tree::Create<std::string_view>, &volatile_tree::Recover<std::string_view>},
      {"fastfair",
       "FAST+FAIR (FAST'18): in-place FAST shifts, FAIR sibling-pointer splits, lock-free (seqlock-validated) reads",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapAssumesLineOrder, 512,
       "256..4096, multiple of 64", &fastfair::Create<uint64_t, false>, &fastfair::Recover<uint64_t, false>,
       &fastfair::Create<std::string_view, false>, &fastfair::Recover<std::string_view, false>},
      {"fastfair-orig", "FAST+FAIR with the original code's three known crash bugs (test-only, for the explorer)",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapAssumesLineOrder | kCapTestOnly, 512,
       "256..4096, multiple of 64", &fastfair::Create<uint64_t, true>, &fastfair::Recover<uint64_t, true>,
       &fastfair::Create<std::string_view, true>, &fastfair::Recover<std::string_view, true>},
      {"lbtree", "LB+-Tree: 256 B PM leaves, entry moving, logless split, DRAM inner nodes",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart |
           kCapParallelRecovery | kCapAssumesLineOrder,
       256, "256, 512, 768 or 1024", &lbtree::Create<uint64_t>, &lbtree::Recover<uint64_t>,
       &lbtree::Create<std::string_view>, &lbtree::Recover<std::string_view>},
      {"lbtree-paper", "TEST ONLY: lbtree with the paper's single-NAW split insert (loses keys on some crashes)",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart |
           kCapParallelRecovery | kCapAssumesLineOrder | kCapTestOnly,
       256, "256, 512, 768 or 1024", &lbtree::CreatePaperSplit<uint64_t>, &lbtree::RecoverPaperSplit<uint64_t>,
       &lbtree::CreatePaperSplit<std::string_view>, &lbtree::RecoverPaperSplit<std::string_view>},
      {"fptree", "FPTree: PM leaves with bitmap + fingerprints, DRAM inner nodes, micro-logged splits",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill, 256, "256, 512, 1024",
       &CreateFpTree, &RecoverFpTree, &CreateFpTreeBytes, &RecoverFpTreeBytes},
      {"wbtree", "wB+-Tree: PM leaves with bitmap + sorted slot array, DRAM inner nodes, logged splits",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill, 256, "256, 512, 1024",
       &CreateWbTree, &RecoverWbTree, &CreateWbTreeBytes, &RecoverWbTreeBytes},
      {"logtree", "LCB+Tree: sorted B+-tree in PM with undo logging of every modified node (NV-Tree's baseline)",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill | kCapInstantRestart, 512,
       "512, 1024, 2048, 4096", &CreateLogTree, &RecoverLogTree, &CreateLogTreeBytes, &RecoverLogTreeBytes},
      {"nvtree", "NV-Tree: unsorted append-only PM leaves, rebuildable DRAM inner array, adaptive node sizes",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapInstantRestart | kCapBulkLoadFill,
       nvtree::kDefaultNodeSize,
       nvtree::kNodeSizeRule, &nvtree::CreateU64, &nvtree::RecoverU64, &nvtree::CreateBytes,
       &nvtree::RecoverBytes},
      {"cdds", "CDDS B-Tree: versioned entries [start,end), copy-on-write splits, forward-GC recovery, snapshots",
       kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapInstantRestart | kCapAssumesLineOrder,
       cdds::kDefaultNodeSize, "512, 1024, 2048, 4096", &CreateCddsTree, &RecoverCddsTree, &CreateCddsTreeBytes,
       &RecoverCddsTreeBytes},
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
    // Leave no half-made pool file behind.
    h.pool.reset();
    if (!path.empty()) unlink(path.c_str());
    return tree.status();
  }
  h.tree = std::move(tree).value();
  return h;
}

template <class T>
Result<TreeHandle<T>> OpenImpl(const std::string& path, const TreeFactory* expected, const TreeOptions& options_in,
                               const PoolOptions& pool_options) {
  if (expected != nullptr && !expected->persistent())
    return Status::NotSupported("tree '" + std::string(expected->name) + "' is volatile: nothing to open");
  TreeHandle<T> h;
  PMTREE_ASSIGN_OR_RETURN(h.pool, Pool::Open(path, expected ? expected->name : std::string_view(), pool_options));
  const TreeFactory* f = FindTree(h.pool->layout());
  if (f == nullptr)
    return Status::Incompatible(path + " holds tree '" + std::string(h.pool->layout()) +
                                "', which this build does not know; known: " + TreeNames(true));
  TreeOptions options = options_in;
  options.key_kind = static_cast<KeyKind>(h.pool->layout_flags());
  if (options.key_kind != KeyTraits<typename T::Key>::kKind)
    return Status::Incompatible(path + " holds " +
                                (options.key_kind == KeyKind::kBytes ? "byte-string" : "64-bit integer") +
                                " keys; open it with the matching key type");
  auto tree = CallRecover<T>(*f, h.pool.get(), options);
  if (!tree.ok()) return tree.status().Annotate(path);
  h.tree = std::move(tree).value();
  return h;
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
Result<TreeHandle<Tree>> OpenTree(const std::string& path, const TreeFactory* expected, const TreeOptions& options,
                                  const PoolOptions& pool_options) {
  return OpenImpl<Tree>(path, expected, options, pool_options);
}
Result<TreeHandle<BytesTree>> OpenBytesTree(const std::string& path, const TreeFactory* expected,
                                            const TreeOptions& options, const PoolOptions& pool_options) {
  return OpenImpl<BytesTree>(path, expected, options, pool_options);
}

}  // namespace pmtree
