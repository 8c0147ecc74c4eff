// SPDX-License-Identifier: Apache-2.0
//
// Replication, master side: the Redis 7.0 protocol that lets stock
// redis-server (and `pmtree serve`) replicas follow a `pmtree serve` master.
//
// THE PROTOCOL.  A replica connects as a client and sends PING, REPLCONF
// listening-port N, REPLCONF capa eof capa psync2, then PSYNC <replid>
// <offset>.  PSYNC ? -1 (or an unknown replid, or an offset outside the
// backlog) is a full resynchronisation: "+FULLRESYNC <replid> <offset>", then
// "$<len>\r\n" and an RDB image (server/rdb.h, no trailing CRLF) of the data
// set, then the write stream.  A PSYNC whose offset the backlog still holds
// is "+CONTINUE <replid>" and the stream from that offset.  The stream is
// every write command as RESP, in commit order, starting with SELECT 0; its
// bytes are numbered from 1 (master_repl_offset = the last byte's number).
// The replica acknowledges with REPLCONF ACK <offset> (no reply).
//
// INVARIANTS (the ordering argument; see docs/scaleout.md, "Replication"):
//  R1  Per key, stream order = commit order.  A write command holds the
//      replication stripes of its keys (distinct from Keyspace's own stripes,
//      which the handlers take inside) from before it executes until its
//      bytes are in the stream, so two writes of one key cannot execute in
//      one order and be streamed in the other.  Writes of different keys
//      commute, so their order in the stream does not matter.
//  R2  The RDB is cut at a write boundary.  Every write holds the gate
//      (a writer-preferring reader/writer lock) shared from before it
//      executes until it is streamed; a full sync takes the gate exclusive,
//      takes a kv snapshot and reads master_repl_offset.  So a write whose
//      reply the client saw before that instant is in the snapshot and at or
//      before the offset; any later one is after the offset and not in the
//      snapshot.  FLUSHALL takes the gate exclusive too (no keys to stripe).
//  R3  Only commands that changed something are streamed: a command whose
//      reply is an error is not (its effect, if any, is nothing); reply-
//      dependent forms are rewritten to their effect (SET .. GET -> SET,
//      GETDEL -> DEL); MULTI/EXEC is streamed as MULTI, its writes, EXEC.
//
// SLOW REPLICAS.  Each replica's unsent bytes are bounded
// (ReplicationOptions::replica_buffer_limit, Redis's client-output-buffer-
// limit for replicas); past it the replica is dropped, never the writers
// slowed.  Its socket lives on the event loop that accepted it: writers
// append to the replica's buffer and wake that loop (an eventfd), which
// sends.
//
// REPLICA SIDE (master_link.cc).  `pmtree serve --replicaof HOST PORT` or
// REPLICAOF runs a thread that connects, sends the same handshake (PSYNC
// <replid> <offset+1> when it followed that master before, in memory only:
// after a restart it is PSYNC ? -1, a full resync), loads the RDB after
// emptying the pool (FLUSHALL semantics), then applies the stream through
// the same command handlers (so every write persists in our pool) and
// answers REPLCONF GETACK, sending REPLCONF ACK every second.  Our own
// replicas get the master's stream byte for byte: replid and offsets are
// the top master's (Redis 7's sub-replicas), so a chain can resume
// anywhere.  The applier holds the gate shared around each command and
// its proxying (R2 for our own full syncs); it is the only writer (R1).
//
// Thread safety: every member may be called from any loop thread.

#ifndef PMTREE_SERVER_REPLICATION_H_
#define PMTREE_SERVER_REPLICATION_H_

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pmtree/kv.h"
#include "server/commands.h"
#include "trees/common/version_lock.h"

namespace pmtree::server {

// A new replication id: 40 random hex digits.
std::string NewReplid();

struct ReplicationOptions {
  uint64_t backlog_size = 1ull << 20;             // Redis's repl-backlog-size default
  uint64_t replica_buffer_limit = 256ull << 20;   // Redis's client-output-buffer-limit replica hard limit
  std::chrono::milliseconds ping_period{10000};   // Redis's repl-ping-replica-period
  std::chrono::milliseconds cron_period{100};     // WAIT timeouts are checked this often (Redis's hz 10)
  // TEST ONLY: runs between a write's execution and its streaming, to widen
  // the window R1 closes (the ordering test yields there).
  std::function<void()> between_execute_and_stream;
};

// One replica as the master sees it.  Created by its first REPLCONF (or
// PSYNC); attached by PSYNC.  The fields under mu are shared between the
// writers and the replica's loop.
class ReplicaLink {
 public:
  enum class State { kHandshake, kWaitRdb, kOnline };

