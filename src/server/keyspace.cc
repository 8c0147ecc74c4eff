// SPDX-License-Identifier: Apache-2.0

#include "server/keyspace.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

namespace pmtree::server {
namespace {

constexpr char kStringTag = 's';
constexpr char kZsetTag = 'z';
constexpr char kHashTag = 'h';
constexpr char kMemberSub = 'm';
constexpr char kScoreSub = 's';
constexpr size_t kFlushBatch = 1000;

void AppendBigEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t ReadBigEndian(std::string_view s) {
  uint64_t v = 0;
  for (char c : s) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

std::string CardValue(uint64_t card, char tag = kZsetTag) {
  std::string v(1, tag);
  AppendBigEndian(&v, card, 8);
  return v;
}

// Redis's string-to-integer rule: optional '-', digits, no spaces, no '+',
// no leading zeros beyond "0", fits in int64.
bool ParseStrictInt64(std::string_view s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  if (s[0] == '+' || (s.size() > 1 && s[0] == '0') || (s.size() > 2 && s[0] == '-' && s[1] == '0')) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size() && s != "-";
}

// Matches the pattern element at pat[p] (a literal, '?', "\\x" or a class
// "[abc]", "[^a-z]") against c; *len = the element's length in the pattern.
bool MatchOne(std::string_view pat, size_t p, char c, size_t* len) {
  if (pat[p] == '?') {
    *len = 1;
    return true;
  }
  if (pat[p] == '\\' && p + 1 < pat.size()) {
    *len = 2;
    return pat[p + 1] == c;
  }
  if (pat[p] != '[') {
    *len = 1;
    return pat[p] == c;
  }
  size_t q = p + 1;
  bool negate = q < pat.size() && pat[q] == '^';
  if (negate) ++q;
  bool hit = false;
  while (q < pat.size() && pat[q] != ']') {
    if (pat[q] == '\\' && q + 1 < pat.size()) {
      hit |= pat[q + 1] == c;
      q += 2;
    } else if (q + 2 < pat.size() && pat[q + 1] == '-' && pat[q + 2] != ']') {
      char lo = std::min(pat[q], pat[q + 2]), hi = std::max(pat[q], pat[q + 2]);
      hit |= c >= lo && c <= hi;
      q += 3;
    } else {
      hit |= pat[q] == c;
      ++q;
    }
  }
  *len = (q < pat.size() ? q + 1 : q) - p;
  return hit != negate;
}

// Glob match with Redis's syntax (* ? [..] \\x).  Greedy with one backtrack
// point, the last '*': O(len(pat) * len(str)) whatever the pattern, so a
// MATCH of many stars cannot stall a loop.
bool GlobMatch(std::string_view pat, std::string_view str) {
  size_t p = 0, s = 0, star_p = std::string_view::npos, star_s = 0;
  while (s < str.size()) {
    size_t len;
    if (p < pat.size() && pat[p] == '*') {
      star_p = ++p;
      star_s = s;
    } else if (p < pat.size() && MatchOne(pat, p, str[s], &len)) {
      p += len;
      ++s;
    } else if (star_p != std::string_view::npos) {
      p = star_p;
      s = ++star_s;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

}  // namespace

Status WrongType() { return Status::Incompatible("WRONGTYPE Operation against a key holding the wrong kind of value"); }

// ---- encoding ------------------------------------------------------------------------------

std::string Keyspace::HeadKey(std::string_view key) {
  std::string k;
  k.reserve(key.size() + 1);
  k.push_back(kUserPrefix);
  k.append(key);
  return k;
}

std::string Keyspace::MemberPrefix(char ns, std::string_view key) {
  std::string k(1, ns);
  AppendBigEndian(&k, key.size(), 4);
  k.append(key);
  return k;
}

std::string Keyspace::ZsetPrefix(std::string_view key) { return MemberPrefix(kZsetPrefix, key); }

std::string Keyspace::HashFieldKey(std::string_view key, std::string_view field) {
  std::string k = MemberPrefix(kHashPrefix, key);
  k.append(field);
  return k;
}

std::string Keyspace::ZsetMemberKey(std::string_view key, std::string_view member) {
  std::string k = ZsetPrefix(key);
  k.push_back(kMemberSub);
  k.append(member);
  return k;
}

std::string Keyspace::ZsetScoreKey(std::string_view key, double score, std::string_view member) {
  std::string k = ZsetPrefix(key);
  k.push_back(kScoreSub);
  k.append(EncodeScore(score));
  k.append(member);
  return k;
}

// IEEE-754 doubles order like their bit patterns read as sign-magnitude
// integers; flipping every bit of a negative and only the sign bit of a
// positive makes them order as unsigned big-endian bytes.  -0 is stored as +0.
std::string Keyspace::EncodeScore(double score) {
  if (score == 0) score = 0;
  uint64_t bits = std::bit_cast<uint64_t>(score);
  bits = (bits >> 63) ? ~bits : bits | (1ull << 63);
  std::string out;
  AppendBigEndian(&out, bits, 8);
  return out;
}

double Keyspace::DecodeScore(std::string_view bytes) {
  uint64_t bits = ReadBigEndian(bytes.substr(0, 8));
  bits = (bits >> 63) ? bits & ~(1ull << 63) : ~bits;
  return std::bit_cast<double>(bits);
}

// ---- locks -----------------------------------------------------------------------------------

Keyspace::KeyLocks::KeyLocks(Keyspace* ks, const std::vector<std::string_view>& keys, const Txn* txn) : ks_(ks) {
  if (txn) return;
  for (auto k : keys) idx_.push_back(std::hash<std::string_view>{}(k) % kStripes);
  std::sort(idx_.begin(), idx_.end());
  idx_.erase(std::unique(idx_.begin(), idx_.end()), idx_.end());
  for (size_t i : idx_) ks_->stripes_[i].lock();
}

Keyspace::KeyLocks::~KeyLocks() {
  for (auto it = idx_.rbegin(); it != idx_.rend(); ++it) ks_->stripes_[*it].unlock();
}

// ---- EXEC's transaction ------------------------------------------------------------------------

Status Txn::Put(std::string_view key, std::string_view value) {
  PMTREE_RETURN_IF_ERROR(t_->Put(key, value));
  written_[std::string(key)] = true;
  return Status::Ok();
}

Status Txn::PutFields(std::string_view key, const kv::FieldMap& fields) {
  PMTREE_RETURN_IF_ERROR(t_->PutFields(key, fields));
  written_[std::string(key)] = true;
  return Status::Ok();
}

Status Txn::Delete(std::string_view key) {
  PMTREE_RETURN_IF_ERROR(t_->Delete(key));
  written_[std::string(key)] = false;
  return Status::Ok();
}

Status Txn::Write(const kv::WriteBatch& batch) {
  for (const auto& op : batch.ops())
    PMTREE_RETURN_IF_ERROR(op.value ? Put(op.key, *op.value) : op.fields ? PutFields(op.key, *op.fields) : Delete(op.key));
  return Status::Ok();
}

// The store's keys in the range (unchanged since the snapshot: the caller
// holds their locks), minus those this transaction deleted, plus those it
// put, in order.
Status Txn::ForEachKey(std::string_view prefix, const std::string& end,
                       const std::function<void(std::string_view)>& fn) {
  auto it = store_->NewIterator({.upper_bound = end});
  auto own = written_.lower_bound(prefix);
  auto own_end = written_.lower_bound(end);
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    for (; own != own_end && own->first < it->key(); ++own)
      if (own->second) fn(own->first);
    if (own != own_end && own->first == it->key()) {
      if (own->second) fn(own->first);
      ++own;
      continue;
    }
    fn(it->key());
  }
  for (; own != own_end; ++own)
    if (own->second) fn(own->first);
  return it->status();
}

// ---- heads -----------------------------------------------------------------------------------

Status Keyspace::ReadHead(std::string_view head_key, Head* head, Txn* txn) {
  head->value.clear();
  head->large_hash = false;
  auto r = Read(txn, head_key, &head->value);
  if (!r.ok()) {
    // Keys are length-checked before they get here, so the only
    // InvalidArgument left is "holds a field record": a hash.
    if (r.status().code() != Status::Code::kInvalidArgument) return r.status();
    head->type = KeyType::kHash;
    return Status::Ok();
  }
  if (!*r) {
    head->type = KeyType::kNone;
    return Status::Ok();
  }
  PMTREE_RETURN_IF_ERROR(ParseHeadTag(head->value, head));
  if (head->type == KeyType::kString) head->value.erase(0, 1);
  return Status::Ok();
}

Status Keyspace::ParseHeadTag(std::string_view rec, Head* head) {
  head->large_hash = false;
  if (rec.empty()) return Status::Corruption("server: head record of a key without a type tag");
  if (rec[0] == kStringTag) {
    head->type = KeyType::kString;
    return Status::Ok();
  }
  if ((rec[0] == kZsetTag || rec[0] == kHashTag) && rec.size() == 9) {
    head->type = rec[0] == kZsetTag ? KeyType::kZset : KeyType::kHash;
    head->large_hash = head->type == KeyType::kHash;
    head->card = ReadBigEndian(rec.substr(1));
    return Status::Ok();
  }
  return Status::Corruption("server: head record with an unknown type tag");
}

Status Keyspace::DeleteMembers(std::string_view key, const Head& head, kv::WriteBatch* batch, Txn* txn) {
  if (head.type != KeyType::kZset && !head.large_hash) return Status::Ok();
  std::string prefix = MemberPrefix(head.type == KeyType::kZset ? kZsetPrefix : kHashPrefix, key);
  if (txn) return txn->ForEachKey(prefix, PrefixEnd(prefix), [&](std::string_view k) { batch->Delete(k); });
  // An iterator reads at the visible timestamp: the members the last
  // holders of this key's lock wrote must be visible first (kv.h, deferred
  // visibility), or the delete would leave them behind.
  store_->AwaitPublished();
  auto it = store_->NewIterator({.upper_bound = PrefixEnd(prefix)});
  for (it->Seek(prefix); it->Valid(); it->Next()) batch->Delete(it->key());
  return it->status();
}

// The first key after every key that starts with `prefix` (prefix is never
// all 0xff bytes: it opens with a namespace letter).
std::string Keyspace::PrefixEnd(std::string prefix) {
  while (static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

Status Keyspace::Type(std::string_view key, KeyType* type, Txn* txn) {
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(HeadKey(key), &h, txn));
  *type = h.type;
  return Status::Ok();
}

// ---- generic ---------------------------------------------------------------------------------

Status Keyspace::Del(const std::vector<std::string>& keys, int64_t* deleted, Txn* txn) {
  std::vector<std::string_view> views(keys.begin(), keys.end());
  KeyLocks lock(this, views, txn);
  kv::WriteBatch batch;
  *deleted = 0;
  std::vector<std::string_view> seen;
  for (const auto& key : keys) {
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;  // DEL k k counts k once
    seen.push_back(key);
    Head h;
    std::string hk = HeadKey(key);
    PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
    if (h.type == KeyType::kNone) continue;
    ++*deleted;
    PMTREE_RETURN_IF_ERROR(DeleteMembers(key, h, &batch, txn));
    batch.Delete(hk);
  }
  return batch.size() ? Commit(txn, batch) : Status::Ok();
}

Status Keyspace::DbSize(int64_t* n) {
  kv::IteratorOptions io;
  io.upper_bound = std::string(1, kUserPrefix + 1);
  store_->AwaitThreadTimestamp();  // VISIBILITY: this connection's earlier writes
  auto it = store_->NewIterator(io);
  *n = 0;
  for (it->Seek(std::string(1, kUserPrefix)); it->Valid(); it->Next()) ++*n;
  return it->status();
}

Status Keyspace::FlushAll(bool quiescent) {
  store_->AwaitPublished();  // every write acknowledged or not before it is gone after it
  if (quiescent) {
    Status s = store_->Clear();
    if (s.ok()) return s;
    std::fprintf(stderr, "pmtree serve: FLUSHALL could not replace the store at once (%s); deleting key by key\n",
                 s.ToString().c_str());
  }
  while (true) {
    kv::WriteBatch batch;
    {
      auto it = store_->NewIterator();
      for (it->SeekToFirst(); it->Valid() && batch.size() < kFlushBatch; it->Next()) batch.Delete(it->key());
      PMTREE_RETURN_IF_ERROR(it->status());
    }
    if (batch.size() == 0) return Status::Ok();
    PMTREE_RETURN_IF_ERROR(store_->Write(batch));
  }
}

Status Keyspace::ScanKeys(std::string_view from, const std::optional<std::string>& to, size_t count,
                          std::string_view pattern, bool with_values, std::vector<std::string>* out,
                          std::optional<std::string>* next) {
  kv::IteratorOptions io;
  io.upper_bound = to ? HeadKey(*to) : std::string(1, kUserPrefix + 1);
  store_->AwaitThreadTimestamp();  // VISIBILITY: this connection's earlier writes
  auto it = store_->NewIterator(io);
  next->reset();
  size_t visited = 0;
  for (it->Seek(HeadKey(from)); it->Valid(); it->Next()) {
    std::string_view user = it->key().substr(1);
    if (visited == count) {
      *next = std::string(user);
      break;
    }
    ++visited;
    if (!pattern.empty() && !GlobMatch(pattern, user)) continue;
    out->emplace_back(user);
    if (with_values) {
      std::string_view v = it->value();
      bool is_string = !it->is_fields() && !v.empty() && v[0] == kStringTag;
      out->push_back(is_string ? std::string(v.substr(1)) : std::string());
    }
  }
  return it->status();
}

// ---- strings ---------------------------------------------------------------------------------

Status Keyspace::Get(std::string_view key, std::optional<std::string>* value, Txn* txn) {
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(HeadKey(key), &h, txn));
  if (h.type == KeyType::kNone) {
    value->reset();
    return Status::Ok();
  }
  if (h.type != KeyType::kString) return WrongType();
  *value = std::move(h.value);
  return Status::Ok();
}

Status Keyspace::GetView(std::string_view key, const std::function<void(std::optional<std::string_view>)>& fn,
                         Txn* txn) {
  if (txn) {  // a transaction's reads see its own buffered writes: Get's path
    std::optional<std::string> v;
    PMTREE_RETURN_IF_ERROR(Get(key, &v, txn));
    fn(v ? std::optional<std::string_view>(*v) : std::nullopt);
    return Status::Ok();
  }
  Status st = Status::Ok();
  auto r = store_->GetView(
      HeadKey(key),
      [&](std::string_view rec) {
        Head h;
        st = ParseHeadTag(rec, &h);
        if (st.ok() && h.type != KeyType::kString) st = WrongType();
        if (st.ok()) fn(rec.substr(1));
      },
      {.unpublished = true});  // as Read: the newest complete write (VISIBILITY)
  if (!r.ok()) return r.status().code() == Status::Code::kInvalidArgument ? WrongType() : r.status();  // a hash
  if (!*r) fn(std::nullopt);
  return st;
}

Status Keyspace::Set(std::string_view key, std::string_view value, SetCondition cond, bool* applied,
                     std::optional<std::string>* old, Txn* txn) {
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
  if (old) {
    if (h.type != KeyType::kNone && h.type != KeyType::kString) return WrongType();
    if (h.type == KeyType::kString) *old = std::move(h.value);
    else old->reset();
  }
  bool exists = h.type != KeyType::kNone;
  *applied = cond == SetCondition::kAlways || (cond == SetCondition::kIfAbsent) != exists;
  if (!*applied) return Status::Ok();
  std::string stored;
  stored.reserve(value.size() + 1);
  stored.push_back(kStringTag);
  stored.append(value);
  if (h.type != KeyType::kZset && !h.large_hash) return PutKey(txn, hk, stored);
  kv::WriteBatch batch;
  PMTREE_RETURN_IF_ERROR(DeleteMembers(key, h, &batch, txn));
  batch.Put(hk, stored);
  return Commit(txn, batch);
}

Status Keyspace::WriteMany(std::span<GroupWrite> writes, size_t* applied) {
  *applied = 0;
  std::vector<std::string_view> keys;
  keys.reserve(writes.size());
  for (const GroupWrite& w : writes) keys.push_back(w.key);
  KeyLocks lock(this, keys);
  // Head keys and SETs' tagged values, owned here while the store reads
  // them: one buffer for all of them (not two strings per SET), sized first
  // so that the views into it stay valid.
  size_t bytes = 0;
  for (const GroupWrite& w : writes) bytes += w.key.size() + 1 + (w.incr ? 0 : w.value.size() + 1);
  std::string buf;
  buf.reserve(bytes);
  std::vector<std::string_view> heads;
  std::vector<std::string_view> tagged;  // a SET's stored value
  heads.reserve(writes.size());
  tagged.reserve(writes.size());
  for (const GroupWrite& w : writes) {
    const size_t head = buf.size();
    buf.push_back(kUserPrefix);
    buf.append(w.key);
    heads.push_back(std::string_view(buf).substr(head));
    const size_t value = buf.size();
    if (!w.incr) {
      buf.push_back(kStringTag);
      buf.append(w.value);
    }
    tagged.push_back(std::string_view(buf).substr(value));
  }
  std::string counter;  // an INCRBY's stored value, until the store copied it
  // The store shows each head under its lock, without a copy.  A SET
  // replaces an absent key, a small hash (a field record) or a string as is;
  // any other head (a sorted set's or a large hash's, whose members Set must
  // delete too) stops the group.  An INCRBY goes ahead only where IncrBy
  // would succeed.
  auto compute = [&](size_t i, const kv::Store::Current& current, std::string_view* value) {
    using Kind = kv::Store::Current::Kind;
    const bool string = current.kind == Kind::kValue && !current.value.empty() && current.value[0] == kStringTag;
    GroupWrite& w = writes[i];
    if (!w.incr) {
      if (current.kind == Kind::kValue && !string) return false;
      *value = tagged[i];
      return true;
    }
    int64_t v = 0;
    if (current.kind == Kind::kFields || (current.kind == Kind::kValue && !string)) return false;
    if (string && !ParseStrictInt64(current.value.substr(1), &v)) return false;
    if (__builtin_add_overflow(v, w.delta, &v)) return false;
    w.result = v;
    counter.assign(1, kStringTag);
    counter += std::to_string(v);
    *value = counter;
    return true;
  };
  Status s = store_->UpdateMany(heads, applied, compute);
  // A full pool is the caller's to report, per command, through Set/IncrBy.
  return s.code() == Status::Code::kOutOfSpace ? Status::Ok() : s;
}

Status Keyspace::GetDel(std::string_view key, std::optional<std::string>* old, Txn* txn) {
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
  old->reset();
  if (h.type == KeyType::kNone) return Status::Ok();
  if (h.type != KeyType::kString) return WrongType();
  PMTREE_RETURN_IF_ERROR((txn ? txn->Delete(hk) : store_->Delete(hk).status()));
  *old = std::move(h.value);
  return Status::Ok();
}

Status Keyspace::IncrBy(std::string_view key, int64_t delta, int64_t* result, Txn* txn) {
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
  int64_t v = 0;
  if (h.type == KeyType::kString) {
    if (!ParseStrictInt64(h.value, &v)) return Status::InvalidArgument("ERR value is not an integer or out of range");
  } else if (h.type != KeyType::kNone) {
    return WrongType();
  }
  if (__builtin_add_overflow(v, delta, &v)) return Status::InvalidArgument("ERR increment or decrement would overflow");
  PMTREE_RETURN_IF_ERROR(PutKey(txn, hk, std::string(1, kStringTag) + std::to_string(v)));
  *result = v;
  return Status::Ok();
}

Status Keyspace::Append(std::string_view key, std::string_view suffix, int64_t* new_length, Txn* txn) {
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
  if (h.type != KeyType::kNone && h.type != KeyType::kString) return WrongType();
  std::string stored(1, kStringTag);
  stored += h.value;
  stored += suffix;
  if (stored.size() > kv::kMaxValueBytes)
    return Status::InvalidArgument("ERR string exceeds maximum allowed size (" +
                                   std::to_string(kv::kMaxValueBytes - 1) + " bytes)");
  PMTREE_RETURN_IF_ERROR(PutKey(txn, hk, stored));
  *new_length = static_cast<int64_t>(stored.size() - 1);
  return Status::Ok();
}

Status Keyspace::MSet(const std::vector<std::pair<std::string, std::string>>& pairs, Txn* txn) {
  std::vector<std::string_view> keys;
  for (const auto& [k, v] : pairs) keys.push_back(k);
  KeyLocks lock(this, keys, txn);
  kv::WriteBatch batch;
  for (const auto& [k, v] : pairs) {
    std::string hk = HeadKey(k);
    Head h;
    PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
    PMTREE_RETURN_IF_ERROR(DeleteMembers(k, h, &batch, txn));
    batch.Put(hk, std::string(1, kStringTag) + v);
  }
  return Commit(txn, batch);
}

// ---- hashes ----------------------------------------------------------------------------------

Status Keyspace::HSet(std::string_view key, const kv::FieldMap& fields, int64_t* added, Txn* txn) {
  for (const auto& [f, v] : fields)
    if (HashFieldKey(key, f).size() > kMaxKeyBytes)
      return Status::InvalidArgument("ERR key and field of " + std::to_string(key.size() + f.size()) +
                                     " bytes; the limit is " + std::to_string(kMaxKeyBytes - 5));
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  kv::FieldMap existing;
  bool found;
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHash(hk, {}, &existing, &found, &h, txn));
  *added = 0;
  if (h.large_hash) return HSetLarge(key, h.card, {}, fields, added, txn);
  for (const auto& [f, v] : fields) *added += existing.count(f) == 0;
  uint64_t total = existing.size() + static_cast<uint64_t>(*added);
  if (total > kSmallHashFields) return HSetLarge(key, 0, existing, fields, added, txn);
  if (txn) {
    // A transaction buffers whole records: the merged field set.
    for (const auto& [f, v] : fields) existing[f] = v;
    return txn->PutFields(hk, existing);
  }
  if (!found) return store_->PutFields(hk, fields);
  return store_->UpdateFields(hk, fields).status();
}

// Deletes the members (sorted set) or fields (large hash) `names` that
// exist, each once, with their score-index keys, and updates or deletes the
// head, in one batch; *removed counts them.
Status Keyspace::RemoveMembers(std::string_view key, const Head& h, const std::vector<std::string>& names,
                               int64_t* removed, Txn* txn) {
  const bool zset = h.type == KeyType::kZset;
  kv::WriteBatch batch;
  std::vector<std::string_view> done;
  std::string old;
  *removed = 0;
  for (const auto& n : names) {
    if (std::find(done.begin(), done.end(), n) != done.end()) continue;
    done.push_back(n);
    std::string mk = zset ? ZsetMemberKey(key, n) : HashFieldKey(key, n);
    if (mk.size() > kMaxKeyBytes) continue;  // too long to have been added
    PMTREE_ASSIGN_OR_RETURN(bool had, Read(txn, mk, &old));
    if (!had) continue;
    batch.Delete(mk);
    if (zset) batch.Delete(ZsetScoreKey(key, DecodeScore(old), n));
    ++*removed;
  }
  if (*removed == 0) return Status::Ok();
  uint64_t card = h.card - static_cast<uint64_t>(*removed);
  if (card == 0) batch.Delete(HeadKey(key));
  else batch.Put(HeadKey(key), CardValue(card, zset ? kZsetTag : kHashTag));
  return Commit(txn, batch);
}

// Reads hash `hk` from its field record (all fields, or the named ones) into
// *fields, *found telling whether the key exists; for a large hash it sets
// head->large_hash and head->card instead; another type is WRONGTYPE.
Status Keyspace::ReadHash(const std::string& hk, const std::vector<std::string>& names, kv::FieldMap* fields,
                          bool* found, Head* head, Txn* txn) {
  head->large_hash = false;
  auto r = txn ? txn->GetFields(hk, names, fields) : store_->GetFields(hk, names, fields, {.unpublished = true});
  if (r.ok()) {
    *found = *r;
    return Status::Ok();
  }
  // Keys are length-checked before they get here: InvalidArgument means
  // "holds a plain value", i.e. a large hash's head or another type.
  if (r.status().code() != Status::Code::kInvalidArgument) return r.status();
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, head, txn));
  if (!head->large_hash) return WrongType();
  *found = true;
  return Status::Ok();
}

// Writes `fields` into the large hash `key` of `card` fields; `convert`
// holds the fields of a small hash being converted (then card is 0 and the
// field record is replaced by the large head in the same batch).
Status Keyspace::HSetLarge(std::string_view key, uint64_t card, const kv::FieldMap& convert,
                           const kv::FieldMap& fields, int64_t* added, Txn* txn) {
  kv::WriteBatch batch;
  for (const auto& [f, v] : convert)
    if (!fields.count(f)) batch.Put(HashFieldKey(key, f), v);  // one Put per key in a batch
  card += convert.size();
  *added = 0;
  std::string old;
  for (const auto& [f, v] : fields) {
    std::string fk = HashFieldKey(key, f);
    bool had = convert.count(f) > 0;
    if (!had && convert.empty()) {
      PMTREE_ASSIGN_OR_RETURN(had, Read(txn, fk, &old));
    }
    if (!had) {
      ++*added;
      ++card;
    }
    batch.Put(fk, v);
  }
  batch.Put(HeadKey(key), CardValue(card, kHashTag));
  return Commit(txn, batch);
}

Status Keyspace::HGetAllView(std::string_view key, const std::function<void(std::span<const kv::FieldView>)>& fn,
                             Txn* txn) {
  auto copied = [&]() -> Status {  // a transaction's own writes, or a large hash: HGet's copies
    kv::FieldMap f;
    bool found = false;
    PMTREE_RETURN_IF_ERROR(HGet(key, {}, &f, &found, txn));
    std::vector<kv::FieldView> views(f.begin(), f.end());
    fn(views);
    return Status::Ok();
  };
  if (txn) return copied();
  const std::string hk = HeadKey(key);
  auto r = store_->GetFieldsView(hk, fn, {.unpublished = true});  // as ReadHash reads
  if (r.ok()) {
    if (!*r) fn({});
    return Status::Ok();
  }
  // Keys are length-checked before they get here: InvalidArgument means
  // "holds a plain value", i.e. a large hash's head or another type.
  if (r.status().code() != Status::Code::kInvalidArgument) return r.status();
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h));
  if (!h.large_hash) return WrongType();
  return copied();
}

