#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine, for trying oncehook against a
# cluster (failover, quorum queue replicas) and for the cluster chaos test.
# The nodes are EXTRA nodes next to the system broker: oncehook-a, -b and -c
# @localhost on AMQP ports 5681-5683 (distribution ports 25681-25683,
# management off), data and logs under var/cluster/ in the repository. The
# system node (127.0.0.1:5672) is never started, stopped or joined.
#
# Usage: deploy/local/cluster.sh start [a|b|c]   start the stopped nodes (all, or one),
#                                                 join them into one cluster; idempotent
#        deploy/local/cluster.sh stop [a|b|c]    stop the extra nodes (all, or one)
#        deploy/local/cluster.sh status          each node, and the cluster's members
#        deploy/local/cluster.sh urls            the ONCEHOOK_AMQP_URL value for the cluster
#        deploy/local/cluster.sh nodes           the node names, one a line
#
# Needs rabbitmq-server (Debian's, 3.10+) and root (or sudo): the nodes run
# as the rabbitmq user and share its Erlang cookie, so `rabbitmqctl -n
# oncehook-a@localhost ...` works as for the system node.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BASE="$ROOT/var/cluster"
NAMES=(a b c)
FIRST_PORT=5681
SEED=a

say() { printf 'cluster: %s\n' "$*"; }
die() { say "$*"; exit 1; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $*"; fi
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

index_of() { # name -> 0-based index
  local i
  for i in "${!NAMES[@]}"; do [ "${NAMES[$i]}" = "$1" ] && { echo "$i"; return 0; }; done
  die "unknown node '$1' (expected one of: ${NAMES[*]})"
}
node() { echo "oncehook-$1@localhost"; }
amqp_port() { echo $((FIRST_PORT + $(index_of "$1"))); }
dist_port() { echo $((20000 + $(amqp_port "$1"))); }
dir() { echo "$BASE/$1"; }

# rabbitmqctl against one extra node (never the system node), bounded in time.
ctl() { # name args...
  local name=$1; shift
  as_root timeout 120 rabbitmqctl -q -n "$(node "$name")" "$@"
}
# The node's Erlang VM answers (its rabbit application may still be booting).
running() { ctl "$1" ping >/dev/null 2>&1; }

check_installed() {
  command -v rabbitmq-server >/dev/null 2>&1 && [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] \
    || die "rabbitmq-server is not installed (deploy/local/services.sh installs it)"
  getent passwd rabbitmq >/dev/null || die "no rabbitmq user: is rabbitmq-server installed?"
}

prepare() { # name: the node's folder, config and environment file
  local name=$1 d
  d=$(dir "$name")
  as_root mkdir -p "$d/mnesia" "$d/log"
  as_root tee "$d/rabbitmq.conf" >/dev/null <<EOF
# Written by deploy/local/cluster.sh for node $(node "$name").
listeners.tcp.local = 127.0.0.1:$(amqp_port "$name")
cluster_name = oncehook-local
EOF
  # Management and other plugins off: their listeners would clash between nodes.
  echo '[].' | as_root tee "$d/enabled_plugins" >/dev/null
  as_root tee "$d/rabbitmq-env.conf" >/dev/null <<EOF
# Written by deploy/local/cluster.sh: distribution on the loopback only.
ERL_EPMD_ADDRESS=127.0.0.1
export ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}"
EOF
  as_root chown -R rabbitmq:rabbitmq "$BASE"
}

