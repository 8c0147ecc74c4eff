// SPDX-License-Identifier: Apache-2.0

#include "server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>

namespace pmtree::server {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxEvents = 128;
// Parsed input is dropped from the front of a buffer once this much of it
// is consumed (not after every command: that would be quadratic).
constexpr size_t kCompactBytes = 64 * 1024;

// At most this many pipelined writes share one group commit.
constexpr size_t kMaxGroup = 64;

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

std::string PeerName(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace

// One connection: its socket, its unparsed input, its unsent replies.
struct Connection {
  int fd = -1;
  std::string in;
  size_t in_pos = 0;  // in[0, in_pos) is parsed
  std::string out;
  size_t out_pos = 0;  // out[0, out_pos) is sent
  // HELD REPLIES: out[out_pos, ready) may be sent; out[ready, end) waits
  // until the store's visible timestamp reaches hold_ts (0 = nothing held).
  size_t ready = 0;
  uint64_t hold_ts = 0;
  RespParser parser;
  ClientState client;
  std::vector<std::string> args;
  // Pipelined SETs and counter commands awaiting their group commit:
  // group[0, grouped); the slots past it keep earlier commands' strings for
  // the parser to reuse.
  std::vector<std::vector<std::string>> group;
  size_t grouped = 0;
  uint32_t events = 0;  // the epoll interest now registered
};

// Whether `name` is `lower` (a lower-case command name), ignoring case.
bool IsCommand(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if ((name[i] | 0x20) != lower[i]) return false;
  return true;
}

// GROUP COMMIT.  The plain SETs and the counter commands (INCR, DECR,
// INCRBY, DECRBY) a client pipelines back to back, to distinct keys, are
// not run one by one: they are held in Connection::group and made durable
// together by Keyspace::WriteMany (one fence for all their records instead
// of one each; a counter is read and written under its key's lock in the
// same pass), then answered in order.  Held commands always run before the
// next command of the connection and before its replies are sent, so
// replies keep their order and none leaves before its write is durable.  A
// command that WriteMany did not apply (a sorted set or large hash to
// replace, a counter that is not one, an overflow, a full pool) runs
// through Execute, which gives its own reply.  This is the one path around
// Execute: a per-command hook there must also run for each applied command
// in RunGroup, in order, before the replies go out -- as replication's does
// (Replication::ExecuteSetGroup).
//
// GroupWriteOf says whether args is such a command and, if so, what it
// writes (*w's key and value view args).
bool GroupWriteOf(const std::vector<std::string>& args, Keyspace::GroupWrite* w) {
  if (args.size() < 2 || args.size() > 3 || args[1].size() > Keyspace::kMaxUserKeyBytes) return false;
  const std::string& name = args[0];
  w->key = args[1];
  if (args.size() == 3 && IsCommand(name, "set")) {
    // Anything Execute would refuse goes through Execute for its error reply.
    if (args[2].size() >= kv::kMaxValueBytes) return false;
    w->incr = false;
    w->value = args[2];
    return true;
  }
  w->incr = true;
  if (args.size() == 2) {
    if (IsCommand(name, "incr")) w->delta = 1;
    else if (IsCommand(name, "decr")) w->delta = -1;
    else return false;
    return true;
  }
  const bool incrby = IsCommand(name, "incrby");
  if (!incrby && !IsCommand(name, "decrby")) return false;
  int64_t d = 0;
  const std::string& a = args[2];
  auto [p, ec] = std::from_chars(a.data(), a.data() + a.size(), d);
  // Execute answers a bad delta (DECRBY's INT64_MIN too, whose negation overflows).
  if (a.empty() || ec != std::errc() || p != a.data() + a.size() || (!incrby && d == INT64_MIN)) return false;
  w->delta = incrby ? d : -d;
  return true;
}

bool Groupable(const ServerState& server, const ClientState& client, const std::vector<std::string>& args,
               Keyspace::GroupWrite* w) {
  if (client.in_multi || (!server.requirepass.empty() && !client.authenticated)) return false;
  // A replica refuses clients' writes (-READONLY, from Execute).  (Its
  // master's stream is applied by the link thread, never through here.)
  if (server.replication && server.replication->is_replica()) return false;
  return GroupWriteOf(args, w);
}

class Server::Loop {
 public:
  Loop(Server* server, int index) : server_(server), index_(index) {}
  ~Loop() {
    for (auto& [fd, c] : conns_) close(fd);
    for (auto& [fd, peer] : inbox_) close(fd);  // handed off, never registered
    if (epfd_ >= 0) close(epfd_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  Status Init() {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return Status::IoError(Errno("server: epoll_create1"));
    epoll_event ev{};
    ev.events = EPOLLIN;
    // ACCEPTING.  Loop 0 alone accepts, and deals the connections out round
    // robin (Handoff): a burst of connects spreads evenly over the loops,
    // where a listening socket in every loop (EPOLLEXCLUSIVE) woke one loop
    // that took the whole burst.
    if (index_ == 0) {
      ev.data.fd = server_->listen_fd_;
      if (epoll_ctl(epfd_, EPOLL_CTL_ADD, server_->listen_fd_, &ev) != 0)
        return Status::IoError(Errno("server: epoll_ctl(listen)"));
    }
    // never read: stays readable, so every loop sees it
    ev.data.fd = server_->stop_fd_;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, server_->stop_fd_, &ev) != 0)
      return Status::IoError(Errno("server: epoll_ctl(stop)"));
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return Status::IoError(Errno("server: eventfd"));
    ev.data.fd = wake_fd_;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) return Status::IoError(Errno("server: epoll_ctl(wake)"));
    return Status::Ok();
  }

  void Run() {
    current_loop_ = this;
    epoll_event events[kMaxEvents];
    while (true) {
      int n = epoll_wait(epfd_, events, kMaxEvents, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        std::fprintf(stderr, "pmtree serve: epoll_wait: %s\n", std::strerror(errno));
        return;
      }
      std::lock_guard<std::mutex> pass(pass_mu_);  // STOPPING THE WORLD
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == server_->stop_fd_) return;
        if (fd == wake_fd_) {
          OnWake();
          continue;
        }
        if (fd == server_->listen_fd_) {
          Accept();
          continue;
        }
        auto it = conns_.find(fd);
        if (it == conns_.end()) continue;
        Connection& c = *it->second;
        bool alive = true, read = false;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read = alive = OnReadable(c);
        if (alive && (events[i].events & EPOLLOUT)) alive = Flush(c);
        if (read)
          unsent_.push_back(fd);
        else if (alive)
          alive = UpdateInterest(c);
        if (!alive) Close(fd);
      }
      SendReplies();
      ArmHolds();
    }
  }

  // Called by the writer that advanced the store's visible timestamp (any
  // thread): wakes this loop when a reply it holds may go now.  The loop
  // stores wait_ts_ then reads the visible timestamp; the writer advances
  // it then reads wait_ts_ (both sequentially consistent), so one of them
  // sees the other: no wake-up is lost.
  void OnVisible(uint64_t visible) {
    uint64_t w = wait_ts_.load(std::memory_order_seq_cst);
    if (w == 0 || w > visible || !wait_ts_.compare_exchange_strong(w, 0, std::memory_order_seq_cst)) return;
    uint64_t one = 1;
    ssize_t r = write(wake_fd_, &one, sizeof one);
    (void)r;
  }

  // Held while the loop handles what one epoll_wait returned, not while it
  // sleeps (STOPPING THE WORLD).
  std::mutex pass_mu_;

  // A connection accepted by loop 0 for this loop.
  void Handoff(int fd, const sockaddr_storage& peer) {
    {
      std::lock_guard<std::mutex> l(inbox_mu_);
      inbox_.emplace_back(fd, peer);
    }
    uint64_t one = 1;
    ssize_t r = write(wake_fd_, &one, sizeof one);
    (void)r;
  }

 private:
  void Accept() {
    for (int i = 0; i < 64; ++i) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      int fd = accept4(server_->listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE)
          std::fprintf(stderr, "pmtree serve: accept: %s (raise the open-file limit)\n", std::strerror(errno));
        return;  // EAGAIN: none left
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const size_t n = server_->loops_.size();
      Loop* to = server_->loops_[next_loop_++ % n].get();
      if (to == this)
        Register(fd, ss);
      else
        to->Handoff(fd, ss);
    }
  }

  // Takes a connection into this loop's epoll set.
  void Register(int fd, const sockaddr_storage& ss) {
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->parser = RespParser(server_->options_.limits);
    c->client.id = server_->state_.next_client_id.fetch_add(1);
    c->client.peer = PeerName(ss);
    c->client.authenticated = server_->state_.requirepass.empty();
    c->client.wake_fd = wake_fd_;
    c->events = EPOLLIN;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      return;
    }
    server_->state_.connected_clients.fetch_add(1);
    server_->state_.total_connections.fetch_add(1);
    server_->state_.loop_clients[index_].fetch_add(1);
    conns_.emplace(fd, std::move(c));
  }

  // Reads once and runs every complete command; the replies wait for
  // SendReplies.  False when the connection is to be closed now.
  bool OnReadable(Connection& c) {
    // Into the loop's buffer, then appended: growing c.in by a whole chunk
    // would zero 64 KiB per read however little arrived.
    ssize_t n = read(c.fd, read_buf_.get(), kReadChunk);
    if (n <= 0) return n < 0 && (errno == EAGAIN || errno == EINTR);
    c.in.append(read_buf_.get(), static_cast<size_t>(n));
    return ProcessInput(c);
  }

  // REPLIES AFTER THE PASS.  The replies of every connection read in one
  // epoll pass are sent after the pass, not after each read (as Redis
  // does before it sleeps).  A client that sent to several connections
  // then wakes once for their replies, not once per connection: on
  // loopback each wake-up of a sleeping reader cost the sending loop
  // several microseconds inside send (docs/server_bench.md).
  void SendReplies() {
    for (int fd : unsent_) {
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;  // closed in the pass
      if (!(Flush(*it->second) && UpdateInterest(*it->second))) Close(fd);
    }
    unsent_.clear();
  }

  // Runs every complete command of c's input, unless a command blocked the
  // client (WAIT: its input waits until ClientState::unblock says so).
  bool ProcessInput(Connection& c) {
    const uint64_t limit = server_->options_.max_client_buffer;
    kv::Store& store = server_->keyspace_.store();
    (void)store.TakeThreadTimestamp();  // what earlier connections' commands left
    // This connection's writes whose replies are still held: its iterating
    // reads must see them (keyspace.h, VISIBILITY).
    if (c.hold_ts != 0) store.RaiseThreadTimestamp(c.hold_ts);
    while (!c.client.close_after_reply && !c.client.unblock) {
      auto outcome = c.parser.Parse(c.in, &c.in_pos, &c.args);
      if (outcome == RespParser::Outcome::kNeedMore) break;
      if (outcome == RespParser::Outcome::kError) {
        RunGroup(c);
        AppendError(&c.out, "ERR " + c.parser.error());
        Reject(c, c.parser.error());
        break;
      }
      Keyspace::GroupWrite w;
      if (Groupable(server_->state_, c.client, c.args, &w)) {
        bool repeated = false;
        for (size_t i = 0; i < c.grouped; ++i) repeated = repeated || c.group[i][1] == c.args[1];
        if (repeated || c.grouped == kMaxGroup) RunGroup(c);
        // Swapped, not moved: c.args takes back an old slot's strings,
        // which the parser reuses (no allocation per argument).
        if (c.grouped == c.group.size()) c.group.emplace_back();
        c.group[c.grouped++].swap(c.args);
        continue;
      }
      RunGroup(c);
      Execute(server_->state_, c.client, c.args, &c.out);
      if (c.out.size() - c.out_pos > limit) {
        Reject(c, "reply buffer limit reached");
        break;
      }
    }
    RunGroup(c);
    if (c.client.unblock) blocked_fds_.insert(c.fd);
    if (c.in_pos >= kCompactBytes || c.in_pos == c.in.size()) {
      c.in.erase(0, c.in_pos);
      c.in_pos = 0;
    }
    if (!c.client.close_after_reply && c.in.size() + c.parser.buffered_bytes() > limit) {
      AppendError(&c.out, "ERR Protocol error: query buffer limit reached");
      Reject(c, "query buffer limit reached");
    }
    if (c.client.replica) {  // PSYNC made it a replica: its stream comes from the link
      replica_fds_.insert(c.fd);
      if (!c.client.replica->Drain(&c.out, c.out.size() - c.out_pos)) return false;
    }
    // Everything appended above waits for what its commands wrote or read.
    Hold(c, store.TakeThreadTimestamp());
    return true;
  }

  // HELD REPLIES.  The store defers visibility (kv.h): a write returns
  // durable and installed, but readers see it only once every write with an
  // earlier timestamp is in too.  The replies just appended to c.out depend
  // on writes (or unpublished reads) up to timestamp `ack`: while the
  // visible timestamp is below it they wait behind c.ready, with everything
  // appended after them (replies stay in order), and the loop goes on with
  // other connections.  So no client sees a write acknowledged that a read
  // on any connection could then miss, and no loop waits for another's
  // writer.
  void Hold(Connection& c, uint64_t ack) {
    const bool was_held = c.hold_ts != 0;  // held_fds_ holds exactly these
    if (ack != 0 || was_held) {
      const uint64_t visible = server_->keyspace_.store().visible_timestamp();
      if (ack > visible) c.hold_ts = std::max(c.hold_ts, ack);
      if (c.hold_ts != 0 && c.hold_ts <= visible) c.hold_ts = 0;
    }
    if (c.hold_ts == 0) {
      c.ready = c.out.size();
      if (was_held) held_fds_.erase(c.fd);
    } else if (!was_held) {
      held_fds_.insert(c.fd);
    }
  }

  // Sends the held replies that became visible; then, while some are still
  // held, tells the store's listener which timestamp to wake this loop at.
  void ArmHolds() {
    if (held_fds_.empty()) return;  // a stale wait_ts_ costs one spurious wake-up at most
    kv::Store& store = server_->keyspace_.store();
    while (!held_fds_.empty()) {
      const uint64_t visible = store.visible_timestamp();
      uint64_t wait = 0;
      std::vector<int> dead;
      for (int fd : std::vector<int>(held_fds_.begin(), held_fds_.end())) {
        Connection& c = *conns_.at(fd);
        if (c.hold_ts > visible) {
          wait = wait == 0 ? c.hold_ts : std::min(wait, c.hold_ts);
          continue;
        }
        Hold(c, 0);
        if (!(Flush(c) && UpdateInterest(c))) dead.push_back(fd);
      }
      for (int fd : dead) Close(fd);
      if (wait == 0) break;
      wait_ts_.store(wait, std::memory_order_seq_cst);
      if (store.visible_timestamp() < wait) return;  // OnVisible wakes us
      wait_ts_.store(0, std::memory_order_seq_cst);
    }
    wait_ts_.store(0, std::memory_order_seq_cst);
  }

  // The wake eventfd fired: a replica link of this loop has stream bytes,
  // or a blocked client (WAIT) may resume.
  void OnWake() {
    uint64_t count;
    ssize_t r = read(wake_fd_, &count, sizeof count);
    (void)r;
    std::vector<std::pair<int, sockaddr_storage>> arrived;
    {
      std::lock_guard<std::mutex> l(inbox_mu_);
      arrived.swap(inbox_);
    }
    for (const auto& [fd, peer] : arrived) Register(fd, peer);
    std::vector<int> dead;
    for (int fd : replica_fds_) {
      Connection& c = *conns_.at(fd);
      bool alive = c.client.replica->Drain(&c.out, c.out.size() - c.out_pos);
      if (alive) Hold(c, 0);
      alive = alive && Flush(c) && UpdateInterest(c);
      if (!alive) dead.push_back(fd);
    }
    for (int fd : std::vector<int>(blocked_fds_.begin(), blocked_fds_.end())) {
      Connection& c = *conns_.at(fd);
      if (!c.client.unblock(&c.out)) continue;
      c.client.unblock = nullptr;
      blocked_fds_.erase(fd);
      bool alive = ProcessInput(c) && Flush(c) && UpdateInterest(c);
      if (!alive) dead.push_back(fd);
    }
    for (int fd : dead)
      if (conns_.count(fd)) Close(fd);
  }

  // Commits the held commands (see GROUP COMMIT) and appends their replies.
  void RunGroup(Connection& c) {
    if (c.grouped == 0) return;
    const std::span<const std::vector<std::string>> group(c.group.data(), c.grouped);
    std::vector<Keyspace::GroupWrite>& writes = group_writes_;
    writes.resize(group.size());
    for (size_t i = 0; i < group.size(); ++i) {
      const bool groupable = GroupWriteOf(group[i], &writes[i]);
      (void)groupable;
      assert(groupable);  // held only when it was
    }
    size_t applied = 0;
    // Its status needs no reply of its own: every command not applied runs
    // below through Execute, which reports that command's error.
    auto commit = [&] {
      (void)server_->keyspace_.WriteMany(std::span(writes.data(), writes.size()), &applied);
      return applied;
    };
    // A master streams the applied commands to its replicas under the same
    // ordering rules as any write (replication.h, R1-R3).
    if (server_->replication_) {
      server_->replication_->ExecuteSetGroup(group, commit);
    } else {
      commit();
    }
    server_->state_.total_commands.fetch_add(applied, std::memory_order_relaxed);
    for (size_t i = 0; i < applied; ++i) {
      if (writes[i].incr)
        AppendInt(&c.out, writes[i].result);
      else
        AppendSimple(&c.out, "OK");
    }
    for (size_t i = applied; i < c.grouped; ++i) Execute(server_->state_, c.client, c.group[i], &c.out);
    c.grouped = 0;
  }

  void Reject(Connection& c, const std::string& why) {
    server_->state_.rejected_protocol.fetch_add(1);
    if (server_->options_.log_rejected_clients)
      std::fprintf(stderr, "pmtree serve: closing client %s (id %llu): %s\n", c.client.peer.c_str(),
                 static_cast<unsigned long long>(c.client.id), why.c_str());
    c.client.close_after_reply = true;
  }

  // Writes what it can; false when the connection is done (an error, or
  // everything sent to a client that is to be closed).
  bool Flush(Connection& c) {
    while (c.out_pos < c.ready) {
      ssize_t n = send(c.fd, c.out.data() + c.out_pos, c.ready - c.out_pos, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return true;
        return false;
      }
      c.out_pos += static_cast<size_t>(n);
    }
    if (c.ready < c.out.size()) return true;  // the rest is held
    c.out.clear();
    c.out_pos = 0;
    c.ready = 0;
    return !c.client.close_after_reply;
  }

  // Level-triggered interest: input unless the client is being closed,
  // output while replies wait.
  bool UpdateInterest(Connection& c) {
    uint32_t want = c.client.close_after_reply ? 0u : static_cast<uint32_t>(EPOLLIN);
    if (c.out_pos < c.ready) want |= EPOLLOUT;  // held replies wait for ArmHolds, not the socket
    if (want == c.events) return true;
    epoll_event ev{};
    ev.events = want;
    ev.data.fd = c.fd;
    if (epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev) != 0) return false;
    c.events = want;
    return true;
  }

  void Close(int fd) {
    if (replica_fds_.erase(fd)) server_->replication_->Detach(conns_.at(fd)->client.replica);
    blocked_fds_.erase(fd);
    held_fds_.erase(fd);
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    conns_.erase(fd);
    server_->state_.connected_clients.fetch_sub(1);
    server_->state_.loop_clients[index_].fetch_sub(1);
  }

  Server* server_;
  const int index_;
  size_t next_loop_ = 0;  // loop 0: the loop the next accepted connection goes to
  int epfd_ = -1;
  std::unique_ptr<char[]> read_buf_ = std::make_unique<char[]>(kReadChunk);
  int wake_fd_ = -1;  // replica links of this loop write it (ReplicaLink::Wake)
  std::unordered_map<int, std::unique_ptr<Connection>> conns_;
  std::unordered_set<int> replica_fds_;
  std::unordered_set<int> blocked_fds_;  // clients whose ClientState::unblock is set
  std::unordered_set<int> held_fds_;     // connections with held replies (hold_ts != 0)
  std::vector<Keyspace::GroupWrite> group_writes_;  // RunGroup's, kept for its capacity
  std::vector<int> unsent_;              // read in this pass, replies not yet sent (SendReplies)
  std::atomic<uint64_t> wait_ts_{0};     // the smallest hold_ts, while the loop sleeps on it; 0 = none
  std::mutex inbox_mu_;
  std::vector<std::pair<int, sockaddr_storage>> inbox_;  // handed off by loop 0 (Handoff)
};

