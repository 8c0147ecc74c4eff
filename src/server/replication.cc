// SPDX-License-Identifier: Apache-2.0

#include "server/replication.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>

#include "server/rdb.h"
#include "server/resp.h"

namespace pmtree::server {
namespace {

constexpr std::string_view kSelect0 = "*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string NewReplid() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(NowMs()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(40, '0');
  for (char& c : id) c = kHex[g() & 15];
  return id;
}

namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != lower[i]) return false;
  return true;
}

bool ParseU64(std::string_view s, uint64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// The keys a command names (CommandSpec's first_key/last_key/key_step).
void AddKeys(const CommandSpec& spec, const std::vector<std::string>& args, std::vector<std::string_view>* keys) {
  if (spec.first_key <= 0) return;
  int n = static_cast<int>(args.size());
  int last = spec.last_key < 0 ? n - 1 : std::min(spec.last_key, n - 1);
  for (int i = spec.first_key; i <= last; i += spec.key_step) keys->push_back(args[static_cast<size_t>(i)]);
}

// R3: the command a replica must run to reach the master's state.
std::vector<std::string> EffectOf(const std::vector<std::string>& a) {
  if (EqualsIgnoreCase(a[0], "getdel")) return {"DEL", a[1]};
  if (EqualsIgnoreCase(a[0], "set")) {
    std::vector<std::string> r(a.begin(), a.begin() + 3);
    for (size_t i = 3; i < a.size(); ++i)
      if (!EqualsIgnoreCase(a[i], "get")) r.push_back(a[i]);
    return r;
  }
  return a;
}

void AppendCommand(std::string* out, const std::vector<std::string>& args) {
  AppendArray(out, static_cast<int64_t>(args.size()));
  for (const auto& a : args) AppendBulk(out, a);
}

void PsyncCmd(Call& c) { c.server.replication->Psync(c, c.args[1], c.args[2]); }
void WaitCmd(Call& c) { c.server.replication->Wait(c); }

// REPLICAOF host port | REPLICAOF NO ONE (SLAVEOF too).
void ReplicaofCmd(Call& c) {
  if (EqualsIgnoreCase(c.args[1], "no") && EqualsIgnoreCase(c.args[2], "one")) {
    c.server.replication->ReplicaOfNoOne();
    return AppendSimple(c.out, "OK");
  }
  uint64_t port = 0;
  if (!ParseU64(c.args[2], &port) || port == 0 || port > 65535)
    return AppendError(c.out, "ERR Invalid master port");
  c.server.replication->ReplicaOf(c.args[1], static_cast<int>(port));
  AppendSimple(c.out, "OK");
}
void ReplconfCmd(Call& c) { c.server.replication->Replconf(c); }

}  // namespace

const std::vector<CommandSpec>& ReplicationCommands() {
  static const std::vector<CommandSpec> kTable = {
      {"psync", PsyncCmd, 3, kNoQueue},
      {"replconf", ReplconfCmd, -1, kNoQueue},
      {"wait", WaitCmd, 3, 0},
      {"replicaof", ReplicaofCmd, 3, kNoQueue},
      {"slaveof", ReplicaofCmd, 3, kNoQueue},
  };
  return kTable;
}

// ---- ReplicaLink -----------------------------------------------------------------------------

void ReplicaLink::Wake() {
  if (wake_fd_ < 0 || woken_.exchange(true)) return;
  uint64_t one = 1;
  ssize_t r = write(wake_fd_, &one, sizeof one);
  (void)r;  // a full eventfd counter still wakes the loop
}

void ReplicaLink::Push(std::string_view bytes, uint64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (overflow_) return;
  pending_.append(bytes);
  stream_bytes_ += bytes.size();
  if (stream_bytes_ > limit) {
    overflow_ = true;
    pending_.clear();
    pending_.shrink_to_fit();
    std::fprintf(stderr, "pmtree serve: dropping replica %s:%d (id %llu): %llu stream bytes unsent, over the limit\n",
                 ip.c_str(), listening_port.load(), static_cast<unsigned long long>(client_id),
                 static_cast<unsigned long long>(stream_bytes_));
    Wake();
    return;
  }
  if (state_ == State::kOnline) Wake();
}

bool ReplicaLink::Drain(std::string* out, uint64_t unsent) {
  woken_.store(false);
  std::lock_guard<std::mutex> lock(mu_);
  if (overflow_) return false;
  if (state_ != State::kOnline || pending_.empty()) return true;
  if (unsent > limit_) {
    std::fprintf(stderr, "pmtree serve: dropping replica %s:%d (id %llu): its socket does not take the stream\n",
                 ip.c_str(), listening_port.load(), static_cast<unsigned long long>(client_id));
    overflow_ = true;
    return false;
  }
  if (out->empty()) {
    out->swap(pending_);
  } else {
    out->append(pending_);
    pending_.clear();
  }
  stream_bytes_ = 0;
  return true;
}

