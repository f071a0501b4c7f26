//! The notifier's handler for its queue `P.notify` (on the common consume
//! loop): an order event arrives from `P.order-events`, and one delivery
//! row is made for every configured endpoint of its tenant that takes its
//! type — then
//! the message is acked and the endpoints' dispatchers are woken. Making
//! the rows is idempotent, so a redelivered or doubly published event
//! makes nothing twice. The HTTP deliveries themselves run from the rows
//! (`dispatch`), on their own schedule, never holding a message.

use std::sync::Arc;

use oncehook_common::consume::{Handler, Message, Verdict};
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_common::store::notify as store;
use oncehook_common::{db, otel};
use serde::Deserialize;
use tracing::Instrument as _;

use crate::Notifier;

/// What the fan-out reads of an event (the rest is for the shop).
#[derive(Debug, Deserialize)]
struct EventHead {
    id: String,
    #[serde(rename = "type")]
    kind: String,
}

/// The handler, over the notifier's shared state.
pub struct FanOut(pub Arc<Notifier>);

impl Handler for FanOut {
    async fn handle(&self, message: &dyn Message) -> Verdict {
        let span = otel::consumer_span(&self.0.topology.notify(), message);
        self.fan_out(message).instrument(span).await
    }

    fn dead_lettered(&self, message: &dyn Message, kind: &str, error: &str) {
        tracing::error!(message_id = %message.message_id(), kind, error, "order event dead-lettered");
    }
}

impl FanOut {
    async fn fan_out(&self, message: &dyn Message) -> Verdict {
        let head: EventHead = match serde_json::from_slice(message.body()) {
            Ok(head) => head,
            Err(e) => {
                return Verdict::dead_letter(
                    DeadLetterKind::BadMessage,
                    format!(
                        "order event message {} is not readable: {e}",
                        message.message_id()
                    ),
                );
            }
        };
        let n = &self.0;
        let endpoints: Vec<(String, String)> = n
            .settings
            .notify
            .endpoints
            .iter()
            .filter(|e| e.wants(&head.kind))
            .map(|e| (e.name.clone(), e.tenant.to_string()))
            .collect();
        let trace_parent = otel::current_traceparent();
        let made = db::Hold::new(&n.db, &n.shutdown)
            .retry(
                || store::fan_out(&n.db, &head.id, &endpoints, trace_parent.as_deref()),
                |err| tracing::warn!(event_id = %head.id, %err, "could not record the order event's deliveries; retrying"),
            )
            .await;
        let Some(made) = made else {
            return Verdict::Retry;
        };
        tracing::debug!(event_id = %head.id, event_type = %head.kind, endpoints = endpoints.len(), made, "order event fanned out");
        let names: Vec<String> = endpoints.into_iter().map(|(name, _)| name).collect();
        n.wake(&names);
        Verdict::Ack
    }
}
