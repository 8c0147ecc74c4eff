// SPDX-License-Identifier: Apache-2.0
#include "pm/backends.h"

#include <cpuid.h>

#include <cstring>
#include <string>

#include "pm/latency.h"
#include "pmtree/counters.h"

namespace pmtree {
namespace {

constexpr uintptr_t kLine = 64;

// Stores shared by every backend that writes the tree's view directly.
class DirectStores : public PersistBackend {
 public:
  void Write(void* dst, const void* src, size_t n, const Site&) override { std::memcpy(dst, src, n); }
  void Store64(void* dst, uint64_t v, const Site&) override {
    __atomic_store_n(static_cast<uint64_t*>(dst), v, __ATOMIC_RELEASE);
  }
  void Zero(void* dst, size_t n, const Site&) override { std::memset(dst, 0, n); }
  void NtWrite(void* dst, const void* src, size_t n, const Site&) override {
    auto* d = static_cast<char*>(dst);
    auto* s = static_cast<const char*>(src);
    // movnti for the 8-byte-aligned body, plain stores for the ragged ends.
    while (n > 0 && (reinterpret_cast<uintptr_t>(d) & 7) != 0) {
      *d++ = *s++;
      n--;
    }
    for (; n >= 8; n -= 8, d += 8, s += 8) {
      long long w;
      std::memcpy(&w, s, 8);
      __builtin_ia32_movnti64(reinterpret_cast<long long*>(d), w);
    }
    if (n > 0) std::memcpy(d, s, n);
  }
};

template <FlushInstruction kInstr>
class HardwareBackend final : public DirectStores {
 public:
  void Flush(const void* p, size_t n, const Site&) override {
    if (n == 0) return;
    uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
    for (; a < end; a += kLine) {
      char* line = reinterpret_cast<char*>(a);
      if constexpr (kInstr == FlushInstruction::kClwb) {
        __asm__ __volatile__("clwb %0" : "+m"(*line));
      } else if constexpr (kInstr == FlushInstruction::kClflushopt) {
        __asm__ __volatile__("clflushopt %0" : "+m"(*line));
      } else {
        __asm__ __volatile__("clflush %0" : "+m"(*line));
      }
    }
  }
  void Fence(const Site&) override { __asm__ __volatile__("sfence" ::: "memory"); }
  std::string Describe() const override {
    return "hardware(" + std::string(FlushInstructionName(kInstr)) + ")";
  }
};

class EadrBackend final : public DirectStores {
 public:
  void Flush(const void*, size_t, const Site&) override {}
  // Caches are persistent, but non-temporal stores and store order across the
  // fence still need the fence.
  void Fence(const Site&) override { __asm__ __volatile__("sfence" ::: "memory"); }
  std::string Describe() const override { return "eadr"; }
  bool ExecutesFlushes() const override { return false; }
};

class MsyncBackend final : public DirectStores {
 public:
  MsyncBackend(MapFlushFn flush, MapDrainFn drain) : flush_(flush), drain_(drain) {}
  void Flush(const void* p, size_t n, const Site&) override { flush_(p, n); }
  void Fence(const Site&) override { drain_(); }
  std::string Describe() const override { return "msync"; }

 private:
  MapFlushFn flush_;
  MapDrainFn drain_;
};

class DramBackend final : public DirectStores {
 public:
  void Flush(const void*, size_t, const Site&) override {}
  void Fence(const Site&) override {}
  std::string Describe() const override { return "dram"; }
  bool ExecutesFlushes() const override { return false; }
  bool ExecutesFences() const override { return false; }
};

class Forwarding : public PersistBackend {
 public:
  explicit Forwarding(std::unique_ptr<PersistBackend> inner) : inner_(std::move(inner)) {}
  void Write(void* d, const void* s, size_t n, const Site& site) override { inner_->Write(d, s, n, site); }
  void Store64(void* d, uint64_t v, const Site& site) override { inner_->Store64(d, v, site); }
  void Zero(void* d, size_t n, const Site& site) override { inner_->Zero(d, n, site); }
  void NtWrite(void* d, const void* s, size_t n, const Site& site) override { inner_->NtWrite(d, s, n, site); }
  void Flush(const void* p, size_t n, const Site& site) override { inner_->Flush(p, n, site); }
  void Fence(const Site& site) override { inner_->Fence(site); }
  bool ExecutesFlushes() const override { return inner_->ExecutesFlushes(); }
  bool ExecutesFences() const override { return inner_->ExecutesFences(); }

