// SPDX-License-Identifier: Apache-2.0
//
// Store::Clear (a server's FLUSHALL): every key of every engine gone at once,
// the store going on with its timestamps, a refusal while a view is held,
// and the two crash points of its rename (docs/kv.md, "Clearing").

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "kv/kv_test_util.h"
#include "pmtree/registry.h"

namespace pmtree::kv {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Plain values, field records and deletes (tombstones a snapshot keeps).
void Fill(Store& s, int n, KvModel* m) {
  for (int i = 0; i < n; i++) {
    if (i % 3 == 0) {
      FieldMap f{{"a", Bytes(20 + i % 50, i)}, {"b", "x"}};
      ASSERT_TRUE(s.PutFields(Key(i), f).ok());
      if (m) (*m)[Key(i)] = ModelValue{true, {}, f};
    } else {
      ASSERT_TRUE(s.Put(Key(i), Bytes(i % 700, i)).ok());
      if (m) (*m)[Key(i)] = ModelValue{false, Bytes(i % 700, i), {}};
    }
  }
}

class KvClearTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KvClearTest, EveryKeyIsGoneTheStoreGoesOnAndAReopenAgrees) {
  TempPaths paths;
  const std::string path = paths.Make("store");
  auto s = Store::Open(path, SmallOptions(GetParam()));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  ASSERT_NO_FATAL_FAILURE(Fill(st, 600, nullptr));
  for (int i = 0; i < 600; i += 7) ASSERT_TRUE(st.Delete(Key(i)).ok());
  const uint64_t ts_before = st.Stats().commit_timestamp;
  const StoreStats empty_stats = [&] {
    auto e = OpenAnonymous(GetParam());
    return e ? e->Stats() : StoreStats{};
  }();

  ASSERT_TRUE(st.Clear().ok());
  EXPECT_FALSE(Exists(path + ".creating"));
  KvModel m;
  EXPECT_TRUE(Matches(st, m));
  std::string v;
  EXPECT_FALSE(*st.Get(Key(1), &v));
  StoreStats after = st.Stats();
  EXPECT_EQ(after.keys, 0u);
  EXPECT_EQ(after.record_bytes, empty_stats.record_bytes);  // the meta block alone
  EXPECT_EQ(after.tree_bytes, empty_stats.tree_bytes);
  EXPECT_EQ(after.commit_timestamp, ts_before);  // timestamps go on
  ASSERT_TRUE(st.Verify().ok()) << st.Verify().ToString();

  // The store goes on: writes, snapshots, transactions, a second clear.
  ASSERT_TRUE(st.Put("after", "1").ok());
  EXPECT_GT(st.Stats().commit_timestamp, ts_before);
  const Snapshot* snap = st.GetSnapshot();
  ASSERT_TRUE(st.Put("after", "2").ok());
  ASSERT_TRUE(*st.Get("after", &v, {snap}));
  EXPECT_EQ(v, "1");
  EXPECT_EQ(st.Clear().code(), Status::Code::kBusy);  // a snapshot is open: nothing changed
  st.ReleaseSnapshot(snap);
  ASSERT_NO_FATAL_FAILURE(Fill(st, 50, &m));
  m["after"] = ModelValue{false, "2", {}};
  auto txn = st.BeginTransaction();
  ASSERT_TRUE(txn->Put("txn", "t").ok());
  ASSERT_TRUE(txn->Commit().ok());
  m["txn"] = ModelValue{false, "t", {}};
  EXPECT_TRUE(Matches(st, m));
  ASSERT_TRUE(st.Verify().ok()) << st.Verify().ToString();
  ASSERT_TRUE(st.Close().ok());

  auto again = Store::Open(path, SmallOptions(GetParam()));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(Matches(**again, m));
  ASSERT_TRUE((*again)->Verify().ok());
  ASSERT_TRUE((*again)->Clear().ok());
  EXPECT_TRUE(Matches(**again, {}));
  ASSERT_TRUE((*again)->Close().ok());
}

TEST_P(KvClearTest, AnAnonymousStoreGetsANewPool) {
  auto s = OpenAnonymous(GetParam());
  ASSERT_NE(s, nullptr);
  ASSERT_NO_FATAL_FAILURE(Fill(*s, 200, nullptr));
  ASSERT_TRUE(s->Clear().ok());
  KvModel m;
  EXPECT_TRUE(Matches(*s, m));
  ASSERT_NO_FATAL_FAILURE(Fill(*s, 30, &m));
  EXPECT_TRUE(Matches(*s, m));
  ASSERT_TRUE(s->Verify().ok()) << s->Verify().ToString();
  ASSERT_TRUE(s->Close().ok());
}

INSTANTIATE_TEST_SUITE_P(AllEngines, KvClearTest, ::testing::ValuesIn(PersistentEngines()),
                         [](const auto& info) { return info.param; });

