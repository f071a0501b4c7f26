#!/usr/bin/env bash
# make compose-test: compose.yaml on a real Docker engine, as a user runs it.
#
#  1. deploy/local/docker.sh start: Debian's docker.io + docker-compose when
#     missing, dockerd on a socket of its own, a debian:bookworm-slim base
#     (debootstrap) when no registry serves one.
#  2. cargo build --release --bins on the host; the oncehook image is built by
#     compose from Dockerfile.prebuilt (no Rust image needed). With a registry,
#     ONCEHOOK_COMPOSE_DOCKERFILE=deploy/compose/Dockerfile builds in Docker.
#  3. Postgres, RabbitMQ, PgBouncer and Mailpit: the stand-ins in standins/
#     (built from Debian packages; the PgBouncer one runs Debian 12's 1.18,
#     printed here and in the report) unless ONCEHOOK_COMPOSE_IMAGES=official,
#     which pulls the official images compose.yaml names by default.
#  4. A fresh env file (random secrets, every host port compose.yaml
#     publishes picked free) and an oncehook.toml (the shipped one plus an
#     [[api.key]] for the test and a [[notify.endpoint]] at the "shop"
#     profile's receiver) in target/compose-test/, then
#     tests/tests/compose.rs: the stack scenario and
#     the three-node cluster partition (ONCEHOOK_COMPOSE_TESTS picks one:
#     compose_stack or compose_cluster_partition; built --release, reusing step
#     2's dependencies). Figures go to
#     target/compose-report.md.
#  5. Stops the engine again if this script started it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
say() { printf 'compose-test: %s\n' "$*"; }
WORK="$ROOT/target/compose-test"
mkdir -p "$WORK"

eval "$(bash deploy/local/docker.sh env)"
started_engine=""
if ! timeout 10 docker info >/dev/null 2>&1; then started_engine=yes; fi
bash deploy/local/docker.sh start
cleanup() {
  if [ -n "$started_engine" ] && [ -z "${ONCEHOOK_COMPOSE_KEEP_ENGINE:-}" ]; then
    bash deploy/local/docker.sh stop
  fi
}
trap cleanup EXIT

if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE="docker-compose"; fi
say "compose: $($COMPOSE version 2>/dev/null | head -n 1)"

DOCKERFILE="${ONCEHOOK_COMPOSE_DOCKERFILE:-deploy/compose/Dockerfile.prebuilt}"
# The receiver stand-in (profile "shop", built by compose) installs Python's
# standardwebhooks from standins/wheels/ when a wheel is there: fetched here
# with the host's pip, whose index and certificates may be ones the
# engine's containers cannot use.
if python3 -m pip --version >/dev/null 2>&1; then
  say "fetching the standardwebhooks wheel for the receiver stand-in (host pip)"
  python3 -m pip download -q --no-deps --only-binary=:all: \
    --dest deploy/compose/standins/wheels "standardwebhooks==1.1.0"
else
  say "no pip on the host: the receiver stand-in installs standardwebhooks from the package index itself"
fi

if [ "$DOCKERFILE" = deploy/compose/Dockerfile.prebuilt ]; then
  say "building the release binaries on the host (Dockerfile.prebuilt copies them)"
  nice -n 10 "${CARGO:-cargo}" build --release --bins
fi

images=()
if [ "${ONCEHOOK_COMPOSE_IMAGES:-standin}" = official ]; then
  say "using the official images compose.yaml names (pulled from the registry)"
else
  for s in postgres rabbitmq pgbouncer mailpit; do
    say "building the $s stand-in (deploy/compose/standins/Dockerfile.$s)"
    nice -n 10 docker build -q -f "deploy/compose/standins/Dockerfile.$s" \
      -t "oncehook-standin/$s:local" deploy/compose/standins >/dev/null
  done
  # Which PgBouncer the stand-in really runs (Debian's package), not the
  # release compose.yaml pins for the official image.
  PGBOUNCER_STANDIN_VERSION="$(docker run --rm --entrypoint pgbouncer oncehook-standin/pgbouncer:local --version | head -n 1)"
  say "the PgBouncer stand-in runs $PGBOUNCER_STANDIN_VERSION (compose.yaml's default image: edoburu/pgbouncer, 1.25.2)"
  images=(
    POSTGRES_IMAGE=oncehook-standin/postgres:local
    RABBITMQ_IMAGE=oncehook-standin/rabbitmq:local
    PGBOUNCER_IMAGE=oncehook-standin/pgbouncer:local
    MAILPIT_IMAGE=oncehook-standin/mailpit:local
  )
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
taken=" "
pick_port() { # VAR FIRST: the first free port from FIRST up (30 tries), not handed out already
  local p=$2 i
  for ((i = 0; i < 30; i++, p++)); do
    if port_free "$p" && [[ "$taken" != *" $p "* ]]; then taken+="$p "; printf -v "$1" '%s' "$p"; return 0; fi
  done
  say "no free port from $2 to $p"; exit 1
}
secret() { head -c 24 /dev/urandom | base64 | tr -d '/+=' ; }

