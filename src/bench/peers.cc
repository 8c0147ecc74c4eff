// SPDX-License-Identifier: Apache-2.0
//
// The LMDB, Berkeley DB and absl::btree_map adapters and the peer table
// (peers.h); RocksDB is in peer_rocksdb.cc.

#include "bench/peers.h"

#include <absl/container/btree_map.h>
#include <db.h>
#include <lmdb.h>

#include <cstring>
#include <numeric>
#include <type_traits>

#include "bench/peer_common.h"
#include "bench/workload.h"
#include "bench/ycsb.h"

namespace pmtree::bench {
namespace {

using peer::DecodeRead;
using peer::DirBytes;
using peer::KeyBuf;
using peer::LoadKeyBytes;
using peer::ModifyRecord;
using peer::PrepareDir;
using peer::ReadBuf;
using peer::RemoveDirIfOwned;
using peer::StoredValue;
using peer::ValueBuf;

// ---- LMDB -------------------------------------------------------------------------

Status LmdbError(const char* what, int rc) { return Status::IoError(std::string("lmdb ") + what + ": " + mdb_strerror(rc)); }

// The LMDB configurations the bench offers (Peers() below).
enum LmdbMode : int {
  kLmdbSync,           // default: write() the pages, fsync at commit
  kLmdbNoSync,         // MDB_NOSYNC: no fsync (relaxed)
  kLmdbWriteMap,       // MDB_WRITEMAP: pages written in the shared map, msync at commit
  kLmdbWriteMapAsync,  // MDB_WRITEMAP | MDB_MAPASYNC: msync(MS_ASYNC) at commit (relaxed)
};

class LmdbTarget final : public Target {
 public:
  LmdbTarget(const PeerConfig& c, int mode) : c_(c), mode_(static_cast<LmdbMode>(mode)) {
    if (c_.ycsb) c_.value_size = YcsbRecordBytes();
  }
  ~LmdbTarget() override {
    if (env_) mdb_env_close(env_);
    RemoveDirIfOwned(c_, owned_);
  }

  Status Open() {
    if (Status s = PrepareDir(c_.dir, c_.reuse, &owned_); !s.ok()) return s;
    int rc = mdb_env_create(&env_);
    if (rc) return LmdbError("env_create", rc);
    mdb_env_set_mapsize(env_, c_.map_size);
    mdb_env_set_maxreaders(env_, 256);
    static constexpr unsigned kFlags[] = {0, MDB_NOSYNC, MDB_WRITEMAP, MDB_WRITEMAP | MDB_MAPASYNC};
    const unsigned flags = MDB_NOTLS | kFlags[mode_];
    if ((rc = mdb_env_open(env_, c_.dir.c_str(), flags, 0644))) return LmdbError("env_open", rc);
    MDB_txn* txn;
    if ((rc = mdb_txn_begin(env_, nullptr, 0, &txn))) return LmdbError("txn_begin", rc);
    if ((rc = mdb_dbi_open(txn, nullptr, 0, &dbi_))) return LmdbError("dbi_open", rc);
    if ((rc = mdb_txn_commit(txn))) return LmdbError("commit", rc);
    return Status::Ok();
  }

  std::string label() const override {
    static constexpr const char* kLabels[] = {"lmdb", "lmdb-nosync", "lmdb-writemap", "lmdb-writemap-async"};
    return kLabels[mode_];
  }
  bool concurrent() const override { return true; }
  std::string backend() const override {
    static constexpr const char* kRules[] = {
        "lmdb: write txn per op, sync at commit", "lmdb: write txn per op, MDB_NOSYNC",
        "lmdb: write txn per op, MDB_WRITEMAP, msync at commit",
        "lmdb: write txn per op, MDB_WRITEMAP|MDB_MAPASYNC"};
    return kRules[mode_];
  }
  bool counted() const override { return false; }

