#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Bounded test of sharding (scripts/shards.sh): 3 `pmtree serve` shards
# behind nutcracker on loopback, then
#   1. a deterministic load of 30,000 keys through the proxy, every key read
#      back through the proxy with its value, each shard's DBSIZE within 20 %
#      of an even share;
#   2. 300 keys with the hash tag {user} all land on one shard;
#   3. redis-benchmark -t set,get -n 20000 -r 100000 -P 16 -c 50 through the
#      proxy exits 0 with a rate for SET and GET;
#   4. YCSB workload A through the proxy (our binding, data-integrity check
#      on): every operation OK;
#   5. shard 2 killed with SIGKILL: writes through the proxy to its keys fail
#      (and to the others' succeed); restarted on the same pool, every key
#      the proxy ever acknowledged is read back with its value;
#   6. client-side sharding: YCSB A and a short E (scans) with
#      redis.shards=<the 3 shards> straight to the shards, every operation OK,
#      each record and its index entry on one shard, the shards within 20 %;
#      300 sharded scans over 2,000 records equal to a model of the index.
# About 60 s on 2 cores; the trap stops everything and removes the pools.
#
# Usage: scripts/test_shards.sh [--pmtree BIN] [--tree NAME]
#   --pmtree BIN   pmtree binary (default build/pmtree; env PMTREE_BIN)
#   --tree NAME    tree of the shards (default lbtree)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/servers.sh
source "$root/scripts/lib/servers.sh"
# shellcheck source=lib/ycsb_checks.sh
source "$root/scripts/lib/ycsb_checks.sh"