  // Moves what is ready to send into *out (the connection's output, of
  // which `unsent` bytes are still queued).  False when the replica is to be
  // closed (its buffer overflowed).
  bool Drain(std::string* out, uint64_t unsent);

  std::atomic<int> listening_port{0};
  std::atomic<uint64_t> ack_offset{0};
  std::atomic<int64_t> ack_time_ms{0};  // steady clock, ms
  std::string ip;
  uint64_t client_id = 0;

 private:
  friend class Replication;
  // Appends stream bytes; wakes the loop when the buffer was empty.
  void Push(std::string_view bytes, uint64_t limit);
  void Wake();

  std::mutex mu_;
  State state_ = State::kHandshake;
  std::string pending_;  // bytes not yet moved to the connection
  uint64_t stream_bytes_ = 0;  // of pending_, stream (not RDB) bytes
  bool overflow_ = false;
  uint64_t limit_ = 0;  // ReplicationOptions::replica_buffer_limit
  int wake_fd_ = -1;  // the owning loop's eventfd; -1 once detached
  std::atomic<bool> woken_{false};
};

class Replication {
 public:
  // `server` is the state the replica side executes the master's stream
  // with (its keyspace, the command table); it must outlive this object.
  Replication(kv::Store* store, ServerState* server, ReplicationOptions options);
  ~Replication();  // Shutdown()
  Replication(const Replication&) = delete;
  Replication& operator=(const Replication&) = delete;

  // Joins the RDB builders and the cron thread; no wake-ups after it.
  void Shutdown();

  // A replica's RDB is being built: a thread outside the event loops holds
  // a kv snapshot and reads the store (so FLUSHALL cannot clear it at once).
  bool BuildingRdb() {
    std::lock_guard<std::mutex> lock(threads_mu_);
    return builders_running_ != 0;
  }
  // Runs a write command's handler under R1/R2 and streams it (R3).
  // `spec` is the command's table entry; EXEC streams its queued writes.
  void ExecuteWrite(const CommandSpec& spec, Call& call);
  // The group commit of pipelined plain SETs and counter commands
  // (server.cc, GROUP COMMIT): `commit` applies a prefix of `sets` (each
  // {"SET", key, value} or an INCR, DECR, INCRBY or DECRBY; distinct keys)
  // and returns its length; it runs under R1/R2 like any write, and the
  // applied commands are streamed in order, as they are (their effect).
  // Returns what `commit` did.
  size_t ExecuteSetGroup(std::span<const std::vector<std::string>> sets, const std::function<size_t()>& commit);

  // PSYNC replid offset: writes +FULLRESYNC/+CONTINUE (and, later, the RDB
  // and the stream) to the client, which becomes a replica.
  void Psync(Call& call, std::string_view replid, std::string_view offset);
  // REPLCONF option value ...: records listening-port, ACK; answers +OK
  // (nothing for ACK, as Redis).
  void Replconf(Call& call);
  // WAIT numreplicas timeout: answers now when enough replicas acknowledged
  // the current offset, else blocks the client (ClientState::unblock) and
  // asks every replica for an ACK (REPLCONF GETACK * in the stream).
  void Wait(Call& call);
  // The connection of this replica closed.
  void Detach(const std::shared_ptr<ReplicaLink>& link);

  // ---- replica side ----
  // REPLICAOF host port: (re)connects to that master in a thread of its own
  // and follows it (see REPLICA SIDE above); clients' writes are refused
  // with -READONLY meanwhile.  REPLICAOF NO ONE (ReplicaOfNoOne) stops
  // following and makes this a master again (writes accepted), keeping the
  // data and offset; the old replid stays valid for PSYNC (replid2), so its
  // own replicas continue.
  void ReplicaOf(std::string host, int port);
  void ReplicaOfNoOne();
  bool is_replica() const { return is_replica_.load(); }

