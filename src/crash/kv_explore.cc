// SPDX-License-Identifier: Apache-2.0
//
// The crash explorer on key-value store workloads (kv_explore.h).

#include "crash/kv_explore.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <set>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "crash/explorer_internal.h"
#include "crash/shadow.h"
#include "crash/trace.h"
#include "pmtree/kv.h"
#include "pmtree/registry.h"

namespace pmtree::crash {
namespace {

// ---- the model --------------------------------------------------------------------------

struct KvVal {
  bool is_fields = false;
  std::string value;
  kv::FieldMap fields;
  bool operator==(const KvVal& o) const {
    return is_fields == o.is_fields && (is_fields ? fields == o.fields : value == o.value);
  }
};
using KvModel = std::map<std::string, KvVal, std::less<>>;

// n bytes that depend on `tag` (a multi-line value differs in every line).
std::string Filler(uint64_t n, uint64_t tag) {
  std::string s(n, '\0');
  uint64_t x = tag * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (uint64_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s[i] = static_cast<char>(x >> 56);
  }
  return s;
}

std::string Describe(const KvVal* v) {
  if (v == nullptr) return "absent";
  if (!v->is_fields) return std::to_string(v->value.size()) + " B value";
  return std::to_string(v->fields.size()) + " fields";
}

// The first key where `got` and `want` differ, described.
std::string FirstDifference(const KvModel& got, const KvModel& want) {
  auto find = [](const KvModel& m, const std::string& k) -> const KvVal* {
    auto it = m.find(k);
    return it == m.end() ? nullptr : &it->second;
  };
  std::set<std::string> keys;
  for (const auto& [k, v] : got) keys.insert(k);
  for (const auto& [k, v] : want) keys.insert(k);
  for (const std::string& k : keys) {
    const KvVal* g = find(got, k);
    const KvVal* w = find(want, k);
    if (g != nullptr && w != nullptr && *g == *w) continue;
    std::string d = "key '" + k + "': recovered " + Describe(g) + ", expected " + Describe(w);
    if (g != nullptr && w != nullptr && g->is_fields == w->is_fields) d += " (contents differ)";
    return d;
  }
  return "no difference";
}

// ---- the scenarios ------------------------------------------------------------------------

// DRAM state of the traced session that outlives one operation.
struct Session {
  kv::Store* store = nullptr;
  const kv::Snapshot* held = nullptr;
};

struct KvOp {
  std::string name;                           // "put(n, 16384 B)"
  std::function<Status(Session&)> run;        // null: the traced open
  std::function<void(KvModel*)> apply;        // null: the contents do not change
  // Null: the operation is atomic.  Else, given the contents before it, the
  // other states a crash inside it may leave (a group commit's subsets).
  std::function<std::vector<KvModel>(const KvModel&)> mixes;
};

struct KvScenario {
  std::string name;
  std::vector<KvOp> ops;  // ops[0] is the traced open, the last a Close
  // Untraced operations after the pre-state, then a crash instead of the
  // clean close: the traced open is a recovery.
  std::vector<KvOp> crash_after;
};

Status Found(Result<bool> r, const std::string& what) {
  if (!r.ok()) return r.status();
  if (!*r) return Status::Corruption(what + " found no key, the model has it");
  return Status::Ok();
}

KvOp Put(const std::string& k, std::string v) {
  const std::string name = "put(" + k + ", " + std::to_string(v.size()) + " B)";
  return {name, [k, v](Session& s) { return s.store->Put(k, v); },
          [k, v](KvModel* m) { (*m)[k] = KvVal{false, v, {}}; }};
}

KvOp PutFields(const std::string& k, kv::FieldMap f) {
  return {"put_fields(" + k + ", " + std::to_string(f.size()) + " fields)",
          [k, f](Session& s) { return s.store->PutFields(k, f); },
          [k, f](KvModel* m) { (*m)[k] = KvVal{true, {}, f}; }};
}

KvOp UpdateFields(const std::string& k, kv::FieldMap f) {
  return {"update_fields(" + k + ", " + std::to_string(f.size()) + " field)",
          [k, f](Session& s) { return Found(s.store->UpdateFields(k, f), "update_fields(" + k + ")"); },
          [k, f](KvModel* m) {
            for (const auto& [n, v] : f) (*m)[k].fields[n] = v;
          }};
}

KvOp Delete(const std::string& k) {
  return {"delete(" + k + ")", [k](Session& s) { return Found(s.store->Delete(k), "delete(" + k + ")"); },
          [k](KvModel* m) { m->erase(k); }};
}

using Writes = std::vector<std::pair<std::string, std::optional<std::string>>>;

void ApplyWrites(const Writes& w, KvModel* m) {
  for (const auto& [k, v] : w) {
    if (v) (*m)[k] = KvVal{false, *v, {}};
    else m->erase(k);
  }
}

KvOp Batch(Writes w) {
  return {"write(batch of " + std::to_string(w.size()) + ")",
          [w](Session& s) {
            kv::WriteBatch b;
            for (const auto& [k, v] : w) v ? b.Put(k, *v) : b.Delete(k);
            return s.store->Write(b);
          },
          [w](KvModel* m) { ApplyWrites(w, m); }};
}

// A group commit (Store::PutMany, the server's pipelined SETs): not atomic,
// so a crash inside it may keep any subset of its puts, each whole.
KvOp PutMany(std::vector<std::pair<std::string, std::string>> w) {
  return {"put_many(" + std::to_string(w.size()) + " keys)",
          [w](Session& s) {
            std::vector<std::pair<std::string_view, std::string_view>> puts(w.begin(), w.end());
            size_t applied = 0;
            PMTREE_RETURN_IF_ERROR(s.store->PutMany(puts, &applied));
            if (applied != w.size()) return Status::Corruption("put_many applied " + std::to_string(applied));
            return Status::Ok();
          },
          [w](KvModel* m) {
            for (const auto& [k, v] : w) (*m)[k] = KvVal{false, v, {}};
          },
          [w](const KvModel& before) {
            std::vector<KvModel> out;
            for (uint64_t mask = 1; mask + 1 < (1ull << w.size()); mask++) {
              KvModel m = before;
              for (size_t i = 0; i < w.size(); i++)
                if (mask & (1ull << i)) m[w[i].first] = KvVal{false, w[i].second, {}};
              out.push_back(std::move(m));
            }
            return out;
          }};
}

KvOp Txn(Writes w) {
  return {"transaction(" + std::to_string(w.size()) + " writes).commit",
          [w](Session& s) {
            auto t = s.store->BeginTransaction();
            for (const auto& [k, v] : w) PMTREE_RETURN_IF_ERROR(v ? t->Put(k, *v) : t->Delete(k));
            return t->Commit();
          },
          [w](KvModel* m) { ApplyWrites(w, m); }};
}

KvOp TakeSnapshot() {
  return {"get_snapshot", [](Session& s) {
            s.held = s.store->GetSnapshot();
            return Status::Ok();
          },
          nullptr};
}

KvOp ReleaseSnapshot() {
  return {"release_snapshot (GC of the versions it kept)", [](Session& s) {
            s.store->ReleaseSnapshot(s.held);
            s.held = nullptr;
            return Status::Ok();
          },
          nullptr};
}

// The pre-state every scenario starts from (built untraced, closed cleanly).
std::vector<KvOp> PreState() {
  return {Put("a", Filler(100, 1)), Put("b", Filler(2000, 2)), Put("d", Filler(60, 3)),
          PutFields("f", {{"f0", Filler(100, 4)}, {"f1", Filler(100, 5)}, {"f2", Filler(100, 6)}})};
}

std::vector<KvScenario> Scenarios(uint64_t value_bytes) {
  std::vector<KvScenario> out = {
      {"put-1k", {Put("n", Filler(1024, 11))}},
      {"put-large", {Put("n", Filler(value_bytes, 12))}},
      {"replace", {Put("b", Filler(3000, 13))}},
      {"put-fields", {PutFields("g", {{"x", "1"}, {"y", Filler(300, 14)}})}},
      {"field-update", {UpdateFields("f", {{"f1", Filler(100, 15)}})}},
      {"batch", {Batch({{"a", Filler(500, 16)}, {"c", Filler(1000, 17)}, {"d", std::nullopt}, {"b", Filler(40, 18)}})}},
      {"transaction", {Txn({{"a", Filler(200, 19)}, {"e", Filler(70, 20)}, {"b", std::nullopt}})}},
      // Three replaces and a new key in one group: lbtree leaves its value
      // words' fence to the group (UpdateHintedUnfenced), so a crash before
      // that fence may keep any subset of them.
      {"put-many", {PutMany({{"a", Filler(100, 40)}, {"b", Filler(300, 41)}, {"d", Filler(60, 42)}, {"m", Filler(80, 43)}})}},
      {"delete", {Delete("d")}},
      {"gc-replace", {TakeSnapshot(), Put("a", Filler(600, 21)), ReleaseSnapshot()}},
      {"gc-delete", {TakeSnapshot(), Delete("b"), ReleaseSnapshot()}},
      // GC of a field table whose other fields' blocks the new table shares (K8).
      {"gc-field-update", {TakeSnapshot(), UpdateFields("f", {{"f0", Filler(150, 24)}}), ReleaseSnapshot()}},
      // Two commits in a row: the second reuses the first's log slot and
      // possibly its freed log block.
      {"batch-after-batch",
       {Batch({{"a", Filler(300, 25)}, {"c", Filler(80, 26)}}), Batch({{"c", std::nullopt}, {"a", Filler(90, 27)}})}},
      // A crash with a snapshot holding a's old version: recovery (traced)
      // trims the chain and frees the old version (K7), then a write.
      {"recover-after-crash", {Put("n", Filler(100, 22))}, {TakeSnapshot(), Put("a", Filler(600, 23))}},
  };
  // Every scenario opens first and closes last: a crash during Close, or
  // right after it, must find the store's clean-shutdown state complete (an
  // open after a clean close trusts the saved allocator state and the chains).
  for (KvScenario& s : out) {
    s.ops.insert(s.ops.begin(), KvOp{s.crash_after.empty() ? "open (after a clean close)" : "open (recovery after a crash)",
                                     nullptr, nullptr});
    s.ops.push_back(KvOp{"close", [](Session& session) { return session.store->Close(); }, nullptr});
  }
  return out;
}

// ---- checks ----------------------------------------------------------------------------------

std::string ReadAll(kv::Store& s, KvModel* out) {
  auto it = s.NewIterator();
  for (it->SeekToFirst(); it->Valid(); it->Next())
    (*out)[std::string(it->key())] = KvVal{it->is_fields(), std::string(it->value()), it->fields()};
  if (!it->status().ok()) return "iteration failed: " + it->status().ToString();
  return "";
}

// Verify, then the scan and a point read of every key against `want`.
std::string CheckStore(kv::Store& s, const KvModel& want) {
  if (Status v = s.Verify(); !v.ok()) return "Verify: " + v.ToString();
  KvModel got;
  if (std::string e = ReadAll(s, &got); !e.empty()) return e;
  if (!(got == want)) return "scan: " + FirstDifference(got, want);
  for (const auto& [k, v] : want) {
    KvVal r{v.is_fields, {}, {}};
    Result<bool> found = v.is_fields ? s.GetFields(k, {}, &r.fields) : s.Get(k, &r.value);
    if (!found.ok() || !*found || !(r == v))
      return "get(" + k + "): " + (found.ok() ? (*found ? "wrong contents" : "absent") : found.status().ToString());
  }
  return "";
}

// Writes on a recovered store (latent damage shows up here), checked.
std::string Continue(kv::Store& s, KvModel m) {
  const std::vector<KvOp> more = {Put("zz", Filler(300, 31)), Delete(m.empty() ? "zz" : m.begin()->first),
                                  Batch({{"n", Filler(200, 32)}, {"zy", Filler(90, 33)}})};
  Session session{&s, nullptr};
  for (const KvOp& op : more) {
    if (Status st = op.run(session); !st.ok()) return "continuation " + op.name + ": " + st.ToString();
    op.apply(&m);
  }
  std::string e = CheckStore(s, m);
  return e.empty() ? e : "after the continuation writes: " + e;
}

std::string ReplayCommand(const KvExploreOptions& o, const ImageRef& r) {
  std::string c = "pmtree crash --kv --tree " + o.engine + " --mode " + std::string(ModeName(o.mode));
  if (o.seed != 1) c += " --seed " + std::to_string(o.seed);
  if (o.value_bytes != 16384) c += " --value-bytes " + std::to_string(o.value_bytes);
  if (o.max_images != 4096) c += " --max-images " + std::to_string(o.max_images);
  if (o.samples != 512) c += " --samples " + std::to_string(o.samples);
  if (o.pool_size != (4ull << 20)) c += " --pool-size " + std::to_string(o.pool_size);
  if (o.tree_options.node_size != 0) c += " --node-size " + std::to_string(o.tree_options.node_size);
  for (const auto& [k, v] : o.tree_options.extra) c += " --tree-option " + k + "=" + v;
  if (o.continuation_every != 8) c += " --continuation-every " + std::to_string(o.continuation_every);
  if (o.recovery_crash_every != 0) c += " --recovery-crash-every " + std::to_string(o.recovery_crash_every);
  if (!o.recovery_crash) c += " --no-recovery-crash";
  if (o.recovery_images != 64) c += " --recovery-images " + std::to_string(o.recovery_images);
  if (!o.drop_site.empty()) c += " --drop " + o.drop_site + (o.drop_fence ? "@fence" : "@flush");
  if (o.testing_skip_redo) c += " --kv-flaw skip-redo";
  if (o.testing_skip_record_persist) c += " --kv-flaw skip-record-persist";
  return c + " --replay " + ImageRefString(r);
}

// A crash point of a replayed trace: the operation in flight, where in it,
// and whether it is the operation's end (its effect acknowledged).
struct PointAt {
  uint64_t op;
  std::string where;
  bool at_end;
};

// Replays `log` on `shadow` and calls `point` at every crash point inside an
// operation: before each fence and at each operation's end in ADR and strict,
// after every store piece and at each end in eADR (docs/crash_model.md
// section 1).  A point whose image set equals the previous one's (no store
// or commit between them) is skipped.  Stops as soon as `point` returns false.
// A mutant (`drop`, a site name, non-empty) drops every flush, or with
// `drop_fence` every fence, issued there.
void ReplayPoints(const TraceLog& log, Shadow& shadow, const std::string& drop, bool drop_fence,
                  const std::function<bool(const PointAt&)>& point) {
  const bool eadr = shadow.mode() == Mode::kEadr;
  uint32_t drop_id = UINT32_MAX;
  for (uint32_t i = 0; i < log.sites.size() && !drop.empty(); i++)
    if (log.sites.Name(i) == drop) drop_id = i;
  uint64_t op = 0;
  bool inside = false;
  uint64_t last_gen = UINT64_MAX;
  auto at = [&](std::string where, bool at_end) {
    if (!at_end && shadow.generation() == last_gen) return true;
    last_gen = at_end ? UINT64_MAX : shadow.generation();
    return point(PointAt{op, std::move(where), at_end});
  };
  for (const Event& ev : log.events) {
    switch (ev.kind) {
      case EventKind::kOpBegin:
        op = ev.off;
        inside = true;
        last_gen = UINT64_MAX;
        break;
      case EventKind::kOpEnd:
        shadow.OpEnd();
        if (!at("", true)) return;
        inside = false;
        break;
      case EventKind::kStore:
      case EventKind::kNtStore:
        if (!eadr) {
          shadow.Store(ev.off, &log.bytes[ev.data], ev.len, ev.site, ev.kind == EventKind::kNtStore);
          break;
        }
        for (uint64_t off = 0; off < ev.len;) {
          const uint64_t n = std::min<uint64_t>(ev.len - off, 8 - ((ev.off + off) & 7));
          shadow.Store(ev.off + off, &log.bytes[ev.data + off], n, ev.site, false);
          off += n;
          if (inside && !at("after the store at " + log.sites.Name(ev.site), false)) return;
        }
        break;
      case EventKind::kFlush:
        if (!drop_fence && ev.site == drop_id) break;
        shadow.Flush(ev.off, ev.len, ev.site);
        break;
      case EventKind::kFence:
        if (drop_fence && ev.site == drop_id) break;
        if (inside && !eadr && !at("before the fence at " + log.sites.Name(ev.site), false)) return;
        shadow.Fence(ev.site);
        break;
    }
  }
}

// ---- one scenario ------------------------------------------------------------------------------

// A unique pool file for one scenario under `dir`, and its removal (also by
// the parent when a worker died before removing it).
std::string PoolPath(const std::string& dir) {
  static std::atomic<uint64_t> counter{0};
  return dir + "/pmtree-kvcrash-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".pool";
}

void RemovePool(const std::string& path) {
  unlink(path.c_str());
  unlink((path + ".creating").c_str());
}

// Where a worker is (shared with the parent): the image it checks and when
// it last made progress.
struct Position {
  std::atomic<uint64_t> point{0}, image{0}, op{0};
  std::atomic<int64_t> heartbeat_ms{0};
};

int64_t NowMs() { return static_cast<int64_t>(Now() * 1000); }

class ScenarioRun {
 public:
  ScenarioRun(const KvExploreOptions& o, const KvScenario& sc, uint64_t index, KvExploreReport* rep,
              Position* pos)
      : o_(o), sc_(sc), index_(index), rep_(rep), pos_(pos) {}

