// SPDX-License-Identifier: Apache-2.0
//
// `pmtree serve` in process on 127.0.0.1 port 0, driven by a blocking RESP
// client: every command and its errors, AUTH, the input limits, a full pool,
// 1,000 idle connections, concurrent clients, SHUTDOWN.

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>

#include "pmtree/counters.h"
#include "server/test_client.h"
#include "testutil.h"

namespace pmtree::server {
namespace {

using testing::Client;
using testing::ServerFixture;
using V = std::vector<std::string>;

TEST(ServerTest, HousekeepingCommandsAnswerLikeRedis) {
  ServerFixture f;
  auto c = f.Connect();
  ASSERT_TRUE(c->connected());
  EXPECT_EQ(c->Cmd({"PING"}), "+PONG");
  EXPECT_EQ(c->Cmd({"ping", "hi"}), "hi");
  EXPECT_EQ(c->Cmd({"ECHO", "x y"}), "x y");
  EXPECT_EQ(c->Cmd({"SELECT", "0"}), "+OK");
  EXPECT_EQ(c->Cmd({"SELECT", "1"}), "-ERR DB index is out of range");
  EXPECT_EQ(c->Cmd({"HELLO", "3"}), "-NOPROTO unsupported protocol version");
  std::string hello = c->Cmd({"HELLO", "2"});
  EXPECT_NE(hello.find("proto, :2"), std::string::npos) << hello;
  EXPECT_NE(hello.find("role, master"), std::string::npos) << hello;
  EXPECT_EQ(c->Cmd({"CLIENT", "GETNAME"}), "(nil)");
  EXPECT_EQ(c->Cmd({"CLIENT", "SETNAME", "me"}), "+OK");
  EXPECT_EQ(c->Cmd({"CLIENT", "GETNAME"}), "me");
  EXPECT_EQ(c->Cmd({"CLIENT", "SETNAME", "a b"}),
            "-ERR Client names cannot contain spaces, newlines or special characters.");
  EXPECT_EQ(c->Cmd({"CLIENT", "SETINFO", "LIB-NAME", "jedis"}), "+OK");
  EXPECT_EQ(c->Cmd({"CLIENT", "ID"})[0], ':');
  EXPECT_EQ(c->Cmd({"CONFIG", "GET", "save"}), "[save, ]");
  EXPECT_EQ(c->Cmd({"CONFIG", "GET", "appendonly"}), "[appendonly, no]");
  EXPECT_EQ(c->Cmd({"CONFIG", "GET", "nosuch*"}), "[]");
  EXPECT_EQ(c->Cmd({"COMMAND", "DOCS"}), "[]");
  EXPECT_EQ(c->Cmd({"COMMAND", "COUNT"})[0], ':');
  std::string info = c->Cmd({"INFO"});
  for (const char* s : {"# Server", "# Clients", "# Memory", "# Persistence", "# Stats", "# Replication",
                        "role:master", "connected_clients:1"})
    EXPECT_NE(info.find(s), std::string::npos) << s;
  EXPECT_EQ(c->Cmd({"INFO", "replication"}).find("# Server"), std::string::npos);
  EXPECT_EQ(c->Cmd({"NOSUCH", "a"}), "-ERR unknown command 'NOSUCH', with args beginning with: 'a' ");
  EXPECT_EQ(c->Cmd({"GET"}), "-ERR wrong number of arguments for 'get' command");
  EXPECT_EQ(c->Cmd({"PING"}), "+PONG");  // the connection stays
  EXPECT_TRUE(c->SendRaw("PING\r\nECHO \"in line\"\r\n"));  // inline commands
  EXPECT_EQ(c->Read(), "+PONG");
  EXPECT_EQ(c->Read(), "in line");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":0");
  EXPECT_EQ(c->Cmd({"QUIT"}), "+OK");
  EXPECT_EQ(c->Read(), "(eof)");
}

TEST(ServerTest, StringCommands) {
  ServerFixture f;
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"GET", "k"}), "(nil)");
  EXPECT_EQ(c->Cmd({"SET", "k", "v1"}), "+OK");
  EXPECT_EQ(c->Cmd({"GET", "k"}), "v1");
  EXPECT_EQ(c->Cmd({"SET", "k", "v2", "NX"}), "(nil)");
  EXPECT_EQ(c->Cmd({"SET", "k", "v2", "XX", "GET"}), "v1");
  EXPECT_EQ(c->Cmd({"SET", "nope", "v", "XX"}), "(nil)");
  EXPECT_EQ(c->Cmd({"SET", "k", "v", "NX", "XX"}), "-ERR syntax error");
  EXPECT_EQ(c->Cmd({"SET", "k", "v", "EX", "10"}), "-ERR expiry is not supported: pmtree keys do not expire");
  EXPECT_EQ(c->Cmd({"SETNX", "k", "x"}), ":0");
  EXPECT_EQ(c->Cmd({"SETNX", "k2", "x"}), ":1");
  EXPECT_EQ(c->Cmd({"EXISTS", "k", "k2", "k", "none"}), ":3");
  EXPECT_EQ(c->Cmd({"DEL", "k", "k2", "none", "k"}), ":2");
  EXPECT_EQ(c->Cmd({"GETDEL", "k"}), "(nil)");
  EXPECT_EQ(c->Cmd({"SET", "g", ""}), "+OK");
  EXPECT_EQ(c->Cmd({"GETDEL", "g"}), "");
  EXPECT_EQ(c->Cmd({"EXISTS", "g"}), ":0");
  EXPECT_EQ(c->Cmd({"INCR", "n"}), ":1");
  EXPECT_EQ(c->Cmd({"INCRBY", "n", "41"}), ":42");
  EXPECT_EQ(c->Cmd({"DECR", "n"}), ":41");
  EXPECT_EQ(c->Cmd({"DECRBY", "n", "50"}), ":-9");
  EXPECT_EQ(c->Cmd({"INCRBY", "n", "x"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(c->Cmd({"SET", "s", "12a"}), "+OK");
  EXPECT_EQ(c->Cmd({"INCR", "s"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(c->Cmd({"SET", "s", " 1"}), "+OK");
  EXPECT_EQ(c->Cmd({"INCR", "s"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(c->Cmd({"SET", "big", "9223372036854775807"}), "+OK");
  EXPECT_EQ(c->Cmd({"INCR", "big"}), "-ERR increment or decrement would overflow");
  EXPECT_EQ(c->Cmd({"GET", "big"}), "9223372036854775807");
  EXPECT_EQ(c->Cmd({"APPEND", "a", "hello"}), ":5");
  EXPECT_EQ(c->Cmd({"APPEND", "a", " world"}), ":11");
  EXPECT_EQ(c->Cmd({"STRLEN", "a"}), ":11");
  EXPECT_EQ(c->Cmd({"STRLEN", "none"}), ":0");
  EXPECT_EQ(c->Cmd({"MSET", "m1", "1", "m2", "2"}), "+OK");
  EXPECT_EQ(c->Cmd({"MSET", "m1", "1", "m2"}), "-ERR wrong number of arguments for 'mset' command");
  EXPECT_EQ(c->Cmd({"MGET", "m1", "none", "m2"}), "[1, (nil), 2]");
  std::string binary("\0\r\n\xff", 4);
  EXPECT_EQ(c->Cmd({"SET", binary, binary}), "+OK");
  EXPECT_EQ(c->Cmd({"GET", binary}), binary);
  EXPECT_EQ(c->Cmd({"TYPE", "a"}), "+string");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":7");
  std::string long_key(Keyspace::kMaxUserKeyBytes + 1, 'k');
  EXPECT_EQ(c->Cmd({"SET", long_key, "v"}), "-ERR key of 4096 bytes; the limit is 4095");
}

TEST(ServerTest, HashCommands) {
  ServerFixture f;
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"HSET", "h", "f1", "a", "f2", "b"}), ":2");
  EXPECT_EQ(c->Cmd({"HSET", "h", "f1", "A", "f3", "c"}), ":1");
  EXPECT_EQ(c->Cmd({"HMSET", "h", "f4", "d"}), "+OK");
  EXPECT_EQ(c->Cmd({"HGET", "h", "f1"}), "A");
  EXPECT_EQ(c->Cmd({"HGET", "h", "nope"}), "(nil)");
  EXPECT_EQ(c->Cmd({"HGET", "none", "f1"}), "(nil)");
  EXPECT_EQ(c->Cmd({"HMGET", "h", "f2", "nope", "f4"}), "[b, (nil), d]");
  EXPECT_EQ(c->Cmd({"HGETALL", "h"}), "[f1, A, f2, b, f3, c, f4, d]");
  EXPECT_EQ(c->Cmd({"HLEN", "h"}), ":4");
  EXPECT_EQ(c->Cmd({"HEXISTS", "h", "f3"}), ":1");
  EXPECT_EQ(c->Cmd({"HEXISTS", "h", "f9"}), ":0");
  EXPECT_EQ(c->Cmd({"HDEL", "h", "f1", "f9", "f1"}), ":1");
  EXPECT_EQ(c->Cmd({"HLEN", "h"}), ":3");
  EXPECT_EQ(c->Cmd({"HSET", "h", "f"}), "-ERR wrong number of arguments for 'hset' command");
  EXPECT_EQ(c->Cmd({"HSET", "h", "", "v"}), "-ERR hash field names have 1..255 bytes");
  EXPECT_EQ(c->Cmd({"HDEL", "h", "f2", "f3", "f4"}), ":3");
  EXPECT_EQ(c->Cmd({"EXISTS", "h"}), ":0");  // the last field's removal removes the key
  EXPECT_EQ(c->Cmd({"HGETALL", "h"}), "[]");
  EXPECT_EQ(c->Cmd({"HSET", "h", "x", "1"}), ":1");
  EXPECT_EQ(c->Cmd({"TYPE", "h"}), "+hash");
}

// Past Keyspace::kSmallHashFields a hash becomes one tree key per field;
// every command sees the same hash before and after.
TEST(ServerTest, LargeHashKeepsEveryField) {
  ServerFixture f;
  auto c = f.Connect();
  const int n = static_cast<int>(Keyspace::kSmallHashFields) * 3;
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(c->Cmd({"HSET", "big", "f" + std::to_string(i), std::to_string(i)}), ":1") << i;
  EXPECT_EQ(c->Cmd({"HSET", "big", "f0", "zero", "new", "x"}), ":1");
  EXPECT_EQ(c->Cmd({"HLEN", "big"}), ":" + std::to_string(n + 1));
  EXPECT_EQ(c->Cmd({"HGET", "big", "f0"}), "zero");
  EXPECT_EQ(c->Cmd({"HMGET", "big", "f7", "nope", "new"}), "[7, (nil), x]");
  EXPECT_EQ(c->Cmd({"HEXISTS", "big", "f100"}), ":1");
  std::string all = c->Cmd({"HGETALL", "big"});
  EXPECT_EQ(std::count(all.begin(), all.end(), ','), 2 * (n + 1) - 1);
  EXPECT_EQ(c->Cmd({"TYPE", "big"}), "+hash");
  EXPECT_EQ(c->Cmd({"GET", "big"}), "-WRONGTYPE Operation against a key holding the wrong kind of value");
  EXPECT_EQ(c->Cmd({"HDEL", "big", "f1", "f2", "f1", "nope"}), ":2");
  EXPECT_EQ(c->Cmd({"HLEN", "big"}), ":" + std::to_string(n - 1));
  // One HSET of many fields converts at once.
  V many = {"HMSET", "wide"};
  for (int i = 0; i < n; ++i) many.insert(many.end(), {"g" + std::to_string(i), "v"});
  EXPECT_EQ(c->Cmd(many), "+OK");
  EXPECT_EQ(c->Cmd({"HLEN", "wide"}), ":" + std::to_string(n));
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":2");
  EXPECT_EQ(c->Cmd({"DEL", "big"}), ":1");
  EXPECT_EQ(c->Cmd({"SET", "wide", "plain"}), "+OK");
  EXPECT_EQ(f.store().Stats().keys, 1u);  // no field key left behind
}

TEST(ServerTest, WrongTypeLikeRedis) {
  ServerFixture f;
  auto c = f.Connect();
  const std::string kWrong = "-WRONGTYPE Operation against a key holding the wrong kind of value";
  ASSERT_EQ(c->Cmd({"SET", "s", "1"}), "+OK");
  ASSERT_EQ(c->Cmd({"HSET", "h", "f", "v"}), ":1");
  ASSERT_EQ(c->Cmd({"ZADD", "z", "1", "m"}), ":1");
  for (const char* k : {"h", "z"}) {
    EXPECT_EQ(c->Cmd({"GET", k}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"INCR", k}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"APPEND", k, "x"}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"GETDEL", k}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"SET", k, "v", "GET"}), kWrong) << k;
  }
  for (const char* k : {"s", "z"}) {
    EXPECT_EQ(c->Cmd({"HSET", k, "f", "v"}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"HGET", k, "f"}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"HGETALL", k}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"HDEL", k, "f"}), kWrong) << k;
  }
  for (const char* k : {"s", "h"}) {
    EXPECT_EQ(c->Cmd({"ZADD", k, "1", "m"}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"ZSCORE", k, "m"}), kWrong) << k;
    EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", k, "-inf", "+inf"}), kWrong) << k;
  }
  EXPECT_EQ(c->Cmd({"MGET", "s", "h", "z"}), "[1, (nil), (nil)]");
  // SET replaces any type, and a replaced sorted set leaves no member behind.
  EXPECT_EQ(c->Cmd({"SET", "z", "plain"}), "+OK");
  EXPECT_EQ(c->Cmd({"ZADD", "z2", "1", "m"}), ":1");
  EXPECT_EQ(c->Cmd({"DEL", "z", "z2"}), ":2");
  EXPECT_EQ(c->Cmd({"ZADD", "z", "5", "n"}), ":1");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES"}), "[n, 5]");
  EXPECT_EQ(c->Cmd({"SET", "h", "plain"}), "+OK");
  EXPECT_EQ(c->Cmd({"GET", "h"}), "plain");
}