  // The "# Replication" lines of INFO after the header.
  std::string InfoLines();
  uint64_t master_offset();
  size_t replica_count();

  // Appends a command to the stream (no gate, no stripes: for the cron's
  // PING and the tests).  Public for tests.
  void Propagate(const std::vector<std::vector<std::string>>& commands);

 private:
  // A writer-preferring reader/writer lock (pthread's kind option), so a
  // full sync waiting for the gate is not starved by a stream of writes.
  class Gate {
   public:
    Gate();
    ~Gate();
    void LockShared() { pthread_rwlock_rdlock(&rw_); }
    void Lock() { pthread_rwlock_wrlock(&rw_); }
    void Unlock() { pthread_rwlock_unlock(&rw_); }

   private:
    pthread_rwlock_t rw_;
  };
  class WriteGuard;
  struct Waiter {  // one blocked WAIT; fields after wake_fd under waiters_mu_
    uint64_t target;
    int64_t want;
    int64_t deadline_ms;  // steady clock; 0 = none
    int wake_fd;
    bool done = false;
    int64_t result = 0;
  };
  int64_t CountAcked(uint64_t offset);  // takes stream_mu_
  // Completes the waiters whose replicas acknowledged or whose time is up.
  void CheckWaiters();

  void AppendToStream(std::string_view bytes);  // stream_mu_ held
  std::string BacklogFrom(uint64_t offset);     // stream_mu_ held
  void BuildRdb(std::shared_ptr<ReplicaLink> link, const kv::Snapshot* snapshot, uint64_t offset,
                std::string replid);
  void Cron();
  // The replica side (master_link.cc).
  class MasterConn;
  void MasterLoop();
  Status SyncWithMaster(MasterConn& conn);
  Status LoadRdb(std::string_view rdb, const std::string& replid, uint64_t offset);
  Status FollowStream(MasterConn& conn);
  void StopMasterLink();
  void DropReplicas();  // stream_mu_ held: every attached replica is closed
  std::string ReplicaInfoLines();  // stream_mu_ held

  kv::Store* store_;
  ServerState* server_;
  ReplicationOptions options_;
  std::string replid_;   // under stream_mu_ (changes on a replica's sync and on promotion)
  std::string replid2_ = std::string(40, '0');  // the previous replid, valid up to second_offset_
  int64_t second_offset_ = -1;

  Gate gate_;
  static constexpr size_t kStripes = 256;
  // Spin locks: EXEC and a SET group hold many at once, beyond what TSan's
  // deadlock detector tracks for pthread mutexes (64).
  std::array<SpinLock, kStripes> stripes_;

  std::mutex stream_mu_;  // guards everything below
  bool active_ = false;   // a replica ever attached: the backlog exists and writes are streamed
  bool need_select_ = true;
  uint64_t offset_ = 0;   // master_repl_offset
  std::string backlog_;   // ring of backlog_size bytes once active
  size_t backlog_pos_ = 0;  // next write index in the ring
  uint64_t backlog_histlen_ = 0;
  std::vector<std::shared_ptr<ReplicaLink>> replicas_;
  uint64_t full_syncs_ = 0, partial_ok_ = 0, partial_err_ = 0;

  std::mutex waiters_mu_;  // before stream_mu_ when both are held
  std::vector<std::weak_ptr<Waiter>> waiters_;  // a closed client's waiter expires
  bool stopping_waiters_ = false;

  // Replica side: the master we follow (under stream_mu_) and its thread.
  std::atomic<bool> is_replica_{false};
  std::atomic<bool> link_stop_{false};
  std::atomic<bool> link_up_{false};
  std::atomic<int64_t> link_last_io_ms_{0};
  std::string master_host_;
  int master_port_ = 0;
  bool synced_ = false;  // replid_/offset_ name the master's stream (PSYNC can resume)
  std::mutex link_mu_;   // serialises ReplicaOf / ReplicaOfNoOne
  std::thread link_thread_;

  std::mutex threads_mu_;  // guards the two below; cron_cv_ signals them
  int builders_running_ = 0;  // RDB builder threads (detached) not yet done
  bool stopping_ = false;
  std::condition_variable cron_cv_;
  std::thread cron_;
};

}  // namespace pmtree::server

#endif  // PMTREE_SERVER_REPLICATION_H_