  // `path`: the scenario's pool file (PoolPath), removed before and after.
  Status Run(const std::string& path) {
    path_ = path;
    RemovePool(path_);
    Status s = RunIn();
    RemovePool(path_);
    return s;
  }

 private:

  kv::Options BaseOptions() const {
    kv::Options ko;
    ko.engine = o_.engine;
    ko.pool_size = o_.pool_size;
    ko.tree_options = o_.tree_options;
    ko.pool_options.use_env = false;
    ko.pool_options.counting = false;
    return ko;
  }

  Status RunIn() {
    // 1. The pre-state, untraced, closed cleanly (or crashed).
    KvModel model;
    {
      auto st = kv::Store::Open(path_, BaseOptions());
      if (!st.ok()) return st.status().Annotate("kv crash: creating the store");
      Session session{st->get(), nullptr};
      std::vector<KvOp> pre = PreState();
      pre.insert(pre.end(), sc_.crash_after.begin(), sc_.crash_after.end());
      for (const KvOp& op : pre) {
        PMTREE_RETURN_IF_ERROR(op.run(session).Annotate("kv crash: pre-state " + op.name));
        if (op.apply) op.apply(&model);
      }
      if (sc_.crash_after.empty()) PMTREE_RETURN_IF_ERROR((*st)->Close());
      st->reset();              // a crash when not closed: every store made is in the file
      delete session.held;      // DRAM only; the store that issued it is gone
    }
    // P before the traced session: the file as the close or crash left it.
    PMTREE_RETURN_IF_ERROR(img_.Open(o_.pool_size));
    PMTREE_RETURN_IF_ERROR(rec_a_.Open(o_.pool_size));
    PMTREE_RETURN_IF_ERROR(rec_b_.Open(o_.pool_size));
    {
      const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::IoError("kv crash: cannot read back " + path_);
      const ssize_t n = pread(fd, img_.map, o_.pool_size, 0);
      close(fd);
      if (n != static_cast<ssize_t>(o_.pool_size)) return Status::IoError("kv crash: short read of " + path_);
    }
    // Bytes past the last nonzero one of P stay zero unless a store reaches them.
    for (extent_ = o_.pool_size; extent_ > 0 && img_.map[extent_ - 1] == 0;) extent_--;
    // 2. The traced session: the open is operation 0.
    models_ = {model, model};  // before the open, and after it (the open changes nothing)
    mixes_ = {{}};
    for (size_t i = 1; i < sc_.ops.size(); i++) {
      mixes_.push_back(sc_.ops[i].mixes ? sc_.ops[i].mixes(model) : std::vector<KvModel>{});
      if (sc_.ops[i].apply) sc_.ops[i].apply(&model);
      models_.push_back(model);
    }
    TraceLog log;
    {
      TracingBackend* tb = nullptr;
      kv::Options ko = BaseOptions();
      ko.pool_options.backend = BackendKind::kCustom;
      ko.pool_options.backend_factory = TracingFactory(&log, &tb);
      ko.testing_skip_record_persist = o_.testing_skip_record_persist;
      log.events.push_back(Event{EventKind::kOpBegin, 0, 0, 0, 0});  // no backend exists before the open
      auto st = kv::Store::Open(path_, ko);
      if (!st.ok() || tb == nullptr) {
        Violation({index_, 0, 0}, 0, "-", "-",
                  "the traced open failed: " + (st.ok() ? std::string("no backend") : st.status().ToString()));
        return Status::Ok();
      }
      tb->EndOp(0);
      Session session{st->get(), nullptr};
      for (size_t i = 1; i < sc_.ops.size(); i++) {
        tb->BeginOp(i);
        Status s = sc_.ops[i].run(session);
        tb->EndOp(i);
        if (!s.ok()) {
          Violation({index_, 0, 0}, i, "while running the workload (no crash)", "-", s.ToString());
          return Status::Ok();
        }
      }
      if (session.held != nullptr) (*st)->ReleaseSnapshot(session.held);
      st->reset();  // a crash: no Close()
    }
    extent_ = std::max(extent_, log.high_water);
    CountStoreSites(log);
    image_path_ = PathOf(img_);
    Replay(log);
    return Status::Ok();
  }

