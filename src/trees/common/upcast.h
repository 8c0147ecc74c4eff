// SPDX-License-Identifier: Apache-2.0
//
// UpcastTree: turns a design's Result<unique_ptr<Concrete>> into the
// Result<unique_ptr<Tree>> (or BytesTree) its registry entry point returns,
// passing an error status through.
//
// RegistryEntry<&F>: F, a factory over PoolImpl*, as a TreeFactory entry
// point over Pool*.
//
// PMTREE_REGISTRY_ENTRY_POINTS(TreeT): defines the registry entry points in
// the one shape every design has, `<design>::Create<K>` and
// `<design>::Recover<K>` (declared in the design's header), for K = uint64_t
// and std::string_view, over TreeT<KeyPolicyFor<K>>'s static Create and
// Recover.  Used inside the design's namespace in its .cc (nvtree, logtree,
// cdds, fptree, wbtree).

#ifndef PMTREE_TREES_COMMON_UPCAST_H_
#define PMTREE_TREES_COMMON_UPCAST_H_

#include <memory>
#include <utility>

#include "pm/pool_impl.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"
#include "trees/common/keys.h"

namespace pmtree {

template <class Base, class T>
Result<std::unique_ptr<Base>> UpcastTree(Result<std::unique_ptr<T>> r) {
  if (!r.ok()) return r.status();
  return std::unique_ptr<Base>(std::move(*r));
}

// A registry entry point (TreeFactory::create etc.) over a design's factory:
// the registry's callers hold the embedder's Pool, a tree takes the tree
// author's face of it (src/pm/pool_impl.h).  This is the one cast.
template <auto kFactory>
auto RegistryEntry(Pool* pool, const TreeOptions& options) {
  return kFactory(PoolImpl::Of(pool), options);
}

}  // namespace pmtree

#define PMTREE_REGISTRY_ENTRY_POINTS(TreeT)                                                             \
  template <class K>                                                                                    \
  Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options) {            \
    return UpcastTree<BasicTree<K>>(TreeT<KeyPolicyFor<K>>::Create(pool, options));                     \
  }                                                                                                     \
  template <class K>                                                                                    \
  Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options) {           \
    return UpcastTree<BasicTree<K>>(TreeT<KeyPolicyFor<K>>::Recover(pool, options));                    \
  }                                                                                                     \
  template Result<std::unique_ptr<Tree>> Create<uint64_t>(PoolImpl*, const TreeOptions&);               \
  template Result<std::unique_ptr<Tree>> Recover<uint64_t>(PoolImpl*, const TreeOptions&);              \
  template Result<std::unique_ptr<BytesTree>> Create<std::string_view>(PoolImpl*, const TreeOptions&);  \
  template Result<std::unique_ptr<BytesTree>> Recover<std::string_view>(PoolImpl*, const TreeOptions&)

#endif  // PMTREE_TREES_COMMON_UPCAST_H_
