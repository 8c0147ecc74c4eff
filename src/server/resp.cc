// SPDX-License-Identifier: Apache-2.0

#include "server/resp.h"

#include <charconv>
#include <cstring>

namespace pmtree::server {
namespace {

// Parses a RESP length line "<digits>\r\n" (possibly negative) starting at
// buf[p]; 0 when the line is incomplete, -1 when it is not a number, else the
// index past "\r\n".
size_t ParseLength(std::string_view buf, size_t p, int64_t* value) {
  size_t nl = buf.find("\r\n", p);
  if (nl == std::string_view::npos) return 0;
  const char* first = buf.data() + p;
  const char* last = buf.data() + nl;
  auto [ptr, ec] = std::from_chars(first, last, *value);
  if (ec != std::errc() || ptr != last || first == last) return static_cast<size_t>(-1);
  return nl + 2;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

RespParser::Outcome RespParser::Fail(std::string msg) {
  error_ = std::move(msg);
  return Outcome::kError;
}

RespParser::Outcome RespParser::Parse(std::string_view buf, size_t* pos, std::vector<std::string>* args) {
  constexpr size_t kBad = static_cast<size_t>(-1);
  size_t p = *pos;
  while (remaining_ < 0) {
    // Between commands: skip empty lines, then a '*' opens a multibulk and
    // anything else is an inline command.  "*0", "*-1" and blank lines are
    // no command (as in Redis): loop, never recurse, so a flood of them
    // cannot grow the stack.
    while (p < buf.size() && (buf[p] == '\r' || buf[p] == '\n')) ++p;
    *pos = p;
    if (p == buf.size()) return Outcome::kNeedMore;
    if (buf[p] != '*') {
      Outcome o = ParseInline(buf, pos, args);
      if (o != Outcome::kCommand || !args->empty()) return o;
      p = *pos;
      continue;
    }
    int64_t n;
    size_t next = ParseLength(buf, p + 1, &n);
    if (next == 0) {
      if (buf.size() - p > limits_.max_inline_bytes) return Fail("Protocol error: too big mbulk count string");
      return Outcome::kNeedMore;
    }
    if (next == kBad || n > static_cast<int64_t>(limits_.max_multibulk_args))
      return Fail("Protocol error: invalid multibulk length");
    *pos = p = next;
    if (n <= 0) continue;
    remaining_ = n;
    bulk_len_ = -1;
    used_ = 0;
    partial_.reserve(static_cast<size_t>(n < 64 ? n : 64));  // a declared count is not yet memory we owe
  }
  while (remaining_ > 0) {
    if (bulk_len_ < 0) {
      if (p == buf.size()) return Outcome::kNeedMore;
      if (buf[p] != '$') return Fail(std::string("Protocol error: expected '$', got '") + buf[p] + "'");
      int64_t len;
      size_t next = ParseLength(buf, p + 1, &len);
      if (next == 0) {
        if (buf.size() - p > limits_.max_inline_bytes) return Fail("Protocol error: too big bulk count string");
        return Outcome::kNeedMore;
      }
      if (next == kBad || len < 0 || static_cast<uint64_t>(len) > limits_.max_bulk_bytes)
        return Fail("Protocol error: invalid bulk length");
      bulk_len_ = len;
      *pos = p = next;
    }
    if (buf.size() - p < static_cast<uint64_t>(bulk_len_) + 2) return Outcome::kNeedMore;
    if (buf[p + bulk_len_] != '\r' || buf[p + bulk_len_ + 1] != '\n')
      return Fail("Protocol error: bulk string not terminated by CRLF");
    std::string_view arg = buf.substr(p, bulk_len_);
    if (used_ < partial_.size() && partial_[used_].capacity() <= kRecycleBytes) {
      partial_[used_].assign(arg);  // an earlier command's string: no allocation when it fits
    } else if (used_ < partial_.size()) {
      partial_[used_] = std::string(arg);
    } else {
      partial_.emplace_back(arg);
    }
    ++used_;
    partial_bytes_ += static_cast<uint64_t>(bulk_len_);
    *pos = p = p + bulk_len_ + 2;
    bulk_len_ = -1;
    --remaining_;
  }
  remaining_ = -1;
  partial_.resize(used_);
  args->swap(partial_);
  // partial_ now holds the caller's previous arguments: their strings are
  // reused by the next command.
  used_ = 0;
  partial_bytes_ = 0;
  return Outcome::kCommand;
}

RespParser::Outcome RespParser::ParseInline(std::string_view buf, size_t* pos, std::vector<std::string>* args) {
  size_t p = *pos;
  size_t nl = buf.find('\n', p);
  if (nl == std::string_view::npos) {
    if (buf.size() - p > limits_.max_inline_bytes) return Fail("Protocol error: too big inline request");
    return Outcome::kNeedMore;
  }
  if (nl - p > limits_.max_inline_bytes) return Fail("Protocol error: too big inline request");
  std::string_view line = buf.substr(p, nl - p);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  args->clear();
  if (!SplitInline(line, args)) return Fail("Protocol error: unbalanced quotes in request");
  *pos = nl + 1;
  return Outcome::kCommand;  // empty *args: a blank line, no command (Parse goes on)
}

bool SplitInline(std::string_view line, std::vector<std::string>* args) {
  size_t i = 0;
  const size_t n = line.size();
  while (true) {
    while (i < n && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == n) return true;
    std::string arg;
    char quote = 0;
    if (line[i] == '"' || line[i] == '\'') quote = line[i++];
    while (true) {
      if (i == n) {
        if (quote) return false;  // unbalanced
        break;
      }
      char c = line[i];
      if (!quote) {
        if (c == ' ' || c == '\t') break;
        arg += c;
        ++i;
        continue;
      }
      if (c == quote) {
        ++i;
        // A closing quote must end the argument, as in Redis.
        if (i < n && line[i] != ' ' && line[i] != '\t') return false;
        break;
      }
      if (c == '\\' && i + 1 < n) {
        char e = line[i + 1];
        if (quote == '\'') {
          if (e == '\'') {
            arg += '\'';
            i += 2;
            continue;
          }
        } else if (e == 'x' && i + 3 < n && HexDigit(line[i + 2]) >= 0 && HexDigit(line[i + 3]) >= 0) {
          arg += static_cast<char>(HexDigit(line[i + 2]) * 16 + HexDigit(line[i + 3]));
          i += 4;
          continue;
        } else {
          static constexpr char kFrom[] = "nrtba";
          static constexpr char kTo[] = "\n\r\t\b\a";
          const char* hit = std::strchr(kFrom, e);
          arg += (hit && e) ? kTo[hit - kFrom] : e;
          i += 2;
          continue;
        }
      }
      arg += c;
      ++i;
    }
    args->push_back(std::move(arg));
  }
}

void AppendSimple(std::string* out, std::string_view s) {
  out->push_back('+');
  out->append(s);
  out->append("\r\n");
}

void AppendError(std::string* out, std::string_view msg) {
  out->push_back('-');
  // A reply line cannot hold CR or LF (an echoed argument could).
  for (char c : msg) out->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out->append("\r\n");
}

// "<type><n>\r\n": the header of an integer, bulk or array reply.
static void AppendHeader(std::string* out, char type, int64_t n) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
  out->push_back(type);
  out->append(buf, end);
  out->append("\r\n");
}

void AppendInt(std::string* out, int64_t v) { AppendHeader(out, ':', v); }

void AppendBulk(std::string* out, std::string_view s) {
  AppendHeader(out, '$', static_cast<int64_t>(s.size()));
  out->append(s);
  out->append("\r\n");
}

void AppendNull(std::string* out) { out->append("$-1\r\n"); }

void AppendArray(std::string* out, int64_t n) { AppendHeader(out, '*', n); }

void AppendNullArray(std::string* out) { out->append("*-1\r\n"); }

}  // namespace pmtree::server
