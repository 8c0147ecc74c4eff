// SPDX-License-Identifier: Apache-2.0
//
// Lazy image exploration: read tracking by page protection and single
// steps, and the search over runs (lazy.h).

#include "crash/lazy.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "crash/access.h"
#include "crash/shadow.h"
#include "crash/signals.h"

namespace pmtree::crash {

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kLineBytes = 64;
// Widest access one instruction makes (an AVX-512 load or store): a fault
// at address a may touch bytes [a, a + kMaxAccess).
constexpr uint64_t kMaxAccess = 64;
#if defined(__x86_64__)
constexpr greg_t kTrapFlag = 0x100;  // EFLAGS.TF: a debug trap after the next instruction
#endif

struct sigaction g_old_segv, g_old_trap;

void Chain(const struct sigaction& old, int sig, siginfo_t* si, void* uc) {
  if (old.sa_flags & SA_SIGINFO) {
    if (old.sa_sigaction != nullptr) old.sa_sigaction(sig, si, uc);
    return;
  }
  if (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN) {
    // Returning re-executes the instruction with the default action.
    signal(sig, SIG_DFL);
    return;
  }
  old.sa_handler(sig);
}

void OnSegv(int sig, siginfo_t* si, void* uc) {
  if (ReadTracker::Get().HandleFault(reinterpret_cast<uint64_t>(si->si_addr), uc)) return;
  Chain(g_old_segv, sig, si, uc);
}

void OnTrap(int sig, siginfo_t* si, void* uc) {
  if (ReadTracker::Get().HandleTrap(uc)) return;
  Chain(g_old_trap, sig, si, uc);
}

// Installs `fn` for `sig` unless it is already there, keeping the handler
// it replaces for chaining.
void Install(int sig, void (*fn)(int, siginfo_t*, void*), struct sigaction* old) {
  struct sigaction cur;
  sigaction(sig, nullptr, &cur);
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fn) return;
  InstallSigInfoHandler(sig, fn, old);
}

}  // namespace

ReadTracker& ReadTracker::Get() {
  static ReadTracker t;
  return t;
}

bool ReadTracker::Supported() {
#if defined(__x86_64__) && defined(__linux__)
  return sysconf(_SC_PAGESIZE) == static_cast<long>(kPage);
#else
  return false;
#endif
}

void ReadTracker::Arm(const std::vector<uint64_t>& lines, uint64_t preread, uint32_t faults_per_page,
                      const std::vector<uint64_t>* varying, bool observed_words) {
  Stop();
  observed_words_ = observed_words;
  faults_per_page_ = faults_per_page;
  capped_pages_ = 0;
  lines_ = lines;
  bytes_ = varying != nullptr;
  if (bytes_) varying_ = *varying;
  else varying_.assign(lines_.size(), ~uint64_t{0});
  masks_.assign(lines_.size(), 0);
  killed_.assign(lines_.size(), 0);
  read_.assign(lines_.size(), 0);
  listed_.assign(lines_.size(), 0);
  observed_.clear();
  observed_.reserve(bytes_ ? 8 * lines_.size() : 0);
  line_page_.assign(lines_.size(), 0);
  order_.clear();
  order_.reserve(lines_.size());  // the handlers append without allocating
  pages_.clear();
  for (size_t i = 0; i < lines_.size(); i++) {
    const uint64_t page = lines_[i] & ~(kPage - 1);
    if (pages_.empty() || pages_.back() != page) pages_.push_back(page);
    line_page_[i] = static_cast<uint32_t>(pages_.size() - 1);
  }
  unread_.assign(pages_.size(), 0);
  for (size_t i = 0; i < lines_.size(); i++) {
    if (varying_[i] == 0) read_[i] = 1;  // byte mode: nothing of it can differ
    else unread_[line_page_[i]]++;
  }
  protected_.assign(pages_.size(), 0);
  page_faults_.assign(pages_.size(), 0);
  stepping_.clear();
  stepping_.reserve(pages_.size());
  faults_ = 0;
  undecoded_ = 0;
  for (size_t i = 0; i < lines_.size() && lines_[i] < preread; i++) Record(lines_[i]);
  Install(SIGSEGV, OnSegv, &g_old_segv);
  Install(SIGTRAP, OnTrap, &g_old_trap);
}

