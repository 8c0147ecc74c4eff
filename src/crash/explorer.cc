// SPDX-License-Identifier: Apache-2.0
//
// The crash-state explorer's names, tickets and replay commands, and the
// node-size probe.  The explorer itself is split by role: scenarios.cc (what
// runs), worker.cc (tracing, images, checks) with worker_lazy.cc (the lazy
// search), supervisor.cc (Explore: the forked worker and the report) and
// mutation.cc (Mutate).  See explorer.h and docs/crash_model.md.

#include "crash/explorer.h"

#include <cstdio>
#include <string>

#include "crash/explorer_internal.h"

namespace pmtree::crash {

// ---- names ---------------------------------------------------------------------------

std::string_view WorkloadName(Workload w) { return w == Workload::kSmall ? "small" : "random"; }

Status ParseWorkload(std::string_view text, Workload* w) {
  if (text == "small") *w = Workload::kSmall;
  else if (text == "random") *w = Workload::kRandom;
  else return Status::InvalidArgument("unknown workload '" + std::string(text) + "'; valid: small, random");
  return Status::Ok();
}

std::string_view LazyModeName(LazyMode m) {
  return m == LazyMode::kOff ? "off" : m == LazyMode::kOn ? "on" : "auto";
}

Status ParseLazyMode(std::string_view text, LazyMode* m) {
  if (text == "off") *m = LazyMode::kOff;
  else if (text == "auto") *m = LazyMode::kAuto;
  else if (text == "on") *m = LazyMode::kOn;
  else return Status::InvalidArgument("unknown lazy mode '" + std::string(text) + "'; valid: off, auto, on");
  return Status::Ok();
}

std::string ImageRefString(const ImageRef& r) {
  return std::to_string(r.scenario) + ":" + std::to_string(r.point) + ":" + std::to_string(r.image);
}

Status ParseImageRef(std::string_view text, ImageRef* r) {
  unsigned long long a, b, c;
  char tail;
  std::string t(text);
  if (std::sscanf(t.c_str(), "%llu:%llu:%llu%c", &a, &b, &c, &tail) != 3)
    return Status::InvalidArgument("an image is SCENARIO:POINT:IMAGE (three numbers), got '" + t + "'");
  *r = ImageRef{a, b, c};
  return Status::Ok();
}

std::string Ticket::ToString() const {
  std::string s = "VIOLATION at image " + ImageRefString(where) + "\n";
  s += "  scenario: " + scenario + "\n";
  s += "  in flight: " + op + "\n";
  s += "  crash point: " + point + "\n";
  s += "  image: " + image + "\n";
  s += "  failure: " + failure + "\n";
  s += "  replay: " + command + "\n";
  return s;
}


// The command line that replays image `r`.
std::string ReplayCommand(const TreeFactory& f, const ExploreOptions& o, const ImageRef& r) {
  std::string c = "pmtree crash --tree " +
                  (o.tree_name_for_command.empty() ? std::string(f.name) : o.tree_name_for_command);
  c += " --mode " + std::string(ModeName(o.mode));
  c += " --workload " + std::string(WorkloadName(o.workload));
  if (o.keys != KeyShape::kU64) c += " --keys " + std::string(KeyShapeName(o.keys));
  c += " --seed " + std::to_string(o.seed);
  if (o.workload == Workload::kRandom) c += " --ops " + std::to_string(o.ops);
  if (o.workload == Workload::kSmall && o.depth != 3) c += " --depth " + std::to_string(o.depth);
  if (o.workload == Workload::kSmall && o.reopen) c += " --reopen";
  if (o.workload == Workload::kSmall && !o.bulk_load) c += " --no-bulk-load";
  if (o.workload == Workload::kSmall && !o.out_of_space) c += " --no-out-of-space";
  if (o.workload == Workload::kSmall && o.check_all_ops) c += " --check-all-ops";
  if (o.reclaim_each_op) c += " --reclaim-each-op";
  if (o.continuation_every != 8) c += " --continuation-every " + std::to_string(o.continuation_every);
  if (o.recovery_crash_every != 0) c += " --recovery-crash-every " + std::to_string(o.recovery_crash_every);
  if (o.tree_options.node_size != 0) c += " --node-size " + std::to_string(o.tree_options.node_size);
  for (const auto& [k, v] : o.tree_options.extra) c += " --tree-option " + k + "=" + v;
  if (o.max_images != 4096) c += " --max-images " + std::to_string(o.max_images);
  if (o.samples != 512) c += " --samples " + std::to_string(o.samples);
  if (o.lazy != LazyMode::kAuto) c += " --lazy " + std::string(LazyModeName(o.lazy));
  if (o.lazy_max_runs != 16384) c += " --lazy-max-runs " + std::to_string(o.lazy_max_runs);
  if (o.lazy_byte_max_runs != 1024) c += " --lazy-byte-max-runs " + std::to_string(o.lazy_byte_max_runs);
  if (!o.observed_words) c += " --no-observed-words";
  if (o.pool_size != (4ull << 20)) c += " --pool-size " + std::to_string(o.pool_size);
  if (!o.drop_site.empty()) c += " --drop " + o.drop_site + (o.drop_fence ? "@fence" : "@flush");
  if (!o.split_site.empty()) c += " --split-store " + o.split_site;
  if (o.inject_leak) c += " --inject-leak";
  c += " --replay " + ImageRefString(r);
  return c;
}

void PrintReport(const ExploreReport& r, std::FILE* out) {
  using ull = unsigned long long;
  for (const auto& t : r.tickets) std::fprintf(out, "%s\n", t.ToString().c_str());
  std::fprintf(out,
               "tree %s, mode %s, workload %s: %llu/%llu scenarios, %llu crash points (%.1f%% exhaustive), "
               "%llu images checked (+%llu deduplicated, +%llu in crashed recoveries), %.0f images/s (%.0f per CPU "
               "second), %.1f s%s\n",
               r.tree.c_str(), std::string(ModeName(r.mode)).c_str(), std::string(WorkloadName(r.workload)).c_str(),
               ull{r.scenarios}, ull{r.scenarios_total}, ull{r.crash_points}, 100 * r.exhaustive_fraction,
               ull{r.images_checked}, ull{r.images_deduplicated}, ull{r.recovery_crash_images}, r.images_per_s,
               r.images_per_cpu_s, r.seconds, r.budget_exhausted ? " (budget exhausted)" : "");
  if (r.lazy_points == 0) return;
  const std::string nondeterministic =
      r.lazy_nondeterministic > 0
          ? ", " + std::to_string(r.lazy_nondeterministic) + " points with a nondeterministic check"
          : "";
  std::fprintf(out,
               "lazy search at %llu crash points (%llu left for the plain plan): %llu runs, %llu faults, %llu "
               "searches repeated without the fault cap, %llu at byte level (%llu complete, %llu runs, %llu "
               "undecoded faults)%s\n",
               ull{r.lazy_points}, ull{r.lazy_abandoned}, ull{r.lazy_runs}, ull{r.lazy_faults}, ull{r.lazy_precise},
               ull{r.lazy_bytes}, ull{r.lazy_bytes_complete}, ull{r.lazy_byte_runs}, ull{r.lazy_undecoded},
               nondeterministic.c_str());
}

Result<std::vector<uint32_t>> ValidNodeSizes(const TreeFactory& f) {
  if (!f.persistent()) return Status::InvalidArgument(std::string(f.name) + " is not a persistent tree");
  std::vector<uint32_t> sizes;
  PoolOptions po;
  po.backend = BackendKind::kDram;
  po.counting = false;
  po.use_env = false;
  for (uint32_t n = 64; n <= 65536; n += 64) {
    PMTREE_ASSIGN_OR_RETURN(auto pool, PoolImpl::CreateAnonymous(4ull << 20, f.name, 0, po));
    TreeOptions to;
    to.node_size = n;
    auto t = f.create(pool.get(), to);
    if (t.ok()) sizes.push_back(n);
    else if (t.status().code() != Status::Code::kInvalidArgument)
      return t.status().Annotate("probing node size " + std::to_string(n));
  }
  if (sizes.empty()) return Status::InvalidArgument(std::string(f.name) + " accepts no node size in 64..65536");
  return sizes;
}

}  // namespace pmtree::crash
