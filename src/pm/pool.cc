// SPDX-License-Identifier: Apache-2.0
//
// Pool: mapping, header validation, backend selection, clean shutdown.
//
// Opening validates the header with pread() before anything is mapped, so a
// file that is not a pool, is truncated, has another format version or holds
// another tree is rejected without a single byte changed.

#include "pm/pool_impl.h"

#include <cpuid.h>
#include <fcntl.h>
#include <libpmem2.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>

#include "pm/backends.h"
#include "pm/pool_format.h"

namespace pmtree {

// What was mapped and how to undo it.
struct Pool::Mapping {
  char* view = nullptr;   // the tree's view (read-only when alias differs)
  char* alias = nullptr;  // writable mapping of the same bytes
  uint64_t size = 0;
  int fd = -1;            // pool file or memfd; holds the flock
  bool anonymous = false;
  pmem2_map* map = nullptr;
  pmem2_source* source = nullptr;
  pmem2_config* config = nullptr;

  ~Mapping() {
    if (map != nullptr) {
      pmem2_map_delete(&map);
    } else {
      if (alias != nullptr && alias != view) munmap(alias, size);
      if (view != nullptr) munmap(view, size);
    }
    if (source != nullptr) pmem2_source_delete(&source);
    if (config != nullptr) pmem2_config_delete(&config);
    if (fd >= 0) close(fd);  // also releases the flock
  }
};

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool CpuHas(FlushInstruction f) {
  unsigned a, b, c, d;
  switch (f) {
    case FlushInstruction::kClwb: return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 24));
    case FlushInstruction::kClflushopt: return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23));
    default: return true;
  }
}

// Validates a header read from a file or memfd of `file_size` bytes.
Status CheckHeader(const PoolHeader& h, uint64_t file_size, std::string_view expected_layout) {
  if (std::memcmp(h.magic, kPoolMagic, sizeof(kPoolMagic)) != 0)
    return Status::Corruption("not a pmtree pool (no PMTREEPL magic at offset 0)");
  if (h.format_version != kPoolFormatVersion)
    return Status::Incompatible("pool format version " + std::to_string(h.format_version) +
                                ", this build reads version " + std::to_string(kPoolFormatVersion));
  if (Fnv1a64(&h, kChecksummedBytes) != h.checksum)
    return Status::Corruption("pool header checksum mismatch (bytes 0..87 damaged)");
  if (h.header_size != kPoolHeaderSize)
    return Status::Corruption("pool header size " + std::to_string(h.header_size) + " is not 4096");
  if (h.pool_size != file_size)
    return Status::Corruption("pool truncated or extended: header says " + std::to_string(h.pool_size) +
                              " bytes, file has " + std::to_string(file_size));
  if (h.layout[sizeof(h.layout) - 1] != '\0') return Status::Corruption("pool layout name not terminated");
  std::string_view layout(h.layout);
  if (!expected_layout.empty() && layout != expected_layout)
    return Status::Incompatible("pool holds tree '" + std::string(layout) + "', not '" +
                                std::string(expected_layout) + "'");
  return Status::Ok();
}

Status ReadHeader(int fd, uint64_t file_size, PoolHeader* h) {
  if (file_size < kPoolHeaderSize)
    return Status::Corruption("file of " + std::to_string(file_size) +
                              " bytes is too small to be a pmtree pool (truncated?)");
  ssize_t n = pread(fd, h, sizeof(*h), 0);
  if (n != static_cast<ssize_t>(sizeof(*h))) return Status::IoError(Errno("reading the pool header"));
  return Status::Ok();
}

