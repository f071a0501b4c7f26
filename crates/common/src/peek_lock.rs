//! One reader of the dead-letter queue at a time.
//!
//! `oncehookctl dlq` (and the console) look at dead letters by consuming
//! them all unacked and handing them back; while one holds them, another
//! `dlq list` would see none and a passive declare would count 0 (RabbitMQ's
//! `message_count` is messages *ready*, not the unacked ones). So every
//! reader of the queue's contents or depth first takes this lock: an
//! exclusive, auto-delete queue `P.dead.peek-lock` that only one connection
//! can declare at a time (others get `RESOURCE_LOCKED`), and that the broker
//! deletes by itself when its connection dies, so a crashed operator never
//! leaves it behind. No management plugin needed.

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ErrorKind};

use crate::Topology;
use crate::amqp::short;

/// AMQP reply code of a declare of another connection's exclusive queue.
const RESOURCE_LOCKED: u16 = 405;

/// The held lock; [`PeekLock::release`] lets the next reader in.
pub struct PeekLock {
    channel: Channel,
    queue: String,
}

/// The lock queue's name for `topology`.
pub fn lock_queue(topology: &Topology) -> String {
    format!("{}.peek-lock", topology.dead())
}

/// Takes the lock if nobody holds it: `Ok(None)` when another connection
/// does (a peek is in progress). Uses a channel of its own (a refused
/// declare closes it).
pub async fn try_lock(conn: &Connection, topology: &Topology) -> lapin::Result<Option<PeekLock>> {
    let queue = lock_queue(topology);
    let channel = conn.create_channel().await?;
    let declared = channel
        .queue_declare(
            short(&queue),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    match declared {
        Ok(_) => Ok(Some(PeekLock { channel, queue })),
        Err(err) if is_locked(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Whether `err` says another connection holds an exclusive queue.
pub fn is_locked(err: &lapin::Error) -> bool {
    matches!(err.kind(), ErrorKind::ProtocolError(e) if e.get_id() == RESOURCE_LOCKED)
}

impl PeekLock {
    /// Deletes the lock queue (best effort: closing the connection deletes
    /// it anyway) and closes its channel.
    pub async fn release(self) {
        let _ = self
            .channel
            .queue_delete(short(&self.queue), QueueDeleteOptions::default())
            .await;
        let _ = self.channel.close(200, "peek lock released".into()).await;
    }
}
