//! One envelope, one transaction: decode the envelope (with the event ingest
//! parsed; an older ingest's envelope has its payload parsed here), claim the
//! delivery in `processed_webhooks` (insert-first; a copy under the same
//! event id, or of the same signed body under another, is a duplicate),
//! apply the effect, record the outcome, commit. An event the effect cannot link
//! to an order yet is parked in the same transaction (see `parking`).
//! Errors are classified for the consumer: permanent ones are dead-lettered,
//! transient ones retried.

use std::time::Instant;

use oncehook_common::Envelope;
use oncehook_common::db::is_transient;
use oncehook_common::envelope::EnvelopeError;
use oncehook_gateways::NormalizedEvent;
use sqlx::{PgConnection, PgPool};

use oncehook_common::store::dedup::Claimed;
use oncehook_common::store::{dedup as dedup_store, parking as parking_store};

use crate::dedup::{self, DeliveryKey};
use crate::effect::{Applied, Effect, EffectError, Outcome};

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
    /// Another copy of this delivery was processed already; only the
    /// sighting was recorded. `same_body_as` is the event id the signed body
    /// was first delivered under, when this copy came under another one.
    Duplicate { same_body_as: Option<String> },
}

impl Processed {
    /// The answer for a claim that found the delivery claimed already
    /// (`None` for a fresh claim: the effect is still to be applied).
    pub fn duplicate(claimed: Claimed) -> Option<Processed> {
        match claimed {
            Claimed::Fresh => None,
            Claimed::Duplicate => Some(Processed::Duplicate { same_body_as: None }),
            Claimed::SameBodyAs(first) => Some(Processed::Duplicate {
                same_body_as: Some(first),
            }),
        }
    }
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

impl From<EffectError> for ProcessError {
    fn from(err: EffectError) -> Self {
        match err {
            EffectError::Permanent { kind, message } => Rejection { kind, message }.into(),
            EffectError::Database(err) => err.into(),
        }
    }
}

impl From<sqlx::Error> for ProcessError {
    fn from(err: sqlx::Error) -> Self {
        // A claim that lost a race with a copy of itself succeeds when made
        // again (see `dedup_store::lost_claim_race`).
        if is_transient(&err) || dedup_store::lost_claim_race(&err) {
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
/// The event is the one ingest parsed and put in the envelope; only an
/// envelope without one (an older ingest's) has its body parsed here.
pub fn decode(data: &[u8], message_id: &str) -> Result<Decoded, Rejection> {
    let bad_envelope = |e: &dyn std::fmt::Display| Rejection {
        kind: "bad_envelope",
        message: format!("message {message_id}: {e}"),
    };
    let envelope = Envelope::from_bytes(data).map_err(|e| match e {
        EnvelopeError::UnknownGateway {
            source_name,
            gateway,
        } => Rejection {
            kind: "unknown_gateway",
            message: format!("message {message_id} from source {source_name}: {gateway}"),
        },
        other => bad_envelope(&other),
    })?;
    let gateway = envelope.gateway;
    let body = envelope.body().map_err(|e| bad_envelope(&e))?;
    let event = match &envelope.event {
        Some(event) if event.provider != gateway => {
            return Err(bad_envelope(&format_args!(
                "its {gateway} envelope carries a {} event",
                event.provider
            )));
        }
        Some(event) => event.clone(),
        None => {
            oncehook_gateways::parse(gateway, &envelope.headers, &body).map_err(|e| Rejection {
                kind: "unparseable",
                message: format!(
                    "{gateway} delivery {message_id} (receipt {}) is authentic but not understood: {e}",
                    envelope.receipt_id
                ),
            })?
        }
    };
    let key = dedup::key(&envelope.source, &event.event_id, &body);
    Ok(Decoded {
        envelope,
        event,
        key,
    })
}

/// The delivery's claim row (what `processed_webhooks` records about it).
pub fn claim_of(decoded: &Decoded) -> dedup_store::Claim<'_> {
    let event = &decoded.event;
    dedup_store::Claim {
        key: &decoded.key,
        provider: event.provider.as_str(),
        event_type: &event.event_type,
        order_ref: event.order_ref.as_deref(),
        payment_id: event.payment_id.as_deref(),
        receipt_id: decoded.envelope.receipt_id,
        received_at: decoded.envelope.received_at,
    }
}

/// Runs dedup + effect in one transaction and commits.
pub async fn process<E: Effect>(
    pool: &PgPool,
    effect: &E,
    decoded: &Decoded,
) -> Result<Processed, ProcessError> {
    let started = Instant::now();
    let mut tx = pool.begin().await?;
    let claimed = match dedup_store::claim(&mut tx, claim_of(decoded)).await {
        Ok(claimed) => claimed,
        Err(err) if dedup_store::lost_claim_race(&err) => {
            // A copy under the same event id committed first: made again,
            // in a new transaction, the claim conflicts with that copy like
            // any duplicate.
            tx.rollback().await?;
            tx = pool.begin().await?;
            dedup_store::claim(&mut tx, claim_of(decoded)).await?
        }
        Err(err) => return Err(err.into()),
    };
    if let Some(duplicate) = Processed::duplicate(claimed) {
        tx.commit().await?;
        return Ok(duplicate);
    }
    let applied = match apply_claimed(&mut tx, effect, decoded, None).await {
        Ok(applied) => applied,
        Err(err @ ProcessError::Permanent(_)) => {
            // Rolling back undoes the claim too, so a replay after the
            // cause is fixed is processed, not absorbed.
            tx.rollback().await?;
            return Err(err);
        }
        Err(err) => return Err(err),
    };
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

/// Applies the effect of a delivery claimed in `conn`'s transaction and
/// parks it if its order is not known yet; the outcome is not recorded
/// (the caller does, alone or with a batch's). Inside a batch, `deferred`
/// collects what the effect leaves for the end of the batch.
pub async fn apply_claimed<E: Effect>(
    conn: &mut PgConnection,
    effect: &E,
    decoded: &Decoded,
    deferred: Option<&mut E::Deferred>,
) -> Result<Applied, ProcessError> {
    let event = &decoded.event;
    let applied = match deferred {
        Some(deferred) => effect.apply_batched(conn, event, deferred).await,
        None => effect.apply(conn, event).await,
    };
    let applied = applied.map_err(ProcessError::from)?;
    if applied.outcome == Outcome::Parked {
        let parked = parking_store::Parked {
            key: decoded.key.clone(),
            provider: event.provider.as_str().to_owned(),
            payment_id: event.payment_id.clone().unwrap_or_default(),
            routing_key: decoded.envelope.routing_key(),
            envelope: decoded.envelope.to_bytes(),
        };
        parking_store::park(conn, &parked).await?;
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use oncehook_common::envelope::ENVELOPE_VERSION;
    use oncehook_gateways::Gateway;
    use oncehook_gateways::sample::{self, SampleSpec};
    use time::OffsetDateTime;
    use uuid::Uuid;

    use super::*;

    fn spec() -> SampleSpec {
        SampleSpec {
            order_ref: "order_1".into(),
            payment_id: "pay_1".into(),
            event_id: "evt_1".into(),
            amount_minor: 50_000,
            currency: "INR".into(),
            email: "a@example.com".into(),
            timestamp: 1_717_740_003,
            merchant_key: None,
        }
    }

    /// An envelope as ingest builds it for a Razorpay `captured` sample.
    fn envelope(parsed_by_ingest: bool) -> Envelope {
        let d = sample::build(Gateway::Razorpay, "captured", &spec(), "s").expect("sample");
        let event = oncehook_gateways::parse(Gateway::Razorpay, &d.headers, &d.body).ok();
        Envelope {
            version: ENVELOPE_VERSION,
            receipt_id: Uuid::new_v4(),
            source: "rzp".into(),
            gateway: Gateway::Razorpay,
            event_id: None,
            event_type: None,
            received_at: OffsetDateTime::now_utc(),
            verified_at: OffsetDateTime::now_utc(),
            signed_at: None,
            headers: d.headers,
            body_b64: Envelope::encode_body(&d.body),
            event: None,
        }
        .with_event(event.filter(|_| parsed_by_ingest))
    }

    #[test]
    fn the_event_ingest_parsed_is_the_one_used() {
        let mut env = envelope(true);
        let mut event = env.event.clone().expect("parsed");
        // Were the worker to parse the body again, it would not see this.
        event.order_ref = Some("as ingest read it".into());
        env.event = Some(event.clone());
        let decoded = decode(&env.to_bytes(), "m").expect("decoded");
        assert_eq!(decoded.event, event);
        assert_eq!(decoded.key.event_id, "evt_1");
    }

    #[test]
    fn without_an_event_the_body_is_parsed_or_dead_lettered() {
        let env = envelope(false);
        let decoded = decode(&env.to_bytes(), "m").expect("decoded");
        assert_eq!(decoded.event.event_id, "evt_1");
        assert_eq!(decoded.event.order_ref.as_deref(), Some("order_1"));

        let mut garbled = envelope(false);
        garbled.body_b64 = Envelope::encode_body(b"not json");
        let rejection = decode(&garbled.to_bytes(), "m").expect_err("unparseable");
        assert_eq!(rejection.kind, "unparseable");
    }

    #[test]
    fn unknown_gateways_and_mismatched_events_are_dead_lettered() {
        let text = String::from_utf8(envelope(true).to_bytes()).expect("utf-8");
        let unknown = text.replace(r#""gateway":"razorpay""#, r#""gateway":"paypal""#);
        let rejection = decode(unknown.as_bytes(), "m").expect_err("unknown gateway");
        assert_eq!(rejection.kind, "unknown_gateway");
        assert!(rejection.message.contains("from source rzp"), "{rejection}");
        assert!(rejection.message.contains("paypal"), "{rejection}");

        let mut mismatched = envelope(true);
        mismatched.gateway = Gateway::Stripe;
        let rejection = decode(&mismatched.to_bytes(), "m").expect_err("mismatch");
        assert_eq!(rejection.kind, "bad_envelope");
    }
}
