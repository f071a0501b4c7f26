//! Looking at queues without changing them, with the one passive declare
//! every binary uses ([`passive_declare`], an AMQP primitive the topology's
//! check that a queue exists also uses): `oncehookctl`'s depths, the
//! gauges; [`report_gauges`] sets
//! `oncehook_queue_messages` and `oncehook_queue_consumers` for every queue
//! of the topology every few seconds while a broker session lasts.

use std::sync::Arc;
use std::time::Duration;

use lapin::{Connection, ErrorKind};

pub use crate::amqp::{QueueDepth, passive_declare};
use crate::periodic::{Next, Periodic};
use crate::shutdown::Shutdown;
use crate::{Topology, peek_lock};

/// How often [`report_gauges`] sets the gauges.
pub const GAUGE_INTERVAL: Duration = Duration::from_secs(5);

/// AMQP reply code of a passive declare of a queue that does not exist.
const NOT_FOUND: u16 = 404;

/// [`passive_declare`], with a queue that does not exist as `None`.
pub async fn depth(conn: &Connection, queue: &str) -> lapin::Result<Option<QueueDepth>> {
    match passive_declare(conn, queue).await {
        Ok(depth) => Ok(Some(depth)),
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Whether `err` says the queue does not exist.
pub fn is_not_found(err: &lapin::Error) -> bool {
    matches!(err.kind(), ErrorKind::ProtocolError(e) if e.get_id() == NOT_FOUND)
        || err.to_string().contains("NOT_FOUND")
}

/// Sets the queue gauges now and then every [`GAUGE_INTERVAL`] until `stop`
/// fires (the end of the session whose connection `conn` is).
pub async fn report_gauges(conn: Arc<Connection>, topology: Topology, stop: Shutdown) {
    Periodic::every("queue gauges", GAUGE_INTERVAL)
        .run(&stop, || async {
            set_gauges(&conn, &topology).await;
            Ok::<_, std::convert::Infallible>(Next::Pause)
        })
        .await;
}

/// Depth and consumer count of every queue. The dead-letter queue is read
/// under the peek lock ([`peek_lock`]): while an operator peeks, its letters
/// are unacked and a passive declare would count 0, so its gauges keep their
/// last value until the peek is over.
async fn set_gauges(conn: &Connection, topology: &Topology) {
    let work = [topology.events(), topology.emails(), topology.notify()];
    for queue in work.into_iter().chain(topology.bulk_lanes()) {
        set_queue_gauges(conn, queue).await;
    }
    match peek_lock::try_lock(conn, topology).await {
        Ok(Some(lock)) => {
            set_queue_gauges(conn, topology.dead()).await;
            lock.release().await;
        }
        Ok(None) => tracing::debug!("dead letters are being peeked; their gauges wait"),
        Err(err) => tracing::debug!(%err, "dead-letter peek lock unavailable"),
    }
}

async fn set_queue_gauges(conn: &Connection, queue: String) {
    match passive_declare(conn, &queue).await {
        Ok(depth) => {
            metrics::gauge!("oncehook_queue_messages", "queue" => queue.clone())
                .set(f64::from(depth.messages));
            metrics::gauge!("oncehook_queue_consumers", "queue" => queue)
                .set(f64::from(depth.consumers));
        }
        Err(err) => tracing::debug!(%err, queue, "queue depth unavailable"),
    }
}
