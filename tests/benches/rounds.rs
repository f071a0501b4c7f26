//! Ceilings and workers, interleaved in `ONCEHOOK_BENCH_ROUNDS` rounds:
//! C (and C′ when its script is there), worker ×1 at batch 1 and at the
//! configured batch, each straight to PostgreSQL and, at batch 1 (and at
//! every batch when the deploy files put the worker behind PgBouncer),
//! through PgBouncer in transaction mode (`routes`), the two routes in
//! alternating order; then, once, C with two workers' clients, two
//! workers at each batch, and one worker exporting its traces (straight,
//! as the worker ships). A worker or pgbench run during which other
//! processes were busy is repeated here ([`load`]).

use oncehook_e2e::TestEnv;

use crate::routes::{self, Route, Subject};
use crate::{
    Knobs, PgbenchBench, PgbenchRun, WorkerBench, WorkerRun, batches, group_script, load, pgstat,
    worker_rounds,
};

/// The batches whose worker runs also go through PgBouncer: batch 1 (what
/// the pooler costs the worker), and every batch when the deploy files put
/// the worker behind it.
fn pooled_batches(knobs: &Knobs) -> Vec<usize> {
    let shipped_pooled = routes::deployed("oncehook-worker") == Some(Route::Pooled);
    batches(knobs)
        .into_iter()
        .filter(|b| *b == 1 || shipped_pooled)
        .collect()
}

/// The ceilings, and the worker runs: straight to PostgreSQL, then through
/// PgBouncer.
pub async fn phase(knobs: &Knobs) -> (Vec<PgbenchRun>, Vec<WorkerRun>, Vec<WorkerRun>) {
    let batches = batches(knobs);
    let pooled = pooled_batches(knobs);
    let group = knobs.batch > 1 && group_script().is_some();
    let outside = worker_rounds(knobs);
    let mut workers = WorkerBench::on(
        TestEnv::new().await,
        knobs,
        knobs.rounds * (batches.len() + pooled.len()) + outside.len() + 1,
    )
    .await;
    let mut pgbench = PgbenchBench::new(knobs, knobs.rounds * (1 + usize::from(group)) + 2).await;
    // One run of each, not reported, so that the measured runs start from
    // tables that hold rows and have statistics, as a running
    // installation's do (see `analyze_filled`): on a table that was empty
    // when a statement was first planned, its generic plan scans the whole
    // table until the next ANALYZE. The pooled runs use the same database.
    eprintln!("bench: warm-up (not reported): C and worker ×1");
    pgstat::mute(true);
    drop(pgbench.run(1, 1, 0).await);
    drop(workers.run(1, knobs.batch.max(1), false, 0).await);
    pgstat::mute(false);
    let (mut pg, mut direct, mut through) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=knobs.rounds {
        eprintln!("bench: round {round} of {}", knobs.rounds);
        pg.extend(pgbench.run(1, 1, round).await);
        if group {
            pg.extend(pgbench.run(1, knobs.batch, round).await);
        }
        for batch in &batches {
            for route in Route::in_round(round) {
                if route == Route::Pooled && !pooled.contains(batch) {
                    continue;
                }
                let run = workers.run_via(route, 1, *batch, false, round).await;
                routes::record(Subject::Worker(*batch), route, round, run.figures());
                match route {
                    Route::Direct => direct.push(run),
                    Route::Pooled => through.push(run),
                }
            }
        }
    }
    pg.extend(pgbench.run(2, 1, 0).await);
    for (w, batch, traced) in outside {
        direct.push(workers.run(w, batch, traced, 0).await);
    }
    workers.stop();
    (pg, direct, through)
}

impl WorkerBench {
    /// [`WorkerBench::run_via`] straight to PostgreSQL.
    pub(crate) async fn run(
        &mut self,
        workers: usize,
        batch: usize,
        traced: bool,
        round: usize,
    ) -> WorkerRun {
        self.run_via(Route::Direct, workers, batch, traced, round)
            .await
    }

    /// Loads `events` captured events through ingest while no worker runs,
    /// then times `workers` workers at `batch` draining them, by `route`;
    /// once more when other processes were busy meanwhile ([`load`]).
    pub(crate) async fn run_via(
        &mut self,
        route: Route,
        workers: usize,
        batch: usize,
        traced: bool,
        round: usize,
    ) -> WorkerRun {
        let mut attempt = 0;
        loop {
            let mut run = self
                .run_once(route, workers, batch, traced, round, attempt)
                .await;
            if !load::repeat(&mut run.load, attempt) {
                return run;
            }
            attempt += 1;
        }
    }
}

impl PgbenchBench {
    /// C (`batch` 1: `deploy/bench/worker-tx.sql`) or C′ (`batch` > 1:
    /// [`group_script`] with `-D batch=N`) with as many clients as
    /// `workers` workers process deliveries concurrently; once more when
    /// other processes were busy meanwhile ([`load`]). `None` for C′
    /// without its script.
    pub(crate) async fn run(
        &mut self,
        workers: usize,
        batch: usize,
        round: usize,
    ) -> Option<PgbenchRun> {
        let mut attempt = 0;
        loop {
            let mut run = self.run_once(workers, batch, round, attempt).await?;
            if !load::repeat(&mut run.load, attempt) {
                return Some(run);
            }
            attempt += 1;
        }
    }
}

/// "worker ×1 batch 8, through PgBouncer (transaction), traced, round 2"
/// (the round when not 0).
pub(crate) fn worker_label(
    workers: usize,
    batch: usize,
    route: Route,
    traced: bool,
    round: usize,
) -> String {
    let mut label = format!("worker ×{workers} batch {batch}{}", route.suffix());
    if traced {
        label.push_str(", traced");
    }
    if round > 0 {
        label.push_str(&format!(", round {round}"));
    }
    label
}

impl WorkerRun {
    /// The run's figures for the report's first table.
    pub fn figures(&self) -> routes::Figures {
        routes::Figures {
            rate: self.stats.rate(),
            ops: self.events as f64,
            cpu: self.cpu.clone(),
            statements: self.statements,
            planning_ms: self.planning_ms,
            passed: self.passed,
            load: self.load.clone(),
        }
    }
}
