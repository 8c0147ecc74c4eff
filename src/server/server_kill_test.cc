// SPDX-License-Identifier: Apache-2.0
//
// Acknowledged writes survive kill -9: `pmtree serve` runs as a child
// process on a pool file under /dev/shm; one client writes strings, hashes
// sorted-set members and MULTI/EXEC transactions one acknowledged command at
// a time while another
// streams pipelined SETs; the server is SIGKILLed mid-stream, restarted on
// the same pool, and every write that was acknowledged must be there.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "server/test_client.h"
#include "testutil.h"

namespace pmtree::server {
namespace {

using testing::Client;

#ifdef PMTREE_CLI

// A `pmtree serve` child on an ephemeral port; its port is read from the
// "ready on 127.0.0.1:<port>" line it prints on stderr.
class ServeProcess {
 public:
  explicit ServeProcess(const std::string& pool) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 2);
      execl(PMTREE_CLI, "pmtree", "serve", "--pool", pool.c_str(), "--port", "0", "--threads", "2", "--pool-size",
            "256M", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    err_fd_ = fds[0];
    std::string log;
    char buf[512];
    ssize_t n;
    while ((n = read(err_fd_, buf, sizeof buf)) > 0) {
      log.append(buf, static_cast<size_t>(n));
      size_t at = log.find("ready on 127.0.0.1:");
      if (at != std::string::npos && log.find('\n', at) != std::string::npos) {
        port_ = std::atoi(log.c_str() + at + 19);
        break;
      }
    }
    log_ = log;
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (err_fd_ >= 0) close(err_fd_);
  }
  int port() const { return port_; }
  const std::string& log() const { return log_; }
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Waits for the process to exit by itself; its exit status.
  int Join() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  int port_ = 0;
  std::string log_;
};

TEST(ServerKillTest, AcknowledgedWritesSurviveKill9) {
  const std::string pool = testutil::TempPoolPath("kv");
  unlink(pool.c_str());
  constexpr int kRounds = 300;
  std::atomic<int64_t> streamed_acks{0};
  {
    ServeProcess serve(pool);
    ASSERT_GT(serve.port(), 0) << serve.log();
    Client a(serve.port());
    ASSERT_TRUE(a.connected());
    // The streaming client: pipelines of 100 SETs, counting the replies it
    // got; replies come in order, so the acknowledged SETs are a prefix.
    std::thread stream([&] {
      Client b(serve.port());
      for (int64_t j = 0; j < 1000000; j += 100) {  // a safety cap: the kill comes first
        std::string wire;
        for (int64_t k = j; k < j + 100; ++k)
          wire += Client::Encode({"SET", "b:" + std::to_string(k), "v" + std::to_string(k)});
        if (!b.SendRaw(wire)) return;
        for (int k = 0; k < 100; ++k) {
          if (b.Read() != "+OK") return;
          streamed_acks.fetch_add(1);
        }
      }
    });
    for (int i = 0; i < kRounds; ++i) {
      std::string id = std::to_string(i);
      ASSERT_EQ(a.Cmd({"SET", "a:" + id, "value" + id}), "+OK");
      ASSERT_EQ(a.Cmd({"HSET", "h:" + id, "f", id, "g", "x"}), ":2");
      ASSERT_EQ(a.Cmd({"ZADD", "z", id, "m" + id}), ":1");
      ASSERT_EQ(a.Cmd({"INCR", "counter"}), ":" + std::to_string(i + 1));
      ASSERT_EQ(a.Cmd({"MULTI"}), "+OK");
      ASSERT_EQ(a.Cmd({"SET", "t:" + id, id}), "+QUEUED");
      ASSERT_EQ(a.Cmd({"ZADD", "tz", id, id}), "+QUEUED");
      ASSERT_EQ(a.Cmd({"EXEC"}), "[+OK, :1]");
    }
    serve.Kill();  // mid-stream: the streaming client has writes in flight
    stream.join();
  }
  ASSERT_GT(streamed_acks.load(), 0);
  std::fprintf(stderr, "kill test: %d rounds and %lld streamed SETs acknowledged before SIGKILL\n", kRounds,
               static_cast<long long>(streamed_acks.load()));
  ServeProcess again(pool);
  ASSERT_GT(again.port(), 0) << again.log();
  EXPECT_NE(again.log().find("recovered after a crash"), std::string::npos) << again.log();
  Client c(again.port());
  for (int i = 0; i < kRounds; ++i) {
    std::string id = std::to_string(i);
    ASSERT_EQ(c.Cmd({"GET", "a:" + id}), "value" + id);
    ASSERT_EQ(c.Cmd({"HGETALL", "h:" + id}), "[f, " + id + ", g, x]");
    ASSERT_EQ(c.Cmd({"ZSCORE", "z", "m" + id}), id);
    ASSERT_EQ(c.Cmd({"GET", "t:" + id}), id);
    ASSERT_EQ(c.Cmd({"ZSCORE", "tz", id}), id);
  }
  EXPECT_EQ(c.Cmd({"ZCARD", "z"}), ":" + std::to_string(kRounds));
  EXPECT_EQ(c.Cmd({"GET", "counter"}), std::to_string(kRounds));
  for (int64_t j = 0; j < streamed_acks.load(); ++j)
    ASSERT_EQ(c.Cmd({"GET", "b:" + std::to_string(j)}), "v" + std::to_string(j)) << "acknowledged SET " << j;
  // SHUTDOWN closes cleanly: exit 0, and the next start needs no recovery.
  ASSERT_TRUE(c.Send({"SHUTDOWN"}));
  EXPECT_EQ(c.Read(), "(eof)");
  EXPECT_EQ(again.Join(), 0);
  {
    ServeProcess third(pool);
    ASSERT_GT(third.port(), 0) << third.log();
    EXPECT_EQ(third.log().find("recovered"), std::string::npos) << third.log();
    EXPECT_EQ(Client(third.port()).Cmd({"GET", "a:0"}), "value0");
  }
  unlink(pool.c_str());
  unlink((pool + ".creating").c_str());
}

// FLUSHALL replaces the pool file (kv::Store::Clear, a rename): after a
// SIGKILL the restarted server has the writes acknowledged after the
// FLUSHALL and none from before it, and no leftover file beside the pool.
TEST(ServerKillTest, AFlushAllAndTheWritesAfterItSurviveKill9) {
  const std::string pool = testutil::TempPoolPath("kv");
  unlink(pool.c_str());
  {
    ServeProcess serve(pool);
    ASSERT_GT(serve.port(), 0) << serve.log();
    Client a(serve.port());
    std::string wire;
    for (int i = 0; i < 3000; ++i) wire += Client::Encode({"SET", "old:" + std::to_string(i), "v"});
    ASSERT_TRUE(a.SendRaw(wire));
    for (int i = 0; i < 3000; ++i) ASSERT_EQ(a.Read(), "+OK");
    ASSERT_EQ(a.Cmd({"HSET", "oldh", "f", "1"}), ":1");
    ASSERT_EQ(a.Cmd({"FLUSHALL"}), "+OK");
    for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Cmd({"SET", "new:" + std::to_string(i), std::to_string(i)}), "+OK");
    ASSERT_EQ(a.Cmd({"HSET", "newh", "f", "2"}), ":1");
    serve.Kill();
  }
  EXPECT_NE(access((pool + ".creating").c_str(), F_OK), 0);
  ServeProcess again(pool);
  ASSERT_GT(again.port(), 0) << again.log();
  Client c(again.port());
  EXPECT_EQ(c.Cmd({"DBSIZE"}), ":101");
  EXPECT_EQ(c.Cmd({"GET", "old:0"}), "(nil)");
  EXPECT_EQ(c.Cmd({"HGETALL", "oldh"}), "[]");
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c.Cmd({"GET", "new:" + std::to_string(i)}), std::to_string(i));
  EXPECT_EQ(c.Cmd({"HGET", "newh", "f"}), "2");
  again.Kill();
  unlink(pool.c_str());
  unlink((pool + ".creating").c_str());
}