Status Keyspace::HGet(std::string_view key, const std::vector<std::string>& names, kv::FieldMap* out, bool* found,
                      Txn* txn) {
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHash(HeadKey(key), names, out, found, &h, txn));
  if (!h.large_hash) return Status::Ok();
  out->clear();
  std::string v;
  if (names.empty() && txn) {
    std::string prefix = MemberPrefix(kHashPrefix, key);
    std::vector<std::string> fks;
    PMTREE_RETURN_IF_ERROR(txn->ForEachKey(prefix, PrefixEnd(prefix), [&](std::string_view k) { fks.emplace_back(k); }));
    for (const auto& fk : fks) {
      PMTREE_ASSIGN_OR_RETURN(bool had, txn->Get(fk, &v));
      if (had) out->emplace(fk.substr(prefix.size()), v);
    }
    return Status::Ok();
  }
  if (names.empty()) {
    std::string prefix = MemberPrefix(kHashPrefix, key);
    store_->AwaitThreadTimestamp();  // VISIBILITY: this connection's earlier writes
    auto it = store_->NewIterator({.upper_bound = PrefixEnd(prefix)});
    for (it->Seek(prefix); it->Valid(); it->Next()) out->emplace(it->key().substr(prefix.size()), it->value());
    return it->status();
  }
  for (const auto& n : names) {
    PMTREE_ASSIGN_OR_RETURN(bool had, Read(txn, HashFieldKey(key, n), &v));
    if (had) out->emplace(n, v);
  }
  return Status::Ok();
}

