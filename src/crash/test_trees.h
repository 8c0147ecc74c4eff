// SPDX-License-Identifier: Apache-2.0
//
// A tiny persistent structure for the explorer's own tests: a sorted array
// replaced copy-on-write on every update.
//
//   meta block (64 B, root slot 0)     array block (16 + 16 n B)
//   off size field                     off size field
//   0   8    magic kMetaMagic          0   8    magic kArrayMagic
//   8   8    array offset (0: empty)   8   8    count n
//                                      16  16n  (key, value) ascending
//
// Write order of an update: write the new array block, persist it, then
// Store64 the array offset in the meta block and persist it (the commit
// point), then free the old block.  Recovery reaches meta + current block and
// rebuilds the allocator from them.
//
// CowArrayMode selects deliberate flaws for negative controls:
//   kCorrect            the order above
//   kDropArrayPersist   never persists the new block before the commit
//   kExtraPersist       one redundant persist after the commit (a mutant of it
//                       must come out "redundant")
//   kRawStore           stores to pool memory directly once (instrumentation gap)
//   kCrashInRecovery    recovery dereferences a wild pointer on a 2-entry array
//   kFailAfterCommit    after the commit, allocates a 64-byte block and fails
//                       with OutOfSpace when it cannot: an operation that
//                       took place reported as failed
//   kLeakOnFailure      allocates a 64-byte scratch block before the new
//                       array and does not free it when the array's
//                       allocation fails (a leak on OutOfSpace)
//   kUnreadWord         after the commit, stores the entry count in a meta
//                       word nothing reads and persists it: dropping that
//                       persist changes no recovered contents, but leaves a
//                       store of every update pending at its end (the
//                       mutation run's pending-store lint must catch it)
//   kCommitBeforeEntries persists the new block's 16-byte header first, then
//                       writes and flushes the entries but stores the commit
//                       before any fence: the commit can be durable before
//                       the entries (a negative control for the lazy
//                       search's reuse of reads across crash points)

#ifndef PMTREE_CRASH_TEST_TREES_H_
#define PMTREE_CRASH_TEST_TREES_H_

#include "pmtree/registry.h"

namespace pmtree::crash::testing {

enum class CowArrayMode {
  kCorrect,
  kDropArrayPersist,
  kExtraPersist,
  kRawStore,
  kCrashInRecovery,
  kFailAfterCommit,
  kLeakOnFailure,
  kUnreadWord,
  kCommitBeforeEntries
};

// The mode every CowArray created or recovered from now on uses.
void SetCowArrayMode(CowArrayMode mode);
// Registry-style factory ("cowarray"); not in the global registry.
const TreeFactory& CowArrayFactory();

}  // namespace pmtree::crash::testing

#endif  // PMTREE_CRASH_TEST_TREES_H_
