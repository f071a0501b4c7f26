#!/bin/bash
# Writes the default user and the listeners into conf.d, the Erlang cookie
# into the data folder when RABBITMQ_ERLANG_COOKIE is set, then runs the
# broker as the rabbitmq user.
set -euo pipefail

if [ "${1:-}" != rabbitmq-server ]; then exec "$@"; fi

if [ "$(id -u)" = 0 ]; then
  {
    echo "# Written by the stand-in image's entrypoint from its environment."
    echo "loopback_users.guest = false"
    echo "listeners.tcp.default = 5672"
    echo "management.tcp.port = 15672"
    [ -n "${RABBITMQ_DEFAULT_USER:-}" ] && echo "default_user = $RABBITMQ_DEFAULT_USER"
    [ -n "${RABBITMQ_DEFAULT_PASS:-}" ] && echo "default_pass = $RABBITMQ_DEFAULT_PASS"
  } > /etc/rabbitmq/conf.d/00-defaults.conf
  chmod 640 /etc/rabbitmq/conf.d/00-defaults.conf
  chown rabbitmq:rabbitmq /etc/rabbitmq/conf.d/00-defaults.conf
  if [ -n "${RABBITMQ_ERLANG_COOKIE:-}" ]; then
    printf '%s' "$RABBITMQ_ERLANG_COOKIE" > /var/lib/rabbitmq/.erlang.cookie
    chmod 400 /var/lib/rabbitmq/.erlang.cookie
  fi
  chown -R rabbitmq:rabbitmq /var/lib/rabbitmq
  exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups "$0" "$@"
fi

export RABBITMQ_NODENAME="${RABBITMQ_NODENAME:-rabbit@$(hostname -s)}"
exec rabbitmq-server
