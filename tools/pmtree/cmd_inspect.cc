// SPDX-License-Identifier: Apache-2.0
//
// `pmtree inspect POOL [--json]`: the pool header, the backend, the tree, its
// statistics and the result of Verify() -- or, for a key-value store's pool,
// the store's figures and Store::Verify().  The file is opened read-only and
// mapped copy-on-write, so recovery may run but the file is never changed (a
// read-only file or file system works).  Statistics are shown only when
// Verify() passes.

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "pm/pool_impl.h"
#include "pmtree/kv.h"
#include "pmtree/registry.h"

namespace pmtree::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

template <class T>
int Report(const InspectArgs& a, TreeHandle<T>& h) {
  // Verify first: its walk checks every offset it follows and bounds every
  // loop, while Stats() trusts the structure.  A pool that fails Verify gets
  // no statistics, so a damaged pool is reported, never walked blindly.
  Status verify = h.tree->Verify();
  TreeStats st;
  if (verify.ok()) st = h.tree->Stats();
  PoolImpl& pool = PoolImpl::Of(*h.pool);
  if (a.json) {
    nlohmann::json j;
    j["pool"] = {{"path", a.path},
                 {"size", pool.size()},
                 {"layout", std::string(pool.layout())},
                 {"key_kind", pool.layout_flags() == 1 ? "bytes" : "u64"},
                 {"clean_shutdown", pool.clean_shutdown()},
                 {"heap_bytes", pool.allocator().heap_bytes()},
                 {"bytes_in_use", pool.allocator().bytes_in_use()},
                 {"backend", pool.Describe()}};
    j["tree"] = {{"name", std::string(h.tree->name())}};
    if (verify.ok()) {
      j["tree"].update({{"height", st.height},
                        {"entries", st.entries},
                        {"leaf_nodes", st.leaf_nodes},
                        {"inner_nodes", st.inner_nodes},
                        {"leaf_fill", st.leaf_fill},
                        {"pm_bytes", st.pm_bytes},
                        {"dram_bytes", st.dram_bytes}});
      for (const auto& [k, v] : st.extra) j["tree"]["extra"][k] = v;
    } else {
      j["tree"]["stats"] = "skipped: Verify failed";
    }
    j["verify"] = {{"ok", verify.ok()}, {"message", verify.ok() ? "OK" : verify.ToString()}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("pool          %s\n", a.path.c_str());
    std::printf("size          %llu bytes (heap %llu, in use %llu)\n", (unsigned long long)pool.size(),
                (unsigned long long)pool.allocator().heap_bytes(), (unsigned long long)pool.allocator().bytes_in_use());
    std::printf("tree          %s (%s keys)\n", std::string(pool.layout()).c_str(),
                pool.layout_flags() == 1 ? "byte-string" : "64-bit");
    std::printf("last shutdown %s\n", pool.clean_shutdown() ? "clean" : "crash (recovered in a private copy)");
    std::printf("backend       %s\n", pool.Describe().c_str());
    if (verify.ok()) {
      std::printf("height        %u\nentries       %llu\nleaves        %llu\ninner nodes   %llu\nleaf fill     %.3f\n",
                  st.height, (unsigned long long)st.entries, (unsigned long long)st.leaf_nodes,
                  (unsigned long long)st.inner_nodes, st.leaf_fill);
      std::printf("PM bytes      %llu\nDRAM bytes    %llu\n", (unsigned long long)st.pm_bytes,
                  (unsigned long long)st.dram_bytes);
      for (const auto& [k, v] : st.extra) std::printf("%-13s %g\n", k.c_str(), v);
    } else {
      std::printf("statistics    skipped (Verify failed)\n");
    }
    std::printf("verify        %s\n", verify.ok() ? "OK" : verify.ToString().c_str());
  }
  return verify.ok() ? 0 : 1;
}

// A key-value store's pool: the tree alone would count the records as its
// own bytes (or free them after a crash), so the store opens it.
int ReportStore(const InspectArgs& a, kv::Store& s) {
  // Verify first, as for a tree: statistics trust the structure.
  Status verify = s.Verify();
  kv::StoreStats st{};
  if (verify.ok()) st = s.Stats();
  PoolImpl& pool = PoolImpl::Of(s.pool());
  if (a.json) {
    nlohmann::json j;
    j["pool"] = {{"path", a.path},
                 {"size", pool.size()},
                 {"layout", std::string(pool.layout())},
                 {"clean_shutdown", pool.clean_shutdown()},
                 {"heap_bytes", pool.allocator().heap_bytes()},
                 {"backend", pool.Describe()}};
    j["store"] = {{"engine", std::string(s.engine())},      {"keys", st.keys},
                  {"record_bytes", st.record_bytes},         {"tree_bytes", st.tree_bytes},
                  {"commit_timestamp", st.commit_timestamp}, {"redone_commits", st.redone_commits}};
    j["verify"] = {{"ok", verify.ok()}, {"message", verify.ok() ? "OK" : verify.ToString()}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("pool          %s\n", a.path.c_str());
    std::printf("size          %llu bytes (heap %llu)\n", (unsigned long long)pool.size(),
                (unsigned long long)pool.allocator().heap_bytes());
    std::printf("store         key-value store over %s\n", std::string(s.engine()).c_str());
    std::printf("last shutdown %s\n", pool.clean_shutdown() ? "clean" : "crash (recovered in a private copy)");
    std::printf("backend       %s\n", pool.Describe().c_str());
    std::printf("keys          %llu\nrecord bytes  %llu\ntree bytes    %llu\ncommit ts     %llu\n",
                (unsigned long long)st.keys, (unsigned long long)st.record_bytes, (unsigned long long)st.tree_bytes,
                (unsigned long long)st.commit_timestamp);
    std::printf("verify        %s\n", verify.ok() ? "OK" : verify.ToString().c_str());
  }
  return verify.ok() ? 0 : 1;
}

int Run(const InspectArgs& a) {
  PoolOptions po;
  po.private_mapping = true;  // never change the file
  po.use_env = true;          // a tool: PMTREE_BACKEND applies (README, Durability)
  // Peek at the key kind so the right key type opens the tree.
  auto peek = PoolImpl::Open(a.path, "", po);
  if (!peek.ok()) {
    std::fprintf(stderr, "pmtree inspect: %s\n", peek.status().ToString().c_str());
    return 2;
  }
  const bool bytes = peek.value()->layout_flags() == static_cast<uint64_t>(KeyKind::kBytes);
  const bool store = bytes && peek.value()->root(kv::kStoreRootSlot) != 0;
  const std::string layout(peek.value()->layout());
  peek.value().reset();
  if (store) {
    kv::Options o;
    o.engine = layout;
    o.create_if_missing = false;
    o.pool_options = po;
    auto s = kv::Store::Open(a.path, o);
    if (!s.ok()) {
      std::fprintf(stderr, "pmtree inspect: %s\n", s.status().ToString().c_str());
      return 2;
    }
    return ReportStore(a, *s.value());
  }
  TreeOptions to;
  if (bytes) {
    auto h = OpenBytesTree(a.path, nullptr, to, po);
    if (!h.ok()) {
      std::fprintf(stderr, "pmtree inspect: %s\n", h.status().ToString().c_str());
      return 2;
    }
    return Report(a, h.value());
  }
  auto h = OpenTree(a.path, nullptr, to, po);
  if (!h.ok()) {
    std::fprintf(stderr, "pmtree inspect: %s\n", h.status().ToString().c_str());
    return 2;
  }
  return Report(a, h.value());
}

}  // namespace

void AddInspectCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "Show a pool's header, tree statistics and Verify() result "
                                                "(the file is never modified)");
  sub->add_option("pool", args->path, "pool file")->required();
  sub->add_flag("--json", args->json, "one JSON object instead of text");
  sub->callback([args, exit_code] { *exit_code = Run(*args); });
}

}  // namespace pmtree::cli
