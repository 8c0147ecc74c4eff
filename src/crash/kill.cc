// SPDX-License-Identifier: Apache-2.0

#include "crash/kill.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "crash/explorer_internal.h"

namespace pmtree::crash {
namespace {

// One message from the child; 32 bytes, so a pipe write is atomic.
struct Record {
  uint32_t type;   // kReady, kIntent, kAck, kError
  uint32_t kind;   // OpKind
  uint64_t key;
  uint64_t value;
  uint64_t result;
};
static_assert(sizeof(Record) == 32);
enum : uint32_t { kReady = 1, kIntent = 2, kAck = 3, kError = 4 };

// Opens and recovers the tree in `path` with `f` itself (not through the
// registry, so test-local factories work).
Result<TreeHandle<Tree>> Open(const TreeFactory& f, const std::string& path, const KillOptions& o) {
  TreeHandle<Tree> h;
  PMTREE_ASSIGN_OR_RETURN(h.pool, Pool::Open(path, f.name, o.pool_options));
  PMTREE_ASSIGN_OR_RETURN(h.tree, f.recover(h.pool.get(), o.tree_options));
  return h;
}

void WriteAll(int fd, const Record& r) {
  const char* p = reinterpret_cast<const char*>(&r);
  size_t left = sizeof(r);
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) _exit(5);
    p += w;
    left -= static_cast<size_t>(w);
  }
}

[[noreturn]] void Child(const TreeFactory& f, const KillOptions& o, const std::string& path, uint64_t iteration,
                        int fd) {
  auto h = Open(f, path, o);
  if (!h.ok()) {
    Record r{kError, 0, 0, 0, 0};
    WriteAll(fd, r);
    std::fprintf(stderr, "kill harness child: %s\n", h.status().ToString().c_str());
    _exit(4);
  }
  WriteAll(fd, Record{kReady, 0, 0, 0, 0});
  std::mt19937_64 rng(o.seed * 1000003 + iteration);
  for (uint64_t j = 0; j < 10000000; j++) {
    const uint64_t x = rng();
    Op op;
    op.key = 1 + (x >> 16) % o.key_domain;
    op.value = (iteration << 32) | (j & 0xffffffff);
    const int w = static_cast<int>(x % 100);
    op.kind = w < 50 ? OpKind::kInsert : w < 75 ? OpKind::kRemove : w < 90 ? OpKind::kUpsert : OpKind::kUpdate;
    WriteAll(fd, Record{kIntent, static_cast<uint32_t>(op.kind), op.key, op.value, 0});
    Result<bool> res = false;
    switch (op.kind) {
      case OpKind::kInsert: res = h->tree->Insert(op.key, op.value); break;
      case OpKind::kRemove: res = h->tree->Remove(op.key); break;
      case OpKind::kUpsert: res = h->tree->Upsert(op.key, op.value); break;
      default: res = h->tree->Update(op.key, op.value); break;
    }
    if (!res.ok()) {
      WriteAll(fd, Record{kError, 0, 0, 0, 0});
      std::fprintf(stderr, "kill harness child: %s failed: %s\n", OpString(op).c_str(), res.status().ToString().c_str());
      _exit(4);
    }
    WriteAll(fd, Record{kAck, static_cast<uint32_t>(op.kind), op.key, op.value, *res ? 1u : 0u});
  }
  _exit(0);  // no Close(): also a crash
}

// The records a child sends, read without blocking it.
class RecordReader {
 public:
  explicit RecordReader(int fd) : fd_(fd) {}
  // Reads what arrives within `timeout_ms`; false at EOF.
  bool Drain(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return true;
    char buf[4096];
    ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) return false;  // EOF
    partial_.append(buf, static_cast<size_t>(n));
    while (partial_.size() >= sizeof(Record)) {
      Record r;
      std::memcpy(&r, partial_.data(), sizeof(r));
      records_.push_back(r);
      partial_.erase(0, sizeof(r));
    }
    return true;
  }
  std::vector<Record>& records() { return records_; }

 private:
  int fd_;
  std::string partial_;
  std::vector<Record> records_;
};

// Creates the pool file at `path` with an empty tree, closed cleanly.
Status CreateKillPool(const TreeFactory& f, const KillOptions& o, const std::string& path) {
  auto pool = Pool::Create(path, o.pool_size, f.name, 0, o.pool_options);
  if (!pool.ok()) return pool.status().Annotate("kill harness: creating " + path);
  auto tree = f.create(pool->get(), o.tree_options);
  if (!tree.ok()) {
    unlink(path.c_str());
    return tree.status().Annotate("kill harness: creating the tree");
  }
  return (*tree)->Close();
}

