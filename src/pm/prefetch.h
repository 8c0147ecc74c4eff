// SPDX-License-Identifier: Apache-2.0
//
// A software prefetch the compiler keeps.
//
// GCC gives __builtin_prefetch no side effects.  A function whose only effect
// is prefetching (a loop over a node's lines, a list of blocks) is then found
// pure or const by the interprocedural analysis, and a call to it whose
// result is unused is deleted, with no warning.  That removed the
// prefetches of lbtree's inner nodes and key blobs and of kv's field blocks
// (GCC 12, -O2; counted in the objects' disassembly, docs/trees/lbtree.md):
// the source asked for them, the binary never issued them.  A volatile asm
// statement is a side effect the compiler must keep, inlined or not.
// Prefetching an address never faults, so p may point past an object's end.

#ifndef PMTREE_PM_PREFETCH_H_
#define PMTREE_PM_PREFETCH_H_

namespace pmtree {

// Starts loading the line holding p into every cache level (prefetcht0).
inline void Prefetch(const void* p) { __asm__ __volatile__("prefetcht0 (%0)" : : "r"(p)); }

}  // namespace pmtree

#endif  // PMTREE_PM_PREFETCH_H_
