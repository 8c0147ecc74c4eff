// SPDX-License-Identifier: Apache-2.0
//
// Helpers every peer adapter shares (peer_common.h).

#include "bench/peer_common.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "bench/target.h"
#include "bench/workload.h"
#include "bench/ycsb.h"

namespace pmtree::bench::peer {

namespace fs = std::filesystem;

// The value bytes a peer stores for v (ValueBytes, target.h), in a per-thread
// buffer valid until the next call on this thread.
std::string_view ValueBuf(uint64_t v, uint32_t n) {
  thread_local std::string buf;
  buf.resize(n);
  FillValueBytes(v, n, buf.data());
  return buf;
}

// The bytes a peer stores for value v: the encoded YCSB record in YCSB mode,
// else ValueBytes; per-thread, valid until the next call on this thread.
std::string_view StoredValue(const PeerConfig& c, uint64_t v) {
  if (!c.ycsb) return ValueBuf(v, c.value_size);
  thread_local kv::FieldMap rec;
  thread_local std::string buf;
  FillYcsbRecord(v, &rec);
  EncodeRecord(rec, &buf);
  return buf;
}

// YCSB mode: a read decodes the record into its fields, as a client of a
// store that keeps records as one value must.  False when malformed.
bool DecodeRead(const PeerConfig& c, std::string_view bytes) {
  thread_local kv::FieldMap fields;
  return !c.ycsb || DecodeRecord(bytes, &fields);
}

// YCSB mode: the record `old` with the one field an update of value v
// writes replaced (ycsb.h); empty when `old` is malformed.
std::string_view ModifyRecord(std::string_view old, uint64_t v) {
  thread_local kv::FieldMap fields;
  thread_local std::string buf;
  if (!DecodeRecord(old, &fields)) return {};
  const uint32_t f = YcsbUpdateField(v);
  FillYcsbField(v, f, &fields[YcsbFieldName(f)]);
  EncodeRecord(fields, &buf);
  return buf;
}

// The byte-string key the load stores for a 64-bit key (empty: the 8
// big-endian bytes, KeyBuf).
void LoadKeyBytes(const PeerConfig& c, uint64_t key, std::string* out) {
  out->clear();
  if (c.ycsb)
    AppendYcsbKey(key, out);
  else if (c.key_min)
    AppendBytesKey(key, c.key_min, c.key_max, out);
}

// A per-thread buffer a lookup copies a value into.
char* ReadBuf(uint32_t n) {
  thread_local std::string buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    struct stat st;
    if (stat(e.path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

namespace {

// Marks a directory this benchmark made, so --reuse-pool replaces only those.
constexpr const char* kPeerDirMarker = ".pmtree-bench-peer";

}  // namespace

// Makes the peer's directory.  An existing path is never removed unless
// `reuse` is set and the directory carries the marker of an earlier bench
// run.  Sets *owned once the directory is ours to remove.
Status PrepareDir(const std::string& dir, bool reuse, bool* owned) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec))) {
    if (!reuse)
      return Status::Busy(dir + " already exists; the bench never removes what it did not create: remove it, "
                                "choose another --pool, or pass --reuse-pool to replace a directory of an earlier "
                                "bench run");
    if (!fs::is_directory(fs::symlink_status(dir, ec)) || !fs::exists(fs::path(dir) / kPeerDirMarker, ec))
      return Status::Busy(dir + " exists and is not a peer directory made by the bench (no " +
                          std::string(kPeerDirMarker) + "); refusing to remove it");
    fs::remove_all(dir, ec);
    if (ec) return Status::IoError("cannot remove " + dir + ": " + ec.message());
  }
  if (!fs::create_directories(dir, ec)) return Status::IoError("cannot create peer directory " + dir + ": " + ec.message());
  *owned = true;
  std::ofstream marker(fs::path(dir) / kPeerDirMarker);
  if (!marker) return Status::IoError("cannot write " + dir + "/" + kPeerDirMarker);
  return Status::Ok();
}

void RemoveDirIfOwned(const PeerConfig& c, bool owned) {
  if (c.keep || !owned) return;
  std::error_code ec;
  fs::remove_all(c.dir, ec);
}

}  // namespace pmtree::bench::peer
