// SPDX-License-Identifier: Apache-2.0
//
// WriteProfile (pmtree/write_profile.h): per-line counters in page-sized
// tables created on first touch, a fixed array of time-series windows, and
// the allocation events.

#include "pmtree/write_profile.h"

#include <algorithm>
#include <cassert>
#include <map>

namespace pmtree {

struct WriteProfile::PageLines {
  std::atomic<uint32_t> stores[kLinesPerPage] = {};
  std::atomic<uint32_t> flushes[kLinesPerPage] = {};
};

WriteProfile::WriteProfile(uint64_t window_ops)
    : window_ops_(window_ops == 0 ? 1 : window_ops),
      series_(new std::atomic<uint64_t>[kMaxWindows * kFields]()) {}

WriteProfile::~WriteProfile() {
  for (uint64_t i = 0; i < pages_; i++) delete table_[i].load(std::memory_order_relaxed);
}

void WriteProfile::Attach(const char* base, uint64_t pool_bytes) {
  const uint64_t pages = (pool_bytes + kPageBytes - 1) / kPageBytes;
  base_ = base;
  if (pages == pages_) return;  // a reopen of the same pool: keep counting
  for (uint64_t i = 0; i < pages_; i++) delete table_[i].load(std::memory_order_relaxed);
  pages_ = pages;
  table_.reset(new std::atomic<PageLines*>[pages]());
}

WriteProfile::PageLines* WriteProfile::PageFor(uint64_t page) {
  PageLines* t = table_[page].load(std::memory_order_acquire);
  if (t != nullptr) return t;
  auto* fresh = new PageLines;
  if (table_[page].compare_exchange_strong(t, fresh, std::memory_order_acq_rel)) return fresh;
  delete fresh;  // another thread created it first; t now holds it
  return t;
}

template <class F>
void WriteProfile::ForEachLine(const void* p, uint64_t n, F&& f) {
  if (n == 0 || base_ == nullptr) return;
  const auto off = static_cast<uint64_t>(static_cast<const char*>(p) - base_);
  const uint64_t first = off / kLineBytes, last = (off + n - 1) / kLineBytes;
  assert(last / kLinesPerPage < pages_);
  for (uint64_t line = first; line <= last; line++) {
    f(PageFor(line / kLinesPerPage), line % kLinesPerPage);
  }
}

void WriteProfile::AddWindow(Field field, uint64_t amount) {
  const uint64_t w = std::min(ops_.load(std::memory_order_relaxed) / window_ops_, kMaxWindows - 1);
  series_[w * kFields + field].fetch_add(amount, std::memory_order_relaxed);
}

void WriteProfile::RecordLines(const void* p, uint64_t n, bool flush) {
  uint64_t lines = 0;
  ForEachLine(p, n, [&](PageLines* t, uint64_t i) {
    (flush ? t->flushes : t->stores)[i].fetch_add(1, std::memory_order_relaxed);
    lines++;
  });
  AddWindow(flush ? kFlushedLines : kStores, lines);
}

void WriteProfile::RecordAllocation(uint64_t offset, uint64_t size) {
  AddWindow(kAllocations, 1);
  AddWindow(kAllocatedBytes, size);
  std::lock_guard<std::mutex> g(mu_);
  allocs_.push_back({offset, size, ops_.load(std::memory_order_relaxed)});
}

std::vector<WriteProfile::LineCount> WriteProfile::Lines() const {
  std::vector<LineCount> out;
  for (uint64_t page = 0; page < pages_; page++) {
    const PageLines* t = table_[page].load(std::memory_order_acquire);
    if (t == nullptr) continue;
    for (uint64_t i = 0; i < kLinesPerPage; i++) {
      const uint32_t s = t->stores[i].load(std::memory_order_relaxed);
      const uint32_t f = t->flushes[i].load(std::memory_order_relaxed);
      if (s != 0 || f != 0) out.push_back({page * kLinesPerPage + i, s, f});
    }
  }
  return out;
}

std::vector<WriteProfile::PageCount> WriteProfile::Pages() const {
  std::vector<PageCount> out;
  for (const LineCount& l : Lines()) {
    const uint64_t page = l.line / kLinesPerPage;
    if (out.empty() || out.back().page != page) out.push_back({page, 0, 0});
    out.back().stores += l.stores;
    out.back().flushes += l.flushes;
  }
  return out;
}

std::vector<WriteProfile::BlockCount> WriteProfile::Blocks() const {
  // Replay the allocations in order: a block replaces every earlier one it overlaps.
  std::map<uint64_t, Alloc> live;  // by offset
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const Alloc& a : allocs_) {
      auto it = live.lower_bound(a.offset);
      if (it != live.begin() && std::prev(it)->second.offset + std::prev(it)->second.size > a.offset) --it;
      while (it != live.end() && it->first < a.offset + a.size) it = live.erase(it);
      live.emplace(a.offset, a);
    }
  }
  const std::vector<LineCount> lines = Lines();
  std::vector<BlockCount> out;
  out.reserve(live.size());
  auto l = lines.begin();
  for (const auto& [offset, a] : live) {
    BlockCount b{a.offset, a.size, a.op, 0, 0};
    const uint64_t first = a.offset / kLineBytes, end = (a.offset + a.size + kLineBytes - 1) / kLineBytes;
    l = std::lower_bound(l, lines.end(), first, [](const LineCount& x, uint64_t v) { return x.line < v; });
    for (auto it = l; it != lines.end() && it->line < end; ++it) {
      b.stores += it->stores;
      b.flushes += it->flushes;
    }
    out.push_back(b);
  }
  return out;
}

