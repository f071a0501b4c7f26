# oncehook — the two commands a newcomer needs are `make run` and `make test`.

CARGO ?= cargo
export ONCEHOOK_CONFIG ?= $(CURDIR)/deploy/local/oncehook.toml
export ONCEHOOK_MAIL_DIR ?= $(CURDIR)/var/mail
CTL := target/debug/oncehookctl
# The pipeline's end-to-end tests (tests/tests/pipeline_*.rs), one --test each:
# `make test` runs them once more without group commit.
PIPELINE_TESTS := $(patsubst tests/tests/%.rs,--test %,$(sort $(wildcard tests/tests/pipeline_*.rs)))
# The end-to-end files `make test` runs once more with every binary that uses
# the database behind a real PgBouncer in transaction mode, with the deploy
# files' settings (DEALLOCATE ALL on every hand-over, ONCEHOOK_DATABASE_POOLER
# =transaction): at least one file per such binary, which
# tests/tests/pooled_pass.rs checks against the workspace's binaries.
POOLED_FILES := $(sort $(basename $(notdir $(wildcard tests/tests/pipeline_*.rs tests/tests/ops_*.rs)))) \
	notify api reconciliation reconciliation_found reconciliation_faults refunds refund_attempts console console_notify \
	console_hardening console_refunds rollout \
	mail_tls db_trouble chaos tenancy runtime_sources fairness
POOLED_TESTS := $(patsubst %,--test %,$(POOLED_FILES))

.PHONY: pooled-files run test test-build lint lint-static services tools alerts-test api-schema-test k8s-validate compose-test build demo bench bench-smoke chaos confluence upgrade-test fmt clean

## run: start Postgres + RabbitMQ if needed, migrate, run ingest + worker + mailer + notifier + console + the shop's API,
## and seed demo data through that API
run: services build
	$(CTL) migrate
	# Nothing older runs here: the contract step at once.
	$(CTL) migrate --finish
	deploy/local/run.sh

## test: unit, property and end-to-end tests against real Postgres and RabbitMQ, every binary's
## end-to-end files once more through a real PgBouncer in transaction mode (POOLED_FILES), the
## pipeline's once more without group commit
## (batch size 1), the bench once with tiny loads, then the alert rules' tests, schemathesis
## against the shop API and the Kubernetes manifests' schema check. (`make compose-test` is not part of it: see deploy/compose/README.md.)
test: test-build
	# Test binaries several at a time, the ones that restart shared services alone
	# (deploy/local/test-binaries.sh); as `cargo test --workspace` would run them.
	CARGO=$(CARGO) bash deploy/local/test-binaries.sh all
	@echo "make test: the PgBouncer pass (transaction mode) over: $(POOLED_FILES)"
	ONCEHOOK_TEST_POOLER=pgbouncer CARGO=$(CARGO) bash deploy/local/test-binaries.sh pooled $(POOLED_TESTS)
	ONCEHOOK_TEST_WORKER_BATCH_SIZE=1 CARGO=$(CARGO) bash deploy/local/test-binaries.sh batch-1 $(PIPELINE_TESTS)
	$(MAKE) bench-smoke
	$(MAKE) alerts-test
	$(MAKE) api-schema-test
	$(MAKE) k8s-validate

## test-build: what `make test` builds before its passes: the binaries, every test binary and the bench
test-build: services tools
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-run
	$(CARGO) test --workspace --bench pipeline --no-run

## alerts-test: check the alert rules and run their unit tests (promtool, from Debian's prometheus package)
alerts-test: tools
	promtool check rules deploy/observability/alerts.yaml
	promtool test rules deploy/observability/alerts.test.yaml

## api-schema-test: schemathesis (PyPI, in var/tools/) against a running oncehook-api and its own
## OpenAPI document, 30 examples per operation: no 5xx, every answer as documented (about 10 s)
api-schema-test: services tools
	# The whole workspace's binaries: the same features as `make test` built
	# them with (building two packages alone resolves other features and
	# compiles them again).
	$(CARGO) build --workspace --bins
	bash deploy/local/api-schema-test.sh

## k8s-validate: deploy/k8s rendered and checked against the Kubernetes schemas (kubernetes-validate
## --strict, offline) and KEDA's objects against deploy/k8s/keda-schema.json; about two seconds
k8s-validate: tools
	bash deploy/k8s/validate.sh

## compose-test: deploy/compose on a real Docker engine (deploy/local/docker.sh starts one of its own):
## images built locally, the stack driven through its published ports, a worker killed, Postgres
## restarted, a three-node RabbitMQ cluster partitioned; lost 0, doubled 0. About 20 minutes (needs root); not in `make test`, see deploy/compose/README.md.
compose-test:
	bash deploy/compose/test.sh

