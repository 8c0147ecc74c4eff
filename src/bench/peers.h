// SPDX-License-Identifier: Apache-2.0
//
// Peers: the stores a user would pick instead of a PM tree, measured in the
// same run, on the same medium (a directory under /dev/shm by default), with
// the same acknowledgement rule as the trees — one durable write per
// operation — plus relaxed variants as separately labelled rows:
//
//   lmdb          LMDB, one write transaction per put/update/remove, default
//                 sync (fsync of the data file at every commit)
//   lmdb-nosync   the same with MDB_NOSYNC (commit returns after write(); the
//                 OS flushes later)
//   bdb           Berkeley DB B-tree, transactional, auto-commit per put with
//                 write-ahead logging and the default synchronous log flush
//   bdb-nosync    the same with DB_TXN_NOSYNC (the commit record stays in the
//                 in-process log buffer)
//   lmdb-writemap MDB_WRITEMAP (pages written in the shared map, msync at
//                 commit); lmdb-writemap-async adds MDB_MAPASYNC (relaxed)
//   rocksdb       RocksDB, WAL in the peer directory, WriteOptions::sync per
//                 write; rocksdb-nosync without sync (relaxed).  Built only
//                 when pkg-config finds rocksdb (peer_rocksdb.cc lists the
//                 tuning)
//   absl-btree    absl::btree_map in the heap: volatile, single-threaded, the
//                 reference for "how close to DRAM speed"
//
// Keys are the big-endian 8 bytes of the 64-bit key (so the stores' byte
// order is the integer order) or the workload's byte-string key; values are
// PeerConfig::value_size bytes (ValueBytes(), target.h), stored natively, or
// in YCSB mode the records of ycsb.h, serialised by EncodeRecord.  Peers are not in the tree registry: they are not PM trees, have
// no pool and no persistence counters (per-op flush columns are empty).
//
// Thread safety: every peer but absl-btree accepts concurrent operations
// (LMDB serialises writers; Berkeley DB locks pages and retries on deadlock;
// RocksDB groups concurrent WAL writes).

#ifndef PMTREE_BENCH_PEERS_H_
#define PMTREE_BENCH_PEERS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/target.h"

namespace pmtree::bench {

struct PeerConfig {
  std::string dir;                   // created; removed by Finish unless keep
  uint64_t map_size = 4ull << 30;    // LMDB map size / space bound
  bool keep = false;
  // An existing dir is refused unless reuse is set and it is a directory an
  // earlier bench run made (it carries the bench's marker file).
  bool reuse = false;
  uint32_t key_min = 0, key_max = 0;  // byte-string keys when key_min != 0
  uint32_t value_size = 8;            // bytes per value
  // YCSB record mode (ycsb.h): YCSB keys, values are encoded 10 x 100 B
  // records (value_size is ignored), a read decodes the record, an update
  // reads, changes one field of and rewrites the record in one write txn.
  bool ycsb = false;
};

struct PeerInfo {
  std::string_view name;
  std::string_view summary;
  // What a crash can lose, for the report.
  std::string_view failure_model;
  Result<std::unique_ptr<Target>> (*open)(const PeerConfig& c);
};

const std::vector<PeerInfo>& Peers();
const PeerInfo* FindPeer(std::string_view name);
std::string PeerNames();
// For a peer this build leaves out (its library was not found when the build
// was configured: "rocksdb", "rocksdb-nosync"), why and how to get it; empty
// for every other name.
std::string UnbuiltPeerReason(std::string_view name);

}  // namespace pmtree::bench

#endif  // PMTREE_BENCH_PEERS_H_