// ---- Replication -----------------------------------------------------------------------------

Replication::Gate::Gate() {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&rw_, &attr);
  pthread_rwlockattr_destroy(&attr);
}

Replication::Gate::~Gate() { pthread_rwlock_destroy(&rw_); }

// Holds R1's stripes and R2's gate for one write command.  Before any
// replica attached nothing is streamed, so only the gate is taken (the
// first attach takes it exclusive, so no write straddles the switch).
class Replication::WriteGuard {
 public:
  WriteGuard(Replication* r, const std::vector<std::string_view>& keys, bool exclusive)
      : r_(r) {
    exclusive ? r_->gate_.Lock() : r_->gate_.LockShared();
    streaming_ = r_->active_;  // written only under the exclusive gate
    if (!streaming_ || exclusive) return;
    for (auto k : keys) idx_.push_back(std::hash<std::string_view>{}(k) % kStripes);
    std::sort(idx_.begin(), idx_.end());
    idx_.erase(std::unique(idx_.begin(), idx_.end()), idx_.end());
    for (size_t i : idx_) r_->stripes_[i].lock();
  }
  ~WriteGuard() {
    for (auto it = idx_.rbegin(); it != idx_.rend(); ++it) r_->stripes_[*it].unlock();
    r_->gate_.Unlock();
  }
  WriteGuard(const WriteGuard&) = delete;
  WriteGuard& operator=(const WriteGuard&) = delete;
  bool streaming() const { return streaming_; }

 private:
  Replication* r_;
  bool streaming_ = false;
  std::vector<size_t> idx_;
};

Replication::Replication(kv::Store* store, ServerState* server, ReplicationOptions options)
    : store_(store), server_(server), options_(options), replid_(NewReplid()) {
  cron_ = std::thread([this] { Cron(); });
}

Replication::~Replication() { Shutdown(); }

void Replication::Shutdown() {
  StopMasterLink();
  {
    std::unique_lock<std::mutex> lock(threads_mu_);
    stopping_ = true;
    cron_cv_.notify_all();
    cron_cv_.wait(lock, [this] { return builders_running_ == 0; });
  }
  if (cron_.joinable()) cron_.join();
  {
    std::lock_guard<std::mutex> lock(waiters_mu_);
    stopping_waiters_ = true;
    waiters_.clear();
  }
  std::lock_guard<std::mutex> lock(stream_mu_);
  for (auto& link : replicas_) {
    std::lock_guard<std::mutex> l(link->mu_);
    link->wake_fd_ = -1;
  }
}

void Replication::ExecuteWrite(const CommandSpec& spec, Call& call) {
  // The master's stream: the applier holds the gate and proxies the bytes.
  if (call.client.is_master_link) return spec.handler(call);
  if (is_replica_.load()) return AppendError(call.out, "READONLY You can't write against a read only replica.");
  const bool exec = spec.name == "exec";
  std::vector<std::vector<std::string>> queued;
  if (exec && call.client.in_multi && !call.client.multi_failed) queued = call.client.queued;
  std::vector<std::string_view> keys;
  if (exec) {
    for (const auto& q : queued) AddKeys(*FindCommand(q[0]), q, &keys);
  } else {
    AddKeys(spec, call.args, &keys);
  }
  WriteGuard guard(this, keys, /*exclusive=*/!exec && spec.first_key == 0);
  size_t before = call.out->size();
  spec.handler(call);
  if (!guard.streaming() || call.out->size() == before || (*call.out)[before] == '-') return;
  if (options_.between_execute_and_stream) options_.between_execute_and_stream();
  std::vector<std::vector<std::string>> stream;
  if (exec) {
    for (const auto& q : queued)
      if (FindCommand(q[0])->flags & kWrite) stream.push_back(EffectOf(q));
    if (stream.empty()) return;
    stream.insert(stream.begin(), {"MULTI"});
    stream.push_back({"EXEC"});
  } else {
    stream.push_back(EffectOf(call.args));
  }
  Propagate(stream);
}