Status Keyspace::HLen(std::string_view key, int64_t* n, Txn* txn) {
  Head h;
  std::string hk = HeadKey(key);
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
  if (h.type == KeyType::kNone) {
    *n = 0;
    return Status::Ok();
  }
  if (h.type != KeyType::kHash) return WrongType();
  if (h.large_hash) {
    *n = static_cast<int64_t>(h.card);
    return Status::Ok();
  }
  kv::FieldMap f;
  bool found;
  PMTREE_RETURN_IF_ERROR(HGet(key, {}, &f, &found, txn));
  *n = static_cast<int64_t>(f.size());
  return Status::Ok();
}

Status Keyspace::HDel(std::string_view key, const std::vector<std::string>& names, int64_t* removed, Txn* txn) {
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  kv::FieldMap fields;
  bool found;
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHash(hk, {}, &fields, &found, &h, txn));
  *removed = 0;
  if (h.large_hash) return RemoveMembers(key, h, names, removed, txn);
  for (const auto& n : names) *removed += static_cast<int64_t>(fields.erase(n));
  if (*removed == 0) return Status::Ok();
  // The store has no field delete: the record is rewritten without them
  // (a hash with no field left is deleted, as in Redis).
  if (fields.empty()) return txn ? txn->Delete(hk) : store_->Delete(hk).status();
  return txn ? txn->PutFields(hk, fields) : store_->PutFields(hk, fields);
}