void ReadTracker::Protect(char* base, uint64_t size) {
  base_ = reinterpret_cast<uint64_t>(base);
  size_ = size;
  for (size_t p = 0; p < pages_.size(); p++)
    if (unread_[p] > 0 && pages_[p] < size_) SetAccess(p, false);
  active_ = true;
}

void ReadTracker::Stop() {
  if (!active_) return;
  active_ = false;
  for (size_t p = 0; p < pages_.size(); p++)
    if (protected_[p]) SetAccess(p, true);
  stepping_.clear();
}

void ReadTracker::SetAccess(size_t page, bool accessible) {
  mprotect(reinterpret_cast<void*>(base_ + pages_[page]), kPage, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
  protected_[page] = !accessible;
}

// Records bytes `mask` of dirty line `off` (if it is one) as read.
void ReadTracker::Record(uint64_t off, uint64_t mask) {
  auto it = std::lower_bound(lines_.begin(), lines_.end(), off);
  if (it == lines_.end() || *it != off) return;
  const size_t i = static_cast<size_t>(it - lines_.begin());
  if (read_[i]) return;
  mask &= varying_[i];
  if (mask == 0) return;
  List(i);
  masks_[i] |= mask;
  if (masks_[i] != varying_[i]) return;  // byte mode: bytes that can differ are still unread
  Finish(i);
}

void ReadTracker::Finish(size_t i) {
  read_[i] = 1;
  const uint32_t p = line_page_[i];
  // A page whose dirty lines were all read needs no more faults.
  if (--unread_[p] == 0 && protected_[p] && active_) SetAccess(p, true);
}

void ReadTracker::KillRange(uint64_t off, uint64_t len) {
  const uint64_t end = std::min(off + len, size_);
  for (uint64_t l = off & ~(kLineBytes - 1); l < end; l += kLineBytes) {
    auto it = std::lower_bound(lines_.begin(), lines_.end(), l);
    if (it == lines_.end() || *it != l) continue;
    const size_t i = static_cast<size_t>(it - lines_.begin());
    if (read_[i]) continue;
    const uint64_t lo = std::max(off, l) - l, hi = std::min(end, l + kLineBytes) - l;
    const uint64_t bits = hi - lo == 64 ? ~uint64_t{0} : ((uint64_t{1} << (hi - lo)) - 1) << lo;
    const uint64_t kill = bits & varying_[i] & ~masks_[i];  // bytes already read stay recorded
    varying_[i] &= ~kill;
    killed_[i] |= kill;
    if (masks_[i] == varying_[i]) Finish(i);
  }
}

void ReadTracker::List(size_t i) {
  if (listed_[i]) return;
  listed_[i] = 1;
  order_.push_back(static_cast<uint32_t>(i));
}

bool ReadTracker::RecordObserved(uint64_t off, const WordObservation& obs) {
  if (off != reinterpret_cast<uint64_t>(obs.addr) - base_ || (off & 7) != 0) return false;
  auto it = std::lower_bound(lines_.begin(), lines_.end(), off & ~(kLineBytes - 1));
  if (it == lines_.end() || *it != (off & ~(kLineBytes - 1))) return true;  // not a dirty line: nothing varies
  const size_t i = static_cast<size_t>(it - lines_.begin());
  const auto byte = static_cast<uint8_t>(off & (kLineBytes - 1));
  if (read_[i] || ((varying_[i] >> byte) & 0xff) == 0) return true;  // read whole, or the word cannot differ
  // Partly overwritten: the word is not the image's, its class says nothing
  // about the image; its bytes instead.
  if (((killed_[i] >> byte) & 0xff) != 0) return false;
  if (observed_.size() == observed_.capacity()) return false;  // no room: the bytes instead
  List(i);
  observed_.push_back(ObservedWord{static_cast<uint32_t>(i), byte, obs.classify, obs.a, obs.b});
  return true;
}

void ReadTracker::RecordRange(uint64_t off, uint64_t len) {
  const uint64_t end = std::min(off + len, size_);
  for (uint64_t l = off & ~(kLineBytes - 1); l < end; l += kLineBytes) {
    const uint64_t lo = std::max(off, l) - l, hi = std::min(end, l + kLineBytes) - l;
    const uint64_t bits = hi - lo == 64 ? ~uint64_t{0} : ((uint64_t{1} << (hi - lo)) - 1) << lo;
    Record(l, bits);
  }
}

bool ReadTracker::HandleFault(uint64_t addr, void* ucontext) {
#if defined(__x86_64__)
  if (!active_ || addr < base_ || addr >= base_ + size_) return false;
  const uint64_t off = addr - base_;
  auto it = std::lower_bound(pages_.begin(), pages_.end(), off & ~(kPage - 1));
  if (it == pages_.end() || *it != (off & ~(kPage - 1))) return false;
  const size_t p = static_cast<size_t>(it - pages_.begin());
  if (!protected_[p]) return false;
  faults_++;
  if (bytes_) {
    // The bytes the instruction reads, when it is decoded and the fault
    // address is one of its accesses; else every byte an access of up to
    // kMaxAccess bytes at the fault address can touch.
    const InstructionAccesses acc = DecodeInterruptedAccesses(ucontext);
    bool hit = false;
    for (uint32_t k = 0; k < acc.count; k++) hit = hit || (addr >= acc.access[k].addr && addr - acc.access[k].addr < acc.access[k].size);
    // An observed word's load (pm/observe.h): its class, not its bytes.
    const WordObservation* obs = observed_words_ ? t_word_observation : nullptr;
    const bool as_class = acc.decoded && hit && obs != nullptr && acc.count == 1 && acc.access[0].read &&
                          acc.access[0].size == 8 && acc.access[0].addr == addr && RecordObserved(off, *obs);
    if (as_class) {
      // recorded by RecordObserved
    } else if (acc.decoded && hit) {
      // The instruction's reads happen before its writes.
      for (bool writes : {false, true})
        for (uint32_t k = 0; k < acc.count; k++) {
          const MemoryAccess& a = acc.access[k];
          if (!(writes ? a.overwrite : a.read) || a.addr + a.size <= base_ || a.addr >= base_ + size_) continue;
          const uint64_t from = std::max(a.addr, base_) - base_;
          const uint64_t len = std::min(a.addr + a.size, base_ + size_) - base_ - from;
          if (writes) KillRange(from, len);
          else RecordRange(from, len);
        }
    } else {
      undecoded_++;
      RecordRange(off, kMaxAccess);
    }
  } else {
    const uint64_t last = std::min(off + kMaxAccess - 1, size_ - 1);
    for (uint64_t l = off & ~(kLineBytes - 1); l <= last; l += kLineBytes) Record(l);
  }
  if (++page_faults_[p] >= faults_per_page_ && protected_[p]) {  // a hot page: every dirty line of it counts as read
    capped_pages_++;
    for (uint64_t l = pages_[p]; l < pages_[p] + kPage && protected_[p]; l += kLineBytes) Record(l);
  }
  if (protected_[p]) {
    // Open the page for this one instruction; the trap closes it again.
    SetAccess(p, true);
    stepping_.push_back(static_cast<uint32_t>(p));
    static_cast<ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_EFL] |= kTrapFlag;
  }
  return true;
#else
  (void)addr;
  (void)ucontext;
  return false;
#endif
}

