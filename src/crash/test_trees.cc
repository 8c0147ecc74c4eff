// SPDX-License-Identifier: Apache-2.0

#include "crash/test_trees.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "pm/pool_impl.h"
#include "trees/common/upcast.h"

namespace pmtree::crash::testing {
namespace {

constexpr uint64_t kMetaMagic = 0x4154454d574f4301ull;
constexpr uint64_t kArrayMagic = 0x5941525241574f43ull;
CowArrayMode g_mode = CowArrayMode::kCorrect;

struct Meta {
  uint64_t magic;
  uint64_t array;
  uint64_t pad[6];
};
static_assert(sizeof(Meta) == 64);

struct ArrayHeader {
  uint64_t magic;
  uint64_t count;
};

uint64_t ArrayBytes(uint64_t n) { return 16 + 16 * n; }

class CowArray : public Tree {
 public:
  CowArray(PoolImpl* pool, uint64_t meta) : pool_(pool), meta_(meta) {}

  std::string_view name() const override { return "cowarray"; }
  uint32_t capabilities() const override { return kCapPersistent; }

  bool Lookup(uint64_t key, uint64_t* value) override {
    const Meta* m = pool_->At<Meta>(meta_);
    if (m->array == 0) return false;
    const auto* h = pool_->At<ArrayHeader>(m->array);
    const auto* e = reinterpret_cast<const uint64_t*>(h + 1);
    uint64_t lo = 0, hi = h->count;
    while (lo < hi) {
      uint64_t mid = (lo + hi) / 2;
      if (e[2 * mid] < key) lo = mid + 1;
      else hi = mid;
    }
    if (lo == h->count || e[2 * lo] != key) return false;
    *value = e[2 * lo + 1];
    return true;
  }
  Result<bool> Insert(uint64_t key, uint64_t value) override { return Change(key, value, 0); }
  Result<bool> Update(uint64_t key, uint64_t value) override { return Change(key, value, 1); }
  Result<bool> Upsert(uint64_t key, uint64_t value) override { return Change(key, value, 2); }
  Result<bool> Remove(uint64_t key) override { return Change(key, 0, 3); }

  size_t Scan(uint64_t start, const uint64_t* end, std::span<Entry> out) override {
    size_t n = 0;
    for (const auto& e : Load()) {
      if (n == out.size()) break;
      if (e.first < start) continue;
      if (end && e.first > *end) break;
      out[n++] = e;
    }
    return n;
  }

  Status Verify() override {
    const Meta* m = pool_->At<Meta>(meta_);
    if (m->magic != kMetaMagic) return Status::Corruption("cowarray meta: bad magic (invariant 1)");
    uint64_t bytes = Allocator::RoundUp(sizeof(Meta));
    if (m->array != 0) {
      PMTREE_RETURN_IF_ERROR(CheckArray(m->array));
      const auto* h = pool_->At<ArrayHeader>(m->array);
      const auto* e = reinterpret_cast<const uint64_t*>(h + 1);
      for (uint64_t i = 1; i < h->count; i++)
        if (e[2 * i] <= e[2 * (i - 1)]) return Status::Corruption("cowarray: keys not ascending (invariant 2)");
      bytes += Allocator::RoundUp(ArrayBytes(h->count));
    }
    if (bytes != pool_->allocator().bytes_in_use())
      return Status::Corruption("cowarray: reaches " + std::to_string(bytes) + " bytes, allocator has " +
                                std::to_string(pool_->allocator().bytes_in_use()) + " in use (invariant 3)");
    return Status::Ok();
  }

  TreeStats Stats() override {
    TreeStats s;
    const Meta* m = pool_->At<Meta>(meta_);
    s.pm_bytes = Allocator::RoundUp(sizeof(Meta));
    if (m->array != 0) {
      s.entries = pool_->At<ArrayHeader>(m->array)->count;
      s.pm_bytes += Allocator::RoundUp(ArrayBytes(s.entries));
    }
    s.height = 1;
    s.leaf_nodes = 1;
    return s;
  }

