// SPDX-License-Identifier: Apache-2.0
//
// PoolImpl: the tree author's face of a Pool (pmtree/pool.h is the
// embedder's).  Not installed.
//
// Every Pool object is a PoolImpl (Pool's constructor is private and only
// pool.cc makes one), and PoolImpl adds no state, so PoolImpl::Of turns the
// Pool* an embedder passes in into this face with a static_cast.  The registry
// does that once per entry point (src/trees/registry.cc); tree code, the
// crash explorer, the benchmark and tests hold a PoolImpl throughout.  The
// factories below return a PoolImpl directly.
//
// Writing.  Trees never store to pool memory directly and never issue a flush
// or fence instruction: they call Write/Store64/Flush/Fence/Persist on the
// pool, which forwards to the backend chosen once at open (PMDK's design).
// That single choke point is what makes counting, media-latency emulation and
// crash tracing possible without a single `if` in tree code.  In crash-explorer
// runs the tree's view of the pool is mapped read-only, so a store that
// bypasses this API faults and is reported.
//
// Vocabulary (PMDK's): Flush starts the write-back of the cache lines of a
// range; Fence orders (every earlier flush completes before any later store);
// Persist = Flush + Fence.  The only failure-atomic unit is an aligned 8-byte
// store, written with Store64.
//
// Persistent references are byte offsets from the pool base (0 = null), never
// pointers, so a pool reopens at any address.
//
// Thread safety: all persistence calls are safe from any number of threads.

#ifndef PMTREE_PM_POOL_IMPL_H_
#define PMTREE_PM_POOL_IMPL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "pm/observe.h"
#include "pmtree/allocator.h"
#include "pmtree/backend.h"
#include "pmtree/pool.h"
#include "pmtree/status.h"
#include "pmtree/write_profile.h"

namespace pmtree {

class PoolImpl : public Pool {
 public:
  // The tree author's face of `pool` (which is always a PoolImpl).
  static PoolImpl* Of(Pool* pool) { return static_cast<PoolImpl*>(pool); }
  static PoolImpl& Of(Pool& pool) { return static_cast<PoolImpl&>(pool); }
  static const PoolImpl& Of(const Pool& pool) { return static_cast<const PoolImpl&>(pool); }

  // Pool's factories (pmtree/pool.h documents them), typed as this face.
  static Result<std::unique_ptr<PoolImpl>> Create(const std::string& path, uint64_t size, std::string_view layout,
                                                  uint64_t layout_flags, const PoolOptions& options = {}) {
    return AdoptResult(Pool::Create(path, size, layout, layout_flags, options));
  }
  static Result<std::unique_ptr<PoolImpl>> Open(const std::string& path, std::string_view expected_layout,
                                                const PoolOptions& options = {}) {
    return AdoptResult(Pool::Open(path, expected_layout, options));
  }
  static Result<std::unique_ptr<PoolImpl>> CreateAnonymous(uint64_t size, std::string_view layout,
                                                           uint64_t layout_flags, const PoolOptions& options = {},
                                                           bool read_only_view = false) {
    return AdoptResult(Pool::CreateAnonymous(size, layout, layout_flags, options, read_only_view));
  }
  static Result<std::unique_ptr<PoolImpl>> OpenAnonymous(int fd, uint64_t size, std::string_view expected_layout,
                                                         const PoolOptions& options = {},
                                                         bool read_only_view = false) {
    return AdoptResult(Pool::OpenAnonymous(fd, size, expected_layout, options, read_only_view));
  }
  // Takes ownership of a Pool made by Pool's factories.
  static std::unique_ptr<PoolImpl> Adopt(std::unique_ptr<Pool> pool) {
    return std::unique_ptr<PoolImpl>(Of(pool.release()));
  }

  // Bytes in use according to the allocator state saved by the last clean
  // close (0 when none was restored).  A tree that rebuilds the allocator
  // from what it reaches even after a clean close must reach exactly this
  // many bytes; fewer means blocks became unreachable (a cut list, a damaged
  // pointer), which it reports as Corruption instead of absorbing the loss
  // (docs/pool_format.md, "What a damaged pool gets").
  uint64_t saved_bytes_in_use() const { return saved_bytes_in_use_; }

