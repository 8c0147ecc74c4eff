// SPDX-License-Identifier: Apache-2.0
//
// Command dispatch (lookup, AUTH gate, arity, key limits, MULTI queueing) and
// the connection and server commands every stock client sends: PING, ECHO,
// QUIT, HELLO, SELECT, AUTH, CLIENT, CONFIG GET, COMMAND, INFO, DBSIZE,
// FLUSHALL/FLUSHDB, SHUTDOWN, MULTI/EXEC/DISCARD.

#include "server/commands.h"

#include <malloc.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "server/replication.h"
#include "server/resp.h"

namespace pmtree::server {
namespace {

constexpr std::string_view kRedisCompatVersion = "7.0.15";  // the protocol level we answer as (docs/server.md)
constexpr std::string_view kNoAuthReply = "NOAUTH Authentication required.";

std::string Lower(std::string_view s) {
  std::string r(s);
  for (char& ch : r) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

bool PasswordMatches(std::string_view given, std::string_view want) {
  if (want.empty() || given.size() != want.size()) return false;
  unsigned diff = 0;  // no early exit: the time does not tell how much matched
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ want[i]);
  return diff == 0;
}

void PingCmd(Call& c) {
  if (c.args.size() > 2) return AppendError(c.out, "ERR wrong number of arguments for 'ping' command");
  c.args.size() == 2 ? AppendBulk(c.out, c.args[1]) : AppendSimple(c.out, "PONG");
}

void EchoCmd(Call& c) { AppendBulk(c.out, c.args[1]); }

void QuitCmd(Call& c) {
  AppendSimple(c.out, "OK");
  c.client.close_after_reply = true;
}

void SelectCmd(Call& c) {
  if (c.args[1] == "0") return AppendSimple(c.out, "OK");
  bool digits = !c.args[1].empty() && std::all_of(c.args[1].begin(), c.args[1].end(), [](char ch) {
    return std::isdigit(static_cast<unsigned char>(ch)) || ch == '-';
  });
  AppendError(c.out, digits ? "ERR DB index is out of range" : "ERR value is not an integer or out of range");
}

// AUTH [username] password; the only user is "default" (Redis's rule).
bool TryAuth(Call& c, std::string_view user, std::string_view pass) {
  if (c.server.requirepass.empty()) {
    AppendError(c.out,
                "ERR AUTH <password> called without any password configured for the default user. "
                "Are you sure your configuration is correct?");
    return false;
  }
  if (user != "default" || !PasswordMatches(pass, c.server.requirepass)) {
    AppendError(c.out, "WRONGPASS invalid username-password pair or user is disabled.");
    return false;
  }
  c.client.authenticated = true;
  return true;
}

void AuthCmd(Call& c) {
  if (c.args.size() > 3) return AppendError(c.out, "ERR syntax error");
  bool ok = c.args.size() == 2 ? TryAuth(c, "default", c.args[1]) : TryAuth(c, c.args[1], c.args[2]);
  if (ok) AppendSimple(c.out, "OK");
}

bool ValidClientName(std::string_view n) {
  return std::all_of(n.begin(), n.end(), [](char ch) { return ch > ' ' && ch <= '~'; });
}

// HELLO [protover [AUTH user pass] [SETNAME name]]: RESP2 only.
void HelloCmd(Call& c) {
  if (c.args.size() >= 2 && c.args[1] != "2")
    return AppendError(c.out, "NOPROTO unsupported protocol version");
  for (size_t i = 2; i < c.args.size(); ++i) {
    std::string opt = Lower(c.args[i]);
    if (opt == "auth" && i + 2 < c.args.size()) {
      if (!TryAuth(c, c.args[i + 1], c.args[i + 2])) return;
      i += 2;
    } else if (opt == "setname" && i + 1 < c.args.size()) {
      if (!ValidClientName(c.args[i + 1]))
        return AppendError(c.out, "ERR Client names cannot contain spaces, newlines or special characters.");
      c.client.name = c.args[++i];
    } else {
      return AppendError(c.out, "ERR Syntax error in HELLO option '" + c.args[i] + "'");
    }
  }
  if (!c.server.requirepass.empty() && !c.client.authenticated)
    return AppendError(c.out,
                       "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                       "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                       "select the RESP protocol version at the same time");
  AppendArray(c.out, 14);
  AppendBulk(c.out, "server");
  AppendBulk(c.out, "redis");
  AppendBulk(c.out, "version");
  AppendBulk(c.out, kRedisCompatVersion);
  AppendBulk(c.out, "proto");
  AppendInt(c.out, 2);
  AppendBulk(c.out, "id");
  AppendInt(c.out, static_cast<int64_t>(c.client.id));
  AppendBulk(c.out, "mode");
  AppendBulk(c.out, "standalone");
  AppendBulk(c.out, "role");
  AppendBulk(c.out, "master");
  AppendBulk(c.out, "modules");
  AppendArray(c.out, 0);
}

void ClientCmd(Call& c) {
  std::string sub = Lower(c.args[1]);
  if (sub == "setname" && c.args.size() == 3) {
    if (!ValidClientName(c.args[2]))
      return AppendError(c.out, "ERR Client names cannot contain spaces, newlines or special characters.");
    c.client.name = c.args[2];
    return AppendSimple(c.out, "OK");
  }
  if (sub == "getname" && c.args.size() == 2)
    return c.client.name.empty() ? AppendNull(c.out) : AppendBulk(c.out, c.client.name);
  if (sub == "setinfo" && c.args.size() == 4) return AppendSimple(c.out, "OK");
  if (sub == "id" && c.args.size() == 2) return AppendInt(c.out, static_cast<int64_t>(c.client.id));
  AppendError(c.out, "ERR unknown subcommand '" + c.args[1].substr(0, 128) + "'. Try CLIENT HELP.");
}

// The configuration clients ask about (redis-benchmark: save, appendonly).
// Durability does not come from a log: every write is durable on reply.
std::vector<std::pair<std::string, std::string>> ConfigValues(const ServerState& s) {
  return {{"save", ""},
          {"appendonly", "no"},
          {"appendfsync", "no"},
          {"databases", "1"},
          {"maxmemory", "0"},
          {"maxclients", "10000"},
          {"bind", s.bind},
          {"port", std::to_string(s.port)},
          {"io-threads", std::to_string(s.threads)},
          {"proto-max-bulk-len", std::to_string(kv::kMaxValueBytes)}};
}

// Glob match for CONFIG GET (the subset clients use: '*' and '?').
bool SimpleGlob(std::string_view p, std::string_view s) {
  if (p.empty()) return s.empty();
  if (p[0] == '*') {
    for (size_t i = 0; i <= s.size(); ++i)
      if (SimpleGlob(p.substr(1), s.substr(i))) return true;
    return false;
  }
  return !s.empty() && (p[0] == '?' || p[0] == s[0]) && SimpleGlob(p.substr(1), s.substr(1));
}

void ConfigCmd(Call& c) {
  std::string sub = Lower(c.args[1]);
  if (sub == "get" && c.args.size() >= 3) {
    std::vector<std::pair<std::string, std::string>> hits;
    for (const auto& kv : ConfigValues(c.server))
      for (size_t i = 2; i < c.args.size(); ++i)
        if (SimpleGlob(Lower(c.args[i]), kv.first)) {
          hits.push_back(kv);
          break;
        }
    AppendArray(c.out, static_cast<int64_t>(2 * hits.size()));
    for (const auto& [k, v] : hits) {
      AppendBulk(c.out, k);
      AppendBulk(c.out, v);
    }
    return;
  }
  if (sub == "resetstat" && c.args.size() == 2) return AppendSimple(c.out, "OK");
  if (sub == "set") return AppendError(c.out, "ERR CONFIG SET is not supported: restart pmtree serve with other options");
  AppendError(c.out, "ERR unknown subcommand '" + c.args[1].substr(0, 128) + "'. Try CONFIG HELP.");
}

const std::vector<CommandSpec>& ServerCommands();

void CommandCmd(Call& c) {
  std::string sub = c.args.size() > 1 ? Lower(c.args[1]) : "";
  size_t count = ServerCommands().size() + DataCommands().size() + ReplicationCommands().size();
  if (sub == "count") return AppendInt(c.out, static_cast<int64_t>(count));
  if (sub == "list") {
    AppendArray(c.out, static_cast<int64_t>(count));
    for (const auto* table : {&ServerCommands(), &DataCommands(), &ReplicationCommands()})
      for (const auto& spec : *table) AppendBulk(c.out, spec.name);
    return;
  }
  // COMMAND, COMMAND DOCS, COMMAND INFO: no metadata (clients fall back).
  AppendArray(c.out, 0);
}

uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long pages = 0, rss = 0;
  if (std::fscanf(f, "%llu %llu", &pages, &rss) != 2) rss = 0;
  std::fclose(f);
  return rss * 4096;
}

void InfoCmd(Call& c) {
  std::string want = c.args.size() > 1 ? Lower(c.args[1]) : "default";
  bool all = want == "default" || want == "all" || want == "everything";
  auto on = [&](std::string_view s) { return all || want == s; };
  const ServerState& s = c.server;
  auto uptime = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - s.started).count();
  std::string t;
  auto line = [&](std::string_view k, const std::string& v) { AppendInfoLine(&t, k, v); };
  if (on("server")) {
    t += "# Server\r\n";
    line("redis_version", std::string(kRedisCompatVersion));
    line("pmtree_version", "0.1.0");
    line("redis_mode", "standalone");
    line("multiplexing_api", "epoll");
    line("process_id", std::to_string(getpid()));
    line("tcp_port", std::to_string(s.port));
    line("uptime_in_seconds", std::to_string(uptime));
    line("io_threads_active", std::to_string(s.threads));
    line("pool", s.pool_path);
    line("engine", s.engine);
    t += "\r\n";
  }
  if (on("clients")) {
    t += "# Clients\r\n";
    line("connected_clients", std::to_string(s.connected_clients.load()));
    std::string per_loop;
    for (int i = 0; s.loop_clients && i < s.threads; ++i)
      per_loop += (i ? "," : "") + std::to_string(s.loop_clients[i].load());
    line("pmtree_loop_clients", per_loop);
    t += "\r\n";
  }
  if (on("memory")) {
    t += "# Memory\r\n";
    struct mallinfo2 mi = mallinfo2();
    line("used_memory", std::to_string(mi.uordblks + mi.hblkhd));
    line("used_memory_rss", std::to_string(ResidentBytes()));
    line("pool_bytes", std::to_string(c.ks().store().pool().size()));
    line("maxmemory", "0");
    t += "\r\n";
  }
  if (on("persistence")) {
    t += "# Persistence\r\n";
    line("loading", "0");
    line("durability", "every write is durable in the pool before its reply");
    line("rdb_changes_since_last_save", "0");
    line("rdb_bgsave_in_progress", "0");
    line("aof_enabled", "0");
    line("aof_rewrite_in_progress", "0");
    t += "\r\n";
  }
  if (on("stats")) {
    t += "# Stats\r\n";
    line("total_connections_received", std::to_string(s.total_connections.load()));
    line("total_commands_processed", std::to_string(s.total_commands.load()));
    line("rejected_protocol_clients", std::to_string(s.rejected_protocol.load()));
    t += "\r\n";
  }
  if (on("replication")) {
    t += "# Replication\r\n";
    t += s.replication ? s.replication->InfoLines() : "role:master\r\nconnected_slaves:0\r\n";
    t += "\r\n";
  }
  if (want == "keyspace" || want == "everything") {  // walks every key: only on request
    int64_t n = 0;
    Status st = c.ks().DbSize(&n);
    if (!st.ok()) return AppendStatusError(c.out, st);
    t += "# Keyspace\r\n";
    if (n) line("db0", "keys=" + std::to_string(n) + ",expires=0,avg_ttl=0");
    t += "\r\n";
  }
  AppendBulk(c.out, t);
}

