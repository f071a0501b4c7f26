#!/usr/bin/env bash
# A Docker engine of oncehook's own on a Debian/Ubuntu host, for running
# deploy/compose/ locally (make compose-test) when no engine runs here.
# Installs Debian's docker.io and docker-compose with apt if missing, starts
# dockerd with its own data root, exec root, pid file and socket (so it sits
# beside any other engine and never touches /var/lib/docker), and builds a
# debian:bookworm-slim base image with debootstrap when no registry can serve
# one. Idempotent; says what it does.
#
# Usage: deploy/local/docker.sh start    install if needed, start the engine, make the base image
#        deploy/local/docker.sh stop     stop the engine this script started
#        deploy/local/docker.sh status   whether it runs, and its images
#        deploy/local/docker.sh env      the DOCKER_HOST line to eval:  eval "$(deploy/local/docker.sh env)"
#
# Settings (environment): ONCEHOOK_DOCKER_ROOT (default /var/lib/oncehook-docker),
# ONCEHOOK_DOCKER_RUN (default /run/oncehook-docker; the socket is docker.sock in it),
# ONCEHOOK_DOCKER_BASE (default debian:bookworm-slim), DEBIAN_MIRROR (the
# Debian archive debootstrap reads; default: the one this machine's apt
# already uses for that release, from /etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list or *.sources). Needs root (or sudo).
set -euo pipefail

ROOT_DIR="${ONCEHOOK_DOCKER_ROOT:-/var/lib/oncehook-docker}"
RUN_DIR="${ONCEHOOK_DOCKER_RUN:-/run/oncehook-docker}"
SOCK="$RUN_DIR/docker.sock"
PIDFILE="$RUN_DIR/dockerd.pid"
LOG="$ROOT_DIR/dockerd.log"
BASE_IMAGE="${ONCEHOOK_DOCKER_BASE:-debian:bookworm-slim}"
# The engine's default bridge: an interface of its own (not docker0, which
# another engine may own) with its own subnet.
BRIDGE="${ONCEHOOK_DOCKER_BRIDGE:-oncehook0}"
BRIDGE_CIDR="${ONCEHOOK_DOCKER_BRIDGE_CIDR:-172.31.250.1/24}"
# The release the base image is made of: debian:bookworm-slim -> bookworm.
RELEASE="${BASE_IMAGE#*:}"
RELEASE="${RELEASE%-slim}"
export DOCKER_HOST="unix://$SOCK"

say() { printf 'docker: %s\n' "$*"; }
die() { say "$*"; exit 1; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $*"; fi
}
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* by hand"
  say "installing $* with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}
engine_up() { timeout 10 docker info >/dev/null 2>&1; }

# The Debian archive this machine's apt reads RELEASE from: the URI of the
# first enabled "deb" source whose suites include RELEASE itself (not
# RELEASE-updates or -security), in the one-line format
# (/etc/apt/sources.list, sources.list.d/*.list) or deb822
# (sources.list.d/*.sources). The project names no mirror of its own.
apt_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    # deb [options] URI SUITE COMPONENT...
    awk -v rel="$RELEASE" '
      { sub(/#.*/, ""); gsub(/\[[^]]*\]/, "") }
      $1 == "deb" && $3 == rel { print $2; exit }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    # Paragraphs of "Field: value" lines; a field may go on over indented lines.
    awk -v rel="$RELEASE" '
      function done_paragraph(   n, i, s, u) {
        if (!found && enabled != "no" && (" " types " ") ~ / deb / && uris != "") {
          n = split(suites, s, /[ \t]+/)
          for (i = 1; i <= n; i++) if (s[i] == rel) { split(uris, u, /[ \t]+/); print u[1]; found = 1; exit }
        }
        types = ""; uris = ""; suites = ""; enabled = ""; key = ""
      }
      /^[ \t]*$/ { done_paragraph(); next }
      /^#/ { next }
      /^[ \t]/ { if (key == "uris") uris = uris " " $0; else if (key == "suites") suites = suites " " $0; next }
      {
        key = tolower($0); sub(/:.*/, "", key)
        value = $0; sub(/^[^:]*:[ \t]*/, "", value)
        if (key == "types") types = value
        else if (key == "uris") uris = value
        else if (key == "suites") suites = value
        else if (key == "enabled") enabled = tolower(value)
      }
      END { done_paragraph() }' "$f"
  done
}

ensure_installed() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  # Compose: the v2 plugin (`docker compose`) when the CLI has it, else v1.
  if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    missing+=(docker-compose)
  fi
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
    # The package enables the system engine on /var/run/docker.sock; this
    # script never needs it (and leaves one that was already running alone).
  else
    say "dockerd, compose and debootstrap are installed"
  fi
}