  bool Lookup(uint64_t key, std::string_view bkey, uint64_t* value) override {
    KeyBuf k(key, bkey);
    MDB_txn* txn;
    if (mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn)) return false;
    MDB_val mk{k.view.size(), const_cast<char*>(k.view.data())}, mv;
    bool found = mdb_get(txn, dbi_, &mk, &mv) == 0;
    if (found) {
      // Copy the whole value out of the map, as a reader of it would.
      char* out = ReadBuf(static_cast<uint32_t>(mv.mv_size));
      memcpy(out, mv.mv_data, mv.mv_size);
      if (mv.mv_size >= 8) memcpy(value, out, 8);
      found = DecodeRead(c_, std::string_view(out, mv.mv_size));
    }
    mdb_txn_abort(txn);
    return found;
  }
  bool LookupBytes(uint64_t key, std::string_view bkey, std::string* out) override {
    KeyBuf k(key, bkey);
    MDB_txn* txn;
    if (mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn)) return false;
    MDB_val mk{k.view.size(), const_cast<char*>(k.view.data())}, mv;
    bool found = mdb_get(txn, dbi_, &mk, &mv) == 0;
    if (found) out->assign(static_cast<const char*>(mv.mv_data), mv.mv_size);
    mdb_txn_abort(txn);
    return found;
  }

  Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) override {
    std::string_view vb = StoredValue(c_, value);
    return Write(key, bkey, [&](MDB_txn* txn, MDB_val* mk) {
      MDB_val mv{vb.size(), const_cast<char*>(vb.data())};
      return mdb_put(txn, dbi_, mk, &mv, MDB_NOOVERWRITE);
    });
  }
  Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) override {
    std::string_view vb = c_.ycsb ? std::string_view() : ValueBuf(value, c_.value_size);
    return Write(key, bkey, [&](MDB_txn* txn, MDB_val* mk) {
      MDB_val old;
      int rc = mdb_get(txn, dbi_, mk, &old);
      if (rc) return rc;
      // YCSB mode: one field of the record changes; the record is rewritten.
      if (c_.ycsb && (vb = ModifyRecord({static_cast<const char*>(old.mv_data), old.mv_size}, value)).empty())
        return MDB_CORRUPTED;
      MDB_val mv{vb.size(), const_cast<char*>(vb.data())};
      return mdb_put(txn, dbi_, mk, &mv, 0);
    });
  }
  Result<bool> Remove(uint64_t key, std::string_view bkey) override {
    return Write(key, bkey, [&](MDB_txn* txn, MDB_val* mk) { return mdb_del(txn, dbi_, mk, nullptr); });
  }

  size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) override {
    KeyBuf k(key, bkey);
    MDB_txn* txn;
    if (mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn)) return 0;
    MDB_cursor* cur;
    size_t got = 0;
    if (mdb_cursor_open(txn, dbi_, &cur) == 0) {
      MDB_val mk{k.view.size(), const_cast<char*>(k.view.data())}, mv;
      int rc = mdb_cursor_get(cur, &mk, &mv, MDB_SET_RANGE);
      while (rc == 0 && got < n && DecodeRead(c_, {static_cast<const char*>(mv.mv_data), mv.mv_size})) {
        got++;
        rc = mdb_cursor_get(cur, &mk, &mv, MDB_NEXT);
      }
      mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    return got;
  }

  Status Load(const std::vector<uint64_t>& sorted, bool bulk, double) override {
    // Batched transactions: the load is setup, not a measured durable write.
    MDB_txn* txn = nullptr;
    std::string bytes;
    Status s = ForEachLoadRank(sorted.size(), bulk, [&](size_t i, uint64_t r) -> Status {
      int rc;
      if (txn == nullptr && (rc = mdb_txn_begin(env_, nullptr, 0, &txn))) return LmdbError("txn_begin", rc);
      LoadKeyBytes(c_, sorted[r], &bytes);
      KeyBuf k(sorted[r], bytes);
      std::string_view vb = StoredValue(c_, ValueFor(sorted[r]));
      MDB_val mk{k.view.size(), const_cast<char*>(k.view.data())}, mv{vb.size(), const_cast<char*>(vb.data())};
      if ((rc = mdb_put(txn, dbi_, &mk, &mv, bulk ? MDB_APPEND : 0))) return LmdbError("put (load)", rc);
      if ((i + 1) % 10000 == 0) {
        rc = mdb_txn_commit(txn);
        txn = nullptr;
        if (rc) return LmdbError("commit (load)", rc);
      }
      return Status::Ok();
    });
    if (txn) {
      if (!s.ok()) {
        mdb_txn_abort(txn);
        return s;
      }
      if (int rc = mdb_txn_commit(txn)) return LmdbError("commit (load)", rc);
    }
    return s;
  }

  TargetStats Stats() override {
    TargetStats t;
    t.pm_bytes = DirBytes(c_.dir);
    MDB_stat st;
    MDB_txn* txn;
    if (mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn) == 0) {
      if (mdb_stat(txn, dbi_, &st) == 0) {
        t.height = st.ms_depth;
        t.entries = st.ms_entries;
        t.leaf_nodes = st.ms_leaf_pages;
        t.inner_nodes = st.ms_branch_pages;
      }
      mdb_txn_abort(txn);
    }
    return t;
  }

  Status Finish() override {
    if (env_) {
      mdb_env_sync(env_, 1);
      mdb_env_close(env_);
      env_ = nullptr;
    }
    return Status::Ok();
  }

 private:
  template <class Fn>
  Result<bool> Write(uint64_t key, std::string_view bkey, Fn fn) {
    KeyBuf k(key, bkey);
    MDB_txn* txn;
    int rc = mdb_txn_begin(env_, nullptr, 0, &txn);
    if (rc) return LmdbError("txn_begin", rc);
    MDB_val mk{k.view.size(), const_cast<char*>(k.view.data())};
    rc = fn(txn, &mk);
    if (rc == MDB_KEYEXIST || rc == MDB_NOTFOUND) {
      mdb_txn_abort(txn);
      return false;
    }
    if (rc) {
      mdb_txn_abort(txn);
      return rc == MDB_MAP_FULL ? Status::OutOfSpace("lmdb map full (raise --pool-size)") : LmdbError("write", rc);
    }
    if ((rc = mdb_txn_commit(txn))) return LmdbError("commit", rc);
    return true;
  }

  PeerConfig c_;
  LmdbMode mode_;
  bool owned_ = false;  // the directory is ours to remove (PrepareDir made it)
  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
};

