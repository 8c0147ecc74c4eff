// SPDX-License-Identifier: Apache-2.0
//
// Replication, replica side: the thread that follows a master (see
// replication.h, REPLICA SIDE).  Blocking socket I/O on a thread of its own,
// with short poll timeouts so REPLICAOF NO ONE and shutdown stop it promptly.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>

#include "server/rdb.h"
#include "server/replication.h"
#include "server/resp.h"

namespace pmtree::server {
namespace {

constexpr int kPollMs = 100;            // how often a blocked read checks link_stop_
constexpr int64_t kAckPeriodMs = 1000;  // REPLCONF ACK, as Redis replicas
constexpr int64_t kHandshakeTimeoutMs = 60000;  // Redis's repl-timeout

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool IsLower(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != lower[i]) return false;
  return true;
}

std::string Command(const std::vector<std::string>& args) {
  std::string out;
  AppendArray(&out, static_cast<int64_t>(args.size()));
  for (const auto& a : args) AppendBulk(&out, a);
  return out;
}

}  // namespace

// One connection to the master: a socket and its unparsed input.
class Replication::MasterConn {
 public:
  MasterConn(Replication* r) : r_(r) {}
  ~MasterConn() {
    if (fd_ >= 0) close(fd_);
  }
  Status Connect(const std::string& host, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    std::string where = host + ":" + std::to_string(port);
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr)
      return Status::IoError("replica: cannot resolve master " + where);
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{2, 0};  // bounds connect()
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc = connect(fd_, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc != 0) return Status::IoError("replica: cannot connect to master " + where + ": " + std::strerror(errno));
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return Status::Ok();
  }
  Status Send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return Status::IoError("replica: sending to the master failed");
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return Status::Ok();
  }
  // Reads what arrives within kPollMs into buf: 1 = bytes, 0 = nothing yet,
  // an error when the link is closed or being stopped.
  Result<int> Fill() {
    if (r_->link_stop_.load()) return Status::Busy("replica: stopping");
    pollfd p{fd_, POLLIN, 0};
    int rc = poll(&p, 1, kPollMs);
    if (rc == 0) return 0;
    char tmp[64 * 1024];
    ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return Status::IoError("replica: the master closed the connection");
    buf.append(tmp, static_cast<size_t>(n));
    r_->link_last_io_ms_.store(NowMs());
    return 1;
  }
  // A reply line (without CRLF), skipping the bare newlines a master sends
  // as keep-alives while it prepares an RDB.
  Status Line(std::string* line) {
    int64_t deadline = NowMs() + kHandshakeTimeoutMs;
    while (true) {
      while (!buf.empty() && buf[0] == '\n') buf.erase(0, 1);
      size_t nl = buf.find("\r\n");
      if (nl != std::string::npos) {
        *line = buf.substr(0, nl);
        buf.erase(0, nl + 2);
        return Status::Ok();
      }
      if (NowMs() > deadline) return Status::IoError("replica: the master did not answer in time");
      PMTREE_ASSIGN_OR_RETURN(int got, Fill());
      (void)got;
    }
  }
  Status Exact(size_t n, std::string* out) {
    while (buf.size() < n) {
      PMTREE_ASSIGN_OR_RETURN(int got, Fill());
      (void)got;
    }
    out->assign(buf, 0, n);
    buf.erase(0, n);
    return Status::Ok();
  }
  Status Ask(const std::vector<std::string>& args, std::string* reply) {
    PMTREE_RETURN_IF_ERROR(Send(Command(args)));
    return Line(reply);
  }

  std::string buf;

 private:
  Replication* r_;
  int fd_ = -1;
};

void Replication::ReplicaOf(std::string host, int port) {
  std::lock_guard<std::mutex> l(link_mu_);
  StopMasterLink();
  gate_.Lock();  // active_ changes only under the exclusive gate (WriteGuard reads it shared)
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    master_host_ = std::move(host);
    master_port_ = port;
    if (!active_) {  // a replica keeps a backlog from the start: its replicas resume from it
      active_ = true;
      backlog_.assign(options_.backlog_size, '\0');
    }
  }
  gate_.Unlock();
  is_replica_.store(true);
  link_stop_.store(false);
  link_thread_ = std::thread([this] { MasterLoop(); });
}

void Replication::ReplicaOfNoOne() {
  std::lock_guard<std::mutex> l(link_mu_);
  StopMasterLink();
  if (!is_replica_.exchange(false)) return;
  std::lock_guard<std::mutex> lock(stream_mu_);
  // As Redis's shiftReplicationId: our replicas may still PSYNC with the
  // old id up to this offset.
  replid2_ = replid_;
  second_offset_ = static_cast<int64_t>(offset_) + 1;
  replid_ = NewReplid();
  DropReplicas();  // as Redis: they reconnect, PSYNC with the old id and learn the new one
  master_host_.clear();
  master_port_ = 0;
  std::fprintf(stderr, "pmtree serve: REPLICAOF NO ONE: now a master (replid %s, offset %llu)\n", replid_.c_str(),
               static_cast<unsigned long long>(offset_));
}

