// SPDX-License-Identifier: Apache-2.0
//
// Store::UpdateMany: group commit of read-modify-writes (a server's
// pipelined INCRs).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/kv_test_util.h"
#include "pmtree/counters.h"

namespace pmtree::kv {
namespace {

using Kind = Store::Current::Kind;

// A counter per key: each new value is computed from the one under the
// key's lock, and the group pays the fences of PutMany (records share one,
// lbtree's unfenced tree updates another, unlinks a third), not those of a
// Get and a Put per key.
TEST(KvUpdateManyTest, ComputesEachValueFromTheCurrentOneAndSharesThreeFences) {
  auto s = OpenAnonymous("lbtree");
  std::vector<std::string> keys;
  for (int i = 0; i < 16; i++) {
    keys.push_back(Key(i));
    ASSERT_TRUE(s->Put(keys[i], std::to_string(i)).ok());
  }
  counters::BeginOperation();
  PersistCounters before = counters::ThisThread();
  ASSERT_TRUE(s->Put(keys[0], "0").ok());
  const PersistCounters one = counters::ThisThread() - before;
  ASSERT_EQ(one.fences, 3u) << one.ToString();

  std::vector<std::string_view> group(keys.begin() + 1, keys.begin() + 9);
  std::vector<std::string> values;  // what compute returned, kept for the checks
  auto add_100 = [&](size_t i, const Store::Current& current, std::string_view* value) {
    EXPECT_EQ(current.kind, Kind::kValue) << i;
    EXPECT_EQ(current.value, std::to_string(i + 1)) << i;
    values.push_back(std::to_string(std::stoi(std::string(current.value)) + 100));
    *value = values.back();
    return true;
  };
  counters::BeginOperation();
  before = counters::ThisThread();
  size_t applied = 0;
  ASSERT_TRUE(s->UpdateMany(group, &applied, add_100).ok());
  const PersistCounters cost = counters::ThisThread() - before;
  EXPECT_EQ(applied, 8u);
  // The flushes of 8 puts; 3 fences instead of 8 x 3.
  EXPECT_EQ(cost.flushes, 8 * one.flushes) << cost.ToString();
  EXPECT_EQ(cost.fences, 3u) << cost.ToString();
  for (int i = 0; i < 16; i++) {
    std::string v;
    ASSERT_TRUE(*s->Get(keys[i], &v));
    EXPECT_EQ(v, std::to_string(i >= 1 && i < 9 ? i + 100 : i)) << keys[i];
  }
  EXPECT_EQ(s->Stats().versions_kept, 0u);
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();
}

// compute sees absent, deleted, plain and field-record keys as such, in
// order, and stops the group where it refuses: the keys before are applied,
// that one and the rest untouched.
TEST(KvUpdateManyTest, ShowsEachKindAndStopsWhereComputeRefuses) {
  auto s = OpenAnonymous("lbtree");
  ASSERT_TRUE(s->Put("plain", "p").ok());
  ASSERT_TRUE(s->PutFields("fields", {{"n", "v"}}).ok());
  ASSERT_TRUE(s->Put("gone", "g").ok());
  // A snapshot keeps the delete a tombstone head instead of a removal.
  const Snapshot* snap = s->GetSnapshot();
  ASSERT_TRUE(*s->Delete("gone"));
  std::vector<std::pair<Kind, std::string>> seen;
  std::string value;
  auto compute = [&](size_t i, const Store::Current& current, std::string_view* out) {
    seen.emplace_back(current.kind, std::string(current.value));
    if (i == 4) return false;
    value = "v" + std::to_string(i);
    *out = value;
    return true;
  };
  size_t applied = 0;
  ASSERT_TRUE(s->UpdateMany({"plain", "fields", "new", "gone", "stop", "after"}, &applied, compute).ok());
  EXPECT_EQ(applied, 4u);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0], std::make_pair(Kind::kValue, std::string("p")));
  EXPECT_EQ(seen[1].first, Kind::kFields);
  EXPECT_EQ(seen[2].first, Kind::kAbsent);
  EXPECT_EQ(seen[3].first, Kind::kAbsent);  // a tombstone head
  EXPECT_EQ(seen[4].first, Kind::kAbsent);
  std::string v;
  for (const auto& [k, want] : std::vector<std::pair<std::string, std::string>>{
           {"plain", "v0"}, {"fields", "v1"}, {"new", "v2"}, {"gone", "v3"}}) {
    ASSERT_TRUE(*s->Get(k, &v)) << k;
    EXPECT_EQ(v, want) << k;
  }
  EXPECT_FALSE(*s->Get("stop", &v));
  EXPECT_FALSE(*s->Get("after", &v));
  // The snapshot still reads the old values.
  ASSERT_TRUE(*s->Get("plain", &v, {.snapshot = snap}));
  EXPECT_EQ(v, "p");
  ASSERT_TRUE(*s->Get("gone", &v, {.snapshot = snap}));
  EXPECT_EQ(v, "g");
  s->ReleaseSnapshot(snap);
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();
}

TEST(KvUpdateManyTest, ATooLongValueStopsTheGroupWithInvalidArgument) {
  auto s = OpenAnonymous("lbtree");
  const std::string huge(kMaxValueBytes + 1, 'x');
  auto compute = [&](size_t i, const Store::Current&, std::string_view* out) {
    *out = i == 1 ? std::string_view(huge) : std::string_view("ok");
    return true;
  };
  size_t applied = 0;
  EXPECT_EQ(s->UpdateMany({"a", "b", "c"}, &applied, compute).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(applied, 1u);
  std::string v;
  EXPECT_TRUE(*s->Get("a", &v));
  EXPECT_FALSE(*s->Get("b", &v));
  // A repeated key is refused before anything is written.
  EXPECT_EQ(s->UpdateMany({"d", "d"}, &applied, compute).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(applied, 0u);
  EXPECT_FALSE(*s->Get("d", &v));
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();
}

}  // namespace
}  // namespace pmtree::kv
