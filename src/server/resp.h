// SPDX-License-Identifier: Apache-2.0
//
// RESP2: the request parser and the reply writer of `pmtree serve`.
//
// Requests are multibulk arrays (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or inline
// lines (`GET k\r\n`, what telnet and redis-benchmark's PING_INLINE send).
// The parser is incremental: it consumes whatever complete pieces a read
// brought, keeps a half-read command's arguments, and resumes on the next
// call, so a command split at any byte parses the same and a large multibulk
// is never re-scanned.  A buffer holding several commands (pipelining) yields
// them one per call, in order.
//
// Errors carry Redis's texts ("Protocol error: invalid bulk length", ...);
// after one the connection's bytes cannot be trusted and the server closes it.

#ifndef PMTREE_SERVER_RESP_H_
#define PMTREE_SERVER_RESP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pmtree::server {

struct RespLimits {
  uint64_t max_bulk_bytes = 64ull << 20;           // kv::kMaxValueBytes, the largest value
  uint64_t max_multibulk_args = 1024 * 1024;       // Redis's limit for one command
  uint64_t max_inline_bytes = 64 * 1024;           // Redis's PROTO_INLINE_MAX_SIZE
};

class RespParser {
 public:
  enum class Outcome { kCommand, kNeedMore, kError };

  // Capacity up to which an argument string is kept for reuse.
  static constexpr size_t kRecycleBytes = 512;

  explicit RespParser(const RespLimits& limits = {}) : limits_(limits) {}

  // Parses from buf[*pos]: kCommand fills *args with the next whole command
  // and advances *pos past it; kNeedMore advances *pos past what was consumed
  // (the parser keeps the pieces) and wants buf to grow; kError sets error().
  // The parser takes *args's old strings in exchange and reuses those of at
  // most kRecycleBytes for later arguments (a pipelined stream of small
  // commands then allocates nothing per argument).
  // buf[0, *pos) may be dropped by the caller between calls, if *pos is then
  // rebased (the parser keeps no pointer into buf).
  Outcome Parse(std::string_view buf, size_t* pos, std::vector<std::string>* args);

  // The Redis error text of the last kError (without the leading '-').
  const std::string& error() const { return error_; }
  // Bytes of a half-read command's arguments the parser holds (a client's
  // query buffer is these plus its unparsed input).
  uint64_t buffered_bytes() const { return partial_bytes_; }

 private:
  Outcome ParseInline(std::string_view buf, size_t* pos, std::vector<std::string>* args);
  Outcome Fail(std::string msg);

  RespLimits limits_;
  // Multibulk progress: arguments still expected (-1: between commands),
  // those already read, and the length of the bulk being read (-1: its header
  // is next).
  int64_t remaining_ = -1;
  int64_t bulk_len_ = -1;
  std::vector<std::string> partial_;  // partial_[0, used_) are this command's; the rest, strings to reuse
  size_t used_ = 0;
  uint64_t partial_bytes_ = 0;
  std::string error_;
};

// Splits an inline request line into arguments like redis-cli and Redis do:
// spaces separate, "double quotes" take \n \r \t \b \a \\ \" \xHH escapes,
// 'single quotes' take \'.  False on unbalanced quotes.
bool SplitInline(std::string_view line, std::vector<std::string>* args);

// Reply writers (RESP2), appending to *out.
void AppendSimple(std::string* out, std::string_view s);   // +OK
void AppendError(std::string* out, std::string_view msg);  // -ERR ...; msg includes the code word
void AppendInt(std::string* out, int64_t v);               // :42
void AppendBulk(std::string* out, std::string_view s);     // $3\r\nabc
void AppendNull(std::string* out);                         // $-1
void AppendArray(std::string* out, int64_t n);             // *n header
void AppendNullArray(std::string* out);                    // *-1

}  // namespace pmtree::server

#endif  // PMTREE_SERVER_RESP_H_
