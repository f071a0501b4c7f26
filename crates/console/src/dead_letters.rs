//! The console's picture of the dead-letter queue: a snapshot, read with the
//! ctl library's peek (so it takes turns with every other reader under the
//! peek lock, and loses or reorders nothing), kept in memory and shared by
//! every page.
//!
//! RabbitMQ cannot answer "which letters match this filter" without handing
//! every message over, and reading 10,000 letters takes about a second. So
//! pages read the snapshot, and ask the broker only for the queue's depth (one
//! passive declare on a kept connection). When the depth differs from the
//! snapshot's, or the snapshot is older than [`MAX_AGE`], the page is served
//! from the snapshot as it is — saying how old it is — and one refresh runs in
//! the background; the next page shows the new one. The first page after a
//! start waits for the first read. Operator actions act on the queue itself
//! (through the ctl verbs, which re-read it) and then refresh the snapshot
//! before answering, so an operator sees the result of their own action.
//!
//! Bodies are kept up to [`BODY_BUDGET`] bytes in all, so a letter's detail
//! page is usually served from memory too; a letter whose body was not kept
//! is read from the queue on demand.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapin::Connection;
use oncehook_common::{Config, Topology};
use oncehook_ops::broker;
use oncehook_ops::dlq::letter::Letter;
use time::OffsetDateTime;
use tokio::sync::{Mutex, RwLock};

/// A snapshot older than this is refreshed even if the depth did not change
/// (a letter replayed and another dead-lettered leave the depth alone).
const MAX_AGE: Duration = Duration::from_secs(30);
/// A background refresh waits until the snapshot is this old: while letters
/// keep arriving, pages do not keep the queue busy with peeks.
const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// Letter bodies kept in memory, in all; the rest are read on demand.
const BODY_BUDGET: usize = 64 * 1024 * 1024;

/// The dead letters as one read saw them.
pub struct Snapshot {
    /// In queue order, oldest first; bodies kept while the budget lasted.
    pub letters: Vec<Letter>,
    /// The queue held more than one read takes (see `broker::PEEK_LIMIT`).
    pub truncated: bool,
    /// When the read finished.
    pub taken_at: OffsetDateTime,
    taken: Instant,
}

impl Snapshot {
    /// The letter with this ID and how many identical copies the queue holds.
    pub fn find(&self, id: &str) -> Option<(&Letter, usize)> {
        let copies = self.letters.iter().filter(|l| l.facts.id == id).count();
        let first = self.letters.iter().find(|l| l.facts.id == id)?;
        Some((first, copies))
    }

    pub fn age(&self) -> Duration {
        self.taken.elapsed()
    }
}

/// What a page shows: the snapshot, and whether the queue has moved on.
pub struct View {
    pub snapshot: Arc<Snapshot>,
    /// Ready messages in the queue now, when the broker answered.
    pub depth_now: Option<u32>,
    /// The snapshot no longer matches the queue; a newer one is on its way.
    pub stale: bool,
}

/// The shared snapshot and what keeps it fresh.
pub struct DeadLetters {
    settings: Config,
    topology: Topology,
    current: RwLock<Option<Arc<Snapshot>>>,
    /// Serialises reads of the queue (one at a time per console).
    reading: Mutex<()>,
    refreshing: AtomicBool,
    /// A connection kept for depth checks; replaced when it breaks.
    conn: Mutex<Option<Connection>>,
}

impl DeadLetters {
    pub fn new(settings: Config, topology: Topology) -> Arc<DeadLetters> {
        Arc::new(DeadLetters {
            settings,
            topology,
            current: RwLock::new(None),
            reading: Mutex::new(()),
            refreshing: AtomicBool::new(false),
            conn: Mutex::new(None),
        })
    }

    /// The snapshot for a page: the current one (refreshed in the background
    /// when the queue has moved on), or, the first time, a fresh read.
    pub async fn view(self: &Arc<Self>) -> anyhow::Result<View> {
        let depth_now = self.depth().await;
        let current = self.current.read().await.clone();
        let Some(snapshot) = current else {
            let snapshot = self.refresh().await?;
            return Ok(View {
                snapshot,
                depth_now,
                stale: false,
            });
        };
        let moved = depth_now.is_some_and(|d| d as usize != snapshot.letters.len())
            || snapshot.age() > MAX_AGE;
        if moved {
            self.refresh_in_background(MIN_INTERVAL.saturating_sub(snapshot.age()));
        }
        Ok(View {
            snapshot,
            depth_now,
            stale: moved,
        })
    }

    /// Reads the queue now and makes that the snapshot (after an operator's
    /// action, and the first time).
    pub async fn refresh(&self) -> anyhow::Result<Arc<Snapshot>> {
        let _turn = self.reading.lock().await;
        let started = Instant::now();
        let conn = broker::connect(&self.settings).await?;
        let kept = AtomicUsize::new(0);
        let peeked = broker::peek(&conn, &self.topology, |l| {
            let keep = kept.load(Ordering::Relaxed) + l.body_len <= BODY_BUDGET;
            if keep {
                kept.fetch_add(l.body_len, Ordering::Relaxed);
            }
            keep
        })
        .await;
        let read = match peeked {
            Ok(peek) => Ok(peek.release(&conn, 0).await),
            Err(e) => Err(e),
        };
        broker::close(conn).await;
        let (letters, truncated) = read?;
        tracing::debug!(
            letters = letters.len(),
            truncated,
            bodies_kept = kept.load(Ordering::Relaxed),
            took_ms = started.elapsed().as_millis() as u64,
            "dead-letter snapshot refreshed"
        );
        let snapshot = Arc::new(Snapshot {
            letters,
            truncated,
            taken_at: OffsetDateTime::now_utc(),
            taken: Instant::now(),
        });
        *self.current.write().await = Some(snapshot.clone());
        Ok(snapshot)
    }

    /// Starts one refresh after `delay` unless one is on its way; failures
    /// are logged (the pages keep showing the last snapshot, with its age).
    fn refresh_in_background(self: &Arc<Self>, delay: Duration) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = me.refresh().await {
                tracing::warn!(error = %format!("{e:#}"), queue = %me.topology.dead(), "could not refresh the dead-letter snapshot");
            }
            me.refreshing.store(false, Ordering::Release);
        });
    }

    /// Ready messages in the dead-letter queue, on the kept connection;
    /// `None` when the broker does not answer (the page then says so).
    async fn depth(&self) -> Option<u32> {
        let mut conn = self.conn.lock().await;
        if conn.as_ref().is_none_or(|c| !c.status().connected()) {
            match broker::connect(&self.settings).await {
                Ok(c) => *conn = Some(c),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "dead-letter depth: broker unreachable");
                    *conn = None;
                    return None;
                }
            }
        }
        let c = conn.as_ref()?;
        match broker::queue_info(c, &self.topology.dead()).await {
            Ok(info) => Some(info.map_or(0, |(ready, _)| ready)),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "dead-letter depth: the broker did not answer");
                *conn = None;
                None
            }
        }
    }
}