TEST(ServerTest, SortedSetCommands) {
  ServerFixture f;
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"ZADD", "z", "1", "a", "2", "b", "2", "c", "-1.5", "d", "+inf", "e", "-inf", "f"}), ":6");
  EXPECT_EQ(c->Cmd({"ZADD", "z", "3", "a"}), ":0");  // an update adds nothing
  EXPECT_EQ(c->Cmd({"ZCARD", "z"}), ":6");
  EXPECT_EQ(c->Cmd({"ZCARD", "none"}), ":0");
  EXPECT_EQ(c->Cmd({"ZSCORE", "z", "a"}), "3");
  EXPECT_EQ(c->Cmd({"ZSCORE", "z", "d"}), "-1.5");
  EXPECT_EQ(c->Cmd({"ZSCORE", "z", "e"}), "inf");
  EXPECT_EQ(c->Cmd({"ZSCORE", "z", "x"}), "(nil)");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "-inf", "+inf"}), "[f, d, b, c, a, e]");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "2", "3", "WITHSCORES"}), "[b, 2, c, 2, a, 3]");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "(2", "3"}), "[a]");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "-1.5", "(3"}), "[d, b, c]");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "2"}), "[d, b]");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "4", "-1"}), "[a, e]");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "5", "1"}), "[]");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "x", "1"}), "-ERR min or max is not a float");
  EXPECT_EQ(c->Cmd({"ZADD", "z", "nan", "q"}), "-ERR value is not a valid float");
  EXPECT_EQ(c->Cmd({"ZADD", "z", "NX", "1", "q"}).substr(0, 17), "-ERR ZADD options");
  EXPECT_EQ(c->Cmd({"ZREM", "z", "a", "x", "a"}), ":1");
  EXPECT_EQ(c->Cmd({"ZCARD", "z"}), ":5");
  EXPECT_EQ(c->Cmd({"TYPE", "z"}), "+zset");
  // Members and the score index are internal keys: the keyspace sees one key.
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":1");
  EXPECT_EQ(c->Cmd({"SCAN", "0", "COUNT", "100"}), "[0, [z]]");
  EXPECT_EQ(c->Cmd({"ZREM", "z", "b", "c", "d", "e", "f"}), ":5");
  EXPECT_EQ(c->Cmd({"EXISTS", "z"}), ":0");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":0");
  EXPECT_EQ(f.store().Stats().keys, 0u);  // no internal key left behind either
}

