//! The message the outbox relay publishes to `P.emails` and the mailer
//! consumes: just the outbox row's id. The row (in Postgres) is the truth;
//! the message only says "this one is ready".

use lapin::BasicProperties;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::amqp::short;

/// "Send outbox row `outbox_id`."
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailMessage {
    pub outbox_id: Uuid,
}

impl EmailMessage {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// Persistent, `message_id` = the outbox id.
    pub fn properties(&self) -> BasicProperties {
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(short(&format!("email:{}", self.outbox_id)))
    }
}
