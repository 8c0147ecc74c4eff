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
//
// Byte classes (ByteLazyPlan): where even the uncapped search cannot
// complete, the explorer repeats it once more at byte level (bounded by
// its own lazy_byte_max_runs).  The tracker then decodes each faulting
// instruction (access.h) and records which bytes of each dirty line it
// reads, among the bytes that differ between the line's choices (its
// *varying* bytes); a line stays tracked until all of them were read, and a
// write-only access is not a read.  An instruction the decoder does not
// model falls back to the line-sized over-approximation above.  A unit's
// choices that agree on every byte a run read are one class, and the run
// checked them all; the search branches over the other classes only.  A
// later run that reads more bytes of a line fixed at one class splits that
// class again (its other parts are queued), so two images are merged only
// when they agree on everything the check that stands for both read.

#ifndef PMTREE_CRASH_LAZY_H_
#define PMTREE_CRASH_LAZY_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "pm/observe.h"

namespace pmtree::crash {

// Records the first accesses to dirty lines of one mapping.  One per
// process (the signal handlers reach it); used by one thread at a time.
// An observed word (pm/observe.h) a byte-level run read: the caller learnt
// only classify(word, a, b) of the 8 bytes at `byte` of dirty line `line`.
struct ObservedWord {
  uint32_t line;  // index into the run's lines
  uint8_t byte;   // offset in the line, 8-aligned
  WordClassifier classify;
  uint64_t a, b;
};

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
  // With `varying` (byte mode: per line, a bit per byte that differs between
  // the line's choices), accesses are decoded and only the varying bytes
  // they read are recorded; a line is read once one of them is, and tracked
  // until every one of them is.  Without it a line is read, and no longer
  // tracked, at its first access.
  // In byte mode, an observed word's load (pm/observe.h) is recorded as its
  // class unless `observed_words` is false (then as the bytes it reads).
  // Also in byte mode, a varying byte the run overwrites before reading it
  // (a decoded store that writes it unconditionally, access.h) is no longer
  // recorded: what the run reads there later is what it wrote, a function
  // of what it read before (the run is deterministic and the only thread
  // touching the image).
  // Installs the SIGSEGV (chained to the handler found) and SIGTRAP handlers.
  void Arm(const std::vector<uint64_t>& lines, uint64_t preread, uint32_t faults_per_page = kCheapFaultsPerPage,
           const std::vector<uint64_t>* varying = nullptr, bool observed_words = true);
  // The mapping of the image (from PoolOptions::on_map): protects every page
  // that holds an unread dirty line, and starts recording.
  void Protect(char* base, uint64_t size);
  // Stops recording and makes every page accessible again (idempotent).
  void Stop();
  // Indexes into the Arm() lines, in the order of first access.
  const std::vector<uint32_t>& order() const { return order_; }
  // Byte mode: per Arm() line, the varying bytes read (all of them for a
  // line read by the cap or the pread of the header).
  const std::vector<uint64_t>& masks() const { return masks_; }
  // Byte mode: the observed words read (pm/observe.h), in order; their bytes
  // are not in masks() unless also read otherwise.
  const std::vector<ObservedWord>& observed() const { return observed_; }
  uint64_t faults() const { return faults_; }
  // Byte mode: faults whose instruction was not decoded (line-sized
  // over-approximation instead).
  uint64_t undecoded() const { return undecoded_; }
  // Pages whose dirty lines were all recorded by the cap in this run.
  uint64_t capped_pages() const { return capped_pages_; }

  // Signal-handler entry points.
  bool HandleFault(uint64_t addr, void* ucontext);
  bool HandleTrap(void* ucontext);

 private:
  void Record(uint64_t off, uint64_t mask = ~uint64_t{0});
  // Byte mode: records the access of a decoded fault as the observed word
  // `obs` when it is exactly that word's load.  False: not that load.
  bool RecordObserved(uint64_t off, const WordObservation& obs);
  // Appends line `i` to order_ at its first read.
  void List(size_t i);
  // Records the bytes [off, off + len) of the mapping (every dirty line they
  // touch, with the bytes touched).
  void RecordRange(uint64_t off, uint64_t len);
  // Byte mode: the bytes [off, off + len) of the mapping are overwritten
  // before being read; they leave the bytes still to record.
  void KillRange(uint64_t off, uint64_t len);
  // Line `i` has no bytes left to record: stop tracking it.
  void Finish(size_t i);
  void SetAccess(size_t page, bool accessible);

  bool active_ = false;
  bool bytes_ = false;  // byte mode
  bool observed_words_ = true;
  uint64_t base_ = 0, size_ = 0;
  std::vector<uint64_t> lines_;
  std::vector<uint64_t> varying_;  // per line: the bytes to record (all in line mode), less the overwritten
  std::vector<uint64_t> masks_;    // per line: the bytes recorded
  std::vector<uint64_t> killed_;   // per line, byte mode: the varying bytes overwritten before any read
  std::vector<uint8_t> read_;      // per line: no more bytes to record
  std::vector<uint8_t> listed_;    // per line: in order_
  std::vector<ObservedWord> observed_;  // capacity reserved by Arm (the handler does not allocate)
  std::vector<uint32_t> line_page_;
  std::vector<uint32_t> order_;
  std::vector<uint64_t> pages_;        // page offsets holding dirty lines, ascending
  std::vector<uint32_t> unread_;       // per page: dirty lines not read yet
  std::vector<uint8_t> protected_;     // per page
  std::vector<uint32_t> stepping_;     // pages opened for the instruction being single-stepped
  std::vector<uint32_t> page_faults_;  // per page, this run
  uint64_t faults_ = 0;
  uint64_t undecoded_ = 0;
  uint64_t capped_pages_ = 0;
  uint32_t faults_per_page_ = kCheapFaultsPerPage;
};