Status ApplyEnv(PoolOptions* o) {
  if (!o->use_env) return Status::Ok();
  if (const char* b = std::getenv("PMTREE_BACKEND"); b != nullptr && *b != '\0') {
    if (o->backend == BackendKind::kCustom) return Status::Ok();  // the explorer's tracer wins
    PMTREE_RETURN_IF_ERROR(ParseBackend(b, &o->backend, &o->flush).Annotate("PMTREE_BACKEND"));
  }
  if (const char* l = std::getenv("PMTREE_WRITE_LATENCY_NS"); l != nullptr && *l != '\0') {
    char* end = nullptr;
    unsigned long v = std::strtoul(l, &end, 10);
    if (*end != '\0' || v > kMaxWriteLatencyNs)
      return Status::InvalidArgument("PMTREE_WRITE_LATENCY_NS must be a number of ns in 0.." +
                                     std::to_string(kMaxWriteLatencyNs) + ", got '" + std::string(l) + "'");
    o->write_latency_ns = static_cast<uint32_t>(v);
  }
  return Status::Ok();
}

}  // namespace

// Maps an open pool file with libpmem2.
Status Pool::MapFile(Mapping* m, bool private_mapping) {
  if (pmem2_config_new(&m->config) != 0) return Status::IoError(std::string("pmem2_config_new: ") + pmem2_errormsg());
  // Page granularity is the weakest we accept: /dev/shm and ordinary files
  // are page-granular; a DAX mount reports cache-line or byte granularity.
  if (pmem2_config_set_required_store_granularity(m->config, PMEM2_GRANULARITY_PAGE) != 0)
    return Status::IoError(std::string("pmem2 granularity: ") + pmem2_errormsg());
  if (private_mapping && pmem2_config_set_sharing(m->config, PMEM2_PRIVATE) != 0)
    return Status::IoError(std::string("pmem2 private sharing: ") + pmem2_errormsg());
  if (pmem2_source_from_fd(&m->source, m->fd) != 0)
    return Status::IoError(std::string("pmem2_source_from_fd: ") + pmem2_errormsg());
  if (pmem2_map_new(&m->map, m->config, m->source) != 0)
    return Status::IoError(std::string("pmem2_map_new: ") + pmem2_errormsg());
  m->view = m->alias = static_cast<char*>(pmem2_map_get_address(m->map));
  m->size = pmem2_map_get_size(m->map);
  return Status::Ok();
}

// Maps a memfd once (or twice: a read-only view and a writable alias).
Status Pool::MapMemfd(Mapping* m, bool read_only_view, bool private_mapping, BackendKind backend) {
  if (read_only_view && backend != BackendKind::kCustom)
    return Status::InvalidArgument("a read-only view needs a custom backend that writes through the alias");
  if (read_only_view && private_mapping)
    return Status::InvalidArgument("a private mapping cannot also have a read-only view with a writable alias");
  const int share = private_mapping ? MAP_PRIVATE : MAP_SHARED;
  void* rw = mmap(nullptr, m->size, PROT_READ | PROT_WRITE, share, m->fd, 0);
  if (rw == MAP_FAILED) return Status::IoError(Errno("mmap of the anonymous pool"));
  m->alias = static_cast<char*>(rw);
  if (read_only_view) {
    void* ro = mmap(nullptr, m->size, PROT_READ, MAP_SHARED, m->fd, 0);
    if (ro == MAP_FAILED) return Status::IoError(Errno("mmap of the read-only view"));
    m->view = static_cast<char*>(ro);
  } else {
    m->view = m->alias;
  }
  return Status::Ok();
}

