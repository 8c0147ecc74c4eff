// SPDX-License-Identifier: Apache-2.0
//
// The RocksDB peer (peers.h): rows `rocksdb` (WriteOptions::sync per write)
// and `rocksdb-nosync` (the WAL record is written, not synced).  Built only
// when pkg-config finds `rocksdb` (Debian librocksdb-dev).
//
// Configuration, as a user who tunes RocksDB for a memory-speed medium would
// (docs/bench.md, "Peers and the failure model"):
//   - DB and WAL in the peer directory, i.e. on the same medium as the pools;
//   - no compression at any level (the medium is tmpfs; CPU is the cost);
//   - block-based tables with a 256 MiB LRU block cache (the Berkeley DB
//     peer's cache size), a 10 bits/key whole-key Bloom filter, and the hash
//     index inside data blocks (kDataBlockBinaryAndHash) for point lookups;
//   - a memtable Bloom filter over whole keys (lookups of absent keys, which
//     every insert does first, skip the memtable search);
//   - background flush and compaction threads = cores;
//   - the load goes in WAL-less batches of 10,000 puts, then is flushed and
//     fully compacted, so runs start from a settled LSM-tree (as the other
//     peers start from a loaded B-tree).
//
// RocksDB's Put overwrites and Delete always succeeds, while the bench's
// insert, update and remove report whether the key was absent / present.  So
// each of them reads the key first and writes second, under a striped lock
// on the key, as an application wanting those semantics must; lookups and
// scans take no lock.

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "bench/peer_common.h"
#include "bench/target.h"
#include "bench/ycsb.h"

namespace pmtree::bench::peer {
namespace {

Status RocksError(const char* what, const rocksdb::Status& s) {
  if (s.IsNoSpace()) return Status::OutOfSpace(std::string("rocksdb ") + what + ": " + s.ToString());
  return Status::IoError(std::string("rocksdb ") + what + ": " + s.ToString());
}

rocksdb::Slice ToSlice(std::string_view v) { return rocksdb::Slice(v.data(), v.size()); }

constexpr size_t kBlockCacheBytes = 256u << 20;
constexpr size_t kLoadBatch = 10000;

class RocksDbTarget final : public Target {
 public:
  RocksDbTarget(const PeerConfig& c, bool sync) : c_(c), sync_(sync) {
    if (c_.ycsb) c_.value_size = YcsbRecordBytes();
    write_.sync = sync_;
  }
  ~RocksDbTarget() override {
    (void)Close();  // a destructor cannot report it; Finish does
    RemoveDirIfOwned(c_, owned_);
  }

  Status Open() {
    if (Status s = PrepareDir(c_.dir, c_.reuse, &owned_); !s.ok()) return s;
    rocksdb::Options o;
    o.create_if_missing = true;
    o.error_if_exists = false;  // PrepareDir made the directory (it holds only the marker)
    o.IncreaseParallelism(static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));
    o.compression = rocksdb::kNoCompression;
    o.compression_per_level.clear();
    o.memtable_whole_key_filtering = true;
    o.memtable_prefix_bloom_size_ratio = 0.05;
    cache_ = rocksdb::NewLRUCache(kBlockCacheBytes);
    rocksdb::BlockBasedTableOptions t;
    t.block_cache = cache_;
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    t.whole_key_filtering = true;
    t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, c_.dir, &db);
    if (!s.ok()) return RocksError("open", s);
    db_.reset(db);
    return Status::Ok();
  }

  std::string label() const override { return sync_ ? "rocksdb" : "rocksdb-nosync"; }
  bool concurrent() const override { return true; }
  std::string backend() const override {
    return sync_ ? "rocksdb: WAL record per op, sync=true" : "rocksdb: WAL record per op, sync=false";
  }
  bool counted() const override { return false; }

