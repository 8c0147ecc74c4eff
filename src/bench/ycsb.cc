// SPDX-License-Identifier: Apache-2.0
//
// YCSB workloads, records, and the KV-store target (ycsb.h).

#include "bench/ycsb.h"

#include <unistd.h>

#include <cstring>
#include <sstream>

namespace pmtree::bench {

const std::vector<YcsbWorkload>& YcsbWorkloads() {
  static const std::vector<YcsbWorkload> w = {
      {'a', "read=0.5,update=0.5", DistKind::kZipfian, "update heavy (session store)"},
      {'b', "read=0.95,update=0.05", DistKind::kZipfian, "read mostly (photo tagging)"},
      {'c', "read=1", DistKind::kZipfian, "read only (profile cache)"},
      {'d', "read=0.95,insert=0.05", DistKind::kLatest, "read latest (status updates)"},
      {'e', "scan=0.95,insert=0.05", DistKind::kZipfian, "short ranges (threaded conversations)"},
      {'f', "read=0.5,rmw=0.5", DistKind::kZipfian, "read-modify-write (user database)"},
  };
  return w;
}

Result<bool> ParseYcsbList(std::string_view text, std::string* letters) {
  letters->clear();
  std::stringstream ss{std::string(text)};
  std::string item;
  bool other = false;
  while (std::getline(ss, item, ',')) {
    if (item == "ycsb") {
      for (const auto& w : YcsbWorkloads()) letters->push_back(w.letter);
    } else if (item.rfind("ycsb-", 0) == 0) {
      bool known = false;
      for (const auto& w : YcsbWorkloads())
        if (item.size() == 6 && (item[5] == w.letter || item[5] == w.letter - 'a' + 'A')) {
          letters->push_back(w.letter);
          known = true;
        }
      if (!known) return Status::InvalidArgument("--workload: unknown YCSB workload '" + item + "'; valid: ycsb-a .. ycsb-f, ycsb");
    } else {
      other = true;
    }
  }
  if (letters->empty()) return false;
  if (other)
    return Status::InvalidArgument("--workload: a list may name YCSB workloads only (ycsb-a,ycsb-b,...), got '" +
                                   std::string(text) + "'");
  return true;
}

Workload YcsbWorkloadFor(char letter, const Workload& base) {
  Workload w;
  for (const auto& y : YcsbWorkloads()) {
    if (y.letter != letter) continue;
    auto mix = ParseMix(y.mix);
    w.mix = *mix;  // the table above is valid (a test parses every row)
    w.dist.kind = y.dist;
  }
  w.dist.theta = base.dist.theta;
  w.seed = base.seed;
  w.scan_length = base.scan_length;
  w.scan_length_uniform = true;
  w.ycsb_keys = true;
  return w;
}

const std::string& YcsbFieldName(uint32_t i) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (uint32_t k = 0; k < kYcsbFields; k++) n.push_back("field" + std::to_string(k));
    return n;
  }();
  return names[i];
}

uint32_t YcsbUpdateField(uint64_t v) {
  // The high bits of a multiplicative hash: successive values spread evenly
  // over the fields (YCSB's fieldchooser is uniform).
  return static_cast<uint32_t>(((v * 0x9e3779b97f4a7c15ull) >> 32) % kYcsbFields);
}

void FillYcsbField(uint64_t v, uint32_t field, std::string* out) {
  out->resize(kYcsbFieldBytes);
  FillValueBytes(v + 0x100000001b3ull * (field + 1), kYcsbFieldBytes, out->data());
}

void FillYcsbRecord(uint64_t v, kv::FieldMap* out) {
  if (out->size() != kYcsbFields) out->clear();
  for (uint32_t i = 0; i < kYcsbFields; i++) FillYcsbField(v, i, &(*out)[YcsbFieldName(i)]);
}

void EncodeRecord(const kv::FieldMap& fields, std::string* out) {
  out->clear();
  for (const auto& [name, value] : fields) {
    out->push_back(static_cast<char>(name.size()));
    out->append(name);
    const auto n = static_cast<uint32_t>(value.size());
    for (int b = 0; b < 4; b++) out->push_back(static_cast<char>(n >> (8 * b)));
    out->append(value);
  }
}

bool DecodeRecord(std::string_view bytes, kv::FieldMap* out) {
  out->clear();
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t name_len = static_cast<uint8_t>(bytes[pos++]);
    if (bytes.size() - pos < name_len + 4) return false;
    std::string_view name = bytes.substr(pos, name_len);
    pos += name_len;
    uint32_t n = 0;
    for (int b = 0; b < 4; b++) n |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[pos + b])) << (8 * b);
    pos += 4;
    if (bytes.size() - pos < n) return false;
    out->emplace(std::string(name), std::string(bytes.substr(pos, n)));
    pos += n;
  }
  return true;
}

uint32_t YcsbRecordBytes() {
  static const uint32_t bytes = [] {
    kv::FieldMap rec;
    FillYcsbRecord(0, &rec);
    std::string enc;
    EncodeRecord(rec, &enc);
    return static_cast<uint32_t>(enc.size());
  }();
  return bytes;
}

// ---- the KV-store target ----------------------------------------------------------------

