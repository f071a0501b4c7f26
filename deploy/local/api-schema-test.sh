#!/usr/bin/env bash
# `make api-schema-test`: schemathesis against a running oncehook-api — a
# database of its own (migrated), a key with every scope, a free port — with
# a bounded number of examples per operation (ST_MAX_EXAMPLES, 30): no 5xx,
# and every answer's status, content type and body as the document says.
# Hypothesis has no deadline here (the checks are about answers, not speed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

ST="${ST:-var/tools/schemathesis/bin/st}"
[ -x "$ST" ] || ST=st
DB="oncehook_st_$$"
KEY="ohk_schemathesis_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
HASH=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(port); MPORT=$(port)
work=$(mktemp -d)
cat > "$work/oncehook.toml" <<TOML
[[api.key]]
name = "schemathesis"
hash = "$HASH"
scopes = ["orders:write", "orders:read", "products:write", "events:read"]
TOML
export ONCEHOOK_CONFIG="$work/oncehook.toml"
export ONCEHOOK_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$DB"
export ONCEHOOK_API_ADDR="127.0.0.1:$PORT" ONCEHOOK_METRICS_ADDR="127.0.0.1:$MPORT"
# A client failing authentication is throttled; schemathesis sends keyless
# requests on purpose, so let it fail often.
export ONCEHOOK_API_AUTH_FAILURES_PER_MINUTE=100000

api_pid=""
cleanup() {
  [ -n "$api_pid" ] && kill -TERM "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB"
target/debug/oncehookctl migrate >/dev/null
target/debug/oncehook-api > "$work/api.log" 2>&1 &
api_pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$MPORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
# A product for the orders schemathesis makes up to name.
curl -fs -X PUT -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"name": "Sample", "stock": 1000}' "http://127.0.0.1:$PORT/v1/products/sku-1" >/dev/null

status=0
"$ST" run "http://127.0.0.1:$PORT/v1/openapi.json" \
  --header "Authorization: Bearer $KEY" \
  --max-examples "${ST_MAX_EXAMPLES:-30}" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --seed "${ST_SEED:-19}" --no-shrink --warnings off || status=$?
if [ "$status" -ne 0 ]; then
  echo "api-schema-test: failed; the API's log:"; tail -n 40 "$work/api.log"
fi
exit "$status"