launch() { # name: start the node in the background (returns at once)
  local name=$1 d home
  d=$(dir "$name")
  home=$(getent passwd rabbitmq | cut -d: -f6)
  say "starting $(node "$name") on 127.0.0.1:$(amqp_port "$name")"
  (cd "$d" && as_root runuser -u rabbitmq -- env HOME="$home" \
    RABBITMQ_NODENAME="$(node "$name")" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$(amqp_port "$name")" \
    RABBITMQ_DIST_PORT="$(dist_port "$name")" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
    RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$d/mnesia" \
    RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_PID_FILE="$d/pid" \
    /usr/lib/rabbitmq/bin/rabbitmq-server -detached >>"$d/log/startup.log" 2>&1) \
    || die "$(node "$name") did not start: see $d/log/"
}

await() { # name: until the node has booted (90 s at most)
  local name=$1 i
  # await_startup fails at once while the node is not registered yet: poll.
  for ((i = 0; i < 90; i++)); do
    ctl "$name" await_startup --timeout 90 >/dev/null 2>&1 && return 0
    sleep 1
  done
  die "$(node "$name") did not finish booting within 90 s: see $(dir "$name")/log/"
}

# Where a running node keeps its data; the node is ours when that is under
# this checkout's var/cluster/ and still there. Nodes started from another
# checkout (same names and ports), or from a checkout deleted and cloned
# again at the same path (their data gone under them: they answer, but a
# quorum queue declared on them fails with cluster_not_formed), are
# stopped first by `start`.
data_dir() { ctl "$1" eval 'rabbit_mnesia:dir().' 2>/dev/null | tr -d '"'; }
ours() {
  local d
  d=$(data_dir "$1")
  case "$d" in "$(dir "$1")"/*) as_root test -d "$d" ;; *) return 1 ;; esac
}

take_over() { # stop every extra node that runs from another checkout's data
  local name foreign=""
  for name in "${NAMES[@]}"; do
    if running "$name" && ! ours "$name"; then foreign=yes; fi
  done
  [ -n "$foreign" ] || return 0
  say "the extra nodes run from another checkout's data, or from data no longer there; stopping them to start this one's"
  for name in "${NAMES[@]}"; do
    if running "$name"; then ctl "$name" stop >/dev/null || true; fi
  done
}

member_of_seed() { # name: is the node in the seed's cluster?
  ctl "$1" cluster_status --formatter json 2>/dev/null | grep -q "\"$(node "$SEED")\""
}

join() { # name
  local name=$1
  [ "$name" = "$SEED" ] && return 0
  member_of_seed "$name" && return 0
  running "$SEED" || die "$(node "$SEED") is not running: start it first (cluster.sh start)"
  say "joining $(node "$name") to $(node "$SEED")"
  local log
  log="$(dir "$name")/log/cluster.log"
  { ctl "$name" stop_app && ctl "$name" reset && ctl "$name" join_cluster "$(node "$SEED")" \
      && ctl "$name" start_app; } >>"$log" 2>&1 \
    || die "$(node "$name") could not join $(node "$SEED"): see $log"
  await "$name"
}

selected() { # [name] -> names to act on
  if [ $# -gt 0 ] && [ -n "$1" ]; then index_of "$1" >/dev/null; echo "$1"; else echo "${NAMES[@]}"; fi
}

start() {
  check_installed
  take_over
  local name
  for name in $(selected "${1:-}"); do
    if running "$name"; then
      say "$(node "$name") is running"
      continue
    fi
    port_open "$(amqp_port "$name")" && die "port $(amqp_port "$name") is taken by something else"
    prepare "$name"
    launch "$name"
  done
  # Started together: a clustered node waits for its peers' tables while booting.
  for name in $(selected "${1:-}"); do await "$name"; done
  for name in $(selected "${1:-}"); do join "$name"; done
  say "up: $(urls)"
}

stop() {
  local name
  for name in $(selected "${1:-}"); do
    if running "$name"; then
      say "stopping $(node "$name")"
      ctl "$name" stop >/dev/null
    else
      say "$(node "$name") is not running"
    fi
  done
}

status() {
  local name any=""
  for name in "${NAMES[@]}"; do
    if running "$name"; then
      say "$(node "$name") running, amqp://127.0.0.1:$(amqp_port "$name")"
      any=$name
    else
      say "$(node "$name") stopped"
    fi
  done
  if [ -n "$any" ]; then
    say "membership, as $(node "$any") sees it:"
    # Disk and running nodes (the rest of cluster_status is listeners and flags).
    local members
    members=$(ctl "$any" cluster_status | sed -e 's/\x1b\[[0-9;]*m//g' | sed -n '/^Disk Nodes/,/^Versions/p' | sed '$d')
    echo "$members"
    if echo "$members" | grep -v '^oncehook-' | grep -q '@'; then
      say "WARNING: a node that is not one of the extra nodes is a member"
    fi
  fi
}

urls() {
  local name out=""
  for name in "${NAMES[@]}"; do
    out+="${out:+,}amqp://guest:guest@127.0.0.1:$(amqp_port "$name")/%2f"
  done
  echo "$out"
}

case "${1:-}" in
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  status) status ;;
  urls) urls ;;
  nodes) for n in "${NAMES[@]}"; do node "$n"; done ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
