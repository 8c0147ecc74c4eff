// SPDX-License-Identifier: Apache-2.0
//
// Every persistent byte of the LB+-Tree (docs/trees/lbtree.md, "Layout").
//
// A leaf is m = node_size / 256 blocks of 256 B (m = 1..4), aligned to 256 B,
// so a block is one 3D XPoint media unit and four 64 B cache lines.  Inner
// nodes live in DRAM and are rebuilt from the leaf list at recovery.
//
// ---- Block header (16 B, paper §3.1 "header") --------------------------------
//
//   off  size  field         meaning
//   0    2     bitmap/flags  bits 0..13: bitmap, bit i = 1 iff slot i of this
//                            block holds a valid entry; bit 14: lock (block 0
//                            only; see below); bit 15: alt (block 0 only)
//   2    14    fingerprints  fingerprints[i] = one-byte hash of slot i's key
//                            (meaningful only where bitmap bit i is set)
//
// Seen as two 8-byte words (what the code stores, always with Store64):
//   word0 = bitmap | lock << 14 | alt << 15 | fingerprints[0..5] << 16..63
//   word1 = fingerprints[6..13]
// word0 covers every slot of the header's own line (slots 0..2 for a front
// header), which is what makes an insertion into line 0 a single NAW.
//
// ---- Block 0 of a leaf (256 B) -----------------------------------------------
//
//   off  size  field        meaning
//   0    16    header       the block's header; its word0 holds lock and alt
//   16   224   entry[0..13] 14 entries of 16 B: key slot (8 B), value (8 B);
//                           entry i is at 16 + 16 i, so line 0 holds entries
//                           0..2, line 1 3..6, line 2 7..10, line 3 11..13
//   240  8     sibling[0]   offset of the right sibling leaf (0 = none)
//   248  8     sibling[1]   the alternative sibling pointer; alt selects
//                           which of the two is in effect (§3.3)
//
// ---- Block b >= 1 of a multi-256 B leaf (256 B, §3.4) -------------------------
//
//   off  size  field        meaning
//   0    16    header[0]    front header of this block (active when alt = 0)
//   16   224   entry[0..13] as in block 0
//   240  16    header[1]    alternative (back) header (active when alt = 1)
//
// The alt bit of block 0 switches the sibling pointer and the headers of
// blocks 1..m-1 with one NAW, which is what makes splits logless.
//
// The lock bit.  The paper sets it inside an HTM transaction.  This machine
// has no HTM and the pool offers no atomic read-modify-write on PM, so the
// lock lives in DRAM (a per-leaf version word, docs "Concurrency") and pmtree
// always writes 0 here.  Recovery still clears a set lock bit (paper §3.1,
// "Crash Recovery"), so pools written by a variant that used it recover too.
//
// ---- Meta block (576 B, root slot 0) -------------------------------------------
//
//   off  size  field          meaning
//   0    8     magic          kMetaMagic ("LBTREE02"; "LBTREE01", kMetaMagicV1, is
//                             the format before `leaves`: Incompatible)
//   8    4     node_size      leaf size in bytes: 256, 512, 768 or 1024
//   12   4     key_kind       KeyKind (0 = u64, 1 = byte strings)
//   16   8     head           offset of the leftmost leaf; never changes (a
//                             split always adds the new leaf to the right)
//   24   8     hint_sel       which hint array (0 or 1) is in effect; the
//                             inactive one is rewritten, persisted, then this
//                             word is switched with one NAW
//   32   8     restart        offset of the restart image written by a clean
//                             Close (0 = none); trusted only when the pool
//                             reports a clean shutdown
//   40   8     variant        0 = lbtree; 1 = lbtree-paper (test-only): each
//                             variant refuses to recover the other's pool
//   48   8     restart_bytes  size of that image (0 = none, or a pool closed
//                             before this word was kept): an image recovery
//                             cannot use is still counted when the walk's
//                             bytes are checked against the clean close's
//   56   8     leaves         a lower bound of the leaves in the list, never above
//                             what a crash leaves there: 1 at creation; a split
//                             persists it after the NAW that links its new leaf,
//                             a bulk load after its NAW, Close and recovery the
//                             exact count.  Recovery's walk must reach at least
//                             this many leaves (leaves are never freed), else
//                             the list was cut: Corruption, not a loss absorbed
//   64   256   hints[0]       HintArray: count (8 B) + up to 31 leaf offsets
//   320  256   hints[1]       the alternative HintArray
//
// HintArray: evenly spaced leaves recorded during normal running (paper
// §4.2, Fig. 15), in leaf-list order, head excluded.  They cut the leaf list
// into segments that recovery threads scan in parallel.  Leaves are never
// freed, so a recorded leaf stays in the list forever.
//
// ---- Restart image (clean shutdown only) ----------------------------------------
//
//   off  size  field      meaning
//   0    8     magic      kRestartMagic
//   8    8     leaves     number of leaf records that follow
//   16   8     bytes      total size of the image in bytes
//   24   ...   records    per leaf in list order: leaf offset (8 B), then the
//                         separator routing to it: u64 keys 8 B; byte keys
//                         length (4 B) + bytes, padded to 8 B.  The first
//                         record (the head) carries no separator.

