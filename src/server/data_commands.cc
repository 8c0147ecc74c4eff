// SPDX-License-Identifier: Apache-2.0
//
// The data commands: strings, hashes, sorted sets, SCAN and RANGE.  Each
// parses its arguments, calls one Keyspace method and writes the reply.

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "server/commands.h"
#include "server/resp.h"

namespace pmtree::server {
namespace {

constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";
constexpr std::string_view kSyntax = "ERR syntax error";

bool ParseInt(std::string_view s, int64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// A score as Redis reads one: a decimal or "inf"/"+inf"/"-inf"; never NaN.
bool ParseScore(std::string_view s, double* v) {
  if (s.empty() || s.size() > 128) return false;
  std::string z(s);  // strtod needs a terminator
  char* end = nullptr;
  *v = std::strtod(z.c_str(), &end);
  return end == z.c_str() + z.size() && !std::isnan(*v) && !std::isspace(static_cast<unsigned char>(z[0]));
}

bool ParseBound(std::string_view s, ScoreBound* b) {
  b->exclusive = !s.empty() && s[0] == '(';
  if (b->exclusive) s.remove_prefix(1);
  return ParseScore(s, &b->value);
}

std::string FormatScore(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// True when `a` is `lower_word` in any case (option words: NX, LIMIT, ...).
bool IsKeyword(std::string_view a, std::string_view lower_word) {
  if (a.size() != lower_word.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != lower_word[i]) return false;
  return true;
}

// Runs `s`; on error writes its reply and returns false.
bool Ok(Call& c, const Status& s) {
  if (s.ok()) return true;
  AppendStatusError(c.out, s);
  return false;
}

// ---- strings ----

void GetCmd(Call& c) {
  auto reply = [&](std::optional<std::string_view> v) { v ? AppendBulk(c.out, *v) : AppendNull(c.out); };
  (void)Ok(c, c.ks().GetView(c.args[1], reply, c.txn));
}

// SET key value [NX|XX] [GET] [KEEPTTL]; expiries are refused (no TTLs).
void SetCmd(Call& c) {
  auto cond = Keyspace::SetCondition::kAlways;
  bool get = false;
  for (size_t i = 3; i < c.args.size(); ++i) {
    const std::string& a = c.args[i];
    if (IsKeyword(a, "nx") && cond != Keyspace::SetCondition::kIfPresent) {
      cond = Keyspace::SetCondition::kIfAbsent;
    } else if (IsKeyword(a, "xx") && cond != Keyspace::SetCondition::kIfAbsent) {
      cond = Keyspace::SetCondition::kIfPresent;
    } else if (IsKeyword(a, "get")) {
      get = true;
    } else if (IsKeyword(a, "keepttl")) {
    } else if (IsKeyword(a, "ex") || IsKeyword(a, "px") || IsKeyword(a, "exat") || IsKeyword(a, "pxat")) {
      return AppendError(c.out, "ERR expiry is not supported: pmtree keys do not expire");
    } else {
      return AppendError(c.out, kSyntax);
    }
  }
  bool applied = false;
  std::optional<std::string> old;
  if (!Ok(c, c.ks().Set(c.args[1], c.args[2], cond, &applied, get ? &old : nullptr, c.txn))) return;
  if (get) return old ? AppendBulk(c.out, *old) : AppendNull(c.out);
  applied ? AppendSimple(c.out, "OK") : AppendNull(c.out);
}

void SetNxCmd(Call& c) {
  bool applied = false;
  if (!Ok(c, c.ks().Set(c.args[1], c.args[2], Keyspace::SetCondition::kIfAbsent, &applied, nullptr, c.txn))) return;
  AppendInt(c.out, applied);
}

void GetDelCmd(Call& c) {
  std::optional<std::string> v;
  if (!Ok(c, c.ks().GetDel(c.args[1], &v, c.txn))) return;
  v ? AppendBulk(c.out, *v) : AppendNull(c.out);
}

void DelCmd(Call& c) {
  int64_t n = 0;
  std::vector<std::string> keys(c.args.begin() + 1, c.args.end());
  if (!Ok(c, c.ks().Del(keys, &n, c.txn))) return;
  AppendInt(c.out, n);
}

void ExistsCmd(Call& c) {
  int64_t n = 0;
  for (size_t i = 1; i < c.args.size(); ++i) {
    KeyType t;
    if (!Ok(c, c.ks().Type(c.args[i], &t, c.txn))) return;
    n += t != KeyType::kNone;
  }
  AppendInt(c.out, n);
}

void TypeCmd(Call& c) {
  KeyType t;
  if (!Ok(c, c.ks().Type(c.args[1], &t, c.txn))) return;
  static constexpr std::string_view kNames[] = {"none", "string", "hash", "zset"};
  AppendSimple(c.out, kNames[static_cast<int>(t)]);
}

void IncrByDelta(Call& c, int64_t delta) {
  int64_t v = 0;
  if (!Ok(c, c.ks().IncrBy(c.args[1], delta, &v, c.txn))) return;
  AppendInt(c.out, v);
}
void IncrCmd(Call& c) { IncrByDelta(c, 1); }
void DecrCmd(Call& c) { IncrByDelta(c, -1); }
void IncrByCmd(Call& c) {
  int64_t d;
  if (!ParseInt(c.args[2], &d)) return AppendError(c.out, kNotInteger);
  IncrByDelta(c, d);
}
void DecrByCmd(Call& c) {
  int64_t d;
  if (!ParseInt(c.args[2], &d) || d == INT64_MIN) return AppendError(c.out, kNotInteger);
  IncrByDelta(c, -d);
}

void AppendCmd(Call& c) {
  int64_t n = 0;
  if (!Ok(c, c.ks().Append(c.args[1], c.args[2], &n, c.txn))) return;
  AppendInt(c.out, n);
}

void StrlenCmd(Call& c) {
  std::optional<std::string> v;
  if (!Ok(c, c.ks().Get(c.args[1], &v, c.txn))) return;
  AppendInt(c.out, v ? static_cast<int64_t>(v->size()) : 0);
}

void MGetCmd(Call& c) {
  AppendArray(c.out, static_cast<int64_t>(c.args.size() - 1));
  for (size_t i = 1; i < c.args.size(); ++i) {
    std::optional<std::string> v;
    Status s = c.ks().Get(c.args[i], &v, c.txn);
    // Redis answers nil for a key of another type; a store error still shows.
    if (!s.ok() && s.code() != Status::Code::kIncompatible) {
      AppendStatusError(c.out, s);
      continue;
    }
    v ? AppendBulk(c.out, *v) : AppendNull(c.out);
  }
}

void MSetCmd(Call& c) {
  if (c.args.size() % 2 == 0) return AppendError(c.out, "ERR wrong number of arguments for 'mset' command");
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 1; i + 1 < c.args.size(); i += 2) pairs.emplace_back(c.args[i], c.args[i + 1]);
  if (!Ok(c, c.ks().MSet(pairs, c.txn))) return;
  AppendSimple(c.out, "OK");
}

// ---- hashes ----

bool ReadFieldPairs(Call& c, std::string_view cmd, kv::FieldMap* fields) {
  if (c.args.size() % 2 != 0) {
    AppendError(c.out, "ERR wrong number of arguments for '" + std::string(cmd) + "' command");
    return false;
  }
  for (size_t i = 2; i + 1 < c.args.size(); i += 2) {
    const std::string& f = c.args[i];
    if (f.empty() || f.size() > kv::kMaxFieldNameBytes) {
      AppendError(c.out, "ERR hash field names have 1.." + std::to_string(kv::kMaxFieldNameBytes) + " bytes");
      return false;
    }
    (*fields)[f] = c.args[i + 1];
  }
  return true;
}

void HSetCmd(Call& c) {
  kv::FieldMap fields;
  if (!ReadFieldPairs(c, "hset", &fields)) return;
  int64_t added = 0;
  if (!Ok(c, c.ks().HSet(c.args[1], fields, &added, c.txn))) return;
  AppendInt(c.out, added);
}

void HMSetCmd(Call& c) {
  kv::FieldMap fields;
  if (!ReadFieldPairs(c, "hmset", &fields)) return;
  int64_t added = 0;
  if (!Ok(c, c.ks().HSet(c.args[1], fields, &added, c.txn))) return;
  AppendSimple(c.out, "OK");
}

// Reads the named fields (all when `names` is empty); false after an error reply.
bool ReadFields(Call& c, const std::vector<std::string>& names, kv::FieldMap* fields) {
  bool found = false;
  return Ok(c, c.ks().HGet(c.args[1], names, fields, &found, c.txn));
}

// Field names that cannot exist (empty, too long) are simply absent.
std::vector<std::string> ValidNames(const std::vector<std::string>& args, size_t from) {
  std::vector<std::string> names;
  for (size_t i = from; i < args.size(); ++i)
    if (!args[i].empty() && args[i].size() <= kv::kMaxFieldNameBytes) names.push_back(args[i]);
  return names;
}

void HGetCmd(Call& c) {
  kv::FieldMap f;
  auto names = ValidNames(c.args, 2);
  if (names.empty()) return AppendNull(c.out);
  if (!ReadFields(c, names, &f)) return;
  auto it = f.find(c.args[2]);
  it == f.end() ? AppendNull(c.out) : AppendBulk(c.out, it->second);
}

void HMGetCmd(Call& c) {
  kv::FieldMap f;
  auto names = ValidNames(c.args, 2);
  if (!names.empty() && !ReadFields(c, names, &f)) return;
  AppendArray(c.out, static_cast<int64_t>(c.args.size() - 2));
  for (size_t i = 2; i < c.args.size(); ++i) {
    auto it = f.find(c.args[i]);
    it == f.end() ? AppendNull(c.out) : AppendBulk(c.out, it->second);
  }
}

void HGetAllCmd(Call& c) {
  auto reply = [&](std::span<const kv::FieldView> fields) {
    AppendArray(c.out, static_cast<int64_t>(2 * fields.size()));
    for (const auto& [name, value] : fields) {
      AppendBulk(c.out, name);
      AppendBulk(c.out, value);
    }
  };
  (void)Ok(c, c.ks().HGetAllView(c.args[1], reply, c.txn));
}

void HDelCmd(Call& c) {
  int64_t n = 0;
  if (!Ok(c, c.ks().HDel(c.args[1], ValidNames(c.args, 2), &n, c.txn))) return;
  AppendInt(c.out, n);
}

void HLenCmd(Call& c) {
  int64_t n = 0;
  if (!Ok(c, c.ks().HLen(c.args[1], &n, c.txn))) return;
  AppendInt(c.out, n);
}

void HExistsCmd(Call& c) {
  kv::FieldMap f;
  auto names = ValidNames(c.args, 2);
  if (names.empty()) return AppendInt(c.out, 0);
  if (!ReadFields(c, names, &f)) return;
  AppendInt(c.out, f.count(c.args[2]) ? 1 : 0);
}

// ---- sorted sets ----

void ZAddCmd(Call& c) {
  if (c.args.size() % 2 != 0) {
    // An option word (NX, CH, ...) makes the count odd: name it.
    double ignored;
    if (!ParseScore(c.args[2], &ignored))
      return AppendError(c.out, "ERR ZADD options (NX XX GT LT CH INCR) are not supported; use ZADD key score member ...");
    return AppendError(c.out, kSyntax);
  }
  std::vector<std::pair<double, std::string>> members;
  for (size_t i = 2; i + 1 < c.args.size(); i += 2) {
    double score;
    if (!ParseScore(c.args[i], &score)) return AppendError(c.out, "ERR value is not a valid float");
    members.emplace_back(score, c.args[i + 1]);
  }
  int64_t added = 0;
  if (!Ok(c, c.ks().ZAdd(c.args[1], members, &added, c.txn))) return;
  AppendInt(c.out, added);
}

void ZRemCmd(Call& c) {
  int64_t n = 0;
  std::vector<std::string> members(c.args.begin() + 2, c.args.end());
  if (!Ok(c, c.ks().ZRem(c.args[1], members, &n, c.txn))) return;
  AppendInt(c.out, n);
}

void ZScoreCmd(Call& c) {
  std::optional<double> s;
  if (!Ok(c, c.ks().ZScore(c.args[1], c.args[2], &s, c.txn))) return;
  s ? AppendBulk(c.out, FormatScore(*s)) : AppendNull(c.out);
}

void ZCardCmd(Call& c) {
  int64_t n = 0;
  if (!Ok(c, c.ks().ZCard(c.args[1], &n, c.txn))) return;
  AppendInt(c.out, n);
}

// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
void ZRangeByScoreCmd(Call& c) {
  ScoreBound min, max;
  if (!ParseBound(c.args[2], &min) || !ParseBound(c.args[3], &max))
    return AppendError(c.out, "ERR min or max is not a float");
  bool with_scores = false;
  int64_t offset = 0, count = -1;
  for (size_t i = 4; i < c.args.size(); ++i) {
    if (IsKeyword(c.args[i], "withscores")) {
      with_scores = true;
    } else if (IsKeyword(c.args[i], "limit") && i + 2 < c.args.size()) {
      if (!ParseInt(c.args[i + 1], &offset) || !ParseInt(c.args[i + 2], &count))
        return AppendError(c.out, kNotInteger);
      i += 2;
    } else {
      return AppendError(c.out, kSyntax);
    }
  }
  std::vector<std::pair<std::string, double>> members;
  if (offset >= 0) {  // Redis: a negative offset is an empty answer
    if (!Ok(c, c.ks().ZRangeByScore(c.args[1], min, max, offset, count, &members))) return;
  }
  AppendArray(c.out, static_cast<int64_t>(members.size() * (with_scores ? 2 : 1)));
  for (const auto& [m, s] : members) {
    AppendBulk(c.out, m);
    if (with_scores) AppendBulk(c.out, FormatScore(s));
  }
}

// ---- ordered iteration ----

// Reads "COUNT n" and "MATCH p" style options from args[from..]; false after an error reply.
bool ReadScanOptions(Call& c, size_t from, std::string* match, int64_t* count, bool* with_values) {
  for (size_t i = from; i < c.args.size(); ++i) {
    bool has_arg = i + 1 < c.args.size();
    if ((IsKeyword(c.args[i], "count") || IsKeyword(c.args[i], "limit")) && has_arg) {
      if (!ParseInt(c.args[++i], count) || *count < 1) {
        AppendError(c.out, kNotInteger);
        return false;
      }
    } else if (IsKeyword(c.args[i], "match") && has_arg) {
      *match = c.args[++i];
    } else if (with_values && IsKeyword(c.args[i], "withvalues")) {
      *with_values = true;
    } else {
      AppendError(c.out, kSyntax);
      return false;
    }
  }
  return true;
}

// SCAN cursor [MATCH pattern] [COUNT n]: visits COUNT keys (default 10) in
// key order from the cursor's position.
void ScanCmd(Call& c) {
  uint64_t cursor;
  auto [p, ec] = std::from_chars(c.args[1].data(), c.args[1].data() + c.args[1].size(), cursor);
  if (ec != std::errc() || p != c.args[1].data() + c.args[1].size()) return AppendError(c.out, "ERR invalid cursor");
  std::string match;
  int64_t count = 10;
  if (!ReadScanOptions(c, 2, &match, &count, nullptr)) return;
  std::string from;
  if (cursor != 0) {
    auto key = c.server.cursors.Get(cursor);
    if (!key) return AppendError(c.out, "ERR invalid cursor");
    from = std::move(*key);
  }
  std::vector<std::string> keys;
  std::optional<std::string> next;
  if (!Ok(c, c.ks().ScanKeys(from, std::nullopt, static_cast<size_t>(count), match, false, &keys, &next))) return;
  AppendArray(c.out, 2);
  AppendBulk(c.out, next ? std::to_string(c.server.cursors.Put(std::move(*next))) : "0");
  AppendArray(c.out, static_cast<int64_t>(keys.size()));
  for (const auto& k : keys) AppendBulk(c.out, k);
}

// RANGE start end [LIMIT n] [WITHVALUES] [MATCH pattern]: the keys in
// [start, end) in key order; "-" is the first key, "+" past the last.
// WITHVALUES pairs each key with its string value (empty for a hash or set).
void RangeCmd(Call& c) {
  std::string match;
  int64_t limit = 1000;
  bool with_values = false;
  if (!ReadScanOptions(c, 3, &match, &limit, &with_values)) return;
  std::string from = c.args[1] == "-" ? std::string() : c.args[1];
  std::optional<std::string> to;
  if (c.args[2] != "+") to = c.args[2];
  std::vector<std::string> out;
  std::optional<std::string> next;
  // With MATCH, LIMIT bounds the keys visited; without, the keys returned.
  if (!Ok(c, c.ks().ScanKeys(from, to, static_cast<size_t>(limit), match, with_values, &out, &next))) return;
  AppendArray(c.out, static_cast<int64_t>(out.size()));
  for (const auto& s : out) AppendBulk(c.out, s);
}

}  // namespace

const std::vector<CommandSpec>& DataCommands() {
  static const std::vector<CommandSpec> kTable = {
      {"get", GetCmd, 2, kInTxn, 1, 1, 1},
      {"set", SetCmd, -3, kInTxn | kWrite, 1, 1, 1},
      {"setnx", SetNxCmd, 3, kInTxn | kWrite, 1, 1, 1},
      {"getdel", GetDelCmd, 2, kInTxn | kWrite, 1, 1, 1},
      {"del", DelCmd, -2, kInTxn | kWrite, 1, -1, 1},
      {"unlink", DelCmd, -2, kInTxn | kWrite, 1, -1, 1},
      {"exists", ExistsCmd, -2, kInTxn, 1, -1, 1},
      {"type", TypeCmd, 2, kInTxn, 1, 1, 1},
      {"incr", IncrCmd, 2, kInTxn | kWrite, 1, 1, 1},
      {"decr", DecrCmd, 2, kInTxn | kWrite, 1, 1, 1},
      {"incrby", IncrByCmd, 3, kInTxn | kWrite, 1, 1, 1},
      {"decrby", DecrByCmd, 3, kInTxn | kWrite, 1, 1, 1},
      {"append", AppendCmd, 3, kInTxn | kWrite, 1, 1, 1},
      {"strlen", StrlenCmd, 2, kInTxn, 1, 1, 1},
      {"mget", MGetCmd, -2, kInTxn, 1, -1, 1},
      {"mset", MSetCmd, -3, kInTxn | kWrite, 1, -1, 2},
      {"hset", HSetCmd, -4, kInTxn | kWrite, 1, 1, 1},
      {"hmset", HMSetCmd, -4, kInTxn | kWrite, 1, 1, 1},
      {"hget", HGetCmd, 3, kInTxn, 1, 1, 1},
      {"hmget", HMGetCmd, -3, kInTxn, 1, 1, 1},
      {"hgetall", HGetAllCmd, 2, kInTxn, 1, 1, 1},
      {"hdel", HDelCmd, -3, kInTxn | kWrite, 1, 1, 1},
      {"hlen", HLenCmd, 2, kInTxn, 1, 1, 1},
      {"hexists", HExistsCmd, 3, kInTxn, 1, 1, 1},
      {"zadd", ZAddCmd, -4, kInTxn | kWrite, 1, 1, 1},
      {"zrem", ZRemCmd, -3, kInTxn | kWrite, 1, 1, 1},
      {"zscore", ZScoreCmd, 3, kInTxn, 1, 1, 1},
      {"zcard", ZCardCmd, 2, kInTxn, 1, 1, 1},
      {"zrangebyscore", ZRangeByScoreCmd, -4, 0, 1, 1, 1},
      {"scan", ScanCmd, -2, 0, 0, 0, 1},
      {"range", RangeCmd, -3, 0, 1, 2, 1},
  };
  return kTable;
}

}  // namespace pmtree::server
