// SPDX-License-Identifier: Apache-2.0
//
// Record versions and field blocks: writing, sealing, reading, freeing
// (formats in layout.h; invariants K1-K8 in store_impl.h).

#include <algorithm>
#include <cstring>

#include "kv/store_impl.h"
#include "pm/prefetch.h"

namespace pmtree::kv {

namespace {

uint64_t BodyBytes(VersionKind kind, uint64_t length) {
  switch (kind) {
    case VersionKind::kValue: return length;
    case VersionKind::kFields: return 8 * length;
    case VersionKind::kTombstone: return 0;
  }
  return 0;
}

}  // namespace

Result<VersionView> Store::Impl::ReadVersion(uint64_t off) const {
  const PoolImpl& p = PoolImpl::Of(*h_.pool);
  if (!p.InHeap(off, sizeof(VersionHeader)) || off % kAllocGranule != 0)
    return Status::Corruption("kv: version offset " + std::to_string(off) + " is not an aligned block in the heap");
  const auto* h = p.At<VersionHeader>(off);
  VersionView v;
  v.off = off;
  v.kind = static_cast<VersionKind>(h->kind);
  v.ts = h->ts;
  v.prev = PoolImpl::Load64(&h->prev);
  v.length = h->length;
  if (h->magic != kVersionMagic ||
      (v.kind != VersionKind::kValue && v.kind != VersionKind::kFields && v.kind != VersionKind::kTombstone))
    return Status::Corruption("kv: version at offset " + std::to_string(off) + " has a bad magic or kind");
  if ((v.kind == VersionKind::kValue && v.length > kMaxValueBytes) ||
      (v.kind == VersionKind::kFields && v.length > kMaxFields))
    return Status::Corruption("kv: version at offset " + std::to_string(off) + " has length " +
                              std::to_string(v.length) + " beyond the limits");
  v.bytes = sizeof(VersionHeader) + BodyBytes(v.kind, v.length);
  if (!p.InHeap(off, v.bytes))
    return Status::Corruption("kv: version at offset " + std::to_string(off) + " runs past the heap");
  return v;
}

Result<uint64_t> Store::Impl::NewValueVersion(std::string_view value) {
  PMTREE_ASSIGN_OR_RETURN(uint64_t off,
                          alloc().Allocate(sizeof(VersionHeader) + value.size(), kAllocGranule, BlockOwner::kStore));
  if (!value.empty()) pool().Write(pool().base() + off + sizeof(VersionHeader), value.data(), value.size());
  return off;
}

Result<uint64_t> Store::Impl::NewTombstone() {
  return alloc().Allocate(sizeof(VersionHeader), kAllocGranule, BlockOwner::kStore);
}

uint64_t Store::Impl::FieldBlockBytes(uint64_t block) const {
  const auto* h = pool().At<FieldBlockHeader>(block);
  return sizeof(FieldBlockHeader) + h->name_len + h->value_len;
}

std::vector<uint64_t> Store::Impl::FieldBlocksOf(const VersionView& v) const {
  std::vector<uint64_t> out;
  if (v.kind != VersionKind::kFields) return out;
  const auto* table = reinterpret_cast<const uint64_t*>(pool().base() + v.off + sizeof(VersionHeader));
  out.assign(table, table + v.length);
  return out;
}

void Store::Impl::PrefetchFieldBlocks(const std::vector<uint64_t>& blocks) const {
  for (uint64_t b : blocks) {
    pmtree::Prefetch(pool().base() + b);
    pmtree::Prefetch(pool().base() + b + kAllocGranule);  // may pass the block's end: a hint, never a fault
  }
}

Result<uint64_t> Store::Impl::NewFieldVersion(uint64_t base, const FieldMap& fields, uint64_t* count) {
  // name -> block, starting from the base version's table (shared blocks, K8).
  std::map<std::string, uint64_t, std::less<>> table;
  if (base != 0) {
    PMTREE_ASSIGN_OR_RETURN(VersionView bv, ReadVersion(base));
    const std::vector<uint64_t> blocks = FieldBlocksOf(bv);
    PrefetchFieldBlocks(blocks);
    for (uint64_t b : blocks) {
      const auto* fh = pool().At<FieldBlockHeader>(b);
      table[std::string(pool().base() + b + sizeof(FieldBlockHeader), fh->name_len)] = b;
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> fresh;  // (block, bytes): freed on failure
  auto undo = [&] {
    for (auto [b, n] : fresh) alloc().Free(b, n, BlockOwner::kStore);
  };
  for (const auto& [name, value] : fields) {
    const uint64_t bytes = sizeof(FieldBlockHeader) + name.size() + value.size();
    auto b = alloc().Allocate(bytes, kAllocGranule, BlockOwner::kStore);
    if (!b.ok()) {
      undo();
      return b.status();
    }
    fresh.emplace_back(*b, bytes);
    char* dst = pool().base() + *b;
    const FieldBlockHeader fh{static_cast<uint32_t>(name.size()), 0, value.size()};
    pool().Write(dst, &fh, sizeof(fh));
    pool().Write(dst + sizeof(fh), name.data(), name.size());
    if (!value.empty()) pool().Write(dst + sizeof(fh) + name.size(), value.data(), value.size());
    // Flushed now, fenced by SealVersion's fence of the table: the block is
    // durable before the table (and so the tree) can name it (K1).
    pool().Flush(dst, bytes);
    table[name] = *b;
  }
  if (table.size() > kMaxFields) {
    undo();
    return Status::InvalidArgument("kv: a field record holds at most " + std::to_string(kMaxFields) + " fields");
  }
  std::vector<uint64_t> body;
  body.reserve(table.size());
  for (const auto& [name, b] : table) body.push_back(b);
  auto off = alloc().Allocate(sizeof(VersionHeader) + 8 * body.size(), kAllocGranule, BlockOwner::kStore);
  if (!off.ok()) {
    undo();
    return off.status();
  }
  if (!body.empty()) pool().Write(pool().base() + *off + sizeof(VersionHeader), body.data(), 8 * body.size());
  *count = body.size();
  return *off;
}

void Store::Impl::SealVersion(uint64_t off, VersionKind kind, uint64_t length, uint64_t ts, uint64_t prev,
                              bool fence) {
  VersionHeader h{};
  h.magic = kVersionMagic;
  h.kind = static_cast<uint8_t>(kind);
  h.ts = ts;
  h.prev = prev;
  h.length = length;
  char* dst = pool().base() + off;
  pool().Write(dst, &h, sizeof(h));
  // Persist header and body before anything names this version (K1): a crash
  // after the tree update must find a complete version with its ts (K2).
  if (!skip_record_persist_) pool().Flush(dst, sizeof(h) + BodyBytes(kind, length));
  if (fence) pool().Fence();
}

void Store::Impl::DropVersion(uint64_t off, std::unordered_set<uint64_t>* done, bool retire) {
  auto v = ReadVersion(off);
  if (!v.ok()) return;  // Verify reports it; never free what we cannot read
  auto release = [&](uint64_t o, uint64_t n) {
    if (retire)
      alloc().Retire(o, n, BlockOwner::kStore);
    else
      alloc().Free(o, n, BlockOwner::kStore);
  };
  for (uint64_t b : FieldBlocksOf(*v))
    if (done->insert(b).second) release(b, FieldBlockBytes(b));
  release(off, v->bytes);
}

Result<std::string_view> Store::Impl::ValueView(const VersionView& v) const {
  if (v.kind != VersionKind::kValue)
    return Status::InvalidArgument("kv: the key holds a field record, not a plain value (use GetFields)");
  return std::string_view(pool().base() + v.off + sizeof(VersionHeader), v.length);
}

Status Store::Impl::ReadValue(const VersionView& v, std::string* out) const {
  PMTREE_ASSIGN_OR_RETURN(std::string_view bytes, ValueView(v));
  out->assign(bytes);
  return Status::Ok();
}

Status Store::Impl::ViewFields(const VersionView& v, std::vector<FieldView>* out) const {
  if (v.kind != VersionKind::kFields)
    return Status::InvalidArgument("kv: the key holds a plain value, not a field record (use Get)");
  const char* base = pool().base();
  const std::vector<uint64_t> blocks = FieldBlocksOf(v);
  PrefetchFieldBlocks(blocks);
  out->clear();
  out->reserve(blocks.size());
  for (uint64_t b : blocks) {
    const auto* fh = pool().At<FieldBlockHeader>(b);
    const char* name = base + b + sizeof(FieldBlockHeader);
    out->emplace_back(std::string_view(name, fh->name_len), std::string_view(name + fh->name_len, fh->value_len));
  }
  return Status::Ok();
}

Status Store::Impl::ReadFields(const VersionView& v, const std::vector<std::string>& names, FieldMap* out) const {
  std::vector<FieldView> fields;
  PMTREE_RETURN_IF_ERROR(ViewFields(v, &fields));
  out->clear();
  for (const auto& [name, value] : fields) {
    if (!names.empty() && std::find(names.begin(), names.end(), name) == names.end()) continue;
    out->emplace_hint(out->end(), name, value);  // the table is in name order
  }
  return Status::Ok();
}

}  // namespace pmtree::kv