bool ReadTracker::HandleTrap(void* ucontext) {
#if defined(__x86_64__)
  auto* uc = static_cast<ucontext_t*>(ucontext);
  if (stepping_.empty()) return false;  // not a step of ours
  uc->uc_mcontext.gregs[REG_EFL] &= ~kTrapFlag;
  if (active_)
    for (uint32_t p : stepping_)
      if (unread_[p] > 0 && !protected_[p]) SetAccess(p, false);
  stepping_.clear();
  return true;
#else
  (void)ucontext;
  return false;
#endif
}

void TrackContext::Track(std::vector<uint64_t> dirty, const std::vector<uint64_t>& also) {
  lines = std::move(dirty);
  armed_.clear();
  search_index_.clear();
  bool extra = false;
  size_t l = 0, a = 0;
  while (l < lines.size() || a < also.size()) {
    if (a == also.size() || (l < lines.size() && lines[l] <= also[a])) {
      if (a < also.size() && lines[l] == also[a]) a++;  // dirty here: one of lines
      armed_.push_back(lines[l]);
      search_index_.push_back(static_cast<int64_t>(l++));
    } else {
      armed_.push_back(also[a++]);
      search_index_.push_back(-1);
      extra = true;
    }
  }
  if (!extra) {
    armed_.clear();  // lines only
    search_index_.clear();
  }
}