Status Pool::InstallBackend(const PoolOptions& options) {
  if (options.write_latency_ns > kMaxWriteLatencyNs)
    return Status::InvalidArgument("write latency must be in 0.." + std::to_string(kMaxWriteLatencyNs) +
                                   " ns per flushed line, got " + std::to_string(options.write_latency_ns));
  backend_kind_ = options.backend;
  write_latency_ns_ = options.write_latency_ns;
  std::unique_ptr<PersistBackend> b;
  switch (options.backend) {
    case BackendKind::kHardware:
      flush_ = options.flush == FlushInstruction::kAuto ? DetectFlushInstruction() : options.flush;
      if (!CpuHas(flush_))
        return Status::InvalidArgument("this CPU has no " + std::string(FlushInstructionName(flush_)) +
                                       " instruction; use hardware:auto");
      b = MakeHardwareBackend(flush_);
      break;
    case BackendKind::kEadr: b = MakeEadrBackend(); break;
    case BackendKind::kDram: b = MakeDramBackend(); break;
    case BackendKind::kMsync:
      if (map_->map == nullptr) return Status::NotSupported("the msync backend needs a pool file");
      b = MakeMsyncBackend(pmem2_get_flush_fn(map_->map), pmem2_get_drain_fn(map_->map));
      break;
    case BackendKind::kCustom:
      if (!options.backend_factory) return Status::InvalidArgument("custom backend without a factory");
      b = options.backend_factory(map_->view, map_->alias, map_->size);
      if (!b) return Status::InvalidArgument("custom backend factory returned nothing");
      break;
  }
  if (options.write_latency_ns > 0) b = WrapLatency(std::move(b), options.write_latency_ns);
  if (options.counting) b = WrapCounting(std::move(b));
  if (options.write_profile) {
    profile_ = options.write_profile;
    profile_->Attach(base_, size_);
    b = WrapProfiling(std::move(b), profile_.get());
  }
  backend_ = std::move(b);
  return Status::Ok();
}

void Pool::InitHeader(std::string_view layout, uint64_t layout_flags) {
  PoolImpl& self = PoolImpl::Of(*this);
  auto* h = reinterpret_cast<PoolHeader*>(base_);
  PoolHeader init;
  std::memset(&init, 0, sizeof(init));
  init.format_version = kPoolFormatVersion;
  init.header_size = kPoolHeaderSize;
  init.pool_size = size_;
  init.layout_flags = layout_flags;
  std::memcpy(init.layout, layout.data(), layout.size());
  std::random_device rd;
  for (auto& byte : init.uuid) byte = static_cast<uint8_t>(rd());
  init.create_time = static_cast<uint64_t>(std::time(nullptr));
  std::memcpy(init.magic, kPoolMagic, sizeof(kPoolMagic));
  init.checksum = Fnv1a64(&init, kChecksummedBytes);
  // Everything but the magic first: a crash before the magic is durable
  // leaves a file that Open rejects as "not a pool", never a half pool.
  self.Write(reinterpret_cast<char*>(h) + sizeof(kPoolMagic), reinterpret_cast<char*>(&init) + sizeof(kPoolMagic),
        sizeof(init) - sizeof(kPoolMagic));
  // Persist the body before the magic so a durable magic implies a complete header.
  self.Persist(h, sizeof(*h));
  self.Write(h->magic, kPoolMagic, sizeof(kPoolMagic));
  // Persist the magic: the pool exists from here on.
  self.Persist(h->magic, sizeof(kPoolMagic));
}

