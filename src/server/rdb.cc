// SPDX-License-Identifier: Apache-2.0

#include "server/rdb.h"

#include <array>
#include <bit>
#include <cstring>

#include "server/keyspace.h"

namespace pmtree::server {
namespace {

constexpr uint8_t kOpAux = 0xFA;
constexpr uint8_t kOpResizeDb = 0xFB;
constexpr uint8_t kOpSelectDb = 0xFE;
constexpr uint8_t kOpEof = 0xFF;
constexpr uint64_t kCrcPoly = 0x95ac9329ac4bc9b5ull;  // 0xad93d23594c935a9, bit-reflected

constexpr std::array<uint64_t, 256> MakeCrcTable() {
  std::array<uint64_t, 256> t{};
  for (uint64_t i = 0; i < 256; ++i) {
    uint64_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ kCrcPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint64_t, 256> kCrcTable = MakeCrcTable();

void AppendLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The head tags of keyspace.h's ENCODING ('s' + value, 'h'/'z' + count).
constexpr char kStringTag = 's';
constexpr char kLargeHashTag = 'h';
constexpr char kZsetTag = 'z';

// A cursor over an RDB image; every read checks the bounds.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  size_t pos() const { return pos_; }
  bool Byte(uint8_t* b) {
    if (pos_ >= s_.size()) return false;
    *b = static_cast<uint8_t>(s_[pos_++]);
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (s_.size() - pos_ < n) return false;
    *out = s_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  uint64_t Number(std::string_view b, bool big_endian) {
    uint64_t v = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      uint64_t byte = static_cast<uint8_t>(b[big_endian ? i : b.size() - 1 - i]);
      v = (v << 8) | byte;
    }
    return v;
  }
  // A length; *special is set (and *n is the encoding, 0..3) for the 11 prefix.
  bool Length(uint64_t* n, bool* special) {
    uint8_t b;
    std::string_view more;
    *special = false;
    if (!Byte(&b)) return false;
    switch (b >> 6) {
      case 0:
        *n = b & 0x3f;
        return true;
      case 1:
        if (!Bytes(1, &more)) return false;
        *n = (static_cast<uint64_t>(b & 0x3f) << 8) | static_cast<uint8_t>(more[0]);
        return true;
      case 3:
        *special = true;
        *n = b & 0x3f;
        return true;
      default:
        if (b != 0x80 && b != 0x81) return false;
        if (!Bytes(b == 0x80 ? 4 : 8, &more)) return false;
        *n = Number(more, true);
        return true;
    }
  }
  Status String(std::string* out) {
    uint64_t n;
    bool special;
    std::string_view b;
    size_t at = pos_;
    if (!Length(&n, &special)) return Truncated(at, "string length");
    if (!special) {
      if (!Bytes(n, &b)) return Truncated(at, "string of " + std::to_string(n) + " bytes");
      out->assign(b);
      return Status::Ok();
    }
    if (n > 2) return Status::NotSupported("rdb: offset " + std::to_string(at) + ": LZF-compressed strings are not supported");
    size_t width = size_t{1} << n;
    if (!Bytes(width, &b)) return Truncated(at, "integer string");
    uint64_t raw = Number(b, false);
    int64_t v = width == 1 ? static_cast<int8_t>(raw) : width == 2 ? static_cast<int16_t>(raw) : static_cast<int32_t>(raw);
    *out = std::to_string(v);
    return Status::Ok();
  }
  Status Len(uint64_t* n, const char* what) {
    bool special;
    size_t at = pos_;
    if (!Length(n, &special) || special) return Truncated(at, what);
    // Every element takes at least one byte: a longer count is a lie that
    // would make the caller reserve without bound.
    if (*n > s_.size() - pos_) return Status::Corruption("rdb: offset " + std::to_string(at) + ": " + what + " " +
                                                      std::to_string(*n) + " exceeds the image");
    return Status::Ok();
  }
  static Status Truncated(size_t at, const std::string& what) {
    return Status::Corruption("rdb: offset " + std::to_string(at) + ": truncated or malformed " + what);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

Status ReadEntry(Reader& r, uint8_t type, RdbEntry* e) {
  e->value.clear();
  e->fields.clear();
  e->members.clear();
  e->type = static_cast<RdbType>(type);
  PMTREE_RETURN_IF_ERROR(r.String(&e->key));
  uint64_t n;
  switch (e->type) {
    case RdbType::kString:
      return r.String(&e->value);
    case RdbType::kHash:
      PMTREE_RETURN_IF_ERROR(r.Len(&n, "hash length"));
      e->fields.resize(n);
      for (auto& [f, v] : e->fields) {
        PMTREE_RETURN_IF_ERROR(r.String(&f));
        PMTREE_RETURN_IF_ERROR(r.String(&v));
      }
      return Status::Ok();
    case RdbType::kZset2:
      PMTREE_RETURN_IF_ERROR(r.Len(&n, "sorted set length"));
      e->members.resize(n);
      for (auto& [m, score] : e->members) {
        PMTREE_RETURN_IF_ERROR(r.String(&m));
        std::string_view b;
        if (!r.Bytes(8, &b)) return Reader::Truncated(r.pos(), "score");
        score = std::bit_cast<double>(r.Number(b, false));
      }
      return Status::Ok();
  }
  return Status::Internal("rdb: unreachable type");
}

}  // namespace

uint64_t Crc64(uint64_t crc, std::string_view data) {
  for (char ch : data) crc = kCrcTable[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  return crc;
}

// ---- writer ----------------------------------------------------------------------------------

void RdbWriter::AppendLength(std::string* out, uint64_t n) {
  if (n < (1u << 6)) {
    out->push_back(static_cast<char>(n));
  } else if (n < (1u << 14)) {
    out->push_back(static_cast<char>(0x40 | (n >> 8)));
    out->push_back(static_cast<char>(n & 0xff));
  } else if (n <= 0xffffffffull) {
    out->push_back(static_cast<char>(0x80));
    for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  } else {
    out->push_back(static_cast<char>(0x81));
    for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  }
}

void RdbWriter::AppendString(std::string* out, std::string_view s) {
  AppendLength(out, s.size());
  out->append(s);
}

RdbWriter::RdbWriter(std::string* out, const std::vector<std::pair<std::string, std::string>>& aux)
    : out_(out), start_(out->size()) {
  out_->append(kMagic);
  for (const auto& [k, v] : aux) {
    out_->push_back(static_cast<char>(kOpAux));
    AppendString(out_, k);
    AppendString(out_, v);
  }
}

void RdbWriter::SelectDb(uint64_t db) {
  out_->push_back(static_cast<char>(kOpSelectDb));
  AppendLength(out_, db);
}

void RdbWriter::ResizeDb(uint64_t keys, uint64_t expires) {
  out_->push_back(static_cast<char>(kOpResizeDb));
  AppendLength(out_, keys);
  AppendLength(out_, expires);
}

void RdbWriter::AppendEntry(std::string* out, const RdbEntry& e) {
  out->push_back(static_cast<char>(e.type));
  AppendString(out, e.key);
  switch (e.type) {
    case RdbType::kString:
      AppendString(out, e.value);
      break;
    case RdbType::kHash:
      AppendLength(out, e.fields.size());
      for (const auto& [f, v] : e.fields) {
        AppendString(out, f);
        AppendString(out, v);
      }
      break;
    case RdbType::kZset2:
      AppendLength(out, e.members.size());
      for (const auto& [m, score] : e.members) {
        AppendString(out, m);
        AppendLittleEndian(out, std::bit_cast<uint64_t>(score), 8);
      }
      break;
  }
}

void RdbWriter::Finish() {
  out_->push_back(static_cast<char>(kOpEof));
  uint64_t crc = Crc64(0, std::string_view(*out_).substr(start_));
  AppendLittleEndian(out_, crc, 8);
}

// ---- reader ----------------------------------------------------------------------------------

Status ReadRdb(std::string_view rdb, RdbInfo* info, const std::function<Status(RdbEntry&)>& fn) {
  if (rdb.size() < 9 + 1 + 8 || rdb.substr(0, 5) != "REDIS")
    return Status::Corruption("rdb: offset 0: no REDIS magic (not an RDB image, or shorter than 18 bytes)");
  std::string_view ver = rdb.substr(5, 4);
  info->version = 0;
  for (char ch : ver) {
    if (ch < '0' || ch > '9') return Status::Corruption("rdb: offset 5: version '" + std::string(ver) + "' is not 4 digits");
    info->version = info->version * 10 + (ch - '0');
  }
  if (info->version < 1 || info->version > 10)
    return Status::NotSupported("rdb: version " + std::to_string(info->version) + " (this reader takes 1..10)");
  uint64_t stored = 0;
  for (int i = 7; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(rdb[rdb.size() - 8 + static_cast<size_t>(i)]);
  if (stored != 0 && stored != Crc64(0, rdb.substr(0, rdb.size() - 8)))
    return Status::Corruption("rdb: CRC-64 mismatch over " + std::to_string(rdb.size() - 8) + " bytes");
  Reader r(rdb.substr(0, rdb.size() - 8));
  std::string_view magic;
  r.Bytes(9, &magic);
  RdbEntry e;
  while (true) {
    uint8_t op;
    size_t at = r.pos();
    if (!r.Byte(&op)) return Reader::Truncated(at, "image: no EOF opcode");
    if (op == kOpEof) {
      if (r.pos() != rdb.size() - 8) return Status::Corruption("rdb: offset " + std::to_string(at) + ": bytes after EOF");
      return Status::Ok();
    }
    uint64_t n, m;
    bool special;
    switch (op) {
      case kOpAux: {
        std::string k, v;
        PMTREE_RETURN_IF_ERROR(r.String(&k));
        PMTREE_RETURN_IF_ERROR(r.String(&v));
        info->aux.emplace_back(std::move(k), std::move(v));
        break;
      }
      case kOpSelectDb:
        if (!r.Length(&n, &special) || special) return Reader::Truncated(at, "SELECTDB");
        if (n != 0) return Status::NotSupported("rdb: offset " + std::to_string(at) + ": database " + std::to_string(n) + " (only db 0 exists)");
        break;
      case kOpResizeDb:
        if (!r.Length(&n, &special) || special || !r.Length(&m, &special) || special)
          return Reader::Truncated(at, "RESIZEDB");
        info->resize_keys = n;
        break;
      case 0:
      case 4:
      case 5:
        PMTREE_RETURN_IF_ERROR(ReadEntry(r, op, &e));
        PMTREE_RETURN_IF_ERROR(fn(e));
        break;
      default:
        return Status::NotSupported("rdb: offset " + std::to_string(at) + ": type or opcode " + std::to_string(op) +
                                    " is outside the subset pmtree loads (strings 0, hashes 4, sorted sets 5; no "
                                    "expiries, lists, sets, streams or modules)");
    }
  }
}

// ---- the keyspace as RDB ------------------------------------------------------------------------

namespace {

// Every member key under `prefix` at the snapshot, with its value.
Status ForEachMember(kv::Store* store, const kv::Snapshot* snap, const std::string& prefix,
                     const std::function<void(std::string_view, std::string_view)>& fn) {
  kv::IteratorOptions io;
  io.snapshot = snap;
  io.upper_bound = Keyspace::PrefixEnd(prefix);
  auto it = store->NewIterator(io);
  for (it->Seek(prefix); it->Valid(); it->Next()) fn(it->key().substr(prefix.size()), it->value());
  return it->status();
}

}  // namespace

Status DumpKeyspaceRdb(kv::Store* store, const kv::Snapshot* snapshot,
                       const std::vector<std::pair<std::string, std::string>>& aux, std::string* out,
                       uint64_t* keys) {
  // The entries go to `body` first: RESIZEDB, before them, wants their count.
  std::string body;
  uint64_t n = 0;
  kv::IteratorOptions io;
  io.snapshot = snapshot;
  io.upper_bound = std::string(1, Keyspace::kUserPrefix + 1);
  auto it = store->NewIterator(io);
  RdbEntry e;
  for (it->Seek(std::string(1, Keyspace::kUserPrefix)); it->Valid(); it->Next()) {
    e.key.assign(it->key().substr(1));
    e.fields.clear();
    e.members.clear();
    std::string_view v = it->value();
    if (it->is_fields()) {  // a small hash
      e.type = RdbType::kHash;
      for (const auto& [f, fv] : it->fields()) e.fields.emplace_back(f, fv);
    } else if (!v.empty() && v[0] == kStringTag) {
      e.type = RdbType::kString;
      e.value.assign(v.substr(1));
    } else if (v.size() == 9 && v[0] == kLargeHashTag) {
      e.type = RdbType::kHash;
      PMTREE_RETURN_IF_ERROR(ForEachMember(store, snapshot, Keyspace::MemberPrefix(Keyspace::kHashPrefix, e.key),
                                           [&](std::string_view f, std::string_view fv) {
                                             e.fields.emplace_back(f, fv);
                                           }));
    } else if (v.size() == 9 && v[0] == kZsetTag) {
      e.type = RdbType::kZset2;
      PMTREE_RETURN_IF_ERROR(ForEachMember(store, snapshot, Keyspace::ZsetPrefix(e.key) + 'm',
                                           [&](std::string_view m, std::string_view score) {
                                             e.members.emplace_back(m, Keyspace::DecodeScore(score));
                                           }));
    } else {
      return Status::Corruption("rdb dump: the head of key '" + e.key.substr(0, 64) + "' has an unknown type tag");
    }
    // The keyspace never keeps an empty hash or set (the last member's
    // removal removes the head); Redis's loader would refuse one.
    if ((e.type == RdbType::kHash && e.fields.empty()) || (e.type == RdbType::kZset2 && e.members.empty()))
      return Status::Corruption("rdb dump: key '" + e.key.substr(0, 64) + "' is an empty hash or sorted set");
    RdbWriter::AppendEntry(&body, e);
    ++n;
  }
  PMTREE_RETURN_IF_ERROR(it->status());
  RdbWriter w(out, aux);
  w.SelectDb(0);
  w.ResizeDb(n, 0);
  out->append(body);
  w.Finish();
  if (keys) *keys = n;
  return Status::Ok();
}

}  // namespace pmtree::server
