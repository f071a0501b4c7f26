//! One envelope, one transaction: decode the envelope, parse the gateway
//! payload, claim the delivery in `processed_webhooks` (insert-first), apply
//! the effect, record the outcome, commit. An event the effect cannot link
//! to an order yet is parked in the same transaction (see `parking`).
//! Errors are classified for the consumer: permanent ones are dead-lettered,
//! transient ones retried.

use std::time::Instant;

use oncehook_common::Envelope;
use oncehook_common::db::is_transient;
use oncehook_gateways::{Gateway, NormalizedEvent};
use sqlx::PgPool;

use oncehook_common::store::{dedup as dedup_store, parking as parking_store};

use crate::dedup::{self, DeliveryKey};
use crate::effect::{Effect, EffectError, Outcome};

/// A message the worker understood.
#[derive(Debug)]
pub struct Decoded {
    pub envelope: Envelope,
    pub event: NormalizedEvent,
    /// The delivery's dedup identity (source, event id, body digest).
    pub key: DeliveryKey,
}

/// What processing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// Committed with this outcome.
    Done { outcome: Outcome, detail: String },
    /// Another copy of this delivery was processed already; only the sighting was recorded.
    Duplicate,
}

/// A message that will never succeed as is: dead-letter it with `kind`
/// (machine readable) and `message` (what failed, for which event).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    pub kind: &'static str,
    pub message: String,
}

/// Why processing failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Permanent(#[from] Rejection),
    /// The database failed in a way a retry may fix.
    #[error("transient database error: {0}")]
    Transient(sqlx::Error),
}

impl From<sqlx::Error> for ProcessError {
    fn from(err: sqlx::Error) -> Self {
        if is_transient(&err) {
            ProcessError::Transient(err)
        } else {
            ProcessError::Permanent(Rejection {
                kind: "database",
                message: format!("database rejected the effect: {err}"),
            })
        }
    }
}

/// Decodes a message body; `message_id` only names the message in errors.
pub fn decode(data: &[u8], message_id: &str) -> Result<Decoded, Rejection> {
    let envelope = Envelope::from_bytes(data).map_err(|e| Rejection {
        kind: "bad_envelope",
        message: format!("message {message_id}: {e}"),
    })?;
    let gateway: Gateway = envelope.gateway.parse().map_err(|e| Rejection {
        kind: "unknown_gateway",
        message: format!("message {message_id} from source {}: {e}", envelope.source),
    })?;
    let body = envelope.body().map_err(|e| Rejection {
        kind: "bad_envelope",
        message: format!("message {message_id}: {e}"),
    })?;
    let event =
        oncehook_gateways::parse(gateway, &envelope.headers, &body).map_err(|e| Rejection {
            kind: "unparseable",
            message: format!(
                "{gateway} delivery {message_id} (receipt {}) is authentic but not understood: {e}",
                envelope.receipt_id
            ),
        })?;
    let key = dedup::key(&envelope.source, &event.event_id, &body);
    Ok(Decoded {
        envelope,
        event,
        key,
    })
}

/// Runs dedup + effect in one transaction and commits.
pub async fn process<E: Effect>(
    pool: &PgPool,
    effect: &E,
    decoded: &Decoded,
) -> Result<Processed, ProcessError> {
    let started = Instant::now();
    let mut tx = pool.begin().await?;
    let event = &decoded.event;
    let claim = dedup_store::Claim {
        key: &decoded.key,
        provider: event.provider.as_str(),
        event_type: &event.event_type,
        order_ref: event.order_ref.as_deref(),
        payment_id: event.payment_id.as_deref(),
        receipt_id: decoded.envelope.receipt_id,
        received_at: decoded.envelope.received_at,
    };
    if !dedup_store::claim(&mut tx, claim).await? {
        tx.commit().await?;
        return Ok(Processed::Duplicate);
    }
    let applied = match effect.apply(&mut tx, &decoded.event).await {
        Ok(applied) => applied,
        Err(EffectError::Permanent { kind, message }) => {
            // Dropping the transaction rolls back the claim too, so a replay
            // after the cause is fixed is processed, not absorbed.
            tx.rollback().await?;
            return Err(Rejection { kind, message }.into());
        }
        Err(EffectError::Database(err)) => return Err(err.into()),
    };
    if applied.outcome == Outcome::Parked {
        let parked = parking_store::Parked {
            key: decoded.key.clone(),
            provider: event.provider.as_str().to_owned(),
            payment_id: event.payment_id.clone().unwrap_or_default(),
            routing_key: decoded.envelope.routing_key(),
            envelope: decoded.envelope.to_bytes(),
        };
        parking_store::park(&mut tx, &parked).await?;
    }
    dedup_store::finish(
        &mut tx,
        &decoded.key,
        applied.outcome.as_str(),
        &applied.detail,
    )
    .await?;
    tx.commit().await?;
    metrics::histogram!("oncehook_worker_transaction_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    Ok(Processed::Done {
        outcome: applied.outcome,
        detail: applied.detail,
    })
}
