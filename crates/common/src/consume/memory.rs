//! The queue seam in memory: a delivery that records how it was settled, a
//! dead-letter sink that records what it was given (or refuses it), and a
//! queue ([`MemoryQueue`]) that hands a settled delivery out again with the
//! counters RabbitMQ would put on it — counting every return (3.10–4.2) or
//! failures only (4.3+) — so the consume loop's and the handlers' decisions
//! are unit-tested without a broker, under both ways of counting.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, ShortString};

use super::counting;
use super::queue::{DeadLetterSink, Delivery, Message, Published};
use crate::amqp::PublishError;
use crate::dead_letter::{DeadLetter, DeadLetterKind};
use crate::topology::{HEADER_ACQUIRED_COUNT, HEADER_DELIVERY_COUNT};

/// How a [`MemoryDelivery`] was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Acked,
    /// Requeued as a failed delivery (`basic.reject`).
    Requeued,
    /// Requeued without calling it a failure (`basic.nack`).
    Released,
}

/// How the emulated broker counts the returns of a quorum queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// RabbitMQ 3.10–4.2: every return (reject, nack, a lost channel)
    /// counts in `x-delivery-count`; no `x-acquired-count`.
    EveryReturn,
    /// RabbitMQ 4.3+: a reject or a lost channel counts in
    /// `x-delivery-count`, a nack does not; every hand-out counts in
    /// `x-acquired-count`.
    FailuresOnly,
}

impl Counting {
    /// Both ways, for tests that must hold under each.
    pub const ALL: [Counting; 2] = [Counting::EveryReturn, Counting::FailuresOnly];

    /// The counter headers this broker puts on a message returned
    /// `returns` times, `failed` of them failures (left out when 0, as the
    /// broker does on a first delivery).
    fn headers(self, failed: u32, returns: u32) -> Vec<(&'static str, u32)> {
        let counters = match self {
            Counting::EveryReturn => vec![(HEADER_DELIVERY_COUNT, returns)],
            Counting::FailuresOnly => vec![
                (HEADER_DELIVERY_COUNT, failed),
                (HEADER_ACQUIRED_COUNT, returns),
            ],
        };
        counters.into_iter().filter(|(_, n)| *n > 0).collect()
    }
}

/// A delivery held in memory. Clones share the settle record.
#[derive(Debug, Clone, Default)]
pub struct MemoryDelivery {
    body: Vec<u8>,
    properties: BasicProperties,
    exchange: String,
    routing_key: String,
    /// Returns before this delivery, and how many of them were failures
    /// (what a [`MemoryQueue`] counts).
    returns: u32,
    failed: u32,
    settled: Arc<Mutex<Vec<Settled>>>,
}

impl MemoryDelivery {
    /// A first delivery of `body` with no properties.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        MemoryDelivery {
            body: body.into(),
            exchange: MEMORY_EXCHANGE.to_owned(),
            ..Self::default()
        }
    }

    #[must_use]
    pub fn with_message_id(mut self, id: &str) -> Self {
        self.properties = self.properties.with_message_id(id.into());
        self
    }

    #[must_use]
    pub fn with_properties(mut self, properties: BasicProperties) -> Self {
        self.properties = properties;
        self
    }

    #[must_use]
    pub fn with_routing_key(mut self, key: &str) -> Self {
        self.routing_key = key.to_owned();
        self
    }

    /// As a broker counting every return hands out a message returned
    /// `count` times (`x-delivery-count`).
    #[must_use]
    pub fn with_delivery_count(self, count: u32) -> Self {
        self.counted(Counting::EveryReturn, count, count)
    }

    /// As a broker counting by `counting` hands out a message returned
    /// `returns` times, `failed` of them failures.
    #[must_use]
    pub fn counted(mut self, counting: Counting, failed: u32, returns: u32) -> Self {
        let mut headers = header_map(self.properties.headers().as_ref());
        headers.remove(&ShortString::from(HEADER_DELIVERY_COUNT));
        headers.remove(&ShortString::from(HEADER_ACQUIRED_COUNT));
        for (name, n) in counting.headers(failed, returns) {
            headers.insert(name.into(), AMQPValue::LongLongInt(i64::from(n)));
        }
        self.properties = self.properties.with_headers(FieldTable::from(headers));
        self.returns = returns;
        self.failed = failed;
        self
    }

    /// Every settle operation so far, in order.
    pub fn settled(&self) -> Vec<Settled> {
        self.settled.lock().expect("settle record").clone()
    }

    fn record(&self, how: Settled) -> bool {
        self.settled.lock().expect("settle record").push(how);
        true
    }

    /// The same message handed out again (a fresh settle record).
    fn again(&self, counting: Counting, failed: u32, returns: u32) -> Self {
        MemoryDelivery {
            settled: Arc::default(),
            ..self.clone()
        }
        .counted(counting, failed, returns)
    }
}