void DbSizeCmd(Call& c) {
  int64_t n = 0;
  Status s = c.ks().DbSize(&n);
  if (!s.ok()) return AppendStatusError(c.out, s);
  AppendInt(c.out, n);
}

void FlushCmd(Call& c) {
  if (c.args.size() > 2) return AppendError(c.out, "ERR syntax error");
  if (c.args.size() == 2 && Lower(c.args[1]) != "sync" && Lower(c.args[1]) != "async")
    return AppendError(c.out, "ERR syntax error");
  Status s = c.ks().FlushAll(StoreQuiescent(c.server));
  if (!s.ok()) return AppendStatusError(c.out, s);
  AppendSimple(c.out, "OK");
}

// SHUTDOWN [NOSAVE|SAVE]: no reply (the connection closes), as Redis.
void ShutdownCmd(Call& c) {
  c.client.close_after_reply = true;
  if (c.server.request_shutdown) c.server.request_shutdown();
}

void MultiCmd(Call& c) {
  if (c.client.in_multi) return AppendError(c.out, "ERR MULTI calls can not be nested");
  c.client.in_multi = true;
  c.client.multi_failed = false;
  c.client.queued.clear();
  AppendSimple(c.out, "OK");
}

void DiscardCmd(Call& c) {
  if (!c.client.in_multi) return AppendError(c.out, "ERR DISCARD without MULTI");
  c.client.in_multi = false;
  c.client.queued.clear();
  AppendSimple(c.out, "OK");
}

