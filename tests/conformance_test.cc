// SPDX-License-Identifier: Apache-2.0
//
// The conformance suite: every registered tree, run against a std::map model.
//
// Adding a tree to the registry (src/trees/registry.cc) is all it takes for it
// to run here: random mixes, edge keys, duplicates, removes down to empty,
// scans across leaf boundaries, bulk load, byte-string keys of 0..1024 bytes,
// concurrent mixed workloads, close-and-recover and crash-and-recover round
// trips, and a full pool.  Verify() runs after every batch.
//
// Randomness is seeded; each test prints its seed on failure, and
// PMTREE_SEED=<n> replays it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pm/pool_format.h"
#include "pm/pool_impl.h"
#include "pmtree/registry.h"
#include "testutil.h"

namespace pmtree {
namespace {

constexpr uint64_t kPoolSize = 1ull << 30;  // anonymous (sparse memfd): costs what is used
// Pool files are reserved whole at creation (PoolOptions::reserve_space).
constexpr uint64_t kFilePoolSize = 64ull << 20;

using testutil::Seed;


std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Rewrites the layout name in a pool file's header (and its checksum), as a
// forger would.
void Relabel(const std::string& path, std::string_view layout) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  PoolHeader h;
  f.read(reinterpret_cast<char*>(&h), sizeof(h));
  std::memset(h.layout, 0, sizeof(h.layout));
  std::memcpy(h.layout, layout.data(), layout.size());
  h.checksum = Fnv1a64(&h, kChecksummedBytes);
  f.seekp(0);
  f.write(reinterpret_cast<const char*>(&h), sizeof(h));
}

class ConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    factory_ = FindTree(GetParam());
    ASSERT_NE(factory_, nullptr);
    seed_ = Seed();
    pool_opts_.use_env = true;
  }
  void TearDown() override {
    for (const auto& p : paths_) unlink(p.c_str());
  }

  const std::string& Track(std::string path) {
    unlink(path.c_str());
    paths_.push_back(std::move(path));
    return paths_.back();
  }

  TreeHandle<Tree> Make(const TreeOptions& o = {}) {
    auto h = CreateTree(*factory_, "", kPoolSize, o, pool_opts_);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return std::move(h).value();
  }

  bool persistent() const { return factory_->persistent(); }
  template <class Reopened>
  void RoundsOverReopens(const std::string& path, bool close, std::map<uint64_t, uint64_t>& model,
                         Reopened&& reopened);
  bool concurrent() const { return factory_->capabilities & kCapConcurrent; }

  // Full comparison: every model key looked up, a full scan equal to the model.
  template <class T, class M>
  void ExpectEqualsModel(T& tree, const M& model) {
    ASSERT_TRUE(tree.Verify().ok()) << tree.Verify().ToString();
    for (const auto& [k, v] : model) {
      uint64_t got = ~v;
      ASSERT_TRUE(tree.Lookup(k, &got)) << "acknowledged key missing";
      ASSERT_EQ(got, v);
    }
    std::vector<typename T::Entry> out(model.size() + 1);
    typename T::Key lowest{};
    size_t n = tree.Scan(lowest, std::span(out));
    ASSERT_EQ(n, model.size()) << "full scan count";
    size_t i = 0;
    for (const auto& [k, v] : model) {
      ASSERT_EQ(out[i].first, k) << "scan position " << i;
      ASSERT_EQ(out[i].second, v);
      i++;
    }
  }

  const TreeFactory* factory_ = nullptr;
  uint64_t seed_ = 0;
  PoolOptions pool_opts_;
  std::vector<std::string> paths_;
};

