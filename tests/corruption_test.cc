// SPDX-License-Identifier: Apache-2.0
//
// The corruption campaign (issue 17): damaged copies of real pools of every
// persistent tree, both key kinds, after a clean close and after a crash.
//
// Each damaged copy is opened the way `pmtree inspect` opens it (read-only,
// copy-on-write) twice, each in a forked child: once through the API
// (open, Verify, then every model key looked up and a full scan), and once
// by running the `pmtree inspect --json` program itself.  A child runs under
// a CPU-time limit (a bound on work done, not on wall-clock time): a child
// killed by it is a hang.  Every outcome must be one of
//   - a clear error at open (the child reports it and exits),
//   - a Verify() failure,
//   - Verify() passing with the data intact, or with no more entries lost
//     (or altered, or invented) than the damaged bytes could hold (the
//     allowance below).  A larger loss fails the test for a cleanly closed
//     pool of the trees in DetectsLossAfterCleanClose and a crashed pool of
//     those in DetectsLossAfterCrash; elsewhere it is still absorbed and
//     only counted and printed (issue 17 item 2, remaining work);
// never a signal (SIGSEGV, SIGBUS, an abort from an uncaught exception, a
// sanitizer report) and never a hang.  Run in an ASan build directory
// (PMTREE_SANITIZE=address PMTREE_BUILD_DIR=build-asan), both the API
// children and `pmtree inspect` run under AddressSanitizer.
//
// The default run damages 12 copies per case; corruption_long_test (label
// "long") damages 120.  Seeded: PMTREE_SEED=<n> replays.
// PMTREE_CORRUPTION_CLI=<path> runs another `pmtree` binary (a copy that a
// rebuild during a long run does not replace).
// PMTREE_CORRUPTION_NOVERIFY=1 skips Verify() before the lookups and scans:
// today that crashes (Lookup/Scan trust a pool that has not been verified;
// open with TreeOptions::verify_on_open), so it is a diagnostic, not a test.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pm/pool_format.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree {
namespace {

#ifdef PMTREE_CORRUPTION_LONG
constexpr int kCopies = 120;
#else
constexpr int kCopies = 12;
#endif
constexpr uint64_t kPoolBytes = 4 * kMinPoolSize;
constexpr uint64_t kKeys = 1500;
// CPU seconds a child may use: far above what any case needs (milliseconds).
constexpr rlim_t kChildCpuSeconds = 20;

// Exit codes of an API child.
enum ChildExit : int { kOpenFailed = 10, kVerifyFailed = 11, kIntact = 12, kLost = 13, kParanoidOpened = 14 };

// A fixed default, as every seeded test here: CI checks the same damaged
// copies on every machine.  Other seeds (PMTREE_SEED=<n>) still find crashes
// in recoveries not yet hardened against damage (docs/pool_format.md).
uint64_t Seed() { return testutil::Seed(1); }

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string BytesKey(uint64_t i) {
  // Mixed lengths with shared prefixes: 1..40 bytes, a few of ~1 KiB.
  std::string k = "k" + std::to_string(i * 7919 % 100003);
  if (i % 5 == 0) k += std::string(i % 37, 'p');
  if (i % 97 == 0) k += std::string(1000, static_cast<char>('a' + i % 26));
  return k;
}

// One damage: the bytes it covers, for the loss allowance.
struct Damage {
  std::string what;
  uint64_t off = 0, len = 0;
  bool truncated = false;
};

Damage Apply(std::string* img, uint64_t high_water, std::mt19937_64& rng) {
  Damage d;
  const uint64_t span = std::max<uint64_t>(high_water, kPoolHeaderSize + 4096) - kPoolHeaderSize;
  const uint64_t at = kPoolHeaderSize + rng() % span;
  char* p = img->data();
  switch (rng() % 8) {
    case 0:
      d = {"bit flip", at, 1};
      p[at] = static_cast<char>(p[at] ^ (1 << (rng() % 8)));
      break;
    case 1: {
      const uint64_t w = at & ~7ull;
      const uint64_t choices[] = {0, rng(), (kPoolHeaderSize + rng() % span) & ~63ull, w, w & ~255ull,
                                  ~0ull};
      const uint64_t v = choices[rng() % 6];
      d = {"8-byte word := " + std::to_string(v), w, 8};
      std::memcpy(p + w, &v, 8);
      break;
    }
    case 2: {
      const uint64_t pg = at & ~4095ull;
      d = {"zeroed page", pg, 4096};
      std::memset(p + pg, 0, 4096);
      break;
    }
    case 3: {
      const uint64_t pg = at & ~4095ull;
      d = {"random page", pg, 4096};
      for (uint64_t i = 0; i < 4096; i++) p[pg + i] = static_cast<char>(rng());
      break;
    }
    case 4: {
      const uint64_t line = at & ~63ull;
      d = {"line of 0xff", line, 64};
      std::memset(p + line, 0xff, 64);
      break;
    }
    case 5: {
      // The unchecksummed header words: root slots, alloc_state, shutdown.
      const size_t fields[] = {offsetof(PoolHeader, root) + 8 * (rng() % kRootSlots),
                               offsetof(PoolHeader, alloc_state), offsetof(PoolHeader, shutdown_state)};
      const size_t f = fields[rng() % 3];
      uint64_t v = rng() % 2 ? (kPoolHeaderSize + rng() % span) & ~63ull : rng();
      if (f == offsetof(PoolHeader, shutdown_state)) v = rng() % 2 ? kCleanShutdown : 0;
      d = {"header word at " + std::to_string(f) + " := " + std::to_string(v), 0, kPoolHeaderSize};
      std::memcpy(p + f, &v, 8);
      break;
    }
    case 6: {
      const uint64_t n = 4096 * (1 + rng() % (img->size() / 4096 - 1));
      d = {"truncated to " + std::to_string(n), n, img->size() - n, true};
      img->resize(n);
      break;
    }
    default: {
      // Two words swapped: a plausible pointer in the wrong place.
      const uint64_t a = at & ~7ull, b = (kPoolHeaderSize + rng() % span) & ~7ull;
      uint64_t x, y;
      std::memcpy(&x, p + a, 8);
      std::memcpy(&y, p + b, 8);
      std::memcpy(p + a, &y, 8);
      std::memcpy(p + b, &x, 8);
      d = {"words at " + std::to_string(a) + " and " + std::to_string(b) + " swapped", std::min(a, b), 8};
      if (std::max(a, b) - std::min(a, b) > 8) d.len = 16;  // two places: counted as two lines below
      break;
    }
  }
  return d;
}

struct Outcomes {
  int open_failed = 0, verify_failed = 0, intact = 0, lost_within = 0, silent_loss = 0;
  int inspect_ok = 0, inspect_verify_failed = 0, inspect_error = 0;
};

template <class T>
struct Kind;
template <>
struct Kind<Tree> {
  using Model = std::map<uint64_t, uint64_t>;
  static Result<TreeHandle<Tree>> Create(const TreeFactory& f, const std::string& p) {
    return CreateTree(f, p, kPoolBytes, {});
  }
  static Result<TreeHandle<Tree>> Open(const std::string& p, const PoolOptions& o, const TreeOptions& t = {}) {
    return OpenTree(p, nullptr, t, o);
  }
  static uint64_t KeyOf(uint64_t i) { return i * 0x9e3779b97f4a7c15ull >> 20; }
};
template <>
struct Kind<BytesTree> {
  using Model = std::map<std::string, uint64_t>;
  static Result<TreeHandle<BytesTree>> Create(const TreeFactory& f, const std::string& p) {
    return CreateBytesTree(f, p, kPoolBytes, {});
  }
  static Result<TreeHandle<BytesTree>> Open(const std::string& p, const PoolOptions& o,
                                            const TreeOptions& t = {}) {
    return OpenBytesTree(p, nullptr, t, o);
  }
  static std::string KeyOf(uint64_t i) { return BytesKey(i); }
};

// The API child: open as inspect does, Verify, then compare with the model.
// Writes the number of lost/altered/invented entries to `fd`.
template <class T>
[[noreturn]] void ApiChild(const std::string& path, const typename Kind<T>::Model& model, int fd) {
  PoolOptions o;
  o.private_mapping = true;
  o.use_env = false;
  auto h = Kind<T>::Open(path, o);
  if (!h.ok()) _exit(kOpenFailed);
  if (std::getenv("PMTREE_CORRUPTION_NOVERIFY") == nullptr && !h->tree->Verify().ok()) {
    // The paranoid open must refuse what Verify() refuses.
    TreeOptions paranoid;
    paranoid.verify_on_open = true;
    auto again = Kind<T>::Open(path, o, paranoid);
    _exit(again.ok() ? kParanoidOpened : kVerifyFailed);
  }
  (void)h->tree->Stats();
  uint64_t bad = 0;
  for (const auto& [k, v] : model) {
    uint64_t got = ~v;
    if (!h->tree->Lookup(k, &got) || got != v) bad++;
  }
  std::vector<typename T::Entry> out(model.size() + 64);
  const size_t n = h->tree->Scan(typename T::Key{}, std::span(out));
  for (size_t i = 0; i < n; i++) {
    auto it = model.find(out[i].first);
    if (it == model.end() || it->second != out[i].second) bad++;  // invented or altered
  }
  // A scan that stops early (a cut leaf list that lookups, going through
  // inner nodes, do not see) misses the rest.
  if (n < model.size()) bad += model.size() - n;
  (void)!write(fd, &bad, sizeof(bad));
  _exit(bad == 0 ? kIntact : kLost);
}

// Trees that refuse a cleanly closed pool that lost blocks: fptree, wbtree
// and lbtree (when the restart image is unusable) compare their walk with
// Pool::saved_bytes_in_use(); fastfair, wotree, sortedtree, circtree, cdds
// and logtree keep the saved allocator state, so Verify() finds the blocks
// no node reaches (120 copies of every clean case in corruption_long_test,
// every zeroed page); nvtree's walk, when its inner-node image is unusable,
// must reach its leaf count, exact at a clean close (docs/pool_format.md).
bool DetectsLossAfterCleanClose(const std::string& tree) {
  return tree == "fptree" || tree == "wbtree" || tree == "fastfair" || tree == "lbtree" || tree == "logtree" ||
         tree == "wotree" || tree == "sortedtree" || tree == "circtree" || tree == "cdds" || tree == "nvtree";
}

// Trees that refuse a crashed pool that lost leaves: fptree's and wbtree's
// leaves carry the pool's leaf magic, and their recovery reports free space
// holding it; cdds's nodes carry the pool's node magic the same way (N1-N4
// in src/trees/cdds/cdds_gc.cc); lbtree's, fastfair's, wotree's,
// sortedtree's, circtree's and nvtree's recovery walk must reach the leaf
// count their meta block keeps; logtree's recovery rebuilds the allocator
// from the root, never the leaf links, and Verify() refuses a cut link (its
// invariant 8) (docs/pool_format.md, "Detecting a loss after a crash").
bool DetectsLossAfterCrash(const std::string& tree) {
  return tree == "fptree" || tree == "wbtree" || tree == "lbtree" || tree == "fastfair" || tree == "cdds" ||
         tree == "wotree" || tree == "sortedtree" || tree == "circtree" || tree == "logtree" || tree == "nvtree";
}

bool DetectsLoss(const std::string& tree, bool clean) {
  return clean ? DetectsLossAfterCleanClose(tree) : DetectsLossAfterCrash(tree);
}

// Runs `fn` in a child with the CPU limit; returns the wait status.
template <class Fn>
int InChild(Fn fn) {
  pid_t pid = fork();
  if (pid == 0) {
    rlimit cpu{kChildCpuSeconds, kChildCpuSeconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    fn();
    _exit(99);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

std::string Describe(int st) {
  if (WIFSIGNALED(st)) {
    if (WTERMSIG(st) == SIGXCPU || WTERMSIG(st) == SIGKILL) return "hang (CPU limit reached)";
    return std::string("killed by signal ") + strsignal(WTERMSIG(st));
  }
  return "exit " + std::to_string(WEXITSTATUS(st));
}

// A pool of `name` with kKeys inserted and every fourth removed, cleanly
// closed or left as a crash leaves it: its bytes, the model of its content
// and the entries per full leaf (for the loss allowance).
template <class T>
struct BasePool {
  std::string bytes;
  typename Kind<T>::Model model;
  double per_leaf = 1;
  uint64_t high_water = 0;  // end of the bytes in use (the rest is zero)
};

template <class T>
void MakeBase(const std::string& name, bool clean, BasePool<T>* b) {
  const TreeFactory* f = FindTree(name);
  ASSERT_NE(f, nullptr);
  const std::string path = "/dev/shm/pmtree-corrupt-" + std::to_string(getpid()) + "-" + name + ".pool";
  unlink(path.c_str());
  {
    auto h = Kind<T>::Create(*f, path);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t i = 0; i < kKeys; i++) {
      auto k = Kind<T>::KeyOf(i);
      ASSERT_TRUE(h->tree->Insert(k, i).ok());
      b->model[k] = i;
    }
    for (uint64_t i = 0; i < kKeys; i += 4) {
      ASSERT_TRUE(h->tree->Remove(Kind<T>::KeyOf(i)).ok());
      b->model.erase(Kind<T>::KeyOf(i));
    }
    TreeStats st = h->tree->Stats();
    if (st.leaf_nodes > 0 && st.leaf_fill > 0)
      b->per_leaf = static_cast<double>(st.entries) / (st.leaf_fill * static_cast<double>(st.leaf_nodes));
    if (clean) {
      ASSERT_TRUE(h->tree->Close().ok());
    }
  }
  b->bytes = Slurp(path);
  unlink(path.c_str());
  ASSERT_EQ(b->bytes.size(), kPoolBytes);
  b->high_water = b->bytes.size();
  while (b->high_water > kPoolHeaderSize && b->bytes[b->high_water - 1] == 0) b->high_water--;
}

// Opens the damaged copy at `path` in an API child and counts the outcome
// in `o`; fails the test on a signal, a hang, a paranoid open of a pool
// Verify() refuses, and on a loss beyond `allowance` that `name` is known
// to detect (DetectsLoss).
template <class T>
void CheckApi(const std::string& name, bool clean, const BasePool<T>& b, const std::string& path,
              uint64_t allowance, const std::string& where, Outcomes* o) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const int st = InChild([&] {
    close(fds[0]);
    ApiChild<T>(path, b.model, fds[1]);
  });
  close(fds[1]);
  uint64_t bad = 0;
  const bool got_bad = read(fds[0], &bad, sizeof(bad)) == sizeof(bad);
  close(fds[0]);
  if (!WIFEXITED(st) || WEXITSTATUS(st) == kParanoidOpened || WEXITSTATUS(st) > kParanoidOpened) {
    // Keep the copy that failed, for a replay under a debugger.
    const std::string kept = path + ".failed";
    Spit(kept, Slurp(path));
    ADD_FAILURE() << where << ": the damaged copy is kept as " << kept;
  }
  ASSERT_TRUE(WIFEXITED(st)) << where << ": API child " << Describe(st);
  switch (WEXITSTATUS(st)) {
    case kOpenFailed: o->open_failed++; break;
    case kVerifyFailed: o->verify_failed++; break;
    case kIntact: o->intact++; break;
    case kLost:
      ASSERT_TRUE(got_bad);
      if (bad <= allowance) {
        o->lost_within++;
      } else if (DetectsLoss(name, clean)) {
        ADD_FAILURE() << where << ": Verify() passed but " << bad << " entries were lost, altered or invented";
      } else {
        // Not detected yet (issue 17 item 2, remaining work): after a
        // crash the trees not in DetectsLossAfterCrash rebuild the
        // allocator from what recovery reaches; after a clean close only
        // the trees listed in DetectsLossAfterCleanClose are known to catch
        // it.  Counted and printed, not failed.
        o->silent_loss++;
      }
      break;
    case kParanoidOpened: FAIL() << where << ": verify_on_open opened a pool that fails Verify()"; break;
    default: FAIL() << where << ": API child " << Describe(st);
  }
}

// Entries the damaged bytes may have held: every node they touch (nodes are
// at least 256 B), two more for a pointer that names a node.
uint64_t Allowance(double per_leaf, const Damage& d) {
  const uint64_t nodes = d.len / 256 + 3;
  return static_cast<uint64_t>(per_leaf * static_cast<double>(nodes)) + 2;
}

// `copies` damaged copies of a pool of `name`, damage drawn from `seed`;
// the copies before `first` are drawn but not opened (a replay of one copy).
template <class T>
void Campaign(const std::string& name, bool bytes, bool clean, uint64_t seed, int copies, int first = 0) {
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  BasePool<T> b;
  ASSERT_NO_FATAL_FAILURE(MakeBase<T>(name, clean, &b));
  const std::string copy_path =
      "/dev/shm/pmtree-corrupt-" + std::to_string(getpid()) + "-" + name + ".pool.damaged";

  std::mt19937_64 rng(seed);
  Outcomes o;
  for (int c = 0; c < copies; c++) {
    std::string img = b.bytes;
    Damage d = Apply(&img, b.high_water, rng);
    if (c < first) continue;
    Spit(copy_path, img);
    const std::string where = "copy " + std::to_string(c) + " (" + d.what + " at " + std::to_string(d.off) + ")";
    ASSERT_NO_FATAL_FAILURE(CheckApi<T>(name, clean, b, copy_path, Allowance(b.per_leaf, d), where, &o));

    const int ist = InChild([&] {
      if (int null = open("/dev/null", O_WRONLY); null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
      }
      const char* cli = std::getenv("PMTREE_CORRUPTION_CLI") ? std::getenv("PMTREE_CORRUPTION_CLI") : PMTREE_CLI;
      execl(cli, cli, "inspect", "--json", copy_path.c_str(), static_cast<char*>(nullptr));
    });
    ASSERT_TRUE(WIFEXITED(ist)) << where << ": pmtree inspect " << Describe(ist);
    switch (WEXITSTATUS(ist)) {
      case 0: o.inspect_ok++; break;
      case 1: o.inspect_verify_failed++; break;
      case 2: o.inspect_error++; break;
      default: FAIL() << where << ": pmtree inspect " << Describe(ist);
    }
  }
  unlink(copy_path.c_str());
  std::printf("%s %s %s: %d copies: open failed %d, Verify failed %d, intact %d, loss within allowance %d, "
              "undetected loss %d; inspect: ok %d, Verify failed %d, error %d\n",
              name.c_str(), bytes ? "bytes" : "u64", clean ? "clean" : "crashed", copies - first, o.open_failed,
              o.verify_failed, o.intact, o.lost_within, o.silent_loss, o.inspect_ok,
              o.inspect_verify_failed, o.inspect_error);
}

// One copy of a sweep: `img` written to `path` and checked as a damaged
// copy of `b` (API child only).
template <class T>
void CheckSweepCopy(const std::string& name, bool clean, const BasePool<T>& b, const std::string& path,
                    const std::string& img, const Damage& d, const std::string& where, Outcomes* o) {
  Spit(path, img);
  CheckApi<T>(name, clean, b, path, Allowance(b.per_leaf, d), where, o);
}

// The line a sweep prints: how many copies (`what`) gave which outcome.
void PrintSweep(const std::string& name, bool bytes, bool clean, const std::string& what, const Outcomes& o) {
  std::printf("%s %s %s: %s: open failed %d, Verify failed %d, intact %d, loss within allowance %d, "
              "undetected loss %d\n",
              name.c_str(), bytes ? "bytes" : "u64", clean ? "clean" : "crashed", what.c_str(), o.open_failed,
              o.verify_failed, o.intact, o.lost_within, o.silent_loss);
}

// Not random: every 4 KiB page of the bytes in use zeroed in turn, one copy
// each (the damage that cut lbtree's leaf list after a clean close, issue
// 17 item 2).  API children only; crashed pools in the long run only.
template <class T>
void EveryZeroedPage(const std::string& name, bool bytes, bool clean) {
  BasePool<T> b;
  ASSERT_NO_FATAL_FAILURE(MakeBase<T>(name, clean, &b));
  const std::string copy_path =
      "/dev/shm/pmtree-corrupt-" + std::to_string(getpid()) + "-" + name + ".pool.zeroed";
  Outcomes o;
  int pages = 0;
  for (uint64_t pg = kPoolHeaderSize & ~4095ull; pg < b.high_water; pg += 4096, pages++) {
    std::string img = b.bytes;
    const uint64_t from = std::max<uint64_t>(pg, kPoolHeaderSize);
    std::memset(img.data() + from, 0, pg + 4096 - from);
    ASSERT_NO_FATAL_FAILURE(CheckSweepCopy<T>(name, clean, b, copy_path, img, Damage{"zeroed page", pg, 4096},
                                              "page at " + std::to_string(pg) + " zeroed", &o));
  }
  unlink(copy_path.c_str());
  PrintSweep(name, bytes, clean, std::to_string(pages) + " pages zeroed", o);
}

// Not random: 8-byte words that look like a node offset (64-aligned,
// inside the bytes in use) zeroed one at a time -- a zeroed sibling, next
// or child pointer, the cut that a zeroed page also makes but that a
// node's own checks (its flags, tag or magic on the same page) then catch
// first, so only this sweep shows that the leaf count or magic, and nothing
// else, refuses the cut.  Evenly spaced over the candidates: at most 48 in
// the short run, every one in the long run.
template <class T>
void EveryZeroedPointer(const std::string& name, bool bytes, bool clean) {
  BasePool<T> b;
  ASSERT_NO_FATAL_FAILURE(MakeBase<T>(name, clean, &b));
  std::vector<uint64_t> words;
  for (uint64_t w = kPoolHeaderSize; w + 8 <= b.high_water; w += 8) {
    uint64_t v;
    std::memcpy(&v, b.bytes.data() + w, 8);
    if (v >= kPoolHeaderSize && v < b.high_water && v % 64 == 0 && v != (w & ~63ull)) words.push_back(w);
  }
#ifdef PMTREE_CORRUPTION_LONG
  const size_t limit = words.size();
#else
  const size_t limit = 48;
#endif
  const size_t n = std::min(words.size(), limit);
  const std::string copy_path =
      "/dev/shm/pmtree-corrupt-" + std::to_string(getpid()) + "-" + name + ".pool.pointer";
  Outcomes o;
  for (size_t i = 0; i < n; i++) {
    const uint64_t w = words[i * words.size() / n];
    std::string img = b.bytes;
    std::memset(img.data() + w, 0, 8);
    ASSERT_NO_FATAL_FAILURE(CheckSweepCopy<T>(name, clean, b, copy_path, img, Damage{"zeroed pointer", w, 8},
                                              "word at " + std::to_string(w) + " zeroed", &o));
  }
  unlink(copy_path.c_str());
  PrintSweep(name, bytes, clean,
             std::to_string(n) + " of " + std::to_string(words.size()) + " pointer-like words zeroed", o);
  EXPECT_GT(n, 0u) << name << ": no pointer-like word in the pool";
}

using CorruptionTest = ::testing::TestWithParam<std::tuple<std::string, bool, bool>>;

TEST_P(CorruptionTest, EveryDamagedCopyIsAnErrorAVerifyFailureOrIntactData) {
  const auto& [name, bytes, clean] = GetParam();
  if (bytes) {
    Campaign<BytesTree>(name, bytes, clean, Seed(), kCopies);
  } else {
    Campaign<Tree>(name, bytes, clean, Seed(), kCopies);
  }
}

TEST_P(CorruptionTest, EveryZeroedPageIsAnErrorAVerifyFailureOrIntactData) {
  const auto& [name, bytes, clean] = GetParam();
#ifndef PMTREE_CORRUPTION_LONG
  // A loss in a crashed pool of most trees is only counted (they do not
  // detect it yet), so the short run sweeps their cleanly closed pools only.
  if (!clean && !DetectsLossAfterCrash(name)) GTEST_SKIP() << "crashed pools are swept by corruption_long_test";
#endif
  if (bytes) {
    EveryZeroedPage<BytesTree>(name, bytes, clean);
  } else {
    EveryZeroedPage<Tree>(name, bytes, clean);
  }
}

TEST_P(CorruptionTest, EveryZeroedPointerIsAnErrorAVerifyFailureOrIntactData) {
  const auto& [name, bytes, clean] = GetParam();
  if (!(clean ? DetectsLossAfterCleanClose(name) : DetectsLossAfterCrash(name)))
    GTEST_SKIP() << name << " does not detect a cut " << (clean ? "after a clean close" : "after a crash");
  if (bytes) {
    EveryZeroedPointer<BytesTree>(name, bytes, clean);
  } else {
    EveryZeroedPointer<Tree>(name, bytes, clean);
  }
}

// A loss detected at a read-write open stays detected (issue 17): the
// first zeroed pages whose open fails with Corruption are opened read-write
// twice more, and each must fail again.  Before Pool::RestoreOpenState the
// failed open had marked the pool dirty and dropped its saved allocator
// state, so the second open rebuilt the allocator from what it reached and
// absorbed the loss (wbtree, lbtree, fastfair below); a crashed fptree or
// wbtree pool is refused again because its lost leaves keep their leaf magic
// (a crashed cdds pool: its lost nodes keep their node magic), a crashed
// pool of the other trees because its meta block keeps its leaf count or a
// node check refuses the page again (every open of a crashed pool recovers
// from what the pool holds).
template <class T>
void DetectedLossStaysDetected(const std::string& name, bool clean) {
  BasePool<T> b;
  ASSERT_NO_FATAL_FAILURE(MakeBase<T>(name, clean, &b));
  const std::string copy_path = "/dev/shm/pmtree-corrupt-" + std::to_string(getpid()) + "-" + name + ".pool.twice";
  PoolOptions o;
  o.use_env = false;
  TreeOptions paranoid;  // fastfair's loss is found by Verify(), not by its recovery
  paranoid.verify_on_open = true;
  int detected = 0;
  for (uint64_t pg = kPoolHeaderSize; pg < b.high_water && detected < 3; pg += 4096) {
    std::string img = b.bytes;
    std::memset(img.data() + pg, 0, 4096);
    Spit(copy_path, img);
    {
      auto first = Kind<T>::Open(copy_path, o, paranoid);
      if (first.ok() || first.status().code() != Status::Code::kCorruption) continue;
    }
    detected++;
    for (int again = 1; again <= 2; again++) {
      auto h = Kind<T>::Open(copy_path, o, paranoid);
      EXPECT_FALSE(h.ok()) << name << (clean ? " clean" : " crashed") << ", page at " << pg
                           << " zeroed: refused at the first read-write open, accepted at open " << again + 1;
      if (!h.ok()) {
        EXPECT_EQ(h.status().code(), Status::Code::kCorruption) << h.status().ToString();
      }
    }
  }
  unlink(copy_path.c_str());
  EXPECT_GT(detected, 0) << name << ": no zeroed page was refused at all";
}

TEST(DetectedLossTest, StaysDetectedAcrossReadWriteOpens) {
  for (const char* name : {"fptree", "wbtree", "lbtree", "fastfair"}) {
    SCOPED_TRACE(name);
    DetectedLossStaysDetected<Tree>(name, /*clean=*/true);
  }
  for (const char* name :
       {"fptree", "wbtree", "lbtree", "fastfair", "cdds", "wotree", "sortedtree", "circtree", "logtree", "nvtree"}) {
    SCOPED_TRACE(std::string(name) + " crashed");
    DetectedLossStaysDetected<Tree>(name, /*clean=*/false);
    DetectedLossStaysDetected<BytesTree>(name, /*clean=*/false);
  }
}

// Seeds that once crashed a recovery, replayed up to the copy that did
// (docs/pool_format.md, "Recoveries hardened by the campaign").
TEST(CorruptionRegressionTest, SeedsThatCrashedARecovery) {
  // wotree: copy 3, a bit flip in a crashed byte-key pool (SIGSEGV
  // comparing keys through an unchecked slot).
  Campaign<BytesTree>("wotree", true, false, 2457745868, 4);
  // sortedtree: the same kind of crash, in the shared B-link frame.
  Campaign<BytesTree>("sortedtree", true, false, 2593129727, kCopies);
  Campaign<BytesTree>("sortedtree", true, true, 2593129727, kCopies);
  // circtree: copy 11, a bit flip in a child offset of a cleanly closed pool
  // (SIGSEGV in Verify reading the child's low key).
  Campaign<Tree>("circtree", false, true, 45, 12);
  // cdds: copy 116 of the long run, a bit flip in a key slot of a cleanly
  // closed byte-key pool (SIGSEGV in Verify comparing through it).
  Campaign<BytesTree>("cdds", true, true, 1, 117, 116);
}

std::vector<std::tuple<std::string, bool, bool>> Cases() {
  std::vector<std::tuple<std::string, bool, bool>> v;
  for (const TreeFactory& f : Registry()) {
    if (!f.persistent() || f.test_only()) continue;
    for (bool bytes : {false, true}) {
      if (bytes && f.create_bytes == nullptr) continue;
      for (bool clean : {true, false}) v.emplace_back(std::string(f.name), bytes, clean);
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(EveryTree, CorruptionTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, bool, bool>>& info) {
                           std::string n = std::get<0>(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n + (std::get<1>(info.param) ? "_bytes" : "_u64") +
                                  (std::get<2>(info.param) ? "_clean" : "_crashed");
                         });

}  // namespace
}  // namespace pmtree
