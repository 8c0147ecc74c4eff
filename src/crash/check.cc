// SPDX-License-Identifier: Apache-2.0
//
// Checks of a recovered tree against the reference model (CRASH_MODEL.md §4).

#include "crash/check.h"

#include <algorithm>
#include <random>
#include <vector>

namespace pmtree::crash {

namespace {

std::string Describe(uint64_t key, const uint64_t* value) {
  std::string s = "key " + std::to_string(key);
  if (value) s += " (value " + std::to_string(*value) + ")";
  return s;
}

// First difference between `got` and `m` with `e` applied when `with_effect`.
bool Equal(const std::vector<Tree::Entry>& got, const Model& m, const Effect* e, std::string* why) {
  if (e && e->changes && e->bulk) return Equal(got, *e->bulk, nullptr, why);
  auto it = m.begin();
  size_t i = 0;
  // The model's next entry, skipping the effect's key (merged in below).
  auto model_next = [&](uint64_t* k, uint64_t* v) -> bool {
    while (it != m.end() && e && e->changes && it->first == e->key) ++it;
    if (it == m.end()) return false;
    *k = it->first;
    *v = it->second;
    ++it;
    return true;
  };
  // Build the expected sequence lazily: model entries without the effect's
  // key, plus the effect's key when present after.
  bool eff_pending = e && e->changes && e->present_after;
  uint64_t mk = 0, mv = 0;
  bool have = model_next(&mk, &mv);
  while (true) {
    uint64_t ek, ev;
    bool have_exp;
    if (eff_pending && (!have || e->key < mk)) {
      ek = e->key;
      ev = e->value_after;
      have_exp = true;
      eff_pending = false;
    } else if (have) {
      ek = mk;
      ev = mv;
      have_exp = true;
      have = model_next(&mk, &mv);
    } else {
      have_exp = false;
    }
    if (!have_exp && i == got.size()) return true;
    if (!have_exp) {
      *why = "unexpected " + Describe(got[i].first, &got[i].second);
      return false;
    }
    if (i == got.size()) {
      *why = "missing " + Describe(ek, &ev);
      return false;
    }
    if (got[i].first != ek) {
      if (got[i].first < ek) *why = "unexpected " + Describe(got[i].first, &got[i].second);
      else *why = "missing " + Describe(ek, &ev);
      return false;
    }
    if (got[i].second != ev) {
      *why = "key " + std::to_string(ek) + " has value " + std::to_string(got[i].second) + ", expected " +
             std::to_string(ev);
      return false;
    }
    i++;
  }
}

}  // namespace

int MatchContents(const std::vector<Tree::Entry>& got, const Expect& e, std::string* why) {
  std::string why1, why0;
  if (e.effect.bulk && e.effect.bulk_prefix_ok && e.m0_ok && e.m0->empty() && got.size() < e.effect.bulk->size()) {
    // The interface's default BulkLoad inserts in ascending order: a crash
    // inside it leaves a prefix of the entries.
    auto it = e.effect.bulk->begin();
    for (size_t i = 0; i < got.size(); i++, ++it) {
      if (got[i].first != it->first || got[i].second != it->second) {
        *why = "not a prefix of the bulk-loaded entries at " + Describe(got[i].first, &got[i].second);
        return 0;
      }
    }
    return 3;
  }
  if (Equal(got, *e.m0, &e.effect, &why1)) return e.effect.changes || !e.m0_ok ? 2 : 1;
  if (e.m0_ok && Equal(got, *e.m0, nullptr, &why0)) return 1;
  if (e.m0_ok && e.effect.changes)
    *why = "matches neither the state before the operation (" + why0 + ") nor after it (" + why1 + ")";
  else
    *why = "does not match the acknowledged state (" + why1 + ")";
  return 0;
}

std::string CheckTree(PoolImpl* pool, Tree* tree, const Expect& e, int* which, bool reachable_check,
                      std::string_view state) {
  Status v = tree->Verify();
  if (!v.ok()) return "Verify() failed: " + v.ToString();
  const size_t room = std::max(e.m0->size(), e.effect.bulk ? e.effect.bulk->size() : 0) + 64;
  std::vector<Tree::Entry> got(room);
  size_t n = tree->Scan(0, std::span<Tree::Entry>(got));
  got.resize(n);
  std::string why;
  *which = MatchContents(got, e, &why);
  if (*which == 0) return "contents " + std::string(state) + ": " + why;
  // Lookups: the in-flight key and up to 32 keys spread over the contents
  // (which equal the model now, so their values are the expected ones).
  const bool with_effect = *which == 2;
  auto expect_focus = [&](uint64_t* val) -> bool {
    if (with_effect && e.effect.changes && e.focus_key == e.effect.key) {
      *val = e.effect.value_after;
      return e.effect.present_after;
    }
    auto it = e.m0->find(e.focus_key);
    if (it == e.m0->end()) return false;
    *val = it->second;
    return true;
  };
  auto check_lookup = [&](uint64_t k, bool present, uint64_t want) -> std::string {
    uint64_t got_v = 0;
    bool found = tree->Lookup(k, &got_v);
    if (found == present && (!found || got_v == want)) return "";
    return "lookup(" + std::to_string(k) + ") " + (found ? "found " + std::to_string(got_v) : "found nothing") +
           ", but the scan " + (present ? "has value " + std::to_string(want) : "lacks the key");
  };
  if (*which != 3) {  // a partial default bulk load: the stride lookups below check it
    uint64_t want = 0;
    bool present = expect_focus(&want);
    std::string f = check_lookup(e.focus_key, present, want);
    if (!f.empty()) return f;
  }
  const size_t stride = std::max<size_t>(1, got.size() / 32);
  for (size_t i = 0; i < got.size(); i += stride) {
    std::string f = check_lookup(got[i].first, true, got[i].second);
    if (!f.empty()) return f;
  }
  // Blocks retired by earlier operations are freed once no reader can hold
  // them; none can now (the checker is the only thread), so count them free.
  pool->epochs().DrainAll();
  Status a = pool->allocator().CheckConsistency();
  if (!a.ok()) return "allocator inconsistent " + std::string(state) + ": " + a.ToString();
  // After operations a tree may hold reserved, unreachable blocks (its own
  // Verify() accounts for them); right after recovery nothing may be.
  if (!reachable_check) return "";
  const uint64_t in_use = pool->allocator().bytes_in_use();
  const uint64_t reached = tree->Stats().pm_bytes;
  if (in_use < reached)
    return "allocator: " + std::to_string(in_use) + " bytes in use but the tree reaches " + std::to_string(reached) +
           " (reachable space not allocated: double use)";
  // Contract item 4: recovery reclaims the space of interrupted operations,
  // so right after it every byte in use is reachable.
  if (in_use > reached)
    return "allocator: " + std::to_string(in_use) + " bytes in use but the tree reaches " + std::to_string(reached) +
           " (a leak: recovery did not reclaim " + std::to_string(in_use - reached) + " bytes)";
  return "";
}

std::string RunContinuation(PoolImpl* pool, Tree* tree, Model* model, uint64_t center, uint32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  if (center < 64) center = 64;
  std::vector<Tree::Entry> buf(16);
  for (uint32_t j = 0; j < n; j++) {
    const uint64_t r = rng();
    const uint64_t k = center - 48 + (r >> 8) % 97;
    const uint64_t value = 0x7000000000000000ull + seed % 1000003 * 1000 + j;
    const int what = static_cast<int>(r % 100);
    Op op;
    op.key = k;
    op.value = value;
    std::string name;
    if (what < 50) op.kind = OpKind::kInsert;
    else if (what < 75) op.kind = OpKind::kRemove;
    else if (what < 90) op.kind = OpKind::kUpsert;
    else {
      // A short scan from k, compared with the model.
      size_t got = tree->Scan(k, std::span<Tree::Entry>(buf));
      auto it = model->lower_bound(k);
      for (size_t i = 0; i < got; i++, ++it) {
        if (it == model->end() || it->first != buf[i].first || it->second != buf[i].second)
          return "continuation op " + std::to_string(j) + ": scan from " + std::to_string(k) + " returned key " +
                 std::to_string(buf[i].first) + " out of step with the model";
      }
      if (got < buf.size() && it != model->end())
        return "continuation op " + std::to_string(j) + ": scan from " + std::to_string(k) + " stopped before key " +
               std::to_string(it->first);
      continue;
    }
    Effect e = EffectOf(*model, op);
    Result<bool> res = false;
    switch (op.kind) {
      case OpKind::kInsert: res = tree->Insert(k, value); break;
      case OpKind::kRemove: res = tree->Remove(k); break;
      default: res = tree->Upsert(k, value); break;
    }
    if (!res.ok()) return "continuation " + OpString(op) + " failed: " + res.status().ToString();
    if (*res != e.expected)
      return "continuation op " + std::to_string(j) + ": " + OpString(op) + " returned " + (*res ? "true" : "false") +
             ", the model expects " + (e.expected ? "true" : "false");
    ApplyEffect(model, e);
  }
  Expect e;
  e.m0 = model;
  e.focus_key = center;
  int which = 0;
  std::string f = CheckTree(pool, tree, e, &which, /*reachable_check=*/false);
  if (!f.empty()) return "after the continuation workload: " + f;
  return "";
}

}  // namespace pmtree::crash
