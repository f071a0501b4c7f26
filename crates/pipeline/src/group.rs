//! Grouping: the deliveries in flight share transactions (group commit),
//! so Postgres pays for one `BEGIN`/`COMMIT`, one WAL flush and one run of
//! the set-based statements per group instead of per delivery.
//!
//! Each delivery's handler task hands its delivery to the [`Grouper`] and
//! waits for its result. A few committer tasks take what is queued: a
//! committer that is free takes the next delivery at once (nothing waits
//! for company: a lone delivery is committed alone, at once) together with
//! whatever else is queued by then, up to `size`; while its transaction
//! runs, new deliveries queue for the next free committer. Copies of one
//! delivery in one group are duplicates of the first, as across groups.
//!
//! A group that fails — a permanent rejection of one delivery, a database
//! error, a failed commit, a deadlock — is rolled back whole, and each of
//! its deliveries is redone alone through the same [`commit`]: the bad one
//! gets its own error, the others commit without it. Nothing of a group is
//! answered before its commit, so the consume loop acks only committed
//! deliveries.

use std::sync::Arc;

use oncehook_common::store::Pooled;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::{Delivery, Effect, ProcessError, Processed, commit};

type Answer = Result<Processed, ProcessError>;

struct Job {
    delivery: Arc<Delivery>,
    reply: oneshot::Sender<Answer>,
}

/// Hands deliveries to committer tasks; see the module documentation.
pub struct Grouper {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Grouper {
    /// Starts `committers` tasks committing groups of up to `size`.
    pub fn start<E: Effect>(pool: Pooled, effect: Arc<E>, size: usize, committers: usize) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        InCommit::gauge().set(0.0);
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..committers.max(1) {
            tokio::spawn(run_committer(
                pool.clone(),
                effect.clone(),
                queue.clone(),
                size.max(1),
            ));
        }
        Grouper { jobs }
    }

    /// Commits `delivery` with whatever else is in flight; `None` if the
    /// committers are gone (the worker is stopping). While it waits, the
    /// delivery counts in `oncehook_worker_deliveries_in_commit`.
    pub async fn submit(&self, delivery: Arc<Delivery>) -> Option<Answer> {
        let (reply, answer) = oneshot::channel();
        let _counted = InCommit::enter();
        self.jobs.send(Job { delivery, reply }).ok()?;
        answer.await.ok()
    }
}

/// One delivery handed to the committers and not answered yet, counted in
/// the gauge for as long as it lives (a cancelled wait is uncounted too).
struct InCommit;

impl InCommit {
    fn gauge() -> metrics::Gauge {
        metrics::gauge!("oncehook_worker_deliveries_in_commit")
    }

    fn enter() -> Self {
        Self::gauge().increment(1.0);
        InCommit
    }
}

impl Drop for InCommit {
    fn drop(&mut self) {
        Self::gauge().decrement(1.0);
    }
}

async fn run_committer<E: Effect>(
    pool: Pooled,
    effect: Arc<E>,
    queue: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>,
    size: usize,
) {
    // Jobs taken from the queue that could not join the last group.
    let mut held: Vec<Job> = Vec::new();
    loop {
        if held.is_empty() {
            // The one idle committer waits for the next delivery, holding
            // the queue; the others wait for the queue.
            let mut queue = queue.lock().await;
            match queue.recv().await {
                Some(job) => held.push(job),
                None => return,
            }
            drain(&mut queue, &mut held, size);
        } else if let Ok(mut queue) = queue.try_lock() {
            // Never wait for the queue with deliveries in hand: the idle
            // committer may hold it until the next delivery comes.
            drain(&mut queue, &mut held, size);
        }
        let rest = held.split_off(held.len().min(size));
        run(&pool, &*effect, std::mem::replace(&mut held, rest)).await;
    }
}

/// Adds what is queued to `held`, up to `size` jobs.
fn drain(queue: &mut mpsc::UnboundedReceiver<Job>, held: &mut Vec<Job>, size: usize) {
    while held.len() < size {
        match queue.try_recv() {
            Ok(job) => held.push(job),
            Err(_) => break,
        }
    }
}

/// Commits one group and answers every job in it.
async fn run<E: Effect>(pool: &Pooled, effect: &E, group: Vec<Job>) {
    let deliveries: Vec<&Delivery> = group.iter().map(|job| &*job.delivery).collect();
    let result = commit(pool, effect, &deliveries).await;
    drop(deliveries);
    match result {
        Ok(results) => {
            for (job, processed) in group.into_iter().zip(results) {
                let _ = job.reply.send(Ok(processed));
            }
        }
        Err(err) if group.len() == 1 => {
            if let Some(job) = group.into_iter().next() {
                let _ = job.reply.send(Err(err));
            }
        }
        Err(err) => {
            tracing::info!(%err, deliveries = group.len(), "group rolled back; committing its deliveries one by one");
            metrics::counter!("oncehook_worker_batches_split_total").increment(1);
            for job in group {
                let answer = commit(pool, effect, &[&*job.delivery])
                    .await
                    .map(|results| {
                        results
                            .into_iter()
                            .next()
                            .unwrap_or(Processed::Duplicate { same_body_as: None })
                    });
                let _ = job.reply.send(answer);
            }
        }
    }
}
