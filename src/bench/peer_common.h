// SPDX-License-Identifier: Apache-2.0
//
// What every peer adapter (peers.h) shares: the bytes a peer stores for a key
// and a value, YCSB record handling, per-thread scratch buffers, and the rule
// for the peer's directory (created by the bench, removed only if the bench
// made it).  Internal to src/bench.
//
// Buffers returned as string_view / char* are per-thread and valid until the
// next call of the same function on the same thread.

#ifndef PMTREE_BENCH_PEER_COMMON_H_
#define PMTREE_BENCH_PEER_COMMON_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "bench/peers.h"
#include "bench/target.h"
#include "pmtree/status.h"

namespace pmtree::bench::peer {

// The key bytes a peer stores: the workload's string, or the 64-bit key
// big-endian (so the stores' byte order is the integer order).
struct KeyBuf {
  char be[8];
  std::string_view view;
  KeyBuf(uint64_t key, std::string_view bkey) {
    if (!bkey.empty()) {
      view = bkey;
      return;
    }
    for (int i = 0; i < 8; i++) be[i] = static_cast<char>(key >> (56 - 8 * i));
    view = std::string_view(be, 8);
  }
};

// ValueBytes(v, n) (target.h) in a per-thread buffer.
std::string_view ValueBuf(uint64_t v, uint32_t n);

// The bytes a peer stores for value v: the encoded YCSB record in YCSB mode,
// else ValueBytes; per-thread.
std::string_view StoredValue(const PeerConfig& c, uint64_t v);

// YCSB mode: a read decodes the record into its fields, as a client of a
// store that keeps records as one value must.  False when malformed; always
// true outside YCSB mode.
bool DecodeRead(const PeerConfig& c, std::string_view bytes);

// YCSB mode: the record `old` with the one field an update of value v writes
// replaced (ycsb.h); empty when `old` is malformed.  Per-thread.
std::string_view ModifyRecord(std::string_view old, uint64_t v);

// The byte-string key the load stores for a 64-bit key (empty: the 8
// big-endian bytes, KeyBuf).
void LoadKeyBytes(const PeerConfig& c, uint64_t key, std::string* out);

// A per-thread buffer of at least n bytes a lookup copies a value into.
char* ReadBuf(uint32_t n);

// Bytes the files directly in `dir` occupy (allocated blocks).
uint64_t DirBytes(const std::string& dir);

// Makes the peer's directory and marks it as made by the bench.  An existing
// path is never removed unless `reuse` is set and the directory carries the
// marker of an earlier bench run.  Sets *owned once the directory is ours to
// remove.
Status PrepareDir(const std::string& dir, bool reuse, bool* owned);

// Removes the directory when the bench made it and was not asked to keep it.
void RemoveDirIfOwned(const PeerConfig& c, bool owned);

// The RocksDB peer (peer_rocksdb.cc, built only when PMTREE_HAVE_ROCKSDB):
// sync = WriteOptions::sync on every write.
Result<std::unique_ptr<Target>> OpenRocksDb(const PeerConfig& c, bool sync);

}  // namespace pmtree::bench::peer

#endif  // PMTREE_BENCH_PEER_COMMON_H_