fn header_map(headers: Option<&FieldTable>) -> BTreeMap<ShortString, AMQPValue> {
    headers
        .map(|h| h.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

impl Message for MemoryDelivery {
    fn body(&self) -> &[u8] {
        &self.body
    }
    fn properties(&self) -> &BasicProperties {
        &self.properties
    }
    fn routing_key(&self) -> &str {
        counting::original_routing_key(
            &self.exchange,
            &self.routing_key,
            self.properties.headers().as_ref(),
        )
    }
}

impl Delivery for MemoryDelivery {
    async fn ack(&self) -> bool {
        self.record(Settled::Acked)
    }
    async fn requeue(&self) -> bool {
        self.record(Settled::Requeued)
    }
    async fn release(&self) -> bool {
        self.record(Settled::Released)
    }
}

/// What became of a message after a delivery of it (see
/// [`MemoryQueue::next`]).
#[derive(Debug)]
pub enum Next {
    /// Handed out again, with the counters the broker puts on it.
    Redelivered(Box<MemoryDelivery>),
    /// Its delivery count went past the delivery limit: the broker
    /// dead-lettered it.
    DeadLetteredByBroker,
    /// Acked, and no copy was requeued in its place.
    Gone,
}

/// One quorum queue's handling of one message, as RabbitMQ does it under
/// `counting` with `x-delivery-limit` = `limit`.
#[derive(Debug, Clone, Copy)]
pub struct MemoryQueue {
    pub counting: Counting,
    pub limit: u32,
}

impl MemoryQueue {
    pub fn new(counting: Counting, limit: u32) -> Self {
        MemoryQueue { counting, limit }
    }

    /// What the broker does once `delivery` was settled (or its consumer
    /// died holding it: no settle at all), with `sink` holding any copy the
    /// loop requeued in its place.
    pub fn next(&self, delivery: &MemoryDelivery, sink: &MemoryDeadLetters) -> Next {
        let returns = delivery.returns.saturating_add(1);
        let failed = match delivery.settled().last() {
            Some(Settled::Acked) => {
                return match sink.take_copy() {
                    Some(copy) => Next::Redelivered(Box::new(copy)),
                    None => Next::Gone,
                };
            }
            // A reject, or a channel lost with the delivery unsettled, is a
            // failed delivery on every version.
            Some(Settled::Requeued) | None => delivery.failed.saturating_add(1),
            Some(Settled::Released) => delivery.failed,
        };
        // What the broker compares with its limit.
        let count = match self.counting {
            Counting::EveryReturn => returns,
            Counting::FailuresOnly => failed,
        };
        if count > self.limit {
            Next::DeadLetteredByBroker
        } else {
            Next::Redelivered(Box::new(delivery.again(self.counting, failed, returns)))
        }
    }
}

/// A dead letter a [`MemoryDeadLetters`] accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedDeadLetter {
    pub kind: DeadLetterKind,
    pub error: String,
    pub attempts: u32,
    pub message_id: String,
    pub body: Vec<u8>,
}

impl PublishedDeadLetter {
    fn new(message: &dyn Message, why: DeadLetter) -> Self {
        PublishedDeadLetter {
            kind: why.kind,
            error: why.error,
            attempts: why.attempts,
            message_id: message.message_id(),
            body: message.body().to_vec(),
        }
    }
}

/// The queue a [`MemoryDelivery`] comes from, as a dead letter records it.
const MEMORY_ORIGIN: &str = "memory";
/// The exchange a [`MemoryDelivery`] was published to (a requeued copy
/// comes from the default exchange, `""`).
const MEMORY_EXCHANGE: &str = "memory.exchange";

/// A dead-letter sink in memory; [`MemoryDeadLetters::failing`] refuses
/// every publish, dead letters and requeued copies alike (as a broker that
/// nacks or times out would).
#[derive(Debug, Clone, Default)]
pub struct MemoryDeadLetters {
    published: Arc<Mutex<Vec<PublishedDeadLetter>>>,
    copies: Arc<Mutex<VecDeque<MemoryDelivery>>>,
    limit: Option<u32>,
    fail: bool,
}

impl MemoryDeadLetters {
    pub fn failing() -> Self {
        MemoryDeadLetters {
            fail: true,
            ..Self::default()
        }
    }

    /// The queue's delivery limit, as the consume loop sees it.
    #[must_use]
    pub fn with_delivery_limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Every dead letter accepted so far.
    pub fn published(&self) -> Vec<PublishedDeadLetter> {
        self.published.lock().expect("dead letters").clone()
    }

    /// How many requeued copies wait in the queue.
    pub fn copies(&self) -> usize {
        self.copies.lock().expect("copies").len()
    }

    /// The oldest requeued copy, as its first delivery.
    pub fn take_copy(&self) -> Option<MemoryDelivery> {
        self.copies.lock().expect("copies").pop_front()
    }
}

impl DeadLetterSink for MemoryDeadLetters {
    fn delivery_limit(&self) -> Option<u32> {
        self.limit
    }

    async fn requeue_copy(&self, message: &dyn Message, failures: u32) -> Published {
        if self.fail {
            return Err(PublishError::Nacked);
        }
        let headers = counting::copy_headers(
            message.properties().headers().as_ref(),
            message.routing_key(),
            failures,
        );
        let copy = MemoryDelivery {
            body: message.body().to_vec(),
            properties: message.properties().clone().with_headers(headers),
            exchange: String::new(),
            routing_key: MEMORY_ORIGIN.to_owned(),
            ..MemoryDelivery::default()
        };
        self.copies.lock().expect("copies").push_back(copy);
        Ok(())
    }

    async fn dead_letter(
        &self,
        message: &dyn Message,
        kind: &DeadLetterKind,
        error: &str,
        trace_parent: Option<&str>,
    ) -> Published {
        if self.fail {
            return Err(PublishError::Nacked);
        }
        let why = DeadLetter::of(message, kind, error, MEMORY_ORIGIN, trace_parent);
        self.published
            .lock()
            .expect("dead letters")
            .push(PublishedDeadLetter::new(message, why));
        Ok(())
    }
}
