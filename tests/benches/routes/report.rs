//! The report's first table: each of the worker (batch 1 and the group
//! batch), the shop API, the notifier and the mailer straight to
//! PostgreSQL and as the deploy files connect it, side by side, with
//! PostgreSQL's CPU, the statements and the planning time per event; a
//! binary the deploy files connect straight also gets a row through
//! PgBouncer when it ran there (the worker at batch 1: why it goes
//! straight). Then the goals on it: as deployed at most [`AS_DEPLOYED`]×
//! direct in PostgreSQL CPU per event and in rate for the worker and the
//! API, and the worker's statements per event.

use std::sync::Mutex;

use super::{Figures, Route, deployed};
use crate::cpu::Who;
use crate::load::RunLoad;
use crate::{machine, median, table};

/// The most the deployed route may cost over the direct one (PostgreSQL
/// CPU per event; its rate at least the inverse).
const AS_DEPLOYED: f64 = 1.15;

/// What a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// One worker at this batch size.
    Worker(usize),
    Api,
    Notifier,
    Mailer,
}

impl Subject {
    fn bin(self) -> &'static str {
        match self {
            Subject::Worker(_) => "oncehook-worker",
            Subject::Api => "oncehook-api",
            Subject::Notifier => "oncehook-notifier",
            Subject::Mailer => "oncehook-mailer",
        }
    }

    fn label(self) -> String {
        match self {
            Subject::Worker(batch) => format!("worker ×1 batch {batch}"),
            Subject::Api => "API POST /v1/orders".to_owned(),
            Subject::Notifier => "notifier".to_owned(),
            Subject::Mailer => "mailer".to_owned(),
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Subject::Worker(_) | Subject::Notifier => "event",
            Subject::Api => "order",
            Subject::Mailer => "email",
        }
    }

    /// The most statements per event the worker may send at its batch.
    fn statements_goal(self) -> Option<f64> {
        match self {
            Subject::Worker(1) => Some(8.0),
            Subject::Worker(_) => Some(6.0),
            _ => None,
        }
    }
}

struct Recorded {
    subject: Subject,
    route: Route,
    round: usize,
    figures: Figures,
}

static RECORDED: Mutex<Vec<Recorded>> = Mutex::new(Vec::new());

/// The statement proxy's count per event at each batch (the inside phase),
/// which the baseline used.
static PROXY: Mutex<Vec<(usize, f64)>> = Mutex::new(Vec::new());

/// Records the statement proxy's count per event at `batch`: every
/// message the worker sent that executes something, a `BEGIN` sent with
/// its `SET LOCAL` one (pg_stat_statements counts them apart).
pub fn proxy_count(batch: usize, per_event: f64) {
    if let Ok(mut all) = PROXY.lock() {
        all.push((batch, per_event));
    }
}

/// Records one run of `subject` by `route` in `round` (1 and up).
pub fn record(subject: Subject, route: Route, round: usize, figures: Figures) {
    if let Ok(mut all) = RECORDED.lock() {
        all.push(Recorded {
            subject,
            route,
            round,
            figures,
        });
    }
}

/// The first table as plain text and as markdown (with its notes), and
/// its goals recorded; `None` when no row was measured.
pub fn table() -> Option<(String, String)> {
    let all = RECORDED.lock().ok()?;
    let mut subjects: Vec<Subject> = Vec::new();
    for r in all.iter() {
        if !subjects.contains(&r.subject) {
            subjects.push(r.subject);
        }
    }
    subjects.sort_by_key(|s| match s {
        Subject::Worker(b) => (0, *b),
        Subject::Api => (1, 0),
        Subject::Notifier => (2, 0),
        Subject::Mailer => (3, 0),
    });
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for subject in subjects {
        let runs = |route: Route| -> Vec<&Recorded> {
            all.iter()
                .filter(|r| r.subject == subject && r.route == route)
                .collect()
        };
        let (direct, pooled) = (runs(Route::Direct), runs(Route::Pooled));
        if direct.is_empty() {
            continue;
        }
        let route = deployed(subject.bin());
        let shipped: Option<&Vec<&Recorded>> = match route {
            Some(Route::Direct) => Some(&direct),
            Some(Route::Pooled) => Some(&pooled).filter(|p| !p.is_empty()),
            None => None,
        };
        let route_cell = match route {
            Some(r) => r.name().to_owned(),
            None => "not in deploy/README.md".to_owned(),
        };
        let main = Compared::of(subject, &direct, shipped.map(Vec::as_slice));
        rows.push(main.cells(subject.label(), route_cell));
        goals(&main, route);
        notes.extend(main.notes(&subject.label()));
        if route != Some(Route::Pooled) && !pooled.is_empty() {
            let label = format!("{}{}", subject.label(), Route::Pooled.suffix());
            let extra = Compared::of(subject, &direct, Some(&pooled));
            rows.push(extra.cells(
                label.clone(),
                "not deployed: what the pooler would cost".to_owned(),
            ));
            notes.extend(extra.notes(&label));
        }
    }
    if rows.is_empty() {
        return None;
    }
    if oncehook_e2e::pgbouncer::wanted() {
        notes.push(format!(
            "{} is set: the test harness puts binaries behind a PgBouncer of its own, the direct runs included; these rows compare nothing until it is unset",
            oncehook_e2e::pgbouncer::POOLER_ENV
        ));
    }
    let header = [
        "",
        "direct",
        "as deployed",
        "ratio",
        "PostgreSQL CPU per event (order, email), direct",
        "as deployed",
        "ratio",
        "PgBouncer CPU per event",
        "statements per event, direct; as deployed",
        "planning ms per event, direct; as deployed",
        "deployed route",
    ];
    let numeric = |i: usize| (1..10).contains(&i);
    let text = format!(
        "Direct and as deployed\n\n{}\n",
        table::text(&header, &rows, numeric)
    );
    let mut md = format!(
        "## Direct and as deployed\n\nEach row straight to PostgreSQL and as the deploy files connect it (deploy/README.md, \"Database connections\"), interleaved in the same rounds; medians of the rounds, ratios as deployed ÷ direct (the median of each round's). PostgreSQL CPU is the whole server's, PgBouncer's its process's; statements are pg_stat_statements' top-level ones (each counted: BEGIN, a SET LOCAL sent with it, COMMIT; PostgreSQL leaves PgBouncer's DEALLOCATE ALL out) and planning its total_plan_time, per event (order, email). PgBouncer: the test harness's, with the deploy files' settings (transaction mode, `DEALLOCATE ALL` whenever a server connection changes hands) and `default_pool_size` {}.\n\n{}\n",
        super::deploy_pool_size().map_or(
            "the harness's (the deploy files name none)".to_owned(),
            |n| n.to_string()
        ),
        table::markdown(&header, &rows, numeric)
    );
    for n in &notes {
        md.push_str(&format!("- {n}\n"));
    }
    Some((text, md))
}

