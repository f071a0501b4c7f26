//! The bench's throughput-issue rows, kept apart from the pipeline phases:
//! ingest's publish cost split into broker, topology, runtime hop and
//! ingest (`ingest`), the mailer against a real SMTP listener (`mailer`),
//! the binaries' peak memory against their limits (`memory`), and the
//! naive handler a user would otherwise write (`naive`).
//!
//! `ONCEHOOK_BENCH_ONLY=speed` runs only these phases (for iterating on
//! them); `make bench` runs them after the pipeline's.

mod ingest;
mod mailer;
mod memory;
mod naive;

use crate::{Knobs, Row, cpu};

/// Rows, notes and CPU budgets these phases add to the report.
pub struct Extra {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    pub cpu: cpu::Report,
}

/// Whether only these phases should run.
pub fn only() -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "speed")
}

pub async fn phases(knobs: &Knobs) -> Extra {
    let mut peaks = memory::Peaks::default();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let probe = crate::load::recorded(
        "ingest's probes (B, B′, B″, the queue arguments, actix workers)",
        ingest::ingest_probe(knobs, &mut peaks),
    )
    .await;
    ingest::report(&probe, knobs, &mut rows, &mut notes);
    let cpu = ingest::cpu_report(&probe, knobs);
    let mail = mailer::mailer_phase(knobs, &mut peaks).await;
    mailer::report(&mail, &mut rows, &mut notes);
    let naive_runs = crate::load::recorded("the naive handler", naive::naive_phase(knobs)).await;
    let ours = naive::Oncehook {
        ack: probe
            .runs
            .iter()
            .find(|r| r.workers == "2")
            .map(|r| &r.stats),
        applied: mail.runs.first().map(|r| r.worker.rate()),
        // The first run of each answer: straight to PostgreSQL where both
        // routes ran.
        mailed: mail
            .runs
            .iter()
            .map(|r| (r.answer, r.mailer.rate()))
            .collect(),
    };
    naive::report(&naive_runs, &ours, knobs, &mut rows, &mut notes);
    rows.extend(peaks.rows());
    notes.push(
        "peak RSS is each process's VmHWM from /proc/<pid>/status, read just before it is stopped \
         (the highest of its runs)"
            .to_owned(),
    );
    Extra { rows, notes, cpu }
}
