//! Group commit: several prefetched deliveries share one transaction, so
//! Postgres pays for one `BEGIN`/`COMMIT` (and one WAL flush), one claim
//! statement and one outcome statement per batch instead of per delivery.
//!
//! Each delivery's handler task hands its decoded event to the [`Batcher`]
//! and waits for a [`Reply`]. The task whose event fills the batch, or the
//! one that found no batch forming and waited `linger` for others, runs the
//! batch: claim every delivery in one statement (insert-first; duplicates
//! — the same event id, or the same signed body under another — are only
//! counted), lock the named orders in id order (concurrent batches
//! wait for each other instead of deadlocking), apply each new event's
//! effect — which may defer work to the end of the batch: the commerce
//! effect moves the stock of every order the batch paid in a few
//! statements at the end, locking the products in sku order only then, so
//! these hot rows are held for the batch's last statements and commit, not
//! for all of it — record every outcome in one statement, commit. Only after
//! the commit does any handler return its verdict (so the consume loop acks
//! after the commit, as before).
//!
//! Anything going wrong — a permanent rejection of one event, a database
//! error, a failed commit, a deadlock — rolls the whole batch back and every
//! delivery of it is processed alone, each in its own transaction
//! ([`Reply::Alone`]): the bad event gets its own verdict (dead letter, or
//! held and retried), the others commit without it. None of the batch is
//! acked before that. A batch of one is never formed: with `batch.size = 1`
//! the worker processes every delivery alone, exactly as without batching.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncehook_common::store::{dedup as dedup_store, ledger as ledger_store};
use sqlx::PgPool;
use tokio::sync::oneshot;

use crate::effect::{Applied, Effect};
use crate::processor::{self, Decoded, ProcessError, Processed};

/// What became of a delivery handed to the batcher.
#[derive(Debug)]
pub enum Reply {
    /// Committed with its batch.
    Done(Processed),
    /// The batch was rolled back: process this delivery on its own.
    Alone,
}

struct Job {
    decoded: Arc<Decoded>,
    reply: oneshot::Sender<Reply>,
}

/// Collects deliveries into batches of up to `size`, waiting at most
/// `linger` for a batch to fill.
pub struct Batcher {
    size: usize,
    linger: Duration,
    forming: Mutex<Vec<Job>>,
}

impl Batcher {
    pub fn new(size: usize, linger: Duration) -> Self {
        Batcher {
            size: size.max(1),
            linger,
            forming: Mutex::new(Vec::new()),
        }
    }

    /// Hands `decoded` to a batch and waits until that batch committed or
    /// was rolled back.
    pub async fn submit<E: Effect>(
        &self,
        pool: &PgPool,
        effect: &E,
        decoded: Arc<Decoded>,
    ) -> Reply {
        let (reply, answer) = oneshot::channel();
        let (full, first) = {
            let Ok(mut forming) = self.forming.lock() else {
                return Reply::Alone;
            };
            forming.push(Job { decoded, reply });
            let full = if forming.len() >= self.size {
                std::mem::take(&mut *forming)
            } else {
                Vec::new()
            };
            (full, forming.len() == 1)
        };
        if !full.is_empty() {
            run(pool, effect, full).await;
        } else if first {
            // This delivery started a batch: wait for others, then run
            // whatever gathered (unless a full batch took it meanwhile).
            tokio::time::sleep(self.linger).await;
            let gathered = match self.forming.lock() {
                Ok(mut forming) => std::mem::take(&mut *forming),
                Err(_) => Vec::new(),
            };
            if !gathered.is_empty() {
                run(pool, effect, gathered).await;
            }
        }
        // Answered by whichever task ran the batch; a dropped sender (that
        // task panicked) means nothing was committed for it.
        answer.await.unwrap_or(Reply::Alone)
    }
}

/// Runs one batch and answers every job in it.
async fn run<E: Effect>(pool: &PgPool, effect: &E, jobs: Vec<Job>) {
    // A second copy of a signed body in the same batch (under the same
    // event id or another) is processed alone afterwards: it is a duplicate
    // then, and counted as one. One statement cannot claim a body twice.
    let mut seen = HashSet::new();
    let (batch, repeats): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|job| {
        let (source, body) = job.decoded.key.signed_body();
        seen.insert((source.to_owned(), body.to_owned()))
    });
    for job in repeats {
        let _ = job.reply.send(Reply::Alone);
    }
    if batch.len() == 1 {
        // Nothing to share: the delivery's own transaction is as cheap.
        for job in batch {
            let _ = job.reply.send(Reply::Alone);
        }
        return;
    }
    let started = Instant::now();
    match commit(pool, effect, &batch).await {
        Ok(results) => {
            metrics::histogram!("oncehook_worker_transaction_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            metrics::histogram!("oncehook_worker_batch_size").record(batch.len() as f64);
            for (job, processed) in batch.into_iter().zip(results) {
                let _ = job.reply.send(Reply::Done(processed));
            }
        }
        Err(err) => {
            tracing::info!(%err, deliveries = batch.len(), "batch rolled back; processing its deliveries one by one");
            metrics::counter!("oncehook_worker_batches_split_total").increment(1);
            for job in batch {
                let _ = job.reply.send(Reply::Alone);
            }
        }
    }
}

/// One transaction for the batch; the results are in the jobs' order.
/// Any error means nothing was committed.
async fn commit<E: Effect>(
    pool: &PgPool,
    effect: &E,
    batch: &[Job],
) -> Result<Vec<Processed>, ProcessError> {
    let mut tx = pool.begin().await?;
    let claims: Vec<_> = batch
        .iter()
        .map(|job| processor::claim_of(&job.decoded))
        .collect();
    // In the jobs' order: `Some` for a duplicate, `None` for a fresh claim.
    let duplicates: Vec<Option<Processed>> = dedup_store::claim_many(&mut tx, &claims)
        .await?
        .into_iter()
        .map(Processed::duplicate)
        .collect();
    let mut order_refs: Vec<String> = batch
        .iter()
        .zip(&duplicates)
        .filter(|(_, duplicate)| duplicate.is_none())
        .filter_map(|(job, _)| job.decoded.event.order_ref.clone())
        .collect();
    order_refs.sort_unstable();
    order_refs.dedup();
    if !order_refs.is_empty() {
        ledger_store::lock_orders(&mut tx, &order_refs).await?;
    }
    let mut deferred = E::Deferred::default();
    let mut results: Vec<Processed> = Vec::with_capacity(batch.len());
    let mut finished: Vec<dedup_store::Finish<'_>> = Vec::with_capacity(batch.len());
    for (job, duplicate) in batch.iter().zip(duplicates) {
        if let Some(duplicate) = duplicate {
            results.push(duplicate);
            continue;
        }
        let Applied { outcome, detail } =
            processor::apply_claimed(&mut tx, effect, &job.decoded, Some(&mut deferred)).await?;
        results.push(Processed::Done { outcome, detail });
    }
    effect.finish_batch(&mut tx, deferred).await?;
    for (job, result) in batch.iter().zip(&results) {
        if let Processed::Done { outcome, detail } = result {
            finished.push(dedup_store::Finish {
                key: &job.decoded.key,
                outcome: outcome.as_str(),
                detail,
            });
        }
    }
    if !finished.is_empty() {
        dedup_store::finish_many(&mut tx, &finished).await?;
    }
    tx.commit().await?;
    Ok(results)
}
