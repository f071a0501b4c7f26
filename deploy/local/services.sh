#!/usr/bin/env bash
# Makes sure PostgreSQL and RabbitMQ answer on 127.0.0.1 and the oncehook
# database exists. Starts them if installed but stopped; installs them with
# apt on a bare Debian/Ubuntu machine. Idempotent; says what it did.
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
ensure_rabbitmq
ensure_database