## lint: formatting and clippy, warnings are errors; the migrations follow the two-step rules
## (docs/migrations.md: expand only adds, no lock the running system queues behind)
lint: lint-static
	# --workspace: built with the workspace's features, as `make test` builds
	# it (with -p alone cargo would build oncehook-common's dependencies a
	# second time, with other features).
	$(CARGO) test --workspace --test migration_rules

## lint-static: rustfmt and clippy alone (CI runs them beside `make test`'s passes, .ci/run)
lint-static:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# The upgrade test is `test = false` (make upgrade-test runs it), which
	# --all-targets leaves out.
	$(CARGO) clippy --workspace --test upgrade -- -D warnings

fmt:
	$(CARGO) fmt --all

## pooled-files: the files of the PgBouncer pass, one a line (read by tests/tests/pooled_pass.rs)
pooled-files:
	@printf '%s\n' $(POOLED_FILES)

services:
	@bash deploy/local/services.sh

tools:
	@bash deploy/local/tools.sh

build:
	$(CARGO) build --workspace --bins

## chaos: the full chaos suite with more load; prints the figures per scenario
chaos: services
	$(CARGO) build --workspace --bins
	rm -f target/chaos-report.md
	ONCEHOOK_CHAOS_ORDERS=$${ONCEHOOK_CHAOS_ORDERS:-200} $(CARGO) test --workspace --test chaos -- --nocapture --test-threads=1
	@echo
	@echo "| scenario | events | posts | acked | applied | duplicates absorbed | dead-lettered | lost | doubled |"
	@echo "|---|---|---|---|---|---|---|---|---|"
	@cat target/chaos-report.md

## confluence: the ledger's model-based test with more orders (each twice, in random permutations with duplicates)
confluence: services
	$(CARGO) build --workspace --bins
	ONCEHOOK_CONFLUENCE_ORDERS=$${ONCEHOOK_CONFLUENCE_ORDERS:-5000} $(CARGO) test --workspace --test confluence -- --nocapture
	@echo
	@echo "| seed | orders | twins | events | deliveries posted | permutations | mismatches | dead-lettered | parked | settled | posted s | settled s | total s |"
	@echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	@tail -n 1 target/confluence-report.md

## upgrade-test: the previous release (FROM=<rev>, default the last tag before HEAD, else 7a6b34a) built
## from git into target/releases/ and rolled to this checkout (or TO=<rev>, built the same way) under load as docs/operations.md says
## (migrate, each binary replaced, migrate --finish), then rolled back and forward again; checks the
## books, the order events, versions, updated_after and refund intents. About 6 minutes a scenario
## (SCENARIO=upgrade|rollback for one); not in `make test`. Run it before a release and whenever
## migrations/ changes (docs/reliability.md, "Upgrade test").
upgrade-test: services
	FROM="$(FROM)" TO="$(TO)" SCENARIO="$(SCENARIO)" bash deploy/local/upgrade-test.sh

## bench: release binaries; ingest, broker and worker throughput as ratios to ceilings measured in the same run
bench: services
	$(CARGO) build --release --bins
	ONCEHOOK_TEST_INGEST_RATE_PER_SECOND=10000000 \
		ONCEHOOK_BIN_DIR=$(CURDIR)/target/release $(CARGO) bench -p oncehook-e2e --bench pipeline

