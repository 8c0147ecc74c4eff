// SPDX-License-Identifier: Apache-2.0
//
// The command table of `pmtree serve`: one handler per Redis command, the
// per-connection state they read and write, and the server-wide state
// (options, counters, SCAN cursors) they share.  Handlers run on the event
// loop thread of their connection and append one RESP2 reply each.
//
// Thread safety: ServerState is shared by every loop (atomics and a mutex);
// ClientState belongs to one connection, hence to one loop thread.

#ifndef PMTREE_SERVER_COMMANDS_H_
#define PMTREE_SERVER_COMMANDS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/keyspace.h"

namespace pmtree::server {

class Replication;
class ReplicaLink;

struct ClientState {
  uint64_t id = 0;
  std::string name;
  std::string peer;  // "ip:port"
  bool authenticated = false;
  bool close_after_reply = false;  // QUIT, a protocol error
  // MULTI: the queued commands, and whether one was refused while queueing
  // (EXEC then answers EXECABORT, as Redis).
  bool in_multi = false;
  bool multi_failed = false;
  std::vector<std::vector<std::string>> queued;
  // Replication (replication.h): set once the client sent REPLCONF/PSYNC;
  // wake_fd is the eventfd of the connection's event loop.
  std::shared_ptr<ReplicaLink> replica;
  int wake_fd = -1;
  bool is_master_link = false;  // the replica side applying its master's stream
  // A blocked client (WAIT): set by the command instead of a reply.  Its
  // loop stops running the client's input and, each time wake_fd fires,
  // calls it; true = the reply was appended to *out and the client resumes.
  std::function<bool(std::string* out)> unblock;
};

// SCAN cursors: Redis clients (redis-cli --scan, redis-py) treat the cursor
// as an unsigned integer, but our position is a key.  The table maps cursor
// numbers to resume keys; the oldest entries are forgotten past kMaxCursors
// (a forgotten cursor is "-ERR invalid cursor").
class CursorTable {
 public:
  static constexpr size_t kMaxCursors = 1 << 16;
  uint64_t Put(std::string key);
  std::optional<std::string> Get(uint64_t cursor);

 private:
  std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::string> keys_;
  std::deque<uint64_t> order_;
};

struct ServerState {
  Keyspace* keyspace = nullptr;
  std::string requirepass;  // empty: no AUTH needed
  std::string bind;
  int port = 0;
  int threads = 0;
  std::string pool_path;
  std::string engine;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<uint64_t> connected_clients{0};
  // Connections open on each event loop (`threads` entries; INFO clients).
  std::unique_ptr<std::atomic<uint64_t>[]> loop_clients;
  std::atomic<uint64_t> total_connections{0};
  std::atomic<uint64_t> total_commands{0};
  std::atomic<uint64_t> rejected_protocol{0};  // clients closed on a protocol error
  std::atomic<uint64_t> next_client_id{1};
  CursorTable cursors;
  Replication* replication = nullptr;  // the master side of replication (set by the server)
  // Set by the server: SHUTDOWN calls it to stop every loop.
  std::function<void()> request_shutdown;
  // Set by the server: runs fn while no event loop runs a command (each is
  // asleep or waiting at the start of its next pass), for FLUSHALL, which
  // replaces the store at once (kv::Store::Clear needs it to itself).  The
  // caller holds no replication gate (the lock order is world, then gate).
  // Inside fn a nested call just runs its argument.  Null (tests driving
  // Execute alone): commands run as they come, FLUSHALL key by key.
  std::function<void(const std::function<void()>& fn)> stop_the_world;
};

// True inside ServerState::stop_the_world's fn, on the thread running it.
bool InStoppedWorld();
// Marks this thread as running inside a stopped world (Server's
// stop_the_world sets it around fn).
class StoppedWorldScope {
 public:
  StoppedWorldScope();
  ~StoppedWorldScope();
  StoppedWorldScope(const StoppedWorldScope&) = delete;
  StoppedWorldScope& operator=(const StoppedWorldScope&) = delete;

 private:
  bool was_;
};
// Runs fn inside server.stop_the_world (at once when already inside one, or
// when the server set none).
void RunStopped(ServerState& server, const std::function<void()>& fn);
// Nothing but the calling thread can use the store now: the world is
// stopped and no replica's RDB is being built from a snapshot (builders run
// on threads of their own).  FLUSHALL then clears the store at once.
bool StoreQuiescent(ServerState& server);

// Runs one parsed command (args[0] is its name, any case) and appends its
// reply to *out.  Inside MULTI it queues instead (replying +QUEUED).
void Execute(ServerState& server, ClientState& client, std::vector<std::string>& args, std::string* out);

// ---- shared by the handler files (commands.cc, data_commands.cc) ----

struct Call {
  ServerState& server;
  ClientState& client;
  std::vector<std::string>& args;
  std::string* out;
  Txn* txn = nullptr;  // inside EXEC: the transaction the command runs in
  Keyspace& ks() { return *server.keyspace; }
};
using Handler = void (*)(Call&);

enum CommandFlag : uint32_t {
  kNoAuth = 1u << 0,   // allowed before AUTH (AUTH, HELLO, QUIT; not PING, as in Redis)
  kNoQueue = 1u << 1,  // runs even inside MULTI (MULTI, EXEC, DISCARD, QUIT)
  kInTxn = 1u << 2,    // may be queued in MULTI: runs inside EXEC's kv transaction
  kWrite = 1u << 3,    // may change the data set: streamed to replicas (replication.h)
  kStopsWorld = 1u << 4,  // runs inside ServerState::stop_the_world (FLUSHALL)
};

struct CommandSpec {
  std::string_view name;  // lower case
  Handler handler;
  int arity;  // Redis's rule: n = exactly n args (name included), -n = at least n
  uint32_t flags;
  // The key arguments, as in Redis's command table: args[first_key],
  // then every step-th up to last_key (-1 = the last argument); 0 = none.
  // Execute checks their lengths; EXEC locks them.
  int first_key = 0;
  int last_key = 0;
  int key_step = 1;
};

// The data commands (data_commands.cc).
const std::vector<CommandSpec>& DataCommands();
// PSYNC, REPLCONF (replication.cc).
const std::vector<CommandSpec>& ReplicationCommands();
// Appends "key:value\r\n" (an INFO line).
void AppendInfoLine(std::string* t, std::string_view key, std::string_view value);
// The table entry of a command name (any case); null when unknown.
const CommandSpec* FindCommand(std::string_view name);
// Appends the reply for a Status that is not OK: WRONGTYPE, -OOM for a full
// pool, Redis texts passed through, other store errors as -ERR.
void AppendStatusError(std::string* out, const Status& s);

}  // namespace pmtree::server

#endif  // PMTREE_SERVER_COMMANDS_H_
