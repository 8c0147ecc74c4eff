// SPDX-License-Identifier: Apache-2.0
//
// Invariants checked by Verify():
//   V1. every node holds at most `capacity_` keys; keys inside a node are
//       strictly ascending;
//   V2. an inner node with n keys has n + 1 children; every key in child i
//       lies in [keys[i-1], keys[i]) (separator = smallest key of the right
//       subtree or lower);
//   V3. all leaves are at the same depth;
//   V4. the leaf chain visits every leaf left to right, keys strictly
//       ascending across leaves, and its length equals the leaf count;
//   V5. the entry count equals the number of keys in leaves.

#include "trees/volatile/volatile_tree.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

namespace pmtree::volatile_tree {
namespace {

template <class K>
class VolatileTree final : public BasicTree<K> {
 public:
  using Owned = typename KeyTraits<K>::Owned;
  using Entry = typename BasicTree<K>::Entry;
  using InputEntry = typename BasicTree<K>::InputEntry;

  explicit VolatileTree(uint32_t capacity) : capacity_(capacity) { root_ = NewNode(true); }
  ~VolatileTree() override { FreeSubtree(root_); }

  std::string_view name() const override { return "volatile"; }
  uint32_t capabilities() const override { return kCapConcurrent | kCapBytesKeys | kCapBulkLoadFill; }

  bool Lookup(K key, uint64_t* value) override {
    std::shared_lock lock(mu_);
    Node* leaf = FindLeaf(key, nullptr);
    size_t i = LowerBound(leaf, key);
    if (i < leaf->keys.size() && leaf->keys[i] == key) {
      *value = leaf->vals[i];
      return true;
    }
    return false;
  }

  Result<bool> Insert(K key, uint64_t value) override {
    if (Status s = CheckKey(key); !s.ok()) return s;
    std::unique_lock lock(mu_);
    return Put(key, value, /*insert=*/true, /*update=*/false);
  }
  Result<bool> Update(K key, uint64_t value) override {
    if (Status s = CheckKey(key); !s.ok()) return s;
    std::unique_lock lock(mu_);
    return Put(key, value, false, true);
  }
  Result<bool> Upsert(K key, uint64_t value) override {
    if (Status s = CheckKey(key); !s.ok()) return s;
    std::unique_lock lock(mu_);
    return Put(key, value, true, true);
  }

  Result<bool> Remove(K key) override {
    if (Status s = CheckKey(key); !s.ok()) return s;
    std::unique_lock lock(mu_);
    Node* leaf = FindLeaf(key, nullptr);
    size_t i = LowerBound(leaf, key);
    if (i >= leaf->keys.size() || !(leaf->keys[i] == key)) return false;
    leaf->keys.erase(leaf->keys.begin() + i);
    leaf->vals.erase(leaf->vals.begin() + i);
    entries_--;
    return true;
  }

  size_t Scan(K start, const K* end, std::span<Entry> out) override {
    std::shared_lock lock(mu_);
    size_t n = 0;
    Node* leaf = FindLeaf(start, nullptr);
    size_t i = LowerBound(leaf, start);
    while (leaf != nullptr && n < out.size()) {
      for (; i < leaf->keys.size() && n < out.size(); i++) {
        if (end != nullptr && *end < leaf->keys[i]) return n;
        out[n].first = leaf->keys[i];
        out[n].second = leaf->vals[i];
        n++;
      }
      leaf = leaf->next;
      i = 0;
    }
    return n;
  }

  Status BulkLoad(std::span<const InputEntry> sorted, double fill) override {
    if (fill <= 0 || fill > 1) return Status::InvalidArgument("bulk load: fill must be in (0, 1]");
    std::unique_lock lock(mu_);
    if (entries_ != 0) return Status::InvalidArgument("bulk load: tree not empty");
    for (size_t i = 0; i < sorted.size(); i++) {
      PMTREE_RETURN_IF_ERROR(CheckKey(sorted[i].first));
      if (i > 0 && !(sorted[i - 1].first < sorted[i].first))
        return Status::InvalidArgument("bulk load: input not strictly ascending at index " + std::to_string(i));
    }
    if (sorted.empty()) return Status::Ok();
    FreeSubtree(root_);
    const size_t per_leaf = std::max<size_t>(1, static_cast<size_t>(capacity_ * fill));
    std::vector<Node*> level;
    std::vector<Owned> low_keys;  // smallest key under each node of `level`
    Node* prev = nullptr;
    for (size_t i = 0; i < sorted.size(); i += per_leaf) {
      Node* leaf = NewNode(true);
      for (size_t j = i; j < std::min(sorted.size(), i + per_leaf); j++) {
        leaf->keys.emplace_back(sorted[j].first);
        leaf->vals.push_back(sorted[j].second);
      }
      if (prev) prev->next = leaf;
      prev = leaf;
      level.push_back(leaf);
      low_keys.emplace_back(sorted[i].first);
    }
    height_ = 1;
    const size_t per_inner = std::max<size_t>(2, static_cast<size_t>((capacity_ + 1) * fill));
    while (level.size() > 1) {
      std::vector<Node*> up;
      std::vector<Owned> up_low;
      for (size_t i = 0; i < level.size(); i += per_inner) {
        Node* inner = NewNode(false);
        size_t end = std::min(level.size(), i + per_inner);
        if (level.size() - end == 1) end = level.size();  // never leave a single orphan child
        for (size_t j = i; j < end; j++) {
          if (j > i) inner->keys.push_back(low_keys[j]);
          inner->kids.push_back(level[j]);
        }
        up.push_back(inner);
        up_low.push_back(low_keys[i]);
        if (end == level.size()) break;
      }
      level.swap(up);
      low_keys.swap(up_low);
      height_++;
    }
    root_ = level[0];
    entries_ = sorted.size();
    return Status::Ok();
  }

