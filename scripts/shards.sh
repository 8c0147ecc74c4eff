#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# N Redis-protocol shards behind twemproxy (Debian's nutcracker) on loopback:
# `pmtree serve` shards, each on its own pool, or stock redis-server shards
# with appendfsync always (the peer), in the same topology.  The nutcracker
# config is generated: ketama, hash fnv1a_64, hash_tag "{}", redis: true,
# auto_eject_hosts: false (a dead shard's keys fail, nothing is remapped),
# stats on 127.0.0.1.  Everything lives in one directory (pools, logs, config,
# pids, and an `env` file with the addresses); `stop` removes it.
#
# Usage: scripts/shards.sh COMMAND [options]
#   start             start the set-up, wait until all answer PING, print the env
#   stop              stop what start started; remove pools, config and logs
#   status            each process, its port and whether it answers PING
#   kill I            SIGKILL shard I (1..N), leaving its pool as the crash left it
#   restart I         start shard I again on its pool and port (after kill)
#   run CMD [ARGS]    start, run CMD with the env below exported, stop (also
#                     on error or Ctrl-C); exits with CMD's status
# Options (before or after COMMAND, but before run's CMD):
#   --engine E        pmtree | redis (default pmtree)
#   --shards N        number of shards (default 3)
#   --tree NAME       tree of the pmtree shards (default lbtree)
#   --pool-size S     size of each new pool (default 256M)
#   --serve-args STR  further arguments for every `pmtree serve`
#   --pmtree BIN      pmtree binary (default build/pmtree; env PMTREE_BIN)
#   --dir DIR         state directory (default /dev/shm/pmtree-shards-$USER;
#                     env PMTREE_SHARDS_DIR)
#   --proxy-port P    nutcracker's port (default: a free one)
#   --timeout MS      nutcracker's per-request server timeout (default 5000)
#   --hash H          nutcracker's key hash (default fnv1a_64; murmur spreads
#                     short keys that differ only in their last bytes better)
#   --password PW     every shard requires AUTH PW, and so does the proxy
#                     (nutcracker's redis_auth: it AUTHs to the shards itself);
#                     env REDISCLI_AUTH is how this script's redis-cli logs in
# The env (DIR/env, exported in run mode): SHARDS_PROXY=127.0.0.1:P,
# SHARDS_PROXY_PORT, SHARDS_STATS_PORT, SHARDS_LIST=host:port,... (in shard
# order: give this list to the YCSB binding's redis.shards), SHARDS_PORTS
# (space-separated), SHARDS_ENGINE, SHARDS_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/servers.sh
source "$root/scripts/lib/servers.sh"

engine=pmtree nshards=3 tree=lbtree pool_size=256M serve_args="" proxy_port="" timeout_ms=5000 password="" hash=fnv1a_64
pmtree=${PMTREE_BIN:-$root/build/pmtree}
dir=${PMTREE_SHARDS_DIR:-/dev/shm/pmtree-shards-${USER:-$(id -un)}}
command="" args=()

die() { echo "shards.sh: $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, got '$2'"; }

while (($#)); do
  case $1 in
    --engine) need_value "$@"; engine=$2; shift 2 ;;
    --shards) need_value "$@"; positive "$1" "$2"; nshards=$2; shift 2 ;;
    --tree) need_value "$@"; tree=$2; shift 2 ;;
    --pool-size) need_value "$@"; pool_size=$2; shift 2 ;;
    --serve-args) need_value "$@"; serve_args=$2; shift 2 ;;
    --pmtree) need_value "$@"; pmtree=$2; shift 2 ;;
    --dir) need_value "$@"; dir=$2; shift 2 ;;
    --proxy-port) need_value "$@"; positive "$1" "$2"; proxy_port=$2; shift 2 ;;
    --timeout) need_value "$@"; positive "$1" "$2"; timeout_ms=$2; shift 2 ;;
    --password) need_value "$@"; password=$2; shift 2 ;;
    --hash) need_value "$@"; hash=$2; shift 2 ;;
    -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    start|stop|status) [[ -z $command ]] || die "two commands: $command and $1"; command=$1; shift ;;
    kill|restart)
      [[ -z $command ]] || die "two commands: $command and $1"
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "$1 needs a shard number (1..N)"
      command=$1; args=("$2"); shift 2 ;;
    run)
      [[ -z $command ]] || die "two commands: $command and $1"
      shift; (($#)) || die "run needs a command"
      command=run; args=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n $command ]] || die "give a command: start, stop, status, kill I, restart I or run CMD (see --help)"
