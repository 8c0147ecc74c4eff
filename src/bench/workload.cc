// SPDX-License-Identifier: Apache-2.0

#include "bench/workload.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstring>

namespace pmtree::bench {
namespace {

std::atomic<uint64_t> g_draws{0};

constexpr std::array<std::string_view, kOpTypes> kOpNames = {"read", "insert", "update", "remove", "scan", "rmw"};
constexpr std::array<std::string_view, 6> kDistNames = {"uniform", "zipfian", "selfsimilar",
                                                        "latest", "sequential", "hotzone"};

uint64_t SplitMix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// A bijection on 62-bit integers (odd multipliers and xor-shifts are each
// invertible modulo 2^62), so distinct record numbers give distinct keys.
uint64_t Scramble62(uint64_t x) {
  constexpr uint64_t kMask = (1ull << 62) - 1;
  x &= kMask;
  x = (x * 0x9e3779b97f4a7c15ull) & kMask;
  x ^= x >> 29;
  x = (x * 0xbf58476d1ce4e5b9ull) & kMask;
  x ^= x >> 32;
  x = (x * 0x94d049bb133111ebull) & kMask;
  x ^= x >> 29;
  return x;
}

bool ParseDouble(std::string_view s, double* out) {
  // std::from_chars for double is in GCC 12's libstdc++.
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool ParseU32(std::string_view s, uint32_t* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

std::string FormatDouble(double d) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

}  // namespace

std::string_view OpName(OpType t) { return kOpNames[static_cast<int>(t)]; }

std::string Mix::ToString() const {
  std::string s;
  for (int i = 0; i < kOpTypes; i++) {
    if (ratio[i] == 0) continue;
    if (!s.empty()) s += ",";
    s += std::string(kOpNames[i]) + "=" + FormatDouble(ratio[i]);
  }
  return s;
}

Result<Mix> ParseMix(std::string_view text) {
  Mix mix;
  mix.ratio.fill(0);
  std::array<bool, kOpTypes> seen{};
  const std::string valid = "valid operations: read, insert, update, remove, scan, rmw (e.g. read=0.5,insert=0.5)";
  if (text.empty()) return Status::InvalidArgument("--mix is empty; " + valid);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view item = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return Status::InvalidArgument("--mix item '" + std::string(item) + "' is not name=ratio; " + valid);
    std::string_view name = item.substr(0, eq);
    auto it = std::find(kOpNames.begin(), kOpNames.end(), name);
    if (it == kOpNames.end())
      return Status::InvalidArgument("--mix: unknown operation '" + std::string(name) + "'; " + valid);
    int idx = static_cast<int>(it - kOpNames.begin());
    if (seen[idx]) return Status::InvalidArgument("--mix: '" + std::string(name) + "' given twice");
    seen[idx] = true;
    double v;
    if (!ParseDouble(item.substr(eq + 1), &v) || !(v >= 0 && v <= 1))
      return Status::InvalidArgument("--mix: ratio of '" + std::string(name) + "' must be a number in [0, 1], got '" +
                                     std::string(item.substr(eq + 1)) + "'");
    mix.ratio[idx] = v;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  double sum = 0;
  for (double r : mix.ratio) sum += r;
  if (std::fabs(sum - 1) > 1e-9)
    return Status::InvalidArgument("--mix: ratios must sum to 1, they sum to " + FormatDouble(sum));
  return mix;
}

std::string_view DistName(DistKind k) { return kDistNames[static_cast<int>(k)]; }

std::string DistNames() {
  std::string s;
  for (auto n : kDistNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

Result<DistKind> ParseDist(std::string_view name) {
  for (size_t i = 0; i < kDistNames.size(); i++)
    if (kDistNames[i] == name) return static_cast<DistKind>(i);
  return Status::InvalidArgument("unknown distribution '" + std::string(name) + "'; valid: " + DistNames());
}

Status Distribution::Validate() const {
  if ((kind == DistKind::kZipfian || kind == DistKind::kLatest) && !(theta > 0 && theta <= 10))
    return Status::InvalidArgument("--theta must be in (0, 10], got " + FormatDouble(theta));
  if (kind == DistKind::kSelfSimilar && !(h > 0 && h < 0.5))
    return Status::InvalidArgument("--self-similar-h must be in (0, 0.5), got " + FormatDouble(h));
  if (kind == DistKind::kHotZone && !(hot_fraction > 0 && hot_fraction <= 1))
    return Status::InvalidArgument("--hot-fraction must be in (0, 1], got " + FormatDouble(hot_fraction));
  if (kind == DistKind::kHotZone && !(hot_shift_at >= 0 && hot_shift_at < 1))
    return Status::InvalidArgument("--hot-shift-at must be in [0, 1), got " + FormatDouble(hot_shift_at));
  return Status::Ok();
}

std::string Distribution::ToString() const {
  std::string s(DistName(kind));
  switch (kind) {
    case DistKind::kZipfian:
    case DistKind::kLatest:
      return s + "(theta=" + FormatDouble(theta) + ")";
    case DistKind::kSelfSimilar:
      return s + "(h=" + FormatDouble(h) + ")";
    case DistKind::kHotZone:
      return s + "(fraction=" + FormatDouble(hot_fraction) +
             (hot_shift_at > 0 ? ",shift_at=" + FormatDouble(hot_shift_at) : "") + ")";
    default:
      return s;
  }
}

Status ParseKeySize(std::string_view text, uint32_t* key_min, uint32_t* key_max) {
  const std::string valid =
      "--key-size takes 8 (64-bit integer keys), N (N-byte strings, 9..4096) or MIN-MAX (variable-length "
      "strings, 8 <= MIN < MAX <= 4096)";
  size_t dash = text.find('-');
  uint32_t lo, hi;
  if (dash == std::string_view::npos) {
    if (!ParseU32(text, &lo) || lo < 8 || lo > 4096) return Status::InvalidArgument(valid + ", got '" + std::string(text) + "'");
    *key_min = *key_max = (lo == 8 ? 0 : lo);
    return Status::Ok();
  }
  if (!ParseU32(text.substr(0, dash), &lo) || !ParseU32(text.substr(dash + 1), &hi) || lo < 8 || hi > 4096 || lo >= hi)
    return Status::InvalidArgument(valid + ", got '" + std::string(text) + "'");
  *key_min = lo;
  *key_max = hi;
  return Status::Ok();
}

uint64_t LoadKey(uint64_t i) { return Scramble62(i) << 1; }

std::vector<uint64_t> SortedLoadKeys(uint64_t n) {
  std::vector<uint64_t> keys(n);
  for (uint64_t i = 0; i < n; i++) keys[i] = LoadKey(i);
  std::sort(keys.begin(), keys.end());
  return keys;
}

void AppendBytesKey(uint64_t key, uint32_t key_min, uint32_t key_max, std::string* out) {
  uint32_t len = key_min;
  uint64_t h = key * 0x9e3779b97f4a7c15ull;
  if (key_max > key_min) len += static_cast<uint32_t>((h >> 17) % (key_max - key_min + 1));
  for (int b = 7; b >= 0; b--) out->push_back(static_cast<char>((key >> (8 * b)) & 0xff));
  // Printable filler derived from the key, so equal prefixes never occur.
  for (uint32_t i = 8; i < len; i++) out->push_back(static_cast<char>('a' + (h >> (i % 59)) % 26));
}

void AppendYcsbKey(uint64_t key, std::string* out) {
  char digits[20];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, key);
  out->append("user");
  out->append(digits, end);
}

// ---- generators -------------------------------------------------------------------

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = SplitMix(&x);
}

uint64_t Rng::Next() {
  g_draws.fetch_add(1, std::memory_order_relaxed);
  uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

uint64_t Rng::Below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64); }

uint64_t GeneratorDraws() { return g_draws.load(std::memory_order_relaxed); }

double Zipfian::Zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; i++) sum += 1.0 / std::pow(static_cast<double>(i), theta);
  return sum;
}

