// SPDX-License-Identifier: Apache-2.0
//
// Protocol fuzzing against a live in-process server: random and mutated RESP
// frames (100,000 by default, PMTREE_FUZZ_FRAMES=n for more) on one
// connection, reopened whenever the server closes it, while a well-behaved
// client on another connection keeps checking its own writes.  The server
// must never crash, and the store must verify afterwards.  Seeded:
// PMTREE_SEED=<n> replays a run.

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "server/test_client.h"
#include "testutil.h"

namespace pmtree::server {
namespace {

using testing::Client;
using testing::ServerFixture;

uint64_t Frames() {
  if (const char* s = std::getenv("PMTREE_FUZZ_FRAMES")) return std::strtoull(s, nullptr, 10);
  return 100000;
}

// Valid commands to mutate.  No SHUTDOWN, FLUSHALL or QUIT: the fuzzer must
// not stop the server or wipe the good client's keys by design, and keys
// start with 'f' so no small mutation reaches the good client's "good:".
const std::vector<std::vector<std::string>>& Corpus() {
  static const std::vector<std::vector<std::string>> kCorpus = {
      {"PING"}, {"ECHO", "hello"}, {"SET", "fk1", "value"}, {"GET", "fk1"}, {"INCR", "fk2"},
      {"APPEND", "fk3", "xyz"}, {"HSET", "fh", "f1", "v1", "f2", "v2"}, {"HGETALL", "fh"},
      {"HMGET", "fh", "f1", "f9"}, {"HDEL", "fh", "f1"}, {"ZADD", "fz", "1.5", "m1", "-inf", "m2"},
      {"ZRANGEBYSCORE", "fz", "(1", "+inf", "WITHSCORES", "LIMIT", "0", "5"}, {"ZREM", "fz", "m1"},
      {"ZSCORE", "fz", "m2"}, {"SCAN", "0", "MATCH", "f*", "COUNT", "5"}, {"RANGE", "-", "+", "LIMIT", "5"},
      {"MSET", "fk1", "a", "fk4", "b"}, {"MGET", "fk1", "fk4"}, {"DEL", "fk3", "fz"}, {"MULTI"},
      {"EXEC"}, {"DISCARD"}, {"CLIENT", "SETNAME", "fuzz"}, {"CONFIG", "GET", "*"}, {"INFO"},
      {"HELLO", "3"}, {"SELECT", "0"}, {"DBSIZE"}, {"GETDEL", "fk4"}, {"EXISTS", "fk1", "fh"},
      {"SET", "fk5", "v", "NX", "GET"}, {"INCRBY", "fk2", "-9223372036854775808"}, {"AUTH", "x"},
      {"COMMAND", "DOCS"}, {"TYPE", "fh"}, {"HLEN", "fh"}, {"ZCARD", "fz"}, {"STRLEN", "fk1"}};
  return kCorpus;
}

std::string Inline(const std::vector<std::string>& args) {
  std::string w;
  for (const auto& a : args) w += (w.empty() ? "" : " ") + a;
  return w + "\r\n";
}

std::string MakeFrame(std::mt19937_64& rng) {
  static const std::vector<std::string> kTokens = {
      "*-1\r\n", "$-1\r\n", "*0\r\n", "*1\r\n$0\r\n\r\n", "*2147483648\r\n", "$9223372036854775807\r\n",
      "*1\r\n$-5\r\n", "\r\n", "\"", "'", "\\x", "*3\r\n$3\r\nSET\r\n$2\r\nfk\r\n$1\r\n"};
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  uint64_t kind = rng() % 10;
  if (kind == 0) {  // random bytes
    std::string s(1 + pick(64), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  }
  if (kind == 1) return kTokens[pick(kTokens.size())];
  const auto& cmd = Corpus()[pick(Corpus().size())];
  std::string f = kind < 4 ? Inline(cmd) : Client::Encode(cmd);
  if (kind < 6) return f;  // valid frames too: the server must answer them right
  for (int m = 1 + static_cast<int>(pick(4)); m > 0 && !f.empty(); --m) {
    size_t at = pick(f.size());
    switch (rng() % 6) {
      case 0: f[at] = static_cast<char>(rng()); break;
      case 1: f.insert(at, 1, static_cast<char>(rng())); break;
      case 2: f.erase(at, 1); break;
      case 3: f.resize(at); break;
      case 4: f.insert(at, kTokens[pick(kTokens.size())]); break;
      default: f.insert(at, f.substr(at, pick(16))); break;
    }
  }
  return f;
}

TEST(ServerFuzzTest, RandomAndMutatedFramesNeverHurtAWellBehavedClient) {
  const uint64_t seed = testutil::Seed();  // prints the seed; PMTREE_SEED replays
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  ServerOptions quiet;
  quiet.log_rejected_clients = false;  // thousands of expected closes
  ServerFixture f(quiet, 256ull << 20);
  auto good = f.Connect();
  ASSERT_TRUE(good->connected());
  // Frames go out kBurst at a time on a fresh connection, which is then
  // half-closed and read to its end: the server closes it only after running
  // whatever it could parse, so every frame is delivered and processed before
  // the next burst (no timing involved).  A protocol error drops the rest of
  // its burst, as it would for a real client.
  constexpr uint64_t kBurst = 4;
  uint64_t connections = 0;
  const uint64_t frames = Frames();
  for (uint64_t i = 0; i < frames; i += kBurst) {
    std::string burst;
    for (uint64_t j = i; j < std::min(frames, i + kBurst); ++j) burst += MakeFrame(rng);
    {
      Client fuzz(f.port());
      ++connections;
      ASSERT_TRUE(fuzz.connected()) << "frame " << i;
      fuzz.SendRaw(burst);  // may fail part-way: the server closed on an error
      shutdown(fuzz.fd(), SHUT_WR);
      char buf[65536];
      while (recv(fuzz.fd(), buf, sizeof buf, 0) > 0) {
      }
    }
    if (i % 96 == 0) {
      std::string k = "good:" + std::to_string(i), v = "v" + std::to_string(rng());
      ASSERT_EQ(good->Cmd({"SET", k, v}), "+OK") << "frame " << i;
      ASSERT_EQ(good->Cmd({"GET", k}), v) << "frame " << i;
      ASSERT_EQ(good->Cmd({"HSET", "good:h", k, v}).substr(0, 1), ":") << "frame " << i;
    }
  }
  EXPECT_EQ(good->Cmd({"PING"}), "+PONG");
  for (uint64_t i = 0; i < frames; i += 96)
    ASSERT_EQ(good->Cmd({"EXISTS", "good:" + std::to_string(i)}), ":1") << i;
  std::fprintf(stderr, "server fuzz: %llu frames, %llu connections, %llu closed on protocol errors, %llu commands run\n",
               static_cast<unsigned long long>(frames), static_cast<unsigned long long>(connections),
               static_cast<unsigned long long>(f.server().state().rejected_protocol.load()),
               static_cast<unsigned long long>(f.server().state().total_commands.load()));
  good.reset();
  f.server().RequestStop();
  f.server().Wait();
  Status v = f.store().Verify();
  EXPECT_TRUE(v.ok()) << v.ToString();
}

}  // namespace
}  // namespace pmtree::server