// ---- sorted sets -----------------------------------------------------------------------------

Status Keyspace::ZAdd(std::string_view key, const std::vector<std::pair<double, std::string>>& members,
                      int64_t* added, Txn* txn) {
  for (const auto& [score, m] : members)
    if (ZsetScoreKey(key, score, m).size() > kMaxKeyBytes)
      return Status::InvalidArgument("ERR key and member of " + std::to_string(key.size() + m.size()) +
                                     " bytes; the limit is " + std::to_string(kMaxKeyBytes - 14));
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
  if (h.type != KeyType::kNone && h.type != KeyType::kZset) return WrongType();
  std::map<std::string_view, double> last;  // ZADD k 1 a 2 a: the last score wins
  for (const auto& [score, m] : members) last[m] = score;
  kv::WriteBatch batch;
  uint64_t card = h.card;
  *added = 0;
  std::string old;
  for (const auto& [m, score] : last) {
    std::string mk = ZsetMemberKey(key, m);
    PMTREE_ASSIGN_OR_RETURN(bool had, Read(txn, mk, &old));
    std::string enc = EncodeScore(score);
    if (had) {
      if (old == enc) continue;
      batch.Delete(ZsetScoreKey(key, DecodeScore(old), m));
    } else {
      ++card;
      ++*added;
    }
    batch.Put(mk, enc);
    batch.Put(ZsetScoreKey(key, score, m), "");
  }
  if (batch.size() == 0) return Status::Ok();
  batch.Put(hk, CardValue(card));
  return Commit(txn, batch);
}