namespace {

// log1p(x)/x and expm1(x)/x, continuous at 0.
double Log1pOverX(double x) { return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }
double Expm1OverX(double x) { return std::fabs(x) > 1e-8 ? std::expm1(x) / x : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x)); }

}  // namespace

// Rejection-inversion: draw x from the continuous hat H over [0.5, n+0.5]
// (shifted to ranks 1..n), round to the nearest rank k, and accept when the
// hat's area of k's cell does not exceed k's true mass; s_ is the width of the
// region near each integer in which acceptance is certain.
double Zipfian::H(double x) const { return std::exp(-theta_ * std::log(x)); }

double Zipfian::HIntegral(double x) const {
  double log_x = std::log(x);
  return Expm1OverX((1 - theta_) * log_x) * log_x;
}

double Zipfian::HIntegralInverse(double x) const {
  double t = x * (1 - theta_);
  if (t < -1) t = -1;  // numerical guard: the inverse is only evaluated inside the range
  return std::exp(Log1pOverX(t) * x);
}

Zipfian::Zipfian(uint64_t n, double theta) : n_(n == 0 ? 1 : n), theta_(theta) {
  h_integral_x1_ = HIntegral(1.5) - 1;
  h_integral_n_ = HIntegral(static_cast<double>(n_) + 0.5);
  s_ = 2 - HIntegralInverse(HIntegral(2.5) - H(2));
}