Server::Server(kv::Store* store, ServerOptions options)
    : keyspace_(store),
      options_(std::move(options)),
      replication_(std::make_unique<Replication>(store, &state_, options_.replication)) {
  state_.keyspace = &keyspace_;
  state_.replication = replication_.get();
  state_.requirepass = options_.requirepass;
  state_.bind = options_.bind;
  state_.port = options_.port;
  state_.pool_path = options_.pool_path;
  state_.engine = std::string(store->engine());
  state_.threads = options_.threads > 0 ? options_.threads : static_cast<int>(std::thread::hardware_concurrency());
  if (state_.threads <= 0) state_.threads = 1;
  state_.loop_clients = std::make_unique<std::atomic<uint64_t>[]>(state_.threads);
  state_.request_shutdown = [this] {
    shutdown_by_client_.store(true);
    RequestStop();
  };
  state_.stop_the_world = [this](const std::function<void()>& fn) { StopTheWorld(fn); };
}

thread_local Server::Loop* Server::current_loop_ = nullptr;

// STOPPING THE WORLD.  Each loop holds its pass_mu_ while it handles what
// one epoll_wait returned; a stopper releases its own loop's (if it runs on
// one), takes world_mu_, then every loop's pass_mu_ in index order, runs fn,
// and gives them back.  So fn runs while every loop sleeps in epoll_wait or
// waits at the start of its next pass, holding nothing.  Lock order: world_mu_,
// then the pass locks, then the replication gate (a loop takes the gate only
// inside its own pass; the replica's applier stops the world before it takes
// the gate): two stoppers, or a stopper and a loop waiting for the gate,
// never wait for each other.  A loop's own state is untouched meanwhile: its
// thread is the stopper, or asleep.
void Server::StopTheWorld(const std::function<void()>& fn) {
  Loop* self = current_loop_;
  if (self != nullptr) self->pass_mu_.unlock();
  {
    std::lock_guard<std::mutex> world(world_mu_);
    for (auto& loop : loops_) loop->pass_mu_.lock();
    {
      StoppedWorldScope scope;
      fn();
    }
    for (auto it = loops_.rbegin(); it != loops_.rend(); ++it) (*it)->pass_mu_.unlock();
  }
  if (self != nullptr) self->pass_mu_.lock();
}

