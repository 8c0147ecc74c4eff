// SPDX-License-Identifier: Apache-2.0
//
// `lbtree`: the LB+-Tree of Liu, Chen and Wang, "LB+-Trees: Optimizing
// Persistent Index Performance on 3DXPoint Memory" (PVLDB 13(7), 2020),
// docs/trees/lbtree.md.
//
// What it is.  A B+-tree whose leaves live in the pool and whose inner nodes
// live in DRAM and are rebuilt from the leaf list at recovery.  Leaves are
// 256 B (14 entries, a 16 B header with bitmap, lock bit, alt bit and 14
// one-byte fingerprints, two alternative sibling pointers) or m x 256 B with
// one header per 256 B block and alternative headers (node_size 512, 768,
// 1024).  Insertions move entries out of the header's line so that later
// insertions write one line (entry moving, §3.2); splits switch the sibling
// pointer and the block headers with one 8-byte atomic write (logless split,
// §3.3-3.4); a delete is one persisted 8-byte bitmap write.
//
// Keys: K = uint64_t (U64Keys) or std::string_view (BytesKeys: the entry
// holds a reference to a key blob; the fingerprint remains the first filter).
//
// Options: node_size 256 (default), 512, 768 or 1024; recovery_threads
// (parallel rebuild of the inner nodes over leaf segments); extra
// "segments=N" (0..31, default 31): how many evenly spaced leaves are
// recorded for parallel recovery (0: none, recovery walks the leaf chain
// from the head in one segment).
//
// Thread safety: every operation may run concurrently with every other,
// except BulkLoad, Verify, Stats and Close (tree.h).  Readers never block
// writers' progress on other leaves; a reader that meets a leaf being
// modified waits for the writer and then reads the persisted result.  No HTM
// (docs "Concurrency").
//
// Durability: tree.h's contract.  A mutating call returns after its effect is
// persistent; Lookup and Scan never return bytes that a crash could lose,
// because a leaf is unlocked only after its new contents are persisted.

#ifndef PMTREE_TREES_LBTREE_LBTREE_H_
#define PMTREE_TREES_LBTREE_LBTREE_H_

#include <memory>
#include <string_view>

#include "pm/pool_impl.h"
#include "pmtree/tree.h"

namespace pmtree::lbtree {

inline constexpr std::string_view kName = "lbtree";
inline constexpr std::string_view kPaperSplitName = "lbtree-paper";

// Creates a tree on a fresh pool (root slot 0 must be 0).  InvalidArgument
// for a node size other than 256/512/768/1024 or an unknown extra option.
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(PoolImpl* pool, const TreeOptions& options);

// Recovers the tree in `pool` after a clean shutdown (instant restart from
// the image Close() wrote) or a crash (leaf-list scan, stale lock bits
// cleared, allocator rebuilt, inner nodes rebuilt with
// options.recovery_threads threads).  NotFound when the pool holds no tree,
// Corruption for a damaged one, Incompatible for the other key kind.
template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(PoolImpl* pool, const TreeOptions& options);

// TEST ONLY (registry: lbtree-paper, kCapTestOnly): the split inserts
// a key that stays in the old leaf before the split's NAW, into a slot the
// durable header still marks valid, exactly as the paper's Algorithm 3 line 26
// does.  Some crash states lose an acknowledged key; the crash explorer must
// find them (docs/trees/lbtree.md, deviation 2).
template <class K>
Result<std::unique_ptr<BasicTree<K>>> CreatePaperSplit(PoolImpl* pool, const TreeOptions& options);
template <class K>
Result<std::unique_ptr<BasicTree<K>>> RecoverPaperSplit(PoolImpl* pool, const TreeOptions& options);

}  // namespace pmtree::lbtree

#endif  // PMTREE_TREES_LBTREE_LBTREE_H_
