//! Where PostgreSQL's time goes in one bench phase (a pgbench ceiling run,
//! a worker run, the shop API): the statements that took it, from
//! `pg_stat_statements` reset in the phase's database when the phase
//! starts — calls, milliseconds planning and executing, and rows per
//! event, nested statements (trigger and function bodies) included, and
//! the planning and execution time of all its statements together — and
//! the rows each table
//! gained, changed and left dead over the phase (`pg_stat_user_tables`
//! deltas), so that trigger writes and dead tuples show up.
//!
//! `deploy/local/services.sh` loads `pg_stat_statements`; on a server
//! without it the section says so, keeps the table deltas, and points at
//! the statement proxy's counts (the `inside` phase). The bench's own
//! queries carry [`BENCH_TAG`] and are left out.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::PgPool;

use crate::table;

/// Marks the bench's own queries (progress, sampling) so that they are
/// left out of the statements listed; written out in each of them (sqlx
/// takes static SQL).
pub const BENCH_TAG: &str = "/* oncehook bench */";

/// Statements listed per phase.
const TOP: i64 = 8;
/// Characters of a statement's text shown.
const SHOWN: usize = 90;

/// The sections written so far, in order; the report takes them.
static SECTIONS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// While set, phases record no section (warm-up runs).
static MUTED: AtomicBool = AtomicBool::new(false);

/// Stops (`true`) or resumes recording sections.
pub fn mute(muted: bool) {
    MUTED.store(muted, Ordering::SeqCst);
}

/// Every section recorded since the last call (markdown).
pub fn take_sections() -> Vec<String> {
    SECTIONS
        .lock()
        .map(|mut s| std::mem::take(&mut *s))
        .unwrap_or_default()
}

/// Counters of one table: inserted, updated, HOT-updated, deleted, dead.
type TableCounts = [i64; 5];

/// The state at a phase's start.
pub struct Probe {
    /// Whether `pg_stat_statements` answers in this database (reset now).
    statements: Result<(), String>,
    tables: BTreeMap<String, TableCounts>,
}

impl Probe {
    /// Resets `pg_stat_statements` for the database `pool` is connected
    /// to (creating the extension there if need be) and reads the tables'
    /// counters.
    pub async fn start(pool: &PgPool) -> Probe {
        flush(pool).await;
        let statements = reset(pool).await;
        Probe {
            statements,
            tables: tables(pool).await,
        }
    }

    /// Records the phase's section: `title`, `events` done (the unit of
    /// every "per event" figure, named `unit`). Returns what the report's
    /// other tables take from it: the statement that took the most time,
    /// with its ms per `unit`, for a goal's verdict to name, and the
    /// top-level statements and planning time per `unit` (all `None`
    /// without pg_stat_statements).
    pub async fn finish(self, pool: &PgPool, title: &str, events: f64, unit: &str) -> Summary {
        // Backends flush their table counters when they exit, or idle up to
        // ten seconds later; the phase's processes have just stopped.
        tokio::time::sleep(Duration::from_millis(500)).await;
        flush(pool).await;
        let mut out = format!("\n### PostgreSQL in {title}: {events:.0} {unit}s\n\n");
        let per = |v: f64| {
            if events > 0.0 { v / events } else { 0.0 }
        };
        let mut summary = Summary::default();
        match &self.statements {
            Ok(()) => match top(pool).await {
                Ok((
                    rows,
                    Totals {
                        planning,
                        executing,
                        calls,
                    },
                )) if !rows.is_empty() => {
                    summary.statements = Some(per(calls));
                    summary.planning_ms = Some(per(planning));
                    summary.slowest = rows.first().map(|s| {
                        format!(
                            "`{}` ({:.3} ms per {unit}, {:.3} of it planning)",
                            shorten(&s.query),
                            per(s.plan_ms + s.exec_ms),
                            per(s.plan_ms)
                        )
                    });
                    let cells: Vec<Vec<String>> = rows
                        .iter()
                        .map(|s| {
                            vec![
                                format!("{:.2}", per(s.calls as f64)),
                                format!("{:.3}", per(s.plan_ms)),
                                format!("{:.3}", per(s.exec_ms)),
                                format!("{:.2}", per(s.rows as f64)),
                                if s.toplevel { "top" } else { "nested" }.to_owned(),
                                format!("`{}`", shorten(&s.query)),
                            ]
                        })
                        .collect();
                    out.push_str(&format!(
                        "All statements: {:.2} top-level statements (each counted: BEGIN, a SET LOCAL sent \
                         with it, COMMIT; PostgreSQL leaves a pooler's DEALLOCATE ALL out), \
                         {:.3} ms planning and {:.3} ms executing per {unit} \
                         (planning is counted when the server sets \
                         `pg_stat_statements.track_planning`, as `deploy/local/services.sh` does).\n\n\
                         Top statements by planning and execution time (pg_stat_statements), \
                         per {unit}:\n\n",
                        per(calls),
                        per(planning),
                        per(executing)
                    ));
                    out.push_str(&table::markdown(
                        &["calls", "plan ms", "exec ms", "rows", "level", "statement"],
                        &cells,
                        |i| i < 4,
                    ));
                }
                Ok(_) => out.push_str("pg_stat_statements recorded no statement.\n"),
                Err(e) => out.push_str(&format!("pg_stat_statements not readable: {e}\n")),
            },
            Err(e) => out.push_str(&format!(
                "pg_stat_statements not available on this server ({e}): the statements per \
                 event are the statement proxy's counts (\"worker statements\" rows, from the \
                 inside phase); `deploy/local/services.sh` loads it on the local server.\n"
            )),
        }
        let now = tables(pool).await;
        let cells: Vec<Vec<String>> = now
            .iter()
            .filter_map(|(name, after)| {
                let before = self.tables.get(name).copied().unwrap_or_default();
                let d: Vec<i64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
                d.iter().any(|v| *v != 0).then(|| {
                    let mut row = vec![name.clone()];
                    row.extend(d.iter().map(|v| format!("{:.2}", per(*v as f64))));
                    row
                })
            })
            .collect();
        out.push_str(&format!(
            "\nRows per {unit} by table (pg_stat_user_tables deltas; dead: the change in dead tuples, \
             vacuum may lower it):\n\n"
        ));
        out.push_str(&table::markdown(
            &["table", "inserted", "updated", "HOT", "deleted", "dead"],
            &cells,
            |i| i > 0,
        ));
        if MUTED.load(Ordering::SeqCst) {
            return summary;
        }
        if let Ok(mut sections) = SECTIONS.lock() {
            sections.push(out);
        }
        summary
    }
}