Status Keyspace::ZRem(std::string_view key, const std::vector<std::string>& members, int64_t* removed, Txn* txn) {
  KeyLocks lock(this, {key}, txn);
  std::string hk = HeadKey(key);
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(hk, &h, txn));
  *removed = 0;
  if (h.type == KeyType::kNone) return Status::Ok();
  if (h.type != KeyType::kZset) return WrongType();
  return RemoveMembers(key, h, members, removed, txn);
}

Status Keyspace::ZScore(std::string_view key, std::string_view member, std::optional<double>* score, Txn* txn) {
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(HeadKey(key), &h, txn));
  score->reset();
  if (h.type == KeyType::kNone) return Status::Ok();
  if (h.type != KeyType::kZset) return WrongType();
  if (ZsetMemberKey(key, member).size() > kMaxKeyBytes) return Status::Ok();
  std::string enc;
  PMTREE_ASSIGN_OR_RETURN(bool had, Read(txn, ZsetMemberKey(key, member), &enc));
  if (had) *score = DecodeScore(enc);
  return Status::Ok();
}

Status Keyspace::ZCard(std::string_view key, int64_t* n, Txn* txn) {
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(HeadKey(key), &h, txn));
  if (h.type != KeyType::kNone && h.type != KeyType::kZset) return WrongType();
  *n = static_cast<int64_t>(h.card);
  return Status::Ok();
}