bool TrackContext::Tracks(uint64_t line) const {
  const std::vector<uint64_t>& a = armed();
  return std::binary_search(a.begin(), a.end(), line);
}

LazyUnits MakeLazyUnits(const std::vector<Unit*>& units, const char* p) {
  LazyUnits z;
  char buf[kLineBytes];
  for (uint32_t u = 0; u < units.size(); u++) {
    const Unit& unit = *units[u];
    const uint64_t line = unit.off & ~(kLineBytes - 1);
    if (z.lines.empty() || z.lines.back() != line) {
      z.lines.push_back(line);
      z.unit_lines.emplace_back();
    }
    z.unit_lines.back().push_back(u);
    // Replay the unit's pieces on its bytes in P; a piece that changes
    // nothing gives the same image as the choice before it.
    std::memcpy(buf, p + unit.off, unit.size);
    std::vector<uint32_t> alts = {0};
    for (uint32_t j = 0; j < unit.pending.size(); j++) {
      const Piece& piece = unit.pending[j];
      char* at = buf + (piece.off - unit.off);
      if (std::memcmp(at, piece.data, piece.len) == 0) continue;
      std::memcpy(at, piece.data, piece.len);
      alts.push_back(j + 1);
    }
    z.alts.push_back(std::move(alts));
  }
  return z;
}

std::vector<uint32_t> LazyUnits::Choice(const std::vector<uint32_t>& alt_index) const {
  std::vector<uint32_t> c(alts.size());
  for (size_t u = 0; u < alts.size(); u++) c[u] = alts[u][alt_index[u]];
  return c;
}

uint64_t LazyUnits::ImagesOf(const std::vector<uint32_t>& line_indexes) const {
  constexpr uint64_t kCap = uint64_t{1} << 62;
  uint64_t n = 1;
  for (uint32_t l : line_indexes)
    for (uint32_t u : unit_lines[l]) n = std::min<uint64_t>(n * alts[u].size(), kCap);
  return n;
}

std::vector<uint32_t> LazyUnits::Alternatives() const {
  std::vector<uint32_t> a;
  for (const auto& v : alts) a.push_back(static_cast<uint32_t>(v.size() - 1));
  return a;
}

LazyPlan::LazyPlan(std::vector<uint32_t> pending, std::vector<std::vector<uint32_t>> unit_lines)
    : pending_(std::move(pending)), unit_lines_(std::move(unit_lines)) {
  by_deviation_.resize(1);
  by_deviation_[0].push_back(Node{});
}

uint64_t LazyPlan::runs_needed_at_least() const {
  uint64_t n = runs_;
  for (const auto& q : by_deviation_) n += q.size();
  return n;
}

bool LazyPlan::queue_empty() const {
  for (const auto& q : by_deviation_)
    if (!q.empty()) return false;
  return true;
}

bool LazyPlan::Next(std::vector<uint32_t>* choice) {
  for (uint32_t d = 0; d < by_deviation_.size(); d++) {
    auto& q = by_deviation_[d];
    if (q.empty()) continue;
    const Node n = q.front();
    q.pop_front();
    current_deviation_ = d;
    current_prefix_.clear();
    choice->assign(pending_.size(), 0);
    if (n.parent) {
      current_prefix_.assign(n.parent->begin(), n.parent->begin() + n.at);
      current_prefix_.emplace_back((*n.parent)[n.at].first, n.choice);
      for (const auto& [u, c] : current_prefix_) (*choice)[u] = c;
    }
    current_choice_ = *choice;
    runs_++;
    return true;
  }
  return false;
}

