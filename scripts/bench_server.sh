#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The server suite: pmtree serve against Debian's redis-server 7.0 at equal
# durability, with the same clients, pipelining and medium.  Rows:
#   redis-always    redis-server, AOF, appendfsync always  (durable: a write is
#                   acknowledged after fdatasync, like pmtree after its flush)
#   redis-everysec  redis-server, AOF, appendfsync everysec (relaxed: up to ~1 s
#                   of acknowledged writes can be lost)
#   pmtree-<tree>   `pmtree serve --tree <tree>`, one row per --trees entry
#                   (durable, no log); "not built" when the binary has no serve
# AOF directories and pools live on /dev/shm.  The rows run --rounds times,
# alternating (forward in odd rounds, backward in even ones), so every row
# sees the same stretches of a machine whose speed drifts; the report gives
# each number's median over the rounds and each ratio to redis-always as the
# median of the rounds' own ratios, with every round's ratio beside it.
# Each row starts a fresh server (in every round: an earlier round's AOF or
# pool is removed first) and measures, in order:
#   memory    DRAM after loading --mem-keys SETs of 100 B values: Redis's
#             used_memory, every server's RSS and its anonymous part (heap),
#             and the pmtree pool file's allocated size
#   SET, GET  redis-benchmark -P 16 -c 50 -r 100000, once per --sizes value
#   INCR      the same, once (a read-modify-write of one counter per key)
#   YCSB      workloads --workloads through our binding (scripts/ycsb.sh)
# and writes a Markdown table and a JSON file beside the seeds' claims.
# Exits 1 (after writing the report) when a row failed to start or measure.
# Defaults take about 9-10 minutes on 2 cores (3 per round); --quick (one
# round) well under 2 minutes.
#
# Usage: scripts/bench_server.sh [options]
#   --quick             small counts, one round (smoke run, numbers not meaningful)
#   --rounds N          times every row runs, alternating (default 3)
#   --trees LIST        pmtree serve trees, comma-separated (default lbtree)
#   --pmtree BIN        pmtree binary (default build/pmtree; env PMTREE_BIN)
#   --serve-args STR    extra arguments for `pmtree serve` (e.g. a pool size)
#   --serve-threads N   `pmtree serve --threads N` (default 1: one event loop,
#                       like Redis's one command thread, beside clients that
#                       share the machine's cores; 0 = one loop per core,
#                       the server's own default)
#   --rows LIST         which of redis-always,redis-everysec,pmtree to run (default all)
#   --sizes LIST        redis-benchmark value sizes in bytes (default 100,4096)
#   --requests N        redis-benchmark requests per test (default 500000)
#   --workloads LIST    YCSB workloads a..f (default a,b,c,d,e,f)
#   --records N         YCSB recordcount (default 20000)
#   --operations N      YCSB operationcount (default 200000; at 50,000 the
#                       clients' warm-up decided the p99s: docs/server_bench.md)
#   --scan-operations N YCSB operationcount of workload E, whose operations
#                       are scans of up to 100 records (default 50000)
#   --threads T         YCSB client threads (default 8)
#   --mem-keys N        keys loaded for the memory row (default 1000000)
#   --out DIR           where server_suite.md/.json go (default results/server)
#   --shm DIR           scratch for AOFs and pools (default /dev/shm)
# Installs redis-server and redis-tools via apt when missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/servers.sh
source "$root/scripts/lib/servers.sh"

die() { echo "bench_server.sh: $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"; }

trees=lbtree pmtree=${PMTREE_BIN:-$root/build/pmtree} serve_args="" serve_threads=1 rows=redis-always,redis-everysec,pmtree
sizes=100,4096 requests=500000 workloads=a,b,c,d,e,f records=20000 operations=200000 scan_operations=50000 threads=8
mem_keys=1000000 out=$root/results/server shm=/dev/shm quick=0 rounds=3
while (($#)); do
  case $1 in
    --quick) quick=1; requests=50000 records=2000 operations=5000 scan_operations=5000 threads=4 mem_keys=100000 rounds=1; shift ;;
    --rounds) need_value "$@"; positive "$1" "$2"; rounds=$2; shift 2 ;;
    --trees) need_value "$@"; trees=$2; shift 2 ;;
    --pmtree) need_value "$@"; pmtree=$2; shift 2 ;;
    --serve-args) need_value "$@"; serve_args=$2; shift 2 ;;
    --serve-threads) need_value "$@"; [[ $2 =~ ^[0-9]+$ ]] || die "--serve-threads must be a count, got '$2'"
                     serve_threads=$2; shift 2 ;;
    --rows) need_value "$@"; rows=$2; shift 2 ;;
    --sizes) need_value "$@"; sizes=$2; shift 2 ;;
    --requests) need_value "$@"; positive "$1" "$2"; requests=$2; shift 2 ;;
    --workloads) need_value "$@"; workloads=$2; shift 2 ;;
    --records) need_value "$@"; positive "$1" "$2"; records=$2; shift 2 ;;
    --operations) need_value "$@"; positive "$1" "$2"; operations=$2; shift 2 ;;
    --scan-operations) need_value "$@"; positive "$1" "$2"; scan_operations=$2; shift 2 ;;
    --threads) need_value "$@"; positive "$1" "$2"; threads=$2; shift 2 ;;
    --mem-keys) need_value "$@"; positive "$1" "$2"; mem_keys=$2; shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --shm) need_value "$@"; shm=$2; shift 2 ;;
    -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
