// SPDX-License-Identifier: Apache-2.0
//
// The CLI as a user meets it: exit codes, one-line errors, files untouched.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "pmtree/kv.h"
#include "pmtree/registry.h"

namespace pmtree {
namespace {

struct CliRun {
  int status;
  std::string out;  // stdout and stderr together
};

CliRun Cli(const std::string& args) {
  std::string cmd = std::string(PMTREE_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

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
  void TearDown() override { unlink(path_.c_str()); }
  std::string path_;
};

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

TEST_F(CliTest, UnknownSubcommandIsAUsageError) {
  CliRun r = Cli("frobnicate");
  EXPECT_EQ(r.status, 2);
}

}  // namespace
}  // namespace pmtree