void LazyPlan::Done(const std::vector<uint32_t>& lines_read) {
  auto seq = std::make_shared<Seq>();
  for (uint32_t l : lines_read)
    for (uint32_t u : unit_lines_[l]) seq->emplace_back(u, current_choice_[u]);
  // The run must have read its fixed prefix first, in the same order.
  bool same = seq->size() >= current_prefix_.size();
  for (size_t k = 0; same && k < current_prefix_.size(); k++) same = (*seq)[k].first == current_prefix_[k].first;
  if (!same) nondeterministic_ = true;
  if (by_deviation_.size() <= current_deviation_ + 1) by_deviation_.resize(current_deviation_ + 2);
  auto& q = by_deviation_[current_deviation_ + 1];
  for (size_t j = current_prefix_.size(); j < seq->size(); j++) {
    const uint32_t u = (*seq)[j].first;
    for (uint32_t c = 1; c <= pending_[u]; c++) q.push_back(Node{seq, static_cast<uint32_t>(j), c});
  }
}

ByteUnits MakeByteUnits(const std::vector<Unit*>& units, const char* p, const LazyUnits& lz) {
  ByteUnits b;
  b.varying.assign(lz.lines.size(), 0);
  uint32_t li = 0;
  char buf[kLineBytes];
  for (uint32_t u = 0; u < units.size(); u++) {
    const Unit& unit = *units[u];
    const uint64_t line = unit.off & ~(kLineBytes - 1);
    while (lz.lines[li] != line) li++;  // units come by offset, like lz.lines
    b.line.push_back(li);
    b.start.push_back(static_cast<uint8_t>(unit.off - line));
    b.size.push_back(static_cast<uint8_t>(unit.size));
    // Replay the unit's pieces on its bytes in P, keeping the bytes of each
    // alternative.
    const std::vector<uint32_t>& alts = lz.alts[u];
    std::vector<uint8_t> contents;
    contents.reserve(alts.size() * unit.size);
    std::memcpy(buf, p + unit.off, unit.size);
    size_t k = 0;
    for (uint32_t c = 0; k < alts.size(); c++) {
      if (c > 0) {
        const Piece& piece = unit.pending[c - 1];
        std::memcpy(buf + (piece.off - unit.off), piece.data, piece.len);
      }
      if (alts[k] == c) {
        contents.insert(contents.end(), buf, buf + unit.size);
        k++;
      }
    }
    for (size_t a = 1; a < alts.size(); a++)
      for (uint32_t i = 0; i < unit.size; i++)
        if (contents[a * unit.size + i] != contents[i]) b.varying[li] |= uint64_t{1} << (b.start.back() + i);
    b.contents.push_back(std::move(contents));
  }
  return b;
}

namespace {

// Whether `x` and `y` (`size` bytes) agree on every byte of `mask`.
bool AgreeOn(const uint8_t* x, const uint8_t* y, uint64_t mask, uint32_t size) {
  for (uint32_t i = 0; i < size; i++)
    if (((mask >> i) & 1) && x[i] != y[i]) return false;
  return true;
}

}  // namespace

ByteLazyPlan::ByteLazyPlan(const ByteUnits* units, std::vector<std::vector<uint32_t>> unit_lines)
    : units_(units), unit_lines_(std::move(unit_lines)) {
  by_depth_.resize(1);
  by_depth_[0].push_back(Node{});
}

uint64_t ByteLazyPlan::runs_needed_at_least() const {
  uint64_t n = runs_;
  for (const auto& q : by_depth_) n += q.size();
  return n;
}

bool ByteLazyPlan::queue_empty() const {
  for (const auto& q : by_depth_)
    if (!q.empty()) return false;
  return true;
}

ByteLazyPlan::Set ByteLazyPlan::Allowed(uint32_t unit) const {
  auto it = std::lower_bound(current_.begin(), current_.end(), unit,
                             [](const Fixed& f, uint32_t u) { return f.unit < u; });
  if (it != current_.end() && it->unit == unit) return it->allowed;
  Set all(units_->contents[unit].size() / units_->size[unit]);
  for (uint32_t a = 0; a < all.size(); a++) all[a] = a;
  return all;
}

