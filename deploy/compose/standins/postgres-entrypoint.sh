#!/bin/bash
# First start: initdb with POSTGRES_USER / POSTGRES_PASSWORD, create
# POSTGRES_DB; every start: run the server as the postgres user.
set -euo pipefail

if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "${1:-}" != postgres ]; then exec "$@"; fi

user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (password of POSTGRES_USER)}"
  echo "stand-in postgres: initialising $PGDATA for user $user, database $db"
  initdb -D "$PGDATA" -U "$user" -E UTF8 --auth-local=trust --auth-host=scram-sha-256 \
    --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") >/dev/null
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w -t 60 start >/dev/null
    psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -qc "CREATE DATABASE \"$db\""
    pg_ctl -D "$PGDATA" -m fast -w -t 60 stop >/dev/null
  fi
fi
shift
exec postgres -D "$PGDATA" "$@"
