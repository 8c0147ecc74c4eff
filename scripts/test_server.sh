#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# `pmtree serve` against Debian's Redis clients (CI runs it after the install
# check).  Installs redis-tools when missing, starts the server on a free
# loopback port with a fresh pool under /dev/shm, then:
#   1. a scripted redis-cli session, every reply checked;
#   2. redis-benchmark -t set,get,incr,mset,hset -P 16 -c 50 -r 100000
#      -n 20000 -q must exit 0 with a rate for each test, and the server must
#      still answer;
#   3. SHUTDOWN must exit 0; a restart must see the data; SIGTERM must
#      exit 0 too.
# Bounded (each client under `timeout`); the trap stops the server and
# removes the pool whatever happens.
#   PMTREE_CLI         the pmtree binary (default: $PMTREE_BUILD_DIR/pmtree)
#   PMTREE_BUILD_DIR   build directory (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${PMTREE_BUILD_DIR:-build}
cli=${PMTREE_CLI:-$build_dir/pmtree}
fail() { echo "test_server: FAILED: $*" >&2; exit 1; }

if ! command -v redis-cli >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "test_server: installing redis-tools" >&2
  sudo_=""
  [[ $(id -u) -eq 0 ]] || sudo_=sudo
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq redis-tools >/dev/null
fi
[[ -x "$cli" ]] || PMTREE_TARGETS=pmtree scripts/setup.sh
[[ -x "$cli" ]] || fail "no pmtree binary at $cli (set PMTREE_CLI)"

work=$(mktemp -d "${TMPDIR:-/tmp}/pmtree-test-server.XXXXXX")
pool=/dev/shm/pmtree-test-server-$$.kv
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$pool" "$pool.creating"
  rm -rf "$work"
}
trap cleanup EXIT

port=""
# Starts the server in the background; sets pid and port from its "ready" line.
start_server() {
  : >"$work/log"
  "$cli" serve --pool "$pool" --port 0 --threads 2 --pool-size 512M "$@" 2>>"$work/log" &
  pid=$!
  for _ in $(seq 1 300); do
    port=$(sed -n 's/.*ready on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/log")
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; fail "pmtree serve exited before it was ready"; }
    sleep 0.1
  done
  fail "pmtree serve printed no ready line in 30 s"
}
rcli() { timeout 10 redis-cli -p "$port" --no-raw "$@"; }
# expect REPLY CMD ARGS...: the reply as redis-cli --no-raw prints it.
expect() {
  local want=$1
  shift
  local got
  got=$(rcli "$@" 2>&1) || true
  [[ "$got" == "$want" ]] || fail "'$*' answered '$got', expected '$want'"
}

start_server
echo "test_server: pmtree serve (pid $pid) on port $port" >&2

echo "test_server: 1. redis-cli session" >&2
expect 'PONG' PING
expect 'OK' SET greeting hello
expect '"hello"' GET greeting
expect '(nil)' GET missing
expect '(integer) 11' APPEND greeting ' world'
expect '(integer) 1' INCR counter
expect '(integer) 11' INCRBY counter 10
expect '(error) ERR value is not an integer or out of range' INCR greeting
expect 'OK' MSET k1 v1 k2 v2
expect $'1) "v1"\n2) (nil)\n3) "v2"' MGET k1 nope k2
expect '(integer) 2' HSET user:1 name ada lang c
expect '"ada"' HGET user:1 name
expect $'1) "lang"\n2) "c"\n3) "name"\n4) "ada"' HGETALL user:1
expect '(error) WRONGTYPE Operation against a key holding the wrong kind of value' GET user:1
expect '(integer) 3' ZADD idx 1 a 2 b 3 c
expect $'1) "b"\n2) "c"' ZRANGEBYSCORE idx '(1' +inf LIMIT 0 5
expect '"2"' ZSCORE idx b
expect $'1) "k1"\n2) "k2"' RANGE k1 k3
expect '(integer) 6' DBSIZE
expect "(error) ERR unknown command 'NOSUCH', with args beginning with: " NOSUCH
expect $'1) "appendonly"\n2) "no"' CONFIG GET appendonly
rcli INFO persistence | grep -q '^aof_enabled:0' || fail "INFO persistence"
rcli INFO replication | grep -q '^role:master' || fail "INFO replication"
# Pipelined and inline: redis-cli reads commands from stdin.
got=$(printf 'SET p 1\nINCR p\nGET p\n' | timeout 10 redis-cli -p "$port")
[[ "$got" == $'OK\n2\n2' ]] || fail "piped session answered '$got'"

echo "test_server: 2. redis-benchmark" >&2
timeout 60 redis-benchmark -p "$port" -t set,get,incr,mset,hset -P 16 -c 50 -r 100000 -n 20000 -q \
  >"$work/bench" 2>&1 || { cat "$work/bench" >&2; fail "redis-benchmark exited non-zero"; }
tr '\r' '\n' <"$work/bench" | grep 'requests per second' | sed 's/^ *//' >&2
for t in SET GET INCR HSET MSET; do
  tr '\r' '\n' <"$work/bench" | grep -q "^ *$t.*: [0-9.]* requests per second" || fail "no rate for $t"
done
expect 'PONG' PING
expect '(integer) 2' HLEN user:1

echo "test_server: 3. SHUTDOWN, restart, SIGTERM" >&2
rcli SHUTDOWN >/dev/null 2>&1 || true
rc=0
wait "$pid" || rc=$?
pid=""
[[ $rc -eq 0 ]] || { cat "$work/log" >&2; fail "SHUTDOWN: exit status $rc"; }
grep -q 'closed cleanly' "$work/log" || fail "SHUTDOWN did not close the store cleanly"
start_server
expect '"hello world"' GET greeting
expect '"11"' GET counter
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[[ $rc -eq 0 ]] || { cat "$work/log" >&2; fail "SIGTERM: exit status $rc"; }
echo "test_server: OK" >&2
