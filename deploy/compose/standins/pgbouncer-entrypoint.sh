#!/bin/bash
# Writes pgbouncer.ini and userlist.txt from the environment, then runs
# PgBouncer as the postgres user. Says which PgBouncer it runs.
set -euo pipefail

if [ "$(id -u)" = 0 ]; then
  : "${DB_HOST:?set DB_HOST}" "${DB_USER:?set DB_USER}" "${DB_PASSWORD:?set DB_PASSWORD}"
  db_name="${DB_NAME:-*}"
  {
    echo "[databases]"
    echo "$db_name = host=$DB_HOST port=${DB_PORT:-5432} user=$DB_USER${DB_NAME:+ dbname=$DB_NAME}"
    echo
    echo "[pgbouncer]"
    echo "listen_addr = ${LISTEN_ADDR:-0.0.0.0}"
    echo "listen_port = ${LISTEN_PORT:-6432}"
    echo "unix_socket_dir ="
    echo "auth_type = ${AUTH_TYPE:-md5}"
    echo "auth_file = /etc/pgbouncer/userlist.txt"
    echo "pool_mode = ${POOL_MODE:-session}"
    echo "max_client_conn = ${MAX_CLIENT_CONN:-100}"
    echo "default_pool_size = ${DEFAULT_POOL_SIZE:-20}"
    echo "server_reset_query = ${SERVER_RESET_QUERY:-DISCARD ALL}"
    echo "server_reset_query_always = ${SERVER_RESET_QUERY_ALWAYS:-0}"
    echo "ignore_startup_parameters = ${IGNORE_STARTUP_PARAMETERS:-}"
    # PgBouncer 1.21+ only (1.18 refuses the line); 0 is what 1.18 does.
    if [ -n "${MAX_PREPARED_STATEMENTS:-}" ]; then
      if pgbouncer --version | head -n 1 | grep -Eq 'PgBouncer 1\.([0-9]|1[0-9]|20)\.'; then
        if [ "$MAX_PREPARED_STATEMENTS" != 0 ]; then
          echo "MAX_PREPARED_STATEMENTS=$MAX_PREPARED_STATEMENTS: $(pgbouncer --version | head -n 1) cannot track prepared statements" >&2
          exit 1
        fi
      else
        echo "max_prepared_statements = $MAX_PREPARED_STATEMENTS"
      fi
    fi
    # As the official image: ADMIN_USERS, postgres by default, not DB_USER
    # (the binaries' role is no admin of PgBouncer).
    echo "admin_users = ${ADMIN_USERS:-postgres}"
    echo "logfile ="
  } > /etc/pgbouncer/pgbouncer.ini
  # Plain text: the client side can then use SCRAM and PgBouncer can log in
  # to Postgres with SCRAM too.
  printf '"%s" "%s"\n' "$DB_USER" "$DB_PASSWORD" > /etc/pgbouncer/userlist.txt
  chown postgres:postgres /etc/pgbouncer/pgbouncer.ini /etc/pgbouncer/userlist.txt
  chmod 600 /etc/pgbouncer/pgbouncer.ini /etc/pgbouncer/userlist.txt
  echo "oncehook stand-in: $(pgbouncer --version | head -n 1) (Debian's package)" >&2
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
exec "$@"
