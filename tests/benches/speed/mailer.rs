//! The mailer against a real SMTP listener on 127.0.0.1 (the test sink),
//! once answering at once and once taking 200 ms to accept each message.
//!
//! Each run first loads captured events through ingest, lets one worker
//! apply them (its events/s is the rate the mailer has to keep up with) and
//! waits until the relay has put every confirmation email into the email
//! queue; only then does the mailer start, so its rate is its own: emails
//! accepted by the listener per second, from the first to the last. Goals:
//! answering at once, at least the worker's events/s; with a 200 ms answer,
//! at least 0.8 × concurrency / 0.2 s. The mailer runs straight to
//! PostgreSQL and through PgBouncer in transaction mode
//! ([`crate::routes`]): answering at once in `ONCEHOOK_BENCH_ROUNDS`
//! rounds (the report's "mailer" row, with PostgreSQL's CPU and the
//! statements per email from the mailer's start to the last email
//! accepted); answering slowly once, by the route the deploy files give
//! the mailer.

use std::time::{Duration, Instant};

use oncehook_e2e::{SmtpSink, TestEnv, broker, free_port};

use super::memory::Peaks;
use crate::cpu::{CpuMeter, CpuUse};
use crate::load::{self, RunLoad};
use crate::routes::{self, Route, Subject};
use crate::{
    Knobs, PHASE_TIMEOUT, Proc, Row, Stats, count_processed, drain_rate, histogram_percentiles,
    median_run, preload, seed_shop, stop_all, wait_for,
};

/// The answer delay of the slow listener.
const SLOW_ANSWER: Duration = Duration::from_millis(200);
/// Emails in the slow run (at most; fewer if fewer events are configured).
const SLOW_EMAILS: usize = 1500;

pub struct MailerRun {
    pub answer: Duration,
    pub emails: usize,
    pub worker: Stats,
    pub mailer: Stats,
    /// Messages the listener accepted: exactly `emails` when every outbox row went once.
    pub accepted: usize,
    pub connections: usize,
    pub peak_sessions: usize,
    /// The mailer's route to PostgreSQL, and the round.
    pub route: Route,
    pub round: usize,
    /// CPU from the mailer's start to the last email accepted, and the
    /// statements per email over the same time.
    cpu: CpuUse,
    statements: crate::pgstat::Summary,
    passed: Option<u64>,
    load: RunLoad,
}

impl MailerRun {
    fn figures(&self) -> routes::Figures {
        routes::Figures {
            rate: self.mailer.rate(),
            ops: self.emails as f64,
            cpu: self.cpu.clone(),
            statements: self.statements.statements,
            planning_ms: self.statements.planning_ms,
            passed: self.passed,
            load: self.load.clone(),
        }
    }
}

pub struct MailerPhase {
    pub concurrency: u16,
    pub runs: Vec<MailerRun>,
}

/// The mailer's send concurrency under test (the binary's default unless
/// `ONCEHOOK_BENCH_MAIL_CONCURRENCY` says otherwise).
pub fn concurrency() -> u16 {
    std::env::var("ONCEHOOK_BENCH_MAIL_CONCURRENCY")
        .ok()
        .and_then(|v| v.trim().parse::<u16>().ok())
        .unwrap_or(32)
        .clamp(1, 1024)
}

/// One database and ingest for every mailer run, and the runs' orders.
struct Bench {
    env: TestEnv,
    ingest: Proc,
    base: String,
    /// Orders seeded so far (each run takes the next ones).
    orders: usize,
    /// The PgBouncer of the pooled runs, started with the first.
    pooler: Option<routes::Pooler>,
}

/// The mailer answering at once, straight to PostgreSQL and through
/// PgBouncer in alternating order, in `ONCEHOOK_BENCH_ROUNDS` rounds (the
/// report's "mailer" row), and answering after [`SLOW_ANSWER`] once, by
/// the deployed route; a run during which other processes were busy is
/// repeated ([`load`]).
pub async fn mailer_phase(knobs: &Knobs, peaks: &mut Peaks) -> MailerPhase {
    let mut env = TestEnv::new().await;
    seed_shop(&env, true, 1, 0).await;
    let (ingest, base) = env.start_ingest().await;
    let mut bench = Bench {
        env,
        ingest,
        base,
        orders: 0,
        pooler: None,
    };
    let concurrency = concurrency();
    let mut runs = Vec::new();
    let configs = [
        (Duration::ZERO, knobs.events, knobs.rounds),
        (SLOW_ANSWER, knobs.events.min(SLOW_EMAILS), 1),
    ];
    // The slow listener's rate is its own: once, by the route the deploy
    // files give the mailer.
    let shipped = routes::deployed("oncehook-mailer").unwrap_or(Route::Direct);
    for (answer, k, rounds) in configs {
        for round in 1..=rounds {
            let both = Route::in_round(round);
            let routes = if answer.is_zero() {
                &both[..]
            } else {
                &[shipped][..]
            };
            for &route in routes {
                let mut attempt = 0;
                let run = loop {
                    let mut run = bench
                        .run(knobs, peaks, (answer, k), route, round, attempt)
                        .await;
                    if !load::repeat(&mut run.load, attempt) {
                        break run;
                    }
                    attempt += 1;
                };
                if answer.is_zero() {
                    routes::record(Subject::Mailer, route, round, run.figures());
                }
                runs.push(run);
            }
        }
    }
    peaks.record(
        "oncehook-ingest",
        bench.ingest.pid(),
        "mailer phase preload",
    );
    bench.ingest.signal("TERM");
    bench.ingest.wait_exit(Duration::from_secs(15));
    MailerPhase { concurrency, runs }
}