Result<std::unique_ptr<Pool>> Pool::Attach(std::unique_ptr<Mapping> m, const PoolOptions& options_in, bool creating, std::string_view layout,
                                           uint64_t layout_flags) {
  PoolOptions options = options_in;
  PMTREE_RETURN_IF_ERROR(ApplyEnv(&options));
  std::unique_ptr<PoolImpl> pool(new PoolImpl());
  pool->map_ = std::move(m);
  pool->base_ = pool->map_->view;
  pool->size_ = pool->map_->size;
  pool->memfd_ = pool->map_->anonymous ? pool->map_->fd : -1;
  if (options.on_map) options.on_map(pool->base_, pool->size_);
  if (pool->map_->map != nullptr) {
    switch (pmem2_map_get_store_granularity(pool->map_->map)) {
      case PMEM2_GRANULARITY_BYTE: pool->granularity_ = "byte"; break;
      case PMEM2_GRANULARITY_CACHE_LINE: pool->granularity_ = "cache line"; break;
      default: pool->granularity_ = "page"; break;
    }
  }
  PMTREE_RETURN_IF_ERROR(pool->InstallBackend(options));
  pool->allocator_ = std::make_unique<Allocator>(kPoolHeaderSize, pool->size_);
  pool->allocator_->set_write_profile(pool->profile_.get());
  pool->allocator_->set_size_classes(options.allocator_size_classes);
  auto* h = reinterpret_cast<PoolHeader*>(pool->base_);
  if (creating) {
    pool->InitHeader(layout, layout_flags);
    pool->layout_ = std::string(layout);
    pool->layout_flags_ = layout_flags;
    pool->clean_shutdown_ = true;
    return std::unique_ptr<Pool>(std::move(pool));
  }
  pool->layout_ = std::string(h->layout);
  pool->layout_flags_ = h->layout_flags;
  pool->clean_shutdown_ = h->shutdown_state == kCleanShutdown;
  bool restored = false;
  if (pool->clean_shutdown_ && h->alloc_state != 0 && pool->InHeap(h->alloc_state, sizeof(SavedAllocState))) {
    const auto* saved = pool->At<SavedAllocState>(h->alloc_state);
    const uint64_t n = saved->count;
    if (n <= (pool->size_ / kAllocGranule) && pool->InHeap(h->alloc_state, sizeof(SavedAllocState) + 16 * n) &&
        Fnv1a64(saved->extents, 16 * n) == saved->checksum) {
      std::vector<std::pair<uint64_t, uint64_t>> extents(n);
      for (uint64_t i = 0; i < n; i++) extents[i] = {saved->extents[2 * i], saved->extents[2 * i + 1]};
      if (pool->allocator_->LoadFreeExtents(extents).ok()) {
        // The saved state's own block is no longer needed.
        pool->allocator_->Free(h->alloc_state, sizeof(SavedAllocState) + 16 * n);
        pool->saved_bytes_in_use_ = pool->allocator_->bytes_in_use();
        restored = true;
      }
    }
  }
  // A clean close always saves a valid state before it sets the flag (see
  // Close), so "clean" with a saved state that fails its checks is damage.
  // Say so rather than rebuild from reachability, which would turn whatever
  // the damage cut off into free space without a word.  "Clean" with
  // alloc_state 0 is not damage: an open that crashed after persisting its
  // first store below (alloc_state = 0) but not the next (shutdown_state).
  if (pool->clean_shutdown_ && h->alloc_state != 0 && !restored)
    return Status::Corruption("the header records a clean shutdown but the saved allocator state at offset " +
                              std::to_string(h->alloc_state) + " is damaged (bad offset, count, checksum or extent)");
  // Without a restored state the tree's recovery must rebuild the allocator
  // from what it reaches (pmtree/allocator.h); until then nothing allocates.
  if (!restored) {
    pool->clean_shutdown_ = false;
    pool->allocator_->BeginRebuild();
  }
  if (restored) pool->opened_alloc_state_ = h->alloc_state;
  pool->opened_open_count_ = h->open_count;
  // From here on the pool is open: mark it dirty so a crash before the next
  // clean Close is detected, and drop the saved allocator state.
  pool->Store64(&h->alloc_state, 0);
  pool->Store64(&h->shutdown_state, 0);
  pool->Store64(&h->open_count, h->open_count + 1);
  // Persist "dirty" before the tree changes anything: otherwise a crash
  // could reopen as clean with a stale saved allocator state.
  pool->Persist(&h->shutdown_state, 24);
  return std::unique_ptr<Pool>(std::move(pool));
}

