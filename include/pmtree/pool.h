// SPDX-License-Identifier: Apache-2.0
//
// Pool: a persistent-memory region holding one tree (the embedder's face).
//
// A pool is a file mapped with libpmem2 (a pool under /dev/shm, on a DAX
// mount, or on any file system), or an anonymous region for tests and the
// crash explorer.  It starts with a 4 KiB header (docs/pool_format.md) that
// names the format version and the tree ("layout") it holds, records whether
// the last close was clean, and carries eight root slots in which a tree
// anchors its metadata.  The rest is the heap, managed by the tree's
// allocator.
//
// This header is what a program that embeds pmtree uses: create, open and
// close a pool, choose its persistence backend, read its identity.  Most
// programs never name it: CreateTree/OpenTree (pmtree/registry.h) and
// KvStore (pmtree/kv.h) open the pool for them.  How a tree writes to the
// pool (stores, flushes, fences, root slots, the allocator) is the tree
// author's face, PoolImpl in src/pm/pool_impl.h, which is not installed
// (LevelDB's db.h vs db_impl.h).  Every Pool is a PoolImpl.
//
// Durability of a /dev/shm pool: flush instructions really execute, but the
// memory is DRAM, so data survives a process crash, not a power loss.  On a
// DAX mount of real persistent memory the same code gives power-loss
// durability; on a non-DAX disk file use the `msync` backend.
//
// Thread safety: Open/Create/Close are not concurrent with anything else on
// the same pool; the accessors below may be called from any thread.

#ifndef PMTREE_POOL_H_
#define PMTREE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "pmtree/backend.h"
#include "pmtree/status.h"
#include "pmtree/write_profile.h"

