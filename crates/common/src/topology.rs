//! The RabbitMQ topology, declared idempotently by every binary at start and
//! after every reconnect. All exchange, queue and header names live here,
//! except the dead-letter headers (`dead_letter`).
//!
//! With prefix `P`: exchange `P.events` (topic) → quorum queue `P.events`;
//! exchange `P.emails` (direct) → quorum queue `P.emails`; exchange
//! `P.order-events` (topic, routing key = the event type) → quorum queue
//! `P.notify` (the notifier's, bound to `order.#`; in-house consumers bind
//! queues of their own); all three dead-letter at-least-once into exchange
//! `P.dead` (fanout) → quorum queue `P.dead`.
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

/// The queue argument that asks for a replica on each of N nodes.
pub const ARG_QUORUM_INITIAL_GROUP_SIZE: &str = "x-quorum-initial-group-size";

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
        let (events, emails, dead) = (self.events(), self.emails(), self.dead());
        let (order_events, notify) = (self.order_events(), self.notify());
        ch.exchange_declare(
            events.as_str().into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await?;
        ch.exchange_declare(
            emails.as_str().into(),
            ExchangeKind::Direct,
            durable,
            FieldTable::default(),
        )
        .await?;
        ch.exchange_declare(
            order_events.as_str().into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await?;
        ch.exchange_declare(
            dead.as_str().into(),
            ExchangeKind::Fanout,
            durable,
            FieldTable::default(),
        )
        .await?;

        for (queue, args) in self.queue_args(queues.delivery_limit) {
            declare_quorum_queue(conn, &queue, args, queues.initial_group_size).await?;
        }

        let bind = QueueBindOptions::default();
        ch.queue_bind(
            events.as_str().into(),
            events.as_str().into(),
            "#".into(),
            bind,
            FieldTable::default(),
        )
        .await?;
        ch.queue_bind(
            emails.as_str().into(),
            emails.as_str().into(),
            self.email_routing_key().into(),
            bind,
            FieldTable::default(),
        )
        .await?;
        ch.queue_bind(
            notify.as_str().into(),
            order_events.as_str().into(),
            "order.#".into(),
            bind,
            FieldTable::default(),
        )
        .await?;
        ch.queue_bind(
            dead.as_str().into(),
            dead.as_str().into(),
            "".into(),
            bind,
            FieldTable::default(),
        )
        .await?;
        Ok(())
    }

    /// Every queue with the arguments it is declared with, except the group
    /// size, which is added when declaring (see the module documentation):
    /// the events, emails and notify queues with `delivery_limit`, then the
    /// dead-letter queue.
    pub fn queue_args(&self, delivery_limit: u32) -> [(String, FieldTable); 4] {
        [
            (self.events(), self.work_queue_args(delivery_limit)),
            (self.emails(), self.work_queue_args(delivery_limit)),
            (self.notify(), self.work_queue_args(delivery_limit)),
            (self.dead(), dead_queue_args()),
        ]
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
