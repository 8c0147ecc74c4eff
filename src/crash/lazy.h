// SPDX-License-Identifier: Apache-2.0
//
// Lazy image exploration (CRASH_MODEL.md section 3: "a lazy mode that
// branches only on lines that recovery actually reads";
// docs/crash_model.md section 11).
//
// A crash point with d dirty units has prod(k_u + 1) images; above the
// exhaustive bound the plain explorer checks a structured set plus samples
// and can prove nothing about the rest.  But the check of an image (recovery,
// Verify, scan, lookups, the space check) is deterministic: it depends only
// on the bytes it reads.  Two images that agree on every dirty unit one check
// read are checked identically, whatever the unread units hold.  So:
//
//   run 0: every dirty unit at choice 0 (nothing of it persisted); record
//          the dirty units the check reads, in the order of first access;
//   each later run fixes a prefix of some earlier run's read order with
//          that run's choices and one more unit at another choice; the
//          check then reads the same prefix (same bytes, same code path)
//          and goes on from there.
//
// Every distinct sequence of (unit, choice) a check can observe is visited
// once: when the queue empties within the bound, the point is proved
// exhaustively although the images are far more than the bound (a whole
// fresh node that recovery never reaches costs nothing).  Runs are visited
// by the number of units that differ from choice 0 (all-old, then each unit
// alone, then pairs, ...), so a cut bound still checks the structured images
// first.  A run whose read order does not start with its fixed prefix
// (nondeterminism) marks the point not exhaustive.
//
// Recording reads: the pages of the pool's mapping that hold a not yet read
// dirty line are mapped PROT_NONE (PoolOptions::on_map, before any byte is
// read).  A fault inside one records the lines an access of up to 64 bytes
// at the fault address can touch (an over-approximation: more branching,
// never a missed read), unprotects the page and single-steps the faulting
// instruction (x86-64 trap flag); the trap protects the page again while it
// still holds unread dirty lines.  A page that faults `faults_per_page` times
// in one run (a hot node beside a dirty line nobody reads) has all its dirty
// lines recorded and is opened for good: bounded cost, at the price of more
// branching (still never a missed read).  The explorer first searches with
// kCheapFaultsPerPage and, where that over-approximation makes the search
// too big, once more without the cap (kPreciseFaultsPerPage): every fault
// costs two signals and two mprotect calls, but only lines really read branch.  Writes count as reads.  The pool header
// is read with pread() before the mapping exists, so dirty lines of the
// header page are recorded first, always.  The check must be
// single-threaded (the explorer recovers with one thread in lazy runs).

#ifndef PMTREE_CRASH_LAZY_H_
#define PMTREE_CRASH_LAZY_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace pmtree::crash {

// Records the first accesses to dirty lines of one mapping.  One per
// process (the signal handlers reach it); used by one thread at a time.
class ReadTracker {
 public:
  static ReadTracker& Get();
  // True where the tracker can work (x86-64 Linux: the trap flag).
  static bool Supported();

  static constexpr uint32_t kCheapFaultsPerPage = 4096;
  static constexpr uint32_t kPreciseFaultsPerPage = UINT32_MAX;

  // Prepares a run over dirty lines `lines` (ascending offsets of 64-byte
  // lines).  Lines below `preread` are recorded as read at once; a page that
  // faults `faults_per_page` times has all its dirty lines recorded.
  // Installs the SIGSEGV (chained to the handler found) and SIGTRAP handlers.
  void Arm(const std::vector<uint64_t>& lines, uint64_t preread, uint32_t faults_per_page = kCheapFaultsPerPage);
  // The mapping of the image (from PoolOptions::on_map): protects every page
  // that holds an unread dirty line, and starts recording.
  void Protect(char* base, uint64_t size);
  // Stops recording and makes every page accessible again (idempotent).
  void Stop();
  // Indexes into the Arm() lines, in the order of first access.
  const std::vector<uint32_t>& order() const { return order_; }
  uint64_t faults() const { return faults_; }
  // Pages whose dirty lines were all recorded by the cap in this run.
  uint64_t capped_pages() const { return capped_pages_; }

