// SPDX-License-Identifier: Apache-2.0
//
// The shadow persistence model and crash-image generation
// (docs/crash_model.md, CRASH_MODEL.md sections 1-3).
//
// Shadow replays a trace (trace.h) onto an image buffer that always holds the
// durable image P: the bytes guaranteed to survive a crash at this moment.
// Stores that may or may not survive are kept per *unit* as ordered lists of
// pending pieces (each piece lies inside one aligned 8-byte word, since
// wider stores may tear at 8 bytes):
//
//   Mode::kAdr     unit = 64-byte cache line.  A crash leaves each line at P
//                  plus some prefix of its pending pieces (per-line prefix,
//                  the default).
//   Mode::kStrict  unit = aligned 8-byte word: each word of a line takes its
//                  own prefix independently (an untorn 64-byte write-back is
//                  not architecturally guaranteed).
//   Mode::kEadr    caches are persistent: every store is durable once it is
//                  made, so P includes every store and the explorer crashes
//                  after every piece instead (a prefix of the store order).
//
// Flush marks the pieces pending in the flushed units at that moment as
// covered; Fence commits covered pieces into P.  Flush is modelled as clwb
// (the weakest instruction the hardware backend may pick): it does not cover a
// store made to the line after it, and nothing is durable before the fence.
// Every image clflush or clflushopt allows is one of these images too.
// Non-temporal stores are covered at once: durable at the next fence.
//
// Images at a crash point (ImagePlan): one choice per dirty unit (how many of
// its pending pieces reached memory), Π(k_u+1) images in all.  Exhaustive up
// to a bound; above it a structured set plus seeded random samples.  Images
// are applied by patching the dirty units of P in place and reverting
// afterwards; the pool is never copied.

#ifndef PMTREE_CRASH_SHADOW_H_
#define PMTREE_CRASH_SHADOW_H_

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pmtree/status.h"

namespace pmtree::crash {

enum class Mode : uint8_t { kAdr, kStrict, kEadr };
std::string_view ModeName(Mode mode);
Status ParseMode(std::string_view text, Mode* mode);

inline constexpr uint64_t kLine = 64;

// One store piece inside one aligned 8-byte word.
struct Piece {
  uint64_t off;
  uint32_t site;
  uint8_t len;
  uint8_t data[8];
};

struct Unit {
  uint64_t off = 0;
  uint32_t size = 0;
  std::vector<Piece> pending;  // program order
  uint32_t covered = 0;        // pending[0, covered) are flushed, durable at the next fence
  bool flushed_this_epoch = false;
  uint32_t first_store_after_flush_site = UINT32_MAX;
};

// Findings on the trace itself (section 4.6), per site id.
struct LintCounts {
  std::map<uint32_t, uint64_t> redundant_flushes;     // flush of a line with nothing pending
  std::map<uint32_t, uint64_t> empty_fences;          // fence with nothing to commit
  std::map<uint32_t, uint64_t> store_after_flush;     // store between a line's flush and the fence, not re-flushed
  std::map<uint32_t, uint64_t> pending_at_op_end;     // store of an operation still not durable at its end
};

class Shadow {
 public:
  // `image` holds P and must start as the pool's bytes before the first
  // replayed event (all zero for a fresh memfd).
  Shadow(char* image, uint64_t size, Mode mode);

  void Store(uint64_t off, const uint8_t* data, uint64_t len, uint32_t site, bool non_temporal);
  void Flush(uint64_t off, uint64_t len, uint32_t site);
  void Fence(uint32_t site);
  // End of an operation: counts the operation's stores still pending (lint).
  void OpEnd();

  // Units with pending pieces, by offset (valid until the next event).
  std::vector<Unit*> DirtyUnits();
  bool clean() const { return dirty_.empty(); }
  // Bumped by every store and every commit: two crash points with the same
  // generation have the same image set.
  uint64_t generation() const { return generation_; }
  // Hash of P (XOR of per-line hashes, maintained incrementally).
  uint64_t p_hash() const { return p_hash_; }
  // Hash of the whole shadow state (P and every pending piece with its
  // covered flag): equal signatures mean equal image sets.
  uint64_t Signature();
  static uint64_t LineHash(uint64_t line_off, const char* bytes);
  char* image() const { return image_; }
  uint64_t size() const { return size_; }
  Mode mode() const { return mode_; }
  LintCounts& lints() { return lints_; }

