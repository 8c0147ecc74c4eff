// SPDX-License-Identifier: Apache-2.0
//
// The event loops (server.h): connections dealt out round robin, and replies
// to writes held until the store's visible timestamp reaches them while the
// loop serves other connections.  A writer is held at the store's
// testing_before_publish hook, so nothing depends on timing; the clients'
// 60 s receive timeout only stops a hung test.

#include <poll.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/test_client.h"

namespace pmtree::server::testing {
namespace {

// The counts of "pmtree_loop_clients:a,b,..." in an INFO reply.
std::vector<int> LoopClients(const std::string& info) {
  std::vector<int> n;
  const std::string tag = "pmtree_loop_clients:";
  size_t at = info.find(tag);
  if (at == std::string::npos) return n;
  std::string list = info.substr(at + tag.size(), info.find("\r\n", at) - at - tag.size());
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    n.push_back(std::stoi(list.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return n;
}

TEST(ServerThreadsTest, ABurstOfConnectionsIsSpreadEvenlyOverTheLoops) {
  ServerOptions o;
  o.threads = 3;
  ServerFixture f(o);
  constexpr int kBurst = 30;
  std::vector<std::unique_ptr<Client>> burst;
  for (int i = 0; i < kBurst; ++i) {
    burst.push_back(std::make_unique<Client>(f.port()));
    ASSERT_TRUE(burst.back()->connected());
  }
  Client probe(f.port());
  // Every connection is registered once its loop answered it.
  for (auto& c : burst) ASSERT_EQ(c->Cmd({"PING"}), "+PONG");
  std::vector<int> n = LoopClients(probe.Cmd({"INFO", "clients"}));
  ASSERT_EQ(n.size(), 3u);
  EXPECT_EQ(n[0] + n[1] + n[2], kBurst + 1);
  // Round robin: 31 connections over 3 loops are 11, 10, 10.
  EXPECT_EQ(n[0], 11);
  EXPECT_EQ(n[1], 10);
  EXPECT_EQ(n[2], 10);
  burst.clear();
}

// Holds the first write that reaches the store's publish hook.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int arrivals = 0;
  bool released = false;
  void Hook(uint64_t) {
    std::unique_lock<std::mutex> l(mu);
    ++arrivals;
    cv.notify_all();
    if (arrivals == 1) cv.wait(l, [&] { return released; });
  }
  void WaitArrivals(int n) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return arrivals >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu);
    released = true;
    cv.notify_all();
  }
};

bool Readable(const Client& c) {
  pollfd p{c.fd(), POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

TEST(ServerThreadsTest, AReplyWaitsUntilEveryEarlierWriteIsVisible) {
  Gate gate;
  ServerOptions o;
  o.threads = 2;
  ServerFixture f(o, 64ull << 20, "", [&gate](uint64_t ts) { gate.Hook(ts); });
  // Connected in order, dealt round robin: c0 and c2 on loop 0, c1 and c3 on loop 1.
  std::vector<std::unique_ptr<Client>> c;
  for (int i = 0; i < 4; ++i) {
    c.push_back(std::make_unique<Client>(f.port()));
    ASSERT_EQ(c.back()->Cmd({"PING"}), "+PONG");
  }
  ASSERT_EQ(LoopClients(c[3]->Cmd({"INFO", "clients"})), (std::vector<int>{2, 2}));

  // Loop 0's SET takes the earlier timestamp and stops before publishing
  // (a descheduled writer).
  ASSERT_TRUE(c[0]->Send({"SET", "a", "1"}));
  gate.WaitArrivals(1);
  // Loop 1's SET takes a later one, installs it and returns at once; its
  // reply, and the PING pipelined after it, must wait for "a".
  ASSERT_TRUE(c[1]->SendRaw(Client::Encode({"SET", "b", "2"}) + Client::Encode({"PING"})));
  gate.WaitArrivals(2);
  // Loop 1 goes on serving others (it finished c1's input before this).
  EXPECT_EQ(c[3]->Cmd({"PING"}), "+PONG");
  EXPECT_EQ(c[3]->Cmd({"EXISTS", "a"}), ":0");
  EXPECT_FALSE(Readable(*c[1])) << "a write was acknowledged before an earlier one was visible";

  gate.Release();
  EXPECT_EQ(c[0]->Read(), "+OK");
  EXPECT_EQ(c[1]->Read(), "+OK");  // woken by the writer that published both
  EXPECT_EQ(c[1]->Read(), "+PONG");
  EXPECT_EQ(c[2]->Cmd({"GET", "b"}), "2");
  EXPECT_EQ(c[3]->Cmd({"GET", "a"}), "1");
}

// Commands of one connection run in order: an iterating read (DBSIZE,
// SCAN, ...) pipelined after the connection's own SET must count that SET,
// although the store makes it visible only once an earlier writer on the
// other loop publishes.  Without the wait (Store::AwaitThreadTimestamp) the
// DBSIZE runs at once at the visible timestamp and answers 0.
TEST(ServerThreadsTest, AnIteratingReadSeesItsConnectionsEarlierWrites) {
  Gate gate;
  ServerOptions o;
  o.threads = 2;
  ServerFixture f(o, 64ull << 20, "", [&gate](uint64_t ts) { gate.Hook(ts); });
  std::vector<std::unique_ptr<Client>> c;
  for (int i = 0; i < 2; ++i) {
    c.push_back(std::make_unique<Client>(f.port()));
    ASSERT_EQ(c.back()->Cmd({"PING"}), "+PONG");
  }
  ASSERT_EQ(LoopClients(c[1]->Cmd({"INFO", "clients"})), (std::vector<int>{1, 1}));
  ASSERT_TRUE(c[0]->Send({"SET", "a", "1"}));  // loop 0, held before publishing
  gate.WaitArrivals(1);
  ASSERT_TRUE(c[1]->SendRaw(Client::Encode({"SET", "b", "2"}) + Client::Encode({"DBSIZE"}) +
                            Client::Encode({"SCAN", "0"})));
  gate.WaitArrivals(2);  // b installed; its DBSIZE now waits for a, not for the test
  gate.Release();
  EXPECT_EQ(c[0]->Read(), "+OK");
  EXPECT_EQ(c[1]->Read(), "+OK");
  EXPECT_EQ(c[1]->Read(), ":2");
  const std::string scan = c[1]->Read();
  EXPECT_NE(scan.find("b"), std::string::npos) << scan;
}

// FLUSHALL stops the world and replaces the store at once (Store::Clear)
// while clients on both loops write and read: every reply is one a serial
// order allows (a GET sees its SET or, after a FLUSHALL, nothing), no
// connection breaks, and the emptied store is a new one -- its tree as small
// as a fresh store's, where deleting key by key leaves lbtree's emptied
// leaves behind (docs/trees/lbtree.md, deviation 7).
TEST(ServerThreadsTest, FlushAllReplacesTheStoreWhileBothLoopsServe) {
  ServerOptions o;
  o.threads = 2;
  ServerFixture f(o);
  {
    Client load(f.port());
    std::string wire;
    for (int i = 0; i < 5000; ++i) wire += Client::Encode({"SET", "pre:" + std::to_string(i), "v"});
    ASSERT_TRUE(load.SendRaw(wire));
    for (int i = 0; i < 5000; ++i) ASSERT_EQ(load.Read(), "+OK");
  }
  constexpr int kOps = 1500, kFlushes = 20;
  std::atomic<int> bad{0};
  auto worker = [&](int t) {
    Client c(f.port());
    for (int i = 0; i < kOps; ++i) {
      const std::string k = "k:" + std::to_string(t) + ":" + std::to_string(i), v = "v" + std::to_string(i);
      if (c.Cmd({"SET", k, v}) != "+OK") ++bad;
      const std::string got = c.Cmd({"GET", k});
      if (got != v && got != "(nil)") ++bad;
      const std::string h = c.Cmd({"HSET", "h:" + std::to_string(t), "f" + std::to_string(i % 40), v});
      if (h != ":1" && h != ":0") ++bad;
      const std::string n = c.Cmd({"INCR", "n:" + std::to_string(t)});
      if (n.empty() || n[0] != ':' || std::stoll(n.substr(1)) < 1) ++bad;
    }
  };
  std::thread w0(worker, 0), w1(worker, 1);
  Client flusher(f.port());
  for (int i = 0; i < kFlushes; ++i) {
    ASSERT_EQ(flusher.Cmd({"FLUSHALL"}), "+OK");
    ASSERT_EQ(flusher.Cmd({"GET", "pre:1"}), "(nil)");
  }
  w0.join();
  w1.join();
  EXPECT_EQ(bad.load(), 0);
  ASSERT_EQ(flusher.Cmd({"FLUSHALL"}), "+OK");
  EXPECT_EQ(flusher.Cmd({"DBSIZE"}), ":0");
  f.server().RequestStop();
  f.server().Wait();
  ASSERT_TRUE(f.store().Verify().ok()) << f.store().Verify().ToString();
  auto fresh = kv::Store::Open("", kv::Options{.pool_size = 64ull << 20});
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(f.store().Stats().keys, 0u);
  EXPECT_EQ(f.store().Stats().tree_bytes, (*fresh)->Stats().tree_bytes);
  EXPECT_EQ(f.store().Stats().record_bytes, (*fresh)->Stats().record_bytes);
  ASSERT_TRUE((*fresh)->Close().ok());
}

}  // namespace
}  // namespace pmtree::server::testing