  // 3. The trace on the shadow model, a crash point at a time.
  void Replay(const TraceLog& log) {
    Shadow shadow(img_.map, img_.size, o_.mode);
    uint64_t op = UINT64_MAX;
    std::unordered_set<uint64_t> seen;  // image hashes checked in this operation
    ReplayPoints(log, shadow, o_.drop_site, o_.drop_fence, [&](const PointAt& pt) {
      if (pt.op != op) {
        op = pt.op;
        seen.clear();
        rep_->operations++;
      }
      CrashPoint(shadow, pt.op, pt.at_end ? "end of " + sc_.ops[pt.op].name : pt.where, pt.at_end, &seen);
      return !stop_;
    });
  }

  // 4. Every image of one crash point, recovered and checked.
  void CrashPoint(Shadow& shadow, uint64_t op, const std::string& where, bool at_end,
                  std::unordered_set<uint64_t>* seen) {
    const uint64_t p = point_++;
    if (o_.replay && p != o_.replay->point) return;
    const uint64_t seed = Mix(o_.seed ^ Mix(index_ * 1000003 + p));
    std::vector<Unit*> units;
    if (o_.mode != Mode::kEadr) units = shadow.DirtyUnits();
    ImagePlan plan(units, img_.map, o_.max_images, o_.samples, seed);
    rep_->crash_points++;
    if (plan.exhaustive()) rep_->crash_points_exhaustive++;
    const KvModel& m0 = models_[op];
    const KvModel& m1 = models_[op + 1];
    mixes_now_ = &mixes_[op];
    std::vector<uint32_t> choice;
    uint64_t checked_here = 0;
    for (uint64_t i = 0; i < plan.planned(); i++) {
      if (o_.replay && i != o_.replay->image) continue;
      pos_->point.store(p);
      pos_->image.store(i);
      pos_->op.store(op);
      pos_->heartbeat_ms.store(NowMs());
      plan.Apply(i, &choice);
      const uint64_t h = plan.ImageHash(shadow.p_hash()) ^ (at_end ? 0x5bd1e995ull : 0);
      if (!o_.replay && !seen->insert(h).second) {
        rep_->images_deduplicated++;
        continue;
      }
      // Continuation on the first image of each point (in eADR, where every
      // store is a point with one image, of each operation's end) and on
      // every n-th image of the scenario.
      const bool first_here = checked_here++ == 0 && (o_.mode != Mode::kEadr || at_end);
      const bool cont = o_.continuation_every > 0 && (first_here || checked_++ % o_.continuation_every == 0);
      std::string failure = CheckImage(image_path_, m0, m1, !at_end, cont);
      rep_->images_checked++;
      const bool recovery_point =
          o_.recovery_crash && (at_end || p % RecoveryCrashEvery() == 0);
      if (failure.empty() && recovery_point && (i == 0 || i + 1 == plan.planned()))
        failure = CrashDuringRecovery(m0, m1, !at_end, seed ^ Mix(i + 7));
      if (o_.replay)
        std::fprintf(stderr, "replay %s: scenario %s; in flight %s; %s; image %s: %s\n",
                     ImageRefString({index_, p, i}).c_str(), sc_.name.c_str(), sc_.ops[op].name.c_str(),
                     where.c_str(), plan.Describe(choice).c_str(), failure.empty() ? "OK" : failure.c_str());
      if (!failure.empty()) {
        Violation({index_, p, i}, op, where, plan.Describe(choice), failure);
        break;  // one ticket per crash point is enough
      }
      Progress();
    }
  }

