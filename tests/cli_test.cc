// SPDX-License-Identifier: Apache-2.0
//
// The CLI as a user meets it: exit codes, one-line errors, files untouched.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "pmtree/kv.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree {
namespace {

using testutil::CliRun;
// `pmtree ARGS`, stdout and stderr together.
CliRun Cli(const std::string& args) { return testutil::RunCli(args); }

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/pmtree-cli-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    unlink(path_.c_str());
  }
  void TearDown() override {
    chmod(path_.c_str(), 0644);
    unlink(path_.c_str());
    unlink((path_ + ".bench.json").c_str());
  }
  std::string path_;
};

// `pmtree ARGS` run as the unprivileged user "nobody" when this test is root
// (otherwise as is), so file permissions really apply.
CliRun CliAsNobody(const std::string& args) {
  std::string cmd = std::string(PMTREE_CLI) + " " + args + " 2>&1";
  int fds[2];
  if (pipe(fds) != 0) return {-1, "pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    if (geteuid() == 0 && setuid(65534) != 0) _exit(99);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(98);
  }
  close(fds[1]);
  std::string out;
  std::array<char, 4096> buf;
  ssize_t n;
  while ((n = read(fds[0], buf.data(), buf.size())) > 0) out.append(buf.data(), static_cast<size_t>(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST_F(CliTest, InspectOfANonPoolFileFailsWithOneLineAndChangesNothing) {
  { std::ofstream(path_) << std::string(1 << 20, 'z'); }
  std::string before = Slurp(path_);
  CliRun r = Cli("inspect " + path_);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(Lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("not a pmtree pool"), std::string::npos) << r.out;
  EXPECT_EQ(Slurp(path_), before);
}

TEST_F(CliTest, InspectOfATruncatedPoolFailsWithOneLineAndChangesNothing) {
  {
    auto p = Pool::Create(path_, kMinPoolSize, "volatile", 0);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->Close().ok());
  }
  ASSERT_EQ(truncate(path_.c_str(), 8192), 0);
  std::string before = Slurp(path_);
  CliRun r = Cli("inspect " + path_);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(Lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  EXPECT_EQ(Slurp(path_), before);
}

TEST_F(CliTest, InspectOfAMissingFileSaysSo) {
  CliRun r = Cli("inspect " + path_ + "-nope");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("no such pool file"), std::string::npos) << r.out;
}

TEST_F(CliTest, InspectReportsAPersistentTreeWithoutChangingIt) {
  const TreeFactory* f = nullptr;
  for (const TreeFactory& t : Registry())
    if (t.persistent() && !t.test_only()) f = &t;
  if (f == nullptr) GTEST_SKIP() << "no persistent tree registered yet";
  {
    auto h = CreateTree(*f, path_, 64 << 20, {});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 0; k < 1000; k++) ASSERT_TRUE(*h->tree->Insert(k, k));
    // No Close: inspect must recover in a private copy.
  }
  std::string before = Slurp(path_);
  CliRun r = Cli("inspect --json " + path_);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"entries\":1000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"ok\":true"), std::string::npos) << r.out;
  EXPECT_EQ(Slurp(path_), before);
}

TEST_F(CliTest, InspectReadsAPoolItMayNotWrite) {
  const TreeFactory* f = FindTree("fastfair");
  ASSERT_NE(f, nullptr);
  {
    auto h = CreateTree(*f, path_, 8 << 20, {});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE(*h->tree->Insert(k, k));
  }  // a crash: inspect recovers in its private copy
  ASSERT_EQ(chmod(path_.c_str(), 0444), 0);
  std::string before = Slurp(path_);
  CliRun r = CliAsNobody("inspect --json " + path_);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"entries\":100"), std::string::npos) << r.out;
  EXPECT_EQ(Slurp(path_), before);
}

TEST_F(CliTest, BenchNeverOverwritesAFileItDidNotCreate) {
  { std::ofstream(path_) << "precious text"; }
  for (const char* extra : {"", " --reuse-pool"}) {
    CliRun r = Cli("bench --tree fastfair --records 10 --ops 10 --no-progress --pool " + path_ + extra);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(path_), std::string::npos) << r.out;
    EXPECT_EQ(Slurp(path_), "precious text") << extra;
  }
}

TEST_F(CliTest, BenchReusePoolReplacesOnlyAPoolOfTheSameTree) {
  {
    auto h = CreateTree(*FindTree("lbtree"), path_, 8 << 20, {});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 0; k < 100; k++) ASSERT_TRUE(*h->tree->Insert(k, k));
    ASSERT_TRUE(h->tree->Close().ok());
  }
  std::string lbtree_pool = Slurp(path_);
  const std::string run = "bench --tree fastfair --records 10 --ops 10 --no-progress --pool-size 8M --pool " + path_;
  CliRun other = Cli(run + " --reuse-pool");
  EXPECT_NE(other.status, 0) << other.out;
  EXPECT_NE(other.out.find("not a pool of tree 'fastfair'"), std::string::npos) << other.out;
  EXPECT_EQ(Slurp(path_), lbtree_pool);
  // A pool the bench kept for fastfair is replaced with --reuse-pool only.
  ASSERT_EQ(unlink(path_.c_str()), 0);
  CliRun kept = Cli(run + " --keep-pool");
  ASSERT_EQ(kept.status, 0) << kept.out;
  ASSERT_EQ(access(path_.c_str(), F_OK), 0);
  EXPECT_NE(Cli(run + " --keep-pool").status, 0);
  CliRun reused = Cli(run + " --keep-pool --reuse-pool");
  EXPECT_EQ(reused.status, 0) << reused.out;
}

