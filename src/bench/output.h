// SPDX-License-Identifier: Apache-2.0
//
// Output of the benchmark: the environment, JSON lines, CSV and the human
// table.  JSON: one object per measurement per line; docs/bench.md lists
// every field.  The human table goes to stderr so stdout stays machine-
// readable.

#ifndef PMTREE_BENCH_OUTPUT_H_
#define PMTREE_BENCH_OUTPUT_H_

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/driver.h"

namespace pmtree::bench {

struct Environment {
  std::string cpu_model;
  unsigned cores = 0;
  std::string flush_instruction;  // what the CPU offers (CPUID)
  std::string backend;            // what the run uses (--backend)
  uint32_t write_latency_ns = 0;
  std::string media;              // MediaLabel (driver.h)
  uint32_t value_size = 8;        // --value-size
  bool ycsb_records = false;      // --workload ycsb-*: YCSB records instead of values
  std::string pool_path;          // first pool path (or the pattern)
  std::string pool_kind;          // "tmpfs (DRAM)", "DAX", "file system"
  std::string compiler;
  std::string build_type;
  std::string git_revision;
  std::string clock;
  std::string kernel;
};
Environment DetectEnvironment(const BenchConfig& c);
std::string FormatEnvironment(const Environment& e);  // several "key: value" lines
nlohmann::json EnvironmentJson(const Environment& e);

nlohmann::json ToJson(const Measurement& m);
// CSV: a header line, then one line per measurement (flat columns).
std::string CsvHeader();
std::string ToCsv(const Measurement& m);

// The human table: a header once, then one line per measurement.
class HumanTable {
 public:
  explicit HumanTable(FILE* out) : out_(out) {}
  void Add(const Measurement& m);

 private:
  void AddYcsb(const Measurement& m, const std::string& note);
  FILE* out_;
  bool header_done_ = false;
  bool recovery_header_done_ = false;
  bool ycsb_header_done_ = false;
};

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_OUTPUT_H_
