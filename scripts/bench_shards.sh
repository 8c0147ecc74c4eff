#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# YCSB workloads A and D through nutcracker across 1, 2 and 4 shards, for
# `pmtree serve` shards and redis-server appendfsync always shards in the
# same topology (scripts/shards.sh), plus each engine straight to one shard
# without the proxy (the proxy's cost).  Per set-up: one load phase, then the
# transaction phase of A, then of D on the same records.  Prints one line per
# run: engine, shards, path (proxy|direct), workload, ops/s, read and
# update/insert mean latency in us.  Short runs: on a small machine these
# numbers show overheads, not scaling.
#
# Usage: scripts/bench_shards.sh [options]
#   --records N      records loaded (default 10000)
#   --operations N   operations per workload (default 20000)
#   --threads T      YCSB client threads (default 8)
#   --shards LIST    shard counts (default "1 2 4")
#   --engines LIST   engines (default "pmtree redis")
#   --tree NAME      tree of the pmtree shards (default lbtree)
#   --pmtree BIN     pmtree binary (default build/pmtree; env PMTREE_BIN)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

records=10000 operations=20000 threads=8 shard_counts="1 2 4" engines="pmtree redis" tree=lbtree
pmtree=${PMTREE_BIN:-$root/build/pmtree}
die() { echo "bench_shards.sh: $*" >&2; exit 2; }
while (($#)); do
  [[ -n ${2:-} ]] || die "$1 needs a value"
  case $1 in
    --records) records=$2 ;;
    --operations) operations=$2 ;;
    --threads) threads=$2 ;;
    --shards) shard_counts=$2 ;;
    --engines) engines=$2 ;;
    --tree) tree=$2 ;;
    --pmtree) pmtree=$2 ;;
    *) die "unknown option '$1'" ;;
  esac
  shift 2
done
for n in $records $operations $threads $shard_counts; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive integer"
done

"$root/scripts/ycsb.sh" --build-only
work=$(mktemp -d "${TMPDIR:-/tmp}/pmtree-bench-shards.XXXXXX")
dir=/dev/shm/pmtree_bench_shards.$$
trap '"$root/scripts/shards.sh" --dir "$dir" stop; rm -rf "$work"' EXIT

# One YCSB phase; prints the result line.  Usage: phase ENGINE N PATH WORKLOAD PHASE TARGET...
phase() {
  local engine=$1 n=$2 path=$3 workload=$4 ph=$5 out=$work/summary
  shift 5
  "$root/scripts/ycsb.sh" --workload "$workload" --records "$records" --operations "$operations" \
      --threads "$threads" --phase "$ph" --out "$out" "$@" >/dev/null ||
    die "YCSB $workload $ph failed for $engine x$n ($path)"
  [[ $ph == run ]] || return 0
  awk -F', ' -v e="$engine" -v n="$n" -v p="$path" -v w="$workload" '
    $1 == "[OVERALL]" && $2 == "Throughput(ops/sec)" { tput = $3 }
    $1 == "[READ]" && $2 == "AverageLatency(us)" { rd = $3 }
    ($1 == "[UPDATE]" || $1 == "[INSERT]") && $2 == "AverageLatency(us)" { wr = $3 }
    END { printf "%-6s %2d shards %-6s %s  %8.0f ops/s  read %6.0f us  write %6.0f us\n", e, n, p, w, tput, rd, wr }' "$out"
}

for engine in $engines; do
  for n in $shard_counts; do
    paths=(proxy)
    ((n == 1)) && paths+=(direct)
    for path in "${paths[@]}"; do
      "$root/scripts/shards.sh" --dir "$dir" --engine "$engine" --shards "$n" --tree "$tree" \
          --pmtree "$pmtree" start >/dev/null
      # shellcheck disable=SC1091
      port=$(source "$dir/env"; if [[ $path == proxy ]]; then echo "$SHARDS_PROXY_PORT"; else echo "${SHARDS_PORTS%% *}"; fi)
      phase "$engine" "$n" "$path" a load --port "$port"
      phase "$engine" "$n" "$path" a run --port "$port"
      phase "$engine" "$n" "$path" d run --port "$port"
      "$root/scripts/shards.sh" --dir "$dir" stop
    done
  done
done
