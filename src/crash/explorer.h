// SPDX-License-Identifier: Apache-2.0
//
// The crash-state explorer (docs/crash_model.md).
//
// Explore() runs a tree from a TreeFactory on a traced anonymous pool, one
// *scenario* (a short list of operations) at a time; replays each trace on
// the shadow model (shadow.h); at every crash point of the checked operations
// (before each fence, at each operation's end; after each store in eADR mode)
// builds the crash images the mode allows; and checks each image:
//
//   1. recovery (the factory's `recover`) on a copy-on-write mapping of the
//      image, in a forked worker process, so a wild pointer or a hang in
//      recovery is a reported violation, not the end of the explorer;
//   2. Verify();
//   3. exact model equivalence: the scan and lookups equal M0 (the state
//      before the in-flight operation) or M1 (after it); only M1 at the end
//      of an operation, whose effect is acknowledged;
//   4. allocator: bytes in use == bytes the tree reaches (Stats().pm_bytes):
//      fewer is double use, more a leak, both violations;
//   5. a deterministic continuation workload on the recovered tree, checked
//      again (latent damage shows up here);
//   6. on sampled images, crash during recovery: recovery itself is traced and
//      every crash image of it recovered and checked the same way.
//
// Every failure becomes a Ticket with the command line that replays it.
// Mutate() drops each flush or fence site in turn, splits each 8-byte store
// site in two, leaks a block after recovery, and reports which mutants the
// explorer catches.
//
// Threading: Explore() forks; call it while no other thread of the process
// runs (tests and the CLI are single-threaded), or set isolate = false.

#ifndef PMTREE_CRASH_EXPLORER_H_
#define PMTREE_CRASH_EXPLORER_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "crash/model.h"
#include "crash/shadow.h"
#include "pmtree/registry.h"
#include "pmtree/status.h"
#include "pmtree/tree.h"

