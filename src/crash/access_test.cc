// SPDX-License-Identifier: Apache-2.0
//
// Tests of the instruction decoder behind byte-precise read tracking
// (access.h): each memory operand's address and width (1, 2, 4, 8 bytes,
// SIMD 16 and 32), reads told from writes, and the instructions left to the
// line-sized fallback.  Without the decoder (PMTREE_USE_ZYDIS off) every
// instruction is "not decoded" and these tests are skipped.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "crash/access.h"

namespace pmtree::crash {
namespace {

constexpr uint64_t kRbx = 0x7f0000001000;
constexpr uint64_t kRsi = 0x7f0000002000;
constexpr uint64_t kRip = 0x555500001000;

GeneralRegisters Regs() {
  GeneralRegisters r;
  r.gpr[3] = kRbx;  // rbx
  r.gpr[6] = kRsi;  // rsi
  r.gpr[1] = 5;     // rcx: an index
  r.rip = kRip;
  return r;
}

InstructionAccesses Decode(std::vector<uint8_t> code) { return DecodeAccesses(code.data(), code.size(), Regs()); }

// The single memory access of `code`.
MemoryAccess Only(std::vector<uint8_t> code) {
  InstructionAccesses a = Decode(std::move(code));
  EXPECT_TRUE(a.decoded);
  EXPECT_EQ(a.count, 1u);
  return a.count == 1 ? a.access[0] : MemoryAccess{};
}

class AccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!AccessDecoderAvailable()) GTEST_SKIP() << "built without the decoder (PMTREE_USE_ZYDIS)";
  }
};

TEST_F(AccessTest, ScalarLoadsHaveTheirOperandWidth) {
  MemoryAccess a = Only({0x8a, 0x03});  // mov al, [rbx]
  EXPECT_EQ(a.addr, kRbx);
  EXPECT_EQ(a.size, 1u);
  EXPECT_TRUE(a.read);
  EXPECT_FALSE(a.write);
  a = Only({0x66, 0x8b, 0x43, 0x02});  // mov ax, [rbx + 2]
  EXPECT_EQ(a.addr, kRbx + 2);
  EXPECT_EQ(a.size, 2u);
  a = Only({0x8b, 0x43, 0x3c});  // mov eax, [rbx + 60]
  EXPECT_EQ(a.addr, kRbx + 60);
  EXPECT_EQ(a.size, 4u);
  a = Only({0x48, 0x8b, 0x44, 0xcb, 0x08});  // mov rax, [rbx + rcx*8 + 8]
  EXPECT_EQ(a.addr, kRbx + 5 * 8 + 8);
  EXPECT_EQ(a.size, 8u);
  a = Only({0x0f, 0xb6, 0x43, 0xff});  // movzx eax, byte [rbx - 1]
  EXPECT_EQ(a.addr, kRbx - 1);
  EXPECT_EQ(a.size, 1u);
  a = Only({0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00});  // mov rax, [rip + 16]
  EXPECT_EQ(a.addr, kRip + 7 + 16);
  EXPECT_EQ(a.size, 8u);
}

TEST_F(AccessTest, SimdLoadsHaveTheirVectorWidth) {
  MemoryAccess a = Only({0xf3, 0x0f, 0x6f, 0x06});  // movdqu xmm0, [rsi]
  EXPECT_EQ(a.addr, kRsi);
  EXPECT_EQ(a.size, 16u);
  EXPECT_TRUE(a.read);
  a = Only({0xc5, 0xfe, 0x6f, 0x46, 0x20});  // vmovdqu ymm0, [rsi + 32]
  EXPECT_EQ(a.addr, kRsi + 32);
  EXPECT_EQ(a.size, 32u);
  a = Only({0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x06});  // vmovdqu64 zmm0, [rsi]
  EXPECT_EQ(a.size, 64u);
  a = Only({0x66, 0x0f, 0x74, 0x06});  // pcmpeqb xmm0, [rsi]
  EXPECT_EQ(a.size, 16u);
  EXPECT_TRUE(a.read);
}

