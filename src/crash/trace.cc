// SPDX-License-Identifier: Apache-2.0

#include "crash/trace.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pmtree::crash {

std::string SiteTable::NameOf(const Site& site) {
  std::string file = site.file_name();
  // Keep the path from the project's own top-level folder on, so names do not
  // depend on where the source tree was checked out.
  for (const char* top : {"/src/", "/tests/", "/tools/", "/include/"}) {
    size_t pos = file.rfind(top);
    if (pos != std::string::npos) {
      file = file.substr(pos + 1);
      break;
    }
  }
  return file + ":" + std::to_string(site.line()) + ":" + std::to_string(site.column());
}

std::string SiteTable::FunctionOf(const Site& site) {
  // GCC/Clang spell it "void ns::Class<K>::Fn(args) [with K = ...]": keep the
  // qualified name between the return type and the parameter list.
  std::string f = site.function_name();
  // Clang names anonymous namespaces "(anonymous namespace)"; use GCC's
  // spelling so the parenthesis is not taken for the parameter list.
  for (size_t at; (at = f.find("(anonymous namespace)")) != std::string::npos;)
    f.replace(at, 21, "{anonymous}");
  int depth = 0;
  size_t open = std::string::npos;
  for (size_t i = 0; i < f.size(); i++) {
    if (f[i] == '<') depth++;
    else if (f[i] == '>') depth--;
    else if (f[i] == '(' && depth == 0) {
      open = i;
      break;
    }
  }
  if (open != std::string::npos) f.resize(open);
  depth = 0;
  for (size_t i = f.size(); i > 0; i--) {
    const char c = f[i - 1];
    if (c == '>') depth++;
    else if (c == '<') depth--;
    else if (c == ' ' && depth == 0) return f.substr(i);
  }
  return f;
}

uint32_t SiteTable::InternName(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(names_.size());
  names_.push_back(name);
  functions_.emplace_back();
  by_name_.emplace(name, id);
  return id;
}

uint32_t SiteTable::Intern(const Site& site) {
  Key key{site.file_name(), site.line(), site.column()};
  auto it = by_site_.find(key);
  if (it != by_site_.end()) return it->second;
  uint32_t id = InternName(NameOf(site));
  if (functions_[id].empty()) functions_[id] = FunctionOf(site);
  by_site_.emplace(key, id);
  return id;
}

TracingBackend::TracingBackend(char* view, char* alias, uint64_t size, TraceLog* log)
    : view_(view), alias_(alias), size_(size), log_(log) {}

uint64_t TracingBackend::Offset(const void* p, size_t n) const {
  const char* c = static_cast<const char*>(p);
  if (c < view_ || c > view_ + size_ || n > static_cast<uint64_t>(view_ + size_ - c)) {
    // A tree that writes outside its pool has a bug no image can describe;
    // stop here so the explorer reports the site (the child process dies).
    std::fprintf(stderr, "pmtree crash: persistence call on %zu bytes at %p, outside the pool [%p, %p)\n", n, p,
                 static_cast<const void*>(view_), static_cast<const void*>(view_ + size_));
    std::abort();
  }
  return static_cast<uint64_t>(c - view_);
}

void TracingBackend::RecordStore(EventKind kind, uint64_t off, const void* src, size_t n, const Site& site) {
  Event e;
  e.kind = kind;
  e.site = log_->sites.Intern(site);
  e.off = off;
  e.len = n;
  e.data = log_->bytes.size();
  const auto* b = static_cast<const uint8_t*>(src);
  log_->bytes.insert(log_->bytes.end(), b, b + n);
  log_->events.push_back(e);
  if (off + n > log_->high_water) log_->high_water = off + n;
}

void TracingBackend::Write(void* dst, const void* src, size_t n, const Site& site) {
  if (n == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  uint64_t off = Offset(dst, n);
  std::memmove(alias_ + off, src, n);
  RecordStore(EventKind::kStore, off, alias_ + off, n, site);
}

void TracingBackend::Store64(void* dst, uint64_t value, const Site& site) {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t off = Offset(dst, 8);
  __atomic_store_n(reinterpret_cast<uint64_t*>(alias_ + off), value, __ATOMIC_RELEASE);
  RecordStore(EventKind::kStore, off, &value, 8, site);
}

void TracingBackend::Zero(void* dst, size_t n, const Site& site) {
  if (n == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  uint64_t off = Offset(dst, n);
  std::memset(alias_ + off, 0, n);
  RecordStore(EventKind::kStore, off, alias_ + off, n, site);
}

void TracingBackend::NtWrite(void* dst, const void* src, size_t n, const Site& site) {
  if (n == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  uint64_t off = Offset(dst, n);
  std::memmove(alias_ + off, src, n);
  RecordStore(EventKind::kNtStore, off, alias_ + off, n, site);
}

void TracingBackend::Flush(const void* p, size_t n, const Site& site) {
  if (n == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  Event e;
  e.kind = EventKind::kFlush;
  e.site = log_->sites.Intern(site);
  e.off = Offset(p, n);
  e.len = n;
  log_->events.push_back(e);
}

void TracingBackend::Fence(const Site& site) {
  std::lock_guard<std::mutex> l(mu_);
  Event e;
  e.kind = EventKind::kFence;
  e.site = log_->sites.Intern(site);
  log_->events.push_back(e);
}

void TracingBackend::BeginOp(uint64_t index) { RecordMarker(EventKind::kOpBegin, index); }

void TracingBackend::EndOp(uint64_t index) { RecordMarker(EventKind::kOpEnd, index); }

void TracingBackend::RecordMarker(EventKind kind, uint64_t index) {
  std::lock_guard<std::mutex> l(mu_);
  Event e;
  e.kind = kind;
  e.off = index;
  log_->events.push_back(e);
}

BackendFactory TracingFactory(TraceLog* log, TracingBackend** out) {
  return [log, out](char* view, char* alias, uint64_t size) -> std::unique_ptr<PersistBackend> {
    auto b = std::make_unique<TracingBackend>(view, alias, size, log);
    if (out != nullptr) *out = b.get();
    return b;
  };
}

}  // namespace pmtree::crash