namespace {

// Removes the file at `path` when destroyed while armed: Create arms it only
// for a file it made itself, so a failure never unlinks what existed before.
struct CreatedFileGuard {
  std::string path;
  bool armed = false;
  ~CreatedFileGuard() {
    if (armed) unlink(path.c_str());
  }
};

// Opens `path` for Create: a new file (O_EXCL), or with `overwrite` an
// existing regular file whose header validates as a pmtree pool.  Sets
// *created when the file is new.
Status OpenForCreate(const std::string& path, bool overwrite, int* fd, bool* created) {
  *fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (*fd >= 0) {
    *created = true;
    return Status::Ok();
  }
  if (errno != EEXIST) return Status::IoError(Errno("creating " + path));
  if (!overwrite) return Status::Busy(path + " already exists; remove it or ask to overwrite it");
  *fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (*fd < 0) return Status::IoError(Errno("opening " + path + " to overwrite it"));
  struct stat st;
  if (fstat(*fd, &st) != 0) return Status::IoError(Errno("stat " + path));
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument(path + " exists and is not a regular file; refusing to overwrite it");
  PoolHeader h;
  Status s = ReadHeader(*fd, static_cast<uint64_t>(st.st_size), &h);
  if (s.ok()) s = CheckHeader(h, static_cast<uint64_t>(st.st_size), "");
  if (!s.ok())
    return Status::InvalidArgument(path + " exists and is not a pmtree pool (" + std::string(s.message()) +
                                   "); refusing to overwrite it");
  *created = false;
  return Status::Ok();
}

// Gives the file exactly `size` bytes, none of an earlier content, and (with
// `reserve`) every block allocated now rather than at the first store.
Status SizeNewPoolFile(int fd, const std::string& path, uint64_t size, bool reserve) {
  if (ftruncate(fd, 0) != 0) return Status::IoError(Errno("truncating " + path));
  if (reserve) {
    const int err = posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (err == ENOSPC || err == EFBIG || err == EDQUOT)
      return Status::OutOfSpace("no room for a pool of " + std::to_string(size) + " bytes at " + path + ": " +
                                std::strerror(err) + "; choose a smaller pool size or another file system");
    if (err != 0) return Status::IoError("reserving " + std::to_string(size) + " bytes for " + path + ": " +
                                         std::strerror(err));
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0)
    return Status::IoError(Errno("sizing " + path + " to " + std::to_string(size) + " bytes"));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Pool>> Pool::Create(const std::string& path, uint64_t size, std::string_view layout,
                                           uint64_t layout_flags, const PoolOptions& options) {
  if (path.empty()) return Status::InvalidArgument("pool path is empty");
  if (layout.empty() || layout.size() > kLayoutNameMax)
    return Status::InvalidArgument("layout name must have 1.." + std::to_string(kLayoutNameMax) + " characters");
  if (size < kMinPoolSize || size % 4096 != 0)
    return Status::InvalidArgument("pool size must be a multiple of 4096 and at least " +
                                   std::to_string(kMinPoolSize) + " bytes");
  auto m = std::make_unique<Mapping>();
  CreatedFileGuard guard{path};
  bool created = false;
  PMTREE_RETURN_IF_ERROR(OpenForCreate(path, options.overwrite, &m->fd, &created));
  guard.armed = created;
  if (flock(m->fd, LOCK_EX | LOCK_NB) != 0)
    return Status::Busy(path + " is open in another process");
  PMTREE_RETURN_IF_ERROR(SizeNewPoolFile(m->fd, path, size, options.reserve_space));
  PMTREE_RETURN_IF_ERROR(MapFile(m.get(), false).Annotate(path));
  auto r = Attach(std::move(m), options, true, layout, layout_flags);
  if (!r.ok()) return r.status().Annotate(path);
  r.value()->path_ = path;
  r.value()->created_file_ = created;
  guard.armed = false;
  return r;
}

Result<std::unique_ptr<Pool>> Pool::Open(const std::string& path, std::string_view expected_layout,
                                         const PoolOptions& options) {
  auto m = std::make_unique<Mapping>();
  // A private (copy-on-write) mapping never writes the file, so it needs
  // only read access: a read-only file or file system can be inspected.
  m->fd = open(path.c_str(), (options.private_mapping ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (m->fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such pool file");
    return Status::IoError(Errno("opening " + path));
  }
  if (flock(m->fd, (options.private_mapping ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0)
    return Status::Busy(path + " is open in another process");
  struct stat st;
  if (fstat(m->fd, &st) != 0) return Status::IoError(Errno("stat " + path));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  PoolHeader h;
  PMTREE_RETURN_IF_ERROR(ReadHeader(m->fd, static_cast<uint64_t>(st.st_size), &h).Annotate(path));
  PMTREE_RETURN_IF_ERROR(CheckHeader(h, static_cast<uint64_t>(st.st_size), expected_layout).Annotate(path));
  if (options.accept) PMTREE_RETURN_IF_ERROR(options.accept(h.layout, h.layout_flags));
  PMTREE_RETURN_IF_ERROR(MapFile(m.get(), options.private_mapping).Annotate(path));
  auto r = Attach(std::move(m), options, false, "", 0);
  if (!r.ok()) return r.status().Annotate(path);
  r.value()->path_ = path;
  return r;
}

Result<std::unique_ptr<Pool>> Pool::CreateAnonymous(uint64_t size, std::string_view layout, uint64_t layout_flags,
                                                    const PoolOptions& options, bool read_only_view) {
  if (layout.empty() || layout.size() > kLayoutNameMax)
    return Status::InvalidArgument("layout name must have 1.." + std::to_string(kLayoutNameMax) + " characters");
  if (size < kMinPoolSize || size % 4096 != 0)
    return Status::InvalidArgument("pool size must be a multiple of 4096 and at least " +
                                   std::to_string(kMinPoolSize) + " bytes");
  auto m = std::make_unique<Mapping>();
  m->anonymous = true;
  m->size = size;
  m->fd = memfd_create("pmtree-pool", MFD_CLOEXEC);
  if (m->fd < 0) return Status::IoError(Errno("memfd_create"));
  if (ftruncate(m->fd, static_cast<off_t>(size)) != 0) return Status::IoError(Errno("sizing the anonymous pool"));
  PMTREE_RETURN_IF_ERROR(MapMemfd(m.get(), read_only_view, options.private_mapping, options.backend));
  return Attach(std::move(m), options, true, layout, layout_flags);
}

Result<std::unique_ptr<Pool>> Pool::OpenAnonymous(int fd, uint64_t size, std::string_view expected_layout,
                                                  const PoolOptions& options, bool read_only_view) {
  auto m = std::make_unique<Mapping>();
  m->anonymous = true;
  m->size = size;
  m->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (m->fd < 0) return Status::IoError(Errno("dup of the anonymous pool fd"));
  PoolHeader h;
  PMTREE_RETURN_IF_ERROR(ReadHeader(m->fd, size, &h));
  PMTREE_RETURN_IF_ERROR(CheckHeader(h, size, expected_layout));
  if (options.accept) PMTREE_RETURN_IF_ERROR(options.accept(h.layout, h.layout_flags));
  PMTREE_RETURN_IF_ERROR(MapMemfd(m.get(), read_only_view, options.private_mapping, options.backend));
  return Attach(std::move(m), options, false, "", 0);
}

Pool::~Pool() = default;

Status Pool::Close() {
  PoolImpl& self = PoolImpl::Of(*this);
  if (closed_) return Status::Ok();
  closed_ = true;
  auto* h = reinterpret_cast<PoolHeader*>(base_);
  // Blocks retired by the tree are free now: no operation runs any more.
  allocator_->epochs().DrainAll();
  if (allocator_->rebuilding())
    return Status::Internal("closing a pool whose allocator was never rebuilt after a crash (tree recovery "
                            "did not call EndRebuild)");
  // Save the free list for instant restart.  Open frees the block as
  // RoundUp(16 + 16 * count) bytes, so the block must have exactly that size
  // for the count that remains once the block itself is taken (allocating it
  // may consume one extent or split one).  Try both predictions; if neither
  // is consistent, save nothing (the next open rebuilds the allocator).
  Result<uint64_t> block = Status::OutOfSpace("no consistent size for the saved allocator state");
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  const uint64_t before = allocator_->FreeExtents().size();
  for (uint64_t predicted : {before, before == 0 ? 0 : before - 1}) {
    const uint64_t bytes = Allocator::RoundUp(sizeof(SavedAllocState) + 16 * predicted);
    auto b = allocator_->Allocate(bytes);
    if (!b.ok()) continue;
    extents = allocator_->FreeExtents();  // now without the block
    // The block took a whole extent and left one fewer than its size was
    // made for: list one extent as two adjacent pieces (Open's
    // LoadFreeExtents joins them again), so the count matches the size.
    if (Allocator::RoundUp(sizeof(SavedAllocState) + 16 * (extents.size() + 1)) == bytes) {
      for (size_t i = 0; i < extents.size(); i++) {
        const auto [off, len] = extents[i];
        if (len < 2 * kAllocGranule) continue;
        extents[i].second = kAllocGranule;
        extents.insert(extents.begin() + static_cast<std::ptrdiff_t>(i) + 1, {off + kAllocGranule, len - kAllocGranule});
        break;
      }
    }
    if (Allocator::RoundUp(sizeof(SavedAllocState) + 16 * extents.size()) == bytes) {
      block = b;
      break;
    }
    allocator_->Free(*b, bytes);
  }
  if (block.ok()) {
    auto* saved = self.At<SavedAllocState>(*block);
    std::vector<uint64_t> words;
    words.reserve(2 * extents.size());
    for (const auto& [off, len] : extents) {
      words.push_back(off);
      words.push_back(len);
    }
    const uint64_t head[2] = {extents.size(), Fnv1a64(words.data(), 8 * words.size())};
    self.Write(saved, head, sizeof(head));
    self.Write(saved->extents, words.data(), 8 * words.size());
    // Persist the saved state before the header names it, so a crash never
    // leaves the header pointing at a half-written list.
    self.Persist(saved, sizeof(head) + 8 * words.size());
    self.Store64(&h->alloc_state, *block);
    // Persist alloc_state before the clean flag: clean implies a valid state.
    self.Persist(&h->alloc_state, 8);
  }
  // A full pool cannot save its free list; the next open then rebuilds it
  // from the tree (still correct, only slower).
  self.Store64(&h->shutdown_state, block.ok() ? kCleanShutdown : 0);
  // Persist the clean flag last: everything it vouches for is durable.
  self.Persist(&h->shutdown_state, 8);
  map_.reset();
  base_ = nullptr;
  return Status::Ok();
}

uint64_t PoolImpl::root(int slot) const {
  const auto* h = reinterpret_cast<const PoolHeader*>(base_);
  return Load64(&h->root[slot]);
}

void PoolImpl::SetRoot(int slot, uint64_t offset) {
  auto* h = reinterpret_cast<PoolHeader*>(base_);
  Store64(&h->root[slot], offset);
  // Persist the root slot: callers use it as a commit point (creation of the
  // tree's anchor), so it must be durable when SetRoot returns.
  Persist(&h->root[slot], 8);
}

void Pool::RestoreOpenState() {
  if (closed_ || opened_alloc_state_ == 0) return;
  closed_ = true;
  PoolImpl& self = PoolImpl::Of(*this);  // every pool is made as a PoolImpl
  auto* h = reinterpret_cast<PoolHeader*>(base_);
  // The saved state's block was free during the recovery: use it again only
  // if nothing overwrote it.
  const auto* saved = self.At<SavedAllocState>(opened_alloc_state_);
  const uint64_t n = saved->count;
  if (n > size_ / kAllocGranule || !self.InHeap(opened_alloc_state_, sizeof(SavedAllocState) + 16 * n) ||
      Fnv1a64(saved->extents, 16 * n) != saved->checksum)
    return;
  self.Store64(&h->alloc_state, opened_alloc_state_);
  self.Store64(&h->open_count, opened_open_count_);
  // Persist alloc_state before the clean flag: clean implies a valid state
  // (as in Close).
  self.Persist(&h->alloc_state, 16);
  self.Store64(&h->shutdown_state, kCleanShutdown);
  self.Persist(&h->shutdown_state, 8);
}

uint64_t Pool::id() const {
  const auto* h = reinterpret_cast<const PoolHeader*>(base_);
  return Fnv1a64(h->uuid, sizeof(h->uuid));
}

std::string Pool::Describe() const {
  std::string s = "backend=" + (backend_ ? backend_->Describe() : std::string("none"));
  s += "; mapping=" + std::string(granularity_) + " granularity";
  if (granularity_ == "page" && backend_kind_ != BackendKind::kMsync)
    s += " (DRAM-backed or non-DAX: survives a process crash, not a power loss)";
  s += "; pool=" + (path_.empty() ? std::string("anonymous") : path_);
  return s;
}

}  // namespace pmtree
