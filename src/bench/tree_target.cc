// SPDX-License-Identifier: Apache-2.0
//
// Target over a registered tree: a forwarder to Tree / BytesTree, plus the
// value records of --value-size > 8.
//
// Value records.  The tree maps a key to the offset of an N-byte record in
// the same pool (a pooled tree) or to a heap block (the volatile tree, which
// has no pool).  Write order of an insert: allocate, write, persist the
// record, then the tree insert (the record is durable before anything
// references it).  An update writes a new record, updates the tree, then
// retires the old record; a remove retires it after the tree's remove.
// Retirement is epoch-based, and lookups read a record inside an epoch guard,
// so a concurrent lookup never reads a record that was freed and reused.
// The tree interface has no exchange (Update does not return the old value),
// so updates and removes of one key are serialised by a striped lock around
// their lookup + tree call; inserts and lookups take no lock.  That is what a
// KV store over this interface would have to do, and it is part of what is
// measured.  A record whose tree call failed or found the key present was
// never published and is freed at once.

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>
#include <span>

#include "bench/target.h"
#include "bench/workload.h"

namespace pmtree::bench {
namespace {

thread_local uint64_t tls_record_allocations = 0;

// Advances a write profile's operation clock when an operation ends, so the
// operation's writes fall into the window of its own index.
struct OpTick {
  WriteProfile* profile;
  ~OpTick() {
    if (profile != nullptr) profile->Tick();
  }
};

template <class K>
class TreeTarget final : public Target {
 public:
  using TreeT = BasicTree<K>;
  static constexpr bool kBytes = std::is_same_v<K, std::string_view>;

  TreeTarget(TreeHandle<TreeT> h, const TreeTargetConfig& c)
      : h_(std::move(h)),
        c_(c),
        records_(c.value_size > 8),
        record_bytes_(Allocator::RoundUp(c.value_size)),
        profile_(h_.pool ? PoolImpl::Of(*h_.pool).write_profile() : nullptr) {}
  ~TreeTarget() override {
    // Finish() not called (an error path): drop the tree, then the file.
    if (!finished_) FreeDramRecords();
    h_.tree.reset();
    h_.pool.reset();
    if (!finished_ && !c_.keep_pool && !c_.pool_path.empty()) unlink(c_.pool_path.c_str());
  }

  std::string label() const override { return std::string(h_.tree->name()); }
  bool concurrent() const override { return h_.tree->capabilities() & kCapConcurrent; }
  std::string backend() const override { return h_.pool ? PoolBackendLabel(*h_.pool) : "none (volatile tree)"; }
  std::string describe() const override { return h_.pool ? h_.pool->Describe() : "no pool"; }
  bool counted() const override { return h_.pool != nullptr; }

  PoolImpl* pool() override { return PoolImpl::Of(h_.pool.get()); }