// `ops` random operations (insert, update, upsert, remove, lookup, scan)
// applied to the tree and the model alike, every result checked, Verify()
// every `verify_every` operations (0: never).  A mismatch is a fatal failure
// inside this helper, so callers wrap it in ASSERT_NO_FATAL_FAILURE.
template <class T, class M, class KeyGen>
void RandomOps(T& tree, M& model, std::mt19937_64& rng, int ops, KeyGen key_of, int verify_every) {
  using Key = typename T::Key;
  std::vector<typename T::Entry> out(64);
  for (int i = 0; i < ops; i++) {
    auto owned = key_of(rng);
    Key k = owned;
    uint64_t v = rng();
    int op = static_cast<int>(rng() % 100);
    auto it = model.find(owned);
    bool present = it != model.end();
    if (op < 30) {
      auto r = tree.Insert(k, v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(*r, !present) << "insert result, op " << i;
      if (!present) model[owned] = v;
    } else if (op < 40) {
      auto r = tree.Update(k, v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(*r, present) << "update result, op " << i;
      if (present) it->second = v;
    } else if (op < 50) {
      auto r = tree.Upsert(k, v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(*r, !present) << "upsert result, op " << i;
      model[owned] = v;
    } else if (op < 70) {
      auto r = tree.Remove(k);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(*r, present) << "remove result, op " << i;
      if (present) model.erase(it);
    } else if (op < 95) {
      uint64_t got = 0;
      ASSERT_EQ(tree.Lookup(k, &got), present) << "lookup result, op " << i;
      if (present) {
        ASSERT_EQ(got, it->second);
      }
    } else {
      size_t want = 1 + rng() % out.size();
      size_t n = tree.Scan(k, std::span(out.data(), want));
      auto m = model.lower_bound(owned);
      size_t expect = 0;
      for (; m != model.end() && expect < want; ++m, ++expect) {
        ASSERT_LT(expect, n) << "scan too short, op " << i;
        ASSERT_EQ(out[expect].first, m->first) << "scan key, op " << i;
        ASSERT_EQ(out[expect].second, m->second);
      }
      ASSERT_EQ(n, expect) << "scan length, op " << i;
    }
    if (verify_every > 0 && (i + 1) % verify_every == 0) {
      Status s = tree.Verify();
      ASSERT_TRUE(s.ok()) << "after op " << i << ": " << s.ToString();
    }
  }
}

TEST_P(ConformanceTest, RandomMixMatchesTheModel) {
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  auto h = Make();
  std::map<uint64_t, uint64_t> model;
  std::mt19937_64 rng(seed_);
  ASSERT_NO_FATAL_FAILURE(RandomOps(*h.tree, model, rng, 30000, [](std::mt19937_64& r) { return r() % 4000; }, 2000));
  ExpectEqualsModel(*h.tree, model);
}

TEST_P(ConformanceTest, WideKeysMatchTheModel) {
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  auto h = Make();
  std::map<uint64_t, uint64_t> model;
  std::mt19937_64 rng(seed_);
  ASSERT_NO_FATAL_FAILURE(RandomOps(*h.tree, model, rng, 20000, [](std::mt19937_64& r) { return r(); }, 5000));
  ExpectEqualsModel(*h.tree, model);
}

TEST_P(ConformanceTest, EdgeKeysZeroAndMaxWork) {
  auto h = Make();
  std::map<uint64_t, uint64_t> model;
  const uint64_t keys[] = {0, 1, UINT64_MAX, UINT64_MAX - 1, 1ull << 63};
  for (uint64_t k : keys) {
    ASSERT_TRUE(*h.tree->Insert(k, k ^ 0x5555));
    model[k] = k ^ 0x5555;
  }
  ExpectEqualsModel(*h.tree, model);
  std::vector<Tree::Entry> out(10);
  ASSERT_EQ(h.tree->ScanRange(UINT64_MAX, UINT64_MAX, std::span(out)), 1u);
  EXPECT_EQ(out[0].first, UINT64_MAX);
  ASSERT_EQ(h.tree->ScanRange(0, 1, std::span(out)), 2u);
  for (uint64_t k : keys) ASSERT_TRUE(*h.tree->Remove(k));
  ExpectEqualsModel(*h.tree, std::map<uint64_t, uint64_t>{});
}

TEST_P(ConformanceTest, DuplicateInsertIsRefusedAndKeepsTheValue) {
  auto h = Make();
  ASSERT_TRUE(*h.tree->Insert(42, 1));
  EXPECT_FALSE(*h.tree->Insert(42, 2));
  uint64_t v = 0;
  ASSERT_TRUE(h.tree->Lookup(42, &v));
  EXPECT_EQ(v, 1u);
  EXPECT_FALSE(*h.tree->Update(43, 5));
  EXPECT_FALSE(h.tree->Lookup(43, &v));
  EXPECT_FALSE(*h.tree->Upsert(42, 7));
  ASSERT_TRUE(h.tree->Lookup(42, &v));
  EXPECT_EQ(v, 7u);
  EXPECT_FALSE(*h.tree->Remove(43));
}

TEST_P(ConformanceTest, RemovesDownToEmptyThenRefills) {
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  auto h = Make();
  std::map<uint64_t, uint64_t> model;
  std::vector<uint64_t> keys(6000);
  for (size_t i = 0; i < keys.size(); i++) keys[i] = i * 7919 + 3;
  std::mt19937_64 rng(seed_);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (uint64_t k : keys) ASSERT_TRUE(*h.tree->Insert(k, k + 1));
  std::shuffle(keys.begin(), keys.end(), rng);
  for (size_t i = 0; i < keys.size(); i++) {
    ASSERT_TRUE(*h.tree->Remove(keys[i])) << "remove " << i;
    if (i % 1000 == 0) {
      ASSERT_TRUE(h.tree->Verify().ok()) << h.tree->Verify().ToString();
    }
  }
  ExpectEqualsModel(*h.tree, model);
  EXPECT_EQ(h.tree->Stats().entries, 0u);
  for (uint64_t k : keys) {
    ASSERT_TRUE(*h.tree->Insert(k, k));
    model[k] = k;
  }
  ExpectEqualsModel(*h.tree, model);
}

TEST_P(ConformanceTest, AscendingAndDescendingInsertsSplitAtTheEdges) {
  for (bool ascending : {true, false}) {
    auto h = Make();
    std::map<uint64_t, uint64_t> model;
    for (uint64_t i = 0; i < 8000; i++) {
      uint64_t k = ascending ? i : 8000 - i;
      ASSERT_TRUE(*h.tree->Insert(k, i));
      model[k] = i;
    }
    ExpectEqualsModel(*h.tree, model);
  }
}

TEST_P(ConformanceTest, ScansCrossLeafBoundariesAndHonourEndKeys) {
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  auto h = Make();
  std::map<uint64_t, uint64_t> model;
  for (uint64_t i = 0; i < 10000; i++) {
    ASSERT_TRUE(*h.tree->Insert(i * 3, i));
    model[i * 3] = i;
  }
  std::mt19937_64 rng(seed_);
  std::vector<Tree::Entry> out(600);
  for (int t = 0; t < 300; t++) {
    uint64_t start = rng() % 31000;
    uint64_t end = start + rng() % 2000;
    size_t want = 1 + rng() % out.size();
    size_t n = t % 2 ? h.tree->ScanRange(start, end, std::span(out.data(), want))
                     : h.tree->Scan(start, std::span(out.data(), want));
    size_t i = 0;
    for (auto it = model.lower_bound(start); it != model.end() && i < want && (t % 2 == 0 || it->first <= end);
         ++it, ++i) {
      ASSERT_LT(i, n);
      ASSERT_EQ(out[i].first, it->first);
      ASSERT_EQ(out[i].second, it->second);
    }
    ASSERT_EQ(n, i);
  }
}

TEST_P(ConformanceTest, BulkLoadAtSeventyAndHundredPercentThenInserts) {
  for (double fill : {0.7, 1.0}) {
    auto h = Make();
    std::vector<Tree::InputEntry> input;
    std::map<uint64_t, uint64_t> model;
    for (uint64_t i = 0; i < 20000; i++) {
      input.push_back({i * 2, i});
      model[i * 2] = i;
    }
    Status s = h.tree->BulkLoad(std::span<const Tree::InputEntry>(input), fill);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectEqualsModel(*h.tree, model);
    if (factory_->capabilities & kCapBulkLoadFill) {
      double got = h.tree->Stats().leaf_fill;
      EXPECT_GT(got, fill - 0.15) << "bulk load ignored fill " << fill;
    }
    for (uint64_t i = 0; i < 5000; i++) {
      ASSERT_TRUE(*h.tree->Insert(i * 8 + 1, i));
      model[i * 8 + 1] = i;
    }
    ExpectEqualsModel(*h.tree, model);
  }
}

TEST_P(ConformanceTest, BulkLoadRejectsUnsortedInputAndBadFill) {
  auto h = Make();
  std::vector<Tree::InputEntry> input = {{5, 1}, {3, 2}};
  EXPECT_EQ(h.tree->BulkLoad(std::span<const Tree::InputEntry>(input), 1.0).code(),
            Status::Code::kInvalidArgument);
  auto h2 = Make();
  EXPECT_EQ(h2.tree->BulkLoad(std::span<const Tree::InputEntry>(), 0.0).code(), Status::Code::kInvalidArgument);
}

TEST_P(ConformanceTest, InvalidOptionsAreRejectedWithTheValidValues) {
  TreeOptions bad_size;
  bad_size.node_size = 100;
  auto r = CreateTree(*factory_, "", kPoolSize, bad_size, pool_opts_);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  TreeOptions bad_extra;
  bad_extra.extra["no-such-option"] = "1";
  auto r2 = CreateTree(*factory_, "", kPoolSize, bad_extra, pool_opts_);
  EXPECT_EQ(r2.status().code(), Status::Code::kInvalidArgument);
}

std::string RandomKey(std::mt19937_64& rng, size_t max_len) {
  // Mostly short keys with shared prefixes (to exercise prefix ties), some long.
  size_t len = rng() % 8 == 0 ? rng() % (max_len + 1) : rng() % 12;
  std::string k(len, '\0');
  for (auto& c : k) c = static_cast<char>(rng() % 4 == 0 ? rng() : 'a' + rng() % 3);
  return k;
}

TEST_P(ConformanceTest, ByteStringKeysOfZeroTo1024BytesMatchTheModel) {
  if (!factory_->create_bytes) GTEST_SKIP() << GetParam() << " has no byte-string keys";
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  auto h = CreateBytesTree(*factory_, "", kPoolSize, {}, pool_opts_);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(seed_);
  std::vector<std::string> pool_of_keys;
  for (int i = 0; i < 3000; i++) pool_of_keys.push_back(RandomKey(rng, 1024));
  ASSERT_NO_FATAL_FAILURE(RandomOps(*h->tree, model, rng, 15000,
            [&](std::mt19937_64& r) { return pool_of_keys[r() % pool_of_keys.size()]; }, 3000));
  ExpectEqualsModel(*h->tree, model);
  // The over-long-key contract of tree.h: refused by every mutator, never present.
  std::string too_long(kMaxKeyBytes + 1, 'x');
  EXPECT_EQ(h->tree->Insert(too_long, 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h->tree->Upsert(too_long, 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h->tree->Update(too_long, 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h->tree->Remove(too_long).status().code(), Status::Code::kInvalidArgument);
  uint64_t value = 0;
  EXPECT_FALSE(h->tree->Lookup(too_long, &value));
  ExpectEqualsModel(*h->tree, model);
}

// Keys that share long prefixes (longer than lbtree's 24 common bytes per
// inner node), keys that are prefixes of others, and keys that differ only
// in zero bytes or trailing zeros: inner nodes that compare a few bytes
// past a shared prefix (lbtree's heads) must still route every one.
TEST_P(ConformanceTest, ByteKeysSharingLongPrefixesAndZeroBytesMatchTheModel) {
  if (!factory_->create_bytes) GTEST_SKIP() << GetParam() << " has no byte-string keys";
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  std::mt19937_64 rng(seed_);
  const std::string shared = "tenant:0000000000:bucket:000000:";  // 32 bytes
  std::vector<std::string> pool_of_keys;
  for (size_t len = 0; len <= shared.size(); len += 3) pool_of_keys.push_back(shared.substr(0, len));
  for (int i = 0; i < 4000; i++) {
    std::string k = shared.substr(0, rng() % 4 == 0 ? 8 + rng() % 24 : shared.size());
    const size_t tail = rng() % 12;
    for (size_t j = 0; j < tail; j++) k.push_back(rng() % 3 == 0 ? '\0' : static_cast<char>('0' + rng() % 4));
    pool_of_keys.push_back(k);
  }
  for (int i = 0; i < 40; i++) pool_of_keys.push_back(pool_of_keys[rng() % pool_of_keys.size()] + std::string(1 + i % 3, '\0'));
  auto h = CreateBytesTree(*factory_, "", kPoolSize, {}, pool_opts_);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::map<std::string, uint64_t> model;
  ASSERT_NO_FATAL_FAILURE(RandomOps(*h->tree, model, rng, 20000,
            [&](std::mt19937_64& r) { return pool_of_keys[r() % pool_of_keys.size()]; }, 4000));
  ExpectEqualsModel(*h->tree, model);
}

// Groups of LookupForUpdate then UpdateHinted or UpdateHintedUnfenced
// (pmtree/tree.h), as the KV store's group commit uses them: up to 16 keys
// looked up, then inserts and removes of any keys (group members included)
// that move, split or empty the hinted leaves, sometimes two hints
// exchanged (each then names another key), then every key updated with its
// hint.  Each result must be Update's: true exactly when the key is present,
// and only that key's value changed.
template <class T, class M, class KeyGen>
void HintedUpdateGroups(T& tree, M& model, std::mt19937_64& rng, int groups, KeyGen key_of) {
  using Owned = typename M::key_type;
  for (int g = 0; g < groups; g++) {
    std::vector<Owned> keys;
    std::vector<typename T::Hint> hints;
    // Every third group looks its keys up at once (LookupManyForUpdate,
    // more keys than a design's lanes), the others one by one.
    const bool at_once = g % 3 == 2;
    for (int i = 0; i < (at_once ? 40 : 16); i++) {
      Owned k = key_of(rng);
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      keys.push_back(k);
    }
    hints.resize(keys.size());
    std::vector<uint64_t> got(keys.size(), 0);
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    if (at_once) {
      std::vector<typename T::Key> args(keys.begin(), keys.end());
      tree.LookupManyForUpdate(args, got.data(), found.get(), hints.data());
    } else {
      for (size_t i = 0; i < keys.size(); i++) found[i] = tree.LookupForUpdate(keys[i], &got[i], &hints[i]);
    }
    for (size_t i = 0; i < keys.size(); i++) {
      ASSERT_EQ(found[i], model.count(keys[i]) == 1) << "group " << g << ", key " << i;
      if (found[i]) {
        ASSERT_EQ(got[i], model[keys[i]]) << "group " << g << ", key " << i;
      }
    }
    const int between = rng() % 3 == 0 ? static_cast<int>(rng() % 48) : 0;
    for (int i = 0; i < between; i++) {
      Owned k = i % 4 == 0 ? keys[rng() % keys.size()] : key_of(rng);
      if (rng() % 2) {
        const uint64_t v = rng();
        auto r = tree.Insert(k, v);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        if (*r) model[k] = v;
      } else {
        auto r = tree.Remove(k);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        model.erase(k);
      }
    }
    if (keys.size() >= 2 && rng() % 4 == 0) std::swap(hints[0], hints[1]);
    std::vector<uint64_t> values(keys.size());
    for (uint64_t& v : values) v = rng();
    // Groups 4k+1 take the unfenced variant, groups 4k+3 runs of it
    // (UpdateHintedRunUnfenced over the keys found, as the KV store's group
    // commit calls it): the same results (their fence, the caller's,
    // matters only to a crash: kv_fence_crash_test).
    size_t i = 0;
    while (i < keys.size()) {
      if (g % 4 == 3) {
        size_t run = 0;
        while (i + run < keys.size() && model.count(keys[i + run])) run++;
        std::vector<typename T::Key> args(keys.begin() + i, keys.begin() + i + run);
        const size_t done = tree.UpdateHintedRunUnfenced(args, values.data() + i, hints.data() + i);
        ASSERT_LE(done, run) << "group " << g;
        for (size_t j = i; j < i + done; j++) model[keys[j]] = values[j];
        i += done;
        if (done > 0) continue;
      }
      auto r = g % 2 ? tree.UpdateHintedUnfenced(keys[i], values[i], hints[i])
                     : tree.UpdateHinted(keys[i], values[i], hints[i]);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      auto it = model.find(keys[i]);
      ASSERT_EQ(*r, it != model.end()) << "group " << g << ", key " << i;
      if (it != model.end()) it->second = values[i];
      i++;
    }
  }
}

TEST_P(ConformanceTest, HintedUpdatesAfterStaleOrExchangedHintsMatchTheModel) {
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  {
    auto h = Make();
    std::map<uint64_t, uint64_t> model;
    std::mt19937_64 rng(seed_);
    ASSERT_NO_FATAL_FAILURE(HintedUpdateGroups(*h.tree, model, rng, 600, [](std::mt19937_64& r) { return r() % 3000; }));
    ExpectEqualsModel(*h.tree, model);
  }
  if (!factory_->create_bytes) return;
  auto h = CreateBytesTree(*factory_, "", kPoolSize, {}, pool_opts_);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(seed_ + 1);
  std::vector<std::string> pool_of_keys;
  for (int i = 0; i < 3000; i++) pool_of_keys.push_back("user:" + RandomKey(rng, 24));
  ASSERT_NO_FATAL_FAILURE(HintedUpdateGroups(*h->tree, model, rng, 600,
            [&](std::mt19937_64& r) { return pool_of_keys[r() % pool_of_keys.size()]; }));
  ExpectEqualsModel(*h->tree, model);
}

// Checks LookupManyForUpdate(keys) against the model, key by key.
template <class T, class M>
void ExpectLookupMany(T& tree, const M& model, const std::vector<typename T::Key>& keys) {
  std::vector<uint64_t> got(keys.size(), 0);
  std::vector<typename T::Hint> hints(keys.size());
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  tree.LookupManyForUpdate(keys, got.data(), found.get(), hints.data());
  for (size_t i = 0; i < keys.size(); i++) {
    auto it = model.find(typename M::key_type(keys[i]));
    ASSERT_EQ(found[i], it != model.end()) << "key " << i << " of " << keys.size();
    if (found[i]) {
      ASSERT_EQ(got[i], it->second) << "key " << i << " of " << keys.size();
    }
  }
}

// LookupManyForUpdate gives every key what a LookupForUpdate of it gives:
// groups of 0 to 40 keys (a design may look up 16 at a time), present and
// absent keys, a key twice in a group, in a tree of several levels; byte
// keys sharing a long prefix, and one over the key limit (never found).
TEST_P(ConformanceTest, LookupManyForUpdateAgreesWithTheModelForEveryKey) {
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  {
    auto h = Make();
    std::map<uint64_t, uint64_t> model;
    std::mt19937_64 rng(seed_);
    for (int i = 0; i < 6000; i++) {
      const uint64_t k = rng() % 12000, v = rng();
      auto r = h.tree->Insert(k, v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (*r) model[k] = v;
    }
    for (size_t n = 0; n <= 40; n++) {
      std::vector<uint64_t> keys;
      for (size_t i = 0; i < n; i++) keys.push_back(i % 7 == 6 ? keys[rng() % i] : rng() % 12000);
      ASSERT_NO_FATAL_FAILURE(ExpectLookupMany(*h.tree, model, keys));
    }
  }
  if (!factory_->create_bytes) return;
  auto h = CreateBytesTree(*factory_, "", kPoolSize, {}, pool_opts_);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(seed_ + 1);
  const std::string prefix = "tenant:0000000000000000:user:";
  auto key_of = [&](uint64_t i) { return prefix + std::to_string(i); };
  for (int i = 0; i < 4000; i++) {
    const std::string k = key_of(rng() % 8000);
    const uint64_t v = rng();
    auto r = h->tree->Insert(k, v);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (*r) model[k] = v;
  }
  const std::string over(kMaxKeyBytes + 1, 't');
  for (size_t n = 0; n <= 40; n++) {
    std::vector<std::string> owned;
    for (size_t i = 0; i < n; i++) owned.push_back(i == 5 ? over : key_of(rng() % 8000));
    std::vector<std::string_view> keys(owned.begin(), owned.end());
    ASSERT_NO_FATAL_FAILURE(ExpectLookupMany(*h->tree, model, keys));
  }
}

// The rule of pmtree/tree.h: a bound longer than kMaxKeyBytes orders like
// any other string; no stored key equals it.
TEST_P(ConformanceTest, ScanBoundsLongerThanTheKeyLimitOrderLikeAnyString) {
  if (!factory_->create_bytes) GTEST_SKIP() << GetParam() << " has no byte-string keys";
  auto h = CreateBytesTree(*factory_, "", kPoolSize, {}, pool_opts_);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::map<std::string, uint64_t> model;
  const std::string longest = "m" + std::string(kMaxKeyBytes - 1, 'x');
  for (const std::string& k : {std::string("a"), std::string("m"), longest, std::string("my"), std::string("z")}) {
    ASSERT_TRUE(*h->tree->Insert(k, k.size()));
    model[k] = k.size();
  }
  const std::string over = longest + "x";  // kMaxKeyBytes + 1 bytes, between `longest` and "my"
  std::vector<BytesTree::Entry> out(8);
  size_t n = h->tree->Scan(over, std::span(out));
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(out[0].first, "my");
  EXPECT_EQ(out[1].first, "z");
  n = h->tree->ScanRange("b", over, std::span(out));
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(out[0].first, "m");
  EXPECT_EQ(out[1].first, longest);
  uint64_t v;
  EXPECT_FALSE(h->tree->Lookup(over, &v));
  EXPECT_EQ(h->tree->Update(over, 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h->tree->Remove(over).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h->tree->Insert(over, 1).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(h->tree->Upsert(over, 1).status().code(), Status::Code::kInvalidArgument);
  ExpectEqualsModel(*h->tree, model);
}

// Byte keys of mixed sizes (1..25 bytes, some near the limit) with removes,
// in a small pool: every OutOfSpace leaves a tree that verifies and matches
// the model (contract item 5).
TEST_P(ConformanceTest, AFullPoolOfMixedSizeByteKeysIsAStatusAndTheTreeStaysUsable) {
  if (!persistent() || !factory_->create_bytes) GTEST_SKIP() << GetParam() << " has no pooled byte-string keys";
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  auto h = CreateBytesTree(*factory_, "", kMinPoolSize, {}, pool_opts_);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto& tree = *h->tree;
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(seed_);
  int full = 0;
  for (int i = 0; i < 200000 && full < 40; i++) {
    if (rng() % 4 == 0 && !model.empty()) {
      auto it = model.lower_bound(RandomKey(rng, 25));
      if (it == model.end()) it = model.begin();
      auto r = tree.Remove(it->first);
      ASSERT_TRUE(r.ok() && *r) << "op " << i << ": " << (r.ok() ? "absent" : r.status().ToString());
      model.erase(it);
      continue;
    }
    std::string k(rng() % 16 == 0 ? kMaxKeyBytes - rng() % 200 : 1 + rng() % 25, '\0');
    for (auto& c : k) c = static_cast<char>('a' + rng() % 26);
    auto r = tree.Insert(k, i);
    if (!r.ok()) {
      ASSERT_TRUE(r.status().IsOutOfSpace()) << "op " << i << ": " << r.status().ToString();
      full++;
      Status s = tree.Verify();
      ASSERT_TRUE(s.ok()) << "after OutOfSpace at op " << i << ": " << s.ToString();
    } else if (*r) {
      model[k] = static_cast<uint64_t>(i);
    }
  }
  ASSERT_GT(full, 0) << "a 1 MiB pool never filled";
  ExpectEqualsModel(tree, model);
}

// Three rounds over one pool file: create it (round 0) or reopen it and
// compare with the model, then 5000 seeded random operations, then Close()
// (`close`) or drop the tree unclosed (a crash after the last acknowledged
// operation).  reopened(handle) adds a round's own checks after a reopen.
template <class Reopened>
void ConformanceTest::RoundsOverReopens(const std::string& path, bool close, std::map<uint64_t, uint64_t>& model,
                                        Reopened&& reopened) {
  std::mt19937_64 rng(seed_);
  for (int round = 0; round < 3; round++) {
    auto h = round == 0 ? CreateTree(*factory_, path, kFilePoolSize, {}, pool_opts_)
                        : OpenTree(path, factory_, {}, pool_opts_);
    ASSERT_TRUE(h.ok()) << "round " << round << ": " << h.status().ToString();
    if (round > 0) {
      ExpectEqualsModel(*h->tree, model);
      reopened(*h);
    }
    ASSERT_NO_FATAL_FAILURE(RandomOps(*h->tree, model, rng, 5000, [](std::mt19937_64& r) { return r() % 3000; }, 0));
    if (close) {
      ASSERT_TRUE(h->tree->Close().ok());
    }
  }
}

TEST_P(ConformanceTest, CloseAndReopenKeepsEverything) {
  if (!persistent()) GTEST_SKIP() << GetParam() << " is volatile";
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  const std::string& path = Track(testutil::TempPoolPath("close"));
  std::map<uint64_t, uint64_t> model;
  ASSERT_NO_FATAL_FAILURE(RoundsOverReopens(path, true, model, [](TreeHandle<Tree>&) {}));
  auto h = OpenTree(path, factory_, {}, pool_opts_);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->pool->clean_shutdown());
  ExpectEqualsModel(*h->tree, model);
}

TEST_P(ConformanceTest, CrashWithoutCloseRecoversEveryAcknowledgedOperation) {
  if (!persistent()) GTEST_SKIP() << GetParam() << " is volatile";
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  const std::string& path = Track(testutil::TempPoolPath("crash"));
  std::map<uint64_t, uint64_t> model;
  ASSERT_NO_FATAL_FAILURE(RoundsOverReopens(path, false, model, [](TreeHandle<Tree>& h) {
    EXPECT_FALSE(h.pool->clean_shutdown());
    EXPECT_EQ(PoolImpl::Of(*h.pool).allocator().bytes_in_use(), h.tree->Stats().pm_bytes)
        << "allocator disagrees with what the tree reaches after recovery";
  }));
}

TEST_P(ConformanceTest, OpeningWithTheWrongTreeOrKeyTypeFailsClearlyAndChangesNothing) {
  if (!persistent()) GTEST_SKIP() << GetParam() << " is volatile";
  const std::string& path = Track(testutil::TempPoolPath("wrong"));
  {
    auto h = CreateTree(*factory_, path, 4 * kMinPoolSize, {}, pool_opts_);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(*h->tree->Insert(7, 7));
    ASSERT_TRUE(h->tree->Close().ok());
  }
  const std::string before = Slurp(path);
  for (const TreeFactory& other : Registry()) {
    if (&other == factory_ || !other.persistent()) continue;
    auto h = OpenTree(path, &other, {}, pool_opts_);
    EXPECT_EQ(h.status().code(), Status::Code::kIncompatible) << other.name;
  }
  if (factory_->create_bytes) {
    auto h = OpenBytesTree(path, factory_, {}, pool_opts_);
    EXPECT_EQ(h.status().code(), Status::Code::kIncompatible);
  }
  EXPECT_TRUE(Slurp(path) == before) << "a refused open changed the pool file";
}

// A test-only variant (kCapTestOnly) recovers only pools it created: a pool
// of any other tree, relabelled with the variant's name (header checksum
// recomputed), is refused.
TEST_P(ConformanceTest, ATestOnlyVariantRefusesAPoolItDidNotCreate) {
  if (!persistent() || !factory_->test_only()) GTEST_SKIP() << GetParam() << " is not a test-only variant";
  for (const TreeFactory& other : Registry()) {
    if (&other == factory_ || !other.persistent()) continue;
    const std::string& path = Track(testutil::TempPoolPath(std::string(other.name)));
    {
      auto h = CreateTree(other, path, 4 * kMinPoolSize, {}, pool_opts_);
      ASSERT_TRUE(h.ok()) << other.name << ": " << h.status().ToString();
      ASSERT_TRUE(*h->tree->Insert(7, 7));
      ASSERT_TRUE(h->tree->Close().ok());
    }
    Relabel(path, factory_->name);
    auto h = OpenTree(path, factory_, {}, pool_opts_);
    EXPECT_FALSE(h.ok()) << "a pool of " << other.name << " relabelled " << factory_->name << " opened";
  }
}

TEST_P(ConformanceTest, AFullPoolIsAStatusAndTheTreeStaysUsable) {
  if (!persistent()) GTEST_SKIP() << GetParam() << " is volatile";
  auto made = CreateTree(*factory_, "", 4 * kMinPoolSize, {}, pool_opts_);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto& tree = *made->tree;
  std::map<uint64_t, uint64_t> model;
  bool full = false;
  for (uint64_t i = 0; i < 10'000'000 && !full; i++) {
    uint64_t k = (i * 0x9e3779b97f4a7c15ull) ^ (i >> 7);  // spread, distinct
    auto r = tree.Insert(k, i);
    if (!r.ok()) {
      ASSERT_TRUE(r.status().IsOutOfSpace()) << r.status().ToString();
      full = true;
    } else {
      ASSERT_TRUE(*r);
      model[k] = i;
    }
  }
  ASSERT_TRUE(full) << "a 4 MiB pool never filled";
  ExpectEqualsModel(tree, model);
  // Removes still work and make room again.
  std::vector<uint64_t> victims;
  for (const auto& [k, v] : model)
    if (victims.size() < model.size() / 2) victims.push_back(k);
  for (uint64_t k : victims) {
    auto r = tree.Remove(k);
    ASSERT_TRUE(r.ok() && *r) << r.status().ToString();
    model.erase(k);
  }
  ExpectEqualsModel(tree, model);
}

TEST_P(ConformanceTest, ConcurrentMixedWorkloadThenVerify) {
  if (!concurrent()) GTEST_SKIP() << GetParam() << " is not concurrent";
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed_));
  auto h = Make();
  constexpr int kWriters = 3;
  constexpr uint64_t kDomain = 6000;
  std::vector<std::map<uint64_t, uint64_t>> models(kWriters);
  std::atomic<bool> stop{false};
  std::atomic<int> reader_errors{0};
  // A reader checks that scans come back strictly ascending while writers run.
  std::thread reader([&] {
    std::vector<Tree::Entry> out(100);
    std::mt19937_64 rng(seed_ ^ 99);
    while (!stop.load()) {
      size_t n = h.tree->Scan(rng() % kDomain, std::span(out));
      for (size_t i = 1; i < n; i++)
        if (!(out[i - 1].first < out[i].first)) reader_errors++;
      uint64_t v;
      uint64_t k = rng() % kDomain;
      if (h.tree->Lookup(k, &v) && v % kWriters != k % kWriters) reader_errors++;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; t++) {
    writers.emplace_back([&, t] {
      // Each writer owns the keys k with k % kWriters == t, so its model is exact.
      std::mt19937_64 rng(seed_ + t);
      auto& model = models[t];
      for (int i = 0; i < 20000; i++) {
        uint64_t k = (rng() % (kDomain / kWriters)) * kWriters + t;
        uint64_t v = (rng() % 1000) * kWriters + t;  // v % kWriters names the owner
        int op = static_cast<int>(rng() % 4);
        bool present = model.count(k);
        if (op == 0) {
          auto r = h.tree->Insert(k, v);
          if (!r.ok() || *r == present) reader_errors++;
          if (!present) model[k] = v;
        } else if (op == 1) {
          auto r = h.tree->Upsert(k, v);
          if (!r.ok() || *r == present) reader_errors++;
          model[k] = v;
        } else if (op == 2) {
          auto r = h.tree->Remove(k);
          if (!r.ok() || *r != present) reader_errors++;
          model.erase(k);
        } else if (i % 2) {
          uint64_t got;
          bool found = h.tree->Lookup(k, &got);
          if (found != present || (found && got != model[k])) reader_errors++;
        } else {
          // A group of this writer's keys looked up at once, racing the
          // other writers' splits.
          std::vector<uint64_t> keys{k};
          for (int j = 1; j < 24; j++) keys.push_back((rng() % (kDomain / kWriters)) * kWriters + t);
          std::vector<uint64_t> got(keys.size(), 0);
          std::vector<Tree::Hint> hints(keys.size());
          std::unique_ptr<bool[]> found(new bool[keys.size()]);
          h.tree->LookupManyForUpdate(keys, got.data(), found.get(), hints.data());
          for (size_t j = 0; j < keys.size(); j++) {
            auto it = model.find(keys[j]);
            if (found[j] != (it != model.end()) || (found[j] && got[j] != it->second)) reader_errors++;
          }
        }
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(reader_errors.load(), 0);
  std::map<uint64_t, uint64_t> all;
  for (auto& m : models) all.insert(m.begin(), m.end());
  ExpectEqualsModel(*h.tree, all);
}

std::vector<std::string> AllTreeNames() {
  std::vector<std::string> names;
  for (const TreeFactory& f : Registry()) names.emplace_back(f.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(EveryTree, ConformanceTest, ::testing::ValuesIn(AllTreeNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace pmtree
