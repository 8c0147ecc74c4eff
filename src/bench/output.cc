// SPDX-License-Identifier: Apache-2.0

#include "bench/output.h"

#include <sys/statfs.h>
#include <sys/utsname.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pmtree/pool.h"

#ifndef PMTREE_BUILD_TYPE
#define PMTREE_BUILD_TYPE "unknown"
#endif
#ifndef PMTREE_GIT_REV
#define PMTREE_GIT_REV "unknown"
#endif
#ifndef PMTREE_SOURCE_DIR
#define PMTREE_SOURCE_DIR ""
#endif

namespace pmtree::bench {
namespace {

// YCSB rows (workload "ycsb-a".."ycsb-f") name their key form instead of a size.
bool IsYcsb(const Measurement& m) { return m.workload.rfind("ycsb-", 0) == 0; }
constexpr const char* kYcsbKeySize = "user<n>";

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown";
}

std::string RunCommand(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string GitRevision() {
  std::string src = PMTREE_SOURCE_DIR;
  if (!src.empty() && std::filesystem::exists(src + "/.git")) {
    std::string rev = RunCommand("git -C '" + src + "' describe --always --dirty 2>/dev/null");
    if (!rev.empty()) return rev;
  }
  return PMTREE_GIT_REV;
}

std::string PoolKind(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  struct statfs sf;
  if (statfs(dir.c_str(), &sf) != 0) return "unknown (" + dir.string() + " not found)";
  constexpr long kTmpfsMagic = 0x01021994;
  if (sf.f_type == kTmpfsMagic) return "tmpfs (DRAM: process-crash durability, not power loss)";
  return "file system (magic 0x" + [&] {
    char b[32];
    snprintf(b, sizeof b, "%lx", static_cast<long>(sf.f_type));
    return std::string(b);
  }() + "); DAX only if mounted with -o dax";
}

double Round(double v, double unit) { return std::round(v / unit) * unit; }

std::string Num(double v) {
  char buf[32];
  if (v >= 1e6)
    snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e4)
    snprintf(buf, sizeof buf, "%.1fK", v / 1e3);
  else if (v >= 100)
    snprintf(buf, sizeof buf, "%.0f", v);
  else
    snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

Environment DetectEnvironment(const BenchConfig& c) {
  Environment e;
  e.cpu_model = CpuModel();
  e.cores = std::thread::hardware_concurrency();
  e.flush_instruction = std::string(FlushInstructionName(DetectFlushInstruction()));
  e.backend = c.backend;
  e.write_latency_ns = c.write_latency_ns;
  e.media = MediaLabel(c);
  e.value_size = c.value_size;
  e.ycsb_records = c.kind == WorkloadKind::kYcsb;
  e.pool_path = c.targets.empty() ? PoolPathFor(c, "<tree>") : PoolPathFor(c, c.targets.front());
  e.pool_kind = PoolKind(e.pool_path);
  e.compiler = "gcc " __VERSION__;
  e.build_type = PMTREE_BUILD_TYPE;
  e.git_revision = GitRevision();
  e.clock = TickClock::Get().Describe();
  struct utsname u;
  if (uname(&u) == 0) e.kernel = std::string(u.sysname) + " " + u.release;
  return e;
}

std::string FormatEnvironment(const Environment& e) {
  std::string s;
  auto line = [&](const char* k, const std::string& v) { s += std::string(k) + ": " + v + "\n"; };
  line("cpu", e.cpu_model + " (" + std::to_string(e.cores) + " cores)");
  line("flush instruction (CPUID)", e.flush_instruction);
  line("backend", e.backend + (e.write_latency_ns ? " + " + std::to_string(e.write_latency_ns) + " ns/line emulated" : "") +
                      " (media " + e.media + ")");
  if (e.ycsb_records)
    line("values", "YCSB records of 10 fields x 100 B (field0..field9); a tree runs as the engine of a kv::Store, "
                   "peers store the serialised record");
  else
    line("values", e.value_size <= 8 ? std::string("8 B, inline in the tree")
                                     : std::to_string(e.value_size) +
                                           " B: trees hold a reference to a record in the same pool (volatile: "
                                           "heap); peers store the bytes");
  line("pool", e.pool_path + " on " + e.pool_kind);
  line("compiler", e.compiler);
  line("build type", e.build_type);
  line("git revision", e.git_revision);
  line("clock", e.clock);
  line("kernel", e.kernel);
  return s;
}

nlohmann::json EnvironmentJson(const Environment& e) {
  return {{"cpu", e.cpu_model},        {"cores", e.cores},         {"flush_instruction", e.flush_instruction},
          {"backend", e.backend},      {"value_size", e.value_size}, {"ycsb_records", e.ycsb_records},
          {"pool_path", e.pool_path}, {"pool_kind", e.pool_kind},
          {"compiler", e.compiler},    {"build_type", e.build_type}, {"git_revision", e.git_revision},
          {"clock", e.clock},          {"kernel", e.kernel}};
}

nlohmann::json ToJson(const Measurement& m) {
  nlohmann::json j;
  j["tree"] = m.tree;
  if (!m.variant.empty()) j["variant"] = m.variant;
  if (!m.experiment.empty()) j["experiment"] = m.experiment;
  j["workload"] = m.workload;
  j["threads"] = m.threads;
  j["records"] = m.records;
  j["ops"] = m.ops;
  j["rep"] = m.summary ? nlohmann::json("summary") : nlohmann::json(m.rep);
  j["backend"] = m.backend;
  if (!m.pool.empty()) j["pool"] = m.pool;
  j["write_latency_ns"] = m.write_latency_ns;
  j["media"] = m.media;
  j["node_size"] = m.node_size;
  j["key_size"] = m.key_min == 0 ? nlohmann::json(8) : m.key_min == m.key_max
                                                           ? nlohmann::json(m.key_min)
                                                           : nlohmann::json(std::to_string(m.key_min) + "-" + std::to_string(m.key_max));
  if (IsYcsb(m)) j["key_size"] = kYcsbKeySize;
  j["value_size"] = m.value_size;
  j["distribution"] = m.dist;
  j["mix"] = m.mix;
  j["scan_length"] = m.scan_length;
  j["seconds"] = m.seconds;
  j["load_s"] = m.load_s;
  j["throughput_ops_s"] = m.throughput_ops_s;
  if (m.summary) {
    j["throughput_min"] = m.throughput_spread.min;
    j["throughput_median"] = m.throughput_spread.median;
    j["throughput_max"] = m.throughput_spread.max;
    j["p99_min"] = m.p99_spread.min;
    j["p99_median"] = m.p99_spread.median;
    j["p99_max"] = m.p99_spread.max;
  }
  nlohmann::json by_op = nlohmann::json::object();
  for (int k = 0; k < kOpTypes; k++) {
    if (m.done[k] == 0) continue;
    double secs = m.seconds > 0 ? m.seconds : 1;
    by_op[std::string(OpName(static_cast<OpType>(k)))] = {
        {"completed", m.done[k]},
        {"succeeded", m.succeeded[k]},
        {"completed_ops_s", m.done[k] / secs},
        {"succeeded_ops_s", m.succeeded[k] / secs}};
  }
  j["by_op"] = by_op;
  j["latency_ns"] = {{"samples", m.latency.samples}, {"p50", m.latency.p50},   {"p90", m.latency.p90},
                     {"p99", m.latency.p99},         {"p999", m.latency.p999}, {"p9999", m.latency.p9999},
                     {"max", m.latency.max},         {"geomean", m.latency.geomean}, {"mean", m.latency.mean}};
  if (m.counted)
    j["per_op"] = {{"flushes", m.flushes}, {"fences", m.fences}, {"lines", m.lines},
                   {"blocks256", m.blocks256}, {"bytes", m.bytes}, {"nt_stores", m.nt_stores}};
  else
    j["per_op"] = {{"flushes", nullptr}, {"fences", nullptr}, {"lines", nullptr},
                   {"blocks256", nullptr}, {"bytes", nullptr}, {"nt_stores", nullptr}};
  if (m.counted) {
    // Per type, over the operations during which the tree allocated no PM.
    nlohmann::json na = nlohmann::json::object();
    for (int k = 0; k < kOpTypes; k++) {
      if (m.done[k] == 0) continue;
      const NoAllocCost& c = m.no_alloc[k];
      const double n = static_cast<double>(c.ops);
      auto avg = [&](uint64_t sum) { return c.ops ? nlohmann::json(sum / n) : nlohmann::json(nullptr); };
      na[std::string(OpName(static_cast<OpType>(k)))] = {
          {"ops", c.ops},
          {"share", n / static_cast<double>(m.done[k])},
          {"flushes", avg(c.sum.flushes)},
          {"fences", avg(c.sum.fences)},
          {"lines", avg(c.sum.lines)},
          {"blocks256", avg(c.sum.blocks256)},
          {"bytes", avg(c.sum.bytes)}};
    }
    j["per_op_no_alloc"] = na;
  }
  nlohmann::json extra = nlohmann::json::object();
  for (const auto& [k, v] : m.stats.extra) extra[k] = v;
  j["stats"] = {{"pm_bytes", m.stats.pm_bytes},       {"dram_bytes", m.stats.dram_bytes},
                {"height", m.stats.height},           {"entries", m.stats.entries},
                {"leaf_nodes", m.stats.leaf_nodes},   {"inner_nodes", m.stats.inner_nodes},
                {"leaf_fill", Round(m.stats.leaf_fill, 1e-4)}, {"extra", extra}};
  if (!m.series.empty()) {
    j["window_ms"] = m.window_ms;
    j["series_ops_s"] = m.series;
  }
  if (m.workload == "recovery") {
    j["recovery_kind"] = m.recovery_kind;
    j["recovery_ms"] = m.recovery_ms;
    j["recovery_threads"] = m.recovery_threads;
  }
  if (!m.profile.path.empty()) {
    const ProfileSummary& p = m.profile;
    j["write_profile"] = {{"path", p.path},           {"pages", p.pages},
                          {"page_max", p.page_max},   {"page_median", p.page_median},
                          {"blocks", p.blocks},       {"block_max", p.block_max},
                          {"block_median", p.block_median}, {"stores", p.stores},
                          {"flushed_lines", p.flushed_lines},
                          {"alloc_window_writes", Round(p.alloc_window_writes, 0.01)},
                          {"quiet_window_writes", Round(p.quiet_window_writes, 0.01)}};
  }
  if (!m.error.empty()) j["error"] = m.error;
  if (!m.command.empty()) j["command"] = m.command;
  return j;
}

std::string CsvHeader() {
  return "tree,variant,workload,threads,records,ops,rep,backend,write_latency_ns,node_size,key_size,value_size,"
         "distribution,mix,seconds,load_s,throughput_ops_s,lat_p50,lat_p90,lat_p99,lat_p999,lat_p9999,lat_max,"
         "lat_geomean,flushes,fences,lines,blocks256,bytes,insert_no_alloc_share,insert_no_alloc_flushes,"
         "insert_no_alloc_lines,pm_bytes,dram_bytes,height,leaf_fill,recovery_kind,recovery_ms,recovery_threads,error,"
         "command";
}

std::string ToCsv(const Measurement& m) {
  auto q = [](const std::string& s) {
    std::string o = "\"";
    for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return o + "\"";
  };
  auto n = [](double v) {
    char b[32];
    snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  std::string key = m.key_min == 0 ? "8" : std::to_string(m.key_min) + (m.key_max != m.key_min ? "-" + std::to_string(m.key_max) : "");
  if (IsYcsb(m)) key = kYcsbKeySize;
  std::string c = q(m.tree) + "," + q(m.variant) + "," + m.workload + "," + std::to_string(m.threads) + "," +
                  std::to_string(m.records) + "," + std::to_string(m.ops) + "," +
                  (m.summary ? "summary" : std::to_string(m.rep)) + "," + q(m.backend) + "," +
                  std::to_string(m.write_latency_ns) + "," + std::to_string(m.node_size) + "," + key + "," +
                  std::to_string(m.value_size) + "," + q(m.dist) + "," + q(m.mix) + "," + n(m.seconds) + "," + n(m.load_s) + "," + n(m.throughput_ops_s) +
                  "," + n(m.latency.p50) + "," + n(m.latency.p90) + "," + n(m.latency.p99) + "," + n(m.latency.p999) +
                  "," + n(m.latency.p9999) + "," + n(m.latency.max) + "," + n(m.latency.geomean) + ",";
  if (m.counted)
    c += n(m.flushes) + "," + n(m.fences) + "," + n(m.lines) + "," + n(m.blocks256) + "," + n(m.bytes) + ",";
  else
    c += ",,,,,";
  const int ins = static_cast<int>(OpType::kInsert);
  if (m.counted && m.done[ins] > 0) {
    const NoAllocCost& na = m.no_alloc[ins];
    const double k = static_cast<double>(na.ops);
    c += n(k / static_cast<double>(m.done[ins])) + "," + (na.ops ? n(na.sum.flushes / k) + "," + n(na.sum.lines / k) : ",") +
         ",";
  } else {
    c += ",,,";
  }
  c += std::to_string(m.stats.pm_bytes) + "," + std::to_string(m.stats.dram_bytes) + "," +
       std::to_string(m.stats.height) + "," + n(m.stats.leaf_fill) + "," + m.recovery_kind + "," + n(m.recovery_ms) +
       "," + std::to_string(m.recovery_threads) + "," + q(m.error) + "," + q(m.command);
  return c;
}

void HumanTable::Add(const Measurement& m) {
  if (m.workload == "recovery") {
    if (!recovery_header_done_) {
      fprintf(out_, "%-14s %-10s %10s %-6s %4s %12s %10s %s\n", "tree", "variant", "records", "kind", "thr",
              "recovery ms", "PM MB", "error");
      recovery_header_done_ = true;
    }
    fprintf(out_, "%-14s %-10s %10llu %-6s %4u %12.3f %10.1f %s\n", m.tree.c_str(), m.variant.c_str(),
            static_cast<unsigned long long>(m.records), m.recovery_kind.c_str(), m.recovery_threads, m.recovery_ms,
            m.stats.pm_bytes / 1048576.0, m.error.c_str());
    fflush(out_);
    return;
  }
  std::string note = m.error;
  if (m.summary) {
    char b[96];
    snprintf(b, sizeof b, "min %.3f max %.3f Mops/s", m.throughput_spread.min / 1e6, m.throughput_spread.max / 1e6);
    note = b;
  }
  if (IsYcsb(m)) {
    AddYcsb(m, note);
    return;
  }
  if (!header_done_) {
    fprintf(out_, "%-14s %-12s %3s %4s %9s %9s %8s %8s %8s %8s %7s %7s %7s %7s %8s %8s %s\n", "tree", "variant", "thr",
            "rep", "ops", "Mops/s", "p50 ns", "p99 ns", "p99.9 ns", "geo ns", "flush", "fence", "lines", "blk256",
            "PM MB", "DRAM MB", "note");
    header_done_ = true;
  }
  std::string rep = m.summary ? "med" : std::to_string(m.rep);
  auto per = [&](double v) { return m.counted ? Num(v) : std::string("-"); };
  fprintf(out_, "%-14s %-12s %3u %4s %9s %9.3f %8s %8s %8s %8s %7s %7s %7s %7s %8.1f %8.1f %s\n", m.tree.c_str(),
          m.variant.c_str(), m.threads, rep.c_str(), Num(static_cast<double>(m.ops)).c_str(), m.throughput_ops_s / 1e6,
          Num(m.latency.p50).c_str(), Num(m.latency.p99).c_str(), Num(m.latency.p999).c_str(),
          Num(m.latency.geomean).c_str(), per(m.flushes).c_str(), per(m.fences).c_str(), per(m.lines).c_str(),
          per(m.blocks256).c_str(), m.stats.pm_bytes / 1048576.0, m.stats.dram_bytes / 1048576.0, note.c_str());
  fflush(out_);
}

// YCSB rows: the workload and the store first ("kv/<engine>" for the KV
// store over a tree, the peer's name otherwise); per-op persistence cost
// for the KV store only.
void HumanTable::AddYcsb(const Measurement& m, const std::string& note) {
  if (!ycsb_header_done_) {
    fprintf(out_, "%-8s %-16s %3s %4s %9s %9s %8s %8s %8s %7s %7s %8s %s\n", "workload", "store", "thr", "rep", "ops",
            "Mops/s", "p50 ns", "p99 ns", "p99.9 ns", "flush", "lines", "PM MB", "note");
    ycsb_header_done_ = true;
  }
  const std::string store = m.counted ? "kv/" + m.tree : m.tree;
  const std::string rep = m.summary ? "med" : std::to_string(m.rep);
  auto per = [&](double v) { return m.counted ? Num(v) : std::string("-"); };
  fprintf(out_, "%-8s %-16s %3u %4s %9s %9.3f %8s %8s %8s %7s %7s %8.1f %s\n", m.workload.c_str(), store.c_str(),
          m.threads, rep.c_str(), Num(static_cast<double>(m.ops)).c_str(), m.throughput_ops_s / 1e6,
          Num(m.latency.p50).c_str(), Num(m.latency.p99).c_str(), Num(m.latency.p999).c_str(), per(m.flushes).c_str(),
          per(m.lines).c_str(), m.stats.pm_bytes / 1048576.0, note.c_str());
  fflush(out_);
}

}  // namespace pmtree::bench
