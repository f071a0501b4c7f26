//! The RabbitMQ topology, declared idempotently by every binary at start and
//! after every reconnect. All exchange, queue and header names live here,
//! except the dead-letter headers (`dead_letter`).
//!
//! With prefix `P`: exchange `P.events` (topic) → quorum queue `P.events`;
//! exchange `P.emails` (direct) → quorum queue `P.emails`; exchange
//! `P.order-events` (topic, routing key = the event type) → quorum queue
//! `P.notify` (the notifier's, bound to `order.#`; in-house consumers bind
//! queues of their own); exchange `P.events-bulk` (topic) → the
//! [`BULK_LANES`] quorum queues `P.events-bulk.0…` (routing key = the
//! lane's number, picked by the tenant, then the main lane's routing key:
//! `2.razorpay.payment.captured`; see "Lanes" below); all of them
//! dead-letter at-least-once into exchange `P.dead` (fanout) → quorum queue
//! `P.dead`.
//!
//! Lanes (docs/tenants.md, "Fairness"): `P.events` is the main lane. A
//! tenant's webhooks beyond its share of it (ingest's `[ingest.fairness]`),
//! every replayed dead letter and every reconciled fact go to the tenant's
//! bulk lane instead, so one tenant's storm, replay or backlog queues
//! behind itself, not in front of another tenant's lone payment. The
//! worker consumes every lane and commits the main lane's deliveries first.
//! Every queue asks for a replica on each node of a cluster
//! (`x-quorum-initial-group-size`).
//!
//! Upgrades: a queue declared by an older version has no group size, and
//! RabbitMQ refuses a redeclaration whose arguments differ
//! (`PRECONDITION_FAILED`). The group size only matters when a queue is
//! created, so such a queue is declared again without it (every other
//! argument still checked), and an existing deployment keeps starting.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ExchangeKind};

use crate::config::QueueSettings;
use crate::tenant::TenantId;

/// The queue argument that asks for a replica on each of N nodes.
pub const ARG_QUORUM_INITIAL_GROUP_SIZE: &str = "x-quorum-initial-group-size";

/// How many bulk lanes there are (see the module documentation). A fixed
/// number, so every ingest, worker, replay and reconciler of a deployment
/// agrees on it without configuration.
pub const BULK_LANES: u16 = 4;

/// The configured source that received the webhook.
pub const HEADER_SOURCE: &str = "x-oncehook-source";
/// The broker's own delivery counter on quorum queues: every return before
/// RabbitMQ 4.3, failed deliveries only from 4.3 on (see
/// `consume::counting`).
pub const HEADER_DELIVERY_COUNT: &str = "x-delivery-count";
/// RabbitMQ 4.3+: how often a quorum queue handed the message to a
/// consumer before, whether or not that counted as a failure.
pub const HEADER_ACQUIRED_COUNT: &str = "x-acquired-count";

/// Names of every exchange and queue for one prefix.
#[derive(Debug, Clone)]
pub struct Topology {
    prefix: String,
}

impl Topology {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Exchange and queue for verified webhook envelopes.
    pub fn events(&self) -> String {
        format!("{}.events", self.prefix)
    }

    /// The bulk lanes' exchange (topic; routing key = the lane's number,
    /// then the main lane's key).
    pub fn bulk(&self) -> String {
        format!("{}.events-bulk", self.prefix)
    }

    /// Bulk lane `lane`'s queue.
    pub fn bulk_lane(&self, lane: u16) -> String {
        format!("{}.events-bulk.{lane}", self.prefix)
    }

