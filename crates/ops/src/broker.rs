//! Broker access for the tool: one bounded connection attempt, queue depths
//! and consumers, and peeking at the dead-letter queue.
//!
//! Peeking never loses or reorders messages: a channel consumes every
//! message (manual ack, a prefetch window instead of one `basic.get` round
//! trip per message), the tool looks at them, and closing the channel
//! without acking hands them all back to the queue in their order.
//!
//! Peeks take turns ([`oncehook_common::peek_lock`]): while one holds the
//! dead letters unacked, another operator's `dlq list` (or `stats`, or the
//! worker's dead-letter gauge) would see none, so it waits for the lock
//! instead, and the lock is let go only once the queue shows the letters again.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_lite::StreamExt as _;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, QueuePurgeOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use oncehook_common::amqp::{self, short};
use oncehook_common::broker::queues;
use oncehook_common::peek_lock::{self, PeekLock};
use oncehook_common::{Config, Topology};

use crate::dlq::letter::Letter;

/// Never hold more than this many messages in one peek (the largest
/// prefetch window a consumer can ask for: every one stays unacked).
pub const PEEK_LIMIT: usize = u16::MAX as usize;
/// How long to wait for the broker to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for another peek to hand the dead letters back.
const LOCK_WAIT: Duration = Duration::from_secs(60);
/// A peek stops when the next dead letter takes longer than this to arrive.
const DELIVERY_WAIT: Duration = Duration::from_secs(5);
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
pub async fn queue_info(conn: &Connection, queue: &str) -> anyhow::Result<Option<(u32, u32)>> {
    let depth = queues::depth(conn, queue)
        .await
        .with_context(|| format!("inspecting queue {queue}"))?;
    Ok(depth.map(|d| (d.messages, d.consumers)))
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
    /// Fewer were read than the queue held ([`PEEK_LIMIT`], or a letter slow to arrive).
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

/// Every message of the dead-letter queue (up to [`PEEK_LIMIT`]), consumed and held
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
    // How many are there now (nobody else holds any: we have the lock).
    let ready = queue_info(conn, &queue)
        .await?
        .map_or(0, |(n, _)| n as usize);
    let wanted = ready.min(PEEK_LIMIT);
    let mut letters = Vec::with_capacity(wanted);
    if wanted > 0 {
        // A consumer whose prefetch window holds them all streams them in
        // queue order, without one round trip per message as `basic.get`
        // needs (none is acked, so the window must fit every one).
        let window = u16::try_from(wanted).unwrap_or(u16::MAX);
        channel
            .basic_qos(window, BasicQosOptions { global: false })
            .await
            .context("setting the peek's prefetch")?;
        let mut consumer = channel
            .basic_consume(
                short(&queue),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("reading {queue}"))?;
        while letters.len() < wanted {
            let next = tokio::time::timeout(DELIVERY_WAIT, consumer.next()).await;
            let Ok(Some(got)) = next else { break };
            let delivery = got.with_context(|| format!("reading {queue}"))?;
            let mut letter = Letter::from_delivery(delivery, topology);
            if !keep_body(&letter) {
                letter.forget_body();
            }
            letters.push(letter);
        }
        // No more deliveries: what already arrived stays held, unacked.
        let _ = channel
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await;
    }
    let truncated = ready > letters.len();
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