// ---- Berkeley DB ---------------------------------------------------------------------

Status BdbError(const char* what, int rc) { return Status::IoError(std::string("berkeley db ") + what + ": " + db_strerror(rc)); }

class BdbTarget final : public Target {
 public:
  BdbTarget(const PeerConfig& c, int nosync) : c_(c), nosync_(nosync != 0) {
    if (c_.ycsb) c_.value_size = YcsbRecordBytes();
  }
  ~BdbTarget() override {
    CloseHandles();
    RemoveDirIfOwned(c_, owned_);
  }

  Status Open() {
    if (Status s = PrepareDir(c_.dir, c_.reuse, &owned_); !s.ok()) return s;
    int rc = db_env_create(&env_, 0);
    if (rc) return BdbError("env_create", rc);
    env_->set_cachesize(env_, 0, 256u << 20, 1);
    env_->set_lk_detect(env_, DB_LOCK_DEFAULT);
    env_->set_lk_max_locks(env_, 100000);
    env_->set_lk_max_objects(env_, 100000);
    env_->set_lk_max_lockers(env_, 10000);
    env_->set_lg_bsize(env_, 4u << 20);
    env_->set_lg_max(env_, 64u << 20);
    if (nosync_) env_->set_flags(env_, DB_TXN_NOSYNC, 1);
    u_int32_t flags = DB_CREATE | DB_INIT_MPOOL | DB_INIT_TXN | DB_INIT_LOG | DB_INIT_LOCK | DB_THREAD | DB_PRIVATE;
    if ((rc = env_->open(env_, c_.dir.c_str(), flags, 0644))) return BdbError("env open", rc);
    // Drop log files no longer needed after checkpoints (Finish only); the
    // data set here is bounded by the run.
    env_->log_set_config(env_, DB_LOG_AUTO_REMOVE, 1);
    if ((rc = db_create(&db_, env_, 0))) return BdbError("db_create", rc);
    if ((rc = db_->open(db_, nullptr, "data.db", nullptr, DB_BTREE, DB_CREATE | DB_AUTO_COMMIT | DB_THREAD, 0644)))
      return BdbError("db open", rc);
    return Status::Ok();
  }

