// SPDX-License-Identifier: Apache-2.0
//
// The YCSB core workloads A-F run natively by the driver (`pmtree bench
// --workload ycsb-a..f`, docs/bench.md "YCSB on the key-value store").
//
// Each workload is a Workload (workload.h) over YCSB-style keys ("user" +
// the record number, AppendYcsbKey) and records of kYcsbFields named fields
// ("field0".."field9") of kYcsbFieldBytes each:
//
//   A  read 0.5 / update 0.5      zipfian(0.99)
//   B  read 0.95 / update 0.05    zipfian(0.99)
//   C  read 1                     zipfian(0.99)
//   D  read 0.95 / insert 0.05    latest(0.99)
//   E  scan 0.95 / insert 0.05    zipfian(0.99), scan length uniform in 1..--scan-length (100)
//   F  read 0.5 / rmw 0.5         zipfian(0.99)
//
// The operations on a record (every target in record mode does exactly this):
//   read    all fields of the record
//   update  ONE field (YCSB's writeallfields=false), YcsbUpdateField(v), to
//           the bytes YcsbFieldBytes(v, field)
//   insert  a whole record, YcsbRecord(v): field i = YcsbFieldBytes(v, i)
//   scan    n records from a key on, all fields of each
//   rmw     read all fields, then update one field (two operations)
// where v is the 64-bit value the driver gives the operation (target.h).
// Everything is a function of v: the timed loop draws nothing.
//
// Targets in record mode: the KV store (OpenKvTarget, one kv::Store over a
// persistent tree with byte keys; reads are GetFields, updates UpdateFields
// of the one field, copy-on-write) and the peers LMDB / Berkeley DB
// (PeerConfig::ycsb_records: the record serialised by EncodeRecord as one
// value; an update reads, changes and rewrites the record in one write txn).
//
// Thread safety: the functions are pure or use per-thread buffers.

#ifndef PMTREE_BENCH_YCSB_H_
#define PMTREE_BENCH_YCSB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/target.h"
#include "bench/workload.h"
#include "pmtree/kv.h"

namespace pmtree::bench {

inline constexpr uint32_t kYcsbFields = 10;
inline constexpr uint32_t kYcsbFieldBytes = 100;

struct YcsbWorkload {
  char letter;             // 'a'..'f'
  std::string_view mix;    // ParseMix text
  DistKind dist;
  std::string_view about;  // YCSB's own description
};
const std::vector<YcsbWorkload>& YcsbWorkloads();

// Parses the --workload list: "ycsb-a", "ycsb-a,ycsb-c", or "ycsb" (all six,
// A..F).  Sets *letters to the workloads in the order given.  False when
// `text` names no YCSB workload at all (it may be another --workload);
// InvalidArgument for a list that mixes them or names an unknown letter.
Result<bool> ParseYcsbList(std::string_view text, std::string* letters);

// The Workload of YCSB workload `letter` ('a'..'f') with `base`'s seed and
// theta: YCSB keys, the mix and distribution above, scans uniform in
// 1..base.scan_length (YCSB: maxscanlength=100, our default too).
Workload YcsbWorkloadFor(char letter, const Workload& base);

// "field0".."field9".
const std::string& YcsbFieldName(uint32_t i);
// The field a one-field update with value v writes.
uint32_t YcsbUpdateField(uint64_t v);
// The kYcsbFieldBytes bytes of field `field` in a record written with value v.
void FillYcsbField(uint64_t v, uint32_t field, std::string* out);
// The whole record of value v (kYcsbFields fields).  Reuses *out's strings.
void FillYcsbRecord(uint64_t v, kv::FieldMap* out);

// The serialised form of a field map, as the peers store a record: per field
// in name order, [u8 name length][name][u32 value length, little-endian][value].
void EncodeRecord(const kv::FieldMap& fields, std::string* out);
// Parses EncodeRecord's bytes into *out (replacing it); false when malformed.
bool DecodeRecord(std::string_view bytes, kv::FieldMap* out);
// Bytes of every encoded YCSB record (all fields have fixed sizes).
uint32_t YcsbRecordBytes();

// A KV store over a registered persistent tree as a record-mode target.
struct KvTargetConfig {
  std::string engine;      // registry name of a persistent tree with byte-string keys
  std::string pool_path;   // the store's pool file (empty: anonymous memory)
  uint64_t pool_size = kDefaultPoolSize;
  PoolOptions pool_options;
  TreeOptions tree_options;
  bool replace = false;    // an earlier run's pool of this engine is at pool_path: remove it first
  bool keep_pool = false;  // leave the pool file after Finish
};
Result<std::unique_ptr<Target>> OpenKvTarget(const KvTargetConfig& c);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_YCSB_H_
