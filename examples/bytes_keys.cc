// SPDX-License-Identifier: Apache-2.0
//
// bytes_keys: a tree keyed by byte strings (0..kMaxKeyBytes bytes, any byte
// values, ordered as std::string_view orders them).  Insert, upsert, update,
// remove, a prefix scan, and reopening the pool.
//   Usage: example_bytes_keys POOL_FILE   (e.g. /dev/shm/bytes.pool)

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "pmtree/registry.h"

namespace {

int Fail(const char* what, const pmtree::Status& s) {
  std::fprintf(stderr, "bytes_keys: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

int Check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "bytes_keys: check failed: %s\n", what);
  return ok ? 0 : 1;
}

// "user:0042": fixed-width numbers keep byte order equal to numeric order.
std::string UserKey(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "user:%04d", i);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s POOL_FILE\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  // Every tree with kCapBytesKeys offers byte-string keys; fptree is one.
  auto factory = pmtree::RequireTree("fptree");
  if (!factory.ok()) return Fail("choosing the tree", factory.status());

  pmtree::PoolOptions pool_options;
  pool_options.overwrite = true;
  {
    auto h = pmtree::CreateBytesTree(**factory, path, {}, pool_options);
    if (!h.ok()) return Fail("creating the tree", h.status());
    pmtree::BytesTree& tree = *h->tree;

    // Keys are std::string_view: the tree copies the bytes into the pool.
    for (int i = 0; i < 100; i++) {
      auto r = tree.Insert(UserKey(i), static_cast<uint64_t>(i));
      if (!r.ok()) return Fail("inserting", r.status());
    }
    // Keys are bytes, not C strings: an embedded zero is part of the key.
    const std::string binary("\x00\x01\x02", 3);
    if (auto r = tree.Insert(binary, 7); !r.ok()) return Fail("inserting a binary key", r.status());

    auto upserted = tree.Upsert(UserKey(5), 500);   // present: replaced, returns false
    auto updated = tree.Update("user:9999", 1);     // absent: nothing changed, returns false
    auto removed = tree.Remove(UserKey(6));         // present: removed, returns true
    for (const auto* r : {&upserted, &updated, &removed})
      if (!r->ok()) return Fail("mutating", r->status());
    int bad = Check(!*upserted && !*updated && *removed, "upsert/update/remove results");

    // Over-long keys are refused with InvalidArgument, never truncated.
    auto too_long = tree.Insert(std::string(pmtree::kMaxKeyBytes + 1, 'x'), 1);
    bad += Check(too_long.status().code() == pmtree::Status::Code::kInvalidArgument, "over-long key refused");

    // A prefix scan: every key in ["user:0000", "user:0009"].
    std::vector<pmtree::BytesTree::Entry> out(16);
    size_t n = tree.ScanRange("user:0000", "user:0009", out);
    std::printf("scan [user:0000, user:0009]: %zu entries:", n);
    for (size_t i = 0; i < n; i++) std::printf(" %s=%" PRIu64, out[i].first.c_str(), out[i].second);
    std::printf("\n");
    bad += Check(n == 9, "nine keys in the first ten (user:0006 removed)");
    if (bad != 0) return 1;
    if (pmtree::Status s = tree.Close(); !s.ok()) return Fail("closing", s);
  }

  // A pool of byte-string keys is reopened with OpenBytesTree (OpenTree
  // answers Incompatible: the pool records its key kind).
  auto wrong = pmtree::OpenTree(path, *factory, {});
  int bad = Check(wrong.status().code() == pmtree::Status::Code::kIncompatible, "OpenTree refuses byte keys");
  auto h = pmtree::OpenBytesTree(path, *factory, {});
  if (!h.ok()) return Fail("reopening", h.status());
  uint64_t value = 0;
  bad += Check(h->tree->Lookup(UserKey(5), &value) && value == 500, "user:0005 kept its upserted value");
  bad += Check(!h->tree->Lookup(UserKey(6), &value), "user:0006 stays removed");
  bad += Check(h->tree->Lookup(std::string_view("\x00\x01\x02", 3), &value) && value == 7, "binary key kept");
  if (pmtree::Status s = h->tree->Close(); !s.ok()) return Fail("closing", s);
  if (bad != 0) return 1;
  unlink(path.c_str());
  std::printf("bytes_keys: ok\n");
  return 0;
}
