// SPDX-License-Identifier: Apache-2.0
//
// Decoding the memory accesses of one instruction (access.h).

#include "crash/access.h"

#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstring>

#if defined(PMTREE_USE_ZYDIS)
#include <Zydis/Zydis.h>
#endif

namespace pmtree::crash {

namespace {

constexpr size_t kMaxInstruction = 15;  // the longest x86 instruction
constexpr uint64_t kPage = 4096;

#if defined(PMTREE_USE_ZYDIS)

// The value of a 64-bit general-purpose register, or false for any other
// register (a 32-bit address, a vector index).
bool Gpr64(ZydisRegister reg, const GeneralRegisters& regs, uint64_t* value) {
  if (ZydisRegisterGetClass(reg) != ZYDIS_REGCLASS_GPR64) return false;
  const ZyanI8 id = ZydisRegisterGetId(reg);
  if (id < 0 || id >= 16) return false;
  *value = regs.gpr[id];
  return true;
}

bool IsBitStringOp(ZydisMnemonic m) {
  return m == ZYDIS_MNEMONIC_BT || m == ZYDIS_MNEMONIC_BTC || m == ZYDIS_MNEMONIC_BTR || m == ZYDIS_MNEMONIC_BTS;
}

#endif

}  // namespace

bool AccessDecoderAvailable() {
#if defined(PMTREE_USE_ZYDIS)
  return true;
#else
  return false;
#endif
}

InstructionAccesses DecodeAccesses(const uint8_t* code, size_t len, const GeneralRegisters& regs) {
  InstructionAccesses out;
#if defined(PMTREE_USE_ZYDIS)
  ZydisDecoder decoder;
  if (!ZYAN_SUCCESS(ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64))) return out;
  ZydisDecodedInstruction insn;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, code, len < kMaxInstruction ? len : kMaxInstruction, &insn, ops)))
    return out;
  // String instructions address memory through rsi/rdi implicitly and,
  // single-stepped, trap after each iteration: left to the fallback.
  if (insn.meta.category == ZYDIS_CATEGORY_STRINGOP ||
      (insn.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)))
    return out;
  if (insn.address_width != 64) return out;
  // Stores that may leave some of their operand's bytes unwritten.
  const bool masked_store =
      (insn.avx.mask.mode != ZYDIS_MASK_MODE_INVALID && insn.avx.mask.mode != ZYDIS_MASK_MODE_DISABLED) ||
      insn.mnemonic == ZYDIS_MNEMONIC_MASKMOVDQU || insn.mnemonic == ZYDIS_MNEMONIC_MASKMOVQ ||
      insn.mnemonic == ZYDIS_MNEMONIC_VMASKMOVPS || insn.mnemonic == ZYDIS_MNEMONIC_VMASKMOVPD ||
      insn.mnemonic == ZYDIS_MNEMONIC_VPMASKMOVD || insn.mnemonic == ZYDIS_MNEMONIC_VPMASKMOVQ;
  for (uint32_t i = 0; i < insn.operand_count; i++) {
    const ZydisDecodedOperand& op = ops[i];
    if (op.type != ZYDIS_OPERAND_TYPE_MEMORY) continue;
    if (op.mem.type == ZYDIS_MEMOP_TYPE_AGEN) continue;  // lea: an address, no access
    if (op.mem.type != ZYDIS_MEMOP_TYPE_MEM) return out;  // vector index, MIB
    if (op.mem.segment == ZYDIS_REGISTER_FS || op.mem.segment == ZYDIS_REGISTER_GS) return out;
    // bt/bts/btr/btc with a register bit offset address bits outside the
    // operand.
    if (IsBitStringOp(insn.mnemonic) && insn.operand_count_visible > 1 &&
        ops[1].type == ZYDIS_OPERAND_TYPE_REGISTER)
      return out;
    if (op.size == 0 || op.size % 8 != 0) return out;
    uint64_t base = 0, index = 0;
    if (op.mem.base == ZYDIS_REGISTER_RIP) {
      base = regs.rip + insn.length;
    } else if (op.mem.base != ZYDIS_REGISTER_NONE && !Gpr64(op.mem.base, regs, &base)) {
      return out;
    }
    if (op.mem.index != ZYDIS_REGISTER_NONE && !Gpr64(op.mem.index, regs, &index)) return out;
    if (out.count == InstructionAccesses::kMax) return out;
    MemoryAccess& a = out.access[out.count++];
    a.addr = base + index * op.mem.scale + static_cast<uint64_t>(op.mem.disp.has_displacement ? op.mem.disp.value : 0);
    a.size = op.size / 8;
    a.read = (op.actions & ZYDIS_OPERAND_ACTION_MASK_READ) != 0;
    a.write = (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) != 0;
    a.overwrite = (op.actions & ZYDIS_OPERAND_ACTION_WRITE) != 0 && (op.actions & ZYDIS_OPERAND_ACTION_CONDWRITE) == 0 &&
                  !masked_store;
  }
  out.decoded = true;
#else
  (void)code;
  (void)len;
  (void)regs;
#endif
  return out;
}

InstructionAccesses DecodeInterruptedAccesses(const void* ucontext) {
#if defined(__x86_64__) && defined(__linux__)
  if (!AccessDecoderAvailable()) return {};
  const auto* uc = static_cast<const ucontext_t*>(ucontext);
  const greg_t* g = uc->uc_mcontext.gregs;
  GeneralRegisters regs;
  static constexpr int kOrder[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                                     REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
  for (int i = 0; i < 16; i++) regs.gpr[i] = static_cast<uint64_t>(g[kOrder[i]]);
  regs.rip = static_cast<uint64_t>(g[REG_RIP]);
  // The pc's page is executable and mapped; the next one may not be, so an
  // instruction that may cross the page end is read with a system call that
  // reports what it could read instead of faulting.
  uint8_t code[kMaxInstruction];
  size_t len = kMaxInstruction;
  const uint64_t in_page = kPage - (regs.rip & (kPage - 1));
  if (in_page >= kMaxInstruction) {
    std::memcpy(code, reinterpret_cast<const void*>(regs.rip), kMaxInstruction);
  } else {
    iovec local{code, kMaxInstruction};
    iovec remote{reinterpret_cast<void*>(regs.rip), kMaxInstruction};
    const ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n <= 0) {
      std::memcpy(code, reinterpret_cast<const void*>(regs.rip), in_page);
      len = in_page;
    } else {
      len = static_cast<size_t>(n);
    }
  }
  return DecodeAccesses(code, len, regs);
#else
  (void)ucontext;
  return {};
#endif
}

}  // namespace pmtree::crash
