//! The order-events relay: the ledger's committed `order_events` rows as
//! the common relay's [`Source`], published to the topic exchange
//! `P.order-events` (routing key = the event type), each with its order's
//! snapshot as it is now. The relay itself — locking with `FOR UPDATE
//! SKIP LOCKED`, confirms, marking, its cadence — is
//! `oncehook_common::relay`. A crash between publish and mark publishes an
//! event twice: its `message_id` is the event id, and the notifier's
//! fan-out is idempotent on it.

use std::time::Duration;

use lapin::{BasicProperties, Channel};
use oncehook_common::Topology;
use oncehook_common::periodic::Periodic;
use oncehook_common::relay::{Confirmed, Outgoing, Relay, Source};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_ledger::render;
use oncehook_ledger::store::order_events::{self, OrderEventRow};
use sqlx::{PgConnection, Postgres, Transaction};

/// How often the relay looks for new events when it found none.
const POLL: Duration = Duration::from_millis(200);

/// The ledger's order events.
pub struct OrderEvents;

impl Source for OrderEvents {
    type Row = OrderEventRow;
    const FAILING: &'static str = "order events relay pass failed; will retry";
    const RECOVERED: &'static str = "order events relay publishes again";

    fn count_published(n: u64) {
        metrics::counter!("oncehook_notify_events_published_total").increment(n);
    }

    async fn lock(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        limit: usize,
    ) -> Result<Vec<OrderEventRow>, sqlx::Error> {
        let conn: &mut PgConnection = tx;
        order_events::lock_unpublished(conn, limit as i64).await
    }

    async fn message(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        row: &OrderEventRow,
    ) -> Result<Option<Outgoing>, sqlx::Error> {
        let Some(body) = render::render_bytes(tx, row).await? else {
            tracing::warn!(event_id = %row.id, order_ref = %row.order_ref, "order event's order is gone; not published");
            return Ok(None);
        };
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(row.id.as_str().into())
            .with_type(row.kind.as_str().into());
        Ok(Some(Outgoing {
            routing_key: row.kind.clone(),
            id: row.id.clone(),
            body,
            properties,
            trace_parent: row.trace_parent.clone(),
        }))
    }

    async fn mark(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        rows: &[OrderEventRow],
    ) -> Result<(), sqlx::Error> {
        let ids: Vec<String> = rows.iter().map(|row| row.id.clone()).collect();
        order_events::mark_published(tx, &ids).await
    }
}

/// Relays order events on `ch` until `stop` fires or the channel dies.
pub async fn run(pool: Pooled, ch: Channel, topology: Topology, timeout: Duration, stop: Shutdown) {
    let relay = Relay {
        store: pool,
        publisher: Confirmed {
            channel: ch,
            exchange: topology.order_events(),
            timeout,
        },
        source: OrderEvents,
    };
    relay
        .run(Periodic::every("order events relay", POLL), &stop)
        .await;
}
