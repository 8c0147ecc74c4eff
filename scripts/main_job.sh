#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The project's main job (README, first command): installs what is missing,
# builds, and runs every reproduction suite at the scaled default sizes
# (`pmtree bench --suite all`), leaving the report, the JSON data and the
# figures in one folder, named at the end.  Extra arguments go to
# `pmtree bench` (e.g. --full for the papers' sizes, --scale 0.5, --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out="results/$(date -u +%Y%m%d-%H%M%S)"
has_out=0
for a in "$@"; do [[ "$a" == "--out" || "$a" == --out=* ]] && has_out=1; done
args=(--suite all)
((has_out)) || args+=(--out "$out")
build/pmtree bench "${args[@]}" "$@" >/dev/null
if ((has_out)); then
  echo "main job: done; the report is in the folder given by --out (report.md)" >&2
else
  echo "main job: done; report: $out/report.md (figures and JSON data beside it)" >&2
  echo "$out/report.md"
fi
