// SPDX-License-Identifier: Apache-2.0

#include "bench/media.h"

namespace pmtree::bench {

const std::vector<MediaProfile>& MediaProfiles() {
  // The optane number is derived from the LB+-Tree paper's own figures
  // (docs/bench.md, "Media profiles"): its 10-level root-to-leaf search with
  // DRAM inner nodes takes 823 ns, i.e. about 80 ns per DRAM line miss on its
  // machine, and it finds 3D XPoint "2-3x slower than DRAM"; a written line
  // at the upper end costs 3 x 80 = 240 ns, 160 ns more than DRAM.
  static const std::vector<MediaProfile> profiles = {
      {"dram", 0,
       "DRAM speed: the flush instructions run, nothing is added (NV-Tree, Circ-Tree and CDDS papers; the "
       "overview)",
       ""},
      {"pcm-300", 300,
       "WO-tree paper (Fig. 10b): 300 ns extra per written line, its main setting; Circ-Tree's sweep point",
       "reads at DRAM speed; no bandwidth limit; the latency is a CPU spin, so it also occupies the core"},
      {"pcm-600", 600, "WO-tree paper (Fig. 10b): 600 ns extra per written line, the slow end of its sweep",
       "reads at DRAM speed; no bandwidth limit; the latency is a CPU spin, so it also occupies the core"},
      {"optane", 160,
       "LB+-Tree paper's 3D XPoint: ~80 ns per DRAM line (823 ns for a 10-level search) x 3 (\"2-3x slower "
       "than DRAM\") = 240 ns per written line, 160 ns above DRAM",
       "reads at DRAM speed (XPoint reads are 2-3x slower too); the 256 B internal block (a 64 B write costs a "
       "256 B read-modify-write; lines of one 256 B block flushed together cost one); the worst case of "
       "persists up to 10x slower than plain writes; bandwidth limits and the slow-down as the data set grows "
       "(the paper's Observation 3); the latency is a CPU spin, so it also occupies the core"},
  };
  return profiles;
}

const MediaProfile* FindMedia(std::string_view name) {
  for (const auto& p : MediaProfiles())
    if (name == p.name) return &p;
  return nullptr;
}

std::string MediaNames() {
  std::string s;
  for (const auto& p : MediaProfiles()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

Status ValidateMedia(std::string_view name) {
  if (FindMedia(name)) return Status::Ok();
  return Status::InvalidArgument("--media '" + std::string(name) + "' is not a profile; valid: " + MediaNames());
}

}  // namespace pmtree::bench
