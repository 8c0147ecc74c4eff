// SPDX-License-Identifier: Apache-2.0
//
// Mutate() (explorer.h): one exploration per mutant of the covered flush,
// fence and 8-byte store sites, and one leaked block, each scored caught,
// redundant or survived.

#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "crash/explorer.h"

namespace pmtree::crash {
namespace {

constexpr const char* kPendingLint = "store still pending at operation end";

// Per store site: how many checked operations ended with a store of that
// site still pending.
using PendingCounts = std::map<std::string, uint64_t>;

PendingCounts PendingAtEnd(const ExploreReport& r) {
  PendingCounts c;
  for (const LintFinding& l : r.lints)
    if (l.kind == kPendingLint) c[l.site] += l.count;
  return c;
}

// The first store site the mutant leaves pending at the end of more checked
// operations than the correct program does, as evidence; empty when none.
std::string NewPendingStores(const ExploreReport& r, const PendingCounts& base) {
  for (const auto& [site, n] : PendingAtEnd(r)) {
    auto it = base.find(site);
    const uint64_t b = it == base.end() ? 0 : it->second;
    if (n > b)
      return "lint: a store at " + site + " still pending at the end of " + std::to_string(n) +
             " checked operations (the correct program: " + std::to_string(b) + ")";
  }
  return "";
}

// One mutant exploration: `mo` carries the mutation; stops at the first
// violation.  Caught (a violation, or else a store left pending at the end
// of an operation where the correct program left none: CRASH_MODEL.md
// section 4 item 6), redundant (every crash point where its images differ
// from the correct program's enumerated exhaustively, no violation) or
// survived.  A quick pass comes first: the plain plan, without the small
// workload's bulk-load scenarios.  A mutant it catches is caught whatever
// the search, and most are; before, each spent minutes on the points it
// leaves dirty early in the scenario list (a bulk load's hundreds of inserts
// with a dropped line persist, each point thousands of images or the lazy
// search's whole bound) before the scenario that catches it in seconds.
// Only a mutant that pass does not catch is explored again with the options
// as given, for the proof (and the lint): the outcomes are those of that
// full exploration.  Except for the lint: the quick pass replays a subset of
// the full exploration's scenarios, and a scenario's stores, flushes and
// fences do not depend on the images checked, so a store the quick pass
// leaves pending more often than the correct program does in all its
// scenarios, the full exploration leaves pending at least as often: caught
// by the lint without the full exploration (whose proof, for the score by
// violations alone, is then not run: "not explored", counted as survived
// there; ExploreOptions::mutate_prove_lint runs it).
Status RunMutant(const TreeFactory& f, ExploreOptions mo, Mutant mu, const ExploreOptions& options,
                 const PendingCounts& base_pending, MutationReport* m) {
  mo.stop_at_first_violation = true;
  mo.max_tickets = 1;
  ExploreReport r;
  bool quick_lint = false;
  if (mo.lazy != LazyMode::kOff || (mo.workload == Workload::kSmall && mo.bulk_load)) {
    ExploreOptions quick = mo;
    quick.lazy = LazyMode::kOff;
    quick.bulk_load = false;
    PMTREE_ASSIGN_OR_RETURN(r, Explore(f, quick));
    quick_lint = !options.mutate_prove_lint && r.violations == 0 && !NewPendingStores(r, base_pending).empty();
  }
  if (r.violations == 0 && !quick_lint) {
    PMTREE_ASSIGN_OR_RETURN(r, Explore(f, mo));
  }
  mu.lazy_runs = r.lazy_runs;
  const bool exhaustive = !r.budget_exhausted && r.mutant_points_exhaustive == r.mutant_points;
  if (r.violations > 0) {
    mu.outcome = "caught";
    if (!r.tickets.empty()) mu.evidence = r.tickets[0].failure;
    m->caught++;
  } else if (std::string lint = NewPendingStores(r, base_pending); !lint.empty()) {
    mu.outcome = "caught";
    mu.evidence = lint;
    mu.by_lint = true;
    mu.without_lint = quick_lint ? "not explored" : exhaustive ? "redundant" : "survived";
    m->caught++;
    m->caught_by_lint++;
  } else if (exhaustive) {
    mu.outcome = "redundant";
    m->redundant++;
  } else {
    mu.outcome = "survived";
    m->survived++;
  }
  m->mutants++;
  if (options.progress)
    std::fprintf(stderr, "mutant: %s at %s: %s%s\n", mu.kind.c_str(), mu.site.c_str(), mu.outcome.c_str(),
                 mu.by_lint ? " (by the pending-store lint)" : "");
  m->list.push_back(std::move(mu));
  return Status::Ok();
}

double Score(uint64_t caught, uint64_t survived) {
  return caught + survived == 0 ? 1.0 : static_cast<double>(caught) / static_cast<double>(caught + survived);
}

}  // namespace

Result<MutationReport> Mutate(const TreeFactory& f, const ExploreOptions& options, ExploreReport* base_out) {
  ExploreOptions o = options;
  o.drop_site.clear();
  o.split_site.clear();
  o.inject_leak = false;
  PMTREE_ASSIGN_OR_RETURN(ExploreReport base, Explore(f, o));
  const PendingCounts base_pending = PendingAtEnd(base);
  MutationReport m;
  // Dropped flushes and fences (the key-blob persist and the bulk load's
  // fences among them when the workload reaches them).
  for (const SiteReport& s : base.sites) {
    if (!s.covered) continue;
    ExploreOptions mo = o;
    mo.drop_site = s.name;
    mo.drop_fence = s.kind == "fence";
    PMTREE_RETURN_IF_ERROR(RunMutant(f, mo, Mutant{s.name, s.kind == "fence" ? "drop fence" : "drop flush", "", ""},
                                     options, base_pending, &m));
  }
  // Torn commit stores: each aligned 8-byte store site, split in two.
  if (options.mutate_stores) {
    for (const SiteReport& s : base.store_sites) {
      ExploreOptions mo = o;
      mo.split_site = s.name;
      PMTREE_RETURN_IF_ERROR(
          RunMutant(f, mo, Mutant{s.name, "split store", "", ""}, options, base_pending, &m));
    }
  }
  // A leaked block after recovery.
  {
    ExploreOptions mo = o;
    mo.inject_leak = true;
    PMTREE_RETURN_IF_ERROR(
        RunMutant(f, mo, Mutant{"(after recovery)", "leak a block", "", ""}, options, base_pending, &m));
  }
  m.score = Score(m.caught, m.survived);
  uint64_t lint_would_survive = 0;
  for (const Mutant& mu : m.list) lint_would_survive += mu.by_lint && mu.without_lint != "redundant";
  m.score_violations_only = Score(m.caught - m.caught_by_lint, m.survived + lint_would_survive);
  if (base_out) *base_out = std::move(base);
  return m;
}

}  // namespace pmtree::crash
