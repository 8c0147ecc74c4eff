// SPDX-License-Identifier: Apache-2.0
//
// The API example of docs/kv.md, compiled and run.  The text between the
// example markers must equal the code block in docs/kv.md (checked below),
// so the documentation cannot drift from code that builds and works.

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "kv/kv_test_util.h"

namespace {

// [example]
pmtree::Status Example(const std::string& path) {
  using namespace pmtree;
  kv::Options options;
  options.engine = "lbtree";  // any persistent tree of the registry
  options.pool_size = 64 << 20;
  PMTREE_ASSIGN_OR_RETURN(auto store, kv::Store::Open(path, options));
  PMTREE_RETURN_IF_ERROR(store->Put("greeting", "hello"));
  PMTREE_RETURN_IF_ERROR(store->PutFields("user1", {{"name", "Ada"}, {"city", "London"}}));
  const kv::Snapshot* snap = store->GetSnapshot();  // a consistent read view
  PMTREE_RETURN_IF_ERROR(store->UpdateFields("user1", {{"city", "Paris"}}).status());
  auto txn = store->BeginTransaction();  // snapshot isolation
  PMTREE_RETURN_IF_ERROR(txn->Put("greeting", "bonjour"));
  PMTREE_RETURN_IF_ERROR(txn->Put("counter", "1"));
  PMTREE_RETURN_IF_ERROR(txn->Commit());  // atomic, durable; Busy on a conflict
  kv::FieldMap then;
  PMTREE_RETURN_IF_ERROR(store->GetFields("user1", {"city"}, &then, {snap}).status());
  if (then["city"] != "London") return Status::Internal("the snapshot moved");
  store->ReleaseSnapshot(snap);
  auto it = store->NewIterator();
  for (it->SeekToFirst(); it->Valid(); it->Next())  // counter, greeting, user1
    std::printf("%s\n", std::string(it->key()).c_str());
  PMTREE_RETURN_IF_ERROR(it->status());
  it.reset();  // iterators, snapshots and transactions end before Close
  return store->Close();
}
// [/example]

std::string ExampleSource() {
  std::ifstream self(PMTREE_KV_EXAMPLE_SOURCE);
  std::stringstream ss;
  ss << self.rdbuf();
  const std::string text = ss.str();
  const size_t a = text.find("// [example]\n"), b = text.find("// [/example]");
  return text.substr(a + 13, b - a - 13);
}

std::string DocBlock() {
  std::ifstream doc(PMTREE_KV_DOC);
  std::stringstream ss;
  ss << doc.rdbuf();
  const std::string text = ss.str();
  const std::string open = "```cpp\n";
  const size_t a = text.find("<!-- example: src/kv/kv_example_test.cc -->\n" + open);
  if (a == std::string::npos) return "";
  const size_t start = text.find(open, a) + open.size();
  return text.substr(start, text.find("```\n", start) - start);
}

TEST(KvExampleTest, TheDocumentedExampleRunsAndMatchesTheDoc) {
  pmtree::kv::TempPaths paths;
  const std::string path = paths.Make("example");
  pmtree::Status s = Example(path);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto store = pmtree::kv::Store::Open(path, pmtree::kv::SmallOptions("lbtree"));
  ASSERT_TRUE(store.ok());
  std::string v;
  ASSERT_TRUE(*(*store)->Get("greeting", &v));
  EXPECT_EQ(v, "bonjour");
  ASSERT_TRUE((*store)->Close().ok());
  EXPECT_EQ(DocBlock(), ExampleSource()) << "docs/kv.md's example differs from src/kv/kv_example_test.cc";
}

}  // namespace
