# SPDX-License-Identifier: Apache-2.0
#
# Starting and stopping Redis-protocol servers on loopback for the server
# suite (scripts/bench_server.sh) and its test (scripts/test_ycsb.sh).
# Source it; it defines functions only.  Every server started here is
# remembered by pid and stopped by servers_stop_all (call it from a trap).
#
#   servers_init DIR             work directory (AOF dirs, pools, logs) under it
#   servers_apt_install PKG...   apt-get install (via sudo unless root)
#   servers_install_redis        apt-get install redis-server redis-tools if missing
#   servers_start_redis NAME FSYNC   redis-server, AOF on with appendfsync FSYNC
#   pmtree_has_serve BIN         true when BIN exists and has a `serve` subcommand
#   servers_start_pmtree NAME BIN TREE [ARGS]  `BIN serve --port P --pool F --tree TREE ARGS`
#   servers_clear NAME           removes NAME's AOF directory and pool (a fresh start)
#   servers_stop NAME / servers_stop_all
# After a start, SERVER_PORT and SERVER_PID name the new server.

declare -A SERVERS_PID=()
SERVERS_DIR=""

servers_init() {
  SERVERS_DIR=$1
  mkdir -p "$SERVERS_DIR"
}

# apt-get install PKG... (through sudo unless root), saying so on stderr.
servers_apt_install() {
  echo "servers: installing $*" >&2
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

servers_install_redis() {
  command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null &&
    command -v redis-cli >/dev/null && return 0
  servers_apt_install redis-server redis-tools
}

# A loopback port the kernel just handed out (and released), so parallel
# runs do not pick the same fixed number.
servers_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until the server answers PING, for at most ~10 s; fails early when
# the process has exited.  A server that did not come up is stopped, so a
# later start under the same name cannot orphan it.
servers_wait_ready() {
  local name=$1 port=$2 pid=$3 tries
  for ((tries = 0; tries < 200; tries++)); do
    [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "servers: $name exited before answering; its log:" >&2
      tail -n 20 "$SERVERS_DIR/$name.log" >&2
      servers_stop "$name"
      return 1
    fi
    sleep 0.05
  done
  echo "servers: $name did not answer PING on port $port" >&2
  servers_stop "$name"
  return 1
}

# redis-server with the durability rule of the comparison: AOF on, fsync
# policy FSYNC (always = acknowledge after fdatasync, as pmtree acknowledges
# after the pool flush), no RDB snapshots and no AOF rewrites mid-run, the
# AOF in $SERVERS_DIR (put it on /dev/shm, the medium of pmtree's pools).
servers_start_redis() {
  local name=$1 fsync=$2 port dir
  port=$(servers_free_port)
  dir=$SERVERS_DIR/$name
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
      --appendonly yes --appendfsync "$fsync" --auto-aof-rewrite-percentage 0 \
      --daemonize no --logfile "$SERVERS_DIR/$name.log" &
  SERVER_PID=$!
  SERVER_PORT=$port
  SERVERS_PID[$name]=$SERVER_PID
  servers_wait_ready "$name" "$port" "$SERVER_PID"
}

# (`BIN serve --help` is no test: CLI11 answers --help with exit 0 even for an
# unknown subcommand, so an old binary would pass; its subcommand list is.)
pmtree_has_serve() {
  [[ -x $1 ]] && "$1" --help 2>/dev/null | grep -qE '^[[:space:]]+serve[[:space:]]'
}

# Further arguments go to `pmtree serve` as they are (e.g. a pool size).
servers_start_pmtree() {
  local name=$1 bin=$2 tree=$3 port
  shift 3
  port=$(servers_free_port)
  "$bin" serve --port "$port" --pool "$SERVERS_DIR/$name.pool" --tree "$tree" "$@" \
      >"$SERVERS_DIR/$name.log" 2>&1 &
  SERVER_PID=$!
  SERVER_PORT=$port
  SERVERS_PID[$name]=$SERVER_PID
  servers_wait_ready "$name" "$port" "$SERVER_PID"
}

# Resident set of a process in bytes: all of it (VmRSS), or with a second
# argument one part of it (RssAnon, RssFile, RssShmem).
servers_rss_bytes() {
  awk -v f="${2:-VmRSS}:" '$1 == f { print $2 * 1024 }' "/proc/$1/status"
}

# SIGTERM, then SIGKILL after about 10 s for a server that ignores it
# (redis-server loading a large AOF does).
servers_stop() {
  local name=$1 pid=${SERVERS_PID[$1]:-} state tries
  [[ -n $pid ]] || return 0
  kill "$pid" 2>/dev/null || true
  for ((tries = 0; tries < 100; tries++)); do
    # /proc/PID/stat's third field is the state (the names here have no spaces).
    read -r _ _ state _ 2>/dev/null <"/proc/$pid/stat" || break
    [[ $state == Z ]] && break  # exited, not yet reaped
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset "SERVERS_PID[$name]"
}

# A server started again under the same name would otherwise load the
# previous one's AOF or open its pool.
servers_clear() {
  rm -rf "${SERVERS_DIR:?}/$1" "$SERVERS_DIR/$1.pool"
}

servers_stop_all() {
  local name
  for name in "${!SERVERS_PID[@]}"; do servers_stop "$name"; done
  [[ -n $SERVERS_DIR ]] && rm -rf "$SERVERS_DIR"
  return 0
}