Status Keyspace::ZRangeByScore(std::string_view key, ScoreBound min, ScoreBound max, int64_t offset, int64_t count,
                               std::vector<std::pair<std::string, double>>* out) {
  Head h;
  PMTREE_RETURN_IF_ERROR(ReadHead(HeadKey(key), &h));
  if (h.type == KeyType::kNone) return Status::Ok();
  if (h.type != KeyType::kZset) return WrongType();
  std::string base = ZsetPrefix(key);
  base.push_back(kScoreSub);
  kv::IteratorOptions io;
  io.upper_bound = base.substr(0, base.size() - 1) + static_cast<char>(kScoreSub + 1);
  store_->AwaitThreadTimestamp();  // VISIBILITY: this connection's earlier writes
  auto it = store_->NewIterator(io);
  for (it->Seek(base + EncodeScore(min.value)); it->Valid() && count != 0; it->Next()) {
    std::string_view rest = it->key().substr(base.size());
    double score = DecodeScore(rest);
    if (min.exclusive && score == min.value) continue;
    if (score > max.value || (max.exclusive && score == max.value)) break;
    if (offset > 0) {
      --offset;
      continue;
    }
    out->emplace_back(std::string(rest.substr(8)), score);
    if (count > 0) --count;
  }
  return it->status();
}

}  // namespace pmtree::server
