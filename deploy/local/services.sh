#!/usr/bin/env bash
# Makes sure PostgreSQL and RabbitMQ answer on 127.0.0.1 and the oncehook
# database exists. Starts them if installed but stopped; installs them with
# apt on a bare Debian/Ubuntu machine. Idempotent; says what it did.
#
# Also loads pg_stat_statements into the local server (the bench reads
# where PostgreSQL's time goes from it), restarting the cluster only when
# the library is not loaded yet.
#
# Usage: deploy/local/services.sh [database-name]   (default: oncehook)
set -euo pipefail

DB_NAME="${1:-oncehook}"
PG_HOST=127.0.0.1
PG_PORT=5432
AMQP_PORT=5672

say() { printf 'services: %s\n' "$*"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else say "need root to run: $*"; return 1; fi
}
wait_port() { # port seconds what
  local i
  for ((i = 0; i < $2 * 2; i++)); do port_open "$1" && return 0; sleep 0.5; done
  say "$3 did not open port $1 within $2 s"; return 1
}
apt_install() {
  command -v apt-get >/dev/null 2>&1 || { say "apt-get not found: install $* by hand"; return 1; }
  say "installing $* with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

ensure_postgres() {
  if port_open "$PG_PORT"; then say "PostgreSQL is up on $PG_HOST:$PG_PORT"; return 0; fi
  local fresh=0
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    apt_install postgresql
    fresh=1
  fi
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] || { say "no PostgreSQL cluster found under /etc/postgresql"; return 1; }
  if [ "$fresh" -eq 1 ]; then
    # A fresh development install: let local TCP connections in without a password.
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    if ! as_root grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
      say "allowing trust auth for 127.0.0.1 in $hba (development machine)"
      as_root sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    fi
  fi
  say "starting PostgreSQL $version"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_port "$PG_PORT" 30 PostgreSQL
  say "PostgreSQL is up on $PG_HOST:$PG_PORT"
}

ensure_rabbitmq() {
  if port_open "$AMQP_PORT"; then say "RabbitMQ is up on 127.0.0.1:$AMQP_PORT"; return 0; fi
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    apt_install rabbitmq-server
  fi
  say "starting RabbitMQ"
  as_root rabbitmq-server -detached || true
  wait_port "$AMQP_PORT" 90 RabbitMQ
  # The port opens a moment before the broker accepts logins.
  sleep 2
  say "RabbitMQ is up on 127.0.0.1:$AMQP_PORT"
}

ensure_database() {
  command -v psql >/dev/null 2>&1 || apt_install postgresql-client
  if psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" | grep -q 1; then
    say "database $DB_NAME exists"
  else
    psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -qc "CREATE DATABASE \"$DB_NAME\""
    say "created database $DB_NAME"
  fi
}

psql_admin() { psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -tAqc "$1"; }

# pg_stat_statements in shared_preload_libraries (appended to what is
# there), tracking nested statements too (trigger and function bodies).
# Preloading takes a restart: done only for a cluster of this machine's
# (pg_ctlcluster) listening on $PG_PORT, and only when the library is not
# loaded yet; otherwise says what to do.
ensure_pg_stat_statements() {
  if [ -z "$(psql_admin "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements'")" ]; then
    say "pg_stat_statements is not installed with this PostgreSQL: the bench falls back to counting statements itself"
    return 0
  fi
  local current
  current=$(psql_admin "SHOW shared_preload_libraries")
  if ! printf '%s\n' "$current" | tr ',' '\n' | tr -d ' "' | grep -qx pg_stat_statements; then
    # Each library as a literal of its own: one literal holding a comma
    # would name a single library "a,b" and the server would not start.
    local libs="" lib
    while IFS= read -r lib; do
      [ -n "$lib" ] && libs="$libs'$lib', "
    done < <(printf '%s\n' "$current" | tr ',' '\n' | tr -d ' "')
    psql_admin "ALTER SYSTEM SET shared_preload_libraries = ${libs}'pg_stat_statements'"
    say "shared_preload_libraries: '${current}' + pg_stat_statements (ALTER SYSTEM)"
    local version cluster port
    read -r version cluster port _ < <(pg_lsclusters -h 2>/dev/null | awk -v p="$PG_PORT" '$3 == p' | head -n 1) || true
    if [ -z "${version:-}" ] || [ "${port:-}" != "$PG_PORT" ]; then
      say "restart the PostgreSQL on $PG_HOST:$PG_PORT yourself to load pg_stat_statements (not a cluster of this machine's)"
      return 0
    fi
    say "restarting PostgreSQL $version to load pg_stat_statements"
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" restart
    wait_port "$PG_PORT" 30 PostgreSQL
    local i
    for ((i = 0; i < 20; i++)); do psql_admin "SELECT 1" >/dev/null 2>&1 && break; sleep 0.5; done
  else
    say "pg_stat_statements is loaded"
  fi
  if [ "$(psql_admin "SELECT setting FROM pg_settings WHERE name = 'pg_stat_statements.track'")" != all ]; then
    psql_admin "ALTER SYSTEM SET pg_stat_statements.track = 'all'"
    psql_admin "SELECT pg_reload_conf()" >/dev/null
    say "pg_stat_statements.track = all (ALTER SYSTEM, reloaded)"
  fi
  # Planning is PostgreSQL time too: the bench reports it beside execution.
  if [ "$(psql_admin "SELECT setting FROM pg_settings WHERE name = 'pg_stat_statements.track_planning'")" != on ]; then
    psql_admin "ALTER SYSTEM SET pg_stat_statements.track_planning = on"
    psql_admin "SELECT pg_reload_conf()" >/dev/null
    say "pg_stat_statements.track_planning = on (ALTER SYSTEM, reloaded)"
  fi
}

# The build needs a C compiler as the linker (and for crates that build C)
# and cargo; say so before the build fails with `linker cc not found`.
ensure_build_tools() {
  if ! command -v cc >/dev/null 2>&1; then
    say "no C compiler (cc): the Rust build needs one as its linker"
    apt_install gcc libc6-dev || { say "install gcc (e.g. apt-get install gcc libc6-dev), then retry"; return 1; }
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    say "cargo not found: install Rust with rustup (https://rustup.rs), then run '. \$HOME/.cargo/env'"
    return 1
  fi
}

ensure_build_tools
ensure_postgres
ensure_pg_stat_statements
ensure_rabbitmq
ensure_database