    /// Every bulk lane's queue, in order.
    pub fn bulk_lanes(&self) -> impl Iterator<Item = String> + '_ {
        (0..BULK_LANES).map(|lane| self.bulk_lane(lane))
    }

    /// Where `tenant`'s bulk delivery with the main lane's `routing_key`
    /// goes: the exchange and the routing key (a key that already names a
    /// lane is moved to the tenant's).
    pub fn bulk_route(&self, tenant: &TenantId, routing_key: &str) -> (String, String) {
        let key = unlaned(routing_key);
        (self.bulk(), format!("{}.{key}", lane_of(tenant)))
    }

    /// Whether `queue` holds webhook envelopes: the main lane or a bulk one.
    pub fn is_events_queue(&self, queue: &str) -> bool {
        queue == self.events() || self.bulk_lanes().any(|lane| lane == queue)
    }

    /// Exchange and queue for outbox emails.
    pub fn emails(&self) -> String {
        format!("{}.emails", self.prefix)
    }

    /// Dead-letter exchange and queue.
    pub fn dead(&self) -> String {
        format!("{}.dead", self.prefix)
    }

    /// Topic exchange of the order events (routing key = the event type,
    /// `order.paid`), for the notifier and in-house consumers.
    pub fn order_events(&self) -> String {
        format!("{}.order-events", self.prefix)
    }

    /// The notifier's queue, bound to every order event.
    pub fn notify(&self) -> String {
        format!("{}.notify", self.prefix)
    }

    /// Routing key of email messages.
    pub fn email_routing_key(&self) -> &'static str {
        "email"
    }

    /// Declares all exchanges, queues and bindings, on a channel of its own
    /// (a refused declaration closes its channel). Idempotent; fails if an
    /// existing queue was declared with different arguments — except for
    /// the replica count, which only applies at creation (see the module
    /// documentation).
    pub async fn declare(&self, conn: &Connection, queues: &QueueSettings) -> lapin::Result<()> {
        let ch = conn.create_channel().await?;
        let result = self.declare_on(conn, &ch, queues).await;
        if ch.status().connected() {
            let _ = ch.close(200, "topology declared".into()).await;
        }
        result
    }

    async fn declare_on(
        &self,
        conn: &Connection,
        ch: &Channel,
        queues: &QueueSettings,
    ) -> lapin::Result<()> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        for (exchange, kind) in self.exchanges() {
            ch.exchange_declare(
                exchange.as_str().into(),
                kind,
                durable,
                FieldTable::default(),
            )
            .await?;
        }
        for (queue, args) in self.queue_args(queues.delivery_limit) {
            declare_quorum_queue(conn, &queue, args, queues.initial_group_size).await?;
        }
        for (queue, exchange, key) in self.bindings() {
            ch.queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                key.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        }
        Ok(())
    }

    /// Every exchange and its kind.
    fn exchanges(&self) -> [(String, ExchangeKind); 5] {
        [
            (self.events(), ExchangeKind::Topic),
            (self.emails(), ExchangeKind::Direct),
            (self.order_events(), ExchangeKind::Topic),
            (self.bulk(), ExchangeKind::Topic),
            (self.dead(), ExchangeKind::Fanout),
        ]
    }

    /// Every binding: queue, exchange, routing key.
    fn bindings(&self) -> Vec<(String, String, String)> {
        let mut bindings = vec![
            (self.events(), self.events(), "#".to_owned()),
            (
                self.emails(),
                self.emails(),
                self.email_routing_key().to_owned(),
            ),
            (self.notify(), self.order_events(), "order.#".to_owned()),
            (self.dead(), self.dead(), String::new()),
        ];
        bindings.extend(
            (0..BULK_LANES).map(|lane| (self.bulk_lane(lane), self.bulk(), format!("{lane}.#"))),
        );
        bindings
    }

    /// Every queue with the arguments it is declared with, except the group
    /// size, which is added when declaring (see the module documentation):
    /// the events, emails and notify queues and the bulk lanes with
    /// `delivery_limit`, then the dead-letter queue.
    pub fn queue_args(&self, delivery_limit: u32) -> Vec<(String, FieldTable)> {
        let work = [self.events(), self.emails(), self.notify()]
            .into_iter()
            .chain(self.bulk_lanes());
        work.map(|queue| (queue, self.work_queue_args(delivery_limit)))
            .chain(std::iter::once((self.dead(), dead_queue_args())))
            .collect()
    }

    /// Every exchange and queue name of the prefix (for tearing a
    /// deployment's topology down).
    pub fn all_names(&self) -> Vec<String> {
        let mut names = vec![
            self.events(),
            self.emails(),
            self.notify(),
            self.order_events(),
            self.bulk(),
            self.dead(),
        ];
        names.extend(self.bulk_lanes());
        names
    }

    /// Quorum queue with an explicit delivery limit and at-least-once
    /// dead-lettering (which only holds with `reject-publish` overflow).
    fn work_queue_args(&self, delivery_limit: u32) -> FieldTable {
        let mut args = quorum_args();
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongInt(delivery_limit as i32),
        );
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(self.dead().into()),
        );
        args.insert(
            "x-dead-letter-strategy".into(),
            AMQPValue::LongString("at-least-once".into()),
        );
        args.insert(
            "x-overflow".into(),
            AMQPValue::LongString("reject-publish".into()),
        );
        args
    }
}

/// The bulk lane of `tenant`: a stable hash of its id (FNV-1a), so every
/// binary of every version with the same [`BULK_LANES`] picks the same.
pub fn lane_of(tenant: &TenantId) -> u16 {
    let hash = tenant
        .as_str()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    u16::try_from(hash % u64::from(BULK_LANES)).unwrap_or(0)
}

/// A bulk lane's routing key without its lane (`2.razorpay.payment.captured`
/// → `razorpay.payment.captured`); the main lane's keys as they are.
pub fn unlaned(routing_key: &str) -> &str {
    match routing_key.split_once('.') {
        Some((lane, rest)) if !lane.is_empty() && lane.bytes().all(|b| b.is_ascii_digit()) => rest,
        _ => routing_key,
    }
}

