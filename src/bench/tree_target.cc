// SPDX-License-Identifier: Apache-2.0
//
// Target over a registered tree: a thin forwarder to Tree / BytesTree.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <span>

#include "bench/target.h"
#include "bench/workload.h"

namespace pmtree::bench {
namespace {

template <class K>
class TreeTarget final : public Target {
 public:
  using TreeT = BasicTree<K>;
  static constexpr bool kBytes = std::is_same_v<K, std::string_view>;

  TreeTarget(TreeHandle<TreeT> h, const TreeTargetConfig& c) : h_(std::move(h)), c_(c) {}
  ~TreeTarget() override {
    // Finish() not called (an error path): drop the tree, then the file.
    h_.tree.reset();
    h_.pool.reset();
    if (!finished_ && !c_.keep_pool && !c_.pool_path.empty()) unlink(c_.pool_path.c_str());
  }

  std::string label() const override { return std::string(h_.tree->name()); }
  bool concurrent() const override { return h_.tree->capabilities() & kCapConcurrent; }
  std::string backend() const override {
    if (!h_.pool) return "none (volatile tree)";
    std::string b(BackendName(h_.pool->backend_kind()));
    if (h_.pool->backend_kind() == BackendKind::kHardware)
      b += "(" + std::string(FlushInstructionName(h_.pool->flush_instruction())) + ")";
    if (h_.pool->write_latency_ns()) b += "+" + std::to_string(h_.pool->write_latency_ns()) + "ns";
    return b;
  }
  std::string describe() const override { return h_.pool ? h_.pool->Describe() : "no pool"; }
  bool counted() const override { return h_.pool != nullptr; }

  bool Lookup(uint64_t key, std::string_view bkey, uint64_t* value) override {
    return h_.tree->Lookup(Key(key, bkey), value);
  }
  Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) override {
    return h_.tree->Insert(Key(key, bkey), value);
  }
  Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) override {
    return h_.tree->Update(Key(key, bkey), value);
  }
  Result<bool> Remove(uint64_t key, std::string_view bkey) override { return h_.tree->Remove(Key(key, bkey)); }
  size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) override {
    thread_local std::vector<typename TreeT::Entry> buf;
    if (buf.size() < n) buf.resize(n);
    return h_.tree->Scan(Key(key, bkey), std::span(buf.data(), n));
  }

  Status Load(const std::vector<uint64_t>& sorted, bool bulk, double fill) override {
    std::string arena;
    std::vector<std::pair<size_t, size_t>> spans;  // bytes keys, in `sorted` order
    if constexpr (kBytes) {
      spans.reserve(sorted.size());
      for (uint64_t k : sorted) {
        size_t off = arena.size();
        AppendBytesKey(k, c_.key_min, c_.key_max, &arena);
        spans.emplace_back(off, arena.size() - off);
      }
    }
    auto key_at = [&](size_t i) -> K {
      if constexpr (kBytes)
        return std::string_view(arena).substr(spans[i].first, spans[i].second);
      else
        return sorted[i];
    };
    if (bulk) {
      std::vector<typename TreeT::InputEntry> in;
      in.reserve(sorted.size());
      for (size_t i = 0; i < sorted.size(); i++) in.emplace_back(key_at(i), ValueFor(sorted[i]));
      return h_.tree->BulkLoad(in, fill);
    }
    // Insert in a fixed pseudo-random order (a multiplicative permutation of
    // the ranks), so the load does not depend on --seed and is not sorted.
    size_t n = sorted.size();
    uint64_t step = n > 1 ? PermStep(n) : 1;
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++) {
      auto res = h_.tree->Insert(key_at(r), ValueFor(sorted[r]));
      if (!res.ok()) return res.status().Annotate("load, record " + std::to_string(i));
      r = (r + step) % n;
    }
    return Status::Ok();
  }

  Status Verify() override { return h_.tree->Verify(); }

  TargetStats Stats() override {
    TreeStats s = h_.tree->Stats();
    TargetStats t;
    t.pm_bytes = s.pm_bytes;
    t.dram_bytes = s.dram_bytes;
    t.height = s.height;
    t.entries = s.entries;
    t.leaf_nodes = s.leaf_nodes;
    t.inner_nodes = s.inner_nodes;
    t.leaf_fill = s.leaf_fill;
    t.extra = s.extra;
    return t;
  }

  void Abandon() override {
    finished_ = true;
    h_.tree.reset();
    h_.pool.reset();
  }

  Status Finish() override {
    finished_ = true;
    Status s = h_.tree ? h_.tree->Close() : Status::Ok();
    h_.tree.reset();
    h_.pool.reset();
    if (!c_.keep_pool && !c_.pool_path.empty()) unlink(c_.pool_path.c_str());
    return s;
  }

 private:
  // A step coprime with n near n * golden ratio: i -> i*step mod n is a permutation.
  static uint64_t PermStep(uint64_t n) {
    uint64_t s = static_cast<uint64_t>(static_cast<double>(n) * 0.6180339887) | 1;
    while (std::gcd(s, n) != 1) s++;
    return s % n == 0 ? 1 : s;
  }
  static K Key(uint64_t key, std::string_view bkey) {
    if constexpr (kBytes)
      return bkey;
    else
      return key;
  }

  TreeHandle<TreeT> h_;
  TreeTargetConfig c_;
  bool finished_ = false;
};

}  // namespace

Result<std::unique_ptr<Target>> OpenTreeTarget(const TreeFactory& f, const TreeTargetConfig& c) {
  TreeOptions to = c.tree_options;
  bool bytes = c.key_min != 0;
  if (bytes && !(f.capabilities & kCapBytesKeys))
    return Status::NotSupported(std::string(f.name) + " does not offer byte-string keys (--key-size)");
  to.key_kind = bytes ? KeyKind::kBytes : KeyKind::kU64;
  std::string path = f.persistent() ? c.pool_path : "";
  if (c.open_existing && !f.persistent())
    return Status::InvalidArgument("--skip-load: " + std::string(f.name) + " is volatile and has no pool to reopen");
  if (bytes) {
    auto h = c.open_existing ? OpenBytesTree(path, &f, to, c.pool_options)
                             : CreateBytesTree(f, path, c.pool_size, to, c.pool_options);
    if (!h.ok()) return h.status();
    return std::unique_ptr<Target>(new TreeTarget<std::string_view>(std::move(*h), c));
  }
  auto h = c.open_existing ? OpenTree(path, &f, to, c.pool_options) : CreateTree(f, path, c.pool_size, to, c.pool_options);
  if (!h.ok()) return h.status();
  return std::unique_ptr<Target>(new TreeTarget<uint64_t>(std::move(*h), c));
}

}  // namespace pmtree::bench