bool ByteLazyPlan::Next(std::vector<uint32_t>* alt_index) {
  for (uint32_t d = 0; d < by_depth_.size(); d++) {
    auto& q = by_depth_[d];
    if (q.empty()) continue;
    const Node n = std::move(q.front());
    q.pop_front();
    current_depth_ = d;
    current_.clear();
    current_prefix_.clear();
    if (n.run) {
      // The parent's node, with the units its run read before seq[at]
      // narrowed to its class and seq[at]'s unit in class n.cls.
      std::map<uint32_t, Set> fixed;
      for (const Fixed& f : n.run->node) fixed[f.unit] = f.allowed;
      for (uint32_t k = 0; k < n.at; k++) {
        fixed[n.run->seq[k].unit] = n.run->seq[k].allowed;
        current_prefix_.push_back(n.run->seq[k].unit);
      }
      fixed[n.run->seq[n.at].unit] = n.cls;
      current_prefix_.push_back(n.run->seq[n.at].unit);
      for (auto& [u, allowed] : fixed) current_.push_back(Fixed{u, std::move(allowed)});
    }
    alt_index->assign(units_->line.size(), 0);
    for (const Fixed& f : current_) (*alt_index)[f.unit] = f.allowed.front();
    current_alt_ = *alt_index;
    runs_++;
    return true;
  }
  return false;
}

void ByteLazyPlan::Done(const std::vector<uint32_t>& lines_read, const std::vector<uint64_t>& masks,
                        const std::vector<ObservedWord>& observed) {
  auto run = std::make_shared<Run>();
  run->node = current_;
  std::vector<uint32_t> order;
  for (uint32_t l : lines_read)
    for (uint32_t u : unit_lines_[l]) order.push_back(u);
  // The run must have read its parent's lines up to the branching unit
  // first, in the same order.
  bool same = order.size() >= current_prefix_.size();
  for (size_t k = 0; same && k < current_prefix_.size(); k++) same = order[k] == current_prefix_[k];
  if (!same) nondeterministic_ = true;
  if (by_depth_.size() <= current_depth_ + 1) by_depth_.resize(current_depth_ + 2);
  auto& q = by_depth_[current_depth_ + 1];
  constexpr uint64_t kCap = uint64_t{1} << 62;
  last_classes_ = 1;
  for (uint32_t pos = 0; pos < order.size(); pos++) {
    const uint32_t u = order[pos];
    const uint32_t size = units_->size[u];
    uint64_t line_mask = masks[units_->line[u]];
    // The observed words of the unit (an 8-byte unit is the word itself; one
    // that straddles units counts as read whole).
    std::vector<const ObservedWord*> words;
    const uint32_t from = units_->start[u], to = from + size;  // the unit's bytes in its line
    for (const ObservedWord& w : observed) {
      const uint32_t lo = w.byte, hi = lo + 8u;
      if (w.line != units_->line[u] || hi <= from || lo >= to) continue;
      if (lo >= from && hi <= to) words.push_back(&w);
      else line_mask |= uint64_t{0xff} << lo;
    }
    uint64_t mask = line_mask >> units_->start[u];
    if (size < 64) mask &= (uint64_t{1} << size) - 1;
    const uint8_t* c = units_->contents[u].data();
    auto agree = [&](uint32_t x, uint32_t y) {
      if (!AgreeOn(c + x * size, c + y * size, mask, size)) return false;
      for (const ObservedWord* w : words) {
        uint64_t wx, wy;
        std::memcpy(&wx, c + x * size + (w->byte - from), 8);
        std::memcpy(&wy, c + y * size + (w->byte - from), 8);
        if (w->classify(wx, w->a, w->b) != w->classify(wy, w->a, w->b)) return false;
      }
      return true;
    };
    // The classes of the allowed alternatives by the bytes read and the
    // observed words' classes; the first is the run's own (its alternative
    // is the lowest allowed).
    std::vector<Set> classes;
    for (uint32_t a : Allowed(u)) {
      size_t k = 0;
      while (k < classes.size() && !agree(classes[k][0], a)) k++;
      if (k == classes.size()) classes.emplace_back();
      classes[k].push_back(a);
    }
    last_classes_ = std::min<uint64_t>(last_classes_ * classes.size(), kCap);
    for (size_t k = 1; k < classes.size(); k++) q.push_back(Node{run, pos, std::move(classes[k])});
    run->seq.push_back(Fixed{u, std::move(classes[0])});
  }
}

}  // namespace pmtree::crash
