// SPDX-License-Identifier: Apache-2.0
//
// Observed words: an 8-byte load whose caller learns only a class of the
// word, never the word itself (`ObserveWord`).  The crash explorer's lazy
// search (docs/crash_model.md section 1, "Observed words") records such a
// load as that class, not as the bytes read: two crash images whose words
// fall in the same class lead the caller down the same path, so the search
// need not tell them apart.  A recovery scan that compares one word of every
// free granule with a magic (fptree's lost-leaf scan, cdds's lost-node scan)
// then costs one class split per line ("is the magic" or "is not"), not one
// per content of the line.
//
// Soundness rests on the caller: it uses nothing of the word but the class,
// `classify` is pure, and `a`, `b` are constants or come from earlier reads
// (never from this word).  ObserveWord enforces the first (the word stays in).
//
// The load is announced in a thread-local slot for the duration of the one
// instruction that reads it; the explorer's fault handler, on the same
// thread, matches the faulting access against it.  Outside the explorer the
// cost is two thread-local stores.

#ifndef PMTREE_PM_OBSERVE_H_
#define PMTREE_PM_OBSERVE_H_

#include <atomic>
#include <cstdint>

namespace pmtree {

// The class of `word` given the caller's two arguments.
using WordClassifier = uint32_t (*)(uint64_t word, uint64_t a, uint64_t b);

struct WordObservation {
  const void* addr;
  WordClassifier classify;
  uint64_t a, b;
};

// The load in progress on this thread, or null.  initial-exec: read from a
// signal handler, which must not allocate a TLS block.
[[gnu::tls_model("initial-exec")]] inline thread_local const WordObservation* t_word_observation = nullptr;

// classify(*src, a, b); `src` 8-byte aligned.  Acquire ordering, like
// PoolImpl::Load64.
inline uint32_t ObserveWord(const void* src, WordClassifier classify, uint64_t a, uint64_t b) {
  const WordObservation obs{src, classify, a, b};
  t_word_observation = &obs;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // announced before the load
  const uint64_t word = __atomic_load_n(static_cast<const uint64_t*>(src), __ATOMIC_ACQUIRE);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // withdrawn after it
  t_word_observation = nullptr;
  return classify(word, a, b);
}

// Class 1 when the bits `mask` of the word equal `value`, else 0.
inline uint32_t MaskedEquals(uint64_t word, uint64_t mask, uint64_t value) { return (word & mask) == value; }

}  // namespace pmtree

#endif  // PMTREE_PM_OBSERVE_H_
