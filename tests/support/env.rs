//! [`TestEnv`]: one test's isolated world — a fresh database, a unique AMQP
//! prefix, a temp folder with the config file and mail folder — plus helpers
//! to start the binaries, sign and post webhooks, and clean up afterwards.

use std::path::PathBuf;
use std::time::Duration;

use oncehook_gateways::Gateway;
use oncehook_gateways::sample::{self, SampleSpec, SignedDelivery};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::direct::{DirectWatch, Watched};
use crate::process::Proc;

/// The secrets the test configuration gives each source.
pub struct Secrets;

impl Secrets {
    pub const RAZORPAY: &'static str = "rzp_test_webhook_secret";
    pub const RAZORPAY_OLD: &'static str = "rzp_old_webhook_secret";
    /// The secret of `razorpay_second`, a second Razorpay account.
    pub const RAZORPAY_SECOND_ACCOUNT: &'static str = "rzp_second_account_secret";
    pub const CASHFREE: &'static str = "cf_test_client_secret";
    pub const PAYU: &'static str = "payu_test_salt";
    pub const STRIPE: &'static str = "whsec_test_stripe_endpoint";
    /// base64("oncehook standard test key 32b!!")
    pub const STANDARD: &'static str = "whsec_b25jZWhvb2sgc3RhbmRhcmQgdGVzdCBrZXkgMzJiISE=";

    /// The first (signing) secret of the source named like its gateway.
    pub fn for_gateway(g: Gateway) -> &'static str {
        match g {
            Gateway::Razorpay => Self::RAZORPAY,
            Gateway::Cashfree => Self::CASHFREE,
            Gateway::Payu => Self::PAYU,
            Gateway::Stripe => Self::STRIPE,
            Gateway::Standard => Self::STANDARD,
            other => panic!("no test source for gateway {other}: add its secret here"),
        }
    }
}

/// The schema a test database starts with.
#[derive(Debug, Clone, Copy)]
enum Schema {
    /// Both steps of every migration: a finished release's.
    Finished,
    /// Both steps up to a version.
    BothTo(i64),
    /// The expand step up to a version.
    ExpandTo(i64),
}

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The URL of the server's administrative database: `ONCEHOOK_TEST_ADMIN_URL`,
/// or the local Postgres.
fn admin_url() -> String {
    std::env::var("ONCEHOOK_TEST_ADMIN_URL").unwrap_or_else(|_| ADMIN_URL.to_owned())
}

/// One test's isolated environment. Dropping it drops the database, deletes
/// the queues and exchanges and removes the folder (kept, with the logs
/// printed, when the test failed).
pub struct TestEnv {
    pub id: String,
    pub db_name: String,
    pub database_url: String,
    pub prefix: String,
    pub dir: PathBuf,
    pub mail_dir: PathBuf,
    pub config_path: PathBuf,
    pub pool: PgPool,
    pub http: reqwest::Client,
    /// The broker the binaries and the helpers use: the system node, or a
    /// cluster's URL list ([`TestEnv::use_broker`]).
    pub amqp_urls: String,
    extra_env: Vec<(String, String)>,
    spawned: usize,
    /// The processes [`TestEnv::spawn`] started, for [`DirectWatch`].
    spawned_pids: crate::direct::Spawned,
    /// PgBouncer in front of the database, when the run asks for one
    /// (`ONCEHOOK_TEST_POOLER=pgbouncer`): every binary that uses the
    /// database goes through it but [`STRAIGHT_TO_POSTGRES`] (unless
    /// [`TestEnv::pool_worker_too`]) and `oncehookctl migrate`; the test's
    /// own pool and connections go straight to Postgres.
    pooler: Option<crate::pgbouncer::PgBouncer>,
    /// [`TestEnv::pool_worker_too`]: [`STRAIGHT_TO_POSTGRES`] behind the
    /// pooler as well (shared with the watch, which then flags them).
    pool_straight: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// With a pooler: the watch that fails the test when one of its
    /// binaries connected straight to Postgres.
    watch: Option<DirectWatch>,
}

/// The binaries that use the database: behind PgBouncer in the pooler
/// pass (`ONCEHOOK_TEST_POOLER=pgbouncer`), as the deploy files can run
/// every one of them, but [`STRAIGHT_TO_POSTGRES`].
/// `tests/tests/pooled_pass.rs` holds it to the workspace's binaries.
pub const DATABASE_BINARIES: [&str; 6] = [
    "oncehook-worker",
    "oncehook-mailer",
    "oncehook-notifier",
    "oncehook-api",
    "oncehook-console",
    "oncehookctl",
];