struct Unit;  // shadow.h

// What the runs of one lazy search record their reads against: the dirty
// lines and, at byte level, each line's varying bytes (ByteUnits::varying).
// At line level also the lines the operation writes that are clean at this
// point (`also`): their reads do not steer this search, but a later point
// of the operation where they are dirty may reuse this search's images only
// knowing whether each was read (the worker's LazySeen).
struct TrackContext {
  std::vector<uint64_t> lines;
  bool bytes = false;
  std::vector<uint64_t> varying;  // bytes: one mask per line
  uint64_t Varying(size_t line) const { return bytes ? varying[line] : ~uint64_t{0}; }

  // Sets `lines` and the line-level extra lines `also` (both ascending).
  void Track(std::vector<uint64_t> dirty, const std::vector<uint64_t>& also);
  // lines and also, ascending: what the tracker arms.
  const std::vector<uint64_t>& armed() const { return armed_.empty() ? lines : armed_; }
  // Per armed() line: its index in `lines`, or -1 for one of `also`.
  int64_t SearchIndex(size_t armed_index) const {
    return armed_.empty() ? static_cast<int64_t>(armed_index) : search_index_[armed_index];
  }
  // Whether a run recorded its reads of `line`.
  bool Tracks(uint64_t line) const;

 private:
  std::vector<uint64_t> armed_;  // empty: lines only
  std::vector<int64_t> search_index_;
};
// What one run read.
struct LazyReads {
  std::vector<uint32_t> order;    // indexes into TrackContext::lines, in the order first read
  std::vector<uint64_t> masks;    // bytes: per line, the varying bytes read
  std::vector<uint64_t> offsets;  // every armed() line read (`also` too), in order
  std::vector<ObservedWord> observed;  // bytes: the observed words read
};

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

// The bytes each dirty unit holds at each of its alternatives (LazyUnits::
// alts, in that order): what the byte-level search compares.
struct ByteUnits {
  std::vector<uint32_t> line;   // per unit: its index in LazyUnits::lines
  std::vector<uint8_t> start;   // per unit: its first byte in the line
  std::vector<uint8_t> size;    // per unit: its bytes (64 or 8)
  std::vector<std::vector<uint8_t>> contents;  // per unit: size bytes per alternative
  // Per line: the bytes that differ between two alternatives of a unit of it
  // (the tracker's `varying` masks).
  std::vector<uint64_t> varying;
};
// `units` and `p` as for MakeLazyUnits; `lz` gives each unit's alternatives
// (possibly restricted, e.g. to a mutant's fresh contents).
ByteUnits MakeByteUnits(const std::vector<Unit*>& units, const char* p, const LazyUnits& lz);

// The search of LazyPlan over byte classes (see the header comment).  A
// node of the search is a set of images given per unit by the alternatives
// it allows (all, where it says nothing); its run checks the image made of
// each unit's lowest allowed alternative.  The run's reads partition the
// node: the images that agree with it on every byte read (checked by the
// run), and, in the order the lines were read, for each unit u and each
// class k of u's allowed alternatives other than the run's (by the bytes of
// u read): the images that agree with the run on every unit read before u,
// have u in class k, and are anything the node allows elsewhere.  Those are
// the new nodes, visited by depth.  With a deterministic check a node's run
// reads first, in the same order, the lines its parent read up to the unit
// it branched on; one that does not is counted and makes the search
// incomplete, as in LazyPlan.
class ByteLazyPlan {
 public:
  // `units` must outlive the plan; `unit_lines` as for LazyPlan.
  ByteLazyPlan(const ByteUnits* units, std::vector<std::vector<uint32_t>> unit_lines);

  // The next run's alternative index per unit, or false when complete.
  bool Next(std::vector<uint32_t>* alt_index);
  // What the run just handed out read: line indexes in first-read order,
  // and per line index the bytes read (ReadTracker::masks()).
  // `observed`: the observed words read (ReadTracker::observed()); images
  // whose word has the same class agree on it.
  void Done(const std::vector<uint32_t>& lines_read, const std::vector<uint64_t>& masks,
            const std::vector<ObservedWord>& observed = {});
  uint64_t runs() const { return runs_; }
  uint64_t runs_needed_at_least() const;
  // The number of byte classes of the units the last run read (product,
  // saturating): what its reads alone leave to search.
  uint64_t last_classes() const { return last_classes_; }
  bool complete() const { return queue_empty() && !nondeterministic_; }
  bool nondeterministic() const { return nondeterministic_; }

 private:
  using Set = std::vector<uint32_t>;  // alternative indexes, ascending
  struct Fixed {
    uint32_t unit;
    Set allowed;
  };
  struct Run {
    std::vector<Fixed> node;  // the run's node: its fixed units, by unit
    std::vector<Fixed> seq;   // the units it read, in order, each narrowed to the run's class
  };
  struct Node {
    std::shared_ptr<const Run> run;  // null: the first node (everything allowed)
    uint32_t at = 0;                 // run->seq[0, at) narrowed, then seq[at]'s unit in class `cls`
    Set cls;
  };
  bool queue_empty() const;
  Set Allowed(uint32_t unit) const;

  const ByteUnits* units_;
  std::vector<std::vector<uint32_t>> unit_lines_;
  std::vector<std::deque<Node>> by_depth_;
  std::vector<Fixed> current_;          // the current node, by unit
  std::vector<uint32_t> current_prefix_;  // units the current run must read first, in order
  std::vector<uint32_t> current_alt_;
  uint32_t current_depth_ = 0;
  uint64_t runs_ = 0;
  uint64_t last_classes_ = 1;
  bool nondeterministic_ = false;
};

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_LAZY_H_