  Status Verify() override {
    std::unique_lock lock(mu_);
    uint64_t leaves = 0, keys = 0;
    int leaf_depth = -1;
    PMTREE_RETURN_IF_ERROR(VerifyNode(root_, nullptr, nullptr, 1, &leaf_depth, &leaves, &keys));
    // V4: the leaf chain.
    Node* n = root_;
    while (!n->leaf) n = n->kids[0];
    uint64_t chained = 0;
    const Owned* last = nullptr;
    for (; n != nullptr; n = n->next) {
      chained++;
      for (const Owned& k : n->keys) {
        if (last != nullptr && !(*last < k)) return Status::Corruption("volatile: leaf chain keys not ascending (V4)");
        last = &k;
      }
    }
    if (chained != leaves) return Status::Corruption("volatile: leaf chain misses leaves (V4)");
    if (keys != entries_) return Status::Corruption("volatile: entry count disagrees with leaves (V5)");
    return Status::Ok();
  }

  TreeStats Stats() override {
    std::shared_lock lock(mu_);
    TreeStats s;
    s.height = entries_ == 0 && root_->leaf ? (root_->keys.empty() ? 0 : 1) : height_;
    s.entries = entries_;
    CountNodes(root_, &s);
    s.leaf_fill = s.leaf_nodes ? static_cast<double>(entries_) / (s.leaf_nodes * capacity_) : 0;
    s.dram_bytes = (s.leaf_nodes + s.inner_nodes) * (sizeof(Node) + capacity_ * 16);
    return s;
  }

  Status Close() override { return Status::Ok(); }

 private:
  struct Node {
    bool leaf;
    std::vector<Owned> keys;
    std::vector<uint64_t> vals;  // leaves
    std::vector<Node*> kids;     // inner nodes
    Node* next = nullptr;        // leaves: right sibling
  };

  static Status CheckKey(K key) {
    if constexpr (std::is_same_v<K, std::string_view>) {
      if (key.size() > kMaxKeyBytes)
        return Status::InvalidArgument("key of " + std::to_string(key.size()) + " bytes exceeds the limit of " +
                                       std::to_string(kMaxKeyBytes));
    }
    (void)key;
    return Status::Ok();
  }

  Node* NewNode(bool leaf) {
    Node* n = new Node();
    n->leaf = leaf;
    n->keys.reserve(capacity_ + 1);
    if (leaf) n->vals.reserve(capacity_ + 1);
    else n->kids.reserve(capacity_ + 2);
    return n;
  }
  static void FreeSubtree(Node* n) {
    if (n == nullptr) return;
    if (!n->leaf)
      for (Node* k : n->kids) FreeSubtree(k);
    delete n;
  }

  static size_t LowerBound(const Node* n, K key) {
    return std::lower_bound(n->keys.begin(), n->keys.end(), key,
                            [](const Owned& a, K b) { return a < b; }) - n->keys.begin();
  }
  static size_t ChildIndex(const Node* n, K key) {
    return std::upper_bound(n->keys.begin(), n->keys.end(), key,
                            [](K a, const Owned& b) { return a < b; }) - n->keys.begin();
  }
  Node* FindLeaf(K key, std::vector<std::pair<Node*, size_t>>* path) const {
    Node* n = root_;
    while (!n->leaf) {
      size_t i = ChildIndex(n, key);
      if (path) path->push_back({n, i});
      n = n->kids[i];
    }
    return n;
  }

  Result<bool> Put(K key, uint64_t value, bool insert, bool update) {
    std::vector<std::pair<Node*, size_t>> path;
    Node* leaf = FindLeaf(key, &path);
    size_t i = LowerBound(leaf, key);
    if (i < leaf->keys.size() && leaf->keys[i] == key) {
      if (update) leaf->vals[i] = value;
      return !insert && update;  // Update: found; Insert and Upsert: not new
    }
    if (!insert) return false;
    leaf->keys.emplace(leaf->keys.begin() + i, key);
    leaf->vals.insert(leaf->vals.begin() + i, value);
    entries_++;
    if (leaf->keys.size() > capacity_) Split(leaf, path);
    return true;
  }

