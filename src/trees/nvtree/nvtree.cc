// SPDX-License-Identifier: Apache-2.0
//
// NV-Tree implementation.  Paper references: Algorithm 1 = FindImpl,
// Algorithm 2 = Mutate's append path, §4.4 = Smo, §4.5 = RebuildFromPln /
// RebuildFromLeaves, §4.6 = SaveImage / LoadImage, §5 = adaptive.cc and the
// profiling counters updated in Mutate/Lookup/Smo.

#include "trees/common/bulk_input.h"
#include "trees/common/partition_point.h"
#include "trees/nvtree/nvtree.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

#include "trees/common/upcast.h"
#include "trees/common/version_lock.h"

namespace pmtree::nvtree {

// ============================================================================
// DRAM structures
// ============================================================================

namespace {

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

// Per-LN DRAM state, one per live leaf, shared by every inner generation that
// indexes the leaf.  Retired through the pool's epochs when the leaf is.
struct LeafInfo {
  SpinLock lock;                       // writers of this LN: the paper's "light-weight lock"
  std::atomic<bool> dead{false};       // set (under lock) once the LN is unlinked
  std::atomic<uint64_t> visible{0};    // nElement, published after it is persistent
  std::atomic<uint64_t> n_reads{0};    // nReads_LN  (Table 2)
  std::atomic<uint64_t> n_writes{0};   // nWrites_LN (Table 2)
};

// Writers enter shared; a rebuild enters exclusive and waits for writers to
// drain.  A pending rebuild stops new writers (no starvation).  Readers never
// touch the gate.
class RebuildGate {
 public:
  void EnterWriter() {
    int spins = 0;
    for (;;) {
      uint64_t s = state_.load(std::memory_order_relaxed);
      if ((s & kPending) == 0 &&
          state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed))
        return;
      CpuRelax(spins);
    }
  }
  void ExitWriter() { state_.fetch_sub(1, std::memory_order_release); }
  // False when another thread's rebuild ran meanwhile (the caller retries).
  bool BeginRebuild() {
    int spins = 0;
    for (;;) {
      uint64_t s = state_.load(std::memory_order_relaxed);
      if (s & kPending) {
        while (state_.load(std::memory_order_acquire) & kPending) CpuRelax(spins);
        return false;
      }
      if (state_.compare_exchange_weak(s, s | kPending, std::memory_order_acquire, std::memory_order_relaxed)) break;
    }
    while ((state_.load(std::memory_order_acquire) & ~kPending) != 0) CpuRelax(spins);
    return true;
  }
  void EndRebuild() { state_.fetch_and(~kPending, std::memory_order_release); }

 private:
  static constexpr uint64_t kPending = 1ull << 63;
  std::atomic<uint64_t> state_{0};
};

// One LN pointer of a PLN with its separator: the LN holds the keys in
// (previous separator, sep].  Fields are atomics because readers load them
// under the PLN's sequence counter while a writer may change them.  With
// byte-string keys `sep` is a std::string* built just before it is stored:
// it is stored with release and loaded with acquire, so a reader that sees
// the pointer also sees the string (a reader dereferences it before its
// sequence check; ThreadSanitizer found the relaxed version racing).
struct PlnEntry {
  std::atomic<uint64_t> sep{0};
  std::atomic<uint64_t> ln{0};
  std::atomic<uint64_t> info{0};  // LeafInfo*
};
// The slack of the PLNs (Inner::tail) comes from calloc untouched: PlnEntry
// is an aggregate, hence an implicit-lifetime type, so calloc creates its
// objects implicitly, and all-zero bytes are a PlnEntry of three lock-free
// zeros (no padding) -- the state value-initialisation would have written.
static_assert(std::is_aggregate_v<PlnEntry>);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(PlnEntry) == 24);

// Reads entry `e`'s words into `out` (a Found or a Neighbor), inside a read
// under the PLN's sequence counter: `sep` with acquire (see above), the others
// relaxed (VersionLock::ReadOptimistic validates behind a fence).
template <class Out>
void LoadEntry(const PlnEntry& e, Out* out) {
  out->sep = e.sep.load(std::memory_order_acquire);
  out->ln = e.ln.load(std::memory_order_relaxed);
  out->info = reinterpret_cast<LeafInfo*>(e.info.load(std::memory_order_relaxed));
}

struct Pln {
  VersionLock version;  // sequence counter (version_lock.h, V1-V3); odd while a writer holds the PLN
  std::atomic<uint32_t> count{0};
  // Splits that passed the capacity check and have not yet added their entry.
  // Without it two splits of different LNs in one PLN could both see one free
  // slot, and the second would write past the PLN (count > capacity).
  std::atomic<uint32_t> reserved{0};
  uint32_t capacity = 0;
  // Slots [0, head) are Inner::head[head_base ...], slots [head, capacity)
  // Inner::tail[tail_base ...] (Inner::Slot).
  uint32_t head = 0;
  uint64_t head_base = 0;
  uint64_t tail_base = 0;
};

// One generation of the inner nodes: immutable INs (sorted keys, no
// pointers) and PLNs whose entries change under their sequence counters.
// Replaced wholesale by a rebuild.
struct Inner {
  uint32_t m = 0;        // a PLN has m keys / m+1 LN slots (before enlarging)
  uint32_t fanout = 0;   // 2m + 1 children per IN
  uint32_t in_keys = 0;  // 2m keys per IN
  std::vector<uint64_t> level_first;  // index of level d's first IN (root level 0)
  std::vector<uint64_t> in_key;       // IN i's keys at [i * in_keys, ...)
  std::vector<uint32_t> in_count;
  uint64_t n_pln = 0;
  std::unique_ptr<Pln[]> pln;
  // A PLN's slots: the ones in use when the array was built in `head`
  // (dense, written at once), its free slots in `tail`.  After a rebuild or
  // bulk load every PLN holds one LN in 65 slots (§4.5, 1 KB inner nodes):
  // in one array those 1,560-byte strides put a used slot on every page, and
  // an instant restart of 10M keys faulted in 400 MB; `tail` is calloc'ed
  // and its pages are touched only when a split first uses a free slot.
  std::unique_ptr<PlnEntry[]> head;
  struct FreeDeleter {
    void operator()(PlnEntry* p) const { std::free(p); }
  };
  std::unique_ptr<PlnEntry, FreeDeleter> tail;
  uint64_t n_slots = 0;
  uint64_t n_tail = 0;

  PlnEntry& Slot(const Pln& p, uint32_t i) {
    return i < p.head ? head[p.head_base + i] : tail.get()[p.tail_base + (i - p.head)];
  }
  const PlnEntry& Slot(const Pln& p, uint32_t i) const {
    return i < p.head ? head[p.head_base + i] : tail.get()[p.tail_base + (i - p.head)];
  }
  // Separator strings of byte-string keys (a separator is a std::string*).
  std::mutex str_mu;
  std::vector<std::unique_ptr<std::string>> strings;
  uint64_t string_bytes = 0;

  uint64_t AddString(std::string_view s) {
    auto p = std::make_unique<std::string>(s);
    uint64_t r = reinterpret_cast<uint64_t>(p.get());
    std::lock_guard<std::mutex> g(str_mu);
    string_bytes += sizeof(std::string) + s.size();
    strings.push_back(std::move(p));
    return r;
  }
  // Bytes of `tail` in pages the process has touched (mincore over the whole
  // pages inside it): what the free slots cost in DRAM so far.
  uint64_t TailResidentBytes() const {
    if (n_tail == 0) return 0;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(tail.get());
    const uintptr_t first = (begin + page - 1) / page * page;
    const uintptr_t last = (begin + n_tail * sizeof(PlnEntry)) / page * page;
    if (last <= first) return 0;
    std::vector<unsigned char> resident((last - first) / page);
    if (mincore(reinterpret_cast<void*>(first), last - first, resident.data()) != 0) return 0;
    uint64_t pages = 0;
    for (unsigned char r : resident) pages += r & 1;
    return pages * page;
  }
  uint64_t DramBytes() const {
    return sizeof(Inner) + in_key.size() * 8 + in_count.size() * 4 + n_pln * sizeof(Pln) +
           (n_slots - n_tail) * sizeof(PlnEntry) + TailResidentBytes() + string_bytes;
  }
};

namespace {

// Lays out PLN j with capacities[j] slots and counts[j] entries taken in
// order from seps/lns/infos, then the IN levels above them (Algorithm 1's
// numbering: IN q of a level has children q*(2m+1) .. q*(2m+1)+2m of the next).
void BuildInner(Inner* in, uint32_t m, const std::vector<uint32_t>& capacities, const std::vector<uint32_t>& counts,
                const std::vector<uint64_t>& seps, const std::vector<uint64_t>& lns,
                const std::vector<LeafInfo*>& infos) {
  in->m = m;
  in->fanout = 2 * m + 1;
  in->in_keys = 2 * m;
  in->n_pln = capacities.size();
  in->pln = std::make_unique<Pln[]>(in->n_pln);
  uint64_t slots = 0, used = 0;
  for (uint64_t j = 0; j < in->n_pln; j++) {
    slots += capacities[j];
    used += counts[j];
  }
  in->n_slots = slots;
  in->n_tail = slots - used;
  in->head = std::make_unique<PlnEntry[]>(used);
  if (in->n_tail > 0) {
    in->tail.reset(static_cast<PlnEntry*>(std::calloc(in->n_tail, sizeof(PlnEntry))));
    if (in->tail == nullptr) throw std::bad_alloc();
  }
  std::vector<uint64_t> child_max(in->n_pln);
  uint64_t tail_base = 0, e = 0;
  for (uint64_t j = 0; j < in->n_pln; j++) {
    Pln& p = in->pln[j];
    p.capacity = capacities[j];
    p.head = counts[j];
    p.head_base = e;
    p.tail_base = tail_base;
    p.count.store(counts[j], std::memory_order_relaxed);
    for (uint32_t i = 0; i < counts[j]; i++, e++) {
      PlnEntry& slot = in->Slot(p, i);
      slot.sep.store(seps[e], std::memory_order_release);
      slot.ln.store(lns[e], std::memory_order_relaxed);
      slot.info.store(reinterpret_cast<uint64_t>(infos[e]), std::memory_order_relaxed);
    }
    child_max[j] = seps[e - 1];
    tail_base += capacities[j] - counts[j];
  }
  // Level sizes, bottom-up, until one root.
  std::vector<uint64_t> sizes;  // bottom (just above the PLNs) first
  for (uint64_t c = in->n_pln; c > 1;) {
    c = (c + in->fanout - 1) / in->fanout;
    sizes.push_back(c);
  }
  std::reverse(sizes.begin(), sizes.end());
  uint64_t total = 0;
  in->level_first.clear();
  for (uint64_t s : sizes) {
    in->level_first.push_back(total);
    total += s;
  }
  in->in_key.assign(total * in->in_keys, 0);
  in->in_count.assign(total, 0);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; d--) {
    uint64_t n_children = child_max.size();
    std::vector<uint64_t> node_max(sizes[d]);
    for (uint64_t q = 0; q < sizes[d]; q++) {
      uint64_t first = q * in->fanout;
      uint64_t last = std::min<uint64_t>(first + in->fanout, n_children);  // exclusive
      uint64_t node = in->level_first[d] + q;
      uint32_t c = 0;
      for (uint64_t ch = first; ch + 1 < last; ch++) in->in_key[node * in->in_keys + c++] = child_max[ch];
      in->in_count[node] = c;
      node_max[q] = child_max[last - 1];
    }
    child_max.swap(node_max);
  }
}