// ZADD/ZREM/ZRANGEBYSCORE against a std::set model (random, seeded).
TEST(ServerTest, SortedSetMatchesModel) {
  ServerFixture f;
  auto c = f.Connect();
  const uint64_t seed = testutil::Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::map<std::string, double> scores;
  for (int op = 0; op < 2000; ++op) {
    std::string m = "m" + std::to_string(rng() % 200);
    if (rng() % 3) {
      double s = static_cast<double>(static_cast<int64_t>(rng() % 41) - 20) / 4;
      bool fresh = !scores.count(m);
      scores[m] = s;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", s);
      ASSERT_EQ(c->Cmd({"ZADD", "zs", buf, m}), fresh ? ":1" : ":0");
    } else {
      ASSERT_EQ(c->Cmd({"ZREM", "zs", m}), scores.erase(m) ? ":1" : ":0");
    }
    if (op % 50 == 0) {
      std::set<std::pair<double, std::string>> order;
      for (const auto& [mm, s] : scores) order.emplace(s, mm);
      std::string want = "[";
      bool first = true;
      for (const auto& [s, mm] : order)
        if (s > -2.5 && s <= 3) {
          want += (first ? "" : ", ") + mm;
          first = false;
        }
      ASSERT_EQ(c->Cmd({"ZRANGEBYSCORE", "zs", "(-2.5", "3"}), want + "]");
      ASSERT_EQ(c->Cmd({"ZCARD", "zs"}), ":" + std::to_string(scores.size()));
    }
  }
}

TEST(ServerTest, ScanAndRangeVisitUserKeysInOrder) {
  ServerFixture f;
  auto c = f.Connect();
  std::set<std::string> keys;
  for (int i = 0; i < 250; ++i) {
    std::string k = "key:" + std::to_string(i);
    keys.insert(k);
    ASSERT_EQ(c->Cmd({"SET", k, "v" + std::to_string(i)}), "+OK");
  }
  ASSERT_EQ(c->Cmd({"ZADD", "key:z", "1", "member"}), ":1");
  keys.insert("key:z");
  ASSERT_EQ(c->Cmd({"HSET", "key:h", "f", "v"}), ":1");
  keys.insert("key:h");
  // SCAN with COUNT 7: every key exactly once, in key order.
  std::vector<std::string> seen;
  std::string cursor = "0";
  int rounds = 0;
  do {
    ASSERT_TRUE(c->Send({"SCAN", cursor, "COUNT", "7"}));
    std::string r = c->Read();  // "[cursor, [k1, k2, ...]]"
    size_t comma = r.find(',');
    cursor = r.substr(1, comma - 1);
    std::string list = r.substr(r.find('[', 1) + 1);
    list.resize(list.size() - 2);
    for (size_t p = 0; !list.empty();) {
      size_t q = list.find(", ", p);
      seen.push_back(list.substr(p, q - p));
      if (q == std::string::npos) break;
      p = q + 2;
    }
    ASSERT_LT(++rounds, 100);
  } while (cursor != "0");
  EXPECT_EQ(seen, std::vector<std::string>(keys.begin(), keys.end()));
  EXPECT_EQ(c->Cmd({"SCAN", "0", "MATCH", "key:1?", "COUNT", "1000"}),
            "[0, [key:10, key:11, key:12, key:13, key:14, key:15, key:16, key:17, key:18, key:19]]");
  EXPECT_EQ(c->Cmd({"SCAN", "0", "MATCH", "k[a-f]y:2[^0-4]*", "COUNT", "1000"}),
            "[0, [key:25, key:26, key:27, key:28, key:29]]");
  EXPECT_EQ(c->Cmd({"SCAN", "0", "MATCH", "*:*h", "COUNT", "1000"}), "[0, [key:h]]");
  // Many stars on a long key: linear work, an answer at once.
  EXPECT_EQ(c->Cmd({"SCAN", "0", "MATCH", std::string(200, '*') + "x", "COUNT", "1000"}), "[0, []]");
  EXPECT_EQ(c->Cmd({"SCAN", "999999"}), "-ERR invalid cursor");
  EXPECT_EQ(c->Cmd({"RANGE", "key:100", "key:103"}), "[key:100, key:101, key:102]");
  EXPECT_EQ(c->Cmd({"RANGE", "key:100", "key:103", "WITHVALUES"}), "[key:100, v100, key:101, v101, key:102, v102]");
  EXPECT_EQ(c->Cmd({"RANGE", "key:98", "+", "LIMIT", "3"}), "[key:98, key:99, key:h]");
  EXPECT_EQ(c->Cmd({"RANGE", "-", "key:1"}), "[key:0]");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":252");
  EXPECT_EQ(c->Cmd({"FLUSHALL"}), "+OK");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":0");
  EXPECT_EQ(f.store().Stats().keys, 0u);
}