  std::string label() const override { return nosync_ ? "bdb-nosync" : "bdb"; }
  bool concurrent() const override { return true; }
  std::string backend() const override {
    return nosync_ ? "berkeley db: auto-commit per op, WAL, DB_TXN_NOSYNC"
                   : "berkeley db: auto-commit per op, WAL flushed at commit";
  }
  bool counted() const override { return false; }

  bool Lookup(uint64_t key, std::string_view bkey, uint64_t* value) override {
    char* out = ReadBuf(c_.value_size);
    if (!Get(key, bkey, out)) return false;
    memcpy(value, out, 8);
    return DecodeRead(c_, std::string_view(out, c_.value_size));
  }
  bool LookupBytes(uint64_t key, std::string_view bkey, std::string* out) override {
    out->resize(c_.value_size);
    return Get(key, bkey, out->data());
  }

  Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) override {
    KeyBuf k(key, bkey);
    DBT dk = Dbt(k.view), dv = Dbt(StoredValue(c_, value));
    for (;;) {
      int rc = db_->put(db_, nullptr, &dk, &dv, DB_NOOVERWRITE);  // auto-commit
      if (rc == DB_LOCK_DEADLOCK) continue;
      if (rc == DB_KEYEXIST) return false;
      if (rc) return BdbError("put", rc);
      return true;
    }
  }

  Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) override {
    KeyBuf k(key, bkey);
    DBT dk = Dbt(k.view), dv = Dbt(c_.ycsb ? std::string_view() : ValueBuf(value, c_.value_size));
    char none[8];
    char* old = c_.ycsb ? ReadBuf(c_.value_size) : none;
    for (;;) {
      // Replace only a present key: get (write-locked) and put in one
      // transaction.  The get reads no value bytes (a zero-length partial
      // get), except in YCSB mode: there it reads the record, and the put
      // writes it back with one field changed.
      DB_TXN* txn;
      int rc = env_->txn_begin(env_, nullptr, &txn, 0);
      if (rc) return BdbError("txn_begin", rc);
      DBT dold;
      memset(&dold, 0, sizeof dold);
      dold.data = old;
      dold.ulen = c_.ycsb ? c_.value_size : sizeof none;
      dold.flags = DB_DBT_USERMEM | (c_.ycsb ? 0 : DB_DBT_PARTIAL);  // partial: doff = dlen = 0
      rc = db_->get(db_, txn, &dk, &dold, DB_RMW);
      if (rc == 0 && c_.ycsb) {
        std::string_view rec = ModifyRecord({old, dold.size}, value);
        if (rec.empty()) {
          txn->abort(txn);
          return Status::Corruption("berkeley db: a stored record is malformed");
        }
        dv = Dbt(rec);
      }
      if (rc == 0) rc = db_->put(db_, txn, &dk, &dv, 0);
      if (rc == DB_LOCK_DEADLOCK) {
        txn->abort(txn);
        continue;
      }
      if (rc == DB_NOTFOUND) {
        txn->abort(txn);
        return false;
      }
      if (rc) {
        txn->abort(txn);
        return BdbError("update", rc);
      }
      if ((rc = txn->commit(txn, 0))) return BdbError("commit", rc);
      return true;
    }
  }

  Result<bool> Remove(uint64_t key, std::string_view bkey) override {
    KeyBuf k(key, bkey);
    DBT dk = Dbt(k.view);
    for (;;) {
      int rc = db_->del(db_, nullptr, &dk, 0);  // auto-commit
      if (rc == DB_LOCK_DEADLOCK) continue;
      if (rc == DB_NOTFOUND) return false;
      if (rc) return BdbError("del", rc);
      return true;
    }
  }

  size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) override {
    KeyBuf k(key, bkey);
    char kbuf[kMaxKeyBytes + 8];
    char* v = ReadBuf(c_.value_size);
    memcpy(kbuf, k.view.data(), k.view.size());
    for (;;) {
      DBC* cur;
      if (db_->cursor(db_, nullptr, &cur, 0)) return 0;
      DBT dk, dv;
      memset(&dk, 0, sizeof dk);
      memset(&dv, 0, sizeof dv);
      dk.data = kbuf;
      dk.size = static_cast<u_int32_t>(k.view.size());
      dk.ulen = sizeof kbuf;
      dk.flags = DB_DBT_USERMEM;
      dv.data = v;
      dv.ulen = c_.value_size;
      dv.flags = DB_DBT_USERMEM;
      size_t got = 0;
      int rc = cur->get(cur, &dk, &dv, DB_SET_RANGE);
      while (rc == 0 && got < n && DecodeRead(c_, {v, dv.size})) {
        got++;
        rc = cur->get(cur, &dk, &dv, DB_NEXT);
      }
      cur->close(cur);
      if (rc == DB_LOCK_DEADLOCK) continue;
      return got;
    }
  }

  Status Load(const std::vector<uint64_t>& sorted, bool bulk, double) override {
    DB_TXN* txn = nullptr;
    std::string bytes;
    Status s = ForEachLoadRank(sorted.size(), bulk, [&](size_t i, uint64_t r) -> Status {
      int rc;
      if (txn == nullptr && (rc = env_->txn_begin(env_, nullptr, &txn, 0))) return BdbError("txn_begin", rc);
      LoadKeyBytes(c_, sorted[r], &bytes);
      KeyBuf k(sorted[r], bytes);
      DBT dk = Dbt(k.view), dv = Dbt(StoredValue(c_, ValueFor(sorted[r])));
      if ((rc = db_->put(db_, txn, &dk, &dv, 0))) return BdbError("put (load)", rc);
      if ((i + 1) % 10000 == 0) {
        rc = txn->commit(txn, 0);
        txn = nullptr;
        if (rc) return BdbError("commit (load)", rc);
      }
      return Status::Ok();
    });
    if (txn) {
      if (!s.ok()) {
        txn->abort(txn);
        return s;
      }
      if (int rc = txn->commit(txn, 0)) return BdbError("commit (load)", rc);
    }
    env_->txn_checkpoint(env_, 0, 0, 0);
    return s;
  }

  TargetStats Stats() override {
    TargetStats t;
    t.pm_bytes = DirBytes(c_.dir);
    DB_BTREE_STAT* st = nullptr;
    if (db_->stat(db_, nullptr, &st, 0) == 0 && st) {
      t.height = st->bt_levels;
      t.entries = st->bt_nkeys;
      t.leaf_nodes = st->bt_leaf_pg;
      t.inner_nodes = st->bt_int_pg;
      free(st);
    }
    t.dram_bytes = 256u << 20;  // the configured cache
    return t;
  }

  Status Finish() override {
    if (env_) env_->txn_checkpoint(env_, 0, 0, 0);
    CloseHandles();
    return Status::Ok();
  }

 private:
  // Reads the value of key into out (value_size bytes).
  bool Get(uint64_t key, std::string_view bkey, char* out) {
    KeyBuf k(key, bkey);
    DBT dk = Dbt(k.view), dv;
    memset(&dv, 0, sizeof dv);
    dv.data = out;
    dv.ulen = c_.value_size;
    dv.flags = DB_DBT_USERMEM;
    for (;;) {
      int rc = db_->get(db_, nullptr, &dk, &dv, 0);
      if (rc == DB_LOCK_DEADLOCK) continue;
      return rc == 0;
    }
  }
  static DBT Dbt(std::string_view s) {
    DBT d;
    memset(&d, 0, sizeof d);
    d.data = const_cast<char*>(s.data());
    d.size = static_cast<u_int32_t>(s.size());
    return d;
  }
  void CloseHandles() {
    if (db_) db_->close(db_, 0);
    db_ = nullptr;
    if (env_) env_->close(env_, 0);
    env_ = nullptr;
  }

  PeerConfig c_;
  bool nosync_;
  bool owned_ = false;  // the directory is ours to remove (PrepareDir made it)
  DB_ENV* env_ = nullptr;
  DB* db_ = nullptr;
};

