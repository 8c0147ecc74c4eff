#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Bounded end-to-end test of the YCSB binding (bench/ycsb): all six YCSB
# workloads A-F with YCSB's data-integrity check on, against Debian's
# redis-server and against `pmtree serve` (build/pmtree must have it).  One
# load of 1,000 records serves A, B, C, F (no inserts) and then D (which
# inserts); E (scans and inserts) runs on a fresh load.  Fails when YCSB
# reports any operation that did not return OK, when a read returned a value
# other than the one written (YCSB's VERIFY), when the operation counts do
# not add up, or when the server does not hold exactly the loaded and
# inserted records afterwards.  About 10-20 s per server on 2 cores.
#
# Usage: scripts/test_ycsb.sh [--pmtree BIN] [--tree NAME] [--serve-args STR]
#   --pmtree BIN       pmtree binary (default build/pmtree; env PMTREE_BIN)
#   --tree NAME        tree for pmtree serve (default lbtree)
#   --serve-args STR   extra arguments for pmtree serve (e.g. "--pool-size 256M")
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/servers.sh
source "$root/scripts/lib/servers.sh"
# shellcheck source=lib/ycsb_checks.sh
source "$root/scripts/lib/ycsb_checks.sh"

pmtree=${PMTREE_BIN:-$root/build/pmtree} tree=lbtree serve_args=""
while (($#)); do
  [[ $1 == --pmtree || $1 == --tree || $1 == --serve-args ]] && [[ -z ${2:-} ]] &&
    { echo "test_ycsb.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --pmtree) pmtree=$2; shift 2 ;;
    --tree) tree=$2; shift 2 ;;
    --serve-args) serve_args=$2; shift 2 ;;
    *) echo "test_ycsb.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
read -ra serve_extra <<<"$serve_args"

readonly records=1000 operations=1000 scans=300
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

servers_install_redis
servers_init "/dev/shm/pmtree_test_ycsb.$$"
trap servers_stop_all EXIT
"$root/scripts/ycsb.sh" --build-only

# Exactly `want` records and their index entries, nothing else.
check_contents() {
  local port=$1 want=$2 label=$3 indexed keys
  indexed=$(redis-cli -p "$port" zcard _indices)
  keys=$(redis-cli -p "$port" dbsize)
  [[ $indexed == "$want" ]] || fail "$label: _indices holds '$indexed' keys, want $want"
  [[ $keys == $((want + 1)) ]] || fail "$label: the server holds '$keys' keys, want $((want + 1))"
}

# Records that a summary's run phase inserted (workloads D and E).
inserted() {
  awk -F', ' '/^# phase run/ { on = 1 } on && /^\[INSERT\], Return=OK/ { print $3 }' "$1"
}

# Workloads A, B, C, F and D on one load, then E on a fresh one.
exercise() {
  local label=$1 port=$2 out before w phase added
  out=$SERVERS_DIR/$label.summary
  before=$failures
  for w in a b c f d; do
    phase=run
    [[ $w == a ]] && phase=both
    "$root/scripts/ycsb.sh" --port "$port" --workload "$w" --phase "$phase" --records "$records" \
        --operations "$operations" --threads 2 -p dataintegrity=true --out "$out" >/dev/null ||
      fail "$label: YCSB workload ${w^^} exited non-zero"
    [[ $w == a ]] && check_phase "$out" load "$records" "$label ${w^^}"
    check_phase "$out" run "$operations" "$label ${w^^}" verify
  done
  added=$(inserted "$out")
  check_contents "$port" $((records + ${added:-0})) "$label A-D"

  redis-cli -p "$port" flushall >/dev/null
  "$root/scripts/ycsb.sh" --port "$port" --workload e --records "$records" \
      --operations "$scans" --threads 2 -p dataintegrity=true --out "$out" >/dev/null ||
    fail "$label: YCSB workload E exited non-zero"
  check_phase "$out" load "$records" "$label E"
  check_phase "$out" run "$scans" "$label E"
  added=$(inserted "$out")
  check_contents "$port" $((records + ${added:-0})) "$label E"
  ((failures == before)) &&
    echo "ok: $label: YCSB A, B, C, F, D ($operations ops each) and E ($scans ops), all OK and verified"
  return 0
}

servers_start_redis redis-always always
exercise redis-server "$SERVER_PORT"
servers_stop redis-always

if pmtree_has_serve "$pmtree"; then
  servers_start_pmtree pmtree-serve "$pmtree" "$tree" "${serve_extra[@]}"
  exercise "pmtree-serve-$tree" "$SERVER_PORT"
  servers_stop pmtree-serve
else
  echo "FAIL: $pmtree is missing or has no serve subcommand (build the pmtree target)" >&2
  failures=$((failures + 1))
fi

if ((failures)); then
  echo "test_ycsb.sh: $failures failure(s)" >&2
  exit 1
fi
echo "test_ycsb.sh: passed"
