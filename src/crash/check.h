// SPDX-License-Identifier: Apache-2.0
//
// The checks of a recovered tree against the reference model (model.h;
// docs/crash_model.md, section 4).  Used by the explorer's worker, the kill
// harness and the key-value explorer.

#ifndef PMTREE_CRASH_CHECK_H_
#define PMTREE_CRASH_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "crash/model.h"
#include "pm/pool_impl.h"
#include "pmtree/tree.h"

namespace pmtree::crash {

// Compares a full scan with M0 / M1.  Returns 1 (M0), 2 (M1), 3 (a strict
// prefix of a bulk load with bulk_prefix_ok) or 0 with *why.
int MatchContents(const std::vector<Tree::Entry>& got, const Expect& e, std::string* why);

// Checks an open tree: Verify (which counts the allocator's bytes against
// what the tree reaches and holds in reserve), scan, lookups, allocator
// consistency, and with `reachable_check` (right after recovery, when no
// reservation is held) bytes in use == Stats().pm_bytes: fewer is double
// use, more a leak; both are violations.  Returns "" or the failure;
// *which = MatchContents' answer.  `state` names the tree in the failure
// ("contents after recovery: ...").
std::string CheckTree(PoolImpl* pool, Tree* tree, const Expect& e, int* which, bool reachable_check = true,
                      std::string_view state = "after recovery");

// Runs `n` deterministic operations around `center` on a recovered tree and
// checks every result and the final state against `model` (updated).
std::string RunContinuation(PoolImpl* pool, Tree* tree, Model* model, uint64_t center, uint32_t n, uint64_t seed);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_CHECK_H_