MediaCost MeasureMediaCost(PoolImpl* pool) {
  MediaCost c;
  constexpr uint32_t kBytes = 4096;
  auto off = pool->allocator().Allocate(kBytes);
  if (!off.ok()) return c;
  char* p = pool->At<char>(*off);
  std::vector<char> buf(kBytes, 0x5a);
  std::vector<uint64_t> w, r;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 9; rep++) {
    buf[rep] = static_cast<char>(rep);
    uint64_t t0 = NowNs();
    pool->Write(p, buf.data(), kBytes);
    // Measurement only: the flush and fence are the cost being measured (T_w).
    pool->Persist(p, kBytes);
    uint64_t t1 = NowNs();
    uint64_t s = 0;
    for (uint32_t i = 0; i < kBytes; i += 64) s += *reinterpret_cast<const volatile uint64_t*>(p + i);
    uint64_t t2 = NowNs();
    sink = sink + s;
    w.push_back(t1 - t0);
    r.push_back(t2 - t1);
  }
  (void)sink;
  std::sort(w.begin(), w.end());
  std::sort(r.begin(), r.end());
  c.write_ns_per_line = std::max(1.0, static_cast<double>(w[w.size() / 2]) / (kBytes / 64));
  c.read_ns_per_line = std::max(0.05, static_cast<double>(r[r.size() / 2]) / (kBytes / 64));
  pool->allocator().Free(*off, kBytes);
  return c;
}