## bench-smoke: every phase of the bench once, with tiny loads and the debug binaries, so the
## bench keeps working (inside `make test`); its figures mean nothing, `make bench` measures
## (the shop API's phase still fails on an answer other than 201 or on orders that do not add up)
bench-smoke: services tools
	ONCEHOOK_BENCH_SECS=1 ONCEHOOK_BENCH_EVENTS=60 ONCEHOOK_BENCH_LETTERS=60 ONCEHOOK_BENCH_ROWS=2000 \
		ONCEHOOK_BENCH_ROUNDS=1 ONCEHOOK_BENCH_GROWTH_ROWS=20000 ONCEHOOK_BENCH_BUSY_REPEATS=0 \
		ONCEHOOK_BENCH_BACKLOG=200 ONCEHOOK_BENCH_TENANTS=50 ONCEHOOK_TEST_INGEST_RATE_PER_SECOND=10000000 \
		$(CARGO) test --workspace --bench pipeline
	grep -q '^| worker ×2' target/bench-report.md
	grep -q '^| ingest with traces exported' target/bench-report.md
	grep -q '^| console overview' target/bench-report.md
	grep -q '^| API POST /v1/orders' target/bench-report.md
	grep -q '^| notifier: order events' target/bench-report.md
	grep -q '^Machine before measuring' target/bench-report.md
	grep -Eq '^(- worker ×1 batch 1 ≥ 0.6× C|goals not reported: the machine was busy)' target/bench-report.md
	grep -q '^| worker ×1 (prefetch [0-9]*, [0-9]* committers, batch 1), [0-9]* events, median of 1 round' target/bench-report.md
	grep -Eq '^\| C′ pgbench|C′ not available' target/bench-report.md
	grep -q 'backends in a transaction, PostgreSQL' target/bench-report.md
	grep -q 'spans made [0-9]*, exported [0-9]*, dropped' target/bench-report.md
	grep -q '^## Where PostgreSQL' target/bench-report.md
	grep -q '^### PostgreSQL in C  pgbench' target/bench-report.md
	grep -q '^### PostgreSQL in worker ×1 batch 1' target/bench-report.md
	grep -q '^### PostgreSQL in the shop API' target/bench-report.md
	grep -q '^| growth: worker ×1 batch 1' target/bench-report.md
	grep -q "^| fairness: a quiet tenant's post → committed, another tenant's 200-event backlog draining" target/bench-report.md
	grep -q "^| fairness: the flooding tenant's 200 events drained, the quiet tenant posting" target/bench-report.md
	grep -q '^| tenants: 50 merchant(s), ingest acks' target/bench-report.md
	grep -q '^| tenants: 50 merchant(s), API GET /v1/orders' target/bench-report.md
	grep -q '^| tenants: 50 merchants, worker ×1, events spread one per merchant' target/bench-report.md
	grep -q '^## Direct and as deployed' target/bench-report.md
	grep -q '^| worker ×1 batch 1 | [0-9]* events/s |' target/bench-report.md
	grep -q '^| worker ×1 batch 8 | [0-9]* events/s |' target/bench-report.md
	grep -q '^| worker ×1 batch 1, through PgBouncer (transaction) | [0-9]* events/s | [0-9]* events/s |' target/bench-report.md
	grep -q '^| API POST /v1/orders | [0-9]* orders/s |' target/bench-report.md
	grep -q '^| notifier | [0-9]* events/s | [0-9]* events/s |' target/bench-report.md
	grep -q '^| mailer | [0-9]* emails/s | [0-9]* emails/s |' target/bench-report.md
	grep -Eq '^(- worker ×1 batch 1 as deployed \(|goals not reported: the machine was busy)' target/bench-report.md
	grep -q '^Other processes during the measured runs' target/bench-report.md

## demo: the README tour against a running `make run`
demo: build
	$(CTL) send razorpay payment.captured --order order_1001 --times 5 --concurrency 5
	sleep 2
	$(CTL) trace order order_1001

## sqlx-prepare: after changing SQL or a migration, refresh the compile-time query data in .sqlx/
SQLX_DB := oncehook_sqlx_prepare
sqlx-prepare: services
	psql -h 127.0.0.1 -U postgres -qc 'DROP DATABASE IF EXISTS $(SQLX_DB)' -c 'CREATE DATABASE $(SQLX_DB)'
	# The binaries' role, which the migrations grant to (oncehookctl migrate makes it).
	psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'oncehook_service'" | grep -q 1 \
		|| psql -h 127.0.0.1 -U postgres -qc 'CREATE ROLE oncehook_service LOGIN'
	# The migrations straight from their files, both steps (a binary would
	# embed the old set), plus sqlx's bookkeeping table, which store::schema reads.
	for f in migrations/*.sql migrations/contract/*.sql; do psql -h 127.0.0.1 -U postgres -d $(SQLX_DB) -q -v ON_ERROR_STOP=1 -f "$$f" || exit 1; done
	psql -h 127.0.0.1 -U postgres -d $(SQLX_DB) -qc 'CREATE TABLE _sqlx_migrations (version bigint PRIMARY KEY, description text NOT NULL, installed_on timestamptz NOT NULL DEFAULT now(), success boolean NOT NULL, checksum bytea NOT NULL, execution_time bigint NOT NULL)'
	rm -rf .sqlx && mkdir -p .sqlx
	find crates -name '*.rs' -exec touch {} +
	SQLX_OFFLINE=false DATABASE_URL=postgres://postgres@127.0.0.1:5432/$(SQLX_DB) SQLX_OFFLINE_DIR=$(CURDIR)/.sqlx \
		$(CARGO) check --workspace --all-targets
	psql -h 127.0.0.1 -U postgres -qc 'DROP DATABASE $(SQLX_DB)'
	@echo "sqlx-prepare: $$(ls .sqlx | wc -l) queries in .sqlx/ (commit them)"

clean:
	$(CARGO) clean
	@if [ -d var/cluster ]; then bash deploy/local/cluster.sh stop; fi
	rm -rf var
