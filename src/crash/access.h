// SPDX-License-Identifier: Apache-2.0
//
// The memory one x86-64 instruction accesses, for the lazy search's read
// tracker (lazy.h, docs/crash_model.md section 1): which bytes an access
// that faulted on a protected page really touches, so that the search can
// branch on the bytes a check read instead of whole 64-byte lines.
//
// The instruction at the interrupted pc is decoded with Zydis (built with
// PMTREE_USE_ZYDIS); each memory operand's effective address comes from the
// interrupted registers (base + index * scale + displacement, rip-relative
// included) and its width from the operand size, SIMD operands included
// (16 bytes for movdqu, 32 for vmovdqu ymm, 64 for zmm).  An operand the
// instruction only writes is not a read.  What is not modelled exactly is
// reported as not decoded, and the caller falls back to its sound
// over-approximation (every byte an access of up to 64 bytes at the fault
// address can touch): string instructions with or without a rep prefix,
// gathers and scatters (vector indexes), fs/gs-relative and 32-bit
// addresses, bit-string instructions with a register bit offset (they may
// touch bytes outside their operand), an operand without a size, an
// undecodable byte sequence, and every instruction when the decoder is not
// built in.
//
// Async-signal-safe: no allocation, no locks (the tracker calls it from its
// SIGSEGV handler).

#ifndef PMTREE_CRASH_ACCESS_H_
#define PMTREE_CRASH_ACCESS_H_

#include <cstddef>
#include <cstdint>

namespace pmtree::crash {

// Bytes [addr, addr + size) of one memory operand.
struct MemoryAccess {
  uint64_t addr = 0;
  uint32_t size = 0;
  bool read = false;   // read, read-modify-written or conditionally read
  bool write = false;  // written or conditionally written
  // Every byte written, unconditionally: no condition, no write mask
  // (AVX-512 opmask, vmaskmov, maskmovdqu).  What the tracker may treat as
  // overwritten before a later read (lazy.h).
  bool overwrite = false;
};

struct InstructionAccesses {
  static constexpr uint32_t kMax = 4;
  // False: the instruction is not modelled exactly (see the header comment);
  // `access` is then empty and the caller must over-approximate.
  bool decoded = false;
  uint32_t count = 0;  // memory operands (an lea has none)
  MemoryAccess access[kMax];
};

// The interrupted general-purpose registers in x86 encoding order (rax, rcx,
// rdx, rbx, rsp, rbp, rsi, rdi, r8 ... r15) and the pc.
struct GeneralRegisters {
  uint64_t gpr[16] = {};
  uint64_t rip = 0;
};

// True when the decoder is built in (PMTREE_USE_ZYDIS); otherwise every
// instruction is "not decoded".
bool AccessDecoderAvailable();

// The accesses of the instruction whose bytes are code[0, len) (at most 15
// are read), executed at regs.rip with these registers.
InstructionAccesses DecodeAccesses(const uint8_t* code, size_t len, const GeneralRegisters& regs);

// The same for the instruction a signal interrupted: `ucontext` is the third
// argument of an SA_SIGINFO handler (x86-64 Linux only; elsewhere "not
// decoded").  The instruction's bytes are read at the interrupted pc.
InstructionAccesses DecodeInterruptedAccesses(const void* ucontext);

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_ACCESS_H_
