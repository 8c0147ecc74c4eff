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

#include <atomic>
#include <thread>

#include "server/test_client.h"

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
  const std::string pool = "/dev/shm/pmtree-server-kill-" + std::to_string(getpid()) + ".kv";
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
      for (int64_t j = 0; j < 100000; j += 100) {  // bounded by work, whatever the speed
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

#else

TEST(ServerKillTest, AcknowledgedWritesSurviveKill9) { GTEST_SKIP() << "built without the pmtree CLI"; }

#endif

}  // namespace
}  // namespace pmtree::server
