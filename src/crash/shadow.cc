// SPDX-License-Identifier: Apache-2.0

#include "crash/shadow.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

namespace pmtree::crash {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t kSaturated = uint64_t{1} << 63;

}  // namespace

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kAdr: return "adr";
    case Mode::kStrict: return "strict";
    case Mode::kEadr: return "eadr";
  }
  return "?";
}

Status ParseMode(std::string_view text, Mode* mode) {
  if (text == "adr") *mode = Mode::kAdr;
  else if (text == "strict") *mode = Mode::kStrict;
  else if (text == "eadr") *mode = Mode::kEadr;
  else return Status::InvalidArgument("unknown crash mode '" + std::string(text) + "'; valid: adr, strict, eadr");
  return Status::Ok();
}

uint64_t Shadow::LineHash(uint64_t line_off, const char* bytes) {
  uint64_t h = Mix(line_off + 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < 8; i++) {
    uint64_t w;
    std::memcpy(&w, bytes + 8 * i, 8);
    h = Mix(h ^ w ^ static_cast<uint64_t>(i));
  }
  return h;
}

Shadow::Shadow(char* image, uint64_t size, Mode mode)
    : image_(image), size_(size), mode_(mode), unit_size_(mode == Mode::kStrict ? 8 : kLine) {}

void Shadow::Store(uint64_t off, const uint8_t* data, uint64_t len, uint32_t site, bool non_temporal) {
  generation_++;
  uint64_t end = off + len;
  while (off < end) {
    uint64_t word_end = (off & ~uint64_t{7}) + 8;
    uint8_t n = static_cast<uint8_t>(std::min(end, word_end) - off);
    if (mode_ == Mode::kEadr) {
      // Durable once made: P takes it at once.
      uint64_t line = off & ~(kLine - 1);
      uint64_t before = LineHash(line, image_ + line);
      std::memcpy(image_ + off, data, n);
      p_hash_ ^= before ^ LineHash(line, image_ + line);
    } else {
      Piece p;
      p.off = off;
      p.site = site;
      p.len = n;
      std::memcpy(p.data, data, n);
      uint64_t idx = off / unit_size_;
      Unit& u = dirty_[idx];
      if (u.pending.empty() && u.covered == 0) {
        u.off = idx * unit_size_;
        u.size = static_cast<uint32_t>(unit_size_);
      }
      if (u.flushed_this_epoch && u.first_store_after_flush_site == UINT32_MAX && !non_temporal)
        u.first_store_after_flush_site = site;
      u.pending.push_back(p);
      if (non_temporal) {
        // A non-temporal store is on its way to memory: durable at the next fence.
        u.covered = static_cast<uint32_t>(u.pending.size());
        flushed_.push_back(idx);
        nt_pending_++;
      }
    }
    data += n;
    off += n;
  }
}

void Shadow::Flush(uint64_t off, uint64_t len, uint32_t site) {
  if (mode_ == Mode::kEadr) return;
  bool useful = false;
  uint64_t first = off & ~(kLine - 1);
  for (uint64_t line = first; line < off + len; line += kLine) {
    for (uint64_t u_off = line; u_off < line + kLine; u_off += unit_size_) {
      auto it = dirty_.find(u_off / unit_size_);
      if (it == dirty_.end()) continue;
      Unit& u = it->second;
      if (u.covered < u.pending.size()) {
        u.covered = static_cast<uint32_t>(u.pending.size());
        flushed_.push_back(u_off / unit_size_);
        useful = true;
      }
      u.flushed_this_epoch = true;
      u.first_store_after_flush_site = UINT32_MAX;
    }
  }
  if (!useful) lints_.redundant_flushes[site]++;
}

void Shadow::ApplyPieces(const std::vector<Piece>& pieces, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) std::memcpy(image_ + pieces[i].off, pieces[i].data, pieces[i].len);
}

void Shadow::Commit(Unit* u, uint32_t n) {
  uint64_t line = u->off & ~(kLine - 1);
  uint64_t before = LineHash(line, image_ + line);
  ApplyPieces(u->pending, n);
  p_hash_ ^= before ^ LineHash(line, image_ + line);
  u->pending.erase(u->pending.begin(), u->pending.begin() + n);
  u->covered -= n;
}

void Shadow::Fence(uint32_t site) {
  if (mode_ == Mode::kEadr) return;
  bool any = false;
  for (uint64_t idx : flushed_) {
    auto it = dirty_.find(idx);
    if (it == dirty_.end()) continue;
    Unit& u = it->second;
    if (u.covered > 0) {
      Commit(&u, u.covered);
      any = true;
    }
    if (u.first_store_after_flush_site != UINT32_MAX) lints_.store_after_flush[u.first_store_after_flush_site]++;
    u.flushed_this_epoch = false;
    u.first_store_after_flush_site = UINT32_MAX;
    if (u.pending.empty()) dirty_.erase(it);
  }
  flushed_.clear();
  nt_pending_ = 0;
  if (any) generation_++;
  else lints_.empty_fences[site]++;
}