std::string Replication::ReplicaInfoLines() {
  int64_t idle = (NowMs() - link_last_io_ms_.load()) / 1000;
  std::string t = "role:slave\r\nmaster_host:" + master_host_ + "\r\nmaster_port:" + std::to_string(master_port_) +
                  "\r\nmaster_link_status:" + (link_up_.load() ? "up" : "down") +
                  "\r\nmaster_last_io_seconds_ago:" + std::to_string(link_up_.load() ? idle : -1) +
                  "\r\nmaster_sync_in_progress:0\r\nslave_read_repl_offset:" + std::to_string(offset_) +
                  "\r\nslave_repl_offset:" + std::to_string(offset_) +
                  "\r\nslave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\n";
  return t;
}

void Replication::StopMasterLink() {
  link_stop_.store(true);
  if (link_thread_.joinable()) link_thread_.join();
  link_up_.store(false);
}

void Replication::MasterLoop() {
  std::string host;
  int port;
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    host = master_host_;
    port = master_port_;
  }
  while (!link_stop_.load()) {
    MasterConn conn(this);
    Status s = conn.Connect(host, port);
    if (s.ok()) s = SyncWithMaster(conn);
    if (s.ok()) s = FollowStream(conn);
    link_up_.store(false);
    if (link_stop_.load()) break;
    std::fprintf(stderr, "pmtree serve: replica of %s:%d: %s; retrying in 1 s\n", host.c_str(), port,
                 s.ToString().c_str());
    for (int i = 0; i < 1000 / kPollMs && !link_stop_.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
  }
}

// The handshake, then +CONTINUE or a full resync (the RDB loaded).
Status Replication::SyncWithMaster(MasterConn& conn) {
  std::string reply;
  PMTREE_RETURN_IF_ERROR(conn.Ask({"PING"}, &reply));
  if (reply != "+PONG" && !reply.starts_with("-NOAUTH"))
    return Status::IoError("replica: the master answered PING with '" + reply.substr(0, 80) + "'");
  PMTREE_RETURN_IF_ERROR(conn.Ask({"REPLCONF", "listening-port", std::to_string(server_->port)}, &reply));
  // No "capa eof": the RDB comes as $<len>, the one form LoadRdb reads.
  PMTREE_RETURN_IF_ERROR(conn.Ask({"REPLCONF", "capa", "psync2"}, &reply));
  std::string id = "?", from = "-1";
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    if (synced_) {
      id = replid_;
      from = std::to_string(offset_ + 1);
    }
  }
  PMTREE_RETURN_IF_ERROR(conn.Ask({"PSYNC", id, from}, &reply));
  if (reply.starts_with("+CONTINUE")) {
    std::lock_guard<std::mutex> lock(stream_mu_);
    std::string new_id = reply.size() > 10 ? reply.substr(10, 40) : replid_;
    if (new_id != replid_) {  // the master was promoted: keep the old id for our replicas
      replid2_ = replid_;
      second_offset_ = static_cast<int64_t>(offset_) + 1;
      replid_ = new_id;
    }
    std::fprintf(stderr, "pmtree serve: replica: partial resync from offset %s\n", from.c_str());
    link_up_.store(true);
    return Status::Ok();
  }
  if (!reply.starts_with("+FULLRESYNC ") || reply.size() < 12 + 40 + 2)
    return Status::IoError("replica: the master answered PSYNC with '" + reply.substr(0, 80) + "'");
  std::string master_id = reply.substr(12, 40);
  uint64_t at = std::strtoull(reply.c_str() + 53, nullptr, 10);
  std::string header, rdb;
  PMTREE_RETURN_IF_ERROR(conn.Line(&header));
  if (header.empty() || header[0] != '$' || header.starts_with("$EOF:"))
    return Status::IoError("replica: expected $<length> before the RDB, got '" + header.substr(0, 80) + "'");
  PMTREE_RETURN_IF_ERROR(conn.Exact(std::strtoull(header.c_str() + 1, nullptr, 10), &rdb));
  PMTREE_RETURN_IF_ERROR(LoadRdb(rdb, master_id, at));
  link_up_.store(true);
  return Status::Ok();
}