std::vector<WriteProfile::Window> WriteProfile::Series() const {
  // Windows up to the last operation's, plus the one after it when writes
  // came after the last Tick (a close).
  const uint64_t done = ops();
  uint64_t n = std::max<uint64_t>(1, (done + window_ops_ - 1) / window_ops_);
  if (done % window_ops_ == 0 && done / window_ops_ < kMaxWindows) {
    for (int f = 0; f < kFields; f++)
      if (series_[(done / window_ops_) * kFields + f].load(std::memory_order_relaxed) != 0) {
        n = done / window_ops_ + 1;
        break;
      }
  }
  n = std::min(n, kMaxWindows);
  std::vector<Window> out(n);
  for (uint64_t w = 0; w < n; w++) {
    const std::atomic<uint64_t>* row = &series_[w * kFields];
    out[w] = {row[kStores].load(std::memory_order_relaxed), row[kFlushedLines].load(std::memory_order_relaxed),
              row[kAllocations].load(std::memory_order_relaxed),
              row[kAllocatedBytes].load(std::memory_order_relaxed)};
  }
  return out;
}

uint64_t WriteProfile::total_stores() const {
  uint64_t s = 0;
  for (const LineCount& l : Lines()) s += l.stores;
  return s;
}

uint64_t WriteProfile::total_flushes() const {
  uint64_t s = 0;
  for (const LineCount& l : Lines()) s += l.flushes;
  return s;
}

void WriteProfile::WriteJson(std::ostream& out, bool with_lines) const {
  const std::vector<PageCount> pages = Pages();
  uint64_t stores = 0, flushes = 0;
  for (const PageCount& p : pages) {
    stores += p.stores;
    flushes += p.flushes;
  }
  out << "{\"window_ops\":" << window_ops_ << ",\"ops\":" << ops() << ",\"line_bytes\":" << kLineBytes
      << ",\"page_bytes\":" << kPageBytes << ",\"totals\":{\"stores\":" << stores << ",\"flushed_lines\":" << flushes
      << ",\"pages\":" << pages.size() << "},\"pages\":[";
  for (size_t i = 0; i < pages.size(); i++)
    out << (i ? "," : "") << '[' << pages[i].page << ',' << pages[i].stores << ',' << pages[i].flushes << ']';
  out << "],\"blocks\":[";
  const std::vector<BlockCount> blocks = Blocks();
  for (size_t i = 0; i < blocks.size(); i++) {
    const BlockCount& b = blocks[i];
    out << (i ? "," : "") << '[' << b.offset << ',' << b.size << ',' << b.alloc_op << ',' << b.stores << ','
        << b.flushes << ']';
  }
  out << "],\"series\":[";
  const std::vector<Window> series = Series();
  for (size_t i = 0; i < series.size(); i++) {
    const Window& w = series[i];
    out << (i ? "," : "") << '[' << w.stores << ',' << w.flushed_lines << ',' << w.allocations << ','
        << w.allocated_bytes << ']';
  }
  out << ']';
  if (with_lines) {
    out << ",\"lines\":[";
    const std::vector<LineCount> lines = Lines();
    for (size_t i = 0; i < lines.size(); i++)
      out << (i ? "," : "") << '[' << lines[i].line << ',' << lines[i].stores << ',' << lines[i].flushes << ']';
    out << ']';
  }
  out << "}\n";
}

}  // namespace pmtree