TEST_F(AccessTest, StoresAreWritesNotReadsAndReadModifyWritesAreBoth) {
  MemoryAccess a = Only({0x48, 0x89, 0x03});  // mov [rbx], rax
  EXPECT_EQ(a.size, 8u);
  EXPECT_FALSE(a.read);
  EXPECT_TRUE(a.write);
  a = Only({0xf3, 0x0f, 0x7f, 0x06});  // movdqu [rsi], xmm0
  EXPECT_EQ(a.size, 16u);
  EXPECT_FALSE(a.read);
  a = Only({0xf0, 0x48, 0x0f, 0xb1, 0x0b});  // lock cmpxchg [rbx], rcx
  EXPECT_EQ(a.addr, kRbx);
  EXPECT_EQ(a.size, 8u);
  EXPECT_TRUE(a.read);
  EXPECT_TRUE(a.write);
  a = Only({0xf0, 0x48, 0x0f, 0xc7, 0x0e});  // lock cmpxchg16b [rsi]
  EXPECT_EQ(a.size, 16u);
  EXPECT_TRUE(a.read);
  a = Only({0x83, 0x03, 0x01});  // add dword [rbx], 1
  EXPECT_EQ(a.size, 4u);
  EXPECT_TRUE(a.read && a.write);
  a = Only({0x48, 0x39, 0x03});  // cmp [rbx], rax
  EXPECT_TRUE(a.read);
  EXPECT_FALSE(a.write);
}

// Only a store that writes every byte of its operand, whatever the data,
// overwrites: the tracker may then forget what the image held there.
TEST_F(AccessTest, OnlyUnconditionalUnmaskedStoresOverwrite) {
  EXPECT_TRUE(Only({0x48, 0x89, 0x03}).overwrite);  // mov [rbx], rax
  EXPECT_TRUE(Only({0x83, 0x03, 0x01}).overwrite);  // add dword [rbx], 1 (read first, then written)
  EXPECT_FALSE(Only({0x48, 0x8b, 0x03}).overwrite);  // mov rax, [rbx]
  EXPECT_FALSE(Only({0xf0, 0x48, 0x0f, 0xb1, 0x0b}).overwrite);  // lock cmpxchg [rbx], rcx
  EXPECT_TRUE(Only({0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x06}).overwrite);  // vmovdqu64 [rsi], zmm0
  EXPECT_FALSE(Only({0x62, 0xf1, 0xfe, 0x49, 0x7f, 0x06}).overwrite);  // vmovdqu64 [rsi]{k1}, zmm0
  EXPECT_FALSE(Only({0xc4, 0xe2, 0x75, 0x2e, 0x06}).overwrite);  // vmaskmovps [rsi], ymm1, ymm0
}

TEST_F(AccessTest, AddressComputationsAreNotAccesses) {
  InstructionAccesses a = Decode({0x48, 0x8d, 0x44, 0xcb, 0x08});  // lea rax, [rbx + rcx*8 + 8]
  EXPECT_TRUE(a.decoded);
  EXPECT_EQ(a.count, 0u);
}

TEST_F(AccessTest, StringBitStringAndSegmentAccessesAreLeftToTheFallback) {
  EXPECT_FALSE(Decode({0xf3, 0xa4}).decoded);              // rep movsb
  EXPECT_FALSE(Decode({0xf3, 0x48, 0xab}).decoded);        // rep stosq
  EXPECT_FALSE(Decode({0xa4}).decoded);                    // movsb
  EXPECT_FALSE(Decode({0xf3, 0xa6}).decoded);              // repe cmpsb
  EXPECT_FALSE(Decode({0x48, 0x0f, 0xa3, 0x03}).decoded);  // bt [rbx], rax: the bit offset reaches past the operand
  EXPECT_TRUE(Decode({0x48, 0x0f, 0xba, 0x23, 0x05}).decoded);  // bt qword [rbx], 5: inside it
  EXPECT_FALSE(Decode({0x64, 0x48, 0x8b, 0x03}).decoded);       // mov rax, fs:[rbx]
  EXPECT_FALSE(Decode({0x67, 0x8b, 0x03}).decoded);             // mov eax, [ebx]: 32-bit address
  // vpgatherdd ymm0, [rbx + ymm1*4], ymm2: a vector index
  EXPECT_FALSE(Decode({0xc4, 0xe2, 0x6d, 0x90, 0x04, 0x8b}).decoded);
  EXPECT_FALSE(Decode({0x0f, 0xff}).decoded);  // ud0 without its operand: undecodable
}

TEST(AccessFallbackTest, WithoutTheDecoderNothingIsDecoded) {
  if (AccessDecoderAvailable()) GTEST_SKIP() << "built with the decoder";
  EXPECT_FALSE(Decode({0x8a, 0x03}).decoded);
}

}  // namespace
}  // namespace pmtree::crash