  bool Lookup(uint64_t key, std::string_view bkey, uint64_t* value) override {
    OpTick tick(profile_);
    if (!records_) return h_.tree->Lookup(Key(key, bkey), value);
    // Copy the whole record out, as a reader of the value would.
    thread_local std::string buf;
    buf.resize(c_.value_size);
    if (!ReadRecord(Key(key, bkey), buf.data())) return false;
    memcpy(value, buf.data(), 8);
    return true;
  }
  bool LookupBytes(uint64_t key, std::string_view bkey, std::string* out) override {
    if (!records_) return Target::LookupBytes(key, bkey, out);
    out->resize(c_.value_size);
    return ReadRecord(Key(key, bkey), out->data());
  }
  Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) override {
    OpTick tick(profile_);
    if (!records_) return h_.tree->Insert(Key(key, bkey), value);
    return InsertRecord(Key(key, bkey), value);
  }
  Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) override {
    OpTick tick(profile_);
    if (!records_) return h_.tree->Update(Key(key, bkey), value);
    std::lock_guard<std::mutex> g(Stripe(key));
    uint64_t old;
    if (!h_.tree->Lookup(Key(key, bkey), &old)) return false;
    auto rec = NewRecord(value);
    if (!rec.ok()) return rec.status();
    auto r = h_.tree->Update(Key(key, bkey), *rec);
    if (!r.ok() || !*r) {
      FreeUnpublished(*rec);
      return r;
    }
    RetireRecord(old);  // unlinked by the durable update; readers may still hold it
    return r;
  }
  Result<bool> Remove(uint64_t key, std::string_view bkey) override {
    OpTick tick(profile_);
    if (!records_) return h_.tree->Remove(Key(key, bkey));
    std::lock_guard<std::mutex> g(Stripe(key));
    uint64_t old;
    if (!h_.tree->Lookup(Key(key, bkey), &old)) return false;
    auto r = h_.tree->Remove(Key(key, bkey));
    if (r.ok() && *r) RetireRecord(old);
    return r;
  }
  size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) override {
    OpTick tick(profile_);
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
      for (size_t i = 0; i < sorted.size(); i++) {
        uint64_t v = ValueFor(sorted[i]);
        if (records_) {
          auto rec = NewRecord(v);
          if (!rec.ok()) return rec.status().Annotate("load, record " + std::to_string(i));
          v = *rec;
        }
        in.emplace_back(key_at(i), v);
      }
      return h_.tree->BulkLoad(in, fill);
    }
    // Insert in a fixed pseudo-random order (a multiplicative permutation of
    // the ranks), so the load does not depend on --seed and is not sorted.
    size_t n = sorted.size();
    uint64_t step = n > 1 ? PermStep(n) : 1;
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++) {
      OpTick tick(profile_);
      auto res = records_ ? InsertRecord(key_at(r), ValueFor(sorted[r])) : h_.tree->Insert(key_at(r), ValueFor(sorted[r]));
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
    if (records_) {
      // One record per entry (updates and removes retire the old one).
      const double rec = static_cast<double>(s.entries * record_bytes_);
      if (h_.pool)
        t.pm_bytes += s.entries * record_bytes_;
      else
        t.dram_bytes += s.entries * record_bytes_;
      t.extra.emplace_back("value_record_bytes", rec);
    }
    return t;
  }

  void Abandon() override {
    finished_ = true;
    h_.tree.reset();
    h_.pool.reset();
  }

  Status Finish() override {
    finished_ = true;
    FreeDramRecords();
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
  // Allocates, writes and persists the record of value v; returns the tree
  // value that references it.
  Result<uint64_t> NewRecord(uint64_t v) {
    thread_local std::string buf;
    buf.resize(c_.value_size);
    FillValueBytes(v, c_.value_size, buf.data());
    if (!h_.pool) {
      char* p = new char[c_.value_size];
      memcpy(p, buf.data(), c_.value_size);
      return reinterpret_cast<uint64_t>(p);
    }
    auto off = pool()->allocator().Allocate(c_.value_size);
    if (!off.ok())
      return Status::OutOfSpace("value record of " + std::to_string(c_.value_size) +
                                " bytes (--value-size): " + std::string(off.status().message()) +
                                "; raise --pool-size");
    tls_record_allocations++;
    char* dst = pool()->template At<char>(*off);
    pool()->Write(dst, buf.data(), c_.value_size);
    // One flush per line of the record and one fence before the tree call
    // that references it: a crash after the tree's store must never leave a
    // durable reference to a record whose bytes are not yet durable.
    pool()->Persist(dst, c_.value_size);
    return *off;
  }
  Result<bool> InsertRecord(K key, uint64_t value) {
    auto rec = NewRecord(value);
    if (!rec.ok()) return rec.status();
    auto r = h_.tree->Insert(key, *rec);
    if (!r.ok() || !*r) FreeUnpublished(*rec);
    return r;
  }
  // The heap records of a tree without a pool die with it (a pooled tree's
  // records die with the pool).
  void FreeDramRecords() {
    if (!records_ || h_.pool || !h_.tree) return;
    std::vector<typename TreeT::Entry> buf(1024);
    typename TreeT::OwnedKey next{};
    for (;;) {
      size_t n = h_.tree->Scan(K(next), std::span(buf.data(), buf.size()));
      for (size_t i = 0; i < n; i++) delete[] reinterpret_cast<char*>(buf[i].second);
      if (n < buf.size()) break;
      // The smallest key above the last one returned.
      next = buf[n - 1].first;
      if constexpr (kBytes)
        next.push_back('\0');
      else
        next++;
    }
  }
  // A record no tree entry ever referenced: no reader can hold it.
  void FreeUnpublished(uint64_t ref) {
    if (h_.pool)
      pool()->allocator().Free(ref, c_.value_size);
    else
      delete[] reinterpret_cast<char*>(ref);
  }
  void RetireRecord(uint64_t ref) {
    if (h_.pool) {
      pool()->allocator().Retire(ref, c_.value_size);
    } else {
      char* p = reinterpret_cast<char*>(ref);
      dram_epochs_.Retire([p] { delete[] p; });
    }
  }
  // Looks `key` up and copies its record to out (value_size bytes), inside
  // an epoch guard so the record cannot be freed and reused meanwhile.
  bool ReadRecord(K key, char* out) {
    EpochManager& epochs = h_.pool ? pool()->epochs() : dram_epochs_;
    auto guard = epochs.Protect();
    uint64_t ref;
    if (!h_.tree->Lookup(key, &ref)) return false;
    const char* src = h_.pool ? pool()->template At<const char>(ref) : reinterpret_cast<const char*>(ref);
    memcpy(out, src, c_.value_size);
    return true;
  }
  std::mutex& Stripe(uint64_t key) { return stripes_[(key * 0x9e3779b97f4a7c15ull) >> (64 - kStripeBits)]; }

  static K Key(uint64_t key, std::string_view bkey) {
    if constexpr (kBytes)
      return bkey;
    else
      return key;
  }

  static constexpr int kStripeBits = 10;

  TreeHandle<TreeT> h_;
  TreeTargetConfig c_;
  const bool records_;
  const uint64_t record_bytes_;  // allocation size of one record
  bool finished_ = false;
  EpochManager dram_epochs_;  // records of a tree without a pool
  std::array<std::mutex, 1u << kStripeBits> stripes_;
  WriteProfile* profile_;  // the pool's write profile (--write-profile), or null
};

}  // namespace

void FillValueBytes(uint64_t v, uint32_t n, char* out) {
  memcpy(out, &v, std::min<uint32_t>(n, 8));
  // Word i (i >= 1) is v + i * golden ratio: cheap, and differs per value.
  uint64_t w = v;
  for (uint32_t off = 8; off < n; off += 8) {
    w += 0x9e3779b97f4a7c15ull;
    memcpy(out + off, &w, std::min<uint32_t>(n - off, 8));
  }
}

std::string ValueBytes(uint64_t v, uint32_t n) {
  std::string s(n, '\0');
  FillValueBytes(v, n, s.data());
  return s;
}

uint64_t ValueRecordAllocations() { return tls_record_allocations; }

std::string PoolBackendLabel(const Pool& pool) {
  std::string b(BackendName(pool.backend_kind()));
  if (pool.backend_kind() == BackendKind::kHardware)
    b += "(" + std::string(FlushInstructionName(pool.flush_instruction())) + ")";
  if (pool.write_latency_ns()) b += "+" + std::to_string(pool.write_latency_ns()) + "ns";
  return b;
}

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