IFS=, read -ra size_list <<<"$sizes"
IFS=, read -ra workload_list <<<"$workloads"
IFS=, read -ra tree_list <<<"$trees"
IFS=, read -ra row_list <<<"$rows"
for s in "${size_list[@]}"; do positive --sizes "$s"; done
for w in "${workload_list[@]}"; do [[ $w =~ ^[a-f]$ ]] || die "--workloads takes a..f, got '$w'"; done
for r in "${row_list[@]}"; do
  case $r in redis-always|redis-everysec|pmtree) ;; *) die "--rows takes redis-always, redis-everysec, pmtree; got '$r'" ;; esac
done
[[ -d $shm && -w $shm ]] || die "--shm '$shm' is not a writable directory"
# --threads in --serve-args wins (serve refuses the option twice).
[[ " $serve_args " == *" --threads "* ]] || serve_args="--threads $serve_threads${serve_args:+ $serve_args}"
read -ra serve_extra <<<"$serve_args"

servers_install_redis
command -v python3 >/dev/null || die "python3 is needed to write the report"
mkdir -p "$out"
servers_init "$shm/pmtree_server_suite.$$"
trap servers_stop_all EXIT
trap 'exit 130' INT TERM
"$root/scripts/ycsb.sh" --build-only

results=$SERVERS_DIR/results.tsv
: >"$results"
# One record: KIND ROUND FIELDS... (scripts/lib/server_report.py reads them).
round=0
record() { local kind=$1; shift; (IFS=$'\t'; echo "$kind"$'\t'"$round"$'\t'"$*") >>"$results"; }

# Loads $mem_keys SETs of 100 B values through redis-cli --pipe and records
# the server's memory before and after.
measure_memory() {
  local row=$1 port=$2 pid=$3 pool=$4 rss0 rss1 anon used value pool_bytes=-
  rss0=$(servers_rss_bytes "$pid")
  value=$(printf '%0100d' 0)
  awk -v n="$mem_keys" -v v="$value" 'BEGIN {
        for (i = 0; i < n; i++) {
          k = sprintf("memkey:%09d", i)
          printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v
        } }' | redis-cli -p "$port" --pipe >"$SERVERS_DIR/pipe.log" 2>&1 || {
    echo "bench_server.sh: $row: loading $mem_keys keys failed:" >&2
    tail -n 3 "$SERVERS_DIR/pipe.log" >&2
    return 1
  }
  rss1=$(servers_rss_bytes "$pid")
  anon=$(servers_rss_bytes "$pid" RssAnon)
  used=$(redis-cli -p "$port" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
  # Allocated, not apparent, size: a new pool file is sparse.
  [[ -n $pool && -f $pool ]] && pool_bytes=$(($(stat -c '%b * %B' "$pool")))
  record mem "$row" "$mem_keys" "${used:--}" "$rss0" "$rss1" "$anon" "$pool_bytes"
}

# redis-benchmark SET and GET, pipelined, for each value size; INCR (no
# value size: reported as size 0) with the first.
measure_set_get() {
  local row=$1 port=$2 size csv tests=set,get,incr
  for size in "${size_list[@]}"; do
    redis-cli -p "$port" flushall >/dev/null
    csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -t "$tests" -P 16 -c 50 -r 100000 \
              -n "$requests" -d "$size" --csv 2>/dev/null) || {
      echo "bench_server.sh: $row: redis-benchmark -d $size failed" >&2
      return 1
    }
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
    tr -d '"' <<<"$csv" | awk -F, -v round="$round" -v row="$row" -v size="$size" -v OFS='\t' \
        '$1 == "SET" || $1 == "GET" { print "rb", round, row, $1, size, $2, $5 * 1000, $7 * 1000 }
         $1 == "INCR" { print "rb", round, row, $1, 0, $2, $5 * 1000, $7 * 1000 }' >>"$results"
    tests=set,get
  done
}