void ExecCmd(Call& c);

const std::vector<CommandSpec>& ServerCommands() {
  static const std::vector<CommandSpec> kTable = {
      {"ping", PingCmd, -1, kInTxn},
      {"echo", EchoCmd, 2, kInTxn},
      {"quit", QuitCmd, -1, kNoAuth | kNoQueue},
      {"hello", HelloCmd, -1, kNoAuth | kNoQueue},
      {"auth", AuthCmd, -2, kNoAuth | kNoQueue},
      {"select", SelectCmd, 2, 0},
      {"client", ClientCmd, -2, 0},
      {"config", ConfigCmd, -2, 0},
      {"command", CommandCmd, -1, 0},
      {"info", InfoCmd, -1, 0},
      {"dbsize", DbSizeCmd, 1, 0},
      {"flushall", FlushCmd, -1, kWrite | kStopsWorld},
      {"flushdb", FlushCmd, -1, kWrite | kStopsWorld},
      {"shutdown", ShutdownCmd, -1, kNoQueue},
      {"multi", MultiCmd, 1, kNoQueue},
      {"exec", ExecCmd, 1, kNoQueue | kWrite},
      {"discard", DiscardCmd, 1, kNoQueue},
  };
  return kTable;
}

const CommandSpec* Lookup(std::string_view name) {
  static const auto* kIndex = [] {
    auto* m = new std::unordered_map<std::string, const CommandSpec*>;
    for (const auto* table : {&ServerCommands(), &DataCommands(), &ReplicationCommands()})
      for (const auto& spec : *table) (*m)[std::string(spec.name)] = &spec;
    return m;
  }();
  if (name.size() > 32) return nullptr;
  auto it = kIndex->find(Lower(name));
  return it == kIndex->end() ? nullptr : it->second;
}