impl Bench {
    /// `k` captured events loaded through ingest and applied by one worker
    /// until the relay has queued every email; then the mailer by `route`
    /// against an SMTP listener answering after `answer`, timed.
    async fn run(
        &mut self,
        knobs: &Knobs,
        peaks: &mut Peaks,
        (answer, k): (Duration, usize),
        route: Route,
        round: usize,
        attempt: usize,
    ) -> MailerRun {
        let env = &mut self.env;
        let first = self.orders + 1;
        self.orders += k;
        seed_shop(env, false, first as i64, self.orders as i64).await;
        eprintln!("bench: mailer: loading {k} captured events (no worker, no mailer)");
        let tag = format!(
            "m{}r{round}{}a{attempt}",
            answer.as_millis(),
            if route == Route::Pooled { "p" } else { "d" }
        );
        preload(env, &self.base, first, k, knobs.concurrency, &tag).await;
        let before = count_processed(env).await;
        let worker_metrics = format!("127.0.0.1:{}", free_port());
        let prefetch = knobs.prefetch.to_string();
        let worker = env.spawn(
            "oncehook-worker",
            &[
                ("ONCEHOOK_METRICS_ADDR", worker_metrics.as_str()),
                ("ONCEHOOK_PREFETCH", prefetch.as_str()),
            ],
            &[],
        );
        let worker_stats = drain_rate(&env.pool, before, before + k as i64).await;
        let emails_queue = format!("{}.emails", env.prefix);
        let queued = wait_for(PHASE_TIMEOUT, || async {
            broker::depth(&emails_queue)
                .await
                .filter(|d| *d as usize >= k)
        })
        .await;
        if queued.is_none() {
            eprintln!("bench: warning: the email queue does not hold {k} messages");
        }
        peaks.record("oncehook-worker", worker.pid(), "mailer phase");
        stop_all(vec![worker]);

        if route == Route::Pooled && self.pooler.is_none() {
            self.pooler = Some(routes::Pooler::start(env));
        }
        let via = routes::Via::new(match route {
            Route::Pooled => self.pooler.as_ref(),
            Route::Direct => None,
        });
        let sink = SmtpSink::start_with_delay(answer).await;
        let concurrency = concurrency();
        eprintln!(
            "bench: mailer{} (concurrency {concurrency}) sending {k} emails, SMTP answering after {} ms",
            route.suffix(),
            answer.as_millis()
        );
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let concurrency_text = concurrency.to_string();
        let smtp_url = sink.url();
        let pgstat = crate::pgstat::Probe::start(&env.pool).await;
        let meter = via.meter(CpuMeter::new());
        let watch = load::Watch::start();
        let cpu_before = meter.read();
        let mailer = env.spawn(
            "oncehook-mailer",
            &via.vars(&[
                ("ONCEHOOK_METRICS_ADDR", metrics_addr.as_str()),
                ("ONCEHOOK_SMTP_URL", smtp_url.as_str()),
                ("ONCEHOOK_MAIL_CONCURRENCY", concurrency_text.as_str()),
            ]),
            &[],
        );
        let mut stats = accepted_rate(&sink, k).await;
        let cpu = meter.since(&cpu_before);
        let load = watch.finish(
            &format!(
                "mailer{}, SMTP {} ms, round {round}",
                route.suffix(),
                answer.as_millis()
            ),
            attempt,
        );
        let passed = via.passed();
        // Anything sent twice would show up here once the queue is empty.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let metrics = [format!("http://{metrics_addr}/metrics")];
        stats.fixed =
            histogram_percentiles(env, &metrics, "oncehook_mailer_send_duration_seconds").await;
        peaks.record(
            "oncehook-mailer",
            mailer.pid(),
            &format!("{k} emails, SMTP {} ms", answer.as_millis()),
        );
        stop_all(vec![mailer]);
        via.settle();
        let statements = pgstat
            .finish(
                &env.pool,
                &format!(
                    "the mailer{}, SMTP {} ms, round {round}",
                    route.suffix(),
                    answer.as_millis()
                ),
                k as f64,
                "email",
            )
            .await;
        MailerRun {
            answer,
            emails: k,
            worker: worker_stats,
            mailer: stats,
            accepted: sink.accepted(),
            connections: sink.connections(),
            peak_sessions: sink.peak_sessions(),
            route,
            round,
            cpu,
            statements,
            passed,
            load,
        }
    }
}