#ifndef PMTREE_TREES_LBTREE_LAYOUT_H_
#define PMTREE_TREES_LBTREE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace pmtree::lbtree {

inline constexpr uint32_t kBlockSize = 256;
inline constexpr uint32_t kLineSize = 64;
inline constexpr int kSlotsPerBlock = 14;
inline constexpr int kMaxBlocks = 4;  // 1 KiB leaves
inline constexpr uint32_t kDefaultNodeSize = 256;

inline constexpr uint64_t kBitmapMask = (1u << kSlotsPerBlock) - 1;  // bits 0..13
inline constexpr uint64_t kLockBit = 1u << 14;
inline constexpr uint64_t kAltBit = 1u << 15;

struct Entry {
  uint64_t key;    // key slot (U64Keys: the key; BytesKeys: prefix16 | blob offset)
  uint64_t value;
};
static_assert(sizeof(Entry) == 16);

struct BlockHeader {
  uint64_t word0;  // bitmap | lock | alt | fingerprints[0..5]
  uint64_t word1;  // fingerprints[6..13]
};
static_assert(sizeof(BlockHeader) == 16);

// One 256 B block.  `tail` is the sibling pair in block 0 and the back
// header in blocks 1..m-1.
struct Block {
  BlockHeader header;
  Entry entry[kSlotsPerBlock];
  uint64_t tail[2];
};
static_assert(sizeof(Block) == kBlockSize);
static_assert(offsetof(Block, header) == 0);
static_assert(offsetof(Block, entry) == 16);
static_assert(offsetof(Block, tail) == 240);

// Line (0..3) of a block that holds slot `slot`.
constexpr int LineOfSlot(int slot) { return (16 + 16 * slot) / static_cast<int>(kLineSize); }
static_assert(LineOfSlot(0) == 0 && LineOfSlot(2) == 0 && LineOfSlot(3) == 1 && LineOfSlot(6) == 1);
static_assert(LineOfSlot(7) == 2 && LineOfSlot(10) == 2 && LineOfSlot(11) == 3 && LineOfSlot(13) == 3);
// Bitmap bits of the slots in line `line`.
constexpr uint64_t SlotsOfLine(int line) {
  uint64_t m = 0;
  for (int s = 0; s < kSlotsPerBlock; s++)
    if (LineOfSlot(s) == line) m |= 1ull << s;
  return m;
}
static_assert(SlotsOfLine(0) == 0x7 && SlotsOfLine(3) == 0x3800);

inline constexpr uint64_t kMetaMagic = 0x32304545'5254424cull;     // bytes "LBTREE02"
inline constexpr uint64_t kMetaMagicV1 = 0x31304545'5254424cull;   // bytes "LBTREE01": before `leaves`
inline constexpr uint64_t kRestartMagic = 0x54525453'4552424cull;  // bytes "LBRESTRT"
inline constexpr int kMaxHints = 31;

struct HintArray {
  uint64_t count;
  uint64_t leaf[kMaxHints];
};
static_assert(sizeof(HintArray) == 256);

struct Meta {
  uint64_t magic;
  uint32_t node_size;
  uint32_t key_kind;
  uint64_t head;
  uint64_t hint_sel;
  uint64_t restart;
  uint64_t variant;
  uint64_t restart_bytes;
  uint64_t leaves;
  HintArray hints[2];
};
static_assert(sizeof(Meta) == 576);
static_assert(offsetof(Meta, head) == 16);
static_assert(offsetof(Meta, hint_sel) == 24);
static_assert(offsetof(Meta, restart) == 32);
static_assert(offsetof(Meta, variant) == 40);
static_assert(offsetof(Meta, restart_bytes) == 48);
static_assert(offsetof(Meta, leaves) == 56, "restart, restart_bytes and leaves share the meta's first line");
inline constexpr uint64_t kVariantLbTree = 0;
inline constexpr uint64_t kVariantPaperSplit = 1;
static_assert(offsetof(Meta, hints) == 64);
static_assert(offsetof(Meta, hints) + sizeof(HintArray) == 320);

struct RestartImage {
  uint64_t magic;
  uint64_t leaves;
  uint64_t bytes;
  // records follow
};
static_assert(sizeof(RestartImage) == 24);

}  // namespace pmtree::lbtree

#endif  // PMTREE_TREES_LBTREE_LAYOUT_H_