/// The binaries the deploy files connect straight to PostgreSQL even where
/// PgBouncer runs, because the pooler costs them (deploy/README.md,
/// "Database connections"): the worker, whose few connections are always
/// in a transaction, keeps its statements prepared and its generic plans
/// only on a connection of its own. The pooled pass runs them straight too,
/// as shipped; [`TestEnv::pool_worker_too`] puts them behind the pooler (a
/// configuration docs/configuration.md still supports). The API, the
/// console and `oncehookctl` reach Postgres straight in the deploy files as
/// well, with small pools of their own; the pooled pass keeps them behind
/// PgBouncer, where docs/operations.md says they may run, since the first
/// pass runs them straight already. `tests/tests/deploy_files.rs` holds the
/// deploy files to this list.
pub const STRAIGHT_TO_POSTGRES: [&str; 1] = ["oncehook-worker"];

/// Every binary of the workspace: ingest (the one without a database) and
/// [`DATABASE_BINARIES`]. `tests/tests/release.rs` holds it to the
/// workspace's targets.
pub fn binaries() -> Vec<&'static str> {
    std::iter::once("oncehook-ingest")
        .chain(DATABASE_BINARIES)
        .collect()
}

impl TestEnv {
    /// A fresh environment; the service binaries go through PgBouncer when
    /// the run asks for it (`ONCEHOOK_TEST_POOLER=pgbouncer`).
    pub async fn new() -> TestEnv {
        TestEnv::build(crate::pgbouncer::wanted(), Schema::Finished).await
    }

    /// A fresh environment whose database has both steps' migrations up to
    /// `version` (a release that finished its roll, e.g. 0.6.0's last):
    /// the schema that release ran on once its contract step was applied.
    pub async fn at_finished_release(version: i64) -> TestEnv {
        TestEnv::build(crate::pgbouncer::wanted(), Schema::BothTo(version)).await
    }

    /// A fresh environment whose database has the expand migrations up to
    /// `version` only: the schema an older release ran on
    /// (tests/tests/rollout.rs rolls a release over it).
    pub async fn at_schema(version: i64) -> TestEnv {
        TestEnv::build(crate::pgbouncer::wanted(), Schema::ExpandTo(version)).await
    }

    /// A fresh environment whose binaries that use the database always go
    /// through a PgBouncer in transaction mode, as in the PgBouncer pass:
    /// the worker straight to Postgres, as the deploy files run it, unless
    /// [`TestEnv::pool_worker_too`].
    pub async fn through_pgbouncer() -> TestEnv {
        TestEnv::build(true, Schema::Finished).await
    }

