// SPDX-License-Identifier: Apache-2.0
//
// The reference model: operations and their effect on a std::map (model.h).

#include "crash/model.h"

#include <iterator>

namespace pmtree::crash {

std::string OpString(const Op& op) {
  if (op.fail_alloc != 0) {
    Op plain = op;
    plain.fail_alloc = 0;
    return OpString(plain) + " on a pool full from allocation " + std::to_string(op.fail_alloc);
  }
  switch (op.kind) {
    case OpKind::kCreate: return "create";
    case OpKind::kInsert: return "insert(" + std::to_string(op.key) + ")";
    case OpKind::kUpdate: return "update(" + std::to_string(op.key) + ")";
    case OpKind::kUpsert: return "upsert(" + std::to_string(op.key) + ")";
    case OpKind::kRemove: return "remove(" + std::to_string(op.key) + ")";
    case OpKind::kReopen: return "reopen";
    case OpKind::kBulkLoad:
      return "bulkload(" + std::to_string(op.key) + " keys, fill " + std::to_string(op.value) + "%)";
  }
  return "?";
}

std::vector<Tree::InputEntry> BulkLoadEntries(const Op& op) {
  std::vector<Tree::InputEntry> v;
  v.reserve(op.key);
  for (uint64_t i = 1; i <= op.key; i++) v.emplace_back(10 * i, ValueFor(10 * i, 3));
  return v;
}

Result<bool> RunOp(Tree& t, const Op& op) {
  switch (op.kind) {
    case OpKind::kInsert: return t.Insert(op.key, op.value);
    case OpKind::kUpdate: return t.Update(op.key, op.value);
    case OpKind::kUpsert: return t.Upsert(op.key, op.value);
    case OpKind::kRemove: return t.Remove(op.key);
    case OpKind::kBulkLoad: {
      Status st = t.BulkLoad(BulkLoadEntries(op), static_cast<double>(op.value) / 100);
      if (!st.ok()) return st;
      return true;
    }
    case OpKind::kCreate:
    case OpKind::kReopen: break;
  }
  return Status::InvalidArgument("RunOp: " + OpString(op) + " needs the pool");
}

Effect EffectOf(const Model& m, const Op& op) {
  Effect e;
  e.key = op.key;
  auto it = m.find(op.key);
  const bool present = it != m.end();
  switch (op.kind) {
    case OpKind::kCreate:
    case OpKind::kReopen:
      e.expected = true;
      break;
    case OpKind::kInsert:
      e.expected = !present;
      e.changes = !present;
      e.present_after = true;
      e.value_after = op.value;
      break;
    case OpKind::kUpdate:
      e.expected = present;
      e.changes = present && it->second != op.value;
      e.present_after = true;
      e.value_after = op.value;
      break;
    case OpKind::kUpsert:
      e.expected = !present;
      e.changes = !present || it->second != op.value;
      e.present_after = true;
      e.value_after = op.value;
      break;
    case OpKind::kRemove:
      e.expected = present;
      e.changes = present;
      e.present_after = false;
      break;
    case OpKind::kBulkLoad: {
      // Only ever issued on an empty tree.
      auto bulk = std::make_shared<Model>();
      for (const auto& [k, v] : BulkLoadEntries(op)) bulk->emplace(k, v);
      e.expected = m.empty();
      e.changes = !bulk->empty();
      if (e.changes) {
        auto mid = std::next(bulk->begin(), static_cast<long>(bulk->size() / 2));
        e.key = mid->first;
        e.present_after = true;
        e.value_after = mid->second;
      }
      e.bulk = std::move(bulk);
      break;
    }
  }
  return e;
}

void ApplyEffect(Model* m, const Effect& e) {
  if (!e.changes) return;
  if (e.bulk) {
    *m = *e.bulk;
    return;
  }
  if (e.present_after) (*m)[e.key] = e.value_after;
  else m->erase(e.key);
}

}  // namespace pmtree::crash
