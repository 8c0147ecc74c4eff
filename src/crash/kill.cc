// SPDX-License-Identifier: Apache-2.0

#include "crash/kill.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

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

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

}  // namespace

Result<KillReport> RunKillHarness(const TreeFactory& f, const KillOptions& o) {
  if (!f.persistent()) return Status::InvalidArgument(std::string(f.name) + " is not a persistent tree");
  const double t0 = Now();
  KillReport rep;
  const std::string path = o.dir + "/pmtree-kill-" + std::string(f.name) + "-" + std::to_string(getpid()) + "-" +
                           std::to_string(o.seed) + ".pool";
  unlink(path.c_str());
  {
    auto pool = Pool::Create(path, o.pool_size, f.name, 0, o.pool_options);
    if (!pool.ok()) return pool.status().Annotate("kill harness: creating " + path);
    auto tree = f.create(pool->get(), o.tree_options);
    if (!tree.ok()) {
      unlink(path.c_str());
      return tree.status().Annotate("kill harness: creating the tree");
    }
    PMTREE_RETURN_IF_ERROR((*tree)->Close());
  }
  auto command = [&](uint64_t it) {
    return "pmtree crash --tree " + std::string(f.name) + " --kill " + std::to_string(it + 1) + " --seed " +
           std::to_string(o.seed);
  };
  Model model;
  std::mt19937_64 rng(o.seed);
  for (uint64_t it = 0; it < o.iterations; it++) {
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
    std::vector<Record> recs;
    std::string partial;
    const uint64_t draw = rng();
    const double kill_at = Now() + static_cast<double>(draw % (o.max_delay_us + 1)) / 1e6;
    const uint64_t kill_after = o.max_records > 0 ? draw % (o.max_records + 1) : 0;
    auto drain = [&](int timeout_ms) -> bool {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return true;
      char buf[4096];
      ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) return false;  // EOF
      partial.append(buf, static_cast<size_t>(n));
      while (partial.size() >= sizeof(Record)) {
        Record r;
        std::memcpy(&r, partial.data(), sizeof(r));
        recs.push_back(r);
        partial.erase(0, sizeof(r));
      }
      return true;
    };
    if (o.max_records > 0) {
      // Work-bounded: exactly when `kill_after` records have arrived (the
      // child may have sent more by then; they are read below).
      while (recs.size() < kill_after) {
        if (!drain(100)) break;
      }
      if (kill_after > 0) rep.guaranteed_acks += (kill_after - 1) / 2;
    } else {
      while (Now() < kill_at) {
        if (!drain(1)) break;
      }
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    while (drain(0)) {
    }
    close(fds[0]);
    // Replay the child's records on the model.
    bool ready = false;
    std::optional<Op> in_flight;
    std::string failure;
    for (const Record& r : recs) {
      if (r.type == kReady) ready = true;
      if (r.type == kError) failure = "the child failed (see its stderr)";
      if (r.type == kIntent) in_flight = Op{static_cast<OpKind>(r.kind), r.key, r.value};
      if (r.type == kAck && in_flight) {
        Effect e = EffectOf(model, *in_flight);
        if (e.expected != (r.result != 0))
          failure = OpString(*in_flight) + " returned " + (r.result ? "true" : "false") + " in the child, the model expects " +
                    (e.expected ? "true" : "false");
        ApplyEffect(&model, e);
        rep.acked_ops++;
        in_flight.reset();
      }
    }
    if (!ready) rep.kills_during_open++;
    if (failure.empty()) {
      auto h = Open(f, path, o);
      if (!h.ok()) {
        failure = "reopen/recovery failed: " + h.status().ToString();
      } else {
        Expect e;
        e.m0 = &model;
        if (in_flight) {
          e.effect = EffectOf(model, *in_flight);
          e.focus_key = in_flight->key;
        }
        int which = 0;
        failure = CheckTree(PoolImpl::Of(h->pool.get()), h->tree.get(), e, &which);
        if (failure.empty() && which == 2 && in_flight) {
          if (e.effect.changes) rep.in_flight_survived++;
          ApplyEffect(&model, e.effect);
        }
        if (failure.empty() && it % 2 == 0) {
          Status c = h->tree->Close();
          if (!c.ok()) failure = "clean close failed: " + c.ToString();
        }
      }
    }
    rep.iterations++;
    if (!failure.empty()) {
      rep.failures.push_back("iteration " + std::to_string(it) + " (" + std::to_string(recs.size()) +
                             " records, in flight: " + (in_flight ? OpString(*in_flight) : std::string("none")) +
                             "): " + failure + "; replay: " + command(it));
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
