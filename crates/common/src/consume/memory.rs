//! The queue seam in memory: a delivery that records how it was settled and
//! a dead-letter sink that records what it was given (or refuses it), so the
//! consume loop's and the handlers' decisions are unit-tested without a
//! broker.

use std::sync::{Arc, Mutex};

use lapin::BasicProperties;

use super::queue::{DeadLetterSink, Delivery, Message, Published};
use crate::amqp::PublishError;
use crate::dead_letter::{DeadLetter, DeadLetterKind};

/// How a [`MemoryDelivery`] was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Acked,
    Requeued,
}

/// A delivery held in memory. Clones share the settle record.
#[derive(Debug, Clone, Default)]
pub struct MemoryDelivery {
    body: Vec<u8>,
    properties: BasicProperties,
    routing_key: String,
    delivery_count: u32,
    settled: Arc<Mutex<Vec<Settled>>>,
}

impl MemoryDelivery {
    /// A first delivery of `body` with no properties.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        MemoryDelivery {
            body: body.into(),
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

    #[must_use]
    pub fn with_delivery_count(mut self, count: u32) -> Self {
        self.delivery_count = count;
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
}

impl Message for MemoryDelivery {
    fn body(&self) -> &[u8] {
        &self.body
    }
    fn properties(&self) -> &BasicProperties {
        &self.properties
    }
    fn routing_key(&self) -> &str {
        &self.routing_key
    }
    fn delivery_count(&self) -> u32 {
        self.delivery_count
    }
}

impl Delivery for MemoryDelivery {
    async fn ack(&self) -> bool {
        self.record(Settled::Acked)
    }
    async fn requeue(&self) -> bool {
        self.record(Settled::Requeued)
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

/// A dead-letter sink in memory; [`MemoryDeadLetters::failing`] refuses
/// every publish (as a broker that nacks or times out would).
#[derive(Debug, Clone, Default)]
pub struct MemoryDeadLetters {
    published: Arc<Mutex<Vec<PublishedDeadLetter>>>,
    fail: bool,
}

impl MemoryDeadLetters {
    pub fn failing() -> Self {
        MemoryDeadLetters {
            fail: true,
            ..Self::default()
        }
    }

    /// Every dead letter accepted so far.
    pub fn published(&self) -> Vec<PublishedDeadLetter> {
        self.published.lock().expect("dead letters").clone()
    }
}

impl DeadLetterSink for MemoryDeadLetters {
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