    async fn build(pgbouncer: bool, schema: Schema) -> TestEnv {
        let id = uuid::Uuid::new_v4().simple().to_string()[..10].to_owned();
        let db_name = format!("oncehook_t_{id}");
        let admin_url = admin_url();
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&admin_url)
            .await
            .unwrap_or_else(|e| {
                panic!("connect to Postgres at {admin_url} (is it running? `make services`): {e}")
            });
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE \"{db_name}\""
        )))
        .execute(&admin)
        .await
        .expect("create test database");
        admin.close().await;
        let database_url = postgres_url(&admin_url, None, &db_name);
        let pool = PgPoolOptions::new()
            .max_connections(5)
            .connect(&database_url)
            .await
            .expect("connect to the test database");
        // The binaries' role first: the migrations grant it its privileges.
        let owner = oncehook_common::store::Pooled::new(
            pool.clone(),
            oncehook_common::config::Pooler::None,
        );
        oncehook_common::store::scope::ensure_service_role(&owner)
            .await
            .expect("create the binaries' database role");
        // Both steps: the tests run the schema a finished release runs on.
        match schema {
            Schema::Finished => {
                oncehook_common::store::schema::both_steps()
                    .run(&pool)
                    .await
            }
            Schema::BothTo(version) => {
                oncehook_common::store::schema::both_steps()
                    .run_to(version, &pool)
                    .await
            }
            Schema::ExpandTo(version) => {
                oncehook_common::store::schema::MIGRATOR
                    .run_to(version, &pool)
                    .await
            }
        }
        .expect("migrate the test database");

        let dir = std::env::temp_dir().join(format!("oncehook-test-{id}"));
        let mail_dir = dir.join("mail");
        std::fs::create_dir_all(&mail_dir).expect("create test folder");
        let config_path = dir.join("oncehook.toml");
        std::fs::write(&config_path, config_toml()).expect("write test config");
        let pooler = pgbouncer.then(|| crate::pgbouncer::PgBouncer::start(&dir, &database_url));
        let spawned_pids = crate::direct::Spawned::default();
        let pool_straight = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = pooler.as_ref().map(|p| {
            DirectWatch::start(Watched {
                admin_url: admin_url.clone(),
                db_name: db_name.clone(),
                server_port: postgres_host_port(&database_url).1,
                pooler_pid: p.pid(),
                spawned: spawned_pids.clone(),
                straight: &STRAIGHT_TO_POSTGRES,
                pool_straight: pool_straight.clone(),
            })
        });
        TestEnv {
            pooler,
            pool_straight,
            watch,
            spawned_pids,
            prefix: format!("t_{id}"),
            id,
            db_name,
            database_url,
            dir,
            mail_dir,
            config_path,
            pool,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .expect("http client"),
            amqp_urls: crate::broker::AMQP_URL.to_owned(),
            extra_env: Vec::new(),
            spawned: 0,
        }
    }

    /// Uses the broker at `urls` (one URL or a cluster's comma-separated
    /// list) for every binary started afterwards and for the helpers.
    pub fn use_broker(&mut self, urls: &str) {
        self.amqp_urls = urls.to_owned();
    }

    /// Adds an environment variable for every binary started afterwards.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.extra_env.retain(|(k, _)| k != key);
        self.extra_env.push((key.to_owned(), value.to_owned()));
    }

    /// Puts the worker (every binary of [`STRAIGHT_TO_POSTGRES`]) behind
    /// this environment's PgBouncer too, for every binary started
    /// afterwards: with `ONCEHOOK_DATABASE_POOLER=transaction` unless the
    /// test sets that variable itself. Without a PgBouncer (a run without
    /// `ONCEHOOK_TEST_POOLER=pgbouncer` and not
    /// [`TestEnv::through_pgbouncer`]) it changes nothing. From then on the
    /// watch fails the test when a worker reaches Postgres straight.
    ///
    /// For the bench's comparison with the configuration the deploy files
    /// left behind, and for the tests that keep that configuration working
    /// (tests/tests/pooler.rs). A spawn whose `extra` names
    /// `ONCEHOOK_DATABASE_POOLER` puts that one binary behind the pooler
    /// the same way, with the value given.
    pub fn pool_worker_too(&mut self) {
        self.pool_straight
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether `bin` (started now) reaches the database through this
    /// environment's PgBouncer: `false` without one, for
    /// [`STRAIGHT_TO_POSTGRES`] unless [`TestEnv::pool_worker_too`], and
    /// for a binary that does not use the database.
    pub fn pooled(&self, bin: &str) -> bool {
        self.pooler.is_some() && DATABASE_BINARIES.contains(&bin) && !self.straight(bin, &[])
    }

    /// Whether `bin` goes straight to Postgres although a PgBouncer runs:
    /// [`STRAIGHT_TO_POSTGRES`], unless [`TestEnv::pool_worker_too`] or the
    /// spawn's `explicit` environment names `ONCEHOOK_DATABASE_POOLER`.
    fn straight(&self, bin: &str, explicit: &[(&str, &str)]) -> bool {
        STRAIGHT_TO_POSTGRES.contains(&bin)
            && !self.pool_straight.load(std::sync::atomic::Ordering::SeqCst)
            && !explicit
                .iter()
                .any(|(k, _)| *k == "ONCEHOOK_DATABASE_POOLER")
    }

    /// PgBouncer's counters for this test's database (`SHOW STATS` on its
    /// admin console): total transactions and queries it passed on; `None`
    /// without a PgBouncer.
    pub fn pooler_counts(&self) -> Option<(u64, u64)> {
        self.pooler.as_ref().map(|p| p.counts(&self.db_name))
    }

    /// How many of PgBouncer's clients of this test's database are named
    /// `application_name` now (`SHOW CLIENTS`); `None` without a PgBouncer.
    pub fn pooler_clients_named(&self, application_name: &str) -> Option<usize> {
        self.pooler
            .as_ref()
            .map(|p| p.clients_named(&self.db_name, application_name))
    }

    /// Behind PgBouncer: the connections a binary of this test opened
    /// straight to Postgres so far (one sentence each), which fail the
    /// test when the environment is dropped; `None` without a PgBouncer.
    pub fn direct_connections(&self) -> Option<Vec<String>> {
        self.watch.as_ref().map(DirectWatch::found)
    }

    /// Like [`TestEnv::direct_connections`], forgetting them: for a test
    /// that connects straight to Postgres on purpose.
    pub fn take_direct_connections(&self) -> Option<Vec<String>> {
        self.watch.as_ref().map(DirectWatch::take)
    }

    /// How many times the watch behind [`TestEnv::direct_connections`] has
    /// looked at the databases' backends.
    pub fn direct_watch_looks(&self) -> Option<u64> {
        self.watch.as_ref().map(DirectWatch::looks)
    }

    /// The environment of a binary that uses the database: [`TestEnv::envs`],
    /// through PgBouncer in transaction mode when the run asks for it, but
    /// for [`STRAIGHT_TO_POSTGRES`] (as the deploy files run them; see
    /// [`TestEnv::pool_worker_too`]). `oncehookctl migrate` always goes
    /// straight to Postgres (a migration holds a session-level lock; the
    /// deploy files' migrate job does the same).
    pub fn database_envs(&self, bin: &str, args: &[&str]) -> Vec<(String, String)> {
        let mut envs = self.envs();
        self.as_service(&mut envs, bin, args);
        self.route(&mut envs, bin, args, &[]);
        envs
    }

    /// The test database as the binaries' role sees it
    /// ([`SERVICE_ROLE`](oncehook_common::store::scope::SERVICE_ROLE): no
    /// table of its own, row-level security applies).
    pub fn service_url(&self) -> String {
        service_url(&self.database_url)
    }

    /// Points `bin` (a binary of this build that uses the database) at the
    /// test database as the binaries' role, as the deploy files run them;
    /// `oncehookctl migrate` stays the tables' owner. A URL a test set
    /// itself (another database, a user of its own) is left alone, and so
    /// is an older release's binary ([`TestEnv::spawn_from`]): during a
    /// roll the previous release keeps connecting as the owner.
    fn as_service(&self, envs: &mut Vec<(String, String)>, bin: &str, args: &[&str]) {
        let migrate = bin == "oncehookctl" && args.first() == Some(&"migrate");
        if !DATABASE_BINARIES.contains(&bin) || migrate {
            return;
        }
        let url = envs
            .iter()
            .find(|(k, _)| k == "ONCEHOOK_DATABASE_URL")
            .map(|(_, v)| v.clone());
        if url.as_deref() == Some(self.database_url.as_str()) {
            put(envs, "ONCEHOOK_DATABASE_URL", self.service_url());
        }
    }

    /// Behind PgBouncer, points `bin` (a binary that uses the database,
    /// but for `oncehookctl migrate` and, as the deploy files run them,
    /// [`STRAIGHT_TO_POSTGRES`] unless [`TestEnv::pool_worker_too`] or
    /// `explicit` names `ONCEHOOK_DATABASE_POOLER`) at it: whatever database of the test's
    /// Postgres server its `ONCEHOOK_DATABASE_URL` names — the test's,
    /// or one of a test's own ([`TestEnv::set_env`], a spawn's `extra`),
    /// as the same user with the same settings ([`PgBouncer::url_for`]) —
    /// and sets `ONCEHOOK_DATABASE_POOLER=transaction` unless the test
    /// set it (`explicit`, then `set_env`). A URL of another server (a
    /// stand-in, a port nothing listens on) is left alone.
    ///
    /// [`PgBouncer::url_for`]: crate::pgbouncer::PgBouncer::url_for
    fn route(
        &self,
        envs: &mut Vec<(String, String)>,
        bin: &str,
        args: &[&str],
        explicit: &[(&str, &str)],
    ) {
        let Some(pooler) = self.pooler.as_ref() else {
            return;
        };
        let migrate = bin == "oncehookctl" && args.first() == Some(&"migrate");
        if !DATABASE_BINARIES.contains(&bin) || migrate || self.straight(bin, explicit) {
            return;
        }
        let Some(url) = envs
            .iter()
            .find(|(k, _)| k == "ONCEHOOK_DATABASE_URL")
            .map(|(_, v)| v.clone())
        else {
            return;
        };
        if postgres_host_port(&url) != postgres_host_port(&self.database_url) {
            return;
        }
        put(envs, "ONCEHOOK_DATABASE_URL", pooler.url_for(&url));
        let pooler_set = explicit
            .iter()
            .any(|(k, _)| *k == "ONCEHOOK_DATABASE_POOLER")
            || self
                .extra_env
                .iter()
                .any(|(k, _)| k == "ONCEHOOK_DATABASE_POOLER");
        if !pooler_set {
            put(envs, "ONCEHOOK_DATABASE_POOLER", "transaction");
        }
    }

    /// The environment every binary gets.
    pub fn envs(&self) -> Vec<(String, String)> {
        let mut envs: Vec<(String, String)> = [
            ("ONCEHOOK_CONFIG", self.config_path.display().to_string()),
            ("ONCEHOOK_DATABASE_URL", self.database_url.clone()),
            ("ONCEHOOK_AMQP_URL", self.amqp_urls.clone()),
            ("ONCEHOOK_AMQP_PREFIX", self.prefix.clone()),
            ("ONCEHOOK_MAIL_DIR", self.mail_dir.display().to_string()),
            ("ONCEHOOK_LOG", "info".to_owned()),
            ("ONCEHOOK_DELIVERY_LIMIT", "5".to_owned()),
            // An event for an order that never comes is dead-lettered within
            // seconds; tests of waiting (parked events, permutations) set
            // it longer with `set_env`.
            ("ONCEHOOK_UNLINKED_TTL", "2s".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        // Runs the suite with another batch size, e.g. without group commit:
        // `ONCEHOOK_TEST_WORKER_BATCH_SIZE=1`.
        if let Ok(size) = std::env::var("ONCEHOOK_TEST_WORKER_BATCH_SIZE") {
            envs.push(("ONCEHOOK_WORKER_BATCH_SIZE".to_owned(), size));
        }
        // The bench raises every source's rate at the door
        // (`ONCEHOOK_TEST_INGEST_RATE_PER_SECOND`), so that the limit does
        // not cap what it measures; the limiter still runs.
        if let Ok(rate) = std::env::var("ONCEHOOK_TEST_INGEST_RATE_PER_SECOND") {
            envs.push(("ONCEHOOK_INGEST_RATE_PER_SECOND".to_owned(), rate));
        }
        for (k, v) in &self.extra_env {
            put(&mut envs, k, v.as_str());
        }
        envs
    }

    /// Starts a binary with the environment plus `extra`; output goes to a log in the test folder.
    /// A service binary gets a metrics listener on a free loopback port
    /// unless `extra` names one (the per-binary defaults would collide
    /// between tests running in parallel); [`Proc::metrics`] says where.
    pub fn spawn(&mut self, bin: &str, extra: &[(&str, &str)], args: &[&str]) -> Proc {
        self.spawn_from(&crate::process::bin_dir(), bin, extra, args)
    }

    /// [`TestEnv::spawn`] with the binary taken from `dir` (a baseline
    /// build beside the one under test).
    pub fn spawn_from(
        &mut self,
        dir: &std::path::Path,
        bin: &str,
        extra: &[(&str, &str)],
        args: &[&str],
    ) -> Proc {
        const SERVICES: [&str; 4] = [
            "oncehook-ingest",
            "oncehook-worker",
            "oncehook-mailer",
            "oncehook-notifier",
        ];
        let mut envs = self.envs();
        for (k, v) in extra {
            put(&mut envs, k, *v);
        }
        if dir == crate::process::bin_dir() {
            self.as_service(&mut envs, bin, args);
        }
        self.route(&mut envs, bin, args, extra);
        let straight = self.straight(bin, extra);
        let mut metrics = None;
        if SERVICES.contains(&bin) {
            match envs.iter().find(|(k, _)| k == "ONCEHOOK_METRICS_ADDR") {
                Some((_, v)) if v == "off" => {}
                Some((_, v)) => metrics = Some(format!("http://{v}")),
                None => {
                    let addr = format!("127.0.0.1:{}", crate::free_port());
                    metrics = Some(format!("http://{addr}"));
                    envs.push(("ONCEHOOK_METRICS_ADDR".to_owned(), addr));
                }
            }
        }
        self.spawned += 1;
        let log = self.dir.join(format!("{:02}-{bin}.log", self.spawned));
        let program = dir.join(bin);
        assert!(
            program.exists(),
            "{} is missing: build it first",
            program.display()
        );
        let name = format!("{bin} (log {})", log.display());
        let mut proc = Proc::spawn_program(&program.display().to_string(), bin, log, &envs, args);
        proc.metrics = metrics;
        if let Ok(mut pids) = self.spawned_pids.lock() {
            pids.push(crate::direct::SpawnedProc {
                pid: proc.pid(),
                name,
                straight,
            });
        }
        proc
    }

    /// Starts ingest on a free port and waits until it is ready; returns it and its base URL.
    pub async fn start_ingest(&mut self) -> (Proc, String) {
        let (proc, url) = self.spawn_ingest(&[]);
        self.wait_ready(proc.metrics_url(), "/readyz").await;
        (proc, url)
    }

    /// Starts ingest without waiting.
    pub fn spawn_ingest(&mut self, extra: &[(&str, &str)]) -> (Proc, String) {
        let addr = format!("127.0.0.1:{}", crate::free_port());
        self.spawn_ingest_at(&addr, extra)
    }

    /// Starts ingest on `addr` (e.g. to restart it on the same port) without waiting.
    pub fn spawn_ingest_at(&mut self, addr: &str, extra: &[(&str, &str)]) -> (Proc, String) {
        let mut all = vec![("ONCEHOOK_INGEST_ADDR", addr)];
        all.extend_from_slice(extra);
        let proc = self.spawn("oncehook-ingest", &all, &[]);
        (proc, format!("http://{addr}"))
    }

    /// Starts a worker and waits until its consumer is up.
    pub async fn start_worker(&mut self) -> Proc {
        self.start_consumer("oncehook-worker", &[]).await
    }

    /// Starts a mailer (file transport unless `ONCEHOOK_SMTP_URL` is set) and waits for it.
    pub async fn start_mailer(&mut self) -> Proc {
        self.start_consumer("oncehook-mailer", &[]).await
    }

    /// Starts a consuming binary and waits for its `/readyz`.
    pub async fn start_consumer(&mut self, bin: &str, extra: &[(&str, &str)]) -> Proc {
        let proc = self.spawn(bin, extra, &[]);
        self.wait_ready(proc.metrics_url(), "/readyz").await;
        proc
    }

    /// Polls `base + path` until it answers 200 (20 s).
    pub async fn wait_ready(&self, base: &str, path: &str) {
        let url = format!("{base}{path}");
        crate::eventually(
            &format!("{url} to answer 200"),
            Duration::from_secs(20),
            || async {
                match self.http.get(&url).send().await {
                    Ok(r) if r.status().as_u16() == 200 => Some(()),
                    _ => None,
                }
            },
        )
        .await;
    }

    /// Waits (30 s) until `P.events` and every bulk lane are empty:
    /// everything processed and acked.
    pub async fn wait_events_drained(&self) {
        crate::eventually("events queues drained", Duration::from_secs(30), || async {
            let depth = crate::broker::events_depth_on(&self.amqp_urls, &self.prefix).await;
            (depth == Some(0)).then_some(())
        })
        .await;
    }

    /// Runs `oncehookctl` with `args`; returns (exit code, stdout, stderr).
    pub async fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        self.ctl_from(&crate::process::bin_dir(), args).await
    }

    /// [`TestEnv::ctl`] with the binary taken from `dir` (another release's
    /// build beside the one under test).
    pub async fn ctl_from(&self, dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
        let out = tokio::process::Command::new(dir.join("oncehookctl"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.database_envs("oncehookctl", args))
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .expect("run oncehookctl");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A sample spec for `order_ref` paid with `payment_id`, timestamped now.
    pub fn spec(
        &self,
        order_ref: &str,
        payment_id: &str,
        event_id: &str,
        amount_minor: i64,
    ) -> SampleSpec {
        SampleSpec {
            order_ref: order_ref.to_owned(),
            payment_id: payment_id.to_owned(),
            event_id: event_id.to_owned(),
            amount_minor,
            currency: "INR".to_owned(),
            email: "customer@example.com".to_owned(),
            timestamp: time::OffsetDateTime::now_utc().unix_timestamp(),
            // PayU samples carry sample::SAMPLE_PAYU_KEY, the payu source's merchant_key.
            merchant_key: None,
        }
    }

    /// A delivery signed with the gateway's test secret.
    pub fn sign(&self, gateway: Gateway, event: &str, spec: &SampleSpec) -> SignedDelivery {
        sample::build(gateway, event, spec, Secrets::for_gateway(gateway)).expect("build sample")
    }

    /// A Razorpay `payment.captured` of 500.00 INR for `order_ref` (which
    /// may not exist), signed with the test secret.
    pub fn captured(&self, order_ref: &str, payment_id: &str, event_id: &str) -> SignedDelivery {
        self.sign(
            Gateway::Razorpay,
            "payment.captured",
            &self.spec(order_ref, payment_id, event_id, 50_000),
        )
    }

    /// POSTs `delivery` to `/webhooks/{source}`; returns (status, body), status 0 if the request failed.
    pub async fn post(&self, base: &str, source: &str, delivery: &SignedDelivery) -> (u16, String) {
        send(&self.http, &format!("{base}/webhooks/{source}"), delivery).await
    }

    /// POSTs `delivery` to `/webhooks/{source}` and insists on a 200.
    pub async fn post_ok(&self, base: &str, source: &str, delivery: &SignedDelivery) {
        let (status, body) = self.post(base, source, delivery).await;
        assert_eq!(status, 200, "{source}: {body}");
    }

    /// Like [`TestEnv::post`] on a connection of its own, for requests the
    /// server refuses early (it may close that connection afterwards).
    pub async fn post_fresh(
        &self,
        base: &str,
        source: &str,
        delivery: &SignedDelivery,
    ) -> (u16, String) {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(15))
            .build()
            .expect("http client");
        send(&http, &format!("{base}/webhooks/{source}"), delivery).await
    }

    /// POSTs the same delivery `n` times, all at once.
    pub async fn post_concurrently(
        &self,
        base: &str,
        source: &str,
        delivery: &SignedDelivery,
        n: usize,
    ) -> Vec<(u16, String)> {
        self.post_all(base, source, vec![delivery.clone(); n], n)
            .await
    }

    /// Posts every delivery, `concurrency` at a time; the answers in no
    /// particular order.
    pub async fn post_all(
        &self,
        base: &str,
        source: &str,
        deliveries: Vec<SignedDelivery>,
        concurrency: usize,
    ) -> Vec<(u16, String)> {
        let n = deliveries.len();
        let queue = std::sync::Arc::new(std::sync::Mutex::new(deliveries));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency.clamp(1, n.max(1)) {
            let (http, url, queue) = (
                self.http.clone(),
                format!("{base}/webhooks/{source}"),
                queue.clone(),
            );
            tasks.spawn(async move {
                let mut answers = Vec::new();
                loop {
                    let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                    let Some(d) = next else { break };
                    answers.push(send(&http, &url, &d).await);
                }
                answers
            });
        }
        let mut out = Vec::with_capacity(n);
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok(answers) => out.extend(answers),
                Err(_) => out.push((0, "task panicked".to_owned())),
            }
        }
        out
    }

    /// `.eml` files written by the file transport.
    pub fn mail_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.mail_dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "eml"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    /// A scalar `count(*)`-style query.
    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn print_logs(&self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut logs: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!("----- {} (last {} lines) -----", log.display(), tail.len());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // Before the databases go: the watch's last look.
        let direct = self.watch.take().map(DirectWatch::stop).unwrap_or_default();
        let direct_failure = !direct.is_empty() && !std::thread::panicking();
        if std::thread::panicking() || direct_failure {
            self.print_logs();
            eprintln!("test folder kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        let db_name = self.db_name.clone();
        let prefix = self.prefix.clone();
        let amqp_urls = self.amqp_urls.clone();
        // Cleanup needs async I/O; run it on a runtime of its own. The test's
        // pool belongs to the test's (now blocked) runtime: leave it alone,
        // `WITH (FORCE)` ends its sessions.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(admin) = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&admin_url())
                    .await
                {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS \"{db_name}\" WITH (FORCE)"
                    )))
                    .execute(&admin)
                    .await;
                }
                crate::broker::delete_topology_on(&amqp_urls, &prefix).await;
            });
        })
        .join();
        if !direct.is_empty() {
            let text = format!(
                "the PgBouncer pass: a binary of this test reached PostgreSQL without the pooler \
                 (route it through TestEnv::spawn/ctl/database_envs):\n{}",
                direct.join("\n")
            );
            if direct_failure {
                panic!("{text}");
            }
            eprintln!("{text}");
        }
    }
}

