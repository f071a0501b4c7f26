//! The PgBouncer pass of `make test` (the Makefile's `POOLED_FILES`, run
//! with `ONCEHOOK_TEST_POOLER=pgbouncer`) covers every binary that uses the
//! database, as the deploy files can run each behind PgBouncer in
//! transaction mode: a new binary, or a file dropped from the list, fails
//! here instead of shipping untested behind the pooler. In that pass every
//! [`TestEnv`] points each binary that uses the database at PgBouncer
//! (any database of the test's server a test names, too) and watches the
//! databases' backends: a binary found connected straight to Postgres
//! fails its test (tests/support/direct.rs). The worker is the exception:
//! the deploy files connect it straight to Postgres
//! (`env::STRAIGHT_TO_POSTGRES`), so the pass runs it straight too, and
//! behind the pooler only where a file asks for it
//! (`TestEnv::pool_worker_too`: database trouble behind the pooler). The
//! last tests here hold the watch and that routing to what they promise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use std::time::Duration;

use oncehook_e2e::env::{DATABASE_BINARIES, STRAIGHT_TO_POSTGRES};
use oncehook_e2e::{TestEnv, eventually};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// How a test file starts each binary that uses the database behind the
/// pooler: a file that contains one of these does. A binary missing here
/// fails [`every_database_binary_runs_in_the_pooled_pass`], naming what to
/// add. The worker goes straight to Postgres in the pass (as the deploy
/// files run it) unless a file puts it behind the pooler.
const STARTED_BY: &[(&str, &[&str])] = &[
    ("oncehook-worker", &["pool_worker_too("]),
    (
        "oncehook-mailer",
        &["\"oncehook-mailer\"", "start_mailer(", ".pipeline("],
    ),
    ("oncehook-notifier", &["\"oncehook-notifier\""]),
    ("oncehook-api", &["Api::start("]),
    ("oncehook-console", &["Console::start("]),
    ("oncehookctl", &[".ctl(", "ctl_ok(", "ctl_json("]),
];

/// The workspace's binaries whose crate turns on the common crate's `db`
/// feature (the store), read from each crate's Cargo.toml.
fn database_binaries() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let crates = std::fs::read_dir(root().join("crates")).expect("read crates/");
    for entry in crates {
        let manifest = entry.expect("a crate folder").path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let uses_db = text
            .lines()
            .any(|l| l.trim_start().starts_with("oncehook-common") && l.contains("\"db\""));
        if !uses_db {
            continue;
        }
        for bin in text.split("[[bin]]").skip(1) {
            let name = bin
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|n| n.trim_matches('"').to_owned())
                .unwrap_or_else(|| panic!("a [[bin]] without a name in {}", manifest.display()));
            found.insert(name);
        }
    }
    found
}

