// SPDX-License-Identifier: Apache-2.0
//
// Per-thread persistence counters.  Each thread owns one Block, registered in
// a process-wide list on first use; when the thread exits, its counts are
// folded into a process-wide sum of exited threads and the block is freed.
// Only the owner writes its block; readers sum with relaxed loads, so a
// Snapshot taken while threads run is approximate but one taken after they
// join is exact.

#include "pmtree/counters.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

namespace pmtree {

PersistCounters& PersistCounters::operator+=(const PersistCounters& o) {
  flushes += o.flushes;
  fences += o.fences;
  lines += o.lines;
  blocks256 += o.blocks256;
  bytes += o.bytes;
  nt_stores += o.nt_stores;
  nt_bytes += o.nt_bytes;
  delay_ns += o.delay_ns;
  allocations += o.allocations;
  return *this;
}

PersistCounters PersistCounters::operator-(const PersistCounters& o) const {
  PersistCounters r;
  r.flushes = flushes - o.flushes;
  r.fences = fences - o.fences;
  r.lines = lines - o.lines;
  r.blocks256 = blocks256 - o.blocks256;
  r.bytes = bytes - o.bytes;
  r.nt_stores = nt_stores - o.nt_stores;
  r.nt_bytes = nt_bytes - o.nt_bytes;
  r.delay_ns = delay_ns - o.delay_ns;
  r.allocations = allocations - o.allocations;
  return r;
}

std::string PersistCounters::ToString() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "flushes=%llu fences=%llu lines=%llu blocks256=%llu bytes=%llu nt_stores=%llu nt_bytes=%llu "
                "delay_ns=%llu allocations=%llu",
                (unsigned long long)flushes, (unsigned long long)fences, (unsigned long long)lines,
                (unsigned long long)blocks256, (unsigned long long)bytes, (unsigned long long)nt_stores,
                (unsigned long long)nt_bytes, (unsigned long long)delay_ns,
                (unsigned long long)allocations);
  return buf;
}

namespace counters {
namespace {

constexpr int kWindow = 256;  // distinct lines remembered per operation

// The distinct lines (or 256 B blocks) of the current operation: an open-
// addressing set of at most kWindow members in 2 x kWindow slots, so a
// lookup probes a few slots however full it is (a linear list cost every
// flush a scan of the whole window once an operation -- or a caller that
// never calls BeginOperation, like a server -- had touched kWindow lines).
// Clearing bumps a generation instead of touching the slots.
class SeenSet {
 public:
  // True when `x` was not seen since the last Clear (recorded while fewer
  // than kWindow members are held; past that, unseen values count as new).
  bool Remember(uintptr_t x) {
    uint32_t i = static_cast<uint32_t>((x * 0x9e3779b97f4a7c15ull) >> (64 - kBits));
    for (;; i = (i + 1) & (kSlots - 1)) {
      if (gen_[i] != gen_now_) {
        if (n_ < kWindow) {
          gen_[i] = gen_now_;
          key_[i] = x;
          n_++;
        }
        return true;
      }
      if (key_[i] == x) return false;
    }
  }
  void Clear() {
    n_ = 0;
    if (++gen_now_ == 0) {  // wrapped: no stale slot may look current
      std::fill(std::begin(gen_), std::end(gen_), 0u);
      gen_now_ = 1;
    }
  }

 private:
  static constexpr int kBits = 9;
  static constexpr uint32_t kSlots = 1u << kBits;
  static_assert(kSlots >= 2 * kWindow, "at most half the slots are used, so probes stay short and end");
  uintptr_t key_[kSlots];
  uint32_t gen_[kSlots] = {};
  uint32_t gen_now_ = 1;
  int n_ = 0;
};

struct Block {
  std::atomic<uint64_t> flushes{0}, fences{0}, lines{0}, blocks256{0}, bytes{0}, nt_stores{0}, nt_bytes{0},
      delay_ns{0}, allocations{0};
  // Distinct lines / 256 B blocks seen in the current operation (owner only).
  SeenSet line_set;
  SeenSet block_set;
};

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<Block*>& Blocks() {
  static std::vector<Block*> blocks;
  return blocks;
}
PersistCounters& ExitedSum() {
  static PersistCounters sum;
  return sum;
}

PersistCounters Read(const Block& b);

// Owns this thread's block; folds it into ExitedSum() at thread exit.
struct Owner {
  Block* block;
  Owner() : block(new Block()) {
    std::lock_guard<std::mutex> g(RegistryMutex());
    Blocks().push_back(block);
  }
  ~Owner() {
    std::lock_guard<std::mutex> g(RegistryMutex());
    ExitedSum() += Read(*block);
    auto& v = Blocks();
    v.erase(std::find(v.begin(), v.end(), block));
    delete block;
  }
};

Block& Mine() {
  thread_local Owner owner;
  return *owner.block;
}

inline void Bump(std::atomic<uint64_t>& c, uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

PersistCounters Read(const Block& b) {
  PersistCounters c;
  c.flushes = b.flushes.load(std::memory_order_relaxed);
  c.fences = b.fences.load(std::memory_order_relaxed);
  c.lines = b.lines.load(std::memory_order_relaxed);
  c.blocks256 = b.blocks256.load(std::memory_order_relaxed);
  c.bytes = b.bytes.load(std::memory_order_relaxed);
  c.nt_stores = b.nt_stores.load(std::memory_order_relaxed);
  c.nt_bytes = b.nt_bytes.load(std::memory_order_relaxed);
  c.delay_ns = b.delay_ns.load(std::memory_order_relaxed);
  c.allocations = b.allocations.load(std::memory_order_relaxed);
  return c;
}

}  // namespace

PersistCounters Snapshot() {
  std::lock_guard<std::mutex> g(RegistryMutex());
  PersistCounters sum = ExitedSum();
  for (const Block* b : Blocks()) sum += Read(*b);
  return sum;
}

PersistCounters ThisThread() { return Read(Mine()); }

void BeginOperation() {
  Block& b = Mine();
  b.line_set.Clear();
  b.block_set.Clear();
}

void RecordFlushRange(const void* p, uint64_t n) {
  if (n == 0) return;
  Block& b = Mine();
  uintptr_t first = reinterpret_cast<uintptr_t>(p) >> 6;
  uintptr_t last = (reinterpret_cast<uintptr_t>(p) + n - 1) >> 6;
  uint64_t new_lines = 0, new_blocks = 0;
  for (uintptr_t line = first; line <= last; line++) {
    if (b.line_set.Remember(line)) new_lines++;
    if (b.block_set.Remember(line >> 2)) new_blocks++;
  }
  Bump(b.flushes, last - first + 1);
  Bump(b.lines, new_lines);
  Bump(b.blocks256, new_blocks);
  Bump(b.bytes, n);
}

void RecordFence() { Bump(Mine().fences, 1); }

void RecordNt(uint64_t n) {
  Block& b = Mine();
  Bump(b.nt_stores, 1);
  Bump(b.nt_bytes, n);
}

void RecordDelay(uint64_t ns) { Bump(Mine().delay_ns, ns); }

void RecordAllocation() { Bump(Mine().allocations, 1); }

}  // namespace counters
}  // namespace pmtree
