//! `make lint`: the repository's migrations follow the two-step rules
//! (docs/migrations.md), and the fixtures below prove each rule fires and
//! the allowed statements pass. Reads the SQL files only: no database.

mod rules;

use std::path::Path;

use rules::{MigrationFile, Rule, Step, check_files, check_sql, split};

/// Every migration of the repository: `migrations/*.sql` (expand) and
/// `migrations/contract/*.sql` (contract). Files sqlx ignores (not `.sql`)
/// are skipped here too; a `.sql` file with a name sqlx misreads is not.
fn repository_files() -> Vec<MigrationFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for (folder, step) in [
        ("migrations", Step::Expand),
        ("migrations/contract", Step::Contract),
    ] {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else {
            assert_ne!(folder, "migrations", "no migrations/ folder");
            continue; // no contract migrations yet
        };
        for entry in entries {
            let path = entry.expect("a migrations folder entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !path.is_file() || !name.ends_with(".sql") {
                continue;
            }
            let sql = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            files.push(MigrationFile {
                path: format!("{folder}/{name}"),
                name,
                step,
                sql,
            });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

#[test]
fn the_repositorys_migrations_follow_the_two_step_rules() {
    let files = repository_files();
    assert!(
        files.len() >= rules::BASELINE_FILES.len(),
        "found only {} migrations",
        files.len()
    );
    let violations = check_files(&files);
    assert!(
        violations.is_empty(),
        "{} migration rule(s) broken (docs/migrations.md, \"Writing a migration\"):\n{}",
        violations.len(),
        violations
            .iter()
            .map(|v| format!("  {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---------------------------------------------------------------------------
// Fixtures: each rule fires, and what is allowed passes.

const E: Step = Step::Expand;
const C: Step = Step::Contract;
/// The lock timeout most fixtures start with, so they show one rule each.
const LT: &str = "SET LOCAL lock_timeout = '5s';\n";

fn broken(step: Step, sql: &str) -> Vec<Rule> {
    let mut rules: Vec<Rule> = check_sql("fixture.sql", step, sql)
        .iter()
        .map(|v| v.rule)
        .collect();
    rules.sort();
    rules
}

#[track_caller]
fn case(step: Step, sql: &str, expected: &[Rule]) {
    let mut expected = expected.to_vec();
    expected.sort();
    assert_eq!(broken(step, sql), expected, "{step:?} migration:\n{sql}");
}

fn timed(sql: &str) -> String {
    format!("{LT}{sql}")
}

#[test]
fn an_expand_migration_drops_nothing() {
    case(E, "DROP TRIGGER orders_touch ON orders;", &[Rule::Drop]);
    case(E, "DROP TABLE IF EXISTS orders CASCADE;", &[Rule::Drop]);
    case(E, "DROP FUNCTION orders_touch();", &[Rule::Drop]);
    case(E, "DROP INDEX payments_order_id;", &[Rule::Drop]);
    case(
        E,
        "drop view order_facts; DROP TYPE t; DROP SEQUENCE s; DROP SCHEMA x CASCADE; DROP PROCEDURE p()",
        &[Rule::Drop; 5],
    );
    case(
        E,
        &timed("ALTER TABLE payments DROP CONSTRAINT payments_order_id_fkey;"),
        &[Rule::Drop],
    );
    case(
        E,
        &timed("ALTER TABLE orders DROP COLUMN IF EXISTS paid_by;"),
        &[Rule::Drop],
    );
    case(
        E,
        &timed("ALTER TABLE orders ALTER COLUMN paid_by DROP NOT NULL;"),
        &[Rule::Drop],
    );
    case(
        E,
        &timed("ALTER TABLE orders ADD COLUMN note text, DROP COLUMN paid_by;"),
        &[Rule::Drop],
    );
    case(E, "ALTER TYPE mood DROP ATTRIBUTE x;", &[Rule::Drop]);
    case(E, "TRUNCATE parked_events;", &[Rule::Truncate]);
    case(E, "REVOKE SELECT ON orders FROM shop;", &[Rule::Revoke]);
}

#[test]
fn an_expand_migration_renames_and_changes_nothing() {
    case(
        E,
        &timed(
            "ALTER TABLE orders RENAME TO shop_orders;
             ALTER TABLE orders RENAME COLUMN paid_by TO payer;
             ALTER TABLE ONLY public.orders RENAME CONSTRAINT a TO b;
             ALTER INDEX orders_paid_at RENAME TO orders_paid;
             ALTER TABLE orders SET SCHEMA archive;
             ALTER FUNCTION f() RENAME TO g;",
        ),
        &[Rule::Rename; 6],
    );
    case(
        E,
        &timed("ALTER TABLE orders ALTER COLUMN amount_minor TYPE numeric;"),
        &[Rule::ColumnType],
    );
    case(
        E,
        &timed("ALTER TABLE orders ALTER amount_minor SET DATA TYPE numeric;"),
        &[Rule::ColumnType],
    );
    case(
        E,
        &timed("ALTER TABLE orders ALTER COLUMN paid_by SET NOT NULL;"),
        &[Rule::SetNotNull],
    );
    case(
        E,
        &timed(
            "ALTER TABLE orders ALTER COLUMN status SET DEFAULT 'new';
             ALTER TABLE orders ALTER COLUMN created_at DROP DEFAULT;",
        ),
        &[Rule::ColumnDefault; 2],
    );
    case(
        E,
        &timed("ALTER TABLE orders DISABLE TRIGGER orders_touch;"),
        &[Rule::Disable],
    );
}

#[test]
fn an_expand_migration_deletes_only_some_rows() {
    case(E, "DELETE FROM parked_events;", &[Rule::DeleteAll]);
    case(
        E,
        "WITH gone AS (DELETE FROM parked_events RETURNING source) SELECT count(*) FROM gone;",
        &[Rule::DeleteAll],
    );
    case(
        E,
        "DELETE FROM parked_events WHERE parked_at < now() - interval '1 day';
         WITH gone AS (DELETE FROM parked_events p USING x WHERE p.id = x.id RETURNING 1)
         DELETE FROM a WHERE b IN (SELECT 1 FROM gone);
         UPDATE orders SET note = '' WHERE note IS NULL;",
        &[],
    );
    // ON DELETE in a foreign key is no DELETE.
    case(
        E,
        "CREATE TABLE notes (id int PRIMARY KEY, parent int REFERENCES notes ON DELETE CASCADE);",
        &[],
    );
}

#[test]
fn an_index_on_an_existing_table_is_built_concurrently_alone() {
    case(
        E,
        "CREATE INDEX orders_paid_at ON orders (paid_at);",
        &[Rule::IndexNotConcurrent],
    );
    case(
        E,
        "CREATE UNIQUE INDEX IF NOT EXISTS o ON ONLY public.orders (paid_at);",
        &[Rule::IndexNotConcurrent],
    );
    case(
        E,
        "CREATE INDEX CONCURRENTLY orders_paid_at ON orders (paid_at);",
        &[Rule::ConcurrentlyAlone],
    );
    case(
        E,
        "-- no-transaction\nCREATE INDEX CONCURRENTLY a ON orders (paid_at);\nCREATE INDEX CONCURRENTLY b ON orders (created_at);",
        &[Rule::ConcurrentlyAlone; 2],
    );
    case(
        E,
        "-- no-transaction\n-- Orders by when they were paid.\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS orders_paid_at\n    ON orders (paid_at) WHERE status = 'paid';\n",
        &[],
    );
    // A table of this file: nobody else uses it yet.
    case(
        E,
        "CREATE TABLE notes (id bigint PRIMARY KEY, at timestamptz);
         CREATE INDEX notes_at ON notes (at);
         CREATE TABLE public.tags (a int);
         CREATE INDEX ON public.tags (a);",
        &[],
    );
    // Quoted identifiers keep their case.
    case(
        E,
        r#"CREATE TABLE "Notes" (a int); CREATE INDEX n_a ON "Notes" (a); CREATE INDEX n_b ON notes (a);"#,
        &[Rule::IndexNotConcurrent],
    );
    case(E, "REINDEX TABLE orders;", &[Rule::HeavyLock]);
    case(
        E,
        "-- no-transaction\nREINDEX INDEX CONCURRENTLY orders_paid_at;",
        &[],
    );
}

#[test]
fn constraints_on_an_existing_table_are_added_not_valid() {
    case(
        E,
        &timed("ALTER TABLE orders ADD CONSTRAINT c CHECK (amount_minor < 100);"),
        &[Rule::ConstraintValidated],
    );
    case(
        E,
        &timed("ALTER TABLE orders ADD CHECK (amount_minor < 100);"),
        &[Rule::ConstraintValidated],
    );
    case(
        E,
        &timed(
            "ALTER TABLE payments ADD CONSTRAINT p FOREIGN KEY (order_id) REFERENCES orders (id);",
        ),
        &[Rule::ConstraintValidated],
    );
    case(
        E,
        &timed(
            "ALTER TABLE orders ADD CONSTRAINT c CHECK (amount_minor < 100) NOT VALID;
             ALTER TABLE payments ADD CONSTRAINT p FOREIGN KEY (order_id) REFERENCES orders (id) NOT VALID;
             ALTER TABLE orders VALIDATE CONSTRAINT c;",
        ),
        &[],
    );
    case(
        E,
        &timed("ALTER TABLE orders ADD CONSTRAINT u UNIQUE (order_ref);"),
        &[Rule::IndexUnderLock],
    );
    case(
        E,
        &timed("ALTER TABLE orders ADD PRIMARY KEY (id);"),
        &[Rule::IndexUnderLock],
    );
    case(
        E,
        &timed("ALTER TABLE orders ADD CONSTRAINT u UNIQUE USING INDEX orders_ref_unique;"),
        &[],
    );
}

#[test]
fn a_new_column_needs_no_rewrite_and_takes_the_previous_releases_inserts() {
    case(
        E,
        &timed("ALTER TABLE orders ADD COLUMN note text NOT NULL;"),
        &[Rule::NotNullWithoutDefault],
    );
    case(
        E,
        &timed("ALTER TABLE orders ADD COLUMN token uuid DEFAULT gen_random_uuid();"),
        &[Rule::VolatileDefault],
    );
    case(
        E,
        &timed(
            "ALTER TABLE orders ADD COLUMN r float8 NOT NULL DEFAULT random();
             ALTER TABLE orders ADD COLUMN c timestamptz DEFAULT clock_timestamp();",
        ),
        &[Rule::VolatileDefault; 2],
    );
    case(
        E,
        &timed(
            "ALTER TABLE orders ADD COLUMN seen_at timestamptz NOT NULL DEFAULT now();
             ALTER TABLE orders ADD COLUMN at timestamptz DEFAULT CURRENT_TIMESTAMP;",
        ),
        &[Rule::NowDefault; 2],
    );
    case(
        E,
        &timed(
            "ALTER TABLE orders ADD COLUMN n bigserial;
             ALTER TABLE orders ADD COLUMN m bigint GENERATED ALWAYS AS IDENTITY;
             ALTER TABLE orders SET UNLOGGED;",
        ),
        &[Rule::TableRewrite; 3],
    );
    case(
        E,
        &timed(
            "ALTER TABLE orders ADD COLUMN kind text CHECK (kind <> '');
             ALTER TABLE orders ADD COLUMN parent bigint REFERENCES orders (id);",
        ),
        &[Rule::InlineConstraint; 2],
    );
    // Nullable, or with a constant default: allowed (after a lock timeout).
    case(
        E,
        &timed(
            "ALTER TABLE orders ADD COLUMN note text;
             ALTER TABLE orders ADD COLUMN IF NOT EXISTS tries integer NOT NULL DEFAULT 0;
             ALTER TABLE orders ADD COLUMN origin text NOT NULL DEFAULT 'webhook', ADD COLUMN data jsonb NOT NULL DEFAULT '{}';
             ALTER TABLE processed_webhooks SET (fillfactor = 70);",
        ),
        &[],
    );
}

#[test]
fn locking_statements_need_a_lock_timeout_first() {
    case(
        E,
        "ALTER TABLE processed_webhooks SET (fillfactor = 70);",
        &[Rule::LockTimeout],
    );
    case(
        E,
        "CREATE TRIGGER t BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION f();",
        &[Rule::LockTimeout],
    );
    case(
        E,
        "CREATE TABLE notes (order_id bigint NOT NULL REFERENCES public.orders (id));",
        &[Rule::ForeignKeyLock],
    );
    case(
        E,
        "SET LOCAL lock_timeout = '3s';
         CREATE OR REPLACE TRIGGER t BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION f();
         CREATE TABLE notes (order_id bigint NOT NULL REFERENCES orders (id));
         ALTER TABLE orders ADD COLUMN note text;",
        &[],
    );
    case(
        E,
        "SET lock_timeout TO 5000; ALTER TABLE orders ADD COLUMN note text;",
        &[],
    );
    // Set too late, turned off, or SET LOCAL outside a transaction.
    case(
        E,
        "ALTER TABLE orders ADD COLUMN note text; SET LOCAL lock_timeout = '5s';",
        &[Rule::LockTimeout],
    );
    case(
        E,
        "SET LOCAL lock_timeout = 0; ALTER TABLE orders ADD COLUMN a text;
         SET lock_timeout TO DEFAULT; ALTER TABLE orders ADD COLUMN b text;
         SET lock_timeout = '2s'; RESET lock_timeout; ALTER TABLE orders ADD COLUMN c text;",
        &[Rule::LockTimeout; 3],
    );
    case(
        E,
        "-- no-transaction\nSET LOCAL lock_timeout = '5s'; ALTER TABLE orders ADD COLUMN note text;",
        &[Rule::LockTimeout],
    );
    // A table of this file is free of lock rules, and of the expand rules.
    case(
        E,
        "CREATE TABLE IF NOT EXISTS notes (a int, order_id bigint REFERENCES notes (a));
         ALTER TABLE notes ADD COLUMN b int NOT NULL;
         ALTER TABLE notes ADD CONSTRAINT b_positive CHECK (b > 0);
         ALTER TABLE notes DROP COLUMN a;
         CREATE TRIGGER n BEFORE UPDATE ON notes FOR EACH ROW EXECUTE FUNCTION f();
         CREATE INDEX notes_b ON notes (b);
         DROP INDEX notes_b;
         DROP TABLE notes;",
        &[],
    );
}

#[test]
fn heavy_locks_and_hidden_statements_are_refused() {
    for sql in [
        "VACUUM FULL orders;",
        "VACUUM (FULL, ANALYZE) orders;",
        "CLUSTER orders USING orders_pkey;",
        "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE;",
    ] {
        case(E, &timed(sql), &[Rule::HeavyLock]);
        case(C, &timed(sql), &[Rule::HeavyLock]);
    }
    case(
        E,
        "DO $$ BEGIN EXECUTE 'DROP TABLE orders'; END $$;",
        &[Rule::Opaque],
    );
}

#[test]
fn what_an_expand_migration_may_do() {
    case(
        E,
        "-- Refund notes.
         CREATE TABLE IF NOT EXISTS refund_notes (
             id   bigserial PRIMARY KEY,
             body text NOT NULL DEFAULT '',
             at   timestamptz NOT NULL DEFAULT now()
         );
         CREATE INDEX refund_notes_at ON refund_notes (at);
         CREATE OR REPLACE FUNCTION orders_touch() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             DROP TABLE orders; -- inside a body: not run by the migration
             RETURN NEW;
         END $$;
         CREATE FUNCTION add(a int, b int) RETURNS int LANGUAGE sql
             BEGIN ATOMIC; SELECT CASE WHEN a > 0 THEN a ELSE 0 END + b; END;
         CREATE VIEW open_orders AS SELECT * FROM orders WHERE status = 'pending';
         CREATE TYPE mood AS ENUM ('ok');
         ALTER TYPE mood ADD VALUE 'great';
         CREATE SEQUENCE note_seq;
         INSERT INTO refund_notes (body) VALUES ('DROP TABLE orders; TRUNCATE x');
         COMMENT ON TABLE refund_notes IS 'DELETE FROM everything';
         GRANT SELECT ON refund_notes TO shop;
         UPDATE orders SET version = version WHERE id = 1;
         SELECT 1;",
        &[],
    );
}

#[test]
fn keywords_in_comments_strings_and_bodies_do_not_count() {
    case(
        E,
        "-- DROP TABLE orders;
         /* DROP TABLE orders; /* nested */ still a comment; DROP TABLE x; */
         INSERT INTO notes (body) VALUES ('DROP TABLE orders; it''s'), (E'it\\'s; DROP TABLE orders');
         SELECT \"DROP\", $tag$ $$; DROP TABLE orders; $$ $tag$ FROM t;",
        &[],
    );
    // Lower case is the same SQL.
    case(E, "drop table orders;", &[Rule::Drop]);
    case(
        E,
        "alter table orders add column note text;",
        &[Rule::LockTimeout],
    );
}

#[test]
fn a_contract_migration_drops_under_a_lock_timeout() {
    case(
        C,
        &timed(
            "DROP TRIGGER orders_touch ON orders;
             DROP FUNCTION orders_touch();
             ALTER TABLE payments DROP CONSTRAINT payments_order_id_fkey;
             ALTER TABLE orders DROP COLUMN paid_by, ALTER COLUMN note SET NOT NULL;
             ALTER TABLE orders RENAME COLUMN a TO b;
             ALTER TABLE orders ALTER COLUMN status SET DEFAULT 'new';
             DROP TABLE old_notes;
             TRUNCATE scratch;",
        ),
        &[],
    );
    case(
        C,
        "DROP TRIGGER orders_touch ON orders; ALTER TABLE orders DROP COLUMN paid_by; TRUNCATE scratch;",
        &[Rule::LockTimeout; 3],
    );
    case(
        C,
        &timed("DROP INDEX payments_order_id;"),
        &[Rule::DropIndexNotConcurrent],
    );
    case(
        C,
        "-- no-transaction\nDROP INDEX CONCURRENTLY IF EXISTS payments_order_id;\n",
        &[],
    );
    case(
        C,
        "DROP INDEX CONCURRENTLY payments_order_id;",
        &[Rule::ConcurrentlyAlone],
    );
    case(
        C,
        "-- no-transaction\nDROP INDEX CONCURRENTLY a; DROP INDEX CONCURRENTLY b;",
        &[Rule::ConcurrentlyAlone; 2],
    );
    // The lock rules still hold.
    case(
        C,
        "CREATE INDEX x ON orders (a);",
        &[Rule::IndexNotConcurrent],
    );
    case(
        C,
        &timed("ALTER TABLE orders ADD CONSTRAINT c CHECK (a > 0);"),
        &[Rule::ConstraintValidated],
    );
    case(
        C,
        &timed("ALTER TABLE orders ADD COLUMN x text NOT NULL;"),
        &[Rule::NotNullWithoutDefault],
    );
}

fn file(path: &str, sql: &str) -> MigrationFile {
    let (folder, name) = path.rsplit_once('/').unwrap();
    MigrationFile {
        path: path.into(),
        name: name.into(),
        step: if folder.ends_with("contract") { C } else { E },
        sql: sql.into(),
    }
}

#[test]
fn names_and_versions() {
    let rules_of = |files: &[MigrationFile]| {
        let mut r: Vec<Rule> = check_files(files).iter().map(|v| v.rule).collect();
        r.sort();
        r
    };
    for bad in [
        "migrations/20261220000001_Bad-Name.sql",
        "migrations/2026122_short.sql",
        "migrations/20261220000001_reversible.up.sql",
        "migrations/20261220000001.sql",
        "migrations/contract/20261220000001_.sql",
    ] {
        assert_eq!(
            rules_of(&[file(bad, "SELECT 1;")]),
            [Rule::FileName],
            "{bad}"
        );
    }
    assert_eq!(
        rules_of(&[
            file("migrations/20261220000001_add_notes.sql", "SELECT 1;"),
            file(
                "migrations/contract/20261220000001_drop_notes.sql",
                "SELECT 1;"
            ),
        ]),
        [Rule::DuplicateVersion]
    );
    assert_eq!(
        rules_of(&[file(
            "migrations/contract/20261201000002_late_drop.sql",
            "SELECT 1;"
        )]),
        [Rule::UnderBaseline]
    );
    // The baseline is exempt; a file slipped in under it is not.
    assert_eq!(
        rules_of(&[
            file("migrations/20261201000001_ledger.sql", "DROP TABLE x;"),
            file("migrations/20261201000002_sneaky.sql", "DROP TABLE x;"),
        ]),
        [Rule::Drop, Rule::UnderBaseline]
    );
    assert!(
        rules_of(&[file(
            "migrations/20261220000001_add_notes_2.sql",
            "SELECT 1;"
        )])
        .is_empty()
    );
}

#[test]
fn a_message_names_the_file_the_statement_and_the_rule() {
    let v = check_sql(
        "migrations/20261216000001_one_write_per_order.sql",
        E,
        "-- Until now…\n--\n\nDROP TRIGGER orders_touch ON orders;\n",
    );
    assert_eq!(
        v.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "migrations/20261216000001_one_write_per_order.sql:4: `DROP TRIGGER orders_touch ON orders`: \
          an expand migration may not drop anything (move it to migrations/contract/)"
        ]
    );
    let long = format!("INSERT INTO t VALUES ({});", "1, ".repeat(40) + "1");
    let statement = &split(&long).unwrap()[0];
    assert!(statement.short().chars().count() <= 80);
    assert!(statement.short().ends_with('…'));
}

#[test]
fn the_splitter_keeps_bodies_whole() {
    let sql = "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $body$\nBEGIN\n  PERFORM 1; -- ;\n  RETURN $$x;y$$;\nEND $body$;\n\n/* a ; */ SELECT $1, 'a;b', \"c;d\"\n;\nCREATE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC\n  INSERT INTO t VALUES (1);\n  SELECT CASE WHEN true THEN 1 END;\nEND;";
    let statements = split(sql).unwrap();
    let texts: Vec<&str> = statements.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $body$…$body$",
            "SELECT $1, 'a;b', \"c;d\"",
            "CREATE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC INSERT INTO t VALUES (1); SELECT CASE WHEN true THEN 1 END; END",
        ]
    );
    assert_eq!(
        statements.iter().map(|s| s.line).collect::<Vec<_>>(),
        [1, 7, 9]
    );
    for unclosed in [
        "SELECT 1;\nSELECT 'a;\n",
        "SELECT 1;\nSELECT $$ a;\n",
        "SELECT 1;\n/* a /* b */ SELECT 1;\n",
        "SELECT 1;\nSELECT \"a;\n",
        "SELECT 1;\nCREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1;\n",
    ] {
        assert_eq!(split(unclosed).unwrap_err().0, 2, "{unclosed}");
        assert_eq!(broken(E, unclosed), [Rule::Unreadable], "{unclosed}");
    }
    assert_eq!(
        check_sql("migrations/x.sql", E, "SELECT 'a;")[0].to_string(),
        "migrations/x.sql:1: a string literal is never closed: the file cannot be read as SQL"
    );
}
