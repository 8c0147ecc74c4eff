#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Runs YCSB 0.17.0 through pmtree's Redis-protocol binding
# (bench/ycsb, org.pmtree.ycsb.PmtreeRedisClient) against a server at
# host:port: redis-server or `pmtree serve`.  Builds the binding and fetches
# YCSB core + Jedis from Maven Central on first use (into the cache dir), then
# runs the load phase, the transaction phase, or both, and prints YCSB's
# summary ([OVERALL], [READ], ... lines).  Exits non-zero when YCSB fails or
# a phase did not complete every operation with OK (e.g. no server there).
#
# Usage: scripts/ycsb.sh [options]
#   --host H          server address (default 127.0.0.1)
#   --port P          server port (default 6379)
#   --password X      AUTH password (default none)
#   --shards LIST     client-side sharding over host:port,host:port,... (the
#                     binding's redis.shards: Jedis consistent hashing);
#                     replaces --host/--port
#   --workload W      a..f, or a path to a YCSB property file (default a)
#   --records N       recordcount (default 1000)
#   --operations N    operationcount (default 1000)
#   --threads T       client threads = connections (default 1)
#   --phase PH        load | run | both (default both)
#   -p KEY=VALUE      any further YCSB property (repeatable)
#   --out FILE        also write the summary to FILE (load and run appended)
#   --cache DIR       jars and classes (default build/ycsb; env PMTREE_YCSB_CACHE)
#   --build-only      only build the binding and fetch the jars
# Installs maven and default-jdk via apt when they are missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

host=127.0.0.1 port=6379 password="" shards="" workload=a records=1000 operations=1000 threads=1
phase=both out="" cache=${PMTREE_YCSB_CACHE:-$root/build/ycsb} build_only=0
extra=()

die() { echo "ycsb.sh: $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"; }

while (($#)); do
  case $1 in
    --host) need_value "$@"; host=$2; shift 2 ;;
    --port) need_value "$@"; positive "$1" "$2"; port=$2; shift 2 ;;
    --password) need_value "$@"; password=$2; shift 2 ;;
    --shards) need_value "$@"; shards=$2; shift 2 ;;
    --workload) need_value "$@"; workload=$2; shift 2 ;;
    --records) need_value "$@"; positive "$1" "$2"; records=$2; shift 2 ;;
    --operations) need_value "$@"; positive "$1" "$2"; operations=$2; shift 2 ;;
    --threads) need_value "$@"; positive "$1" "$2"; threads=$2; shift 2 ;;
    --phase) need_value "$@"; phase=$2; shift 2 ;;
    -p) need_value "$@"; [[ $2 == *=* ]] || die "-p wants KEY=VALUE, got '$2'"; extra+=(-p "$2"); shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --cache) need_value "$@"; cache=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
case $phase in load|run|both) ;; *) die "--phase must be load, run or both, got '$phase'" ;; esac
if [[ $workload =~ ^[a-f]$ ]]; then
  workload_file=$root/bench/ycsb/workloads/workload$workload
else
  workload_file=$workload
fi
[[ -r $workload_file ]] || die "no workload file '$workload_file' (give a..f or a readable path)"

# shellcheck source=lib/servers.sh
source "$root/scripts/lib/servers.sh"

install_missing() {
  local missing=()
  command -v mvn >/dev/null || missing+=(maven)
  command -v java >/dev/null || missing+=(default-jdk)
  ((${#missing[@]})) || return 0
  servers_apt_install "${missing[@]}"
}

# Builds the binding jar and copies its runtime dependencies into $cache/lib,
# unless the jar is newer than every source file.  A lock on the cache keeps
# two runs started together from building into it at once.
build_binding() {
  local src=$root/bench/ycsb jar=$cache/pmtree-ycsb-0.1.0.jar lock
  mkdir -p "$cache"
  exec {lock}>"$cache/.lock"
  flock "$lock"
  if [[ -f $jar && -d $cache/lib ]] &&
     [[ -z $(find "$src/pom.xml" "$src/src" -newer "$jar" -print -quit) ]]; then
    exec {lock}>&-
    return 0
  fi
  install_missing
  echo "ycsb.sh: building the binding and fetching YCSB 0.17.0 + Jedis 2.9.0 into $cache" >&2
  local log=$cache/maven.log
  if ! mvn -B -Dstyle.color=never -f "$src/pom.xml" -Dycsb.out="$cache" package \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$cache/lib" \
      >"$log" 2>&1; then
    grep -E 'ERROR|BUILD' "$log" | head -n 20 >&2
    die "maven build failed (is Maven Central reachable?); full log in $log"
  fi
  exec {lock}>&-
}

build_binding
((build_only)) && exit 0
command -v java >/dev/null || install_missing

cp="$cache/pmtree-ycsb-0.1.0.jar:$cache/lib/*"
props=(-P "$workload_file" -p recordcount="$records" -p operationcount="$operations"
       -p redis.host="$host" -p redis.port="$port"
       -p measurementtype=hdrhistogram -p hdrhistogram.percentiles=50,99)
[[ -n $password ]] && props+=(-p redis.password="$password")
[[ -n $shards ]] && props+=(-p redis.shards="$shards")
[[ -n $out ]] && : >"$out"

# One YCSB phase; its summary (stdout) is printed and kept, its progress
# (stderr) only shown when the phase fails.  YCSB exits 0 even when no client
# could connect, so the phase also fails unless `want` operations succeeded
# (YCSB files an operation that did not return OK under [OP-FAILED]).
run_phase() {
  local flag=$1 name=$2 want=$3 log status=0 done_ok
  log=$(mktemp)
  java -cp "$cp" site.ycsb.Client "$flag" -db org.pmtree.ycsb.PmtreeRedisClient \
      "${props[@]}" "${extra[@]}" -threads "$threads" -s >"$log.out" 2>"$log" || status=$?
  echo "# ycsb $name: workload $(basename "$workload_file"), $records records, $operations operations, $threads threads, ${shards:-$host:$port}"
  grep '^\[' "$log.out" || true
  [[ -n $out ]] && { echo "# phase $name"; grep '^\[' "$log.out" || true; } >>"$out"
  # A read-modify-write (workload F) is one operation that YCSB also counts
  # under [READ] and [UPDATE]: take its count off once.
  done_ok=$(awk -F', ' '$2 == "Operations" && $1 == "[READ-MODIFY-WRITE]" { n -= $3; next }
                        $2 == "Operations" && $1 !~ /^\[(CLEANUP|VERIFY)\]$/ && $1 !~ /-FAILED\]$/ { n += $3 }
                        END { print n + 0 }' "$log.out")
  if ((status == 0 && done_ok != want)); then
    echo "ycsb.sh: YCSB $name phase: $done_ok of $want operations succeeded" >&2
    status=1
  fi
  if ((status)); then
    echo "ycsb.sh: YCSB $name phase failed (exit $status); the errors in its log:" >&2
    grep -E 'Exception|Error|error' "$log" | grep -v '^[[:space:]]*at ' | sort | uniq -c | head -n 10 >&2
  fi
  rm -f "$log" "$log.out"
  return "$status"
}

# The load phase inserts insertcount records when it is given, else recordcount.
load_count=$records
for ((i = 1; i < ${#extra[@]}; i += 2)); do
  [[ ${extra[i]} == insertcount=* ]] && load_count=${extra[i]#insertcount=}
done
[[ $phase == run ]] || run_phase -load load "$load_count"
[[ $phase == load ]] || run_phase -t run "$operations"