/// One row: the direct runs against another route's (or the same runs).
struct Compared<'a> {
    subject: Subject,
    direct: &'a [&'a Recorded],
    /// The other side and the per-round ratios (rate, PostgreSQL CPU);
    /// `None` when nothing ran there.
    vs: Option<Versus<'a>>,
}

struct Versus<'a> {
    runs: &'a [&'a Recorded],
    /// The other side is the direct runs themselves.
    same: bool,
    rate: Vec<f64>,
    postgres: Vec<f64>,
}

impl<'a> Compared<'a> {
    fn of(
        subject: Subject,
        direct: &'a [&'a Recorded],
        other: Option<&'a [&'a Recorded]>,
    ) -> Compared<'a> {
        let vs = other.map(|runs| {
            let same = runs.first().is_some_and(|r| r.route == Route::Direct);
            let (mut rate, mut postgres) = (Vec::new(), Vec::new());
            for r in runs {
                let Some(d) = direct.iter().find(|d| d.round == r.round) else {
                    continue;
                };
                if d.figures.rate > 0.0 {
                    rate.push(r.figures.rate / d.figures.rate);
                }
                if let (Some(a), Some(b)) =
                    (r.figures.ms(Who::Postgres), d.figures.ms(Who::Postgres))
                    && b > 0.0
                {
                    postgres.push(a / b);
                }
            }
            Versus {
                runs,
                same,
                rate,
                postgres,
            }
        });
        Compared {
            subject,
            direct,
            vs,
        }
    }

    fn cells(&self, label: String, route: String) -> Vec<String> {
        let unit = self.subject.unit();
        let rate = |runs: &[&Recorded]| {
            format!(
                "{:.0} {unit}s/s",
                median_of(runs, |f| Some(f.rate)).unwrap_or(0.0)
            )
        };
        let ms = |runs: &[&Recorded], who: Who| {
            median_of(runs, |f| f.ms(who)).map_or("–".to_owned(), |v| format!("{v:.2} ms"))
        };
        let per = |runs: &[&Recorded], f: fn(&Figures) -> Option<f64>, digits: usize| {
            median_of(runs, f).map_or("–".to_owned(), |v| format!("{v:.digits$}"))
        };
        let ratio = |v: &[f64]| {
            if v.is_empty() {
                "–".to_owned()
            } else {
                format!("{:.2}×", median(v))
            }
        };
        let (other_rate, rate_ratio, other_pg, pg_ratio, bouncer, statements, planning) =
            match &self.vs {
                Some(vs) if vs.same => (
                    "(the same runs)".to_owned(),
                    "1.00×".to_owned(),
                    "(the same runs)".to_owned(),
                    "1.00×".to_owned(),
                    "–".to_owned(),
                    per(self.direct, |f| f.statements, 1),
                    per(self.direct, |f| f.planning_ms, 3),
                ),
                Some(vs) => (
                    rate(vs.runs),
                    ratio(&vs.rate),
                    ms(vs.runs, Who::Postgres),
                    ratio(&vs.postgres),
                    ms(vs.runs, Who::Pgbouncer),
                    format!(
                        "{}; {}",
                        per(self.direct, |f| f.statements, 1),
                        per(vs.runs, |f| f.statements, 1)
                    ),
                    format!(
                        "{}; {}",
                        per(self.direct, |f| f.planning_ms, 3),
                        per(vs.runs, |f| f.planning_ms, 3)
                    ),
                ),
                None => (
                    "not measured".to_owned(),
                    "–".to_owned(),
                    "–".to_owned(),
                    "–".to_owned(),
                    "–".to_owned(),
                    per(self.direct, |f| f.statements, 1),
                    per(self.direct, |f| f.planning_ms, 3),
                ),
            };
        vec![
            label,
            rate(self.direct),
            other_rate,
            rate_ratio,
            ms(self.direct, Who::Postgres),
            other_pg,
            pg_ratio,
            bouncer,
            statements,
            planning,
            route,
        ]
    }

    /// One line per round, and a warning for a pooled run PgBouncer saw
    /// no transaction of.
    fn notes(&self, label: &str) -> Vec<String> {
        let unit = self.subject.unit();
        let one = |r: &Recorded| {
            format!(
                "{} {:.0} {unit}s/s, PostgreSQL {}{}",
                r.route.name(),
                r.figures.rate,
                r.figures
                    .ms(Who::Postgres)
                    .map_or("–".to_owned(), |v| format!("{v:.2} ms")),
                match (r.route, r.figures.ms(Who::Pgbouncer)) {
                    (Route::Pooled, Some(v)) => format!(", PgBouncer {v:.2} ms"),
                    _ => String::new(),
                }
            )
        };
        let mut out = Vec::new();
        let Some(vs) = self.vs.as_ref().filter(|v| !v.same) else {
            return out;
        };
        for r in vs.runs {
            let direct = self.direct.iter().find(|d| d.round == r.round);
            out.push(format!(
                "{label}, round {}: {}; {}",
                r.round,
                direct.map_or("direct –".to_owned(), |d| one(d)),
                one(r)
            ));
            if r.route == Route::Pooled && r.figures.passed == Some(0) {
                out.push(format!(
                    "{label}, round {}: PgBouncer passed on no transaction: this run did not go through it",
                    r.round
                ));
            }
        }
        out
    }
}

