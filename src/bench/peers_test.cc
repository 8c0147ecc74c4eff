// SPDX-License-Identifier: Apache-2.0
//
// The peers (peers.h) against a std::map model, their directory rule, and
// the RocksDB peer's read-then-write insert under concurrency.  A failing
// random test prints its seed; PMTREE_SEED=<n> replays it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "bench/driver.h"
#include "bench/peers.h"
#include "bench/workload.h"
#include "testutil.h"

namespace pmtree::bench {
namespace {

namespace fs = std::filesystem;

std::string PeerDir(const std::string& what) {
  return "/dev/shm/pmtree-peers-test-" + std::to_string(getpid()) + "-" + what;
}

Result<std::unique_ptr<Target>> OpenPeer(const std::string& name, PeerConfig c) {
  if (c.dir.empty()) c.dir = PeerDir(name);
  c.map_size = 64 << 20;
  return FindPeer(name)->open(c);
}

TEST(PeerModelTest, EveryPeerMatchesAnOrderedMapOverRandomOperations) {
  const uint64_t seed = testutil::Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  auto keys = SortedLoadKeys(2000);
  for (const PeerInfo& p : Peers()) {
    SCOPED_TRACE(std::string(p.name));
    auto t = OpenPeer(std::string(p.name), {});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    Target& target = **t;
    ASSERT_TRUE(target.Load(keys, false, 1).ok());
    std::map<uint64_t, uint64_t> model;
    for (uint64_t k : keys) model[k] = ValueFor(k);
    // Keys drawn from the loaded ones and their neighbours, so that every
    // operation meets both present and absent keys.
    std::mt19937_64 rng(seed);
    auto draw = [&] { return keys[rng() % keys.size()] + rng() % 3; };
    for (int i = 0; i < 3000; i++) {
      const uint64_t k = draw(), v = rng();
      const bool present = model.count(k) != 0;
      switch (rng() % 5) {
        case 0: {
          auto r = target.Insert(k, {}, v);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          ASSERT_EQ(*r, !present) << "insert " << k;
          model.try_emplace(k, v);
          break;
        }
        case 1: {
          auto r = target.Update(k, {}, v);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          ASSERT_EQ(*r, present) << "update " << k;
          if (present) model[k] = v;
          break;
        }
        case 2: {
          auto r = target.Remove(k, {});
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          ASSERT_EQ(*r, present) << "remove " << k;
          model.erase(k);
          break;
        }
        case 3: {
          uint64_t got = 0;
          ASSERT_EQ(target.Lookup(k, {}, &got), present) << "lookup " << k;
          if (present) {
            ASSERT_EQ(got, model[k]) << "lookup " << k;
          }
          break;
        }
        default: {
          const uint32_t n = 1 + static_cast<uint32_t>(rng() % 40);
          size_t want = 0;
          for (auto it = model.lower_bound(k); it != model.end() && want < n; ++it) want++;
          ASSERT_EQ(target.Scan(k, {}, n), want) << "scan " << n << " from " << k;
        }
      }
    }
    EXPECT_EQ(target.Stats().entries, model.size());
    for (const auto& [k, v] : model) {
      uint64_t got = 0;
      ASSERT_TRUE(target.Lookup(k, {}, &got)) << k;
      ASSERT_EQ(got, v) << k;
    }
    EXPECT_TRUE(target.Finish().ok());
    t->reset();
    EXPECT_FALSE(fs::exists(PeerDir(std::string(p.name)))) << "peer directory left behind";
  }
}

// The directory rule of issue 17: an existing path the bench did not make is
// refused and left as it was, even with reuse; a directory an earlier bench
// run kept is replaced with reuse only.
TEST(PeerDirTest, APeerNeverRemovesADirectoryItDidNotMake) {
  for (const char* name : {"lmdb", "bdb", "rocksdb"}) {
    if (!FindPeer(name)) continue;  // rocksdb: only when the build found it
    SCOPED_TRACE(name);
    const std::string dir = PeerDir(std::string("foreign-") + name);
    fs::create_directories(dir);
    std::ofstream(dir + "/precious") << "user data";
    for (bool reuse : {false, true}) {
      PeerConfig c;
      c.dir = dir;
      c.reuse = reuse;
      auto t = OpenPeer(name, c);
      ASSERT_FALSE(t.ok());
      EXPECT_EQ(t.status().code(), Status::Code::kBusy) << t.status().ToString();
      EXPECT_TRUE(fs::exists(dir + "/precious"));
    }
    fs::remove_all(dir);

    // Kept by an earlier run: refused without reuse, replaced with it.
    PeerConfig kept;
    kept.dir = PeerDir(std::string("kept-") + name);
    kept.keep = true;
    {
      auto t = OpenPeer(name, kept);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      ASSERT_TRUE((*t)->Insert(1, {}, 1).ok());
      EXPECT_TRUE((*t)->Finish().ok());
    }
    ASSERT_TRUE(fs::exists(kept.dir));
    kept.keep = false;
    EXPECT_FALSE(OpenPeer(name, kept).ok());
    kept.reuse = true;
    {
      auto t = OpenPeer(name, kept);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      uint64_t v;
      EXPECT_FALSE((*t)->Lookup(1, {}, &v)) << "a replaced directory starts empty";
      EXPECT_TRUE((*t)->Finish().ok());
    }
    EXPECT_FALSE(fs::exists(kept.dir));
  }
}

TEST(RocksDbPeerTest, IsBuiltOrTheBenchSaysWhyNot) {
  BenchConfig c;
  c.targets = {"rocksdb"};
  if (FindPeer("rocksdb")) {
    EXPECT_TRUE(FindPeer("rocksdb-nosync"));
    EXPECT_TRUE(UnbuiltPeerReason("rocksdb").empty());
    EXPECT_TRUE(c.Validate().ok()) << c.Validate().ToString();
  } else {
    Status s = c.Validate();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("librocksdb-dev"), std::string_view::npos) << s.ToString();
  }
  EXPECT_TRUE(UnbuiltPeerReason("lmdb").empty());
}

// Insert reads, then writes under the key's stripe lock: of two threads
// inserting the same keys, exactly one succeeds per key.
TEST(RocksDbPeerTest, ConcurrentInsertsOfTheSameKeysSucceedOncePerKey) {
  for (const char* name : {"rocksdb-nosync", "rocksdb"}) {
    if (!FindPeer(name)) GTEST_SKIP() << UnbuiltPeerReason(name);
    SCOPED_TRACE(name);
    auto t = OpenPeer(name, {});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->concurrent());
    constexpr uint64_t kKeys = 2000;
    std::atomic<uint64_t> won{0}, failed{0};
    auto insert_all = [&](uint64_t value) {
      for (uint64_t k = 1; k <= kKeys; k++) {
        auto r = (*t)->Insert(k, {}, value);
        if (!r.ok()) failed++;
        else if (*r) won++;
      }
    };
    std::thread a(insert_all, 1), b(insert_all, 2);
    a.join();
    b.join();
    EXPECT_EQ(failed.load(), 0u);
    EXPECT_EQ(won.load(), kKeys);
    EXPECT_EQ((*t)->Stats().entries, kKeys);
    EXPECT_EQ((*t)->Scan(0, {}, 3 * kKeys), kKeys);
    EXPECT_TRUE((*t)->Finish().ok());
  }
}

}  // namespace
}  // namespace pmtree::bench
