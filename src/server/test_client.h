// SPDX-License-Identifier: Apache-2.0
//
// A tiny blocking RESP client for the server tests, and an in-process server
// fixture on 127.0.0.1 port 0.  Replies are rendered as short strings:
// "+OK", "-ERR ...", ":5", the bulk's bytes, "(nil)", "[a, b]".

#ifndef PMTREE_SERVER_TEST_CLIENT_H_
#define PMTREE_SERVER_TEST_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/server.h"

namespace pmtree::server::testing {

class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd_);
      fd_ = -1;
      return;
    }
    // A guard against a hung test, not a synchronisation: a healthy server
    // answers long before it.
    timeval tv{60, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  static std::string Encode(const std::vector<std::string>& args) {
    std::string w = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) w += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    return w;
  }
  bool SendRaw(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool Send(const std::vector<std::string>& args) { return SendRaw(Encode(args)); }

  // The next reply, rendered; "(eof)" when the server closed the connection.
  std::string Read() {
    std::string line;
    if (!ReadLine(&line)) return "(eof)";
    char t = line.empty() ? '?' : line[0];
    std::string body = line.substr(1);
    if (t == '+' || t == '-' || t == ':') return std::string(1, t) + body;
    if (t == '$') {
      long n = std::stol(body);
      if (n < 0) return "(nil)";
      std::string data;
      if (!ReadN(static_cast<size_t>(n) + 2, &data)) return "(eof)";
      return data.substr(0, static_cast<size_t>(n));
    }
    if (t == '*') {
      long n = std::stol(body);
      if (n < 0) return "(nil)";
      std::string r = "[";
      for (long i = 0; i < n; ++i) r += (i ? ", " : "") + Read();
      return r + "]";
    }
    return "(bad reply '" + line + "')";
  }
  // A replication payload: "$<len>\r\n" and len bytes without a trailing
  // CRLF (an RDB image after +FULLRESYNC); "(eof)" on a short read.
  std::string ReadPayload() {
    std::string line, data;
    if (!ReadLine(&line) || line.empty() || line[0] != '$') return "(eof)";
    if (!ReadN(std::stoul(line.substr(1)), &data)) return "(eof)";
    return data;
  }
  // Whatever the client has buffered and not yet parsed, then cleared.
  std::string TakeBuffered() { return std::exchange(buf_, {}); }
  // Sends one command and reads its reply.
  std::string Cmd(const std::vector<std::string>& args) {
    if (!Send(args)) return "(send failed)";
    return Read();
  }

 private:
  bool Fill() {
    char tmp[65536];
    ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  bool ReadLine(std::string* line) {
    size_t nl;
    while ((nl = buf_.find("\r\n")) == std::string::npos)
      if (!Fill()) return false;
    *line = buf_.substr(0, nl);
    buf_.erase(0, nl + 2);
    return true;
  }
  bool ReadN(size_t n, std::string* out) {
    while (buf_.size() < n)
      if (!Fill()) return false;
    *out = buf_.substr(0, n);
    buf_.erase(0, n);
    return true;
  }

  int fd_ = -1;
  std::string buf_;
};

// A store in anonymous memory (or a file) served on an ephemeral port.
class ServerFixture {
 public:
  // before_publish: kv::Options::testing_before_publish (a test holds writers there).
  explicit ServerFixture(ServerOptions options = {}, uint64_t pool_size = 64ull << 20, std::string path = "",
                         std::function<void(uint64_t)> before_publish = nullptr) {
    kv::Options o;
    o.pool_size = pool_size;
    o.testing_before_publish = std::move(before_publish);
    auto s = kv::Store::Open(path, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return;
    store_ = std::move(*s);
    options.port = 0;
    if (options.threads == 0) options.threads = 2;
    server_ = std::make_unique<Server>(store_.get(), options);
    Status st = server_->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  ~ServerFixture() {
    server_.reset();
    if (store_) {
      EXPECT_TRUE(store_->Close().ok());
    }
  }
  int port() const { return server_->port(); }
  Server& server() { return *server_; }
  kv::Store& store() { return *store_; }
  std::unique_ptr<Client> Connect() { return std::make_unique<Client>(port()); }

 private:
  std::unique_ptr<kv::Store> store_;
  std::unique_ptr<Server> server_;
};

}  // namespace pmtree::server::testing

#endif  // PMTREE_SERVER_TEST_CLIENT_H_