  void Split(Node* node, std::vector<std::pair<Node*, size_t>>& path) {
    while (node->keys.size() > capacity_) {
      Node* right = NewNode(node->leaf);
      const size_t half = node->keys.size() / 2;
      Owned separator;
      if (node->leaf) {
        right->keys.assign(std::make_move_iterator(node->keys.begin() + half),
                           std::make_move_iterator(node->keys.end()));
        right->vals.assign(node->vals.begin() + half, node->vals.end());
        node->keys.resize(half);
        node->vals.resize(half);
        right->next = node->next;
        node->next = right;
        separator = right->keys.front();
      } else {
        separator = std::move(node->keys[half]);
        right->keys.assign(std::make_move_iterator(node->keys.begin() + half + 1),
                           std::make_move_iterator(node->keys.end()));
        right->kids.assign(node->kids.begin() + half + 1, node->kids.end());
        node->keys.resize(half);
        node->kids.resize(half + 1);
      }
      if (path.empty()) {
        Node* root = NewNode(false);
        root->keys.push_back(std::move(separator));
        root->kids = {node, right};
        root_ = root;
        height_++;
        return;
      }
      auto [parent, idx] = path.back();
      path.pop_back();
      parent->keys.insert(parent->keys.begin() + idx, std::move(separator));
      parent->kids.insert(parent->kids.begin() + idx + 1, right);
      node = parent;
    }
  }

  Status VerifyNode(Node* n, const Owned* lo, const Owned* hi, int depth, int* leaf_depth, uint64_t* leaves,
                    uint64_t* keys) const {
    if (n->keys.size() > capacity_) return Status::Corruption("volatile: node over capacity (V1)");
    for (size_t i = 0; i < n->keys.size(); i++) {
      if (i > 0 && !(n->keys[i - 1] < n->keys[i])) return Status::Corruption("volatile: keys not ascending (V1)");
      if (lo != nullptr && n->keys[i] < *lo) return Status::Corruption("volatile: key below its separator (V2)");
      if (hi != nullptr && !(n->keys[i] < *hi)) return Status::Corruption("volatile: key above its separator (V2)");
    }
    if (n->leaf) {
      if (*leaf_depth < 0) *leaf_depth = depth;
      if (*leaf_depth != depth) return Status::Corruption("volatile: leaves at different depths (V3)");
      (*leaves)++;
      *keys += n->keys.size();
      return Status::Ok();
    }
    if (n->kids.size() != n->keys.size() + 1) return Status::Corruption("volatile: child count != keys + 1 (V2)");
    for (size_t i = 0; i < n->kids.size(); i++) {
      const Owned* clo = i == 0 ? lo : &n->keys[i - 1];
      const Owned* chi = i == n->keys.size() ? hi : &n->keys[i];
      PMTREE_RETURN_IF_ERROR(VerifyNode(n->kids[i], clo, chi, depth + 1, leaf_depth, leaves, keys));
    }
    return Status::Ok();
  }

  static void CountNodes(const Node* n, TreeStats* s) {
    if (n->leaf) {
      s->leaf_nodes++;
      return;
    }
    s->inner_nodes++;
    for (const Node* k : n->kids) CountNodes(k, s);
  }

  const uint32_t capacity_;
  std::shared_mutex mu_;
  Node* root_ = nullptr;
  uint32_t height_ = 1;
  uint64_t entries_ = 0;
};

}  // namespace

template <class K>
Result<std::unique_ptr<BasicTree<K>>> Create(Pool* /*pool*/, const TreeOptions& options) {
  const uint32_t size = options.node_size == 0 ? 512 : options.node_size;
  if (size < 128 || size > 16384 || size % 64 != 0)
    return Status::InvalidArgument("volatile: node size " + std::to_string(size) +
                                   " is invalid; valid: 128..16384, multiple of 64");
  if (!options.extra.empty())
    return Status::InvalidArgument("volatile: unknown option '" + options.extra.begin()->first +
                                   "'; this tree takes none");
  return std::unique_ptr<BasicTree<K>>(new VolatileTree<K>(size / 16));
}

template <class K>
Result<std::unique_ptr<BasicTree<K>>> Recover(Pool* /*pool*/, const TreeOptions& /*options*/) {
  return Status::NotSupported("volatile: a volatile tree has no persistent state to recover");
}

template Result<std::unique_ptr<BasicTree<uint64_t>>> Create<uint64_t>(Pool*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<uint64_t>>> Recover<uint64_t>(Pool*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Create<std::string_view>(Pool*, const TreeOptions&);
template Result<std::unique_ptr<BasicTree<std::string_view>>> Recover<std::string_view>(Pool*, const TreeOptions&);

}  // namespace pmtree::volatile_tree