// FLUSHALL, then every key of the RDB, with the gate exclusive: no write,
// no full sync of our own replicas, sees a half-loaded data set.
Status Replication::LoadRdb(std::string_view rdb, const std::string& replid, uint64_t offset) {
  Keyspace& ks = *server_->keyspace;
  uint64_t keys = 0;
  Status s;
  // The world stops for the emptying alone (world, then gate: commands.h);
  // the gate stays exclusive for the load.
  RunStopped(*server_, [&] {
    gate_.Lock();
    s = ks.FlushAll(StoreQuiescent(*server_));
  });
  RdbInfo info;
  if (s.ok()) {
    s = ReadRdb(rdb, &info, [&](RdbEntry& e) {
      ++keys;
      int64_t n = 0;
      bool applied = false;
      switch (e.type) {
        case RdbType::kString:
          return ks.Set(e.key, e.value, Keyspace::SetCondition::kAlways, &applied);
        case RdbType::kHash: {
          kv::FieldMap fields(e.fields.begin(), e.fields.end());
          return ks.HSet(e.key, fields, &n);
        }
        case RdbType::kZset2: {
          std::vector<std::pair<double, std::string>> members;
          for (auto& [m, score] : e.members) members.emplace_back(score, std::move(m));
          return ks.ZAdd(e.key, members, &n);
        }
      }
      return Status::Ok();
    });
  }
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    // Our replicas followed the old stream: they must resync (as Redis).
    DropReplicas();
    replid_ = replid;
    replid2_ = std::string(40, '0');
    second_offset_ = -1;
    offset_ = offset;
    backlog_pos_ = 0;
    backlog_histlen_ = 0;
    synced_ = s.ok();
  }
  gate_.Unlock();
  if (!s.ok()) {
    std::fprintf(stderr, "pmtree serve: replica: the master's RDB was not loaded (the pool was emptied): %s\n",
                 s.ToString().c_str());
    return s;
  }
  std::fprintf(stderr, "pmtree serve: replica: full resync: %llu keys loaded, %zu RDB bytes, offset %llu\n",
               static_cast<unsigned long long>(keys), rdb.size(), static_cast<unsigned long long>(offset));
  return Status::Ok();
}

// Applies the master's commands in order through the command handlers and
// proxies each command's exact bytes to our own stream.
Status Replication::FollowStream(MasterConn& conn) {
  ClientState master;
  master.is_master_link = true;
  master.authenticated = true;
  master.peer = "master";
  RespParser parser;
  std::vector<std::string> args;
  std::string discard;
  int64_t next_ack = 0;
  size_t pos = 0;  // conn.buf[0, pos) is parsed; the command being read starts at 0
  while (true) {
    if (NowMs() >= next_ack) {
      next_ack = NowMs() + kAckPeriodMs;
      PMTREE_RETURN_IF_ERROR(conn.Send(Command({"REPLCONF", "ACK", std::to_string(master_offset())})));
    }
    auto outcome = parser.Parse(conn.buf, &pos, &args);
    if (outcome == RespParser::Outcome::kError)
      return Status::Corruption("replica: the master's stream does not parse: " + parser.error());
    if (outcome == RespParser::Outcome::kNeedMore) {
      PMTREE_ASSIGN_OR_RETURN(int got, conn.Fill());  // keeps the partial command's bytes for the proxy
      (void)got;
      continue;
    }
    bool getack = args.size() >= 2 && IsLower(args[0], "replconf") && IsLower(args[1], "getack");
    auto apply = [&] {
      gate_.LockShared();
      if (!getack) {
        discard.clear();
        Execute(*server_, master, args, &discard);
        // The master applied it, so an error here (a full pool) is a
        // divergence: say so loudly; the stream goes on, as Redis's replicas do.
        if (!discard.empty() && discard[0] == '-')
          std::fprintf(stderr, "pmtree serve: replica: the master's %s failed here: %s", args[0].c_str(),
                       discard.c_str() + 1);
      }
      {
        std::lock_guard<std::mutex> lock(stream_mu_);
        AppendToStream(std::string_view(conn.buf).substr(0, pos));
      }
      gate_.Unlock();
    };
    // FLUSHALL stops the world before it takes the gate (commands.h: world,
    // then gate), or a loop holding its pass while it waits for the gate
    // (a sub-replica's PSYNC) would wait for us as we wait for it.
    const CommandSpec* spec = getack ? nullptr : FindCommand(args[0]);
    if (spec != nullptr && (spec->flags & kStopsWorld))
      RunStopped(*server_, apply);
    else
      apply();
    conn.buf.erase(0, pos);
    pos = 0;
    args.clear();
    if (getack) PMTREE_RETURN_IF_ERROR(conn.Send(Command({"REPLCONF", "ACK", std::to_string(master_offset())})));
  }
}

}  // namespace pmtree::server
