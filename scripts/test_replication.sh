#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Bounded test of replication with stock redis-server replicas of a
# `pmtree serve` master (docs/scaleout.md, "Replication"), on loopback:
#   1. a load of concurrent writers (redis-benchmark set,incr,hset,zadd,mset
#      -c 50 -P 16) runs while a `redis-server --replicaof` attaches (full
#      resync mid-load); once the replica's offset reaches the master's, both
#      data sets are equal (scripts/lib/resp_dump.py: SCAN + TYPE + GET /
#      HGETALL / ZRANGEBYSCORE WITHSCORES);
#   2. the replica SIGKILLed, more writes, the replica restarted on its
#      directory: it resumes with a partial resync (the master's INFO
#      sync_partial_ok, the replica's log) and converges again;
#   3. a second replica attaches: INFO shows connected_slaves:2, and after a
#      write WAIT 2 answers 2 (both stock replicas acknowledged it);
#   4. a chain pmtree -> pmtree (--replicaof) -> redis-server converges, and
#      the middle refuses clients' writes (-READONLY);
#   5. 300 writes each acknowledged by WAIT 1, the master SIGKILLed, the
#      pmtree replica promoted (REPLICAOF NO ONE): it takes writes and holds
#      every acknowledged key; the redis-server below it follows it on.
# About 40 s on 2 cores; the trap stops every server and removes the pools.
#
# Usage: scripts/test_replication.sh [--pmtree BIN]
#   --pmtree BIN   pmtree binary (default build/pmtree; env PMTREE_BIN)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/servers.sh
source "$root/scripts/lib/servers.sh"

pmtree=${PMTREE_BIN:-$root/build/pmtree}
while (($#)); do
  case $1 in
    --pmtree) [[ -n ${2:-} ]] || { echo "test_replication.sh: --pmtree needs a value" >&2; exit 2; }
      pmtree=$2; shift 2 ;;
    *) echo "test_replication.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
die() { echo "test_replication.sh: FAILED: $*" >&2; exit 1; }

pmtree_has_serve "$pmtree" || die "$pmtree is missing or has no serve subcommand (build the pmtree target)"
servers_install_redis
servers_init "/dev/shm/pmtree_test_replication.$$"
trap servers_stop_all EXIT

