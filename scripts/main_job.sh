#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The project's main job (README, first command): installs what is missing,
# builds, and runs every reproduction suite at the papers' sizes (up to 10M
# keys; `pmtree bench --suite all --full`), each suite on its paper's media
# profile and at DRAM speed, leaving the report, the JSON data and the figures
# in one folder, named at the end.  Progress lines on stderr say the suite,
# experiment, tree, units done / total and the time elapsed.
#
#   scripts/main_job.sh            the papers' sizes (sized for about 20 min on a quiet
#                                  2-core machine; docs/bench.md, "The main job")
#   scripts/main_job.sh --quick    the scaled run (100K-200K keys, minutes)
#
# Other arguments go to `pmtree bench` (e.g. --out DIR, --scale 0.5 with
# --quick, --media optane to run every experiment on one medium).
set -euo pipefail
cd "$(dirname "$0")/.."
size=(--full)
args=()
for a in "$@"; do
  if [[ "$a" == "--quick" ]]; then size=(); else args+=("$a"); fi
done
# The main job needs only the CLI: build that target unless told otherwise.
PMTREE_TARGETS=${PMTREE_TARGETS:-pmtree} scripts/setup.sh
out="results/$(date -u +%Y%m%d-%H%M%S)"
has_out=0
for a in "${args[@]}"; do [[ "$a" == "--out" || "$a" == --out=* ]] && has_out=1; done
((has_out)) || args+=(--out "$out")
start=$(date +%s)
build/pmtree bench --suite all "${size[@]}" "${args[@]}" >/dev/null
echo "main job: finished in $(( $(date +%s) - start )) s (load average now: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
if ((has_out)); then
  echo "main job: done; the report is in the folder given by --out (report.md)" >&2
else
  echo "main job: done; report: $out/report.md (figures and JSON data beside it)" >&2
  echo "$out/report.md"
fi