// ---- absl::btree_map (volatile) -----------------------------------------------------

// The field's reference volatile ordered index, for "how close to DRAM speed"
// (issue 19): absl::btree_map in the process heap, no persistence at all.
// Integer keys with 8-byte values use btree_map<uint64_t, uint64_t>; byte
// keys, larger values and YCSB records btree_map<std::string, std::string>.
// Not thread-safe, so a single-threaded target.
template <class K, class V>
class AbslTarget final : public Target {
 public:
  AbslTarget(const PeerConfig& c, int /*mode*/) : c_(c) {
    if (c_.ycsb) c_.value_size = YcsbRecordBytes();
  }
  Status Open() { return Status::Ok(); }

  std::string label() const override { return "absl-btree"; }
  bool concurrent() const override { return false; }
  std::string backend() const override { return "absl::btree_map in DRAM (volatile)"; }
  bool counted() const override { return false; }

  bool Lookup(uint64_t key, std::string_view bkey, uint64_t* value) override {
    auto it = map_.find(Key(key, bkey));
    if (it == map_.end()) return false;
    if constexpr (std::is_same_v<V, uint64_t>) {
      *value = it->second;
      return true;
    } else {
      // Copy the value out, as a reader of it would.
      char* out = ReadBuf(static_cast<uint32_t>(it->second.size()));
      memcpy(out, it->second.data(), it->second.size());
      if (it->second.size() >= 8) memcpy(value, out, 8);
      return DecodeRead(c_, std::string_view(out, it->second.size()));
    }
  }
  Result<bool> Insert(uint64_t key, std::string_view bkey, uint64_t value) override {
    return map_.try_emplace(Key(key, bkey), Val(value)).second;
  }
  Result<bool> Update(uint64_t key, std::string_view bkey, uint64_t value) override {
    auto it = map_.find(Key(key, bkey));
    if (it == map_.end()) return false;
    if constexpr (std::is_same_v<V, uint64_t>) {
      it->second = value;
    } else if (c_.ycsb) {
      std::string_view rec = ModifyRecord(it->second, value);
      if (rec.empty()) return Status::Corruption("absl-btree: malformed record");
      it->second.assign(rec);
    } else {
      it->second.assign(ValueBuf(value, c_.value_size));
    }
    return true;
  }
  Result<bool> Remove(uint64_t key, std::string_view bkey) override { return map_.erase(Key(key, bkey)) == 1; }
  size_t Scan(uint64_t key, std::string_view bkey, uint32_t n) override {
    size_t got = 0;
    for (auto it = map_.lower_bound(Key(key, bkey)); it != map_.end() && got < n; ++it) got++;
    return got;
  }
  Status Load(const std::vector<uint64_t>& sorted, bool bulk, double /*fill*/) override {
    std::string bytes;
    return ForEachLoadRank(sorted.size(), bulk, [&](size_t, uint64_t r) -> Status {
      LoadKeyBytes(c_, sorted[r], &bytes);
      map_.insert_or_assign(Key(sorted[r], bytes), Val(ValueFor(sorted[r])));
      return Status::Ok();
    });
  }
  TargetStats Stats() override {
    TargetStats t;
    t.entries = map_.size();
    // A lower bound: the entries themselves (absl does not report its node
    // overhead or string heap blocks).
    t.dram_bytes = map_.size() * sizeof(typename absl::btree_map<K, V>::value_type);
    return t;
  }
  Status Finish() override {
    map_.clear();
    return Status::Ok();
  }