bool ParseDouble(const std::string& s, double* out) {
  try {
    size_t pos = 0;
    double v = std::stod(s, &pos);
    if (pos != s.size() || !(v > 0)) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

bool ParseSize(const std::string& s, uint32_t* out) {
  try {
    size_t pos = 0;
    unsigned long v = std::stoul(s, &pos);
    if (pos != s.size()) return false;
    *out = static_cast<uint32_t>(v);
    return v <= 1u << 20;
  } catch (...) {
    return false;
  }
}

bool ValidNodeSize(uint32_t s) { return s >= kMinNodeSize && s <= kMaxNodeSize && s % 64 == 0; }

std::string Hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

Status ParseOptions(const TreeOptions& in, Options* out) {
  Options o;
  if (in.node_size != 0) {
    if (!ValidNodeSize(in.node_size))
      return Status::InvalidArgument("nvtree: node size " + std::to_string(in.node_size) + " invalid; valid: " +
                                     kNodeSizeRule);
    o.node_size = in.node_size;
  }
  o.inner_node_size = o.node_size;
  for (const auto& [k, v] : in.extra) {
    if (k == "strategy") {
      if (!ParseStrategy(v, &o.strategy))
        return Status::InvalidArgument("nvtree: strategy '" + v +
                                       "' unknown; valid: off, conservative, aggressive, balanced");
      o.strategy_given = true;
    } else if (k == "media_read_ns") {
      if (!ParseDouble(v, &o.media_read_ns))
        return Status::InvalidArgument("nvtree: media_read_ns must be a positive number, got '" + v + "'");
    } else if (k == "media_write_ns") {
      if (!ParseDouble(v, &o.media_write_ns))
        return Status::InvalidArgument("nvtree: media_write_ns must be a positive number, got '" + v + "'");
    } else if (k == "inner_node_size") {
      uint32_t s = 0;
      if (!ParseSize(v, &s) || !ValidNodeSize(s))
        return Status::InvalidArgument("nvtree: inner_node_size '" + v + "' invalid; valid: " + kNodeSizeRule);
      o.inner_node_size = s;
    } else {
      return Status::InvalidArgument("nvtree: unknown option '" + k +
                                     "'; valid: strategy, media_read_ns, media_write_ns, inner_node_size");
    }
  }
  *out = o;
  return Status::Ok();
}

// ============================================================================
// Key / separator helpers
// ============================================================================
//
// A separator is an 8-byte DRAM value: the key itself (u64 keys; ~0 is +inf)
// or a pointer to a std::string owned by the Inner generation (byte-string
// keys; 0 is +inf).  Separators never reference leaf key blobs, which die
// with their keys.

template <KeyPolicy KP>
int NvTree<KP>::CompareSepKey(uint64_t sep, K key) const {
  if constexpr (KP::kInline) {
    return sep < key ? -1 : (sep > key ? 1 : 0);
  } else {
    if (sep == 0) return 1;
    int c = std::string_view(*reinterpret_cast<const std::string*>(sep)).compare(key);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
}

template <KeyPolicy KP>
int NvTree<KP>::CompareSeps(uint64_t a, uint64_t b) const {
  if constexpr (KP::kInline) {
    return a < b ? -1 : (a > b ? 1 : 0);
  } else {
    if (a == b) return 0;
    if (a == 0) return 1;
    if (b == 0) return -1;
    int c = reinterpret_cast<const std::string*>(a)->compare(*reinterpret_cast<const std::string*>(b));
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
}

template <KeyPolicy KP>
uint64_t NvTree<KP>::SepFromSlot(Inner* in, uint64_t slot) const {
  if constexpr (KP::kInline) {
    (void)in;
    return slot;
  } else {
    return in->AddString(keys_.View(slot));
  }
}

template <KeyPolicy KP>
uint64_t NvTree<KP>::CopySep(Inner* dst, uint64_t sep) const {
  if constexpr (KP::kInline) {
    (void)dst;
    return sep;
  } else {
    return sep == 0 ? 0 : dst->AddString(*reinterpret_cast<const std::string*>(sep));
  }
}

// ============================================================================
// Construction
// ============================================================================

template <KeyPolicy KP>
NvTree<KP>::NvTree(PoolImpl* pool, const Options& opt)
    : pool_(pool),
      keys_(pool),
      node_size_(opt.node_size),
      inner_node_size_(opt.inner_node_size),
      strategy_(opt.strategy),
      gate_(std::make_unique<RebuildGate>()),
      head_info_(std::make_unique<LeafInfo>()) {}

template <KeyPolicy KP>
NvTree<KP>::~NvTree() {
  Inner* in = inner_.load();
  if (in != nullptr) {
    for (uint64_t j = 0; j < in->n_pln; j++) {
      Pln& p = in->pln[j];
      for (uint32_t i = 0; i < p.count.load(); i++) delete reinterpret_cast<LeafInfo*>(in->Slot(p, i).info.load());
    }
    delete in;
  }
}

template <KeyPolicy KP>
uint32_t NvTree<KP>::capabilities() const {
  return kCapPersistent | kCapConcurrent | kCapBytesKeys | kCapInstantRestart | kCapBulkLoadFill;
}

template <KeyPolicy KP>
Result<std::unique_ptr<NvTree<KP>>> NvTree<KP>::Create(PoolImpl* pool, const TreeOptions& options) {
  Options opt;
  PMTREE_RETURN_IF_ERROR(ParseOptions(options, &opt));
  if (pool == nullptr) return Status::InvalidArgument("nvtree: needs a pool");
  if (pool->root(0) != 0) return Status::InvalidArgument("nvtree: create needs a fresh pool (root slot 0 is set)");
  std::unique_ptr<NvTree> t(new NvTree(pool, opt));

  // §5.4's T_r/T_w: from the options, or measured once here with the pool's
  // backend.  A custom backend (the crash explorer's tracer) has no
  // meaningful timing and the explorer needs determinism: fixed defaults.
  MediaCost cost;
  if (opt.media_read_ns <= 0 || opt.media_write_ns <= 0) {
    if (pool->backend_kind() != BackendKind::kCustom) cost = MeasureMediaCost(pool);
  }
  if (opt.media_read_ns > 0) cost.read_ns_per_line = opt.media_read_ns;
  if (opt.media_write_ns > 0) cost.write_ns_per_line = opt.media_write_ns;
  t->cost_ = cost;

  auto meta_off = pool->allocator().Allocate(sizeof(Meta));
  if (!meta_off.ok()) return meta_off.status().Annotate("nvtree: allocating the meta block");
  auto leaf = t->WriteNewLeaf(opt.node_size, nullptr, 0, 0);
  if (!leaf.ok()) {
    pool->allocator().Free(*meta_off, sizeof(Meta));
    return leaf.status().Annotate("nvtree: allocating the first leaf");
  }
  Meta m{};
  m.magic = kMetaMagic;
  m.head = *leaf;
  m.node_size = opt.node_size;
  m.inner_node_size = opt.inner_node_size;
  m.strategy = static_cast<uint32_t>(opt.strategy);
  m.key_kind = static_cast<uint32_t>(KP::kKind);
  m.read_ps_line = static_cast<uint64_t>(cost.read_ns_per_line * 1000);
  m.write_ps_line = static_cast<uint64_t>(cost.write_ns_per_line * 1000);
  m.leaves = 1;  // the first LN (invariant 11)
  Meta* meta = pool->At<Meta>(*meta_off);
  pool->Write(meta, &m, sizeof m);
  // Persist the first leaf (flushed by WriteNewLeaf) and the meta block
  // before the root slot names them, so a crash never exposes a root slot
  // pointing at unwritten bytes.
  pool->Persist(meta, sizeof m);
  pool->SetRoot(0, *meta_off);  // commit point of creation
  t->meta_ = meta;

  auto* info = new LeafInfo();
  Inner* in = new Inner();
  BuildInner(in, opt.inner_node_size / 16, {opt.inner_node_size / 16 + 1}, {1}, {kSepInf}, {*leaf}, {info});
  t->inner_.store(in, std::memory_order_release);
  t->n_leaves_ = 1;
  t->origin_ = Origin::kCreated;
  return t;
}

template <KeyPolicy KP>
Result<std::unique_ptr<NvTree<KP>>> NvTree<KP>::Recover(PoolImpl* pool, const TreeOptions& options) {
  Options opt;
  PMTREE_RETURN_IF_ERROR(ParseOptions(options, &opt));
  if (pool == nullptr) return Status::InvalidArgument("nvtree: needs a pool");
  uint64_t meta_off = pool->root(0);
  if (meta_off == 0) return Status::NotFound("nvtree: root slot 0 is empty (no tree was created in this pool)");
  if (!pool->InHeap(meta_off, sizeof(Meta)))
    return Status::Corruption("nvtree: meta block at offset " + Hex(meta_off) + " outside the heap");
  Meta* meta = pool->At<Meta>(meta_off);
  if (meta->magic == kMetaMagicV1)
    return Status::Incompatible("nvtree: the pool was made by an older format of nvtree (NVTREE1, the format "
                                "before the leaf count); this build cannot open it");
  if (meta->magic != kMetaMagic)
    return Status::Corruption("nvtree: meta block at offset " + Hex(meta_off) + ": bad magic");
  if (meta->key_kind != static_cast<uint32_t>(KP::kKind))
    return Status::Incompatible("nvtree: the pool holds a tree of another key kind");
  if (!ValidNodeSize(meta->node_size) || !ValidNodeSize(meta->inner_node_size) || meta->strategy > 3)
    return Status::Corruption("nvtree: meta block at offset " + Hex(meta_off) + ": bad node size or strategy");
  // The pool remembers the tree's sizes; the strategy and media costs are
  // run-time policy and may be overridden on open.
  opt.node_size = meta->node_size;
  opt.inner_node_size = meta->inner_node_size;
  if (!opt.strategy_given) opt.strategy = static_cast<Strategy>(meta->strategy);
  std::unique_ptr<NvTree> t(new NvTree(pool, opt));
  t->meta_ = meta;
  t->cost_.read_ns_per_line = opt.media_read_ns > 0 ? opt.media_read_ns : meta->read_ps_line / 1000.0;
  t->cost_.write_ns_per_line = opt.media_write_ns > 0 ? opt.media_write_ns : meta->write_ps_line / 1000.0;

  uint64_t t0 = NowNs();
  uint64_t image = meta->inner_image;
  bool loaded = false;
  if (image != 0 && pool->clean_shutdown()) {
    Status s = t->LoadImage(image);
    loaded = s.ok();
  }
  if (image != 0) {
    // The image is valid for exactly one open after the Close that wrote it:
    // forget it before anything changes a leaf, so a later crash can never
    // restart from a stale image.
    pool->Store64(&meta->inner_image, 0);
    pool->Persist(&meta->inner_image, 8);  // persist the forgetting before leaves change under the image
  }
  if (loaded) {
    // Rule 2 of the allocator: the pointer to the image is durably gone.
    auto* ih = pool->At<ImageHeader>(image);
    pool->allocator().Free(image, ih->bytes);
    t->origin_ = Origin::kInstantRestart;
  } else {
    PMTREE_RETURN_IF_ERROR(t->RebuildFromLeaves());
    t->origin_ = Origin::kRebuiltFromLeaves;
  }
  t->recovery_ns_ = NowNs() - t0;
  return t;
}

// ============================================================================
// Locating a leaf: Algorithm 1
// ============================================================================

template <KeyPolicy KP>
struct NvTree<KP>::Found {
  uint64_t pln = 0;
  uint32_t pos = 0;
  uint32_t count = 0;
  uint64_t sep = 0;
  uint64_t ln = 0;
  LeafInfo* info = nullptr;
  bool last = false;  // the right-most LN of the tree
};

// `ge(sep)` is monotone over the separators in order (false ... true); the
// LN chosen is the first whose separator satisfies it, else the last.
template <KeyPolicy KP>
template <class Pred>
typename NvTree<KP>::Found NvTree<KP>::FindImpl(Inner* in, Pred ge) const {
  uint64_t q = 0;  // index within the current level
  for (size_t d = 0; d < in->level_first.size(); d++) {
    uint64_t node = in->level_first[d] + q;
    const uint64_t* keys = &in->in_key[node * in->in_keys];
    const uint32_t lo = PartitionPoint(0, in->in_count[node], [&](uint32_t i) { return !ge(keys[i]); });
    q = q * in->fanout + lo;  // Algorithm 1 line 6, relative to the next level
  }
  const Pln& p = in->pln[q];
  Found f = p.version.ReadOptimistic([&]() -> std::optional<Found> {
    uint32_t c = p.count.load(std::memory_order_relaxed);
    if (c == 0 || c > p.capacity) return std::nullopt;  // a writer is mid-way
    uint32_t lo = PartitionPoint(0, c, [&](uint32_t i) {
      return !ge(in->Slot(p, i).sep.load(std::memory_order_acquire));
    });
    if (lo == c) lo = c - 1;
    Found r;
    r.pos = lo;
    r.count = c;
    LoadEntry(in->Slot(p, lo), &r);
    return r;
  });
  f.pln = q;
  f.last = f.pln + 1 == in->n_pln && f.pos + 1 == f.count;
  return f;
}

template <KeyPolicy KP>
typename NvTree<KP>::Found NvTree<KP>::Find(Inner* in, K key) const {
  return FindImpl(in, [&](uint64_t sep) { return CompareSepKey(sep, key) >= 0; });
}

template <KeyPolicy KP>
typename NvTree<KP>::Found NvTree<KP>::FindAfter(Inner* in, uint64_t sep) const {
  return FindImpl(in, [&](uint64_t s) { return CompareSeps(s, sep) > 0; });
}

// Reads entry `pos` of PLN `pln` (pos -1: its last entry); false when absent.
template <KeyPolicy KP>
bool NvTree<KP>::ReadEntry(Inner* in, uint64_t pln, int64_t pos, uint64_t* sep, uint64_t* ln,
                           LeafInfo** info) const {
  const Pln& p = in->pln[pln];
  Neighbor e = p.version.ReadOptimistic([&]() -> std::optional<Neighbor> {
    uint32_t c = p.count.load(std::memory_order_relaxed);
    int64_t i = pos < 0 ? static_cast<int64_t>(c) - 1 : pos;
    Neighbor r;  // has == false: absent
    if (i >= 0 && i < static_cast<int64_t>(c) && c <= p.capacity) {
      r.has = true;
      LoadEntry(in->Slot(p, static_cast<uint32_t>(i)), &r);
    }
    return r;
  });
  if (e.has) {
    *sep = e.sep;
    *ln = e.ln;
    *info = e.info;
  }
  return e.has;
}

template <KeyPolicy KP>
bool NvTree<KP>::Neighbors(Inner* in, uint64_t pln, uint64_t ln, Neighbor* left, Neighbor* right) const {
  const Pln& p = in->pln[pln];
  struct Read {
    bool found = false;
    uint32_t pos = 0;
    Neighbor left, right;
  };
  Read r = p.version.ReadOptimistic([&]() -> std::optional<Read> {
    Read x;
    uint32_t c = p.count.load(std::memory_order_relaxed);
    if (c <= p.capacity) {
      while (x.pos < c && in->Slot(p, x.pos).ln.load(std::memory_order_relaxed) != ln) x.pos++;
      x.found = x.pos < c;
    }
    x.left.has = x.found && x.pos > 0;
    if (x.left.has) LoadEntry(in->Slot(p, x.pos - 1), &x.left);
    x.right.has = x.found && x.pos + 1 < c;
    if (x.right.has) LoadEntry(in->Slot(p, x.pos + 1), &x.right);
    return x;
  });
  *left = r.left;
  *right = r.right;
  if (r.found && r.pos == 0 && pln > 0) {
    // Entries never move between PLNs, so the previous PLN's last LN is left
    // of `ln` whatever happens to it meanwhile.
    left->has = ReadEntry(in, pln - 1, -1, &left->sep, &left->ln, &left->info);
  }
  return r.found;
}

// ============================================================================
// Leaf contents
// ============================================================================

template <KeyPolicy KP>
int64_t NvTree<KP>::FindLatest(LeafHeader* h, uint64_t n, K key) const {
  const LnElement* e = LeafElements(h);
  for (int64_t i = static_cast<int64_t>(n) - 1; i >= 0; i--) {
    if (keys_.Equal(e[i].key, key)) return i;
  }
  return -1;
}

// Elements are appended in time order, so a key's latest element decides its
// state: POSITIVE = live with that value; NEGATIVE = cancelled (deleted).
// This is the paper's "a NEGATIVE and a POSITIVE with the same key and value
// are both ignored", given invariant 5 (a NEGATIVE always cancels the live
// POSITIVE before it).
template <KeyPolicy KP>
void NvTree<KP>::CollectLive(LeafHeader* h, uint64_t n, std::vector<std::pair<uint64_t, uint64_t>>* live) const {
  live->clear();
  const LnElement* e = LeafElements(h);
  std::vector<uint32_t> idx(n);
  for (uint32_t i = 0; i < n; i++) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](uint32_t a, uint32_t b) { return keys_.CompareSlots(e[a].key, e[b].key) < 0; });
  for (size_t i = 0; i < idx.size(); i++) {
    bool last_of_key = i + 1 == idx.size() || keys_.CompareSlots(e[idx[i]].key, e[idx[i + 1]].key) != 0;
    if (last_of_key && e[idx[i]].flag == kPositive) live->emplace_back(e[idx[i]].key, e[idx[i]].value);
  }
}

// Allocates an LN of `bytes`, writes header and elements and flushes them;
// the caller fences once for all new leaves before linking them.
template <KeyPolicy KP>
Result<uint64_t> NvTree<KP>::WriteNewLeaf(uint32_t bytes, const std::pair<uint64_t, uint64_t>* kv, size_t count,
                                          uint64_t next) {
  PMTREE_ASSIGN_OR_RETURN(uint64_t off, pool_->allocator().Allocate(bytes));
  const uint32_t cap = LeafCapacity(bytes);
  assert(count <= cap);
  std::vector<char> buf(kLeafHeaderBytes + count * sizeof(LnElement));
  LeafHeader h{};
  h.n_element = count;
  h.next = next;
  h.capacity = cap;
  h.node_bytes = bytes;
  h.magic = kLeafMagic;
  std::memcpy(buf.data(), &h, sizeof h);
  for (size_t i = 0; i < count; i++) {
    LnElement el{kPositive, kv[i].first, kv[i].second};
    std::memcpy(buf.data() + kLeafHeaderBytes + i * sizeof(LnElement), &el, sizeof el);
  }
  char* p = pool_->At<char>(off);
  pool_->Write(p, buf.data(), buf.size());
  // Start writing the new LN back; the caller's fence completes it before the
  // pointer that links the LN is stored, so a crash never links a half-written LN.
  pool_->Flush(p, buf.size());
  return off;
}

template <KeyPolicy KP>
void NvTree<KP>::ReleaseDroppedSlots(const std::vector<LeafHeader*>& old_leaves,
                                     const std::vector<std::pair<uint64_t, uint64_t>>& kept) {
  if constexpr (!KP::kInline) {
    std::unordered_set<uint64_t> keep;
    for (const auto& kv : kept) keep.insert(kv.first);
    for (LeafHeader* h : old_leaves) {
      const LnElement* e = LeafElements(h);
      for (uint64_t i = 0; i < h->n_element; i++) {
        if (keep.insert(e[i].key).second) keys_.Release(e[i].key);
      }
    }
  } else {
    (void)old_leaves;
    (void)kept;
  }
}

template <KeyPolicy KP>
Result<uint64_t> NvTree<KP>::NewSlot(K key) {
  if constexpr (!KP::kInline) {
    if (pool_->allocator().bytes_free() < kGrowthReserve + BytesKeys::BlobBytes(key.size()))
      return Status::OutOfSpace("nvtree: pool full (keeping " + std::to_string(kGrowthReserve) +
                                " bytes for removes)");
  }
  return keys_.MakeSlot(key);
}

// ============================================================================
// Reads
// ============================================================================

template <KeyPolicy KP>
bool NvTree<KP>::Lookup(K key, uint64_t* value) {
  auto guard = pool_->epochs().Protect();
  Inner* in = inner_.load(std::memory_order_acquire);
  Found f = Find(in, key);
  // nElement bounds the scan (§4.3): elements above it may be in flight.
  uint64_t n = f.info->visible.load(std::memory_order_acquire);
  LeafHeader* h = Leaf(f.ln);
  int64_t i = FindLatest(h, n, key);
  f.info->n_reads.fetch_add(1, std::memory_order_relaxed);  // Table 3, {Search}
  n_reads_.fetch_add(1, std::memory_order_relaxed);
  if (i < 0) return false;
  const LnElement& e = LeafElements(h)[i];
  if (e.flag != kPositive) return false;
  if (value) *value = e.value;
  return true;
}

template <KeyPolicy KP>
size_t NvTree<KP>::Scan(K start, const K* end, std::span<Entry> out) {
  if (out.empty()) return 0;
  auto guard = pool_->epochs().Protect();
  Inner* in = inner_.load(std::memory_order_acquire);
  Found f = Find(in, start);
  size_t produced = 0;
  std::vector<std::pair<uint64_t, uint64_t>> live;
  for (;;) {
    uint64_t n = f.info->visible.load(std::memory_order_acquire);
    CollectLive(Leaf(f.ln), n, &live);
    for (const auto& [slot, value] : live) {
      if (keys_.Compare(slot, start) < 0) continue;
      if (end != nullptr && keys_.Compare(slot, *end) > 0) return produced;
      // Under concurrent splits a later LN may repeat a key already returned.
      if (produced > 0) {
        if constexpr (KP::kInline) {
          if (slot <= out[produced - 1].first) continue;
        } else {
          if (keys_.Compare(slot, out[produced - 1].first) <= 0) continue;
        }
      }
      out[produced++] = Entry(keys_.Load(slot), value);
      if (produced == out.size()) return produced;
    }
    if (f.last) break;
    if (end != nullptr && CompareSepKey(f.sep, *end) >= 0) break;
    in = inner_.load(std::memory_order_acquire);
    uint64_t sep = f.sep;
    f = FindAfter(in, sep);
    if (CompareSeps(f.sep, sep) <= 0) break;  // no LN beyond (defensive)
  }
  return produced;
}

// ============================================================================
// Writes: Algorithm 2 and §4.3
// ============================================================================

template <KeyPolicy KP>
Result<bool> NvTree<KP>::Insert(K key, uint64_t value) {
  return Mutate(OpKind::kInsert, key, value);
}
template <KeyPolicy KP>
Result<bool> NvTree<KP>::Update(K key, uint64_t value) {
  return Mutate(OpKind::kUpdate, key, value);
}
template <KeyPolicy KP>
Result<bool> NvTree<KP>::Upsert(K key, uint64_t value) {
  return Mutate(OpKind::kUpsert, key, value);
}
template <KeyPolicy KP>
Result<bool> NvTree<KP>::Remove(K key) {
  return Mutate(OpKind::kRemove, key, 0);
}

template <KeyPolicy KP>
Result<bool> NvTree<KP>::Mutate(OpKind kind, K key, uint64_t value) {
  PMTREE_RETURN_IF_ERROR(KP::CheckArg(key));
  bool reclaimed = false;
  for (;;) {
    auto guard = pool_->epochs().Protect();
    gate_->EnterWriter();
    Inner* in = inner_.load(std::memory_order_acquire);
    Found f = Find(in, key);
    f.info->lock.lock();
    if (f.info->dead.load(std::memory_order_relaxed)) {  // replaced since we read the PLN
      f.info->lock.unlock();
      gate_->ExitWriter();
      continue;
    }
    LeafHeader* h = Leaf(f.ln);
    const uint64_t n = h->n_element;
    LnElement* el = LeafElements(h);
    int64_t i = FindLatest(h, n, key);
    bool present = i >= 0 && el[i].flag == kPositive;
    bool outcome = false;
    bool is_update = false;  // appends NEGATIVE + POSITIVE
    switch (kind) {
      case OpKind::kInsert: outcome = !present; is_update = false; break;
      case OpKind::kUpdate: outcome = present; is_update = true; break;
      case OpKind::kUpsert: outcome = !present; is_update = present; break;
      case OpKind::kRemove: outcome = present; is_update = false; break;
    }
    if ((kind == OpKind::kInsert && present) || (kind != OpKind::kInsert && kind != OpKind::kUpsert && !present)) {
      f.info->lock.unlock();
      gate_->ExitWriter();
      return false;
    }
    const uint32_t need = is_update ? 2 : 1;
    if (n + need <= h->capacity) {
      LnElement add[2];
      if (kind == OpKind::kRemove) {
        // Deletion: a NEGATIVE copy of the POSITIVE element found (§4.3).
        add[0] = {kNegative, el[i].key, el[i].value};
      } else if (is_update) {
        add[0] = {kNegative, el[i].key, el[i].value};
        add[1] = {kPositive, el[i].key, value};
      } else {
        auto slot = NewSlot(key);
        if (!slot.ok()) {
          f.info->lock.unlock();
          gate_->ExitWriter();
          if (slot.status().IsOutOfSpace() && !reclaimed) {
            reclaimed = true;
            ReclaimRetired(std::move(guard));
            continue;
          }
          return slot.status();
        }
        add[0] = {kPositive, *slot, value};
      }
      pool_->Write(&el[n], add, need * sizeof(LnElement));
      // Algorithm 2 line 8: the new element(s) must be persistent before the
      // counter that makes them visible, or a crash could commit garbage.
      pool_->Persist(&el[n], need * sizeof(LnElement));
      // Lines 9-10: one atomic counter step commits the whole operation — for
      // an update both elements, so a crash never shows the key deleted.
      pool_->Store64(&h->n_element, n + need);
      pool_->Persist(&h->n_element, 8);  // durable before we acknowledge or let readers see it
      f.info->visible.store(n + need, std::memory_order_release);
      f.info->n_writes.fetch_add(need, std::memory_order_relaxed);  // Table 3
      n_writes_.fetch_add(need, std::memory_order_relaxed);
      f.info->lock.unlock();
      gate_->ExitWriter();
      return outcome;
    }
    f.info->lock.unlock();
    auto r = Smo(f, kind, key, value, &outcome);
    gate_->ExitWriter();
    if (!r.ok()) {
      if (r.status().IsOutOfSpace() && !reclaimed) {
        // Leaves retired by earlier operations may be waiting for their epoch.
        reclaimed = true;
        ReclaimRetired(std::move(guard));
        continue;
      }
      return r.status();
    }
    switch (*r) {
      case SmoOutcome::kDone: return outcome;
      case SmoOutcome::kRetry: break;
      case SmoOutcome::kNeedRebuild: RebuildFromPln(); break;
    }
  }
}

// ============================================================================
// Bulk load
// ============================================================================
//
// Write order: every new LN (built right to left, so each knows its `next`)
// is written and flushed, one fence, then one Store64 of Meta::head commits
// the whole load; the old empty LN is freed after that store is persistent,
// and the leaf count (invariant 11) is persisted after it too.
// A crash before the store leaves the empty tree (the new LNs are
// unreachable and reclaimed by recovery).

template <KeyPolicy KP>
Status NvTree<KP>::BulkLoad(std::span<const typename Base::InputEntry> sorted, double fill) {
  PMTREE_RETURN_IF_ERROR(CheckBulkLoadInput(sorted, fill, &KP::CheckArg));
  Inner* old = inner_.load(std::memory_order_acquire);
  const uint64_t old_ln = old->Slot(old->pln[0], 0).ln.load();
  if (old->n_pln != 1 || old->pln[0].count.load() != 1 || Leaf(old_ln)->n_element != 0)
    return Status::InvalidArgument("bulk load: tree not empty");
  if (sorted.empty()) return Status::Ok();

  const uint32_t cap = LeafCapacity(node_size_);
  const size_t per_leaf = std::max<size_t>(1, static_cast<size_t>(static_cast<double>(cap) * fill));
  const size_t n_leaves = (sorted.size() + per_leaf - 1) / per_leaf;
  std::vector<std::pair<uint64_t, uint64_t>> kv;
  kv.reserve(sorted.size());
  std::vector<uint64_t> lns(n_leaves);
  auto undo = [&](size_t made_leaves) {
    for (size_t i = n_leaves - made_leaves; i < n_leaves; i++) pool_->allocator().Free(lns[i], node_size_);
    for (const auto& p : kv) keys_.FreeUnpublished(p.first);
  };
  for (const auto& [key, value] : sorted) {
    auto slot = keys_.MakeSlotUnfenced(key);  // the fence before Meta::head completes it
    if (!slot.ok()) {
      undo(0);
      return slot.status();
    }
    kv.emplace_back(*slot, value);
  }
  uint64_t next = 0;
  for (size_t i = n_leaves; i-- > 0;) {
    size_t first = i * per_leaf, count = std::min(per_leaf, kv.size() - first);
    auto off = WriteNewLeaf(node_size_, kv.data() + first, count, next);
    if (!off.ok()) {
      undo(n_leaves - 1 - i);
      return off.status();
    }
    lns[i] = next = *off;
  }
  // The new LNs are flushed; complete their write-back before Meta::head
  // names them, so a crash never links a half-written LN.
  pool_->Fence();
  pool_->Store64(&meta_->head, lns[0]);
  pool_->Persist(&meta_->head, 8);  // the load is durable before the old LN is freed or the call returns
  // Invariant 11: the loaded LNs replace the one empty LN, counted only now
  // that the head store naming them is durable (before it a crash leaves the
  // list with its one LN, and the count must not exceed that).
  StoreLeafCount(static_cast<int64_t>(n_leaves) - 1);
  // Fence: the count is durable before the load returns, so a cut of the
  // loaded list after a crash is refused, not absorbed.
  pool_->Fence();

  auto* in = new Inner();
  const uint32_t m = inner_node_size_ / 16;
  std::vector<uint32_t> caps(n_leaves, m + 1), counts(n_leaves, 1);
  std::vector<uint64_t> seps(n_leaves);
  std::vector<LeafInfo*> infos(n_leaves);
  for (size_t i = 0; i < n_leaves; i++) {
    size_t last = std::min((i + 1) * per_leaf, kv.size()) - 1;
    seps[i] = i + 1 == n_leaves ? kSepInf : SepFromSlot(in, kv[last].first);
    infos[i] = new LeafInfo();
    infos[i]->visible.store(last - i * per_leaf + 1, std::memory_order_relaxed);
  }
  BuildInner(in, m, caps, counts, seps, lns, infos);
  LeafInfo* old_info = reinterpret_cast<LeafInfo*>(old->Slot(old->pln[0], 0).info.load());
  inner_.store(in, std::memory_order_release);
  pool_->allocator().Retire(old_ln, Leaf(old_ln)->node_bytes);
  pool_->epochs().Retire([old, old_info] {
    delete old_info;
    delete old;
  });
  n_writes_.fetch_add(kv.size(), std::memory_order_relaxed);
  return Status::Ok();
}

// ============================================================================
// Split / replace / merge (§4.4)
// ============================================================================
//
// Locks, in list order: the left sibling (or the head lock), the full LN, and
// for a merge its right sibling.  Every lock is validated after it is taken
// (the LN is still live, its left sibling still points at it), otherwise the
// operation retries from the root.  The op that found the LN full is folded
// into the new LN(s), so the one atomic pointer store that links them commits
// the structure change and the operation together.
//
// Write order (paper, Fig. 4): (1) write the new LN(s) completely, with their
// nElement and next pointers; (2) persist them; (3) store the left sibling's
// next pointer (Meta::head for the first LN) — the single failure-atomic
// commit; (4) persist it; (5) only now update the PLN, mark the old LN(s)
// dead and retire them and the key blobs no longer referenced.  The leaf
// count (invariant 11): a merge stores its lowered count before (2)'s fence,
// a split its raised count after (4), with one more fence.

// §5.3 Algorithm 3 bounded by §5.4, with the profile of the LN being replaced.
template <KeyPolicy KP>
uint32_t NvTree<KP>::AdaptiveSize(LeafInfo* info, uint32_t need, uint32_t old_bytes) {
  Profile prof;
  prof.ln_reads = info->n_reads.load(std::memory_order_relaxed);
  prof.ln_writes = info->n_writes.load(std::memory_order_relaxed) + need;
  prof.total_reads = n_reads_.load(std::memory_order_relaxed);
  prof.total_writes = n_writes_.load(std::memory_order_relaxed) + need;
  prof.n_ln = n_leaves_.load(std::memory_order_relaxed);
  SizeChange change;
  uint32_t sz = GetNewSize(old_bytes, strategy_, prof, cost_, &change, kGrowthFactor * node_size_);
  switch (change) {
    case SizeChange::kUpLine:
    case SizeChange::kUpDouble: size_up_.fetch_add(1, std::memory_order_relaxed); break;
    case SizeChange::kDown: size_down_.fetch_add(1, std::memory_order_relaxed); break;
    case SizeChange::kRejectedByModel: size_rejected_.fetch_add(1, std::memory_order_relaxed); break;
    case SizeChange::kNone: break;
  }
  return sz;
}

// Invariant 11 under concurrent SMOs.  n_leaves_ changes only here, under
// leaves_mu_, and each change is stored to Meta::leaves in the same critical
// section, so the word's stores follow the DRAM count's values in order
// (concurrent splits cannot store their counts out of order).  Let L be the
// LNs the durable list holds.  A split adds 1 after its link is durable (L
// already grew); a merge subtracts 1 and fences the store before its
// unlinking store (L shrinks only after).  So the durable word is the DRAM
// count at some moment t, and every merge counted after t has not yet
// fenced, so its LN is still linked: word <= L in every crash state.  A
// crash may lose a split's count that was not yet fenced: the word lags,
// which only weakens recovery's check; recovery writes the exact count.
template <KeyPolicy KP>
void NvTree<KP>::StoreLeafCount(int64_t delta) {
  std::lock_guard<std::mutex> g(leaves_mu_);
  const uint64_t n = n_leaves_.load(std::memory_order_relaxed) + static_cast<uint64_t>(delta);
  n_leaves_.store(n, std::memory_order_relaxed);
  pool_->Store64(&meta_->leaves, n);
  // Start the write-back; the caller's fence (a split's after this call, a
  // merge's before its unlinking store) completes it.
  pool_->Flush(&meta_->leaves, 8);
}

template <KeyPolicy KP>
void NvTree<KP>::ReclaimRetired(EpochManager::Guard guard) {
  { EpochManager::Guard dropped = std::move(guard); }
  for (int i = 0; i < 4; i++) pool_->epochs().Reclaim();
}

// ---- the pieces of a structure modification (§4.4) -------------------------------
// Each RAII guard undoes its step on every early return of Smo; the commit
// path releases them explicitly, in the order the protocol needs.

// The LN locks an SMO holds (the left neighbour or head, the LN, perhaps its
// right sibling), taken left to right and released in reverse.
class SmoLockSet {
 public:
  SmoLockSet() = default;
  SmoLockSet(const SmoLockSet&) = delete;
  SmoLockSet& operator=(const SmoLockSet&) = delete;
  ~SmoLockSet() { UnlockAll(); }

  void Lock(LeafInfo* info) {
    assert(n_ < 3);
    info->lock.lock();
    held_[n_++] = info;
  }
  void UnlockAll() {
    while (n_ > 0) held_[--n_]->lock.unlock();
  }

 private:
  LeafInfo* held_[3] = {};
  int n_ = 0;
};

// A split's claim on a free entry of its PLN (Pln::reserved).  Dropped on
// every path that does not add the entry; the split that adds it drops it
// after raising count, so count + reserved never under-counts.
class PlnReservation {
 public:
  explicit PlnReservation(Pln& p) : p_(&p), before_(p.reserved.fetch_add(1, std::memory_order_acq_rel)) {}
  PlnReservation(const PlnReservation&) = delete;
  PlnReservation& operator=(const PlnReservation&) = delete;
  ~PlnReservation() { Release(); }

  // False when the PLN has no entry left for the new LN (§4.5: rebuild).
  bool Fits() const { return p_->count.load(std::memory_order_acquire) + before_ < p_->capacity; }
  void Release() {
    if (p_ != nullptr) p_->reserved.fetch_sub(1, std::memory_order_release);
    p_ = nullptr;
  }

 private:
  Pln* p_;
  uint32_t before_;
};

// The key blob NewSlot allocated for an inserted byte-string key: freed
// unless the SMO commits (links an LN that names it).
template <KeyPolicy KP>
class UnpublishedSlot {
 public:
  explicit UnpublishedSlot(KP* keys) : keys_(keys) {}
  UnpublishedSlot(const UnpublishedSlot&) = delete;
  UnpublishedSlot& operator=(const UnpublishedSlot&) = delete;
  ~UnpublishedSlot() {
    if (armed_) keys_->FreeUnpublished(slot_);
  }
  void Arm(uint64_t slot) {
    slot_ = slot;
    armed_ = true;
  }
  void Commit() { armed_ = false; }

 private:
  KP* keys_;
  uint64_t slot_ = 0;
  bool armed_ = false;
};

// What one SMO does, filled in step by step.
template <KeyPolicy KP>
struct NvTree<KP>::SmoState {
  enum Kind { kSplit, kReplace, kMerge };
  Kind kind = kReplace;
  LeafHeader* h = nullptr;  // the LN being replaced
  uint32_t need = 1;        // elements the operation would have appended
  std::vector<std::pair<uint64_t, uint64_t>> live;  // its live pairs, the operation applied
  uint64_t right_ln = 0;                             // merge: the right sibling
  LeafInfo* right_info = nullptr;
  LeafHeader* rh = nullptr;
  std::vector<std::pair<uint64_t, uint64_t>> all;  // merge: both LNs' live pairs
  size_t mid = 0;                                  // split: left gets live[0, mid), right the rest
  uint64_t new_left = 0, new_right = 0;
  uint32_t left_bytes = 0, right_bytes = 0;
};

template <KeyPolicy KP>
Result<typename NvTree<KP>::SmoOutcome> NvTree<KP>::Smo(const Found& f, OpKind kind, K key, uint64_t value,
                                                        bool* outcome) {
  Inner* in = inner_.load(std::memory_order_acquire);  // unchanged: we hold the gate
  // Neighbours from one snapshot of the PLN, so the left one really is left
  // of f.ln (lock order) even if the PLN shifted since Find.
  Neighbor left, right;
  if (!Neighbors(in, f.pln, f.ln, &left, &right)) return SmoOutcome::kRetry;
  uint64_t* link = left.has ? &Leaf(left.ln)->next : &meta_->head;
  // Declared in this order so that an early return releases the PLN
  // reservation, then the new key blob, then the locks.
  SmoLockSet locks;
  UnpublishedSlot<KP> new_slot(&keys_);
  std::optional<PlnReservation> reservation;
  locks.Lock(left.has ? left.info : head_info_.get());
  locks.Lock(f.info);
  if ((left.has && left.info->dead.load(std::memory_order_relaxed)) || f.info->dead.load(std::memory_order_relaxed) ||
      *link != f.ln) {
    return SmoOutcome::kRetry;
  }

  SmoState s;
  s.h = Leaf(f.ln);
  const uint64_t n = s.h->n_element;
  int64_t i = FindLatest(s.h, n, key);
  bool present = i >= 0 && LeafElements(s.h)[i].flag == kPositive;
  if ((kind == OpKind::kInsert && present) || ((kind == OpKind::kUpdate || kind == OpKind::kRemove) && !present)) {
    *outcome = false;
    return SmoOutcome::kDone;
  }
  s.need = (kind == OpKind::kUpdate || (kind == OpKind::kUpsert && present)) ? 2 : 1;
  // Cannot happen (a live LN only grows), but be safe.
  if (n + s.need <= s.h->capacity) return SmoOutcome::kRetry;
  *outcome = kind == OpKind::kInsert || kind == OpKind::kUpsert ? !present : present;

  // Apply the operation to the live set.
  CollectLive(s.h, n, &s.live);
  const size_t valid = s.live.size();
  if (present) {
    auto it = std::find_if(s.live.begin(), s.live.end(), [&](const auto& kv) { return keys_.Equal(kv.first, key); });
    assert(it != s.live.end());
    if (kind == OpKind::kRemove) s.live.erase(it);
    else it->second = value;
  } else {
    auto slot = NewSlot(key);
    if (!slot.ok()) return slot.status();
    new_slot.Arm(*slot);
    s.live.emplace_back(*slot, value);
    std::sort(s.live.begin(), s.live.end(),
              [&](const auto& a, const auto& b) { return keys_.CompareSlots(a.first, b.first) < 0; });
  }
  if (!ChooseSmo(right, valid, kind, &locks, &s)) return SmoOutcome::kRetry;

  // Space: operations that add data keep kGrowthReserve free, so that
  // removes (which compact) can always proceed in a full pool (contract 5).
  const uint32_t old_bytes = s.h->node_bytes;
  if (kind != OpKind::kRemove &&
      pool_->allocator().bytes_free() < 2ull * std::max<uint64_t>(old_bytes, node_size_) * 2 + kGrowthReserve) {
    return Status::OutOfSpace("nvtree: pool full (keeping " + std::to_string(kGrowthReserve) +
                              " bytes for removes)");
  }
  if (s.kind == SmoState::kSplit) {
    reservation.emplace(in->pln[f.pln]);
    if (!reservation->Fits()) return SmoOutcome::kNeedRebuild;  // §4.5: rebuild first
  }
  PMTREE_RETURN_IF_ERROR(WriteSmoLeaves(f, kind, &s));
  // Invariant 11: a merge takes an LN out of the list, so it lowers the count
  // before the store that unlinks it (nothing below fails any more).
  if (s.kind == SmoState::kMerge) StoreLeafCount(-1);
  // The new LN(s) (and a merge's lowered count) are flushed; complete the
  // write-back before the pointer that links them, so a crash never links a
  // half-written LN, nor unlinks a merged LN while the durable count still
  // includes it.
  pool_->Fence();
  pool_->Store64(link, s.new_left);  // the one atomic write that commits (§4.4)
  pool_->Persist(link, 8);           // durable before the op is acknowledged or the old LN retired
  new_slot.Commit();
  if (s.kind == SmoState::kSplit) {
    // Invariant 11: count the split's second LN only now that the link naming
    // it is durable, so no crash state counts an LN the list does not hold.
    StoreLeafCount(+1);
    // Fence: the count is durable before the split is acknowledged, so after
    // a crash the walk must reach this LN too (a cut behind it is refused,
    // not absorbed), and no store of the split is pending at its end.
    pool_->Fence();
  }

  PublishSmo(in, f, s, reservation ? &*reservation : nullptr);
  RetireSmo(f, s, &locks);
  return SmoOutcome::kDone;
}

// Which SMO (§4.4): split above the minimal fill factor (50 %), else replace
// or merge depending on the right sibling's nElement (not its valid count,
// which would need a scan).  A merge needs the right sibling in the same PLN
// (the PLN's last separator, which its IN relies on, must not change); a
// merge candidate is locked here.  False when the sibling changed: retry.
template <KeyPolicy KP>
bool NvTree<KP>::ChooseSmo(const Neighbor& right, size_t valid, OpKind kind, SmoLockSet* locks, SmoState* s) {
  s->kind = SmoState::kReplace;
  if (valid * 2 > s->h->capacity) {
    // Deviation (docs, D6): a remove never splits, it compacts (replace), so
    // removing needs no net space and still works in a full pool.
    if (kind != OpKind::kRemove) s->kind = SmoState::kSplit;
    return true;
  }
  if (!right.has || right.ln != s->h->next) return true;
  s->right_ln = right.ln;
  s->right_info = right.info;
  locks->Lock(right.info);
  if (right.info->dead.load(std::memory_order_relaxed) || s->h->next != s->right_ln) return false;
  s->rh = Leaf(s->right_ln);
  if (s->rh->n_element * 2 <= s->rh->capacity) s->kind = SmoState::kMerge;
  return true;
}

// Writes and flushes the SMO's new LN(s), not yet linked: on failure nothing
// of them remains allocated.
template <KeyPolicy KP>
Status NvTree<KP>::WriteSmoLeaves(const Found& f, OpKind kind, SmoState* s) {
  const uint32_t old_bytes = s->h->node_bytes;
  s->left_bytes = s->right_bytes = old_bytes;
  if (s->kind == SmoState::kSplit) {
    s->mid = (s->live.size() + 1) / 2;
    uint32_t sz = AdaptiveSize(f.info, s->need, old_bytes);
    if (LeafCapacity(sz) < s->live.size() - s->mid + 1 || LeafCapacity(sz) < s->mid + 1) sz = old_bytes;
    s->left_bytes = s->right_bytes = sz;
    auto r = WriteNewLeaf(s->right_bytes, s->live.data() + s->mid, s->live.size() - s->mid, s->h->next);
    if (!r.ok()) return r.status();
    s->new_right = *r;
    auto l = WriteNewLeaf(s->left_bytes, s->live.data(), s->mid, s->new_right);
    if (!l.ok()) {
      pool_->allocator().Free(s->new_right, s->right_bytes);
      return l.status();
    }
    s->new_left = *l;
    return Status::Ok();
  }
  if (s->kind == SmoState::kMerge) {
    std::vector<std::pair<uint64_t, uint64_t>> rlive;
    CollectLive(s->rh, s->rh->n_element, &rlive);
    s->all = s->live;
    s->all.insert(s->all.end(), rlive.begin(), rlive.end());  // every key of LN < every key of its right sibling
    s->left_bytes = std::max(old_bytes, s->rh->node_bytes);
    if (s->all.size() > LeafCapacity(s->left_bytes)) {
      s->left_bytes = std::min<uint32_t>(kMaxLeafBytes, s->left_bytes * 2);
    }
    auto l = WriteNewLeaf(s->left_bytes, s->all.data(), s->all.size(), s->rh->next);
    if (!l.ok()) return l.status();
    s->new_left = *l;
    return Status::Ok();
  }
  // Deviation D7: a replace also sizes its new LN by Algorithm 3 (under an
  // update-only workload almost every structure change is a replace).
  if (kind != OpKind::kRemove) {
    uint32_t sz = AdaptiveSize(f.info, s->need, old_bytes);
    if (LeafCapacity(sz) >= s->live.size() + 1) s->left_bytes = sz;
  }
  auto l = WriteNewLeaf(s->left_bytes, s->live.data(), s->live.size(), s->h->next);
  if (!l.ok()) return l.status();
  s->new_left = *l;
  return Status::Ok();
}

// DRAM side of a committed SMO: new LeafInfos (Table 3: a split halves the
// counters) and the PLN entries, under the PLN's sequence counter.  A split
// drops its reservation after raising count.
template <KeyPolicy KP>
void NvTree<KP>::PublishSmo(Inner* in, const Found& f, const SmoState& s, PlnReservation* reservation) {
  auto* li = new LeafInfo();
  const uint64_t w = f.info->n_writes.load(std::memory_order_relaxed) + s.need;
  const uint64_t rd = f.info->n_reads.load(std::memory_order_relaxed);
  n_writes_.fetch_add(s.need, std::memory_order_relaxed);
  Pln& p = in->pln[f.pln];
  p.version.lock();
  uint32_t c = p.count.load(std::memory_order_relaxed);
  uint32_t pos = 0;
  while (pos < c && in->Slot(p, pos).ln.load(std::memory_order_relaxed) != f.ln) pos++;
  assert(pos < c);
  auto move_entry = [&](uint32_t to, uint32_t from) {
    PlnEntry& dst = in->Slot(p, to);
    const PlnEntry& src = in->Slot(p, from);
    dst.sep.store(src.sep.load(std::memory_order_acquire), std::memory_order_release);
    dst.ln.store(src.ln.load(std::memory_order_relaxed), std::memory_order_relaxed);
    dst.info.store(src.info.load(std::memory_order_relaxed), std::memory_order_relaxed);
  };
  if (s.kind == SmoState::kSplit) {
    li->visible.store(s.mid, std::memory_order_relaxed);
    li->n_writes.store(w / 2, std::memory_order_relaxed);
    li->n_reads.store(rd / 2, std::memory_order_relaxed);
    auto* ri = new LeafInfo();
    ri->visible.store(s.live.size() - s.mid, std::memory_order_relaxed);
    ri->n_writes.store(w / 2, std::memory_order_relaxed);
    ri->n_reads.store(rd / 2, std::memory_order_relaxed);
    for (uint32_t k = c; k > pos + 1; k--) move_entry(k, k - 1);
    PlnEntry& e0 = in->Slot(p, pos);
    PlnEntry& e1 = in->Slot(p, pos + 1);
    e1.sep.store(e0.sep.load(std::memory_order_acquire), std::memory_order_release);
    e1.ln.store(s.new_right, std::memory_order_relaxed);
    e1.info.store(reinterpret_cast<uint64_t>(ri), std::memory_order_relaxed);
    e0.sep.store(SepFromSlot(in, s.live[s.mid - 1].first), std::memory_order_release);
    e0.ln.store(s.new_left, std::memory_order_relaxed);
    e0.info.store(reinterpret_cast<uint64_t>(li), std::memory_order_relaxed);
    p.count.store(c + 1, std::memory_order_release);
    reservation->Release();  // after count: see PlnReservation
    splits_.fetch_add(1, std::memory_order_relaxed);
  } else if (s.kind == SmoState::kMerge) {
    li->visible.store(s.all.size(), std::memory_order_relaxed);
    li->n_writes.store(w + s.right_info->n_writes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    li->n_reads.store(rd + s.right_info->n_reads.load(std::memory_order_relaxed), std::memory_order_relaxed);
    // Entry pos+1 (the right sibling, same PLN) keeps its separator and now
    // names the merged LN; entry pos disappears.
    assert(pos + 1 < c && in->Slot(p, pos + 1).ln.load(std::memory_order_relaxed) == s.right_ln);
    for (uint32_t k = pos; k + 1 < c; k++) move_entry(k, k + 1);
    in->Slot(p, pos).ln.store(s.new_left, std::memory_order_relaxed);
    in->Slot(p, pos).info.store(reinterpret_cast<uint64_t>(li), std::memory_order_relaxed);
    p.count.store(c - 1, std::memory_order_relaxed);
    merges_.fetch_add(1, std::memory_order_relaxed);
  } else {
    li->visible.store(s.live.size(), std::memory_order_relaxed);
    li->n_writes.store(w, std::memory_order_relaxed);
    li->n_reads.store(rd, std::memory_order_relaxed);
    in->Slot(p, pos).ln.store(s.new_left, std::memory_order_relaxed);
    in->Slot(p, pos).info.store(reinterpret_cast<uint64_t>(li), std::memory_order_relaxed);
    replaces_.fetch_add(1, std::memory_order_relaxed);
  }
  p.version.unlock();
}

// Retires what a committed SMO unlinked (readers inside an epoch may still
// scan it), then releases the LN locks.
template <KeyPolicy KP>
void NvTree<KP>::RetireSmo(const Found& f, const SmoState& s, SmoLockSet* locks) {
  const bool merge = s.kind == SmoState::kMerge;
  std::vector<LeafHeader*> old_leaves{s.h};
  f.info->dead.store(true, std::memory_order_relaxed);
  if (merge) {
    old_leaves.push_back(s.rh);
    s.right_info->dead.store(true, std::memory_order_relaxed);
  }
  ReleaseDroppedSlots(old_leaves, merge ? s.all : s.live);
  pool_->allocator().Retire(f.ln, s.h->node_bytes);
  if (merge) pool_->allocator().Retire(s.right_ln, s.rh->node_bytes);
  locks->UnlockAll();
  LeafInfo* dead_l = f.info;
  LeafInfo* dead_r = merge ? s.right_info : nullptr;
  pool_->epochs().Retire([dead_l, dead_r] {
    delete dead_l;
    delete dead_r;
  });
}

// ============================================================================
// Rebuilding (§4.5, §5.5)
// ============================================================================

template <KeyPolicy KP>
void NvTree<KP>::ForceRebuild() {
  RebuildFromPln();
}

// Rebuild-from-PLN: redistribute the LN pointers of the existing PLNs into a
// new array where each PLN holds exactly one LN (§4.5), enlarging the PLNs of
// hot-write PLNs by one IN-sized unit (§5.5).  Writers are excluded by the
// gate; readers keep using the old array, which is retired after the swap.
template <KeyPolicy KP>
void NvTree<KP>::RebuildFromPln() {
  if (!gate_->BeginRebuild()) return;  // another thread rebuilt meanwhile
  uint64_t t0 = NowNs();
  Inner* old = inner_.load(std::memory_order_acquire);
  const uint32_t unit = old->m + 1;
  const uint32_t max_cap = unit * 8;
  uint64_t total_writes = n_writes_.load(std::memory_order_relaxed);
  std::vector<uint32_t> caps, counts;
  std::vector<uint64_t> seps, lns;
  std::vector<LeafInfo*> infos;
  Inner* in = new Inner();
  for (uint64_t j = 0; j < old->n_pln; j++) {
    Pln& p = old->pln[j];
    uint32_t c = p.count.load(std::memory_order_relaxed);
    uint64_t pln_writes = 0;
    for (uint32_t i = 0; i < c; i++)
      pln_writes += reinterpret_cast<LeafInfo*>(old->Slot(p, i).info.load())->n_writes.load();
    // §5.5: hot-write if nWrites_PLN > nWrites / N_PLN.
    bool hot = strategy_ != Strategy::kOff &&
               static_cast<double>(pln_writes) > static_cast<double>(total_writes) / static_cast<double>(old->n_pln);
    uint32_t cap = hot ? std::min(max_cap, p.capacity + unit) : unit;
    if (hot && cap > unit) pln_enlarged_.fetch_add(1, std::memory_order_relaxed);
    for (uint32_t i = 0; i < c; i++) {
      const PlnEntry& e = old->Slot(p, i);
      caps.push_back(cap);
      counts.push_back(1);
      seps.push_back(CopySep(in, e.sep.load(std::memory_order_acquire)));
      lns.push_back(e.ln.load(std::memory_order_relaxed));
      infos.push_back(reinterpret_cast<LeafInfo*>(e.info.load(std::memory_order_relaxed)));
    }
  }
  BuildInner(in, old->m, caps, counts, seps, lns, infos);
  inner_.store(in, std::memory_order_release);
  pool_->epochs().Retire([old] { delete old; });
  rebuilds_.fetch_add(1, std::memory_order_relaxed);
  rebuild_ns_.fetch_add(NowNs() - t0, std::memory_order_relaxed);
  gate_->EndRebuild();
}

// Rebuild-from-LN (§4.5, §4.6): walk the leaf list, report every reachable
// block to the allocator, and index each LN by the largest key it holds.
// Recovery rule R3 (docs): an LN without a live key is unlinked here (one
// atomic store to its left sibling's next, persisted), because its maximum
// key is undefined; a crash during recovery leaves it linked or not, both fine.
// Rule R5 (invariant 11): the walk must reach at least Meta::leaves LNs, else
// the list was cut (a zeroed next pointer or page) and the LNs behind the cut
// would silently become free space: Corruption.  So the first pass only
// reads (checks every LN and counts them), and the exact count of the LNs
// kept is persisted before R3's first unlink.
template <KeyPolicy KP>
Status NvTree<KP>::RebuildFromLeaves() {
  struct Walked {
    uint64_t off;
    bool keep;          // false: no live key, unlinked by R3
    uint64_t max_slot;  // the largest live key's slot (0 when none)
  };
  std::vector<Walked> walk;
  uint64_t kept = 0;
  uint64_t off = meta_->head;
  const uint64_t max_leaves = pool_->size() / kMinLeafBytes + 1;
  std::vector<std::pair<uint64_t, uint64_t>> live;
  while (off != 0) {
    if (walk.size() >= max_leaves) return Status::Corruption("nvtree: leaf list has a cycle");
    if (off % kAllocGranule != 0 || !pool_->InHeap(off, kLeafHeaderBytes))
      return Status::Corruption("nvtree: leaf at offset " + Hex(off) + " outside the heap (invariant 2)");
    LeafHeader* h = Leaf(off);
    if (h->magic != kLeafMagic || h->node_bytes < kMinLeafBytes || h->node_bytes > kMaxLeafBytes ||
        h->node_bytes % 64 != 0 || h->capacity != LeafCapacity(h->node_bytes) || h->n_element > h->capacity ||
        !pool_->InHeap(off, h->node_bytes))
      return Status::Corruption("nvtree: leaf at offset " + Hex(off) + ": bad header (invariant 2)");
    const LnElement* e = LeafElements(h);
    for (uint64_t i = 0; i < h->n_element; i++) {
      if (e[i].flag != kPositive && e[i].flag != kNegative)
        return Status::Corruption("nvtree: leaf at offset " + Hex(off) + ": element " + std::to_string(i) +
                                  " has a bad flag (invariant 3)");
      PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(e[i].key));
    }
    CollectLive(h, h->n_element, &live);
    // R3, but a lone last LN stays: the list is never empty.
    const bool keep = !live.empty() || (h->next == 0 && kept == 0);
    walk.push_back({off, keep, live.empty() ? 0 : live.back().first});
    kept += keep ? 1 : 0;
    off = h->next;
  }
  if (walk.empty()) return Status::Corruption("nvtree: leaf list is empty (meta head is 0)");
  const uint64_t counted = meta_->leaves;
  if (counted == 0 || counted > walk.size())
    return Status::Corruption("nvtree: the leaf list reaches " + std::to_string(walk.size()) +
                              " leaves but the meta block counts " + std::to_string(counted) +
                              (counted == 0 ? " (never 0: a damaged meta block)"
                                            : ": leaves unreachable (a cut leaf list?)") +
                              " (invariant 11)");
  if (kept != counted) {
    pool_->Store64(&meta_->leaves, kept);
    // The exact count (a split's may lag; R3 drops the empty LNs) is durable
    // before R3's first unlink below, so a crash during them never leaves the
    // count above the list (invariant 11).
    pool_->Persist(&meta_->leaves, 8);
  }

  Allocator& a = pool_->allocator();
  a.BeginRebuild();
  PMTREE_RETURN_IF_ERROR(a.MarkUsed(pool_->OffsetOf(meta_), sizeof(Meta)));
  auto in = std::make_unique<Inner>();
  std::vector<uint64_t> lns, max_slots, counts_n;
  // The LNs' blocks, handed to the allocator sorted at the end: list order
  // is descending offset order after a bulk load (its LNs are built right to
  // left), where one MarkUsed per LN would insert each into the allocator's
  // tree instead of appending it (allocator.cc, `tail`).
  std::vector<std::pair<uint64_t, uint64_t>> ln_blocks;
  ln_blocks.reserve(walk.size());
  uint64_t* link = &meta_->head;
  for (const Walked& w : walk) {
    LeafHeader* h = Leaf(w.off);
    if (!w.keep) {
      pool_->Store64(link, h->next);
      pool_->Persist(link, 8);  // the empty LN is unlinked durably before its space becomes free
      continue;
    }
    ln_blocks.emplace_back(w.off, h->node_bytes);
    if constexpr (!KP::kInline) {
      std::unordered_set<uint64_t> seen;
      const LnElement* e = LeafElements(h);
      for (uint64_t i = 0; i < h->n_element; i++) {
        if (seen.insert(e[i].key).second) PMTREE_RETURN_IF_ERROR(keys_.MarkUsed(e[i].key));
      }
    }
    lns.push_back(w.off);
    max_slots.push_back(w.max_slot);
    counts_n.push_back(h->n_element);
    link = &h->next;
  }
  std::sort(ln_blocks.begin(), ln_blocks.end());
  PMTREE_RETURN_IF_ERROR(a.MarkUsedSorted(ln_blocks));
  a.EndRebuild();
  const uint32_t m = inner_node_size_ / 16;
  std::vector<uint32_t> caps(lns.size(), m + 1), counts(lns.size(), 1);
  std::vector<uint64_t> seps(lns.size());
  std::vector<LeafInfo*> infos(lns.size());
  for (size_t i = 0; i < lns.size(); i++) {
    seps[i] = i + 1 == lns.size() ? kSepInf : SepFromSlot(in.get(), max_slots[i]);
    infos[i] = new LeafInfo();
    infos[i]->visible.store(counts_n[i], std::memory_order_relaxed);
  }
  BuildInner(in.get(), m, caps, counts, seps, lns, infos);
  inner_.store(in.release(), std::memory_order_release);
  n_leaves_ = lns.size();
  return Status::Ok();
}

// ============================================================================
// Instant restart (§4.6)
// ============================================================================

template <KeyPolicy KP>
Status NvTree<KP>::SaveImage() {
  Inner* in = inner_.load(std::memory_order_acquire);
  std::vector<char> body;  // everything after the header
  std::vector<char> strings;
  std::vector<ImagePln> plns(in->n_pln);
  std::vector<ImageEntry> entries;
  for (uint64_t j = 0; j < in->n_pln; j++) {
    Pln& p = in->pln[j];
    plns[j] = {p.capacity, p.count.load()};
    for (uint32_t i = 0; i < plns[j].count; i++) {
      const PlnEntry& e = in->Slot(p, i);
      ImageEntry ie{};
      uint64_t sep = e.sep.load();
      if constexpr (KP::kInline) {
        ie.sep = sep;
      } else if (sep == 0) {
        ie.sep = kImageInf;
      } else {
        const std::string& s = *reinterpret_cast<const std::string*>(sep);
        ie.sep = strings.size();
        uint32_t len = static_cast<uint32_t>(s.size());
        strings.insert(strings.end(), reinterpret_cast<const char*>(&len), reinterpret_cast<const char*>(&len) + 4);
        strings.insert(strings.end(), s.begin(), s.end());
        while (strings.size() % 4) strings.push_back(0);
      }
      ie.ln = e.ln.load();
      ie.n_element = reinterpret_cast<LeafInfo*>(e.info.load())->visible.load();
      entries.push_back(ie);
    }
  }
  ImageHeader hdr{};
  hdr.magic = kImageMagic;
  hdr.n_pln = in->n_pln;
  hdr.n_entries = entries.size();
  uint64_t str_off = sizeof(ImageHeader) + plns.size() * sizeof(ImagePln) + entries.size() * sizeof(ImageEntry);
  hdr.strings = KP::kInline ? 0 : str_off;
  uint64_t total = Allocator::RoundUp(str_off + strings.size());
  hdr.bytes = total;
  std::vector<char> buf(total, 0);
  std::memcpy(buf.data() + sizeof(ImageHeader), plns.data(), plns.size() * sizeof(ImagePln));
  std::memcpy(buf.data() + sizeof(ImageHeader) + plns.size() * sizeof(ImagePln), entries.data(),
              entries.size() * sizeof(ImageEntry));
  if (!strings.empty()) std::memcpy(buf.data() + str_off, strings.data(), strings.size());
  hdr.checksum = HashBytes(std::string_view(buf.data() + sizeof(ImageHeader), total - sizeof(ImageHeader)));
  std::memcpy(buf.data(), &hdr, sizeof hdr);
  auto off = pool_->allocator().Allocate(total);
  if (!off.ok()) return off.status();  // no room: the next open rebuilds from the LNs
  char* p = pool_->At<char>(*off);
  pool_->Write(p, buf.data(), total);
  // §4.6 step (1): FLUSH the IN/PLN image before the pointer to it is stored,
  // so an open never follows the pointer to a half-written image.
  pool_->Persist(p, total);
  pool_->Store64(&meta_->inner_image, *off);
  pool_->Persist(&meta_->inner_image, 8);  // steps (2)-(3): the pool's clean flag is set after this
  return Status::Ok();
}

template <KeyPolicy KP>
Status NvTree<KP>::LoadImage(uint64_t off) {
  auto bad = [&](const std::string& why) {
    return Status::Corruption("nvtree: inner image at offset " + Hex(off) + ": " + why);
  };
  if (off % kAllocGranule != 0 || !pool_->InHeap(off, sizeof(ImageHeader))) return bad("outside the heap");
  auto* hdr = pool_->At<ImageHeader>(off);
  if (hdr->magic != kImageMagic || hdr->bytes < sizeof(ImageHeader) || !pool_->InHeap(off, hdr->bytes))
    return bad("bad header");
  const char* base = pool_->At<char>(off);
  if (hdr->checksum != HashBytes(std::string_view(base + sizeof(ImageHeader), hdr->bytes - sizeof(ImageHeader))))
    return bad("checksum mismatch");
  uint64_t need = sizeof(ImageHeader) + hdr->n_pln * sizeof(ImagePln) + hdr->n_entries * sizeof(ImageEntry);
  if (hdr->n_pln == 0 || hdr->n_entries < hdr->n_pln || need > hdr->bytes) return bad("bad counts");
  const auto* plns = reinterpret_cast<const ImagePln*>(base + sizeof(ImageHeader));
  const auto* entries = reinterpret_cast<const ImageEntry*>(plns + hdr->n_pln);
  std::vector<uint32_t> caps(hdr->n_pln), counts(hdr->n_pln);
  uint64_t sum = 0;
  for (uint64_t j = 0; j < hdr->n_pln; j++) {
    if (plns[j].count == 0 || plns[j].count > plns[j].capacity) return bad("PLN with a bad count");
    caps[j] = plns[j].capacity;
    counts[j] = plns[j].count;
    sum += plns[j].count;
  }
  if (sum != hdr->n_entries) return bad("entry count mismatch");
  // Invariant 11 holds exactly at Close: an image indexing another number of
  // LNs is not the one this list was closed with; the walk decides instead.
  if (sum != meta_->leaves)
    return bad("indexes " + std::to_string(sum) + " leaves but the meta block counts " +
               std::to_string(meta_->leaves) + " (invariant 11)");
  auto in = std::make_unique<Inner>();
  std::vector<uint64_t> seps(sum), lns(sum);
  std::vector<LeafInfo*> infos(sum);
  for (uint64_t i = 0; i < sum; i++) {
    const ImageEntry& e = entries[i];
    if (!pool_->InHeap(e.ln, kLeafHeaderBytes)) {
      for (uint64_t k = 0; k < i; k++) delete infos[k];
      return bad("entry " + std::to_string(i) + " names a leaf outside the heap");
    }
    if constexpr (KP::kInline) {
      seps[i] = e.sep;
    } else if (e.sep == kImageInf) {
      seps[i] = 0;
    } else {
      uint64_t so = hdr->strings + e.sep;
      uint32_t len = 0;
      if (so + 4 > hdr->bytes) return bad("separator outside the image");
      std::memcpy(&len, base + so, 4);
      if (so + 4 + len > hdr->bytes) return bad("separator outside the image");
      seps[i] = in->AddString(std::string_view(base + so + 4, len));
    }
    lns[i] = e.ln;
    infos[i] = new LeafInfo();
    infos[i]->visible.store(e.n_element, std::memory_order_relaxed);
  }
  BuildInner(in.get(), inner_node_size_ / 16, caps, counts, seps, lns, infos);
  inner_.store(in.release(), std::memory_order_release);
  n_leaves_ = sum;
  return Status::Ok();
}

template <KeyPolicy KP>
Status NvTree<KP>::Close() {
  if (closed_) return Status::Busy("nvtree: already closed");
  closed_ = true;
  Status s = SaveImage();
  (void)s;  // without an image the next open rebuilds from the LNs: slower, still correct
  return pool_->Close();
}

// ============================================================================
// Verify and statistics
// ============================================================================
//
// Invariants (Verify checks each; the numbers are cited in code and docs):
//  1. The meta block is in the heap, has its magic, valid sizes and a leaf
//     count of at least 1.
//  2. Every LN reached is 64-aligned, inside the heap, has the leaf magic, a
//     node size that is a multiple of 64 within [256, 64K], capacity ==
//     LeafCapacity(node_bytes), and n_element <= capacity.
//  3. Every committed element has flag POSITIVE or NEGATIVE and a valid key slot.
//  4. For each key, its committed elements alternate POSITIVE, NEGATIVE, ...
//     starting with POSITIVE, and every NEGATIVE carries the value of the
//     POSITIVE it cancels (a NEGATIVE is appended only after a POSITIVE is found).
//  5. The leaf list (from Meta::head along next) visits exactly the LNs of the
//     PLN entries, in PLN order, each once, and ends with 0.
//  6. Separators strictly increase over all PLN entries; the last is +inf.
//  7. Every live key of an LN lies in (previous separator, own separator].
//  8. Every IN's keys equal the largest separator of each child subtree but
//     the last; every PLN has 1 <= count <= capacity.
//  9. The DRAM scan bound of every LN equals its persistent nElement.
// 10. Bytes reached (meta, LNs, key blobs) == allocator bytes in use.
// 11. Meta::leaves (the leaf count) is at least 1 and, in every crash state,
//     at most the number of LNs in the durable leaf list; when no operation
//     runs it equals the LNs in the list and n_leaves_.  A split stores the
//     raised count after the persist of the link that adds its LN, a merge
//     stores the lowered count before the fence that precedes its unlinking
//     store, a bulk load after its head store is durable, all under
//     leaves_mu_ (StoreLeafCount); Create writes 1, recovery the exact count.
//     Recovery refuses a list shorter than the count (a cut list, rule R5).

template <KeyPolicy KP>
Status NvTree<KP>::Verify() {
  // No operation runs during Verify (tree.h), so every retired block can be
  // freed now; otherwise it would count as in use but unreachable.
  pool_->epochs().DrainAll();
  auto guard = pool_->epochs().Protect();
  auto bad = [](uint64_t off, int inv, const std::string& what) {
    return Status::Corruption("nvtree: leaf at offset " + Hex(off) + ": invariant " + std::to_string(inv) +
                              " violated: " + what);
  };
  uint64_t meta_off = pool_->OffsetOf(meta_);
  if (!pool_->InHeap(meta_off, sizeof(Meta)) || meta_->magic != kMetaMagic || meta_->leaves == 0)
    return Status::Corruption("nvtree: meta block at offset " + Hex(meta_off) + ": invariant 1 violated");
  Inner* in = inner_.load(std::memory_order_acquire);
  uint64_t reached = Allocator::RoundUp(sizeof(Meta));
  uint64_t list = meta_->head;
  bool have_prev_sep = false;
  uint64_t prev_sep = 0;
  std::vector<uint64_t> pln_max(in->n_pln);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  uint64_t walked = 0;
  for (uint64_t j = 0; j < in->n_pln; j++) {
    Pln& p = in->pln[j];
    uint32_t c = p.count.load();
    if (c == 0 || c > p.capacity)
      return Status::Corruption("nvtree: PLN " + std::to_string(j) + ": invariant 8 violated: count " +
                                std::to_string(c) + " capacity " + std::to_string(p.capacity));
    for (uint32_t i = 0; i < c; i++) {
      const PlnEntry& e = in->Slot(p, i);
      uint64_t sep = e.sep.load(), off = e.ln.load();
      auto* info = reinterpret_cast<LeafInfo*>(e.info.load());
      bool is_last = j + 1 == in->n_pln && i + 1 == c;
      if (off != list) return bad(off, 5, "PLN order and leaf list disagree (list has " + Hex(list) + ")");
      if (off % kAllocGranule != 0 || !pool_->InHeap(off, kLeafHeaderBytes)) return bad(off, 2, "outside the heap");
      LeafHeader* h = Leaf(off);
      if (h->magic != kLeafMagic || h->node_bytes < kMinLeafBytes || h->node_bytes > kMaxLeafBytes ||
          h->node_bytes % 64 != 0 || h->capacity != LeafCapacity(h->node_bytes) || h->n_element > h->capacity ||
          !pool_->InHeap(off, h->node_bytes))
        return bad(off, 2, "bad header");
      if (info == nullptr || info->visible.load() != h->n_element)
        return bad(off, 9, "DRAM nElement differs from the persistent one");
      if (is_last && sep != kSepInf) return bad(off, 6, "last separator is not +inf");
      if (have_prev_sep && CompareSeps(prev_sep, sep) >= 0) return bad(off, 6, "separators not increasing");
      const LnElement* el = LeafElements(h);
      std::unordered_set<uint64_t> slots;
      for (uint64_t k = 0; k < h->n_element; k++) {
        if (el[k].flag != kPositive && el[k].flag != kNegative)
          return bad(off, 3, "element " + std::to_string(k) + " has a bad flag");
        PMTREE_RETURN_IF_ERROR(keys_.CheckSlot(el[k].key));
        if (slots.insert(el[k].key).second) reached += keys_.SlotBytes(el[k].key);
      }
      // Invariant 4: replay each key's history in append order.
      std::vector<uint32_t> idx(h->n_element);
      for (uint32_t k = 0; k < idx.size(); k++) idx[k] = k;
      std::stable_sort(idx.begin(), idx.end(),
                       [&](uint32_t a, uint32_t b) { return keys_.CompareSlots(el[a].key, el[b].key) < 0; });
      for (size_t k = 0; k < idx.size(); k++) {
        bool first = k == 0 || keys_.CompareSlots(el[idx[k - 1]].key, el[idx[k]].key) != 0;
        uint64_t want = first ? kPositive : (el[idx[k - 1]].flag == kPositive ? kNegative : kPositive);
        if (el[idx[k]].flag != want)
          return bad(off, 4, "element " + std::to_string(idx[k]) + " breaks the POSITIVE/NEGATIVE alternation");
        if (want == kNegative && el[idx[k]].value != el[idx[k - 1]].value)
          return bad(off, 4, "NEGATIVE element " + std::to_string(idx[k]) + " carries another value");
      }
      CollectLive(h, h->n_element, &live);
      for (const auto& kv : live) {
        if (!is_last && CompareSepKey(sep, keys_.Load(kv.first)) < 0) return bad(off, 7, "key above its separator");
        if (have_prev_sep && CompareSepKey(prev_sep, keys_.Load(kv.first)) >= 0)
          return bad(off, 7, "key at or below the previous separator");
      }
      reached += Allocator::RoundUp(h->node_bytes);
      walked++;
      have_prev_sep = true;
      prev_sep = sep;
      list = h->next;
    }
    pln_max[j] = prev_sep;
  }
  if (list != 0) return bad(list, 5, "leaf list continues beyond the last PLN entry");
  const uint64_t counted = meta_->leaves;
  if (counted > walked)
    return Status::Corruption("nvtree: the leaf list reaches " + std::to_string(walked) +
                              " leaves but the meta block counts " + std::to_string(counted) +
                              ": leaves unreachable (a cut leaf list?) (invariant 11)");
  if (counted != walked || n_leaves_.load() != walked)
    return Status::Corruption("nvtree: invariant 11 violated: the leaf list holds " + std::to_string(walked) +
                              " leaves, the meta block counts " + std::to_string(counted) + ", the DRAM count is " +
                              std::to_string(n_leaves_.load()));
  // Invariant 8: IN keys, bottom level up.
  std::vector<uint64_t> child_max = pln_max;
  for (int64_t d = static_cast<int64_t>(in->level_first.size()) - 1; d >= 0; d--) {
    uint64_t level_size = (d + 1 < static_cast<int64_t>(in->level_first.size()) ? in->level_first[d + 1]
                                                                                 : in->in_count.size()) -
                          in->level_first[d];
    std::vector<uint64_t> node_max(level_size);
    for (uint64_t q = 0; q < level_size; q++) {
      uint64_t node = in->level_first[d] + q;
      uint64_t first = q * in->fanout;
      uint64_t last = std::min<uint64_t>(first + in->fanout, child_max.size());
      if (first >= last || in->in_count[node] != last - first - 1)
        return Status::Corruption("nvtree: IN " + std::to_string(node) + ": invariant 8 violated: wrong key count");
      for (uint64_t ch = first; ch + 1 < last; ch++) {
        if (CompareSeps(in->in_key[node * in->in_keys + (ch - first)], child_max[ch]) != 0)
          return Status::Corruption("nvtree: IN " + std::to_string(node) + ": invariant 8 violated: key " +
                                    std::to_string(ch - first) + " is not its child's largest separator");
      }
      node_max[q] = child_max[last - 1];
    }
    child_max.swap(node_max);
  }
  if (child_max.size() != 1) return Status::Corruption("nvtree: inner array: invariant 8 violated: no single root");
  uint64_t in_use = pool_->allocator().bytes_in_use();
  if (reached != in_use)
    return Status::Corruption("nvtree: invariant 10 violated: tree reaches " + std::to_string(reached) +
                              " bytes, allocator has " + std::to_string(in_use) + " in use");
  return Status::Ok();
}

template <KeyPolicy KP>
TreeStats NvTree<KP>::Stats() {
  auto guard = pool_->epochs().Protect();
  TreeStats s;
  Inner* in = inner_.load(std::memory_order_acquire);
  uint64_t slots = 0, live_total = 0, leaves = 0, pm = Allocator::RoundUp(sizeof(Meta)), dram = in->DramBytes();
  uint32_t min_b = ~0u, max_b = 0;
  uint64_t sum_b = 0;
  std::vector<std::pair<uint64_t, uint64_t>> live;
  for (uint64_t j = 0; j < in->n_pln; j++) {
    Pln& p = in->pln[j];
    for (uint32_t i = 0; i < p.count.load(); i++) {
      LeafHeader* h = Leaf(in->Slot(p, i).ln.load());
      CollectLive(h, h->n_element, &live);
      live_total += live.size();
      slots += h->capacity;
      leaves++;
      pm += Allocator::RoundUp(h->node_bytes);
      if constexpr (!KP::kInline) {
        std::unordered_set<uint64_t> seen;
        const LnElement* el = LeafElements(h);
        for (uint64_t k = 0; k < h->n_element; k++)
          if (seen.insert(el[k].key).second) pm += keys_.SlotBytes(el[k].key);
      }
      min_b = std::min(min_b, h->node_bytes);
      max_b = std::max(max_b, h->node_bytes);
      sum_b += h->node_bytes;
      dram += sizeof(LeafInfo);
    }
  }
  // IN levels + the PLN level + the LN level; a lone LN under a lone PLN
  // counts as one level (the PLN is then only the root pointer).
  s.height = static_cast<uint32_t>(in->level_first.size()) + (leaves > 1 ? 2 : 1);
  s.entries = live_total;
  s.leaf_nodes = leaves;
  s.inner_nodes = in->in_count.size() + in->n_pln;
  s.leaf_fill = slots ? static_cast<double>(live_total) / static_cast<double>(slots) : 0;
  s.pm_bytes = pm;
  s.dram_bytes = dram;
  auto add = [&](const char* k, double v) { s.extra.emplace_back(k, v); };
  add("rebuilds", static_cast<double>(rebuilds_.load()));
  add("rebuild_ns", static_cast<double>(rebuild_ns_.load()));
  add("splits", static_cast<double>(splits_.load()));
  add("replaces", static_cast<double>(replaces_.load()));
  add("merges", static_cast<double>(merges_.load()));
  add("n_writes", static_cast<double>(n_writes_.load()));
  add("n_reads", static_cast<double>(n_reads_.load()));
  add("pln_count", static_cast<double>(in->n_pln));
  add("pln_enlarged", static_cast<double>(pln_enlarged_.load()));
  add("pln_slack_slots", static_cast<double>(in->n_tail));
  add("pln_slack_resident_bytes", static_cast<double>(in->TailResidentBytes()));
  add("size_increases", static_cast<double>(size_up_.load()));
  add("size_decreases", static_cast<double>(size_down_.load()));
  add("size_model_rejections", static_cast<double>(size_rejected_.load()));
  add("leaf_bytes_min", leaves ? static_cast<double>(min_b) : 0);
  add("leaf_bytes_avg", leaves ? static_cast<double>(sum_b) / static_cast<double>(leaves) : 0);
  add("leaf_bytes_max", static_cast<double>(max_b));
  add("strategy", static_cast<double>(static_cast<uint32_t>(strategy_)));
  add("origin", static_cast<double>(static_cast<int>(origin_)));
  add("recovery_ns", static_cast<double>(recovery_ns_.load()));
  add("media_read_ns", cost_.read_ns_per_line);
  add("media_write_ns", cost_.write_ns_per_line);
  return s;
}

template <KeyPolicy KP>
std::vector<uint32_t> NvTree<KP>::LeafSizes() {
  std::vector<uint32_t> out;
  for (uint64_t off = meta_->head; off != 0; off = Leaf(off)->next) out.push_back(Leaf(off)->node_bytes);
  return out;
}

template class NvTree<U64Keys>;
template class NvTree<BytesKeys>;

PMTREE_REGISTRY_ENTRY_POINTS(NvTree);

}  // namespace pmtree::nvtree