start_engine() {
  if engine_up; then say "engine answers on $SOCK"; return 0; fi
  as_root mkdir -p "$ROOT_DIR/data" "$ROOT_DIR/exec" "$RUN_DIR"
  if [ -f "$PIDFILE" ] && as_root kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    say "dockerd (pid $(cat "$PIDFILE")) runs but does not answer yet"
  else
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
      say "creating bridge $BRIDGE ($BRIDGE_CIDR) for the engine's default network"
      as_root ip link add "$BRIDGE" type bridge
      as_root ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
    fi
    as_root ip link set "$BRIDGE" up
    say "starting dockerd: data $ROOT_DIR/data, socket $SOCK, log $LOG"
    # It starts its own containerd (under the exec root) when no system one runs.
    as_root bash -c "nohup dockerd \
      --data-root '$ROOT_DIR/data' \
      --exec-root '$ROOT_DIR/exec' \
      --pidfile '$PIDFILE' \
      -H 'unix://$SOCK' \
      --bridge '$BRIDGE' \
      >>'$LOG' 2>&1 </dev/null &"
  fi
  local i
  for ((i = 0; i < 60; i++)); do
    engine_up && { say "engine up ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"; return 0; }
    sleep 1
  done
  tail -n 20 "$LOG" >&2 || true
  die "dockerd did not answer within 60 s: see $LOG"
}

registry_reachable() { # can the engine pull the base image itself?
  timeout 60 docker pull -q "$BASE_IMAGE" >/dev/null 2>&1
}

ensure_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base image $BASE_IMAGE is there"
    return 0
  fi
  if registry_reachable; then say "pulled $BASE_IMAGE"; return 0; fi
  local mirror="${DEBIAN_MIRROR:-}"
  if [ -z "$mirror" ]; then
    mirror=$(apt_mirror)
    mirror="${mirror%%$'\n'*}"
    [ -n "$mirror" ] || die "no apt source of this machine serves Debian $RELEASE (looked in /etc/apt/sources.list and /etc/apt/sources.list.d/): set DEBIAN_MIRROR to a Debian archive"
    say "Debian mirror from this machine's apt sources: $mirror"
  fi
  say "no registry serves $BASE_IMAGE: building it with debootstrap ($RELEASE from $mirror; a few minutes)"
  local dir
  dir=$(mktemp -d /var/tmp/oncehook-rootfs.XXXXXX)
  # shellcheck disable=SC2064
  trap "as_root rm -rf '$dir'" EXIT
  as_root timeout 1200 debootstrap --variant=minbase "$RELEASE" "$dir" "$mirror" >"$ROOT_DIR/debootstrap.log" 2>&1 \
    || die "debootstrap failed: see $ROOT_DIR/debootstrap.log"
  # What the official -slim image does: no docs, no apt caches kept.
  as_root rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  as_root tar -C "$dir" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  as_root rm -rf "$dir"
  trap - EXIT
  say "imported $BASE_IMAGE ($(docker image inspect -f '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%d MB", $1/1e6}'))"
}

stop_engine() {
  if [ -f "$PIDFILE" ] && as_root kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    local pid i
    pid=$(cat "$PIDFILE")
    say "stopping dockerd (pid $pid); containers stop with it"
    as_root kill -TERM "$pid"
    for ((i = 0; i < 60; i++)); do as_root kill -0 "$pid" 2>/dev/null || { say "stopped"; return 0; }; sleep 1; done
    die "dockerd (pid $pid) did not stop within 60 s"
  else
    say "no dockerd of ours runs"
  fi
}

case "${1:-}" in
  start)
    as_root mkdir -p "$ROOT_DIR"
    ensure_installed
    start_engine
    ensure_base_image
    say "ready: export DOCKER_HOST=$DOCKER_HOST"
    ;;
  stop) stop_engine ;;
  status)
    if engine_up; then
      say "engine up on $SOCK"
      docker image ls
    else
      say "engine not running on $SOCK"
    fi
    ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