 private:
  K Key(uint64_t key, std::string_view bkey) const {
    if constexpr (std::is_same_v<K, uint64_t>) {
      return key;
    } else {
      return std::string(KeyBuf(key, bkey).view);
    }
  }
  V Val(uint64_t v) const {
    if constexpr (std::is_same_v<V, uint64_t>) {
      return v;
    } else {
      return std::string(StoredValue(c_, v));
    }
  }

  PeerConfig c_;
  absl::btree_map<K, V> map_;
};

Result<std::unique_ptr<Target>> OpenAbsl(const PeerConfig& c) {
  if (c.key_min == 0 && !c.ycsb && c.value_size == 8)
    return std::unique_ptr<Target>(new AbslTarget<uint64_t, uint64_t>(c, 0));
  return std::unique_ptr<Target>(new AbslTarget<std::string, std::string>(c, 0));
}

// kMode: the target's configuration (LmdbMode; 1 = relaxed for Berkeley DB).
template <class T, int kMode>
Result<std::unique_ptr<Target>> OpenPeer(const PeerConfig& c) {
  auto t = std::make_unique<T>(c, kMode);
  if (Status s = t->Open(); !s.ok()) return s;
  return std::unique_ptr<Target>(std::move(t));
}

template <bool kSync>
Result<std::unique_ptr<Target>> OpenRocksDbPeer(const PeerConfig& c) {
  return peer::OpenRocksDb(c, kSync);
}

}  // namespace

