#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Replication's cost at the master: SET throughput of one `pmtree serve`
# (fresh pool under /dev/shm, --threads 2) with 0, 1 and 2 replicas attached,
# measured by `redis-benchmark -t set -P 16 -c 50 -n N -r 100000` on
# loopback.  Replicas are stock redis-server (--replicas redis, the default)
# or `pmtree serve --replicaof` (--replicas pmtree).  Prints one line per
# count: "replicas=<n> SET <rate> req/s".  About 30 s on 2 cores.
#
# Usage: scripts/bench_replication.sh [--pmtree BIN] [--replicas redis|pmtree] [--requests N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/servers.sh
source "$root/scripts/lib/servers.sh"

pmtree=${PMTREE_BIN:-$root/build/pmtree} kind=redis requests=200000
while (($#)); do
  [[ -n ${2:-} ]] || { echo "bench_replication.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --pmtree) pmtree=$2 ;;
    --replicas) kind=$2 ;;
    --requests) requests=$2 ;;
    *) echo "bench_replication.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[[ $kind == redis || $kind == pmtree ]] || { echo "bench_replication.sh: --replicas is redis or pmtree" >&2; exit 2; }
pmtree_has_serve "$pmtree" || { echo "bench_replication.sh: $pmtree has no serve subcommand" >&2; exit 1; }
servers_install_redis
servers_init "/dev/shm/pmtree_bench_replication.$$"
trap servers_stop_all EXIT

for n in 0 1 2; do
  servers_start_pmtree "master$n" "$pmtree" lbtree --threads 2 --pool-size 512M
  master=$SERVER_PORT
  for ((i = 0; i < n; i++)); do
    name=replica$n.$i
    if [[ $kind == pmtree ]]; then
      servers_start_pmtree "$name" "$pmtree" lbtree --threads 1 --pool-size 512M --replicaof 127.0.0.1 "$master"
    else
      port=$(servers_free_port)
      mkdir -p "$SERVERS_DIR/$name"
      redis-server --port "$port" --bind 127.0.0.1 --dir "$SERVERS_DIR/$name" --save '' --appendonly no \
          --replicaof 127.0.0.1 "$master" --daemonize no --logfile "$SERVERS_DIR/$name.log" &
      SERVERS_PID[$name]=$!
      servers_wait_ready "$name" "$port" "$!"
    fi
  done
  for ((tries = 0; tries < 200; tries++)); do  # every replica online before the load
    [[ $(redis-cli -p "$master" INFO replication | grep -c 'state=online') -ge $n ]] && break
    sleep 0.05
  done
  rate=$(timeout 120 redis-benchmark -p "$master" -t set -P 16 -c 50 -n "$requests" -r 100000 -q |
    tr '\r' '\n' | awk '/^SET:/ { print $2 }' | tail -n 1)
  echo "replicas=$n ($kind) SET $rate req/s"
  for name in "${!SERVERS_PID[@]}"; do servers_stop "$name"; done
done