/// The Makefile's `POOLED_FILES`, as make expands it.
fn pooled_files() -> Vec<String> {
    let out = std::process::Command::new("make")
        .args(["-s", "--no-print-directory", "pooled-files"])
        .current_dir(root())
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .output()
        .expect("run make pooled-files");
    assert!(
        out.status.success(),
        "make pooled-files failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_test_support_knows_every_database_binary() {
    let support: BTreeSet<String> = DATABASE_BINARIES.iter().map(|b| (*b).to_owned()).collect();
    assert_eq!(
        support,
        database_binaries(),
        "tests/support/env.rs DATABASE_BINARIES must list exactly the binaries that use the database"
    );
    for bin in STRAIGHT_TO_POSTGRES {
        assert!(
            support.contains(bin),
            "STRAIGHT_TO_POSTGRES names {bin}, which does not use the database"
        );
    }
}

#[test]
fn every_database_binary_runs_in_the_pooled_pass() {
    let files = pooled_files();
    let mut sources = Vec::new();
    for f in &files {
        let path = root().join("tests/tests").join(format!("{f}.rs"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("POOLED_FILES names {f}, but {}: {e}", path.display()));
        sources.push((f.clone(), text));
    }
    let mut missing = Vec::new();
    for bin in database_binaries() {
        let Some((_, markers)) = STARTED_BY.iter().find(|(b, _)| *b == bin) else {
            missing.push(format!(
                "{bin}: say in STARTED_BY ({}) how a test starts it, and add a file that does to the Makefile's POOLED_FILES",
                file!()
            ));
            continue;
        };
        let covered = sources
            .iter()
            .any(|(_, text)| markers.iter().any(|m| text.contains(m)));
        if !covered {
            missing.push(format!(
                "{bin}: no file in POOLED_FILES starts it (looked for {markers:?})"
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "the PgBouncer pass leaves binaries out:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_pooled_pass_keeps_the_files_the_deployments_depend_on() {
    // The files that drive the read side and the operators' tools, which
    // once failed only behind PgBouncer.
    let files = pooled_files();
    for needed in [
        "notify",
        "api",
        "reconciliation",
        "console",
        "console_notify",
        "ops_stats",
        "ops_trace",
        "mail_tls",
        "chaos",
    ] {
        assert!(
            files.iter().any(|f| f == needed),
            "POOLED_FILES lacks {needed}: {files:?}"
        );
    }
    // Every file of the pipeline and of the operators' commands.
    let grouped: Vec<_> = std::fs::read_dir(root().join("tests/tests"))
        .expect("read tests/tests")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".rs")?;
            (stem.starts_with("pipeline_") || stem.starts_with("ops_")).then(|| stem.to_owned())
        })
        .collect();
    assert!(grouped.len() >= 10, "{grouped:?}");
    for p in grouped {
        assert!(files.contains(&p), "POOLED_FILES lacks {p}");
    }
}

/// With the worker put behind the pooler (`TestEnv::pool_worker_too`), a
/// worker started with the test database's own URL (as a test that
/// builds its command by hand would) is found connected straight to
/// Postgres, named with its pid; one started by the environment is not,
/// nor are the test's own connections. Runs behind a PgBouncer of its own
/// in either pass.
#[tokio::test]
async fn a_binary_connected_straight_to_postgres_is_found() {
    let mut env = TestEnv::through_pgbouncer().await;
    // The worker behind the pooler: then one connected straight is wrong.
    env.pool_worker_too();
    let pooled = env.start_worker().await;
    let mut direct = std::process::Command::new(oncehook_e2e::process::bin("oncehook-worker"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.envs())
        .env("ONCEHOOK_METRICS_ADDR", "off")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn a worker by hand");
    let pid = direct.id();
    let found = eventually(
        "the hand-started worker found connected straight to Postgres",
        Duration::from_secs(30),
        || async {
            let found = env.direct_connections().expect("a watch behind PgBouncer");
            (!found.is_empty()).then_some(found)
        },
    )
    .await;
    let _ = direct.kill();
    let _ = direct.wait();
    // A few more looks: the pooled worker is still not among them.
    let looks = env.direct_watch_looks().unwrap_or(0);
    eventually(
        "the watch looked again",
        Duration::from_secs(10),
        || async { (env.direct_watch_looks().unwrap_or(0) > looks + 3).then_some(()) },
    )
    .await;
    let found = env.take_direct_connections().unwrap_or(found);
    assert!(
        found
            .iter()
            .all(|f| f.contains(&format!("oncehook-worker (pid {pid})"))),
        "only the hand-started worker (pid {pid}, the pooled one is {}): {found:#?}",
        pooled.pid()
    );
    assert!(!found.is_empty());
}

/// As the deploy files run it, the worker goes straight to Postgres behind
/// PgBouncer too, and the watch lets it (while the mailer is routed to
/// the pooler); `TestEnv::pool_worker_too` puts it behind the pooler, with
/// `ONCEHOOK_DATABASE_POOLER=transaction`.
#[tokio::test]
async fn the_worker_goes_straight_to_postgres_as_the_deploy_files_run_it() {
    let mut env = TestEnv::through_pgbouncer().await;
    let var = |envs: &[(String, String)], key: &str| {
        envs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    };
    let worker = env.database_envs("oncehook-worker", &[]);
    assert_eq!(
        var(&worker, "ONCEHOOK_DATABASE_URL"),
        Some(env.service_url()),
        "straight to Postgres, as the binaries' role"
    );
    assert_eq!(var(&worker, "ONCEHOOK_DATABASE_POOLER"), None);
    let mailer = env.database_envs("oncehook-mailer", &[]);
    assert_ne!(
        var(&mailer, "ONCEHOOK_DATABASE_URL"),
        Some(env.service_url())
    );
    assert!(!env.pooled("oncehook-worker") && env.pooled("oncehook-mailer"));

    // Named, to find its connections.
    let named = format!("{}?application_name=oncehook_straight", env.database_url);
    let mut worker = env
        .start_consumer(
            "oncehook-worker",
            &[("ONCEHOOK_DATABASE_URL", named.as_str())],
        )
        .await;
    let looks = env.direct_watch_looks().unwrap_or(0);
    eventually(
        "the watch looked at the straight worker's connections",
        Duration::from_secs(10),
        || async { (env.direct_watch_looks().unwrap_or(0) > looks + 3).then_some(()) },
    )
    .await;
    let connected: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oncehook_straight'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("pg_stat_activity");
    assert!(
        connected >= 1,
        "the worker holds connections of its own to Postgres"
    );
    assert_eq!(env.direct_connections(), Some(Vec::new()));
    worker.kill();

    env.pool_worker_too();
    assert!(env.pooled("oncehook-worker"));
    let worker = env.database_envs("oncehook-worker", &[]);
    assert_ne!(
        var(&worker, "ONCEHOOK_DATABASE_URL"),
        Some(env.service_url())
    );
    assert_eq!(
        var(&worker, "ONCEHOOK_DATABASE_POOLER").as_deref(),
        Some("transaction")
    );
}

/// Behind PgBouncer a binary pointed at a database of the test's own, as
/// another user, with a session setting (`options=-c …`), gets a URL of
/// PgBouncer for the same database and user, the setting applied by the
/// pooler (a database alias whose server connections run `SET` when they
/// open); another server's URL is left alone, and `oncehookctl migrate`
/// goes straight to Postgres.
#[tokio::test]
async fn behind_pgbouncer_every_database_url_of_the_server_is_routed() {
    let mut env = TestEnv::through_pgbouncer().await;
    let role = format!("oncehook_route_{}", env.id);
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE ROLE {role} LOGIN")))
        .execute(&env.pool)
        .await
        .expect("create role");
    let own = env
        .database_url
        .replacen("postgres@", &format!("{role}@"), 1)
        + "?options=-c%20lock_timeout%3D321ms&application_name=oncehook_route";
    env.set_env("ONCEHOOK_DATABASE_URL", &own);
    let url_of = |envs: Vec<(String, String)>| {
        envs.into_iter()
            .find(|(k, _)| k == "ONCEHOOK_DATABASE_URL")
            .map(|(_, v)| v)
            .expect("a database URL")
    };
    let routed = url_of(env.database_envs("oncehookctl", &["stats"]));
    assert!(!routed.contains(":5432/"), "{routed}");
    assert!(routed.contains(&format!("{role}@")), "{routed}");
    assert!(
        routed.contains("application_name=oncehook_route"),
        "{routed}"
    );
    assert!(!routed.contains("options="), "{routed}");
    let migrate = url_of(env.database_envs("oncehookctl", &["migrate"]));
    assert_eq!(migrate, own, "migrate goes straight to Postgres");
    let elsewhere = "postgres://postgres@127.0.0.1:1/nowhere";
    env.set_env("ONCEHOOK_DATABASE_URL", elsewhere);
    assert_eq!(url_of(env.database_envs("oncehook-worker", &[])), elsewhere);

    // The setting and the user hold through the pooler.
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&routed)
        .await
        .expect("connect through pgbouncer as the role");
    // In a transaction: the server connection is this client's throughout.
    let mut tx = sqlx::Connection::begin(&mut conn).await.expect("begin");
    let (user, timeout): (String, String) =
        sqlx::query_as("SELECT current_user::text, current_setting('lock_timeout')")
            .fetch_one(&mut *tx)
            .await
            .expect("ask through pgbouncer");
    tx.commit().await.expect("commit");
    assert_eq!((user.as_str(), timeout.as_str()), (role.as_str(), "321ms"));
    let _ = sqlx::Connection::close(conn).await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP ROLE {role}")))
        .execute(&env.pool)
        .await;
}
