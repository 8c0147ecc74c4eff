// SPDX-License-Identifier: Apache-2.0
//
// The registry's public functions as an embedder calls them
// (include/pmtree/registry.h): finding a tree by name, creating with the
// default pool size, the error codes it promises, and recovering a tree in a
// pool the caller opened (an anonymous pool after a simulated crash).

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "pmtree/registry.h"

namespace pmtree {
namespace {

TEST(RegistryTest, RequireTreeFindsKnownNamesAndListsTheValidOnesOtherwise) {
  auto f = RequireTree("lbtree");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->name, "lbtree");
  EXPECT_EQ(*f, FindTree("lbtree"));
  auto bad = RequireTree("btree-from-mars");
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("btree-from-mars"), std::string_view::npos);
  EXPECT_NE(bad.status().message().find("lbtree"), std::string_view::npos) << bad.status().ToString();
}

TEST(RegistryTest, CreateTreeWithoutASizeUsesTheDefaultPoolSize) {
  auto h = CreateTree(**RequireTree("fptree"), "");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->pool->size(), kDefaultPoolSize);
  auto b = CreateBytesTree(**RequireTree("fptree"), "");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->pool->size(), kDefaultPoolSize);
}

// TreeOptions::key_kind is set by the function chosen, never by the caller.
TEST(RegistryTest, CreateTreeIgnoresTheCallersKeyKind) {
  TreeOptions o;
  o.key_kind = KeyKind::kBytes;
  auto h = CreateTree(**RequireTree("nvtree"), "", kMinPoolSize * 64, o);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->pool->layout_flags(), static_cast<uint64_t>(KeyKind::kU64));
}

TEST(RegistryTest, OpeningAVolatileTreeIsNotSupported) {
  EXPECT_EQ(OpenTree("/nonexistent", FindTree("volatile"), {}).status().code(), Status::Code::kNotSupported);
}

// An anonymous pool cannot be reopened by path; its bytes can, through
// Pool::OpenAnonymous and RecoverTree.  Destroying the handle without
// Close() is the simulated crash.
TEST(RegistryTest, RecoverTreeReopensAnAnonymousPoolAfterASimulatedCrash) {
  const TreeFactory& f = **RequireTree("lbtree");
  const uint64_t size = kMinPoolSize * 64;
  int fd = -1;
  {
    auto h = CreateTree(f, "", size, {});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    for (uint64_t k = 0; k < 500; k++) ASSERT_TRUE(*h->tree->Insert(k, k + 1));
    fd = dup(h->pool->memfd());
    ASSERT_GE(fd, 0);
  }  // no Close(): a crash
  auto pool = Pool::OpenAnonymous(fd, size, "");
  close(fd);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_FALSE((*pool)->clean_shutdown());
  auto h = RecoverTree(std::move(*pool), &f);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->tree->Stats().entries, 500u);
  uint64_t v = 0;
  EXPECT_TRUE(h->tree->Lookup(499, &v));
  EXPECT_EQ(v, 500u);
  EXPECT_TRUE(h->tree->Verify().ok());
}

TEST(RegistryTest, RecoverTreeAnswersIncompatibleForAnotherTreeOrKeyKind) {
  auto made = CreateBytesTree(**RequireTree("wbtree"), "", kMinPoolSize * 64, {});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const uint64_t size = made->pool->size();
  const int fd = dup(made->pool->memfd());
  ASSERT_TRUE(made->tree->Close().ok());
  made->tree.reset();
  made->pool.reset();
  auto reopen = [&] { return std::move(Pool::OpenAnonymous(fd, size, "")).value(); };
  auto other_tree = RecoverBytesTree(reopen(), FindTree("fptree"));
  EXPECT_EQ(other_tree.status().code(), Status::Code::kIncompatible) << other_tree.status().ToString();
  auto other_keys = RecoverTree(reopen(), FindTree("wbtree"));
  EXPECT_EQ(other_keys.status().code(), Status::Code::kIncompatible) << other_keys.status().ToString();
  auto right = RecoverBytesTree(reopen(), nullptr);
  EXPECT_TRUE(right.ok()) << right.status().ToString();
  close(fd);
}

}  // namespace
}  // namespace pmtree