// Checks a command before it runs or is queued: known, allowed, right arity,
// keys within the limit.  Writes the error reply and returns null otherwise.
const CommandSpec* Admit(ServerState& server, ClientState& client, const std::vector<std::string>& args,
                         std::string* out) {
  const CommandSpec* spec = Lookup(args[0]);
  if (spec == nullptr) {
    std::string msg = "ERR unknown command '" + args[0].substr(0, 128) + "', with args beginning with: ";
    for (size_t i = 1; i < args.size() && msg.size() < 512; ++i) msg += "'" + args[i].substr(0, 128) + "' ";
    AppendError(out, msg);
    return nullptr;
  }
  if (!server.requirepass.empty() && !client.authenticated && !(spec->flags & kNoAuth)) {
    AppendError(out, kNoAuthReply);
    return nullptr;
  }
  int n = static_cast<int>(std::min<size_t>(args.size(), 1 << 30));
  if ((spec->arity > 0 && n != spec->arity) || (spec->arity < 0 && n < -spec->arity)) {
    AppendError(out, "ERR wrong number of arguments for '" + std::string(spec->name) + "' command");
    return nullptr;
  }
  if (spec->first_key > 0) {
    int last = spec->last_key < 0 ? n - 1 : std::min(spec->last_key, n - 1);
    for (int i = spec->first_key; i <= last; i += spec->key_step)
      if (args[i].size() > Keyspace::kMaxUserKeyBytes) {
        AppendError(out, "ERR key of " + std::to_string(args[i].size()) + " bytes; the limit is " +
                             std::to_string(Keyspace::kMaxUserKeyBytes));
        return nullptr;
      }
  }
  return spec;
}