uint64_t Zipfian::Next(Rng& rng) const {
  for (;;) {
    double u = h_integral_n_ + rng.NextDouble() * (h_integral_x1_ - h_integral_n_);
    double x = HIntegralInverse(u);
    double kd = std::floor(x + 0.5);
    if (kd < 1) kd = 1;
    if (kd > static_cast<double>(n_)) kd = static_cast<double>(n_);
    if (kd - x <= s_ || u >= HIntegral(kd + 0.5) - H(kd)) return static_cast<uint64_t>(kd) - 1;
  }
}

double Zipfian::Probability(uint64_t i) const {
  return 1.0 / std::pow(static_cast<double>(i + 1), theta_) / Zeta(n_, theta_);
}

uint64_t SelfSimilar(Rng& rng, uint64_t n, double h) {
  double u = rng.NextDouble();
  auto r = static_cast<uint64_t>(static_cast<double>(n) * std::pow(u, std::log(h) / std::log(1.0 - h)));
  return r >= n ? n - 1 : r;
}

// ---- streams ----------------------------------------------------------------------------

namespace {

// Draws the operations of one thread.
class StreamBuilder {
 public:
  StreamBuilder(const Workload& w, const std::vector<uint64_t>& keys, uint32_t thread, uint32_t threads,
                const Zipfian* zipf)
      : w_(w), keys_(keys), thread_(thread), threads_(threads), zipf_(zipf),
        rng_(w.seed * 0x100000001b3ull + thread + 1) {
    for (int i = 0; i < kOpTypes; i++) cumulative_[i] = (i ? cumulative_[i - 1] : 0) + w.mix.ratio[i];
    cumulative_[kOpTypes - 1] = 1.0;
    n_ = keys.size();
    ZoneAt(0);
    seq_next_ = n_ ? (n_ / threads_) * thread_ : 0;
  }

  void Build(uint64_t count, Stream* out) {
    out->ops.resize(count);
    uint64_t shift_at = w_.dist.kind == DistKind::kHotZone && w_.dist.hot_shift_at > 0
                            ? static_cast<uint64_t>(w_.dist.hot_shift_at * static_cast<double>(count))
                            : UINT64_MAX;
    for (uint64_t i = 0; i < count; i++) {
      if (i == shift_at) ZoneAt(1);
      Op& op = out->ops[i];
      op.type = PickType();
      op.key = op.type == OpType::kInsert ? InsertKey() : ExistingKey();
      if (op.type == OpType::kScan && w_.scan_length_uniform) op.scan_len = 1 + static_cast<uint32_t>(rng_.Below(w_.scan_length));
      if (w_.bytes_keys()) {
        op.bytes_off = static_cast<uint32_t>(out->arena.size());
        if (w_.ycsb_keys)
          AppendYcsbKey(op.key, &out->arena);
        else
          AppendBytesKey(op.key, w_.key_min, w_.key_max, &out->arena);
        op.bytes_len = static_cast<uint32_t>(out->arena.size() - op.bytes_off);
      }
    }
  }

 private:
  OpType PickType() {
    double u = rng_.NextDouble();
    for (int i = 0; i < kOpTypes; i++)
      if (u < cumulative_[i] && w_.mix.ratio[i] > 0) return static_cast<OpType>(i);
    for (int i = kOpTypes - 1; i >= 0; i--)
      if (w_.mix.ratio[i] > 0) return static_cast<OpType>(i);
    return OpType::kRead;
  }