ENV_FILE="$WORK/compose.env"
if [ -f "$ENV_FILE" ]; then
  say "removing what an earlier run left (compose down -v)"
  (cd deploy/compose && $COMPOSE --env-file "$ENV_FILE" -f compose.yaml --profile cluster --profile tools --profile shop \
    down -v --remove-orphans -t 40 >/dev/null 2>&1) || true
fi
# Every host port compose.yaml publishes: each picked here is written below
# (a picked port left out of the file would publish compose.yaml's default).
PORTS=(INGEST_PORT:18080 INGEST_METRICS_PORT:19100 MAILER_METRICS_PORT:19102 NOTIFIER_METRICS_PORT:19104
       API_PORT:18082 CONSOLE_PORT:18081 MAILPIT_PORT:18025 POSTGRES_PORT:15432 RABBITMQ_MANAGEMENT_PORT:15673
       RECEIVER_PORT:18090)
for spec in "${PORTS[@]}"; do
  pick_port "${spec%%:*}" "${spec##*:}"
done
for var in $(grep -o '\${[A-Z_]*_PORT:-' deploy/compose/compose.yaml | sed 's/^\${//; s/:-$//' | sort -u); do
  [[ " ${PORTS[*]%%:*} " == *" $var "* ]] || { say "compose.yaml publishes \$$var, which this script does not pick: add it to PORTS"; exit 1; }
done

# The configuration the stack loads (ONCEHOOK_CONFIG_FILE): the shipped
# oncehook.toml, a key for the shop's API and the receiver as the shop's
# endpoint. The key itself goes to the env file for the test; the file holds
# only its SHA-256.
CONFIG_FILE="$WORK/oncehook.toml"
API_KEY="ohk_$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
{
  cat deploy/compose/oncehook.toml
  echo
  echo "# Added by deploy/compose/test.sh."
  echo "[[api.key]]"
  echo 'name = "compose-test"'
  echo "hash = \"$(printf '%s' "$API_KEY" | sha256sum | cut -d' ' -f1)\""
  echo 'scopes = ["products:write", "orders:write", "orders:read", "events:read"]'
  echo
  echo "[[notify.endpoint]]"
  echo 'name = "shop"'
  echo 'url = "http://receiver:8090/hooks/oncehook"'
  echo 'secret = "${SHOP_WEBHOOK_SECRET}"'
  echo 'events = ["order.*"]'
} > "$CONFIG_FILE"
chmod 644 "$CONFIG_FILE"
{
  echo "# Written by deploy/compose/test.sh; secrets are random per run."
  echo "COMPOSE_PROJECT_NAME=oncehook-compose-test"
  echo "ONCEHOOK_IMAGE=oncehook:compose-test"
  echo "ONCEHOOK_DOCKERFILE=$DOCKERFILE"
  printf '%s\n' "${images[@]}"
  echo "RAZORPAY_WEBHOOK_SECRET=$(secret)"
  echo "CASHFREE_WEBHOOK_SECRET=$(secret)"
  echo "PAYU_MERCHANT_KEY=key$(secret | head -c 8)"
  echo "PAYU_MERCHANT_SALT=$(secret)"
  echo "STRIPE_WEBHOOK_SECRET=whsec_$(secret)"
  echo "STANDARD_WEBHOOK_SECRET=whsec_$(head -c 32 /dev/urandom | base64 | tr -d '\n')"
  echo "POSTGRES_PASSWORD=$(secret)"
  echo "POSTGRES_SERVICE_PASSWORD=$(secret)"
  echo "RABBITMQ_USER=oncehook"
  echo "RABBITMQ_PASSWORD=$(secret)"
  echo "RABBITMQ_ERLANG_COOKIE=$(secret)$(secret)"
  echo "ONCEHOOK_CONSOLE_SESSION_KEY=$(secret)$(secret)"
  echo "SHOP_WEBHOOK_SECRET=whsec_$(head -c 32 /dev/urandom | base64 | tr -d '\n')"
  echo "ONCEHOOK_CONFIG_FILE=$CONFIG_FILE"
  # Not read by compose: the key the test calls the shop's API with.
  echo "SHOP_API_KEY=$API_KEY"
  # Loopback only, on ports other than the host's own services'.
  echo "INGEST_BIND=127.0.0.1"
  for spec in "${PORTS[@]}"; do var="${spec%%:*}"; echo "$var=${!var}"; done
} > "$ENV_FILE"
chmod 600 "$ENV_FILE"
say "env file: $ENV_FILE"

rm -f target/compose-report.md
filter="${ONCEHOOK_COMPOSE_TESTS:-}"
ONCEHOOK_COMPOSE_ENV="$ENV_FILE" ONCEHOOK_COMPOSE_CMD="$COMPOSE" \
  timeout 3600 nice -n 10 "${CARGO:-cargo}" test --release -p oncehook-e2e --test compose -- \
  --ignored --nocapture --test-threads=1 $filter
if [ -n "${PGBOUNCER_STANDIN_VERSION:-}" ]; then
  printf '\nPgBouncer: the stand-in, %s (Debian package).\n' "$PGBOUNCER_STANDIN_VERSION" >> target/compose-report.md
fi
say "passed; figures in target/compose-report.md"
