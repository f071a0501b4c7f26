//! Grouping: the deliveries in flight share transactions (group commit),
//! so Postgres pays for one `BEGIN`/`COMMIT`, one WAL flush and one run of
//! the set-based statements per group instead of per delivery.
//!
//! Each delivery's handler task hands its delivery to the [`Grouper`] and
//! waits for its result. `committers` tasks (`[worker] batch.committers`,
//! as many as the transactions the database should see from this worker)
//! take what is queued: a committer that is free takes the next delivery at
//! once (nothing waits for company: a lone delivery is committed alone, at
//! once) together with its share of whatever else is queued by then — the
//! queue split evenly over the free committers, at most `size` — so the
//! group size never caps the transactions in flight: with work waiting,
//! every committer has a transaction, and groups grow only when deliveries
//! arrive faster than transactions finish. Copies of one delivery in one
//! group are duplicates of the first, as across groups.
//!
//! Lanes (`oncehook_common::topology`): a delivery of the main lane is
//! taken before any of a bulk lane, so a quiet tenant's payment waits for
//! at most the groups already in commit, however long another tenant's
//! backlog; every [`BULK_TURN`]th take looks at the bulk lanes first, so a
//! busy main lane never starves them.
//!
//! A group that fails — a permanent rejection of one delivery, a database
//! error, a failed commit, a deadlock — is rolled back whole, and each of
//! its deliveries is redone alone through the same [`commit`]: the bad one
//! gets its own error, the others commit without it. Nothing of a group is
//! answered before its commit, so the consume loop acks only committed
//! deliveries.
//!
//! The committers are supervised (`background::supervise`, task
//! `committer`): one that panics (an effect's bug) is logged, counted and
//! started again; the deliveries of the group it held get no answer, so
//! their handlers fail as a panicking handler does (requeued as failed
//! deliveries): one that panics every time ends in the dead-letter queue
//! through the delivery limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use oncehook_common::background;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::{Delivery, Effect, ProcessError, Processed, commit};

type Answer = Result<Processed, ProcessError>;

/// Every this many takes, a committer looks at the bulk lanes first.
pub const BULK_TURN: u32 = 4;

/// The lane a delivery came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// `P.events`: taken first.
    Main,
    /// A tenant's bulk lane (`P.events-bulk.N`).
    Bulk,
}

struct Job {
    delivery: Arc<Delivery>,
    reply: oneshot::Sender<Answer>,
}

/// Hands deliveries to committer tasks; see the module documentation.
pub struct Grouper {
    main: mpsc::UnboundedSender<Job>,
    bulk: mpsc::UnboundedSender<Job>,
}

impl Grouper {
    /// Starts `committers` tasks committing groups of up to `size`, each
    /// supervised (started again after a panic until `shutdown`); they end
    /// when the grouper is dropped.
    pub fn start<E: Effect>(
        pool: Pooled,
        effect: Arc<E>,
        size: usize,
        committers: usize,
        shutdown: &Shutdown,
    ) -> Self {
        let (main, main_queue) = mpsc::unbounded_channel();
        let (bulk, bulk_queue) = mpsc::unbounded_channel();
        InCommit::gauge().set(0.0);
        Busy::gauge().set(0.0);
        let committers = committers.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Waiting {
                main: main_queue,
                bulk: bulk_queue,
                takes: 0,
            }),
            idle: AtomicUsize::new(committers),
        });
        for _ in 0..committers {
            let (pool, effect, shared) = (pool.clone(), effect.clone(), shared.clone());
            // Detached: a committer ends when the queue closes, and the
            // supervisor logs its panics.
            drop(background::supervise("committer", shutdown, move || {
                run_committer(pool.clone(), effect.clone(), shared.clone(), size.max(1))
            }));
        }
        Grouper { main, bulk }
    }

    /// Commits `delivery`, of `lane`, with whatever else is in flight;
    /// `None` if the committers are gone (the worker is stopping). While it
    /// waits, the delivery counts in `oncehook_worker_deliveries_in_commit`.
    pub async fn submit(&self, delivery: Arc<Delivery>, lane: Lane) -> Option<Answer> {
        let (reply, answer) = oneshot::channel();
        let _counted = InCommit::enter();
        let jobs = match lane {
            Lane::Main => &self.main,
            Lane::Bulk => &self.bulk,
        };
        jobs.send(Job { delivery, reply }).ok()?;
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

/// What the committers share: the waiting deliveries, and how many of
/// them are free.
struct Shared {
    queue: Mutex<Waiting>,
    idle: AtomicUsize,
}

/// The deliveries waiting for a committer, by lane.
struct Waiting {
    main: mpsc::UnboundedReceiver<Job>,
    bulk: mpsc::UnboundedReceiver<Job>,
    /// Takes so far (every [`BULK_TURN`]th looks at the bulk lanes first).
    takes: u32,
}

impl Waiting {
    /// The next delivery: the main lane's first (but see [`BULK_TURN`]),
    /// waiting for one if none is there; `None` once both are closed.
    async fn next(&mut self) -> Option<Job> {
        self.takes = self.takes.wrapping_add(1);
        let bulk_first = self.takes.is_multiple_of(BULK_TURN);
        let ready = if bulk_first {
            self.bulk
                .try_recv()
                .ok()
                .or_else(|| self.main.try_recv().ok())
        } else {
            self.try_next()
        };
        if ready.is_some() {
            return ready;
        }
        tokio::select! {
            biased;
            Some(job) = self.main.recv() => Some(job),
            Some(job) = self.bulk.recv() => Some(job),
            else => None,
        }
    }

    /// A waiting delivery, the main lane's first.
    fn try_next(&mut self) -> Option<Job> {
        self.main
            .try_recv()
            .ok()
            .or_else(|| self.bulk.try_recv().ok())
    }

    fn len(&self) -> usize {
        self.main.len() + self.bulk.len()
    }
}

/// A committer with a transaction, counted in
/// `oncehook_worker_transactions_in_flight` (and no longer idle) while it
/// lives.
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn gauge() -> metrics::Gauge {
        metrics::gauge!("oncehook_worker_transactions_in_flight")
    }

    /// Marks one committer busy; how many were free before (itself
    /// included).
    fn enter(idle: &'a AtomicUsize) -> (Self, usize) {
        let free = idle.fetch_sub(1, Ordering::SeqCst);
        Self::gauge().increment(1.0);
        (Busy(idle), free)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        Self::gauge().decrement(1.0);
    }
}