namespace {

// One kv::Store as a record-mode target.  Every operation is one store call
// (rmw is two: Target's default, Lookup then Update), so what the row
// measures is the store: its record writes, its copy-on-write field updates,
// its version chains and its tree.
class KvTarget final : public Target {
 public:
  explicit KvTarget(const KvTargetConfig& c) : c_(c) {}
  ~KvTarget() override {
    // Finish() not called (an error path): drop the store, then the file.
    if (!finished_) {
      store_.reset();
      if (!c_.keep_pool && !c_.pool_path.empty()) unlink(c_.pool_path.c_str());
    }
  }

  Status Open() {
    if (c_.replace && !c_.pool_path.empty() && unlink(c_.pool_path.c_str()) != 0)
      return Status::IoError("cannot remove the earlier run's pool " + c_.pool_path);
    kv::Options o;
    o.engine = c_.engine;
    o.pool_size = c_.pool_size;
    o.error_if_exists = true;
    o.tree_options = c_.tree_options;
    o.pool_options = c_.pool_options;
    auto r = kv::Store::Open(c_.pool_path, o);
    if (!r.ok()) return r.status();
    store_ = std::move(*r);
    return Status::Ok();
  }

  std::string label() const override { return c_.engine; }
  bool concurrent() const override { return true; }
  std::string backend() const override { return PoolBackendLabel(store_->pool()); }
  std::string describe() const override { return "kv store over " + c_.engine + "; " + store_->pool().Describe(); }
  bool counted() const override { return true; }
  PoolImpl* pool() override { return &PoolImpl::Of(store_->pool()); }

  // Reads all fields; *value = how many (the driver ignores it).
  bool Lookup(uint64_t, std::string_view bkey, uint64_t* value) override {
    thread_local kv::FieldMap fields;
    auto r = store_->GetFields(bkey, {}, &fields);
    if (!r.ok() || !*r) return false;
    *value = fields.size();
    return true;
  }
  bool LookupBytes(uint64_t, std::string_view bkey, std::string* out) override {
    kv::FieldMap fields;
    auto r = store_->GetFields(bkey, {}, &fields);
    if (!r.ok() || !*r) return false;
    EncodeRecord(fields, out);
    return true;
  }
  Result<bool> Insert(uint64_t, std::string_view bkey, uint64_t value) override {
    thread_local kv::FieldMap rec;
    FillYcsbRecord(value, &rec);
    if (Status s = store_->PutFields(bkey, rec); !s.ok()) return s;
    return true;
  }
  Result<bool> Update(uint64_t, std::string_view bkey, uint64_t value) override {
    thread_local kv::FieldMap one;
    const uint32_t f = YcsbUpdateField(value);
    one.clear();
    FillYcsbField(value, f, &one[YcsbFieldName(f)]);
    return store_->UpdateFields(bkey, one);
  }
  Result<bool> Remove(uint64_t, std::string_view bkey) override { return store_->Delete(bkey); }
  size_t Scan(uint64_t, std::string_view bkey, uint32_t n) override {
    // The iterator reads every field of each record it steps on (YCSB's
    // scan returns all fields).
    std::unique_ptr<kv::Iterator> it = store_->NewIterator();
    size_t got = 0;
    for (it->Seek(bkey); got < n && it->Valid(); it->Next()) got++;
    return got;
  }

  Status Load(const std::vector<uint64_t>& sorted, bool bulk, double) override {
    kv::FieldMap rec;
    std::string key;
    return ForEachLoadRank(sorted.size(), bulk, [&](size_t i, uint64_t r) -> Status {
      key.clear();
      AppendYcsbKey(sorted[r], &key);
      FillYcsbRecord(ValueFor(sorted[r]), &rec);
      if (Status s = store_->PutFields(key, rec); !s.ok()) return s.Annotate("load, record " + std::to_string(i));
      return Status::Ok();
    });
  }

  Status Verify() override { return store_->Verify(); }

  TargetStats Stats() override {
    kv::StoreStats s = store_->Stats();
    TargetStats t;
    t.pm_bytes = s.record_bytes + s.tree_bytes;
    t.entries = s.keys;
    t.extra.emplace_back("record_bytes", static_cast<double>(s.record_bytes));
    t.extra.emplace_back("tree_bytes", static_cast<double>(s.tree_bytes));
    t.extra.emplace_back("versions_kept", static_cast<double>(s.versions_kept));
    return t;
  }

  void Abandon() override {
    finished_ = true;
    store_.reset();
  }

  Status Finish() override {
    finished_ = true;
    Status s = store_ ? store_->Close() : Status::Ok();
    store_.reset();
    if (!c_.keep_pool && !c_.pool_path.empty()) unlink(c_.pool_path.c_str());
    return s;
  }

 private:
  KvTargetConfig c_;
  std::unique_ptr<kv::Store> store_;
  bool finished_ = false;
};

}  // namespace

Result<std::unique_ptr<Target>> OpenKvTarget(const KvTargetConfig& c) {
  auto t = std::make_unique<KvTarget>(c);
  if (Status s = t->Open(); !s.ok()) {
    t->Abandon();  // nothing of ours to remove: the open failed
    return s;
  }
  return std::unique_ptr<Target>(std::move(t));
}

}  // namespace pmtree::bench