  // The store's flush and fence sites in `log`, added to the report.
  void CountStoreSites(const TraceLog& log) {
    for (const Event& ev : log.events) {
      if (ev.kind != EventKind::kFlush && ev.kind != EventKind::kFence) continue;
      const std::string& name = log.sites.Name(ev.site);
      if (name.rfind("src/kv/", 0) != 0) continue;
      const char* kind = ev.kind == EventKind::kFlush ? "flush" : "fence";
      auto it = std::find_if(rep_->store_sites.begin(), rep_->store_sites.end(),
                             [&](const SiteReport& r) { return r.name == name && r.kind == kind; });
      if (it == rep_->store_sites.end()) {
        SiteReport r;
        r.name = name;
        r.function = log.sites.Function(ev.site);
        r.kind = kind;
        r.covered = true;  // every operation of a scenario is checked
        it = rep_->store_sites.insert(rep_->store_sites.end(), r);
      }
      it->reached++;
    }
  }

  uint64_t RecoveryCrashEvery() const {
    if (o_.recovery_crash_every > 0) return o_.recovery_crash_every;
    return o_.mode == Mode::kEadr ? 16 : 1;
  }

  static std::string PathOf(const ImageFile& f) { return "/proc/self/fd/" + std::to_string(f.fd); }

  // Traces the store's recovery of the image in img_ (on a copy) and checks
  // every crash image of it (bounded).  Returns "" or the failure.
  std::string CrashDuringRecovery(const KvModel& m0, const KvModel& m1, bool m0_ok, uint64_t seed) {
    rec_a_.Reset(extent_);
    std::memcpy(rec_a_.map, img_.map, extent_);
    TraceLog rlog;
    {
      TracingBackend* tb = nullptr;
      kv::Options ko = BaseOptions();
      ko.create_if_missing = false;
      ko.testing_skip_redo = o_.testing_skip_redo;
      ko.pool_options.backend = BackendKind::kCustom;
      ko.pool_options.backend_factory = TracingFactory(&rlog, &tb);
      rlog.events.push_back(Event{EventKind::kOpBegin, 0, 0, 0, 0});
      auto st = kv::Store::Open(PathOf(rec_a_), ko);
      if (!st.ok() || tb == nullptr) return "";  // the plain check reports it
      tb->EndOp(0);
      st->reset();  // a crash right after recovery: nothing more to see
    }
    rec_a_.dirty = std::max(rec_a_.dirty, rlog.high_water);
    bool writes = false;
    for (const Event& ev : rlog.events) writes |= ev.kind == EventKind::kStore || ev.kind == EventKind::kNtStore;
    if (!writes) return "";
    rep_->recoveries_crashed++;
    rec_b_.Reset(std::max(extent_, rlog.high_water));
    std::memcpy(rec_b_.map, img_.map, extent_);
    Shadow shadow(rec_b_.map, rec_b_.size, o_.mode);
    const std::string path = PathOf(rec_b_);
    uint64_t q = 0;
    std::string failure;
    auto point = [&](const std::string& where) {
      std::vector<Unit*> units;
      if (o_.mode != Mode::kEadr) units = shadow.DirtyUnits();
      ImagePlan plan(units, rec_b_.map, o_.recovery_images, 16, seed ^ Mix(q));
      std::vector<uint32_t> choice;
      for (uint64_t j = 0; j < plan.planned() && failure.empty(); j++) {
        plan.Apply(j, &choice);
        pos_->heartbeat_ms.store(NowMs());
        rep_->recovery_crash_images++;
        const std::string f = CheckImage(path, m0, m1, m0_ok, false);
        if (!f.empty())
          failure = "crash during recovery (" + where + ", recovery image " + std::to_string(q) + ":" +
                    std::to_string(j) + ", " + plan.Describe(choice) + "), then recovery again: " + f;
      }
      q++;
      return failure.empty();
    };
    ReplayPoints(rlog, shadow, o_.drop_site, o_.drop_fence,
                 [&](const PointAt& pt) { return point(pt.at_end ? "end of recovery" : pt.where); });
    return failure;
  }