  // Signal-handler entry points.
  bool HandleFault(uint64_t addr, void* ucontext);
  bool HandleTrap(void* ucontext);

 private:
  void Record(uint64_t off);
  void SetAccess(size_t page, bool accessible);

  bool active_ = false;
  uint64_t base_ = 0, size_ = 0;
  std::vector<uint64_t> lines_;
  std::vector<uint8_t> read_;
  std::vector<uint32_t> line_page_;
  std::vector<uint32_t> order_;
  std::vector<uint64_t> pages_;        // page offsets holding dirty lines, ascending
  std::vector<uint32_t> unread_;       // per page: dirty lines not read yet
  std::vector<uint8_t> protected_;     // per page
  std::vector<uint32_t> stepping_;     // pages opened for the instruction being single-stepped
  std::vector<uint32_t> page_faults_;  // per page, this run
  uint64_t faults_ = 0;
  uint64_t capped_pages_ = 0;
  uint32_t faults_per_page_ = kCheapFaultsPerPage;
};

struct Unit;  // shadow.h

// The dirty units of one crash point as the lazy search sees them.
struct LazyUnits {
  std::vector<uint64_t> lines;                    // distinct dirty lines, ascending
  std::vector<std::vector<uint32_t>> unit_lines;  // the units of each line, ascending
  // Per unit, the choices that give it distinct bytes, ascending from 0: a
  // piece that rewrites the bytes already there (zeros over fresh zeros, an
  // unchanged word of a whole-struct write) adds no image.
  std::vector<std::vector<uint32_t>> alts;

  // The choice vector (pieces per unit) of a vector of indexes into alts.
  std::vector<uint32_t> Choice(const std::vector<uint32_t>& alt_index) const;
  // Number of distinct images of the units of `line_indexes` (saturating).
  uint64_t ImagesOf(const std::vector<uint32_t>& line_indexes) const;
  // alts[u].size() - 1 per unit: what LazyPlan branches over.
  std::vector<uint32_t> Alternatives() const;
};
// `units` from Shadow::DirtyUnits(); `p` holds the durable image P.
LazyUnits MakeLazyUnits(const std::vector<Unit*>& units, const char* p);

// The search over runs of one crash point (see the header comment).
class LazyPlan {
 public:
  // `pending[u]`: how many pending pieces unit u has (its choices are
  // 0..pending[u]).  `unit_lines[l]`: the units of dirty line l, ascending.
  LazyPlan(std::vector<uint32_t> pending, std::vector<std::vector<uint32_t>> unit_lines);

  // The next run's choice vector, or false when the search is complete.
  bool Next(std::vector<uint32_t>* choice);
  // What the run just handed out read (line indexes in first-access order;
  // for an image already checked at an earlier crash point, that check's).
  void Done(const std::vector<uint32_t>& lines_read);
  uint64_t runs() const { return runs_; }
  // Runs handed out plus runs still queued: above the bound, the search
  // cannot complete within it.
  uint64_t runs_needed_at_least() const;
  bool complete() const { return queue_empty() && !nondeterministic_; }
  bool nondeterministic() const { return nondeterministic_; }

 private:
  using Seq = std::vector<std::pair<uint32_t, uint32_t>>;  // (unit, choice) in read order
  struct Node {
    std::shared_ptr<const Seq> parent;  // null: the first run
    uint32_t at = 0;                     // parent->[0, at) kept, then (unit of parent[at], choice)
    uint32_t choice = 0;
  };
  bool queue_empty() const;

  std::vector<uint32_t> pending_;
  std::vector<std::vector<uint32_t>> unit_lines_;
  std::vector<std::deque<Node>> by_deviation_;
  Seq current_prefix_;
  std::vector<uint32_t> current_choice_;
  uint32_t current_deviation_ = 0;
  uint64_t runs_ = 0;
  bool nondeterministic_ = false;
};

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_LAZY_H_