 protected:
  std::unique_ptr<PersistBackend> inner_;
};

class LatencyBackend final : public Forwarding {
 public:
  LatencyBackend(std::unique_ptr<PersistBackend> inner, uint32_t ns)
      : Forwarding(std::move(inner)), ns_(ns), active_(inner_->ExecutesFlushes()) {
    TscTicksPerNs();  // calibrate now, not inside the first timed flush
  }
  // The media's extra write latency is paid per line written back, so only
  // backends that really write lines back pay it.
  void Flush(const void* p, size_t n, const Site& site) override {
    inner_->Flush(p, n, site);
    if (n == 0 || !active_) return;
    uintptr_t first = reinterpret_cast<uintptr_t>(p) / kLine;
    uintptr_t last = (reinterpret_cast<uintptr_t>(p) + n - 1) / kLine;
    const uint64_t delay = uint64_t{ns_} * (last - first + 1);
    counters::RecordDelay(delay);
    SpinNs(delay);
  }
  std::string Describe() const override {
    return inner_->Describe() + "+" + std::to_string(ns_) + "ns/line";
  }

 private:
  uint32_t ns_;
  bool active_;
};

class CountingBackend final : public Forwarding {
 public:
  explicit CountingBackend(std::unique_ptr<PersistBackend> inner)
      : Forwarding(std::move(inner)), flushes_(inner_->ExecutesFlushes()), fences_(inner_->ExecutesFences()) {}
  void NtWrite(void* d, const void* s, size_t n, const Site& site) override {
    counters::RecordNt(n);
    inner_->NtWrite(d, s, n, site);
  }
  void Flush(const void* p, size_t n, const Site& site) override {
    if (flushes_) counters::RecordFlushRange(p, n);
    inner_->Flush(p, n, site);
  }
  void Fence(const Site& site) override {
    if (fences_) counters::RecordFence();
    inner_->Fence(site);
  }
  std::string Describe() const override { return inner_->Describe() + ", counted"; }

 private:
  const bool flushes_;
  const bool fences_;
};

// Every store and flush request into a WriteProfile.  Outermost, so it sees
// what the tree asked for, whatever the inner backends execute.
class ProfilingBackend final : public Forwarding {
 public:
  ProfilingBackend(std::unique_ptr<PersistBackend> inner, WriteProfile* profile)
      : Forwarding(std::move(inner)), profile_(profile) {}
  void Write(void* d, const void* s, size_t n, const Site& site) override {
    profile_->RecordStore(d, n);
    inner_->Write(d, s, n, site);
  }
  void Store64(void* d, uint64_t v, const Site& site) override {
    profile_->RecordStore(d, 8);
    inner_->Store64(d, v, site);
  }
  void Zero(void* d, size_t n, const Site& site) override {
    profile_->RecordStore(d, n);
    inner_->Zero(d, n, site);
  }
  void NtWrite(void* d, const void* s, size_t n, const Site& site) override {
    profile_->RecordStore(d, n);
    inner_->NtWrite(d, s, n, site);
  }
  void Flush(const void* p, size_t n, const Site& site) override {
    profile_->RecordFlush(p, n);
    inner_->Flush(p, n, site);
  }
  std::string Describe() const override { return inner_->Describe() + ", profiled"; }