  std::string CheckImage(const std::string& path, const KvModel& m0, const KvModel& m1, bool m0_ok,
                         bool continuation) {
    kv::Options ro = BaseOptions();
    ro.create_if_missing = false;
    ro.pool_options.private_mapping = true;  // recovery writes never reach the image
    ro.testing_skip_redo = o_.testing_skip_redo;
    if (o_.testing_abort_in_check) std::abort();
    auto st = kv::Store::Open(path, ro);
    if (!st.ok()) return "kv::Store::Open: " + st.status().ToString();
    const std::string after = CheckStore(**st, m1);
    const KvModel* state = &m1;
    if (!after.empty()) {
      if (!m0_ok) return "not the state after the acknowledged operation: " + after;
      const std::string before = CheckStore(**st, m0);
      state = &m0;
      if (!before.empty()) {
        state = nullptr;
        for (const KvModel& m : *mixes_now_)
          if (CheckStore(**st, m).empty()) {
            state = &m;
            break;
          }
        if (state == nullptr)
          return "neither the state before nor after the operation in flight" +
                 std::string(mixes_now_->empty() ? "" : " nor a mix it allows") + ": after: " + after +
                 "; before: " + before;
      }
    }
    if (!continuation) return "";
    rep_->continuation_runs++;
    return Continue(**st, *state);
  }