TEST(ServerTest, MultiExecQueuesAndRuns) {
  ServerFixture f;
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"EXEC"}), "-ERR EXEC without MULTI");
  EXPECT_EQ(c->Cmd({"MULTI"}), "+OK");
  EXPECT_EQ(c->Cmd({"SET", "a", "1"}), "+QUEUED");
  EXPECT_EQ(c->Cmd({"INCR", "a"}), "+QUEUED");
  EXPECT_EQ(c->Cmd({"GET", "a"}), "+QUEUED");
  EXPECT_EQ(c->Cmd({"EXEC"}), "[+OK, :2, 2]");
  EXPECT_EQ(c->Cmd({"MULTI"}), "+OK");
  EXPECT_EQ(c->Cmd({"SET", "b", "1"}), "+QUEUED");
  EXPECT_EQ(c->Cmd({"NOSUCH"}).substr(0, 20), "-ERR unknown command");
  EXPECT_EQ(c->Cmd({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.");
  EXPECT_EQ(c->Cmd({"EXISTS", "b"}), ":0");
  EXPECT_EQ(c->Cmd({"MULTI"}), "+OK");
  EXPECT_EQ(c->Cmd({"SET", "b", "1"}), "+QUEUED");
  EXPECT_EQ(c->Cmd({"DISCARD"}), "+OK");
  EXPECT_EQ(c->Cmd({"EXISTS", "b"}), ":0");
  // Reads inside see the transaction's own writes; a command's own error
  // does not stop the others; sorted sets too.
  ASSERT_EQ(c->Cmd({"HSET", "h", "f", "v"}), ":1");
  EXPECT_EQ(c->Cmd({"MULTI"}), "+OK");
  for (const V& cmd : std::vector<V>{{"ZADD", "z", "1", "x", "2", "y"}, {"ZCARD", "z"}, {"ZREM", "z", "x"},
                                     {"ZSCORE", "z", "y"}, {"MSET", "m1", "a", "m2", "b"}, {"MGET", "m1", "m2", "h"},
                                     {"APPEND", "m1", "!"}, {"GET", "h"}, {"DEL", "z", "m2"}, {"EXISTS", "z", "m1"}})
    EXPECT_EQ(c->Cmd(cmd), "+QUEUED");
  EXPECT_EQ(c->Cmd({"EXEC"}),
            "[:2, :2, :1, 2, +OK, [a, b, (nil)], :2, "
            "-WRONGTYPE Operation against a key holding the wrong kind of value, :2, :1]");
  EXPECT_EQ(c->Cmd({"GET", "m1"}), "a!");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":3");  // a, m1, h: the set's members went with it
  EXPECT_EQ(f.store().Stats().keys, 3u);
  // A command outside the transaction's set is refused, the EXEC aborts.
  EXPECT_EQ(c->Cmd({"MULTI"}), "+OK");
  EXPECT_EQ(c->Cmd({"ZRANGEBYSCORE", "z", "0", "1"}).substr(0, 49), "-ERR zrangebyscore is not supported inside MULTI ");
  EXPECT_EQ(c->Cmd({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.");
}

// Hash commands queued in MULTI run in EXEC's transaction: random blocks
// of HSET/HMSET/HDEL/HGET/HMGET/HGETALL/HLEN/HEXISTS/DEL (hashes growing
// past kSmallHashFields, so small -> large conversions happen inside a
// transaction), with WRONGTYPE on a string key among them, against a model.
TEST(ServerTest, HashCommandsInsideExecMatchModel) {
  ServerFixture f;
  auto c = f.Connect();
  const uint64_t seed = testutil::Seed();
  SCOPED_TRACE("PMTREE_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  using Fields = std::map<std::string, std::string>;
  std::map<std::string, Fields> hashes;
  ASSERT_EQ(c->Cmd({"SET", "str", "x"}), "+OK");
  const std::string kWrongType = "-WRONGTYPE Operation against a key holding the wrong kind of value";
  auto field = [&] { return "f" + std::to_string(rng() % 120); };
  auto render = [](const Fields& m) {
    std::string r = "[";
    for (const auto& [k, v] : m) r += (r.size() > 1 ? ", " : "") + k + ", " + v;
    return r + "]";
  };
  size_t largest = 0;  // the most fields a hash had
  for (int round = 0; round < 250; ++round) {
    for (const auto& [k, h] : hashes) largest = std::max(largest, h.size());
    ASSERT_EQ(c->Cmd({"MULTI"}), "+OK");
    std::vector<std::string> want;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      const bool on_string = rng() % 15 == 0;
      const std::string key = on_string ? "str" : "h" + std::to_string(rng() % 4);
      Fields* h = on_string ? nullptr : &hashes[key];
      V cmd;
      std::string reply;
      switch (rng() % 9) {
        case 0:
        case 1:
        case 2: {  // HSET / HMSET of 1..4 fields
          const bool hmset = rng() % 3 == 0;
          cmd = {hmset ? "HMSET" : "HSET", key};
          Fields set;
          for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) {
            std::string fl = field(), v = "v" + std::to_string(rng() % 1000);
            cmd.push_back(fl);
            cmd.push_back(v);
            set[fl] = v;
          }
          int64_t added = 0;
          for (const auto& [fl, v] : set) {
            if (h) added += h->count(fl) == 0;
            if (h) (*h)[fl] = v;
          }
          reply = !h ? kWrongType : hmset ? "+OK" : ":" + std::to_string(added);
          break;
        }
        case 3: {  // HDEL of 1..3 fields
          cmd = {"HDEL", key};
          std::set<std::string> names;
          for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) names.insert(cmd.emplace_back(field()));
          int64_t removed = 0;
          for (const auto& fl : names) removed += h ? static_cast<int64_t>(h->erase(fl)) : 0;
          reply = h ? ":" + std::to_string(removed) : kWrongType;
          break;
        }
        case 4: {
          std::string fl = field();
          cmd = {"HGET", key, fl};
          reply = !h ? kWrongType : h->count(fl) ? h->at(fl) : "(nil)";
          break;
        }
        case 5: {
          std::string a = field(), b = field();
          cmd = {"HMGET", key, a, b};
          auto one = [&](const std::string& fl) { return h->count(fl) ? h->at(fl) : "(nil)"; };
          reply = h ? "[" + one(a) + ", " + one(b) + "]" : kWrongType;
          break;
        }
        case 6:
          cmd = {"HGETALL", key};
          reply = h ? render(*h) : kWrongType;
          break;
        case 7:
          if (rng() % 2) {
            cmd = {"HLEN", key};
            reply = h ? ":" + std::to_string(h->size()) : kWrongType;
          } else {
            std::string fl = field();
            cmd = {"HEXISTS", key, fl};
            reply = h ? (h->count(fl) ? ":1" : ":0") : kWrongType;
          }
          break;
        default:
          if (on_string || key != "h3") {  // only h3 is deleted: the others grow large
            std::string fl = field();
            cmd = {"HEXISTS", key, fl};
            reply = h ? (h->count(fl) ? ":1" : ":0") : kWrongType;
          } else {
            cmd = {"DEL", key};
            reply = h->empty() ? ":0" : ":1";
            h->clear();
          }
          break;
      }
      if (h && h->empty()) hashes.erase(key);
      ASSERT_EQ(c->Cmd(cmd), "+QUEUED");
      want.push_back(reply);
    }
    std::string all = "[";
    for (const auto& r : want) all += (all.size() > 1 ? ", " : "") + r;
    ASSERT_EQ(c->Cmd({"EXEC"}), all + "]") << "round " << round;
  }
  for (int k = 0; k < 4; ++k) {
    std::string key = "h" + std::to_string(k);
    EXPECT_EQ(c->Cmd({"HGETALL", key}), hashes.count(key) ? render(hashes[key]) : "[]");
  }
  EXPECT_GT(largest, Keyspace::kSmallHashFields);  // conversions to a large hash happened in EXEC
  // A queued syntax error (arity) aborts the whole EXEC; nothing applies.
  ASSERT_EQ(c->Cmd({"MULTI"}), "+OK");
  ASSERT_EQ(c->Cmd({"HSET", "h0", "only", "new"}), "+QUEUED");
  EXPECT_EQ(c->Cmd({"HSET", "h0", "f"}), "-ERR wrong number of arguments for 'hset' command");
  EXPECT_EQ(c->Cmd({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.");
  EXPECT_EQ(c->Cmd({"HEXISTS", "h0", "only"}), ":0");
  ASSERT_TRUE(f.store().Verify().ok());
}

// EXEC commits all or nothing: on a pool too small for the whole
// transaction nothing of it is written.
TEST(ServerTest, ExecOnAFullPoolWritesNothing) {
  ServerFixture f({}, 4ull << 20);
  auto c = f.Connect();
  std::string value(64 * 1024, 'v');
  EXPECT_EQ(c->Cmd({"MULTI"}), "+OK");
  for (int i = 0; i < 200; ++i) ASSERT_EQ(c->Cmd({"SET", "k" + std::to_string(i), value}), "+QUEUED");
  EXPECT_EQ(c->Cmd({"EXEC"}).substr(0, 4), "-OOM");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":0");
  EXPECT_EQ(c->Cmd({"SET", "after", "ok"}), "+OK");
}

TEST(ServerTest, AuthGatesDataCommands) {
  ServerOptions o;
  o.requirepass = "s3cret";
  ServerFixture f(o);
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"GET", "k"}), "-NOAUTH Authentication required.");
  EXPECT_EQ(c->Cmd({"PING"}), "-NOAUTH Authentication required.");
  EXPECT_EQ(c->Cmd({"HELLO", "2"}).substr(0, 7), "-NOAUTH");
  EXPECT_EQ(c->Cmd({"AUTH", "wrong"}), "-WRONGPASS invalid username-password pair or user is disabled.");
  EXPECT_EQ(c->Cmd({"AUTH", "other", "s3cret"}), "-WRONGPASS invalid username-password pair or user is disabled.");
  EXPECT_EQ(c->Cmd({"AUTH", "s3cret"}), "+OK");
  EXPECT_EQ(c->Cmd({"SET", "k", "v"}), "+OK");
  auto d = f.Connect();
  EXPECT_EQ(d->Cmd({"HELLO", "2", "AUTH", "default", "s3cret"}).substr(0, 8), "[server,");
  EXPECT_EQ(d->Cmd({"GET", "k"}), "v");
  ServerFixture open;
  auto e = open.Connect();
  EXPECT_EQ(e->Cmd({"AUTH", "x"}).find("-ERR AUTH <password> called without any password configured"), 0u);
}

TEST(ServerTest, ProtocolErrorClosesOnlyThatClient) {
  ServerFixture f;
  auto good = f.Connect();
  ASSERT_EQ(good->Cmd({"SET", "k", "v"}), "+OK");
  struct Case {
    std::string wire, reply;
  };
  std::vector<Case> cases = {
      {"*1\r\n$x\r\n", "-ERR Protocol error: invalid bulk length"},
      {"*2\r\n+a\r\n", "-ERR Protocol error: expected '$', got '+'"},
      {"*99999999\r\n", "-ERR Protocol error: invalid multibulk length"},
      {"*1\r\n$99999999999\r\n", "-ERR Protocol error: invalid bulk length"},
      {"SET \"unbalanced\r\n", "-ERR Protocol error: unbalanced quotes in request"},
      {std::string(100000, 'x'), "-ERR Protocol error: too big inline request"},
  };
  for (const auto& tc : cases) {
    auto bad = f.Connect();
    // Replies before the error are still delivered, in order.
    ASSERT_TRUE(bad->SendRaw("PING\r\n" + tc.wire));
    EXPECT_EQ(bad->Read(), "+PONG");
    EXPECT_EQ(bad->Read(), tc.reply) << tc.wire.substr(0, 40);
    EXPECT_EQ(bad->Read(), "(eof)");
    EXPECT_EQ(good->Cmd({"GET", "k"}), "v");
  }
}

TEST(ServerTest, LimitsOnBulkCountAndQueryBuffer) {
  ServerOptions o;
  o.limits.max_bulk_bytes = 1000;
  o.limits.max_multibulk_args = 10;
  o.max_client_buffer = 4096;
  ServerFixture f(o);
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"SET", "k", std::string(1000, 'v')}), "+OK");  // at the limit
  auto big = f.Connect();
  EXPECT_EQ(big->Cmd({"SET", "k", std::string(1001, 'v')}), "-ERR Protocol error: invalid bulk length");
  auto many = f.Connect();
  EXPECT_EQ(many->Cmd(V(11, "x")), "-ERR Protocol error: invalid multibulk length");
  // Many arguments, each within the bulk limit, past the client's buffer.
  ServerOptions o2;
  o2.max_client_buffer = 64 * 1024;
  ServerFixture g(o2);
  auto flood = g.Connect();
  std::string wire = "*1000\r\n";
  for (int i = 0; i < 999; ++i) wire += "$200\r\n" + std::string(200, 'a') + "\r\n";
  flood->SendRaw(wire);
  EXPECT_EQ(flood->Read(), "-ERR Protocol error: query buffer limit reached");
  EXPECT_EQ(flood->Read(), "(eof)");
  EXPECT_EQ(g.Connect()->Cmd({"PING"}), "+PONG");
}