  Status Close() override { return pool_->Close(); }

  Status CheckArray(uint64_t off) const {
    if (!pool_->InHeap(off, 16)) return Status::Corruption("cowarray: array offset outside the heap");
    const auto* h = pool_->At<ArrayHeader>(off);
    if (h->magic != kArrayMagic) return Status::Corruption("cowarray: array at " + std::to_string(off) + ": bad magic");
    if (h->count > pool_->size() / 16 || !pool_->InHeap(off, ArrayBytes(h->count)))
      return Status::Corruption("cowarray: array count out of bounds");
    return Status::Ok();
  }

 private:
  std::vector<Entry> Load() const {
    std::vector<Entry> v;
    const Meta* m = pool_->At<Meta>(meta_);
    if (m->array == 0) return v;
    const auto* h = pool_->At<ArrayHeader>(m->array);
    const auto* e = reinterpret_cast<const uint64_t*>(h + 1);
    for (uint64_t i = 0; i < h->count; i++) v.emplace_back(e[2 * i], e[2 * i + 1]);
    return v;
  }

  // what: 0 insert, 1 update, 2 upsert, 3 remove.
  Result<bool> Change(uint64_t key, uint64_t value, int what) {
    auto v = Load();
    auto it = std::lower_bound(v.begin(), v.end(), key, [](const auto& e, uint64_t k) { return e.first < k; });
    const bool present = it != v.end() && it->first == key;
    bool result;
    switch (what) {
      case 0:
        if (present) return false;
        v.insert(it, {key, value});
        result = true;
        break;
      case 1:
        if (!present) return false;
        it->second = value;
        result = true;
        break;
      case 2:
        if (present) it->second = value;
        else v.insert(it, {key, value});
        result = !present;
        break;
      default:
        if (!present) return false;
        v.erase(it);
        result = true;
        break;
    }
    PMTREE_RETURN_IF_ERROR(Publish(v));
    return result;
  }

  Status Publish(const std::vector<Entry>& v) {
    Meta* m = pool_->At<Meta>(meta_);
    const uint64_t old = m->array;
    const uint64_t old_n = old ? pool_->At<ArrayHeader>(old)->count : 0;
    uint64_t block = 0;
    if (!v.empty()) {
      uint64_t scratch = 0;
      if (g_mode == CowArrayMode::kLeakOnFailure) {
        PMTREE_ASSIGN_OR_RETURN(scratch, pool_->allocator().Allocate(64));
      }
      PMTREE_ASSIGN_OR_RETURN(block, pool_->allocator().Allocate(ArrayBytes(v.size())));  // kLeakOnFailure: leaks
      if (scratch != 0) pool_->allocator().Free(scratch, 64);
      std::vector<uint64_t> words = {kArrayMagic, v.size()};
      for (const auto& e : v) {
        words.push_back(e.first);
        words.push_back(e.second);
      }
      if (g_mode == CowArrayMode::kCommitBeforeEntries) {
        pool_->Write(pool_->At<char>(block), words.data(), sizeof(ArrayHeader));
        // Persist the header on its own (kCommitBeforeEntries: the header's
        // line is clean, then dirty again, as the flaw needs).
        pool_->Persist(pool_->At<char>(block), sizeof(ArrayHeader));
        pool_->Write(pool_->At<char>(block) + sizeof(ArrayHeader), words.data() + 2, 8 * (words.size() - 2));
        // Deliberately no fence (kCommitBeforeEntries): the commit below can
        // become durable before these lines.
        pool_->Flush(pool_->At<char>(block) + sizeof(ArrayHeader), 8 * (words.size() - 2));
      } else {
        pool_->Write(pool_->At<char>(block), words.data(), 8 * words.size());
        // Persist the new array before the meta block names it, so a crash
        // never exposes a half-written array.
        if (g_mode != CowArrayMode::kDropArrayPersist) pool_->Persist(pool_->At<char>(block), 8 * words.size());
      }
    }
    if (g_mode == CowArrayMode::kRawStore) m->pad[0] = 1;  // deliberately bypasses the pool: must fault
    pool_->Store64(&m->array, block);
    // Persist the commit point: the update is durable when it returns.
    pool_->Persist(&m->array, 8);
    // Deliberately redundant (kExtraPersist): the line is clean already.
    if (g_mode == CowArrayMode::kExtraPersist) pool_->Persist(&m->array, 8);
    if (g_mode == CowArrayMode::kUnreadWord) {
      pool_->Store64(&m->pad[1], v.size());
      // Persist the count word before the update returns, so no store of the
      // update is still pending when it is acknowledged (kUnreadWord: nothing
      // reads the word, so losing it changes no recovered contents).
      pool_->Persist(&m->pad[1], 8);
    }
    if (old != 0) pool_->allocator().Free(old, ArrayBytes(old_n));
    if (g_mode == CowArrayMode::kFailAfterCommit) {
      PMTREE_ASSIGN_OR_RETURN(uint64_t after, pool_->allocator().Allocate(64));
      pool_->allocator().Free(after, 64);
    }
    return Status::Ok();
  }