/// How many deliveries a committer takes: its even share of the `waiting`
/// ones (its own first delivery included) over the `free` committers, at
/// least one, at most `size`.
fn share(waiting: usize, free: usize, size: usize) -> usize {
    waiting.div_ceil(free.max(1)).clamp(1, size)
}

async fn run_committer<E: Effect>(pool: Pooled, effect: Arc<E>, shared: Arc<Shared>, size: usize) {
    loop {
        // The one idle committer waits for the next delivery, holding the
        // queue; the others wait for the queue.
        let mut queue = shared.queue.lock().await;
        let Some(first) = queue.next().await else {
            return;
        };
        let (busy, free) = Busy::enter(&shared.idle);
        let take = share(1 + queue.len(), free, size);
        let mut group = vec![first];
        while group.len() < take {
            match queue.try_next() {
                Some(job) => group.push(job),
                None => break,
            }
        }
        drop(queue);
        run(&pool, &*effect, group).await;
        drop(busy);
    }
}

/// Commits what one committer took, in one transaction (each tenant's
/// deliveries in its own scope: `commit`).
async fn run<E: Effect>(pool: &Pooled, effect: &E, taken: Vec<Job>) {
    run_group(pool, effect, taken).await;
}

/// Commits one group and answers every job in it.
async fn run_group<E: Effect>(pool: &Pooled, effect: &E, group: Vec<Job>) {
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

#[cfg(test)]
mod tests {
    use super::{BULK_TURN, Job, Waiting, share};
    use tokio::sync::{mpsc, oneshot};

    fn job(n: usize) -> (Job, usize) {
        let (reply, _) = oneshot::channel();
        let mut delivery = crate::tests::delivery();
        delivery.replays = i64::try_from(n).unwrap_or(0);
        let delivery = std::sync::Arc::new(delivery);
        (Job { delivery, reply }, n)
    }

    #[tokio::test]
    async fn the_main_lane_goes_first_and_the_bulk_lanes_get_every_fourth_take() {
        let (main_tx, main) = mpsc::unbounded_channel();
        let (bulk_tx, bulk) = mpsc::unbounded_channel();
        let mut waiting = Waiting {
            main,
            bulk,
            takes: 0,
        };
        // Bulk deliveries 100.., main deliveries 0..; all waiting already.
        for n in 0..20 {
            bulk_tx.send(job(100 + n).0).ok();
        }
        for n in 0..6 {
            main_tx.send(job(n).0).ok();
        }
        let mut taken = Vec::new();
        for _ in 0..10 {
            let next = waiting.next().await.expect("a job");
            taken.push(next.delivery.replays);
        }
        // Takes 1-3 main, 4 bulk, 5-7 main (the last three), 8 bulk, then bulk.
        assert_eq!(taken, [0, 1, 2, 100, 3, 4, 5, 101, 102, 103]);
        assert_eq!(BULK_TURN, 4);
        // A lone main delivery arriving later is next, ahead of the backlog.
        main_tx.send(job(7).0).ok();
        assert_eq!(waiting.try_next().map(|j| j.delivery.replays), Some(7));
    }

    #[test]
    fn the_waiting_deliveries_are_shared_over_the_free_committers() {
        // 32 waiting, 8 free committers, groups of up to 8: eight
        // transactions of four, not four of eight.
        assert_eq!(share(32, 8, 8), 4);
        // One free committer under load takes a full group.
        assert_eq!(share(20, 1, 8), 8);
        // A lone delivery goes alone, at once.
        assert_eq!(share(1, 8, 8), 1);
        // Group commit off: always one.
        assert_eq!(share(30, 2, 1), 1);
        // No committer counted free (a race): still at most `size`.
        assert_eq!(share(5, 0, 8), 5);
    }
}
