// SPDX-License-Identifier: Apache-2.0
//
// crash_recovery: a process that inserts keys and is killed (SIGKILL, no
// Close) loses none of the inserts it saw acknowledged; reopening the pool
// runs crash recovery.   Usage: example_crash_recovery POOL_FILE
//
// The child reports each acknowledged key to the parent through a pipe and
// then kills itself; the parent reopens the pool and checks every reported
// key.  (In one process, destroying a TreeHandle without calling Close() is
// the same simulated crash: nothing is written on the way out.)  A crash
// here falls between two operations; `pmtree crash` is the tool that
// crashes inside them, at every flush and fence.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "pmtree/registry.h"

namespace {

constexpr uint64_t kAcknowledgedBeforeCrash = 5000;

int Fail(const char* what, const pmtree::Status& s) {
  std::fprintf(stderr, "crash_recovery: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

// The child: create the tree, insert, report, die without Close().
[[noreturn]] void InsertUntilKilled(const pmtree::TreeFactory& factory, const std::string& path, int report_fd) {
  pmtree::PoolOptions pool_options;
  pool_options.overwrite = true;
  auto h = pmtree::CreateTree(factory, path, {}, pool_options);
  if (!h.ok()) {
    Fail("child: creating the tree", h.status());
    _exit(1);
  }
  for (uint64_t i = 0;; i++) {
    const uint64_t key = i * 7919 % 100003;  // a permutation: every key new
    auto r = h->tree->Insert(key, key + 1);
    if (!r.ok() || !*r) _exit(1);
    // Insert returned: the key is durable, so it may be reported.
    if (write(report_fd, &key, sizeof key) != sizeof key) _exit(1);
    if (i + 1 == kAcknowledgedBeforeCrash) raise(SIGKILL);
  }
}

// The parent: every key the child reported, until the pipe closes.
std::vector<uint64_t> ReadReports(int fd) {
  std::vector<uint64_t> keys;
  uint64_t key;
  while (read(fd, &key, sizeof key) == sizeof key) keys.push_back(key);
  return keys;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s POOL_FILE\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  auto factory = pmtree::RequireTree("nvtree");
  if (!factory.ok()) return Fail("choosing the tree", factory.status());

  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(fds[0]);
    InsertUntilKilled(**factory, path, fds[1]);
  }
  close(fds[1]);
  const std::vector<uint64_t> acknowledged = ReadReports(fds[0]);
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
    std::fprintf(stderr, "crash_recovery: the child failed before the crash (status %d)\n", status);
    return 1;
  }
  std::printf("child killed after %zu acknowledged inserts\n", acknowledged.size());

  // Open runs recovery: the pool says the last session did not close.
  auto h = pmtree::OpenTree(path, *factory, {});
  if (!h.ok()) return Fail("reopening after the crash", h.status());
  std::printf("reopened: clean shutdown: %s\n", h->pool->clean_shutdown() ? "yes" : "no");
  size_t missing = 0;
  for (uint64_t key : acknowledged) {
    uint64_t value = 0;
    if (!h->tree->Lookup(key, &value) || value != key + 1) missing++;
  }
  if (pmtree::Status s = h->tree->Verify(); !s.ok()) return Fail("verifying after recovery", s);
  if (missing != 0 || acknowledged.size() != kAcknowledgedBeforeCrash || h->pool->clean_shutdown()) {
    std::fprintf(stderr, "crash_recovery: %zu of %zu acknowledged keys lost\n", missing, acknowledged.size());
    return 1;
  }
  // The recovered tree is an ordinary tree again.
  auto fresh = h->tree->Insert(100003, 1);
  if (!fresh.ok()) return Fail("inserting after recovery", fresh.status());
  if (pmtree::Status s = h->tree->Close(); !s.ok()) return Fail("closing", s);
  unlink(path.c_str());
  std::printf("crash_recovery: all %zu acknowledged keys recovered: ok\n", acknowledged.size());
  return 0;
}
