// SPDX-License-Identifier: Apache-2.0
//
// The reference model of the crash explorer (docs/crash_model.md): the
// operations a scenario runs, what each does to a std::map model, and the
// states a crash image may recover to.  The scenarios and the worker
// (explorer.h) produce operations and expectations; the checks (check.h)
// and the kill harness (kill.h) consume them.  Neither side includes the
// other: both include this header.

#ifndef PMTREE_CRASH_MODEL_H_
#define PMTREE_CRASH_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pmtree/tree.h"

namespace pmtree::crash {

// kReopen: Close() the tree (a clean shutdown), open the pool again and
// recover (instant restart where the tree supports it); the contents do not
// change.
// kBulkLoad: BulkLoad() of `key` entries (keys 10, 20, ..., 10 * key, values
// ValueFor(k, 3)) at fill `value` percent into the empty tree.
enum class OpKind : uint8_t { kCreate, kInsert, kUpdate, kUpsert, kRemove, kReopen, kBulkLoad };

struct Op {
  OpKind kind = OpKind::kInsert;
  uint64_t key = 0;
  uint64_t value = 0;
  // n > 0: the operation runs on a pool that is full from its n-th
  // allocation on (Allocator::FailAllocationsAfter(n - 1)).  When it then
  // fails with OutOfSpace its effect is none (contract items 1 and 5: the
  // state before the call, nothing leaked); the trace decides which.
  uint32_t fail_alloc = 0;
};
std::string OpString(const Op& op);

// The value version `version` of `key` stores.  Both 4-byte halves differ
// between versions, so a value store torn in two (a split-store mutant, or
// a real torn commit) is visible.
inline uint64_t ValueFor(uint64_t key, uint64_t version) { return ((version + 1) << 40) | (key * 1000 + version); }

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
// The entries of a kBulkLoad operation, ascending.
std::vector<Tree::InputEntry> BulkLoadEntries(const Op& op);
// Runs one tree operation (not kCreate or kReopen, which need the pool).
Result<bool> RunOp(Tree& t, const Op& op);
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

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_MODEL_H_