 private:
  void Commit(Unit* u, uint32_t n);
  void ApplyPieces(const std::vector<Piece>& pieces, uint32_t n);

  char* const image_;
  const uint64_t size_;
  const Mode mode_;
  const uint64_t unit_size_;
  std::unordered_map<uint64_t, Unit> dirty_;  // unit index -> unit
  std::vector<uint64_t> flushed_;             // unit indexes flushed since the last fence
  uint64_t nt_pending_ = 0;
  uint64_t generation_ = 0;
  uint64_t p_hash_ = 0;
  LintCounts lints_;
};

// What a mutant's shadow state adds over the correct program's at the same
// crash point (docs/crash_model.md section 5, "Differing points").  The
// images of a shadow state are the product, over its dirty units, of the
// bytes each unit can hold (P's bytes plus each prefix of its pending
// pieces), with P everywhere else.  So with the same unit size in both:
//
//   * if P agrees outside the units dirty in either, and at every such unit
//     every content the mutant can leave is one the correct program can
//     leave, the mutant's images are a subset of the correct program's
//     (`subset`): the point is not a differing point, whatever pieces the
//     two have (a half that rewrites the bytes already there, a torn store
//     whose halves each reproduce a correct content);
//   * otherwise, if P agrees outside those units (`comparable`), an image
//     is the mutant's alone exactly when some unit holds one of its `fresh`
//     contents: the images to check are, for each unit u with fresh
//     contents, those with u at a fresh content and every other unit at any
//     of its choices.
//
// Exact byte comparisons, no hashes.  eADR has no dirty units: compare the
// signatures instead.  The explorer skips `subset` points; at the others its
// lazy search branches over `fresh` (the mutant's own images only).
struct ImageDiff {
  bool comparable = false;
  bool subset = false;
  // Per unit of mutant.DirtyUnits(): the choices (prefix lengths, ascending,
  // one per distinct content) whose bytes no choice of the correct
  // program's same unit gives.  Empty when !comparable.
  std::vector<std::vector<uint32_t>> fresh;
};
ImageDiff DiffImages(Shadow& base, Shadow& mutant);

// The images to build at one crash point, and their application.
class ImagePlan {
 public:
  // `units` from Shadow::DirtyUnits().  `bound`: exhaustive when the image
  // count is at most this; `samples`: random images added to the structured
  // set above it; `seed` makes the samples reproducible.
  ImagePlan(std::vector<Unit*> units, char* image, uint64_t bound, uint64_t samples, uint64_t seed);
  ~ImagePlan();  // reverts P

  bool exhaustive() const { return exhaustive_; }
  // Number of distinct choice vectors, saturating at 2^63.
  uint64_t total() const { return total_; }
  // The choice vectors this plan visits, in order.
  uint64_t planned() const { return planned_; }
  // Patches image `index` (0 <= index < planned()) into P; returns its
  // choice vector via *choice.  Images are visited in index order.
  void Apply(uint64_t index, std::vector<uint32_t>* choice);
  // Patches an arbitrary choice vector (one entry per unit, each at most
  // that unit's pending count) into P: the lazy mode's images (lazy.h).
  void ApplyChoice(const std::vector<uint32_t>& choice);
  // Restores P.
  void Revert();
  // Hash of the bytes of every dirty line as currently patched, combined with
  // `p_hash`: equal for equal images.
  uint64_t ImageHash(uint64_t p_hash) const;
  // "line 0x4040: 2/3 pieces, line 0x4080: 0/1" for a choice vector.
  std::string Describe(const std::vector<uint32_t>& choice) const;
  const std::vector<Unit*>& units() const { return units_; }

 private:
  void Choice(uint64_t index, std::vector<uint32_t>* c);

  std::vector<Unit*> units_;
  char* const image_;
  bool exhaustive_ = true;
  uint64_t total_ = 1;
  uint64_t planned_ = 0;
  uint64_t seed_;
  std::vector<std::vector<uint32_t>> structured_;  // non-exhaustive: the structured set
  uint64_t samples_ = 0;
  std::vector<uint64_t> lines_;                    // distinct dirty lines
  std::vector<std::vector<char>> saved_lines_;     // P content of each line
};

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_SHADOW_H_
