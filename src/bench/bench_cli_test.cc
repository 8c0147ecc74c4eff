// SPDX-License-Identifier: Apache-2.0
//
// `pmtree bench` as a user runs it: exit status, error lines, JSON lines.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct CliRun {
  int status;
  std::string out;
};

// Runs the CLI with `args`; stdout captured, stderr into `out` too when asked.
CliRun Pmtree(const std::string& args, bool merge_stderr) {
  std::string cmd = std::string(PMTREE_CLI) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(BenchCliTest, UnknownTreeExitsTwoListingValidNames) {
  CliRun r = Pmtree("bench --tree nosuchtree", true);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown tree 'nosuchtree'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("volatile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lmdb"), std::string::npos) << r.out;
}

TEST(BenchCliTest, BadOptionsExitTwoNamingTheOption) {
  struct Case {
    const char* args;
    const char* expect;
  } cases[] = {
      {"bench --tree volatile --mix read=0.5,insert=0.4", "sum to 1"},
      {"bench --tree volatile --mix read=0.5,upsert=0.5", "read, insert, update, remove, scan"},
      {"bench --tree volatile --dist pareto", "uniform, zipfian"},
      {"bench --tree volatile --backend optane", "hardware:clwb"},
      {"bench --tree volatile --key-size 3", "--key-size"},
      {"bench --tree volatile --workload nope", "ops, recovery"},
      {"bench --suite nosuch", "nvtree, circtree"},
  };
  for (const Case& c : cases) {
    CliRun r = Pmtree(c.args, true);
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(BenchCliTest, JsonLinesCarryTheRequiredFields) {
  CliRun r = Pmtree("bench --tree volatile --records 2000 --ops 2000 --mix read=0.5,insert=0.5 --json --no-progress", false);
  ASSERT_EQ(r.status, 0) << r.out;
  size_t lines = 0, pos = 0;
  while (pos < r.out.size()) {
    size_t end = r.out.find('\n', pos);
    std::string line = r.out.substr(pos, end - pos);
    pos = end == std::string::npos ? r.out.size() : end + 1;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* f : {"tree", "threads", "records", "ops", "throughput_ops_s", "latency_ns", "per_op", "backend"})
      EXPECT_TRUE(j.contains(f)) << f;
    EXPECT_TRUE(j["latency_ns"].contains("p9999"));
    lines++;
  }
  EXPECT_EQ(lines, 1u);
}

}  // namespace
