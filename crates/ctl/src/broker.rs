//! Broker access for the tool: one bounded connection attempt, queue depths
//! and consumers, and peeking at the dead-letter queue.
//!
//! Peeking never loses or reorders messages: a channel takes every message
//! with `basic.get` (manual ack), the tool looks at them, and closing the
//! channel without acking hands them all back to the queue in their order.
//!
//! Peeks take turns ([`oncehook_common::peek_lock`]): while one holds the
//! dead letters unacked, another operator's `dlq list` (or `stats`, or the
//! worker's dead-letter gauge) would see none, so it waits for the lock
//! instead, and the lock is let go only once the queue shows the letters again.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueuePurgeOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use oncehook_common::amqp::{self, short};
use oncehook_common::peek_lock::{self, PeekLock};
use oncehook_common::{Config, Topology};

use crate::dlq::letter::Letter;

/// Never hold more than this many messages in one peek.
pub const PEEK_LIMIT: usize = 100_000;
/// How long to wait for the broker to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for another peek to hand the dead letters back.
const LOCK_WAIT: Duration = Duration::from_secs(60);
/// How long to wait for handed-back letters to be counted in the queue again.
const RETURN_WAIT: Duration = Duration::from_secs(5);

/// Connects to the broker: one attempt per node (a cluster's nodes in
/// turn), each bounded in time.
pub async fn connect(settings: &Config) -> anyhow::Result<Connection> {
    amqp::connect_any(&settings.broker.nodes, "oncehookctl", CONNECT_TIMEOUT)
        .await
        .context("connecting to RabbitMQ")
}

/// Closes the connection (best effort).
pub async fn close(conn: Connection) {
    let _ = conn.close(200, "oncehookctl done".into()).await;
}

/// (ready messages, consumers) of `queue`, `None` if it does not exist.
/// Ready only: messages a peek holds unacked are not counted (see [`peek`]).
/// Uses a throwaway channel: a failed passive declare closes it.
pub async fn queue_info(conn: &Connection, queue: &str) -> anyhow::Result<Option<(u32, u32)>> {
    let ch = conn.create_channel().await.context("opening a channel")?;
    let declared = ch
        .queue_declare(
            short(queue),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    match declared {
        Ok(q) => {
            let _ = ch.close(200, "bye".into()).await;
            Ok(Some((q.message_count(), q.consumer_count())))
        }
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(anyhow::Error::new(err).context(format!("inspecting queue {queue}"))),
    }
}

fn is_not_found(err: &lapin::Error) -> bool {
    let text = err.to_string();
    text.contains("NOT_FOUND") || text.contains("404") || text.contains("no queue")
}

/// Deletes every message of `queue`; returns how many.
pub async fn purge_queue(conn: &Connection, queue: &str) -> anyhow::Result<u32> {
    let ch = conn.create_channel().await.context("opening a channel")?;
    let purged = ch
        .queue_purge(short(queue), QueuePurgeOptions::default())
        .await
        .with_context(|| format!("purging {queue}"))?;
    let _ = ch.close(200, "bye".into()).await;
    Ok(purged)
}

/// Dead letters held unacked on `channel` (see [`peek`]), under the peek lock.
pub struct Peek {
    pub channel: Channel,
    pub letters: Vec<Letter>,
    /// The peek stopped at [`PEEK_LIMIT`].
    pub truncated: bool,
    lock: PeekLock,
    queue: String,
}

impl Peek {
    /// Hands every peeked message back to the queue, waits (briefly) until
    /// the queue counts all but the `acked` ones as ready again, and lets
    /// the next peek in; returns the letters.
    pub async fn release(self, conn: &Connection, acked: usize) -> (Vec<Letter>, bool) {
        let _ = self.channel.close(200, "peek done".into()).await;
        let held = u32::try_from(self.letters.len().saturating_sub(acked)).unwrap_or(u32::MAX);
        let since = Instant::now();
        while since.elapsed() < RETURN_WAIT {
            match queue_info(conn, &self.queue).await {
                Ok(Some((ready, _))) if ready < held => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => break,
            }
        }
        self.lock.release().await;
        (self.letters, self.truncated)
    }
}

/// Takes the peek lock, waiting up to [`LOCK_WAIT`] for another peek
/// (another operator's `dlq` command) to finish.
async fn lock_peeks(conn: &Connection, topology: &Topology) -> anyhow::Result<PeekLock> {
    let since = Instant::now();
    loop {
        let taken = peek_lock::try_lock(conn, topology)
            .await
            .context("taking the dead-letter peek lock")?;
        if let Some(lock) = taken {
            return Ok(lock);
        }
        if since.elapsed() > LOCK_WAIT {
            bail!(
                "another `oncehookctl dlq` command has held the dead letters of {} for over {LOCK_WAIT:?} (a replay waiting for its 'yes'?); try again when it is done",
                topology.dead()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every message of the dead-letter queue, taken with `basic.get` and held
/// unacked on the returned channel (closing it hands them all back in
/// order). Bodies are kept only where `keep_body` says so.
pub async fn peek(
    conn: &Connection,
    topology: &Topology,
    keep_body: impl Fn(&Letter) -> bool,
) -> anyhow::Result<Peek> {
    let queue = topology.dead();
    if queue_info(conn, &queue).await?.is_none() {
        bail!(
            "queue {queue} does not exist: is ONCEHOOK_AMQP_PREFIX right (it is {:?}), and has a worker ever started?",
            topology.prefix()
        );
    }
    let lock = lock_peeks(conn, topology).await?;
    let channel = conn.create_channel().await.context("opening a channel")?;
    let mut letters = Vec::new();
    let mut truncated = false;
    loop {
        if letters.len() >= PEEK_LIMIT {
            truncated = true;
            break;
        }
        let got = channel
            .basic_get(short(&queue), BasicGetOptions { no_ack: false })
            .await
            .with_context(|| format!("reading {queue}"))?;
        let Some(msg) = got else { break };
        let remaining = msg.message_count;
        let mut letter = Letter::from_delivery(msg.delivery, topology);
        if !keep_body(&letter) {
            letter.forget_body();
        }
        letters.push(letter);
        if remaining == 0 {
            break;
        }
    }
    Ok(Peek {
        channel,
        letters,
        truncated,
        lock,
        queue,
    })
}

/// Looks at every dead letter without keeping bodies, and hands them back.
pub async fn look(conn: &Connection, topology: &Topology) -> anyhow::Result<(Vec<Letter>, bool)> {
    Ok(peek(conn, topology, |_| false)
        .await?
        .release(conn, 0)
        .await)
}