TEST(ServerTest, FullPoolIsOomAndDataStaysFine) {
  ServerFixture f({}, 4ull << 20);
  auto c = f.Connect();
  std::string value(16 * 1024, 'v');
  int written = 0;
  std::string r;
  while ((r = c->Cmd({"SET", "k" + std::to_string(written), value})) == "+OK") ASSERT_LT(++written, 100000);
  EXPECT_EQ(r.substr(0, 4), "-OOM") << r;
  EXPECT_GT(written, 10);
  for (int i = 0; i < written; ++i) ASSERT_EQ(c->Cmd({"GET", "k" + std::to_string(i)}), value) << i;
  // Deleting makes room again.
  EXPECT_EQ(c->Cmd({"DEL", "k0", "k1", "k2", "k3"}), ":4");
  EXPECT_EQ(c->Cmd({"SET", "after", "ok"}), "+OK");
  EXPECT_EQ(c->Cmd({"GET", "after"}), "ok");
  EXPECT_TRUE(f.store().Verify().ok());
}

TEST(ServerTest, ThousandIdleConnectionsAreServed) {
  ServerFixture f;
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(f.Connect());
    ASSERT_TRUE(idle.back()->connected()) << i;
  }
  // Each is accepted and answered (a reply proves the server holds it).
  for (auto& c : idle) ASSERT_EQ(c->Cmd({"PING"}), "+PONG");
  auto c = f.Connect();
  std::string info = c->Cmd({"INFO", "clients"});
  EXPECT_NE(info.find("connected_clients:1001"), std::string::npos) << info;
  EXPECT_EQ(c->Cmd({"SET", "k", "v"}), "+OK");
  EXPECT_EQ(idle[500]->Cmd({"GET", "k"}), "v");
}