# YCSB workloads through the binding; one line per operation type.
measure_ycsb() {
  local row=$1 port=$2 w summary ops
  for w in "${workload_list[@]}"; do
    redis-cli -p "$port" flushall >/dev/null
    summary=$SERVERS_DIR/ycsb_$w.txt
    ops=$operations
    [[ $w == e ]] && ops=$scan_operations
    "$root/scripts/ycsb.sh" --port "$port" --workload "$w" --records "$records" \
        --operations "$ops" --threads "$threads" --out "$summary" >/dev/null || {
      echo "bench_server.sh: $row: YCSB workload $w failed" >&2
      return 1
    }
    awk -F', ' -v round="$round" -v row="$row" -v w="$w" -v OFS='\t' '
      /^# phase run/ { on = 1; next }
      !on { next }
      /^\[OVERALL\], Throughput/ { tput = $3 }
      /^\[[A-Z-]+\], Operations/ { op = substr($1, 2, length($1) - 2); n[op] = $3 }
      /50thPercentileLatency/ { p50[substr($1, 2, length($1) - 2)] = $3 }
      /99thPercentileLatency/ { p99[substr($1, 2, length($1) - 2)] = $3 }
      /Return=/ && !/Return=OK/ { bad[substr($1, 2, length($1) - 2)] += $3 }
      END {
        for (op in n) {
          if (op == "CLEANUP" || op == "VERIFY") continue
          print "ycsb", round, row, w, tput, op, n[op], p50[op], p99[op], bad[op] + 0
        }
      }' "$summary" >>"$results"
  done
}

# One row: start, measure, stop.  A failure is recorded and the suite goes on.
run_row() {
  local row=$1 durability=$2 kind=$3 tree=${4:-} pool="" what
  servers_clear "$row"  # a fresh server in every round: no AOF or pool of an earlier one
  if [[ $kind == redis ]]; then
    what="redis-server $(redis-server --version | awk '{ print $3 }' | tr -d 'v='), appendonly yes, appendfsync $durability"
    servers_start_redis "$row" "$durability" || {
      record row "$row" "$durability" "failed to start" "$what"
      row_failures=$((row_failures + 1))
      return 0
    }
  else
    what="pmtree serve --tree $tree${serve_args:+ $serve_args}"
    pool=$SERVERS_DIR/$row.pool
    servers_start_pmtree "$row" "$pmtree" "$tree" "${serve_extra[@]}" || {
      record row "$row" "$durability" "failed to start" "$what"
      row_failures=$((row_failures + 1))
      return 0
    }
  fi
  local port=$SERVER_PORT pid=$SERVER_PID status=ok
  echo "bench_server.sh: $row on port $port" >&2
  measure_memory "$row" "$port" "$pid" "$pool" &&
    measure_set_get "$row" "$port" &&
    measure_ycsb "$row" "$port" || status="failed (see stderr)"
  record row "$row" "$durability" "$status" "$what"
  [[ $status == ok ]] || row_failures=$((row_failures + 1))
  servers_stop "$row"
  servers_clear "$row"
}

started=$(date -u +%FT%TZ)
row_failures=0
# The rows of one round, in --rows order, one per pmtree tree.
plan=()
for r in "${row_list[@]}"; do
  if [[ $r == pmtree ]]; then
    for t in "${tree_list[@]}"; do plan+=("pmtree:$t"); done
  else
    plan+=("$r")
  fi
done
for ((round = 1; round <= rounds; round++)); do
  echo "bench_server.sh: round $round of $rounds" >&2
  order=("${plan[@]}")
  if ((round % 2 == 0)); then
    order=()
    for ((i = ${#plan[@]} - 1; i >= 0; i--)); do order+=("${plan[i]}"); done
  fi
  for r in "${order[@]}"; do
    case $r in
      redis-always) run_row redis-always always redis ;;
      redis-everysec) run_row redis-everysec everysec redis ;;
      pmtree:*)
        t=${r#pmtree:}
        if pmtree_has_serve "$pmtree"; then
          run_row "pmtree-$t" pool-flush pmtree "$t"
        else
          record row "pmtree-$t" pool-flush "not built ($pmtree has no serve subcommand)" "pmtree serve --tree $t"
        fi ;;
    esac
  done
done

machine="$(nproc) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), scratch $shm"
quick_flag=""
((quick)) && quick_flag="--quick "
command_line="scripts/bench_server.sh ${quick_flag}--rounds $rounds --serve-threads $serve_threads --sizes $sizes --requests $requests --workloads $workloads --records $records --operations $operations --scan-operations $scan_operations --threads $threads --mem-keys $mem_keys"
python3 "$root/scripts/lib/server_report.py" --results "$results" --out "$out" \
    --machine "$machine" --command "$command_line" --started "$started"
if ((row_failures)); then
  echo "bench_server.sh: $row_failures row(s) failed; their tables are incomplete" >&2
  exit 1
fi