  // The hot zone: ranks [zone_lo_, zone_hi_) of the loaded keys.  Phase 1
  // (after the shift) moves it half the key space away.
  void ZoneAt(int phase) {
    uint64_t width = std::max<uint64_t>(1, static_cast<uint64_t>(w_.dist.hot_fraction * static_cast<double>(n_)));
    if (width > n_) width = n_;
    uint64_t start = n_ > width ? (n_ - width) / 4 : 0;
    if (phase == 1 && n_ > width) start = (start + n_ / 2) % (n_ - width);
    zone_lo_ = start;
    zone_hi_ = start + width;
  }

  uint64_t Rank() {
    switch (w_.dist.kind) {
      case DistKind::kUniform:
        return rng_.Below(n_);
      case DistKind::kZipfian:
        // Scrambled: the popular ranks are spread over the key space (YCSB's
        // scrambled zipfian), not clustered at the smallest keys.
        return Mix(zipf_->Next(rng_)) % n_;
      case DistKind::kSelfSimilar:
        return Mix(SelfSimilar(rng_, n_, w_.dist.h)) % n_;
      case DistKind::kLatest:
        return n_ - 1 - std::min<uint64_t>(zipf_->Next(rng_), n_ - 1);
      case DistKind::kSequential: {
        uint64_t r = seq_next_ % n_;
        seq_next_++;
        return r;
      }
      case DistKind::kHotZone:
        return zone_lo_ + rng_.Below(zone_hi_ - zone_lo_);
    }
    return 0;
  }

  static uint64_t Mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  uint64_t ExistingKey() {
    // "latest" reads this thread's most recent inserts first.
    if (w_.dist.kind == DistKind::kLatest && !inserted_.empty()) {
      uint64_t back = zipf_->Next(rng_);
      if (back < inserted_.size()) return inserted_[inserted_.size() - 1 - back];
    }
    if (n_ == 0) return inserted_.empty() ? rng_.Next() >> 1 : inserted_[rng_.Below(inserted_.size())];
    return keys_[Rank()];
  }

  uint64_t InsertKey() {
    uint64_t key;
    switch (w_.dist.kind) {
      case DistKind::kSequential:
        // Dense: monotonic keys above every loaded key, interleaved over the
        // threads, so all inserts hit the right-most leaf.
        key = (1ull << 63) + ins_count_ * threads_ + thread_;
        break;
      case DistKind::kHotZone: {
        uint64_t lo = n_ ? keys_[zone_lo_] : 0;
        uint64_t hi = n_ ? keys_[zone_hi_ - 1] : (1ull << 63);
        key = ((lo + rng_.Below(hi - lo + 1)) | 1) & ((1ull << 63) - 1);
        break;
      }
      default:
        key = (rng_.Next() >> 1) | 1;
    }
    ins_count_++;
    if (w_.dist.kind == DistKind::kLatest) inserted_.push_back(key);
    return key;
  }

  const Workload& w_;
  const std::vector<uint64_t>& keys_;
  uint32_t thread_, threads_;
  const Zipfian* zipf_;
  Rng rng_;
  std::array<double, kOpTypes> cumulative_{};
  uint64_t n_ = 0;
  uint64_t zone_lo_ = 0, zone_hi_ = 1;
  uint64_t seq_next_ = 0;
  uint64_t ins_count_ = 0;
  std::vector<uint64_t> inserted_;
};

}  // namespace

Result<std::vector<Stream>> BuildStreams(const Workload& w, const std::vector<uint64_t>& sorted_keys,
                                         uint32_t threads, uint64_t ops_per_thread) {
  if (Status s = w.dist.Validate(); !s.ok()) return s;
  if (threads == 0) return Status::InvalidArgument("--threads must be at least 1");
  bool needs_existing = w.mix.ratio[0] + w.mix.ratio[2] + w.mix.ratio[3] + w.mix.ratio[4] + w.mix.ratio[5] > 0;
  if (needs_existing && sorted_keys.empty() && w.dist.kind != DistKind::kLatest)
    return Status::InvalidArgument("the mix reads, updates, removes or scans existing keys but --records is 0");
  std::unique_ptr<Zipfian> zipf;
  if (w.dist.kind == DistKind::kZipfian || w.dist.kind == DistKind::kLatest)
    zipf = std::make_unique<Zipfian>(std::max<uint64_t>(1, sorted_keys.size()), w.dist.theta);
  std::vector<Stream> streams(threads);
  for (uint32_t t = 0; t < threads; t++) {
    StreamBuilder b(w, sorted_keys, t, threads, zipf.get());
    b.Build(ops_per_thread, &streams[t]);
  }
  return streams;
}

}  // namespace pmtree::bench