// Iteration `it`: forks a child that runs operations on the pool at `path`
// and SIGKILLs it, after `draw` picks when; returns every record it sent.
Result<std::vector<Record>> KillOnce(const TreeFactory& f, const KillOptions& o, const std::string& path, uint64_t it,
                                     uint64_t draw, KillReport* rep) {
  int fds[2];
  if (pipe(fds) != 0) return Status::IoError("pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return Status::IoError("fork failed");
  if (pid == 0) {
    close(fds[0]);
    Child(f, o, path, it, fds[1]);
  }
  close(fds[1]);
  // Drain the pipe while waiting, so the child never blocks on it.
  RecordReader reader(fds[0]);
  const double kill_at = Now() + static_cast<double>(draw % (o.max_delay_us + 1)) / 1e6;
  const uint64_t kill_after = o.max_records > 0 ? draw % (o.max_records + 1) : 0;
  if (o.max_records > 0) {
    // Work-bounded: exactly when `kill_after` records have arrived (the
    // child may have sent more by then; they are read below).
    while (reader.records().size() < kill_after) {
      if (!reader.Drain(100)) break;
    }
    if (kill_after > 0) rep->guaranteed_acks += (kill_after - 1) / 2;
  } else {
    while (Now() < kill_at) {
      if (!reader.Drain(1)) break;
    }
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  while (reader.Drain(0)) {
  }
  close(fds[0]);
  return std::move(reader.records());
}

// What a killed child's records say.
struct Replayed {
  bool ready = false;           // the child opened the tree
  std::optional<Op> in_flight;  // announced, not acknowledged
  std::string failure;
};

// Applies the acknowledged operations of `recs` to `model`, checking each
// result against it.
Replayed ReplayRecords(const std::vector<Record>& recs, Model* model, KillReport* rep) {
  Replayed out;
  for (const Record& r : recs) {
    if (r.type == kReady) out.ready = true;
    if (r.type == kError) out.failure = "the child failed (see its stderr)";
    if (r.type == kIntent) out.in_flight = Op{static_cast<OpKind>(r.kind), r.key, r.value};
    if (r.type == kAck && out.in_flight) {
      Effect e = EffectOf(*model, *out.in_flight);
      if (e.expected != (r.result != 0))
        out.failure = OpString(*out.in_flight) + " returned " + (r.result ? "true" : "false") +
                      " in the child, the model expects " + (e.expected ? "true" : "false");
      ApplyEffect(model, e);
      rep->acked_ops++;
      out.in_flight.reset();
    }
  }
  return out;
}

// Reopens and recovers the pool after the kill of iteration `it` and checks
// it against `model` (plus `in_flight`, which may or may not have applied;
// the model follows the tree).  Closes cleanly on even iterations.  Returns
// "" or the failure.
std::string CheckRecovered(const TreeFactory& f, const KillOptions& o, const std::string& path, uint64_t it,
                           const std::optional<Op>& in_flight, Model* model, KillReport* rep) {
  auto h = Open(f, path, o);
  if (!h.ok()) return "reopen/recovery failed: " + h.status().ToString();
  Expect e;
  e.m0 = model;
  if (in_flight) {
    e.effect = EffectOf(*model, *in_flight);
    e.focus_key = in_flight->key;
  }
  int which = 0;
  std::string failure = CheckTree(PoolImpl::Of(h->pool.get()), h->tree.get(), e, &which);
  if (failure.empty() && which == 2 && in_flight) {
    if (e.effect.changes) rep->in_flight_survived++;
    ApplyEffect(model, e.effect);
  }
  if (failure.empty() && it % 2 == 0) {
    Status c = h->tree->Close();
    if (!c.ok()) failure = "clean close failed: " + c.ToString();
  }
  return failure;
}

}  // namespace

Result<KillReport> RunKillHarness(const TreeFactory& f, const KillOptions& o) {
  if (!f.persistent()) return Status::InvalidArgument(std::string(f.name) + " is not a persistent tree");
  const double t0 = Now();
  KillReport rep;
  const std::string path = o.dir + "/pmtree-kill-" + std::string(f.name) + "-" + std::to_string(getpid()) + "-" +
                           std::to_string(o.seed) + ".pool";
  unlink(path.c_str());
  PMTREE_RETURN_IF_ERROR(CreateKillPool(f, o, path));
  auto command = [&](uint64_t it) {
    return "pmtree crash --tree " + std::string(f.name) + " --kill " + std::to_string(it + 1) + " --seed " +
           std::to_string(o.seed);
  };
  Model model;
  std::mt19937_64 rng(o.seed);
  for (uint64_t it = 0; it < o.iterations; it++) {
    PMTREE_ASSIGN_OR_RETURN(std::vector<Record> recs, KillOnce(f, o, path, it, rng(), &rep));
    Replayed r = ReplayRecords(recs, &model, &rep);
    if (!r.ready) rep.kills_during_open++;
    if (r.failure.empty()) r.failure = CheckRecovered(f, o, path, it, r.in_flight, &model, &rep);
    rep.iterations++;
    if (!r.failure.empty()) {
      rep.failures.push_back("iteration " + std::to_string(it) + " (" + std::to_string(recs.size()) +
                             " records, in flight: " + (r.in_flight ? OpString(*r.in_flight) : std::string("none")) +
                             "): " + r.failure + "; replay: " + command(it));
      break;  // the pool no longer matches the model
    }
    if (o.progress && it % 20 == 19)
      std::fprintf(stderr, "kill %s: %llu/%llu iterations, %llu acknowledged operations checked\n",
                   std::string(f.name).c_str(), static_cast<unsigned long long>(it + 1),
                   static_cast<unsigned long long>(o.iterations), static_cast<unsigned long long>(rep.acked_ops));
  }
  rep.final_keys = model.size();
  rep.seconds = Now() - t0;
  unlink(path.c_str());
  return rep;
}

}  // namespace pmtree::crash