size_t Replication::ExecuteSetGroup(std::span<const std::vector<std::string>> sets,
                                    const std::function<size_t()>& commit) {
  std::vector<std::string_view> keys;
  keys.reserve(sets.size());
  for (const auto& set : sets) keys.push_back(set[1]);
  WriteGuard guard(this, keys, /*exclusive=*/false);
  const size_t applied = commit();
  if (!guard.streaming() || applied == 0) return applied;
  if (options_.between_execute_and_stream) options_.between_execute_and_stream();
  Propagate(std::vector<std::vector<std::string>>(sets.begin(), sets.begin() + static_cast<ptrdiff_t>(applied)));
  return applied;
}

void Replication::Propagate(const std::vector<std::vector<std::string>>& commands) {
  std::string bytes;
  for (const auto& c : commands) AppendCommand(&bytes, c);
  std::lock_guard<std::mutex> lock(stream_mu_);
  if (!active_) return;
  if (need_select_) {
    need_select_ = false;
    AppendToStream(kSelect0);
  }
  AppendToStream(bytes);
}

void Replication::AppendToStream(std::string_view bytes) {
  offset_ += bytes.size();
  backlog_histlen_ = std::min<uint64_t>(backlog_histlen_ + bytes.size(), backlog_.size());
  std::string_view tail = bytes.size() > backlog_.size() ? bytes.substr(bytes.size() - backlog_.size()) : bytes;
  while (!tail.empty()) {
    size_t n = std::min(tail.size(), backlog_.size() - backlog_pos_);
    std::copy_n(tail.data(), n, backlog_.data() + backlog_pos_);
    backlog_pos_ = (backlog_pos_ + n) % backlog_.size();
    tail.remove_prefix(n);
  }
  for (auto& link : replicas_) link->Push(bytes, options_.replica_buffer_limit);
}

// The backlog's bytes numbered offset..offset_ (the caller checked that the
// backlog holds them).
std::string Replication::BacklogFrom(uint64_t offset) {
  size_t n = static_cast<size_t>(offset_ + 1 - offset);
  size_t start = (backlog_pos_ + backlog_.size() - n) % backlog_.size();
  size_t first = std::min(n, backlog_.size() - start);
  std::string out = backlog_.substr(start, first);
  out.append(backlog_, 0, n - first);
  return out;
}

void Replication::Psync(Call& call, std::string_view replid, std::string_view offset_arg) {
  ClientState& client = call.client;
  if (!client.replica) {
    client.replica = std::make_shared<ReplicaLink>();
    client.replica->ip = client.peer.substr(0, client.peer.rfind(':'));
    client.replica->client_id = client.id;
  }
  std::shared_ptr<ReplicaLink> link = client.replica;
  {
    std::lock_guard<std::mutex> l(link->mu_);
    if (link->state_ != ReplicaLink::State::kHandshake) return AppendError(call.out, "ERR PSYNC already ran on this connection");
    link->wake_fd_ = client.wake_fd;
    link->limit_ = options_.replica_buffer_limit;
  }
  link->ack_time_ms.store(NowMs());
  uint64_t want = 0;
  bool numeric = ParseU64(offset_arg, &want);
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    uint64_t first = offset_ + 1 - backlog_histlen_;
    bool known = replid == replid_ ||
                 (replid == replid2_ && numeric && static_cast<int64_t>(want) <= second_offset_);
    if (active_ && known && numeric && want >= first && want <= offset_ + 1) {
      std::string tail = BacklogFrom(want);
      AppendSimple(call.out, "CONTINUE " + replid_);
      std::lock_guard<std::mutex> l(link->mu_);
      link->state_ = ReplicaLink::State::kOnline;
      link->pending_ = std::move(tail);
      replicas_.push_back(link);
      ++partial_ok_;
      return;
    }
    if (replid != "?") ++partial_err_;
  }
  // Full resynchronisation (R2): the snapshot and the offset at one write
  // boundary.
  gate_.Lock();
  const kv::Snapshot* snapshot = store_->GetSnapshot();
  uint64_t at;
  std::string id;
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    if (!active_) {
      active_ = true;
      backlog_.assign(options_.backlog_size, '\0');
      backlog_pos_ = 0;
      backlog_histlen_ = 0;
    }
    need_select_ = true;  // as Redis: the new replica's stream starts with SELECT
    at = offset_;
    id = replid_;
    {
      std::lock_guard<std::mutex> l(link->mu_);
      link->state_ = ReplicaLink::State::kWaitRdb;
    }
    replicas_.push_back(link);
    ++full_syncs_;
  }
  gate_.Unlock();
  AppendSimple(call.out, "FULLRESYNC " + id + " " + std::to_string(at));
  std::lock_guard<std::mutex> lock(threads_mu_);
  ++builders_running_;
  std::thread([this, link, snapshot, at, id] { BuildRdb(link, snapshot, at, id); }).detach();
}