namespace pmtree {

class Allocator;
class PoolImpl;

// Which persistence mechanism a pool uses; chosen once at open.
enum class BackendKind : uint8_t {
  kHardware,  // cache-line flush instruction (clwb > clflushopt > clflush) + sfence
  kEadr,      // caches are persistent: no flush, fences only
  kMsync,     // libpmem2's flush for a page-granular mapping (msync): non-DAX files
  kDram,      // no flush, no fence: the speed-of-light baseline, no durability
  kCustom,    // a backend supplied by the caller (the crash explorer's tracer)
};

// The flush instruction of the hardware backend.
enum class FlushInstruction : uint8_t { kAuto, kClwb, kClflushopt, kClflush };

std::string_view BackendName(BackendKind kind);
std::string_view FlushInstructionName(FlushInstruction f);
// Parses "hardware", "eadr", "msync", "dram" (and "hardware:clwb" etc. with `flush`).
Status ParseBackend(std::string_view text, BackendKind* kind, FlushInstruction* flush);
// The best flush instruction this CPU offers (CPUID), never kAuto.
FlushInstruction DetectFlushInstruction();

// Factory for a kCustom backend.  `view` is the tree's (possibly read-only)
// mapping, `alias` a writable mapping of the same bytes (== view when there is
// no separate alias).
using BackendFactory =
    std::function<std::unique_ptr<PersistBackend>(char* view, char* alias, uint64_t size)>;

struct PoolOptions {
  BackendKind backend = BackendKind::kHardware;
  FlushInstruction flush = FlushInstruction::kAuto;  // kHardware only
  // Extra delay per flushed cache line, emulating slower media (the papers use
  // 0/50/180/300/600 ns).  Spins on a calibrated clock.
  uint32_t write_latency_ns = 0;
  // Count flushes/fences/lines/blocks/bytes into the process-wide counters
  // (pmtree/counters.h).  Cheap enough to stay on in benchmarks.
  bool counting = true;
  // Honour PMTREE_BACKEND ("hardware[:clwb|clflushopt|clflush]", "eadr",
  // "msync", "dram") and PMTREE_WRITE_LATENCY_NS from the environment,
  // overriding the fields above.  Off by default: the environment of a
  // program that embeds pmtree never changes its durability.  The tools opt in
  // (`pmtree bench`, `pmtree inspect`, the conformance tests).
  bool use_env = false;
  // Map copy-on-write: recovery may write, the file is never changed
  // (used by `pmtree inspect`).
  bool private_mapping = false;
  // Create only: refuse (kBusy) when the path exists, unless this is set;
  // even then only an existing pmtree pool (a regular file whose header
  // validates) is replaced: any other file is refused and left untouched.
  bool overwrite = false;
  // Create only: reserve every block of the file with posix_fallocate, so a
  // full file system fails Create with kOutOfSpace instead of killing the
  // process with SIGBUS on a later store.  On tmpfs (/dev/shm) the reserved
  // size is memory taken up front.
  bool reserve_space = true;
  // Open only: called with the layout name and layout flags of a header that
  // validated, before anything is mapped or written.  A non-OK status fails
  // the open with every byte of the file unchanged (the registry uses it to
  // refuse an unknown tree or the wrong key kind).
  std::function<Status(std::string_view layout, uint64_t layout_flags)> accept;
  // kCustom only.
  BackendFactory backend_factory;
  // Called with the pool's mapping right after it is mapped, before any byte
  // of it is read or written (the crash explorer's lazy mode protects pages
  // there to see which lines recovery reads: src/crash/lazy.h).
  std::function<void(char* view, uint64_t size)> on_map;
  // Count stores and flushes per line and page, and allocations, into this
  // profile (pmtree/write_profile.h); null = no profiling (the default).
  // The pool keeps a reference while it is open.
  std::shared_ptr<WriteProfile> write_profile;
  // Let the allocator keep freed blocks of up to 1 KiB in per-size lists
  // for the next allocation of their size (Allocator::set_size_classes):
  // much cheaper with many free fragments, but a freed block is then reused
  // only by its own size.  Off by default, so every tree, test and the crash
  // explorer keep best fit, whose reuse of freed space across sizes exposes
  // more use-after-free orders; `pmtree serve` turns it on.
  bool allocator_size_classes = false;
};

// Largest emulated extra latency per flushed line (10 us, 16x the slowest
// medium the papers emulate); anything above turns a run into a hang.
inline constexpr uint32_t kMaxWriteLatencyNs = 10000;

// Number of root slots in the header.
inline constexpr int kRootSlots = 8;
// Size of the pool header; the heap starts here.
inline constexpr uint64_t kPoolHeaderSize = 4096;
// Smallest pool we create (header + a little heap).
inline constexpr uint64_t kMinPoolSize = 1 << 20;
inline constexpr uint64_t kDefaultPoolSize = 4ull << 30;  // sparse on tmpfs: costs what is used
inline constexpr size_t kLayoutNameMax = 31;

class Pool {
 public:
  // Creates a pool file of `size` bytes for the tree `layout` (its registry
  // name).  `layout_flags` is opaque to the pool (the tree layer records the
  // key kind there).  The file is written header-last, so a crash during
  // Create leaves a file that Open rejects as "not a pool".  A failure
  // removes the file only when this call created it: a file that existed
  // before (options.overwrite) is never unlinked.  No space for the whole
  // size is kOutOfSpace (see PoolOptions::reserve_space).
  static Result<std::unique_ptr<Pool>> Create(const std::string& path, uint64_t size,
                                              std::string_view layout, uint64_t layout_flags,
                                              const PoolOptions& options = {});
  // Opens an existing pool.  When `expected_layout` is non-empty it must match.
  // Fails with a clear Status, without changing a byte of the file, when the
  // file is missing, not a pool, truncated, of another format version, of
  // another tree, or refused by options.accept.  With
  // options.private_mapping the file is opened read-only (a read-only file or
  // file system can be inspected).
  static Result<std::unique_ptr<Pool>> Open(const std::string& path, std::string_view expected_layout,
                                            const PoolOptions& options = {});
  // A pool in anonymous memory (memfd) for tests and the explorer.  With
  // `read_only_view`, the tree's view is mapped read-only and writes go
  // through a second, writable mapping owned by the backend.
  static Result<std::unique_ptr<Pool>> CreateAnonymous(uint64_t size, std::string_view layout,
                                                       uint64_t layout_flags, const PoolOptions& options = {},
                                                       bool read_only_view = false);
  // Re-opens an anonymous pool's bytes (e.g. a crash image) as a new Pool
  // object.  `fd` is a memfd of `size` bytes; it is duplicated, not consumed.
  static Result<std::unique_ptr<Pool>> OpenAnonymous(int fd, uint64_t size, std::string_view expected_layout,
                                                     const PoolOptions& options = {},
                                                     bool read_only_view = false);