namespace pmtree::crash {

struct Scenario {
  std::string name;         // "leaf-full: insert(205) remove(200)"
  std::vector<Op> ops;      // ops[0] is kCreate
  size_t check_from = 0;    // crash points are checked in ops[check_from..] only
};

// The keys the operations use.  kU64: the tree's 64-bit keys.  The others
// run the same operations on the tree's byte-string keys (kCapBytesKeys;
// the key blobs of src/trees/common/keys.h), each 64-bit key k (< 2^24)
// encoded so byte order equals numeric order:
//   kShort   3 bytes: big-endian k (the slot's 2-byte prefix decides most
//            comparisons)
//   kLong    128 bytes: big-endian k (8 bytes) + 120 bytes derived from k
//            (a blob over three cache lines)
//   kPrefix  44 bytes: a 40-byte prefix every key shares + big-endian k
//            (4 bytes): every comparison reads the blobs
enum class KeyShape : uint8_t { kU64, kShort, kLong, kPrefix };
std::string_view KeyShapeName(KeyShape k);
Status ParseKeyShape(std::string_view text, KeyShape* k);

enum class Workload : uint8_t { kSmall, kRandom };
std::string_view WorkloadName(Workload w);
Status ParseWorkload(std::string_view text, Workload* w);

// A crash image: scenario index, crash point ordinal within the scenario's
// checked operations, image index within that point's plan.
struct ImageRef {
  uint64_t scenario = 0;
  uint64_t point = 0;
  uint64_t image = 0;
};
std::string ImageRefString(const ImageRef& r);  // "12:3:40"
Status ParseImageRef(std::string_view text, ImageRef* r);

// Lazy image search (crash/lazy.h).  kAuto: in a mutant's run (drop_site or
// split_site set), at the crash points whose images exceed max_images (where
// the plain plan would sample), leaving it again for the structured set and
// samples as soon as it cannot complete within lazy_max_runs; kOn: at every crash point with dirty lines, never left
// (runs up to lazy_max_runs); kOff: the plain plan only.
enum class LazyMode : uint8_t { kOff, kAuto, kOn };
std::string_view LazyModeName(LazyMode m);
Status ParseLazyMode(std::string_view text, LazyMode* m);

struct ExploreOptions {
  Mode mode = Mode::kAdr;
  Workload workload = Workload::kSmall;
  KeyShape keys = KeyShape::kU64;
  uint64_t seed = 1;
  uint64_t ops = 1000;           // random workload: operations
  uint32_t depth = 3;            // small workload: operations per sequence (1..3)
  bool reopen = false;           // small workload: "close and reopen" joins the alphabet
  bool bulk_load = true;         // small workload: bulk-load scenarios and bulk-loaded pre-states
  // Small workload: every letter (and bulk load) of every pre-state that
  // allocates also runs on a full pool, failing at its 1st, 2nd, 3rd and
  // last allocation (one-letter sequences only).
  bool out_of_space = true;
  uint64_t max_images = 4096;    // exhaustive bound per crash point
  uint64_t samples = 512;        // random images added above the bound
  // Lazy search, and its bound on runs per crash point (kAuto leaves the
  // search for the plain plan when the first run's read units alone have
  // more images than this).
  LazyMode lazy = LazyMode::kAuto;
  uint64_t lazy_max_runs = 16384;
  // kAuto: the bound on the runs of the byte-level repeat of a search the
  // line-level one could not complete (lazy.h; 0: no such repeat).
  uint64_t lazy_byte_max_runs = 1024;
  // Byte level: an observed word's load (pm/observe.h) counts as its class,
  // not its bytes (false: as its bytes, the negative control).
  bool observed_words = true;
  double budget_seconds = 0;     // 0: no limit
  uint64_t pool_size = 4ull << 20;
  TreeOptions tree_options;
  uint32_t continuation_ops = 64;  // 0 disables the continuation check
  uint32_t continuation_every = 8; // run it on every n-th image of a point (and on the first)
  bool crash_during_recovery = true;
  // Crash during recovery from the first and the last image of each crash
  // point, and with n > 0 also from every n-th image.
  uint32_t recovery_crash_every = 0;
  // Small workload: check the crash points of every operation of a scenario
  // (pre-state construction included), not only of its last one.
  bool check_all_ops = false;
  // Free the blocks retired during each traced operation as soon as it
  // returns (EpochManager::DrainAll: the trace is single-threaded, so no
  // reader holds them between operations), so the next operation may reuse
  // them.  Without it a block is reused only after 128 retires, which short
  // sequences never reach: a persist that matters only once retired memory
  // is reused (a root switch whose old root was retired) looks redundant.
  bool reclaim_each_op = false;
  // Negative control of the space check: after every recovery, allocate one
  // block the tree does not reach (a leak); every image must then fail.
  bool inject_leak = false;
  // Mutate(): also split each 8-byte store site (many more mutants).
  bool mutate_stores = true;
  // Mutate(): explore a mutant in full even when the quick pass's pending-
  // store lint already catches it, so that `without_lint` (and the score by
  // violations alone) is proved rather than "not explored".
  bool mutate_prove_lint = false;
  uint64_t recovery_images = 64;   // bound per crash point inside recovery
  bool isolate = true;             // checks in a forked worker process
  double hang_seconds = 20;        // a worker silent this long is killed: "recovery hangs"
  size_t max_tickets = 20;
  bool stop_at_first_violation = false;
  // Mutation: drop every flush (or fence) issued at this site name.  Only
  // crash points whose image set differs from the unmutated program's are
  // checked (the others were checked by the base run).
  std::string drop_site;
  bool drop_fence = false;
  // Mutation: every aligned 8-byte store issued at this site name reaches
  // memory as two 4-byte halves in order (a torn commit store).
  std::string split_site;
  // Check only this image, and print what it contains.
  std::optional<ImageRef> replay;
  bool progress = false;           // progress lines on stderr
  std::string tree_name_for_command;  // defaults to the factory name
};

struct Ticket {
  ImageRef where;
  std::string scenario;   // name and operations
  std::string op;         // the operation in flight
  std::string point;      // "before fence at src/...:12:5" / "end of operation"
  std::string image;      // the per-line choice
  std::string failure;
  std::string command;    // replays it
  std::string ToString() const;
};

struct SiteReport {
  std::string name;       // "src/trees/x/x.cc:123:7"
  std::string function;   // "pmtree::x::XTree<K>::Insert": match by this, line numbers move
  std::string kind;       // "flush" or "fence"
  uint64_t reached = 0;   // executions in all traced runs
  bool covered = false;   // a checked crash point depended on it
  bool in_bulk_load = false;  // ... a crash point inside a bulk load
  // store8 sites: stores whose upper 4 bytes are nonzero.  A site that never
  // writes one (offsets, small counters over zeroed memory) cannot show a
  // torn state.
  uint64_t upper_nonzero = 0;
};

struct LintFinding {
  std::string kind;       // "redundant flush", "empty fence", "store after flush", "pending at operation end"
  std::string site;
  uint64_t count = 0;
};

struct ExploreReport {
  std::string tree;
  Mode mode = Mode::kAdr;
  Workload workload = Workload::kSmall;
  uint64_t scenarios = 0;
  uint64_t scenarios_total = 0;
  uint64_t crash_points = 0;
  uint64_t crash_points_exhaustive = 0;
  // Mutant runs (drop_site set): crash points whose image set differs from
  // the unmutated program's; only these are checked.
  uint64_t mutant_points = 0;
  uint64_t mutant_points_exhaustive = 0;
  // Crash points searched lazily, the runs they took (counted in
  // images_checked), and points where a run did not read its fixed prefix
  // first (a nondeterministic check: such a point is not exhaustive).
  uint64_t lazy_points = 0;
  uint64_t lazy_runs = 0;
  uint64_t lazy_nondeterministic = 0;
  // kAuto: points whose first run read more units than the bound allows
  // (the structured set and samples were checked instead), and the page
  // faults the lazy runs took to record their reads.
  uint64_t lazy_abandoned = 0;
  uint64_t lazy_faults = 0;
  // Searches repeated without the read tracker's per-page fault cap
  // because the capped one could not complete (lazy.h).
  uint64_t lazy_precise = 0;
  // Searches repeated at byte level because the line-level one could not
  // complete, those that completed, their runs (counted in lazy_runs too),
  // and faults whose instruction the decoder did not model (line-sized
  // over-approximation instead; access.h).
  uint64_t lazy_bytes = 0;
  uint64_t lazy_bytes_complete = 0;
  uint64_t lazy_byte_runs = 0;
  uint64_t lazy_undecoded = 0;
  uint64_t images_checked = 0;
  uint64_t images_deduplicated = 0;
  uint64_t continuation_runs = 0;
  uint64_t recovery_crash_images = 0;
  double seconds = 0;
  double images_per_s = 0;       // (images_checked + recovery_crash_images) / seconds (wall clock)
  double cpu_seconds = 0;        // CPU time of the explorer and its workers (user + system)
  double images_per_cpu_s = 0;   // the same per CPU second: images/s per core, robust to a loaded machine
  uint64_t violations = 0;
  bool budget_exhausted = false;
  std::vector<Ticket> tickets;
  std::vector<SiteReport> sites;
  // Aligned 8-byte store sites a checked operation executed (kind "store8"):
  // the split-store mutants.  Not counted in sites_covered / sites_total.
  std::vector<SiteReport> store_sites;
  uint64_t sites_covered = 0;
  uint64_t sites_total = 0;
  double exhaustive_fraction = 0;
  std::vector<LintFinding> lints;
};

Result<ExploreReport> Explore(const TreeFactory& factory, const ExploreOptions& options);

// Prints `r` as `pmtree crash` does: each ticket, a summary line (tree,
// mode, workload, scenarios, crash points, images, rates, time) and, when
// the lazy search ran, a line on it.
void PrintReport(const ExploreReport& r, std::FILE* out);

// The node sizes `factory` creates a tree with, among the multiples of 64 in
// 64..65536 (each probed by a create on a small anonymous pool), ascending.
// The crash gate explores the first, the last and the default: the range
// comes from the tree itself, not from a table in the tests.
Result<std::vector<uint32_t>> ValidNodeSizes(const TreeFactory& factory);

// The scenarios Explore() would run (for reports and tests).
Result<std::vector<Scenario>> BuildScenarios(const TreeFactory& factory, const ExploreOptions& options);

struct Mutant {
  std::string site;
  std::string kind;        // "drop flush", "drop fence", "split store" or "leak a block"
  std::string outcome;     // "caught", "redundant", "survived"
  std::string evidence;    // the first ticket's failure when caught
  // Caught by the pending-store lint, not by a violation; then what the
  // mutant would be without the lint ("redundant" or "survived").
  bool by_lint = false;
  std::string without_lint;
  uint64_t lazy_runs = 0;  // lazy-search runs of the exploration that decided it (0: the plain pass)
};

struct MutationReport {
  uint64_t mutants = 0;
  uint64_t caught = 0;
  // Of `caught`: mutants without a violation whose run left some store still
  // pending at the end of a checked operation more often than the correct
  // program does (CRASH_MODEL.md section 4 item 6: no store of an operation
  // may be pending at its end).  Recovery repairs what such a mutant loses,
  // but it acknowledges operations whose writes are not all durable.
  uint64_t caught_by_lint = 0;
  uint64_t redundant = 0;  // not caught, and every crash point where the mutant's images differ
                           // from the correct program's was enumerated exhaustively
  uint64_t survived = 0;   // not caught, with some such point sampled or a cut budget
  double score = 0;        // caught / (caught + survived), 1 when that is 0
  // The score by violations alone: each mutant caught by the lint counted
  // as what it would be without it.
  double score_violations_only = 0;
  std::vector<Mutant> list;
};

// Runs `base` once to find the covered flush/fence sites and 8-byte store
// sites, then one exploration per mutant: each flush or fence site dropped,
// each store site split into two 4-byte halves (options.mutate_stores), and
// one block leaked after every recovery.  `budget_seconds` of `options`
// applies to each mutant.
Result<MutationReport> Mutate(const TreeFactory& factory, const ExploreOptions& options,
                              ExploreReport* base = nullptr);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_EXPLORER_H_
