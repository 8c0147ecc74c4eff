// SPDX-License-Identifier: Apache-2.0
//
// quickstart: create a pool holding a tree, insert, look up, scan, close,
// reopen.   Usage: example_quickstart POOL_FILE   (e.g. /dev/shm/quick.pool)
//
// Build against an installed pmtree (examples/CMakeLists.txt does this):
//   find_package(pmtree CONFIG REQUIRED)
//   target_link_libraries(app PRIVATE pmtree::pmtree)
// or with pkg-config:  g++ -std=c++20 app.cc $(pkg-config --cflags --libs pmtree)

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "pmtree/registry.h"

namespace {

// Every pmtree failure is a Status whose message says what went wrong.
int Fail(const char* what, const pmtree::Status& s) {
  std::fprintf(stderr, "quickstart: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

constexpr uint64_t kKeys = 1000;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s POOL_FILE\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];

  // A design is chosen by its registry name (pmtree/registry.h lists them).
  auto factory = pmtree::RequireTree("lbtree");
  if (!factory.ok()) return Fail("choosing the tree", factory.status());

  {
    // The pool is a file of kDefaultPoolSize bytes, sparse: it costs only
    // what the tree uses.  `overwrite` replaces a pool a previous run left.
    pmtree::PoolOptions pool_options;
    pool_options.overwrite = true;
    auto h = pmtree::CreateTree(**factory, path, {}, pool_options);
    if (!h.ok()) return Fail("creating the tree", h.status());
    pmtree::Tree& tree = *h->tree;

    // Every mutation is durable when it returns.  "Already present" is a
    // result (false), not an error; a Status means the environment failed.
    for (uint64_t k = 1; k <= kKeys; k++) {
      auto inserted = tree.Insert(k * 10, k);
      if (!inserted.ok()) return Fail("inserting", inserted.status());
    }
    auto again = tree.Insert(10, 99);
    if (!again.ok()) return Fail("inserting a present key", again.status());
    if (*again) {
      std::fprintf(stderr, "quickstart: a present key was inserted again\n");
      return 1;
    }

    uint64_t value = 0;
    if (!tree.Lookup(500, &value) || value != 50) {
      std::fprintf(stderr, "quickstart: key 500 not found after insert\n");
      return 1;
    }

    // A scan fills a caller-owned buffer in key order: here 100 <= key <= 200.
    std::vector<pmtree::Tree::Entry> out(32);
    size_t n = tree.ScanRange(100, 200, out);
    std::printf("scan [100, 200]: %zu entries:", n);
    for (size_t i = 0; i < n; i++) std::printf(" %" PRIu64 "=%" PRIu64, out[i].first, out[i].second);
    std::printf("\n");
    if (n != 11) {
      std::fprintf(stderr, "quickstart: expected 11 entries in [100, 200], got %zu\n", n);
      return 1;
    }

    // Close is the clean shutdown; without it, the next open recovers as
    // after a crash (examples/crash_recovery.cc).
    if (pmtree::Status s = tree.Close(); !s.ok()) return Fail("closing", s);
  }

  // Reopen: the pool names its tree, so `expected` only guards against a
  // pool of another design.
  auto h = pmtree::OpenTree(path, *factory, {});
  if (!h.ok()) return Fail("reopening", h.status());
  const uint64_t entries = h->tree->Stats().entries;
  std::printf("reopened %s: %" PRIu64 " entries, clean shutdown: %s\n", path.c_str(), entries,
              h->pool->clean_shutdown() ? "yes" : "no");
  if (entries != kKeys) {
    std::fprintf(stderr, "quickstart: expected %" PRIu64 " entries after reopen\n", kKeys);
    return 1;
  }
  // Verify walks the whole structure and checks every invariant.
  if (pmtree::Status s = h->tree->Verify(); !s.ok()) return Fail("verifying", s);
  if (pmtree::Status s = h->tree->Close(); !s.ok()) return Fail("closing", s);
  unlink(path.c_str());
  std::printf("quickstart: ok\n");
  return 0;
}