// EXEC: the queued commands run in order inside one kv::Transaction while
// EXEC holds the locks of every key they name, so no other command touches
// those keys in between, and their writes commit at once: durable together
// or (a crash, a full pool) not at all.  A command's own error (WRONGTYPE,
// not an integer) is its reply and does not stop the others, as in Redis.
void ExecCmd(Call& c) {
  if (!c.client.in_multi) return AppendError(c.out, "ERR EXEC without MULTI");
  c.client.in_multi = false;
  auto queued = std::move(c.client.queued);
  c.client.queued.clear();
  if (c.client.multi_failed)
    return AppendError(c.out, "EXECABORT Transaction discarded because of previous errors.");
  std::vector<std::string_view> keys;
  for (const auto& args : queued) {
    const CommandSpec* spec = Lookup(args[0]);
    int n = static_cast<int>(args.size());
    int last = spec->last_key < 0 ? n - 1 : std::min(spec->last_key, n - 1);
    for (int i = spec->first_key; spec->first_key > 0 && i <= last; i += spec->key_step) keys.push_back(args[i]);
  }
  Keyspace::KeyLocks locks(&c.ks(), keys);
  // The transaction's snapshot must hold the writes that released these
  // keys' locks, whose visibility may still be deferred (kv.h): else its
  // reads would miss them and its commit conflict with them.
  c.ks().store().AwaitPublished();
  // Busy comes only from a write that took no key lock (FLUSHALL): retry.
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    Txn txn(&c.ks().store());
    std::string replies;
    AppendArray(&replies, static_cast<int64_t>(queued.size()));
    for (auto& args : queued) {
      Call inner{c.server, c.client, args, &replies, &txn};
      Lookup(args[0])->handler(inner);
    }
    Status s = txn.Commit();
    if (s.ok()) {
      c.out->append(replies);
      return;
    }
    if (s.code() != Status::Code::kBusy) return AppendStatusError(c.out, s);
  }
  AppendError(c.out, "ERR EXEC aborted: the keys changed under it " + std::to_string(kAttempts) + " times");
}

}  // namespace

const CommandSpec* FindCommand(std::string_view name) { return Lookup(name); }

void AppendInfoLine(std::string* t, std::string_view key, std::string_view value) {
  t->append(key);
  t->push_back(':');
  t->append(value);
  t->append("\r\n");
}

uint64_t CursorTable::Put(std::string key) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_++;
  keys_.emplace(id, std::move(key));
  order_.push_back(id);
  while (order_.size() > kMaxCursors) {
    keys_.erase(order_.front());
    order_.pop_front();
  }
  return id;
}

std::optional<std::string> CursorTable::Get(uint64_t cursor) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(cursor);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

void AppendStatusError(std::string* out, const Status& s) {
  switch (s.code()) {
    case Status::Code::kIncompatible:  // WRONGTYPE, its own text
      return AppendError(out, s.message());
    case Status::Code::kOutOfSpace:
      return AppendError(out, "OOM command not allowed: the pool is full (" + std::string(s.message()) + ")");
    case Status::Code::kInvalidArgument: {
      std::string_view m = s.message();
      if (m.starts_with("ERR ")) return AppendError(out, m);  // a Redis text from the keyspace
      return AppendError(out, "ERR " + std::string(m));
    }
    default:
      return AppendError(out, "ERR " + s.ToString());
  }
}

void Execute(ServerState& server, ClientState& client, std::vector<std::string>& args, std::string* out) {
  server.total_commands.fetch_add(1, std::memory_order_relaxed);
  const CommandSpec* spec = Admit(server, client, args, out);
  if (spec == nullptr) {
    if (client.in_multi) client.multi_failed = true;
    return;
  }
  if (client.in_multi && !(spec->flags & kNoQueue)) {
    if (!(spec->flags & kInTxn)) {
      client.multi_failed = true;
      return AppendError(out, "ERR " + std::string(spec->name) +
                                  " is not supported inside MULTI (EXEC's atomic transaction holds the "
                                  "string and hash commands, ZADD/ZREM/ZSCORE/ZCARD, PING and ECHO)");
    }
    client.queued.push_back(std::move(args));
    return AppendSimple(out, "QUEUED");
  }
  Call call{server, client, args, out};
  auto run = [&] {
    if ((spec->flags & kWrite) && server.replication) return server.replication->ExecuteWrite(*spec, call);
    spec->handler(call);
  };
  // Before ExecuteWrite takes the replication gate: world, then gate.
  if (spec->flags & kStopsWorld) return RunStopped(server, run);
  run();
}

namespace {
thread_local bool t_in_stopped_world = false;
}  // namespace

bool InStoppedWorld() { return t_in_stopped_world; }
StoppedWorldScope::StoppedWorldScope() : was_(t_in_stopped_world) { t_in_stopped_world = true; }
StoppedWorldScope::~StoppedWorldScope() { t_in_stopped_world = was_; }

void RunStopped(ServerState& server, const std::function<void()>& fn) {
  if (InStoppedWorld() || !server.stop_the_world) return fn();
  server.stop_the_world(fn);
}

bool StoreQuiescent(ServerState& server) {
  return InStoppedWorld() && (server.replication == nullptr || !server.replication->BuildingRdb());
}

}  // namespace pmtree::server
