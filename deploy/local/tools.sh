#!/usr/bin/env bash
# Makes sure the command-line tools `make test` needs beyond cargo are
# installed: promtool (Debian's `prometheus` package), which unit-tests the
# alert rules in deploy/observability/, and PgBouncer, which the pipeline's
# tests run through once (transaction mode). Installs with apt on Debian/Ubuntu,
# the way services.sh installs PostgreSQL. Idempotent; says what it did.
set -euo pipefail

say() { printf 'tools: %s\n' "$*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else say "need root to run: $*"; return 1; fi
}
apt_install() {
  command -v apt-get >/dev/null 2>&1 || { say "apt-get not found: install $* by hand"; return 1; }
  say "installing $* with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

if command -v promtool >/dev/null 2>&1; then
  say "promtool is installed ($(promtool --version 2>&1 | head -n 1))"
else
  apt_install prometheus || {
    say "could not install promtool: install Debian's prometheus package (or promtool from prometheus.io), then retry"
    exit 1
  }
fi

if [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1; then
  say "pgbouncer is installed"
else
  apt_install pgbouncer || {
    say "could not install pgbouncer: install Debian's pgbouncer package, then retry"
    exit 1
  }
  # The package starts a system instance on 6432; the tests start their own.
  as_root service pgbouncer stop >/dev/null 2>&1 || true
fi