  bool Lookup(uint64_t key, std::string_view bkey, uint64_t* value) override {
    KeyBuf k(key, bkey);
    rocksdb::PinnableSlice v;
    if (!db_->Get(read_, db_->DefaultColumnFamily(), ToSlice(k.view), &v).ok()) return false;
    // Copy the whole value out, as a reader of it would.
    char* out = ReadBuf(static_cast<uint32_t>(v.size()));
    memcpy(out, v.data(), v.size());
    if (v.size() >= 8) memcpy(value, out, 8);
    return DecodeRead(c_, std::string_view(out, v.size()));
  }
  bool LookupBytes(uint64_t key, std::string_view bkey, std::string* out) override {
    KeyBuf k(key, bkey);
    return db_->Get(read_, ToSlice(k.view), out).ok();
  }

  Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) override {
    KeyBuf k(key, bkey);
    std::lock_guard g(Stripe(k.view));
    rocksdb::PinnableSlice old;
    if (Present(k.view, &old)) return false;
    rocksdb::Status s = db_->Put(write_, ToSlice(k.view), ToSlice(StoredValue(c_, value)));
    if (!s.ok()) return RocksError("put", s);
    entries_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) override {
    KeyBuf k(key, bkey);
    std::lock_guard g(Stripe(k.view));
    rocksdb::PinnableSlice old;
    if (!Present(k.view, &old)) return false;
    std::string_view v = c_.ycsb ? ModifyRecord(std::string_view(old.data(), old.size()), value) : ValueBuf(value, c_.value_size);
    if (v.empty()) return Status::Corruption("rocksdb: a stored record is malformed");
    rocksdb::Status s = db_->Put(write_, ToSlice(k.view), ToSlice(v));
    if (!s.ok()) return RocksError("put", s);
    return true;
  }
  Result<bool> Remove(uint64_t key, std::string_view bkey) override {
    KeyBuf k(key, bkey);
    std::lock_guard g(Stripe(k.view));
    rocksdb::PinnableSlice old;
    if (!Present(k.view, &old)) return false;
    rocksdb::Status s = db_->Delete(write_, ToSlice(k.view));
    if (!s.ok()) return RocksError("delete", s);
    entries_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) override {
    KeyBuf k(key, bkey);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_));
    size_t got = 0;
    for (it->Seek(ToSlice(k.view)); it->Valid() && got < n; it->Next()) {
      rocksdb::Slice v = it->value();
      if (!DecodeRead(c_, std::string_view(v.data(), v.size()))) break;
      got++;
    }
    return got;
  }

  Status Load(const std::vector<uint64_t>& sorted, bool bulk, double) override {
    // Setup, not a measured durable write: WAL-less batches, then a flush
    // (which makes them durable) and a full compaction.
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;
    rocksdb::WriteBatch batch;
    std::string bytes;
    Status s = ForEachLoadRank(sorted.size(), bulk, [&](size_t i, uint64_t r) -> Status {
      LoadKeyBytes(c_, sorted[r], &bytes);
      KeyBuf k(sorted[r], bytes);
      batch.Put(ToSlice(k.view), ToSlice(StoredValue(c_, ValueFor(sorted[r]))));
      if ((i + 1) % kLoadBatch == 0 || i + 1 == sorted.size()) {
        rocksdb::Status w = db_->Write(wo, &batch);
        batch.Clear();
        if (!w.ok()) return RocksError("write (load)", w);
      }
      return Status::Ok();
    });
    if (!s.ok()) return s;
    if (rocksdb::Status f = db_->Flush(rocksdb::FlushOptions()); !f.ok()) return RocksError("flush (load)", f);
    rocksdb::CompactRangeOptions cro;
    cro.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    if (rocksdb::Status f = db_->CompactRange(cro, nullptr, nullptr); !f.ok()) return RocksError("compact (load)", f);
    entries_.fetch_add(sorted.size(), std::memory_order_relaxed);
    return Status::Ok();
  }

  TargetStats Stats() override {
    TargetStats t;
    t.pm_bytes = DirBytes(c_.dir);
    t.entries = entries_.load(std::memory_order_relaxed);
    uint64_t memtables = 0, readers = 0, files = 0, levels = 0;
    db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &memtables);
    db_->GetIntProperty("rocksdb.estimate-table-readers-mem", &readers);
    t.dram_bytes = cache_->GetUsage() + memtables + readers;
    rocksdb::ColumnFamilyMetaData meta;
    db_->GetColumnFamilyMetaData(&meta);
    for (const auto& level : meta.levels) {
      files += level.files.size();
      if (!level.files.empty()) levels++;
    }
    t.height = static_cast<uint32_t>(levels);
    t.extra.emplace_back("sst_files", static_cast<double>(files));
    return t;
  }

  Status Finish() override { return Close(); }

 private:
  bool Present(std::string_view key, rocksdb::PinnableSlice* v) {
    return db_->Get(read_, db_->DefaultColumnFamily(), ToSlice(key), v).ok();
  }
  std::mutex& Stripe(std::string_view key) { return stripes_[std::hash<std::string_view>()(key) % stripes_.size()]; }
  Status Close() {
    if (!db_) return Status::Ok();
    rocksdb::Status s = db_->Close();
    db_.reset();
    return s.ok() ? Status::Ok() : RocksError("close", s);
  }

  PeerConfig c_;
  bool sync_;
  bool owned_ = false;  // the directory is ours to remove (PrepareDir made it)
  rocksdb::WriteOptions write_;
  rocksdb::ReadOptions read_;
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::DB> db_;
  std::atomic<uint64_t> entries_{0};  // exact: inserts and removes check presence first
  std::array<std::mutex, 1024> stripes_;
};

}  // namespace

Result<std::unique_ptr<Target>> OpenRocksDb(const PeerConfig& c, bool sync) {
  auto t = std::make_unique<RocksDbTarget>(c, sync);
  if (Status s = t->Open(); !s.ok()) return s;
  return std::unique_ptr<Target>(std::move(t));
}

}  // namespace pmtree::bench::peer