pmtree=${PMTREE_BIN:-$root/build/pmtree} tree=lbtree
while (($#)); do
  [[ $1 == --pmtree || $1 == --tree ]] && [[ -z ${2:-} ]] &&
    { echo "test_shards.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --pmtree) pmtree=$2; shift 2 ;;
    --tree) tree=$2; shift 2 ;;
    *) echo "test_shards.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

readonly nshards=3 keys=30000 tagged=300 records=1000 operations=2000 scans=300
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
die() { echo "test_shards.sh: $*" >&2; exit 1; }

pmtree_has_serve "$pmtree" || die "$pmtree is missing or has no serve subcommand (build the pmtree target)"
servers_install_redis
dir=/dev/shm/pmtree_test_shards.$$
work=$(mktemp -d "${TMPDIR:-/tmp}/pmtree-test-shards.XXXXXX")
shards() { "$root/scripts/shards.sh" --dir "$dir" "$@"; }
cleanup() { shards stop; rm -rf "$work"; }
trap cleanup EXIT
"$root/scripts/ycsb.sh" --build-only

shards start --shards "$nshards" --tree "$tree" --pmtree "$pmtree" >/dev/null
# shellcheck disable=SC1091
source "$dir/env"
read -ra ports <<<"$SHARDS_PORTS"
resp() { timeout 60 python3 "$root/scripts/lib/resp_keys.py" "$@"; }
dbsize() { redis-cli -p "$1" dbsize; }

# Fails unless every count is within 20 % of the mean.  Usage: check_even LABEL N...
check_even() {
  local label=$1 n sum=0
  shift
  for n in "$@"; do sum=$((sum + n)); done
  for n in "$@"; do
    ((n * 5 * $# >= sum * 4 && n * 5 * $# <= sum * 6)) ||
      { fail "$label: per-shard counts $* are not within 20 % of even"; return 0; }
  done
  echo "ok: $label: per-shard counts $* (within 20 % of even)"
}

# 1. Deterministic load, read-back and spread.
acked=$work/acked
out=$(resp --port "$SHARDS_PROXY_PORT" set --prefix key: --count "$keys" --acked "$acked") ||
  fail "load through the proxy: $out"
[[ $out == "acked $keys refused 0" ]] || fail "load through the proxy: $out, want all $keys acked"
resp --port "$SHARDS_PROXY_PORT" check --keys "$acked" >/dev/null ||
  fail "reading the loaded keys back through the proxy"
counts=()
for port in "${ports[@]}"; do counts+=("$(dbsize "$port")"); done
check_even "$keys keys through the proxy" "${counts[@]}"

# 2. Hash tags: one shard holds every {user} key.
tags=$work/tagged
resp --port "$SHARDS_PROXY_PORT" set --prefix '{user}:' --count "$tagged" --acked "$tags" >/dev/null
holders=()
for port in "${ports[@]}"; do holders+=("$(resp --port "$port" count --keys "$tags")"); done
sorted=$(printf '%s\n' "${holders[@]}" | sort -n | tr '\n' ' ')
[[ $sorted == "0 0 $tagged " ]] || fail "hash tag {user}: per-shard counts ${holders[*]}, want all on one"
[[ $sorted == "0 0 $tagged " ]] && echo "ok: $tagged keys tagged {user} on one shard (${holders[*]})"
cat "$tags" >>"$acked"

# 3. redis-benchmark through the proxy (its CONFIG GET is refused: a warning).
# -q redraws a progress line with CRs; the final "SET: N requests per second" follows the last.
if bench=$(timeout 120 redis-benchmark -p "$SHARDS_PROXY_PORT" -t set,get -n 20000 -r 100000 \
             -P 16 -c 50 -q 2>&1 | tr '\r' '\n') &&
   grep -Eq '^SET: [0-9.]+ requests per second' <<<"$bench" &&
   grep -Eq '^GET: [0-9.]+ requests per second' <<<"$bench"; then
  echo "ok: redis-benchmark through the proxy: $(grep -E '^(SET|GET): [0-9]' <<<"$bench" | tr -s ' \n' ' ')"
else
  fail "redis-benchmark through the proxy: $bench"
fi

# 4. YCSB A through the proxy.
summary=$work/ycsb-proxy
"$root/scripts/ycsb.sh" --port "$SHARDS_PROXY_PORT" --workload a --records "$records" \
    --operations "$operations" --threads 2 -p dataintegrity=true --out "$summary" >/dev/null ||
  fail "YCSB A through the proxy exited non-zero"
before=$failures
check_phase "$summary" load "$records" "proxy YCSB A"
check_phase "$summary" run "$operations" "proxy YCSB A" verify
((failures == before)) && echo "ok: YCSB A through the proxy ($records records, $operations ops, verified)"

# 5. kill -9 one shard: its keys fail, the others' are acknowledged; after a
#    restart on the same pool every acknowledged key is there.
shards kill 2
out=$(resp --port "$SHARDS_PROXY_PORT" set --prefix key: --first "$keys" --count 3000 --acked "$acked") ||
  fail "writing with shard 2 down: $out"
read -r _ down_acked _ down_refused <<<"$out"
((down_acked > 0 && down_refused > 0)) ||
  fail "with shard 2 down: $out (want some writes refused and the rest acked)"
shards restart 2
out=$(resp --port "$SHARDS_PROXY_PORT" set --prefix key: --first $((keys + 3000)) --count 3000 --acked "$acked")
[[ $out == "acked 3000 refused 0" ]] || fail "writing after shard 2 restarted: $out"
if out=$(resp --port "$SHARDS_PROXY_PORT" check --keys "$acked" 2>&1); then
  echo "ok: shard 2 killed -9 ($down_refused writes refused, $down_acked acked meanwhile) and restarted: $out acknowledged keys read back"
else
  fail "acknowledged keys lost after shard 2's kill -9 and restart: $out"
fi

# 6. Client-side sharding (ShardedJedis) straight to the shards.
for port in "${ports[@]}"; do redis-cli -p "$port" flushall >/dev/null; done
summary=$work/ycsb-client
before=$failures
"$root/scripts/ycsb.sh" --shards "$SHARDS_LIST" --workload a --records "$records" --operations "$operations" \
    --threads 2 -p dataintegrity=true --out "$summary" >/dev/null ||
  fail "YCSB A with client-side sharding exited non-zero"
check_phase "$summary" load "$records" "client-sharded YCSB A"
check_phase "$summary" run "$operations" "client-sharded YCSB A" verify
indexed=() total=0
for port in "${ports[@]}"; do
  n=$(redis-cli -p "$port" zcard _indices)
  indexed+=("$n")
  total=$((total + n))
  [[ $(dbsize "$port") == $((n + 1)) ]] ||
    fail "client-side sharding: shard :$port holds $(dbsize "$port") keys for $n index entries"
done
((total == records)) || fail "client-side sharding: $total index entries, want $records"
check_even "client-side sharding of $records YCSB records" "${indexed[@]}"
"$root/scripts/ycsb.sh" --shards "$SHARDS_LIST" --workload e --records "$records" --operations "$scans" \
    --phase run --threads 2 --out "$summary" >/dev/null ||
  fail "YCSB E (scans) with client-side sharding exited non-zero"
check_phase "$summary" run "$scans" "client-sharded YCSB E"
((failures == before)) && echo "ok: YCSB A and E with client-side sharding over $nshards shards, all OK"

# The sharded scans against a model of the index (bench/ycsb ScanCheck).
for port in "${ports[@]}"; do redis-cli -p "$port" flushall >/dev/null; done
cache=${PMTREE_YCSB_CACHE:-$root/build/ycsb}
if out=$(timeout 120 java -cp "$cache/pmtree-ycsb-0.1.0.jar:$cache/lib/*" org.pmtree.ycsb.ScanCheck \
           2000 300 -p redis.shards="$SHARDS_LIST" 2>&1); then
  echo "ok: client-side sharding: $out"
else
  fail "client-side sharded scans differ from the model: $out"
fi

if ((failures)); then
  echo "test_shards.sh: $failures failure(s)" >&2
  exit 1
fi
echo "test_shards.sh: passed"