void Shadow::OpEnd() {
  std::set<uint32_t> sites;
  for (auto& [idx, u] : dirty_)
    for (const Piece& p : u.pending) sites.insert(p.site);
  for (uint32_t s : sites) lints_.pending_at_op_end[s]++;
}

uint64_t Shadow::Signature() {
  uint64_t h = p_hash_;
  for (const Unit* u : DirtyUnits()) {
    uint64_t x = Mix(u->off ^ (uint64_t{u->covered} << 48));
    for (const Piece& p : u->pending) {
      uint64_t w = 0;
      std::memcpy(&w, p.data, p.len);
      x = Mix(x ^ p.off ^ (uint64_t{p.len} << 56) ^ Mix(w));
    }
    h ^= x;
  }
  return h;
}

std::vector<Unit*> Shadow::DirtyUnits() {
  std::vector<Unit*> v;
  v.reserve(dirty_.size());
  for (auto& [idx, u] : dirty_)
    if (!u.pending.empty()) v.push_back(&u);
  std::sort(v.begin(), v.end(), [](const Unit* a, const Unit* b) { return a->off < b->off; });
  return v;
}

// ---- ImageDiff -------------------------------------------------------------------

namespace {

// The distinct contents a unit can hold at a crash: P's bytes, then each
// prefix of its pending pieces (`unit` null: a clean unit, P only).  With
// `choices`, the prefix length that first gives each content.
std::vector<std::string> UnitContents(const char* p, uint64_t off, uint32_t size, const Unit* unit,
                                      std::vector<uint32_t>* choices) {
  std::string cur(p + off, size);
  std::vector<std::string> out = {cur};
  if (choices) *choices = {0};
  if (!unit) return out;
  for (uint32_t j = 0; j < unit->pending.size(); j++) {
    const Piece& piece = unit->pending[j];
    std::memcpy(cur.data() + (piece.off - off), piece.data, piece.len);
    if (std::find(out.begin(), out.end(), cur) != out.end()) continue;
    out.push_back(cur);
    if (choices) choices->push_back(j + 1);
  }
  return out;
}

}  // namespace

ImageDiff DiffImages(Shadow& base, Shadow& mutant) {
  ImageDiff d;
  if (base.mode() != mutant.mode() || base.mode() == Mode::kEadr) return d;
  const std::vector<Unit*> bu = base.DirtyUnits(), mu = mutant.DirtyUnits();
  const uint64_t size = std::min(base.size(), mutant.size());
  const uint64_t unit_size = base.mode() == Mode::kStrict ? 8 : kLine;
  // The units dirty in either, ascending.
  std::vector<uint64_t> offs;
  for (const Unit* u : bu) offs.push_back(u->off);
  for (const Unit* u : mu) offs.push_back(u->off);
  std::sort(offs.begin(), offs.end());
  offs.erase(std::unique(offs.begin(), offs.end()), offs.end());
  // P outside those units: byte for byte (beyond `size` neither wrote).
  uint64_t from = 0;
  for (uint64_t o : offs) {
    const uint64_t to = std::min(o, size);
    if (to > from && std::memcmp(base.image() + from, mutant.image() + from, to - from) != 0) return d;
    from = std::max(from, o + unit_size);
  }
  if (size > from && std::memcmp(base.image() + from, mutant.image() + from, size - from) != 0) return d;
  d.comparable = true;
  d.subset = true;
  d.fresh.resize(mu.size());
  size_t bi = 0, mi = 0;
  for (uint64_t o : offs) {
    const Unit* b = bi < bu.size() && bu[bi]->off == o ? bu[bi++] : nullptr;
    const Unit* m = mi < mu.size() && mu[mi]->off == o ? mu[mi++] : nullptr;
    if (o + unit_size > size) {  // cannot happen: both images hold every stored byte
      d = ImageDiff{};
      return d;
    }
    const std::vector<std::string> in_base = UnitContents(base.image(), o, unit_size, b, nullptr);
    std::vector<uint32_t> choices;
    const std::vector<std::string> in_mutant = UnitContents(mutant.image(), o, unit_size, m, &choices);
    for (size_t k = 0; k < in_mutant.size(); k++) {
      if (std::find(in_base.begin(), in_base.end(), in_mutant[k]) != in_base.end()) continue;
      d.subset = false;
      if (!m) {
        // The mutant's P differs here: every one of its images is its own.
        d = ImageDiff{};
        return d;
      }
      d.fresh[mi - 1].push_back(choices[k]);
    }
  }
  return d;
}