 private:
  WriteProfile* profile_;
};

}  // namespace

std::string_view BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kHardware: return "hardware";
    case BackendKind::kEadr: return "eadr";
    case BackendKind::kMsync: return "msync";
    case BackendKind::kDram: return "dram";
    case BackendKind::kCustom: return "custom";
  }
  return "?";
}

std::string_view FlushInstructionName(FlushInstruction f) {
  switch (f) {
    case FlushInstruction::kAuto: return "auto";
    case FlushInstruction::kClwb: return "clwb";
    case FlushInstruction::kClflushopt: return "clflushopt";
    case FlushInstruction::kClflush: return "clflush";
  }
  return "?";
}

Status ParseBackend(std::string_view text, BackendKind* kind, FlushInstruction* flush) {
  std::string_view base = text, instr;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    base = text.substr(0, colon);
    instr = text.substr(colon + 1);
  }
  *flush = FlushInstruction::kAuto;
  if (base == "hardware") {
    *kind = BackendKind::kHardware;
    if (instr.empty() || instr == "auto") return Status::Ok();
    if (instr == "clwb") *flush = FlushInstruction::kClwb;
    else if (instr == "clflushopt") *flush = FlushInstruction::kClflushopt;
    else if (instr == "clflush") *flush = FlushInstruction::kClflush;
    else
      return Status::InvalidArgument("unknown flush instruction '" + std::string(instr) +
                                     "'; valid: auto, clwb, clflushopt, clflush");
    return Status::Ok();
  }
  if (!instr.empty())
    return Status::InvalidArgument("only the hardware backend takes a flush instruction (got '" +
                                   std::string(text) + "')");
  if (base == "eadr") *kind = BackendKind::kEadr;
  else if (base == "msync") *kind = BackendKind::kMsync;
  else if (base == "dram") *kind = BackendKind::kDram;
  else
    return Status::InvalidArgument("unknown backend '" + std::string(text) +
                                   "'; valid: hardware[:clwb|clflushopt|clflush], eadr, msync, dram");
  return Status::Ok();
}

FlushInstruction DetectFlushInstruction() {
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (b & (1u << 24)) return FlushInstruction::kClwb;        // CPUID.7.0:EBX[24]
    if (b & (1u << 23)) return FlushInstruction::kClflushopt;  // CPUID.7.0:EBX[23]
  }
  return FlushInstruction::kClflush;  // every x86-64 CPU has clflush (SSE2)
}

std::unique_ptr<PersistBackend> MakeHardwareBackend(FlushInstruction instruction) {
  if (instruction == FlushInstruction::kAuto) instruction = DetectFlushInstruction();
  switch (instruction) {
    case FlushInstruction::kClwb: return std::make_unique<HardwareBackend<FlushInstruction::kClwb>>();
    case FlushInstruction::kClflushopt:
      return std::make_unique<HardwareBackend<FlushInstruction::kClflushopt>>();
    default: return std::make_unique<HardwareBackend<FlushInstruction::kClflush>>();
  }
}
std::unique_ptr<PersistBackend> MakeEadrBackend() { return std::make_unique<EadrBackend>(); }
std::unique_ptr<PersistBackend> MakeMsyncBackend(MapFlushFn flush, MapDrainFn drain) {
  return std::make_unique<MsyncBackend>(flush, drain);
}
std::unique_ptr<PersistBackend> MakeDramBackend() { return std::make_unique<DramBackend>(); }
std::unique_ptr<PersistBackend> WrapLatency(std::unique_ptr<PersistBackend> inner, uint32_t ns) {
  return std::make_unique<LatencyBackend>(std::move(inner), ns);
}
std::unique_ptr<PersistBackend> WrapCounting(std::unique_ptr<PersistBackend> inner) {
  return std::make_unique<CountingBackend>(std::move(inner));
}
std::unique_ptr<PersistBackend> WrapProfiling(std::unique_ptr<PersistBackend> inner, WriteProfile* profile) {
  return std::make_unique<ProfilingBackend>(std::move(inner), profile);
}

}  // namespace pmtree