  // ---- addressing -----------------------------------------------------------
  char* base() const { return base_; }
  template <class T>
  T* At(uint64_t offset) const {
    return offset == 0 ? nullptr : reinterpret_cast<T*>(base_ + offset);
  }
  uint64_t OffsetOf(const void* p) const {
    return p == nullptr ? 0 : static_cast<uint64_t>(static_cast<const char*>(p) - base_);
  }
  // True when [offset, offset+len) lies inside the heap.  Recovery and
  // Verify() check every offset they follow with this.
  bool InHeap(uint64_t offset, uint64_t len) const {
    return offset >= kPoolHeaderSize && offset <= size_ && len <= size_ - offset;
  }

  // ---- writing (the only way to change pool bytes) ---------------------------
  // Each call takes the caller's source line as a defaulted last argument
  // (see Site in pmtree/backend.h); callers never pass it.
  //
  // Plain stores of n bytes; a crash may leave any 8-byte-aligned subset.
  // n == 0 writes nothing (src may then be null, as an empty vector's data()).
  void Write(void* dst, const void* src, size_t n, const Site& site = Site::current()) {
    if (n != 0) backend_->Write(dst, src, n, site);
  }
  // One failure-atomic aligned 8-byte store with release ordering.
  void Store64(void* dst, uint64_t value, const Site& site = Site::current()) {
    backend_->Store64(dst, value, site);
  }
  // Writes n zero bytes.
  void Zero(void* dst, size_t n, const Site& site = Site::current()) { backend_->Zero(dst, n, site); }
  // Non-temporal stores (bypass the cache); ordered by the next Fence.
  void NtWrite(void* dst, const void* src, size_t n, const Site& site = Site::current()) {
    backend_->NtWrite(dst, src, n, site);
  }
  // Starts write-back of every cache line overlapping [p, p+n).
  void Flush(const void* p, size_t n, const Site& site = Site::current()) { backend_->Flush(p, n, site); }
  // Orders: earlier flushes complete before later stores.
  void Fence(const Site& site = Site::current()) { backend_->Fence(site); }
  void Persist(const void* p, size_t n, const Site& site = Site::current()) {
    backend_->Flush(p, n, site);
    backend_->Fence(site);
  }
  // Typed convenience: Set(&node->count, 3).  8-byte fields use Store64.
  template <class T>
  void Set(T* field, const T& value, const Site& site = Site::current()) {
    static_assert(std::is_trivially_copyable_v<T>);
    if constexpr (sizeof(T) == 8 && alignof(T) == 8) {
      uint64_t v;
      std::memcpy(&v, &value, 8);
      backend_->Store64(field, v, site);
    } else {
      backend_->Write(field, &value, sizeof(T), site);
    }
  }
  // Reads an 8-byte word that concurrent writers change with Store64
  // (acquire ordering, no torn read, no data race for TSan).
  static uint64_t Load64(const void* src) {
    return __atomic_load_n(static_cast<const uint64_t*>(src), __ATOMIC_ACQUIRE);
  }
  // Whether the bits `mask` of the 8-byte word at `src` equal `value`, as
  // an observed word (pm/observe.h): the crash explorer's lazy search tells
  // images apart by the answer only.
  static bool Load64Matches(const void* src, uint64_t mask, uint64_t value) {
    return ObserveWord(src, &MaskedEquals, mask, value) != 0;
  }

  // ---- root slots ------------------------------------------------------------
  uint64_t root(int slot) const;
  // Stores and persists root slot `slot` (one failure-atomic 8-byte store).
  void SetRoot(int slot, uint64_t offset);

  // ---- space -----------------------------------------------------------------
  Allocator& allocator() { return *allocator_; }
  EpochManager& epochs() { return allocator_->epochs(); }

  PersistBackend& backend() { return *backend_; }
  // PoolOptions::write_profile, or null.
  WriteProfile* write_profile() const { return profile_.get(); }


 private:
  friend class Pool;  // Pool's factories make every pool a PoolImpl
  PoolImpl() = default;
  static Result<std::unique_ptr<PoolImpl>> AdoptResult(Result<std::unique_ptr<Pool>> r) {
    if (!r.ok()) return r.status();
    return Adopt(std::move(r).value());
  }
};

}  // namespace pmtree

#endif  // PMTREE_PM_POOL_IMPL_H_
