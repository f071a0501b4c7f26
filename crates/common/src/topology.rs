//! The RabbitMQ topology, declared idempotently by every binary at start and
//! after every reconnect. All exchange, queue and header names live here.
//!
//! With prefix `P`: exchange `P.events` (topic) → quorum queue `P.events`;
//! exchange `P.emails` (direct) → quorum queue `P.emails`; both dead-letter
//! at-least-once into exchange `P.dead` (fanout) → quorum queue `P.dead`.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

/// Stable id of a dead letter (what `oncehookctl dlq show|replay|purge` take).
pub const HEADER_DEAD_ID: &str = "x-oncehook-dead-id";
/// Why the message was dead-lettered (human readable, names the event).
pub const HEADER_ERROR: &str = "x-oncehook-error";
/// Machine-readable class of the failure (`unknown_order`, `unparseable`, …).
pub const HEADER_ERROR_KIND: &str = "x-oncehook-error-kind";
/// RFC 3339 time of the failure.
pub const HEADER_FAILED_AT: &str = "x-oncehook-failed-at";
/// The queue the message came from (replay target).
pub const HEADER_ORIGIN: &str = "x-oncehook-origin";
/// The routing key the message was originally published with.
pub const HEADER_ROUTING_KEY: &str = "x-oncehook-routing-key";
/// Delivery attempts seen when the message was given up on.
pub const HEADER_ATTEMPTS: &str = "x-oncehook-attempts";
/// The configured source that received the webhook.
pub const HEADER_SOURCE: &str = "x-oncehook-source";
/// Set on replayed messages: how many times this message was replayed.
pub const HEADER_REPLAYS: &str = "x-oncehook-replays";
/// The broker's own delivery counter on quorum queues.
pub const HEADER_DELIVERY_COUNT: &str = "x-delivery-count";

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

    /// Routing key of email messages.
    pub fn email_routing_key(&self) -> &'static str {
        "email"
    }

    /// Declares all exchanges, queues and bindings. Idempotent; fails if an
    /// existing queue was declared with different arguments.
    pub async fn declare(&self, ch: &Channel, delivery_limit: u32) -> lapin::Result<()> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        let (events, emails, dead) = (self.events(), self.emails(), self.dead());
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
            dead.as_str().into(),
            ExchangeKind::Fanout,
            durable,
            FieldTable::default(),
        )
        .await?;

        let queue = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare(
            events.as_str().into(),
            queue,
            self.work_queue_args(delivery_limit),
        )
        .await?;
        ch.queue_declare(
            emails.as_str().into(),
            queue,
            self.work_queue_args(delivery_limit),
        )
        .await?;
        ch.queue_declare(dead.as_str().into(), queue, dead_queue_args())
            .await?;

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
            dead.as_str().into(),
            dead.as_str().into(),
            "".into(),
            bind,
            FieldTable::default(),
        )
        .await?;
        Ok(())
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