  void Violation(const ImageRef& r, uint64_t op, const std::string& point, const std::string& image,
                 const std::string& failure) {
    rep_->violations++;
    if (o_.stop_at_first_violation) stop_ = true;
    if (rep_->tickets.size() >= o_.max_tickets) return;
    Ticket t;
    t.where = r;
    t.scenario = sc_.name;
    t.op = op < sc_.ops.size() ? sc_.ops[op].name : "?";
    t.point = point;
    t.image = image;
    t.failure = failure;
    t.command = ReplayCommand(o_, r);
    rep_->tickets.push_back(std::move(t));
  }

  void Progress() {
    if (!o_.progress) return;
    static double last = 0;
    if (Now() - last < 2) return;
    last = Now();
    std::fprintf(stderr, "kv crash %s %s: scenario %s, %llu crash points, %llu images, %llu violations\n",
                 o_.engine.c_str(), std::string(ModeName(o_.mode)).c_str(), sc_.name.c_str(),
                 static_cast<unsigned long long>(rep_->crash_points),
                 static_cast<unsigned long long>(rep_->images_checked),
                 static_cast<unsigned long long>(rep_->violations));
  }

 public:
  bool stopped() const { return stop_; }

 private:
  const KvExploreOptions& o_;
  const KvScenario& sc_;
  const uint64_t index_;
  KvExploreReport* rep_;
  Position* pos_;
  std::string path_;
  std::string image_path_;
  ImageFile img_;
  ImageFile rec_a_, rec_b_;  // crash during recovery: the traced recovery, its crash images
  uint64_t extent_ = 0;      // bytes [extent_, size) of every image are zero
  std::vector<KvModel> models_;  // models_[j]: the contents before operation j, [j + 1] after it
  std::vector<std::vector<KvModel>> mixes_;  // mixes_[j]: other states a crash inside operation j may leave
  const std::vector<KvModel>* mixes_now_ = nullptr;  // those of the operation being checked
  uint64_t point_ = 0;
  uint64_t checked_ = 0;  // images checked in this scenario (continuation sampling)
  bool stop_ = false;
};

// ---- worker processes ------------------------------------------------------------------------

using json = nlohmann::json;

json ToJson(const KvExploreReport& r, bool stopped) {
  json j = {{"operations", r.operations}, {"crash_points", r.crash_points},
            {"crash_points_exhaustive", r.crash_points_exhaustive}, {"images_checked", r.images_checked},
            {"images_deduplicated", r.images_deduplicated}, {"continuation_runs", r.continuation_runs},
            {"recoveries_crashed", r.recoveries_crashed}, {"recovery_crash_images", r.recovery_crash_images},
            {"violations", r.violations}, {"stopped", stopped}};
  j["tickets"] = json::array();
  for (const Ticket& t : r.tickets)
    j["tickets"].push_back({t.where.scenario, t.where.point, t.where.image, t.scenario, t.op, t.point, t.image,
                            t.failure, t.command});
  j["sites"] = json::array();
  for (const SiteReport& s : r.store_sites) j["sites"].push_back({s.name, s.function, s.kind, s.reached});
  return j;
}

// Adds a worker's report to `rep`; returns its "stopped".
bool Merge(const json& j, size_t max_tickets, KvExploreReport* rep) {
  rep->operations += j["operations"].get<uint64_t>();
  rep->crash_points += j["crash_points"].get<uint64_t>();
  rep->crash_points_exhaustive += j["crash_points_exhaustive"].get<uint64_t>();
  rep->images_checked += j["images_checked"].get<uint64_t>();
  rep->images_deduplicated += j["images_deduplicated"].get<uint64_t>();
  rep->continuation_runs += j["continuation_runs"].get<uint64_t>();
  rep->recoveries_crashed += j["recoveries_crashed"].get<uint64_t>();
  rep->recovery_crash_images += j["recovery_crash_images"].get<uint64_t>();
  rep->violations += j["violations"].get<uint64_t>();
  for (const json& t : j["tickets"]) {
    if (rep->tickets.size() >= max_tickets) break;
    Ticket k;
    k.where = ImageRef{t[0].get<uint64_t>(), t[1].get<uint64_t>(), t[2].get<uint64_t>()};
    k.scenario = t[3];
    k.op = t[4];
    k.point = t[5];
    k.image = t[6];
    k.failure = t[7];
    k.command = t[8];
    rep->tickets.push_back(std::move(k));
  }
  for (const json& s : j["sites"]) {
    const std::string name = s[0], kind = s[2];
    auto it = std::find_if(rep->store_sites.begin(), rep->store_sites.end(),
                           [&](const SiteReport& r) { return r.name == name && r.kind == kind; });
    if (it == rep->store_sites.end()) {
      SiteReport r;
      r.name = name;
      r.function = s[1];
      r.kind = kind;
      r.covered = true;
      it = rep->store_sites.insert(rep->store_sites.end(), r);
    }
    it->reached += s[3].get<uint64_t>();
  }
  return j["stopped"].get<bool>();
}

// Runs scenario `i` in a forked worker and merges what it found; a worker
// that dies or hangs is a violation at its position.  Returns whether to stop.
Result<bool> RunIsolated(const KvExploreOptions& o, const KvScenario& sc, uint64_t i, KvExploreReport* rep) {
  void* mem = mmap(nullptr, sizeof(Position), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Status::IoError("kv crash: mmap of the worker's position failed");
  Position* pos = new (mem) Position();
  const int out = memfd_create("pmtree-kvcrash-results", MFD_CLOEXEC);
  if (out < 0) {
    munmap(mem, sizeof(Position));
    return Status::IoError("kv crash: memfd_create for the worker's results failed");
  }
  pos->heartbeat_ms.store(NowMs());
  const std::string path = PoolPath(o.dir);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    KvExploreReport part;
    ScenarioRun run(o, sc, i, &part, pos);
    const Status s = run.Run(path);
    json j = ToJson(part, run.stopped());
    if (!s.ok()) j["error"] = s.ToString();
    const std::string text = j.dump();
    for (size_t done = 0; done < text.size();) {
      const ssize_t w = write(out, text.data() + done, text.size() - done);
      if (w <= 0) _exit(3);
      done += static_cast<size_t>(w);
    }
    _exit(0);
  }
  Status error;
  bool stop = false;
  if (pid < 0) error = Status::IoError("kv crash: fork of the worker failed");
  int status = 0;
  bool hung = false;
  while (pid > 0) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (NowMs() - pos->heartbeat_ms.load() > static_cast<int64_t>(o.hang_seconds * 1000)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      hung = true;
      break;
    }
    usleep(1000);
  }
  if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && !hung) {
    std::string text;
    char buf[65536];
    ssize_t n;
    lseek(out, 0, SEEK_SET);
    while ((n = read(out, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) error = Status::IoError("kv crash: the worker's results do not parse");
    else if (j.contains("error")) error = Status::IoError("kv crash worker: " + j["error"].get<std::string>());
    else stop = Merge(j, o.max_tickets, rep);
  } else if (pid > 0) {
    // The worker's partial counts are lost; its position is the ticket.
    const ImageRef where{i, pos->point.load(), pos->image.load()};
    rep->violations++;
    if (rep->tickets.size() < o.max_tickets) {
      Ticket t;
      t.where = where;
      t.scenario = sc.name;
      t.op = sc.ops[std::min<uint64_t>(pos->op.load(), sc.ops.size() - 1)].name;
      t.point = "-";
      t.image = "-";
      const char* sig = WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : nullptr;
      t.failure = hung ? "no progress for " + std::to_string(static_cast<int>(o.hang_seconds)) +
                             " s: the worker was killed (a hang) while checking this image or the next"
                       : std::string("the worker died (") +
                             (sig ? sig : "exit status " + std::to_string(WEXITSTATUS(status))) +
                             ") while checking this image or the next; the rest of the scenario was not checked";
      t.command = ReplayCommand(o, where);
      rep->tickets.push_back(std::move(t));
    }
    stop = o.stop_at_first_violation;
  }
  RemovePool(path);  // a worker that died left it
  close(out);
  pos->~Position();
  munmap(mem, sizeof(Position));
  if (!error.ok()) return error;
  return stop;
}

}  // namespace

std::vector<std::string> KvScenarioNames() {
  std::vector<std::string> out;
  for (const KvScenario& s : Scenarios(1)) out.push_back(s.name);
  return out;
}

Result<KvExploreReport> ExploreKv(const KvExploreOptions& o) {
  const TreeFactory* f = FindTree(o.engine);
  if (f == nullptr) return Status::InvalidArgument("kv crash: unknown engine '" + o.engine + "'; valid: " + TreeNames());
  if (!f->persistent() || f->create_bytes == nullptr)
    return Status::InvalidArgument("kv crash: engine '" + o.engine +
                                   "' cannot hold a store (it needs a persistent tree with byte-string keys)");
  if (o.value_bytes < 1 || o.value_bytes > (1u << 20))
    return Status::InvalidArgument("kv crash: the large value must be 1..1048576 bytes");
  if (o.pool_size < kMinPoolSize || o.pool_size % 4096 != 0)
    return Status::InvalidArgument("kv crash: the pool size must be a multiple of 4096 and at least " +
                                   std::to_string(kMinPoolSize));
  if (o.max_images < 1) return Status::InvalidArgument("kv crash: max_images must be at least 1");
  const std::vector<KvScenario> scenarios = Scenarios(o.value_bytes);
  if (o.replay && o.replay->scenario >= scenarios.size())
    return Status::InvalidArgument("kv crash: replay: scenario " + std::to_string(o.replay->scenario) +
                                   " does not exist (" + std::to_string(scenarios.size()) + " scenarios)");
  KvExploreReport rep;
  rep.engine = o.engine;
  rep.mode = o.mode;
  const double t0 = Now();
  const double cpu0 = CpuSeconds();
  for (uint64_t i = 0; i < scenarios.size(); i++) {
    if (o.replay && i != o.replay->scenario) continue;
    if (!o.replay && scenarios[i].name.find(o.scenario) == std::string::npos) continue;
    bool stop = false;
    if (o.isolate) {
      PMTREE_ASSIGN_OR_RETURN(stop, RunIsolated(o, scenarios[i], i, &rep));
    } else {
      Position pos;
      ScenarioRun run(o, scenarios[i], i, &rep, &pos);
      PMTREE_RETURN_IF_ERROR(run.Run(PoolPath(o.dir)));
      stop = run.stopped();
    }
    rep.scenarios++;
    if (stop) break;
  }
  if (rep.scenarios == 0)
    return Status::InvalidArgument("kv crash: no scenario is named like '" + o.scenario + "'");
  rep.seconds = Now() - t0;
  rep.cpu_seconds = CpuSeconds() - cpu0;
  std::sort(rep.store_sites.begin(), rep.store_sites.end(),
            [](const SiteReport& a, const SiteReport& b) { return std::tie(a.name, a.kind) < std::tie(b.name, b.kind); });
  return rep;
}

Result<MutationReport> MutateKv(const KvExploreOptions& options, KvExploreReport* base_out) {
  if (!options.drop_site.empty()) return Status::InvalidArgument("kv crash: mutate with a site already dropped");
  PMTREE_ASSIGN_OR_RETURN(KvExploreReport base, ExploreKv(options));
  MutationReport m;
  // Violations of the unmutated store make mutants meaningless: no mutant,
  // and the caller sees the base report's tickets.
  if (base.violations > 0) {
    if (base_out != nullptr) *base_out = std::move(base);
    return m;
  }
  for (const SiteReport& site : base.store_sites) {
    KvExploreOptions mo = options;
    mo.drop_site = site.name;
    mo.drop_fence = site.kind == "fence";
    mo.stop_at_first_violation = true;
    mo.max_tickets = 1;
    mo.progress = false;
    PMTREE_ASSIGN_OR_RETURN(KvExploreReport r, ExploreKv(mo));
    Mutant mu;
    mu.site = site.name;
    mu.kind = "drop " + site.kind;
    mu.outcome = r.violations > 0 ? "caught" : "survived";
    if (!r.tickets.empty()) mu.evidence = r.tickets[0].scenario + ", " + r.tickets[0].op + ": " + r.tickets[0].failure;
    (r.violations > 0 ? m.caught : m.survived)++;
    m.list.push_back(std::move(mu));
  }
  m.mutants = m.list.size();
  m.score = m.mutants == 0 ? 1 : static_cast<double>(m.caught) / static_cast<double>(m.mutants);
  if (base_out != nullptr) *base_out = std::move(base);
  return m;
}

}  // namespace pmtree::crash
