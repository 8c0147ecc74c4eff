// SPDX-License-Identifier: Apache-2.0
//
// Internals of the explorer shared by explorer.cc and kill.cc: the reference
// model and the checks of a recovered tree against it.

#ifndef PMTREE_CRASH_EXPLORER_INTERNAL_H_
#define PMTREE_CRASH_EXPLORER_INTERNAL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "crash/explorer.h"
#include "pmtree/pool.h"
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
};
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

// Compares a full scan with M0 / M1.  Returns 1 (M0), 2 (M1) or 0 with *why.
int MatchContents(const std::vector<Tree::Entry>& got, const Expect& e, std::string* why);

// Checks an open tree: Verify (which accounts for the tree's own
// reservations), scan, lookups, allocator consistency, and with
// `reachable_check` (right after recovery) bytes in use vs Stats().pm_bytes:
// fewer in use than reachable is double use (a violation); more is reported
// in *finding, since a tree may legitimately hold reserved nodes that Verify()
// accepts (FAST+FAIR's split spares).  Returns "" or the failure;
// *which = 1 (M0) or 2 (M1).
std::string CheckTree(Pool* pool, Tree* tree, const Expect& e, int* which, bool reachable_check = true,
                      std::string* finding = nullptr);

// Runs `n` deterministic operations around `center` on a recovered tree and
// checks every result and the final state against `model` (updated).
std::string RunContinuation(Pool* pool, Tree* tree, Model* model, uint64_t center, uint32_t n, uint64_t seed);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_EXPLORER_INTERNAL_H_