const std::vector<PeerInfo>& Peers() {
  static const std::vector<PeerInfo> peers = {
      {"lmdb", "LMDB B+-tree, one write transaction per op, synchronous commit",
       "a committed op survives a process crash and (on a durable medium) power loss; on /dev/shm the file is "
       "DRAM, so power loss loses everything",
       &OpenPeer<LmdbTarget, kLmdbSync>},
      {"lmdb-nosync", "LMDB with MDB_NOSYNC (relaxed)",
       "a committed op is in the OS page cache: survives a process crash, not an OS crash or power loss",
       &OpenPeer<LmdbTarget, kLmdbNoSync>},
      {"lmdb-writemap", "LMDB with MDB_WRITEMAP: pages written in place in the shared map, msync at commit",
       "as lmdb (durable at commit); a stray write through the map can corrupt the file (LMDB's own caveat)",
       &OpenPeer<LmdbTarget, kLmdbWriteMap>},
      {"lmdb-writemap-async", "LMDB with MDB_WRITEMAP|MDB_MAPASYNC (relaxed)",
       "a committed op is in the shared map (the page cache): survives a process crash, not an OS crash or power "
       "loss",
       &OpenPeer<LmdbTarget, kLmdbWriteMapAsync>},
      {"bdb", "Berkeley DB B-tree, auto-commit per op with write-ahead logging, synchronous log flush",
       "a committed op survives a process crash and (on a durable medium) power loss; on /dev/shm the files are "
       "DRAM, so power loss loses everything",
       &OpenPeer<BdbTarget, 0>},
      {"bdb-nosync", "Berkeley DB with DB_TXN_NOSYNC (relaxed)",
       "the commit record may still be in the process's log buffer: a process crash can lose recent ops",
       &OpenPeer<BdbTarget, 1>},
#ifdef PMTREE_HAVE_ROCKSDB
      {"rocksdb", "RocksDB LSM-tree, WAL in the same directory, WriteOptions::sync=true per write (peer_rocksdb.cc)",
       "a returned write is in the synced WAL: survives a process crash and (on a durable medium) power loss; on "
       "/dev/shm the files are DRAM, so power loss loses everything",
       &OpenRocksDbPeer<true>},
      {"rocksdb-nosync", "RocksDB with sync=false (relaxed): the WAL record is written, not synced",
       "a returned write is in the WAL file in the OS page cache: survives a process crash, not an OS crash or power "
       "loss",
       &OpenRocksDbPeer<false>},
#endif
      {"absl-btree", "absl::btree_map in DRAM: the reference volatile ordered index (single-threaded)",
       "volatile: a process crash loses everything", &OpenAbsl},
  };
  return peers;
}

const PeerInfo* FindPeer(std::string_view name) {
  for (const auto& p : Peers())
    if (p.name == name) return &p;
  return nullptr;
}

std::string UnbuiltPeerReason(std::string_view name) {
#ifndef PMTREE_HAVE_ROCKSDB
  if (name == "rocksdb" || name == "rocksdb-nosync")
    return "peer '" + std::string(name) +
           "' is not in this build: pkg-config found no 'rocksdb' when it was configured (install librocksdb-dev, "
           "as scripts/setup.sh does, and reconfigure)";
#endif
  (void)name;
  return {};
}

std::string PeerNames() {
  std::string s;
  for (const auto& p : Peers()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

}  // namespace pmtree::bench

#if defined(__SANITIZE_THREAD__)
// Berkeley DB (not instrumented) takes the pthread rwlocks behind its region
// mutexes in orders that ThreadSanitizer's lock graph reports as potential
// deadlocks, all inside libdb on one thread (its own lock manager orders
// them).  Suppressed by module so that TSan runs of the bench (peers
// included) report what is ours.
extern "C" const char* __tsan_default_suppressions() { return "deadlock:libdb-5.3.so\ndeadlock:libdb.so\n"; }
#endif