info() { redis-cli -p "$1" INFO replication | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'; }

# A stock replica NAME of port MASTER, in its own directory (the RDB it
# receives is kept there, which is what a restart resumes from).
start_replica() {
  local name=$1 master=$2 port=${3:-}
  [[ -n $port ]] || port=$(servers_free_port)
  mkdir -p "$SERVERS_DIR/$name"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$SERVERS_DIR/$name" --save '' --appendonly no \
      --replicaof 127.0.0.1 "$master" --daemonize no --logfile "$SERVERS_DIR/$name.log" &
  SERVER_PID=$!
  SERVER_PORT=$port
  SERVERS_PID[$name]=$SERVER_PID
  servers_wait_ready "$name" "$port" "$SERVER_PID"
}

# Waits (at most ~30 s) until the replica on port R is online and has
# processed the master's whole stream, then compares the data sets.
converged() {
  local m=$1 r=$2 label=$3 tries moff roff
  for ((tries = 0; tries < 600; tries++)); do
    moff=$(info "$m" master_repl_offset)
    roff=$(info "$r" slave_repl_offset)
    [[ $(info "$r" master_link_status) == up && -n $moff && $moff == "$roff" ]] && break
    sleep 0.05
  done
  [[ $moff == "$roff" ]] || die "$label: replica offset $roff never reached the master's $moff"
  python3 "$root/scripts/lib/resp_dump.py" --port "$m" --out "$SERVERS_DIR/master.dump"
  python3 "$root/scripts/lib/resp_dump.py" --port "$r" --out "$SERVERS_DIR/replica.dump"
  if ! cmp -s "$SERVERS_DIR/master.dump" "$SERVERS_DIR/replica.dump"; then
    diff "$SERVERS_DIR/master.dump" "$SERVERS_DIR/replica.dump" | head -n 10 >&2
    die "$label: the replica's data set differs from the master's"
  fi
  echo "test_replication: $label: $(wc -l <"$SERVERS_DIR/master.dump") keys equal at offset $moff"
}

load() {  # concurrent writers on the master: every data type, pipelined
  timeout 120 redis-benchmark -p "$1" -t set,incr,hset,zadd,mset -c 50 -P 16 -r 20000 -n "$2" -q >/dev/null
}

servers_start_pmtree master "$pmtree" lbtree --threads 2 --pool-size 256M --repl-backlog-size 64M
master=$SERVER_PORT
redis-cli -p "$master" HSET small f1 v1 f2 v2 >/dev/null
redis-cli -p "$master" ZADD scores 1.5 a -2 b inf c >/dev/null
redis-cli -p "$master" SET "binary key" $'line\nbreak' >/dev/null

# 1. full resync while writers run
load "$master" 5000
load "$master" 30000 &
loader=$!
start_replica replica1 "$master"
replica=$SERVER_PORT
wait "$loader" || die "redis-benchmark against the master failed"
converged "$master" "$replica" "full resync under load"
[[ $(info "$master" sync_full) == 1 ]] || die "expected one full sync, INFO says $(info "$master" sync_full)"

# 2. replica killed and restarted: partial resync from the backlog
kill -KILL "${SERVERS_PID[replica1]}" 2>/dev/null
{ wait "${SERVERS_PID[replica1]}"; } 2>/dev/null || true
unset "SERVERS_PID[replica1]"
load "$master" 5000
redis-cli -p "$master" DEL small >/dev/null
start_replica replica1 "$master" "$replica"
converged "$master" "$replica" "restart"
[[ $(info "$master" sync_partial_ok) == 1 ]] || die "the restarted replica did not resume (sync_partial_ok=$(info "$master" sync_partial_ok))"
grep -q "Successful partial resynchronization" "$SERVERS_DIR/replica1.log" ||
  die "the replica's log does not show a partial resynchronization"

# 3. a second replica
start_replica replica2 "$master"
converged "$master" "$SERVER_PORT" "second replica"
[[ $(info "$master" connected_slaves) == 2 ]] || die "connected_slaves is $(info "$master" connected_slaves), not 2"
redis-cli -p "$master" SET waited yes >/dev/null
acked=$(timeout 20 redis-cli -p "$master" WAIT 2 10000)
[[ $acked == 2 ]] || die "WAIT 2 10000 answered '$acked', not 2"
# 4. a chain pmtree -> pmtree -> redis-server converges
servers_start_pmtree chain "$pmtree" lbtree --threads 2 --pool-size 256M --replicaof 127.0.0.1 "$master"
chain=$SERVER_PORT
start_replica leaf "$chain"
leaf=$SERVER_PORT
load "$master" 5000
converged "$master" "$chain" "chain: pmtree replica"
converged "$chain" "$leaf" "chain: redis-server behind it"
[[ $(redis-cli -p "$chain" SET refused 1) == READONLY* ]] || die "the pmtree replica accepted a client's write"

# 5. failover: every write acknowledged by WAIT 1 survives the master's
#    SIGKILL on the promoted replica (one connection: SET, WAIT, SET, ...).
for ((i = 0; i < 300; i++)); do printf 'SET wk:%d %d\nWAIT 1 5000\n' "$i" "$i"; done |
  timeout 60 redis-cli -p "$master" >"$SERVERS_DIR/waited.txt"
kill -KILL "${SERVERS_PID[master]}" 2>/dev/null
{ wait "${SERVERS_PID[master]}"; } 2>/dev/null || true
unset "SERVERS_PID[master]"
[[ $(redis-cli -p "$chain" REPLICAOF NO ONE) == OK ]] || die "REPLICAOF NO ONE failed"
[[ $(redis-cli -p "$chain" SET promoted yes) == OK ]] || die "the promoted replica refuses writes"
acked=$(paste - - <"$SERVERS_DIR/waited.txt" | awk '$1 == "OK" && $2 >= 1' | wc -l)
((acked == 300)) || die "only $acked of 300 writes were acknowledged by WAIT 1"
for ((i = 0; i < 300; i++)); do echo "GET wk:$i"; done | redis-cli -p "$chain" >"$SERVERS_DIR/after.txt"
seq 0 299 | cmp -s - "$SERVERS_DIR/after.txt" ||
  die "a write acknowledged by WAIT 1 is missing on the promoted replica"
echo "test_replication: failover: 300 WAIT-acknowledged writes present after the master's SIGKILL and promotion"
# The redis-server below the promoted replica follows it on (new replid).
redis-cli -p "$chain" SET after-promotion 1 >/dev/null
converged "$chain" "$leaf" "chain after promotion"
echo "test_replication: OK"