/// POSTs `delivery` (its headers and body) to `url`; returns (status, body),
/// status 0 if the request failed.
pub async fn send(http: &reqwest::Client, url: &str, delivery: &SignedDelivery) -> (u16, String) {
    let mut req = http.post(url).body(delivery.body.clone());
    for (name, value) in delivery.headers.iter() {
        req = req.header(name, value);
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap_or_default())
        }
        Err(e) => (0, format!("request failed: {e}")),
    }
}

/// `delivery` with header `name` set to `value` (replacing the one it had).
pub fn with_header(delivery: &SignedDelivery, name: &str, value: &str) -> SignedDelivery {
    let mut copy = delivery.clone();
    copy.headers = delivery
        .headers
        .iter()
        .filter(|(n, _)| *n != name)
        .chain(std::iter::once((name, value)))
        .collect();
    copy
}

fn config_toml() -> String {
    config_toml_with(&[])
}

/// The test config, with a `[source.api]` table after each source named
/// in `apis` (`(source name, table)`).
fn config_toml_with(apis: &[(&str, String)]) -> String {
    let api = |name: &str| {
        apis.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    format!(
        r#"
[[source]]
name = "razorpay"
gateway = "razorpay"
secrets = ["{rzp}", "{rzp_old}"]
{rzp_api}
[[source]]
name = "cashfree"
gateway = "cashfree"
secrets = ["{cf}"]
tolerance_secs = 300
{cf_api}
[[source]]
name = "payu"
gateway = "payu"
secrets = ["{payu}"]
merchant_key = "{payu_key}"
{payu_api}
[[source]]
name = "stripe"
gateway = "stripe"
secrets = ["{stripe}"]
tolerance_secs = 300
{stripe_api}
[[source]]
name = "standard"
gateway = "standard"
secrets = ["{std}"]
tolerance_secs = 300

[[source]]
name = "razorpay_second"
gateway = "razorpay"
secrets = ["{rzp_second}"]
"#,
        rzp = Secrets::RAZORPAY,
        rzp_old = Secrets::RAZORPAY_OLD,
        cf = Secrets::CASHFREE,
        payu = Secrets::PAYU,
        payu_key = sample::SAMPLE_PAYU_KEY,
        stripe = Secrets::STRIPE,
        std = Secrets::STANDARD,
        rzp_second = Secrets::RAZORPAY_SECOND_ACCOUNT,
        rzp_api = api("razorpay"),
        cf_api = api("cashfree"),
        payu_api = api("payu"),
        stripe_api = api("stripe"),
    )
}

impl TestEnv {
    /// Points the sources `razorpay`, `cashfree`, `payu` and `stripe` at
    /// these gateway API stand-ins (`[source.api]`), for every binary
    /// started afterwards.
    pub fn use_gateway_apis(&self, apis: &[&crate::gateway_api::GatewayApi]) {
        let tables: Vec<(&str, String)> = apis
            .iter()
            .map(|a| (a.gateway.as_str(), a.source_api_toml()))
            .collect();
        std::fs::write(&self.config_path, config_toml_with(&tables)).expect("write test config");
    }

    /// Points the sources as [`TestEnv::use_gateway_apis`] does, and the
    /// second Razorpay account (`razorpay_second`) at `second`.
    pub fn use_gateway_apis_and_second_razorpay(
        &self,
        apis: &[&crate::gateway_api::GatewayApi],
        second: &crate::gateway_api::GatewayApi,
    ) {
        self.use_gateway_apis(apis);
        // `razorpay_second` is the file's last [[source]]: a table written
        // straight after it is its own.
        self.append_config(&second.source_api_toml());
    }
}

impl TestEnv {
    /// Adds `toml` to the test configuration, for every binary started afterwards.
    pub fn append_config(&self, toml: &str) {
        let mut text = std::fs::read_to_string(&self.config_path).expect("test config");
        text.push('\n');
        text.push_str(toml);
        std::fs::write(&self.config_path, text).expect("write test config");
    }

    /// Makes tenant `tenant` (`oncehookctl tenants create`) with a file
    /// source `source` of `gateway`, signed with the gateway's test secret
    /// (binaries started afterwards serve it).
    pub async fn tenant_with_source(&self, tenant: &str, source: &str, gateway: Gateway) {
        let (code, out, err) = self
            .ctl(&["tenants", "create", tenant, "--name", tenant])
            .await;
        assert_eq!(code, 0, "tenants create {tenant}: {out}{err}");
        self.append_config(&format!(
            "[[source]]\nname = \"{source}\"\ngateway = \"{}\"\nsecrets = [\"{}\"]\ntenant = \"{tenant}\"\n",
            gateway.as_str(),
            Secrets::for_gateway(gateway)
        ));
    }
}

impl TestEnv {
    /// Like [`TestEnv::start_consumer`], but also returns the base URL of the
    /// binary's metrics listener (`http://127.0.0.1:PORT`, serving
    /// `/metrics`, `/healthz` and `/readyz`).
    pub async fn start_consumer_with_metrics(
        &mut self,
        bin: &str,
        extra: &[(&str, &str)],
    ) -> (Proc, String) {
        let proc = self.spawn(bin, extra, &[]);
        let base = proc.metrics_url().to_owned();
        self.wait_ready(&base, "/readyz").await;
        (proc, base)
    }
}

/// Sets `key` to `value` in `envs`, replacing an earlier value.
fn put(envs: &mut Vec<(String, String)>, key: &str, value: impl Into<String>) {
    envs.retain(|(k, _)| k != key);
    envs.push((key.to_owned(), value.into()));
}

/// The one builder of the tests' Postgres URLs: `base`
/// (`postgres://user@host:port/db`) for database `db`, on `server` (host
/// and port) when given, else on `base`'s own; the user is kept.
pub fn postgres_url(base: &str, server: Option<(&str, u16)>, db: &str) -> String {
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((user, host_port)) => (format!("{user}@"), host_port),
        None => (String::new(), authority),
    };
    let host_port = match server {
        Some((host, port)) => format!("{host}:{port}"),
        None => host_port.to_owned(),
    };
    format!("{scheme}://{user}{host_port}/{db}")
}

