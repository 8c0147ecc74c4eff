// SPDX-License-Identifier: Apache-2.0
//
// Helpers every test binary shares: the seed of a randomised test, unique
// pool paths under /dev/shm that are removed afterwards, and a runner for the
// `pmtree` CLI.  Header-only; include as "testutil.h" (tests/ is on every test
// binary's include path).

#ifndef PMTREE_TESTS_TESTUTIL_H_
#define PMTREE_TESTS_TESTUTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace pmtree::testutil {

// The seed of a randomised test: PMTREE_SEED (decimal) when set, so a failure
// replays; else `fallback`.  Prints the seed it returns.  A PMTREE_SEED that
// is not a decimal number stops the test binary with a message.
inline uint64_t Seed(uint64_t fallback) {
  uint64_t seed = fallback;
  if (const char* env = std::getenv("PMTREE_SEED")) {
    char* end = nullptr;
    errno = 0;
    seed = std::strtoull(env, &end, 10);
    if (end == env || *end != '\0' || errno != 0) {
      std::fprintf(stderr, "PMTREE_SEED=\"%s\" is not a decimal number\n", env);
      std::exit(2);
    }
  }
  std::printf("seed %llu (PMTREE_SEED=%llu replays)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  return seed;
}
// As above, with a fresh random seed when PMTREE_SEED is not set.
inline uint64_t Seed() { return Seed(std::random_device{}()); }

// A path under /dev/shm no other test (of this or another process) uses:
// pmtree-<suite>-<test>-<pid>-<tag>-<n>.pool.  The file is not created.
inline std::string TempPoolPath(const std::string& tag = "pool") {
  static std::atomic<uint64_t> n{0};
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = t == nullptr ? "none" : std::string(t->test_suite_name()) + "-" + t->name();
  for (char& c : name) {
    if (c == '/') c = '_';  // parameterised names
  }
  return "/dev/shm/pmtree-" + name + "-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(n++) +
         ".pool";
}

// TempPoolPath that removes the file (if any) when it is created and again
// when it goes out of scope.
class TempPool {
 public:
  explicit TempPool(const std::string& tag = "pool") : path_(TempPoolPath(tag)) { unlink(path_.c_str()); }
  ~TempPool() { unlink(path_.c_str()); }
  TempPool(const TempPool&) = delete;
  TempPool& operator=(const TempPool&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

#ifdef PMTREE_CLI
struct CliRun {
  int status;       // exit status, -1 when the program did not exit normally
  std::string out;  // stdout, and stderr unless it was discarded
};

// Runs `pmtree ARGS` through the shell; stderr is merged into out unless
// `merge_stderr` is false (then it is discarded).
inline CliRun RunCli(const std::string& args, bool merge_stderr = true) {
  const std::string cmd = std::string(PMTREE_CLI) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}
#endif

}  // namespace pmtree::testutil

#endif  // PMTREE_TESTS_TESTUTIL_H_
