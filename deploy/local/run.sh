#!/usr/bin/env bash
# Runs ingest, worker, mailer, the notifier (order events to the shop's
# endpoints; with no [[notify.endpoint]] in the config it only publishes them
# to the broker), the operators' console and the shop's API together in the
# foreground with one log stream (each line prefixed with its process). Ctrl-C
# (or SIGTERM) stops all of them gracefully. Expects the binaries built in
# target/debug (make run does it).
set -uo pipefail

BIN="${BIN:-target/debug}"
piddir=$(mktemp -d)

start() { # name
  local name=$1
  { "$BIN/oncehook-$name" 2>&1 & echo $! > "$piddir/$name"; wait; } | sed -u "s/^/[$name] /" &
}

stopping=0
stop() {
  if [ "$stopping" -eq 1 ]; then
    echo "[run] already stopping: waiting for in-flight work to finish"
    return
  fi
  stopping=1
  echo "[run] stopping..."
  for f in "$piddir"/*; do kill -TERM "$(cat "$f")" 2>/dev/null; done
  # A second Ctrl-C interrupts `wait` and runs the trap again (which only
  # says so): keep waiting until every process has exited.
  while [ -n "$(jobs -pr)" ]; do wait; done
  rm -rf "$piddir"
  echo "[run] all stopped"
  exit 0
}
trap stop INT TERM

start ingest
start worker
start mailer
start notifier
start console
start api
# The demo data goes in the way a shop's does: through the API, once it
# answers (demo seed waits for it), with the local demo key.
if ! ONCEHOOK_API_KEY="${ONCEHOOK_API_KEY:-ohk_demo_local_only_never_in_production}" \
    "$BIN/oncehookctl" demo seed 2>&1 | sed -u 's/^/[demo] /'; then
  echo "[run] demo seed failed (see above); everything else keeps running"
fi
echo "[run] ingest on http://${ONCEHOOK_INGEST_ADDR:-127.0.0.1:8080} (metrics: ingest 127.0.0.1:9100, worker 9101, mailer 9102, notifier 9104); mail goes to ${ONCEHOOK_SMTP_URL:-${ONCEHOOK_MAIL_DIR:-./var/mail}}."
echo "[run] shop API on http://${ONCEHOOK_API_ADDR:-127.0.0.1:8082} (demo key: ohk_demo_local_only_never_in_production; metrics 9103)."
echo "[run] console on http://${ONCEHOOK_CONSOLE_ADDR:-127.0.0.1:8081} (demo operator: demo / demo-operator). Ctrl-C stops everything."
wait
rm -rf "$piddir"