  PoolImpl* pool_;
  uint64_t meta_;
};

Result<std::unique_ptr<Tree>> Create(PoolImpl* pool, const TreeOptions&) {
  PMTREE_ASSIGN_OR_RETURN(uint64_t meta, pool->allocator().Allocate(sizeof(Meta)));
  Meta init{};
  init.magic = kMetaMagic;
  pool->Write(pool->At<char>(meta), &init, sizeof(init));
  // Persist the meta block before the root slot names it.
  pool->Persist(pool->At<char>(meta), sizeof(init));
  pool->SetRoot(0, meta);
  return std::unique_ptr<Tree>(new CowArray(pool, meta));
}

Result<std::unique_ptr<Tree>> Recover(PoolImpl* pool, const TreeOptions&) {
  const uint64_t meta = pool->root(0);
  if (meta == 0) return Status::NotFound("cowarray: root slot 0 is empty (no tree in this pool)");
  if (!pool->InHeap(meta, sizeof(Meta))) return Status::Corruption("cowarray: meta offset outside the heap");
  const Meta* m = pool->At<Meta>(meta);
  if (m->magic != kMetaMagic) return Status::Corruption("cowarray: meta block has a bad magic");
  auto tree = std::make_unique<CowArray>(pool, meta);
  if (m->array != 0) PMTREE_RETURN_IF_ERROR(tree->CheckArray(m->array));
  if (g_mode == CowArrayMode::kCrashInRecovery && m->array != 0 && pool->At<ArrayHeader>(m->array)->count == 2) {
    // A wild pointer taken from "corrupt" data: the array's count.
    volatile uint64_t wild_address = pool->At<ArrayHeader>(m->array)->count * 8;
    (void)*reinterpret_cast<volatile uint64_t*>(wild_address);
  }
  if (!pool->clean_shutdown()) {
    pool->allocator().BeginRebuild();
    PMTREE_RETURN_IF_ERROR(pool->allocator().MarkUsed(meta, sizeof(Meta)));
    if (m->array != 0)
      PMTREE_RETURN_IF_ERROR(pool->allocator().MarkUsed(m->array, ArrayBytes(pool->At<ArrayHeader>(m->array)->count)));
    pool->allocator().EndRebuild();
  }
  return std::unique_ptr<Tree>(std::move(tree));
}

}  // namespace

void SetCowArrayMode(CowArrayMode mode) { g_mode = mode; }

const TreeFactory& CowArrayFactory() {
  static const TreeFactory f = {"cowarray", "copy-on-write sorted array (explorer tests only)",
                                kCapPersistent | kCapTestOnly, 0, "any",
                                &RegistryEntry<&Create>, &RegistryEntry<&Recover>, nullptr, nullptr};
  return f;
}

}  // namespace pmtree::crash::testing