TEST_F(CliTest, EveryOutOfRangeOptionIsAOneLineUsageError) {
  const std::pair<std::string, std::string> cases[] = {
      {"bench --tree volatile --records -1", "--records"},
      {"bench --tree volatile --records 99999999999999999999999", "--records"},
      {"bench --tree volatile --suite overview --scale -1", "--scale"},
      {"bench --tree volatile --duration 0", "--duration"},
      {"bench --tree volatile --duration nan", "--duration"},
      {"bench --tree volatile --write-latency-ns 100000000", "--write-latency-ns"},
      {"bench --tree volatile --ops 0", "--ops"},
      {"bench --tree volatile --pool-size 1000", "--pool-size"},
      {"crash --tree fastfair --ops 18446744073709551615", "--ops"},
      {"crash --tree fastfair --max-images 0", "--max-images"},
      {"crash --tree fastfair --budget-seconds nan", "--budget-seconds"},
      {"crash --tree fastfair --pool-size 12345", "--pool-size"},
      {"crash --tree fastfair --depth 1 --no-continuation --no-recovery-crash --quiet --drop nosuch.cc:1@flush",
       "--drop"},
      {"crash --tree fastfair --lazy sometimes", "lazy"},
      {"crash --tree fastfair --lazy-max-runs 0", "--lazy-max-runs"},
  };
  for (const auto& [args, option] : cases) {
    CliRun r = Cli(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
    EXPECT_EQ(Lines(r.out), 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(option), std::string::npos) << args << "\n" << r.out;
  }
}

// `--drop` of a flush or fence the workload reaches runs that mutant (exit
// 0: harmless, 1: caught), never "no such site" (it once said that of every
// site: a dropped site was not counted as reached).
TEST_F(CliTest, CrashDropOfAReachedSiteRunsTheMutant) {
  const std::string run = "crash --tree fastfair --depth 1 --no-continuation --no-recovery-crash --quiet";
  CliRun base = Cli(run + " --json");
  ASSERT_EQ(base.status, 0) << base.out;
  const auto j = nlohmann::json::parse(base.out.substr(base.out.find('{')));
  int dropped = 0;
  for (const auto& site : j.at("sites")) {
    if (!site.at("covered").get<bool>()) continue;
    const std::string arg = site.at("site").get<std::string>() + "@" + site.at("kind").get<std::string>();
    CliRun r = Cli(run + " --drop " + arg);
    EXPECT_TRUE(r.status == 0 || r.status == 1) << arg << "\n" << r.out;
    EXPECT_EQ(r.out.find("no such"), std::string::npos) << arg << "\n" << r.out;
    if (++dropped == 4) break;
  }
  EXPECT_EQ(dropped, 4);
}

TEST_F(CliTest, InspectReportsAKeyValueStoreWithoutChangingIt) {
  kv::Options o;
  o.engine = "lbtree";
  o.pool_size = 64 << 20;
  {
    auto s = kv::Store::Open(path_, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (int k = 0; k < 100; k++) ASSERT_TRUE((*s)->Put("key" + std::to_string(k), std::string(500, 'v')).ok());
    ASSERT_TRUE((*s)->Close().ok());
  }
  for (bool crashed : {false, true}) {
    if (crashed) {
      auto s = kv::Store::Open(path_, o);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE((*s)->Put("one-more", "x").ok());
    }  // no Close: inspect must recover in a private copy
    std::string before = Slurp(path_);
    CliRun r = Cli("inspect --json " + path_);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(crashed ? "\"keys\":101" : "\"keys\":100"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"ok\":true"), std::string::npos) << r.out;
    EXPECT_EQ(Slurp(path_), before);
  }
}

// `pmtree crash --kv`: 0 on a clean exploration, 1 when the negative control
// is caught, 2 (one line) on bad input.
TEST_F(CliTest, CrashKvExitCodes) {
  CliRun ok = Cli("crash --kv --tree lbtree --kv-scenario put-1k --quiet --json");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("\"violations\": 0"), std::string::npos) << ok.out;
  CliRun flaw = Cli("crash --kv --tree lbtree --kv-scenario put-1k --quiet --kv-flaw skip-record-persist");
  EXPECT_EQ(flaw.status, 1) << flaw.out;
  EXPECT_NE(flaw.out.find("--replay"), std::string::npos) << flaw.out;
  for (const char* args : {"crash --kv --tree lbtree --kv-scenario nosuch --quiet",
                           "crash --kv --tree volatile --quiet",
                           "crash --kv --tree lbtree --kv-scenario put-1k --quiet --drop nosuch.cc:1@flush"}) {
    CliRun r = Cli(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
    EXPECT_EQ(Lines(r.out), 1) << args << "\n" << r.out;
  }
}

TEST_F(CliTest, UnknownSubcommandIsAUsageError) {
  CliRun r = Cli("frobnicate");
  EXPECT_EQ(r.status, 2);
}

}  // namespace
}  // namespace pmtree
