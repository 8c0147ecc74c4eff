// SPDX-License-Identifier: Apache-2.0
//
// The helpers every reproduction suite shares (common.h).

#include "bench/suites/common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "bench/media.h"
#include "pm/pool_impl.h"

namespace pmtree::bench {

double Get(SuiteContext& s, const std::string& exp, const std::string& tree, const Pred& pred, const Metric& metric) {
  const Measurement* m = s.Find(exp, [&](const Measurement& r) { return r.tree == tree && pred(r); });
  return m ? metric(*m) : kNaN;
}

Pred NodeSize(uint32_t ns) {
  return [ns](const Measurement& m) { return m.node_size == ns; };
}
Pred Variant(const std::string& v) {
  return [v](const Measurement& m) { return m.variant == v; };
}
Pred Both(Pred a, Pred b) {
  return [a, b](const Measurement& m) { return a(m) && b(m); };
}
Pred Any() {
  return [](const Measurement&) { return true; };
}

std::string Num(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char b[48];
  snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string Mops(double v) { return std::isfinite(v) ? Num(v / 1e6, 3) + " Mops/s" : "n/a"; }

void RatioClaim(SuiteContext& s, const std::string& exp, const std::string& paper, double lo, double hi, double a,
                double b, const std::vector<std::string>& needed, const std::string& what) {
  double r = a / b;
  if (!std::isfinite(r) || r <= 0) {
    s.Claim(exp, paper, "n/a", NotMeasured(needed, s));
    return;
  }
  s.Claim(exp, paper, Ratio(r) + (what.empty() ? "" : " (" + what + ")"), FactorVerdict(lo, hi, r));
}

void ReductionClaim(SuiteContext& s, const std::string& exp, const std::string& paper, double lo, double hi, double ours,
                    double other, const std::vector<std::string>& needed, const std::string& what) {
  double red = (1 - ours / other) * 100;
  if (!std::isfinite(red)) {
    s.Claim(exp, paper, "n/a", NotMeasured(needed, s));
    return;
  }
  s.Claim(exp, paper, Pct(red) + " fewer (" + what + ")", ReductionVerdict(lo, hi, red));
}

BenchConfig Config(SuiteContext& s, const std::vector<std::string>& trees, uint64_t records, uint64_t ops,
                   const char* mix) {
  BenchConfig c = s.Base();
  c.targets = trees;
  c.records = records;
  c.ops = ops;
  c.workload.mix = *ParseMix(mix);
  return c;
}

std::string Scale(uint64_t n) {
  if (n >= 1000000 && n % 1000000 == 0) return std::to_string(n / 1000000) + "M";
  if (n >= 1000 && n % 1000 == 0) return std::to_string(n / 1000) + "K";
  return std::to_string(n);
}

BenchConfig WithLatency(BenchConfig c, uint32_t ns) {
  c.media.clear();
  c.write_latency_ns = ns;
  for (const MediaProfile& p : MediaProfiles())
    if (p.write_latency_ns == ns) c.media = p.name;
  return c;
}

void RunNodeSizes(SuiteContext& s, const std::string& exp, BenchConfig c, const std::vector<uint32_t>& sizes) {
  for (uint32_t ns : sizes) {
    c.node_size = ns;
    s.Run(exp, c);
  }
}

Measurement FlushThroughput(const BenchConfig& base, uint64_t size, uint64_t total) {
  Measurement m;
  m.tree = "pool";
  m.workload = "flush";
  m.variant = std::to_string(size);
  m.records = size;
  m.command = base.command;
  PoolOptions po;
  BackendKind bk;
  FlushInstruction fi;
  (void)ParseBackend(base.backend, &bk, &fi);
  po.backend = bk;
  po.flush = fi;
  po.write_latency_ns = base.write_latency_ns;
  // Counting off: its distinct-line set costs up to 256 compares per line of
  // a large range, which would dominate a pure flush benchmark.  Lines per
  // object are size / 64 by construction.
  po.counting = false;
  uint64_t pool_size = std::max<uint64_t>(kMinPoolSize * 4, size * 2 + (1 << 20));
  auto pool = PoolImpl::CreateAnonymous(pool_size, "flushbench", 0, po);
  if (!pool.ok()) {
    m.error = pool.status().ToString();
    return m;
  }
  m.backend = (*pool)->Describe();
  std::vector<char> src(size, 'x');
  char* dst = (*pool)->base() + kPoolHeaderSize;
  dst = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(dst) + 63) & ~uintptr_t{63});
  uint64_t reps = std::max<uint64_t>(1, total / size);
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < reps; i++) {
    src[i % size] = static_cast<char>(i);
    (*pool)->Write(dst, src.data(), size);
    // Persist the whole object: the flush cost under test.
    (*pool)->Persist(dst, size);
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.ops = reps;
  m.stats.extra = {{"lines_per_object", static_cast<double>((size + 63) / 64)}, {"object_bytes", static_cast<double>(size)}};
  double lines = static_cast<double>((size + 63) / 64) * reps;
  m.throughput_ops_s = lines / m.seconds;  // lines per second
  return m;
}

}  // namespace pmtree::bench