  // Unmaps without marking a clean shutdown: the next Open sees a crash.
  virtual ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Clean shutdown: saves the allocator state, sets the clean flag, unmaps.
  // The tree must have been closed first (Tree::Close calls this).
  Status Close();
  // After the tree's recovery (or a verify on open) refused this pool as
  // damaged: puts back the header's open state -- clean flag, saved
  // allocator state, open count -- as Open found it, so the next open meets
  // the same pool and refuses it again instead of rebuilding the allocator
  // from what it reaches and absorbing the loss.  Only for a pool Open found
  // cleanly closed whose saved allocator state is still intact; otherwise
  // (and for a pool that was not cleanly closed, which every open recovers
  // from scratch anyway) it does nothing.  The pool must not be used after.
  void RestoreOpenState();

  // ---- identity -------------------------------------------------------------
  std::string_view layout() const { return layout_; }
  uint64_t layout_flags() const { return layout_flags_; }
  const std::string& path() const { return path_; }  // empty when anonymous
  // True when Create made a new file (false when it replaced an existing
  // pool, and for opened or anonymous pools): only then may a caller that
  // fails later remove the file.
  bool created_file() const { return created_file_; }
  uint64_t size() const { return size_; }
  // True when the previous session closed cleanly (so the allocator state was
  // restored and a tree may restart instantly).  A fresh pool counts as clean.
  bool clean_shutdown() const { return clean_shutdown_; }
  // A number that differs between pools (FNV-1a 64 of the header's random
  // uuid): trees mix it into the magic of their nodes, so a block copied in
  // from another pool does not pass for one of this pool's.
  uint64_t id() const;
  // Human description: backend, flush instruction, latency, mapping granularity.
  std::string Describe() const;
  BackendKind backend_kind() const { return backend_kind_; }
  FlushInstruction flush_instruction() const { return flush_; }
  uint32_t write_latency_ns() const { return write_latency_ns_; }
  // "page", "cache line" or "byte": what libpmem2 reports for the mapping.
  std::string_view granularity() const { return granularity_; }
  int memfd() const { return memfd_; }  // -1 for file pools

 private:
  friend class PoolImpl;  // the tree author's face (src/pm/pool_impl.h): no state of its own
  Pool() = default;
  struct Mapping;
  // Wraps a validated mapping: creating writes a new header, else the header
  // (already checked) is adopted and the allocator restored or set to rebuild.
  static Result<std::unique_ptr<Pool>> Attach(std::unique_ptr<Mapping> m, const PoolOptions& options,
                                              bool creating, std::string_view layout, uint64_t layout_flags);
  static Status MapFile(Mapping* m, bool private_mapping);
  static Status MapMemfd(Mapping* m, bool read_only_view, bool private_mapping, BackendKind backend);
  Status InstallBackend(const PoolOptions& options);
  void InitHeader(std::string_view layout, uint64_t layout_flags);

  std::unique_ptr<Mapping> map_;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  std::string layout_;
  uint64_t layout_flags_ = 0;
  bool clean_shutdown_ = true;
  bool closed_ = false;
  bool created_file_ = false;
  uint64_t saved_bytes_in_use_ = 0;
  uint64_t opened_alloc_state_ = 0;  // the header's alloc_state when Open restored it, else 0
  uint64_t opened_open_count_ = 0;   // the header's open_count before Open incremented it
  int memfd_ = -1;
  BackendKind backend_kind_ = BackendKind::kHardware;
  FlushInstruction flush_ = FlushInstruction::kAuto;
  uint32_t write_latency_ns_ = 0;
  std::string_view granularity_ = "page";
  std::shared_ptr<WriteProfile> profile_;  // options.write_profile; outlives the backend and allocator
  std::unique_ptr<PersistBackend> backend_;
  std::unique_ptr<Allocator> allocator_;
};

}  // namespace pmtree

#endif  // PMTREE_POOL_H_
