// SPDX-License-Identifier: Apache-2.0
//
// The RESP parser and writer: whole, split and pipelined frames, inline
// commands, and the malformed frames that must be refused.

#include "server/resp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pmtree::server {
namespace {

using Args = std::vector<std::string>;

// Feeds `wire` to a parser in pieces of `step` bytes (0 = all at once) and
// returns the commands; *error gets the error text if one is raised.
std::vector<Args> ParseAll(const std::string& wire, size_t step, std::string* error = nullptr,
                           const RespLimits& limits = {}) {
  RespParser p(limits);
  std::vector<Args> out;
  std::string buf;
  size_t pos = 0, fed = 0;
  while (true) {
    size_t n = step == 0 ? wire.size() - fed : std::min(step, wire.size() - fed);
    buf.append(wire, fed, n);
    fed += n;
    while (true) {
      Args args;
      auto o = p.Parse(buf, &pos, &args);
      if (o == RespParser::Outcome::kCommand) {
        out.push_back(args);
        continue;
      }
      if (o == RespParser::Outcome::kError) {
        if (error) *error = p.error();
        return out;
      }
      break;
    }
    // Drop what was consumed, as a connection does.
    buf.erase(0, pos);
    pos = 0;
    if (fed == wire.size()) return out;
  }
}

TEST(RespParserTest, MultibulkCommandParsesWhole) {
  auto cmds = ParseAll("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n", 0);
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0], (Args{"SET", "k", "hello"}));
}

TEST(RespParserTest, SplitAtEveryByteGivesTheSameCommands) {
  std::string wire =
      "*3\r\n$3\r\nSET\r\n$4\r\nk\r\nx\r\n$0\r\n\r\n"
      "PING\r\n"
      "*2\r\n$4\r\nECHO\r\n$12\r\nbinaryZ\xff\r\nzz\r\n"
      "set \"a b\" 'c\\'d'\n";
  wire[wire.find("binary") + 6] = '\0';
  std::vector<Args> want = {{"SET", "k\r\nx", ""}, {"PING"}, {"ECHO", std::string("binary\0\xff\r\nzz", 12)},
                            {"set", "a b", "c'd"}};
  for (size_t step = 1; step <= wire.size(); ++step) {
    std::string err;
    EXPECT_EQ(ParseAll(wire, step, &err), want) << "step " << step;
    EXPECT_EQ(err, "") << "step " << step;
  }
}

TEST(RespParserTest, PipelinedCommandsComeOutInOrder) {
  std::string wire;
  for (int i = 0; i < 100; ++i) wire += "*2\r\n$3\r\nGET\r\n$" + std::to_string(std::to_string(i).size()) + "\r\n" +
                                       std::to_string(i) + "\r\n";
  auto cmds = ParseAll(wire, 0);
  ASSERT_EQ(cmds.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(cmds[i][1], std::to_string(i));
}

TEST(RespParserTest, EmptyRequestsAndBlankLinesAreSkipped) {
  std::string wire = "*0\r\n*-1\r\n\r\n\n   \r\nPING\r\n";
  for (int i = 0; i < 10000; ++i) wire = "*0\r\n" + wire;  // many: a loop, not recursion
  auto cmds = ParseAll(wire, 0);
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0], Args{"PING"});
}