void Replication::BuildRdb(std::shared_ptr<ReplicaLink> link, const kv::Snapshot* snapshot, uint64_t offset,
                           std::string replid) {
  std::vector<std::pair<std::string, std::string>> aux = {
      {"redis-ver", "7.0.15"},
      {"redis-bits", "64"},
      {"ctime", std::to_string(std::time(nullptr))},
      {"used-mem", "0"},
      {"repl-stream-db", "0"},
      {"repl-id", replid},
      {"repl-offset", std::to_string(offset)},
      {"aof-base", "0"},
  };
  std::string rdb;
  uint64_t keys = 0;
  Status s = DumpKeyspaceRdb(store_, snapshot, aux, &rdb, &keys);
  store_->ReleaseSnapshot(snapshot);
  {
    std::lock_guard<std::mutex> l(link->mu_);
    if (!s.ok()) {
      std::fprintf(stderr, "pmtree serve: full sync of replica %s:%d failed: %s\n", link->ip.c_str(),
                   link->listening_port.load(), s.ToString().c_str());
      link->overflow_ = true;
    } else {
      std::fprintf(stderr, "pmtree serve: full sync of replica %s:%d: %llu keys, %zu RDB bytes, offset %llu\n",
                   link->ip.c_str(), link->listening_port.load(), static_cast<unsigned long long>(keys), rdb.size(),
                   static_cast<unsigned long long>(offset));
      std::string payload = "$" + std::to_string(rdb.size()) + "\r\n";
      payload += rdb;
      payload += link->pending_;
      link->pending_ = std::move(payload);
      link->state_ = ReplicaLink::State::kOnline;
    }
    link->Wake();
  }
  std::lock_guard<std::mutex> lock(threads_mu_);
  --builders_running_;
  cron_cv_.notify_all();
}

void Replication::Replconf(Call& call) {
  auto& a = call.args;
  if (a.size() % 2 == 0) return AppendError(call.out, "ERR syntax error");
  ClientState& client = call.client;
  if (!client.replica) {
    client.replica = std::make_shared<ReplicaLink>();
    client.replica->ip = client.peer.substr(0, client.peer.rfind(':'));
    client.replica->client_id = client.id;
  }
  ReplicaLink& link = *client.replica;
  for (size_t i = 1; i + 1 < a.size(); i += 2) {
    uint64_t v = 0;
    if (EqualsIgnoreCase(a[i], "ack")) {
      if (!ParseU64(a[i + 1], &v)) return;
      link.ack_offset.store(v);
      link.ack_time_ms.store(NowMs());
      CheckWaiters();
      return;  // no reply, as Redis
    }
    if (EqualsIgnoreCase(a[i], "listening-port")) {
      if (!ParseU64(a[i + 1], &v) || v > 65535) return AppendError(call.out, "ERR value is not an integer or out of range");
      link.listening_port.store(static_cast<int>(v));
    } else if (EqualsIgnoreCase(a[i], "ip-address")) {
      std::lock_guard<std::mutex> lock(stream_mu_);  // INFO reads it
      link.ip = a[i + 1];
    } else if (!EqualsIgnoreCase(a[i], "capa") && !EqualsIgnoreCase(a[i], "getack") &&
               !EqualsIgnoreCase(a[i], "rdb-only") && !EqualsIgnoreCase(a[i], "rdb-filter-only")) {
      return AppendError(call.out, "ERR Unrecognized REPLCONF option: " + a[i].substr(0, 64));
    }
  }
  AppendSimple(call.out, "OK");
}

void Replication::Detach(const std::shared_ptr<ReplicaLink>& link) {
  std::lock_guard<std::mutex> lock(stream_mu_);
  replicas_.erase(std::remove(replicas_.begin(), replicas_.end(), link), replicas_.end());
  std::lock_guard<std::mutex> l(link->mu_);
  link->wake_fd_ = -1;
}

void Replication::DropReplicas() {
  for (auto& link : replicas_) {
    std::lock_guard<std::mutex> l(link->mu_);
    link->overflow_ = true;  // its loop closes it at the wake-up
    link->Wake();
  }
  replicas_.clear();
}

uint64_t Replication::master_offset() {
  std::lock_guard<std::mutex> lock(stream_mu_);
  return offset_;
}

size_t Replication::replica_count() {
  std::lock_guard<std::mutex> lock(stream_mu_);
  return replicas_.size();
}

