//! The worker's outbox relay: the committed `email_outbox` rows as the
//! common relay's [`Source`], published to `P.emails` (one message per
//! row, naming its outbox id, in the trace of the delivery that wrote it).
//! The relay itself — locking with `FOR UPDATE SKIP LOCKED`, confirms,
//! marking, its cadence — is `oncehook_common::relay`; a crash between
//! publish and mark publishes a row twice, and the mailer's `sent_at`
//! check absorbs that. Beside it, a periodic task sets the outbox gauges
//! (the queue gauges are the broker module's,
//! `oncehook_common::broker::queues`).

use std::sync::Arc;
use std::time::Duration;

use lapin::Channel;
use oncehook_common::Topology;
use oncehook_common::email::EmailMessage;
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::relay::{Confirmed, Outgoing, Relay, Source};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::{Pooled, outbox};
use sqlx::PgConnection;
use tokio::sync::Notify;
use uuid::Uuid;

/// How often the relay looks for rows when no commit woke it.
const POLL: Duration = Duration::from_millis(500);
/// After a commit wakes the relay, how long it lets more commits land
/// before its pass: a pass costs four statements (begin, lock, mark,
/// commit) however many rows it takes, so at one pass per commit the relay
/// sent more statements per event than half the worker's transaction
/// (docs/scaling.md); an email waits this much longer.
const GATHER: Duration = Duration::from_millis(20);
/// How often the outbox gauges are set.
const GAUGES: Duration = Duration::from_secs(5);

/// The outbox's rows: `(id, trace parent)`.
pub struct Emails {
    routing_key: &'static str,
}

impl Source for Emails {
    type Row = (Uuid, Option<String>);
    const FAILING: &'static str = "outbox relay pass failed; will retry";
    const RECOVERED: &'static str = "outbox relay publishes again";

    fn count_published(n: u64) {
        metrics::counter!("oncehook_outbox_published_total").increment(n);
    }

    async fn lock(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        limit: usize,
    ) -> Result<Vec<Self::Row>, sqlx::Error> {
        let conn: &mut PgConnection = tx;
        outbox::lock_unpublished(conn, limit as i64).await
    }

    async fn message(
        &self,
        _tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        (id, trace_parent): &Self::Row,
    ) -> Result<Option<Outgoing>, sqlx::Error> {
        let msg = EmailMessage { outbox_id: *id };
        Ok(Some(Outgoing {
            routing_key: self.routing_key.to_owned(),
            id: id.to_string(),
            body: msg.to_bytes(),
            properties: msg.properties(),
            trace_parent: trace_parent.clone(),
        }))
    }

    async fn mark(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        rows: &[Self::Row],
    ) -> Result<(), sqlx::Error> {
        let ids: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
        outbox::mark_published(tx, &ids).await
    }
}

/// Relays the outbox on `ch` until `stop` fires or the channel dies.
/// `wakeup` lets the consumer nudge the relay right after a commit that
/// wrote an email.
pub async fn run(
    db: Pooled,
    ch: Channel,
    topology: Topology,
    timeout: Duration,
    wakeup: Arc<Notify>,
    stop: Shutdown,
) {
    let relay = Relay {
        store: db,
        publisher: Confirmed {
            channel: ch,
            exchange: topology.emails(),
            timeout,
        },
        source: Emails {
            routing_key: topology.email_routing_key(),
        },
    };
    let cadence = Periodic::every("outbox relay", POLL)
        .woken_by(wakeup)
        .gathering(GATHER);
    relay.run(cadence, &stop).await;
}

/// Sets the outbox gauges every few seconds until `stop` fires.
pub async fn gauges(db: Pooled, stop: Shutdown) {
    Periodic::every("outbox gauges", GAUGES)
        .logs(
            "could not read the outbox backlog for its gauges; retrying every 5 s",
            "the outbox gauges are read again",
        )
        .run(&stop, || async {
            let backlog = outbox::backlog(&db).await?;
            metrics::gauge!("oncehook_outbox_backlog").set(backlog.rows as f64);
            metrics::gauge!("oncehook_outbox_oldest_age_seconds").set(backlog.oldest_age_secs);
            Ok::<_, sqlx::Error>(Next::Pause)
        })
        .await;
}
