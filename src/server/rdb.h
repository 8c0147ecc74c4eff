// SPDX-License-Identifier: Apache-2.0
//
// RDB: the snapshot format of Redis's replication protocol, the subset
// `pmtree serve` sends to (and loads from) a master/replica link.  A full
// resynchronisation carries one RDB payload; stock redis-server 7.0 loads it.
//
// FORMAT (RDB version 10, Redis 7.0).  All integers in lengths are the
// "length encoding"; everything else is as written below.
//
//   bytes   field
//   9       "REDIS0010"                      magic + version
//   ...     0xFA <string key> <string value> an AUX field (redis-ver, ...), repeated
//   1+len   0xFE <len db>                    SELECTDB 0
//   1+2len  0xFB <len keys> <len expires>    RESIZEDB: hash table size hints
//   ...     <type byte> <string key> <value> one key per entry:
//             type 0  string               <string>
//             type 4  hash                 <len n> then n x (<string field> <string value>)
//             type 5  sorted set (ZSET_2)  <len n> then n x (<string member> <8 B double, little-endian>)
//   1       0xFF                             EOF
//   8       CRC-64 of every byte before it, little-endian (0 = not checked)
//
// Length encoding (first byte's top two bits): 00 = 6-bit length; 01 = 14-bit
// (big-endian across two bytes); 0x80 = 32-bit big-endian follows; 0x81 =
// 64-bit big-endian follows; 11 = a special string encoding: 0xC0/0xC1/0xC2
// an 8/16/32-bit little-endian integer written as text, 0xC3 LZF.  A string
// is a length then its bytes.  We write raw strings only; the reader also
// takes the integer encodings (what Redis writes for "123"), not LZF.
//
// CRC-64 is the Jones polynomial in its reflected form (0x95ac9329ac4bc9b5),
// initial value 0, no final xor: Redis's crc64.c; its check value for
// "123456789" is 0xe9c6d914c4b8d9ca.

#ifndef PMTREE_SERVER_RDB_H_
#define PMTREE_SERVER_RDB_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pmtree/kv.h"
#include "pmtree/status.h"

namespace pmtree::server {

// CRC-64/Jones as Redis computes it: continues `crc` over `data`.
uint64_t Crc64(uint64_t crc, std::string_view data);

enum class RdbType : uint8_t { kString = 0, kHash = 4, kZset2 = 5 };

// One key of an RDB file (the value fields of its type are set).
struct RdbEntry {
  RdbType type = RdbType::kString;
  std::string key;
  std::string value;                                     // kString
  std::vector<std::pair<std::string, std::string>> fields;  // kHash
  std::vector<std::pair<std::string, double>> members;   // kZset2
};

// Writes an RDB image into *out: the header and AUX fields at construction,
// then SelectDb/ResizeDb, the entries, and Finish (EOF + CRC).
class RdbWriter {
 public:
  static constexpr std::string_view kMagic = "REDIS0010";
  RdbWriter(std::string* out, const std::vector<std::pair<std::string, std::string>>& aux);
  void SelectDb(uint64_t db);
  void ResizeDb(uint64_t keys, uint64_t expires);
  void Entry(const RdbEntry& e) { AppendEntry(out_, e); }
  void Finish();

  static void AppendEntry(std::string* out, const RdbEntry& e);
  static void AppendLength(std::string* out, uint64_t n);
  static void AppendString(std::string* out, std::string_view s);

 private:
  std::string* out_;
  size_t start_;
};

// What the reader found besides the entries.
struct RdbInfo {
  int version = 0;
  std::vector<std::pair<std::string, std::string>> aux;
  uint64_t resize_keys = 0;
};

// Parses an RDB image, calling `fn` once per key in file order; stops at
// fn's first error.  Corruption names the offset and what was wrong (a bad
// magic, a truncated field, a CRC mismatch); NotSupported names a type or
// opcode outside the subset above (expiries, lists, sets, modules, LZF).
Status ReadRdb(std::string_view rdb, RdbInfo* info, const std::function<Status(RdbEntry&)>& fn);

// The whole keyspace (server/keyspace.h's encoding) as it is at `snapshot`,
// as an RDB image in *out: strings, hashes (small and large) and sorted sets,
// in key order, with the given AUX fields.  *keys = the number of keys.
Status DumpKeyspaceRdb(kv::Store* store, const kv::Snapshot* snapshot,
                       const std::vector<std::pair<std::string, std::string>>& aux, std::string* out,
                       uint64_t* keys = nullptr);

}  // namespace pmtree::server

#endif  // PMTREE_SERVER_RDB_H_