TEST(KvClearViewsTest, AnOpenIteratorOrTransactionRefusesAndChangesNothing) {
  TempPaths paths;
  const std::string path = paths.Make("store");
  auto s = Store::Open(path, SmallOptions("lbtree"));
  ASSERT_TRUE(s.ok());
  KvModel m;
  ASSERT_NO_FATAL_FAILURE(Fill(**s, 40, &m));
  {
    auto it = (*s)->NewIterator();
    it->SeekToFirst();
    Status c = (*s)->Clear();
    EXPECT_EQ(c.code(), Status::Code::kBusy) << c.ToString();
    EXPECT_NE(c.message().find("iterator"), std::string_view::npos);
    ASSERT_TRUE(it->Valid());
    EXPECT_EQ(it->key(), Key(0));
  }
  {
    auto txn = (*s)->BeginTransaction();
    EXPECT_EQ((*s)->Clear().code(), Status::Code::kBusy);
    txn->Abort();
  }
  EXPECT_FALSE(Exists(path + ".creating"));
  EXPECT_TRUE(Matches(**s, m));
  ASSERT_TRUE((*s)->Close().ok());
}

// A crash at each point of the rename protocol: before the rename the
// reopened store holds every key (and the open removes the leftover), after
// it none.  Then a crash after a finished clear keeps the writes made since.
TEST(KvClearCrashTest, BeforeTheRenameEveryKeyAfterItNone) {
  for (int at : {1, 2}) {
    SCOPED_TRACE("crash at step " + std::to_string(at));
    TempPaths paths;
    const std::string path = paths.Make("store" + std::to_string(at));
    KvModel m;
    {
      Options o = SmallOptions("lbtree");
      o.testing_clear_crash_at = at;
      auto s = Store::Open(path, o);
      ASSERT_TRUE(s.ok());
      ASSERT_NO_FATAL_FAILURE(Fill(**s, 300, &m));
      Status c = (*s)->Clear();
      EXPECT_EQ(c.code(), Status::Code::kInternal) << c.ToString();
      EXPECT_EQ(Exists(path + ".creating"), at == 1);
      // destroyed without Close: the crash
    }
    auto s = Store::Open(path, SmallOptions("lbtree"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_FALSE(Exists(path + ".creating"));
    EXPECT_TRUE(Matches(**s, at == 1 ? m : KvModel{}));
    ASSERT_TRUE((*s)->Verify().ok()) << (*s)->Verify().ToString();
    ASSERT_TRUE((*s)->Close().ok());
  }
  TempPaths paths;
  const std::string path = paths.Make("after");
  KvModel m;
  {
    auto s = Store::Open(path, SmallOptions("lbtree"));
    ASSERT_TRUE(s.ok());
    ASSERT_NO_FATAL_FAILURE(Fill(**s, 300, nullptr));
    ASSERT_TRUE((*s)->Clear().ok());
    ASSERT_TRUE((*s)->Put("kept", "1").ok());
    m["kept"] = ModelValue{false, "1", {}};
  }
  auto s = Store::Open(path, SmallOptions("lbtree"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->Stats().recovered);  // a crash, not a clean close
  EXPECT_TRUE(Matches(**s, m));
  ASSERT_TRUE((*s)->Verify().ok()) << (*s)->Verify().ToString();
  ASSERT_TRUE((*s)->Close().ok());
}

// The new tree has the node size the store was created with, not the
// engine's default (KvMeta::node_size), and the pool keeps its size.
TEST(KvClearNodeSizeTest, TheNewTreeKeepsTheNodeSizeAndThePoolItsSize) {
  TempPaths paths;
  const std::string path = paths.Make("store");
  Options o = SmallOptions("fastfair", 32ull << 20);
  o.tree_options.node_size = 1024;  // fastfair's default is 512
  {
    auto s = Store::Open(path, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_NO_FATAL_FAILURE(Fill(**s, 100, nullptr));
    ASSERT_TRUE((*s)->Close().ok());
  }
  auto s = Store::Open(path, SmallOptions("fastfair"));  // opened with the defaults
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Clear().ok());
  EXPECT_EQ((*s)->pool().size(), 32ull << 20);
  ASSERT_TRUE((*s)->Close().ok());
  s->reset();
  TreeOptions to;
  PoolOptions peek;
  peek.private_mapping = true;  // the file is not changed
  auto t = OpenBytesTree(path, FindTree("fastfair"), to, peek);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  double node_size = 0;
  for (const auto& [name, value] : t->tree->Stats().extra)
    if (name == "node_size") node_size = value;
  EXPECT_EQ(node_size, 1024);
}

}  // namespace
}  // namespace pmtree::kv
