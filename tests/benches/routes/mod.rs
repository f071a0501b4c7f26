//! The deployed path beside the direct one: the worker, the shop API, the
//! notifier and the mailer each measured straight to PostgreSQL and
//! through PgBouncer in transaction mode, as the deploy files connect
//! them, in interleaved rounds of the same run.
//!
//! * The route each binary ships with is read from deploy/README.md's
//!   "Database connections" table (which `tests/tests/deploy_files.rs`
//!   holds to both deploy files): "PgBouncer" there is the pooled route,
//!   "Postgres" the direct one.
//! * The pooled route is the test harness's PgBouncer
//!   ([`oncehook_e2e::pgbouncer::PgBouncer`], the deploy files' settings:
//!   transaction mode, `DEALLOCATE ALL` whenever a server connection
//!   changes hands) with the deploy files' `default_pool_size`, started by
//!   the bench in the run's own environment ([`Pooler`]), and the binary
//!   gets its URL with `ONCEHOOK_DATABASE_POOLER=transaction`, as the
//!   deploy files set it. The bench starts it itself rather than asking
//!   for the harness's pooler mode: it needs both routes for the same
//!   binary in one environment, and the pooler mode's watch for direct
//!   connections polls the server every 50 ms, which the pooled runs
//!   alone would pay.
//! * Each run is recorded here ([`record`]) with its rate, PostgreSQL's
//!   and PgBouncer's CPU per event, and the statements and planning time
//!   per event from its statement report; [`report`] makes the report's
//!   first table and the goals on it.

mod report;

use oncehook_e2e::TestEnv;
use oncehook_e2e::pgbouncer::PgBouncer;

use crate::cpu::{CpuUse, Who};
use crate::load::RunLoad;

pub use report::{Subject, proxy_count, record, table};

/// How a binary reaches PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Direct,
    /// Through PgBouncer in transaction mode.
    Pooled,
}

impl Route {
    /// What a row's label adds for the route ("" when direct).
    pub fn suffix(self) -> &'static str {
        match self {
            Route::Direct => "",
            Route::Pooled => ", through PgBouncer (transaction)",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Route::Direct => "straight to PostgreSQL",
            Route::Pooled => "PgBouncer (transaction)",
        }
    }

    /// Direct first in odd rounds, pooled first in even ones: a machine
    /// that speeds up or slows down over a round moves both sides.
    pub fn in_round(round: usize) -> [Route; 2] {
        if round.is_multiple_of(2) {
            [Route::Pooled, Route::Direct]
        } else {
            [Route::Direct, Route::Pooled]
        }
    }
}

/// The route deploy/README.md's "Database connections" table gives `bin`
/// (`None`: not found there).
pub fn deployed(bin: &str) -> Option<Route> {
    let text = std::fs::read_to_string(crate::workspace().join("deploy/README.md")).ok()?;
    route_in(&text, bin)
}

/// [`deployed`] on the README's text.
fn route_in(readme: &str, bin: &str) -> Option<Route> {
    let section = readme.split("\n## Database connections").nth(1)?;
    let section = section.split("\n## ").next().unwrap_or(section);
    let first = format!("| `{bin}` |");
    let line = section.lines().find(|l| l.starts_with(&first))?;
    let cell = line.split('|').nth(2)?;
    if cell.contains("PgBouncer") {
        Some(Route::Pooled)
    } else if cell.contains("Postgre") {
        Some(Route::Direct)
    } else {
        None
    }
}

/// A PgBouncer in front of one environment's database, for the pooled
/// runs.
pub struct Pooler {
    bouncer: PgBouncer,
    /// The database's URL through it.
    url: String,
    db_name: String,
}

impl Pooler {
    /// Starts one for `env` (in a folder of the bench's own, beside a
    /// harness pooler the environment may have).
    pub fn start(env: &TestEnv) -> Pooler {
        let bouncer = PgBouncer::start(&env.dir.join("bench"), &env.database_url);
        // The deploy files' pool size (the harness's own stays when they
        // name none).
        if let Some(size) = deploy_pool_size() {
            set_pool_size(&bouncer, size);
        }
        Pooler {
            url: bouncer.url_for(&env.database_url),
            db_name: env.db_name.clone(),
            bouncer,
        }
    }

