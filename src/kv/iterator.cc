// SPDX-License-Identifier: Apache-2.0
//
// Ordered iteration at a snapshot: the tree's Scan in chunks, each key read
// at the snapshot's timestamp (keys without a visible version are skipped);
// on native versions the tree's ScanAt at the snapshot's version, whose
// entries name the records directly.
// A registered snapshot keeps every version the iterator can need (K4), and
// each read happens inside an epoch guard.

#include <vector>

#include "kv/store_impl.h"

namespace pmtree::kv {

namespace {

class StoreIterator final : public Iterator {
 public:
  StoreIterator(Store* store, Store::Impl& impl, const Snapshot* snap, bool owned, std::optional<std::string> upper)
      : store_(store), impl_(impl), snap_(snap), owned_(owned), upper_(std::move(upper)), buf_(kChunk) {}
  ~StoreIterator() override {
    if (owned_) store_->ReleaseSnapshot(snap_);
  }

  void Seek(std::string_view target) override {
    status_ = Status::Ok();
    Fill(std::string(target));
    Settle();
  }
  bool Valid() const override { return valid_; }
  void Next() override {
    if (!valid_) return;
    idx_++;
    Settle();
  }
  std::string_view key() const override { return buf_[idx_].first; }
  std::string_view value() const override { return value_; }
  bool is_fields() const override { return is_fields_; }
  const FieldMap& fields() const override { return fields_; }
  Status status() const override { return status_; }

 private:
  static constexpr size_t kChunk = 64;

  void Fill(const std::string& start) {
    auto n = impl_.ScanFrom(start, *snap_, std::span<BytesTree::Entry>(buf_));
    if (!n.ok()) status_ = n.status();
    n_ = n.ok() ? *n : 0;
    idx_ = 0;
    exhausted_ = n_ < kChunk;
  }

  // Moves to the first entry at or after idx_ with a visible version.
  void Settle() {
    valid_ = false;
    for (;;) {
      if (idx_ == n_) {
        if (exhausted_ || n_ == 0) return;
        std::string next = buf_[n_ - 1].first;
        next.push_back('\0');
        Fill(next);
        continue;
      }
      const std::string& k = buf_[idx_].first;
      if (upper_ && k >= *upper_) return;
      auto guard = impl_.pool().epochs().Protect();
      auto v = impl_.VisibleIn(buf_[idx_], *snap_);
      if (!v.ok()) {
        status_ = v.status();
        return;
      }
      if (v->has_value()) {
        const VersionView& vv = **v;
        is_fields_ = vv.kind == VersionKind::kFields;
        Status s = is_fields_ ? impl_.ReadFields(vv, {}, &fields_) : impl_.ReadValue(vv, &value_);
        if (!s.ok()) {
          status_ = s;
          return;
        }
        if (is_fields_)
          value_.clear();
        else
          fields_.clear();
        valid_ = true;
        return;
      }
      idx_++;
    }
  }

  Store* store_;
  Store::Impl& impl_;
  const Snapshot* snap_;
  bool owned_;
  std::optional<std::string> upper_;
  std::vector<BytesTree::Entry> buf_;
  size_t n_ = 0, idx_ = 0;
  bool exhausted_ = true, valid_ = false, is_fields_ = false;
  std::string value_;
  FieldMap fields_;
  Status status_;
};

}  // namespace

std::unique_ptr<Iterator> Store::NewIterator(const IteratorOptions& options) {
  const bool owned = options.snapshot == nullptr;
  const Snapshot* snap = owned ? GetSnapshot() : options.snapshot;
  return std::make_unique<StoreIterator>(this, *impl_, snap, owned, options.upper_bound);
}

}  // namespace pmtree::kv