/// Declares one quorum queue with `args` plus the group size, each attempt
/// on a channel of its own. A queue that exists without a group size (made
/// by an older version) is declared with `args` alone, so its other
/// arguments are still checked; one made with another group size is only
/// checked to exist.
async fn declare_quorum_queue(
    conn: &Connection,
    queue: &str,
    args: FieldTable,
    group_size: u32,
) -> lapin::Result<()> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let mut sized = args.clone();
    sized.insert(
        ARG_QUORUM_INITIAL_GROUP_SIZE.into(),
        AMQPValue::LongInt(i32::try_from(group_size).unwrap_or(i32::MAX)),
    );
    match declare_queue(conn, queue, durable, sized).await {
        Err(err) if names_group_size(&err) => {}
        other => return other,
    }
    match declare_queue(conn, queue, durable, args).await {
        Ok(()) => {
            tracing::info!(
                queue,
                "queue exists from before {ARG_QUORUM_INITIAL_GROUP_SIZE} was set: kept as it is (its replicas: rabbitmq-queues quorum_status; add some with rabbitmq-queues grow)"
            );
            Ok(())
        }
        Err(err) if names_group_size(&err) => {
            crate::amqp::passive_declare(conn, queue).await?;
            tracing::warn!(
                queue,
                group_size,
                "queue exists with another {ARG_QUORUM_INITIAL_GROUP_SIZE}: kept as it is (it applies only when a queue is created)"
            );
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// One queue declaration on a fresh channel, closed afterwards.
async fn declare_queue(
    conn: &Connection,
    queue: &str,
    options: QueueDeclareOptions,
    args: FieldTable,
) -> lapin::Result<()> {
    let ch = conn.create_channel().await?;
    ch.queue_declare(queue.into(), options, args).await?;
    let _ = ch.close(200, "queue declared".into()).await;
    Ok(())
}

/// A `PRECONDITION_FAILED` about the group size argument.
fn names_group_size(err: &lapin::Error) -> bool {
    let text = err.to_string();
    text.contains(ARG_QUORUM_INITIAL_GROUP_SIZE)
}

/// The DLQ has no dead-letter exchange of its own, so a delivery limit there
/// would drop messages. Set one explicitly (RabbitMQ 4.x would otherwise
/// default to 20) and high enough that peeking never reaches it.
fn dead_queue_args() -> FieldTable {
    let mut args = quorum_args();
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(1_000_000_000));
    args
}

fn quorum_args() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    args
}

#[cfg(test)]
mod tests {
    use super::{BULK_LANES, Topology, lane_of};
    use crate::tenant::TenantId;

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).expect("tenant id")
    }

    #[test]
    fn a_tenants_lane_is_stable_and_tenants_spread_over_every_lane() {
        // Fixed values: another version picking otherwise would split a
        // tenant's bulk deliveries over two lanes during a roll.
        assert_eq!(lane_of(&tenant("default")), lane_of(&tenant("default")));
        let mut seen = [0usize; BULK_LANES as usize];
        for n in 0..1000 {
            seen[usize::from(lane_of(&tenant(&format!("shop-{n}"))))] += 1;
        }
        for (lane, count) in seen.iter().enumerate() {
            assert!(
                (150..=350).contains(count),
                "lane {lane} got {count} of 1000 tenants: {seen:?}"
            );
        }
    }

    #[test]
    fn the_bulk_lanes_are_events_queues_and_torn_down_with_the_rest() {
        let t = Topology::new("p");
        assert!(t.is_events_queue("p.events"));
        assert!(t.is_events_queue("p.events-bulk.3"));
        assert!(!t.is_events_queue("p.emails"));
        assert!(!t.is_events_queue(&format!("p.events-bulk.{BULK_LANES}")));
        let (exchange, key) = t.bulk_route(&tenant("acme"), "razorpay.payment.captured");
        assert_eq!(exchange, "p.events-bulk");
        let (lane, rest) = key.split_once('.').expect("a lane, then the key");
        assert_eq!(rest, "razorpay.payment.captured");
        assert!(t.bulk_lanes().any(|q| q.ends_with(&format!(".{lane}"))));
        // A key that names a lane already is moved, not prefixed twice.
        assert_eq!(t.bulk_route(&tenant("acme"), &key).1, key);
        assert_eq!(
            super::unlaned("stripe.charge.refunded"),
            "stripe.charge.refunded"
        );
        for lane in t.bulk_lanes() {
            assert!(t.all_names().contains(&lane));
            assert!(t.queue_args(5).iter().any(|(q, _)| *q == lane));
        }
    }
}