// Many clients on the same keys: every read-modify-write lands exactly once.
// The hash stays within kSmallHashFields (one field record): a conversion is
// a batch of more than 64 keys, whose stripe locks exceed what TSan's
// deadlock detector tracks, and this test is in the TSan run.
TEST(ServerTest, ConcurrentClientsSerialiseReadModifyWrite) {
  ServerFixture f({}, 256ull << 20);
  constexpr int kThreads = 6, kOps = 150, kFieldsPerThread = 10;
  static_assert(kThreads * kFieldsPerThread <= Keyspace::kSmallHashFields);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0}, fields_added{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Client c(f.port());
      std::string zscore = std::to_string(t);
      for (int i = 0; i < kOps; ++i) {
        std::string id = std::to_string(t) + ":" + std::to_string(i);
        failures += c.Cmd({"INCR", "counter"})[0] != ':';
        // Every thread sets the same fields: each is added by exactly one HSET.
        std::string r = c.Cmd({"HSET", "hash", "f" + std::to_string(i % (kThreads * kFieldsPerThread)), id});
        failures += r != ":0" && r != ":1";
        fields_added += r == ":1";
        failures += c.Cmd({"ZADD", "zset", zscore, id}) != ":1";
        failures += c.Cmd({"APPEND", "log", "x"})[0] != ':';
        failures += c.Cmd({"SET", "own:" + id, id}) != "+OK";
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto c = f.Connect();
  const int total = kThreads * kOps;
  EXPECT_EQ(c->Cmd({"GET", "counter"}), std::to_string(total));
  EXPECT_EQ(fields_added.load(), kThreads * kFieldsPerThread);
  EXPECT_EQ(c->Cmd({"HLEN", "hash"}), ":" + std::to_string(kThreads * kFieldsPerThread));
  EXPECT_EQ(c->Cmd({"ZCARD", "zset"}), ":" + std::to_string(total));
  EXPECT_EQ(c->Cmd({"STRLEN", "log"}), ":" + std::to_string(total));
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":" + std::to_string(4 + total));
  std::string all = c->Cmd({"ZRANGEBYSCORE", "zset", "-inf", "+inf"});
  EXPECT_EQ(std::count(all.begin(), all.end(), ','), total - 1);
}

// EXEC's transactions and single INCRs on the same keys: EXEC holds the
// keys' locks, so no increment is lost on either side.
TEST(ServerTest, ConcurrentExecAndSingleCommandsKeepCounts) {
  ServerFixture f;
  constexpr int kThreads = 4, kOps = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Client c(f.port());
      for (int i = 0; i < kOps; ++i) {
        if (t % 2 == 0) {
          failures += c.Cmd({"MULTI"}) != "+OK";
          failures += c.Cmd({"INCR", "x"}) != "+QUEUED";
          failures += c.Cmd({"INCR", "y"}) != "+QUEUED";
          failures += c.Cmd({"EXEC"})[0] != '[';
        } else {
          failures += c.Cmd({"INCR", "x"})[0] != ':';
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"GET", "x"}), std::to_string(kThreads * kOps));
  EXPECT_EQ(c->Cmd({"GET", "y"}), std::to_string(kThreads / 2 * kOps));
}

TEST(ServerTest, PipelinedRepliesComeBackInOrder) {
  ServerFixture f;
  auto c = f.Connect();
  std::string wire;
  for (int i = 0; i < 2000; ++i) wire += Client::Encode({"SET", "p" + std::to_string(i), std::to_string(i)});
  for (int i = 0; i < 2000; ++i) wire += Client::Encode({"GET", "p" + std::to_string(i)});
  ASSERT_TRUE(c->SendRaw(wire));
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(c->Read(), "+OK");
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(c->Read(), std::to_string(i));
}