std::string Replication::InfoLines() {
  std::string t;
  auto line = [&](std::string_view k, const std::string& v) { AppendInfoLine(&t, k, v); };
  std::lock_guard<std::mutex> lock(stream_mu_);
  if (is_replica_.load()) {
    t += ReplicaInfoLines();
  } else {
    line("role", "master");
  }
  line("connected_slaves", std::to_string(replicas_.size()));
  int64_t now = NowMs();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    auto& r = *replicas_[i];
    bool online;
    {
      std::lock_guard<std::mutex> l(r.mu_);
      online = r.state_ == ReplicaLink::State::kOnline;
    }
    line("slave" + std::to_string(i), "ip=" + r.ip + ",port=" + std::to_string(r.listening_port.load()) +
                                          ",state=" + (online ? "online" : "wait_bgsave") +
                                          ",offset=" + std::to_string(r.ack_offset.load()) +
                                          ",lag=" + std::to_string((now - r.ack_time_ms.load()) / 1000));
  }
  line("master_failover_state", "no-failover");
  line("master_replid", replid_);
  line("master_replid2", replid2_);
  line("master_repl_offset", std::to_string(offset_));
  line("second_repl_offset", std::to_string(second_offset_));
  line("repl_backlog_active", active_ ? "1" : "0");
  line("repl_backlog_size", std::to_string(options_.backlog_size));
  line("repl_backlog_first_byte_offset", std::to_string(active_ ? offset_ + 1 - backlog_histlen_ : 0));
  line("repl_backlog_histlen", std::to_string(backlog_histlen_));
  line("sync_full", std::to_string(full_syncs_));
  line("sync_partial_ok", std::to_string(partial_ok_));
  line("sync_partial_err", std::to_string(partial_err_));
  return t;
}

// Pings the replicas every ping_period (counted in the offsets, as Redis
// does), so a replica can tell an idle master from a dead link.
void Replication::Cron() {
  std::unique_lock<std::mutex> lock(threads_mu_);
  auto next_ping = std::chrono::steady_clock::now() + options_.ping_period;
  while (!cron_cv_.wait_for(lock, options_.cron_period, [this] { return stopping_; })) {
    lock.unlock();
    CheckWaiters();
    if (std::chrono::steady_clock::now() >= next_ping) {
      next_ping += options_.ping_period;
      if (!is_replica_.load() && replica_count() > 0) {
        gate_.LockShared();
        Propagate({{"PING"}});
        gate_.Unlock();
      }
    }
    lock.lock();
  }
}

int64_t Replication::CountAcked(uint64_t offset) {
  std::lock_guard<std::mutex> lock(stream_mu_);
  int64_t n = 0;
  for (auto& r : replicas_) n += r->ack_offset.load() >= offset;
  return n;
}

void Replication::CheckWaiters() {
  std::lock_guard<std::mutex> lock(waiters_mu_);
  int64_t now = NowMs();
  for (size_t i = 0; i < waiters_.size();) {
    auto w = waiters_[i].lock();
    if (w) {
      int64_t n = CountAcked(w->target);
      if (n < w->want && (w->deadline_ms == 0 || now < w->deadline_ms)) {
        ++i;
        continue;
      }
      w->done = true;
      w->result = n;
      uint64_t one = 1;
      ssize_t r = write(w->wake_fd, &one, sizeof one);
      (void)r;
    }
    waiters_[i] = waiters_.back();
    waiters_.pop_back();
  }
}

void Replication::Wait(Call& call) {
  int64_t want = 0, timeout = 0;
  auto parse = [](const std::string& s, int64_t* v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size();
  };
  if (!parse(call.args[1], &want) || !parse(call.args[2], &timeout))
    return AppendError(call.out, "ERR value is not an integer or out of range");
  if (timeout < 0) return AppendError(call.out, "ERR timeout is negative");
  uint64_t target = master_offset();
  int64_t acked = CountAcked(target);
  if (acked >= want) return AppendInt(call.out, acked);
  auto w = std::make_shared<Waiter>(Waiter{target, want, timeout ? NowMs() + timeout : 0, call.client.wake_fd});
  {
    std::lock_guard<std::mutex> lock(waiters_mu_);
    if (stopping_waiters_) return AppendInt(call.out, acked);
    waiters_.push_back(w);
  }
  call.client.unblock = [this, w](std::string* out) {
    std::lock_guard<std::mutex> lock(waiters_mu_);
    if (!w->done) return false;
    AppendInt(out, w->result);
    return true;
  };
  gate_.LockShared();
  Propagate({{"REPLCONF", "GETACK", "*"}});
  gate_.Unlock();
}

}  // namespace pmtree::server
