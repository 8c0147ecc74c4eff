# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
#
# Checks of a YCSB summary file written by `scripts/ycsb.sh --out FILE`, for
# the tests (scripts/test_ycsb.sh, scripts/test_shards.sh).  Source it; the
# caller defines fail MESSAGE (counts a failure).

# Sum of the `[OP], Return=OK, n` counts of one phase of a summary file, and
# a failure for every other Return= status or -FAILED line in that phase.
# With VERIFY set, the phase must also show YCSB's check of what reads returned.
# Usage: check_phase FILE PHASE WANT_OK LABEL [VERIFY]
check_phase() {
  local file=$1 phase=$2 want=$3 label=$4 verify=${5:-} section ok bad
  section=$(awk -v p="# phase $phase" '/^# phase / { on = ($0 == p); next } on' "$file")
  # A read-modify-write (workload F) reports its read and its update as
  # [READ] and [UPDATE] statuses: one operation, counted twice there.
  ok=$(awk -F', ' '/Return=OK/ && !/^\[(VERIFY|CLEANUP)/ { n += $3 }
                   /^\[READ-MODIFY-WRITE\], Operations,/ { n -= $3 } END { print n + 0 }' <<<"$section")
  bad=$(grep -E 'Return=|-FAILED\]' <<<"$section" | grep -v 'Return=OK' || true)
  [[ -z $bad ]] || fail "$label $phase: operations not OK: $bad"
  [[ $ok -eq $want ]] || fail "$label $phase: $ok operations returned OK, want $want"
  if [[ -n $verify ]] && ! grep -q '^\[VERIFY\], Return=OK' <<<"$section"; then
    fail "$label $phase: YCSB verified no read (data integrity check did not run)"
  fi
}