// Pipelined plain SETs are committed in groups (server.cc, GROUP COMMIT):
// the records of a group share one fence, its tree updates another (lbtree's
// UpdateHintedUnfenced) and its unlinks a third, so 64 replaces cost far
// fewer than the 3 fences each a lone SET pays (record, tree update, unlink).
TEST(ServerGroupCommitTest, PipelinedSetsShareTheirFences) {
  ServerFixture f;
  auto c = f.Connect();
  constexpr int kKeys = 64;
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(c->Cmd({"SET", "g" + std::to_string(i), "old"}), "+OK");
  std::string wire;
  for (int i = 0; i < kKeys; ++i) wire += Client::Encode({"SET", "g" + std::to_string(i), "new" + std::to_string(i)});
  const PersistCounters before = counters::Snapshot();
  ASSERT_TRUE(c->SendRaw(wire));
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(c->Read(), "+OK") << i;
  const PersistCounters cost = counters::Snapshot() - before;
  // One group: 3 fences; a read split in a few places adds 3 per extra
  // group.  One SET at a time would take 3 x 64 = 192.
  EXPECT_LE(cost.fences, 3 * 8u) << cost.ToString();
  EXPECT_GE(cost.fences, 3u) << cost.ToString();
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(c->Cmd({"GET", "g" + std::to_string(i)}), "new" + std::to_string(i));
  EXPECT_EQ(c->Cmd({"INFO", "stats"}).find("total_commands_processed:" + std::to_string(3 * kKeys + 1)) !=
                std::string::npos,
            true);
  EXPECT_TRUE(f.store().Verify().ok());
}

// A group ends at a repeated key and at any other command, and a SET that
// must delete members (a sorted set, a large hash) leaves the group for
// Set: every reply is what one SET at a time gives, in order.
TEST(ServerGroupCommitTest, GroupedSetsAnswerLikeOneAtATime) {
  ServerFixture f;
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"ZADD", "z", "1", "m1", "2", "m2"}), ":2");
  V big_hash = {"HSET", "h"};
  for (uint64_t i = 0; i <= Keyspace::kSmallHashFields; ++i) {
    big_hash.push_back("f" + std::to_string(i));
    big_hash.push_back("v");
  }
  EXPECT_EQ(c->Cmd(big_hash), ":" + std::to_string(Keyspace::kSmallHashFields + 1));
  EXPECT_EQ(c->Cmd({"HSET", "small", "f", "v"}), ":1");
  std::string wire;
  const std::vector<V> cmds = {{"SET", "a", "1"},    {"SET", "a", "2"},  {"SET", "z", "zs"},     {"SET", "b", "1"},
                               {"GET", "a"},         {"SET", "h", "hs"}, {"set", "small", "ss"}, {"SET", "c", "v", "NX"},
                               {"SET", "c", "w"},    {"SET", "b", "3"},  {"GET", "b"},           {"SET", "c", "x", "GET"},
                               {"SET", "long", std::string(5000, 'L')}};
  for (const V& cmd : cmds) wire += Client::Encode(cmd);
  ASSERT_TRUE(c->SendRaw(wire));
  const std::vector<std::string> want = {"+OK", "+OK", "+OK", "+OK", "2", "+OK", "+OK",
                                         "+OK", "+OK", "+OK", "3",   "w",   "+OK"};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(c->Read(), want[i]) << i;
  EXPECT_EQ(c->Cmd({"GET", "z"}), "zs");
  EXPECT_EQ(c->Cmd({"GET", "h"}), "hs");
  EXPECT_EQ(c->Cmd({"GET", "small"}), "ss");
  EXPECT_EQ(c->Cmd({"GET", "c"}), "x");
  EXPECT_EQ(c->Cmd({"STRLEN", "long"}), ":5000");
  EXPECT_EQ(c->Cmd({"DBSIZE"}), ":7");
  // The members of z and h went with their SETs: the tree holds only heads.
  EXPECT_EQ(f.store().Stats().keys, 7u);
  EXPECT_TRUE(f.store().Verify().ok());
}

// GETs pipelined between grouped writes (which they end), bad GETs and
// long runs of GETs: each reply is what one command at a time gives, in
// order.
TEST(ServerGroupCommitTest, PipelinedGetsBetweenGroupsAnswerLikeOneAtATime) {
  ServerFixture f;
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"HSET", "h", "f", "v"}), ":1");
  std::vector<V> cmds = {{"SET", "a", "1"}, {"GET", "a"},      {"get", "a"},    {"SET", "a", "2"},
                         {"GET", "a"},      {"GET", "none"},   {"INCR", "n"},   {"GET", "n"},
                         {"INCR", "n"},     {"GET", "n"},      {"GET", "h"},    {"GET"},
                         {"GET", "a", "b"}, {"GET", std::string(Keyspace::kMaxUserKeyBytes + 1, 'k')},
                         {"APPEND", "a", "x"}, {"GET", "a"}};
  std::vector<std::string> want = {"+OK", "1", "1", "+OK", "2", "(nil)", ":1", "1", ":2", "2",
                                   "-WRONGTYPE Operation against a key holding the wrong kind of value",
                                   "-ERR wrong number of arguments for 'get' command",
                                   "-ERR wrong number of arguments for 'get' command",
                                   "-ERR key of " + std::to_string(Keyspace::kMaxUserKeyBytes + 1) +
                                       " bytes; the limit is " + std::to_string(Keyspace::kMaxUserKeyBytes),
                                   ":2", "2x"};
  for (int i = 0; i < 150; ++i) {
    cmds.push_back({"GET", i % 2 ? "a" : "n"});
    want.push_back(i % 2 ? "2x" : "2");
  }
  cmds.push_back({"SET", "a", "last"});
  cmds.push_back({"GET", "a"});
  want.push_back("+OK");
  want.push_back("last");
  std::string wire;
  for (const V& cmd : cmds) wire += Client::Encode(cmd);
  ASSERT_TRUE(c->SendRaw(wire));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(c->Read(), want[i]) << i;
  EXPECT_EQ(c->Cmd({"PING"}), "+PONG");
  EXPECT_TRUE(f.store().Verify().ok());
}

TEST(ServerGroupCommitTest, PipelinedSetsBeforeAuthAreRefusedAndAfterItApplied) {
  ServerOptions o;
  o.requirepass = "pw";
  ServerFixture f(o);
  auto c = f.Connect();
  ASSERT_TRUE(c->SendRaw(Client::Encode({"SET", "k", "1"}) + Client::Encode({"AUTH", "pw"}) +
                         Client::Encode({"SET", "k", "2"}) + Client::Encode({"SET", "j", "3"})));
  EXPECT_EQ(c->Read(), "-NOAUTH Authentication required.");
  EXPECT_EQ(c->Read(), "+OK");
  EXPECT_EQ(c->Read(), "+OK");
  EXPECT_EQ(c->Read(), "+OK");
  EXPECT_EQ(c->Cmd({"GET", "k"}), "2");
  EXPECT_EQ(c->Cmd({"GET", "j"}), "3");
}