/// The goals on a row whose other side is the deployed route.
fn goals(row: &Compared<'_>, route: Option<Route>) {
    let Some(c) = &row.vs else {
        return;
    };
    let subject = row.subject;
    let label = subject.label();
    let unit = subject.unit();
    let shipped: Vec<&RunLoad> = c.runs.iter().map(|r| &r.figures.load).collect();
    if matches!(subject, Subject::Worker(_) | Subject::Api) {
        let mut loads = shipped.clone();
        loads.extend(row.direct.iter().map(|r| &r.figures.load));
        let value = if c.same {
            format!(
                "the deploy files connect it {}: the deployed runs are the direct ones (1.00×)",
                Route::Direct.name()
            )
        } else {
            format!(
                "PostgreSQL CPU per {unit} {}, rate {}",
                crate::spread(&c.postgres),
                crate::spread(&c.rate)
            )
        };
        let met = c.same
            || (!c.postgres.is_empty()
                && median(&c.postgres) <= AS_DEPLOYED
                && median(&c.rate) >= 1.0 / AS_DEPLOYED);
        machine::goal_on(
            &format!(
                "{label} as deployed ({}) ≤ {AS_DEPLOYED:.2}× direct: PostgreSQL CPU per {unit} ≤ {AS_DEPLOYED:.2}×, rate ≥ {:.2}×",
                route.map_or("?", Route::name),
                1.0 / AS_DEPLOYED
            ),
            value,
            met,
            &loads,
        );
    }
    if let Some(most) = subject.statements_goal() {
        let per: Vec<f64> = c.runs.iter().filter_map(|r| r.figures.statements).collect();
        let batch = match subject {
            Subject::Worker(b) => b,
            _ => 0,
        };
        // The verdict counts what the worker sends, as the baseline
        // (14.9 and 9.4) was counted: the statement proxy's messages, a BEGIN
        // sent with its SET LOCAL one. pg_stat_statements, which counts that
        // SET LOCAL apart, stands beside it.
        let proxy = PROXY
            .lock()
            .ok()
            .and_then(|p| p.iter().find(|(b, _)| *b == batch).map(|(_, n)| *n));
        let stat = if per.is_empty() {
            String::new()
        } else {
            format!(
                "; pg_stat_statements' top-level statements (BEGIN, SET LOCAL and COMMIT each one): {}",
                crate::spread_of(&per, "")
            )
        };
        if let Some(sent) = proxy {
            machine::goal_on(
                &format!(
                    "{label} as deployed: ≤ {most:.0} statements per event, as the worker sends them (the statement proxy, the inside phase)"
                ),
                format!("{sent:.1}{stat}"),
                sent <= most,
                &shipped,
            );
        }
    }
}

/// The median of `f` over `runs` that have it.
fn median_of(runs: &[&Recorded], f: impl Fn(&Figures) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = runs.iter().filter_map(|r| f(&r.figures)).collect();
    (!v.is_empty()).then(|| median(&v))
}