// ---- ImagePlan -------------------------------------------------------------------

ImagePlan::ImagePlan(std::vector<Unit*> units, char* image, uint64_t bound, uint64_t samples, uint64_t seed)
    : units_(std::move(units)), image_(image), seed_(seed) {
  for (const Unit* u : units_) {
    uint64_t k = u->pending.size() + 1;
    total_ = (total_ > kSaturated / k) ? kSaturated : total_ * k;
    uint64_t line = u->off & ~(kLine - 1);
    if (lines_.empty() || lines_.back() != line) lines_.push_back(line);
  }
  for (uint64_t line : lines_) saved_lines_.emplace_back(image_ + line, image_ + line + kLine);
  if (total_ <= bound) {
    planned_ = total_;
    return;
  }
  exhaustive_ = false;
  const size_t d = units_.size();
  std::vector<uint32_t> old_all(d, 0), new_all(d);
  for (size_t i = 0; i < d; i++) new_all[i] = static_cast<uint32_t>(units_[i]->pending.size());
  structured_.push_back(old_all);
  structured_.push_back(new_all);
  // Each unit alone through all its prefixes, the others old, then new.
  for (size_t i = 0; i < d; i++) {
    for (uint32_t c = 1; c <= new_all[i]; c++) {
      auto v = old_all;
      v[i] = c;
      structured_.push_back(v);
    }
    for (uint32_t c = 0; c < new_all[i]; c++) {
      auto v = new_all;
      v[i] = c;
      structured_.push_back(v);
    }
  }
  // Pairs of units, one persisted and the other not (the rest old).
  const size_t kMaxPairs = 2048;
  size_t pairs = 0;
  for (size_t i = 0; i < d && pairs < kMaxPairs; i++) {
    for (size_t j = i + 1; j < d && pairs < kMaxPairs; j++, pairs++) {
      auto v = old_all;
      v[i] = new_all[i];
      structured_.push_back(v);
      v[i] = 0;
      v[j] = new_all[j];
      structured_.push_back(v);
    }
  }
  samples_ = samples;
  planned_ = structured_.size() + samples_;
}

ImagePlan::~ImagePlan() { Revert(); }

void ImagePlan::Choice(uint64_t index, std::vector<uint32_t>* c) {
  const size_t d = units_.size();
  c->assign(d, 0);
  if (exhaustive_) {
    for (size_t i = 0; i < d; i++) {
      uint64_t k = units_[i]->pending.size() + 1;
      (*c)[i] = static_cast<uint32_t>(index % k);
      index /= k;
    }
  } else if (index < structured_.size()) {
    *c = structured_[index];
  } else {
    uint64_t s = Mix(seed_ ^ Mix(index + 0x51ed27));
    for (size_t i = 0; i < d; i++) {
      s = Mix(s + i + 1);
      (*c)[i] = static_cast<uint32_t>(s % (units_[i]->pending.size() + 1));
    }
  }
}

void ImagePlan::Revert() {
  for (size_t i = 0; i < lines_.size(); i++) std::memcpy(image_ + lines_[i], saved_lines_[i].data(), kLine);
}

void ImagePlan::Apply(uint64_t index, std::vector<uint32_t>* choice) {
  Choice(index, choice);
  ApplyChoice(*choice);
}

void ImagePlan::ApplyChoice(const std::vector<uint32_t>& choice) {
  Revert();
  for (size_t i = 0; i < units_.size(); i++) {
    const auto& p = units_[i]->pending;
    for (uint32_t j = 0; j < choice[i]; j++) std::memcpy(image_ + p[j].off, p[j].data, p[j].len);
  }
}

uint64_t ImagePlan::ImageHash(uint64_t p_hash) const {
  uint64_t h = p_hash;
  for (size_t i = 0; i < lines_.size(); i++)
    h ^= Shadow::LineHash(lines_[i], saved_lines_[i].data()) ^ Shadow::LineHash(lines_[i], image_ + lines_[i]);
  return h;
}

std::string ImagePlan::Describe(const std::vector<uint32_t>& choice) const {
  std::string s;
  char buf[96];
  for (size_t i = 0; i < units_.size() && i < choice.size(); i++) {
    std::snprintf(buf, sizeof(buf), "%s0x%llx:%u/%zu", s.empty() ? "" : " ",
                  static_cast<unsigned long long>(units_[i]->off), choice[i], units_[i]->pending.size());
    s += buf;
  }
  return s.empty() ? "no dirty lines" : s;
}

}  // namespace pmtree::crash