    /// The environment that points a binary through it, as the deploy
    /// files do: its URL and `ONCEHOOK_DATABASE_POOLER=transaction`.
    pub fn vars(&self) -> [(&'static str, &str); 2] {
        [
            ("ONCEHOOK_DATABASE_URL", self.url.as_str()),
            ("ONCEHOOK_DATABASE_POOLER", "transaction"),
        ]
    }

    pub fn pid(&self) -> u32 {
        self.bouncer.pid()
    }

    /// Transactions it has passed on to the database so far (`SHOW
    /// STATS`): a pooled run that moved none went around it.
    pub fn transactions(&self) -> u64 {
        self.bouncer.counts(&self.db_name).0
    }

    /// Closes its server connections (`KILL`, then `RESUME`), once the
    /// run's binary has stopped: a backend reports its table counters when
    /// it exits or after idling, and the run's statement report reads them
    /// now.
    fn close_server_connections(&self) {
        for command in [
            format!("KILL {}", self.db_name),
            format!("RESUME {}", self.db_name),
        ] {
            admin(&self.bouncer, &command);
        }
    }
}

/// The pooler of a run through `pooler`, or nothing for a direct run: its
/// vars, its CPU group and a reading of its transactions.
pub struct Via<'a> {
    pooler: Option<&'a Pooler>,
    before: u64,
}

impl<'a> Via<'a> {
    pub fn new(pooler: Option<&'a Pooler>) -> Via<'a> {
        Via {
            before: pooler.map_or(0, Pooler::transactions),
            pooler,
        }
    }

    /// `vars` with the pooler's, when there is one.
    pub fn vars<'v>(&'v self, vars: &[(&'v str, &'v str)]) -> Vec<(&'v str, &'v str)> {
        let mut out = vars.to_vec();
        if let Some(p) = self.pooler {
            out.extend(p.vars());
        }
        out
    }

    /// The CPU groups of the run: PgBouncer's when there is one.
    pub fn meter(&self, meter: crate::cpu::CpuMeter) -> crate::cpu::CpuMeter {
        match self.pooler {
            Some(p) => meter.with(Who::Pgbouncer, [p.pid()]),
            None => meter,
        }
    }

    /// Transactions PgBouncer passed on since [`Via::new`] (`None` for a
    /// direct run).
    pub fn passed(&self) -> Option<u64> {
        self.pooler
            .map(|p| p.transactions().saturating_sub(self.before))
    }

    /// Once the binary has stopped, before the run's statement report:
    /// PgBouncer's server connections closed, so that their table counters
    /// are in.
    pub fn settle(&self) {
        if let Some(p) = self.pooler {
            p.close_server_connections();
        }
    }
}

/// The deploy files' `default_pool_size` (deploy/k8s/pgbouncer.yaml, else
/// the compose file's `DEFAULT_POOL_SIZE`).
pub fn deploy_pool_size() -> Option<u32> {
    let read = |path: &str| std::fs::read_to_string(crate::workspace().join(path)).ok();
    let after = |text: &str, key: &str| {
        let rest = &text[text.find(key)? + key.len()..];
        let digits: String = rest
            .trim_start_matches([' ', '=', ':', '"'])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    read("deploy/k8s/pgbouncer.yaml")
        .and_then(|t| after(&t, "default_pool_size"))
        .or_else(|| {
            read("deploy/compose/compose.yaml").and_then(|t| after(&t, "DEFAULT_POOL_SIZE"))
        })
}

/// `SET default_pool_size` on `bouncer`'s admin console (before any pool
/// exists: every pool gets it).
fn set_pool_size(bouncer: &PgBouncer, size: u32) {
    admin(bouncer, &format!("SET default_pool_size = {size}"));
}

/// Runs `command` on `bouncer`'s admin console (through psql: it speaks
/// the simple protocol only); a failure is a warning.
fn admin(bouncer: &PgBouncer, command: &str) {
    let out = std::process::Command::new("psql")
        .args(["-d", &bouncer.url("pgbouncer"), "-Atq", "-c", command])
        .output();
    match out {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!(
            "bench: warning: PgBouncer {command}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!("bench: warning: psql for PgBouncer's admin console: {e}"),
    }
}

/// One run's figures for the first table.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Operations per second.
    pub rate: f64,
    /// Operations the CPU and statement figures are divided by.
    pub ops: f64,
    pub cpu: CpuUse,
    /// Top-level statements and ms planning per operation
    /// (pg_stat_statements).
    pub statements: Option<f64>,
    pub planning_ms: Option<f64>,
    /// Transactions PgBouncer passed on (pooled runs).
    pub passed: Option<u64>,
    pub load: RunLoad,
}

impl Figures {
    /// ms of `who`'s CPU per operation.
    pub fn ms(&self, who: Who) -> Option<f64> {
        let cpu = self.cpu.of(who)?;
        (self.ops > 0.0).then(|| cpu.as_secs_f64() * 1_000.0 / self.ops)
    }
}