case $engine in pmtree|redis) ;; *) die "--engine must be pmtree or redis, got '$engine'" ;; esac
read -ra serve_extra <<<"$serve_args"
# shellcheck disable=SC2034  # read by servers_wait_ready (lib/servers.sh) for the logs
SERVERS_DIR=$dir

install_missing() {
  local missing=()
  command -v nutcracker >/dev/null || missing+=(nutcracker)
  command -v redis-cli >/dev/null || missing+=(redis-tools)
  [[ $engine == redis ]] && ! command -v redis-server >/dev/null && missing+=(redis-server)
  ((${#missing[@]} == 0)) || servers_apt_install "${missing[@]}"
}

# True while the process of a pid file runs (a zombie no longer counts: the
# shards outlive the shell that started them, so init reaps them).
alive() {
  local state
  [[ -f $1 ]] || return 1
  state=$(awk '{ print $3 }' "/proc/$(cat "$1")/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# Starts shard I on the port in DIR/shardI.port, detached from this shell so
# that `start` can return; its pid goes to DIR/shardI.pid.
launch_shard() {
  local i=$1 port
  port=$(cat "$dir/shard$i.port")
  local auth=()
  [[ -n $password ]] && auth=(--requirepass "$password")
  if [[ $engine == pmtree ]]; then
    setsid "$pmtree" serve "${auth[@]}" --bind 127.0.0.1 --port "$port" --pool "$dir/shard$i.pool" \
        --pool-size "$pool_size" --tree "$tree" "${serve_extra[@]}" \
        >>"$dir/shard$i.log" 2>&1 </dev/null &
  else
    mkdir -p "$dir/shard$i.aof"
    setsid redis-server "${auth[@]}" --port "$port" --bind 127.0.0.1 --dir "$dir/shard$i.aof" --save '' \
        --appendonly yes --appendfsync always --auto-aof-rewrite-percentage 0 \
        --daemonize no --logfile "$dir/shard$i.log" </dev/null >/dev/null 2>&1 &
  fi
  echo $! >"$dir/shard$i.pid"
  servers_wait_ready "shard$i" "$port" "$(cat "$dir/shard$i.pid")"
}

write_config() {
  local i
  {
    echo "# Generated by scripts/shards.sh; removed by 'shards.sh stop'."
    echo "pmtree_shards:"
    echo "  listen: 127.0.0.1:$proxy_port"
    echo "  redis: true"
    echo "  hash: $hash"
    echo "  hash_tag: \"{}\""
    echo "  distribution: ketama"
    echo "  auto_eject_hosts: false"
    echo "  preconnect: true"
    echo "  timeout: $timeout_ms"
    [[ -z $password ]] || echo "  redis_auth: \"$password\""
    echo "  servers:"
    # Named servers: ketama hashes the names, so a shard may move to another
    # port without remapping keys.
    for ((i = 1; i <= nshards; i++)); do
      echo "    - 127.0.0.1:$(cat "$dir/shard$i.port"):1 shard$i"
    done
  } >"$dir/nutcracker.yml"
}

write_env() {
  local i list="" ports=""
  for ((i = 1; i <= nshards; i++)); do
    list+=${list:+,}127.0.0.1:$(cat "$dir/shard$i.port")
    ports+=${ports:+ }$(cat "$dir/shard$i.port")
  done
  cat >"$dir/env" <<EOF
SHARDS_PROXY=127.0.0.1:$proxy_port
SHARDS_PROXY_PORT=$proxy_port
SHARDS_STATS_PORT=$stats_port
SHARDS_LIST=$list
SHARDS_PORTS="$ports"
SHARDS_ENGINE=$engine
SHARDS_COUNT=$nshards
SHARDS_DIR=$dir
EOF
}

do_start() {
  if [[ -f $dir/env ]]; then
    die "$dir holds a running or crashed set-up; run 'shards.sh stop --dir $dir' first"
  fi
  install_missing
  use_password
  if [[ $engine == pmtree ]] && ! pmtree_has_serve "$pmtree"; then
    die "$pmtree is missing or has no 'serve' subcommand (build the pmtree target, or --pmtree BIN)"
  fi
  mkdir -p "$dir"
  # Later commands (kill, restart, status) start shards the same way.
  # (-g: load_settings sources this file inside a function.)
  declare -p engine nshards tree pool_size serve_extra pmtree password |
    sed -E 's/^declare -(-|([a-zA-Z]+)) /declare -g\2 /' >"$dir/settings"
  local i
  for ((i = 1; i <= nshards; i++)); do
    servers_free_port >"$dir/shard$i.port"
    launch_shard "$i" || { do_stop; die "shard $i did not start"; }
  done
  [[ -n $proxy_port ]] || proxy_port=$(servers_free_port)
  stats_port=$(servers_free_port)
  write_config
  if ! nutcracker -t -c "$dir/nutcracker.yml" >"$dir/nutcracker.log" 2>&1; then
    cat "$dir/nutcracker.log" >&2
    do_stop
    die "nutcracker rejected the generated config"
  fi
  setsid nutcracker -c "$dir/nutcracker.yml" -s "$stats_port" -a 127.0.0.1 \
      -o "$dir/nutcracker.log" </dev/null >/dev/null 2>&1 &
  echo $! >"$dir/nutcracker.pid"
  # The proxy answers PING itself; a GET also proves it reaches the shards.
  if ! servers_wait_ready nutcracker "$proxy_port" "$(cat "$dir/nutcracker.pid")" ||
     ! redis-cli -p "$proxy_port" get shards.sh:probe >/dev/null 2>&1; then
    do_stop
    die "nutcracker did not come up on port $proxy_port"
  fi
  write_env
  echo "# $nshards $engine shards behind nutcracker (shards.sh stop --dir $dir stops them)"
  cat "$dir/env"
}

# Stops one process by its pid file: SIGTERM, then SIGKILL after ~10 s.
stop_pidfile() {
  local file=$1 tries
  alive "$file" || { rm -f "$file"; return 0; }
  kill -TERM "$(cat "$file")" 2>/dev/null || true
  for ((tries = 0; tries < 200; tries++)); do
    alive "$file" || break
    sleep 0.05
  done
  alive "$file" && kill -KILL "$(cat "$file")" 2>/dev/null
  rm -f "$file"
}

do_stop() {
  [[ -d $dir ]] || return 0
  local f
  stop_pidfile "$dir/nutcracker.pid"
  for f in "$dir"/shard*.pid; do stop_pidfile "$f"; done
  rm -rf "$dir"
}

# The settings of the set-up in $dir, which win over this command line's.
load_settings() {
  [[ -f $dir/settings ]] || die "no set-up in $dir (start one first, or give its --dir)"
  # shellcheck disable=SC1091
  source "$dir/settings"
  use_password
}

use_password() {
  [[ -z $password ]] || export REDISCLI_AUTH=$password
}

shard_number() {
  load_settings
  (($1 >= 1 && $1 <= nshards)) || die "no shard $1 (1..$nshards)"
}

do_status() {
  [[ -f $dir/env ]] || { echo "no set-up in $dir"; return 1; }
  load_settings
  local i port state rc=0
  for ((i = 1; i <= nshards; i++)); do
    port=$(cat "$dir/shard$i.port")
    state=down
    alive "$dir/shard$i.pid" && [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && state=up
    [[ $state == up ]] || rc=1
    echo "shard$i 127.0.0.1:$port $state"
  done
  # shellcheck disable=SC1091
  port=$(source "$dir/env"; echo "$SHARDS_PROXY_PORT")
  state=down
  alive "$dir/nutcracker.pid" && [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && state=up
  [[ $state == up ]] || rc=1
  echo "nutcracker 127.0.0.1:$port $state"
  return "$rc"
}

case $command in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  kill)
    shard_number "${args[0]}"
    alive "$dir/shard${args[0]}.pid" || die "shard ${args[0]} is not running"
    kill -KILL "$(cat "$dir/shard${args[0]}.pid")"
    while alive "$dir/shard${args[0]}.pid"; do sleep 0.01; done ;;
  restart)
    shard_number "${args[0]}"
    alive "$dir/shard${args[0]}.pid" && die "shard ${args[0]} is still running"
    launch_shard "${args[0]}" ;;
  run)
    trap do_stop EXIT
    trap 'exit 130' INT TERM
    do_start >/dev/null
    set -a
    # shellcheck disable=SC1091
    source "$dir/env"
    set +a
    status=0
    "${args[@]}" || status=$?
    exit "$status" ;;
esac
