// SPDX-License-Identifier: Apache-2.0
//
// `pmtree bench` as a user runs it: exit status, error lines, JSON lines.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testutil.h"

namespace {

using pmtree::testutil::CliRun;
using pmtree::testutil::RunCli;

std::string Slurp(const std::string& path) {
  std::string s;
  if (FILE* f = fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
  }
  return s;
}

// Issue 20's determinism: the same seeded single-threaded run twice gives
// byte-identical write profiles; another seed gives another profile.
TEST(BenchCliTest, WriteProfilesOfTheSameSeededRunAreIdentical) {
  const std::string dir = "/dev/shm/pmtree-bench-cli-wp-" + std::to_string(getpid());
  auto run = [&](const std::string& tag, int seed) {
    CliRun r = RunCli("bench --tree fastfair,cdds --records 500 --ops 1000 --mix read=0.5,insert=0.3,remove=0.2 "
                      "--seed " + std::to_string(seed) + " --pool " + dir + "-" + tag + ".pool --pool-size 16M "
                      "--write-profile " + dir + "-" + tag + " --profile-window 50 --json --no-progress",
                      false);
    EXPECT_EQ(r.status, 0) << r.out;
    std::string all;
    for (const char* tree : {"fastfair", "cdds"}) {
      const std::string path = dir + "-" + tag + "." + tree + "-t1-r0.profile.json";
      const std::string body = Slurp(path);
      EXPECT_FALSE(body.empty()) << path;
      EXPECT_NE(r.out.find(path), std::string::npos) << "the row names its profile: " << r.out;
      all += body;
      unlink(path.c_str());
    }
    return all;
  };
  const std::string a = run("a", 7), b = run("b", 7), c = run("c", 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(BenchCliTest, UnknownTreeExitsTwoListingValidNames) {
  CliRun r = RunCli("bench --tree nosuchtree", true);
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
      {"bench --tree volatile --media xpoint", "dram, pcm-300, pcm-600, optane"},
      {"bench --tree volatile --media optane --write-latency-ns 50", "not both"},
      {"bench --workload ycsb-g", "ycsb-a .. ycsb-f"},
      {"bench --workload ycsb-a,ops", "YCSB workloads only"},
      {"bench --workload ycsb-a --tree volatile", "KV-store engine"},
      {"bench --workload ycsb-a --tree lbtree --value-size 64", "do not apply to YCSB"},
      {"bench --workload ycsb-a --tree lbtree --bulk-load", "do not apply to YCSB"},
  };
  for (const Case& c : cases) {
    CliRun r = RunCli(c.args, true);
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(BenchCliTest, JsonLinesCarryTheRequiredFields) {
  CliRun r = RunCli("bench --tree volatile --records 2000 --ops 2000 --mix read=0.5,insert=0.5 --json --no-progress", false);
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

// Every line of `out` parsed as JSON.
std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::vector<nlohmann::json> rows;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    std::string line = out.substr(pos, end - pos);
    pos = end == std::string::npos ? out.size() : end + 1;
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

TEST(BenchCliTest, YcsbWorkloadsReportOneRowPerWorkloadAndStore) {
  CliRun r = RunCli("bench --workload ycsb-a,ycsb-f --tree lbtree,lmdb-nosync --records 300 --ops 400 --verify --json "
                    "--no-progress",
                    false);
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<nlohmann::json> rows = JsonLines(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  const char* workload[] = {"ycsb-a", "ycsb-a", "ycsb-f", "ycsb-f"};
  const char* store[] = {"lbtree", "lmdb-nosync", "lbtree", "lmdb-nosync"};
  for (size_t i = 0; i < rows.size(); i++) {
    const nlohmann::json& j = rows[i];
    SCOPED_TRACE(j.dump());
    EXPECT_FALSE(j.contains("error"));
    EXPECT_EQ(j["workload"], workload[i]);
    EXPECT_EQ(j["tree"], store[i]);
    EXPECT_EQ(j["ops"], 400);
    EXPECT_EQ(j["key_size"], "user<n>");
    EXPECT_EQ(j["value_size"], 1000);
    // A: reads and one-field updates; F: reads and read-modify-writes.
    EXPECT_TRUE(j["by_op"].contains("read"));
    EXPECT_TRUE(j["by_op"].contains(i < 2 ? "update" : "rmw"));
    EXPECT_EQ(j["by_op"].size(), 2u);
    EXPECT_EQ(j["by_op"]["read"]["completed"].get<uint64_t>() +
                  j["by_op"][i < 2 ? "update" : "rmw"]["completed"].get<uint64_t>(),
              400u);
    for (const char* p : {"p50", "p99", "p999"}) EXPECT_GT(j["latency_ns"][p].get<double>(), 0) << p;
    // Flushes and lines per op: the store's pool counts them; the peer has none.
    if (i % 2 == 0) {
      EXPECT_GT(j["per_op"]["flushes"].get<double>(), 0);
      EXPECT_GT(j["per_op"]["lines"].get<double>(), 0);
    } else {
      EXPECT_TRUE(j["per_op"]["flushes"].is_null());
    }
  }
}

// The LB+-Tree suite (main job, issue 19 §3): progress lines count every
// unit up to the total the counting pass found, and the insert experiments
// run on the paper's medium (optane) and again at DRAM speed.
TEST(BenchCliTest, SuiteReportsProgressAndRunsThePapersMediumAndDram) {
  const std::string dir = "/dev/shm/pmtree-bench-cli-suite-" + std::to_string(getpid());
  CliRun r = RunCli("bench --suite lbtree --scale 0.005 --no-figures --out " + dir, true);
  ASSERT_EQ(r.status, 0) << r.out;
  // "[main job k/N, ...]" for k = 1..N, in order, N the same on every line.
  size_t pos = 0, k = 0, total = 0;
  while ((pos = r.out.find("[main job ", pos)) != std::string::npos) {
    size_t done = 0, n = 0;
    ASSERT_EQ(sscanf(r.out.c_str() + pos, "[main job %zu/%zu,", &done, &n), 2);
    EXPECT_EQ(done, ++k);
    if (total == 0) total = n;
    EXPECT_EQ(n, total);
    pos++;
  }
  EXPECT_GT(total, 0u);
  EXPECT_EQ(k, total);
  EXPECT_NE(r.out.find("suite lbtree, experiment lb-bulk70: lbtree"), std::string::npos) << r.out;
  std::vector<nlohmann::json> rows = JsonLines(Slurp(dir + "/lbtree.jsonl"));
  size_t optane = 0, dram = 0;
  for (const auto& j : rows) {
    if (j["experiment"] == "lb-bulk70") {
      EXPECT_EQ(j["media"], "optane");
      EXPECT_EQ(j["write_latency_ns"], 160);
      optane++;
    }
    if (j["experiment"] == "lb-bulk70-dram") {
      EXPECT_EQ(j["media"], "dram");
      EXPECT_EQ(j["write_latency_ns"], 0);
      dram++;
    }
  }
  EXPECT_GT(optane, 0u);
  EXPECT_EQ(optane, dram);
  const std::string md = Slurp(dir + "/lbtree.md");
  EXPECT_NE(md.find("Media of the rows: `optane`, `dram`"), std::string::npos) << md.substr(0, 600);
  EXPECT_NE(md.find("(ours at DRAM speed; the paper's on 3D XPoint)"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
