//! The mailer against a real SMTP listener on 127.0.0.1 (the test sink),
//! once answering at once and once taking 200 ms to accept each message.
//!
//! Each run first loads captured events through ingest, lets one worker
//! apply them (its events/s is the rate the mailer has to keep up with) and
//! waits until the relay has put every confirmation email into the email
//! queue; only then does the mailer start, so its rate is its own: emails
//! accepted by the listener per second, from the first to the last. Goals:
//! answering at once, at least the worker's events/s; with a 200 ms answer,
//! at least 0.8 × concurrency / 0.2 s.

use std::time::{Duration, Instant};

use oncehook_e2e::{SmtpSink, TestEnv, broker, free_port};

use super::memory::Peaks;
use crate::{
    Knobs, PHASE_TIMEOUT, Row, Stats, count_processed, drain_rate, histogram_percentiles, preload,
    seed_shop, stop_all, wait_for,
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

pub async fn mailer_phase(knobs: &Knobs, peaks: &mut Peaks) -> MailerPhase {
    let mut env = TestEnv::new().await;
    let fast = knobs.events;
    let slow = knobs.events.min(SLOW_EMAILS);
    seed_shop(&env, true, 1, (fast + slow) as i64).await;
    let (mut ingest, base) = env.start_ingest().await;
    let concurrency = concurrency();
    let mut runs = Vec::new();
    for (round, (answer, k)) in [(Duration::ZERO, fast), (SLOW_ANSWER, slow)]
        .into_iter()
        .enumerate()
    {
        let first = if round == 0 { 1 } else { fast + 1 };
        eprintln!("bench: mailer: loading {k} captured events (no worker, no mailer)");
        preload(
            &env,
            &base,
            first,
            k,
            knobs.concurrency,
            &format!("m{round}"),
        )
        .await;
        let before = count_processed(&env).await;
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

        let sink = SmtpSink::start_with_delay(answer).await;
        eprintln!(
            "bench: mailer (concurrency {concurrency}) sending {k} emails, SMTP answering after {} ms",
            answer.as_millis()
        );
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let concurrency_text = concurrency.to_string();
        let smtp_url = sink.url();
        let mailer = env.spawn(
            "oncehook-mailer",
            &[
                ("ONCEHOOK_METRICS_ADDR", metrics_addr.as_str()),
                ("ONCEHOOK_SMTP_URL", smtp_url.as_str()),
                ("ONCEHOOK_MAIL_CONCURRENCY", concurrency_text.as_str()),
            ],
            &[],
        );
        let mut stats = accepted_rate(&sink, k).await;
        // Anything sent twice would show up here once the queue is empty.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let metrics = [format!("http://{metrics_addr}/metrics")];
        stats.fixed =
            histogram_percentiles(&env, &metrics, "oncehook_mailer_send_duration_seconds").await;
        peaks.record(
            "oncehook-mailer",
            mailer.pid(),
            &format!("{k} emails, SMTP {} ms", answer.as_millis()),
        );
        stop_all(vec![mailer]);
        runs.push(MailerRun {
            answer,
            emails: k,
            worker: worker_stats,
            mailer: stats,
            accepted: sink.accepted(),
            connections: sink.connections(),
            peak_sessions: sink.peak_sessions(),
        });
    }
    peaks.record("oncehook-ingest", ingest.pid(), "mailer phase preload");
    ingest.signal("TERM");
    ingest.wait_exit(Duration::from_secs(15));
    MailerPhase { concurrency, runs }
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
    for run in &phase.runs {
        let ms = run.answer.as_millis();
        rows.push(Row::new(
            format!(
                "  worker ×1 feeding the mailer run (SMTP {ms} ms), {} events",
                run.emails
            ),
            "events/s",
            &run.worker,
            "(the rate to keep up with)".to_owned(),
        ));
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
                "mailer (concurrency {c}), SMTP answering after {ms} ms, {} emails",
                run.emails
            ),
            "emails/s",
            &run.mailer,
            vs,
        ));
        if run.accepted != run.emails {
            notes.push(format!(
                "mailer, SMTP {ms} ms: the listener accepted {} messages for {} outbox rows",
                run.accepted, run.emails
            ));
        }
        notes.push(format!(
            "mailer, SMTP {ms} ms: {} SMTP connections for {} emails, at most {} open at once",
            run.connections, run.accepted, run.peak_sessions
        ));
    }
    notes.push(
        "mailer latencies are per send (connection checkout to the server's answer), from its \
         oncehook_mailer_send_duration_seconds histogram; the mailer runs alone, after the worker \
         has applied the events and the relay has queued every email"
            .to_owned(),
    );
}