Server::~Server() {
  RequestStop();
  Wait();
  replication_->Shutdown();  // no RDB builder or cron touches a loop's eventfd past here
  // No writer runs now (the master link stopped with Shutdown): the store's
  // writes are visible on return again, and nobody calls into the loops.
  if (deferring_) keyspace_.store().DeferVisibility(nullptr);
  loops_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

Status Server::Start() {
  // Each connection is a descriptor: lift the soft open-file limit to the
  // hard one, so >= 1,000 clients need no ulimit from the user.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options_.port));
  if (options_.port < 0 || options_.port > 65535)
    return Status::InvalidArgument("server: port " + std::to_string(options_.port) + " is not 0..65535");
  if (inet_pton(AF_INET, options_.bind.c_str(), &addr.sin_addr) != 1)
    return Status::InvalidArgument("server: bind address '" + options_.bind + "' is not an IPv4 address");
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return Status::IoError(Errno("server: eventfd"));
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::IoError(Errno("server: socket"));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  std::string where = options_.bind + ":" + std::to_string(options_.port);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return Status::IoError(Errno(("server: bind " + where).c_str()));
  if (listen(listen_fd_, 1024) != 0) return Status::IoError(Errno(("server: listen " + where).c_str()));
  socklen_t len = sizeof addr;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  state_.port = ntohs(addr.sin_port);
  for (int i = 0; i < state_.threads; ++i) {
    auto loop = std::make_unique<Loop>(this, i);
    PMTREE_RETURN_IF_ERROR(loop->Init());
    loops_.push_back(std::move(loop));
  }
  // Before any loop (or the master link) writes: writes return before
  // they are visible, and the loops hold the replies (HELD REPLIES).
  keyspace_.store().DeferVisibility([this](uint64_t visible) {
    for (auto& loop : loops_) loop->OnVisible(visible);
  });
  deferring_ = true;
  for (auto& loop : loops_) threads_.emplace_back([l = loop.get()] { l->Run(); });
  return Status::Ok();
}

void Server::RequestStop() {
  if (stop_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t r = write(stop_fd_, &one, sizeof one);
  (void)r;
}

void Server::Wait() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace pmtree::server
