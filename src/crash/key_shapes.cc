// SPDX-License-Identifier: Apache-2.0
//
// Byte-string key workloads (explorer.h, KeyShape): the explorer's operations
// and checks speak 64-bit keys; for the byte-string shapes a Tree facade
// encodes each key order-preservingly and runs the tree's BytesTree.

#include <algorithm>
#include <string>
#include <vector>

#include "crash/explorer_internal.h"

namespace pmtree::crash {

std::string_view KeyShapeName(KeyShape k) {
  switch (k) {
    case KeyShape::kU64: return "u64";
    case KeyShape::kShort: return "short";
    case KeyShape::kLong: return "long";
    case KeyShape::kPrefix: return "prefix";
  }
  return "?";
}

Status ParseKeyShape(std::string_view text, KeyShape* k) {
  for (KeyShape c : {KeyShape::kU64, KeyShape::kShort, KeyShape::kLong, KeyShape::kPrefix}) {
    if (text == KeyShapeName(c)) {
      *k = c;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown key shape '" + std::string(text) + "'; valid: u64, short, long, prefix");
}

namespace {

constexpr std::string_view kSharedPrefix = "pmtree/crash/every-key-shares-this-40-b/";
static_assert(kSharedPrefix.size() == 40);
constexpr size_t kLongBytes = 128;

void PutBigEndian(uint64_t k, int bytes, std::string* out) {
  for (int i = bytes - 1; i >= 0; i--) out->push_back(static_cast<char>((k >> (8 * i)) & 0xff));
}

uint64_t GetBigEndian(std::string_view s) {
  uint64_t k = 0;
  for (char c : s) k = (k << 8) | static_cast<uint8_t>(c);
  return k;
}

std::string Encode(KeyShape shape, uint64_t k) {
  std::string s;
  switch (shape) {
    case KeyShape::kU64:
    case KeyShape::kShort: PutBigEndian(k, 3, &s); break;
    case KeyShape::kLong: {
      PutBigEndian(k, 8, &s);
      uint64_t x = k;
      while (s.size() < kLongBytes) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        s.push_back(static_cast<char>('a' + (x >> 59)));
      }
      break;
    }
    case KeyShape::kPrefix:
      s = kSharedPrefix;
      PutBigEndian(k, 4, &s);
      break;
  }
  return s;
}

// A key that is not the encoding of any explorer key: the scan reports this
// key, which no model holds, so the check names the damage.
constexpr uint64_t kUndecodable = UINT64_MAX;

uint64_t Decode(KeyShape shape, std::string_view s) {
  uint64_t k = kUndecodable;
  switch (shape) {
    case KeyShape::kU64:
    case KeyShape::kShort:
      if (s.size() == 3) k = GetBigEndian(s);
      break;
    case KeyShape::kLong:
      if (s.size() == kLongBytes) k = GetBigEndian(s.substr(0, 8));
      break;
    case KeyShape::kPrefix:
      if (s.size() == kSharedPrefix.size() + 4 && s.substr(0, kSharedPrefix.size()) == kSharedPrefix)
        k = GetBigEndian(s.substr(kSharedPrefix.size()));
      break;
  }
  return k != kUndecodable && Encode(shape, k) == s ? k : kUndecodable;
}

// The 64-bit-key face of a BytesTree.
class BytesAsU64 final : public Tree {
 public:
  BytesAsU64(std::unique_ptr<BytesTree> t, KeyShape shape) : t_(std::move(t)), shape_(shape) {}

  std::string_view name() const override { return t_->name(); }
  uint32_t capabilities() const override { return t_->capabilities(); }
  bool Lookup(uint64_t key, uint64_t* value) override { return t_->Lookup(Encode(shape_, key), value); }
  Result<bool> Insert(uint64_t key, uint64_t value) override { return t_->Insert(Encode(shape_, key), value); }
  Result<bool> Update(uint64_t key, uint64_t value) override { return t_->Update(Encode(shape_, key), value); }
  Result<bool> Upsert(uint64_t key, uint64_t value) override { return t_->Upsert(Encode(shape_, key), value); }
  Result<bool> Remove(uint64_t key) override { return t_->Remove(Encode(shape_, key)); }
  size_t Scan(uint64_t start, const uint64_t* end, std::span<Entry> out) override {
    const std::string s = Encode(shape_, start);
    const std::string e = end ? Encode(shape_, *end) : std::string();
    std::vector<BytesTree::Entry> buf(out.size());
    const std::string_view ev(e);
    const size_t n = t_->Scan(s, end ? &ev : nullptr, std::span<BytesTree::Entry>(buf));
    for (size_t i = 0; i < n; i++) out[i] = Entry{Decode(shape_, buf[i].first), buf[i].second};
    return n;
  }
  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override {
    std::vector<std::string> keys;
    keys.reserve(sorted.size());
    for (const auto& [k, v] : sorted) keys.push_back(Encode(shape_, k));
    std::vector<BytesTree::InputEntry> in;
    in.reserve(sorted.size());
    for (size_t i = 0; i < sorted.size(); i++) in.emplace_back(keys[i], sorted[i].second);
    return t_->BulkLoad(in, fill);
  }
  Status Verify() override { return t_->Verify(); }
  TreeStats Stats() override { return t_->Stats(); }
  Status Close() override { return t_->Close(); }

 private:
  std::unique_ptr<BytesTree> t_;
  KeyShape shape_;
};

Result<std::unique_ptr<Tree>> Wrap(Result<std::unique_ptr<BytesTree>> t, KeyShape shape) {
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tree>(std::make_unique<BytesAsU64>(std::move(*t), shape));
}

TreeOptions WithKeyKind(const TreeOptions& in, KeyShape shape) {
  TreeOptions o = in;
  o.key_kind = shape == KeyShape::kU64 ? KeyKind::kU64 : KeyKind::kBytes;
  return o;
}

}  // namespace

uint64_t PoolLayoutFlags(KeyShape shape) {
  return static_cast<uint64_t>(shape == KeyShape::kU64 ? KeyKind::kU64 : KeyKind::kBytes);
}

Status CheckKeyShape(const TreeFactory& f, KeyShape shape) {
  if (shape != KeyShape::kU64 && (f.create_bytes == nullptr || f.recover_bytes == nullptr))
    return Status::InvalidArgument(std::string(f.name) + " has no byte-string keys (key shape " +
                                   std::string(KeyShapeName(shape)) + ")");
  return Status::Ok();
}

Result<std::unique_ptr<Tree>> CreateFor(const TreeFactory& f, Pool* pool, const ExploreOptions& o) {
  const TreeOptions to = WithKeyKind(o.tree_options, o.keys);
  if (o.keys == KeyShape::kU64) return f.create(pool, to);
  return Wrap(f.create_bytes(pool, to), o.keys);
}

Result<std::unique_ptr<Tree>> RecoverFor(const TreeFactory& f, Pool* pool, const ExploreOptions& o) {
  const TreeOptions to = WithKeyKind(o.tree_options, o.keys);
  if (o.keys == KeyShape::kU64) return f.recover(pool, to);
  return Wrap(f.recover_bytes(pool, to), o.keys);
}

}  // namespace pmtree::crash