// A full pool mid-group: the SETs before it are applied and answered OK,
// each later one gets its own -OOM, and the data stays consistent.
TEST(ServerGroupCommitTest, AFullPoolMidGroupAnswersOomPerSet) {
  ServerFixture f({}, 4ull << 20);
  auto c = f.Connect();
  // 8 KiB values: a 64 KiB read holds several SETs, so the pool fills
  // inside a group.
  const std::string value(8 * 1024, 'v');
  std::string wire;
  constexpr int kSets = 1000;  // 8 MiB of values: more than the pool holds
  for (int i = 0; i < kSets; ++i) wire += Client::Encode({"SET", "k" + std::to_string(i), value});
  ASSERT_TRUE(c->SendRaw(wire));
  int ok = 0;
  for (int i = 0; i < kSets; ++i) {
    std::string r = c->Read();
    if (r == "+OK") {
      EXPECT_EQ(ok, i) << "an OK after an OOM";
      ++ok;
    } else {
      EXPECT_EQ(r.substr(0, 4), "-OOM") << r;
    }
  }
  EXPECT_GT(ok, 5);
  EXPECT_LT(ok, kSets);
  for (int i = 0; i < kSets; ++i)
    ASSERT_EQ(c->Cmd({"EXISTS", "k" + std::to_string(i)}), i < ok ? ":1" : ":0") << i;
  EXPECT_TRUE(f.store().Verify().ok());
}

// Pipelined counter commands join the group commit too: each counter is
// read and rewritten under its key's lock inside the group, whose records,
// tree updates and unlinks share 3 fences, where one INCR at a time pays a
// read and 3 fences.
TEST(ServerGroupCommitTest, PipelinedCountersShareTheirFences) {
  ServerFixture f;
  auto c = f.Connect();
  constexpr int kKeys = 64;
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(c->Cmd({"SET", "n" + std::to_string(i), std::to_string(i)}), "+OK");
  std::string wire;
  for (int i = 0; i < kKeys; ++i) {
    const std::string k = "n" + std::to_string(i);
    wire += Client::Encode(i % 4 == 0   ? V{"INCR", k}
                           : i % 4 == 1 ? V{"DECR", k}
                           : i % 4 == 2 ? V{"incrby", k, "1000"}
                                        : V{"DECRBY", k, "-7"});
  }
  const PersistCounters before = counters::Snapshot();
  ASSERT_TRUE(c->SendRaw(wire));
  for (int i = 0; i < kKeys; ++i) {
    const int want = i % 4 == 0 ? i + 1 : i % 4 == 1 ? i - 1 : i % 4 == 2 ? i + 1000 : i + 7;
    ASSERT_EQ(c->Read(), ":" + std::to_string(want)) << i;
  }
  const PersistCounters cost = counters::Snapshot() - before;
  // As for SETs: one group is 3 fences, a read split in a few places adds
  // 3 per extra group; one at a time: 3 x 64 = 192.
  EXPECT_LE(cost.fences, 3 * 8u) << cost.ToString();
  EXPECT_GE(cost.fences, 3u) << cost.ToString();
  EXPECT_EQ(c->Cmd({"GET", "n2"}), "1002");
  EXPECT_NE(c->Cmd({"INFO", "stats"}).find("total_commands_processed:" + std::to_string(2 * kKeys + 2)),
            std::string::npos);
  EXPECT_TRUE(f.store().Verify().ok());
}

// Counters in a group answer exactly as one at a time: a repeated key (or
// a SET of it) ends the group, so each sees the one before; a value that
// is not an integer, a hash, a sorted set, an overflow or a bad delta
// leaves the group and gets Execute's error, in order; reads see the
// writes pipelined before them.
TEST(ServerGroupCommitTest, GroupedCountersAnswerLikeOneAtATime) {
  ServerFixture f;
  auto c = f.Connect();
  EXPECT_EQ(c->Cmd({"SET", "text", "abc"}), "+OK");
  EXPECT_EQ(c->Cmd({"SET", "padded", "01"}), "+OK");
  EXPECT_EQ(c->Cmd({"SET", "max", "9223372036854775807"}), "+OK");
  EXPECT_EQ(c->Cmd({"HSET", "h", "f", "1"}), ":1");
  EXPECT_EQ(c->Cmd({"ZADD", "z", "1", "m"}), ":1");
  const std::vector<V> cmds = {
      {"SET", "a", "5"},     {"INCR", "a"},        {"INCR", "a"},          {"INCR", "fresh"},
      {"INCR", "text"},      {"INCR", "h"},        {"DECR", "z"},          {"INCRBY", "max", "1"},
      {"INCR", "padded"},    {"DECR", "minus"},    {"DECRBY", "d", "-9223372036854775808"},
      {"INCRBY", "x", "1x"}, {"GET", "a"},         {"incrby", "a", "-10"}, {"SET", "fresh", "40"},
      {"INCRBY", "fresh", "2"}, {"GET", "fresh"},  {"DECRBY", "y", "3"},   {"INCR", "max"}};
  std::string wire;
  for (const V& cmd : cmds) wire += Client::Encode(cmd);
  ASSERT_TRUE(c->SendRaw(wire));
  const std::string not_int = "-ERR value is not an integer or out of range";
  const std::string wrong = "-WRONGTYPE Operation against a key holding the wrong kind of value";
  const std::vector<std::string> want = {
      "+OK",   ":6",  ":7",    ":1",    not_int, wrong, wrong, "-ERR increment or decrement would overflow",
      not_int, ":-1", not_int, not_int, "7",     ":-3", "+OK", ":42", "42", ":-3",
      "-ERR increment or decrement would overflow"};
  ASSERT_EQ(want.size(), cmds.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(c->Read(), want[i]) << i;
  EXPECT_EQ(c->Cmd({"GET", "text"}), "abc");
  EXPECT_EQ(c->Cmd({"HGET", "h", "f"}), "1");
  EXPECT_EQ(c->Cmd({"ZSCORE", "z", "m"}), "1");
  EXPECT_EQ(c->Cmd({"GET", "d"}), "(nil)");
  EXPECT_TRUE(f.store().Verify().ok());
}

TEST(ServerTest, ShutdownStopsTheServer) {
  ServerFixture f;
  auto c = f.Connect();
  ASSERT_TRUE(c->Send({"SHUTDOWN"}));
  f.server().Wait();  // returns because SHUTDOWN stopped every loop
  EXPECT_TRUE(f.server().shutdown_by_client());
}

}  // namespace
}  // namespace pmtree::server