/// Emails accepted per second by `sink`, from the first to the `k`-th.
async fn accepted_rate(sink: &SmtpSink, k: usize) -> Stats {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let poll = Duration::from_millis(10);
    let mut first: Option<(Instant, usize)> = None;
    let mut last = 0;
    for _ in 0..(PHASE_TIMEOUT.as_millis() / poll.as_millis()) {
        let now = Instant::now();
        if now > deadline {
            break;
        }
        last = sink.accepted();
        if last > 0 && first.is_none() {
            first = Some((now, last));
        }
        if last >= k {
            break;
        }
        tokio::time::sleep(poll).await;
    }
    let Some((first_at, first_count)) = first else {
        eprintln!("bench: warning: the mailer sent nothing");
        return Stats::default();
    };
    if last < k {
        eprintln!("bench: warning: only {last} of {k} emails sent before the time limit");
    }
    Stats {
        ok: last.saturating_sub(first_count) as u64,
        window: Instant::now().saturating_duration_since(first_at),
        ..Stats::default()
    }
}

/// The phase's rows and notes.
pub fn report(phase: &MailerPhase, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let c = phase.concurrency;
    let mut answers: Vec<Duration> = phase.runs.iter().map(|r| r.answer).collect();
    answers.dedup();
    for answer in answers {
        let ms = answer.as_millis();
        let mut fed = false;
        for route in [Route::Direct, Route::Pooled] {
            let runs: Vec<&MailerRun> = phase
                .runs
                .iter()
                .filter(|r| r.answer == answer && r.route == route)
                .collect();
            let Some(run) = median_run(&runs, |r| r.mailer.rate()) else {
                continue;
            };
            if !fed {
                fed = true;
                rows.push(Row::new(
                    format!(
                        "  worker ×1 feeding the mailer run (SMTP {ms} ms), {} events",
                        run.emails
                    ),
                    "events/s",
                    &run.worker,
                    "(the rate to keep up with)".to_owned(),
                ));
            }
            let vs = if run.answer.is_zero() {
                format!(
                    "vs the worker's events/s: {} (goal ≥ 1.00×)",
                    crate::ratio(run.mailer.rate(), run.worker.rate())
                )
            } else {
                let goal = 0.8 * f64::from(c) / run.answer.as_secs_f64();
                format!(
                    "vs concurrency / answer time ({:.0}/s): {} (goal ≥ 0.80×, i.e. ≥ {goal:.0} emails/s)",
                    f64::from(c) / run.answer.as_secs_f64(),
                    crate::ratio(run.mailer.rate(), f64::from(c) / run.answer.as_secs_f64()),
                )
            };
            rows.push(Row::new(
                format!(
                    "mailer (concurrency {c}), SMTP answering after {ms} ms, {} emails{}, median of {} round{}",
                    run.emails,
                    route.suffix(),
                    runs.len(),
                    if runs.len() == 1 { "" } else { "s" }
                ),
                "emails/s",
                &run.mailer,
                vs,
            ));
        }
    }
    for run in &phase.runs {
        let ms = run.answer.as_millis();
        let what = format!(
            "mailer{}, SMTP {ms} ms, round {}",
            run.route.suffix(),
            run.round
        );
        if run.accepted != run.emails {
            notes.push(format!(
                "{what}: the listener accepted {} messages for {} outbox rows",
                run.accepted, run.emails
            ));
        }
        notes.push(format!(
            "{what}: {} SMTP connections for {} emails, at most {} open at once",
            run.connections, run.accepted, run.peak_sessions
        ));
    }
    notes.push(
        "mailer latencies are per send (connection checkout to the server's answer), from its \
         oncehook_mailer_send_duration_seconds histogram; the mailer runs alone, after the worker \
         (straight to PostgreSQL, as it ships) has applied the events and the relay has queued \
         every email"
            .to_owned(),
    );
}
