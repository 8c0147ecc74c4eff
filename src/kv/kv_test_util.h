// SPDX-License-Identifier: Apache-2.0
//
// Helpers shared by the kv tests: temporary store paths, small options,
// deterministic values, the replayable seed.

#ifndef PMTREE_KV_KV_TEST_UTIL_H_
#define PMTREE_KV_KV_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pmtree/kv.h"
#include "pmtree/registry.h"

namespace pmtree::kv {

// PMTREE_SEED=<n> replays a seeded test.
inline uint64_t TestSeed() {
  if (const char* s = std::getenv("PMTREE_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// Store files under /dev/shm named after the test, removed at scope end
// (with their ".creating" companions).
class TempPaths {
 public:
  ~TempPaths() {
    for (const auto& p : paths_) {
      unlink(p.c_str());
      unlink((p + ".creating").c_str());
    }
  }
  std::string Make(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "-" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    std::string p = "/dev/shm/pmtree-kv-" + std::to_string(getpid()) + "-" + name + "-" + tag;
    unlink(p.c_str());
    paths_.push_back(p);
    return p;
  }

 private:
  std::vector<std::string> paths_;
};

inline Options SmallOptions(const std::string& engine, uint64_t pool_size = 64ull << 20) {
  Options o;
  o.engine = engine;
  o.pool_size = pool_size;
  return o;
}

// An anonymous store (no file); fails the test when it cannot be made.
inline std::unique_ptr<Store> OpenAnonymous(const std::string& engine, uint64_t pool_size = 64ull << 20) {
  auto s = Store::Open("", SmallOptions(engine, pool_size));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// n deterministic bytes that depend on seed.
inline std::string Bytes(uint64_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

inline std::string Key(int i) {
  char buf[32];
  snprintf(buf, sizeof(buf), "key%08d", i);
  return buf;
}

// The engines the kv suites run over: every persistent, non-test-only tree
// with byte-string keys.
inline std::vector<std::string> PersistentEngines() {
  std::vector<std::string> out;
  for (const TreeFactory& f : Registry())
    if (f.persistent() && !f.test_only() && f.create_bytes != nullptr) out.emplace_back(f.name);
  return out;
}

// The kv tests' model of one key: a plain value or a field map.
struct ModelValue {
  bool is_fields = false;
  std::string value;
  FieldMap fields;
  bool operator==(const ModelValue& o) const {
    return is_fields == o.is_fields && (is_fields ? fields == o.fields : value == o.value);
  }
};
using KvModel = std::map<std::string, ModelValue, std::less<>>;

// True when the store holds exactly the model's keys, kinds and values.
inline bool Matches(Store& s, const KvModel& m) {
  auto it = s.NewIterator();
  auto mi = m.begin();
  for (it->SeekToFirst(); it->Valid(); it->Next(), ++mi) {
    if (mi == m.end() || it->key() != mi->first) return false;
    if (!(ModelValue{it->is_fields(), std::string(it->value()), it->fields()} == mi->second)) return false;
  }
  return it->status().ok() && mi == m.end();
}

}  // namespace pmtree::kv

#endif  // PMTREE_KV_KV_TEST_UTIL_H_