TEST(RespParserTest, InlineQuotesAndEscapes) {
  Args a;
  ASSERT_TRUE(SplitInline(R"(set "x\ty\x41" 'it\'s' plain)", &a));
  EXPECT_EQ(a, (Args{"set", "x\tyA", "it's", "plain"}));
  a.clear();
  EXPECT_FALSE(SplitInline(R"(set "open)", &a));
  a.clear();
  EXPECT_FALSE(SplitInline(R"(set "a"b)", &a));
}

TEST(RespParserTest, MalformedFramesGetRedisErrors) {
  struct Case {
    std::string wire, error;
  };
  RespLimits small;
  small.max_bulk_bytes = 10;
  small.max_multibulk_args = 4;
  small.max_inline_bytes = 16;
  std::vector<Case> cases = {
      {"*x\r\n", "Protocol error: invalid multibulk length"},
      {"*5\r\n", "Protocol error: invalid multibulk length"},
      {"*1\r\n+PING\r\n", "Protocol error: expected '$', got '+'"},
      {"*1\r\n$-3\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$11\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$1x\r\n", "Protocol error: invalid bulk length"},
      {"*1\r\n$2\r\nabcd\r\n", "Protocol error: bulk string not terminated by CRLF"},
      {"set \"a\r\n", "Protocol error: unbalanced quotes in request"},
      {std::string(40, 'a'), "Protocol error: too big inline request"},
      {"*1\r\n$" + std::string(40, '1'), "Protocol error: too big bulk count string"},
  };
  for (const auto& c : cases) {
    std::string err;
    auto cmds = ParseAll(c.wire, 0, &err, small);
    EXPECT_TRUE(cmds.empty()) << c.wire;
    EXPECT_EQ(err, c.error) << c.wire;
  }
}

TEST(RespParserTest, DeclaredHugeCountReservesNoMemoryUpFront) {
  // A million-argument header with no arguments is just a header.
  std::string err;
  auto cmds = ParseAll("*1048576\r\n$1\r\na\r\n", 0, &err);
  EXPECT_TRUE(cmds.empty());
  EXPECT_EQ(err, "");
}

TEST(RespWriterTest, RepliesHaveTheirRespShapes) {
  std::string out;
  AppendSimple(&out, "OK");
  AppendError(&out, "ERR bad\r\nline");
  AppendInt(&out, -42);
  AppendBulk(&out, std::string("a\0b", 3));
  AppendNull(&out);
  AppendArray(&out, 2);
  AppendNullArray(&out);
  static constexpr char kWant[] = "+OK\r\n-ERR bad  line\r\n:-42\r\n$3\r\na\0b\r\n$-1\r\n*2\r\n*-1\r\n";
  EXPECT_EQ(out, std::string(kWant, sizeof kWant - 1));
}

// The parser reuses the strings of the args vector it is handed back: a
// stream of commands of mixed arities and lengths (some past kRecycleBytes),
// split at every byte count, parses to exactly what was sent, and the
// strings of one command are the buffers of an earlier one (no allocation).
TEST(RespParserTest, ReusedArgumentStringsHoldExactlyTheNewCommand) {
  std::vector<Args> sent = {{"SET", "key:0001", std::string(100, 'a')},
                            {"GET", "k"},
                            {"SET", "key:0002", std::string(RespParser::kRecycleBytes + 300, 'b')},
                            {"MSET", "x", "1", "y", "2"},
                            {"SET", "key:0003", "short"},
                            {"PING"},
                            {"SET", "key:0004", std::string(90, 'c')}};
  std::string wire;
  for (const auto& a : sent) {
    wire += "*" + std::to_string(a.size()) + "\r\n";
    for (const auto& x : a) wire += "$" + std::to_string(x.size()) + "\r\n" + x + "\r\n";
  }
  for (size_t step : {size_t{0}, size_t{1}, size_t{7}}) {
    RespParser p;
    std::string buf;
    size_t pos = 0, fed = 0, got = 0;
    Args args;  // one vector, handed back each time, as the server does
    while (fed < wire.size() || got < sent.size()) {
      size_t n = step == 0 ? wire.size() - fed : std::min(step, wire.size() - fed);
      buf.append(wire, fed, n);
      fed += n;
      while (p.Parse(buf, &pos, &args) == RespParser::Outcome::kCommand) {
        ASSERT_LT(got, sent.size());
        ASSERT_EQ(args, sent[got]) << "command " << got << ", step " << step;
        ++got;
      }
      if (n == 0) break;
    }
    EXPECT_EQ(got, sent.size()) << "step " << step;
  }
  // Three SETs: the third one's value lands in the buffer the first one's
  // value had (the first's strings went back to the parser with the second).
  std::string three;
  for (char v : {'u', 'v', 'w'})
    three += "*3\r\n$3\r\nSET\r\n$1\r\n" + std::string(1, v) + "\r\n$100\r\n" + std::string(100, v) + "\r\n";
  RespParser p;
  size_t pos = 0;
  Args a;
  ASSERT_EQ(p.Parse(three, &pos, &a), RespParser::Outcome::kCommand);
  const char* first_value = a[2].data();
  ASSERT_EQ(p.Parse(three, &pos, &a), RespParser::Outcome::kCommand);
  EXPECT_NE(a[2].data(), first_value);
  ASSERT_EQ(p.Parse(three, &pos, &a), RespParser::Outcome::kCommand);
  EXPECT_EQ(a, (Args{"SET", "w", std::string(100, 'w')}));
  EXPECT_EQ(a[2].data(), first_value);
}

}  // namespace
}  // namespace pmtree::server
