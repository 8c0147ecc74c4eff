// SPDX-License-Identifier: Apache-2.0
//
// `pmtree serve --pool PATH [--tree NAME] [--port N] [--bind ADDR]
// [--threads N] [--requirepass PW] [--pool-size SIZE] [--repl-backlog-size SIZE]
// [--replicaof HOST PORT]`: a Redis-protocol
// server over a key-value store (docs/server.md).  Logs to stderr; prints
// "ready" once listening.  SIGTERM, SIGINT and SHUTDOWN close the store
// cleanly (so the next start needs no recovery).

#include <atomic>
#include <csignal>
#include <cstdio>
#include <charconv>
#include <string>
#include <vector>

#include "commands.h"
#include "pmtree/kv.h"
#include "server/server.h"

namespace pmtree::cli {
namespace {

struct ServeArgs {
  std::string pool;
  std::string tree = "lbtree";
  int port = 6379;
  std::string bind = "127.0.0.1";
  int threads = 0;
  std::string requirepass;
  // A new pool's blocks are reserved at creation (PoolOptions::reserve_space:
  // no SIGBUS when the file system fills), which on /dev/shm is memory taken
  // up front: 1 GiB rather than the library's 4 GiB default.
  uint64_t pool_size = 1ull << 30;
  uint64_t repl_backlog_size = 1ull << 20;  // Redis's default
  std::vector<std::string> replicaof;       // HOST PORT, or empty
};

// The running server, for the signal handler (a lock-free atomic: safe to
// read in a handler).
std::atomic<server::Server*> g_server{nullptr};

extern "C" void OnStopSignal(int) {
  if (server::Server* s = g_server.load()) s->RequestStop();  // async-signal-safe: one write to an eventfd
}

int RunServe(const ServeArgs& a) {
  int master_port = 0;
  if (!a.replicaof.empty()) {
    const std::string& p = a.replicaof[1];
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), master_port);
    if (ec != std::errc() || end != p.data() + p.size() || master_port <= 0 || master_port > 65535) {
      std::fprintf(stderr, "pmtree serve: --replicaof: '%s' is not a port (1..65535)\n", p.c_str());
      return 2;
    }
  }
  kv::Options opts;
  opts.engine = a.tree;
  opts.pool_size = a.pool_size;
  // No persistence counters: nothing reads them here, and without a
  // BeginOperation per command their distinct-line sets stay full, so every
  // flushed line would scan them (a third of a SET's time).
  opts.pool_options.counting = false;
  // A server deletes and replaces records all day: freed blocks go to the
  // next allocation of their size (the allocator's size classes).
  opts.pool_options.allocator_size_classes = true;
  auto store = kv::Store::Open(a.pool, opts);
  if (!store.ok()) {
    std::fprintf(stderr, "pmtree serve: %s\n", store.status().ToString().c_str());
    return 2;
  }
  server::ServerOptions so;
  so.bind = a.bind;
  so.port = a.port;
  so.threads = a.threads;
  so.requirepass = a.requirepass;
  so.pool_path = a.pool;
  so.replication.backlog_size = a.repl_backlog_size;
  int rc = 0;
  {
    server::Server srv(store->get(), so);
    Status s = srv.Start();
    if (!s.ok()) {
      std::fprintf(stderr, "pmtree serve: %s\n", s.ToString().c_str());
      (void)(*store)->Close();
      return 2;
    }
    if (master_port) srv.replication().ReplicaOf(a.replicaof[0], master_port);
    g_server.store(&srv);
    struct sigaction sa{};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    const kv::StoreStats st = (*store)->Stats();
    std::fprintf(stderr, "pmtree serve: pool %s (%s, %llu entries%s), %d threads\n", a.pool.c_str(), a.tree.c_str(),
                 static_cast<unsigned long long>(st.keys), st.recovered ? ", recovered after a crash" : "",
                 srv.state().threads);
    std::fprintf(stderr, "pmtree serve: ready on %s:%d%s\n", a.bind.c_str(), srv.port(),
                 a.requirepass.empty() ? "" : " (AUTH required)");
    std::fflush(stderr);
    srv.Wait();
    g_server.store(nullptr);
    std::fprintf(stderr, "pmtree serve: stopping (%s)\n", srv.shutdown_by_client() ? "SHUTDOWN" : "signal");
  }
  Status c = (*store)->Close();
  if (!c.ok()) {
    std::fprintf(stderr, "pmtree serve: closing the store: %s\n", c.ToString().c_str());
    rc = 1;
  } else {
    std::fprintf(stderr, "pmtree serve: closed cleanly\n");
  }
  return rc;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "A Redis-protocol (RESP2) server over a key-value store pool");
  cmd->add_option("--pool", a->pool, "Store file (created when missing)")->required();
  cmd->add_option("--tree", a->tree, "Tree that indexes the keys (a registry name with byte-string keys)")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "TCP port (0 = any free port, printed in the ready line)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--bind", a->bind, "IPv4 address to listen on")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Event loops (0 = one per core)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option("--requirepass", a->requirepass, "Password clients must AUTH with before data commands");
  cmd->add_option("--pool-size", a->pool_size, "Size of a new pool file in bytes (accepts K/M/G)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--replicaof", a->replicaof, "HOST PORT: start as a read-only replica of that master")
      ->expected(2);
  cmd->add_option("--repl-backlog-size", a->repl_backlog_size,
                  "Replication backlog: how much of the write stream a reconnecting replica can resume from "
                  "(accepts K/M/G)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(uint64_t{16 << 10}, uint64_t{1} << 40))
      ->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = RunServe(*a); });
}

}  // namespace pmtree::cli
