//! `refund_intents` and `refund_control`, the one module every caller
//! reaches them through, with one row type ([`Intent`]): the ledger's tail
//! mints and settles intents ([`minting`], in the transaction that
//! records the fact that makes money owed); the refunder decides them by
//! its policy and the operators approve or cancel them ([`decide`]); the
//! refunder claims, sends and records them under a lease ([`send`]); the
//! kill switch and the gauges' figures are [`control`]'s. Every function
//! is one statement on the caller's connection, or a transaction the
//! caller holds.
//!
//! An intent is sent by one refunder at a time: claiming it sets a lease
//! (`lease_until`), and only an intent whose lease ran out is claimed
//! again — by the same worker after a retryable error, or by another after
//! a kill. The lease replaces a held lock, so it works the same behind a
//! transaction-mode pooler.

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

/// A refund intent as the refunder and operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Intent {
    pub id: String,
    pub order_id: i64,
    pub order_ref: String,
    pub provider: String,
    pub payment_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    pub refunded_minor: i64,
    pub state: String,
    /// The source (account) that took the payment: the one recorded, else
    /// the one whose delivery recorded the capture.
    pub source: Option<String>,
    /// The order reference the capture's delivery named (Cashfree's order
    /// id, which it refunds by; an order paid twice may have two).
    pub payment_order_ref: Option<String>,
    pub sent_minor: Option<i64>,
    /// The attempt being sent (1, then one more per re-approval after a
    /// refusal): with the id, it names the idempotency key.
    pub attempt_no: i32,
    /// The reason the attempt's request carries, fixed at its first send.
    pub sent_reason: Option<String>,
    /// A request of the attempt may have reached the gateway and no answer
    /// has said what became of it.
    pub in_doubt: bool,
    pub approved_by: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub approved_at: Option<OffsetDateTime>,
    pub attempts: i32,
    pub gateway_refund_id: Option<String>,
    pub gateway_code: Option<String>,
    pub gateway_message: Option<String>,
    pub held_because: Option<String>,
    pub trace_parent: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl Intent {
    /// What is still owed.
    pub fn outstanding(&self) -> i64 {
        self.amount_minor.saturating_sub(self.refunded_minor).max(0)
    }

    /// The attempt being sent (1 for a row that says less).
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.attempt_no).unwrap_or(1).max(1)
    }

    /// The attempt's idempotency key, before a gateway fits it to its rules.
    pub fn key(&self) -> String {
        oncehook_gateways::refund::attempt_key(&self.id, self.attempt())
    }
}

/// Reads [`Intent`]s: the columns, with the order's reference and the
/// source resolved (one place for the shape every read returns), then
/// `$tail` (the `WHERE` and `ORDER BY`) with its arguments; checked against
/// the schema at compile time like every other statement.
macro_rules! select_intents {
    ($tail:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Intent,
            r#"SELECT i.id, i.order_id, o.order_ref, i.provider, i.payment_id, i.amount_minor,
                    i.currency, i.reason, i.refunded_minor, i.state,
                    COALESCE(i.source, (
                        SELECT w.source FROM payments p
                        JOIN processed_webhooks w ON w.provider = p.provider AND w.event_id = p.event_id
                        WHERE p.provider = i.provider AND p.payment_id = i.payment_id
                          AND p.status = 'captured' LIMIT 1)) AS "source?",
                    (SELECT w.order_ref FROM payments p
                        JOIN processed_webhooks w ON w.provider = p.provider AND w.event_id = p.event_id
                        WHERE p.provider = i.provider AND p.payment_id = i.payment_id
                          AND p.status = 'captured' LIMIT 1) AS "payment_order_ref?",
                    i.sent_minor, i.attempt_no, i.sent_reason, i.in_doubt, i.approved_by, i.approved_at, i.attempts, i.gateway_refund_id,
                    i.gateway_code, i.gateway_message, i.held_because, i.trace_parent,
                    i.created_at, i.updated_at
             FROM refund_intents i JOIN orders o ON o.id = i.order_id "#
                + $tail
            $(, $arg)*
        )
    };
}

/// Intents, newest first: in `state` if given, at most `limit`.
pub async fn list(
    conn: &mut PgConnection,
    state: Option<&str>,
    limit: i64,
) -> Result<Vec<Intent>, sqlx::Error> {
    select_intents!(
        "WHERE ($1::text IS NULL OR i.state = $1) ORDER BY i.created_at DESC, i.id LIMIT $2",
        state,
        limit
    )
    .fetch_all(conn)
    .await
}

/// One intent by its id, or every intent of an order by the order's reference.
pub async fn find(conn: &mut PgConnection, id_or_order: &str) -> Result<Vec<Intent>, sqlx::Error> {
    // Both tests on `refund_intents`, so each can use its index.
    select_intents!(
        "WHERE i.id = $1 OR i.order_id = (SELECT id FROM orders WHERE order_ref = $1) ORDER BY i.id",
        id_or_order
    )
    .fetch_all(conn)
    .await
}

/// The intents waiting for a decision (`owed`), oldest first, at most
/// `limit`.
/// A page at a time: those after `after` (`created_at`, `id`), so a pass
/// reaches every one however many wait.
pub async fn owed(
    conn: &mut PgConnection,
    after: Option<(OffsetDateTime, String)>,
    limit: i64,
) -> Result<Vec<Intent>, sqlx::Error> {
    let (at, id) = after.unzip();
    select_intents!(
        "WHERE i.state = 'owed'
           AND ($1::timestamptz IS NULL OR (i.created_at, i.id) > ($1, $2::text))
         ORDER BY i.created_at, i.id LIMIT $3",
        at,
        id,
        limit
    )
    .fetch_all(conn)
    .await
}

pub mod control;
pub mod decide;
pub mod minting;
pub mod send;

pub use control::{Tally, oldest_open_secs, paused, set_paused, tally};
pub use decide::{
    BY_POLICY, POLICY_LOCK_KEY, approve, approved_by_policy_today, cancel, hold, lock_policy,
};
pub use send::{Failure, claim, claim_check, mark_failed, mark_sent, retry_later};