/// What one phase's statement report gives the other tables.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The statement that took the most time, with its ms per unit.
    pub slowest: Option<String>,
    /// Top-level statements per unit (`calls`; BEGIN, COMMIT, … each one,
    /// the bench's own left out).
    pub statements: Option<f64>,
    /// Milliseconds planning per unit (`total_plan_time`).
    pub planning_ms: Option<f64>,
}

/// All top-level statements of a phase together.
struct Totals {
    planning: f64,
    executing: f64,
    /// Executions (`calls`).
    calls: f64,
}

/// Makes every connection of `pool` flush its pending table counters
/// now (`pg_stat_force_next_flush`, then idle): what the bench itself wrote
/// (seeding, preloading) is counted before the phase, not in it.
async fn flush(pool: &PgPool) {
    let mut held = Vec::new();
    for _ in 0..pool.size() {
        match tokio::time::timeout(Duration::from_secs(1), pool.acquire()).await {
            Ok(Ok(conn)) => held.push(conn),
            _ => break,
        }
    }
    for conn in &mut held {
        let _ = sqlx::query("SELECT /* oncehook bench */ pg_stat_force_next_flush()")
            .execute(&mut **conn)
            .await;
    }
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// `CREATE EXTENSION IF NOT EXISTS pg_stat_statements` and a reset of
/// this database's entries; an error if the server does not load it.
async fn reset(pool: &PgPool) -> Result<(), String> {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::query(
        "SELECT /* oncehook bench */ pg_stat_statements_reset(0, \
         (SELECT oid FROM pg_database WHERE datname = current_database()), 0)",
    )
    .execute(pool)
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// One statement's figures over a phase.
#[derive(sqlx::FromRow)]
struct Statement {
    calls: i64,
    plan_ms: f64,
    exec_ms: f64,
    rows: i64,
    toplevel: bool,
    query: String,
}

/// The statements that took most planning and execution time in this
/// database, and the milliseconds planning and executing and the calls of
/// all top-level ones (the bench's own left out).
async fn top(pool: &PgPool) -> Result<(Vec<Statement>, Totals), sqlx::Error> {
    let statements = sqlx::query_as(
        "SELECT /* oncehook bench */ calls, total_plan_time AS plan_ms,
                total_exec_time AS exec_ms, rows, toplevel, query
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND query NOT LIKE '%' || $1 || '%'
           AND query NOT LIKE '%pg_stat_activity%'
         ORDER BY total_plan_time + total_exec_time DESC LIMIT $2",
    )
    .bind(BENCH_TAG)
    .bind(TOP)
    .fetch_all(pool)
    .await?;
    let (planning, executing, calls): (f64, f64, f64) = sqlx::query_as(
        "SELECT /* oncehook bench */ COALESCE(sum(total_plan_time), 0)::float8,
                COALESCE(sum(total_exec_time), 0)::float8, COALESCE(sum(calls), 0)::float8
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND query NOT LIKE '%' || $1 || '%'
           AND query NOT LIKE '%pg_stat_activity%'
           AND toplevel",
    )
    .bind(BENCH_TAG)
    .fetch_one(pool)
    .await?;
    let totals = Totals {
        planning,
        executing,
        calls,
    };
    Ok((statements, totals))
}

/// Every user table's counters.
async fn tables(pool: &PgPool) -> BTreeMap<String, TableCounts> {
    let rows: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT /* oncehook bench */ relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd,
                n_tup_del, n_dead_tup
         FROM pg_stat_user_tables",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    rows.into_iter()
        .map(|(name, i, u, h, d, dead)| (name, [i, u, h, d, dead]))
        .collect()
}

/// The statement on one line, whitespace collapsed, cut at [`SHOWN`]
/// characters, escaped for a markdown table cell in a code span.
fn shorten(query: &str) -> String {
    let one_line = query
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('`', "'")
        .replace('|', "\\|");
    if one_line.chars().count() > SHOWN {
        format!("{}…", one_line.chars().take(SHOWN).collect::<String>())
    } else {
        one_line
    }
}