// SIGKILL during a pipelined stream of MULTI/EXECs of hash writes: each
// transaction is whole or absent after restart.  Transaction i writes field
// n = i and field f<i % 90> = i into the hashes ha, hb, hc (they grow past
// kSmallHashFields, so one of them converts to a large hash inside a
// transaction) and creates the hash t:<i>.  After recovery ha, hb and hc are
// equal, n is the last transaction that committed (at least the last one
// acknowledged), and t:<j> exists exactly for j <= n.
TEST(ServerKillTest, HashTransactionsAreWholeOrAbsentAfterKill9) {
  const std::string pool = testutil::TempPoolPath("kv");
  unlink(pool.c_str());
  constexpr int kPerPipeline = 8;
  int64_t next = 0;  // the next transaction to send
  auto txn = [](int64_t i) {
    std::string id = std::to_string(i), f = "f" + std::to_string(i % 90);
    std::string wire = Client::Encode({"MULTI"});
    for (const char* h : {"ha", "hb", "hc"}) wire += Client::Encode({"HSET", h, "n", id, f, id});
    wire += Client::Encode({"HSET", "t:" + id, "a", id}) + Client::Encode({"EXEC"});
    return wire;
  };
  int64_t acked = -1;  // the last transaction acknowledged
  constexpr int kKills = 3;
  for (int round = 0; round <= kKills; ++round) {
    ServeProcess serve(pool);
    ASSERT_GT(serve.port(), 0) << serve.log();
    Client c(serve.port());
    // Check what the previous kill left, then go on from there.
    if (round > 0) {
      EXPECT_NE(serve.log().find("recovered after a crash"), std::string::npos) << serve.log();
      std::string all = c.Cmd({"HGETALL", "ha"});
      ASSERT_EQ(c.Cmd({"HGETALL", "hb"}), all);
      ASSERT_EQ(c.Cmd({"HGETALL", "hc"}), all);
      int64_t n = std::stoll(c.Cmd({"HGET", "ha", "n"}));
      ASSERT_GE(n, acked);
      ASSERT_LT(n, next);
      for (int64_t j = std::max<int64_t>(0, n - 89); j <= n; ++j)
        ASSERT_EQ(c.Cmd({"HGET", "ha", "f" + std::to_string(j % 90)}), std::to_string(j));
      for (int64_t j = 0; j < next; ++j)
        ASSERT_EQ(c.Cmd({"EXISTS", "t:" + std::to_string(j)}), j <= n ? ":1" : ":0") << "j " << j << ", n " << n;
      std::fprintf(stderr, "kill %d: %lld transactions acknowledged, %lld committed, %lld sent\n", round,
                   static_cast<long long>(acked + 1), static_cast<long long>(n + 1), static_cast<long long>(next));
      next = n + 1;
    }
    if (round == kKills) break;
    // A sender thread pipelines transactions without waiting; this thread
    // reads the replies and kills the server after `target` of them, while
    // the sender is still streaming.
    const int64_t first = next, target = 150 + round * 70;
    std::atomic<int64_t> sent{first};
    std::thread sender([&] {
      for (int64_t i = first; i < first + 100000; i += kPerPipeline) {  // a cap: the kill comes first
        std::string wire;
        for (int k = 0; k < kPerPipeline; ++k) wire += txn(i + k);
        sent.store(i + kPerPipeline);  // before the send: a partly sent pipeline counts as sent
        if (!c.SendRaw(wire)) return;
      }
    });
    auto read_acks = [&] {  // its ASSERTs return here: the kill and join below still run
      for (int64_t k = 0; k < target; ++k, ++next) {
        ASSERT_EQ(c.Read(), "+OK");
        for (int r = 0; r < 4; ++r) ASSERT_EQ(c.Read(), "+QUEUED");
        std::string e = c.Read();
        ASSERT_TRUE(e.starts_with("[:") && e.ends_with(", :1]")) << e;
        acked = next;
      }
    };
    read_acks();
    serve.Kill();
    sender.join();
    ASSERT_FALSE(HasFatalFailure());
    next = sent.load();  // each committed or not
  }
  unlink(pool.c_str());
  unlink((pool + ".creating").c_str());
}

TEST(ServeCliTest, BadOptionsExitTwoWithAMessage) {
  const std::string pool = testutil::TempPoolPath("kv");
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"serve", "--pool is required"},
      {"serve --pool " + pool + " --port 70000", "not in range"},
      {"serve --pool " + pool + " --threads -1", "not in range"},
      {"serve --pool " + pool + " --pool-size 16M --bind 'not an address' --port 0", "is not an IPv4 address"},
      {"serve --pool " + pool + " --pool-size 16M --tree nosuchtree --port 0", "nosuchtree"},
  };
  for (const auto& c : cases) {
    const testutil::CliRun r = testutil::RunCli(c.args);
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << ": " << r.out;
  }
  unlink(pool.c_str());
  unlink((pool + ".creating").c_str());
}

#else

TEST(ServerKillTest, AcknowledgedWritesSurviveKill9) { GTEST_SKIP() << "built without the pmtree CLI"; }
TEST(ServerKillTest, AFlushAllAndTheWritesAfterItSurviveKill9) { GTEST_SKIP() << "built without the pmtree CLI"; }

#endif

}  // namespace
}  // namespace pmtree::server
