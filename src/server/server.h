// SPDX-License-Identifier: Apache-2.0
//
// Server: the TCP front end of `pmtree serve`.  It listens on one socket and
// runs one epoll event loop per thread; loop 0 accepts and deals the
// connections out round robin (an eventfd and a queue per loop), a
// connection stays on the loop it was given.  A loop reads what a socket
// has, parses every complete command (pipelining), executes each in order
// on the loop's thread and writes the replies.
//
// DURABILITY.  A write's reply is appended only after its store call
// returned, and the store's calls are durable on return (kv.h): a client
// never sees an acknowledgement that a crash can take back.
//
// VISIBILITY.  The store runs with deferred visibility (kv.h): a write
// returns before it is visible when a write with an earlier timestamp, on
// another loop, is still being installed, so no loop spins on another's
// writer.  Its reply (and every later reply of that connection) is held
// until the store's visible timestamp reaches it; the store's listener
// wakes the loop through its eventfd.  So a client never gets the reply to
// a write that a read on any connection could then miss, and replies keep
// their order per connection.
//
// BAD INPUT.  A protocol error or a query buffer past its limit gets one
// -ERR reply, then that connection alone is closed.
//
// Thread safety: Start, Stop and Wait from one controlling thread;
// RequestStop from anywhere, including a signal handler.

#ifndef PMTREE_SERVER_SERVER_H_
#define PMTREE_SERVER_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pmtree/kv.h"
#include "pmtree/status.h"
#include "server/commands.h"
#include "server/keyspace.h"
#include "server/replication.h"
#include "server/resp.h"

namespace pmtree::server {

struct ServerOptions {
  std::string bind = "127.0.0.1";
  int port = 6379;  // 0: an ephemeral port (see Server::port())
  int threads = 0;  // event loops; 0 = the machine's cores
  std::string requirepass;  // empty: no AUTH
  RespLimits limits;
  // A client whose unparsed input or unsent replies exceed this is closed.
  uint64_t max_client_buffer = 256ull << 20;
  // Shown by INFO.
  std::string pool_path;
  // One stderr line per client closed for bad input.
  bool log_rejected_clients = true;
  ReplicationOptions replication;
};

class Server {
 public:
  Server(kv::Store* store, ServerOptions options);
  ~Server();  // stops and joins
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the loops; IoError names the address on failure.
  Status Start();
  // The bound port (after Start; useful with port 0).
  int port() const { return state_.port; }
  // Async-signal-safe: asks every loop to close its connections and return.
  void RequestStop();
  // Blocks until every loop returned (after RequestStop or SHUTDOWN).
  void Wait();
  // True when a client's SHUTDOWN stopped the server.
  bool shutdown_by_client() const { return shutdown_by_client_.load(); }
  const ServerState& state() const { return state_; }
  Replication& replication() { return *replication_; }

 private:
  class Loop;
  // Runs fn with every loop paused between passes (ServerState::stop_the_world;
  // server.cc, STOPPING THE WORLD).
  void StopTheWorld(const std::function<void()>& fn);
  static thread_local Loop* current_loop_;  // the loop this thread runs, or null
  std::mutex world_mu_;                      // one stopper at a time
  Keyspace keyspace_;
  ServerOptions options_;
  std::unique_ptr<Replication> replication_;
  ServerState state_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd every loop polls; written once to stop
  std::atomic<bool> shutdown_by_client_{false};
  bool deferring_ = false;  // Start turned the store's deferred visibility on
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::thread> threads_;
};

}  // namespace pmtree::server

#endif  // PMTREE_SERVER_SERVER_H_