/// `url` (`postgres://user@host:port/db…`) with the binaries' role as its
/// user (no password: the tests' Postgres trusts loopback).
pub fn service_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let host_and_path = rest.split_once('@').map_or(rest, |(_, h)| h);
    format!(
        "{scheme}://{}@{host_and_path}",
        oncehook_common::store::scope::SERVICE_ROLE
    )
}

/// `host` and `port` of a `postgres://user@host:port/db` URL (5432 when absent).
pub fn postgres_host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match hostport.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(5432)),
        None => (hostport.to_owned(), 5432),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_urls_keep_the_user_and_change_the_database_and_server() {
        let admin = "postgres://postgres@127.0.0.1:5432/postgres";
        assert_eq!(
            postgres_url(admin, None, "oncehook_t_1"),
            "postgres://postgres@127.0.0.1:5432/oncehook_t_1"
        );
        assert_eq!(
            postgres_url(admin, Some(("127.0.0.1", 6432)), "pgbouncer"),
            "postgres://postgres@127.0.0.1:6432/pgbouncer"
        );
        assert_eq!(
            postgres_url(
                "postgres://db.example/postgres",
                Some(("10.0.0.1", 6432)),
                "x"
            ),
            "postgres://10.0.0.1:6432/x"
        );
        assert_eq!(postgres_host_port(admin), ("127.0.0.1".to_owned(), 5432));
    }
}
